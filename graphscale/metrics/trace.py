"""Structure checks of a training step that read the same on CPU tensors as on a GPU: aten ops issued, live bytes.

:class:`OpTrace` is a ``TorchDispatchMode``: inside it every operator call that reaches the dispatcher is counted
once (a ``torch.library`` custom op is one call, whatever it runs inside), and every storage an operator returns is
followed from its creation to its release (a weak reference to the storage), so the trace knows the bytes of the
tensors the step created that are alive at each moment and their peak. Tensors that existed before the trace (the
graph, the features, the parameters) are not counted: the peak is the step's own memory above its inputs, the
figure ``torch.cuda.max_memory_allocated`` gives on a GPU (less the allocator's rounding and the temporaries inside
fused kernels), measured the same way on a machine without one.

Both figures depend only on the program and the shapes, not on the device: an epoch that issues ``k`` ops and keeps
``b`` bytes alive on CPU tensors under the device kernel backend (``GRAPHSCALE_KERNELS=torch``) does the same on
CUDA, which is how the device path is tested without a GPU.
"""

from __future__ import annotations

import weakref
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class OpTrace(TorchDispatchMode):
    """Count the operator calls and follow the live bytes of what they create, while active.

    Attributes:
        ops: ``Counter`` of operator names (``aten.mm.default``, ``graphscale.keyed_dropout.default``, ...).
        live: bytes of the storages created inside the trace that are still alive.
        peak: the largest :attr:`live` seen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.live = 0
        self.peak = 0
        self._alive: dict[int, weakref.finalize] = {}

    @property
    def total(self) -> int:
        """Operator calls counted."""
        return sum(self.ops.values())

    def _released(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._alive.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[str(func)] += 1
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._alive:
                continue
            self._alive[key] = weakref.finalize(storage, self._released, key, nbytes)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        return out

    def __exit__(self, *exc):
        for fin in list(self._alive.values()):
            fin.detach()  # stop following: a storage released later does not touch this trace
        self._alive.clear()
        return super().__exit__(*exc)
