"""``graphscale bench offload``: HongTu's hardware-independent results, measured on this machine.

Prints four tables:

1. **Replication factor vs number of subgraphs** (the paper's Table 3):
   ``α_N = Σ_p |V_p ∪ N_in(V_p)| / |V|`` for METIS into ``N`` parts.
2. **Host traffic per layer pass, normalised to |V|** (Table 8) for ``M``
   workers and ``M*K`` chunks: the baseline's ``α_{MK}``, the reduction by
   inter-worker dedup, by intra-worker reuse and by the reorganisation, each
   also in percent of the baseline, and the chunks' edge balance (``max/mean``
   in-edges over the ``M*K`` chunks). These are the closed forms of
   :mod:`graphscale.strategies.offload.cost`, which the test suite asserts
   equal to the strategy's measured Ledger byte for byte.
3. **Modelled transfer time of one layer pass** ``C = V_H/B_H + V_P/B_P +
   V_R/B_R`` with A100-class links (labelled *modelled*; no GPU is involved).
4. **Measured runs** (spawned workers, CPU): peak per-worker memory against
   ``K`` (Fig. 10; each doubling of ``K`` and its cut), against the
   graph-parallel strategy on the same graph at identical loss, the measured
   host traffic per layer pass of each dedup mode, and whether every measured
   Ledger category equals its closed form.

5. **Host-to-device rate** (``--device``, e.g. ``cuda``; measured in the same run): a plain copy of one
   contiguous page-locked buffer, the transfer pipeline's gathers of random rows (``uva`` where the device
   offers it, and ``staged``; :mod:`graphscale.strategies.offload.transfer`), and the effective rate of
   offload training epochs (Ledger host-to-device bytes / epoch seconds, in-process, one worker) on
   ``--link-graph``, with the default streamed topology and with the resident one (which lets ``auto`` take
   ``uva``); every rate also as a fraction of the plain copy's. On CPU the "device" is the host: the
   rates are memory-copy rates.

Synthetic graphs are chosen for replication factors like the paper's:
``it-like`` (a strongly clustered SBM: α 1.2 -> 1.6, it-2004 1.23 -> 1.71),
``paper-like`` and ``friendster-like`` (R-MAT: α grows to ~9 and ~11 at 128
edge-balanced parts, ~8 and ~10 with ``metis:balance=vertices``; ogbn-paper 8.5, friendster 10.7).
"""

from __future__ import annotations

import argparse
import time

from graphscale.bench.table import split_specs
from graphscale.metrics.table import format_table
from graphscale.options import int_list

GRAPHS = {
    "it-like": "sbm:nodes={n},degree=20,homophily=0.97,classes=256,features=0,seed=0",
    "paper-like": "rmat:nodes={n},degree=18,features=0,seed=0",
    "friendster-like": "rmat:nodes={n},degree=24,features=0,seed=0",
    "cora": "cora",
}
DEDUPS = ("baseline", "inter", "intra", "reorg")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench offload``."""
    from graphscale.flags import add_declared, add_own

    parser.add_argument("--graphs", default="it-like,paper-like,friendster-like,cora",
                        help=f"comma-separated graphs for tables 1-3 among {', '.join(GRAPHS)}, or dataset specs")
    parser.add_argument("--nodes", type=int, default=100_000, help="vertices of the synthetic graphs (default 100000)")
    add_own(parser, "--parts", type=int_list, default=[2, 4, 8, 16, 32, 64, 128],
            help="subgraph counts of the replication-factor table (default 2,...,128)",
            differs="subgraph counts a closed-form table is computed for (HongTu's chunks), not a store's partitions")
    add_declared(parser, "workers", default=4, note="here: M of the traffic table (a closed form: no processes)",
                 why="HongTu's 4 GPUs")
    parser.add_argument("--total-chunks", type=int_list, default=[32, 128],
                        help="total chunks M*K of the traffic table (default 32,128: the paper's Table 8)")
    add_declared(parser, "hidden", default=128, note="here: the row width of the modelled time",
                 why="HongTu's width for the large graphs")
    parser.add_argument("--train-graphs", default="cora,sbm:nodes=20000,degree=10,features=128,seed=0",
                        help="comma-separated ';'-free dataset specs of the measured runs (commas inside a spec "
                             "are kept: a new spec starts at a known dataset name)")
    parser.add_argument("--train-workers", type=int, default=2, help="workers of the measured runs (default 2)")
    parser.add_argument("--mem-chunks", type=int_list, default=[1, 2, 4, 8, 16, 32],
                        help="K of the measured memory sweep (default 1,2,4,8,16,32)")
    add_declared(parser, "model", note="here: of the measured runs")
    parser.add_argument("--skip-measured", action="store_true", help="print only the closed-form tables")
    add_own(parser, "--device", default="cpu", help="device of the host-to-device rate table (default cpu)",
            differs="one torch device of a measured copy, cuda:i included, not a run's auto/cpu/cuda")
    parser.add_argument("--link-rows", type=int, default=1_000_000,
                        help="rows of the host array the gathers read (default 1000000)")
    parser.add_argument("--link-width", type=int, default=128, help="row width (fp32) of that array (default 128)")
    parser.add_argument("--link-batch", type=int, default=200_000, help="rows per gathered batch (default 200000)")
    parser.add_argument("--link-graph", default="sbm:nodes=20000,degree=10,features=128,seed=0",
                        help="graph of the effective-rate training epochs ('none' skips them)")
    parser.add_argument("--link-chunks", type=int, default=8, help="--chunks of those epochs (default 8)")
    parser.add_argument("--skip-link", action="store_true", help="skip the host-to-device rate table")


def _load(name: str, nodes: int):
    from graphscale.data.datasets import load_dataset

    spec = GRAPHS.get(name, name).format(n=nodes)
    graph = load_dataset(spec)
    graph.name = name
    return graph


# ----------------------------------------------------------------------------- closed-form tables
def replication_table(graphs: list, parts: list[int]) -> list[dict]:
    """Table 3: α_N for METIS into N parts, per graph."""
    from graphscale.partition.base import replication_factor
    from graphscale.registry import PARTITIONERS

    rows = []
    for graph in graphs:
        row = {"graph": graph.name, "|V|": graph.num_nodes, "|E|": graph.num_edges}
        for n in parts:
            owner = PARTITIONERS.get("metis")().partition(graph, n, seed=0)
            row[str(n)] = round(1.0 + replication_factor(graph, owner, n), 2)
        rows.append(row)
    return rows


def traffic_rows(graph, workers: int, total: int, width: int) -> tuple[dict, dict]:
    """One Table 8 row and one modelled-time row for ``workers`` x ``total // workers`` chunks."""
    from graphscale.partition.metrics import balance
    from graphscale.strategies.offload.cost import Bandwidths, layer_pass_rows, pass_cost
    from graphscale.strategies.offload.plan import ChunkSets, two_level_partition
    from graphscale.strategies.offload.reorg import reorganize

    k = total // workers
    owner, chunk = two_level_partition(graph, workers, k, "metis", seed=0)
    start = time.perf_counter()
    batch = reorganize(graph, owner, chunk, workers, k, width, 4)
    reorg_s = time.perf_counter() - start
    identity = ChunkSets.build(graph, owner, chunk, workers, k)
    rows = {d: layer_pass_rows(identity, d) for d in ("baseline", "inter", "intra")}
    rows["reorg"] = layer_pass_rows(ChunkSets.build(graph, owner, batch, workers, k), "intra")
    v = graph.num_nodes
    host = {d: r.host / v for d, r in rows.items()}
    base = host["baseline"]

    def pct(x: float) -> str:
        return f"{x:.2f} ({100 * x / base:.1f}%)"

    traffic = {"graph": graph.name, "M x K": f"{workers} x {k}", "alpha (baseline)": round(base, 2),
               "+inter cut": pct(base - host["inter"]), "+intra cut": pct(host["inter"] - host["intra"]),
               "+reorg cut": pct(host["intra"] - host["reorg"]),
               "total cut": f"{100 * (base - host['reorg']) / base:.1f}%",
               "V_P/|V|": round(rows["intra"].p2p / v, 2), "V_R/|V|": round(rows["reorg"].reuse / v, 2),
               "chunk edge bal": round(balance(identity.num_edges.flatten().numpy()), 3), "reorg s": round(reorg_s, 2)}
    bw = Bandwidths()
    cost = {d: pass_cost(r, width, 4, bw) for d, r in rows.items()}
    modelled = {"graph": graph.name, "M x K": f"{workers} x {k}",
                **{f"{d} ms": round(1e3 * c, 3) for d, c in cost.items()},
                "speed-up": round(cost["baseline"] / cost["reorg"], 2)}
    return traffic, modelled


# ----------------------------------------------------------------------------- measured runs
def _measure_worker(env, spec: str, model_name: str, chunks: list[int]) -> list[dict]:
    """One spawned worker: graph-parallel, then offload for every K and dedup mode; two epochs each."""
    from graphscale.config import ModelConfig, RunConfig, StrategyConfig
    from graphscale.data.datasets import load_dataset
    from graphscale.nn.models import build_model
    from graphscale.prepare import prepare_graph
    from graphscale.strategies.graph_parallel import GraphParallel
    from graphscale.strategies.offload import OffloadStrategy
    from graphscale.strategies.offload.cost import epoch_bytes

    graph = load_dataset(spec)
    out = []
    k_max = max(chunks)
    runs = [("graph-parallel", 1, "-", "auto")] + [("offload", k, "reorg", "auto") for k in chunks] + \
        [("offload", k_max, d, "auto") for d in ("baseline", "inter", "intra")] + \
        [("offload", k_max, "reorg", mode) for mode in ("hybrid", "recompute") if model_name in ("gcn", "sage")]
    for name, k, dedup, recompute in runs:
        config = RunConfig(model=ModelConfig(name=model_name, hidden=16, layers=2),
                           strategy=StrategyConfig(name=name, workers=env.world_size, chunks=k, recompute=recompute,
                                                   dedup=dedup if dedup != "-" else "reorg"))
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
        strategy = GraphParallel() if name == "graph-parallel" else OffloadStrategy()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        first = strategy.train_epoch(0)
        second = strategy.train_epoch(1)
        row = {"strategy": name, "K": k, "dedup": dedup, "recompute": recompute, "loss": [first.loss, second.loss],
               "peak": second.peak_memory, "bytes": second.bytes, "seconds": second.seconds}
        if name == "offload":
            num_params = sum(p.numel() for p in model.parameters())
            row["closed_form"] = epoch_bytes(strategy.sets, dedup, strategy.modes, strategy.dims, 4, num_params)
            row["modes"] = strategy.modes
            row["widths"] = list(strategy.dims.widths)
            row["modelled_s"] = second.extra["modelled_transfer_seconds"]
            row["num_nodes"] = graph.num_nodes
        strategy.teardown()
        out.append(row)
    return out


def measured_tables(spec: str, workers: int, model_name: str, chunks: list[int]) -> tuple[list, list]:
    """Fig. 10 / memory-vs-graph-parallel rows and measured traffic rows of one graph."""
    from graphscale.distributed.launch import launch

    results = launch(_measure_worker, workers, spec, model_name, chunks, device="cpu", timeout_s=600)
    merged = []
    for runs in zip(*results):
        row = dict(runs[0])
        row["peak"] = max(r["peak"] for r in runs)
        total: dict[str, int] = {}
        for r in runs:
            for cat, n in r["bytes"].items():
                total[cat] = total.get(cat, 0) + n
        row["bytes"] = total
        merged.append(row)
    gp = merged[0]
    memory, traffic = [], []
    previous = None
    for row in merged[1:1 + len(chunks)]:
        cut = "" if previous is None else f"{100 * (1 - row['peak'] / previous):.0f}%"
        memory.append({"graph": spec, "K": row["K"], "peak MiB/worker": round(row["peak"] / 2**20, 2),
                       "cut vs K/2": cut, "graph-parallel / offload": round(gp["peak"] / row["peak"], 2),
                       "loss epoch 1": f"{row['loss'][1]:.6f}", "graph-parallel loss": f"{gp['loss'][1]:.6f}",
                       "modes": "/".join(row["modes"]),
                       "ledger = closed form": "yes" if row["bytes"] == row["closed_form"] else "NO"})
        previous = row["peak"]
    k = max(chunks)
    for row in [r for r in merged[1 + len(chunks):]] + [r for r in merged[1:1 + len(chunks)] if r["K"] == k]:
        v, widths = row["num_nodes"], row["widths"]
        fwd_bwd = sum(1 + (m == "recompute") for m in row["modes"])
        per_pass = (row["bytes"].get("h2d_local", 0) + row["bytes"].get("h2d_remote", 0)) / 4
        weight = sum((1 + (m == "recompute")) * d for m, d in zip(row["modes"], widths))  # bytes = 4 rows weight
        traffic.append({"graph": spec, "M x K": f"{workers} x {k}", "dedup": row["dedup"],
                        "recompute": f"{row['recompute']}: " + "/".join(row["modes"]),
                        "host rows / pass / |V|": round(per_pass / weight / v, 3),
                        "neighbour host MiB/epoch": round(per_pass * 4 / 2**20, 2),
                        "p2p rows / pass / |V|": round(row["bytes"].get("p2p", 0) / 4 / weight / v, 3),
                        "reuse rows / pass / |V|": round(row["bytes"].get("reuse", 0) / 4 / weight / v, 3),
                        "epoch MiB moved": round(sum(n for c, n in row["bytes"].items() if c != "reuse") / 2**20, 1),
                        "modelled transfer ms/epoch": round(1e3 * row["modelled_s"], 3),
                        "neighbour passes": fwd_bwd,
                        "ledger = closed form": "yes" if row["bytes"] == row["closed_form"] else "NO"})
    return memory, traffic


# ----------------------------------------------------------------------------- host-to-device rate
def _timed(kit, fn) -> float:
    kit.synchronize()
    start = time.perf_counter()
    fn()
    kit.synchronize()
    return time.perf_counter() - start


def link_rows(device: str, rows: int, width: int, batch: int, batches: int = 8, repeats: int = 3) -> list[dict]:
    """Rates (GB/s) of a plain pinned copy and of the pipeline's gathers, measured here, best of ``repeats``."""
    import torch

    from graphscale.strategies.offload.device import DeviceKit
    from graphscale.strategies.offload.transfer import Request, Transfers, pipelined

    if min(rows, width, batch) < 1:
        raise ValueError("--link-rows, --link-width and --link-batch must be >= 1")
    kit = DeviceKit(device)
    gen = torch.Generator().manual_seed(0)
    host = torch.randn(rows, width, generator=gen)
    registered = kit.register(host)
    ids = [torch.randint(0, rows, (batch,), generator=gen) for _ in range(batches)]
    dev_ids = [i.to(kit.device) for i in ids]
    nbytes = batches * batch * width * 4
    plain = kit.staging(batch * width, torch.float32)
    plain_s = min(_timed(kit, lambda: [kit.to_device(plain) for _ in range(batches)]) for _ in range(repeats))
    base = nbytes / plain_s / 1e9
    out = [{"device": str(kit.device), "mechanism": "plain pinned copy (contiguous)", "GB/s": round(base, 2),
            "x plain": 1.0, "check": "-"}]
    for mode in ("uva", "staged"):
        if mode == "uva" and not kit.accelerated:  # forced on CPU it would read the host array itself
            out.append({"device": str(kit.device), "mechanism": "pipeline gather (uva)", "GB/s": "n/a",
                        "x plain": "-", "check": "-"})
            continue
        try:
            transfers = Transfers({"H": host}, kit.device, mode=mode, device_ids=True)
        except ValueError:
            out.append({"device": str(kit.device), "mechanism": f"pipeline gather ({mode})", "GB/s": "n/a",
                        "x plain": "-", "check": "-"})
            continue
        got: list = []

        def gather(got=got, transfers=transfers) -> None:
            got.clear()
            for _, j, rows_ in pipelined(transfers, range(batches),
                                         lambda j: [Request("x", "H", ids[j], dev_ids[j])]):
                got.append(rows_["x"])

        seconds = min(_timed(kit, gather) for _ in range(repeats))
        same = all(bool((g.cpu() == host.index_select(0, i)).all()) for g, i in zip(got, ids))
        transfers.close()
        rate = nbytes / seconds / 1e9
        out.append({"device": str(kit.device), "mechanism": f"pipeline gather ({mode})", "GB/s": round(rate, 2),
                    "x plain": round(rate / base, 2), "check": "yes" if same else "NO"})
    if registered:
        kit.unregister(host)
    return out


def epoch_rate_row(device: str, spec: str, chunks: int, plain_gbs: float, resident: bool = False) -> dict:
    """Effective host-to-device rate of offload training epochs: the Ledger's h2d bytes / epoch seconds."""
    import torch

    from graphscale.config import ModelConfig, RunConfig, StrategyConfig
    from graphscale.data.datasets import load_dataset
    from graphscale.distributed.env import DistEnv
    from graphscale.nn.models import build_model
    from graphscale.prepare import prepare_graph
    from graphscale.strategies.offload import OffloadStrategy

    graph = load_dataset(spec)
    config = RunConfig(model=ModelConfig(name="gcn", hidden=128, layers=2),
                       strategy=StrategyConfig(name="offload", workers=1, chunks=chunks))
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0).to(device)
    strategy = OffloadStrategy(resident_topology=resident)
    strategy.setup(prepare_graph(graph, config), model, DistEnv.local(device), config)
    strategy.train_epoch(0)  # warm-up: allocations, staging slots
    stats = [strategy.train_epoch(e) for e in (1, 2)]
    mode, resident = strategy.transfers.mode, strategy.dplan.resident
    strategy.teardown()
    h2d = sum(n for c, n in stats[-1].bytes.items() if c.startswith("h2d"))
    seconds = min(s.seconds for s in stats)
    rate = h2d / seconds / 1e9
    del torch
    return {"device": device, "mechanism": f"offload epoch, {spec}, K={chunks} ({mode}, "
                                           f"{'resident' if resident else 'streamed'} topology)",
            "GB/s": round(rate, 2), "x plain": round(rate / plain_gbs, 2) if plain_gbs else "-",
            "check": f"{h2d / 2**30:.2f} GiB h2d in {seconds:.3f} s"}


def run(args: argparse.Namespace) -> int:
    """Print the tables (module docstring)."""
    if args.workers < 1 or args.train_workers < 1:
        raise ValueError("--workers and --train-workers must be >= 1")
    for total in args.total_chunks:
        if total % args.workers:
            raise ValueError(f"--total-chunks {total} is not a multiple of --workers {args.workers}")
    graphs = [_load(name, args.nodes) for name in split_specs(args.graphs)]
    print(format_table(replication_table(graphs, args.parts),
                       title="Replication factor alpha_N vs number of subgraphs N (METIS; Table 3 analogue)"))
    traffic, modelled = [], []
    for graph in graphs:
        for total in args.total_chunks:
            if total > graph.num_nodes:
                continue
            t, m = traffic_rows(graph, args.workers, total, args.hidden)
            traffic.append(t)
            modelled.append(m)
    print(format_table(traffic, title="Host traffic per layer pass / |V| (Table 8 analogue; closed forms, "
                                      "asserted equal to the measured Ledger in the tests)"))
    print(format_table(modelled, title=f"MODELLED transfer time of one layer pass, width {args.hidden}, fp32, "
                                       "A100-class links (B_H 25 GB/s, B_P 200 GB/s, B_R 1.5 TB/s)"))
    if not args.skip_link:
        link = link_rows(args.device, args.link_rows, args.link_width, args.link_batch)
        if args.link_graph != "none":
            for resident in (False, True):
                link.append(epoch_rate_row(args.device, args.link_graph, args.link_chunks, link[0]["GB/s"],
                                           resident))
        print(format_table(link, title=f"MEASURED host-to-device rate on {args.device}, this run: plain pinned copy vs "
                                       f"the offload transfer pipeline ({args.link_batch} random rows x "
                                       f"{args.link_width} fp32 per batch)"))
    if args.skip_measured:
        return 0
    memory, measured = [], []
    for spec in split_specs(args.train_graphs):
        m, t = measured_tables(spec, args.train_workers, args.model, args.mem_chunks)
        memory += m
        measured += t
    print(format_table(memory, title=f"MEASURED peak device memory per worker vs K, {args.train_workers} CPU "
                                     f"workers, {args.model} hidden 16, epoch 1 (Fig. 10 analogue)"))
    print(format_table(measured, title=f"MEASURED traffic per neighbour-load pass at the largest K, "
                                       f"{args.train_workers} CPU workers (Ledger)"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser()
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))
