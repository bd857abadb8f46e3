"""The GPU GEMV kernels (``qgemv`` and ``qgemv_aligned`` in kernels/quant.cl) run for real on an
OpenCL device (PoCL here) with GPU parameter sets, against float64 math on ``accel.dequantize`` of
the same weights.

Odd K / 32 puts consecutive weight rows at every even offset modulo 16 (qgemv's 16-byte loads
cover each block's aligned superset); K = 32 is a single block per row; odd N, M = 3 and RN, RM
that do not divide them leave partial teams and groups. K a multiple of 256 runs qgemv_aligned
(chunks of 8 blocks at fixed byte positions): K = 256 is one chunk per row, 4096 + 256 leaves a
partial last step of GEMV_WG chunks."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from test_opencl_common import matmul_bound, needs_device

import accel
import accel.kernels as K
from accel import spec as S
from accel.backends.opencl import OpenCLBackend
from accel.tensor import Tensor

pytestmark = needs_device
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _backend(gemv: dict) -> OpenCLBackend:
    be = OpenCLBackend(0)
    be.params = {**be.params, "gemv": dict(gemv), "qmatmul": {**K.GPU_QMATMUL, "WG": 16}}
    return be


@pytest.fixture(scope="module")
def gpu_be():
    """opencl:0 running the shipped GPU GEMV parameters."""
    return _backend(K.GPU_GEMV)


def _weights(rng, fmt, N, Kd):
    qt = accel.quantize(rng.standard_normal((N, Kd)).astype(np.float32), fmt, backend="cpu")
    return np.asarray(qt.raw), accel.dequantize(qt).astype(np.float64)


def _kernels_run(be, monkeypatch) -> list[str]:
    """The launch descriptions of the kernels ``be`` enqueues from now on."""
    seen = []
    real = be._enqueue

    def enqueue(kernel, gsize, lsize, what):
        seen.append(what)
        real(kernel, gsize, lsize, what)

    monkeypatch.setattr(be, "_enqueue", enqueue)
    return seen


def _check(be, rng, fmt, dtype, M, N, Kd):
    raw, wd = _weights(rng, fmt, N, Kd)
    x = rng.standard_normal((M, Kd)).astype(NP[dtype])
    spec = S.qmatmul_spec(x.shape, dtype, (N, Kd), accel.formats.get_format(fmt))
    tx = Tensor(be, be.upload(x), x.shape, dtype)
    tw = Tensor(be, be.upload(raw), raw.shape, "uint8")
    got = accel.ops.execute(be, spec, tx, tw).numpy()
    assert got.shape == (M, N) and got.dtype == x.dtype
    x64 = x.astype(np.float64)
    want = x64 @ wd.T
    bad = np.abs(got.astype(np.float64) - want) > matmul_bound(x64, wd.T, want, dtype)
    assert not bad.any(), f"{bad.sum()} of {bad.size} out of bound, first {np.argwhere(bad)[0]}"


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N,Kd", [(1, 37, 32), (3, 37, 32), (1, 45, 8192), (3, 29, 32 * 125)])
def test_qgemv_within_bound_of_float64(gpu_be, rng, fmt, dtype, M, N, Kd):
    _check(gpu_be, rng, fmt, dtype, M, N, Kd)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N,Kd", [(1, 37, 256), (3, 37, 256), (1, 45, 8192), (3, 29, 4096 + 256)])
def test_qgemv_aligned_within_bound_of_float64(gpu_be, rng, monkeypatch, fmt, dtype, M, N, Kd):
    seen = _kernels_run(gpu_be, monkeypatch)
    _check(gpu_be, rng, fmt, dtype, M, N, Kd)
    assert seen == ["qmatmul (qgemv_aligned)"]


@pytest.mark.parametrize("Kd", [32 * 9, 4096 + 32, 256 + 128])
def test_k_not_in_whole_chunks_runs_qgemv(gpu_be, rng, monkeypatch, Kd):
    seen = _kernels_run(gpu_be, monkeypatch)
    _check(gpu_be, rng, "q4_0", "float32", 3, 11, Kd)
    assert seen == ["qmatmul (qgemv)"]


def test_aligned_path_needs_16_byte_buffer_alignment(rng, monkeypatch):
    # OpenCL buffers and views start at multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN (views at other
    # offsets are refused): a device promising less than 16 bytes would leave rows misaligned
    be = _backend(K.GPU_GEMV)
    be.alignment = 8
    seen = _kernels_run(be, monkeypatch)
    _check(be, rng, "q8_0", "float32", 1, 9, 512)
    assert seen == ["qmatmul (qgemv)"]


def test_aligned_path_needs_room_in_local_memory(rng, monkeypatch):
    # qgemv_aligned stages GEMV_WG chunks of 256 values of x per row of x; qgemv needs far less
    p = dict(RM=2, RN=2, VW=1, GEMV_WG=16, GEMV_TEAMS=2)
    need = 16 * 2 * 16 * (65 + 17) + 4 * 2 * 2 * 32
    for room, kernel in [(need - 1, "qgemv"), (need, "qgemv_aligned")]:
        be = _backend(p)
        be.dev = dataclasses.replace(be.dev, local_mem=room)
        seen = _kernels_run(be, monkeypatch)
        _check(be, rng, "q4_0", "float32", 2, 9, 512)
        assert seen == [f"qmatmul ({kernel})"]


def test_aligned_path_reads_weight_views(gpu_be, rng, monkeypatch):
    # a view of rows 4.. of a larger weight (4 rows of 288 bytes: a multiple of the base alignment)
    N, Kd, r0 = 7, 512, 4
    raw, wd = _weights(rng, "q4_0", N + r0, Kd)
    x = rng.standard_normal((2, Kd)).astype(np.float32)
    row = raw.shape[1]
    assert r0 * row % gpu_be.alignment == 0
    tw = Tensor(gpu_be, gpu_be.view(gpu_be.upload(raw), r0 * row, N * row), (N, row), "uint8")
    spec = S.qmatmul_spec(x.shape, "float32", (N, Kd), accel.formats.get_format("q4_0"))
    seen = _kernels_run(gpu_be, monkeypatch)
    got = accel.ops.execute(gpu_be, spec, Tensor(gpu_be, gpu_be.upload(x), x.shape, "float32"),
                            tw).numpy()
    x64 = x.astype(np.float64)
    want = x64 @ wd[r0:].T
    assert seen == ["qmatmul (qgemv_aligned)"]
    assert (np.abs(got - want) <= matmul_bound(x64, wd[r0:].T, want, "float32")).all()


@pytest.mark.parametrize("params", [
    dict(RM=1, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=16),  # more work-items than x float4s to stage
    dict(RM=1, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=3),  # work-items do not divide the x tile
    dict(RM=2, RN=2, VW=1, GEMV_WG=32, GEMV_TEAMS=2),  # two rows of x per group, M = 3 odd
    dict(RM=1, RN=4, VW=1, GEMV_WG=64, GEMV_TEAMS=1),
], ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items() if k != "VW"))
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_parameter_sets(rng, params, fmt):
    be = _backend(params)
    # qgemv, then qgemv_aligned with one partial step and with a full step plus a partial one
    for M, N, Kd in [(3, 23, 32 * 45), (1, 7, 32), (3, 23, 256 * 5), (1, 7, 256 * 9)]:
        _check(be, rng, fmt, "float32", M, N, Kd)


def test_qgemv_launch_contract(rng, monkeypatch):
    # kernels/quant.cl: local (GEMV_WG * GEMV_TEAMS), groups (ceil(N / (GEMV_TEAMS * RN)),
    # ceil(M / RM)); GPU parameter sets run qgemv up to M = 8, qmatmul beyond
    p = dict(RM=2, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=2)
    be = _backend(p)
    seen = []
    real = be._enqueue

    def enqueue(kernel, gsize, lsize, what):
        seen.append((what, gsize, lsize))
        real(kernel, gsize, lsize, what)

    monkeypatch.setattr(be, "_enqueue", enqueue)
    for M in (8, 9):
        _check(be, rng, "q4_0", "float32", M, 20, 64)
    (what8, g8, l8), (what9, _, _) = seen
    assert "qgemv" in what8 and "qgemv" not in what9
    assert l8 == (32, 1) and g8 == (4 * 32, 4)  # ceil(20 / 6) groups over N, ceil(8 / 2) over M


def test_default_gemv_parameters_fill_an_h200():
    p = K.GPU_GEMV
    assert p["GEMV_WG"] * p["GEMV_TEAMS"] % 32 == 0  # whole warps
    assert -(-8192 // (p["GEMV_TEAMS"] * p["RN"])) >= 2 * 132  # N = 8192: work-groups for 132 SMs
