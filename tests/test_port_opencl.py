"""The CUDA corpus, translated to OpenCL C by accel port and run for real on PoCL, against numpy.

Each kernel is launched with CUDA's grid/block semantics through accel.kernel on the opencl
backend; the expected values come from numpy formulas written here, never from the translator.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
pytest.importorskip("pyopencl", reason="the OpenCL runs need pyopencl ([opencl] extra)")

from accel.kernel import kernel  # noqa: E402
from accel.port import translate  # noqa: E402

CORPUS = Path(__file__).parent / "cuda_corpus"
RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def backend(opencl_backend):
    return opencl_backend


@pytest.fixture(params=["opencl", "dialect"])
def to(request):
    """Both OpenCL C and accel's dialect run on the opencl backend (the dialect through the
    portability header the backend prepends)."""
    return request.param


def _kernel(backend, file: str, name: str, to: str = "opencl"):
    result = translate((CORPUS / file).read_text(), to, filename=file)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    k = kernel(result.text, name, backend=backend, options=result.options)
    assert k.dialect == {"opencl": "opencl", "dialect": "accel"}[to]
    return k


def _dev(backend, a):
    import accel

    return accel.asarray(np.ascontiguousarray(a), backend=backend)


def test_saxpy_grid_stride_covers_more_elements_than_threads(backend, to):
    n = 10_000  # 4 blocks x 64 threads: each thread takes ~39 elements through the stride loop
    x, y = RNG.standard_normal(n, np.float32), RNG.standard_normal(n, np.float32)
    dy = _dev(backend, y)
    _kernel(backend, "saxpy_gridstride.cu", "saxpy", to)(4, 64, np.int32(n), np.float32(2.5),
                                                     _dev(backend, x), dy)
    np.testing.assert_allclose(dy.numpy(), np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)


def test_shared_tree_reduction_through_a_device_function(backend, to):
    n, blocks = 100_003, 8
    x = RNG.integers(-50, 50, n).astype(np.float32)  # integer values: every partial sum is exact
    partial = _dev(backend, np.zeros(blocks, np.float32))
    _kernel(backend, "reduce_shared.cu", "block_sum", to)(blocks, 256, _dev(backend, x), partial,
                                                      np.int32(n))
    expect = [x[np.arange(n) % (256 * blocks) // 256 == b].sum() for b in range(blocks)]
    np.testing.assert_array_equal(partial.numpy(), np.array(expect, np.float32))


def test_padded_tiled_transpose_with_2d_blocks(backend, to):
    rows, cols = 70, 45  # not multiples of the 32 tile: edge tiles are partial
    a = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = _dev(backend, np.full((cols, rows), np.nan, np.float32))
    grid = ((cols + 31) // 32, (rows + 31) // 32)
    _kernel(backend, "transpose_padded.cu", "transpose", to)(grid, (32, 8), _dev(backend, a), out,
                                                         np.int32(rows), np.int32(cols))
    np.testing.assert_array_equal(out.numpy(), a.T)


def test_histogram_with_shared_and_global_atomics(backend, to):
    n = 50_000
    data = RNG.integers(0, 256, n).astype(np.uint8)
    data[:1000] = 7  # a hot bin: many work-items hit the same counter at once
    hist = _dev(backend, np.zeros(256, np.uint32))
    _kernel(backend, "histogram.cu", "histogram", to)(6, 128, _dev(backend, data), np.int32(n), hist)
    np.testing.assert_array_equal(hist.numpy(), np.bincount(data, minlength=256))


def test_stencil_halo_in_dynamic_shared_memory(backend):
    n, block, r = 1000, 64, 3
    x = RNG.standard_normal(n).astype(np.float32)
    w = RNG.standard_normal(2 * r + 1).astype(np.float32)
    out = _dev(backend, np.zeros(n, np.float32))
    _kernel(backend, "stencil_halo.cu", "stencil")(
        (n + block - 1) // block, block, _dev(backend, x), _dev(backend, w), out, np.int32(n),
        shared_mem=(block + 2 * r) * 4)
    padded = np.pad(x.astype(np.float64), r)
    expect = sum(w[k] * padded[k:k + n] for k in range(2 * r + 1))
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_row_softmax(backend, to):
    rows, cols = 9, 300
    x = (RNG.standard_normal((rows, cols)) * 4).astype(np.float32)
    x[3, :] = -np.inf
    x[3, 10] = 1.0  # one finite logit among -inf: exp(-inf - m) must be 0, not NaN
    y = _dev(backend, np.zeros_like(x))
    _kernel(backend, "softmax_rows.cu", "softmax", to)(rows, 128, _dev(backend, x), y, np.int32(cols))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_tiled_matmul(backend, to):
    m, n, k = 37, 53, 70  # no dimension a multiple of the 16 tile
    a = RNG.integers(-8, 8, (m, k)).astype(np.float32)
    b = RNG.integers(-8, 8, (k, n)).astype(np.float32)
    c = _dev(backend, np.zeros((m, n), np.float32))
    _kernel(backend, "matmul_tiled.cu", "matmul", to)(((n + 15) // 16, (m + 15) // 16), (16, 16),
                                                  _dev(backend, a), _dev(backend, b), c,
                                                  np.int32(m), np.int32(n), np.int32(k))
    np.testing.assert_array_equal(c.numpy(), a @ b)  # small integers: exact in float32


def test_half_storage_loads_and_stores_round_to_nearest_even(backend, to):
    n = 513
    x = RNG.standard_normal(n).astype(np.float16)
    y = _dev(backend, np.zeros(n, np.float16))
    _kernel(backend, "half_scale.cu", "half_scale", to)(5, 128, _dev(backend, x), y, np.float32(1.7),
                                                    np.int32(n))
    np.testing.assert_array_equal(y.numpy(), (np.float32(1.7) * x.astype(np.float32)).astype(np.float16))


def test_explicitly_instantiated_template_runs_as_one_function_per_type(backend, to):
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    dx = _dev(backend, x)
    _kernel(backend, "template_scale.cu", "scale_float", to)(5, 64, dx, np.float32(-2), np.int32(n))
    np.testing.assert_array_equal(dx.numpy(), x * np.float32(-2))
