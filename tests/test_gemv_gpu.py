"""The GPU GEMV kernel (``qgemv`` in kernels/quant.cl) run for real on an OpenCL device (PoCL
here) with GPU parameter sets, against float64 math on ``accel.dequantize`` of the same weights.

Odd K / 32 puts consecutive weight rows at every even offset modulo 16 (the kernel's 16-byte loads
cover each block's aligned superset); K = 32 is a single block per row; odd N, M = 3 and RN, RM
that do not divide them leave partial teams and groups."""
from __future__ import annotations

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


@pytest.mark.parametrize("params", [
    dict(RM=1, RN=1, VW=1, GEMV_WG=8, GEMV_TEAMS=16),  # more work-items than x float4s to stage
    dict(RM=1, RN=3, VW=1, GEMV_WG=16, GEMV_TEAMS=3),  # work-items do not divide the x tile
    dict(RM=2, RN=2, VW=1, GEMV_WG=32, GEMV_TEAMS=2),  # two rows of x per group, M = 3 odd
    dict(RM=1, RN=4, VW=1, GEMV_WG=64, GEMV_TEAMS=1),
], ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items() if k != "VW"))
@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_parameter_sets(rng, params, fmt):
    be = _backend(params)
    for M, N, Kd in [(3, 23, 32 * 45), (1, 7, 32)]:
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
