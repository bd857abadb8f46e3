"""The tolerance model and the comparison rules: a correct float32-accumulating GEMM passes with
headroom even on adversarial data, a float16-accumulating one fails, NaN/Inf must agree."""
import math

import numpy as np
import pytest

from accel.conformance import oracle, tolerance
from accel.conformance.compare import compare_values, ulp


def _sequential(a, b, acc_dtype):
    """A GEMM that keeps its running sum in ``acc_dtype`` (the simplest accumulation order)."""
    acc = np.zeros((a.shape[0], b.shape[1]), acc_dtype)
    for k in range(a.shape[1]):
        acc = (acc.astype(np.float32) + a[:, k:k + 1].astype(np.float32)
               * b[k:k + 1].astype(np.float32)).astype(acc_dtype)
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("data", ["positive", "normal"])
def test_float32_accumulation_passes_and_float16_accumulation_fails(dtype, data):
    rng = np.random.default_rng(1)
    K = 4096
    draw = rng.uniform if data == "positive" else rng.normal
    a, b = draw(size=(4, K)).astype(dtype), draw(size=(K, 3)).astype(dtype)
    ref, mag = oracle.matmul(a, b)
    name = np.dtype(dtype).name
    bound = tolerance.matmul_bound(ref, mag, K, name, "float32")
    good = compare_values(_sequential(a, b, np.float32).astype(dtype), ref, bound, name)
    assert good.ok and good.stats["err_over_bound"] < 0.5, good.reason
    bad = compare_values(_sequential(a, b, np.float16).astype(dtype), ref, bound, name)
    assert not bad.ok and bad.stats["err_over_bound"] > 2


def test_bound_scales_with_the_declared_accumulator():
    ref, mag = np.array([1.0]), np.array([100.0])
    fp32 = tolerance.matmul_bound(ref, mag, 1024, "float32", "float32")
    tf32 = tolerance.matmul_bound(ref, mag, 1024, "float32", "tf32")
    assert tf32[0] / fp32[0] == pytest.approx(2.0 ** 13, rel=1e-3)
    expected = 2 * 2.0**-24 + tolerance.LAMBDA * math.sqrt(1024) * 2.0**-24 * 100
    assert fp32[0] == pytest.approx(expected, rel=1e-6)


def test_a_dropped_term_exceeds_the_bound_even_at_k_16384():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 16384)).astype(np.float32), rng.standard_normal((16384, 2)).astype(np.float32)
    ref, mag = oracle.matmul(a, b)
    dropped = (a[:, :-1].astype(np.float64) @ b[:-1].astype(np.float64)).astype(np.float32)
    verdict = compare_values(dropped, ref, tolerance.matmul_bound(ref, mag, 16384, "float32", "float32"),
                             "float32")
    assert not verdict.ok


@pytest.mark.parametrize("got,ref,ok,nan_inf_ok", [
    (np.nan, 1.0, False, False),        # NaN where the oracle has none
    (0.0, np.nan, False, False),        # a NaN turned into a number
    (np.nan, np.nan, True, True),
    (np.inf, 70000.0, True, True),      # float16 overflow to +Inf
    (65504.0, 70000.0, False, False),   # ...is required
    (-np.inf, 70000.0, False, False),   # with the right sign
    (65504.0, 65519.0, True, True),     # within the bound of the threshold: either answer
    (np.inf, 65519.0, True, True),
    (60000.0, 65519.0, False, True),    # ...but a finite answer is still held to the bound
    (np.inf, 100.0, False, False),      # an infinity where the result is finite
])
def test_nan_and_inf_agreement_in_float16(got, ref, ok, nan_inf_ok):
    bound = np.array([2 * 2.0**-11 * 65504])  # the output-rounding term 2 u |C| near the top
    verdict = compare_values(np.array([got], np.float16), np.array([ref]), bound, "float16")
    assert verdict.ok is ok, verdict.reason
    assert verdict.stats["nan_inf_ok"] is nan_inf_ok


def test_exact_mode_fails_on_any_deviation():
    ref = np.array([3.0, -7.0])
    assert compare_values(np.array([3.0, -7.0], np.float32), ref, None, "float32").ok
    verdict = compare_values(np.array([3.0, np.nextafter(np.float32(-7), np.float32(0))], np.float32),
                             ref, None, "float32")
    assert not verdict.ok and verdict.stats["max_ulp"] == 1.0


def test_ulp_of_each_format():
    assert ulp(np.array([1.0]), "float32")[0] == 2.0**-23
    assert ulp(np.array([1.0]), "float16")[0] == 2.0**-10
    assert ulp(np.array([1.0]), "bfloat16")[0] == 2.0**-7
    assert ulp(np.array([0.0]), "float16")[0] == 2.0**-24  # the subnormal spacing
    assert ulp(np.array([5.0]), "int32")[0] == 1.0


def test_attention_bound_is_tight_enough_to_see_a_wrong_softmax_scale():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 8, 64)) for _ in range(3))
    res = oracle.attention(q, k, v, None, causal=False, scale=0.125, mask_kind=None)
    off = oracle.attention(q, k, v, None, causal=False, scale=0.125 * (1 + 1e-3), mask_kind=None)
    bound = tolerance.attention_bound(res, 64, 8, "float32", "float32")
    assert compare_values(res["out"].astype(np.float32), res["out"], bound, "float32").ok
    assert not compare_values(off["out"].astype(np.float32), res["out"], bound, "float32").ok


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_rows_that_see_no_key_must_be_exactly_zero(dtype):
    """float16's floor (its smallest normal, 6.1e-5) once let 3e-5 written into causal rows with
    no visible key pass; such rows are exactly zero (docs/api.md), with no bound at all."""
    from accel.backends.cpu import CPUBackend
    from accel.conformance.case import Case
    from accel.conformance.runner import run_case

    class DeadRowsNonzero(CPUBackend):
        name = "dead_rows_nonzero"

        def compute(self, spec, *arrays):
            res = super().compute(spec, *arrays)
            if spec.op == "attention":
                res[np.all(res == 0, axis=-1)] = np.asarray(3e-5, res.dtype)
            return res

    # Sq 9 > Sk 4, bottom-right causal: the first 5 query rows see no key
    case = Case.parse(f"attention/{dtype}/grid/q=1x2x9x32,k=1x1x4x32,v=1x1x4x32,causal=true,"
                      "data=normal,seed=0")
    result = run_case(DeadRowsNonzero(), case)
    assert not result.ok and "required within 0" in result.reason, result.reason
    assert run_case(CPUBackend(), case).ok
