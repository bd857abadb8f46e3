"""Issue 28, item 8: an infinity in a visible V row at the last key gives IEEE's +-inf on OpenCL,
as on the CPU reference, when Sk is not a multiple of the key tile (padding lanes used to
multiply their zero weight by that row, clamped to the last key: 0 x inf = NaN)."""
from __future__ import annotations

import numpy as np
import pytest

import accel
from markers import needs_opencl
from opencl_common import FIRST

pytestmark = needs_opencl


@pytest.mark.parametrize("device", FIRST)
@pytest.mark.parametrize("Sq,Sk", [(1, 33), (5, 45), (3, 70), (16, 16)])
def test_an_infinite_value_at_the_last_key_is_inf_not_nan(device, Sq, Sk):
    rng = np.random.default_rng(Sk)
    q = rng.standard_normal((1, 2, Sq, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, Sk, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, Sk, 8)).astype(np.float32)
    v[0, 0, -1, 3] = np.inf
    v[0, 1, -1, 5] = -np.inf
    want = accel.attention(q, k, v, backend="cpu")
    got = accel.attention(q, k, v, backend=device)
    assert np.isinf(want).sum() == 2 * Sq  # every query sees the last key
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    np.testing.assert_allclose(got[~np.isinf(want)], want[~np.isinf(want)], rtol=1e-4, atol=1e-5)
