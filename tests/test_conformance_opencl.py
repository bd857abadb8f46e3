"""The OpenCL backend passes the FULL conformance profile on every OpenCL device present (PyPI's
PoCL 3.0 where it can build for the CPU, Debian's 3.1 where installed), with every case claimed:
nothing declined, nothing failed; and the float32 quick profile with PoCL 3.0's spelling of the math
(ACCEL_CLANG_BUILTINS) forced on the first device, so that spelling is checked where 3.0 cannot
run."""
import pytest

import accel
from accel.backends.opencl import OpenCLBackend
from accel.conformance import suite


def _devices() -> list[str]:
    status = next((s for s in accel.backends() if s.name == "opencl"), None)
    return [f"opencl:{i}" for i in range(len(status.devices))] if status and status.available else []


needs_opencl = pytest.mark.skipif(not _devices(), reason="no OpenCL device here "
                                  "(pip install pyopencl pocl-binary-distribution)")


def _assert_all_passed(results) -> None:
    bad = [f"{r.case.id}: {r.status}: {r.reason}" for r in results if r.status != "passed"]
    assert not bad, f"{len(bad)} of {len(results)} cases did not pass:\n" + "\n".join(bad[:10])


@needs_opencl
@pytest.mark.parametrize("device", _devices())
def test_full_profile_passes(device):
    results = suite.run(accel.get_backend(device), profile="full")
    _assert_all_passed(results)
    assert len(results) > 1500 and {r.case.op for r in results} == set(accel.spec.OPS)


@needs_opencl
def test_quick_profile_passes_with_clang_builtins(monkeypatch):
    monkeypatch.setenv("ACCEL_OPENCL_BUILTINS", "1")
    be = OpenCLBackend(0)  # a new instance: the build options are fixed when it is made
    assert "-DACCEL_CLANG_BUILTINS=1" in be.build_options
    results = suite.run(be, profile="quick", dtypes=["float32", "q8_0", "q4_0", "float8_e4m3fn"])
    _assert_all_passed(results)
    assert {r.case.op for r in results} == set(accel.spec.OPS)
