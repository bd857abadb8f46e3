import numpy as np
import pytest

FULL_PROFILES = "--full-profiles"


def pytest_addoption(parser):
    parser.addoption(FULL_PROFILES, action="store_true",
                     help="also run the tests marked full_profile: the full conformance profiles "
                          "and the other release-size checks (minutes each on PoCL; CI runs the "
                          "quick ones)")


def pytest_configure(config):
    config.addinivalue_line("markers", "full_profile: a release-size check, run with --full-profiles")


def pytest_collection_modifyitems(config, items):
    # on demand, so that CI's cost grows with the tables, not with profile x op x format
    if config.getoption(FULL_PROFILES):
        return
    skip = pytest.mark.skip(reason=f"a full-profile check, run on demand: pytest {FULL_PROFILES}")
    for item in items:
        if "full_profile" in item.keywords:
            item.add_marker(skip)


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
