"""accel.matmul semantics on the CPU reference, against float64/int64 numpy computed from the
already-rounded inputs."""
import ml_dtypes
import numpy as np
import pytest

import accel
from accel.dtypes import UNIT_ROUNDOFF

BF16 = ml_dtypes.bfloat16


def f64_matmul(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def within_float32_accumulation(got, a, b, out_dtype):
    """Per-element bound: output rounding + sqrt(K)-scaled float32 accumulation error."""
    ref = f64_matmul(a, b)
    absprod = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    K = a.shape[-1]
    bound = 2 * UNIT_ROUNDOFF[out_dtype] * np.abs(ref) + 5 * np.sqrt(K) * UNIT_ROUNDOFF["float32"] * absprod + 1e-30
    return np.all(np.abs(got.astype(np.float64) - ref) <= bound)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 1), (1, 1)), ((3, 17), (17, 5)), ((2, 63, 65), (65, 64)), ((4, 1, 7, 31), (3, 31, 2)),
    ((127, 3), (2, 1, 3, 1)),
])
def test_float_matmul_broadcasts_and_accumulates_in_float32(rng, dtype, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    got = accel.matmul(a, b, backend="cpu")
    assert got.dtype == np.dtype(dtype)
    assert got.shape == np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    assert within_float32_accumulation(got, a, b, accel.dtypes.dtype_name(dtype))


def test_out_dtype_keeps_float32_precision(rng):
    a = rng.standard_normal((8, 300)).astype(np.float16)
    b = rng.standard_normal((300, 8)).astype(np.float16)
    got = accel.matmul(a, b, out_dtype="float32", backend="cpu")
    assert got.dtype == np.float32
    assert within_float32_accumulation(got, a, b, "float32")
    # the float16 result is the float32 one rounded once
    assert np.array_equal(accel.matmul(a, b, backend="cpu"), got.astype(np.float16))


def test_small_integers_give_exact_answers(rng):
    a = rng.integers(-3, 4, (5, 64)).astype(BF16)
    b = rng.integers(-3, 4, (64, 6)).astype(BF16)
    got = accel.matmul(a, b, out_dtype="float32", backend="cpu")
    assert np.array_equal(got, f64_matmul(a, b).astype(np.float32))


def test_int8_is_exact_across_chunk_boundaries(rng):
    for K in (1, 1023, 1024, 1025, 5000):
        a = rng.integers(-128, 128, (3, K), dtype=np.int8)
        b = rng.integers(-128, 128, (K, 4), dtype=np.int8)
        got = accel.matmul(a, b, backend="cpu")
        assert got.dtype == np.int32
        assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_int8_extreme_sum_at_the_exact_limit():
    K = accel.spec.INT8_EXACT_K
    a = np.full((1, K), -128, np.int8)
    got = accel.matmul(a, a.T.copy(), backend="cpu")
    assert int(got[0, 0]) == K * 128 * 128 == 2**31 - 2**14


def test_int8_beyond_the_exact_limit_is_refused():
    K = accel.spec.INT8_EXACT_K + 1
    with pytest.raises(accel.ShapeError, match=r"a\.shape\[-1\].*131071"):
        accel.matmul(np.zeros((1, K), np.int8), np.zeros((K, 1), np.int8), backend="cpu")


def test_nan_and_inf_propagate_like_ieee():
    a = np.array([[np.nan, 0, 1], [np.inf, 1, 0], [1, 2, 3]], np.float32)
    b = np.eye(3, dtype=np.float32)
    # float32 on the CPU is numpy's own a @ b, warning included (backends/cpu.py's fast path)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        got = accel.matmul(a, b, backend="cpu")
    assert np.isnan(got[0, 0]) and np.isnan(got[0, 1]) and np.isnan(got[0, 2])  # NaN * 0 = NaN
    assert got[1, 0] == np.inf and np.isnan(got[1, 1])
    assert np.array_equal(got[2], [1, 2, 3])


def test_float16_overflow_gives_inf():
    a = np.full((1, 4), 200, np.float16)
    got = accel.matmul(a, a.T.copy(), backend="cpu")
    assert got[0, 0] == np.inf  # 160000 > 65504


def test_empty_batch_gives_empty_result():
    got = accel.matmul(np.ones((0, 2, 3), np.float32), np.ones((3, 4), np.float32), backend="cpu")
    assert got.shape == (0, 2, 4)
