import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def opencl_backend():
    """The first OpenCL device, or a skip saying why there is none."""
    import accel

    try:
        return accel.get_backend("opencl")
    except accel.BackendUnavailable as e:
        pytest.skip(f"no OpenCL device: {e}")


@pytest.fixture(scope="session")
def opencl_with():
    """A factory of OpenCL backends with chosen tile parameters: ``opencl_with(gemv={...},
    qmatmul={...})`` is a new ``OpenCLBackend(0)`` (plans, verdicts and kernels of its own, so
    other tests' backends keep theirs) whose parameters of each op named are the dict given, the
    other ops keeping the device's own. Tests that use it skip without a device (``needs_opencl``,
    tests/support/markers.py) before calling it."""
    def make(**tiles: dict):
        from accel.backends.opencl import OpenCLBackend

        be = OpenCLBackend(0)
        if tiles:
            be.params = {**be.params, **{op: dict(p) for op, p in tiles.items()}}
        return be

    return make


@pytest.fixture(scope="session")
def gpu_build_cache(tmp_path_factory):
    """One kernel-binary cache for every GPU compile test of this run (xdist workers included):
    entries are keyed by toolchain, target, options, source and headers, so a variant several
    tests build is compiled once, while no run reuses another run's binaries."""
    import os

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return root / "gpu-build-cache"
