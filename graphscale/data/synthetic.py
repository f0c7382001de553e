"""Seeded synthetic graphs whose labels a GNN can learn: degree-corrected SBM and R-MAT.

A generator is named by a spec string ``KIND:key=value,...`` (see
:func:`parse_spec` and :data:`PARAMS` for the keys of each kind). Everything is a
function of the spec: node-level arrays come from seeded streams, edges are
drawn in fixed blocks of :data:`EDGE_BLOCK` undirected edges and features in
fixed blocks of :data:`NODE_BLOCK` rows, each block from its own seed
``(seed, stream, block)``. The in-memory path (:func:`generate`) and the
chunked on-disk path (:func:`generate_to_dir`, any ``chunk_nodes``) therefore
produce the identical graph.

Every graph is symmetric (each generated edge ``u - v`` becomes the records
``u -> v`` and ``v -> u``), without self-loops and without duplicate edges, so
the realised average degree is a little below ``degree``.

**sbm** (degree-corrected stochastic block model with power-law degrees).
Each vertex gets a class uniformly at random and a propensity
``theta ~ Pareto`` with pdf exponent ``exponent`` (capped at ``max_degree``,
default ``sqrt(nodes * degree)``), scaled so the mean expected degree is
``degree``. Each of the ``nodes * degree / 2`` edges picks ``u ~ theta``; with
probability ``homophily`` it picks ``v ~ theta`` inside ``u``'s class, otherwise
``v ~ theta`` among the other classes. Features are
``x_v = mu[y_v] + noise * eps_v`` with class centroids ``mu ~ N(0, I/F)``
(pairwise distance about sqrt(2)) and ``eps ~ N(0, I)``: with the default
noise a node's own features identify its class poorly, and averaging over its
mostly same-class neighbours (what a GCN does) identifies it well.

With ``levels = L > 1`` the communities nest, as in real networks (hierarchical
SBM): classes form groups of ``b = round(classes ** (1/L))`` consecutive
classes, groups form groups of ``b`` groups, and so on. An edge that leaves its
class stays inside its level-1 group with probability ``homophily`` (picking
``v ~ theta`` in the whole group), else inside its level-2 group with
probability ``homophily``, ..., and past level ``L - 1`` it goes anywhere
outside the class, as in the flat model. ``levels = 1`` (default) is the flat
model, edge for edge.

**rmat** (R-MAT, Chakrabarti et al.). ``2**scale`` ids (``scale`` defaults to
``ceil(log2(nodes))``; ids ``>= nodes`` are redrawn), quadrant probabilities
``a, b, c, d`` per bit level, and by default a seeded random relabelling of
the vertices (``permute``) so that ids carry no degree order. Labels are
**expected-degree classes**: a vertex's expected degree under R-MAT depends
only on the number of 1-bits of its (pre-relabelling) id, and the classes
split the vertices into ``classes`` groups of similar size by that expected
degree (class 0 = highest). Labels are a structural role, not a community
(R-MAT's endpoints are nearly independent), so features, built as for ``sbm``,
carry most of the signal.

**Split** (both kinds): a seeded random permutation; the first
``round(train * nodes)`` vertices train, the next ``round(val * nodes)``
validate, the rest test (defaults 10% / 10% / 80%).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphscale.data.edge_stream import EdgeStreamWriter
from graphscale.data.formats import GraphDirWriter
from graphscale.data.graph import Graph

EDGE_BLOCK = 1 << 20
"""Undirected edges drawn per seeded block (fixed: changing it changes every graph)."""
NODE_BLOCK = 1 << 16
"""Feature rows drawn per seeded block (fixed: changing it changes every graph)."""
DEFAULT_CHUNK_NODES = 1 << 18
MAX_NODES = 3_000_000_000  # dst * N + src must fit in int64
_NODES, _EDGES, _CENTROIDS, _FEATURES, _SPLIT, _PERM = range(6)


@dataclass(frozen=True)
class Param:
    """One spec key: its type, default (``None`` = derived) and meaning."""

    kind: type
    default: object
    help: str


_COMMON = {
    "classes": Param(int, 8, "number of classes"),
    "features": Param(int, 64, "feature dimension (0 = no features)"),
    "noise": Param(float, 0.7, "std of the per-dimension feature noise (centroids have norm ~1)"),
    "train": Param(float, 0.1, "fraction of vertices in the training set"),
    "val": Param(float, 0.1, "fraction of vertices in the validation set (the rest is test)"),
    "seed": Param(int, 0, "random seed (>= 0)"),
}
PARAMS: dict[str, dict[str, Param]] = {
    "sbm": {
        "nodes": Param(int, 10_000, "number of vertices"),
        "degree": Param(float, 10.0, "average degree before duplicates are removed"),
        "homophily": Param(float, 0.8, "fraction of edges inside a class"),
        "levels": Param(int, 1, "nesting levels of communities (1 = flat: an edge leaving its class goes anywhere)"),
        "exponent": Param(float, 2.5, "power-law exponent of the degree distribution (> 2)"),
        "max_degree": Param(float, None, "cap on a vertex's expected degree (default sqrt(nodes * degree))"),
        **_COMMON,
    },
    "rmat": {
        "scale": Param(int, None, "log2 of the id range (default ceil(log2(nodes)), or 14 without nodes)"),
        "nodes": Param(int, None, "number of vertices (default 2**scale)"),
        "degree": Param(float, 16.0, "average degree before duplicates are removed"),
        "edges": Param(int, None, "undirected edges to draw (overrides degree)"),
        "a": Param(float, 0.57, "R-MAT probability of the top-left quadrant"),
        "b": Param(float, 0.19, "R-MAT probability of the top-right quadrant"),
        "c": Param(float, 0.19, "R-MAT probability of the bottom-left quadrant"),
        "d": Param(float, 0.05, "R-MAT probability of the bottom-right quadrant"),
        "permute": Param(bool, True, "randomly relabel the vertices"),
        **_COMMON,
        "classes": Param(int, 4, "number of expected-degree classes (<= scale + 1)"),
    },
}


# ------------------------------------------------------------------ specs
def _parse_value(kind: str, key: str, text: str, param: Param):
    where = f"{kind} spec: {key}={text!r}"
    if param.kind is bool:
        if text.lower() in ("1", "true", "yes"):
            return True
        if text.lower() in ("0", "false", "no"):
            return False
        raise ValueError(f"{where} must be a boolean (true/false/1/0)")
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"{where} must be {'an integer' if param.kind is int else 'a number'}") from None
    if param.kind is int:
        if not value.is_integer():
            raise ValueError(f"{where} must be an integer")
        return int(value)
    return value


def _complete(kind: str, given: dict) -> dict:
    """Check keys and values of ``given`` and fill in the defaults."""
    if kind not in PARAMS:
        raise ValueError(f"unknown synthetic graph kind {kind!r}; expected one of {', '.join(PARAMS)}")
    table = PARAMS[kind]
    unknown = sorted(set(given) - set(table))
    if unknown:
        raise ValueError(f"{kind} spec: unknown key(s) {', '.join(unknown)}; accepted keys: {', '.join(table)}")
    params = {key: given.get(key, p.default) for key, p in table.items()}
    for key, p in table.items():
        value = params[key]
        if value is None:
            continue
        if p.kind is float and isinstance(value, int) and not isinstance(value, bool):
            params[key] = value = float(value)
        if not isinstance(value, p.kind) or (p.kind is int and isinstance(value, bool)):
            raise ValueError(f"{kind} spec: {key} must be a {p.kind.__name__}, got {value!r}")
    _validate(kind, params)
    return params


def _check(ok: bool, kind: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{kind} spec: {message}")


def _validate(kind: str, p: dict) -> None:
    _check(p["classes"] >= 1, kind, f"classes must be >= 1, got {p['classes']}")
    _check(p["features"] >= 0, kind, f"features must be >= 0, got {p['features']}")
    _check(p["noise"] >= 0, kind, f"noise must be >= 0, got {p['noise']}")
    _check(p["seed"] >= 0, kind, f"seed must be >= 0, got {p['seed']}")
    _check(0 <= p["train"] <= 1 and 0 <= p["val"] <= 1 and p["train"] + p["val"] <= 1, kind,
           f"train and val must be fractions with train + val <= 1, got {p['train']} and {p['val']}")
    _check(p["degree"] > 0, kind, f"degree must be > 0, got {p['degree']}")
    if kind == "sbm":
        _check(2 <= p["nodes"] <= MAX_NODES, kind, f"nodes must lie in [2, {MAX_NODES}], got {p['nodes']}")
        _check(0 <= p["homophily"] <= 1, kind, f"homophily must lie in [0, 1], got {p['homophily']}")
        _check(p["levels"] >= 1, kind, f"levels must be >= 1, got {p['levels']}")
        _check(p["exponent"] > 2, kind, f"exponent must be > 2 (finite mean degree), got {p['exponent']}")
        _check(p["max_degree"] is None or p["max_degree"] >= 1, kind,
               f"max_degree must be >= 1, got {p['max_degree']}")
        return
    probs = [p[k] for k in "abcd"]
    _check(min(probs) >= 0 and abs(sum(probs) - 1) < 1e-9, kind, f"a, b, c, d must be >= 0 and sum to 1, got {probs}")
    _check(p["scale"] is None or 1 <= p["scale"] <= 31, kind, f"scale must lie in [1, 31], got {p['scale']}")
    _check(p["nodes"] is None or 2 <= p["nodes"] <= 2**31, kind, f"nodes must lie in [2, 2**31], got {p['nodes']}")
    if p["nodes"] is not None and p["scale"] is not None:
        _check(p["nodes"] <= 2 ** p["scale"], kind, f"nodes={p['nodes']} exceeds 2**scale={2 ** p['scale']}")
    _check(p["edges"] is None or p["edges"] >= 0, kind, f"edges must be >= 0, got {p['edges']}")
    scale = _rmat_scale(p)
    _check(p["classes"] <= scale + 1, kind, f"classes must be <= scale + 1 = {scale + 1} "
                                            f"(labels are expected-degree classes), got {p['classes']}")


def parse_spec(spec: str) -> tuple[str, dict]:
    """Parse ``"KIND:key=value,..."`` into ``(kind, params)`` with every default filled in.

    Example: ``parse_spec("sbm:nodes=1000,degree=20,classes=16,features=128,seed=0")``.

    Raises:
        ValueError: unknown kind or key (the message lists the accepted ones), a malformed item, or a bad value.
    """
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in PARAMS:
        raise ValueError(f"unknown synthetic graph kind {kind!r} in {spec!r}; expected one of {', '.join(PARAMS)}")
    given: dict = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key or not text.strip():
            raise ValueError(f"{kind} spec: malformed item {item!r}; expected key=value "
                             f"with key one of {', '.join(PARAMS[kind])}")
        if key in given:
            raise ValueError(f"{kind} spec: key {key!r} given twice")
        if key not in PARAMS[kind]:
            raise ValueError(f"{kind} spec: unknown key {key!r}; accepted keys: {', '.join(PARAMS[kind])}")
        given[key] = _parse_value(kind, key, text.strip(), PARAMS[kind][key])
    return kind, _complete(kind, given)


def _format_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def format_spec(kind: str, params: dict, *, only_changed: bool = False) -> str:
    """The spec string of ``(kind, params)``; with ``only_changed`` only keys that differ from the defaults.

    ``parse_spec(format_spec(kind, params))`` returns ``(kind, params)`` again.
    """
    items = [f"{key}={_format_value(params[key])}" for key, p in PARAMS[kind].items()
             if params.get(key) is not None and not (only_changed and params[key] == p.default)]
    return f"{kind}:{','.join(items)}" if items else kind


# ------------------------------------------------------------- generators
def _rng(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream, block]))


def _rmat_scale(p: dict) -> int:
    if p["scale"] is not None:
        return p["scale"]
    return 14 if p["nodes"] is None else max(1, math.ceil(math.log2(p["nodes"])))


class _Model(ABC):
    """Shared parts of a generator: node count, labels, features, split, edge blocks."""

    num_nodes: int
    num_edges: int  # undirected edges drawn
    labels: np.ndarray  # class ids in the narrowest integer type (written as int64)

    def __init__(self, kind: str, params: dict) -> None:
        self.kind, self.params = kind, params
        f = params["features"]
        centroids = _rng(params["seed"], _CENTROIDS).standard_normal((params["classes"], f)) / math.sqrt(max(f, 1))
        self._centroids = centroids.astype(np.float32)

    @property
    def num_edge_blocks(self) -> int:
        return -(-self.num_edges // EDGE_BLOCK)

    def _block_size(self, block: int) -> int:
        return min(EDGE_BLOCK, self.num_edges - block * EDGE_BLOCK)

    @abstractmethod
    def edge_block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """Endpoints ``(u, v)`` of the undirected edges of seeded block ``block`` (int64, may repeat)."""

    def directed_keys(self, block: int) -> np.ndarray:
        """Both directions of the block's edges as keys ``dst * N + src``, self-loops dropped (unsorted)."""
        src, dst = self.edge_block(block)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        n = self.num_nodes
        return np.concatenate([dst * n + src, src * n + dst])

    @property
    def num_feature_blocks(self) -> int:
        return -(-self.num_nodes // NODE_BLOCK) if self.params["features"] else 0

    def feature_block(self, block: int) -> np.ndarray:
        """Rows ``[block * NODE_BLOCK, ...)`` of ``x``: class centroid plus Gaussian noise, float32."""
        p = self.params
        lo, hi = block * NODE_BLOCK, min(self.num_nodes, (block + 1) * NODE_BLOCK)
        x = _rng(p["seed"], _FEATURES, block).standard_normal((hi - lo, p["features"]), dtype=np.float32)
        x *= np.float32(p["noise"])
        x += self._centroids[self.labels[lo:hi]]
        return x

    def masks(self) -> dict[str, np.ndarray]:
        n, p = self.num_nodes, self.params
        perm = _rng(p["seed"], _SPLIT).permutation(n)
        n_train, n_val = round(p["train"] * n), round(p["val"] * n)
        out = {k: np.zeros(n, dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
        out["train_mask"][perm[:n_train]] = True
        out["val_mask"][perm[n_train:n_train + n_val]] = True
        out["test_mask"][perm[n_train + n_val:]] = True
        return out


class _SBM(_Model):
    def __init__(self, params: dict) -> None:
        super().__init__("sbm", params)
        n, c, deg = params["nodes"], params["classes"], params["degree"]
        self.num_nodes, self.num_edges = n, round(n * deg / 2)
        rng = _rng(params["seed"], _NODES)
        labels = rng.integers(0, c, n)
        # per-vertex state: the cumulative weights (float64), the class-sorted order and the labels, the last two
        # in the narrowest integer type (at most 13 bytes per vertex below 2^31 vertices and 128 classes); every
        # step in place, so that building it holds at most three [n] temporaries
        weight = rng.random(n)
        np.subtract(1.0, weight, out=weight)
        weight **= -1.0 / (params["exponent"] - 1.0)  # theta (in place, numpy's scalar-power path as for **)
        weight *= deg / weight.mean()
        np.minimum(weight, params["max_degree"] or math.sqrt(n * deg), out=weight)
        self._order = np.argsort(labels, kind="stable").astype(_id_dtype(n))
        sizes = np.bincount(labels, minlength=c)
        self.labels = labels.astype(_id_dtype(c))
        del labels
        self._cum = weight[self._order]
        del weight
        np.cumsum(self._cum, out=self._cum)
        self._end = np.cumsum(sizes)
        self._start = self._end - sizes
        self._w_before = np.where(self._start > 0, self._cum[np.maximum(self._start - 1, 0)], 0.0)
        self._w_class = np.where(sizes > 0, self._cum[np.maximum(self._end - 1, 0)], 0.0) - self._w_before
        self._w_total = float(self._cum[-1])
        self._branching = max(2, round(c ** (1.0 / params["levels"])))

    def _position(self, t: np.ndarray) -> np.ndarray:
        """``searchsorted(cum, t, 'right')``, computed on sorted queries (cache-friendly, ~4x faster)."""
        order = np.argsort(t)
        out = np.empty(t.size, dtype=np.int64)
        out[order] = np.searchsorted(self._cum, t[order], side="right")
        return out

    def _pick(self, t: np.ndarray, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
        """Vertex (int64) whose cumulative-weight interval holds ``t``, clipped to sorted positions ``[lo, hi]``."""
        return self._order[np.clip(self._position(t), lo, hi)].astype(np.int64)

    def edge_block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        rng = _rng(self.params["seed"], _EDGES, block)
        r_u, r_kind, r_v = rng.random((3, self._block_size(block)))
        u = self._pick(r_u * self._w_total, 0, self.num_nodes - 1)
        cls = self.labels[u]
        w_out = self._w_total - self._w_class[cls]
        h = self.params["homophily"]
        intra = (r_kind < h) | (w_out <= 0)
        v = np.empty_like(u)
        a = cls[intra]
        v[intra] = self._pick(self._w_before[a] + r_v[intra] * self._w_class[a], self._start[a], self._end[a] - 1)
        if self.params["levels"] > 1:  # the level an outgoing edge stays in, from the same uniform r_kind
            level = np.full(u.size, self.params["levels"])
            out = ~intra
            if h > 0:
                rest = (r_kind[out] - h) / (1.0 - h)
                level[out] = np.minimum(1 + np.floor(np.log1p(-rest) / np.log1p(-h)), self.params["levels"])
            nested = out & (level < self.params["levels"])
            span = self._branching ** level[nested]
            first = cls[nested] // span * span
            last = np.minimum(first + span, self.params["classes"]) - 1
            w_lo = self._w_before[first]
            w_group = self._w_before[last] + self._w_class[last] - w_lo
            v[nested] = self._pick(w_lo + r_v[nested] * w_group, self._start[first], self._end[last] - 1)
            intra = intra | nested
        a = cls[~intra]
        t = r_v[~intra] * w_out[~intra]
        t = np.where(t >= self._w_before[a], t + self._w_class[a], t)
        pos = np.clip(self._position(t), 0, self.num_nodes - 1)
        inside = (pos >= self._start[a]) & (pos < self._end[a])  # only from rounding at a class boundary
        pos = np.where(inside, np.where(self._start[a] > 0, self._start[a] - 1, self._end[a]), pos)
        v[~intra] = self._order[pos]  # (int64 v: the ids widen on assignment)
        return u, v


class _RMAT(_Model):
    def __init__(self, params: dict) -> None:
        super().__init__("rmat", params)
        self.scale = _rmat_scale(params)
        n = params["nodes"] if params["nodes"] is not None else 2 ** self.scale
        self.num_nodes = n
        self.num_edges = params["edges"] if params["edges"] is not None else round(n * params["degree"] / 2)
        self._perm = _rng(params["seed"], _PERM).permutation(n) if params["permute"] else None
        self.labels = self._degree_classes()

    def _degree_classes(self) -> np.ndarray:
        a, b, c, d = (self.params[k] for k in "abcd")
        s, n = self.scale, self.num_nodes
        ids = np.arange(n, dtype=np.int64)
        ones = np.zeros(n, dtype=np.int64)
        for bit in range(s):
            ones += (ids >> bit) & 1
        k = np.arange(s + 1)
        expected = (a + b) ** (s - k) * (c + d) ** k + (a + c) ** (s - k) * (b + d) ** k
        rank = np.argsort(-expected, kind="stable")  # popcounts from highest to lowest expected degree
        count = np.bincount(ones, minlength=s + 1)[rank]
        middle = (np.cumsum(count) - count / 2) / n
        cls = np.empty(s + 1, dtype=np.int64)
        cls[rank] = np.minimum(self.params["classes"] - 1, np.floor(self.params["classes"] * middle)).astype(np.int64)
        labels = cls[ones].astype(_id_dtype(self.params["classes"]))
        if self._perm is None:
            return labels
        out = np.empty_like(labels)
        out[self._perm] = labels
        return out

    def _draw(self, rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        a, b, c = (self.params[key] for key in "abc")
        src, dst = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        for level in range(self.scale):
            r = rng.random(k)
            bit = np.int64(1) << np.int64(self.scale - 1 - level)
            src |= np.where(r >= a + b, bit, 0)
            dst |= np.where(((r >= a) & (r < a + b)) | (r >= a + b + c), bit, 0)
        return src, dst

    def edge_block(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        rng = _rng(self.params["seed"], _EDGES, block)
        src, dst = self._draw(rng, self._block_size(block))
        bad = np.flatnonzero((src >= self.num_nodes) | (dst >= self.num_nodes))
        while bad.size:
            src[bad], dst[bad] = self._draw(rng, bad.size)
            bad = bad[(src[bad] >= self.num_nodes) | (dst[bad] >= self.num_nodes)]
        if self._perm is not None:
            src, dst = self._perm[src], self._perm[dst]
        return src, dst


def _id_dtype(count: int) -> np.dtype:
    """The narrowest signed integer type holding ``0 .. count - 1`` (per-vertex arrays held in memory)."""
    for dtype in (np.int8, np.int16, np.int32):
        if count - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort + neighbour compare; far faster than ``np.unique`` on large int64 arrays)."""
    keys = np.sort(keys)
    if keys.size:
        keep = np.empty(keys.size, dtype=bool)
        keep[0] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
    return keys


def _model(kind: str, params: dict) -> _Model:
    return _SBM(params) if kind == "sbm" else _RMAT(params)


def _resolve(spec: str | tuple[str, dict]) -> tuple[str, dict]:
    if isinstance(spec, str):
        return parse_spec(spec)
    kind, given = spec
    return kind, _complete(kind, dict(given))


def _graph_info(model: _Model) -> tuple[str, dict]:
    meta = {"num_classes": model.params["classes"], "source": format_spec(model.kind, model.params),
            "generator": dict(model.params)}
    return format_spec(model.kind, model.params, only_changed=True), meta


# ------------------------------------------------------------ public API
def generate(spec: str | tuple[str, dict]) -> Graph:
    """Generate a synthetic graph in memory.

    Args:
        spec: a spec string (``"sbm:nodes=1000,degree=10"``) or ``(kind, params)``.

    Returns:
        A symmetric :class:`Graph` without self-loops or duplicate edges, with float32 ``x``, int64 ``y``, the
        split masks, ``meta['num_classes']``, ``meta['source']`` (the full spec) and ``meta['generator']``.
    """
    model = _model(*_resolve(spec))
    n = model.num_nodes
    keys = _unique(np.concatenate([model.directed_keys(b) for b in range(model.num_edge_blocks)]
                                  or [np.empty(0, np.int64)]))
    dst = keys // n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    x = None
    if model.params["features"]:
        x = np.empty((n, model.params["features"]), dtype=np.float32)
        for b in range(model.num_feature_blocks):
            x[b * NODE_BLOCK: (b + 1) * NODE_BLOCK] = model.feature_block(b)
    name, meta = _graph_info(model)
    masks = {k: torch.from_numpy(v) for k, v in model.masks().items()}
    return Graph(torch.from_numpy(indptr), torch.from_numpy(keys - dst * n),
                 x=None if x is None else torch.from_numpy(x), y=torch.from_numpy(model.labels.astype(np.int64)),
                 name=name, meta=meta, **masks)


def sbm(**params) -> Graph:
    """Degree-corrected SBM in memory; keywords as in :data:`PARAMS` ``['sbm']``."""
    return generate(("sbm", params))


def rmat(**params) -> Graph:
    """R-MAT graph in memory; keywords as in :data:`PARAMS` ``['rmat']``."""
    return generate(("rmat", params))


def generate_to_dir(spec: str | tuple[str, dict], out_dir: str | Path, *, chunk_nodes: int = DEFAULT_CHUNK_NODES,
                    edge_stream: str | Path | None = None, edge_dtype: str | None = None,
                    overwrite: bool = True) -> Path:
    """Generate a synthetic graph straight into a graph directory (and optionally an edge stream).

    Edge blocks are drawn one at a time and their directed records spilled
    into one scratch file per range of ``chunk_nodes`` destinations; each range
    is then deduplicated and appended to the CSR. Features are written one
    seeded block at a time. Peak memory is O(N) for the per-vertex arrays plus
    one edge block plus one destination range, never the whole edge list or
    feature matrix. The result equals :func:`generate` for the same spec,
    whatever ``chunk_nodes``.

    Args:
        spec: spec string or ``(kind, params)``.
        out_dir: graph directory to write (see :mod:`graphscale.data.formats`).
        chunk_nodes: destination vertices per CSR chunk.
        edge_stream: also write the graph's records (destination order) as an edge stream file here.
        edge_dtype: dtype of the edge stream; default ``int32`` when it fits.
        overwrite: replace an existing graph directory.

    Returns:
        ``out_dir``.
    """
    if chunk_nodes < 1:
        raise ValueError(f"generate_to_dir: chunk_nodes must be >= 1, got {chunk_nodes}")
    model = _model(*_resolve(spec))
    n = model.num_nodes
    out_dir = Path(out_dir)
    name, meta = _graph_info(model)
    starts = np.minimum(np.arange(-(-n // chunk_nodes) + 1, dtype=np.int64) * chunk_nodes, n)
    with contextlib.ExitStack() as stack:
        stream = None
        if edge_stream is not None:
            stream = stack.enter_context(EdgeStreamWriter(edge_stream, edge_dtype or
                                                          ("int32" if n <= 2**31 else "int64"), n))
        writer = stack.enter_context(GraphDirWriter(out_dir, n, num_features=model.params["features"],
                                                    num_classes=model.params["classes"], name=name, meta=meta,
                                                    overwrite=overwrite))
        scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.edges-", dir=out_dir.parent))
        stack.callback(shutil.rmtree, scratch, True)
        for b in range(model.num_edge_blocks):
            keys = np.sort(model.directed_keys(b))
            bounds = np.searchsorted(keys, starts * n)
            for k in np.flatnonzero(np.diff(bounds)):
                with open(scratch / f"{k}.bin", "ab") as f:
                    keys[bounds[k]: bounds[k + 1]].tofile(f)
        for k in range(starts.size - 1):
            part = scratch / f"{k}.bin"
            keys = _unique(np.fromfile(part, dtype=np.int64)) if part.exists() else np.empty(0, np.int64)
            dst = keys // n
            src = keys - dst * n
            writer.append_rows(np.bincount(dst - starts[k], minlength=int(starts[k + 1] - starts[k])), src)
            if stream is not None:
                stream.append(src, dst)
            part.unlink(missing_ok=True)
        writer.append_nodes(y=model.labels, **model.masks())
        for b in range(model.num_feature_blocks):
            writer.append_nodes(x=model.feature_block(b))
    return out_dir
