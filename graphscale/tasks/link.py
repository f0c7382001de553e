"""Link prediction as a strategy runs it: the model's output rows are vertex embeddings, the decoder (a submodule
of the model, ``model.link_decoder``, so that the optimiser, the gradient all-reduce, checkpoints and the best
epoch's state carry it) scores pairs, the loss is binary cross-entropy over the training positives and one keyed
negative each, normalised by the global pair count ``2 P``.

Evaluation scores each split's positives against their fixed candidates (:func:`graphscale.tasks.negatives.eval_tails`)
and reports, per split, ``{split}_auc`` (also under ``{split}_acc``, the run's headline score: the report's
``metric`` is ``auc``), ``{split}_hits@K`` for every ``--hits-k``, ``{split}_mrr`` and ``{split}_loss`` (the mean BCE
over the positives and their first candidates). The training split, evaluated every epoch over the most pairs, is
scored against its first candidate only: its AUC, Hits@K and loss, no MRR. A split given with the dataset
(:func:`graphscale.tasks.split.given_split`) is scored against its own negatives: shared pairs (AUC, Hits@K, no MRR) or
each positive's candidate tails.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from graphscale.tasks.decoders import build_decoder
from graphscale.tasks.metrics import auc, hits_at_k, reciprocal_ranks
from graphscale.tasks.negatives import EVAL_CANDIDATES, eval_tails, train_tails
from graphscale.tasks.pair_scores import table_scores
from graphscale.tasks.split import SPLIT_NAMES, LinkSplit

#: positive pairs scored against their candidates at a time in evaluation (bounds the ``[rows, C, d]`` gather)
EVAL_ROWS = 512
#: positive pairs evaluated at a time (:meth:`LinkTask.split_summary`: bounds their candidates ``[rows, C]``, the
#: candidates' scores and the endpoints' gathers), a multiple of :data:`EVAL_ROWS`
EVAL_PAIRS = 16 * EVAL_ROWS


def output_width(config, num_classes: int | None) -> int | None:
    """The model's output width for ``config``'s task: the classes for ``node``; for ``link`` the embedding width
    ``--hidden`` of a graphscale model, ``None`` (the model's own) for a user's model."""
    from graphscale.config import is_user_model

    if config.task != "link":
        return num_classes
    return None if is_user_model(config.model) else config.model.hidden


def embedding_width(model: torch.nn.Module, config) -> int:
    """The width of ``model``'s embeddings under ``config`` (``--task link``): the model's output width, else
    ``--hidden``."""
    return getattr(model, "out_width", None) or config.model.hidden


def attach_decoder(model: torch.nn.Module, config) -> torch.nn.Module:
    """Add ``config``'s decoder to ``model`` as ``model.link_decoder`` (``--task link``; nothing otherwise), sized
    to the model's output width, in its dtype and device."""
    if config.task != "link":
        return model
    width = embedding_width(model, config)
    param = next(model.parameters())
    model.link_decoder = build_decoder(config.decoder, width, config.seed, param.dtype).to(param.device)
    return model


def decoder_from_state(name: str, state: dict, seed: int = 0) -> torch.nn.Module:
    """The decoder ``name`` shaped for a model state dict's ``link_decoder.*`` entries (their width and dtype; a
    ``dot`` decoder has none), for those entries to load into."""
    saved = [v for k, v in state.items() if k.startswith("link_decoder.")]
    width = saved[0].shape[-1] if saved else 1
    return build_decoder(name, width, seed, saved[0].dtype if saved else torch.float32)


class LinkTask:
    """The pairs, loss and metrics of link prediction on ``split`` (module docstring).

    Args:
        split: the edge split.
        decoder: the model's decoder.
        seed: the run's seed (the negatives' key).
        hits_k: the K of the reported Hits@K.
        device: where the pairs live.
    """

    def __init__(self, split: LinkSplit, decoder: torch.nn.Module, seed: int, hits_k, device) -> None:
        self.split, self.decoder, self.seed, self.hits_k = split, decoder, seed, list(hits_k)
        self.num_nodes = split.num_nodes
        self.ids = {name: split.ids(name).to(device) for name in SPLIT_NAMES}
        self.pairs = split.pairs.to(device)
        self.normaliser = 2 * self.ids["train"].numel()
        self.neg_tails = {name: tails.to(device) for name, tails in split.neg_tails.items()}  # a given split's
        self.neg_pairs = {name: pairs.to(device) for name, pairs in split.neg_pairs.items()}  # a given split's

    def train_pairs(self, epoch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(src [2P], dst [2P], label [2P])``: epoch ``epoch``'s training positives, then their keyed negatives."""
        ids = self.ids["train"]
        u, v = self.pairs[0, ids], self.pairs[1, ids]
        t = train_tails(ids, self.num_nodes, self.seed, epoch)
        label = torch.cat([torch.ones(ids.numel()), torch.zeros(ids.numel())])
        return torch.cat([u, u]), torch.cat([v, t]), label.to(u.device)

    def loss_sum(self, z_src: torch.Tensor, z_dst: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """The summed BCE of the pairs with embeddings ``z_src``, ``z_dst`` and 0/1 ``label`` (divide by
        :attr:`normaliser`)."""
        return pair_loss_sum(self.decoder, z_src, z_dst, label)

    def table_loss_sum(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                       label: torch.Tensor) -> torch.Tensor:
        """:meth:`loss_sum` of the pairs ``(src, dst)`` of rows of ``z``, scored in chunks
        (:func:`table_loss_sum`)."""
        return table_loss_sum(self.decoder, z, src, z, dst, label)

    def candidates(self, split: str, start: int, stop: int) -> torch.Tensor:
        """``[B, C]``: the fixed evaluation candidates of ``split``'s positives ``start:stop`` (in edge-id order),
        drawn for those positives only (:func:`~graphscale.tasks.negatives.eval_tails`: the training split's first
        candidate only), or a given split's own candidate tails."""
        if split in self.neg_tails:
            return self.neg_tails[split][start:stop]
        count = 1 if split == "train" else EVAL_CANDIDATES
        return eval_tails(self.ids[split][start:stop], self.num_nodes, self.seed, count=count)

    def split_summary(self, z: torch.Tensor, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:func:`score_summary` of ``split``'s pairs from the embeddings ``z`` of every vertex, computed
        :data:`EVAL_PAIRS` positives at a time: a block's rows gathered, its candidates drawn and scored, its scores
        reduced to the per-pair summary and dropped, so that neither the ``[P, C]`` candidates nor their scores nor
        the ``[P, d]`` gathers exist at once. A given split's shared negative pairs are scored the same way."""
        ids, parts = self.ids[split], []
        for start in range(0, max(ids.numel(), 1), EVAL_PAIRS):
            stop = start + EVAL_PAIRS
            block = ids[start:stop]
            z_u = z[self.pairs[0, block]]
            pos = self.decoder(z_u, z[self.pairs[1, block]])
            if split in self.neg_pairs:
                parts.append((pos,))
            else:
                parts.append(score_summary(pos, candidate_scores(self.decoder, z_u, z,
                                                                 self.candidates(split, start, stop))))
        if split not in self.neg_pairs:
            return tuple(None if part[0] is None else torch.cat(part) for part in zip(*parts))
        a, b = self.neg_pairs[split]
        shared = [self.decoder(z[a[s:s + EVAL_PAIRS]], z[b[s:s + EVAL_PAIRS]])
                  for s in range(0, max(a.numel(), 1), EVAL_PAIRS)]
        return torch.cat([p for (p,) in parts]), torch.cat(shared), None

    @torch.no_grad()
    def evaluate(self, z: torch.Tensor) -> dict[str, float]:
        """Every split's metrics (module docstring) from the embeddings ``z [N, d]`` of every vertex, each split
        scored and summarised in blocks (:meth:`split_summary`)."""
        return summary_metrics({split: self.split_summary(z, split) for split in SPLIT_NAMES}, self.hits_k)


def pair_loss_sum(decoder: torch.nn.Module, z_src: torch.Tensor, z_dst: torch.Tensor,
                  label: torch.Tensor) -> torch.Tensor:
    """The summed BCE of the pairs with embeddings ``z_src``, ``z_dst`` and 0/1 ``label`` under ``decoder``."""
    scores = decoder(z_src, z_dst)
    return F.binary_cross_entropy_with_logits(scores, label.to(scores.dtype), reduction="sum")


def table_loss_sum(decoder: torch.nn.Module, z_src: torch.Tensor, src: torch.Tensor, z_dst: torch.Tensor,
                   dst: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """:func:`pair_loss_sum` of the pairs ``(z_src[src], z_dst[dst])``, their rows gathered in chunks rather than
    all at once (:func:`graphscale.tasks.pair_scores.table_scores`)."""
    scores = table_scores(decoder, z_src, src, z_dst, dst)
    return F.binary_cross_entropy_with_logits(scores, label.to(scores.dtype), reduction="sum")


def candidate_scores(decoder: torch.nn.Module, z_src: torch.Tensor, table: torch.Tensor,
                     candidates: torch.Tensor) -> torch.Tensor:
    """``[P, C]``: the scores of sources ``z_src [P, d]`` against their candidates, rows ``candidates [P, C]`` of
    ``table``, :data:`EVAL_ROWS` sources at a time."""
    negs = [decoder(z_src[start:start + EVAL_ROWS][:, None, :], table[candidates[start:start + EVAL_ROWS]])
            for start in range(0, candidates.shape[0], EVAL_ROWS)]
    return torch.cat(negs) if negs else z_src.new_zeros((0, candidates.shape[1]))


def score_summary(pos: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """What the metrics need of a split's scores ``pos [P]``, ``neg [P, C]`` (or a given split's shared ``[Q, 1]``):
    ``(pos, shared, reciprocal ranks)``, the positives' scores, the shared negatives' (every positive's first
    candidate, or the given pairs) and each positive's reciprocal rank among its candidates (float64 ``[P]``;
    ``None`` with one candidate: no MRR). Every part is per positive, or per shared pair, so a partitioned run
    gathers these instead of its ``[P, C]`` candidate scores."""
    pos, neg = pos.detach(), neg.detach()
    shared = neg[:, 0] if neg.numel() else neg.reshape(-1)
    ranks = reciprocal_ranks(pos, neg) if neg.dim() == 2 and neg.shape[1] > 1 else None
    return pos, shared, ranks


def summary_metrics(summaries: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
                    hits_k) -> dict[str, float]:
    """The metrics of every split from its :func:`score_summary` (module docstring)."""
    out = {}
    for split, (pos, shared, ranks) in summaries.items():
        pos, shared = pos.double(), shared.double()
        score = auc(pos, shared)
        out[f"{split}_acc"] = out[f"{split}_auc"] = score
        for k in hits_k:
            out[f"{split}_hits@{k}"] = hits_at_k(pos, shared, k)
        if ranks is not None:
            out[f"{split}_mrr"] = float(ranks.mean()) if ranks.numel() else float("nan")
        bce = (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
               + F.binary_cross_entropy_with_logits(shared, torch.zeros_like(shared), reduction="sum"))
        out[f"{split}_loss"] = float(bce) / (pos.numel() + shared.numel()) if pos.numel() else float("nan")
    return out


def link_metrics(scores: dict[str, tuple[torch.Tensor, torch.Tensor]], hits_k) -> dict[str, float]:
    """The metrics of every split from its ``(pos [P], neg [P, C])`` scores (module docstring)."""
    return summary_metrics({split: score_summary(pos, neg) for split, (pos, neg) in scores.items()}, hits_k)
