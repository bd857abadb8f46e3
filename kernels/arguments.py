"""The kernels' argument ABI (importable as ``accel.kernels.arguments``; every name is also
``accel.kernels.X``): the scalar arguments a shipped kernel takes after its buffers, and the codes
of the arguments that name a dtype or scaling.
"""
from __future__ import annotations

import math

import numpy as np


#: scaled_matmul.cl's arguments: the scale granularity (accel.spec.SCALINGS), the output's and
#: the bias's dtype (-1: no bias)
SCALING_CODE = {"tensor": 0, "row": 1, "block": 2}
FLOAT_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}


def scalar_args(spec) -> tuple:
    """The scalar arguments every shipped kernel of ``spec``'s op takes after its buffers, as
    numpy scalars of the sources' parameter types (int: int32, i64: int64, float: float32), so
    that every backend passes the same values the same way. (The decoder-step ops' kernels take
    theirs from their plan: backends/plan.py ``_decoder``.)

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
    values = math.prod(spec.shape)  # quantize takes its count of blocks
    return (np.int64(values // spec.fmt.block if spec.op == "quantize" else values),)


#: decoder.cl's softmax's mask argument: none, bool (keep), or the additive mask's dtype
SOFTMAX_MASK_CODE = {None: 0, "bool": 1, "float32": 2, "float16": 3, "bfloat16": 4}


def softmax_mask_rows(mask_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(inner, outer) such that decoder.cl's softmax, for row r of x (``shape``), reads mask row
    (r // outer) * inner + r % inner, or None where the mask's rows do not broadcast so: its last
    dim must be x's, and its leading dims (padded with 1s on the left) x's leading dims, then a
    run of 1s, then x's trailing row dims.

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


#: the most dims decoder.cl's binary walks after merging (its scalars: sizes and strides of 4)
BINARY_DIMS = 4


def broadcast_runs(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...] | None:
    """(sizes, a_strides, b_strides) of the output of ``a + b`` (numpy broadcasting, contiguous
    operands), each of :data:`BINARY_DIMS` entries (leading 1s and 0s to pad), in elements, 0
    where an operand repeats: the output's dims with its size-1 dims dropped and each run of
    dims that both operands step through alike merged into one. None where more than
    BINARY_DIMS dims are left.

    >>> broadcast_runs((2, 3, 5, 40), (5, 40))  # a bias of the last dims: two runs
    ((1, 1, 6, 200), (0, 0, 200, 1), (0, 0, 0, 1))
    >>> broadcast_runs((3, 1, 64), (5, 64))[0]
    (1, 3, 5, 64)
    """
    out = np.broadcast_shapes(a_shape, b_shape)

    def steps(shape: tuple[int, ...]) -> list[int]:
        shape = (1,) * (len(out) - len(shape)) + tuple(shape)
        strides, step = [], 1
        for d in reversed(shape):
            strides.append(step if d != 1 else 0)
            step *= d
        return strides[::-1]

    dims = [(n, sa, sb) for n, sa, sb in zip(out, steps(a_shape), steps(b_shape)) if n != 1]
    merged: list[tuple[int, int, int]] = []
    for n, sa, sb in dims:  # outer dim (m, pa, pb) and this one walk as one where pa = sa * n
        if merged and merged[-1][1] == sa * n and merged[-1][2] == sb * n:
            merged[-1] = (merged[-1][0] * n, sa, sb)
        else:
            merged.append((n, sa, sb))
    if len(merged) > BINARY_DIMS:
        return None
    pad = [(1, 0, 0)] * (BINARY_DIMS - len(merged))
    return tuple(tuple(int(v) for v in col) for col in zip(*(pad + merged)))
