"""Labels and splits the readers share: seeded per-class and multi-label splits, class ids renumbered from
values, and node labels from a label matrix (class ids, one-hot or multi-label)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

NPZ_TRAIN_PER_CLASS, NPZ_VAL_PER_CLASS = 20, 30


def per_class_split(labels: np.ndarray, seed: int = 0, train_per_class: int = NPZ_TRAIN_PER_CLASS,
                    val_per_class: int = NPZ_VAL_PER_CLASS) -> dict[str, np.ndarray]:
    """Seeded per-class split (as for gnn-benchmark data): within each class, in a random order drawn
    from ``seed``, the first ``train_per_class`` nodes train, the next ``val_per_class`` validate and the
    rest test (a small class fills train first, then val). Unlabelled nodes (``-1``) are in no mask.

    Returns:
        ``{"train_mask", "val_mask", "test_mask"}`` as bool arrays.
    """
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(n), labels))
    sorted_labels = labels[order]
    starts = np.searchsorted(sorted_labels, sorted_labels, side="left")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts
    labelled = labels >= 0
    return {"train_mask": labelled & (rank < train_per_class),
            "val_mask": labelled & (rank >= train_per_class) & (rank < train_per_class + val_per_class),
            "test_mask": labelled & (rank >= train_per_class + val_per_class)}


#: the split training gives a multi-label graph that has none: fractions of its labelled nodes (seeded order)
MULTILABEL_SPLIT = (0.6, 0.2)


def multilabel_split(labels, seed: int = 0, fractions: tuple[float, float] = MULTILABEL_SPLIT) -> dict[str, np.ndarray]:
    """Seeded random split of a multi-label graph's labelled nodes (those with at least one label): in a random
    order drawn from ``seed``, the first ``fractions[0]`` train, the next ``fractions[1]`` validate, the rest test
    (the readers give multi-label graphs no split; training uses this one).

    Returns:
        ``{"train_mask", "val_mask", "test_mask"}`` as bool arrays.
    """
    labelled = np.flatnonzero(np.asarray(labels).reshape(len(labels), -1).any(axis=1))
    order = labelled[np.random.default_rng(seed).permutation(labelled.size)]
    n_train = round(fractions[0] * labelled.size)
    n_val = round(fractions[1] * labelled.size)
    masks = {name: np.zeros(len(labels), dtype=bool) for name in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][order[:n_train]] = True
    masks["val_mask"][order[n_train: n_train + n_val]] = True
    masks["test_mask"][order[n_train + n_val:]] = True
    return masks


CHOOSE_COLUMN = "; choose one column of class ids with column=K"


def label_matrix(matrix, n: int, where: str, column: int | None = None,
                  choose: str = CHOOSE_COLUMN) -> tuple[np.ndarray, int, list[str] | None]:
    """Node labels from a label matrix (dense or sparse): ``(y, num_classes, class_names or None)``.

    One column (or one row of ``n``, or column ``column`` of a wider matrix) holds class ids: integral values,
    renumbered ``0..C-1`` in increasing order (the values in ``class_names``), NaN = unlabelled. A wider 0/1
    matrix with at most one 1 per row is one-hot (a row of zeros = unlabelled, -1); one with several 1s in some
    row is multi-label and returned as a uint8 ``[n, C]`` matrix. ``choose`` ends the error for a wider matrix
    that is none of these.
    """
    m = matrix.tocsr() if sp.issparse(matrix) else np.asarray(matrix)
    if m.ndim == 1:
        m = m.reshape(-1, 1)
    if m.ndim != 2:
        raise ValueError(f"{where} has shape {m.shape}; expected a vector or matrix with one row per node ({n})")
    if m.shape[0] == 1 and m.shape[1] == n != 1:
        m = m.T.tocsr() if sp.issparse(m) else m.T
    if m.shape[0] != n:
        raise ValueError(f"{where} has shape {m.shape}; expected one row per node ({n})")
    if m.dtype.kind not in "biuf":
        raise ValueError(f"{where} holds {m.dtype} values; expected numbers (class ids or a 0/1 matrix)")
    if column is not None:
        if not 0 <= column < m.shape[1]:
            raise ValueError(f"{where} has {m.shape[1]} columns; column={column} is not one of 0..{m.shape[1] - 1}")
        m = m[:, [column]]
    if m.shape[1] == 1:
        values = (m.toarray() if sp.issparse(m) else m)[:, 0].astype(np.float64)
        labelled = ~np.isnan(values)
        if not np.array_equal(values[labelled], np.round(values[labelled])):
            raise ValueError(f"{where}: class ids must be integers (or NaN for unlabelled)")
        y = np.full(n, -1, dtype=np.int64)
        classes, names = class_ids(values[labelled].astype(np.int64))
        y[labelled] = classes
        return y, len(names), names
    if sp.issparse(m):
        m = m.copy()
        m.eliminate_zeros()
        binary, per_row = bool((m.data == 1).all()), np.diff(m.indptr)
    else:
        binary, per_row = bool(np.isin(m, (0, 1)).all()), np.count_nonzero(m, axis=1)
    if not binary:
        raise ValueError(f"{where} is an [{n}, {m.shape[1]}] matrix that is neither one-hot nor 0/1 multi-label"
                         f"{choose}")
    if per_row.max(initial=0) <= 1:
        y = np.full(n, -1, dtype=np.int64)
        if sp.issparse(m):
            y[np.repeat(np.arange(n), per_row)] = m.indices
        else:
            y[per_row == 1] = np.argmax(m[per_row == 1], axis=1)
        return y, int(m.shape[1]), None
    return (m.astype(np.uint8).toarray() if sp.issparse(m) else m.astype(np.uint8)), int(m.shape[1]), None


def class_ids(values: np.ndarray | list[str]) -> tuple[np.ndarray, list[str]]:
    """Class index per entry (classes in sorted order; numeric strings sort as numbers) and the class names."""
    names, inverse = np.unique(np.asarray(values), return_inverse=True)
    if names.dtype.kind in "US" and all(is_int(v) for v in names):
        by_value = np.argsort([int(v) for v in names], kind="stable")
        rank = np.empty_like(by_value)
        rank[by_value] = np.arange(by_value.size)
        names, inverse = names[by_value], rank[inverse]
    return inverse.astype(np.int64).reshape(-1), [str(v) for v in names]


def is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
