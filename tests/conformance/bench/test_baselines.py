"""Baselines compute accel's semantics (so their times compare like with like), carry versions,
and are chosen by the hardware the backend runs on."""
import numpy as np
import pytest
from tolerance_checks import assert_within

import accel
from accel.conformance.bench import baselines as B
from accel.conformance.bench import suite as bench
from accel.conformance.bench import timing
from accel.conformance.bench.suite import Case
from accel.conformance import oracle, tolerance
from markers import needs_opencl


def float64_attention(q, k, v, causal):
    """Textbook attention in float64 with GQA and bottom-right causal alignment."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    sq, sk = s.shape[-2:]
    if causal:
        s = np.where(np.arange(sk)[None] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def cpu_baseline(name: str, module: str | None = None):
    """The named baseline for the cpu backend: skipped only when its library (``module``,
    default the name) is missing, a failure when the library is there but the baseline is not
    offered."""
    pytest.importorskip(module or name)
    offered = {b.name: b for b in B.for_backend(accel.get_backend("cpu"))}
    assert name in offered, f"{name} is installed but not offered as a baseline ({sorted(offered)})"
    return offered[name]


def run(baseline, case):
    host = case.host_inputs(seed=3)
    prepared = baseline.prepare(case.spec(), host, accel.get_backend("cpu"))
    assert prepared is not None, f"{baseline.name} should compute {case.id}"
    prepared.run()
    return host, np.asarray(prepared.result(), np.float64)


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_attention_baselines_use_bottom_right_causal_and_gqa(name):
    base = cpu_baseline(name)
    # Sq < Sk: top-left alignment (torch's is_causal) would differ here
    case = Case.make("attention", "float32", B=1, Hq=4, Hkv=2, Sq=3, Sk=7, D=16, causal=True)
    host, got = run(base, case)
    np.testing.assert_allclose(got, float64_attention(*host[:3], causal=True), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, dtype", [("numpy", "int8"), ("torch", "int8"), ("numpy", "float16")])
def test_matmul_baselines_match_float64(name, dtype):
    base = cpu_baseline(name)
    host, got = run(base, Case.make("matmul", dtype, M=32, N=24, K=40))
    want, magnitude = oracle.matmul(*host)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)  # exact in int32
    else:  # float32 accumulation, as accel's spec: a float16-accumulating baseline fails here
        bound = tolerance.matmul_bound(want, magnitude, host[0].shape[-1], dtype, "float32")
        assert_within(got, want, bound, dtype)


def test_gguf_quantizer_baseline_matches_accel_bytes():
    base = cpu_baseline("gguf-py (numpy reference)", "gguf")
    case = Case.make("quantize", "float32", rows=4, K=64, fmt="q4_0")
    host, got = run(base, case)
    # gguf's reference quantizer and accel's are independent implementations of GGML's rule
    assert np.array_equal(got.astype(np.uint8), accel.quantize(host[0], "q4_0", backend="cpu").raw)


def test_every_baseline_has_a_version_and_cpu_hardware_gets_cpu_libraries():
    bases = B.for_backend(accel.get_backend("cpu"))
    assert {"numpy"} <= {b.name for b in bases}
    assert all(b.version and b.version != "?" for b in bases)
    assert B.hardware_of(accel.get_backend("cpu")) == "cpu"


@needs_opencl
def test_opencl_cpu_device_is_compared_with_cpu_libraries():
    be = accel.get_backend("opencl:0")
    expected = "cpu" if be.info.extra.get("kind") == "cpu" else "other"
    assert B.hardware_of(be) == expected
    if expected == "cpu":
        assert "numpy" in {b.name for b in B.for_backend(be)}


def test_ops_a_baseline_lacks_are_not_applicable():
    numpy_base = cpu_baseline("numpy")
    case = Case.make("qmatmul", "float32", M=2, N=32, K=32, fmt="q8_0")
    assert numpy_base.prepare(case.spec(), case.host_inputs(), accel.get_backend("cpu")) is None


@needs_opencl
def test_clblast_baseline_runs_on_the_backends_own_opencl_device():
    pytest.importorskip("pyclblast", reason="pyclblast (CLBlast) is not installed")
    be = accel.get_backend("opencl:0")
    base = next(b for b in B.for_backend(be) if b.name == "CLBlast")
    assert base.version.startswith("pyclblast ")
    case = Case.make("matmul", "float32", M=33, N=17, K=20)
    host = case.host_inputs(seed=5)
    prepared = base.prepare(case.spec(), host, be)
    prepared.run()
    np.testing.assert_allclose(prepared.result(), host[0].astype(np.float64) @ host[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sq, sk, expected", [(64, 64, "is_causal"), (16, 64, "CausalBias"), (1, 64, "none")])
def test_torch_attention_takes_its_causal_paths_not_a_dense_mask(sq, sk, expected):
    pytest.importorskip("torch", reason="the torch baseline needs torch")
    cpu = accel.get_backend("cpu")
    case = Case.make("attention", "float32", B=1, Hq=4, Hkv=2, Sq=sq, Sk=sk, D=16, causal=True)
    kwargs = B.torch_causal(case.spec())
    mask = kwargs.get("attn_mask")
    got = "is_causal" if kwargs.get("is_causal") else "none" if mask is None else type(mask).__name__
    assert got == expected  # never a dense boolean mask: it knocks torch off its flash path
    rec = bench.run_case(cpu, case, budget=timing.TINY,
                         baselines=[b for b in B.for_backend(cpu) if b.name == "torch"])
    assert [b["status"] for b in rec["baselines"]] == ["ok"]  # same output as accel's rule


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_torch_scaled_mm_baseline_matches_the_fp8_oracle(scaling):
    base = cpu_baseline("torch")
    case = Case.make("scaled_matmul", "float8_e4m3fn", M=24, N=40, K=136, scaling=scaling)
    host, got = run(base, case)
    want, magnitude = oracle.scaled_matmul(*host[:4], None, None)
    bound = tolerance.matmul_bound(want, magnitude, 136, "bfloat16", "float32") + 2**-23 * np.abs(want)
    assert_within(got, want, bound, "bfloat16")


def test_a_scaling_torch_refuses_is_recorded_with_its_reason_not_timed():
    base = cpu_baseline("torch")
    import torch

    case = Case.make("scaled_matmul", "float8_e4m3fn", M=8, N=128, K=256, scaling="block")
    host = case.host_inputs(seed=1)
    try:  # this torch build may take block scales (CUDA builds): then the baseline must run
        prepared = base.prepare(case.spec(), host, accel.get_backend("cpu"))
    except B.Unsupported as e:
        assert "block" in str(e) and torch.__version__ in str(e)
        rec = bench.run_case(accel.get_backend("cpu"), case, budget=timing.TINY, baselines=[base])
        [entry] = rec["baselines"]
        assert entry["status"] == "unsupported" and "median_s" not in entry
        assert entry["reason"] == str(e) and rec["status"] == "ok"
    else:
        prepared.run()
        assert prepared.result().shape == (8, 128)
