"""The OpenCL side of kernels/accel.h where it computes by hand what the OpenCL library would:
float16 widening and narrowing in integer code, checked bit for bit against numpy's IEEE
conversions on every device (all 65,536 half bit patterns one way; ties, boundaries and a
million random floats the other), and the math macros with and without ACCEL_CLANG_BUILTINS
(the spelling for compilers that leave library calls as calls) on scalars and vectors."""
from __future__ import annotations

import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import DEVICES

import accel
from accel.backends.opencl.params import safe_lanes
from accel.tensor import Tensor

pytestmark = needs_opencl

CONVERT = """
KERNEL void widen(GLOBAL const T_F16* h, GLOBAL float* out, int n) {
    const int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (i < n) out[i] = LOAD_F16(h, i);
}
KERNEL void narrow(GLOBAL const float* x, GLOBAL T_F16* out, int n) {
    const int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (i < n) STORE_F16(out, i, x[i]);
}
"""


def _run(device: str, name: str, x: np.ndarray, out_dtype: str) -> np.ndarray:
    be = accel.get_backend(device)
    kernel = be.compile(CONVERT, name)
    src = Tensor(be, be.upload(x), x.shape, "float16" if x.dtype == np.float16 else "float32")
    out = Tensor.empty(be, x.shape, out_dtype)
    be.launch(kernel, (-(-x.size // 256), 1, 1), (256, 1, 1), [src, out, np.int32(x.size)])
    return out.numpy()


def _same(got: np.ndarray, want: np.ndarray, bits: type) -> None:
    """Bit-identical, except that a NaN only has to be a NaN (payloads are not specified)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


@pytest.mark.parametrize("device", DEVICES)
def test_float16_widening_is_exact_for_every_bit_pattern(device):
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    _same(_run(device, "widen", halves, "float32"), halves.astype(np.float32), np.uint32)


def _narrowing_inputs() -> np.ndarray:
    finite = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(finite[np.isfinite(finite)].astype(np.float64))
    ties = (finite[1:] + finite[:-1]) / 2  # exactly halfway: rounds to the even neighbour
    one_ulp = np.spacing(ties.astype(np.float32))
    edges = np.array([65504.0, 65519.99, 65520.0, 65536.0, 1e38, np.inf, 2.0**-24, 2.0**-25,
                      2.0**-25 * 1.0000001, 2.0**-26, 2.0**-14, 2.0**-14 - 2.0**-25, 0.0, np.nan])
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    parts = [finite, ties, ties - one_ulp, ties + one_ulp, edges]
    x = np.concatenate([p.astype(np.float32) for p in parts] + [random_bits.view(np.float32)])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("device", DEVICES)
def test_float16_narrowing_rounds_to_nearest_even_like_ieee(device):
    x = _narrowing_inputs()
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    _same(_run(device, "narrow", x, "float16"), want, np.uint16)


MATH = """
KERNEL void math(GLOBAL const float* a, GLOBAL const float* b, GLOBAL const float* c,
                 GLOBAL float* out, int n) {
    const int i = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * VW;
    if (i >= n) return;
    const vf_t x = VLOAD_F32(a, i), y = VLOAD_F32(b, i), z = VLOAD_F32(c, i);
    VSTORE_ARR(FMA(x, y, z), out, i);
    VSTORE_ARR(FMAX(x, y), out + n, i);
    VSTORE_ARR(FABS(x), out + 2 * n, i);
    VSTORE_ARR(VSUM(x) + (vf_t)0.0f, out + 3 * n, i);
    for (int k = 0; k < VW; ++k) {
        const float s = a[i + k];
        out[4 * n + i + k] = ROUND_HALF_AWAY(s);
        out[5 * n + i + k] = IS_NAN(s) ? 1.0f : 0.0f;
        out[6 * n + i + k] = IS_INF(s) ? 1.0f : 0.0f;
    }
}
"""


def _math_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    n = 4096
    a, b, c = (rng.standard_normal(n).astype(np.float32) * 100 for _ in range(3))
    one_ulp = np.float32(1 + 2.0**-23)  # (1 + 2^-23)^2 - (1 + 2^-22) is 2^-46 only when fused
    a[:8], b[:8], c[:8] = one_ulp, one_ulp, -np.float32(1 + 2.0**-22)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.5, -0.5, 2.5, -2.5, 0.49999997,
                        1.5, -0.0, 8388609.0, 3e38, 1e-45, -7.5, 0.0], np.float32)
    a[8:24], b[8:24] = special, special[::-1]
    return a, b, c


@pytest.mark.parametrize("builtins", [0, 1])
@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16])
def test_math_macros_match_ieee_with_and_without_clang_builtins(builtins, lanes):
    be = accel.get_backend(DEVICES[0])
    if lanes > safe_lanes(be.dev):
        pytest.skip(f"{lanes} lanes: {be.dev.name}'s compiler is not trusted with them (safe_lanes)")
    a, b, c = _math_inputs()
    n = a.size
    kernel = be.compile(MATH, "math", options=(f"-DVW={lanes}", f"-DACCEL_CLANG_BUILTINS={builtins}"))
    args = [Tensor(be, be.upload(v), v.shape, "float32") for v in (a, b, c)]
    out = Tensor.empty(be, (7, n), "float32")
    be.launch(kernel, (n // lanes // 64, 1, 1), (64, 1, 1), [*args, out, np.int32(n)])
    got = out.numpy()
    a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        fused = (a64 * b64 + c64).astype(np.float32)  # the product is exact in float64
        lane_sums = a64.reshape(-1, lanes).sum(axis=1).repeat(lanes)
        rounded = np.copysign(np.floor(np.abs(a64) + 0.5), a64)
    assert got[0][0] == np.float32(2.0**-46)  # fused: one rounding
    _same(got[0], fused, np.uint32)
    _same(got[1], np.fmax(a, b), np.uint32)
    _same(got[2], np.abs(a), np.uint32)
    finite = np.isfinite(lane_sums)  # lanes summed as a tree: float32 rounding, not float64's
    np.testing.assert_allclose(got[3][finite], lane_sums[finite], rtol=1e-5, atol=1e-3)
    # a NaN or infinity in a vector: NaN where the lanes' sum is NaN (a NaN, or inf - inf), the
    # infinity otherwise (float32 may also overflow where float64 does not, so only these lanes)
    special = ~finite
    np.testing.assert_array_equal(np.isnan(got[3][special]), np.isnan(lane_sums[special]))
    np.testing.assert_array_equal(got[3][special & ~np.isnan(lane_sums)],
                                  lane_sums[special & ~np.isnan(lane_sums)].astype(np.float32))
    _same(got[4], rounded.astype(np.float32), np.uint32)
    np.testing.assert_array_equal(got[5], np.isnan(a))
    np.testing.assert_array_equal(got[6], np.isinf(a))
