"""GGUF block quantization formats: the byte layouts, and nothing that holds data (the QTensor
that carries quantized bytes on a device is in accel.tensor).

The byte layouts are GGML's (``ggml-common.h``): each format packs ``block`` elements of a row
into ``block_bytes`` bytes, blocks back to back with no padding. q8_0/q4_0/mxfp4 have blocks of
32, the K-quants (q4_k, q5_k, q6_k and the activation format q8_k) super-blocks of 256. See
docs/api.md for the exact reference rounding rules every backend reproduces bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

from accel.errors import ArgumentError, ShapeError, expected

#: elements per block of the legacy formats and mxfp4 (GGML's QK8_0, QK4_0, QK_MXFP4)
BLOCK = 32
#: elements per super-block of the K-quants (GGML's QK_K)
SUPER_BLOCK = 256


@dataclass(frozen=True)
class QuantFormat:
    name: str
    block: int  # elements per block
    block_bytes: int  # bytes per block
    bits: int  # bits per element code
    #: the format x is quantized into for GGML's integer block dot products with this weight
    #: format (its ``vec_dot_type``); none for q8_k, an activation format
    vec_dot: str | None

    def row_bytes(self, k: int) -> int:
        return k // self.block * self.block_bytes


FORMATS = {
    "q8_0": QuantFormat("q8_0", BLOCK, 2 + BLOCK, 8, "q8_0"),
    "q4_0": QuantFormat("q4_0", BLOCK, 2 + BLOCK // 2, 4, "q8_0"),
    # f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    "q4_k": QuantFormat("q4_k", SUPER_BLOCK, 4 + 12 + SUPER_BLOCK // 2, 4, "q8_k"),
    # q4_k plus 32 bytes of fifth bits
    "q5_k": QuantFormat("q5_k", SUPER_BLOCK, 4 + 12 + SUPER_BLOCK // 8 + SUPER_BLOCK // 2, 5, "q8_k"),
    # 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, f16 d
    "q6_k": QuantFormat("q6_k", SUPER_BLOCK, SUPER_BLOCK // 2 + SUPER_BLOCK // 4 + 16 + 2, 6, "q8_k"),
    # E8M0 exponent byte, then 32 E2M1 codes in nibbles
    "mxfp4": QuantFormat("mxfp4", BLOCK, 1 + BLOCK // 2, 4, "q8_0"),
    # f32 d, 256 int8 codes, 16 int16 sums of 16 codes
    "q8_k": QuantFormat("q8_k", SUPER_BLOCK, 4 + SUPER_BLOCK + 2 * SUPER_BLOCK // 16, 8, None),
}


def get_format(fmt: object) -> QuantFormat:
    """The format named ``fmt`` (or ``fmt`` itself when it is one).

    >>> get_format("q4_k").block, get_format("q4_k").block_bytes
    (256, 144)
    """
    if isinstance(fmt, QuantFormat):
        return fmt
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ArgumentError(expected("fmt", f"one of {sorted(FORMATS)}", repr(fmt)))
    return FORMATS[fmt]


def check_quantizable_shape(shape: tuple[int, ...], fmt: QuantFormat, where: str = "x.shape") -> None:
    """Raise a ShapeError (naming ``where``, the shape's argument) unless the last axis holds a
    whole number of ``fmt``'s blocks."""
    if len(shape) < 1:
        raise ShapeError(expected(where, "at least 1 dimension [..., K]", f"shape {tuple(shape)}"))
    if shape[-1] % fmt.block or shape[-1] == 0:
        raise ShapeError(expected(f"{where}[-1]", f"a positive multiple of {fmt.block} "
                                  f"({fmt.name}'s block)", f"K = {shape[-1]} (shape {tuple(shape)})"))
