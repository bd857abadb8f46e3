"""What every kernel runtime (OpenCL, CUDA, HIP) shares beyond ``accel.backend.Backend``: the
decoder-step kernels of kernels/decoder.cl, which ``accel.nn`` launches on float32 tensors."""
from __future__ import annotations

import threading
from typing import Any

from accel.kernels import source


class DecoderKernels:
    """Mixin for a Backend with ``compile``: kernels/decoder.cl's kernels, built once each."""

    _decoder_lock = threading.Lock()

    def decoder_kernel(self, name: str) -> Any:
        """Kernel ``name`` of kernels/decoder.cl built for this device (in the accel dialect)."""
        cache = self.__dict__.setdefault("_decoder_kernels", {})
        with self._decoder_lock:
            if name not in cache:
                cache[name] = self.compile(source("decoder.cl"), name, dialect="accel")  # type: ignore[attr-defined]
            return cache[name]
