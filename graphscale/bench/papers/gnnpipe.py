"""``graphscale bench pipeline``: GNNPipe's hardware-independent results, and its timings, on this machine.

Prints:

1. **Volume per epoch, graph parallelism vs pipeline vs hybrid** (the paper's Table 5 analogue) for GCN,
   GraphSAGE, GCNII and ResGCN+ at ``--layers`` layers on ``--stages`` workers, on Cora, MUSAE Facebook and
   synthetic graphs whose replication factor matches the paper's (Table 5's implied rho: Physics 1.07, Flickr 2.16,
   Reddit 2.61, Squirrel 3.57) plus one denser: graph parallelism's halo bytes for a METIS partition into
   ``--stages`` parts (:func:`~graphscale.strategies.graph_parallel.halo_bytes_per_epoch`), the pipeline's stage
   bytes (:func:`~graphscale.strategies.pipeline.plan.pipeline_bytes_per_epoch`), both the exact closed forms the
   tests hold the strategies' Ledgers to, and the hybrid's (``--stages / 2`` stages x 2-way graph parallelism,
   ``K = 4 --stages`` chunks, ``--hybrid-split`` chunks-first and parts-first: stage and group-halo bytes, the
   weight all-reduce left out as in the paper). Every graph's measured rho is printed; the geometric mean of
   graph / pipeline is given over the rho-matched graphs (the paper's 16 cells) and over all, next to the §3.7
   closed form ``rho L / ((S - 1) c)``. Counts are for the stage count asked, whatever runs here.
2. **Volume against depth** (Table 7 analogue): GCNII, graph parallelism linear in ``L``, the pipeline constant.
3. **Shallow models** (Table 8 analogue): ``--shallow-layers`` layers, graph parallelism on ``--stages`` parts
   against the hybrid of 2 stages x ``--stages / 2``-way graph parallelism (parts-first: the rho of ``--stages / 2``
   parts).
4. **Timings and memory** (unless ``--skip-timing``): real runs of ``--strategy pipeline`` (Cora, GCNII
   ``--accuracy-layers`` layers, ``--timing-workers`` workers, ``K`` = 4 per stage, ``--timing-epochs`` epochs):
   GPipe with fresh and with no cross-chunk gradients, 1F1B (no cross-chunk gradients) and the 2-way hybrid. Per
   stage: the bubble and transfer fractions measured from the per-stage timestamps (the strategy's timeline; the
   ideal GPipe bubble ``(S - 1) / (K + S - 1)`` beside them), the share of a hybrid's group halo exchanges (part
   of the compute time, not of the bubble or transfer), the stale-read fraction, the peak of the saved
   activations (tensors autograd keeps, tracked) and the OS-measured anonymous memory the training step added
   (peak minus the worker's start); then the memory table GPipe vs 1F1B per stage.
5. **Accuracy and ablation** (Fig. 10 analogue, unless ``--skip-accuracy``): the single-process chunked reference
   (:class:`~graphscale.strategies.pipeline.reference.ChunkedReference`, which the tests prove equal to the
   pipeline on any number of stages and either schedule) on Cora for GCNII (``--accuracy-layers``): the full
   method, without shuffling, with history period 1, with historical gradients, with none of the three, and
   without cross-chunk gradients (the semantics 1F1B runs); ResGCN+ (``--accuracy-layers``): the full method and
   without cross-chunk gradients; each against exact training (one chunk): test accuracy at the best validation
   epoch, the epochs to 95% of the exact run's best validation accuracy. Runs spread over ``--jobs`` processes.

``--plot PNG`` draws the Table 5 ratios (bars) and, in ``PNG``'s ``.depth`` sibling, the Table 7 volumes against
depth.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

from graphscale.bench.table import split_specs
from graphscale.metrics.table import format_table
from graphscale.metrics.units import format_bytes
from graphscale.options import int_list

#: the shared dataset directory (MUSAE Facebook lives in ``musae_facebook`` under it)
DATA_DIR = "/work/shared/data"
#: name -> (spec, the paper's dataset whose Table 5 rho the graph matches, that rho)
GRAPHS = {
    "cora": ("cora", "", None),
    "facebook": ("musae:{data}/musae_facebook", "", None),
    "sbm~physics": ("sbm:nodes={n},degree=7.3,homophily=0.8,features=64,seed=0", "Physics", 1.07),
    "sbm~flickr": ("sbm:nodes={n},degree=11,homophily=0.7,features=64,seed=0", "Flickr", 2.16),
    "sbm~reddit": ("sbm:nodes={n},degree=15,homophily=0.7,features=64,seed=0", "Reddit", 2.61),
    "sbm~squirrel": ("sbm:nodes={n},degree=23,homophily=0.7,features=64,seed=0", "Squirrel", 3.57),
    "sbm-dense": ("sbm:nodes={n},degree=40,homophily=0.6,features=64,seed=0", "", None),  # beyond: rho 5.3
}
MODELS = ("gcn", "sage", "gcnii", "resgcn")
#: (label, shuffle, history period, history grad, cross-chunk grad) of the GCNII ablation; "exact" is one chunk
ABLATION = [("full", True, 10, "zero", "fresh"), ("no shuffle", False, 10, "zero", "fresh"),
            ("period 1", True, 1, "zero", "fresh"), ("historical grads", True, 10, "historical", "fresh"),
            ("none", False, 1, "historical", "fresh"), ("no cross-chunk grads", True, 10, "zero", "none")]
#: the ResGCN+ runs: the full method and without cross-chunk gradients
RESGCN_RUNS = [ABLATION[0], ABLATION[-1]]
#: (label, schedule, cross-chunk grad, hybrid width) of the timing runs
TIMING_RUNS = [("GPipe", "gpipe", "fresh", 1), ("GPipe, no cross grads", "gpipe", "none", 1),
               ("1F1B, no cross grads", "1f1b", "none", 1), ("GPipe hybrid x2", "gpipe", "fresh", 2)]
MIB = 2 ** 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``graphscale bench pipeline``."""
    from graphscale.flags import add_declared

    parser.add_argument("--graphs", default=",".join(GRAPHS),
                        help=f"comma-separated graphs among {', '.join(GRAPHS)}, or dataset specs")
    parser.add_argument("--data-dir", default=DATA_DIR,
                        help=f"directory holding musae_facebook/ (default {DATA_DIR}); facebook is skipped, with a "
                             "note, where it is missing")
    parser.add_argument("--nodes", type=int, default=20_000, help="vertices of the synthetic graphs (default 20000)")
    parser.add_argument("--stages", type=int, default=8, help="stages = graph-parallel parts (default 8, the paper)")
    add_declared(parser, "layers", default=32, note="here: of the volume table", why="GNNPipe's deep models")
    add_declared(parser, "hidden", default=100, why="GNNPipe's")
    parser.add_argument("--depths", type=int_list, default=[8, 16, 32, 64, 128], help="depths of the GCNII table")
    parser.add_argument("--shallow-layers", type=int, default=4, help="depth of the shallow-model table (default 4)")
    parser.add_argument("--accuracy-layers", type=int, default=16,
                        help="GCNII / ResGCN+ depth of the timing and accuracy runs (default 16)")
    add_declared(parser, "epochs", note="here: of each accuracy run")
    add_declared(parser, "chunks", default=16, note="here: of the accuracy runs", why="4 x 4")
    parser.add_argument("--seeds", type=int, default=1, help="seeds of the accuracy runs (default 1)")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 2),
                        help="processes running the accuracy runs side by side (default: the CPUs, at most 2)")
    parser.add_argument("--timing-workers", type=int, default=4, help="workers of the timing runs (default 4)")
    parser.add_argument("--timing-epochs", type=int, default=6, help="epochs of each timing run (default 6)")
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="write graph / pipeline per graph and model here, and the GCNII volume against depth "
                             "to NAME.depth.png beside it")
    parser.add_argument("--skip-timing", action="store_true", help="no timing / memory runs")
    parser.add_argument("--skip-accuracy", action="store_true", help="no accuracy runs")


def _load(name: str, nodes: int, data_dir: str = DATA_DIR):
    from graphscale.data.datasets import load_dataset

    spec = GRAPHS[name][0] if name in GRAPHS else name
    graph = load_dataset(spec.format(n=nodes, data=data_dir))
    graph.name = name
    return graph


def volumes(graph, owner, model_name: str, layers: int, stages: int, hidden: int, sub_of=None,
            hybrid_stages: int | None = None) -> dict:
    """Bytes per epoch (fp32), exact closed forms: graph parallelism over ``owner``'s parts, the pipeline on
    ``stages`` stages (``None`` with fewer layers than stages) and, with ``sub_of`` (the sub-chunks of a ``W``-way split), the hybrid of ``hybrid_stages``
    stages (default ``stages / 2``) whose groups exchange the ghosts of ``sub_of``."""
    from graphscale.config import ModelConfig
    from graphscale.nn.models import build_model
    from graphscale.partition.base import halo_sizes
    from graphscale.strategies.graph_parallel import halo_bytes_per_epoch, projected_exchanges
    from graphscale.strategies.pipeline.plan import group_halo_bytes_per_epoch, pipeline_bytes_per_epoch, stage_layers
    from graphscale.strategies.pipeline.reference import learned_input

    model = build_model(ModelConfig(name=model_name, hidden=hidden, layers=layers, dropout=0.0),
                        max(graph.num_features, 1), 2)
    widths = model.layer_widths()
    graph_bytes = halo_bytes_per_epoch(halo_sizes(graph, owner, stages).tolist(), widths, 4, learned_input(model),
                                       projected=projected_exchanges(model, 4))

    def pipe(s: int) -> int:
        return pipeline_bytes_per_epoch(graph.num_nodes, [widths[r.start] for r in stage_layers(layers, s)[1:]], 4,
                                        model.needs_h0)

    hybrid = None
    if sub_of is not None:
        width = int(sub_of.max()) + 1
        exchanged = [d for l, d in enumerate(widths) if l > 0 or learned_input(model)]
        hybrid = pipe(hybrid_stages or stages // 2) + group_halo_bytes_per_epoch(
            int(halo_sizes(graph, sub_of, width).sum()), exchanged, 4)
    return {"graph": graph_bytes, "pipeline": pipe(stages) if stages <= layers else None, "hybrid": hybrid,
            "c": 2 if model.needs_h0 else 1}


def _gmean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def volume_tables(graphs: list, args) -> tuple[list[dict], list[dict], list[dict], dict]:
    """Tables 5, 7 and 8 analogues and the geometric means (module docstring)."""
    from graphscale.partition.base import replication_factor
    from graphscale.registry import PARTITIONERS
    from graphscale.strategies.chunking import assign_chunks
    from graphscale.strategies.pipeline.plan import HYBRID_SPLITS, assign_hybrid

    table5, table7, table8, depth_curves = [], [], [], {}
    ratios: dict[str, list[float]] = {"matched": [], "all": [], "closed form (matched)": []}
    for graph in graphs:
        owner = PARTITIONERS.get("metis")().partition(graph, args.stages, seed=0)
        rho = replication_factor(graph, owner, args.stages)
        _, paper, paper_rho = GRAPHS.get(graph.name, ("", "", None))
        hybrid = args.stages % 2 == 0
        subs = {split: assign_hybrid(graph, 4 * args.stages, 2, split)[1] for split in HYBRID_SPLITS} if hybrid else {}
        for name in MODELS:
            v = volumes(graph, owner, name, args.layers, args.stages, args.hidden)
            ratio = v["graph"] / v["pipeline"]
            ratios["all"].append(ratio)
            if paper:
                ratios["matched"].append(ratio)
                ratios["closed form (matched)"].append(rho * args.layers / ((args.stages - 1) * v["c"]))
            row = {"graph": graph.name, "rho": round(rho, 2), "paper rho": f"{paper} {paper_rho}" if paper else "",
                   "model": name, "graph-parallel": format_bytes(v["graph"]), "pipeline": format_bytes(v["pipeline"])}
            for split, sub_of in subs.items():
                h = volumes(graph, owner, name, args.layers, args.stages, args.hidden, sub_of)["hybrid"]
                row[f"hybrid {args.stages // 2}x2 {split}"] = format_bytes(h)
            table5.append({**row, "graph / pipeline": round(ratio, 2),
                           "rho L / ((S-1) c)": round(rho * args.layers / ((args.stages - 1) * v["c"]), 2)})
        row = {"graph": graph.name, "rho": round(rho, 2)}
        for depth in args.depths:
            if depth < args.stages:
                continue
            v = volumes(graph, owner, "gcnii", depth, args.stages, args.hidden)
            row[f"L={depth} graph"] = format_bytes(v["graph"])
            row[f"L={depth} pipe"] = format_bytes(v["pipeline"])
            depth_curves.setdefault(graph.name, []).append((depth, v["graph"], v["pipeline"]))
        table7.append(row)
        if hybrid and args.shallow_layers >= 2:  # 2 stages x stages/2-way graph parallelism, the parts' ghosts
            width = args.stages // 2
            sub_of = assign_chunks(graph, width, seed=0)
            rho_h = replication_factor(graph, sub_of, width)
            for name in MODELS:
                v = volumes(graph, owner, name, args.shallow_layers, args.stages, args.hidden, sub_of, 2)
                table8.append({"graph": graph.name, "model": name, f"rho ({args.stages} parts)": round(rho, 2),
                               f"rho ({width} parts)": round(rho_h, 2), "graph-parallel": format_bytes(v["graph"]),
                               f"hybrid 2x{width}": format_bytes(v["hybrid"]),
                               "graph / hybrid": round(v["graph"] / v["hybrid"], 2)})
    means = {key: _gmean(values) for key, values in ratios.items()}
    means["max"] = max(ratios["all"])
    if args.plot:
        plot(table5, depth_curves, args)
    return table5, table7, table8, means


def plot(table5: list[dict], depth_curves: dict, args) -> None:
    """``--plot``: graph / pipeline per graph and model (bars), and GCNII bytes against depth (lines)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from graphscale.bench.table import save_bar_plot, save_figure

    path = Path(args.plot)
    labels = list(dict.fromkeys(r["graph"] for r in table5))
    series = {m: [next(r["graph / pipeline"] for r in table5 if r["graph"] == g and r["model"] == m) for g in labels]
              for m in MODELS}
    save_bar_plot(path, labels, series, "graph-parallel bytes / pipeline bytes",
                  f"{args.layers} layers, {args.stages} stages / parts (Table 5 analogue)")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, points in depth_curves.items():
        depths = [d for d, _, _ in points]
        line, = ax.plot(depths, [g / MIB for _, g, _ in points], marker="o", label=f"{name} graph")
        ax.plot(depths, [p / MIB for _, _, p in points], linestyle="--", color=line.get_color(),
                label=f"{name} pipeline")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("layers")
    ax.set_ylabel("MiB per epoch")
    ax.set_title(f"GCNII, {args.stages} stages / parts (Table 7 analogue)")
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, path.with_name(f"{path.stem}.depth{path.suffix}"))


# ------------------------------------------------------------------ timings (real runs)
def timing_rows(args) -> tuple[list[dict], list[dict]]:
    """Per configuration and stage: bubble, transfer, stale reads, saved activations, OS memory (module
    docstring); and the GPipe vs 1F1B memory table."""
    from graphscale.strategies.pipeline.timeline import ideal_bubble_fraction

    rows, memory = [], {}
    workers = args.timing_workers
    for label, schedule, cross, width in TIMING_RUNS:
        if workers % width or workers // width > args.accuracy_layers:
            continue
        report = _timing_run(args, schedule, cross, width)
        stages = workers // width
        chunks = 4 * workers
        epochs = report["epochs"][1:] or report["epochs"]
        for rank in range(workers):
            extras = [e["extra_per_worker"][rank] for e in epochs]

            def mean(key: str, extras=extras) -> float:
                return sum(x[key] for x in extras) / len(extras)

            added = [(e["os_memory_per_worker"][rank] or {}) for e in epochs]
            os_added = [m["train_peak_anon"] - m["baseline_anon"] for m in added
                        if m.get("train_peak_anon") is not None and m.get("baseline_anon") is not None]
            stage, member = divmod(rank, width)
            row = {"configuration": label, "stage": stage if width == 1 else f"{stage}.{member}",
                   "bubble %": round(100 * mean("bubble_frac"), 1), "transfer %": round(100 * mean("transfer_frac"), 1),
                   "halo %": round(100 * sum(x["halo_s"] / x["schedule_s"] for x in extras) / len(extras), 1),
                   "ideal bubble %": round(100 * ideal_bubble_fraction(stages, chunks), 1),
                   "stale reads %": round(100 * mean("stale_frac"), 1),
                   "saved activations": format_bytes(max(x["activation_peak"] for x in extras)),
                   "OS train anon added": format_bytes(max(os_added)) if os_added else "n/a",
                   "buffer rows": extras[0]["buffer_rows"],
                   "s/epoch": round(sum(e["seconds"] for e in epochs) / len(epochs), 3)}
            rows.append(row)
            if width == 1 and cross == "none":
                memory.setdefault(stage, {"stage": stage})
                memory[stage][f"{schedule} saved"] = row["saved activations"]
                memory[stage][f"{schedule} OS added"] = row["OS train anon added"]
                memory[stage][f"{schedule} bytes"] = max(x["activation_peak"] for x in extras)
    for m in memory.values():
        if m.get("gpipe bytes") and m.get("1f1b bytes"):
            m["1f1b / gpipe"] = round(m["1f1b bytes"] / m["gpipe bytes"], 2)
        m.pop("gpipe bytes", None)
        m.pop("1f1b bytes", None)
    return rows, list(memory.values())


def _timing_run(args, schedule: str, cross: str, width: int) -> dict:
    from graphscale.config import build_config
    from graphscale.run import run

    config = build_config({"data": {"dataset": "cora"},
                           "model": {"name": "gcnii", "layers": args.accuracy_layers},
                           "optim": {"epochs": args.timing_epochs},
                           "strategy": {"name": "pipeline", "workers": args.timing_workers, "hybrid_width": width,
                                        "schedule": schedule, "cross_chunk_grad": cross},
                           "progress": False, "oversubscribe": True})
    return run(config)


# ------------------------------------------------------------------ accuracy (chunked reference)
def accuracy_rows(args) -> list[dict]:
    """Exact training and the ablation on Cora with the chunked reference (module docstring)."""
    runs = []
    for model, variants in (("gcnii", ABLATION), ("resgcn", RESGCN_RUNS)):
        for seed in range(args.seeds):
            runs.append((model, "exact (K=1)", 1, True, 1, "zero", "fresh", seed))
            runs += [(model, label, args.chunks, *rest, seed) for label, *rest in variants]
    jobs = [(args.accuracy_layers, args.epochs, *run_) for run_ in runs]
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(jobs))) as pool:
            results = pool.starmap(_accuracy_run, jobs)
    else:
        results = [_accuracy_run(*job) for job in jobs]
    exact_best = {(r["model"], r["seed"]): r["best_val"] for r in results if r["label"].startswith("exact")}
    rows = []
    for model, variants in (("gcnii", ABLATION), ("resgcn", RESGCN_RUNS)):
        for label in ["exact (K=1)"] + [v[0] for v in variants]:
            mine = [r for r in results if r["model"] == model and r["label"] == label]
            reach = []
            for r in mine:
                target = 0.95 * exact_best[(model, r["seed"])]
                reach.append(next((e + 1 for e, v in enumerate(r["val_curve"]) if v >= target), None))
            reached = [x for x in reach if x is not None]
            first = mine[0]
            rows.append({"model": model, "variant": label, "K": first["chunks"], "shuffle": first["shuffle"],
                         "period": first["period"], "gradients": first["hist"], "cross grads": first["cross"],
                         "test acc": round(100 * sum(r["test"] for r in mine) / len(mine), 1),
                         "std": round(100 * statistics.stdev(r["test"] for r in mine), 1) if len(mine) > 1 else 0.0,
                         "epochs to 95% of exact best val": round(sum(reached) / len(reached), 1) if reached
                         else "never", "s/epoch": round(sum(r["seconds"] for r in mine) / (len(mine) * args.epochs),
                                                        3)})
    return rows


def _accuracy_run(layers: int, epochs: int, model_name: str, label: str, chunks: int, shuffle: bool, period: int,
                  hist: str, cross: str, seed: int) -> dict:
    import torch

    from graphscale.config import PRESETS, ModelConfig, OptimConfig
    from graphscale.data.datasets import load_dataset, normalize_features
    from graphscale.nn.models import build_model
    from graphscale.strategies.chunking import assign_chunks
    from graphscale.strategies.pipeline.reference import ChunkedReference

    torch.set_num_threads(1)  # Cora is too small to gain from threads; one keeps the runs steady on a busy machine
    graph = normalize_features(load_dataset("cora"), "auto")
    preset = PRESETS[model_name]
    cfg = ModelConfig(name=model_name, **(preset["model"] | {"layers": layers}))
    torch.manual_seed(seed)
    model = build_model(cfg, graph.num_features, graph.num_classes, seed=seed)
    ref = ChunkedReference(model, graph, assign_chunks(graph, chunks, seed=seed), OptimConfig(**preset["optim"]),
                           seed, shuffle, period, hist, cross)
    best_val, best_test, val_curve, seconds = -1.0, 0.0, [], 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        ref.train_epoch(epoch)
        seconds += time.perf_counter() - start
        val, test = _accuracy(model, graph)
        val_curve.append(val)
        if val > best_val:
            best_val, best_test = val, test
    return {"model": model_name, "label": label, "seed": seed, "chunks": chunks, "shuffle": shuffle, "period": period,
            "hist": hist, "cross": cross, "best_val": best_val, "test": best_test, "val_curve": val_curve,
            "seconds": seconds}


def _accuracy(model, graph) -> tuple[float, float]:
    import torch

    from graphscale.data.block import Block

    model.eval()
    with torch.no_grad():
        pred = model(Block.full(graph), graph.x).argmax(-1)
    return tuple(float((pred[m] == graph.y[m]).double().mean()) for m in (graph.val_mask, graph.test_mask))


def run(args: argparse.Namespace) -> int:
    """Print the tables (module docstring)."""
    if args.stages < 2:
        raise ValueError(f"--stages must be >= 2, got {args.stages}")
    if args.layers < args.stages:
        raise ValueError(f"--layers {args.layers} is smaller than --stages {args.stages}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    start = time.perf_counter()
    names = split_specs(args.graphs)
    facebook = Path(args.data_dir) / "musae_facebook"
    if "facebook" in names and not facebook.is_dir():
        print(f"facebook: skipped ({facebook} does not exist; --data-dir)\n")
        names.remove("facebook")
    graphs = [_load(name, args.nodes, args.data_dir) for name in names]
    table5, table7, table8, means = volume_tables(graphs, args)
    print(format_table(table5, title=f"Bytes per epoch, {args.layers} layers, H={args.hidden}, fp32, {args.stages} "
                                     f"METIS parts / stages (Table 5 analogue; exact closed forms = the Ledger)"))
    print(f"geometric mean graph / pipeline: {means['matched']:.2f}x over the rho-matched graphs (closed form "
          f"rho L / ((S-1) c): {means['closed form (matched)']:.2f}x; paper: 8.69x), {means['all']:.2f}x over all; "
          f"largest {means['max']:.2f}x (paper: 22.89x)\n")
    print(format_table(table7, title=f"GCNII bytes per epoch against depth, {args.stages} stages (Table 7 analogue)"))
    if table8:
        print()
        print(format_table(table8, title=f"Shallow models, {args.shallow_layers} layers: graph parallelism on "
                                         f"{args.stages} parts vs the hybrid (Table 8 analogue)"))
    if not args.skip_timing:
        rows, memory = timing_rows(args)
        print()
        print(format_table(rows, title=(
            f"Cora, GCNII {args.accuracy_layers} layers, {args.timing_workers} workers, K = 4 per worker, "
            f"{args.timing_epochs} epochs (means after the first): bubble and transfer from per-stage timestamps")))
        if memory:
            print()
            print(format_table(memory, title="Peak saved activations (tracked) and OS anonymous memory the training "
                                             "step added, per stage: GPipe vs 1F1B (no cross-chunk gradients)"))
    if not args.skip_accuracy:
        print()
        print(format_table(accuracy_rows(args), title=(
            f"Cora, GCNII and ResGCN+ {args.accuracy_layers} layers (presets), {args.epochs} epochs, {args.seeds} "
            "seed(s): the chunked reference (= the pipeline, tested) against exact training (Fig. 10 analogue)")))
    print(f"\nbench pipeline: {time.perf_counter() - start:.0f} s wall, {_cpu_seconds():.0f} s CPU (this process and "
          "the workers and processes it started)")
    return 0


def _cpu_seconds() -> float:
    """User + system seconds of this process and its finished children (the timing runs' workers, the pool)."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser()
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))
