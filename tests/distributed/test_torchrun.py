"""Multi-node torchrun: two `torchrun --nnodes 2` agents on this machine (2 ranks each) train exactly as
`--workers 4` spawn mode does, rank 0 alone prints and writes, and the data is prepared once in the shared cache."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphscale.config import build_config
from graphscale.distributed.launch import is_main_process, local_world_size, multi_node, resolve_device
from graphscale.run import run
from graphscale.validation import validate

ROOT = Path(__file__).resolve().parents[2]
TITLE = "test accuracy at best validation"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (parents read from ``/proc/*/stat``, whichever thread started the child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _hung(procs: list[subprocess.Popen], timeout: float) -> AssertionError:
    """A run that did not end within ``timeout``: every process under the agents is sent SIGABRT, which
    (``PYTHONFAULTHANDLER``) prints all its threads' stacks to the agent's stderr, kept in the failure; then the
    agents and everything under them are killed."""
    below = [pid for p in procs for pid in _descendants(p.pid)]
    _signal(below, signal.SIGABRT)
    time.sleep(2)
    _signal(below + [p.pid for p in procs], signal.SIGKILL)
    outputs = []
    for node, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", "(its output pipes stayed open 30 s after it was killed)"
        outputs.append(f"--- node {node} (exit {p.returncode}) stdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-15000:]}")
    return AssertionError(f"the two torchrun nodes did not end within {timeout:.0f} s; the stacks of their "
                          "processes at that point:\n" + "\n".join(outputs))


def _start_two_nodes(args: list[str], tmp_path: Path, timeout: float) -> list[subprocess.CompletedProcess]:
    """Node 0's agent hosts the rendezvous store (``is_host``, not guessed from the hostname, which matches for
    both agents here) and is listening before node 1's agent starts."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    procs = []
    try:
        for node in range(2):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}",
                   "--rdzv-conf", f"is_host={int(node == 0)},read_timeout=300",
                   "--nproc-per-node", "2", "-m", "graphscale", "train", *args,
                   "--json", str(tmp_path / f"node{node}.json")]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
            deadline = time.monotonic() + 120
            while node == 0 and not _listening(port) and procs[0].poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        out = []
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise _hung(procs, timeout) from None
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _torchrun_two_nodes(args: list[str], tmp_path: Path, timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Start two torchrun agents (2 ranks each) of one c10d rendezvous; wait for both. A failure of torchrun's own
    rendezvous store (a port taken between choosing and binding it, a connection dropped on a loaded machine) is
    retried once with a fresh port; any other failure is returned as it is."""
    nodes = _start_two_nodes(args, tmp_path, timeout)
    if any("RendezvousConnectionError" in node.stderr or "RendezvousTimeoutError" in node.stderr for node in nodes):
        nodes = _start_two_nodes(args, tmp_path, timeout)
    return nodes


STRATEGIES = {
    "graph-parallel": ["--strategy", "graph-parallel"],
    "split-parallel": ["--strategy", "split-parallel", "--batch-size", "256"],
    "data-parallel": ["--strategy", "data-parallel", "--batch-size", "256"],
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_two_torchrun_nodes_equal_four_spawned_workers(strategy, tmp_path):
    """Losses, accuracies and summed (and per-worker) bytes of every epoch are exactly spawn mode's; the cache
    directory is fresh, so the four ranks race to prepare the data (file locks: written once)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    args = [*STRATEGIES[strategy], "--workers", "4", "--epochs", "2", "--dtype", "float64", "--no-progress",
            "--cache-dir", str(cache)]
    nodes = _torchrun_two_nodes(args, tmp_path)
    for node in nodes:
        assert node.returncode == 0, node.stderr[-3000:]
    printed = [node.stdout.count(TITLE) for node in nodes]
    assert sorted(printed) == [0, 1], [node.stdout for node in nodes]  # global rank 0 alone prints
    written = [p for p in (tmp_path / "node0.json", tmp_path / "node1.json") if p.exists()]
    assert len(written) == 1  # ... and writes the report
    report = json.loads(written[0].read_text())

    flags = dict(zip(STRATEGIES[strategy][::2], STRATEGIES[strategy][1::2]))
    config = build_config({"strategy": {"name": strategy, "workers": 4,
                                        **({"batch_size": int(flags["--batch-size"])} if "--batch-size" in flags
                                           else {})},
                           "optim": {"epochs": 2}, "dtype": "float64", "progress": False, "oversubscribe": True,
                           "cache_dir": str(cache)})
    spawned = json.loads(json.dumps(run(config)))  # as the JSON report holds it
    assert len(report["epochs"]) == len(spawned["epochs"]) == 2
    for got, want in zip(report["epochs"], spawned["epochs"]):
        for key in ("loss", "train_acc", "val_acc", "test_acc", "train_loss", "val_loss", "test_loss", "bytes",
                    "bytes_per_worker"):
            assert got[key] == want[key], key
        assert len(got["peak_memory_per_worker"]) == len(got["os_memory_per_worker"]) == 4
        assert got["bytes"] and sum(got["bytes"].values()) > 0
    assert report["final"]["bytes_per_epoch"] == spawned["final"]["bytes_per_epoch"]
    assert len(report["final"]["peak_memory_per_worker"]) == 4
    for key in ("best_epoch", "val_acc", "test_acc"):
        assert report["final"][key] == spawned["final"][key]
    entries = [p for p in (cache / ("stores" if strategy == "graph-parallel" else "graphs")).iterdir()
               if not p.name.startswith(".")]
    assert len(entries) == 1  # prepared once, reused by spawn mode


def _torchrun_env(monkeypatch, rank, world, local_world):
    for name, value in {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % local_world),
                        "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)


def test_device_and_main_process_come_from_the_local_placement(monkeypatch):
    """2 nodes x 4 ranks: 4 GPUs per host suffice for cuda (the old check compared the global 8)."""
    import torch

    _torchrun_env(monkeypatch, 5, 8, 4)
    assert local_world_size(8) == 4 and multi_node() and not is_main_process()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert resolve_device("auto", 8) == "cuda" and resolve_device("cuda", 8) == "cuda"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert resolve_device("auto", 8) == "cpu"
    with pytest.raises(ValueError, match=r"4 local rank\(s\) on this node \(LOCAL_WORLD_SIZE\), found 3 GPU"):
        resolve_device("cuda", 8)
    _torchrun_env(monkeypatch, 0, 4, 4)
    assert is_main_process() and not multi_node()


def test_torchrun_checks_workers_and_refuses_offload_across_nodes(monkeypatch):
    _torchrun_env(monkeypatch, 1, 4, 2)
    config = build_config({"strategy": {"name": "graph-parallel", "workers": 2}})
    with pytest.raises(ValueError, match=r"--workers 2 but torchrun started 4 processes \(WORLD_SIZE\)"):
        validate(config)
    config = build_config({"strategy": {"name": "offload", "workers": 4}})
    with pytest.raises(ValueError, match="strategy 'offload' shares its host arrays between the workers of one "
                                         r"host and cannot span nodes \(torchrun: 4 ranks, 2 on this node\)"):
        validate(config)
    _torchrun_env(monkeypatch, 1, 4, 4)
    validate(config)  # one node: fine


@pytest.mark.parametrize("argv, code, stream, text", [
    (["train", "--dataset", "nosuch:x=1", "--no-progress"], 2, "stderr", "graphscale: error: "),
    (["datasets"], 0, "stdout", "cora"),
])
def test_a_torchrun_rank_exits_with_the_commands_code_and_its_output(argv, code, stream, text):
    """Under torchrun the command ends without interpreter teardown (``console_entry``): the exit code is the
    command's and what it printed to a pipe is all there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    # launch imported first, so the fast exit is taken whatever the command imports
    program = ("import graphscale.distributed.launch, sys; sys.argv[0] = 'graphscale'; "
               "from graphscale.cli import console_entry; console_entry()")
    done = subprocess.run([sys.executable, "-c", program, *argv], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr[-2000:]
    assert text in getattr(done, stream)
