"""Routing and messages of a task-parallel run (:mod:`.strategy`), and the rows a P member holds.

Every chunk of a subgraph moves from its owner in one segment to its owner in the next (:meth:`Exchange._route`):
tagged point-to-point sends (pipelined or held to the segment's end) and receives into buffers on the run's
device; a P group's members exchange mirror rows and their gradients with one ``all_to_all_v`` per subgraph and
layer. The routing tables (chunk owners, chunk members, global ids) stay on the host, where the host-shared graph
is; what is sent, received or computed on lives on ``self.device``.
"""

from __future__ import annotations

import torch

from graphscale.data.block import Block
from graphscale.strategies.exchange import RowExchange
from graphscale.strategies.task_parallel.chain import (
    _BWD,
    HALO,
    HOST_DEVICE,
    SENDS,
    TASK_BWD,
    Segment,
    _tag,
)
from graphscale.strategies.task_parallel.chunks import Layout, block_keep, masked_block
from graphscale.strategies.task_parallel.tasks import P


class Exchange:
    """The routing, message and P-row methods of :class:`~.strategy.TaskParallelStrategy` (a mixin: it uses the
    strategy's ``env``, ``comm``, ``groups``, ``segments``, ``members``, ``graph``, ``chunk_of``, ``device``,
    ``dtype``, ``tracker`` and the epoch's ``pending`` / ``deferred`` sends)."""

    # ------------------------------------------------------------ per-epoch routing
    def _owner(self, seg: Segment, lay: Layout) -> torch.Tensor:
        """The member of ``seg``'s group that owns every chunk this epoch."""
        size = len(seg.group)
        if size == 1:
            return torch.zeros(self.num_chunks, dtype=torch.int64, device=HOST_DEVICE)
        if seg.kind == P and self.plan.p_split == "subgraphs":
            return lay.sub % size
        return (lay.pos % lay.k) % size

    def _ids(self, chunks: list[int]) -> torch.Tensor:
        """The global ids of ``chunks``' rows, in that order (host: they index the host-shared graph)."""
        return (torch.cat([self.members[c] for c in chunks]) if chunks
                else torch.zeros(0, dtype=torch.int64, device=HOST_DEVICE))

    def _route(self, src: Segment, dst: Segment, owners: dict, lay: Layout, s: int, me_in_src: bool):
        """Per peer rank, the chunks of subgraph ``s`` moving between ``src`` and ``dst`` that involve me
        (``me_in_src``: I send them; else I receive them)."""
        mine = self.env.rank
        out: dict[int, list[int]] = {}
        for c in lay.chunks(s):
            a, b = src.group[int(owners[src.index][c])], dst.group[int(owners[dst.index][c])]
            if (a if me_in_src else b) == mine:
                out.setdefault(b if me_in_src else a, []).append(c)
        return out

    # ------------------------------------------------------------ messages
    def _send(self, rows: torch.Tensor, dst: int, category: str, tag: int) -> None:
        message = (rows.detach().contiguous(), dst, category, tag)
        if self.pipelined:
            self.pending.append((self.comm.send(*message[:3], tag=tag), message[0]))
        else:
            self.deferred.append(message)
        self._track_sends()

    def _track_sends(self) -> None:
        """Count the rows of the sends not yet completed (gloo holds them until the receiver took them)."""
        self.tracker.track("sends", *[rows for _, rows in self.pending], *[m[0] for m in self.deferred],
                           category=SENDS)

    def _end_segment(self) -> None:
        """A segment finished every subgraph: issue the sends it held back (serial schedule), then wait for all of
        its sends, so their rows are freed before the rank's next segment (or its backward) allocates its own.

        This cannot deadlock: a segment's messages go to the next segment in the phase's direction only, and the
        receivers post their receives in subgraph order without waiting for anything of this rank's later work."""
        for rows, dst, category, tag in self.deferred:
            self.pending.append((self.comm.send(rows, dst, category, tag=tag), rows))
        self.deferred = []
        for work, _ in self.pending:
            work.wait()
        self.pending = []
        self._track_sends()

    def _recv(self, peers: dict[int, list[int]], width: int, tag: int) -> list[tuple[list[int], torch.Tensor]]:
        """Receive the rows of the given chunks from every peer (posted together, then waited)."""
        works, out = [], []
        for peer, chunks in sorted(peers.items()):
            buf = torch.empty(int(sum(self.members[c].numel() for c in chunks)), width, dtype=self.dtype,
                              device=self.device)
            works.append(self.comm.recv(buf, peer, tag=tag))
            out.append((chunks, buf))
        for work in works:
            work.wait()
        return out

    def _recv_aligned(self, src: Segment, seg: Segment, s: int, ctx: dict, width: int, tag: int) -> torch.Tensor:
        """My rows of subgraph ``s`` in segment ``seg`` (my chunks' order), received from their owners in ``src``
        (straight into place where a peer's chunks lie back to back in my order)."""
        offsets = ctx["offsets_of"][seg.index][s]
        buf = torch.empty(ctx["ids"][seg.index][s].numel(), width, dtype=self.dtype, device=self.device)
        works, staged = [], []
        for peer, chunks in sorted(self._route(src, seg, ctx["owners"], ctx["lay"], s, False).items()):
            span = self._span(offsets, chunks)
            if span is not None:
                works.append(self.comm.recv(buf[span[0]: span[1]], peer, tag=tag))
            else:
                staged.append((chunks, torch.empty(int(sum(self.members[c].numel() for c in chunks)), width,
                                                   dtype=self.dtype, device=self.device)))
                works.append(self.comm.recv(staged[-1][1], peer, tag=tag))
        for work in works:
            work.wait()
        for chunks, rows in staged:
            start = 0
            for c in chunks:
                n = self.members[c].numel()
                buf[offsets[c]: offsets[c] + n] = rows[start: start + n]
                start += n
        return buf

    def _send_on(self, seg: Segment, out: torch.Tensor, offsets: dict, s: int, ctx: dict, category: str) -> None:
        """Send my rows of subgraph ``s`` (``out``, aligned with ``offsets``) to their owners in the next segment."""
        nxt = self.segments[seg.index + 1]
        for peer, chunks in sorted(self._route(seg, nxt, ctx["owners"], ctx["lay"], s, True).items()):
            self._send(self._rows_of(out, offsets, chunks), peer, category, _tag(ctx["phase"], nxt.index, s))

    def _send_back(self, seg: Segment, grad: torch.Tensor, offsets: dict, s: int, ctx: dict) -> None:
        """Send the gradient of my input rows of subgraph ``s`` to their owners in the previous segment."""
        prev = self.segments[seg.index - 1]
        for peer, chunks in sorted(self._route(seg, prev, ctx["owners"], ctx["lay"], s, True).items()):
            self._send(self._rows_of(grad, offsets, chunks), peer, TASK_BWD, _tag(_BWD, seg.index, s))

    def _span(self, offsets: dict, chunks: list[int]) -> tuple[int, int] | None:
        """``(start, end)`` of ``chunks``' rows when they lie back to back in that order (``offsets``), else None."""
        start = end = offsets[chunks[0]]
        for c in chunks:
            if offsets[c] != end:
                return None
            end += self.members[c].numel()
        return start, end

    def _rows_of(self, rows: torch.Tensor, offsets: dict, chunks: list[int]) -> torch.Tensor:
        """The rows of ``chunks`` (in that order) of ``rows`` (aligned with ``offsets``): a view where they lie back
        to back (one owner in the next segment: every row), else a copy."""
        span = self._span(offsets, chunks)
        if span is not None:
            return rows[span[0]: span[1]]
        return torch.cat([rows[offsets[c]: offsets[c] + self.members[c].numel()] for c in chunks])

    def _recv_grad(self, seg: Segment, s: int, ctx: dict) -> torch.Tensor:
        """The gradient of my output rows of subgraph ``s`` from the next segment."""
        nxt = self.segments[seg.index + 1]
        return self._recv_aligned(nxt, seg, s, ctx, self.split.out_width(seg.ops[-1]), _tag(_BWD, nxt.index, s))

    # ------------------------------------------------------------ P rows
    def _p_prepare(self, seg: Segment, ctx: dict) -> dict:
        """The segment's blocks (my rows of every subgraph, the mode's edges), the rows I hold and the mirror lists
        this epoch.

        A P member holds only its *own* rows (every subgraph's rows of the chunks it owns this epoch) and the rows
        its blocks read from other members (the mirrors): ``rows`` (global ids, ascending), and every index the
        segment uses (``ids[s]``: my rows of subgraph ``s``; ``src[s]``: its block's source rows; the mirror
        lists) is a position among them. A single-member group owns every chunk, so it holds all ``N`` rows. The
        blocks are built on the host from the host-shared graph and moved to the run's device with the indices."""
        lay, mode = ctx["lay"], ctx["mode"]
        owner = ctx["owners"][seg.index]
        own = ctx["ids"][seg.index]
        blocks = []
        for ids in own:
            blocks.append(masked_block(Block.from_nodes(self.graph, ids), self.chunk_of, lay.sub, mode)
                          if ids.numel() else None)
            self._give_back()  # a block's construction temporaries, before the next one's
        size = len(seg.group)
        mirrors: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        if size > 1:  # (u, reader) pairs: reader's kept edges read u, owned by another member
            full = Block.full(self.graph)
            keep = block_keep(full, self.chunk_of, lay.sub, mode)
            owner_v = owner[self.chunk_of]
            dst, src = full.dst_of_edges()[keep], full.indices[keep]
            cross = owner_v[dst] != owner_v[src]
            pairs = torch.unique(src[cross] * size + owner_v[dst][cross])
            u, reader = pairs // size, pairs % size
            u_sub, u_owner = lay.sub[self.chunk_of[u]], owner_v[u]
            me = self.group_member(seg)
            for s in range(lay.num_subgraphs):
                here = u_sub == s
                if not bool(here.any()):
                    continue
                send = [u[here & (u_owner == me) & (reader == m)] for m in range(size)]
                recv = [u[here & (u_owner == m) & (reader == me)] for m in range(size)]
                mirrors[s] = (send, recv)
        rows = torch.unique(torch.cat([*own, *[b.src_ids for b in blocks if b is not None],
                                       *[t for _, recv in mirrors.values() for t in recv]]))

        def local(t: torch.Tensor) -> torch.Tensor:
            return torch.searchsorted(rows, t).to(self.device)

        return {"rows": rows, "ids": [local(ids) for ids in own],
                "src": [None if b is None else local(b.src_ids) for b in blocks],
                "blocks": [None if b is None else b.to(self.device) for b in blocks],
                "mirrors": {s: RowExchange.from_lists([local(t) for t in send], [local(t) for t in recv])
                            for s, (send, recv) in mirrors.items()},
                "group": self.groups.get((P, seg.stage))}

    def _local(self, prep: dict, ids: torch.Tensor) -> torch.Tensor:
        """The positions of global ids ``ids`` (rows I hold) among the rows of a P segment (``prep["rows"]``)."""
        return torch.searchsorted(prep["rows"], ids).to(self.device)

    def group_member(self, seg: Segment) -> int:
        return seg.group.index(self.env.rank)

    def _exchange(self, prep: dict, view: torch.Tensor, s: int, category: str) -> None:
        """Forward mirrors: my rows of subgraph ``s`` that other members read go to them."""
        if s in prep["mirrors"]:
            prep["mirrors"][s].push(prep["group"], view, category)

    def _exchange_grad(self, prep: dict, grad: torch.Tensor, s: int) -> None:
        """Backward mirrors: the gradients I hold for other members' rows of subgraph ``s`` go to their owners."""
        if s in prep["mirrors"]:
            prep["mirrors"][s].pull(prep["group"], grad, HALO)
