"""The model contract every strategy drives: :class:`GNN`, a list of block layers between row-wise input and output
maps, run whole, one step at a time or by halves (the models themselves: :mod:`graphscale.nn.models` and
:mod:`graphscale.nn.decoupled`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphscale.data.block import Block
from graphscale.nn.dropout import KeyedDropout
from graphscale.nn.layers import DeferredLinearReLU
from graphscale.nn.projected import aggregate_projected, project, projected_width


def relu_(out: Tensor) -> Tensor:
    """ReLU in place on a layer's fresh output (no new ``[N, d]`` tensor; its backward needs only the result,
    which it keeps); out of place on a view or a leaf that requires grad. Only for tensors the caller made:
    the layers' outputs here are always new tensors that no autograd node saved (autograd's version check
    would refuse the backward otherwise)."""
    return F.relu(out, inplace=out._base is None and not (out.is_leaf and out.requires_grad))


class GNN(nn.Module):
    """Base class: ``L`` message-passing layers on blocks plus row-wise input / output maps.

    Subclasses build ``layers`` and override :meth:`input_map`,
    :meth:`output_map`, :meth:`pre` (row-wise transform of a step's sources,
    dropout by default) and :meth:`post` (activation).

    Args:
        layers: the message-passing layers (see :mod:`graphscale.nn.layers`).
        widths: input width of each layer, ``len(layers)`` entries.
        dropout: dropout probability of the step dropouts.
        seed: dropout seed.

    Attributes:
        num_layers: number of message-passing layers ``L``.
        needs_h0: whether :meth:`step` needs the initial features of the destinations (GCNII).
    """

    needs_h0: bool = False
    #: Fuse step ``l``'s dropout into layer ``l``'s aggregation where the layer can (``fuses_dropout``) and
    #: :meth:`pre` is the plain keyed dropout: bit-identical, without the dropped ``[S, d_l]`` copy.
    fuse_dropout: bool = True
    #: The ``[model]`` options it reads besides ``name``, ``hidden``, ``layers`` and ``dropout`` (which every model
    #: reads); giving another is an error naming the models that read it (:func:`graphscale.config.check_given`).
    options: frozenset[str] = frozenset()
    #: ``standard``, or ``decoupled`` (:mod:`graphscale.nn.decoupled`)
    form = "standard"

    @classmethod
    def unused_options(cls, config) -> dict[str, str]:
        """Options of :attr:`options` that ``config``'s other settings leave unread, each with the reason."""
        return {}

    def __init__(self, layers: list[nn.Module], widths: list[int], dropout: float, seed: int) -> None:
        super().__init__()
        if not layers:
            raise ValueError("a GNN needs at least one message-passing layer (model.layers >= 1)")
        if len(widths) != len(layers):
            raise ValueError("one input width per layer expected")
        self.layers = nn.ModuleList(layers)
        self.num_layers = len(layers)
        self.dropout = float(dropout)
        self.seed = int(seed)
        self.epoch = 0
        self._widths = [int(w) for w in widths]
        self.drops = nn.ModuleList(KeyedDropout(dropout, site=l, seed=seed) for l in range(self.num_layers))

    # ------------------------------------------------------------------ keys
    def set_epoch(self, epoch: int) -> None:
        """Key every dropout mask of the model by ``epoch``."""
        self.epoch = int(epoch)
        for module in self.modules():
            if module is not self and hasattr(module, "set_epoch"):
                module.set_epoch(epoch)

    def layer_widths(self) -> list[int]:
        """Width ``d_l`` of the tensor entering each step ``l`` (for communication volumes)."""
        return list(self._widths)

    def prepare_block(self, block: Block) -> None:
        """Build now what steps on ``block`` keep with its topology (nothing here; a PyG model's adjacency), so a
        strategy that counts a block's topology tensors when it sets up counts them too."""

    def user_module(self) -> nn.Module:
        """The module the user gave, sharing this model's parameters: the model itself for graphscale's models, the
        PyG module a wrapper runs (:mod:`graphscale.nn.pyg`, :mod:`graphscale.nn.pyg_forward`)."""
        return self

    # ------------------------------------------------------------ row-wise
    @property
    def learned_input_map(self) -> bool:
        """Whether :meth:`input_map` is learned (GCNII, ResGCN+): else step 0 reads the input features themselves."""
        return type(self).input_map is not GNN.input_map

    def upcast(self, x: Tensor) -> Tensor:
        """Input feature rows as the model computes on them: rows stored in bfloat16 (``--feature-dtype``) upcast
        to the parameters' dtype (exact), right where they enter the model; other rows as they are.

        A learned :meth:`input_map` gets upcast rows (:meth:`forward`); otherwise step 0 takes the stored rows
        (from :meth:`forward`, or gathered by a strategy) and its keyed dropout reads them into a float32 output
        (:func:`~graphscale.nn.dropout.keyed_dropout`: no separate float32 copy), or :meth:`step` upcasts them
        where the dropout is the identity."""
        if x.dtype != torch.bfloat16:
            return x
        return x.to(next(self.parameters()).dtype)

    def input_map(self, x: Tensor, ids: Tensor) -> Tensor:
        """Row-wise map of the input features (identity here). Shapes: ``[N, in]`` -> ``[N, d_0]``."""
        return x

    def output_map(self, h: Tensor, ids: Tensor) -> Tensor:
        """Row-wise map of the last layer's output (identity here). Shapes: ``[N, d_L]`` -> ``[N, classes]``."""
        return h

    def pre(self, l: int, h: Tensor, ids: Tensor) -> Tensor:
        """Row-wise transform of step ``l``'s inputs before the layer: keyed dropout (site ``l``)."""
        return self.drops[l](h, ids)

    def post(self, l: int, out: Tensor) -> Tensor:
        """Activation after layer ``l`` (ReLU, in place, except after the last layer)."""
        return out if l == self.num_layers - 1 else relu_(out)

    # ------------------------------------------------------------ layers
    def _check_step(self, l: int, h, h0_dst: Tensor | None, check_h0: bool = True) -> None:
        if not 0 <= l < self.num_layers:
            raise ValueError(f"layer index {l} out of range for a {self.num_layers}-layer model")
        if len(h.shape) != 2 or h.shape[1] != self._widths[l]:
            raise ValueError(f"step {l}: input must be [rows, {self._widths[l]}], got {tuple(h.shape)}")
        if check_h0 and self.needs_h0 and h0_dst is None:
            raise ValueError(f"step {l}: {type(self).__name__} needs h0_dst (the input_map output of the "
                             "destination rows)")

    def step(self, l: int, block: Block, h_src: Tensor | DeferredLinearReLU, h0_dst: Tensor | None = None, *,
             pre_applied: bool = False, defer_relu: bool = False) -> Tensor | DeferredLinearReLU:
        """Run layer ``l`` on ``block``: pre (dropout keyed by ``block.src_ids``), layer, activation.

        Args:
            l: layer index in ``[0, L)``.
            block: the layer's block.
            h_src: inputs of the block's source rows; or step ``l - 1``'s deferred output (``defer_relu``).
            h0_dst: ``input_map`` output of the destination rows (GCNII only).
            pre_applied: ``h_src`` already is ``pre(l, ., src_ids)`` of the inputs. ``pre`` is row-wise and keyed
                by global ids, so a strategy may apply it to the rows it owns before exchanging them (one
                transformed copy of its own rows instead of one of every source row).
            defer_relu: where layer ``l`` ends in its dense product and ReLU, return them unevaluated
                (:class:`~graphscale.nn.layers.DeferredLinearReLU`) for step ``l + 1`` on the same rows to fuse
                with its own first product (:meth:`forward` does this when :meth:`takes_deferred` ``(l + 1)``).

        Returns:
            The destinations' outputs.

        Shapes:
            h_src ``[S, d_l]``, h0_dst ``[D, d_0]`` -> ``[D, d_{l+1}]``.
        """
        self._check_step(l, h_src, h0_dst)
        if h_src.shape[0] != block.num_src:
            raise ValueError(f"step {l}: h_src has {h_src.shape[0]} rows, the block has {block.num_src} sources")
        layer = self.layers[l]
        if isinstance(h_src, DeferredLinearReLU) and (pre_applied or not self.takes_deferred(l)):
            h_src = h_src.compute()
        stored = h_src.dtype == torch.bfloat16  # stored rows: the keyed dropout reads them into float32
        keep = None if pre_applied or stored else self._fused_dropout(l, block, h_src)
        relu = self._fuses_relu(l)
        kwargs = {"relu": True, "defer_relu": defer_relu} if relu else {}
        if keep is not None:
            kwargs["src_dropout"] = keep
        elif not isinstance(h_src, DeferredLinearReLU):  # (deferred: pre fuses, and is the identity here)
            h_src = self.upcast(h_src if pre_applied else self.pre(l, h_src, block.src_ids))  # upcast: pre the identity
        out = layer(block, h_src, h0_dst, **kwargs) if self.needs_h0 else layer(block, h_src, **kwargs)
        return out if relu else self.post(l, out)

    def _fuses_relu(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` lets layer ``l`` apply :meth:`post`'s ReLU itself (``fuses_relu``)."""
        return (type(self).post is GNN.post and l < self.num_layers - 1
                and getattr(self.layers[l], "fuses_relu", False))

    def takes_deferred(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` fuses step ``l - 1``'s deferred dense product and ReLU (``defer_relu``) into
        its own first product: :meth:`pre` fuses into layer ``l``, which takes deferred inputs
        (``takes_deferred``)."""
        return self.fuses_pre(l) and getattr(self.layers[l], "takes_deferred", False)

    def fuses_pre(self, l: int) -> bool:
        """Whether :meth:`step` ``l`` fuses :meth:`pre` into layer ``l``'s first product when given raw inputs
        (``pre_applied=False``): then a strategy may pass it raw rows (its own and received ones) instead of
        materialising ``pre`` of its rows first."""
        return bool(self.fuse_dropout and getattr(self.layers[l], "fuses_dropout", False) and type(self).pre is GNN.pre)

    def _fused_dropout(self, l: int, block: Block, h_src: Tensor):
        """Step ``l``'s dropout as a :class:`~graphscale.nn.dropout.RowKeep` for layer ``l`` to fuse, or ``None``
        (not fusable here, or the dropout is inactive: then :meth:`pre` is applied as usual)."""
        if not self.fuses_pre(l):
            return None
        return self.drops[l].keep(block.src_ids, h_src.shape[1])

    # ------------------------------------------------------- projected steps
    def projected_width(self, l: int) -> int | None:
        """Width of step ``l``'s projected rows where the step can run split at its projection
        (:mod:`graphscale.nn.projected`: GCN, GraphSAGE, GAT layers in a model that keeps :meth:`step`), else
        ``None``."""
        if type(self).step is not GNN.step or self.needs_h0:
            return None
        return projected_width(self.layers[l])

    def project(self, l: int, h: Tensor, ids: Tensor) -> tuple[Tensor, Tensor | None]:
        """The first half of step ``l`` on some rows: :meth:`pre` (keyed by their global ids ``ids``; fused into
        the projection where the layer fuses it, so no dropped copy is made), then layer ``l``'s projection.
        Row-wise: a strategy may project the rows it owns and exchange the projected rows.

        Returns:
            ``(z, local)`` (:func:`~graphscale.nn.projected.project`): the projected rows and the rows' own
            destination term (GraphSAGE's root term; ``None`` for GCN and GAT).

        Shapes:
            h ``[N, d_l]`` -> ``[N, projected_width(l)]``.
        """
        self._check_step(l, h, None, check_h0=False)
        if self.projected_width(l) is None:
            raise ValueError(f"step {l}: {type(self.layers[l]).__name__} does not run split at a projection")
        keep = None
        if self.fuses_pre(l) and h.dtype != torch.bfloat16:
            keep = self.drops[l].keep(ids, h.shape[1])
        if keep is None:
            h = self.upcast(self.pre(l, h, ids))  # stored bfloat16 rows: the keyed dropout reads them into float32
        return project(self.layers[l], h, keep)

    def step_projected(self, l: int, block: Block, z_src: Tensor, local_dst: Tensor | None) -> Tensor:
        """The second half of step ``l``: aggregate the sources' projected rows ``z_src`` (:meth:`project` of
        every source row), add the destinations' own term ``local_dst`` and the bias, then :meth:`post`. With
        :meth:`project` this equals :meth:`step` up to float rounding (the order ``A (x W)`` where step may run
        ``(A x) W``).

        Shapes:
            z_src ``[S, projected_width(l)]``, local_dst ``[D, *]`` -> ``[D, d_{l+1}]``.
        """
        return self.post(l, aggregate_projected(self.layers[l], block, z_src, local_dst))

    def aggregate(self, l: int, block: Block, h_src: Tensor) -> Tensor:
        """Sparse half of step ``l``: ``layers[l].aggregate(block, pre(l, h_src))``.

        Together with :meth:`update` this equals :meth:`step`. When
        ``layers[l].linear_aggregate`` is true the result may be cached and its
        backward needs only the topology (the pre-transform is keyed dropout,
        whose backward needs only ids).

        Shapes:
            h_src ``[S, d_l]`` -> ``[D, *]``.
        """
        self._check_step(l, h_src, None, check_h0=False)
        keep = self._fused_dropout(l, block, h_src)
        if keep is not None:
            return self.layers[l].aggregate(block, h_src, src_dropout=keep)
        return self.layers[l].aggregate(block, self.pre(l, h_src, block.src_ids))

    def update(self, l: int, x_agg: Tensor, h_dst: Tensor, dst_ids: Tensor, h0_dst: Tensor | None = None) -> Tensor:
        """Dense half of step ``l``: ``post(layers[l].update(x_agg, pre(l, h_dst), h0_dst))``.

        Args:
            l: layer index.
            x_agg: output of :meth:`aggregate` for the destinations.
            h_dst: the step's *raw* inputs of the destination rows (``h_src[:num_dst]``).
            dst_ids: global ids of the destination rows (key of their dropout masks).
            h0_dst: ``input_map`` output of the destinations (GCNII only).

        Shapes:
            x_agg ``[D, *]``, h_dst ``[D, d_l]`` -> ``[D, d_{l+1}]``.
        """
        self._check_step(l, h_dst, h0_dst)
        z_dst = self.pre(l, h_dst, dst_ids)
        layer = self.layers[l]
        out = layer.update(x_agg, z_dst, h0_dst) if self.needs_h0 else layer.update(x_agg, z_dst)
        return self.post(l, out)

    def forward(self, blocks: list[Block] | Block, x: Tensor) -> Tensor:
        """The whole model on a list of blocks (one per layer) or one block used by every layer.

        Args:
            blocks: ``L`` chained blocks (``blocks[l].dst_ids == blocks[l+1].src_ids``) or one full block.
            x: input features of ``blocks[0]``'s source rows.

        Returns:
            Logits of ``blocks[-1]``'s destination rows.

        Shapes:
            x ``[S_0, in]`` -> ``[D_{L-1}, classes]``.
        """
        if isinstance(blocks, Block):
            blocks = [blocks] * self.num_layers
        if len(blocks) != self.num_layers:
            raise ValueError(f"{type(self).__name__} has {self.num_layers} layers but got {len(blocks)} blocks")
        if x.shape[0] != blocks[0].num_src:
            raise ValueError(f"x has {x.shape[0]} rows but blocks[0] has {blocks[0].num_src} source rows")
        for l in range(1, self.num_layers):
            if blocks[l].num_src != blocks[l - 1].num_dst:
                raise ValueError(f"blocks do not chain: blocks[{l}] has {blocks[l].num_src} sources but "
                                 f"blocks[{l - 1}] has {blocks[l - 1].num_dst} destinations")
        h = self.input_map(self.upcast(x) if self.learned_input_map else x, blocks[0].src_ids)
        h0 = h if self.needs_h0 else None
        for l, block in enumerate(blocks):
            defer = l + 1 < self.num_layers and self.takes_deferred(l + 1)
            h = self.step(l, block, h, None if h0 is None else h0[: block.num_dst], defer_relu=defer)
        return self.output_map(h, blocks[-1].dst_ids)
