"""``graphscale bench task``'s cost sections: bytes per epoch (``comm``), per-worker memory (``memory``) and the
replication factor alpha (``replication``), each against the closed forms of spec §3 (see
:mod:`graphscale.bench.papers.neutrontask.task`)."""

from __future__ import annotations

import math
import statistics

from graphscale.bench.papers.neutrontask.runs import (
    GP,
    TP,
    TP_TD,
    Section,
    graph_spec,
    load,
    model_of,
    total_bytes,
    tp_flags,
    tp_model,
    tp_plan,
    train_run,
)
from graphscale.bench.table import format_bytes, split_specs
from graphscale.bench.tools.memory import node_data_bytes, worker_rows

#: average degree from which a graph counts as dense in the comm summary (the paper's reddit: 492; products: 51)
DENSE_DEGREE = 20


def comm(args) -> Section:
    """Bytes per epoch, graph parallelism against TP and TP+TD (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    from graphscale.partition.base import halo_sizes
    from graphscale.prepare import build_vertex_partitioner
    from graphscale.strategies.graph_parallel import (
        allreduce_bytes_per_epoch,
        halo_bytes_per_epoch,
        projected_exchanges,
    )
    from graphscale.strategies.pipeline.reference import learned_input
    from graphscale.strategies.task_parallel.chain import H2D, epoch_bytes

    out = Section("comm")
    rows, ratios = [], {"dense": [], "sparse": []}
    h2d_share = []
    for name in split_specs(args.graphs):
        graph = load(name, args)
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo = halo_sizes(graph, owner, args.workers).tolist()
        alpha = 1 + sum(halo) / graph.num_nodes
        degree = graph.num_edges / graph.num_nodes
        for layers in args.depths:
            measure = graph.num_nodes <= args.measure_nodes and layers in args.measure_depths
            model = model_of(graph, layers, args.hidden)
            params = sum(p.numel() for p in model.parameters())
            gp = (halo_bytes_per_epoch(halo, model.layer_widths(), 4, learned_input(model),
                                       projected=projected_exchanges(model, 4))
                  + allreduce_bytes_per_epoch(params, args.workers, 4) + allreduce_bytes_per_epoch(1, args.workers, 8))
            closed = {"graph-parallel": {"total": gp}}
            plans = {}
            for label, decoupled in (("TP", False), ("TP+TD", True)):
                plans[label] = tp_plan(graph, layers, args, decoupled)
                closed[label] = epoch_bytes(tp_model(graph, layers, args.hidden, decoupled), plans[label],
                                            graph.num_nodes, max(graph.num_features, 1), 4)
                closed[label]["total"] = sum(closed[label].values())
            row = {"graph": name, "|V|": graph.num_nodes, "avg deg": round(degree, 1), "alpha": round(alpha, 2),
                   "L": layers, "TP+TD plan": plans["TP+TD"].describe()}
            for label in ("graph-parallel", "TP", "TP+TD"):
                row[label] = format_bytes(closed[label]["total"])
            if measure:
                flags = {"graph-parallel": GP, "TP": tp_flags(TP, plans["TP"]), "TP+TD": tp_flags(TP_TD, plans["TP+TD"])}
                checks = []
                for label in ("graph-parallel", "TP", "TP+TD"):
                    report = train_run(args, out, label, graph_spec(name, args), flags[label], args.workers, 2, layers)
                    if report is None:
                        checks.append(f"{label} failed")
                        continue
                    ledger = report["final"]["bytes_per_epoch"]
                    if label == "graph-parallel":
                        same = total_bytes(report) == gp
                    else:
                        same = {k: v for k, v in ledger.items() if v} == {k: v for k, v in closed[label].items()
                                                                          if k != "total" and v}
                    checks.append(f"{label} {'yes' if same else 'NO: ' + str(ledger)}")
                row["closed form = Ledger (trained)"] = "; ".join(checks)
            for label in ("TP", "TP+TD"):
                row[f"{label} / GP"] = closed[label]["total"] / gp
                ratios["dense" if degree >= DENSE_DEGREE else "sparse"].append(
                    (label, closed[label]["total"] / gp, (closed[label]["total"] - closed[label][H2D]) / gp))
            row[f"TP+TD {H2D} share"] = closed["TP+TD"][H2D] / closed["TP+TD"]["total"]
            h2d_share.append(row[f"TP+TD {H2D} share"])
            rows.append(row)
            out.data.setdefault("comm", []).append((f"{name} L={layers}", gp, closed["TP"]["total"],
                                                    closed["TP+TD"]["total"]))
    columns = ["graph", "|V|", "avg deg", "alpha", "L", "TP+TD plan", "graph-parallel", "TP", "TP+TD", "TP / GP",
               "TP+TD / GP", f"TP+TD {H2D} share", "closed form = Ledger (trained)"]
    rows = [{c: r.get(c, "") for c in columns} for r in rows]
    out.tables.append(((f"Bytes per epoch on {args.workers} workers, GCN H={args.hidden}, fp32, closed forms (Fig. 15 "
                       f"analogue); graph-parallel: {args.partitioner} partition, halo + gradient all-reduce + loss; "
                       f"TP (coupled) / TP+TD (decoupled): stage chain + {H2D} feature rows (read twice: T "
                       f"recomputation) + loss; graphs of <= {args.measure_nodes} vertices also trained (2 epochs, "
                       f"L in {args.measure_depths}), "
                       "their Ledger checked against the closed forms category by category"), rows))
    for kind, triples in ratios.items():
        for label in ("TP", "TP+TD"):
            values = [(v, w) for lab, v, w in triples if lab == label]
            if values:
                mean = statistics.mean(v for v, _ in values)
                without = statistics.mean(w for _, w in values)
                out.notes.append(f"{label} against graph-parallel on the {kind} graphs (avg deg "
                                 f"{'>=' if kind == 'dense' else '<'} {DENSE_DEGREE}): {100 * (mean - 1):+.1f}% on "
                                 f"average ({100 * (without - 1):+.1f}% without the {H2D} feature stream); paper: "
                                 "TP+TD -54.2%, TP above graph-parallel on sparse graphs")
    if h2d_share:
        out.notes.append(f"the {H2D} feature stream (N F b, twice with T recomputation) is {100 * min(h2d_share):.0f}-"
                         f"{100 * max(h2d_share):.0f}% of TP+TD's bytes")
    return out


def boundary_rows(graph, chunk_of, lay, mode: str = "causal") -> list[int]:
    """``|B_i|`` of every subgraph ``i`` of an epoch's layout: the vertices of other subgraphs whose rows the kept
    edges into subgraph ``i`` read (what a P worker caches for it)."""
    import torch

    from graphscale.data.block import Block
    from graphscale.strategies.task_parallel.chunks import block_keep

    full = Block.full(graph)
    keep = block_keep(full, chunk_of, lay.sub, mode)
    dst_sub = lay.sub[chunk_of[full.dst_of_edges()[keep]]]
    src = full.indices[keep]
    outside = lay.sub[chunk_of[src]] != dst_sub
    pairs = torch.unique(dst_sub[outside] * graph.num_nodes + src[outside])
    return torch.bincount(pairs // graph.num_nodes, minlength=lay.num_subgraphs).tolist()


def _tp_memory_rows(args, name: str, graph, label: str, report: dict, plan, decoupled: bool, layers: int) -> list:
    """Per worker of a task-parallel run: the tracked peak's parts (``extra["memory"]``) against MR_tp (P workers)
    and ID_tp (T workers) of spec §3.2 / §3.4."""
    from graphscale.metrics.memory import SAVED
    from graphscale.strategies.task_parallel.chain import (
        BLOCKS,
        CACHES,
        KEPT_INPUTS,
        PARAMETERS,
        SENDS,
        T_ROWS,
        group_sizes,
    )
    from graphscale.strategies.task_parallel.chunks import assign_chunks, chunk_members, layout

    model = tp_model(graph, layers, args.hidden, decoupled)
    m = 4 * math.lcm(*group_sizes(plan))  # the runs' --subgraphs 4 x the largest group (num_chunks)
    chunk_of = assign_chunks(graph, m, "partitioner", args.partitioner, "", 0)
    lay = layout(m, 4, 0, 0)
    sizes = [sum(chunk_members(chunk_of, m)[c].numel() for c in lay.chunks(s)) for s in range(4)]
    boundary = boundary_rows(graph, chunk_of, lay)
    if decoupled:
        t_dims, p_width = model.t_dims, [graph.num_classes] * layers
    else:
        t_dims = [model.layers[0].in_dim] + [layer.out_dim for layer in model.layers]
        p_width = t_dims[1:]
    epoch = max(report["epochs"], key=lambda e: sum(e["peak_memory_per_worker"]))
    rows = []
    for rank, (extra, tracked) in enumerate(zip(epoch["extra_per_worker"], epoch["peak_memory_per_worker"])):
        kind, stage, _ = extra["role"]
        parts = extra.get("memory", {})
        row = {"graph": name, "strategy": label, "worker": f"{rank} ({kind}{stage})",
               "parameters": format_bytes(parts.get(PARAMETERS, 0)), "caches": format_bytes(parts.get(CACHES, 0)),
               "intermediates": format_bytes(parts.get(SAVED, 0)), "kept T inputs": format_bytes(parts.get(KEPT_INPUTS, 0)),
               "blocks": format_bytes(parts.get(BLOCKS, 0)), "T rows in flight": format_bytes(parts.get(T_ROWS, 0)),
               "sends in flight": format_bytes(parts.get(SENDS, 0)),
               "tracked": format_bytes(tracked)}
        if kind == "P":
            a, b = plan.p_layers[stage]
            mr = (sum(sizes) + sum(boundary)) * sum(p_width[a:b]) * 4
            row["MR formula"] = format_bytes(mr)
            row["measured / formula"] = parts.get(CACHES, 0) / mr
        else:
            a, b = plan.t_layers[stage]
            ident = max(sizes) * sum(t_dims[l] + t_dims[l + 1] for l in range(a, b)) * 4
            row["ID formula"] = format_bytes(ident)
            row["measured / formula"] = parts.get(SAVED, 0) / ident
        rows.append(row)
    return rows


def _memory_totals(report: dict) -> tuple[int, int, int | None, int | None]:
    """Tracked peaks summed over the workers and the largest worker's; the OS-measured anonymous growth above each
    worker's start (:func:`~graphscale.bench.tools.memory.worker_rows`), summed and the largest (``None`` where the OS
    did not say for every worker)."""
    rows = worker_rows("", "", report)
    tracked = [r["tracked"] or 0 for r in rows] or [0]
    grown = [r["anon_above_baseline"] for r in rows]
    known = bool(grown) and None not in grown
    return sum(tracked), max(tracked), sum(grown) if known else None, max(grown) if known else None


def memory(args) -> Section:
    """Per-worker memory: the formulas' parts against the tracked and OS-measured peaks (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    from graphscale.partition.base import halo_sizes, partition_sizes
    from graphscale.prepare import build_vertex_partitioner

    out = Section("memory")
    rows, totals = [], []
    layers = 2
    for name in split_specs(args.memory_graphs):
        graph = load(name, args)
        model = model_of(graph, layers, args.hidden)
        widths = model.layer_widths() + [graph.num_classes]
        params = sum(p.numel() for p in model.parameters())
        owner = build_vertex_partitioner(args.partitioner).partition(graph, args.workers, seed=0)
        halo, inner = halo_sizes(graph, owner, args.workers).tolist(), partition_sizes(owner, args.workers).tolist()
        plans = {"TP": tp_plan(graph, layers, args, False), "TP+TD": tp_plan(graph, layers, args, True)}
        runs = {label: train_run(args, out, label, graph_spec(name, args), flags, args.workers, 2, layers)
                for label, flags in (("graph-parallel", GP), ("TP", tp_flags(TP, plans["TP"])),
                                     ("TP+TD", tp_flags(TP_TD, plans["TP+TD"])))}
        gp = runs["graph-parallel"]
        for label, report in runs.items():
            if report is None:
                continue
            final = report["final"]
            if label == "graph-parallel":
                for rank, tracked in enumerate(final.get("peak_memory_per_worker") or []):
                    # spec §3.2 / §3.4 for this worker: MR = (|B_i| + |V_i|) sum_l d_l, ID = 2 |V_i| sum_l d_{l+1}
                    mr = (halo[rank] + inner[rank]) * sum(widths[:layers]) * 4
                    ids = 2 * inner[rank] * sum(widths[1:layers + 1]) * 4
                    rows.append({"graph": name, "strategy": label, "worker": str(rank),
                                 "node data": format_bytes(node_data_bytes({"nodes": inner[rank],
                                                                             "features": graph.num_features})),
                                 "MR formula": format_bytes(mr), "ID formula": format_bytes(ids),
                                 "parameters": format_bytes(4 * params * 4), "tracked": format_bytes(tracked)})
            else:
                rows += _tp_memory_rows(args, name, graph, label, report, plans[label], label == "TP+TD", layers)
            measured = worker_rows(name, label, report)
            for rank, m in enumerate(measured):
                rows[-len(measured) + rank].update({
                    "OS peak RSS": format_bytes(m["rss_peak"]) if m["rss_peak"] else "",
                    "anon above start": (format_bytes(m["anon_above_baseline"])
                                         if m["anon_above_baseline"] is not None else "")})
            if gp is not None:
                (tot, top, grown, top_grown), (g_tot, g_top, g_grown, g_top_grown) = (_memory_totals(report),
                                                                                      _memory_totals(gp))
                totals.append({"graph": name, "strategy": label, "tracked, all workers": format_bytes(tot),
                               "vs graph-parallel": tot / g_tot - 1, "largest worker": format_bytes(top),
                               "largest vs graph-parallel": top / g_top - 1,
                               "OS anon above start, all workers": format_bytes(grown) if grown is not None else "",
                               "OS vs graph-parallel": (grown / g_grown - 1) if grown and g_grown else None,
                               "OS largest worker": format_bytes(top_grown) if top_grown is not None else "",
                               "OS largest vs graph-parallel": ((top_grown / g_top_grown - 1)
                                                                if top_grown and g_top_grown else None)})
    columns = ["graph", "strategy", "worker", "node data", "parameters", "caches", "intermediates", "kept T inputs",
               "blocks", "T rows in flight", "sends in flight",
               "MR formula", "ID formula", "measured / formula", "tracked", "anon above start", "OS peak RSS"]
    out.tables.append(((f"Peak memory per worker, {args.workers} workers, GCN {layers} layers H={args.hidden}, fp32, "
                       "2 epochs (Fig. 10 analogue). graph-parallel: the formulas for its rows (replicas MR = (|B_i| "
                       "+ |V_i|) sum_l d_l, intermediates ID = 2 |V_i| sum_l d_l+1) next to its tracked peak; "
                       "task-parallel: the tracked peak's parts (parameters + gradients + Adam; caches = P views and "
                       "P-backward gradient rows; intermediates = autograd-saved; the T inputs a non-first T stage "
                       "keeps for its recomputation; blocks = P blocks with their cached transposes; T rows in "
                       "flight = the rows read or received and the gradient received for one subgraph; sends in "
                       "flight = rows sent, not yet taken) against MR_tp = sum_i (|B_i| + |V_i|) L_w d (P workers, causal, "
                       "epoch 0: caches / MR) and ID_tp = max_i |V_i| sum_l (d_l + d_l+1) (T workers, one subgraph "
                       "in flight, a layer's input and output: intermediates / ID)"),
                      [{c: r.get(c, "") for c in columns} for r in rows]))
    out.tables.append((("Total memory against graph-parallel (paper: 49-67% less): tracked peaks, and the "
                        "OS-measured anonymous memory above each worker's start (peak anon - anon at worker start, "
                        "before it touched any data; it includes each worker's fixed runtime, about 110 MB here: "
                        "give graphs whose data dominate it, e.g. --memory-graphs "
                        "sbm:nodes=200000,degree=20,features=256,seed=0)"), totals))
    return out


def _alpha_cache(graph, partitioner: str):
    """``p -> alpha`` of ``graph``'s ``p``-way partition, each computed once."""
    from graphscale.strategies.task_parallel.plan import replication_alpha

    alphas: dict[int, float] = {}

    def alpha(p: int) -> float:
        if p not in alphas:
            alphas[p] = replication_alpha(graph, p, partitioner=partitioner)
        return alphas[p]
    return alpha


def replication(args) -> Section:
    """``alpha`` against the partition count, and what hybrid P groups save (:mod:`graphscale.bench.papers.neutrontask.task`)."""
    from graphscale.strategies.task_parallel.plan import make_plan

    out = Section("replication")
    rows, hybrid = [], []
    for name in split_specs(args.graphs):
        graph = load(name, args)
        alpha = _alpha_cache(graph, args.partitioner)
        row = {"graph": name, "avg deg": round(graph.num_edges / graph.num_nodes, 1)}
        for p in args.parts:
            row[f"p={p}"] = round(alpha(p), 2) if p <= graph.num_nodes else None
        fitted = [p for p in args.parts if p <= graph.num_nodes]
        if len(fitted) > 1:
            row[f"p={fitted[-1]} / p={fitted[0]}"] = alpha(fitted[-1]) / alpha(fitted[0])
        rows.append(row)
        for workers in args.hybrid_workers:
            plan = make_plan(workers, 2, t_workers=workers // 2)
            group = len(plan.p_groups[0])
            hybrid.append({"graph": name, "workers": workers, "plan": plan.describe(),
                           f"alpha graph-parallel ({workers} parts)": round(alpha(workers), 2),
                           "alpha P group": round(alpha(group), 2),
                           "reduction": alpha(workers) / alpha(group)})
    out.tables.append(((f"Replication factor alpha = 1 + sum |B_i| / |V| against the partition count, {args.partitioner} "
                       "(Table 2 analogue; papers100M: 1, 1.25, 1.52, 2.13, 3.02, 4.46, 6.34)"), rows))
    out.tables.append((("Hybrid parallelism (2-layer decoupled model, half the workers T, half P): the P groups' "
                       "alpha against graph parallelism's on all workers (paper: 1.25 vs 2.13, 1.7x)"), hybrid))
    return out
