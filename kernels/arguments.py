"""The kernels' argument ABI (importable as ``accel.kernels.arguments``; every name is also
``accel.kernels.X``): the scalar arguments a shipped kernel takes after its buffers, and the codes
of the arguments that name a dtype or scaling.
"""
from __future__ import annotations

import math

import numpy as np

from accel.spec import ACTIVATIONS, DECODER_OPS

#: scaled_matmul.cl's arguments: the scale granularity (accel.spec.SCALINGS), the output's and
#: the bias's dtype (-1: no bias)
SCALING_CODE = {"tensor": 0, "row": 1, "block": 2}
FLOAT_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}


def scalar_args(spec) -> tuple:
    """The scalar arguments every shipped kernel of ``spec``'s op takes after its buffers, as
    numpy scalars of the sources' parameter types (int: int32, i64: int64, float: float32), so
    that every backend passes the same values the same way.

    >>> from accel.spec import matmul_spec
    >>> scalar_args(matmul_spec((2, 3), "float32", (3, 4), "float32"))
    (np.int32(2), np.int32(4), np.int32(3))
    """
    i32 = np.int32
    if spec.op in ("matmul", "qmatmul"):
        return i32(spec.M), i32(spec.N), i32(spec.K)
    if spec.op == "scaled_matmul":
        return (i32(spec.M), i32(spec.N), i32(spec.K), i32(SCALING_CODE[spec.scaling]),
                i32(FLOAT_CODE[spec.out_dtype]), i32(FLOAT_CODE.get(spec.bias_dtype, -1)))
    if spec.op == "attention":
        strides = spec.mask_strides() if spec.mask_shape is not None else (0, 0, 0, 0)
        return (i32(spec.Hq), i32(spec.Hkv), i32(spec.Sq), i32(spec.Sk), np.float32(spec.scale),
                i32(spec.causal), *(np.int64(s) for s in strides), i32(spec.window or 0),
                np.float32(spec.softcap or 0.0))
    if spec.op in DECODER_OPS:
        return decoder_args(spec)
    values = math.prod(spec.shape)  # quantize takes its count of blocks
    return (np.int64(values // spec.fmt.block if spec.op == "quantize" else values),)


#: softmax_f32's mask argument: none, bool (keep), additive
SOFTMAX_MASK_CODE = {None: 0, "bool": 1}  # any float dtype: 2


def softmax_mask_rows(mask_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(inner, outer) such that softmax_f32's row r of x (``shape``) reads mask row (r // outer)
    * inner + r % inner, or None where the mask's rows do not broadcast so: its last dim must be
    x's, and its leading dims (padded with 1s on the left) x's leading dims, then a run of 1s,
    then x's trailing row dims.

    >>> [softmax_mask_rows(m, (2, 3, 5, 8)) for m in [(2, 3, 5, 8), (5, 8), (2, 1, 5, 8), (2, 1, 1, 8)]]
    [(30, 30), (5, 30), (5, 15), (1, 15)]
    >>> softmax_mask_rows((1, 3, 1, 8), (2, 3, 5, 8)) is None  # two broadcast runs
    True
    """
    if not mask_shape or mask_shape[-1] != shape[-1] or len(mask_shape) > len(shape):
        return None
    m, x = (1,) * (len(shape) - len(mask_shape)) + tuple(mask_shape[:-1]), tuple(shape[:-1])
    for lead in range(len(x) + 1):  # x's dims [0, lead) kept, then a run of 1s, then x's again
        if m[:lead] != x[:lead]:
            break
        tail = next((k for k in range(lead, len(x)) if m[k] != 1), len(x))
        for start in range(lead, tail + 1):  # the 1s may run into dims where x is 1 too
            if m[start:] == x[start:]:
                return math.prod(x[start:]), math.prod(x[lead:])
    return None


def decoder_args(spec) -> tuple:
    """The scalars after the buffers of kernels/decoder.cl's kernel for a decoder-step ``spec``
    (rms_norm_f32, layer_norm_f32, softmax_f32, glu_f32, unary_f32, binary_f32, rope_f32,
    rms_norm_rope_f32, get_rows_f32).

    >>> from accel.spec import softmax_spec
    >>> decoder_args(softmax_spec((2, 3, 5, 8), "float32", 0.5, (5, 8), "bool"))
    (np.int32(8), np.float32(0.5), np.int32(1), np.int32(5), np.int32(30))
    """
    i32, f32 = np.int32, np.float32
    if spec.op == "rms_norm":
        return i32(spec.D), f32(spec.eps), i32(spec.weight)
    if spec.op == "layer_norm":
        return i32(spec.D), f32(spec.eps), i32(spec.weight), i32(spec.bias)
    if spec.op == "softmax":
        mode = SOFTMAX_MASK_CODE.get(spec.mask_dtype, 2)
        rows = softmax_mask_rows(spec.mask_shape, spec.shape) if spec.mask_shape is not None else None
        inner, outer = rows or (1, 1)
        return i32(spec.n), f32(spec.scale), i32(mode), i32(inner), i32(outer)
    act = i32(ACTIVATIONS.index(spec.activation)) if spec.op in ("glu", "silu", "gelu") else None
    if spec.op == "glu":  # up: its own operand, or the gate row's second half
        h = spec.out_shape[-1]
        rows = math.prod(spec.out_shape) // h if h else 0
        stride, up_off = (2 * h, h) if spec.split else (h, 0)
        return i32(rows), i32(h), i32(stride), i32(up_off), act
    if spec.op in ("rope", "rms_norm_rope"):
        B, H, S, D = spec.shape
        flags = (i32(spec.rotary_dim), i32(spec.interleaved), i32(spec.per_batch))
        if spec.op == "rope":
            return (i32(H), i32(S), i32(D), *flags, i32(math.prod(spec.shape)))
        return (i32(H), i32(S), i32(D), f32(spec.eps), *flags)
    if spec.op == "get_rows":
        return (i32(spec.table_shape[1]),)
    if spec.op in ("silu", "gelu"):
        return i32(math.prod(spec.shape)), act
    # add / mul: the operand of the output's shape first, the repeated one second
    small = spec.b_shape if spec.a_shape == spec.out_shape else spec.a_shape
    return i32(math.prod(spec.out_shape)), i32(spec.op == "mul"), i32(max(1, math.prod(small)))
