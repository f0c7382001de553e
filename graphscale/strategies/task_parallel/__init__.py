"""NeutronTask (``--strategy task-parallel``): task parallelism over whole-graph subgraphs.

Modules: :mod:`.plan` (the task plan: T and P ranks, their layers and hybrid groups; the scheduling model of spec
§3.6; replication factors of hybrid P groups) and :mod:`.simulate` (a discrete-event model of the subgraph
pipeline, serial against pipelined makespans, and the same figures from measured per-stage timestamps).
"""
