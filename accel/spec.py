"""Op semantics, defined once: validation, output shape/dtype, FLOP and byte counts.

Each public op turns its operands' shapes and dtypes into a frozen *spec*. The spec is what
``Backend.supports()`` judges, what a backend computes from, what the conformance suite records
and what the benchmarks divide by. No backend re-validates anything here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from accel.dtypes import FLOAT_DTYPES, FP8_DTYPES, itemsize
from accel.errors import ArgumentError, DTypeError, ShapeError, expected
from accel.formats import BLOCK, FORMATS, X_FORMATS, QuantFormat, check_quantizable_shape, get_format

Shape = tuple[int, ...]

_FLOAT32_MAX = float(np.finfo(np.float32).max)

#: largest K for which int8 GEMM is exact in int32 for ANY data: |a*b| <= 128*128 = 2**14 and
#: 131071 * 2**14 < 2**31, while 131072 * 2**14 = 2**31 overflows (all operands -128). Beyond it
#: accel refuses the call instead of returning a wrapped sum.
INT8_EXACT_K = 131071


@dataclass(frozen=True)
class MatmulSpec:
    """``a[..., M, K] @ b[..., K, N]`` with numpy batch broadcasting."""

    a_shape: Shape
    b_shape: Shape
    dtype: str
    out_dtype: str
    op: str = field(default="matmul", init=False)

    @property
    def M(self) -> int: return self.a_shape[-2]
    @property
    def K(self) -> int: return self.a_shape[-1]
    @property
    def N(self) -> int: return self.b_shape[-1]
    @cached_property
    def batch_shape(self) -> Shape: return np.broadcast_shapes(self.a_shape[:-2], self.b_shape[:-2])
    @property
    def batch(self) -> int: return math.prod(self.batch_shape)
    @cached_property
    def out_shape(self) -> Shape: return self.batch_shape + (self.M, self.N)
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype, self.dtype)
    @property
    def flops(self) -> int: return 2 * self.batch * self.M * self.N * self.K
    @property
    def bytes(self) -> int:
        ins = (math.prod(self.a_shape) + math.prod(self.b_shape)) * itemsize(self.dtype)
        return ins + math.prod(self.out_shape) * itemsize(self.out_dtype)

    def batch_offsets(self) -> np.ndarray:
        """int32 ``[batch, 2]``: the a-matrix and b-matrix index feeding each output batch entry
        (numpy broadcasting of the batch dims), the table the kernels read.

        >>> matmul_spec((2, 1, 3, 4), "float32", (3, 4, 5), "float32").batch_offsets().tolist()
        [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
        """
        ia = np.arange(math.prod(self.a_shape[:-2]), dtype=np.int64).reshape(self.a_shape[:-2])
        ib = np.arange(math.prod(self.b_shape[:-2]), dtype=np.int64).reshape(self.b_shape[:-2])
        ia, ib = np.broadcast_arrays(ia, ib)
        return np.ascontiguousarray(np.stack([ia.reshape(-1), ib.reshape(-1)], axis=1).astype(np.int32))


@dataclass(frozen=True)
class AttentionSpec:
    """Scaled dot-product attention, GQA, bottom-right causal, optional mask (see docs/api.md)."""

    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    D: int
    Dv: int
    dtype: str
    causal: bool
    scale: float
    mask_kind: str | None = None  # None, "bool" or "additive"
    mask_shape: Shape | None = None  # as given, broadcastable to [B, Hq, Sq, Sk]
    mask_dtype: str | None = None
    #: issue 42's options: a sliding window of W keys (causal only), logit soft-capping
    #: c * tanh(s / c), and one virtual sink logit per query head ([Hq] float32)
    window: int | None = None
    softcap: float | None = None
    sinks: bool = False
    op: str = field(default="attention", init=False)

    @property
    def options(self) -> bool:
        """Whether any of window, softcap or sinks is asked for (backends opt in to them)."""
        return self.window is not None or self.softcap is not None or self.sinks

    @property
    def out_shape(self) -> Shape: return (self.B, self.Hq, self.Sq, self.Dv)
    @property
    def out_dtype(self) -> str: return self.dtype
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype,) * 3
    @property
    def group(self) -> int: return self.Hq // self.Hkv

    @property
    def visible_pairs(self) -> int:
        """(query, key) pairs the causal rule keeps per head: query i sees j <= i + Sk - Sq."""
        if not self.causal:
            return self.Sq * self.Sk
        off, w = self.Sk - self.Sq, self.window or self.Sk
        return sum(max(0, min(self.Sk, i + off + 1) - max(0, i + off + 1 - w)) for i in range(self.Sq))

    @property
    def flops(self) -> int:
        # QK^T and PV: 2*D + 2*Dv per visible pair (softmax is lower order and not counted)
        return self.B * self.Hq * self.visible_pairs * (2 * self.D + 2 * self.Dv)

    @property
    def bytes(self) -> int:
        e = itemsize(self.dtype)
        n = self.B * (self.Hq * self.Sq * (self.D + self.Dv) + self.Hkv * self.Sk * (self.D + self.Dv))
        m = math.prod(self.mask_shape) * itemsize(self.mask_dtype) if self.mask_shape else 0
        return n * e + m

    def mask_strides(self) -> tuple[int, int, int, int]:
        """Element strides of the mask broadcast to [B, Hq, Sq, Sk] (0 on broadcast axes)."""
        shape = (1,) * (4 - len(self.mask_shape)) + tuple(self.mask_shape)
        strides, acc = [0] * 4, 1
        for ax in range(3, -1, -1):
            strides[ax] = 0 if shape[ax] == 1 else acc
            acc *= shape[ax]
        return tuple(strides)


@dataclass(frozen=True)
class QuantizeSpec:
    shape: Shape
    dtype: str
    fmt: QuantFormat
    op: str = field(default="quantize", init=False)

    @property
    def out_shape(self) -> Shape: return self.shape[:-1] + (self.fmt.row_bytes(self.shape[-1]),)
    @property
    def out_dtype(self) -> str: return "uint8"
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype,)
    @property
    def rows(self) -> int: return math.prod(self.shape[:-1])
    @property
    def flops(self) -> int: return 0
    @property
    def bytes(self) -> int: return math.prod(self.shape) * itemsize(self.dtype) + math.prod(self.out_shape)


@dataclass(frozen=True)
class DequantizeSpec:
    shape: Shape
    fmt: QuantFormat
    op: str = field(default="dequantize", init=False)

    @property
    def dtype(self) -> str: return "uint8"
    @property
    def out_shape(self) -> Shape: return self.shape
    @property
    def out_dtype(self) -> str: return "float32"
    @property
    def in_dtypes(self) -> tuple[str, ...]: return ("uint8",)
    @property
    def rows(self) -> int: return math.prod(self.shape[:-1])
    @property
    def flops(self) -> int: return 0
    @property
    def bytes(self) -> int:
        return math.prod(self.shape[:-1]) * self.fmt.row_bytes(self.shape[-1]) + math.prod(self.shape) * 4


@dataclass(frozen=True)
class QMatmulSpec:
    """``x[..., K] @ dequantize(w[N, K]).T``; with ``x_fmt``, x is quantized to it first and each
    block pair's codes are multiplied exactly in integers (GGML's CPU semantics, docs/api.md)."""

    x_shape: Shape
    N: int
    fmt: QuantFormat
    dtype: str
    x_fmt: QuantFormat | None = None
    op: str = field(default="qmatmul", init=False)

    @property
    def K(self) -> int: return self.x_shape[-1]
    @property
    def M(self) -> int: return math.prod(self.x_shape[:-1])
    @property
    def out_shape(self) -> Shape: return self.x_shape[:-1] + (self.N,)
    @property
    def out_dtype(self) -> str: return self.dtype
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype, "uint8")
    @property
    def flops(self) -> int: return 2 * self.M * self.N * self.K
    @property
    def weight_bytes(self) -> int:
        """Bytes of the quantized weight: what a memory-bound GEMV must stream per call."""
        return self.N * self.fmt.row_bytes(self.K)
    @property
    def bytes(self) -> int:
        e = itemsize(self.dtype)
        return self.weight_bytes + (self.M * self.K + self.M * self.N) * e


#: FP8 scaled matmul's scale granularities: one scale per tensor; per row of a and column of b
#: (torch._scaled_mm); per 1x128 block of a and 128x128 block of b (DeepSeek-V3 / DeepGEMM)
SCALINGS = ("tensor", "row", "block")
FP8_BLOCK = 128


def fp8_scale_shapes(scaling: str, M: int, K: int, N: int) -> tuple[Shape, Shape]:
    """(scale_a shape, scale_b shape) of an [M, K] @ [K, N] FP8 matmul at ``scaling``.

    >>> fp8_scale_shapes("block", 4, 256, 130)
    ((4, 2), (2, 2))
    """
    kb, nb = -(-K // FP8_BLOCK), -(-N // FP8_BLOCK)
    return {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, kb), (kb, nb))}[scaling]


@dataclass(frozen=True)
class ScaledMatmulSpec:
    """``(a * scale_a) @ (b * scale_b) + bias`` for FP8 ``a [M, K]``, ``b [K, N]``: exact products,
    float32 accumulation, one rounding to ``out_dtype`` (docs/api.md)."""

    M: int
    K: int
    N: int
    a_dtype: str
    b_dtype: str
    scaling: str
    out_dtype: str
    bias_dtype: str | None = None
    op: str = field(default="scaled_matmul", init=False)

    @property
    def dtype(self) -> str: return self.a_dtype
    @property
    def out_shape(self) -> Shape: return (self.M, self.N)
    @property
    def scale_shapes(self) -> tuple[Shape, Shape]:
        """The shapes scale_a and scale_b have under this spec's scaling."""
        return fp8_scale_shapes(self.scaling, self.M, self.K, self.N)
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.a_dtype, self.b_dtype)
    @property
    def flops(self) -> int: return 2 * self.M * self.N * self.K
    @property
    def bytes(self) -> int:
        scales = sum(math.prod(s) for s in self.scale_shapes) * 4
        return self.M * self.K + self.K * self.N + scales + self.M * self.N * itemsize(self.out_dtype)


# -- the decoder-step ops of accel.nn (issue 42) ----------------------------------------------------
#: the activations of glu, silu and gelu, in the order of kernels/decoder.cl's act_f codes
ACTIVATIONS = ("silu", "gelu_tanh", "gelu")
#: the decoder-step ops (accel.nn), each a spec
DECODER_OPS = ("rms_norm", "layer_norm", "softmax", "glu", "silu", "gelu", "add", "mul", "rope",
               "rms_norm_rope", "get_rows", "add_rms_norm", "norm_add_rms_norm")


def _elements_bytes(dtype: str, *shapes: Shape | None) -> int:
    return sum(math.prod(s) for s in shapes if s is not None) * itemsize(dtype)


class _RowWise:
    """A decoder-step op over the last axis (``D``) of ``shape``, its output of x's shape and
    dtype: what the row-wise specs share."""

    shape: Shape
    dtype: str

    @property
    def D(self) -> int: return self.shape[-1]
    @property
    def rows(self) -> int: return math.prod(self.shape[:-1])
    @property
    def out_shape(self) -> Shape: return self.shape
    @property
    def out_dtype(self) -> str: return self.dtype


@dataclass(frozen=True)
class NormSpec(_RowWise):
    """``rms_norm`` or ``layer_norm`` (``op``) over the last axis of ``x [..., D]``, in float32,
    output in x's dtype; ``weight`` / ``bias``: whether the ``[D]`` operands are there."""

    op: str
    shape: Shape
    dtype: str
    eps: float
    weight: bool
    bias: bool = False

    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype,) * (1 + self.weight + self.bias)
    @property
    def flops(self) -> int:
        # per element: rms_norm's square, add, divide (+ weight); layer_norm's mean add, centre,
        # square, add, centre again, divide (+ weight, + bias)
        per = (3 if self.op == "rms_norm" else 6) + self.weight + self.bias
        return per * math.prod(self.shape)
    @property
    def bytes(self) -> int:
        return _elements_bytes(self.dtype, self.shape, self.shape) + \
            (self.weight + self.bias) * self.D * itemsize(self.dtype)


@dataclass(frozen=True)
class ResidualNormSpec(_RowWise):
    """A pre-norm block's residual add and next norm, two outputs of x's shape and dtype, (s, y):
    ``add_rms_norm`` (``op``) s = x + residual, y = rms_norm(s) * weight (``weight``: whether
    it is there); ``norm_add_rms_norm`` s = rms_norm(x) * x_weight + residual, y = rms_norm(s)
    * weight (Gemma's sandwich norms). Each rounded as the separate ops round; float32 inside."""

    op: str
    shape: Shape
    dtype: str
    eps: float
    weight: bool = True
    #: the op's outputs: dispatch allocates as many tensors of ``out_shape``, ``Backend.run``
    #: takes them as a tuple (every other spec: one)
    outputs = 2

    @property
    def in_dtypes(self) -> tuple[str, ...]:
        return (self.dtype,) * (2 + self.weight + (self.op == "norm_add_rms_norm"))
    @property
    def flops(self) -> int:  # the add, and each norm's square, add, divide, weight
        return (1 + 4 * (1 + (self.op == "norm_add_rms_norm"))) * math.prod(self.shape)
    @property
    def bytes(self) -> int:
        vectors = (self.in_dtypes.count(self.dtype) - 2) * self.D
        return (4 * math.prod(self.shape) + vectors) * itemsize(self.dtype)


@dataclass(frozen=True)
class SoftmaxSpec(_RowWise):
    """``softmax(x * scale + mask)`` over the last axis; ``mask_shape`` broadcasts to x, of
    ``mask_dtype`` bool (True = keep) or a float dtype (added), or None."""

    shape: Shape
    dtype: str
    scale: float
    mask_shape: Shape | None = None
    mask_dtype: str | None = None
    op: str = field(default="softmax", init=False)

    @property
    def n(self) -> int: return self.shape[-1]
    @property
    def in_dtypes(self) -> tuple[str, ...]:
        return (self.dtype,) if self.mask_dtype is None else (self.dtype, self.mask_dtype)
    @property
    def flops(self) -> int: return 5 * math.prod(self.shape)  # scale, max, subtract, exp, divide
    @property
    def bytes(self) -> int:
        m = 0 if self.mask_shape is None else math.prod(self.mask_shape) * itemsize(self.mask_dtype)
        return _elements_bytes(self.dtype, self.shape, self.shape) + m


@dataclass(frozen=True)
class ActivationSpec:
    """``silu`` / ``gelu`` (``op``) of ``x`` (``activation`` one of :data:`ACTIVATIONS`), or
    ``glu``: ``activation(gate) * up``, where ``split`` means up is None and the last axis of
    ``shape`` (the gate's) holds the gate and up halves."""

    op: str
    shape: Shape
    dtype: str
    activation: str
    split: bool = False

    @property
    def out_shape(self) -> Shape:
        return self.shape[:-1] + (self.shape[-1] // 2,) if self.split else self.shape
    @property
    def out_dtype(self) -> str: return self.dtype
    @property
    def in_dtypes(self) -> tuple[str, ...]:
        return (self.dtype,) * (2 if self.op == "glu" and not self.split else 1)
    @property
    def flops(self) -> int:  # the activation's handful, and glu's product
        return (8 + (self.op == "glu")) * math.prod(self.out_shape)
    @property
    def bytes(self) -> int:
        ins = math.prod(self.shape) * (2 if self.op == "glu" and not self.split else 1)
        return (ins + math.prod(self.out_shape)) * itemsize(self.dtype)


@dataclass(frozen=True)
class BinarySpec:
    """``add`` or ``mul`` (``op``) of ``a`` and ``b`` with numpy broadcasting, in float32,
    rounded once to their dtype."""

    op: str
    a_shape: Shape
    b_shape: Shape
    dtype: str

    @cached_property
    def out_shape(self) -> Shape: return np.broadcast_shapes(self.a_shape, self.b_shape)
    @property
    def out_dtype(self) -> str: return self.dtype
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype, self.dtype)
    @property
    def flops(self) -> int: return math.prod(self.out_shape)
    @property
    def bytes(self) -> int: return _elements_bytes(self.dtype, self.a_shape, self.b_shape, self.out_shape)


@dataclass(frozen=True)
class RopeSpec(_RowWise):
    """``rope`` of ``x [B, H, S, D]``, or ``rms_norm_rope`` (``op``): rope of x's rms_norm (with
    ``eps``) times a ``[D]`` weight. The angles are operands: float32 ``cos`` and ``sin`` tables
    ``[T, rotary_dim / 2]`` that the caller computed from the positions (T = S, or B * S where
    ``per_batch``); NEOX halves, or GPT-J pairs where ``interleaved``."""

    op: str
    shape: Shape
    dtype: str
    rotary_dim: int
    interleaved: bool
    per_batch: bool
    eps: float = 0.0

    @property
    def table_shape(self) -> Shape:
        B, _, S, _ = self.shape
        return ((B * S) if self.per_batch else S, self.rotary_dim // 2)
    @property
    def in_dtypes(self) -> tuple[str, ...]:
        x = (self.dtype, self.dtype) if self.op == "rms_norm_rope" else (self.dtype,)
        return x + ("float32", "float32")
    @property
    def flops(self) -> int:  # two products and a sum per rotated element (+ the norm's 4)
        return (3 * self.rotary_dim // self.shape[-1] + 4 * (self.op == "rms_norm_rope")) * math.prod(self.shape)
    @property
    def bytes(self) -> int:
        tables = 2 * math.prod(self.table_shape) * 4
        w = self.shape[-1] * itemsize(self.dtype) if self.op == "rms_norm_rope" else 0
        return _elements_bytes(self.dtype, self.shape, self.shape) + tables + w


@dataclass(frozen=True)
class GetRowsSpec:
    """``get_rows``: rows of ``table [N, D]`` at int32 ``ids`` of ``ids_shape`` (each in [0, N):
    accel.nn checks their values), output ``ids_shape + (D,)``: a float table's rows in its
    dtype, or, where ``fmt`` is a quantization format (the table operand its blocks, uint8
    ``[N, row bytes]``), the rows dequantized to float32, as ``dequantize`` gives them."""

    table_shape: Shape
    dtype: str
    ids_shape: Shape
    fmt: QuantFormat | None = None
    op: str = field(default="get_rows", init=False)

    @property
    def out_shape(self) -> Shape: return self.ids_shape + (self.table_shape[1],)
    @property
    def out_dtype(self) -> str: return "float32" if self.fmt else self.dtype
    @property
    def in_dtypes(self) -> tuple[str, ...]: return (self.dtype, "int32")
    @property
    def flops(self) -> int: return 0
    @property
    def bytes(self) -> int:  # the rows read and written, and the ids
        n = math.prod(self.ids_shape)
        read = n * self.fmt.row_bytes(self.table_shape[1]) if self.fmt else math.prod(self.out_shape) * itemsize(self.dtype)
        return read + math.prod(self.out_shape) * itemsize(self.out_dtype) + n * 4


Spec = MatmulSpec | AttentionSpec | QuantizeSpec | DequantizeSpec | QMatmulSpec | ScaledMatmulSpec \
    | NormSpec | ResidualNormSpec | SoftmaxSpec | ActivationSpec | BinarySpec | RopeSpec | GetRowsSpec
OPS = ("matmul", "attention", "quantize", "dequantize", "qmatmul", "scaled_matmul")


def _hash_once(cls: type) -> None:
    """Specs key the verdict and launch-plan caches of every call: hash their fields once per
    spec instead of per lookup (nested shape tuples make the dataclass hash ~0.3 us)."""
    field_hash = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:  # frozen: written like a cached_property, past __setattr__
            h = self.__dict__["_hash"] = field_hash(self)
            return h

    def __getstate__(self) -> dict:  # str hashes differ between processes: never ship one
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    cls.__hash__, cls.__getstate__ = __hash__, __getstate__


for _cls in (MatmulSpec, AttentionSpec, QuantizeSpec, DequantizeSpec, QMatmulSpec, ScaledMatmulSpec,
             NormSpec, ResidualNormSpec, SoftmaxSpec, ActivationSpec, BinarySpec, RopeSpec, GetRowsSpec):
    _hash_once(_cls)


def _float_dtype(arg: str, dtype: str) -> None:
    if dtype not in FLOAT_DTYPES:
        raise DTypeError(expected(f"{arg}.dtype", f"one of {FLOAT_DTYPES}", dtype))


def matmul_spec(a_shape: Shape, a_dtype: str, b_shape: Shape, b_dtype: str,
                out_dtype: str | None = None) -> MatmulSpec:
    """Validate a matmul call.

    >>> matmul_spec((2, 3, 4), "float32", (4, 5), "float32").out_shape
    (2, 3, 5)
    """
    for arg, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) < 2:
            raise ShapeError(expected(f"{arg}.shape", "at least 2 dimensions [..., rows, cols]",
                                      f"shape {tuple(shape)}"))
    if a_dtype != b_dtype:
        raise DTypeError(expected("b.dtype", f"the same dtype as a ({a_dtype})", b_dtype))
    if a_dtype == "int8":
        default_out, allowed_out = "int32", ("int32",)
    elif a_dtype in FLOAT_DTYPES:
        default_out, allowed_out = a_dtype, FLOAT_DTYPES
    else:
        raise DTypeError(expected("a.dtype", f"one of {FLOAT_DTYPES + ('int8',)}", a_dtype))
    out_dtype = out_dtype or default_out
    if out_dtype not in allowed_out:
        raise DTypeError(expected("out_dtype", f"one of {allowed_out} for {a_dtype} inputs", out_dtype))
    if a_shape[-1] == 0:
        raise ShapeError(expected("a.shape[-1]", "K >= 1", 0))
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(expected("b.shape[-2]", f"K = a.shape[-1] = {a_shape[-1]}",
                                  f"{b_shape[-2]} (a {tuple(a_shape)}, b {tuple(b_shape)})"))
    try:
        np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ShapeError(expected("a, b batch dimensions", "broadcastable shapes",
                                  f"{tuple(a_shape[:-2])} and {tuple(b_shape[:-2])}")) from None
    if a_dtype == "int8" and a_shape[-1] > INT8_EXACT_K:
        raise ShapeError(expected("a.shape[-1]", f"K <= {INT8_EXACT_K} for int8 (int32 result is "
                                  "only guaranteed exact up to there)", a_shape[-1]))
    return MatmulSpec(tuple(a_shape), tuple(b_shape), a_dtype, out_dtype)


def finite_in_float32(x: int | float | np.number) -> bool:
    """Whether ``x`` rounds to a finite float32 (logits are scaled in float32). Numpy scalars are
    compared as Python numbers, so a float16 one does not overflow in the comparison itself, and
    huge Python ints are clamped before float() could overflow."""
    value = x.item() if isinstance(x, np.generic) else x
    return abs(float(min(max(value, -2 * _FLOAT32_MAX), 2 * _FLOAT32_MAX))) <= _FLOAT32_MAX


def check_attention_flags(causal: object, scale: object) -> None:
    """``causal`` a bool and ``scale`` a real number finite in float32, or None; raises
    ArgumentError naming the argument otherwise (also before torch's operator schema would cast
    them with an error of its own).

    >>> check_attention_flags(True, "x")
    Traceback (most recent call last):
    ...
    accel.errors.ArgumentError: scale: expected a real number or None, finite in float32, got 'x'
    """
    if not isinstance(causal, (bool, np.bool_)):
        raise ArgumentError(expected("causal", "a bool", repr(causal)))
    if scale is not None and (not isinstance(scale, (int, float, np.floating, np.integer))
                              or isinstance(scale, bool) or not finite_in_float32(scale)):
        raise ArgumentError(expected("scale", "a real number or None, finite in float32",
                                     repr(scale)))


def attention_spec(q_shape: Shape, k_shape: Shape, v_shape: Shape, dtypes: tuple[str, str, str],
                   causal: bool = False, scale: float | None = None,
                   mask_shape: Shape | None = None, mask_dtype: str | None = None,
                   window: int | None = None, softcap: float | None = None,
                   sinks_shape: Shape | None = None, sinks_dtype: str | None = None) -> AttentionSpec:
    """Validate an attention call.

    >>> attention_spec((1, 8, 1, 64), (1, 2, 10, 64), (1, 2, 10, 32), ("float16",) * 3).out_shape
    (1, 8, 1, 32)
    """
    for arg, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 4 or min(shape) < 1:
            raise ShapeError(expected(f"{arg}.shape", "4 positive dimensions [B, H, S, D]",
                                      f"shape {tuple(shape)}"))
    _float_dtype("q", dtypes[0])
    for arg, dt in (("k", dtypes[1]), ("v", dtypes[2])):
        if dt != dtypes[0]:
            raise DTypeError(expected(f"{arg}.dtype", f"the dtype of q ({dtypes[0]})", dt))
    B, Hq, Sq, D = q_shape
    Bk, Hkv, Sk, Dk = k_shape
    Bv, Hv, Sv, Dv = v_shape
    if Bk != B or Bv != B:
        raise ShapeError(expected("k.shape[0], v.shape[0]", f"batch B = {B}", f"{Bk}, {Bv}"))
    if Dk != D:
        raise ShapeError(expected("k.shape[3]", f"head dim D = q.shape[3] = {D}", Dk))
    if Hv != Hkv or Sv != Sk:
        raise ShapeError(expected("v.shape[1:3]", f"(Hkv, Sk) = {(Hkv, Sk)} as in k", (Hv, Sv)))
    if Hq % Hkv:
        raise ShapeError(expected("q.shape[1]", f"a multiple of the kv heads Hkv = {Hkv}", Hq))
    check_attention_flags(causal, scale)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    mask_kind = None
    if mask_shape is not None:
        if mask_dtype == "bool":
            mask_kind = "bool"
        elif mask_dtype in FLOAT_DTYPES:
            mask_kind = "additive"
        else:
            raise DTypeError(expected("mask.dtype", f"bool or one of {FLOAT_DTYPES}", mask_dtype))
        if len(mask_shape) > 4:
            raise ShapeError(expected("mask.shape", "at most 4 dimensions", tuple(mask_shape)))
        try:
            if np.broadcast_shapes(mask_shape, (B, Hq, Sq, Sk)) != (B, Hq, Sq, Sk):
                raise ValueError
        except ValueError:
            raise ShapeError(expected("mask.shape", f"broadcastable to [B, Hq, Sq, Sk] = "
                                      f"{[B, Hq, Sq, Sk]}", tuple(mask_shape))) from None
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ArgumentError(expected("window", "None or an integer >= 1", repr(window)))
        if not causal:
            raise ArgumentError(expected("window", "None unless causal=True (the window ends at "
                                         "each query's causal position)", repr(window)))
        window = int(window)
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float, np.integer, np.floating)) \
                or not finite_in_float32(softcap) or not softcap > 0:
            raise ArgumentError(expected("softcap", "None or a real number > 0, finite in float32",
                                         repr(softcap)))
        softcap = float(softcap)
    if sinks_shape is not None:
        if sinks_dtype != "float32":
            raise DTypeError(expected("sinks.dtype", "float32", sinks_dtype))
        if tuple(sinks_shape) != (Hq,):
            raise ShapeError(expected("sinks.shape", f"({Hq},), one logit per query head",
                                      tuple(sinks_shape)))
    return AttentionSpec(B, Hq, Hkv, Sq, Sk, D, Dv, dtypes[0], bool(causal), float(scale),
                         mask_kind, tuple(mask_shape) if mask_shape is not None else None, mask_dtype,
                         window, softcap, sinks_shape is not None)


def quantize_spec(shape: Shape, dtype: str, fmt: object) -> QuantizeSpec:
    f = get_format(fmt)
    _float_dtype("x", dtype)
    check_quantizable_shape(tuple(shape), f)
    return QuantizeSpec(tuple(shape), dtype, f)


def dequantize_spec(shape: Shape, fmt: QuantFormat) -> DequantizeSpec:
    check_quantizable_shape(tuple(shape), fmt, "shape")
    return DequantizeSpec(tuple(shape), fmt)


def qmatmul_spec(x_shape: Shape, x_dtype: str, w_shape: Shape, fmt: QuantFormat,
                 x_format: object = None) -> QMatmulSpec:
    """Validate a quantized matmul call.

    >>> from accel.formats import get_format
    >>> qmatmul_spec((2, 64), "float32", (5, 64), get_format("q4_0"), "q8_0").x_fmt.name
    'q8_0'
    """
    _float_dtype("x", x_dtype)
    x_fmt = None
    if x_format is not None:
        if not isinstance(x_format, str) or x_format not in X_FORMATS:
            raise ArgumentError(expected("x_format", f"None or one of {X_FORMATS}", repr(x_format)))
        x_fmt = get_format(x_format)
        if x_fmt.name != fmt.vec_dot:  # q8_k weights (an activation format) have none
            want = f"None or {fmt.vec_dot!r}" if fmt.vec_dot else "None"
            raise ArgumentError(expected("x_format", f"{want} (GGML's x format for {fmt.name} "
                                         "weights)", repr(x_format)))
    if len(x_shape) < 1:
        raise ShapeError(expected("x.shape", "at least 1 dimension [..., K]", tuple(x_shape)))
    if len(w_shape) != 2:
        raise ShapeError(expected("w.shape", "a 2-d quantized weight [N, K]", tuple(w_shape)))
    check_quantizable_shape(tuple(w_shape), fmt, "w.shape")  # whole blocks, or rows overlap
    if x_shape[-1] != w_shape[1]:
        raise ShapeError(expected("x.shape[-1]", f"K = w.shape[1] = {w_shape[1]}", x_shape[-1]))
    return QMatmulSpec(tuple(x_shape), w_shape[0], fmt, x_dtype, x_fmt)


def scaled_matmul_spec(a_shape: Shape, a_dtype: str, b_shape: Shape, b_dtype: str,
                       scale_a_shape: Shape, scale_a_dtype: str, scale_b_shape: Shape,
                       scale_b_dtype: str, out_dtype: str = "bfloat16",
                       bias_shape: Shape | None = None, bias_dtype: str | None = None) -> ScaledMatmulSpec:
    """Validate an FP8 scaled matmul call; the scales' shapes say their granularity.

    >>> s = scaled_matmul_spec((4, 256), "float8_e4m3fn", (256, 128), "float8_e4m3fn",
    ...                        (4, 2), "float32", (2, 1), "float32")
    >>> s.scaling, s.out_dtype
    ('block', 'bfloat16')
    """
    for arg, dtype in (("a", a_dtype), ("b", b_dtype)):
        if dtype not in FP8_DTYPES:
            raise DTypeError(expected(f"{arg}.dtype", f"one of {FP8_DTYPES}", dtype))
    if "float8_e4m3fnuz" in (a_dtype, b_dtype) and a_dtype != b_dtype:
        raise DTypeError(expected("b.dtype", f"{a_dtype} like a (the fnuz format pairs only with "
                                  "itself)", b_dtype))
    if a_dtype == b_dtype == "float8_e5m2":
        raise DTypeError(expected("b.dtype", "float8_e4m3fn when a is float8_e5m2 (e5m2 x e5m2 "
                                  "is refused, as torch._scaled_mm refuses it)", b_dtype))
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ShapeError(expected("a.shape, b.shape", "2-d [M, K] and [K, N]",
                                  f"{tuple(a_shape)}, {tuple(b_shape)}"))
    (M, K), (K2, N) = a_shape, b_shape
    if K != K2:
        raise ShapeError(expected("b.shape[0]", f"K = a.shape[1] = {K}", K2))
    if out_dtype not in FLOAT_DTYPES:
        raise DTypeError(expected("out_dtype", f"one of {FLOAT_DTYPES}", out_dtype))
    for arg, dtype in (("scale_a", scale_a_dtype), ("scale_b", scale_b_dtype)):
        if dtype != "float32":
            raise DTypeError(expected(f"{arg}.dtype", "float32", dtype))
    scaling = _scaling(tuple(scale_a_shape), tuple(scale_b_shape), M, K, N)
    if bias_shape is not None:
        if tuple(bias_shape) != (N,):
            raise ShapeError(expected("bias.shape", f"({N},)", tuple(bias_shape)))
        if bias_dtype not in (out_dtype, "float32"):
            raise DTypeError(expected("bias.dtype", f"float32 or out_dtype {out_dtype}", bias_dtype))
    return ScaledMatmulSpec(M, K, N, a_dtype, b_dtype, scaling, out_dtype,
                            None if bias_shape is None else bias_dtype)


def _scaling(sa: Shape, sb: Shape, M: int, K: int, N: int) -> str:
    """The granularity the scale shapes name, or a ShapeError saying what fits."""
    if sa in ((), (1,)) and sb in ((), (1,)):
        return "tensor"
    for scaling in ("row", "block"):
        if (sa, sb) == fp8_scale_shapes(scaling, M, K, N):
            if scaling == "block" and K % FP8_BLOCK:
                raise ShapeError(expected("a.shape[1]", f"a multiple of {FP8_BLOCK} for block "
                                          "scaling (1x128 blocks of a, 128x128 of b)", K))
            return scaling
    fits = " per row, or ".join(" and ".join(map(str, fp8_scale_shapes(g, M, K, N)))
                                for g in ("row", "block"))
    raise ShapeError(expected("scale_a.shape, scale_b.shape", f"() and () per tensor, {fits} per "
                              "block", f"{sa}, {sb}"))


# -- the decoder-step ops' builders: the checks accel.nn's public functions make -------------------
def _decoder_float(arg: str, dtype: str) -> None:
    if dtype not in FLOAT_DTYPES:
        raise DTypeError(expected(f"{arg}.dtype", f"one of {FLOAT_DTYPES}", dtype))


def _like(arg: str, dtype: str | None, like: str, like_dtype: str) -> None:
    if dtype is not None and dtype != like_dtype:
        raise DTypeError(expected(f"{arg}.dtype", f"the dtype of {like} ({like_dtype})", dtype))


def _row_vector(arg: str, shape: Shape | None, dtype: str | None, n: int, like: str,
                like_dtype: str) -> bool:
    """Whether the optional ``[n]`` operand ``arg`` of ``like``'s dtype is there."""
    if shape is None:
        return False
    _like(arg, dtype, like, like_dtype)
    if tuple(shape) != (n,):
        raise ShapeError(expected(f"{arg}.shape", f"({n},), the last dimension of {like}", tuple(shape)))
    return True


def check_eps(eps: object) -> float:
    """``eps`` as a float: a finite real number >= 0, else an ArgumentError naming it."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(eps)) or float(eps) < 0:
        raise ArgumentError(expected("eps", "a finite real number >= 0", repr(eps)))
    return float(eps)


def check_real(arg: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a float: a finite real number (> 0 with ``positive``), else an ArgumentError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)) or (positive and float(value) <= 0):
        raise ArgumentError(expected(arg, "a finite real number" + (" > 0" if positive else ""),
                                     repr(value)))
    return float(value)


def norm_spec(op: str, x_shape: Shape, x_dtype: str, eps: object,
              weight_shape: Shape | None = None, weight_dtype: str | None = None,
              bias_shape: Shape | None = None, bias_dtype: str | None = None) -> NormSpec:
    """Validate an ``rms_norm`` or ``layer_norm`` (``op``) call.

    >>> norm_spec("rms_norm", (2, 8), "float32", 1e-6, (8,), "float32").flops
    64
    """
    _decoder_float("x", x_dtype)
    e = check_eps(eps)
    if not x_shape:
        raise ShapeError(expected("x.shape", "at least 1 dimension [..., D]", tuple(x_shape)))
    D = x_shape[-1]
    w = _row_vector("weight", weight_shape, weight_dtype, D, "x", x_dtype)
    b = _row_vector("bias", bias_shape, bias_dtype, D, "x", x_dtype)
    return NormSpec(op, tuple(x_shape), x_dtype, e, w, b)


def residual_norm_spec(op: str, x_shape: Shape, x_dtype: str, eps: object, residual_shape: Shape,
                       residual_dtype: str, weight_shape: Shape | None = None,
                       weight_dtype: str | None = None, x_weight_shape: Shape | None = None,
                       x_weight_dtype: str | None = None) -> ResidualNormSpec:
    """Validate an ``add_rms_norm`` or ``norm_add_rms_norm`` (``op``: both weights needed) call.

    >>> residual_norm_spec("add_rms_norm", (2, 8), "float32", 1e-6, (2, 8), "float32").outputs
    2
    """
    _decoder_float("x", x_dtype)
    e = check_eps(eps)
    _like("residual", residual_dtype, "x", x_dtype)
    if tuple(residual_shape) != tuple(x_shape) or not x_shape:
        raise ShapeError(expected("residual.shape", f"x's shape {tuple(x_shape)} (at least 1 "
                                  "dimension)", tuple(residual_shape)))
    D = x_shape[-1]
    w = _row_vector("weight", weight_shape, weight_dtype, D, "x", x_dtype)
    if op == "norm_add_rms_norm":
        xw = _row_vector("x_weight", x_weight_shape, x_weight_dtype, D, "x", x_dtype)
        for arg, there in (("x_weight", xw), ("weight", w)):
            if not there:
                raise ArgumentError(expected(arg, f"a ({D},) weight of x's dtype", "None"))
    return ResidualNormSpec(op, tuple(x_shape), x_dtype, e, w)


def check_softmax_mask(mask_dtype: str, mask_shape: Shape, shape: Shape) -> None:
    """A softmax mask against x's ``shape``: bool or a float dtype, broadcastable to x (also the
    torch operator's fake, so a bad mask fails while tracing)."""
    if mask_dtype != "bool" and mask_dtype not in FLOAT_DTYPES:
        raise DTypeError(expected("mask.dtype", f"bool or one of {FLOAT_DTYPES}", mask_dtype))
    try:
        if np.broadcast_shapes(tuple(mask_shape), tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ShapeError(expected("mask.shape", f"broadcastable to x's shape {tuple(shape)}",
                                  tuple(mask_shape))) from None


def softmax_spec(x_shape: Shape, x_dtype: str, scale: object, mask_shape: Shape | None = None,
                 mask_dtype: str | None = None) -> SoftmaxSpec:
    """Validate a softmax call.

    >>> softmax_spec((2, 5, 8), "float32", 0.5, (5, 8), "bool").in_dtypes
    ('float32', 'bool')
    """
    _decoder_float("x", x_dtype)
    s = check_real("scale", scale)
    if not x_shape:
        raise ShapeError(expected("x.shape", "at least 1 dimension", tuple(x_shape)))
    if mask_shape is not None:
        check_softmax_mask(mask_dtype, mask_shape, x_shape)
        mask_shape = tuple(mask_shape)
    return SoftmaxSpec(tuple(x_shape), x_dtype, s, mask_shape, mask_dtype if mask_shape else None)


def activation_spec(op: str, x_shape: Shape, x_dtype: str, activation: str,
                    up_shape: Shape | None = None, up_dtype: str | None = None) -> ActivationSpec:
    """Validate ``silu`` / ``gelu`` (``op``; ``activation`` names the function) or ``glu`` of
    ``gate`` (``x_shape``) and ``up`` (None: the gate's halves).

    >>> activation_spec("glu", (3, 8), "float32", "silu").out_shape
    (3, 4)
    """
    if activation not in ACTIVATIONS:
        raise ArgumentError(expected("activation", f"one of {ACTIVATIONS}", repr(activation)))
    arg = "gate" if op == "glu" else "x"
    _decoder_float(arg, x_dtype)
    split = False
    if op == "glu":
        if up_shape is not None:
            _like("up", up_dtype, "gate", x_dtype)
            if tuple(up_shape) != tuple(x_shape):
                raise ShapeError(expected("up.shape", f"the shape of gate {tuple(x_shape)}",
                                          tuple(up_shape)))
        elif not x_shape or x_shape[-1] % 2:
            raise ShapeError(expected("gate.shape", "an even last dimension (gate and up halves) "
                                      "when up is None", tuple(x_shape)))
        else:
            split = True
    return ActivationSpec(op, tuple(x_shape), x_dtype, activation, split)


def binary_spec(op: str, a_shape: Shape, a_dtype: str, b_shape: Shape, b_dtype: str) -> BinarySpec:
    """Validate ``add`` or ``mul`` (``op``).

    >>> binary_spec("add", (2, 3), "float16", (3,), "float16").out_shape
    (2, 3)
    """
    _decoder_float("a", a_dtype)
    _like("b", b_dtype, "a", a_dtype)
    try:
        np.broadcast_shapes(tuple(a_shape), tuple(b_shape))
    except ValueError:
        raise ShapeError(expected("a, b shapes", "shapes that broadcast",
                                  f"{tuple(a_shape)} and {tuple(b_shape)}")) from None
    return BinarySpec(op, tuple(a_shape), tuple(b_shape), a_dtype)


def rope_spec(op: str, x_shape: Shape, x_dtype: str, rotary_dim: int, interleaved: bool,
              per_batch: bool, eps: float = 0.0) -> RopeSpec:
    """A ``rope`` / ``rms_norm_rope`` call whose arguments accel.nn checked (the positions are
    values it reads: their shape and range, rotary_dim against D, the weight).

    >>> rope_spec("rope", (2, 4, 3, 64), "float32", 32, False, True).table_shape
    (6, 16)
    """
    _decoder_float("x", x_dtype)
    if len(x_shape) != 4:
        raise ShapeError(expected("x.shape", "4 dimensions [B, H, S, D]", tuple(x_shape)))
    return RopeSpec(op, tuple(x_shape), x_dtype, int(rotary_dim), bool(interleaved), bool(per_batch),
                    float(eps))


def get_rows_spec(table_shape: Shape, table_dtype: str, ids_shape: Shape) -> GetRowsSpec:
    """Validate a ``get_rows`` call (the ids' values are accel.nn's to check): ``table_dtype`` a
    float dtype, or a quantization format's name for a table of its blocks.

    >>> get_rows_spec((50, 8), "float16", (2, 3)).out_shape
    (2, 3, 8)
    >>> s = get_rows_spec((50, 64), "q4_0", (3,))
    >>> s.dtype, s.out_dtype
    ('uint8', 'float32')
    """
    if len(table_shape) != 2:
        raise ShapeError(expected("table.shape", "a 2-d table [N, D]", tuple(table_shape)))
    if table_dtype not in FORMATS:
        _decoder_float("table", table_dtype)
        return GetRowsSpec(tuple(table_shape), table_dtype, tuple(ids_shape))
    fmt = FORMATS[table_dtype]
    check_quantizable_shape(tuple(table_shape), fmt, "table.shape")
    return GetRowsSpec(tuple(table_shape), "uint8", tuple(ids_shape), fmt)


__all__ = ["MatmulSpec", "AttentionSpec", "QuantizeSpec", "DequantizeSpec", "QMatmulSpec", "Spec",
           "OPS", "BLOCK", "matmul_spec", "attention_spec", "quantize_spec", "dequantize_spec",
           "qmatmul_spec", "INT8_EXACT_K", "X_FORMATS", "ScaledMatmulSpec", "scaled_matmul_spec",
           "SCALINGS", "FP8_BLOCK", "fp8_scale_shapes", "ACTIVATIONS", "DECODER_OPS", "NormSpec",
           "SoftmaxSpec", "ActivationSpec", "BinarySpec", "norm_spec", "softmax_spec", "ResidualNormSpec",
           "residual_norm_spec",
           "activation_spec", "binary_spec", "RopeSpec", "rope_spec", "GetRowsSpec", "get_rows_spec", "check_eps", "check_real", "check_softmax_mask"]
