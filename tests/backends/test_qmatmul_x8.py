"""``qmatmul(x, w, x_format="q8_0")``: x quantized to Q8_0, each pair of blocks multiplied exactly
in integers and scaled by both blocks' d (GGML's CPU semantics, docs/api.md), on every backend
that runs here (the CPU reference; OpenCL on PoCL with its CPU parameters, ``qmatmul_x8``, and
with the GPU GEMV parameters, ``qgemv_x8``), its errors, and its kernels' compiled form for GPU
targets (dp4a / v_dot4 in the loop, registers within the launch bounds)."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from gpu_toolchains import amd_disassembly, build_shipped, distinct, hot_loop, need
from markers import OPENCL, needs_opencl

import accel
import accel.kernels as K
from accel import spec as S
from accel.conformance import oracle, tolerance
from accel.conformance.bench import gpu_goals
from accel.formats import get_format
from accel.tensor import Tensor

NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


#: the GPU quantized matmul beside every GPU GEMV set (beyond M = 8): opencl_with(gemv=...,
#: qmatmul=QMATMUL)
QMATMUL = {**K.GPU_QMATMUL, "WG": 16}


BACKENDS = ["cpu"] + (["opencl-cpu-params", "opencl-gpu-params"] if OPENCL.available else [])


@pytest.fixture(scope="module", params=BACKENDS)
def be(request, opencl_with):
    if request.param == "cpu":
        return accel.get_backend("cpu")
    if request.param == "opencl-gpu-params":
        return opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL)
    return opencl_with()


def _raw(codes: np.ndarray, d: np.ndarray, fmt: str) -> np.ndarray:
    """GGUF bytes [N, K / 32 * block_bytes] of integer codes [N, K] (Q4_0: -8..7) and float16
    scales [N, K / 32], written from GGML's block layout (a float16 d, then the codes)."""
    N, Kd = codes.shape
    blocks = codes.reshape(N, Kd // 32, 32)
    if fmt == "q8_0":
        body = blocks.astype(np.int8).view(np.uint8)
    else:
        n = (blocks + 8).astype(np.uint8)
        body = n[..., :16] | (n[..., 16:] << 4)
    head = d.astype(np.float16).view(np.uint8).reshape(N, Kd // 32, 2)
    return np.concatenate([head, body], axis=-1).reshape(N, -1)


def _run(be, x: np.ndarray, raw: np.ndarray, fmt: str, N: int) -> np.ndarray:
    spec = S.qmatmul_spec(x.shape, str(np.dtype(x.dtype)) if x.dtype != ml_dtypes.bfloat16 else "bfloat16",
                          (N, x.shape[-1]), get_format(fmt), "q8_0")
    tx = Tensor(be, be.upload(np.ascontiguousarray(x)), x.shape, spec.dtype)
    tw = Tensor(be, be.upload(raw), raw.shape, "uint8")
    return accel.dispatch.execute(be, spec, tx, tw).numpy()


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("M", [1, 3, 9])
def test_integer_blocks_give_the_exact_integer_product(be, rng, fmt, M):
    # x: integers with 127 in every block, so d_x = 127 / 127 = 1 and x's codes are x itself;
    # w: random codes and power-of-two scales. Every term and sum is then an integer below
    # 2**24: the float32 result must be exactly the int64 product, scaled block by block
    N, Kd = 11, 32 * 3  # K / 32 odd: weight rows at every even offset of their 16-byte words
    x = rng.integers(-127, 128, (M, Kd))
    x[:, ::32] = 127
    lo, hi = (-8, 8) if fmt == "q4_0" else (-127, 128)
    codes = rng.integers(lo, hi, (N, Kd))
    d = 2.0 ** rng.integers(-2, 3, (N, Kd // 32))
    want = sum(d[None, :, b] * (x[:, 32 * b:32 * b + 32] @ codes[:, 32 * b:32 * b + 32].T)
               for b in range(Kd // 32))
    got = _run(be, x.astype(np.float32), _raw(codes, d, fmt), fmt, N)
    assert np.array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_a_non_finite_x_block_makes_its_row_nan(be, rng, fmt):
    # the block quantizes to d = NaN or inf with zero codes: d_x d_w times 0 is NaN, whichever
    # infinity or NaN x held (the float path gives +-inf for an infinity)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[0, 40], x[2, 3] = np.nan, -np.inf
    w = accel.quantize(rng.standard_normal((5, 64)).astype(np.float32), fmt, backend="cpu")
    got = _run(be, x, np.asarray(w.raw), fmt, 5)
    assert np.isnan(got[[0, 2]]).all() and np.isfinite(got[1]).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_within_bound_of_the_oracle(be, rng, fmt, dtype):
    for M, N, Kd in [(1, 37, 32), (3, 29, 32 * 125), (2, 9, 8192)]:
        x = rng.standard_normal((M, Kd)).astype(NP[dtype])
        raw = np.asarray(accel.quantize(rng.standard_normal((N, Kd)).astype(np.float32), fmt,
                                        backend="cpu").raw)
        ref, mag = oracle.qmatmul_quantized_x(x, raw, fmt, N, "q8_0")
        got = _run(be, x, raw, fmt, N).astype(np.float64)
        bound = tolerance.matmul_bound(ref, mag, Kd // 32, dtype, "float32")
        assert (np.abs(got - ref) <= bound).all(), (M, N, Kd, np.max(np.abs(got - ref) / bound))


@pytest.mark.parametrize("x_format", ["q4_0", "Q8_0", 8, b"q8_0"])
def test_x_format_must_be_a_supported_format(x_format):
    w = accel.quantize(np.ones((2, 32), np.float32), "q8_0")
    with pytest.raises(accel.ArgumentError, match=r"x_format: expected None or one of \('q8_0', 'q8_1', 'q8_k'\)"):
        accel.qmatmul(np.ones((1, 32), np.float32), w, x_format=x_format)


def test_float_and_integer_semantics_differ_by_x_rounding_alone():
    # x = 0.3 everywhere: codes 127, d_x = 0.3 / 127 rounded to float16; w = 127 exactly (d = 1)
    w = accel.quantize(np.full((1, 32), 127, np.float32), "q8_0")
    x = np.full((1, 32), 0.3, np.float32)
    d_x = float(np.float16(np.float32(0.3) / np.float32(127)))
    assert accel.qmatmul(x, w, x_format="q8_0")[0, 0] == np.float32(d_x * 127 * 127 * 32)
    assert accel.qmatmul(x, w)[0, 0] == pytest.approx(0.3 * 127 * 32, rel=1e-6)


def _launches(be, monkeypatch) -> list:
    from opencl_common import recorded_launches  # pyopencl: only where an OpenCL test runs

    return recorded_launches(be, monkeypatch)


@needs_opencl
def test_opencl_launches_quantize_x8_then_the_gemv_or_the_any_m_kernel(opencl_with, rng, monkeypatch):
    p = dict(RM=2, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=2)
    be = opencl_with(gemv=p, qmatmul=QMATMUL)
    seen = _launches(be, monkeypatch)
    raw = np.asarray(accel.quantize(rng.standard_normal((20, 64)).astype(np.float32), "q4_0",
                                    backend="cpu").raw)
    for M in (8, 9):
        _run(be, rng.standard_normal((M, 64)).astype(np.float32), raw, "q4_0", 20)
    (q8, gq8, _), (what8, g8, l8), (q9, gq9, _), (what9, _, _) = seen
    assert q8 == q9 == "quantize_x8" and gq8 == (64, 1, 1) and gq9 == (64, 1, 1)  # 16 and 18 blocks of x
    assert "qgemv_x8" in what8 and l8 == (32, 1, 1) and g8 == (4 * 32, 4, 1)  # as qgemv's contract
    assert "qmatmul_x8" in what9
    # the 2 teams share their 3 rows: ceil(20 / 3) groups
    be = opencl_with(gemv={**p, "GEMV_KSPLIT": 2}, qmatmul=QMATMUL)
    seen = _launches(be, monkeypatch)
    _run(be, rng.standard_normal((3, 64)).astype(np.float32), raw, "q4_0", 20)
    assert seen[1][1:] == ((7 * 32, 2, 1), (32, 1, 1))


@needs_opencl
@pytest.mark.parametrize("params", [
    dict(RM=1, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=16),
    dict(RM=1, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=3),
    dict(RM=2, RN=2, VW=1, GEMV_WG=32, GEMV_TEAMS=2),  # two rows of x per group, M = 3 odd
    dict(RM=1, RN=4, VW=1, GEMV_WG=64, GEMV_TEAMS=1),
    dict(RM=1, RN=2, VW=1, GEMV_WG=16, GEMV_TEAMS=4, GEMV_KSPLIT=2),  # teams sharing rows: K split
    dict(RM=2, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=4, GEMV_KSPLIT=4),  # 45 blocks: phases of 6, 5, ...
], ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items() if k != "VW"))
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_x8_parameter_sets(opencl_with, rng, params, fmt):
    be = opencl_with(gemv=params, qmatmul=QMATMUL)
    for M, N, Kd in [(3, 23, 32 * 45), (1, 7, 32)]:
        x = rng.standard_normal((M, Kd)).astype(np.float32)
        raw = np.asarray(accel.quantize(rng.standard_normal((N, Kd)).astype(np.float32), fmt,
                                        backend="cpu").raw)
        ref, mag = oracle.qmatmul_quantized_x(x, raw, fmt, N, "q8_0")
        bound = tolerance.matmul_bound(ref, mag, Kd // 32, "float32", "float32")
        assert (np.abs(_run(be, x, raw, fmt, N) - ref) <= bound).all()


# -- the kernels as CUDA and HIP build them -----------------------------------------------------
_X8_BUILDS = distinct([(arch, fmt, {}) for arch in ("sm_80", "sm_90") for fmt in ("q4_0", "q8_0")] + \
    [("sm_90", "q4_0", p)  # timed by the GPU run too
     for p in gpu_goals.X8_ALTERNATIVES + gpu_goals.DECODE_X8_ALTERNATIVES])


@pytest.mark.parametrize("arch,fmt,params", _X8_BUILDS, ids=str)
def test_qgemv_x8_multiplies_with_dp4a_in_registers(arch, fmt, params):
    # one dp4a per 4 codes of each of its RN rows (x RM rows of x), no local memory in the loop,
    # and registers within the groups per SM its launch bounds ask for
    need(arch)
    p = {**K.GPU_GEMV, **params}
    items = p["GEMV_WG"] * p["GEMV_TEAMS"]
    groups = p.get("GEMV_MIN_GROUPS") or max(1, {"q4_0": 512, "q8_0": 384}[fmt] // items)
    r = build_shipped(K.quant(fmt, "float16", p), "qgemv_x8", arch)
    assert r.resources["qgemv_x8"].spills == 0
    assert r.resources["qgemv_x8"].registers <= min(255, 65536 // (groups * items))
    loop = hot_loop(r, "qgemv_x8", "IDP")
    assert loop["IDP"] == 8 * p["RN"] * p["RM"] and loop["LDL"] == loop["STL"] == 0, loop
    if not params:  # the shipped parameters: fewer per block-row than the float-x floor (~81)
        assert sum(loop.values()) / p["RN"] < 81, loop


@pytest.mark.parametrize("fmt,most", [("q4_0", 128), ("q8_0", 168)])
def test_qgemv_x8_multiplies_with_v_dot4_on_gfx90a(fmt, most):
    # CDNA2: 4 waves per SIMD up to 128 VGPRs, 3 up to 168; one v_dot4 per 4 codes of each row
    need("gfx90a")
    r = build_shipped(K.quant(fmt, "float16", K.GPU_GEMV), "qgemv_x8", "gfx90a")
    assert r.resources["qgemv_x8"].registers <= most
    code = amd_disassembly(r, "gfx90a", "qgemv_x8")
    assert len(re.findall(r"\bv_dot4c?_i32_i8", code)) == 8 * K.GPU_GEMV["RN"] * K.GPU_GEMV["RM"]


@needs_opencl
@pytest.mark.parametrize("fact", ["correctly_rounded_divide", "denormals"])
def test_opencl_declines_x_format_where_it_declines_quantize(opencl_with, fact):
    # x_format quantizes x with quantize's own functions: on a device whose facts make quantize
    # inexact (an approximate 1/d, flushed denormals) it is declined with the same reason
    import dataclasses

    from accel.backends.plan import support

    be = opencl_with()
    facts = dataclasses.replace(be.facts, **{fact: False})
    q4 = get_format("q4_0")
    declined = support(S.quantize_spec((2, 64), "float32", "q4_0"), facts, be.params)
    x8 = support(S.qmatmul_spec((2, 64), "float32", (3, 64), q4, "q8_0"), facts, be.params)
    assert not declined.ok and not x8.ok and x8.reason == declined.reason
    assert support(S.qmatmul_spec((2, 64), "float32", (3, 64), q4), facts, be.params).ok


def test_a_backend_that_does_not_list_the_x_format_is_never_asked_to_compute_it():
    # a plugin written before x_format has a qmatmul (the float product) and a supports() that
    # knows nothing of x_fmt: dispatch declines the case for it instead of returning that product
    class Before(accel.Backend):
        name = "before"

        def __init__(self):
            self.index = 0

        def supports(self, spec):
            return accel.backend.YES

        def qmatmul(self, spec, out, x, w):
            raise AssertionError("never called")

    spec = S.qmatmul_spec((1, 32), "float32", (2, 32), get_format("q4_0"), "q8_0")
    with pytest.raises(accel.UnsupportedError, match=r"x_format='q8_0' is not among before's x_formats"):
        accel.dispatch.check_supported(Before(), spec)
    accel.dispatch.check_supported(Before(), S.qmatmul_spec((1, 32), "float32", (2, 32), get_format("q4_0")))
    assert all("q8_0" in accel.get_backend(name).x_formats for name in ["cpu"] + (["opencl"] if OPENCL.available else []))
