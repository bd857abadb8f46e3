"""kquant.cl's qgemv_k, the K-quant / mxfp4 GEMV (float x): every parameter set the planners and
``accel tune`` use computes x @ dequantize(w).T within the tolerance model on OpenCL, the GPU
sets (a warp per row group, split K, local-memory sums) included, since PoCL runs them too; the
weights it multiplies are dequantize's to the bit (a zero x row but one element reads one weight
exactly)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import accel
import accel.kernels as K
import accel.spec as S
from accel.backends.opencl import params as P
from accel.backends.plan import plan_for
from accel.conformance import oracle, tolerance
from accel.conformance.compare import compare_values
from accel.formats import get_format

WEIGHTS = ["q4_k"] + [f for f in K.KQUANT_FORMATS if f != "q4_k" and not get_format(f).activation_only]
SETS = {"cpu": K.CPU_KGEMV, "gpu": K.GPU_KGEMV,
        "cpu-tall": {**K.CPU_KGEMV, "RN": 3, "XRN": 3, "RM": 2, "VW": 8},  # RN 3 at M = 1, 1 beyond
        "gpu-rows": {**K.GPU_KGEMV, "KWG": 8, "RN": 2, "RM": 2}}
#: every set on q4_k; the device's default (CPU) set and the GPU set on the other formats (each
#: pairing is a program build, seconds on PoCL)
CASES = [("q4_k", name) for name in SETS] + [(f, name) for f in WEIGHTS[1:] for name in ("cpu", "gpu")]


@pytest.fixture
def cl(opencl_backend):
    saved = opencl_backend.params
    yield opencl_backend
    opencl_backend.params = saved


def _set(be, name: str) -> dict:
    """Use parameter set ``name`` (the CPU set at the device's safe vector width) for qgemv_k."""
    kp = dict(SETS[name])
    if kp["VW"] > 1:
        kp["VW"] = min(kp["VW"], P.safe_lanes(be.dev))
    be.params = {**be.params, "kgemv": kp}
    return kp


def _weight(fmt: str, n: int, k: int, rng) -> np.ndarray:
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[0, : k // 2] = -np.abs(w[0, : k // 2]) - 3  # negative-only blocks: large mins (q4_k's b)
    return np.asarray(accel.quantize(w, fmt, backend="cpu").raw)


@pytest.mark.parametrize("fmt,name", CASES)
def test_qgemv_k_is_within_the_tolerance_model(cl, fmt, name):
    kp = _set(cl, name)
    rng = np.random.default_rng(3)
    n, k = 37, 2 * get_format(fmt).block * (4 if fmt == "mxfp4" else 1)  # ragged rows, 2+ blocks
    raw = _weight(fmt, n, k, rng)
    halves = fmt == "q4_k" and name == "cpu"  # x in bfloat16 on one pairing
    for m, dtype in ((1, "float32"), (32, "float32")) + (((5, "bfloat16"),) if halves else ()):
        x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
        w = accel.QTensor.from_raw(raw, fmt, (n, k), backend=cl)
        got = np.asarray(accel.qmatmul(x, w))
        (launch,) = plan_for(S.qmatmul_spec(x.shape, dtype, (n, k), get_format(fmt)), cl.facts, cl.params)
        assert launch.kernel == "qgemv_k" and launch.variant.defines["KWG"] == kp["KWG"]
        ref, mag = oracle.qmatmul(x.astype(np.float64), raw, fmt, n)
        bound = tolerance.matmul_bound(ref, mag, k, dtype, "float32")
        verdict = compare_values(got, ref, bound, dtype)
        assert verdict.ok, (m, dtype, verdict.reason)


@pytest.mark.parametrize("fmt", WEIGHTS)
def test_qgemv_k_reads_dequantizes_weights_to_the_bit(cl, fmt):
    """x one-hot: each output is one weight, so any rounding of a * q - b other than
    dequantize's (two roundings, or one exact FMA) shows as a differing bit."""
    rng = np.random.default_rng(4)
    n, k = 9, get_format(fmt).block * 8
    raw = _weight(fmt, n, k, rng)
    w = accel.QTensor.from_raw(raw, fmt, (n, k), backend=cl)
    cols = np.arange(0, k, 7)
    x = np.zeros((len(cols), k), np.float32)
    x[np.arange(len(cols)), cols] = 1.0
    want = oracle.dequantize(raw, fmt, (n, k))[:, cols].T
    for name in ("cpu", "gpu"):
        _set(cl, name)
        assert np.array_equal(np.asarray(accel.qmatmul(x, w)), want.astype(np.float32)), name


def test_tune_searches_valid_kgemv_sets():
    assert "kgemv" in P.TUNABLE
    for kind in ("cpu", "gpu"):
        sets = P.candidates("kgemv", kind, 8)
        assert P.DEFAULTS[kind]["kgemv"] in sets or kind == "cpu"  # cpu sets take the device's lanes
        assert all(K.kquant("q4_k", params=p).defines["USUB"] in (1, 8) for p in sets)


#: the tall set (3 rows a work-item, 8 lanes: PoCL 3.0's width) on one format of each kind of
#: qgemv_kx sum (blocks of 32, super-blocks with mins, with 16 group scales, iq4's table); the
#: quick profile runs every format's at 8 lanes on PoCL 3.0 where it is installed
_TALL = ("q5_0", "q4_k", "q3_k", "iq4_xs")


@pytest.mark.parametrize("fmt,name", [(f, "cpu") for f in K.VECTOR_KX_FORMATS]
                         + [(f, "cpu-tall") for f in _TALL] + [("q4_k", "gpu")])
def test_quantized_x_is_the_cpu_references_bits(cl, fmt, name):
    """qmatmul(x_format=the format's vec_dot): qgemv_kx (CPU sets) and qmatmul_kx (GPU sets) add
    the same float32 block terms in the same order as the CPU reference: its bits. (iq4_xs: the
    CPU reference scales each group of 32 in float32, the kernels each block's integer sum, as
    ggml does: there qgemv_kx gives qmatmul_kx's bits.)"""
    x_fmt = get_format(fmt).vec_dot
    rng = np.random.default_rng(6)
    n, block = 37, get_format(fmt).block
    # at M <= 2 blocks go in groups of 4 (blocks of 32: 8): 2 blocks per row (less than a group),
    # 19 (groups and a partial one)
    for m, blocks in ((1, 2), (1, 19), (2, 19), (5, 19)):
        k = blocks * block
        w = accel.QTensor.from_raw(_weight(fmt, n, k, rng), fmt, (n, k), backend=cl)
        x = rng.standard_normal((m, k)).astype(np.float32)
        if fmt == "iq4_xs":
            _set(cl, "gpu")
            want = np.asarray(accel.qmatmul(x, w, x_format=x_fmt))
        else:
            want = accel.qmatmul(x, w.to("cpu"), x_format=x_fmt, backend="cpu")
        kp = _set(cl, name)
        launches = plan_for(S.qmatmul_spec(x.shape, "float32", (n, k), get_format(fmt), x_fmt),
                            cl.facts, cl.params)
        assert launches[-1].kernel == ("qgemv_kx" if kp["KWG"] == 1 else "qmatmul_kx")
        if block == 32 and kp["KWG"] == 1:  # rows of x in pairs, where blocks share sum trees
            assert launches[-1].variant.defines["RM"] == min(m, 2)
        assert np.array_equal(np.asarray(accel.qmatmul(x, w, x_format=x_fmt)), want), (m, blocks)


@pytest.mark.parametrize("fmt", ["q1_0", "nvfp4", "tq1_0"])
def test_blocks_that_span_several_x_blocks_give_the_cpu_references_bits(cl, fmt):
    """qmatmul_kx for the formats without qgemv_kx: q1_0's 128 values meet four q8_0 blocks,
    nvfp4's 64 two (each added as the CPU reference adds them), tq1_0's one q8_k block."""
    x_fmt = get_format(fmt).vec_dot
    rng = np.random.default_rng(8)
    n, block = 11, get_format(fmt).block
    for m, blocks in ((1, 3), (3, 2)):
        k = blocks * block
        w = accel.QTensor.from_raw(_weight(fmt, n, k, rng), fmt, (n, k), backend=cl)
        x = rng.standard_normal((m, k)).astype(np.float32)
        x[0, :5] = [1e-30, -3e4, 0.0, 7.5, -0.0]  # a block of mixed magnitudes
        launches = plan_for(S.qmatmul_spec(x.shape, "float32", (n, k), get_format(fmt), x_fmt),
                            cl.facts, cl.params)
        assert launches[-1].kernel == "qmatmul_kx"
        want = accel.qmatmul(x, w.to("cpu"), x_format=x_fmt, backend="cpu")
        assert np.array_equal(np.asarray(accel.qmatmul(x, w, x_format=x_fmt)), want), (m, blocks)
