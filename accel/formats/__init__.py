"""GGUF block quantization formats: the byte layouts and codecs, and nothing that holds data
(the QTensor that carries quantized bytes on a device is in accel.tensor).

The byte layouts are GGML's (``ggml-common.h``): each format packs ``block`` elements of a row
into ``block_bytes`` bytes, blocks back to back with no padding. ``FORMATS`` is the one table of
them (ggml's ``type_traits``); each row names its numpy codec module in this package (the
reference quantizer, decoder and integer dot product, bit for bit GGML's). See docs/api.md for
the exact reference rounding rules every backend reproduces bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from accel.errors import ArgumentError, ShapeError, expected

#: elements per block of the legacy formats and mxfp4 (GGML's QK8_0, QK4_0, QK_MXFP4)
BLOCK = 32
#: elements per super-block of the K-quants (GGML's QK_K)
SUPER_BLOCK = 256


@dataclass(frozen=True)
class QuantFormat:
    """One row of the format table: everything else (dispatch, the backends' declarations, the
    conformance cases, the benchmarks, the support matrix) asks this table."""
    name: str
    block: int  # elements per block
    block_bytes: int  # bytes per block
    bits: int  # bits per element code
    #: the format x is quantized into for GGML's integer block dot products with this weight
    #: format (its ``vec_dot_type``); none for the activation formats q8_1 and q8_k
    vec_dot: str | None
    #: the codec module in this package: ``legacy`` (blocks of 32 with a float16 scale),
    #: ``kquants`` (super-blocks of 256, and mxfp4), ``iquants`` (non-linear codebooks),
    #: ``ternary`` (q1_0's signs, tq1_0's and tq2_0's -1 / 0 / 1), ``nvfp4``, ``codebook``
    #: (iq1_*, iq2_*, iq3_*: grid entries)
    family: str
    #: ggml's name of the type (GGUF's tensor type)
    ggml: str = ""
    #: where the block's float scales sit: (byte offset, numpy dtype name) of d, then of its
    #: minimum's scale where it has one (dmin, m); mxfp4's E8M0 byte is no float: none
    scales: tuple[tuple[int, str], ...] = ((0, "float16"),)
    #: ggml quantizes it only with an importance matrix (ggml_quantize_requires_imatrix), which
    #: accel.quantize does not take yet: such files come from llama-quantize
    needs_imatrix: bool = False

    def row_bytes(self, k: int) -> int:
        return k // self.block * self.block_bytes

    @property
    def codec(self):
        """The numpy codec: ``quantize(blocks, fmt)``, ``dequantize(raw, fmt)`` and
        ``dot(x_raw, x_fmt, w_raw, fmt, M, N, K)``, bit for bit GGML's reference."""
        return import_module(f"accel.formats.{self.family}")

    @property
    def activation_only(self) -> bool:
        """q8_1 and q8_k: formats ggml quantizes activations into, never weights."""
        return self.vec_dot is None


def _row(name: str, block: int, block_bytes: int, bits: int, vec_dot: str | None,
         family: str, scales: tuple[int, ...] = (0,), scale_dtype: str = "float16",
         needs_imatrix: bool = False) -> tuple[str, QuantFormat]:
    return name, QuantFormat(name, block, block_bytes, bits, vec_dot, family, name.upper(),
                             tuple((at, scale_dtype) for at in scales), needs_imatrix)


# the byte layouts of ggml-common.h; a format is one row here plus its codec's branch
FORMATS = dict([
    _row("q8_0", BLOCK, 2 + BLOCK, 8, "q8_0", "legacy"),
    _row("q4_0", BLOCK, 2 + BLOCK // 2, 4, "q8_0", "legacy"),
    # f16 d, f16 m, 16 bytes of nibbles
    _row("q4_1", BLOCK, 4 + BLOCK // 2, 4, "q8_1", "legacy", (0, 2)),
    # f16 d, 4 bytes of fifth bits, 16 bytes of nibbles
    _row("q5_0", BLOCK, 2 + 4 + BLOCK // 2, 5, "q8_0", "legacy"),
    _row("q5_1", BLOCK, 4 + 4 + BLOCK // 2, 5, "q8_1", "legacy", (0, 2)),
    # 16 bytes of 4-bit scale/min pairs, 64 bytes of 2-bit codes, f16 d, f16 dmin
    _row("q2_k", SUPER_BLOCK, 16 + SUPER_BLOCK // 4 + 4, 2, "q8_k", "kquants", (80, 82)),
    # 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit scales, f16 d
    _row("q3_k", SUPER_BLOCK, SUPER_BLOCK // 8 + SUPER_BLOCK // 4 + 12 + 2, 3, "q8_k", "kquants", (108,)),
    # f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    _row("q4_k", SUPER_BLOCK, 4 + 12 + SUPER_BLOCK // 2, 4, "q8_k", "kquants", (0, 2)),
    # q4_k plus 32 bytes of fifth bits
    _row("q5_k", SUPER_BLOCK, 4 + 12 + SUPER_BLOCK // 8 + SUPER_BLOCK // 2, 5, "q8_k", "kquants", (0, 2)),
    # 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, f16 d
    _row("q6_k", SUPER_BLOCK, SUPER_BLOCK // 2 + SUPER_BLOCK // 4 + 16 + 2, 6, "q8_k", "kquants", (208,)),
    # E8M0 exponent byte, then 32 E2M1 codes in nibbles
    _row("mxfp4", BLOCK, 1 + BLOCK // 2, 4, "q8_0", "kquants", ()),
    # f16 d, 16 bytes of nibbles indexing kvalues_iq4nl
    _row("iq4_nl", BLOCK, 2 + BLOCK // 2, 4, "q8_0", "iquants"),
    # f16 d, u16 high scale bits, 4 bytes of low scale nibbles, 128 bytes of nibbles
    _row("iq4_xs", SUPER_BLOCK, 2 + 2 + 4 + SUPER_BLOCK // 2, 4, "q8_k", "iquants"),
    # 16 bytes of sign bits (element j at bit j % 8 of byte j / 8) after f16 d = mean |x|
    _row("q1_0", 4 * BLOCK, 2 + 4 * BLOCK // 8, 1, "q8_0", "ternary"),
    # ternary codes: 48 bytes of five base-3 trits, 4 bytes of four, f16 d
    _row("tq1_0", SUPER_BLOCK, 48 + 4 + 2, 2, "q8_k", "ternary", (52,)),
    # ternary codes: 64 bytes of four 2-bit codes, f16 d
    _row("tq2_0", SUPER_BLOCK, SUPER_BLOCK // 4 + 2, 2, "q8_k", "ternary", (64,)),
    # codebooks: f16 d, then grid indices, signs and sub-scales (codebook.py); iq1_m's d is spread
    # over four 16-bit words (none in `scales`)
    _row("iq2_xxs", SUPER_BLOCK, 2 + SUPER_BLOCK // 4, 2, "q8_k", "codebook", needs_imatrix=True),
    _row("iq2_xs", SUPER_BLOCK, 2 + SUPER_BLOCK // 4 + SUPER_BLOCK // 32, 2, "q8_k", "codebook",
         needs_imatrix=True),
    _row("iq2_s", SUPER_BLOCK, 2 + SUPER_BLOCK // 4 + 2 * SUPER_BLOCK // 32, 2, "q8_k", "codebook"),
    _row("iq3_xxs", SUPER_BLOCK, 2 + 3 * SUPER_BLOCK // 8, 3, "q8_k", "codebook"),
    _row("iq3_s", SUPER_BLOCK, 2 + SUPER_BLOCK // 4 + SUPER_BLOCK // 32 + SUPER_BLOCK // 8 + 4, 3,
         "q8_k", "codebook"),
    _row("iq1_s", SUPER_BLOCK, 2 + SUPER_BLOCK // 8 + SUPER_BLOCK // 16, 1, "q8_k", "codebook",
         needs_imatrix=True),
    _row("iq1_m", SUPER_BLOCK, SUPER_BLOCK // 8 + SUPER_BLOCK // 16 + SUPER_BLOCK // 32, 1, "q8_k",
         "codebook", ()),
    # four UE4M3 sub-block scales (no float16: none in `scales`), 32 bytes of E2M1 nibbles
    _row("nvfp4", 2 * BLOCK, 4 + BLOCK, 4, "q8_0", "nvfp4", ()),
    # activation formats: f16 d, f16 s = d * sum(codes), 32 int8 codes
    _row("q8_1", BLOCK, 4 + BLOCK, 8, None, "legacy", (0, 2)),
    # f32 d, 256 int8 codes, 16 int16 sums of 16 codes
    _row("q8_k", SUPER_BLOCK, 4 + SUPER_BLOCK + 2 * SUPER_BLOCK // 16, 8, None, "kquants", (0,), "float32"),
])
#: the formats ``qmatmul(x_format=...)`` quantizes x into
X_FORMATS = tuple(sorted({f.vec_dot for f in FORMATS.values() if f.vec_dot}))
#: GGUF's type name -> accel's format
BY_GGML = {f.ggml: f for f in FORMATS.values()}


def quantize_blocks(blocks, fmt: QuantFormat):
    """GGUF bytes [n, block_bytes] of float32 blocks [n, block] (GGML's reference quantizer)."""
    return fmt.codec.quantize(blocks, fmt.name)


def dequantize_blocks(raw, fmt: QuantFormat):
    """float32 [n, block] of GGUF block bytes [n, block_bytes] (GGML's to_float)."""
    return fmt.codec.dequantize(raw, fmt.name)


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
