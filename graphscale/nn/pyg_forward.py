"""PyG models with their own ``forward`` (skip connections, jumping knowledge): the layer loop inverted.

A model whose layer order cannot be read without running it (:mod:`graphscale.nn.pyg` wraps the layer-sequential
ones) is run by its own ``forward(x, edge_index)`` on a *row space* the strategy chooses: ``x`` holds one row per
vertex of the row space (global ids ``ids``) and every conv *call* is handed back to the strategy. The ``i``-th
conv call of a forward is layer ``i`` (a conv called twice is two layers); a dry run at validation counts the calls
(:attr:`ForwardGNN.num_layers`, what the strategies sample and exchange for) and each call's input width. While
:meth:`ForwardGNN.run` runs, each conv's ``forward`` is replaced (on that instance, for the duration of the call)
by a proxy that ignores the ``edge_index`` it is passed and calls the strategy's ``layer(i, h) -> out``: ``h`` is
the conv's input in the row space, ``out`` the outputs of a prefix of the row space's rows (the proxy pads it with
zero rows to the row space). The strategy does its exchange there and runs the conv on its block with
:meth:`ForwardGNN.step` (the layer-sequential path's :class:`~graphscale.nn.pyg_convs.ConvLayer`). Everything between
two conv calls is the user's code on the whole row space.

Row spaces:

* full graph (``single``, ``model-averaging``'s local graph, ``graph-parallel``'s owned rows): every layer's
  destinations are the whole row space (graph-parallel gathers its halo rows for the conv and gets its owned rows
  back), so skip connections and jumping knowledge combine rows of the same vertices, exactly as the whole graph.
* sampled blocks ``blocks[0..L-1]`` (mini-batches): the row space is ``blocks[0]``'s sources; in graphscale's blocks
  the sources of block ``l`` are the first rows of block ``l - 1``'s sources (its destinations), so the rows of
  every level are a prefix of the row space. Layer ``l`` reads the first ``S_l`` rows of its input and returns
  ``D_l = S_{l+1}`` rows, padded with zeros. Exact for the targets: a tensor computed from conv calls ``<= j`` (and
  row-wise code) is exact on its first ``D_j`` rows, because row-wise code keeps a row exact when its input rows
  are, and conv ``j`` reads only the first ``S_j = D_{j-1}`` rows of an input computed from calls ``< j``. The
  logits are therefore exact on the first ``D_{L-1}`` rows, the targets; the padded rows are never read by a
  target's computation (their gradients are zero). Tested against the full-graph forward with full neighbourhoods.

The ``edge_index`` the forward receives is a stand-in: passing it to a conv is its only use; so is the
``edge_weight`` it receives when its forward takes one (a conv passed it gets its block's edge weights; on a
weighted graph every conv call must be passed it, :meth:`ForwardGNN.weight_refusal`); anything else
(``edge_index.size(1)``, ``dropout_edge(edge_index)``, ...) is refused at validation, naming the operation. So is
code that mixes rows (a global pool, a normalisation over the batch, a forward returning fewer rows): the dry run
computes a tiny graph whole and as a sampled batch with full neighbourhoods, and refuses the model when the
targets' rows differ.

**Dropout.** ``--pyg-dropout keyed`` (default): while the forward runs, a :class:`~torch.overrides.TorchFunctionMode`
routes every ``torch.nn.functional.dropout`` / ``torch.dropout`` call (``torch.nn.Dropout`` modules call it) on a
row-space tensor to graphscale's keyed dropout, keyed by the rows' global ids, the epoch and the call's position in
the forward (its *site*), so partitioned and sampled runs draw the masks ``single`` draws. Dropout on a tensor that
is not one row per vertex, other random functions (``alpha_dropout``, ``dropout2d``, ``torch.rand``, ...) and a
dropout inside a conv are refused in this mode, naming ``--pyg-dropout torch``, which keeps the process RNG (runs
reproducible per strategy and worker count, but partitioned runs differ from ``single``).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from graphscale.config import BUILTIN_MODEL_FIELDS, PYG_DROPOUT_CHOICES, USER_MODEL_OPTIONS
from graphscale.data.block import Block
from graphscale.data.graph import Graph
from graphscale.nn.dropout import keyed_dropout
from graphscale.nn.gnn import GNN
from graphscale.nn.pyg_convs import (
    ConvLayer,
    check_conv,
    check_conv_rows,
    check_row_wise,
    class_name,
    message_passing_class,
    run_conv,
    weight_refusal,
)

#: the dropout functions keyed in ``keyed`` mode (``torch.dropout_`` and ``inplace=True``: the keyed rows written
#: into the input, as torch's in-place dropout does)
_DROPOUTS = (F.dropout, torch.dropout, torch.dropout_)
#: functions that draw from the process RNG, refused in ``keyed`` mode (the dropouts among them when active)
_RANDOM = (F.alpha_dropout, F.feature_alpha_dropout, F.dropout1d, F.dropout2d, F.dropout3d, torch.bernoulli,
           torch.rand, torch.rand_like, torch.randn, torch.randn_like, torch.randint, torch.randint_like,
           torch.randperm, torch.multinomial, torch.normal, torch.poisson, Tensor.bernoulli_, Tensor.uniform_,
           Tensor.normal_, Tensor.random_, Tensor.exponential_, Tensor.geometric_, Tensor.cauchy_,
           Tensor.log_normal_)
#: relative tolerance of the dry run's row-mixing check (float64)
_ROWS_RTOL = 1e-9


class ForwardUseError(ValueError):
    """The user's forward does something graphscale cannot run on a row space (message: what, without the model)."""


def _edge_index_use(what: str, name: str = "edge_index") -> ForwardUseError:
    return ForwardUseError(f"its forward may only pass {name} on to its convs (graphscale gives each conv its "
                           f"block's edges), but {what}")


class EdgeIndexStandIn:
    """What the user's forward receives as ``edge_index``: it may only be passed on to a conv."""

    __slots__ = ()
    #: the argument it stands in for
    arg = "edge_index"

    def __getattr__(self, name: str):
        raise _edge_index_use(f"it reads {self.arg}.{name}", self.arg)

    def __getitem__(self, key):
        raise _edge_index_use(f"it indexes {self.arg}", self.arg)

    def __iter__(self):
        raise _edge_index_use(f"it iterates over {self.arg}", self.arg)

    def __len__(self) -> int:
        raise _edge_index_use(f"it takes len({self.arg})", self.arg)

    def __bool__(self) -> bool:
        raise _edge_index_use(f"it tests {self.arg}'s truth value", self.arg)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _edge_index_use(f"it passes {cls.arg} to {_name(func)}", cls.arg)


class EdgeWeightStandIn(EdgeIndexStandIn):
    """What the user's forward receives as ``edge_weight``: it may only be passed on to a conv."""

    __slots__ = ()
    arg = "edge_weight"


def _name(func) -> str:
    """``torch.rand``, ``torch.nn.functional.dropout``, ``torch.Tensor.size``, ... (a torch function's public name)."""
    from torch.overrides import resolve_name

    return resolve_name(func) or getattr(func, "__qualname__", None) or str(func)


class _Run(TorchFunctionMode):
    """One forward on a row space: the conv proxies' state and the mode that keys dropout (module docstring)."""

    def __init__(self, model: ForwardGNN, ids: Tensor, rows: int, layer: Callable[[int, Tensor], Tensor],
                 limit: int | None) -> None:
        super().__init__()
        self.model, self.ids, self.rows, self.layer, self.limit = model, ids, rows, layer, limit
        self.calls: list[nn.Module] = []
        self.widths: list[int] = []
        self.grads: list[bool] = []  # whether each call's input requires grad
        self.sites = 0
        self.inside = False
        self.stand_in = EdgeIndexStandIn()
        self.weight_stand_in = EdgeWeightStandIn()
        self.weighted: list[bool] = []  # whether each call is passed the forward's edge_weight
        self.given: Tensor | None = None  # the x the forward is given
        self.stored: Tensor | None = None  # what conv call 0 gets instead of ``given`` itself (:meth:`ForwardGNN.run`)
        self.first_reads_input = False  # whether conv call 0's input is ``given`` itself

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        used = [a for a in tree_leaves((args, kwargs)) if isinstance(a, EdgeIndexStandIn)]
        if used:
            raise _edge_index_use(f"it passes {used[0].arg} to {_name(func)}", used[0].arg)
        if self.model.pyg_dropout == "keyed":
            if func in _DROPOUTS:
                return self._dropout(func, args, kwargs)
            if func in _RANDOM and _active(func, args, kwargs):
                raise ForwardUseError(f"it calls {_name(func)}, which draws from the process RNG and cannot be "
                                      "keyed by vertex (--pyg-dropout keyed); use --pyg-dropout torch")
        return func(*args, **kwargs)

    def _dropout(self, func, args, kwargs):
        bound = inspect.signature(F.dropout).bind(*args, **kwargs) if func is F.dropout else None
        if bound is None:  # torch.dropout(input, p, train), torch.dropout_(input, p, train)
            x, p, training = (list(args) + [kwargs.get(k) for k in ("input", "p", "train")][len(args):])[:3]
            inplace = func is torch.dropout_
        else:
            bound.apply_defaults()
            x, p, training = bound.arguments["input"], bound.arguments["p"], bound.arguments["training"]
            inplace = bool(bound.arguments["inplace"])
        if not training or p == 0.0:
            return x
        if x.dim() != 2 or x.shape[0] != self.rows:
            raise ForwardUseError(f"it applies dropout to a {list(x.shape)} tensor, not one row per vertex "
                                  f"([{self.rows}, *]), which keyed dropout cannot key by vertex; use "
                                  "--pyg-dropout torch")
        site = self.sites
        self.sites += 1
        out = keyed_dropout(x, self.ids, float(p), self.model.seed, self.model.epoch, site, True)
        # in place: the keyed rows copied into x (autograd records the copy; the keyed dropout's backward needs only
        # the ids, so overwriting its input is safe, and x's producer sees the in-place write as under torch's)
        return x.copy_(out) if inplace else out

    def conv_call(self, conv: nn.Module, forward, *args, **kwargs):
        """A conv's forward while the model's forward runs: the strategy's layer, or the conv's own ``forward``
        inside it (the strategy runs the conv on its block)."""
        if self.inside:
            return forward(*args, **kwargs)
        bound = inspect.signature(forward).bind(*args, **kwargs)
        x, edge_index = bound.arguments.get("x"), bound.arguments.get("edge_index")
        i = len(self.calls)
        what = f"call {i} ({class_name(conv)})"
        if not isinstance(edge_index, EdgeIndexStandIn):
            raise ForwardUseError(f"{what} gets an edge_index other than the one its forward was given")
        weight = bound.arguments.get("edge_weight")
        if weight is not None and not isinstance(weight, EdgeWeightStandIn):
            raise ForwardUseError(f"{what} gets an edge_weight other than the one its forward was given")
        extra = [k for k, v in bound.arguments.items() if k not in ("x", "edge_index", "edge_weight")
                 and v is not None and not (isinstance(v, (dict, tuple)) and not v)]
        if extra:
            raise ForwardUseError(f"{what} is passed {', '.join(extra)}; graphscale gives a conv only x, its "
                                  "block's edges and their edge_weight")
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[0] != self.rows:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ForwardUseError(f"{what} gets x = {shape}, not one row per vertex ([{self.rows}, *])")
        if self.limit is not None and i >= self.limit:
            raise ForwardUseError(f"it calls more convs than at validation ({self.limit}); graphscale needs the "
                                  "same conv calls on every forward")
        self.calls.append(conv)
        self.weighted.append(weight is not None)
        self.widths.append(int(x.shape[1]))
        self.grads.append(x.requires_grad)
        if i == 0:
            self.first_reads_input = x is self.given
            if self.stored is not None:
                if not self.first_reads_input:
                    raise ForwardUseError("call 0 read its forward's x itself at validation but not now; graphscale "
                                          "needs the same conv calls on every forward")
                x = self.stored
        self.inside = True
        try:
            with torch._C.DisableTorchFunction():  # the strategy's exchange and the conv run unobserved
                out = self.layer(i, x)
        finally:
            self.inside = False
        if out.shape[0] < self.rows:  # the destinations of a sampled block: a prefix (module docstring)
            out = torch.cat([out, out.new_zeros((self.rows - out.shape[0], *out.shape[1:]))])
        return out


def _active(func, args, kwargs) -> bool:
    """Whether a random function draws (a dropout variant with ``training=False`` or ``p=0`` does not)."""
    if func in (F.alpha_dropout, F.feature_alpha_dropout, F.dropout1d, F.dropout2d, F.dropout3d):
        bound = inspect.signature(func).bind(*args, **kwargs)
        bound.apply_defaults()
        return bool(bound.arguments["training"]) and bound.arguments["p"] > 0
    return True


class ForwardGNN(GNN):
    """A PyG model with its own ``forward``, run on row spaces with each conv call handed to the strategy
    (module docstring).

    Args:
        module: the user's model (shared, not copied: training the wrapper trains it); ``forward(x, edge_index)``.
        in_dim: input feature width.
        dropout: ``keyed`` or ``torch`` (:data:`PYG_DROPOUT_CHOICES`).
        seed: keyed dropout seed.
        label: how errors name the model.
        reason: why it is not layer-sequential (strategies that need a layer-sequential model quote it).

    Attributes:
        num_layers: conv calls per forward.
        layers: one :class:`ConvLayer` per conv call (a conv called twice appears twice); a plain list, not
            submodules (the convs' parameters are the user module's).
        out_width: output width.
    """

    options = USER_MODEL_OPTIONS
    #: strategies that split the model by layer (offload, pipeline) refuse it
    layer_sequential = False

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        return {name: "(a PyG model defines its own layers, widths and dropout)" for name in BUILTIN_MODEL_FIELDS}

    def __init__(self, module: nn.Module, in_dim: int, dropout: str = "keyed", seed: int = 0,
                 label: str | None = None, reason: str = "") -> None:
        label = label or class_name(module)
        if dropout not in PYG_DROPOUT_CHOICES:
            raise ValueError(f"--pyg-dropout must be one of {', '.join(PYG_DROPOUT_CHOICES)}, got {dropout!r}")
        convs = _convs(module)
        if not convs:
            raise ValueError(f"{label}: {class_name(module)} has no message-passing layers (no torch_geometric "
                             "MessagePassing conv)")
        for i, conv in enumerate(convs):
            check_conv(conv, f"conv {i}", dropout, label)
        check_row_wise(module, "in the model", label)
        self.__dict__.update(pyg_dropout=dropout, label=label, seed=int(seed), epoch=0,  # read by the trace
                             takes_weight="edge_weight" in inspect.signature(module.forward).parameters)
        graph = _probe_graph(in_dim)
        calls, widths, out_width = self._trace(module, graph)
        super().__init__([ConvLayer(c) for c in calls], widths, 0.0, seed)
        layers = self._modules.pop("layers")
        self.__dict__["layers"] = list(layers)  # not submodules: the convs are registered once, in ``net``
        self.net = module
        self.pyg_dropout, self.label, self.reason, self.out_width = dropout, label, reason, out_width
        self.first_input_learned, self.first_reads_input = self._check_rows(graph)

    def user_module(self) -> nn.Module:
        """The user's module (``net``, whose forward this model runs)."""
        return self.net

    # ------------------------------------------------------------ running
    @property
    def learned_input_map(self) -> bool:
        """Whether the first conv call's input depends on parameters (then graph-parallel's layer-0 halo exchange
        runs backward too: :func:`~graphscale.strategies.graph_parallel.halo_bytes_per_epoch`); read in the dry
        run's training-mode forward. See also :attr:`reads_stored_input`."""
        return self.first_input_learned

    @property
    def reads_stored_input(self) -> bool:
        """Whether the first conv call's input is the forward's ``x`` itself (no dropout or other code on it in
        the dry run's training-mode forward): then :meth:`run` with ``stored_input=True`` hands that call the
        stored rows (bfloat16 with ``--feature-dtype``), which :meth:`step` upcasts, and graph-parallel exchanges
        them as stored (``b_0 = 2``); otherwise layer 0 exchanges the forward's float32 rows."""
        return self.first_reads_input

    def run(self, x: Tensor, ids: Tensor, layer: Callable[[int, Tensor], Tensor], stored_input: bool = False) -> Tensor:
        """The user's forward on the row space ``ids`` (module docstring).

        Args:
            x: input rows of the row space, ``[R, in]`` (bfloat16 stored rows are upcast for the forward).
            ids: int64 global ids of the row space ``[R]`` (dropout keys).
            layer: ``layer(i, h) -> out``: conv call ``i`` on the strategy's block from ``h [R, d_i]``; ``out``
                holds the outputs of the first ``D <= R`` rows.
            stored_input: where :attr:`reads_stored_input`, conv call 0 gets ``x`` as stored rather than its upcast
                copy (the same values once :meth:`step` upcasts them: a strategy moves the stored bytes).

        Returns:
            The forward's output ``[R, classes]``.
        """
        up = self.upcast(x)
        stored = x if stored_input and self.first_reads_input and up is not x else None
        return self._run(self.net, up, ids, layer, self.num_layers, stored=stored)[0]

    def _run(self, module: nn.Module, x: Tensor, ids: Tensor, layer, limit: int | None,
             states: list | None = None, stored: Tensor | None = None) -> tuple[Tensor, _Run]:
        state = _Run(self, ids, x.shape[0], layer, limit)
        state.given, state.stored = x, stored
        if states is not None:
            states.append(state)
        convs = _convs(module)
        saved = [conv.__dict__.get("forward") for conv in convs]  # an instance's own forward, if it has one
        for conv, own in zip(convs, saved):
            conv.forward = _proxy(state, conv, own or conv.forward)
        given = {"edge_weight": state.weight_stand_in} if self.takes_weight else {}
        try:
            with state:
                out = module(x, state.stand_in, **given)
        finally:
            for conv, own in zip(convs, saved):
                if own is None:
                    del conv.forward
                else:
                    conv.forward = own
        if limit is not None and len(state.calls) != limit:
            raise ForwardUseError(f"its forward called {len(state.calls)} convs, {limit} at validation; graphscale "
                                  "needs the same conv calls on every forward")
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != x.shape[0]:
            shape = list(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ForwardUseError(f"its forward returns {shape} for {x.shape[0]} vertices; graphscale needs one "
                                  "output row per vertex")
        return out, state

    def step(self, l: int, block: Block, h_src: Tensor, h0_dst: Tensor | None = None, *,
             pre_applied: bool = False, defer_relu: bool = False) -> Tensor:
        """Conv call ``l`` on ``block`` (the user's code around it runs in :meth:`run`).

        Shapes:
            h_src ``[S, d_l]`` -> ``[D, *]``.
        """
        self._check_step(l, h_src, None, check_h0=False)
        if h_src.shape[0] != block.num_src:
            raise ValueError(f"step {l}: h_src has {h_src.shape[0]} rows, the block has {block.num_src} sources")
        return self.layers[l](block, self.upcast(h_src))

    def forward(self, blocks: list[Block] | Block, x: Tensor) -> Tensor:
        """The model on one full block (every layer) or on ``L`` chained sampled blocks (module docstring).

        Shapes:
            x ``[S_0, in]`` -> ``[D_{L-1}, classes]``.
        """
        if isinstance(blocks, Block):
            blocks = [blocks] * self.num_layers
        if len(blocks) != self.num_layers:
            raise ValueError(f"{self.label} calls {self.num_layers} convs but got {len(blocks)} blocks")
        if x.shape[0] != blocks[0].num_src:
            raise ValueError(f"x has {x.shape[0]} rows but blocks[0] has {blocks[0].num_src} source rows")
        ids = blocks[0].src_ids
        for l in range(1, self.num_layers):
            b = blocks[l]
            if b.num_src != blocks[l - 1].num_dst or (b is not blocks[l - 1]
                                                      and not torch.equal(b.src_ids, ids[: b.num_src])):
                raise ValueError(f"blocks do not chain as prefixes: blocks[{l}]'s sources are not the first rows "
                                 f"of blocks[0]'s ({self.label} runs its own forward on blocks[0]'s sources)")
        out = self.run(x, ids, lambda l, h: self.step(l, blocks[l], h[: blocks[l].num_src]))
        return out[: blocks[-1].num_dst]

    def prepare_block(self, block: Block) -> None:
        """Build every conv's adjacency (or edge list) of ``block`` now, kept with its topology."""
        dtype = next(self.parameters()).dtype
        for layer in self.layers:
            layer.prepare(block, dtype)

    def aggregate(self, l: int, block: Block, h_src: Tensor) -> Tensor:
        raise NotImplementedError(f"{self.label} runs its own forward; no strategy splits it into halves")

    def update(self, l: int, x_agg: Tensor, h_dst: Tensor, dst_ids: Tensor, h0_dst: Tensor | None = None) -> Tensor:
        raise NotImplementedError(f"{self.label} runs its own forward; no strategy splits it into halves")

    # ------------------------------------------------------------ validation
    def _fail(self, err: Exception) -> ValueError:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, ForwardUseError):
            return ValueError(f"{self.label}: {first}")
        return ValueError(f"{self.label}: its forward fails on graphscale's rows: {type(err).__name__}: {first}")

    def _trace(self, module: nn.Module, graph: Graph) -> tuple[list[nn.Module], list[int], int]:
        """The conv calls of one eval-mode forward on the probe graph, their input widths, the output width."""
        block = Block.full(graph)
        training = [m.training for m in module.modules()]
        module.eval()
        dtype = next((p.dtype for p in module.parameters() if not isinstance(p, nn.parameter.UninitializedParameter)),
                     torch.float32)
        states: list[_Run] = []
        try:
            with torch.no_grad():
                out, state = self._run(module, graph.x.to(dtype), block.src_ids,
                                       lambda i, h: run_conv(states[0].calls[i], block, h), None, states)
        except Exception as err:  # noqa: BLE001 - a user's forward: one line naming it
            raise self._fail(err) from None
        finally:
            for m, mode in zip(module.modules(), training):
                m.train(mode)
        if not state.calls:
            raise ValueError(f"{self.label}: its forward calls none of its convs")
        self.__dict__["weighted_calls"] = state.weighted
        return state.calls, state.widths, int(out.shape[1])

    def weight_refusal(self) -> str | None:
        """Why this model cannot train on a weighted graph, or ``None``: its forward takes no ``edge_weight``, or a
        conv call is not passed it (that conv would train without the weights), or a conv takes none."""
        if not self.takes_weight:
            return (f"{self.label}: the graph has edge weights (edge_weight), but its forward takes no edge_weight, "
                    "so its convs would train without them; add an edge_weight argument passed to its convs, or "
                    "delete the weights (del data.edge_weight)")
        for i, (layer, given) in enumerate(zip(self.layers, self.weighted_calls)):
            why = weight_refusal(layer.conv, f"conv call {i}", self.label)
            if why:
                return why
            if not given:
                return (f"{self.label}: the graph has edge weights (edge_weight), but conv call {i} "
                        f"({class_name(layer.conv)}) is not passed its forward's edge_weight, so it would train "
                        "without them; pass edge_weight to every conv, or delete the weights (del data.edge_weight)")
        return None

    def _check_rows(self, graph: Graph) -> tuple[bool, bool]:
        """Refuse a forward that mixes rows, or that draws masks keyed dropout cannot key (module docstring): on a
        float64 copy, the probe graph whole (eval mode) against a sampled batch with full neighbourhoods, then one
        training-mode forward. Returns whether the first conv call's input requires grad there, and whether it is
        the forward's ``x`` itself."""
        model = copy.deepcopy(self).double()
        x = graph.x.double()
        targets = torch.tensor([0, _PROBE_NODES // 2])
        blocks = [Block.from_nodes(graph, targets)]
        for _ in range(model.num_layers - 1):
            blocks.insert(0, Block.from_nodes(graph, blocks[0].src_ids))
        try:
            with torch.random.fork_rng(devices=[]):
                model.eval()
                with torch.no_grad():
                    whole = model(Block.full(graph), x)
                    part = model(blocks, x[blocks[0].src_ids])
                model.train()
                _, state = model._run(model.net, x, torch.arange(x.shape[0]), lambda l, h: model.step(
                    l, Block.full(graph), h), model.num_layers)
        except Exception as err:  # noqa: BLE001 - a user's forward: one line naming it
            raise self._fail(err) from None
        scale = float(whole.abs().max()) or 1.0
        if not torch.allclose(part, whole[targets], rtol=0.0, atol=_ROWS_RTOL * scale):
            for l, (layer, width) in enumerate(zip(self.layers, self.layer_widths())):  # a conv the cause?
                check_conv_rows(layer.conv, width, f"conv call {l}", self.label)
            raise ValueError(f"{self.label}: its forward mixes rows (a vertex's output depends on vertices outside "
                             "its receptive field: a pooling, a normalisation over the rows of a batch, ...), which a "
                             "partition or a mini-batch holds differently from the whole graph; graphscale needs "
                             "row-wise code between the convs")
        return state.grads[0], state.first_reads_input


#: vertices of the validation probe graph
_PROBE_NODES = 12


def _probe_graph(in_dim: int) -> Graph:
    """A fixed small graph for the dry runs: a ring both ways plus a chord per vertex, seeded features."""
    n = _PROBE_NODES
    v = torch.arange(n)
    src = torch.cat([v, (v + 1) % n, (v + 5) % n])
    dst = torch.cat([(v + 1) % n, v, v])
    gen = torch.Generator().manual_seed(0)
    return Graph.from_edges(src, dst, n, x=torch.randn(n, in_dim, generator=gen, dtype=torch.float64))


def _convs(module: nn.Module) -> list[nn.Module]:
    """The message-passing convs of ``module`` (not those nested inside another conv), in registration order."""
    mp = message_passing_class()
    out: list[nn.Module] = []
    for name, sub in module.named_modules():
        if isinstance(sub, mp) and not any(name.startswith(f"{prefix}.") for prefix, _ in out):
            out.append((name, sub))
    return [sub for _, sub in out]


def _proxy(state: _Run, conv: nn.Module, forward):
    """``conv.forward`` while a forward runs on rows: :meth:`_Run.conv_call` (``forward``: the conv's own)."""
    def proxy(*args, **kwargs):
        return state.conv_call(conv, forward, *args, **kwargs)

    return proxy
