"""GGUF block quantization formats: the byte layouts, and nothing that holds data (the QTensor
that carries quantized bytes on a device is in accel.tensor).

The byte layouts are GGML's (block of 32 elements; a float16 scale ``d`` then the codes); see
docs/api.md for the exact reference rounding rules every backend reproduces bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

from accel.errors import ArgumentError, ShapeError, expected

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
