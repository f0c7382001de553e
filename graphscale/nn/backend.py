"""Which kernel backend runs a product: the one dispatch point between the CPU and the device kernels.

Two backends implement every sparse product, keyed dropout and fused dense product of :mod:`graphscale.nn`:

* ``numba`` (the CPU backend): numba kernels over row ranges in threads, row blocks sized to the cache, packed keep
  bits read by the kernels (:mod:`graphscale.nn.kernels`).
* ``torch`` (the device backend): whole-tensor operations whose number per layer does not depend on the number of
  rows: one sparse-dense product per aggregation and direction with the normalised CSR (diagonal included) and its
  transpose cached on the topology (cuSPARSE through torch sparse CSR on CUDA), keyed dropout as one fused
  ``torch.library`` op per tensor (:mod:`graphscale.nn.fused`), dense products and their activation gradients on
  whole tensors.

``GRAPHSCALE_KERNELS`` picks: ``auto`` (the default: ``numba`` for CPU tensors of dtypes numba handles, ``torch``
for everything else, so CUDA takes the device backend) or ``torch`` (the device backend everywhere, CPU included:
how the tests and ``bench device`` check the device path without a GPU). Both backends give the same keyed dropout
masks, bit for bit, so every strategy is exact on both.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

#: the environment variable that picks the kernel backend
KERNELS_ENV = "GRAPHSCALE_KERNELS"
#: its values
KERNEL_CHOICES = ("auto", "torch")
_NUMBA_DTYPES = (torch.float32, torch.float64)


def kernel_setting() -> str:
    """The value of :data:`KERNELS_ENV` (``auto`` when unset or empty).

    Raises:
        ValueError: an unknown value (the message names the variable and the choices).
    """
    value = os.environ.get(KERNELS_ENV, "").strip().lower() or "auto"
    if value not in KERNEL_CHOICES:
        raise ValueError(f"{KERNELS_ENV}={os.environ.get(KERNELS_ENV)!r} is not a kernel backend: expected one of "
                         f"{', '.join(KERNEL_CHOICES)} (auto: numba on CPU, torch on a GPU; torch: the device "
                         "backend everywhere)")
    return value


def uses_numba(*tensors: Tensor) -> bool:
    """Whether the CPU (numba) backend runs a product of these tensors: the setting is ``auto`` and every tensor is
    on the CPU with a dtype numba handles (float32 / float64, or an integer or boolean type)."""
    if kernel_setting() == "torch":
        return False
    return all(t.device.type == "cpu" and (t.dtype in _NUMBA_DTYPES or not t.is_floating_point()) for t in tensors)

