"""The dtypes accel's ops define, conversions from numpy, ml_dtypes and torch dtype objects, and
exact int8 products through float arithmetic.

accel names dtypes by strings ("float32", "bfloat16", ...). numpy has no bfloat16, so host arrays
of that dtype use ml_dtypes.bfloat16 (a numpy-compatible extension dtype).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from accel.errors import DTypeError, expected

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
#: the FP8 formats (ml_dtypes' names): OCP e4m3 without infinities, e5m2, and AMD MI300's e4m3
#: "fnuz" (exponent bias 8, one NaN 0x80, no negative zero, no infinities)
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz")
#: each FP8 format's largest finite value
FP8_MAX = {name: float(ml_dtypes.finfo(getattr(ml_dtypes, name)).max) for name in FP8_DTYPES}

_NUMPY = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    # held for user kernels (accel.kernel with unsigned/short buffers); no op accepts them
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
    **{name: np.dtype(getattr(ml_dtypes, name)) for name in FP8_DTYPES},
}
#: dtypes accel can hold at all; each op then accepts its own subset (and says which)
_KNOWN = f"a dtype accel knows ({', '.join(sorted(_NUMPY))})"
#: numpy dtype -> accel's name, for the dtypes accel holds
NAME_OF_NUMPY = {v: k for k, v in _NUMPY.items()}

#: unit roundoff (half an ulp at 1.0) of each float format; see docs/conformance.md
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "tf32": 2.0**-11,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}


def to_numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds host arrays of accel dtype ``name``."""
    try:
        return _NUMPY[name]
    except KeyError:
        raise DTypeError(expected("dtype", _KNOWN, repr(name))) from None


def dtype_name(dtype: object, arg: str = "dtype") -> str:
    """Normalize a dtype given as a string, numpy/ml_dtypes dtype or torch dtype to accel's name.

    >>> dtype_name(np.float16), dtype_name("bfloat16")
    ('float16', 'bfloat16')
    """
    fast = NAME_OF_NUMPY.get(dtype) if isinstance(dtype, np.dtype) else None
    if fast is not None:
        return fast
    if dtype is None:  # np.dtype(None) is float64: a None here was never meant as that
        raise DTypeError(expected(arg, _KNOWN, "None"))
    if isinstance(dtype, str) and dtype in _NUMPY:
        return dtype
    if type(dtype).__module__ == "torch":  # torch.float32 etc.; str() is "torch.float32"
        name = str(dtype).removeprefix("torch.")
        if name in _NUMPY:
            return name
        raise DTypeError(expected(arg, _KNOWN, str(dtype)))
    try:
        npd = np.dtype(dtype)
    except TypeError:
        raise DTypeError(expected(arg, _KNOWN, repr(dtype))) from None
    try:
        return NAME_OF_NUMPY[npd]
    except KeyError:
        raise DTypeError(expected(arg, _KNOWN, str(npd))) from None


def itemsize(name: str) -> int:
    return to_numpy_dtype(name).itemsize


def convert(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` converted to accel dtype ``name``, rounding to nearest even, with overflow as torch's
    ``Tensor.to`` has it: float8_e4m3fn (no infinity) saturates finite and infinite values to
    +-448, float8_e5m2 overflows to +-inf, float8_e4m3fnuz to NaN; NaN stays NaN.

    >>> convert(np.array([500.0, -np.inf, 0.3], np.float32), "float8_e4m3fn").astype(float).tolist()
    [448.0, -448.0, 0.3125]
    """
    target = to_numpy_dtype(name)
    if name == "float8_e4m3fn":
        top = float(ml_dtypes.finfo(target).max)
        with np.errstate(invalid="ignore"):
            x = np.clip(np.asarray(x, np.float32), -top, top)  # NaN passes through clip
    out = np.asarray(x).astype(target)
    if name == "float8_e5m2":  # ml_dtypes encodes NaN 0x7E, torch 0x7F (all mantissa bits)
        bits = out.view(np.uint8)
        bits[np.isnan(out.astype(np.float32))] |= 0x7F
    return out


# -- int8 ---------------------------------------------------------------------------------------
#: int8 products one float32 GEMM sums exactly: |a*b| <= 2**14, and 1024 * 2**14 = 2**24, float32's
#: exact-integer range
EXACT_INT8_CHUNK = 1024


def exact_int8_matmul(xp, a, b):
    """``a @ b`` for int8 arrays, exactly, as int32, through float BLAS, for any array library with
    numpy's API (``xp`` is numpy or cupy).

    Integer matmul has no BLAS (numpy's runs at ~0.3 GOP/s here), but int8 values are exact in
    float32 and so is a sum of up to EXACT_INT8_CHUNK products. K is split into such chunks, each
    a float32 GEMM, and the chunks are added in float64 (exact below 2**53); accel.spec bounds K
    so the total fits int32.

    >>> import numpy as np
    >>> a = np.full((1, 3000), -128, np.int8)
    >>> int(exact_int8_matmul(np, a, a.T.copy())[0, 0]) == 3000 * 128 * 128
    True
    """
    K = a.shape[-1]
    acc = None
    for k0 in range(0, K, EXACT_INT8_CHUNK):
        part = xp.matmul(a[..., k0:k0 + EXACT_INT8_CHUNK].astype(xp.float32),
                         b[..., k0:k0 + EXACT_INT8_CHUNK, :].astype(xp.float32)).astype(xp.float64)
        acc = part if acc is None else acc + part
    return acc.astype(xp.int32)
