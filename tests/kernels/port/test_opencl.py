"""The CUDA corpus, translated to OpenCL C by accel port and run for real on PoCL, against numpy.

Each kernel is launched with CUDA's grid/block semantics through accel.kernel on the opencl
backend; the expected values come from numpy formulas written here, never from the translator.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
pytest.importorskip("pyopencl", reason="the OpenCL runs need pyopencl ([opencl] extra)")

from accel.kernel import kernel  # noqa: E402
from accel.kernels.port import translate  # noqa: E402
from repo_paths import TESTS  # noqa: E402

CORPUS = TESTS / "cuda_corpus"
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


#: block_reduce_warps.cu's block_sum with cooperative groups (HIP has no cg::reduce, so not in
#: the corpus every target builds)
_BLOCK_SUM_CG = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
""" + (CORPUS / "block_reduce_warps.cu").read_text() + """
// The same with cooperative groups, the second step guarded by threadIdx.x < 32.
extern "C" __global__ void block_sum_cg(const float* x, float* out, int n) {
    __shared__ float partial[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = cg::reduce(warp, i < n ? x[i] : 0.0f, cg::plus<float>());
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    float p = threadIdx.x < warp.meta_group_size() ? partial[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32) {
        float s = cg::reduce(warp, p, cg::plus<float>());
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }
}
"""


@pytest.mark.parametrize("block", [32, 96, 256])
def test_block_reductions_whose_last_step_only_warp_0_takes(backend, block):
    """``if (wid == 0) v = warpReduceSum(v);``: the emulation's barriers need every thread, so
    the reduction is hoisted before the if (each warp takes it whole, the others discard the
    result); three spellings, one to three rounds of partials. (The dialect has no warp
    emulation.)"""
    file, n, rows, cols = "block_reduce_warps.cu", 1000, 5, 333
    cg = translate(_BLOCK_SUM_CG, "opencl", filename=file)
    hoisted = [d.line for d in cg.diagnostics if d.construct == "warp call hoisted out of a branch"]
    assert cg.ok and hoisted == [26, 48, 64]  # the two in the file, 3 lines down; cg::reduce
    blocks = -(-n // block)
    x = RNG.integers(-50, 51, n).astype(np.float32)  # integers: every partial sum is exact
    want = np.concatenate([x, np.zeros(blocks * block - n, np.float32)]).reshape(blocks, block).sum(1)
    for name in ("block_sum", "block_sum_cg"):
        out = _dev(backend, np.full(blocks, np.nan, np.float32))
        kernel(cg.text, name, backend=backend, options=cg.options)(blocks, block, _dev(backend, x), out, np.int32(n))
        np.testing.assert_array_equal(out.numpy(), want, err_msg=name)
    m = RNG.integers(-2**31, 2**31 - 1, (rows, cols)).astype(np.int32)
    out = _dev(backend, np.zeros(rows, np.int32))
    _kernel(backend, file, "row_max")(rows, block, _dev(backend, m), out, np.int32(cols))
    np.testing.assert_array_equal(out.numpy(), m.max(1))


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


#: ggml's q8_0 block as numpy lays it out: packed, 34 bytes (CUDA's sizeof with 2-byte alignment)
Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", 32)])


def test_ggml_q8_0_blocks_with_a_half_member_quantize_and_dequantize(backend, to):
    """A struct with a half member, in buffers of ggml's packed 34-byte blocks: a 36-byte
    translation (a 4-aligned member) would read every block after the first at the wrong
    offset. The scale is stored rounded to nearest even (numpy's float16) and read back exactly,
    by __half2float and by C++'s implicit conversion (``const dfloat d = x[ib].d;``), in a
    template over a function-pointer typedef with a reference parameter, as ggml writes it."""
    nb = 37  # not a multiple of the 64-thread block
    x = (RNG.standard_normal((nb, 32)) * RNG.uniform(0.01, 100, (nb, 1))).astype(np.float32)
    x[3] = 0  # a zero block: scale 0, and no division by it
    raw = _dev(backend, np.zeros(nb * Q8_0.itemsize, np.uint8))
    scales = _dev(backend, np.zeros(nb, np.float32))
    _kernel(backend, "ggml_q8_0.cu", "quantize_q8_0", to)(1, 64, _dev(backend, x), raw, scales, np.int32(nb))
    blocks = raw.numpy().view(Q8_0)
    np.testing.assert_array_equal(scales.numpy(), blocks["d"].astype(np.float32))
    d = np.abs(x).max(1) / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    scaled = x * inv[:, None]
    np.testing.assert_array_equal(blocks["d"], d.astype(np.float16))
    np.testing.assert_array_equal(blocks["qs"], np.sign(scaled) * np.floor(np.abs(scaled) + 0.5))
    y = _dev(backend, np.full(nb * 32, np.nan, np.float32))
    _kernel(backend, "ggml_q8_0.cu", "dequantize_block_QK8_0_dequantize_q8_0", to)(
        (nb * 16 + 63) // 64, 64, raw, y, np.int64(nb * 32))
    want = blocks["d"].astype(np.float32)[:, None] * blocks["qs"].astype(np.float32)
    np.testing.assert_array_equal(y.numpy(), want.ravel())


def test_bfloat16_storage_converts_like_cuda_and_copies_bits(backend, to):
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    rows, C = 3, 300
    x = (RNG.standard_normal((rows, C)) * 3).astype(bf16)
    w = RNG.standard_normal(C).astype(bf16)
    out = _dev(backend, np.zeros((rows, C), bf16))
    _kernel(backend, "bf16_rmsnorm.cu", "rmsnorm_bf16", to)(
        rows, 256, out, _dev(backend, x), _dev(backend, w), np.int32(C), np.float32(1e-5))
    xf = x.astype(np.float32)
    want = xf / np.sqrt((xf.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * w.astype(np.float32)
    got = out.numpy().astype(np.float32)
    assert np.abs(got - want).max() <= 2 ** -7 * np.abs(want).max()  # one bf16 rounding
    # a bf16 -> bf16 copy keeps every bit pattern, NaNs and infinities included
    bits = np.arange(0, 65536, 97, dtype=np.uint16)
    y = _dev(backend, np.zeros(bits.size, np.uint16))
    _kernel(backend, "bf16_rmsnorm.cu", "copy_bf16", to)(
        -(-bits.size // 64), 64, _dev(backend, bits), y, np.int32(bits.size))
    nan = (bits & 0x7FFF) > 0x7F80
    np.testing.assert_array_equal(y.numpy()[~nan], bits[~nan])
    assert np.isnan(y.numpy()[nan].view(bf16).astype(np.float32)).all()


def test_bfloat16_narrowing_rounds_to_nearest_even(backend, to):
    import ml_dtypes

    src = ("#include <cuda_bf16.h>\n__global__ void narrow(const float* x, __nv_bfloat16* y, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) y[i] = __float2bfloat16_rn(x[i]);\n}\n")
    result = translate(src, to, filename="narrow.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    x = np.concatenate([RNG.standard_normal(500) * 1e3, [0.0, -0.0, np.inf, -np.inf, 3e38, 1e-40]])
    x = x.astype(np.float32)
    x[:8] = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2 ** -126 * 1.5, 1, 2, 3, 4],
                     np.float32)  # ties: to even
    y = _dev(backend, np.zeros(x.size, np.uint16))
    kernel(result.text, "narrow", backend=backend, options=result.options)(
        -(-x.size // 64), 64, _dev(backend, x), y, np.int32(x.size))
    np.testing.assert_array_equal(y.numpy(), x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_explicitly_instantiated_template_runs_as_one_function_per_type(backend, to):
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    dx = _dev(backend, x)
    _kernel(backend, "template_scale.cu", "scale_float", to)(5, 64, dx, np.float32(-2), np.int32(n))
    np.testing.assert_array_equal(dx.numpy(), x * np.float32(-2))


@pytest.mark.parametrize("body, construct", [
    ("y[i] = __float2bfloat16(__bfloat162float(x[i]) * 2.0f); y[i] = x[i] * x[i];", "bfloat16 store"),
    ("__nv_bfloat16 v = x[i]; y[i] = v;", "bfloat16 variable"),
    ("float v = x[i] + 1.0f; y[i] = __float2bfloat16(v);", "bfloat16 element access"),
])
def test_bfloat16_arithmetic_is_refused_on_its_line(body, construct):
    """bf16 operators round every result to bfloat16 in CUDA: done in float (or in the ushort
    bits) they would be silently different, so only the conversions translate."""
    src = ("#include <cuda_bf16.h>\n__global__ void k(const __nv_bfloat16* x, __nv_bfloat16* y) {\n"
           "    int i = threadIdx.x;\n    " + body + "\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert not result.ok
    assert any(d.line == 4 and construct in str(d) for d in result.diagnostics), result.diagnostics
