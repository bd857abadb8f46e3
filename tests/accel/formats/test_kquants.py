"""The K-quants (q4_k, q5_k, q6_k, the activation format q8_k) and mxfp4 on the CPU reference and
OpenCL (kernels/kquant.cl), held byte for byte to ggml's own C reference quantizers
(accel.conformance.ggml_ref) and to gguf-py's dequantizers; CUDA and HIP run the same kernels
(their plans: tests/backends/cupy/test_cuda_hip.py)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import accel
import accel.spec as S
from accel.backend import Backend
from accel.formats import get_format
from accel.kernels import CODEBOOK_FORMATS, KERNEL_FORMATS, KQUANT_FORMATS

pytest.importorskip("ggml", reason="ggml-python (the ggml extra) is not installed")
from accel.conformance import ggml_ref as G  # noqa: E402 - only with ggml-python

NEW = ["q4_k", "q5_k", "q6_k", "q8_k", "mxfp4"]
WEIGHTS = ["q4_k", "q5_k", "q6_k", "mxfp4"]
KINDS = ["normal", "scaled", "outliers", "positive", "negative", "constant", "zero", "sparse",
         "ties", "tiny", "subnormal", "huge"]


def rows(kind: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [n, k] of one kind of data that exercises a branch of the reference quantizers."""
    x = rng.standard_normal((n, k))
    if kind == "scaled":  # each 32-element sub-block its own magnitude: small sub-scales
        x = x * 10.0 ** rng.uniform(-3, 3, (n, k // 32, 1)).repeat(32, 1).reshape(n, k)
    elif kind == "outliers":
        x[rng.random((n, k)) < 0.01] *= 1e3
    elif kind == "positive":  # the min of every group is 0
        x = np.abs(x)
    elif kind == "negative":
        x = -np.abs(x)
    elif kind == "constant":  # flat groups: max == min
        x = np.where(np.arange(n)[:, None] % 2, -3.25, 0.7) * np.ones((n, k))
    elif kind == "zero":
        x = np.zeros((n, k))
    elif kind == "sparse":  # zero sub-blocks inside live super-blocks
        x = x * (rng.random((n, k // 16, 1)) < 0.3).repeat(16, 1).reshape(n, k)
    elif kind == "ties":  # values on the code grids: rounding ties everywhere
        x = rng.integers(-16, 16, (n, k)) / 2
    elif kind == "tiny":  # float16 scales underflow to subnormals and zero
        x = x * 1e-6
    elif kind == "subnormal":  # float32 subnormal inputs
        x = x * 1e-39
    elif kind == "huge":  # float16 scales overflow
        x = x * 1e6
    return x.astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fmt", NEW)
def test_quantize_is_byte_identical_to_ggml(fmt, kind):
    for seed in range(3):
        x = rows(kind, 4, 512, np.random.default_rng(seed))
        qt = accel.quantize(x, fmt, backend="cpu")
        assert qt.raw.shape == (4, get_format(fmt).row_bytes(512))
        assert np.array_equal(qt.raw, G.quantize(x, fmt)), f"seed {seed}"


@pytest.mark.parametrize("fmt", NEW)
def test_quantize_matches_ggml_over_the_float32_range(fmt):
    """Rows scaled by 2**e for e across float32's exponents, subnormals to near overflow: the
    scale searches' sums overflow and underflow, and the result still matches ggml's bytes."""
    rng = np.random.default_rng(7)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal((96, 256)) * 2.0 ** rng.integers(-149, 128, (96, 1))).astype(np.float32)
    x = x[np.isfinite(x).all(axis=1)]
    assert np.array_equal(accel.quantize(x, fmt, backend="cpu").raw, G.quantize(x, fmt))


def _below_powers_of_two() -> np.ndarray:
    """Blocks whose largest magnitude is 1 to 4 ulps below 2**k, every normal k: log2f rounds
    up to k where its ulp is coarse enough, and ggml's exponent follows it."""
    x = np.random.default_rng(3).standard_normal((254 * 4, 32)).astype(np.float32) * 1e-3
    for i, k in enumerate(range(-126, 128)):
        top = np.float32(2.0) ** np.float32(k) if k < 128 else np.float32(np.inf)
        for j in range(4):
            top = np.nextafter(top, np.float32(0))
            x[4 * i + j] *= top
            x[4 * i + j, 0] = top
    return x


def test_mxfp4_exponent_just_below_a_power_of_two():
    x = _below_powers_of_two()
    assert np.array_equal(accel.quantize(x, "mxfp4", backend="cpu").raw, G.quantize(x, "mxfp4"))


@pytest.mark.parametrize("fmt", NEW)
def test_dequantize_equals_ggml_and_gguf(fmt):
    rng = np.random.default_rng(11)
    raw = G.quantize(rows("scaled", 3, 512, rng), fmt)
    # arbitrary bytes too, with finite float scales: every code and 6-bit scale pattern
    noise = rng.integers(0, 256, raw.shape, dtype=np.uint8)
    noise = np.where(np.isfinite(G.dequantize(noise, fmt, 512)).all(axis=1, keepdims=True), noise, raw)
    for r in (raw, noise):
        got = accel.dequantize(accel.QTensor.from_raw(r, fmt, (3, 512), backend="cpu"))
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), G.dequantize(r, fmt, 512).view(np.uint32))
        if fmt != "q8_k":  # gguf-py has no q8_k (an activation format, never in a file)
            ref = gguf.quants.dequantize(r, getattr(gguf.GGMLQuantizationType, fmt.upper()))
            assert np.array_equal(got, ref.astype(np.float32))


@pytest.mark.parametrize("fmt", NEW)
def test_non_finite_blocks_dequantize_to_nan_or_a_marked_scale(fmt):
    x = rows("normal", 3, 512, np.random.default_rng(5))
    x[0, 3] = np.nan
    x[1, 300] = -np.inf
    qt = accel.quantize(x, fmt, backend="cpu")
    deq = accel.dequantize(qt)
    block = get_format(fmt).block
    bad = np.zeros((3, 512 // block), bool)
    bad[0, 3 // block] = bad[1, 300 // block] = True
    good = np.repeat(~bad, block, axis=1)
    assert np.all(np.isfinite(deq[good]))
    blocks = qt.raw.reshape(3, 512 // block, -1)
    if fmt == "mxfp4":  # no NaN in GGML's E8M0 decoding: e = 0xFF (OCP's NaN) and zero codes
        assert np.all(blocks[bad][:, 0] == 0xFF) and not np.any(blocks[bad][:, 1:])
    else:
        assert np.all(np.isnan(deq[~good]))
    assert np.array_equal(qt.raw[2], G.quantize(x[2:], fmt)[0])  # finite rows unaffected


@pytest.mark.parametrize("fmt", WEIGHTS)
def test_qmatmul_float_x_is_x_times_ggmls_dequantized_weight(fmt):
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((5, 512)).astype(np.float32), rng.standard_normal((3, 512)).astype(np.float32)
    got = accel.qmatmul(x, accel.quantize(w, fmt, backend="cpu"), backend="cpu")
    wd = G.dequantize(G.quantize(w, fmt), fmt, 512).astype(np.float64)
    ref, mag = x.astype(np.float64) @ wd.T, np.abs(x.astype(np.float64)) @ np.abs(wd).T
    assert got.shape == (3, 5) and np.all(np.abs(got - ref) <= 512 * 2**-24 * mag)


@pytest.mark.parametrize("fmt", WEIGHTS)
def test_qmatmul_quantized_x_follows_ggmls_vec_dot(fmt):
    """x_format = the weight's vec_dot type: x quantized by the reference quantizer (q8_k for the
    K-quants, q8_0 for mxfp4), exact integer block dots, scaled: the product of the two
    dequantized operands up to float32 rounding of the scale products."""
    rng = np.random.default_rng(4)
    w, x = rng.standard_normal((6, 512)).astype(np.float32), rng.standard_normal((2, 512)).astype(np.float32)
    xf = get_format(fmt).vec_dot
    got = accel.qmatmul(x, accel.quantize(w, fmt, backend="cpu"), x_format=xf, backend="cpu")
    wd = G.dequantize(G.quantize(w, fmt), fmt, 512).astype(np.float64)
    xd = G.dequantize(G.quantize(x, xf), xf, 512).astype(np.float64)
    ref, mag = xd @ wd.T, np.abs(xd) @ np.abs(wd).T
    assert np.all(np.abs(got - ref) <= 16 * 2**-24 * mag)
    float_x = accel.qmatmul(x, accel.quantize(w, fmt, backend="cpu"), backend="cpu")
    assert not np.array_equal(got, float_x)  # x really was quantized


def test_shape_and_format_errors_name_k_and_the_block():
    x = np.ones((2, 288), np.float32)
    with pytest.raises(accel.ShapeError, match=r"multiple of 256 \(q4_k's block\).*K = 288"):
        accel.quantize(x, "q4_k", backend="cpu")
    accel.quantize(x, "mxfp4", backend="cpu")  # 288 = 9 blocks of 32
    with pytest.raises(accel.ShapeError, match="multiple of 256"):
        accel.QTensor.from_raw(np.zeros((2, 288), np.uint8), "q6_k", (2, 288))
    raw = accel.quantize(np.ones((2, 512), np.float32), "q4_k", backend="cpu").raw
    with pytest.raises(accel.ShapeError, match="raw"):  # 2 rows of 2 blocks given as 4 x 144
        accel.QTensor.from_raw(raw.reshape(4, 144), "q4_k", (2, 512))
    with pytest.raises(accel.ShapeError, match="bytes"):
        accel.QTensor.from_raw(raw[:, :-1], "q4_k", (2, 512))
    qw = accel.QTensor.from_raw(raw, "q4_k", (2, 512), backend="cpu")
    with pytest.raises(accel.ArgumentError, match=r"x_format.*'q8_k'.*got 'q8_0'"):
        accel.qmatmul(np.ones((1, 512), np.float32), qw, x_format="q8_0", backend="cpu")
    with pytest.raises(accel.ArgumentError, match=r"x_format.*None.*q8_k weights"):
        S.qmatmul_spec((1, 256), "float32", (2, 256), get_format("q8_k"), "q8_k")


def test_backends_without_kernels_decline_the_new_formats():
    class Old(Backend):  # a backend written before the K-quants lists only q8_0 and q4_0
        name = "old"

        def __init__(self):
            pass

        def dequantize(self, spec, out, q):
            pass

    spec = S.dequantize_spec((2, 256), get_format("q6_k"))
    assert Old().verdict(spec).reason.startswith("format 'q6_k' is not among old's formats")
    assert Old().verdict(S.dequantize_spec((2, 256), get_format("q4_0"))).ok
    assert accel.get_backend("cpu").verdict(spec).ok
    from accel.backends.cupy.backend import CuPyBackend  # imports without CuPy

    # kquant.cl on GPUs; the codebook formats declared so that kernel_declines gives the reason
    assert set(CuPyBackend.formats) == set(KERNEL_FORMATS + KQUANT_FORMATS + CODEBOOK_FORMATS)
    try:
        opencl = accel.get_backend("opencl")
    except accel.BackendUnavailable:
        return
    assert opencl.verdict(spec).ok  # kquant.cl reads every new format


@pytest.mark.parametrize("fmt", NEW)
def test_opencl_quantize_is_byte_identical_to_ggml(fmt, opencl_backend):
    """kquant.cl's quantize_k: GGML's scale searches on the device, bit for bit; and its
    qmatmul_kx (x_format) equal to the CPU reference's."""
    if not opencl_backend.verdict(S.quantize_spec((1, 256), "float32", fmt)).ok:
        pytest.skip(opencl_backend.verdict(S.quantize_spec((1, 256), "float32", fmt)).reason)
    for kind in ("normal", "scaled", "outliers", "positive", "constant", "sparse", "ties", "tiny",
                 "subnormal", "huge"):
        x = rows(kind, 3, 512, np.random.default_rng(9))
        got = np.asarray(accel.quantize(x, fmt, backend=opencl_backend).raw)
        assert np.array_equal(got, G.quantize(x, fmt)), kind
    if fmt == "mxfp4":
        x = _below_powers_of_two()
        got = np.asarray(accel.quantize(x, fmt, backend=opencl_backend).raw)
        assert np.array_equal(got, G.quantize(x, fmt))
    if fmt == "q8_k":
        return
    # x_format (q8_k; mxfp4: q8_0): x through the same quantizer, then integer sums scaled in the
    # CPU reference's float32 order, so the results agree to the bit
    x = rows("normal", 3, 512, np.random.default_rng(10))
    w = accel.QTensor.from_raw(G.quantize(rows("scaled", 7, 512, np.random.default_rng(11)), fmt),
                               fmt, (7, 512), backend=opencl_backend)
    xf = get_format(fmt).vec_dot
    got = np.asarray(accel.qmatmul(x, w, x_format=xf, backend=opencl_backend))
    assert np.array_equal(got, accel.qmatmul(x, w.to("cpu"), x_format=xf, backend="cpu"))


@pytest.mark.parametrize("fmt", ["q2_k", "q3_k", "iq4_nl", "iq4_xs", "q1_0", "tq1_0", "tq2_0", "nvfp4"])
def test_opencl_quantizes_the_searched_sign_and_nvfp4_blocks_as_ggml(fmt, opencl_backend):
    """kquant.cl's quantize_k of q2_k, q3_k, iq4_nl, iq4_xs (ggml's scale searches), q1_0,
    tq1_0, tq2_0 and nvfp4: ggml's bytes for finite rows, and the cpu reference's (accel's rules
    for what C leaves undefined) for NaN and infinities."""
    for kind in ("normal", "scaled", "outliers", "positive", "constant", "sparse", "ties", "tiny",
                 "subnormal", "huge"):
        x = rows(kind, 3, 512, np.random.default_rng(9))
        got = np.asarray(accel.quantize(x, fmt, backend=opencl_backend).raw)
        assert np.array_equal(got, G.quantize(x, fmt)), kind
    x = rows("normal", 4, 512, np.random.default_rng(12))
    x[0, 3], x[1, 200], x[2, 130], x[3] = np.nan, np.inf, -np.inf, 3e38
    got = np.asarray(accel.quantize(x, fmt, backend=opencl_backend).raw)
    assert np.array_equal(got, accel.quantize(x, fmt, backend="cpu").raw)
    # 3e38 is finite, but x**2 and the searches' sums overflow: ggml's IEEE answer all the same
    assert np.array_equal(got[3:], G.quantize(x[3:], fmt))


def test_without_ggml_the_quantize_oracle_is_the_cpu_reference_never_judging_itself(monkeypatch):
    """GPU images have no ggml-python: their K-quant quantize cases still compare bytes, with
    the CPU reference's quantizer (byte-identical to ggml's, above); the CPU reference itself
    is then left without an oracle: not judged (unsupported, evidence untested, with the reason),
    neither passed by fiat nor counted as a failure of the backend."""
    from accel.conformance import oracle, runner
    from accel.conformance.case import Case

    x = np.concatenate([rows(k, 2, 512, np.random.default_rng(5)) for k in ("normal", "outliers")])
    x[0, 3] = np.nan  # accel's rule for a non-finite block, as the ggml-backed oracle applies it
    with_ggml = {f: oracle.quantize(x, f) for f in NEW}
    monkeypatch.setattr(G, "available", lambda: False)
    assert oracle.super_quantizer() == "cpu"
    for f in NEW:
        assert np.array_equal(oracle.quantize(x, f), with_ggml[f]), f
    spec = S.quantize_spec(x.shape, "float32", "q4_k")
    case = Case("quantize", "float32", "grid", {"shape": x.shape, "fmt": "q4_k"})
    got = np.asarray(accel.quantize(x, "q4_k", backend="cpu").raw)
    verdict = runner.judge(accel.get_backend("cpu"), case, spec, [x], got)
    assert not verdict.ok and "judged by itself" in verdict.reason
    result = runner.run_case(accel.get_backend("cpu"), Case("quantize", "float32", "grid",
                                                            {"shape": (2, 512), "fmt": "q4_k",
                                                             "data": "normal", "seed": 0}))
    assert (result.status, result.evidence) == ("unsupported", "untested")
    assert result.reason.startswith("not judged here") and "judged by itself" in result.reason
