"""NeutronTask (``--strategy task-parallel``): task parallelism over whole-graph subgraphs.

Modules: :mod:`.plan` (the task plan: T and P ranks, their layers and hybrid groups; the scheduling model of spec
§3.6; replication factors of hybrid P groups), :mod:`.simulate` (a discrete-event model of the subgraph pipeline,
serial against pipelined makespans, and the same figures from measured per-stage timestamps), :mod:`.chunks` (the
chunks, the per-epoch shuffle into subgraphs, the dependency modes), :mod:`.tasks` (how a model splits into T and P
tasks; the chain's closed-form traffic), :mod:`.reference` (the single-process reference of the semantics),
:mod:`.chain` (plan resolution, segments, tags, categories, closed-form bytes), :mod:`.exchange` (routing and the P
mirror exchange), :mod:`.t_segments` and :mod:`.p_segments` (the T and P segments), :mod:`.checkpoint` (the T stages'
gather) and :mod:`.strategy` (setup and the epochs).
"""

from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy

__all__ = ["TaskParallelStrategy"]
