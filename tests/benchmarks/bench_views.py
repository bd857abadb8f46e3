"""accel.Tensor views materialized on the device (kernels/copy.cl through ``Backend.gather``)
against the host round trip they replace (download, numpy's copy, upload), on OpenCL, printed as
ratios. No goal: on a CPU OpenCL device (PoCL) both move host memory; on a discrete GPU the round
trip also crosses the bus twice."""
import timeit

import numpy as np
import pytest

import accel
from accel.backend import Backend

CASES = {"transpose": lambda t: t.T, "row slice": lambda t: t[:, 1:],
         "transpose to bfloat16": lambda t: t.T}


@pytest.mark.parametrize("case", CASES)
def test_device_copy_vs_host_round_trip(benchmark, ratio_lines, opencl, case):
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    view = CASES[case](accel.asarray(a, backend=opencl))
    dtype = "bfloat16" if "bfloat16" in case else "float32"
    device = lambda: opencl.gather(view, dtype)  # noqa: E731
    host = lambda: Backend.gather(opencl, view, dtype)  # noqa: E731 - the base class's host path
    for f in (device, host):  # the same bytes either way
        got = opencl.download(f(), view.nbytes // 4 * np.dtype(accel.dtypes.to_numpy_dtype(dtype)).itemsize)
        np.testing.assert_array_equal(got.view(accel.dtypes.to_numpy_dtype(dtype)).reshape(view.shape),
                                      CASES[case](a).astype(accel.dtypes.to_numpy_dtype(dtype)))
    benchmark(lambda: (device(), opencl.synchronize()))
    # both on the host's clock, each call waited for (the device's profiling events would leave
    # out the round trip's copies, which are not kernels)
    dev_ms, host_ms = (min(timeit.repeat(lambda f=f: (f(), opencl.synchronize()), number=3,
                                         repeat=7)) / 3 * 1e3 for f in (device, host))
    benchmark.extra_info.update(device_ms=dev_ms, host_ms=host_ms)
    ratio_lines.append(f"{case} of 1024x1024 float32 on {opencl.info.name}: device copy {dev_ms:.2f} ms, "
                       f"host round trip {host_ms:.2f} ms ({host_ms / dev_ms:.2f}x)")
