"""NeutronTask (``--strategy task-parallel``): the chunks, shuffle and dependency modes (:mod:`.chunks`), how a
model splits into T and P tasks and the chain's closed-form traffic (:mod:`.tasks`), the single-process reference
of the semantics (:mod:`.reference`) and the strategy (:mod:`.strategy`)."""

from graphscale.strategies.task_parallel._plan_standin import P_SPLITS
from graphscale.strategies.task_parallel.chunks import CHUNKINGS, DEPENDENCIES
from graphscale.strategies.task_parallel.reference import LOSS_NORMS
from graphscale.strategies.task_parallel.strategy import TaskParallelStrategy

#: option -> its values (checked by :mod:`graphscale.validation`)
CHOICES = {"p_split": P_SPLITS, "chunking": CHUNKINGS, "dependency": DEPENDENCIES, "loss_norm": LOSS_NORMS}

__all__ = ["CHOICES", "TaskParallelStrategy"]
