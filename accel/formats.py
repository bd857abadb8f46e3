"""GGUF block quantization formats: layouts, and the QTensor that carries quantized bytes.

The byte layouts are GGML's (block of 32 elements; a float16 scale ``d`` then the codes); see
docs/api.md for the exact reference rounding rules every backend reproduces bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ArgumentError, ShapeError, expected

if TYPE_CHECKING:  # both import this module
    from .backend import Backend
    from .tensor import Tensor

BLOCK = 32


@dataclass(frozen=True)
class QuantFormat:
    name: str
    block_bytes: int  # bytes per block of BLOCK elements
    bits: int

    def row_bytes(self, k: int) -> int:
        return k // BLOCK * self.block_bytes


FORMATS = {
    "q8_0": QuantFormat("q8_0", 2 + BLOCK, 8),
    "q4_0": QuantFormat("q4_0", 2 + BLOCK // 2, 4),
}


def get_format(fmt: object) -> QuantFormat:
    if isinstance(fmt, QuantFormat):
        return fmt
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ArgumentError(expected("fmt", f"one of {sorted(FORMATS)}", repr(fmt)))
    return FORMATS[fmt]


def check_quantizable_shape(shape: tuple[int, ...], arg: str = "x") -> None:
    if len(shape) < 1 or shape[-1] % BLOCK or shape[-1] == 0:
        raise ShapeError(expected(f"{arg}.shape[-1]", f"a positive multiple of {BLOCK}",
                                  f"shape {tuple(shape)}"))


class QTensor:
    """A tensor quantized along its last axis in a GGUF block format.

    ``raw`` is a numpy uint8 array ``[..., K // 32 * block_bytes]`` in GGUF block layout, ``shape``
    the logical shape ``[..., K]``. ``data`` is the backend-resident copy the ops read.

    >>> import numpy as np, accel
    >>> qt = accel.quantize(np.full((2, 64), 127, np.float32), "q8_0")  # d = 127 / 127 = 1
    >>> qt.shape, qt.raw.shape, float(accel.dequantize(qt)[1, 63])
    ((2, 64), (2, 68), 127.0)
    """

    def __init__(self, data: Tensor, fmt: QuantFormat, shape: tuple[int, ...], kind: str = "numpy"):
        self.data = data  # accel.Tensor of uint8, shape [..., row_bytes]
        self.format = fmt
        self.shape = tuple(shape)
        self.kind = kind  # the array kind dequantize() returns (that of quantize's input)

    @property
    def fmt(self) -> str:
        return self.format.name

    @property
    def backend(self) -> Backend:
        return self.data.backend

    @property
    def raw(self) -> np.ndarray:
        """The block bytes, read-only: on a host backend they are the weight's own storage, and
        writing them would change the weight behind accel's back (copy them to edit)."""
        view = self.data.numpy().view()
        view.flags.writeable = False
        return view

    @classmethod
    def from_raw(cls, raw: Any, fmt: str, shape: tuple[int, ...], *,
                 backend: str | Backend | None = None) -> QTensor:
        """Wrap GGUF block bytes (e.g. rows read from a GGUF file) after checking their length.

        >>> import numpy as np, accel
        >>> accel.QTensor.from_raw(np.zeros((4, 18), np.uint8), "q4_0", (4, 32)).shape
        (4, 32)
        """
        from .tensor import Tensor, asarray

        f = get_format(fmt)
        try:
            shape = tuple(shape)  # once: a generator would be spent by the check below
            ints = all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_))
                       for s in shape)
        except TypeError:  # not iterable
            ints = False
        if not ints:  # 4.5 or True would silently become 4 or 1
            raise ShapeError(expected("shape", "a tuple of ints [..., K]", repr(shape)))
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ShapeError(expected("shape", "non-negative sizes", repr(shape)))
        check_quantizable_shape(shape, "shape")
        want = shape[:-1] + (f.row_bytes(shape[-1]),)
        if isinstance(raw, QTensor):
            raise ArgumentError(expected("raw", "GGUF block bytes as a uint8 array (a QTensor's "
                                         "are its .raw)", "a QTensor"))
        host = raw.numpy() if isinstance(raw, Tensor) else np.asarray(raw)
        if host.dtype != np.uint8:
            raise ArgumentError(expected("raw", "a uint8 array", f"dtype {host.dtype}"))
        if host.size != int(np.prod(want)):
            raise ShapeError(expected("raw", f"{int(np.prod(want))} bytes ({fmt} blocks for "
                                      f"shape {shape}, i.e. {want})", f"{host.size} bytes"))
        return cls(asarray(host.reshape(want), backend=backend), f, shape)

    def to(self, backend: str | Backend) -> QTensor:
        """The same blocks on another backend (a copy; this QTensor is unchanged).

        >>> import numpy as np, accel
        >>> qt = accel.quantize(np.ones((2, 32), np.float32), "q8_0", backend="cpu")
        >>> qt.to("cpu").backend is qt.backend, qt.to("cpu").shape
        (True, (2, 32))
        """
        return QTensor(self.data.to(backend), self.format, self.shape, self.kind)

    def __repr__(self) -> str:
        return f"QTensor({self.fmt}, shape={self.shape}, backend={self.data.backend.device_id!r})"
