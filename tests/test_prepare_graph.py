"""An in-memory graph is prepared by the parent as a dataset is (:func:`graphscale.prepare.prepare_graph`), and a
strategy computes nothing of its preparation in a worker: a handle without it is a one-line error naming how to
prepare it, and the handle is frozen."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from graphscale.config import build_config
from graphscale.data.handle import MEMORY, PARTITION_LOCAL, DataHandle
from graphscale.distributed.env import DistEnv
from graphscale.nn.models import build_model
from graphscale.partition.build import build_vertex_partitioner
from graphscale.prepare import prepare_graph
from graphscale.registry import STRATEGIES
from graphscale.testing import random_graph

#: the strategies whose workers read a shared folder the parent writes, with options that make them run
SHARED = {"split-parallel": {"fanouts": [2, 2]}, "pipeline": {"chunks": 2},
          "offload": {"chunks": 2}, "task-parallel": {"workers": 2, "t_workers": 1}}


def config_for(strategy: str, tmp_path, **options):
    return build_config({"strategy": {"name": strategy, **options}, "model": {"hidden": 8},
                         "progress": False, "cache_dir": str(tmp_path / "cache")})


@pytest.mark.parametrize("name", sorted(SHARED))
def test_a_handle_without_the_prepared_plan_is_refused(name, tmp_path):
    """A bare graph (nothing prepared) given to a strategy that reads the parent's plan: one line naming the fix."""
    graph = random_graph(40, seed=1)
    config = config_for(name, tmp_path, **{"workers": 1, **SHARED[name]})
    model = build_model(config.model, graph.num_features, graph.num_classes, seed=0)
    env = DistEnv(rank=0, world_size=config.strategy.workers)  # refused before any collective
    with pytest.raises(ValueError, match=rf"strategy '{name}' reads the plan its parent prepares.*prepare_graph") as info:
        STRATEGIES.get(name)().setup(DataHandle.in_memory(graph), model, env, config)
    assert "\n" not in str(info.value)


def test_the_vertex_partition_is_the_parents(tmp_path):
    """``vertex_owner`` maps the parent's partition into W parts and never partitions in the worker."""
    graph = random_graph(60, seed=2)
    bare = DataHandle.in_memory(graph)
    assert torch.equal(bare.vertex_owner(1), torch.zeros(60, dtype=torch.int64))
    with pytest.raises(ValueError, match="no vertex partition into 2 parts \\(none\\).*prepare_graph"):
        bare.vertex_owner(2)
    handle = prepare_graph(graph, config_for("data-parallel", tmp_path, workers=2))
    assert handle.view == MEMORY and handle.graph is graph and handle.owner_parts == 2 and handle.shared is None
    expected = build_vertex_partitioner("metis", "").partition(graph, 2, seed=0)
    assert torch.equal(handle.vertex_owner(2), expected)
    with pytest.raises(ValueError, match="no vertex partition into 3 parts \\(one into 2 parts\\)"):
        handle.vertex_owner(3)
    # the same graph and options: the same cache entry; another graph: another
    assert prepare_graph(graph, config_for("data-parallel", tmp_path, workers=2)).owner_path == handle.owner_path
    other = prepare_graph(random_graph(60, seed=3), config_for("data-parallel", tmp_path, workers=2))
    assert other.owner_path != handle.owner_path


def test_shared_plans_are_written_for_one_worker_too(tmp_path):
    """One worker's run reads the parent's plan as a multi-worker run does (no in-worker fallback to keep)."""
    from graphscale.strategies.pipeline.strategy import CHUNK_FILE

    graph = random_graph(40, seed=4)
    handle = prepare_graph(graph, config_for("pipeline", tmp_path, workers=1, chunks=2))
    chunk_of = np.load(handle.require_shared("pipeline") / CHUNK_FILE)
    assert chunk_of.shape == (40,) and set(chunk_of.tolist()) == {0, 1}
    assert (handle.require_shared("pipeline") / ".complete").is_file()


def test_the_handle_is_frozen(tmp_path):
    handle = prepare_graph(random_graph(40, seed=5), config_for("split-parallel", tmp_path, workers=2, fanouts=[2, 2]))
    assert handle.shared is not None and handle.owner_parts == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        handle.shared = None
    assert not hasattr(handle, "extras")


def test_partition_local_strategies_get_a_store(tmp_path):
    """graph-parallel on an in-memory graph: a store of it in the cache (raw features as given), checked like a
    run's; model-averaging's state directory is a typed field the parent sets."""
    graph = random_graph(50, seed=6)
    handle = prepare_graph(graph, config_for("graph-parallel", tmp_path, workers=2))
    assert handle.view == PARTITION_LOCAL and int(handle.summary["parts"]) == 2 and handle.feature_norm == "none"
    assert handle.summary["nodes"] == 50 and handle.state_dir is None
    averaged = prepare_graph(graph, config_for("model-averaging", tmp_path, workers=1, parts=2))
    assert int(averaged.summary["parts"]) == 2 and averaged.state_dir is not None
    # in the cache directory the caller names, not the run's default one
    elsewhere = prepare_graph(graph, config_for("model-averaging", tmp_path, workers=1, parts=2), tmp_path / "other")
    assert Path(elsewhere.state_dir).is_relative_to(tmp_path / "other")


@pytest.mark.parametrize(("name", "options", "changed"), [
    ("pipeline", {"workers": 1, "chunks": 2}, {"seed": 1}),  # its chunks are seeded
    ("pipeline", {"workers": 1, "chunks": 2}, {"partitioner": "random"}),
    ("offload", {"workers": 1, "chunks": 2}, {"seed": 1}),  # one worker's two-level partition
    ("offload", {"workers": 1, "chunks": 2}, {"partitioner": "random"}),
    ("offload", {"workers": 1, "memory_budget": "400000"}, {"recompute": "none"}),  # the memory model's chunk count
    ("split-parallel", {"workers": 2, "fanouts": [2, 2]}, {"seed": 1}),
])
def test_a_shared_folder_is_keyed_by_every_option_its_preparation_reads(name, options, changed, tmp_path):
    """Two runs whose preparation reads different options never share a folder (a run would otherwise train on the
    plan of whichever run filled the cache first, whatever its own seed, partitioner or --recompute)."""
    graph = random_graph(60, seed=7)

    def folder(**more):
        config = config_for(name, tmp_path, **{**options, **{k: v for k, v in more.items() if k != "seed"}})
        config.seed = more.get("seed", 0)
        try:
            return prepare_graph(graph, config).shared
        except ValueError as err:  # a preparation that refuses the options (a budget too small) writes nothing
            return str(err)

    assert folder() == folder()  # the same options: the same folder
    assert folder() != folder(**changed)
