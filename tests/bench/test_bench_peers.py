"""`graphscale bench peers --allocator`: every process runs the asked-for malloc and says which it ran."""

from __future__ import annotations

import pytest

from graphscale import allocator
from graphscale.bench.peers import peers
from graphscale.testing.graphs import random_graph


@pytest.mark.slow
@pytest.mark.skipif(allocator.loaded_library() != "glibc", reason="labels of glibc's modes")
@pytest.mark.parametrize("mode, label", [("default", "glibc"), ("retain", "glibc retaining")])
def test_each_process_reports_the_malloc_it_ran(mode, label):
    g = random_graph(300, 4.0, num_features=8, num_classes=3, seed=0)
    (row,) = peers.measure(g, hidden=8, repeats=1, warmup=1, systems=("graphscale",), mode=mode)
    assert row["malloc"] == label
    assert row["sys s/epoch"] >= 0 and row["user s/epoch"] >= 0 and row["faults/epoch"] >= 0


def test_a_missing_library_is_an_error_naming_its_package():
    g = random_graph(50, 4.0, num_features=8, num_classes=3, seed=0)
    for name, (_, package) in allocator.PRELOAD.items():
        try:
            allocator.library_path(name)
        except allocator.AllocatorUnavailable:
            with pytest.raises(allocator.AllocatorUnavailable, match=package):
                peers.measure(g, hidden=8, repeats=1, warmup=0, systems=("graphscale",), mode=name)


def _installed(name: str) -> bool:
    try:
        allocator.library_path(name)
    except allocator.AllocatorUnavailable:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(allocator.PRELOAD))
def test_a_preloaded_malloc_is_the_one_the_process_ran(name):
    if not _installed(name):
        pytest.skip(f"{name} is not installed (Debian package {allocator.PRELOAD[name][1]}; .ci/run unpacks it "
                    f"when apt-get can download it)")
    g = random_graph(300, 4.0, num_features=8, num_classes=3, seed=0)
    (row,) = peers.measure(g, hidden=8, repeats=1, warmup=1, systems=("graphscale",), mode=name)
    assert row["malloc"] == name
