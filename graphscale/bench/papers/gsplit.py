"""``graphscale bench minibatch``: data parallelism against split parallelism (GSplit's Tables 1, 2, 4 and 5).

For one dataset and ``W`` workers it samples epochs of inputs exactly as the
strategies do (``data-parallel``: ``W`` micro-batches of ``B / W`` targets per
iteration, each sampled on its own; ``split-parallel``: one mini-batch of ``B``
targets, split by owner) and counts, single-threaded and in one process:

* **Table 1 analogue** - host->device feature bytes and worker<->worker feature
  bytes per epoch for the ``none`` (DGL), ``pagraph`` and ``quiver`` caches and
  for split parallelism at each cache fraction, with the split-parallel shuffle
  bytes (forward + backward) alongside; the goal column checks that split
  parallelism loads every missing row exactly once (``|V0 \\ C| * d * s``).
  ``--ledger`` re-runs one epoch of each system with the real strategies on
  ``W`` workers and prints the bytes their Ledgers recorded next to these counts.
* shuffle rows and bytes per layer and direction (the model's split mode, and
  the halo mode for comparison);
* **Table 2 analogue** - edges computed per epoch, ``W`` micro-batches against one
  mini-batch, and the redundancy ``sum_i |E_micro_i| / |E_mini| - 1``;
* **Table 4 analogue** - single-thread seconds to sample an epoch of
  micro-batches, and to sample and split an epoch of mini-batches; goal: the
  split adds at most 30% to split parallelism's sampling time;
* **Table 5 analogue** - edge skew and local-edge fraction of the METIS split
  against a random split, for several batch sizes;
* with ``--accuracy-epochs N``: test accuracy per epoch of ``single`` mini-batch,
  ``data-parallel`` (PaGraph cache) and ``split-parallel`` training with the
  model's preset (exact full-graph evaluation, features normalised as
  ``graphscale train`` does).

Volumes use the sampler keys of the strategies, so ``--ledger`` agrees with the
counts byte for byte. Times are wall-clock on this machine (numba kernels, one
thread); compare ratios, not absolute values.

Example::

    graphscale bench minibatch --dataset cora --workers 4 --layers 3 --fanout 20 --batch-size 32
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from graphscale.options import int_list


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register this benchmark's options on ``parser``."""
    from graphscale.flags import add_declared, add_own

    add_declared(parser, "dataset", default="cora", why="a graph that is always at hand")
    add_declared(parser, "workers", default=4, note="here: W, counted in one process (--ledger starts them)",
                 why="GSplit's 4 GPUs")
    add_declared(parser, "layers", default=3, why="GSplit's models")
    parser.add_argument("--fanout", type=int, default=20, help="neighbours sampled per vertex and layer (default 20)")
    add_declared(parser, "batch_size", default=4096, why="GSplit's B")
    parser.add_argument("--cache-fractions", type=_float_list, default=[0.0, 0.1, 0.25],
                        help="per-worker cache sizes as fractions of all vertices (default 0,0.1,0.25)")
    add_declared(parser, "model", default="sage", note="here: the model whose shuffle widths are counted",
                 why="GSplit's GraphSage")
    add_declared(parser, "hidden", default=16, why="GSplit's")
    add_declared(parser, "heads", default=4, why="a small count; GSplit gives none")
    add_own(parser, "--epochs", type=int, default=1, help="epochs of inputs to sample (default 1)",
            differs="epochs of sampled inputs only (--accuracy-epochs trains): nothing is trained or evaluated")
    parser.add_argument("--batches", type=int, default=0,
                        help="sample only this many iterations per epoch; 0 = all (default); volumes are "
                             "then per sampled iterations")
    parser.add_argument("--skew-batch-sizes", type=int_list, default=None,
                        help="batch sizes of the split-quality table (default B/4,B,4B)")
    add_declared(parser, "partitioner", note="here: the offline partitioner of the split")
    add_declared(parser, "seed", note="here: of the sampler, loader and partitioner")
    parser.add_argument("--ledger", action="store_true",
                        help="also run one epoch of every system on W workers and print its Ledger bytes")
    parser.add_argument("--accuracy-epochs", type=int, default=0,
                        help="also train single / data-parallel / split-parallel this many epochs (default 0)")
    parser.add_argument("--plot", default=None, metavar="PATH", help="also write a bar plot (PNG/PDF) of Table 1")


# ---------------------------------------------------------------------------------------- measurement
def _model(graph, name: str, hidden: int, layers: int, heads: int):
    from graphscale.config import ModelConfig
    from graphscale.nn.models import build_model

    return build_model(ModelConfig(name=name, hidden=hidden, layers=layers, heads=heads, dropout=0.0),
                       graph.num_features, graph.num_classes, seed=0)


def measure(graph, workers: int, fanouts: list[int], batch_size: int, fractions: list[float], model,
            epochs: int = 1, batches: int = 0, partitioner: str = "metis", seed: int = 0,
            skew_batch_sizes: list[int] | None = None) -> dict:
    """Sample and split epochs of inputs; return every table's rows (see the module docstring).

    Args:
        graph: the graph (with features and a training mask).
        workers: ``W``.
        fanouts: per-layer fanouts, input layer first.
        batch_size: ``B``.
        fractions: cache fractions.
        model: the model whose layer kinds and widths set the shuffle volumes.
        epochs: epochs to sample.
        batches: iterations per epoch to sample (0 = all).
        partitioner: offline partitioner name.
        seed: sampler / loader / partitioner seed.
        skew_batch_sizes: batch sizes of the split-quality table.

    Returns:
        ``{"table1", "shuffle", "table2", "table4", "table5", "goals", "info"}``, lists of row dicts
        (``goals`` and ``info`` are dicts).
    """
    import torch

    from graphscale.data.feature_cache import FeatureCache
    from graphscale.data.sampler import MiniBatchLoader, NeighborSampler
    from graphscale.registry import PARTITIONERS
    from graphscale.strategies.data_parallel import MicroBatchSchedule
    from graphscale.strategies.split_parallel import layer_kinds, shipped_widths, shuffle_backward, split_modes
    from graphscale.strategies.split_parallel.plan import SplitPlan
    from graphscale.strategies.split_parallel.split import HALO, SplitWorkspace, input_loads, split_minibatch

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {epochs}")
    if batches < 0:
        raise ValueError(f"--batches must be >= 0 (0 = whole epoch), got {batches}")
    if len(fanouts) != model.num_layers:
        raise ValueError(f"{len(fanouts)} fanouts for a {model.num_layers}-layer model")
    n, d = graph.num_nodes, graph.num_features
    elem = graph.x.element_size()
    row = d * elem
    train = torch.nonzero(graph.train_mask).flatten()
    degrees = graph.out_degrees()
    start = time.perf_counter()
    owner = PARTITIONERS.get(partitioner)().partition(graph, workers, seed=seed) if workers > 1 \
        else torch.zeros(n, dtype=torch.int64)
    partition_seconds = time.perf_counter() - start
    random_owner = PARTITIONERS.get("random")().partition(graph, workers, seed=seed) if workers > 1 \
        else torch.zeros(n, dtype=torch.int64)
    plans = {f: SplitPlan.build(owner, degrees, workers, f) for f in fractions}
    union = {f: torch.from_numpy(plans[f].cached_mask()) for f in fractions}
    base_plan = plans[fractions[0]]
    random_plan = SplitPlan.build(random_owner, degrees, workers, 0.0)
    kinds = layer_kinds(model)
    modes = split_modes(kinds)
    widths = shipped_widths(model)
    back = shuffle_backward(model)
    halo_widths = model.layer_widths()

    sampler = NeighborSampler(graph, fanouts, seed=seed)
    loader = MiniBatchLoader(train, batch_size, seed=seed)
    global_schedule = MicroBatchSchedule(train, batch_size, workers, seed)
    pagraph_schedule = MicroBatchSchedule(train, batch_size, workers, seed, owner)
    caches = {(policy, f): [FeatureCache.build(policy, graph, r, workers, f, own_train=pagraph_schedule.own[r],
                                               hops=len(fanouts), degrees=degrees) for r in range(workers)]
              for policy in ("pagraph", "quiver") for f in fractions}
    workspace = SplitWorkspace()
    # warm the numba kernels (compilation or cache load) outside the timed region
    warm = sampler.sample(train[: min(2, train.numel())], 0)
    split_minibatch(warm, base_plan, modes, workspace)
    torch.set_num_threads(1)

    mb_h2d = {f: 0 for f in fractions}
    dp_h2d = {(p, f): 0 for p in ("none", "pagraph", "quiver") for f in fractions}
    dp_p2p = {f: 0 for f in fractions}
    shuffle_rows = np.zeros(len(fanouts), np.int64)
    halo_rows = np.zeros(len(fanouts), np.int64)
    edges_mini = edges_micro = 0
    loads_once = True
    t_sample_sp = t_split = t_sample_dp = 0.0
    skew, local_frac, skew_random, local_random = [], [], [], []
    iterations = 0
    for epoch in range(epochs):
        todo = loader.batches(epoch)
        micro_global = global_schedule.iterations(epoch)
        micro_pagraph = pagraph_schedule.iterations(epoch)
        if batches:
            todo = todo[:batches]
        for i, targets in enumerate(todo):
            iterations += 1
            t0 = time.perf_counter()
            blocks = sampler.sample(targets, loader.batch_key(epoch, i))
            t1 = time.perf_counter()
            split = split_minibatch(blocks, base_plan, modes, workspace)
            t2 = time.perf_counter()
            t_sample_sp += t1 - t0
            t_split += t2 - t1
            edges_mini += split.num_edges()
            assert split.edges_per_split().sum() == split.num_edges()
            skew.append(split.edge_skew())
            local_frac.append(split.local_edges() / max(split.num_edges(), 1))
            shuffle_rows += [layer.shuffle_rows() for layer in split.layers]
            halo_rows += [layer.shuffle_rows() for layer in split_minibatch(blocks, base_plan, HALO, workspace).layers]
            rnd = split_minibatch(blocks, random_plan, modes, workspace)
            skew_random.append(rnd.edge_skew())
            local_random.append(rnd.local_edges() / max(rnd.num_edges(), 1))
            inputs = blocks[0].src_ids
            for f in fractions:
                missing = int((~union[f][inputs]).sum())
                loads = int(input_loads(inputs, plans[f]).sum()) if f != fractions[0] else int(split.loads().sum())
                loads_once &= loads == missing
                mb_h2d[f] += missing * row
            # data parallel: W independently sampled micro-batches (none / quiver slice the global batch,
            # pagraph trains each worker on its own training vertices)
            t3 = time.perf_counter()
            micro_blocks = [sampler.sample(t, global_schedule.batch_key(epoch, i, r)) if t.numel() else None
                            for r, t in enumerate(micro_global[i])]
            t_sample_dp += time.perf_counter() - t3
            for r, mb in enumerate(micro_blocks):
                if mb is None:
                    continue
                edges_micro += sum(b.num_edges for b in mb)
                ids = mb[0].src_ids
                for f in fractions:
                    dp_h2d[("none", f)] += ids.numel() * row
                    holder = caches[("quiver", f)][r].holder[ids]
                    dp_h2d[("quiver", f)] += int((holder < 0).sum()) * row
                    dp_p2p[f] += int(((holder >= 0) & (holder != r)).sum()) * row
            for r, t in enumerate(micro_pagraph[i]):
                if t.numel() == 0:
                    continue
                ids = sampler.sample(t, pagraph_schedule.batch_key(epoch, i, r))[0].src_ids
                for f in fractions:
                    dp_h2d[("pagraph", f)] += int((caches[("pagraph", f)][r].holder[ids] < 0).sum()) * row
    sweep = []
    for b in (skew_batch_sizes or sorted({max(1, batch_size // 4), batch_size, batch_size * 4})):
        sweep_loader = MiniBatchLoader(train, b, seed=seed)
        metis_s, metis_l, rnd_s, rnd_l = [], [], [], []
        for i, targets in enumerate(sweep_loader.batches(0)[: batches or None]):
            blocks = sampler.sample(targets, sweep_loader.batch_key(0, i))
            for plan, s_list, l_list in ((base_plan, metis_s, metis_l), (random_plan, rnd_s, rnd_l)):
                sp = split_minibatch(blocks, plan, modes, workspace)
                s_list.append(sp.edge_skew())
                l_list.append(sp.local_edges() / max(sp.num_edges(), 1))
        sweep.append({"batch": b, "iterations": len(metis_s), f"{partitioner} edge skew": float(np.mean(metis_s)),
                      f"{partitioner} local edges": float(np.mean(metis_l)), "random edge skew": float(np.mean(rnd_s)),
                      "random local edges": float(np.mean(rnd_l))})

    mib = 1024.0 ** 2
    table1 = []
    for f in fractions:
        for system in ("none", "pagraph", "quiver", "split-parallel"):
            if system == "split-parallel":
                h2d, p2p = mb_h2d[f], 0
                shuffle = int(sum(shuffle_rows[l] * widths[l] * elem * (2 if back[l] else 1)
                                  for l in range(len(widths))))
            else:
                h2d, p2p, shuffle = dp_h2d[(system, f)], dp_p2p[f] if system == "quiver" else 0, 0
            table1.append({"cache": f"{f:.0%}", "system": system, "host->device MiB": h2d / mib / epochs,
                           "worker<->worker features MiB": p2p / mib / epochs,
                           "shuffle MiB (fwd+bwd)": shuffle / mib / epochs,
                           "total MiB": (h2d + p2p + shuffle) / mib / epochs})
    shuffle_table = []
    for l in range(len(widths)):
        shuffle_table.append({"layer": l, "mode": modes[l], "rows/iter": shuffle_rows[l] / iterations,
                              "width": widths[l], "fwd MiB/epoch": shuffle_rows[l] * widths[l] * elem / mib / epochs,
                              "bwd MiB/epoch": (shuffle_rows[l] * widths[l] * elem if back[l] else 0) / mib / epochs,
                              "halo rows/iter": halo_rows[l] / iterations, "halo width": halo_widths[l],
                              "halo fwd MiB/epoch": halo_rows[l] * halo_widths[l] * elem / mib / epochs})
    table2 = [{f"{workers}x micro (B/{workers}) edges": edges_micro / epochs, "1x mini (B) edges": edges_mini / epochs,
               "redundancy %": 100.0 * (edges_micro / max(edges_mini, 1) - 1.0)}]
    table4 = [{"DP sample s": t_sample_dp / epochs, "SP sample s": t_sample_sp / epochs,
               "SP split s": t_split / epochs, "SP sample+split s": (t_sample_sp + t_split) / epochs,
               "split overhead %": 100.0 * t_split / max(t_sample_sp, 1e-12),
               "SP / DP time": (t_sample_sp + t_split) / max(t_sample_dp, 1e-12)}]
    table5 = [{"split": partitioner, "edge skew": float(np.mean(skew)), "local edges": float(np.mean(local_frac))},
              {"split": "random", "edge skew": float(np.mean(skew_random)),
               "local edges": float(np.mean(local_random))}]
    goals = {"split-parallel loads each missing row once (|V0 \\ C| d s)": bool(loads_once),
             "split-parallel redundant edges": 0,
             "split overhead <= 30% of sampling": table4[0]["split overhead %"] <= 30.0}
    info = {"iterations": iterations, "partition seconds": partition_seconds,
            "train vertices": int(train.numel()), "bytes per element": elem, "kinds": kinds}
    return {"table1": table1, "shuffle": shuffle_table, "table2": table2, "table4": table4, "table5": table5,
            "sweep": sweep, "goals": goals, "info": info, "raw": {"sp_h2d": mb_h2d, "dp_h2d": dp_h2d, "dp_p2p": dp_p2p,
                                                                     "shuffle_rows": shuffle_rows.tolist()}}


# ---------------------------------------------------------------------------------------- real runs
def _ledger_worker(env, dataset: str, runs: list[tuple[str, str, float]], model_cfg: dict, fanouts: list[int],
                   batch_size: int, seed: int, partitioner: str) -> list[dict]:
    """One epoch of every (strategy, cache, fraction) on this worker; its Ledger bytes per category."""
    from graphscale.config import ModelConfig, RunConfig, StrategyConfig
    from graphscale.data.datasets import load_dataset
    from graphscale.nn.models import build_model
    from graphscale.prepare import prepare_graph
    from graphscale.strategies.data_parallel import DataParallel
    from graphscale.strategies.split_parallel import SplitParallel

    graph = load_dataset(dataset)
    out = []
    for strategy_name, cache, fraction in runs:
        config = RunConfig(model=ModelConfig(**model_cfg),
                           strategy=StrategyConfig(name=strategy_name, workers=env.world_size, partitioner=partitioner,
                                                   fanouts=fanouts, batch_size=batch_size, cache=cache,
                                                   cache_fraction=fraction), seed=seed)
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=seed)
        strategy = (SplitParallel if strategy_name == "split-parallel" else DataParallel)()
        strategy.setup(prepare_graph(graph, config), model, env, config)
        out.append(strategy.train_epoch(0).bytes)
        strategy.teardown()
    return out


def _accuracy_worker(env, dataset: str, name: str, model_cfg: dict, fanouts: list[int], batch_size: int,
                     epochs: int, seed: int, cache: str) -> list[tuple[float, float]]:
    """Train ``name`` for ``epochs`` epochs; ``(val_acc, test_acc)`` after every epoch (exact full-graph)."""
    from graphscale.config import ModelConfig, OptimConfig, RunConfig, StrategyConfig, build_config
    from graphscale.data.datasets import load_dataset, normalize_features
    from graphscale.nn.models import build_model
    from graphscale.prepare import prepare_graph
    from graphscale.strategies.data_parallel import DataParallel
    from graphscale.strategies.single import SingleStrategy
    from graphscale.strategies.split_parallel import SplitParallel

    preset = build_config({"model": {"name": model_cfg["name"]}})
    graph = normalize_features(load_dataset(dataset), preset.data.feature_norm)  # as `graphscale train` does
    config = RunConfig(model=ModelConfig(**{**vars(preset.model), **model_cfg}),
                       optim=OptimConfig(lr=preset.optim.lr, weight_decay=preset.optim.weight_decay, epochs=epochs),
                       strategy=StrategyConfig(name=name, workers=env.world_size, fanouts=fanouts,
                                               batch_size=batch_size, minibatch=True, cache=cache), seed=seed)
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=seed)
    strategy = {"single": SingleStrategy, "data-parallel": DataParallel, "split-parallel": SplitParallel}[name]()
    strategy.setup(prepare_graph(graph, config), model, env, config)
    accs = []
    for epoch in range(epochs):
        strategy.train_epoch(epoch)
        metrics = strategy.evaluate()
        accs.append((metrics["val_acc"], metrics["test_acc"]))
    return accs


def run(args: argparse.Namespace) -> dict:
    """Load ``args.dataset``, measure, print the tables (and write the plot)."""
    import torch

    from graphscale.bench.table import save_bar_plot
    from graphscale.data.datasets import load_dataset
    from graphscale.distributed.launch import launch
    from graphscale.metrics.table import format_table

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.layers < 1 or args.fanout < 1:
        raise ValueError("--layers and --fanout must be >= 1")
    for f in args.cache_fractions:
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"--cache-fractions must lie in [0, 1], got {f}")
    graph = load_dataset(args.dataset)
    fanouts = [args.fanout] * args.layers
    model = _model(graph, args.model, args.hidden, args.layers, args.heads)
    threads = torch.get_num_threads()
    try:
        result = measure(graph, args.workers, fanouts, args.batch_size, args.cache_fractions, model,
                         epochs=args.epochs, batches=args.batches, partitioner=args.partitioner, seed=args.seed,
                         skew_batch_sizes=args.skew_batch_sizes)
    finally:
        torch.set_num_threads(threads)
    info = result["info"]
    head = (f"{graph.name} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {graph.num_features} features), "
            f"W={args.workers}, {args.layers} layers, fanout {args.fanout}, B={args.batch_size}, "
            f"{info['iterations']} iterations sampled, {args.model} hidden {args.hidden}")
    print(format_table(result["table1"], title=f"Table 1 analogue - feature bytes per epoch: {head}"))
    print()
    print(format_table(result["shuffle"], title="split-parallel shuffle per layer and direction (per epoch)"))
    print()
    print(format_table(result["table2"], title="Table 2 analogue - edges computed per epoch"))
    print()
    print(format_table(result["table4"], title="Table 4 analogue - single-thread seconds per epoch of inputs"))
    print()
    print(format_table(result["table5"], title="Table 5 analogue - split quality (mean over iterations)"))
    print(format_table(result["sweep"], title="split quality against the batch size"))
    print()
    print(format_table([{"goal": k, "value": str(v)} for k, v in result["goals"].items()], title="goals"))
    if args.ledger:
        runs = [(s, c, f) for f in args.cache_fractions for s, c in
                (("data-parallel", "none"), ("data-parallel", "pagraph"), ("data-parallel", "quiver"),
                 ("split-parallel", "none"))]
        model_cfg = {"name": args.model, "hidden": args.hidden, "layers": args.layers, "heads": args.heads,
                     "dropout": 0.0}
        per_worker = launch(_ledger_worker, args.workers, args.dataset, runs, model_cfg, fanouts, args.batch_size,
                            args.seed, args.partitioner, device="cpu")
        rows = []
        mib = 1024.0 ** 2
        for i, (s, c, f) in enumerate(runs):
            total = {}
            for worker in per_worker:
                for k, v in worker[i].items():
                    total[k] = total.get(k, 0) + v
            counted = result["raw"]["sp_h2d"][f] if s == "split-parallel" else result["raw"]["dp_h2d"][(c, f)]
            rows.append({"cache": f"{f:.0%}", "system": c if s == "data-parallel" else s,
                         "ledger h2d MiB": total.get("h2d", 0) / mib, "counted h2d MiB": counted / mib,
                         "ledger p2p MiB": total.get("p2p", 0) / mib, "ledger shuffle MiB": total.get("shuffle", 0) / mib,
                         "ledger allreduce MiB": total.get("allreduce", 0) / mib,
                         "ledger h2d_struct MiB": total.get("h2d_struct", 0) / mib})
        print()
        print(format_table(rows, title="Ledger of one real epoch on W workers (first epoch; --batches not applied)"))
        result["ledger"] = rows
    if args.accuracy_epochs > 0:
        model_cfg = {"name": args.model, "hidden": args.hidden, "layers": args.layers}
        if args.model == "gat":
            model_cfg["heads"] = args.heads
        curves = {}
        for name, workers, cache in (("single", 1, "none"), ("data-parallel", args.workers, "pagraph"),
                                     ("split-parallel", args.workers, "none")):
            curves[name] = launch(_accuracy_worker, workers, args.dataset, name, model_cfg, fanouts, args.batch_size,
                                  args.accuracy_epochs, args.seed, cache, device="cpu")[0]
        every = max(1, args.accuracy_epochs // 20)
        rows = [{"epoch": e, **{k: v[e][1] for k, v in curves.items()}} for e in range(args.accuracy_epochs)
                if e % every == 0 or e == args.accuracy_epochs - 1]
        print()
        print(format_table(rows, title=f"test accuracy per epoch ({args.model}, exact full-graph evaluation)"))
        summary = []
        for k, v in curves.items():
            best = max(range(len(v)), key=lambda e: (v[e][0], -e))
            summary.append({"strategy": k, "best val epoch": best, "val acc": v[best][0], "test acc at best val": v[best][1],
                            "final test acc": v[-1][1]})
        print(format_table(summary))
        result["accuracy"] = curves
    if args.plot:
        labels = [f"{r['system']}@{r['cache']}" for r in result["table1"]]
        path = save_bar_plot(args.plot, labels, {"host->device": [r["host->device MiB"] for r in result["table1"]],
                                                 "worker<->worker": [r["worker<->worker features MiB"]
                                                                     for r in result["table1"]],
                                                 "shuffle": [r["shuffle MiB (fwd+bwd)"] for r in result["table1"]]},
                             "MiB per epoch", f"feature bytes per epoch, {graph.name}")
        print(f"plot written to {path}")
    return result
