"""The GPU GEMV kernels (``qgemv``, ``qgemv_stream`` and ``qgemv_runs`` in kernels/quant.cl) run
for real on an OpenCL device (PoCL here) with GPU parameter sets, against float64 math on
``accel.dequantize`` of the same weights.

qgemv: odd K / 32 puts consecutive weight rows at every even offset modulo 16 (the kernel's
16-byte loads cover each block's aligned superset); K = 32 is a single block per row; odd N, M = 3
and RN, RM that do not divide them leave partial teams and groups.
qgemv_stream (K a multiple of 64): rows start 4, 8 or 12 bytes into a 16-byte word when K / 64 is
odd; K = 64 leaves one pair of blocks in a 32-pair slice; K = 64 * 33 two slices, the second
with one pair; K = 64 * 300 three passes of 4 slices, the last with 2 of them empty.
qgemv_runs (K a multiple of 256): K = 256 is one run per row; 256 * 33 a second step with one run;
8192 two full steps."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import matmul_bound, recorded_launches

import accel
import accel.kernels as K
from accel import spec as S
from accel.tensor import Tensor

pytestmark = needs_opencl
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


#: the GPU quantized matmul beside every GPU GEMV set (opencl_with(gemv=..., qmatmul=QMATMUL)); the
#: GEMV kernel is chosen when a spec's plan is built, from ACCEL_GEMV_KERNEL as it is then
QMATMUL = {**K.GPU_QMATMUL, "WG": 16}




@pytest.fixture(scope="module")
def gpu_be(opencl_with):
    """opencl:0 running the shipped GPU GEMV parameters."""
    return opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL)


def _weights(rng, fmt, N, Kd):
    qt = accel.quantize(rng.standard_normal((N, Kd)).astype(np.float32), fmt, backend="cpu")
    return np.asarray(qt.raw), accel.dequantize(qt).astype(np.float64)


def _check(be, rng, fmt, dtype, M, N, Kd, raw_wd=None):
    raw, wd = raw_wd or _weights(rng, fmt, N, Kd)
    x = rng.standard_normal((M, Kd)).astype(NP[dtype])
    spec = S.qmatmul_spec(x.shape, dtype, (N, Kd), accel.formats.get_format(fmt))
    tx = Tensor(be, be.upload(x), x.shape, dtype)
    tw = Tensor(be, be.upload(raw), raw.shape, "uint8")
    got = accel.dispatch.execute(be, spec, tx, tw).numpy()
    assert got.shape == (M, N) and got.dtype == x.dtype
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # an infinite weight times a zero of x
        want = x64 @ wd.T
    finite = np.isfinite(want)
    assert (np.isfinite(got) == finite).all()
    with np.errstate(invalid="ignore"):
        bad = np.abs(got.astype(np.float64) - want) > matmul_bound(x64, wd.T, want, dtype)
    bad &= finite
    assert not bad.any(), f"{bad.sum()} of {bad.size} out of bound, first {np.argwhere(bad)[0]}"


#: (format, x dtype) pairs the GEMV tests build: each is a program PoCL compiles for the GPU
#: parameters (the slow part of these tests, cold), so the 16-bit x types take one format each
FMT_DTYPES = [("q4_0", "float32"), ("q8_0", "float32"), ("q4_0", "float16"), ("q8_0", "bfloat16")]


@pytest.mark.parametrize("fmt,dtype", FMT_DTYPES)
@pytest.mark.parametrize("M,N,Kd", [(1, 37, 32), (3, 37, 32), (1, 45, 8192), (3, 29, 32 * 125)])
def test_qgemv_within_bound_of_float64(gpu_be, rng, fmt, dtype, M, N, Kd):
    _check(gpu_be, rng, fmt, dtype, M, N, Kd)


@pytest.mark.parametrize("fmt,params", [
    # each set on one format (a program build each), the formats alternating
    ("q4_0", dict(RM=1, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=16)),  # more work-items than x float4s
    ("q8_0", dict(RM=1, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=3)),  # work-items do not divide the x tile
    ("q4_0", dict(RM=2, RN=2, VW=1, GEMV_WG=32, GEMV_TEAMS=2)),  # two rows of x per group, M = 3 odd
    ("q8_0", dict(RM=1, RN=4, VW=1, GEMV_WG=64, GEMV_TEAMS=1)),
    ("q4_0", dict(RM=1, RN=4, VW=1, GEMV_WG=32, GEMV_TEAMS=4, GEMV_OFFSET_PER_TILE=1)),  # as HIP builds it
    ("q8_0", dict(RM=1, RN=2, VW=1, GEMV_WG=16, GEMV_TEAMS=4, GEMV_KSPLIT=2)),  # pairs of teams split K
    ("q4_0", dict(RM=2, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=4, GEMV_KSPLIT=4,  # 45 blocks: uneven shares
                  GEMV_OFFSET_PER_TILE=1)),
], ids=lambda p: p if isinstance(p, str) else "-".join(f"{k}{v}" for k, v in p.items() if k != "VW"))
def test_qgemv_parameter_sets(opencl_with, rng, fmt, params):
    be = opencl_with(gemv=params, qmatmul=QMATMUL)
    for M, N, Kd in [(3, 23, 32 * 45), (1, 7, 32)]:
        _check(be, rng, fmt, "float32", M, N, Kd)


@pytest.mark.parametrize("fmt", ["q4_0"])  # Q4_0: its doubled sums (two program builds a format)
def test_qgemv_probes_compute_what_they_say(opencl_with, rng, fmt):
    # the GPU run's diagnostics (kernels/quant.cl, GEMV_PROBE): 2 is qgemv's product with every
    # tile's weight taken from the row's first tile (block b reads block b mod 32: K = 32 * 70
    # leaves a partial last tile); 1 does no arithmetic, its outputs count bits (at most one
    # per block, doubled for Q4_0 as qgemv doubles its sums)
    N, Kd, tile = 9, 32 * 70, K.GPU_GEMV["GEMV_WG"]
    raw, wd = _weights(rng, fmt, N, Kd)
    first = wd.reshape(N, -1, 32)[:, np.arange(Kd // 32) % tile].reshape(N, Kd)
    probe_2 = opencl_with(gemv={**K.GPU_GEMV, "GEMV_PROBE": 2}, qmatmul=QMATMUL)
    _check(probe_2, rng, fmt, "float32", 1, N, Kd, (raw, first))
    be = opencl_with(gemv={**K.GPU_GEMV, "GEMV_PROBE": 1}, qmatmul=QMATMUL)
    x = rng.standard_normal((1, Kd)).astype(np.float32)
    spec = S.qmatmul_spec(x.shape, "float32", (N, Kd), accel.formats.get_format(fmt))
    got = accel.dispatch.execute(be, spec, Tensor(be, be.upload(x), x.shape, "float32"),
                            Tensor(be, be.upload(raw), raw.shape, "uint8")).numpy()
    scale = 2 if fmt == "q4_0" else 1
    assert (got == np.round(got)).all() and (got % scale == 0).all()
    assert 0 < got.min() and got.max() <= scale * Kd // 32, got


def test_qgemv_launch_contract(opencl_with, rng, monkeypatch):
    # kernels/quant.cl: local (GEMV_WG * GEMV_TEAMS), groups (ceil(N / (GEMV_TEAMS / GEMV_KSPLIT
    # * RN)), ceil(M / RM)) (here no K split); GPU parameter sets run qgemv up to M = 8, qmatmul
    # beyond
    p = dict(RM=2, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=2)
    be = opencl_with(gemv=p, qmatmul=QMATMUL)
    seen = recorded_launches(be, monkeypatch)
    for M in (8, 9):
        _check(be, rng, "q4_0", "float32", M, 20, 64)
    (what8, g8, l8), (what9, _, _) = seen
    assert "qgemv" in what8 and "qgemv" not in what9
    assert l8 == (32, 1, 1) and g8 == (4 * 32, 4, 1)  # ceil(20 / 6) groups over N, ceil(8 / 2) over M


@pytest.fixture
def streaming(monkeypatch):
    """Backends built inside the test run qgemv_stream where it applies."""
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv_stream")


STREAM_SHAPES = [(1, 37, 64), (3, 37, 64 * 33), (1, 45, 8192), (2, 19, 64 * 300)]


@pytest.mark.parametrize("fmt,dtype", FMT_DTYPES)
@pytest.mark.parametrize("M,N,Kd", STREAM_SHAPES)
def test_qgemv_stream_within_bound_of_float64(opencl_with, streaming, rng, fmt, dtype, M, N, Kd):
    _check(opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL), rng, fmt, dtype, M, N, Kd)


@pytest.mark.parametrize("fmt,params", [  # each set on one format, as qgemv's sets
    ("q4_0", dict(STREAM_WARPS=1, STREAM_ROWS=3, STREAM_STAGES=2)),  # one team: every slice a pass
    ("q8_0", dict(STREAM_WARPS=2, STREAM_ROWS=6, STREAM_STAGES=3)),
    ("q4_0", dict(STREAM_WARPS=8, STREAM_ROWS=8, STREAM_STAGES=5)),  # more stages than some teams' rows
], ids=lambda p: p if isinstance(p, str) else "-".join(f"{k.removeprefix('STREAM_')}{v}" for k, v in p.items()))
def test_qgemv_stream_parameter_sets(opencl_with, streaming, rng, fmt, params):
    be = opencl_with(gemv={**K.GPU_GEMV, **params}, qmatmul=QMATMUL)
    for M, N, Kd in [(3, 23, 64 * 45), (1, 7, 64), (1, 5, 64 * 300)]:
        _check(be, rng, fmt, "float32", M, N, Kd)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_stream_reads_nothing_of_the_next_row(opencl_with, streaming, rng, fmt):
    # K = 64 * 3: a slice of 32 pairs holds 3; the copies of a row's last 16-byte word and the
    # work-items past its end see the next row's first block, here one with an infinite scale
    N, Kd = 6, 64 * 3
    raw, wd = _weights(rng, fmt, N, Kd)
    raw = raw.copy()
    raw[3, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # row 3's first scale
    wd = accel.dequantize(accel.QTensor.from_raw(raw, fmt, (N, Kd), backend="cpu")).astype(np.float64)
    assert np.isinf(wd[3, :32]).any() and np.isfinite(wd[[0, 1, 2, 4, 5]]).all()
    _check(opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL), rng, fmt, "float32", 1, N, Kd, (raw, wd))


def test_qgemv_stream_launch_contract(opencl_with, streaming, rng, monkeypatch):
    # kernels/quant.cl: local (32 * STREAM_WARPS), groups (ceil(N / STREAM_ROWS), M); K not a
    # multiple of 64 falls back to qgemv
    be = opencl_with(gemv={**K.GPU_GEMV, "STREAM_WARPS": 2, "STREAM_ROWS": 6}, qmatmul=QMATMUL)
    seen = recorded_launches(be, monkeypatch)
    _check(be, rng, "q4_0", "float32", 3, 20, 128)
    _check(be, rng, "q4_0", "float32", 3, 20, 96)
    (what, gsize, lsize), (what_odd, _, _) = seen
    assert "qgemv_stream" in what and lsize == (64, 1, 1) and gsize == (4 * 64, 3, 1)
    assert "qgemv_stream" not in what_odd and "qgemv" in what_odd


@pytest.fixture
def runs(monkeypatch):
    """Backends built inside the test run qgemv_runs where it applies."""
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv_runs")


@pytest.mark.parametrize("fmt,dtype,M,N,Kd", [
    (f, "float32", *shape) for f in ("q4_0", "q8_0")
    for shape in [(1, 37, 256), (3, 37, 256 * 33), (1, 45, 8192)]] + [
    (f, d, 2, 19, 256 * 17) for f, d in FMT_DTYPES if d != "float32"])
def test_qgemv_runs_within_bound_of_float64(opencl_with, runs, rng, fmt, dtype, M, N, Kd):
    # K = 256: one run per row, 15 of the 16 work-items of a team idle; 33 runs: a second step
    # with one; 8192: two full steps
    _check(opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL), rng, fmt, dtype, M, N, Kd)


@pytest.mark.parametrize("fmt,params", [  # each set on one format, as qgemv's sets
    ("q4_0", dict(RUNS_WG=8, RUNS_TEAMS=2, RUNS_RN=3)),  # rows per group do not divide N
    ("q8_0", dict(RUNS_WG=4, RUNS_TEAMS=16, RUNS_RN=1, RM=2)),  # two rows of x per group, M = 3 odd
    ("q4_0", dict(RUNS_WG=32, RUNS_TEAMS=1, RUNS_RN=1)),  # more work-items than float4s of x to stage
], ids=lambda p: p if isinstance(p, str) else "-".join(f"{k.removeprefix('RUNS_')}{v}" for k, v in p.items()))
def test_qgemv_runs_parameter_sets(opencl_with, runs, rng, fmt, params):
    be = opencl_with(gemv={**K.GPU_GEMV, **params}, qmatmul=QMATMUL)
    for M, N, Kd in [(3, 23, 256 * 45), (1, 7, 256)]:
        _check(be, rng, fmt, "float32", M, N, Kd)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_runs_sums_infinite_x_exactly(opencl_with, runs, rng, fmt):
    # an infinite x makes Q4_0's sums by 4 inf - inf: those work-items sum their 8 blocks of each
    # step again with exact codes (the float64 product is infinite or NaN where the exact sum is)
    raw, wd = _weights(rng, fmt, 11, 256 * 5)
    be = opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL)
    x = rng.standard_normal((2, 256 * 5)).astype(np.float32)
    x[0, 700], x[1, 33] = np.inf, -np.inf
    spec = S.qmatmul_spec(x.shape, "float32", (11, 256 * 5), accel.formats.get_format(fmt))
    got = accel.dispatch.execute(be, spec, Tensor(be, be.upload(x), x.shape, "float32"),
                            Tensor(be, be.upload(raw), raw.shape, "uint8")).numpy()
    with np.errstate(invalid="ignore"):
        want = x.astype(np.float64) @ wd.T
    assert (np.isnan(got) == np.isnan(want)).all() and (got[np.isinf(want)] == want[np.isinf(want)]).all()


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_runs_keeps_an_infinite_weight_block_to_its_row(opencl_with, runs, rng, fmt):
    # row 4's third run starts with an infinite scale; 3 rows per team and 2 rows of x per group
    # (M = 5: the last group half empty), teams of 4 over 3 runs: every other row stays finite
    N, Kd = 9, 256 * 3
    raw, _ = _weights(rng, fmt, N, Kd)
    raw = raw.copy()
    start = 2 * 8 * (18 if fmt == "q4_0" else 34)
    raw[4, start:start + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    wd = accel.dequantize(accel.QTensor.from_raw(raw, fmt, (N, Kd), backend="cpu")).astype(np.float64)
    assert np.isinf(wd[4, 512:544]).any() and np.isfinite(np.delete(wd, 4, axis=0)).all()
    params = {**K.GPU_GEMV, "RUNS_WG": 4, "RUNS_TEAMS": 2, "RUNS_RN": 3, "RM": 2}
    _check(opencl_with(gemv=params, qmatmul=QMATMUL), rng, fmt, "float32", 5, N, Kd, (raw, wd))


def test_qgemv_runs_launch_contract(opencl_with, runs, rng, monkeypatch):
    # kernels/quant.cl: local (RUNS_WG * RUNS_TEAMS), groups (ceil(N / (RUNS_TEAMS * RUNS_RN)),
    # ceil(M / RM)); K not a multiple of 256 falls back to qgemv
    be = opencl_with(gemv={**K.GPU_GEMV, "RUNS_WG": 8, "RUNS_TEAMS": 2, "RUNS_RN": 3}, qmatmul=QMATMUL)
    seen = recorded_launches(be, monkeypatch)
    _check(be, rng, "q4_0", "float32", 3, 20, 512)
    _check(be, rng, "q4_0", "float32", 3, 20, 256 + 32)
    (what, gsize, lsize), (what_odd, _, _) = seen
    assert "qgemv_runs" in what and lsize == (16, 1, 1) and gsize == (4 * 16, 3, 1)
    assert "qgemv_runs" not in what_odd and "qgemv" in what_odd


@pytest.mark.parametrize("kernel,params,profile", [("qgemv", {}, "full")] + [
    (k, {}, "quick") for k in K.GEMV_KERNELS if k != "qgemv"] + [("qgemv", {"GEMV_KSPLIT": 2}, "quick")],
                         ids=str)
def test_conformance_profile_passes_through_each_gpu_gemv(opencl_with, rng, monkeypatch, kernel, params, profile):
    # every quantized-matmul case of the profile in the formats the GEMVs serve (NaN and
    # infinite blocks, long K, odd shapes; x_format's through qgemv_x8), and its property search,
    # on the GPU parameters, M <= GEMV_MAX_M through the GEMV kernel asked for (the K-quants
    # have kernels of their own: running them here would only rebuild those per parameter set);
    # the full profile through the default kernel, the quick one through the others (CI time)
    from accel.conformance import properties, suite

    monkeypatch.setenv("ACCEL_GEMV_KERNEL", kernel)
    be = opencl_with(gemv={**K.GPU_GEMV, **params}, qmatmul=QMATMUL)
    seen = recorded_launches(be, monkeypatch)
    cases, targets = suite.planned(profile, 0, ["qmatmul"])
    results = [suite.run_case(be, c) for c in cases if c.params["fmt"] in ("q4_0", "q8_0")]
    for op, dtype in targets:
        properties.search(be, op, dtype, properties.EXAMPLES[profile], 0, results.append)
    bad = [f"{r.case.id}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    assert not bad, f"{len(bad)} of {len(results)} cases did not pass:\n" + "\n".join(bad[:10])
    assert f"qmatmul ({kernel})" in {what for what, _, _ in seen}  # some cases ran it


def test_a_device_without_room_for_the_gemv_declines_it(opencl_with):
    # a device reporting less local memory than qgemv stages (GPU parameters, no shuffles on
    # OpenCL 1.2: the reduction's floats too) declines the GEMV cases with the reason, and keeps
    # the batches the GEMV does not serve
    import dataclasses

    from accel.backends.plan import support

    be = opencl_with(gemv=K.GPU_GEMV, qmatmul=QMATMUL)
    need = K.gemv_local_bytes(K.GPU_GEMV, "q4_0", shuffles=False)
    small = dataclasses.replace(be.facts, local_mem=need - 1)
    q4 = accel.formats.get_format("q4_0")
    verdict = support(S.qmatmul_spec((1, 64), "float32", (8, 64), q4), small, be.params)
    assert not verdict.ok and f"need {need} bytes of local memory" in verdict.reason
    assert support(S.qmatmul_spec((9, 64), "float32", (8, 64), q4), small, be.params).ok
    assert support(S.qmatmul_spec((1, 64), "float32", (8, 64), q4),
                   dataclasses.replace(be.facts, local_mem=need), be.params).ok
