"""The score of a trivial predictor that ignores the graph and the features, for the learning-health check: a run
whose best validation score is not above it did not learn (:func:`graphscale.run.report_warnings`).

* Class ids: always the most frequent training class (accuracy).
* Multi-label (0/1 matrix): the label-frequency predictor: the ``k`` most frequent training labels for every
  vertex, ``k`` chosen on the training split for the best micro-F1 (``k = 1``: always the most frequent label),
  scored by micro-F1.
"""

from __future__ import annotations

import torch

SPLITS = ("train", "val", "test")


def _micro_f1(tp: float, predicted: float, positive: float) -> float:
    denominator = predicted + positive  # 2 tp + fp + fn
    return 2 * tp / denominator if denominator else 0.0


def trivial_scores(labels: torch.Tensor, masks: dict[str, torch.Tensor]) -> dict | None:
    """``{"predictor": what it predicts, "val_acc": ..., "test_acc": ...}`` (NaN for an empty split); ``None``
    without training labels."""
    train = masks["train"]
    if not bool(train.any()):
        return None
    if labels.dim() == 2:
        counts = {s: labels[masks[s]].to(torch.float64).sum(0) for s in SPLITS}
        sizes = {s: int(masks[s].sum()) for s in SPLITS}
        order = torch.argsort(counts["train"], descending=True, stable=True)

        def score(split: str, k: int) -> float:
            if not sizes[split]:
                return float("nan")
            tp = float(counts[split][order[:k]].sum())
            return _micro_f1(tp, sizes[split] * k, float(counts[split].sum()))

        k = max(range(1, labels.shape[1] + 1), key=lambda k: score("train", k))
        return {"predictor": f"the {k} most frequent training label(s) for every vertex",
                "val_acc": score("val", k), "test_acc": score("test", k)}
    y = labels[train]
    top = int(torch.bincount(y[y >= 0]).argmax())
    out = {"predictor": f"always the most frequent training class ({top})"}
    for split in ("val", "test"):
        mask = masks[split]
        out[f"{split}_acc"] = float((labels[mask] == top).double().mean()) if bool(mask.any()) else float("nan")
    return out
