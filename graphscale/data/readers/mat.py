"""The MATLAB ``.mat`` graph reader (BlogCatalog, Flickr, Facebook100, ...; v4 to v7 through scipy)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphscale.data.graph import Graph
from graphscale.data.readers.common import binary_kind, build_graph, file_head, require, wrong_kind
from graphscale.data.readers.labels import label_matrix, per_class_split

# Variable names the common .mat graphs use: BlogCatalog / Flickr / PPI / POS (network, group), Facebook100
# (A, local_info), and other spellings seen in the wild.
MAT_ADJACENCY_NAMES = ("network", "A", "adj", "adjacency", "net", "G", "W")
MAT_LABEL_NAMES = ("group", "labels", "label", "Label", "gnd", "y", "Y", "class", "local_info")
_MAT_READ_ERRORS = (ValueError, TypeError, OSError, EOFError, NotImplementedError, IndexError, KeyError,
                    zlib.error, struct.error)


def _mat_variables(file: Path) -> dict:
    """The variables of a MATLAB ``.mat`` file (v4 to v7) by name; other file kinds are refused by name."""
    import scipy.io
    from scipy.io.matlab import MatReadError

    kind, text = binary_kind(file_head(file, "a MATLAB .mat file"))
    if kind and kind != "mat":
        raise wrong_kind(file, kind, text, "a MATLAB .mat file")
    try:
        raw = scipy.io.loadmat(file)
    except (*_MAT_READ_ERRORS, MatReadError) as err:
        raise ValueError(f"{file} is not a readable MATLAB .mat file (v4 to v7): {err}") from None
    return {k: v for k, v in raw.items() if not k.startswith("__")}


def _is_matrix(value) -> bool:
    return sp.issparse(value) or (isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "biuf")


def _mat_listing(variables: dict) -> str:
    def describe(value) -> str:
        if sp.issparse(value):
            return f"sparse {value.shape[0]}x{value.shape[1]}"
        if isinstance(value, np.ndarray):
            return f"{value.dtype} {'x'.join(map(str, value.shape))}"
        return type(value).__name__
    return ", ".join(f"{k} ({describe(v)})" for k, v in variables.items()) or "no variables"


def _mat_pick(file: Path, variables: dict, role: str, option: str, name: str | None, known: tuple[str, ...],
              fits, exclude: tuple) -> str | None:
    """The variable holding ``role``: ``name`` when given, else the one known name among the variables that
    ``fits``, else the one variable that fits; ``None`` when none fits and ``role`` is the labels."""
    if name is not None:
        if name not in variables:
            raise ValueError(f"{file} has no variable {name!r} (for {option}=); it holds {_mat_listing(variables)}")
        if not _is_matrix(variables[name]) or not fits(variables[name]):
            raise ValueError(f"{file}: variable {name!r} ({_mat_listing({name: variables[name]})}) cannot be the "
                             f"{role}")
        return name
    fitting = [k for k, v in variables.items() if k not in exclude and _is_matrix(v) and fits(v)]
    named = [k for k in known if k in fitting]
    if len(named) == 1 or len(fitting) == 1:
        return (named or fitting)[0]
    if not fitting and option == "labels":
        return None
    raise ValueError(f"{file}: cannot tell which variable is the {role}, {len(fitting)} fit; it holds "
                     f"{_mat_listing(variables)}; choose with mat:{file}:adj=NAME,labels=NAME")


def read_mat(file: str | Path, adj: str | None = None, labels: str | None = None, features: str | None = None,
             column: int | None = None, seed: int = 0) -> Graph:
    """Read a graph from a MATLAB ``.mat`` file (v4 to v7, through ``scipy.io.loadmat``).

    The adjacency is the variable ``adj``, else the square matrix (sparse or dense; non-zeros are edges)
    named like ``network`` (BlogCatalog, Flickr) or ``A`` (Facebook100), else the only square matrix. The
    labels are the variable ``labels``, else the N-row matrix (or 1 x N vector) other than the adjacency
    named like ``group`` or ``local_info``, else the only one; a file without one has no labels. Labels (see
    :func:`label_matrix`) are one column of integral class ids (renumbered ``0..C-1`` in increasing order,
    the values in ``meta['class_names']``), a one-hot matrix (a row of zeros = unlabelled) or, when some row
    has several 1s, a multi-label 0/1 matrix kept as uint8 ``[N, C]`` (``Graph.multilabel``). ``column``
    takes column K (0-based) of the label matrix as class ids (Facebook100's ``local_info`` holds several
    attributes). Features come only from the variable ``features`` (float32, dense). Split: single-label
    graphs get :func:`per_class_split` with ``seed`` (20 per class train, 30 val, the rest test);
    multi-label graphs get none.

    Raises:
        ValueError: not a readable .mat (another kind of file is named as such), a variable that is absent or
            does not fit, or no unambiguous adjacency / labels (the message lists the variables).
    """
    file = require(Path(file), "a MATLAB .mat file")
    variables = _mat_variables(file)
    adj_name = _mat_pick(file, variables, "adjacency (a square matrix)", "adj", adj, MAT_ADJACENCY_NAMES,
                         lambda v: v.shape[0] == v.shape[1] > 1, ())
    matrix = variables[adj_name]
    n = matrix.shape[0]
    label_name = _mat_pick(file, variables, f"labels (a matrix with {n} rows)", "labels", labels, MAT_LABEL_NAMES,
                           lambda v: v.shape[0] == n or v.shape == (1, n), (adj_name, features))
    x = None
    if features is not None:
        _mat_pick(file, variables, f"features (a matrix with {n} rows)", "features", features, (),
                  lambda v: v.shape[0] == n, ())
        x = variables[features]
        x = (x.toarray() if sp.issparse(x) else x).astype(np.float32)
    if sp.issparse(matrix):
        coo = matrix.tocoo()
        src, dst = coo.row, coo.col
    else:
        src, dst = np.nonzero(matrix)
    y = masks = class_names = None
    num_classes = 0
    if label_name is not None:
        y, num_classes, class_names = label_matrix(variables[label_name], n, f"{file}: labels {label_name!r}",
                                                    column)
        masks = None if y.ndim == 2 else per_class_split(y, seed)
    elif column is not None:
        raise ValueError(f"{file}: column={column} given but no labels variable found; it holds "
                         f"{_mat_listing(variables)}")
    options = ",".join(f"{k}={v}" for k, v in (("adj", adj_name), ("labels", label_name), ("features", features),
                                               ("column", column), ("seed", seed)) if v is not None)
    graph = build_graph(src, dst, n, x=x, y=y, masks=masks, name=file.stem, num_classes=num_classes,
                   source=f"mat:{file.resolve()}:{options}")
    graph.meta["variables"] = {"adj": adj_name, "labels": label_name, "features": features}
    if class_names is not None:
        graph.meta["class_names"] = class_names
    return graph

