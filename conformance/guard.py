"""Guarded outputs: the output tensor is a ``view()`` into a larger device buffer whose margins hold
a sentinel, checked after the op. A kernel writing one element outside its output fails even when
the visible output is right. The output itself starts as ``accel.tensor.NAN_FILL`` bytes (NaN in
every float format), so an element the kernel forgets to write shows up as a NaN the oracle does
not have.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.backend import Backend
from accel.dtypes import itemsize
from accel.tensor import NAN_FILL, Tensor

MARGIN_SENTINEL = 0xA5
_MIN_MARGIN = 256  # bytes each side: a stray write of any element size or small offset lands here


@dataclass
class GuardedOutput:
    tensor: Tensor
    buf: object
    margin: int
    nbytes: int

    @classmethod
    def alloc(cls, backend: Backend, shape: tuple[int, ...], dtype: str) -> "GuardedOutput":
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize(dtype)
        align = max(1, int(backend.alignment))
        margin = -(-_MIN_MARGIN // align) * align
        host = np.full(2 * margin + nbytes, MARGIN_SENTINEL, dtype=np.uint8)
        host[margin:margin + nbytes] = NAN_FILL
        buf = backend.upload(host)
        view = backend.view(buf, margin, nbytes)
        return cls(Tensor(backend, view, shape, dtype), buf, margin, nbytes)

    def check(self) -> str:
        """'' when both margins are intact, else a description of the stray writes."""
        backend = self.tensor.backend
        raw = np.asarray(backend.download(self.buf, 2 * self.margin + self.nbytes))
        before = raw[: self.margin] != MARGIN_SENTINEL
        after = raw[self.margin + self.nbytes:] != MARGIN_SENTINEL
        parts = []
        if before.any():
            first = self.margin - int(np.nonzero(before)[0][0])
            parts.append(f"{int(before.sum())} byte(s) written before the output (up to {first} "
                         "bytes before its start)")
        if after.any():
            parts.append(f"{int(after.sum())} byte(s) written after the output (first at byte "
                         f"+{int(np.nonzero(after)[0][0])} past its end)")
        return "; ".join(parts)

    def values(self) -> np.ndarray:
        return np.array(self.tensor.numpy(), copy=True)
