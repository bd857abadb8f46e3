"""What every kernel runtime (OpenCL, CUDA, HIP) shares beyond ``accel.backend.Backend``: the
decoder-step kernels of kernels/decoder.cl, which ``accel.nn`` launches on float32 tensors."""
from __future__ import annotations

import threading
from typing import Any

from accel.kernels import source


class DecoderKernels:
    """Mixin for a Backend with ``compile``: kernels/decoder.cl's kernels, built once each."""

    _decoder_lock = threading.Lock()

    def decoder_launch(self, kernel: Any, grid: tuple[int, ...], block: tuple[int, ...],
                       args: list) -> None:
        """Launch a decoder.cl kernel on arguments accel.nn built and checked: contiguous
        tensors on this backend, then numpy scalars. The public ``launch`` by default; a runtime
        whose argument setting is costly overrides it (a decode step makes ~200 such calls)."""
        self.launch(kernel, grid, block, args)  # type: ignore[attr-defined]

    def decoder_kernel(self, name: str) -> Any:
        """Kernel ``name`` of kernels/decoder.cl built for this device (in the accel dialect)."""
        cache = self.__dict__.setdefault("_decoder_kernels", {})
        with self._decoder_lock:
            if name not in cache:
                cache[name] = self.compile(source("decoder.cl"), name, dialect="accel")  # type: ignore[attr-defined]
            return cache[name]
