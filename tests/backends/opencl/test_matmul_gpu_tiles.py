"""The GPU matmul (kernels/matmul.cl, LOCAL_TILE 1) run for real on PoCL with the parameters the
CUDA and HIP backends compile (K.GPU_MATMUL): every edge of its BM x BN x TK tiling, batch
broadcasting, every dtype pair, exact int8, and no use of k past K; then every GPU
parameter set ``accel tune`` may pick, on one ragged problem. Oracle: float64 / int64 numpy."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import matmul_bound

import accel
import accel.kernels as K
from accel import spec as S
from accel.backends.opencl.params import candidates
from accel.tensor import Tensor

pytestmark = needs_opencl
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
P = K.GPU_MATMUL
BM, BN, TK = P["WG_M"] * P["TM"], P["WG_N"] * P["TN"], P["TK"]


@pytest.fixture(scope="module")
def be(opencl_with):
    return opencl_with(matmul=P)


def _tensor(be, host: np.ndarray, guard: int = 0) -> Tensor:
    """host on the device; with ``guard`` > 0 the buffer continues with that many NaNs, which a
    kernel reading past the tensor's end would pull into its results."""
    dt = accel.dtypes.dtype_name(host.dtype)
    if not guard:
        return Tensor(be, be.upload(np.ascontiguousarray(host)), host.shape, dt)
    flat = np.concatenate([host.ravel(), np.full(guard, np.nan, host.dtype)])
    return Tensor(be, be.view(be.upload(flat), 0, host.nbytes), host.shape, dt)


def _matmul(be, a, b, out_dtype=None, guard=0):
    spec = S.matmul_spec(a.shape, accel.dtypes.dtype_name(a.dtype), b.shape,
                         accel.dtypes.dtype_name(b.dtype), out_dtype)
    return accel.dispatch.execute(be, spec, _tensor(be, a, guard), _tensor(be, b, guard)).numpy()


@pytest.mark.parametrize("M,N,Kd", [
    (1, 1, 1),                      # one element of one tile
    (BM + 1, BN - 1, TK + 1),       # a one-row block, a partial column block, one k past a step
    (BM - 1, 2 * BN + 3, TK - 1),   # K shorter than one step
    (3, 5, 2 * TK + 3),             # M and N far below the block
    (2 * BM, BN, 4 * TK),           # whole blocks and steps only
    (BM + 7, 9, 131),               # many steps, ragged everywhere
])
def test_tile_edges_exact_on_small_integers(be, rng, M, N, Kd):
    # products and sums of small integers are exact in float32: a correct kernel is bit-exact
    a = rng.integers(-8, 9, (M, Kd)).astype(np.float32)
    b = rng.integers(-8, 9, (Kd, N)).astype(np.float32)
    np.testing.assert_array_equal(_matmul(be, a, b), a.astype(np.int64) @ b.astype(np.int64))


def test_reads_nothing_past_k_or_the_last_row(be, rng):
    # NaNs right after A and B (more than a step of B's rows): the last step loading k past K
    # instead of zero-filling would turn outputs into NaN
    a = rng.integers(-8, 9, (BM + 3, 2 * TK + 5)).astype(np.float32)
    b = rng.integers(-8, 9, (2 * TK + 5, BN + 5)).astype(np.float32)
    got = _matmul(be, a, b, guard=2 * TK * BN)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_batch_broadcast_over_partial_blocks(be, rng):
    a = rng.integers(-4, 5, (3, 1, BM + 1, TK + 3)).astype(np.float32)
    b = rng.integers(-4, 5, (1, 2, TK + 3, 7)).astype(np.float32)
    got = _matmul(be, a, b)
    assert got.shape == (3, 2, BM + 1, 7)
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_dtype_pairs_within_bound_of_float64(be, rng, dtype, out_dtype):
    a = rng.standard_normal((BM + 3, 3 * TK + 5)).astype(NP[dtype])
    b = rng.standard_normal((3 * TK + 5, BN + 5)).astype(NP[dtype])
    got = _matmul(be, a, b, out_dtype).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    assert (np.abs(got - want) <= matmul_bound(a64, b64, want, out_dtype)).all()


def test_int8_exact_where_float32_would_round(be, rng):
    # mostly +-127 / -128 products of one sign: sums near 4e7, far past 2**24, with odd terms
    Kd = 2500
    a = np.where(rng.random((BM + 5, Kd)) < 0.9, 127, -128).astype(np.int8)
    b = np.where(rng.random((Kd, BN + 3)) < 0.9, 127, -127).astype(np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert (np.abs(want) > 2**24).any() and (want.astype(np.float32).astype(np.int64) != want).any()
    got = _matmul(be, a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("params", candidates("matmul", "gpu", 1), ids=lambda p: "-".join(
    f"{k}{v}" for k, v in p.items() if k in ("WG_M", "WG_N", "TM", "TN", "TK")))
def test_every_tune_candidate_exact(opencl_with, rng, params):
    a = rng.integers(-8, 9, (2, 71, 2 * params["TK"] + 3)).astype(np.float32)
    b = rng.integers(-8, 9, (2 * params["TK"] + 3, 69)).astype(np.float32)
    got = _matmul(opencl_with(matmul=params), a, b)
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)))
