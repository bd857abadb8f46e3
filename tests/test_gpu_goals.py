"""The speed-goal script of the GPU run (accel.conformance.gpu_goals) runs to its end on any
machine: where no CUDA device exists it writes a result file saying why and exits 1, so the
script itself (imports, arguments, output) is checked before a GPU session depends on it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gpu_toolchains import build_shipped, hot_loop, need

import accel
import accel.kernels as K
from accel.conformance import gpu_goals


def test_without_a_cuda_device_it_says_why_and_fails(tmp_path):
    status = next(s for s in accel.backends() if s.name == "cuda")
    if status.available:
        pytest.skip("a CUDA device is present: the GPU run itself measures the goals")
    out = tmp_path / "goals.json"
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.gpu_goals", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "accel.gpu_speed_goals/2" and doc["goals"] == []
    assert doc["error"].startswith("BackendUnavailable: ") and status.reason in doc["error"]
    assert "nothing measured" in proc.stdout


def test_usage_error_exits_2():
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.gpu_goals"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage:" in proc.stderr


@pytest.mark.parametrize("params", gpu_goals.STREAM_ALTERNATIVES, ids=str)
def test_every_timed_gemv_alternative_builds_for_sm_90(params):
    # a variant that cannot build (static shared memory past 48 KiB, ...) would cost a GPU run
    need("sm_90")
    p = {**K.GPU_GEMV, **params}
    v = K.quant("q4_0", "float32", p)
    r = build_shipped(v, "qgemv_stream", "sm_90")
    res = r.resources["qgemv_stream"]
    assert res.shared_bytes == K.stream_local_bytes(p, "q4_0") <= 48 * 1024
    assert res.registers <= 65536 // (p["STREAM_MIN_GROUPS"] * 32 * p["STREAM_WARPS"])
    loop = hot_loop(r, "qgemv_stream")
    assert loop["LDL"] == loop["STL"] == 0, loop
