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
