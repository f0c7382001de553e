"""The malloc configuration reaches every worker, read back from the workers themselves.

The unit tests check the configuration each worker records; whether a freed block really comes back without page
faults is counted by the OS, so those bounds are in the perf tier (``test_retained_blocks_*``, marker ``perf``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphscale import allocator
from graphscale.distributed.launch import launch

ROOT = Path(__file__).resolve().parents[2]
PAGES_64MIB = (64 << 20) // os.sysconf("SC_PAGE_SIZE")


def _report(env) -> dict:
    """A worker's own view: the state it records and the page faults of reusing a freed 64 MiB block."""
    return {**allocator.state(), "refaults": allocator.probe_refaults(), "rank": env.rank}


@pytest.fixture(autouse=True)
def _no_user_tuning(monkeypatch):
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                 "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "GLIBC_TUNABLES", allocator.ENV_VAR):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="the retaining configuration is glibc's")
def test_spawned_workers_run_retain_when_asked(monkeypatch):
    monkeypatch.setenv(allocator.ENV_VAR, "retain")
    reports = launch(_report, 2, device="cpu", timeout_s=60)
    assert [r["rank"] for r in reports] == [0, 1]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3  # really two other processes
    for r in reports:
        assert r["mode"] == "retain" and r["library"] == "glibc" and r["retaining"]
        assert r["settings"] == {"mmap_threshold": allocator.RETAIN_BYTES, "trim_threshold": allocator.RETAIN_BYTES}


@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="glibc's default behaviour is probed")
def test_default_and_option_over_environment(monkeypatch):
    for r in launch(_report, 2, device="cpu", timeout_s=60):
        assert r["mode"] == "default" and not r["retaining"] and r["settings"] == {}
    monkeypatch.setenv(allocator.ENV_VAR, "retain")
    for r in launch(_report, 2, device="cpu", timeout_s=60, allocator_mode="default"):
        assert r["mode"] == "default" and not r["retaining"]


_IN_PROCESS = """
import json, os
from graphscale import allocator
from graphscale.distributed.launch import launch
def _report(env):
    return {**allocator.state(), "refaults": allocator.probe_refaults(), "rank": env.rank}
assert allocator.state()["mode"] is None
(r,) = launch(_report, 1, device="cpu", allocator_mode="retain")
print(json.dumps({"pid": os.getpid(), "run": r, "after": allocator.state(), "refaults": allocator.probe_refaults()}))
"""


def _in_process_run() -> dict:
    """In a fresh interpreter: whether a freed 64 MiB block comes back without page faults also depends on what
    the process did before (the test suite's earlier runs), so the caller's state is probed where it is known."""
    proc = subprocess.run([sys.executable, "-c", _IN_PROCESS], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="the retaining configuration is glibc's")
def test_in_process_run_applies_then_restores():
    out = _in_process_run()
    r = out["run"]
    assert r["pid"] == out["pid"] and r["mode"] == "retain" and r["retaining"]
    assert out["after"]["mode"] is None and not out["after"]["retaining"]


@pytest.mark.perf  # page faults counted by the OS: the serial perf tier
@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="the retaining configuration is glibc's")
def test_retained_blocks_come_back_without_page_faults(monkeypatch, record_property):
    """Reusing a freed 64 MiB block (16,384 pages of 4 KiB): under ``retain`` it comes back without new pages (bound:
    under 1/16 of them), under glibc's default it was munmapped and every page faults in again (bound: at least
    9/10 of them), in spawned workers, in-process, and in the caller after an in-process run restored the default.
    Measured over 10 perf-tier runs (2 cores, load average about 6): retained 0 pages in every run, default 1.0001
    of them in every run; the guarded defect, a retain
    setting that did not reach the worker, measures as the default does, 16x above the retained bound."""
    retained = [r["refaults"] for r in launch(_report, 2, device="cpu", timeout_s=60, allocator_mode="retain")]
    default = [r["refaults"] for r in launch(_report, 2, device="cpu", timeout_s=60, allocator_mode="default")]
    out = _in_process_run()
    retained.append(out["run"]["refaults"])
    default.append(out["refaults"])
    record_property("retained_max_over_pages", max(retained) / PAGES_64MIB)
    record_property("default_min_over_pages", min(default) / PAGES_64MIB)
    assert max(retained) < PAGES_64MIB // 16, retained  # the freed block came back without new pages
    assert min(default) >= PAGES_64MIB * 0.9, default  # glibc munmapped it: every page is faulted in again


@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="glibc tuning is what the user set")
def test_user_malloc_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # read by glibc in the spawned worker; ours must not override
    for r in launch(_report, 2, device="cpu", timeout_s=60, allocator_mode="retain"):
        assert not r["retaining"] and "MALLOC_ARENA_MAX" in r["settings"]["not_applied"]


def test_unknown_mode_and_missing_library_errors(monkeypatch):
    with pytest.raises(ValueError, match="unknown allocator mode 'fast'"):
        allocator.resolve_mode("fast")
    monkeypatch.setenv(allocator.ENV_VAR, "tcmalloc")
    with pytest.raises(ValueError, match=r"\$GRAPHSCALE_ALLOCATOR"):
        launch(_report, 1, device="cpu")
    if allocator.loaded_library() != "tcmalloc":
        with pytest.raises(allocator.AllocatorUnavailable, match="must be preloaded"):
            allocator.configure("tcmalloc")
    for name, (_, package) in allocator.PRELOAD.items():
        try:
            path = allocator.library_path(name)
        except allocator.AllocatorUnavailable as err:
            assert package in str(err) and "apt-get install" in str(err)
        else:
            assert allocator.child_environment(name)["LD_PRELOAD"].startswith(path)


@pytest.mark.parametrize("given, expected", [({}, "default"), ({"allocator": "retain"}, "retain")])
def test_run_report_records_each_workers_allocator(given, expected):
    from graphscale.config import build_config
    from graphscale.run import run

    config = build_config({"optim": {"epochs": 1}, "progress": False, **given,
                           "strategy": {"name": "graph-parallel", "workers": 2}})
    report = run(config)
    per_worker = report["allocator_per_worker"]
    assert len(per_worker) == 2 and len({w["pid"] for w in per_worker}) == 2
    assert all(w["mode"] == expected for w in per_worker)
    if allocator.loaded_library() == "glibc":
        assert all(w["retaining"] == (expected == "retain") for w in per_worker)


def test_library_unpacked_without_root_is_found_through_ld_library_path(tmp_path, monkeypatch):
    """`apt-get download` + `dpkg -x` leaves the library outside ldconfig's cache: LD_LIBRARY_PATH finds it."""
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent{os.pathsep}{tmp_path}")
    assert allocator.library_path("jemalloc") == str(tmp_path / "libjemalloc.so.2")
    assert allocator.child_environment("jemalloc")["LD_PRELOAD"].startswith(str(tmp_path / "libjemalloc.so.2"))



_BOUND = """
import json
from graphscale import allocator
out = {"first": allocator.bound_heap(), "again": allocator.bound_heap(4 << 20)}
out["state"] = allocator.state()
allocator.unbound_heap()
out["after"] = allocator.state()
allocator.configure("retain")
out["under_retain"] = allocator.bound_heap()
print(json.dumps(out))
"""


@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="the bound is glibc's mmap threshold")
@pytest.mark.parametrize("user", [None, "MALLOC_ARENA_MAX"])
def test_bounded_heap_applies_under_default_only(user):
    """An offload worker's fixed mmap threshold: applied once under the default mode (reported, not retaining),
    undone by ``unbound_heap``; not applied under ``retain`` or over the user's own glibc settings."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({user: "2"} if user else {})}
    proc = subprocess.run([sys.executable, "-c", _BOUND], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["under_retain"] is False
    if user:
        assert out["first"] is False and "bounded_mmap_threshold" not in out["state"]["settings"]
        return
    assert out["first"] and out["again"]
    assert out["state"]["settings"] == {"bounded_mmap_threshold": allocator.BOUNDED_MMAP_BYTES}
    assert not out["state"]["retaining"]
    assert out["after"]["settings"] == {}
