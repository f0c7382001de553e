"""GNNPipe's communication cost model (spec §3.7) and its decision rule, for an advisor to call.

Per-epoch bytes, forward and backward, summed over workers (``b`` bytes per element, ``c = 2`` when the initial
residual travels with the rows, as GCNII's ``H^0``)::

    graph parallelism (M parts):          V_g = 2 rho_g L N H b
    pure pipeline (S = M stages):         V_p = 2 (S - 1) N H b c
    hybrid (S_h stages x W-way graph):    V_h = 2 rho_h L N H b + 2 (S_h - 1) N H b c

``rho = sum_i |B_i| / N`` is the replication factor of a partition into the parts that exchange halos (``M`` for
graph parallelism, ``W`` inside a hybrid group; :func:`graphscale.partition.base.replication_factor` measures it).
The weight traffic (a hybrid group's gradient all-reduce) is not in the paper's formulas and not here. Graph
parallelism moves less than the pipeline exactly when ``rho_g L < (S - 1) c``: sparse graphs, shallow models.

These are the paper's forms with every layer ``H`` wide; the strategies' exact closed forms (which the tests hold
the Ledger to) are :func:`graphscale.strategies.graph_parallel.halo_bytes_per_epoch` and
:func:`graphscale.strategies.pipeline.plan.pipeline_bytes_per_epoch`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Volumes:
    """Predicted bytes per epoch of each way to train; ``None`` where the configuration cannot run it."""

    graph: float
    pipeline: float | None
    hybrid: float | None

    def best(self) -> str:
        """``graph``, ``pipeline`` or ``hybrid``: the one that moves the fewest bytes (ties go to the simpler)."""
        options = [(v, i, name) for i, (name, v) in enumerate((("graph", self.graph), ("pipeline", self.pipeline),
                                                                ("hybrid", self.hybrid))) if v is not None]
        return min(options)[2]


def graph_volume(rho: float, layers: int, num_nodes: int, hidden: int, element_size: int = 4) -> float:
    """``V_g = 2 rho L N H b``."""
    return 2 * rho * layers * num_nodes * hidden * element_size


def pipeline_volume(stages: int, num_nodes: int, hidden: int, element_size: int = 4, c: int = 1) -> float:
    """``V_p = 2 (S - 1) N H b c``."""
    return 2 * (stages - 1) * num_nodes * hidden * element_size * c


def predict(num_nodes: int, hidden: int, layers: int, workers: int, rho_graph: float, *,
            hybrid_stages: int | None = None, rho_hybrid: float | None = None, c: int = 1,
            element_size: int = 4) -> Volumes:
    """The three volumes for ``workers`` workers, and with :meth:`Volumes.best` the rule's choice.

    Args:
        num_nodes, hidden, layers: ``N``, ``H``, ``L``.
        workers: ``M``.
        rho_graph: replication factor of a partition into ``M`` parts.
        hybrid_stages: ``S_h`` (must divide ``M``; ``W = M / S_h``); ``None``: no hybrid prediction.
        rho_hybrid: replication factor of a partition into ``W`` parts (needed with ``hybrid_stages``).
        c: 2 when ``H^0`` crosses every boundary with the rows (GCNII), else 1.
        element_size: ``b``.

    Raises:
        ValueError: a hybrid that does not divide the workers, or has more stages than layers, or no ``rho_hybrid``.
    """
    v_g = graph_volume(rho_graph, layers, num_nodes, hidden, element_size)
    v_p = pipeline_volume(workers, num_nodes, hidden, element_size, c) if workers <= layers else None
    v_h = None
    if hybrid_stages is not None:
        if workers % hybrid_stages or hybrid_stages > layers:
            raise ValueError(f"a hybrid of {hybrid_stages} stages needs a stage count that divides the {workers} "
                             f"workers and is at most the {layers} layers")
        if rho_hybrid is None:
            raise ValueError("a hybrid prediction needs rho_hybrid (the replication factor of W = M / S_h parts)")
        v_h = graph_volume(rho_hybrid, layers, num_nodes, hidden, element_size) + \
            pipeline_volume(hybrid_stages, num_nodes, hidden, element_size, c)
    return Volumes(v_g, v_p, v_h)
