"""The decoder ops' benchmark runs end to end (no timing is judged here: ratios are printed)."""
import pytest

import accel


def test_decoder_bench_rows():
    pytest.importorskip("torch", reason="torch is the baseline of this benchmark")
    try:
        accel.get_backend("opencl")
    except accel.AccelError as e:
        pytest.skip(f"no OpenCL backend here: {e}")
    from accel.conformance.bench.decoder import run
    from accel.conformance.bench.timing import TINY

    rows = run("opencl", 256, TINY)
    assert [r["op"] for r in rows] == ["rms_norm", "rope", "glu", "add", "get_rows"]
    assert all("error" not in r and r["accel_s"] > 0 and r["torch_s"] > 0 for r in rows), rows
