"""The offload strategy's device helper: the one place that knows which kind of device it runs on.

Everything device-specific the transfer pipeline needs goes through :class:`DeviceKit`:

* **streams and events**: a side (copy) stream, the current (compute) stream, events recorded on them. On a CPU
  "device" there are no streams: work is done by the thread that issues it, so the stand-ins are no-ops and
  ordering comes from the pipeline's single worker thread (:mod:`~graphscale.strategies.offload.transfer`);
* **pinned memory**: page-locked staging buffers on an accelerator, ordinary memory on CPU;
* **page-locking host arrays** that already exist (shared-memory mappings): ``cudaHostRegister`` with the default
  flags, which on a system with unified virtual addressing (every 64-bit CUDA platform) makes the pages both mapped
  and portable, i.e. readable by kernels at their host address;
* **UVA aliases**: a device tensor over the registered host pages, built through ``__cuda_array_interface__``
  (``torch.as_tensor`` wraps the pointer without copying; PyTorch resolves its device with
  ``cudaPointerGetAttributes``, which accepts registered host memory). ``index_select`` / ``index_copy_`` on the
  alias are GPU kernels that read / write host memory over the link: a zero-copy gather / scatter, the mechanism of
  DGL's ``gather_pinned_tensor_rows`` and Quiver's UVA features. :meth:`DeviceKit.uva_alias` returns ``None``
  wherever this is unavailable (not CUDA, a dtype the interface cannot describe, the wrap fails or does not alias),
  and the caller probes the alias bit for bit against a host gather before trusting it
  (:meth:`~graphscale.strategies.offload.transfer.Transfers.__init__`).

The accelerator branches have not been run on a GPU in this repository (no GPU was available when they were
written); on CPU the helper returns the stand-ins.
"""

from __future__ import annotations

import contextlib

import torch

#: ``__cuda_array_interface__`` type strings of the dtypes a UVA alias can describe.
_TYPESTR = {torch.float16: "<f2", torch.float32: "<f4", torch.float64: "<f8", torch.int64: "<i8",
            torch.int32: "<i4", torch.uint8: "|u1"}


class HostEvent:
    """A CPU stand-in for a device event: the work it marks is done when the issuing thread moved on."""

    def record(self, stream=None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _Mapped:
    """Holds ``__cuda_array_interface__`` of a host tensor (and keeps the tensor alive while its alias is)."""

    def __init__(self, host: torch.Tensor) -> None:
        self.host = host
        self.__cuda_array_interface__ = {"shape": tuple(host.shape), "typestr": _TYPESTR[host.dtype],
                                         "data": (host.data_ptr(), False), "version": 2, "strides": None}


class DeviceKit:
    """Streams, events, pinned buffers, page-locking and UVA aliases for one compute device."""

    def __init__(self, device: torch.device | str) -> None:
        device = torch.device(device)
        self.accelerated = device.type != "cpu"
        if self.accelerated and device.index is None:
            device = torch.device(device.type, getattr(torch, device.type).current_device())
        self.device = device
        self.is_cuda = self.device.type == "cuda"

    # ---------------------------------------------------------------- streams / events
    @property
    def _module(self):
        """The device's torch module (``torch.cuda``, ``torch.xpu``, ...)."""
        return getattr(torch, self.device.type)

    def new_stream(self):
        """A side stream (``None`` on CPU)."""
        return self._module.Stream(device=self.device) if self.accelerated else None

    def current_stream(self):
        """The stream compute is issued on (``None`` on CPU); call it from the thread that computes."""
        return self._module.current_stream(self.device) if self.accelerated else None

    def on_stream(self, stream):
        """Context manager issuing work on ``stream`` from this thread (device set too); a no-op on CPU."""
        if not self.accelerated:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(self._module.device(self.device))
        stack.enter_context(self._module.stream(stream))
        return stack

    def event(self, stream=None):
        """An event recorded now on ``stream`` (default: the current one)."""
        if not self.accelerated:
            return HostEvent()
        event = self._module.Event()
        event.record(stream if stream is not None else self.current_stream())
        return event

    def wait(self, stream, event) -> None:
        """Make ``stream`` wait for ``event`` (device-side; no host blocking)."""
        if self.accelerated:
            stream.wait_event(event)

    def keep_for(self, tensor: torch.Tensor, stream) -> None:
        """Tell the caching allocator that ``tensor`` (allocated on another stream) is used on ``stream``."""
        if self.accelerated and tensor.device.type != "cpu":
            tensor.record_stream(stream)

    def synchronize(self) -> None:
        """Wait for every stream of the device."""
        if self.accelerated:
            self._module.synchronize(self.device)

    # ---------------------------------------------------------------- memory
    def staging(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat host buffer for copies to and from the device: page-locked on an accelerator."""
        return torch.empty(max(numel, 1), dtype=dtype, pin_memory=self.accelerated)

    def to_device(self, host: torch.Tensor) -> torch.Tensor:
        """A fresh device copy of ``host`` issued on the current stream (non-blocking from pinned memory)."""
        return host.to(self.device, non_blocking=True) if self.accelerated else host.clone()

    def register(self, host: torch.Tensor) -> bool:
        """Page-lock an existing host tensor in place (CUDA: ``cudaHostRegister``); ``False`` where not applicable.

        Raises:
            RuntimeError: the driver refused (the error code is named).
        """
        if not self.is_cuda or host.numel() == 0:
            return False
        err = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.numel() * host.element_size(), 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister of a {host.numel() * host.element_size()}-byte host array failed "
                               f"with CUDA error {int(err)}")
        return True

    def unregister(self, host: torch.Tensor) -> None:
        if self.is_cuda:
            torch.cuda.cudart().cudaHostUnregister(host.data_ptr())

    def uva_alias(self, host: torch.Tensor) -> torch.Tensor | None:
        """A device tensor over the registered pages of ``host`` (same address), or ``None`` where unavailable."""
        if not self.is_cuda or host.dtype not in _TYPESTR or not host.is_contiguous() or host.numel() == 0:
            return None
        try:
            with torch.cuda.device(self.device):
                alias = torch.as_tensor(_Mapped(host), device=self.device)
        except (RuntimeError, TypeError, ValueError):
            return None
        if alias.data_ptr() != host.data_ptr() or alias.shape != host.shape or alias.device != self.device:
            return None
        return alias
