"""The ``--host-memory`` budget: sizes as given, ``auto`` from the kernel and the memory cgroup."""

from __future__ import annotations

import pytest

from graphscale.config import build_config
from graphscale.metrics import host_memory
from graphscale.validation import validate


def test_sizes_are_taken_as_given():
    assert host_memory.resolve_host_memory("4GiB") == 4 * 1024**3
    assert host_memory.resolve_host_memory("512MB") == 512 * 1000**2


def test_auto_is_the_smaller_of_available_memory_and_cgroup_room(monkeypatch):
    monkeypatch.setattr(host_memory, "cgroup_room", lambda: 123 * 1024**2)
    assert host_memory.resolve_host_memory("auto") == 123 * 1024**2
    assert host_memory.resolve_host_memory("") == 123 * 1024**2
    monkeypatch.setattr(host_memory, "cgroup_room", lambda: None)
    assert 0 < host_memory.resolve_host_memory(None) == host_memory.available_host_memory()


def test_cgroup_v1_limit_is_read(tmp_path, monkeypatch):
    (tmp_path / "memory.limit_in_bytes").write_text("1073741824\n")
    (tmp_path / "memory.usage_in_bytes").write_text("73741824\n")
    monkeypatch.setattr(host_memory, "_own_cgroup_dirs", lambda: [tmp_path])
    assert host_memory.cgroup_room() == 1_000_000_000
    (tmp_path / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    assert host_memory.cgroup_room() is None


def test_bad_budget_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="--host-memory: cannot parse 'lots'"):
        validate(build_config({"host_memory": "lots", "progress": False}))


def test_advise_budget_is_the_host_budget_on_cpu():
    from argparse import Namespace

    from graphscale.advise.command import budget_of

    class Machine:
        free_memory = 8 * 1024**3

    args = Namespace(device_memory="", host_memory="1GiB", device="cpu", workers=2)
    assert budget_of(args, Machine) == 1024**3
    args.host_memory = ""
    assert budget_of(args, Machine) == 4 * 1024**3  # the profile's free memory shared by the workers
    args.device_memory = "3GiB"
    assert budget_of(args, Machine) == 3 * 1024**3
