"""Conformance on OpenCL, every case claimed (nothing declined but what the shared kernels leave
to the cpu reference by one rule, kernels.kernel_declines, or what kernels/decoder.cl does not
take, backends/plan.py; nothing failed):
- the quick profile on the first device (Debian's PoCL 3.1 where installed, else PyPI's 3.0),
  one op per test so that the suite's workers share it; the FULL profile there, one op and dtype
  per test, with ``pytest --full-profiles``;
- the quick profile in the dtypes that reach every kind of kernel (float32, q8_0, q4_0, q4_k,
  float8_e4m3fn) on every other device (PyPI's PoCL 3.0 where it can build for the CPU);
- PoCL 3.0's spelling of the math (ACCEL_CLANG_BUILTINS) forced on the first device where no
  other device builds with it, so that spelling is checked where 3.0 cannot run.
The full profile on every device is `accel conformance --backend opencl:N --profile full`
(docs/results)."""
import pytest

import accel
from accel import kernels
from accel.backends.opencl import OpenCLBackend
from accel.conformance import profiles, suite
from accel.spec import DECODER_OPS
from markers import OPENCL_DEVICES, needs_opencl


def _left_to_the_cpu(r) -> bool:
    """A case the shared kernels decline by their one documented rule (kernel_declines; for the
    decoder-step ops, what kernels/decoder.cl takes: the public op answers those cases with the
    cpu reference, written back)."""
    if r.case.op in DECODER_OPS:
        return r.status == "unsupported" and r.reason.startswith("kernels/decoder.cl")
    p = r.case.params
    fmt = p.get("fmt") or (r.case.dtype if r.case.op == "dequantize" else None)  # by format
    why = kernels.kernel_declines(r.case.op, fmt, p.get("x_fmt"))
    return r.status == "unsupported" and why is not None and why in r.reason


def _assert_all_passed(results) -> None:
    bad = [f"{r.case.id}: {r.status}: {r.reason}" for r in results
           if r.status != "passed" and not _left_to_the_cpu(r)]
    assert not bad, f"{len(bad)} of {len(results)} cases did not pass:\n" + "\n".join(bad[:10])


@needs_opencl
@pytest.mark.parametrize("op", profiles.OPS)
def test_quick_profile_passes_on_the_first_device(op):
    results = suite.run(accel.get_backend(OPENCL_DEVICES[0]), profile="quick", ops=[op])
    _assert_all_passed(results)
    assert {r.case.dtype for r in results} == set(profiles.op_dtypes(op))


@needs_opencl
@pytest.mark.full_profile
@pytest.mark.parametrize("op, dtype", [(op, dt) for op in profiles.OPS for dt in profiles.op_dtypes(op)])
def test_full_profile_passes_on_the_first_device(op, dtype):
    # one op and dtype per test: the suite's workers share the profile evenly (qmatmul alone is
    # 728 cases over 16 formats)
    results = suite.run(accel.get_backend(OPENCL_DEVICES[0]), profile="full", ops=[op], dtypes=[dtype])
    _assert_all_passed(results)
    assert len(results) > len(suite.planned("quick", 0, [op], [dtype])[0])
    assert {(r.case.op, r.case.dtype) for r in results} == {(op, dtype)}


@needs_opencl
@pytest.mark.parametrize("device", OPENCL_DEVICES[1:] or [pytest.param("opencl:1", marks=pytest.mark.skip(
    reason="one OpenCL device here: the first runs the full profile above"))])
def test_quick_profile_passes_on_every_other_device(device):
    # every op, in the dtypes that reach every kind of kernel (float32, a legacy, a K-quant and an
    # FP8 format): the second PoCL build is checked for what it compiles; the whole profile on it
    # is `accel conformance --backend opencl:1` (it cost 8 minutes of the suite's 17)
    results = suite.run(accel.get_backend(device), profile="quick",
                        dtypes=["float32", "q8_0", "q4_0", "q4_k", "float8_e4m3fn"])
    _assert_all_passed(results)
    assert {r.case.op for r in results} == set(profiles.OPS)


def _builds_with_builtins(device: str) -> bool:
    return "-DACCEL_CLANG_BUILTINS=1" in accel.get_backend(device).build_options


@needs_opencl
@pytest.mark.skipif(any(_builds_with_builtins(d) for d in OPENCL_DEVICES[1:]), reason=(
    "another OpenCL device here (PyPI's PoCL 3.0) builds with the clang builtins and runs the "
    "quick profile above: forcing them on the first device would repeat it"))
def test_quick_profile_passes_with_clang_builtins(monkeypatch):
    monkeypatch.setenv("ACCEL_OPENCL_BUILTINS", "1")
    be = OpenCLBackend(0)  # a new instance: the build options are fixed when it is made
    assert "-DACCEL_CLANG_BUILTINS=1" in be.build_options
    results = suite.run(be, profile="quick", dtypes=["float32", "q8_0", "q4_0", "float8_e4m3fn"])
    _assert_all_passed(results)
    assert {r.case.op for r in results} == set(profiles.OPS)


@needs_opencl
@pytest.mark.parametrize("device", OPENCL_DEVICES)
def test_layer_norm_runs_its_device_kernel_within_the_bound(device, monkeypatch):
    # each case, float32 or float16, is one launch of decoder.cl's layer_norm, so none
    # was the host reference written back (what layer_norm was on a device before it had a kernel)
    from opencl_common import recorded_launches  # pyopencl: only where an OpenCL test runs

    be = accel.get_backend(device)
    seen = recorded_launches(be, monkeypatch)
    results = suite.run(be, profile="quick", ops=["layer_norm"])
    _assert_all_passed(results)
    assert [what for what, _, _ in seen].count("kernel 'layer_norm'") == len(results) > 0
    assert {r.case.dtype for r in results} >= {"float32", "float16"}
