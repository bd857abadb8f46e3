"""The OpenCL backend passes the FULL conformance profile on every OpenCL device present (in CI:
PyPI's PoCL; here also Debian's), with every case claimed: nothing declined, nothing failed."""
import pytest

import accel
from accel.conformance import suite


def _devices() -> list[str]:
    status = next((s for s in accel.backends() if s.name == "opencl"), None)
    return [f"opencl:{i}" for i in range(len(status.devices))] if status and status.available else []


@pytest.mark.skipif(not _devices(), reason="no OpenCL device here (pip install pyopencl pocl-binary-distribution)")
@pytest.mark.parametrize("device", _devices())
def test_full_profile_passes(device):
    results = suite.run(accel.get_backend(device), profile="full")
    bad = [f"{r.case.id}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    assert not bad, f"{len(bad)} of {len(results)} cases did not pass:\n" + "\n".join(bad[:10])
    assert len(results) > 1500 and {r.case.op for r in results} == set(accel.spec.OPS)
