"""quantize / dequantize / qmatmul on the CPU reference against the `gguf` package's reference
quantizers (an independent implementation of GGML's block formats)."""
import gguf
import ml_dtypes
import numpy as np
import pytest

import accel

GGUF = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("shape", [(32,), (3, 64), (2, 2, 256)])
@pytest.mark.parametrize("scale", [1.0, 1e-6, 3e4])
def test_bytes_identical_to_gguf(rng, fmt, shape, scale):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    qt = accel.quantize(x, fmt, backend="cpu")
    ref = gguf.quants.quantize(x, GGUF[fmt])
    assert qt.raw.dtype == np.uint8 and qt.raw.shape == ref.shape
    assert np.array_equal(qt.raw, ref)
    deq = accel.dequantize(qt)
    assert deq.dtype == np.float32
    assert np.array_equal(deq, gguf.quants.dequantize(ref, GGUF[fmt]), equal_nan=True)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_ties_zero_blocks_and_extreme_sign(fmt):
    rows = np.zeros((4, 32), np.float32)
    rows[0, :4] = [127, 0.5, -0.5, 2.5]          # q8_0 d = 1: ties in code space
    rows[1, :4] = [-8, 0.5, -0.5, 1.5]           # q4_0 d = 1: ties toward +inf
    rows[2, :3] = [8, 1, -1]                      # positive extreme: q4_0 d < 0
    # rows[3] stays all zero
    qt = accel.quantize(rows, fmt, backend="cpu")
    assert np.array_equal(qt.raw, gguf.quants.quantize(rows, GGUF[fmt]))


def test_documented_examples_from_the_format_notes():
    x = np.zeros((2, 32), np.float32)
    x[0, :6] = [-8, 0.5, -0.5, 1.5, 8, 2.5]
    x[1, :3] = [8, 1, -1]
    raw = accel.quantize(x, "q4_0", backend="cpu").raw
    assert raw[0, :2].view(np.float16)[0] == 1.0 and raw[1, :2].view(np.float16)[0] == -1.0
    codes = np.concatenate([raw[:, 2:] & 15, raw[:, 2:] >> 4], axis=1).astype(int) - 8
    assert list(codes[0, :6]) == [-8, 1, 0, 2, 7, 3]
    assert list(codes[1, :3]) == [-8, -1, 1]


@pytest.mark.parametrize("fmt,zero_code", [("q8_0", 0), ("q4_0", 0x88)])
def test_non_finite_blocks_follow_accels_definition(fmt, zero_code):
    x = np.ones((3, 32), np.float32)
    x[0, 5] = np.nan
    x[1, 7] = -np.inf
    qt = accel.quantize(x, fmt, backend="cpu")
    d = qt.raw[:, :2].copy().view(np.float16)[:, 0]
    assert np.isnan(d[0]) and np.isinf(d[1]) and d[2] != 0
    assert np.all(qt.raw[:2, 2:] == zero_code)
    deq = accel.dequantize(qt)
    assert np.all(np.isnan(deq[:2])) and np.allclose(deq[2], 1, rtol=1e-3)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_inputs_quantize_like_their_float32_values(rng, dtype):
    x = rng.standard_normal((2, 64)).astype(dtype)
    assert np.array_equal(accel.quantize(x, "q8_0", backend="cpu").raw,
                          gguf.quants.quantize(x.astype(np.float32), GGUF["q8_0"]))


def test_from_raw_checks_length_and_round_trips(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    raw = gguf.quants.quantize(x, GGUF["q4_0"])
    qt = accel.QTensor.from_raw(raw, "q4_0", (4, 64))
    assert qt.shape == (4, 64) and np.array_equal(qt.raw, raw)
    with pytest.raises(accel.ShapeError, match="raw"):
        accel.QTensor.from_raw(raw[:, :-1], "q4_0", (4, 64))
    with pytest.raises(accel.ArgumentError, match="uint8"):
        accel.QTensor.from_raw(raw.astype(np.int16), "q4_0", (4, 64))
    with pytest.raises(accel.ShapeError, match="multiple of 32"):
        accel.QTensor.from_raw(raw, "q4_0", (4, 63))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_qmatmul_is_x_times_dequantized_weight(rng, fmt, dtype):
    w = rng.standard_normal((5, 96)).astype(np.float32)
    x = rng.standard_normal((2, 3, 96)).astype(dtype)
    qw = accel.quantize(w, fmt, backend="cpu")
    got = accel.qmatmul(x, qw, backend="cpu")
    assert got.shape == (2, 3, 5) and got.dtype == np.dtype(dtype)
    wd = gguf.quants.dequantize(gguf.quants.quantize(w, GGUF[fmt]), GGUF[fmt]).astype(np.float64)
    ref = x.astype(np.float64) @ wd.T
    bound = 2 * accel.dtypes.UNIT_ROUNDOFF[accel.dtypes.dtype_name(dtype)] * np.abs(ref) + \
        5 * np.sqrt(96) * 2**-24 * (np.abs(x.astype(np.float64)) @ np.abs(wd).T)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)
