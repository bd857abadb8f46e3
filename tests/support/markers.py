"""The skip conditions the tests share, each defined once with its reason: import the marker
(``@needs_opencl``, ``pytestmark = needs_opencl``) or the helper rather than writing the check
again. They read accel's own view (``accel.backends()``), so importing this module imports no
vendor package (pyopencl, cupy) a test module might not need."""
from __future__ import annotations

import functools

import pytest

import accel

#: the OpenCL backend's status: available with a device, or the reason why not
OPENCL = next(s for s in accel.backends() if s.name == "opencl")
#: every OpenCL device here, in accel's order ("opencl:0" first); empty where OpenCL is unavailable
OPENCL_DEVICES = [f"opencl:{i}" for i in range(len(OPENCL.devices))] if OPENCL.available else []
needs_opencl = pytest.mark.skipif(
    not OPENCL_DEVICES, reason=f"no OpenCL device here ({OPENCL.reason or 'none found'}; "
    "pip install pyopencl pocl-binary-distribution; accel info says why)")

#: the planted-bug backends (tests/plugins/planted), a distribution of their own
needs_planted = pytest.mark.skipif(
    not any(s.name == "planted_k_off_by_one" for s in accel.backends()),
    reason="the planted-bug backends are a separate distribution: pip install -e tests/plugins/planted")


def import_cupy():
    """CuPy, or a skip saying how to install it."""
    return pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'accel-portable[cuda13]')")


@functools.cache
def cuda_gpu_count() -> int:
    """How many CUDA devices CuPy sees here (0 without CuPy or a driver); asked when first
    needed, so that importing this module initializes no GPU runtime."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver
        return 0
