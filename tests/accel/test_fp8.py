"""FP8: conversions bit for bit with torch, quantize_fp8's amax scaling at each granularity,
scaled_matmul against torch._scaled_mm and the oracle, and typed errors for what does not fit."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import accel
from accel.conformance import oracle, tolerance
from accel.dtypes import FP8_DTYPES, FP8_MAX, convert
from accel.errors import ArgumentError, DTypeError, ShapeError
from tolerance_checks import assert_within

torch = pytest.importorskip("torch", reason="the torch extra is not installed")


def _probe_values() -> np.ndarray:
    """Every float16 value (all FP8 values and their rounding midpoints are among them), the
    float32 neighbours of each FP8 format's largest value, infinities and NaN of both signs."""
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    edges = [np.nextafter(np.float32(m), np.float32(s * np.inf)) for m in FP8_MAX.values()
             for s in (-1, 1)]
    specials = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    return np.concatenate([halves, np.array(edges, np.float32), specials])


@pytest.mark.parametrize("name", FP8_DTYPES)
def test_conversion_matches_torch_bit_for_bit(name):
    x = _probe_values()
    ours = convert(x, name).view(np.uint8)
    theirs = torch.from_numpy(x).to(getattr(torch, name)).view(torch.uint8).numpy()
    assert np.array_equal(ours, theirs), f"{int((ours != theirs).sum())} of {x.size} differ"
    # accel.asarray converts the same way
    held = accel.asarray(x, dtype=name, backend="cpu")
    assert held.dtype == name and np.array_equal(held.numpy().view(np.uint8), ours)


def test_overflow_policy_is_torchs():
    x = np.array([500.0, -np.inf, 1e6], np.float32)
    assert convert(x, "float8_e4m3fn").astype(np.float32).tolist() == [448.0, -448.0, 448.0]
    assert convert(x, "float8_e5m2").astype(np.float32).tolist() == [512.0, -np.inf, np.inf]
    assert np.isnan(convert(x, "float8_e4m3fnuz").astype(np.float32)).all()


def test_torch_float8_tensors_are_accepted():
    t = torch.randn(4, 8).to(torch.float8_e5m2)
    held = accel.asarray(t, backend="cpu")
    assert held.dtype == "float8_e5m2"
    assert np.array_equal(held.numpy().view(np.uint8), t.view(torch.uint8).numpy())


@pytest.mark.parametrize("granularity, operand_of, shape, scale_shape", [
    ("tensor", "a", (5, 256), ()), ("row", "a", (5, 256), (5, 1)), ("block", "a", (5, 256), (5, 2)),
    ("tensor", "b", (256, 130), ()), ("row", "b", (256, 130), (1, 130)),
    ("block", "b", (256, 130), (2, 2))])
@pytest.mark.parametrize("name", FP8_DTYPES)
def test_quantize_fp8_scales_each_group_to_the_format_maximum(name, granularity, operand_of, shape,
                                                              scale_shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, (shape[0], 1))).astype(np.float32)
    x[:, :3] = 0 if operand_of == "b" else x[:, :3]  # b's first columns: all-zero groups per row
    data, scale = accel.quantize_fp8(x, name, granularity, operand_of=operand_of)
    assert data.dtype == ml_dtypes.finfo(getattr(ml_dtypes, name)).dtype and scale.shape == scale_shape
    assert scale.dtype == np.float32 and (scale > 0).all()
    # dequantized: within half an FP8 step of each value (relative 2^-4 for e4m3, 2^-3 for e5m2)
    expanded = _expand(scale, granularity, operand_of, shape)
    back = data.astype(np.float64) * expanded
    rel = 2.0 ** -(4 if "e4m3" in name else 3)
    assert (np.abs(back - x) <= rel * np.abs(x) + expanded * float(
        ml_dtypes.finfo(data.dtype).smallest_subnormal)).all()
    # each group's largest |x| lands on the format's maximum (or the group is zero, scale 1)
    top = np.abs(data.astype(np.float64)).max()
    assert top == FP8_MAX[name]


def _expand(scale, granularity, operand_of, shape):
    if granularity == "tensor":
        return np.full(shape, float(scale))
    if granularity == "row":
        return np.broadcast_to(scale.astype(np.float64), shape)
    tile = (1, 128) if operand_of == "a" else (128, 128)
    return np.repeat(np.repeat(scale.astype(np.float64), tile[0], 0), tile[1], 1)[: shape[0], : shape[1]]


def test_an_all_zero_group_gets_scale_one_and_zero_data():
    data, scale = accel.quantize_fp8(np.zeros((2, 128), np.float32), "float8_e4m3fn", "row")
    assert scale.tolist() == [[1.0], [1.0]] and not data.astype(np.float32).any()


def test_a_non_finite_group_reads_back_as_nan_and_leaves_other_groups_alone():
    x = np.array([[np.nan, 1000.0, 2.0], [1.0, np.inf, 3.0], [448.0, 1.0, 2.0]], np.float32)
    data, scale = accel.quantize_fp8(x, "float8_e4m3fn", "row")
    with np.errstate(invalid="ignore"):  # inf x 0 in the inf row: NaN, as asserted
        back = data.astype(np.float32) * scale
    assert np.isnan(back[:2]).all()  # 1000 is not silently clamped to 448 beside the NaN
    assert back[2].tolist() == [448.0, 1.0, 2.0] and scale[2, 0] == 1.0


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"])
@pytest.mark.parametrize("row", [[1e-44, 0.0], [1e-40, 5e-41], [5e-43, -1e-43]],
                         ids=["amax/max is 0", "a coarse subnormal", "fnuz's NaN"])
def test_a_group_of_subnormals_reads_back_finite_and_close(name, row):
    # amax / max underflows float32: the scale was 0 (0/0 data) or a subnormal too coarse for
    # the data to stay within the format's range (inf, or NaN in fnuz)
    x = np.array([row], np.float32)
    data, scale = accel.quantize_fp8(x, name)
    back = data.astype(np.float64) * float(scale)
    assert np.isfinite(back).all() and float(scale) > 0
    # the data's own rounding (3 or 2 mantissa bits, here near the format's subnormals) and
    # nothing else: every value within a quarter of amax
    assert np.abs(back - x).max() <= 0.25 * np.abs(x).max()


def test_a_normal_group_keeps_the_plain_float32_scale():
    # only subnormal quotients are rounded up: a normal amax / max is what torch computes
    amax = np.random.default_rng(0).uniform(1e-3, 1e4, 2000).astype(np.float32)
    _, scale = accel.quantize_fp8(amax[:, None], "float8_e4m3fn", "row")
    assert np.array_equal(scale[:, 0], amax / np.float32(448))


@pytest.mark.parametrize("shape,granularity,operand_of,scale_shape", [
    ((0, 256), "tensor", "a", ()), ((0, 256), "row", "a", (0, 1)), ((4, 0), "row", "a", (4, 1)),
    ((4, 0), "block", "a", (4, 0)), ((0, 3), "row", "b", (1, 3)), ((256, 0), "block", "b", (2, 0)),
])
def test_empty_inputs_get_the_scale_shapes_scaled_matmul_takes(shape, granularity, operand_of, scale_shape):
    data, scale = accel.quantize_fp8(np.zeros(shape, np.float32), "float8_e4m3fn", granularity,
                                     operand_of=operand_of)
    assert data.shape == shape and scale.shape == scale_shape


def test_dtype_objects_name_the_format_as_strings_do():
    x = np.array([[1.0, -896.0]], np.float32)
    for dtype in (np.dtype(ml_dtypes.float8_e5m2), ml_dtypes.float8_e5m2):
        data, scale = accel.quantize_fp8(x, dtype)
        assert data.dtype == ml_dtypes.float8_e5m2 and float(scale) == 896 / 57344


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_matmul_matches_torch_scaled_mm_on_cpu(scaling):
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(16, 64, generator=g) * 20).to(torch.float8_e4m3fn)
    b = (torch.randn(32, 64, generator=g) * 20).to(torch.float8_e4m3fn).t()  # column-major, as torch wants
    sa, sb = (torch.tensor(0.25), torch.tensor(2.0)) if scaling == "tensor" else \
        (torch.rand(16, 1, generator=g) + 0.5, torch.rand(1, 32, generator=g) + 0.5)
    theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    ours = accel.scaled_matmul(a, b.contiguous(), sa, sb, out_dtype="float32", backend="cpu")
    ref, mag = oracle.scaled_matmul(*(x.view(torch.uint8).numpy().view(getattr(ml_dtypes, "float8_e4m3fn"))
                                      for x in (a, b.contiguous())), sa.numpy(), sb.numpy(), None, None)
    bound = tolerance.matmul_bound(ref, mag, 64, "float32", "float32") + 2 * 2.0**-24 * np.abs(ref)
    assert_within(ours.numpy(), ref, bound, "float32")
    assert_within(theirs.numpy(), ref, bound, "float32")


def test_block_scaling_and_bias():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((6, 256)).astype(np.float32), rng.standard_normal((256, 130)).astype(np.float32)
    a, sa = accel.quantize_fp8(x, "float8_e4m3fn", "block")
    b, sb = accel.quantize_fp8(w, "float8_e4m3fn", "block", operand_of="b")
    bias = rng.standard_normal(130).astype(np.float32)
    got = accel.scaled_matmul(a, b, sa, sb, out_dtype="float32", bias=bias)
    ref, mag = oracle.scaled_matmul(a, b, sa, sb, bias, 128)
    assert_within(got, ref, tolerance.matmul_bound(ref, mag, 256, "float32", "float32") + 2 * 2.0**-24 * mag,
                  "float32")
    assert accel.scaled_matmul(a, b, sa, sb).dtype == ml_dtypes.bfloat16  # the default out_dtype


@pytest.mark.parametrize("call, error, words", [
    (lambda a, s: accel.scaled_matmul(a, a.T.copy(), s, np.ones((2, 2), np.float32)), ShapeError,
     "scale_a.shape, scale_b.shape"),
    (lambda a, s: accel.scaled_matmul(a.astype(np.float32), a.T.copy(), 1.0, 1.0), DTypeError, "a.dtype"),
    (lambda a, s: accel.scaled_matmul(a.view(np.uint8).view(ml_dtypes.float8_e5m2),
                                      a.T.copy().view(np.uint8).view(ml_dtypes.float8_e5m2), 1.0, 1.0),
     DTypeError, "b.dtype: expected float8_e4m3fn when a is float8_e5m2"),
    (lambda a, s: accel.scaled_matmul(a, a.T.copy(), 1.0, 1.0, bias=np.zeros(3, np.float32)),
     ShapeError, "bias.shape"),
    (lambda a, s: accel.scaled_matmul(a, a.T.copy(), 1.0, 1.0, out_dtype="int8"), DTypeError, "out_dtype"),
    (lambda a, s: accel.scaled_matmul(a[:, :100], a[:, :100].T.copy(), np.ones((4, 1), np.float32),
                                      np.ones((1, 1), np.float32)), ShapeError,
     "a.shape[1]: expected a multiple of 128 for block scaling"),
    (lambda a, s: accel.quantize_fp8(np.ones((2, 100), np.float32), "float8_e4m3fn", "block"),
     ShapeError, "a multiple of 128"),
    (lambda a, s: accel.quantize_fp8(np.ones((2, 128), np.float32), "float8", "row"), ArgumentError, "dtype"),
    (lambda a, s: accel.quantize_fp8(np.ones((2, 128), np.float32), "float8_e5m2", "col"),
     ArgumentError, "granularity"),
])
def test_what_does_not_fit_is_a_typed_error_naming_the_argument(call, error, words):
    a, s = accel.quantize_fp8(np.ones((4, 128), np.float32), "float8_e4m3fn")
    with pytest.raises(error, match=re.escape(words)):
        call(a, s)
