"""ggml's own CPU kernels as the decode baseline, and weight-streaming cases timed from memory:
real ggml-python (llama.cpp's kernels), no stand-ins."""
import json
import math

import numpy as np
import pytest

import accel
from accel.formats import get_format
from accel.conformance import oracle, tolerance
from accel.conformance.bench import baselines as B
from accel.conformance.bench import peaks as P
from accel.conformance.bench import suite as bench
from accel.conformance.bench import timing
from accel.conformance.bench.suite import Case
from markers import needs_opencl

FORMATS = B.GGML_WEIGHT_FORMATS


@pytest.fixture(scope="module")
def ggml_base():
    pytest.importorskip("ggml", reason="ggml-python (the bench extra) is not installed")
    return B.ggml_baseline()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("M", [1, 3])
def test_ggml_agrees_with_accel_within_the_tolerance_model(ggml_base, fmt, M):
    case = Case.make("qmatmul", "float32", M=M, N=29, K=512, fmt=fmt)
    x, raw = case.host_inputs(seed=4)
    prepared = ggml_base.prepare(case.spec(), [x, raw], accel.get_backend("cpu"))
    prepared.run()
    got = prepared.result().astype(np.float64)
    # ggml quantizes float activations itself: it computes accel's x_format semantics
    x_fmt = get_format(fmt).vec_dot
    assert prepared.computes.x_fmt.name == x_fmt and x_fmt in prepared.note
    ref, _ = oracle.qmatmul_quantized_x(x, raw, fmt, 29, x_fmt)
    # ggml's SIMD dot products add scaled partial sums in float32 as often as every 16 elements
    # (q6_k's sub-block scales), not once per block of x: as many float steps as that allows, on
    # partial sums as large as sum |x_k w_k| (x as quantized): a block's terms can cancel, so
    # the sum of their magnitudes falls far below its partial sums' (q6_k, K = 512: 5 to 250x)
    xq = oracle.dequantize(oracle.quantize(x, x_fmt), x_fmt, x.shape)
    mag = np.abs(xq) @ np.abs(oracle.dequantize(raw, fmt, (29, 512))).T
    bound = tolerance.matmul_bound(ref, mag, 512 // 16, "float32", "float32")
    assert (np.abs(got - ref) <= bound).all(), np.max(np.abs(got - ref) / bound)


def test_ggml_is_timed_beside_accel_and_validated_against_its_own_semantics(ggml_base):
    cpu = accel.get_backend("cpu")
    case = Case.make("qmatmul", "float32", M=2, N=64, K=128, fmt="q4_0")
    rec = bench.run_case(cpu, case, budget=timing.TINY, baselines=[ggml_base])
    (base,) = rec["baselines"]
    assert rec["status"] == "ok" and base["status"] == "ok", base
    assert base["name"] == "ggml" and f"{B.GGML_THREADS} threads" in base["version"]
    assert "q8_0" in base["note"] and base["weight_gbs"] > 0
    # the x_format case is ggml's semantics exactly: no note
    x8 = Case.make("qmatmul", "float32", M=2, N=64, K=128, fmt="q4_0", x_fmt="q8_0")
    (base8,) = bench.run_case(cpu, x8, budget=timing.TINY, baselines=[ggml_base])["baselines"]
    assert base8["status"] == "ok" and "note" not in base8


def test_activations_ggml_does_not_take_get_no_ggml_row(ggml_base):
    case = Case.make("qmatmul", "float16", M=1, N=8, K=64, fmt="q8_0")
    assert ggml_base.prepare(case.spec(), case.host_inputs(), accel.get_backend("cpu")) is None


def test_weight_streaming_cases_rotate_copies_beyond_the_cache():
    cpu = accel.get_backend("cpu")
    case = Case.make("qmatmul", "float32", M=1, N=64, K=256, fmt="q8_0")
    spec = case.spec()
    cache = 3 * spec.weight_bytes
    rec = bench.run_case(cpu, case, budget=timing.TINY, baselines=B.for_backend(cpu), cache_bytes=cache)
    assert rec["status"] == "ok"  # the result read back after rotating copies is still right
    assert rec["copies"] == 12 and rec["working_set_bytes"] >= bench.CACHE_MULTIPLE * cache
    assert rec["weight_gbs"] == pytest.approx(spec.weight_bytes / rec["median_s"] / 1e9)
    assert all(b["status"] == "ok" for b in rec["baselines"] if b["version"] != "not installed"), rec["baselines"]
    # every baseline rotates its own copies over the same multiple of the cache; torch's copies,
    # dequantized at load to 4 bytes a weight, are fewer
    timed = {b["name"]: b for b in rec["baselines"] if b["status"] == "ok"}
    assert all(b["working_set_bytes"] >= bench.CACHE_MULTIPLE * cache for b in timed.values()), timed
    dequantized = timed.get("torch (weights dequantized at load)")
    if dequantized is not None:
        assert dequantized["copies"] == math.ceil(bench.CACHE_MULTIPLE * cache / (4 * spec.N * spec.K))
    # a dense matmul is not a weight-streaming case: one copy, no weight figures
    mm = bench.run_case(cpu, Case.make("matmul", "float32", M=8, N=8, K=8), budget=timing.TINY,
                        baselines=[], cache_bytes=cache)
    assert "copies" not in mm and "weight_gbs" not in mm


def test_weight_copies_stay_within_a_share_of_available_memory(monkeypatch):
    case = Case.make("qmatmul", "float32", M=1, N=64, K=256, fmt="q8_0")
    spec = case.spec()
    assert bench.weight_copies(spec, 50 * spec.weight_bytes) == 4 * 50
    assert bench.weight_copies(spec, 1000 * spec.weight_bytes) == bench.MAX_COPIES
    # a machine with room for 5 copies in its share: 5, though the cache would want 200
    room = 5 * spec.weight_bytes / bench.MEMORY_SHARE
    monkeypatch.setattr(bench, "available_memory", lambda: int(room))
    assert bench.weight_copies(spec, 50 * spec.weight_bytes) == 5
    rec = bench.run_case(accel.get_backend("cpu"), case, budget=timing.TINY, baselines=[],
                         cache_bytes=50 * spec.weight_bytes)
    assert rec["status"] == "ok" and rec["copies"] == 5


@needs_opencl
def test_last_level_cache_covers_what_the_device_reports():
    be = accel.get_backend("opencl:0")
    reported = be.info.extra["cache_bytes"]
    assert reported > 0 and P.last_level_cache(be) >= reported


def test_decode_sizes_sweep_m_per_format():
    ids = [c.id for c in bench.cases("decode", ["qmatmul"])]
    # float activations, and ggml's own (x as q8_0) for the formats here
    assert len(ids) == 2 * len(bench.DECODE_FORMATS) * len(bench.DECODE_M)
    assert "qmatmul float32 M=32 N=4096 K=4096 fmt=q8_0" in ids
    assert "qmatmul float32 M=32 N=4096 K=4096 fmt=q4_0 x_fmt=q8_0" in ids
    with pytest.raises(accel.ArgumentError, match="ops the decode sizes measure"):
        bench.cases("decode", ["matmul"])  # a selection of no case: refused, not an empty run



def test_gemv_sizes_cover_every_weight_format_at_m_1():
    cases = bench.cases("gemv", ["qmatmul"])
    weight_formats = {f for f, row in accel.formats.FORMATS.items() if row.activation_only is False}
    assert {c.p["fmt"] for c in cases} == weight_formats and len(weight_formats) == 24
    assert {c.p["M"] for c in cases} == {1}
    # and each with x in ggml's vec_dot format beside float x
    assert {(c.p["fmt"], c.p.get("x_fmt")) for c in cases} == \
        {(f, x) for f in weight_formats for x in (None, accel.formats.FORMATS[f].vec_dot)}
    with pytest.raises(accel.ArgumentError, match="ops the gemv sizes measure"):
        bench.cases("gemv", ["rms_norm"])


def test_a_sweep_over_m_gets_a_decode_plot_in_the_report(tmp_path, monkeypatch):
    from accel.conformance.report import render

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path / "cache"))
    sweep = [Case.make("qmatmul", "float32", M=m, N=32, K=64, fmt=f) for f in ("q4_0", "q8_0") for m in (1, 2)]
    doc = bench.run_suite(accel.get_backend("cpu"), sweep, budget=timing.TINY, label="laptop")
    curves = render.decode_curves(doc)
    assert sorted(curves) == ["q4_0 N=32 K=64", "q8_0 N=32 K=64"]
    assert all(sorted(c["accel"]) == [1, 2] for c in curves.values())
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    html = render.render_html(render.load([path]))
    assert '<img alt="decode laptop/cpu:0"' in html and ">Decode: laptop/cpu:0<" in html


def test_copy_peak_buffers_span_the_working_set_the_rotation_uses():
    """The copy bandwidth that copy_fraction divides by is measured beyond the cache too: its two
    buffers span CACHE_MULTIPLE x the last-level cache (or all the memory share allows)."""
    be = accel.get_backend("cpu")
    nbytes = P._copy_bytes(be)
    assert nbytes >= P._COPY_BYTES and nbytes % 4096 == 0
    want = bench.CACHE_MULTIPLE * (P.last_level_cache(be) or 0)
    room = 2 * bench.available_memory() * bench.MEMORY_SHARE
    assert 2 * nbytes >= min(want, room) - 2 * 4096
