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
    values = math.prod(spec.shape)  # quantize takes its count of blocks
    return (np.int64(values // spec.fmt.block if spec.op == "quantize" else values),)
