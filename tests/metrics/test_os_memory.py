"""What the OS confirms: the /proc reader, the anonymous / file-backed peak sampler, and a training run's
OS-measured memory against the strategy's design figure (the tracked peak)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from graphscale.config import build_config
from graphscale.metrics.memory import (
    EpochMemory,
    OSMemorySampler,
    max_os_memory,
    os_memory,
    reset_peak_rss,
    smaps_rollup,
)
from graphscale.run import run

MiB = 2**20
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux only")
#: bounds on what the OS measures run in the serial perf tier (``pytest -m perf``), not in the unit tier
perf = pytest.mark.perf


@perf
@linux_only
def test_os_memory_reads_proc_in_bytes():
    mem = os_memory(smaps=True)
    assert mem.anon is not None and mem.file is not None and mem.shmem is not None
    assert mem.anon + mem.file == pytest.approx(mem.rss, abs=1 * MiB)  # RssAnon + RssFile + RssShmem = VmRSS
    assert mem.peak_rss >= mem.rss - MiB > 0
    assert mem.smaps is not None and mem.smaps["Rss"] > 0 and mem.smaps["Anonymous"] > 0
    assert mem.smaps == pytest.approx(smaps_rollup(), rel=0.2, abs=8 * MiB)
    assert json.loads(json.dumps(mem.to_dict()))["rss"] == mem.rss


@perf
@linux_only
def test_sampler_sees_an_anonymous_allocation_and_vmhwm_bounds_it(record_property):
    """A 200 MB anonymous block shows in the sampled peak (bound: 180 MB; measured 200.03 MB in each of 10
    perf-tier runs); a sampler that read only at its start and end would see nothing of the freed block."""
    gc.collect()
    reset_peak_rss()
    before = os_memory()
    with OSMemorySampler(0.002) as sampler:
        block = np.ones(200 * 10**6 // 8)  # 200 MB, every page touched
        block += 1.0
        del block
        gc.collect()
    peaks = sampler.peaks
    record_property("anon_growth_mb", (peaks.anon - before.anon) / 1e6)
    assert peaks.samples >= 2
    assert peaks.anon - before.anon >= 180 * 10**6
    after = os_memory()
    assert after.anon < peaks.anon - 150 * 10**6  # freed: the peak is a peak, not the current value
    assert after.peak_rss >= peaks.anon  # the kernel's exact peak bounds the sampled one


@perf
@linux_only
def test_sampler_sees_file_backed_memory(tmp_path, record_property):
    """A 100 MB read-only mapping shows as file-backed (bound 90 MB; measured 100.004 MB) and not as anonymous memory
    (bound 50 MB; measured 0-0.004 MB), over 10 perf-tier runs."""
    path = tmp_path / "mapped.bin"
    np.arange(100 * 10**6 // 8, dtype=np.float64).tofile(path)  # 100 MB
    before = os_memory()
    with OSMemorySampler(0.002) as sampler:
        mapped = np.memmap(path, dtype=np.float64, mode="r")
        total = float(mapped.sum())  # reads every page through the mapping (mapped until the interval ends)
    del mapped
    assert total > 0
    record_property("file_growth_mb", (sampler.peaks.file - before.file) / 1e6)
    record_property("anon_growth_mb", (sampler.peaks.anon - before.anon) / 1e6)
    assert sampler.peaks.file - before.file >= 90 * 10**6
    assert sampler.peaks.anon - before.anon < 50 * 10**6  # a read-only mapping adds no anonymous memory


@linux_only
def test_lap_splits_the_interval():
    with OSMemorySampler(0.002) as sampler:
        before = sampler.lap()
        block = np.ones(100 * 10**6 // 8)  # 100 MB, touched
        during = sampler.lap()
        del block
    assert during.anon - before.anon >= 90 * 10**6  # each lap has its own maxima
    assert sampler.peaks.anon == during.anon  # the whole interval's peak covers every lap
    assert before.samples >= 2 and during.samples >= 2


def test_epoch_memory_record_and_max_over_epochs():
    memory = EpochMemory(baseline=os_memory())
    with memory.measure() as first:
        np.ones(20 * 10**6 // 8).sum()
        memory.end_training()
    with memory.measure() as second:
        pass
    assert second["train_peak_anon"] is None  # end_training was not called
    assert first["baseline_at"] == "worker start"
    assert first["peak_rss_since"] in ("epoch", "process start")
    assert first["peak_rss"] > 0 and first["baseline_rss"] > 0
    if sys.platform.startswith("linux"):
        assert first["peak_anon"] >= first["train_peak_anon"] >= first["baseline_anon"] > 0
        assert first["peak_file"] > 0 and first["samples"] >= 2
    merged = max_os_memory([first, None, second])
    assert merged["peak_rss"] == max(first["peak_rss"], second["peak_rss"])
    assert merged["baseline_at"] == "worker start"
    assert max_os_memory([None, None]) is None
    assert max_os_memory([{"peak_anon": None}, {"peak_anon": 5}])["peak_anon"] == 5


def test_report_has_os_memory_per_worker_and_valid_json(tmp_path):
    out = tmp_path / "report.json"
    config = build_config({"data": {"dataset": "sbm:nodes=3000,degree=6,features=16"}, "optim": {"epochs": 2},
                           "progress": False, "json": str(out)})
    report = run(config)
    assert len(report["epochs"]) == 2
    for epoch in report["epochs"]:
        (record,) = epoch["os_memory_per_worker"]
        assert record["peak_rss"] > 0
    (final,) = report["final"]["os_memory_per_worker"]
    assert final["peak_rss"] == max(e["os_memory_per_worker"][0]["peak_rss"] for e in report["epochs"])
    if sys.platform.startswith("linux"):
        assert final["peak_anon"] is not None and final["peak_file"] is not None
    written = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON report"))
    assert written["final"]["os_memory_per_worker"] == report["final"]["os_memory_per_worker"]


# The measured run happens in a fresh interpreter so that heap memory freed by earlier tests (which the
# allocator keeps and would hand out again) cannot hide the growth.
_SCRIPT = textwrap.dedent("""
    import json
    from graphscale.config import build_config
    from graphscale.data.datasets import normalize_features
    from graphscale.data.synthetic import generate
    from graphscale.distributed.env import DistEnv
    from graphscale.metrics.memory import os_memory
    from graphscale.nn.models import build_model
    from graphscale.strategies.single import SingleStrategy
    from graphscale.trainer import Trainer

    def train(spec, baseline=None):
        config = build_config({"data": {"dataset": spec}, "optim": {"epochs": 1}, "progress": False})
        graph = normalize_features(generate(spec), "auto")
        model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
        strategy, env = SingleStrategy(), DistEnv.local()
        strategy.setup(graph, model, env, config)
        try:
            return Trainer(strategy, env, config, memory_baseline=baseline).fit()["history"][0]
        finally:
            strategy.teardown()

    train("sbm:nodes=2000,degree=10,features=8")  # loads the compiled kernels: code, not data
    baseline = os_memory()                          # the worker before its data is loaded
    record = train(SPEC, baseline)
    print(json.dumps({"tracked": record["peak_memory"], **record["os_memory"]}))
""")


@perf
@linux_only
def test_single_os_anonymous_peak_is_within_margin_of_the_design(record_property):
    """The design says a `single` GCN epoch holds its tracked peak: graph, model, optimiser and autograd's saved
    tensors. The OS must confirm it: the worker's anonymous memory during the training step grows by at least
    that much above its baseline (the interpreter, torch and the compiled kernels, read before the data is
    loaded), and by at most 2x that much.

    Measured on the 2-core development machine for this graph (300k nodes, ~3M edges, 128 features; tracked
    peak 203 MiB): growth / tracked = 1.64 to 1.82 over 4 runs; over 10 perf-tier runs on the idle 2-core CI machine (`python -m graphscale.testing.perf_spread --runs 10`, `d291b51`): 1.46 to 1.55 (VmHWM above the
    anonymous growth: 6-30 MiB). The excess, 93-165 MiB, is memory the tracker
    does not count by design: the block's cached transpose (16 bytes per edge plus 8 per vertex, ~50 MiB here),
    gradient temporaries autograd does not save, and heap the allocator keeps after freeing. (Before keyed
    dropout was fused into the first dense product, the tracked figure also held a dropped copy of the
    features, which the OS saw too: 200k nodes, tracked ~245 MiB, 1.30-1.53 with a 1.75x bound.) The lower
    bound is 0.95x: every tracked byte is real anonymous memory (the graph is generated in memory here), less
    a 5% slack for sampling.
    """
    spec = "sbm:nodes=300000,degree=10,features=128"
    out = subprocess.run([sys.executable, "-c", f"SPEC = {spec!r}\n" + _SCRIPT], capture_output=True, text=True, check=False,
                         timeout=600)  # a hang guard, not a bound: a loaded 2-core machine measured over 120 s
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    tracked = result["tracked"]
    grown = result["train_peak_anon"] - result["baseline_anon"]
    record_property("growth_over_tracked", grown / tracked)
    record_property("vmhwm_minus_anon_growth_mib", (result["peak_rss"] - result["baseline_rss"] - grown) / MiB)
    assert result["baseline_at"] == "worker start"
    assert tracked > 200 * MiB  # the data dominates the interpreter's own noise
    assert 0.95 * tracked <= grown <= 2.0 * tracked, (grown / tracked, result)
    # the kernel's exact peak of the whole resident set bounds the sampled anonymous peak
    assert result["peak_rss"] - result["baseline_rss"] >= grown - 4 * MiB
