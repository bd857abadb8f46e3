"""Which GEMV kernel a quantized matmul runs (``accel.kernels.gemv_kernel``) and the default GPU
GEMV parameters: pure decisions, checked without a device (the kernels themselves run in
tests/backends/opencl/test_gemv_gpu.py)."""
from __future__ import annotations

import pytest

import accel
import accel.kernels as K


def test_default_gemv_parameters_fill_an_h200():
    p = K.GPU_GEMV
    assert p["GEMV_WG"] * p["GEMV_TEAMS"] % 32 == 0  # whole warps
    assert -(-8192 // (p["GEMV_TEAMS"] * p["RN"])) >= 2 * 132  # N = 8192: work-groups for 132 SMs


def test_gemv_kernel_choice(monkeypatch):
    monkeypatch.delenv("ACCEL_GEMV_KERNEL", raising=False)  # prefer's default: the environment's
    p = K.GPU_GEMV

    def choice(fmt="q4_0", k=8192, x=256, w=256, local=48 * 1024, params=p, **kw):
        return K.gemv_kernel(fmt, k, params, x_addr=x, w_addr=w, local_mem=local, **kw)

    assert choice() == "qgemv"  # not asked for
    assert choice(prefer="qgemv_stream") == "qgemv_stream"
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv_stream")
    assert choice() == "qgemv_stream"  # asked for by the environment
    monkeypatch.delenv("ACCEL_GEMV_KERNEL")
    for why in (dict(k=8192 + 32), dict(w=258), dict(x=264), dict(local=16 * 1024),
                dict(fmt="q8_0", shuffles=False),  # one float per work-item and row: > 48 KiB
                dict(params={k: v for k, v in p.items() if not k.startswith("STREAM_")})):
        assert choice(prefer="qgemv_stream", **why) == "qgemv", why


def test_gemv_kernel_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "fast")
    with pytest.raises(accel.ArgumentError, match="ACCEL_GEMV_KERNEL.*'qgemv', 'qgemv_stream', 'qgemv_runs'.*'fast'"):
        K.preferred_gemv()
    monkeypatch.delenv("ACCEL_GEMV_KERNEL")
    assert K.preferred_gemv() == "qgemv"
