"""Kernels from public repositories, kept verbatim in tests/port_real/ (each file names its source,
commit and licence), translated by ``accel port --to opencl`` and run through ``accel.kernel`` on
PoCL against numpy; and those with no faithful OpenCL 1.2 form, refused on the exact line with
the reason. Plus the warp emulation's lane semantics, checked against CUDA's documented rules."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
pytest.importorskip("pyopencl", reason="the OpenCL runs need pyopencl ([opencl] extra)")

import accel  # noqa: E402
from accel.kernel import kernel  # noqa: E402
from accel.kernels.port import translate  # noqa: E402
from repo_paths import TESTS  # noqa: E402

REAL = TESTS / "port_real"
F32 = np.float32


def _port(src: str, name: str, backend, filename: str = "k.cu"):
    result = translate(src, "opencl", filename=filename)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    return kernel(result.text, name, backend=backend, options=result.options)


def _dev(a, backend):
    return accel.asarray(np.ascontiguousarray(a), backend=backend)


def test_llmc_softmax_kernel4_with_warp_shuffles_matches_numpy(opencl_backend):
    file = REAL / "llmc_softmax_forward_kernel4.cu"
    k = _port(file.read_text(), "softmax_forward_kernel4", opencl_backend, file.name)
    N, C, block = 5, 300, 128  # C not a multiple of the block: the coarsening loops' tails
    x = np.random.default_rng(4).standard_normal((N, C)).astype(F32) * 4
    out = _dev(np.zeros((N, C), F32), opencl_backend)
    k(N, block, out, _dev(x, opencl_backend), np.int32(N), np.int32(C), shared_mem=block // 32 * 4)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=2e-5, atol=1e-7)


def test_llmc_layernorm_kernel3_warps_past_the_last_row_return_whole_and_it_matches_numpy(opencl_backend):
    """One warp per row (idx = blockIdx.x * meta_group_size + meta_group_rank), and
    ``if (idx >= N) return;`` before two cg::reduce: the return is taken by whole warps, so every
    thread keeps running with its effects under ``if (accel_live)``; the warps past the last
    row store nothing, the others compute llm.c's layernorm."""
    file = REAL / "llmc_layernorm_forward_kernel3.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert [(d.line, d.construct) for d in result.diagnostics] == [
        (16, "early return kept for every thread"), (27, "warp emulation")]
    k = kernel(result.text, "layernorm_forward_kernel3", backend=opencl_backend, options=result.options)
    N, C = 5, 100  # 4 warps per 128-thread block: the second block's last 3 warps return
    rng = np.random.default_rng(12)
    x, w, b = (rng.standard_normal(s).astype(F32) for s in ((N, C), C, C))
    out = _dev(np.full((N, C), np.nan, F32), opencl_backend)
    mean, rstd = _dev(np.full(8, np.nan, F32), opencl_backend), _dev(np.full(8, np.nan, F32), opencl_backend)
    k(2, 128, out, mean, rstd, *(_dev(a, opencl_backend) for a in (x, w, b)), np.int32(N), np.int32(C))
    x64 = x.astype(np.float64)
    m, r = x64.mean(1), 1 / np.sqrt(x64.var(1) + 1e-5)
    np.testing.assert_allclose(mean.numpy()[:N], m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.numpy()[:N], r, rtol=1e-5)
    assert np.isnan(mean.numpy()[N:]).all() and np.isnan(rstd.numpy()[N:]).all()  # never stored
    np.testing.assert_allclose(out.numpy(), (x64 - m[:, None]) * r[:, None] * w + b, rtol=1e-4, atol=1e-5)


def test_cuda_samples_shfl_scan_is_refused_at_its_partial_mask():
    """The kernel's default argument (``int *partial_sums = NULL``) is dropped with a warning:
    accel.kernel passes every argument. The first scan (full mask, its loop counter ``i`` its
    own, though another loop declares an ``i`` under a thread-dependent if) is emulated; the
    second scan's mask names only some lanes: refused on its line."""
    file = REAL / "cudasamples_shfl_scan_test.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert result.text is None
    assert [(d.line, d.construct) for d in result.errors] == [(52, "__shfl_up_sync")]
    assert "names only some lanes" in str(result.errors[0])
    assert [(d.line, d.construct) for d in result.diagnostics if d.severity == "warning"] == [
        (4, "kernel default argument"), (27, "warp emulation")]


_BLOCK_CG = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define FULL 0xffffffff
__device__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) {
        val += __shfl_xor_sync(FULL, val, offset);
    }
    return val;
}
__global__ void k(float* out, const float* in, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = block.group_index().x * block.size() + block.thread_rank();
    float v = i < n ? in[i] : 0.0f;
    float s = warpReduceSum(v);
    float m = cg::reduce(warp, v, cg::greater<float>());
    block.sync();
    if (warp.thread_rank() == 0) { out[2 * (i / 32)] = s; out[2 * (i / 32) + 1] = m; }
}
"""


def test_block_groups_and_tile_reductions_match_numpy(opencl_backend):
    k = _port(_BLOCK_CG, "k", opencl_backend)
    n = 200  # the last warps hold padding: every thread still reaches the reductions
    x = np.random.default_rng(1).standard_normal(256).astype(F32)
    out = _dev(np.zeros(16, F32), opencl_backend)
    k(2, (32, 4), out, _dev(x, opencl_backend), np.int32(n))  # 2-d blocks: linear lane order
    padded = np.where(np.arange(256) < n, x, 0).reshape(8, 32)
    got = out.numpy().reshape(8, 2)
    np.testing.assert_allclose(got[:, 0], padded.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, 1], padded.max(1))


_LANES = """__global__ void lanes(int* out, int b, int width) {
    int t = threadIdx.x, v = 1000 + t;
    out[t] = __shfl_sync(0xffffffff, v, b, width);
    out[64 + t] = __shfl_up_sync(0xffffffff, v, b, width);
    out[128 + t] = __shfl_down_sync(0xffffffff, v, b, width);
    out[192 + t] = __shfl_xor_sync(0xffffffff, v, b, width);
}
"""


@pytest.mark.parametrize("b, width", [(3, 32), (5, 16), (1, 8), (19, 32), (7, 4)])
def test_shuffle_lanes_follow_cudas_rules(opencl_backend, b, width):
    """CUDA Programming Guide, warp shuffle functions: lanes are split into segments of
    ``width``; __shfl_sync reads lane srcLane % width of the segment, up/down read lane -/+
    delta unless that leaves the segment (then the caller's own value), xor reads lane ^ mask
    within the segment (or its own value past it)."""
    k = _port(_LANES, "lanes", opencl_backend)
    out = _dev(np.zeros(256, np.int32), opencl_backend)
    k(1, 64, out, np.int32(b), np.int32(width))
    lane = np.arange(64) % 32
    base, seg = np.arange(64) - lane, lane // width * width
    want = np.concatenate([
        base + seg + b % width,
        base + np.where(lane - b >= seg, lane - b, lane),
        base + np.where(lane + b < seg + width, lane + b, lane),
        base + np.where((lane ^ b) < seg + width, lane ^ b, lane)]) + 1000
    np.testing.assert_array_equal(out.numpy(), want)


def test_stats_over_the_real_kernels():
    from accel.kernels.port.stats import sources, tally

    entries = [(p, p.read_text(), translate(p.read_text(), "opencl", filename=str(p)))
               for p in sources([REAL])]
    stats = tally(entries, "opencl")
    assert (stats["files"], stats["files_ported"]) == (21, 17)
    assert (stats["kernels"], stats["kernels_ported"]) == (38, 29)
    assert stats["constructs"]["cg::reduce"]["refused"] == 0
    assert stats["refused_by_reason"] == {"__shfl_up_sync": 1, "template": 2, "__CUDA_ARCH__": 1,
                                          "cooperative groups": 1, "printf": 1}
    assert (stats["files_refused"], stats["files_failed"]) == (4, 0)


def test_stats_count_a_file_the_translator_failed_on_apart():
    from accel.kernels.port.stats import format_text, tally

    src = "__global__ void k(float* x) { x[0] = 1.0f; }"
    stats = tally([("a.cu", src, translate(src, "opencl")), ("b.cu", src, RecursionError("deep"))],
                  "opencl")
    assert (stats["files_ported"], stats["files_refused"], stats["files_failed"]) == (1, 0, 1)
    assert "failed: 1 files\n  b.cu: RecursionError: deep" in format_text(stats)


def test_output_builds_on_strict_opencl_compilers(opencl_backend):
    """No redefinition of OpenCL's own types (typedef uint uint;) and no C++ empty initializer
    (= {}), which strict C99 OpenCL compilers reject; the result still computes CUDA's."""
    src = ("typedef unsigned int uint;\n"
           "__global__ void k(uint* x) { float a[4] = {}; uint b = 3; x[threadIdx.x] = b + (uint)a[2]; }\n")
    result = translate(src, "opencl")
    assert "typedef uint uint" not in result.text and "= {}" not in result.text
    k = _port(src, "k", opencl_backend)
    x = _dev(np.full(8, 7, np.uint32), opencl_backend)
    k(1, 8, x)
    np.testing.assert_array_equal(x.numpy(), np.full(8, 3, np.uint32))


def test_shared_array_declared_in_a_loop_is_hoisted_and_computes_the_same(opencl_backend):
    src = ("#define T 8\n__global__ void k(float* x) {\n  for (int r = 0; r < 2; r++) {\n"
           "    __shared__ float t[T];\n    t[threadIdx.x] = x[threadIdx.x] + r;\n    __syncthreads();\n"
           "    x[threadIdx.x] = t[(threadIdx.x + 1) % T];\n    __syncthreads();\n  }\n}\n")
    result = translate(src, "opencl")
    assert [(d.line, d.construct, d.severity) for d in result.diagnostics] == [
        (4, "__shared__ hoisted", "warning")]
    k = _port(src, "k", opencl_backend)
    x0 = np.arange(8, dtype=F32)
    x = _dev(x0, opencl_backend)
    k(1, 8, x)
    want = np.roll(np.roll(x0, -1) + 1, -1)  # round 0 adds 0 and rotates, round 1 adds 1
    np.testing.assert_array_equal(x.numpy(), want)


def test_namespaces_around_device_code_are_dropped(opencl_backend):
    src = ("namespace ops {\n__device__ void sq(float* p) { p[0] = p[0] * p[0]; }\n}\n"
           "namespace {\n__global__ void k(float* x) {\n  __shared__ float s[8];\n"
           "  s[threadIdx.x] = x[threadIdx.x];\n  ops::sq(&s[threadIdx.x]);\n"
           "  x[threadIdx.x] = s[threadIdx.x] + 1.0f;\n}\n}\n")
    result = translate(src, "opencl")
    assert "void sq(__local float* p)" in result.text  # the address space from the ops:: call
    k = _port(src, "k", opencl_backend)
    x0 = np.arange(8, dtype=F32)
    x = _dev(x0, opencl_backend)
    k(1, 8, x)
    np.testing.assert_array_equal(x.numpy(), x0 * x0 + 1)


_WARP_ID_CG = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(float* out, const float* in, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<TILE> warp = cg::tiled_partition<TILE>(block);
    __shared__ float part[32];
    int i = blockIdx.x * block.size() + block.thread_rank();
    float v = cg::reduce(warp, i < n ? in[i] : 0.0f, cg::plus<float>());
    if (warp.thread_rank() == 0) part[warp.meta_group_rank()] = v;
    block.sync();
    float w = warp.thread_rank() < warp.meta_group_size() ? part[warp.thread_rank()] : 0.0f;
    if (warp.meta_group_rank() == 0) {
        w = cg::reduce(warp, w, cg::plus<float>());
        if (warp.thread_rank() == 0) out[blockIdx.x] = w;
    }
}
"""


def test_a_branch_on_a_warp_tiles_meta_group_rank_is_warp_uniform(opencl_backend):
    """``if (warp.meta_group_rank() == 0) w = cg::reduce(warp, w, ...)``: a 32-thread tile's
    meta_group_rank is the warp's index, so each warp takes the branch whole and the reduction
    is hoisted before it; right with blockDim.x = 16 too (the index is the linear thread's)."""
    result = translate(_WARP_ID_CG.replace("TILE", "32"), "opencl")
    assert [d.line for d in result.diagnostics if d.construct == "warp call hoisted out of a branch"] == [14]
    k = _port(_WARP_ID_CG.replace("TILE", "32"), "k", opencl_backend)
    n, blocks = 1000, 8
    x = np.random.default_rng(2).integers(-50, 51, blocks * 128).astype(F32)  # exact sums
    for shape in (128, (16, 8), (32, 2, 2)):
        out = _dev(np.full(blocks, np.nan, F32), opencl_backend)
        k(blocks, shape, out, _dev(x, opencl_backend), np.int32(n))
        want = np.where(np.arange(blocks * 128) < n, x, 0).reshape(blocks, 128).sum(1)
        np.testing.assert_array_equal(out.numpy(), want, err_msg=str(shape))


def test_a_branch_on_a_smaller_tiles_meta_group_rank_stays_refused():
    """A 16-thread tile's meta_group_rank differs between the two halves of a warp."""
    result = translate(_WARP_ID_CG.replace("TILE", "16"), "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(14, "cg::reduce")]
    assert ("the condition on line 13 ((warp.meta_group_rank() == 0)) can differ between the lanes "
            "of one warp") in str(result.errors[0])


def _real(name: str, kernel_name: str, backend):
    file = REAL / name
    return _port(file.read_text(), kernel_name, backend, file.name)


def test_llmc_adamw_kernels_with_a_lerp_helper_and_a_long_count_match_numpy(opencl_backend):
    n, lr, b1, b2, eps, wd, t = 1000, 1e-3, 0.9, 0.999, 1e-8, 0.01, 10  # n: a partial last block
    rng = np.random.default_rng(5)
    p0, g, m0 = (rng.standard_normal(n).astype(F32) for _ in range(3))
    v0 = rng.uniform(0, 1, n).astype(F32)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    m = b1 * m0.astype(np.float64) + (1 - b1) * g
    v = b2 * v0.astype(np.float64) + (1 - b2) * g.astype(np.float64) ** 2
    p = p0 - lr * (m / c1 / (np.sqrt(v / c2) + eps) + wd * p0)
    for name in ("adamw_kernel1", "adamw_kernel2"):
        k = _real("llmc_adamw_kernel2.cu", name, opencl_backend)
        dp, dm, dv = (_dev(a, opencl_backend) for a in (p0, m0, v0))
        k(-(-n // 256), 256, dp, _dev(g, opencl_backend), dm, dv, np.int64(n), *map(F32, (lr, b1, b2, c1, c2, eps, wd)))
        np.testing.assert_allclose(dm.numpy(), m, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(dv.numpy(), v, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(dp.numpy(), p, rtol=1e-5, atol=1e-6, err_msg=name)


def test_llmc_crossentropy_forward_kernel1_matches_numpy(opencl_backend):
    B, T, V = 3, 7, 50
    rng = np.random.default_rng(6)
    probs = rng.uniform(0.01, 1, (B, T, V)).astype(F32)
    targets = rng.integers(0, V, (B, T)).astype(np.int32)
    losses = _dev(np.zeros((B, T), F32), opencl_backend)
    _real("llmc_crossentropy_forward_kernel1.cu", "crossentropy_forward_kernel1", opencl_backend)(
        1, 32, losses, _dev(probs, opencl_backend), _dev(targets, opencl_backend), *map(np.int32, (B, T, V)))
    want = -np.log(np.take_along_axis(probs.astype(np.float64), targets[..., None], 2)[..., 0])
    np.testing.assert_allclose(losses.numpy(), want, rtol=1e-6, atol=1e-7)


def test_llmc_layernorm_in_three_kernels_with_dynamic_shared_memory_matches_numpy(opencl_backend):
    N, C, block = 6, 200, 64
    rng = np.random.default_rng(7)
    x, w, b = (rng.standard_normal(s).astype(F32) for s in ((N, C), C, C))
    dx = _dev(x, opencl_backend)
    mean, rstd = _dev(np.zeros(N, F32), opencl_backend), _dev(np.zeros(N, F32), opencl_backend)
    out = _dev(np.zeros((N, C), F32), opencl_backend)
    name = "llmc_layernorm_forward_kernel2.cu"
    _real(name, "mean_kernel", opencl_backend)(N, block, mean, dx, np.int32(N), np.int32(C), np.int32(block),
                                               shared_mem=block * 4)
    _real(name, "rstd_kernel", opencl_backend)(N, block, rstd, dx, mean, np.int32(N), np.int32(C),
                                               np.int32(block), shared_mem=block * 4)
    _real(name, "normalization_kernel", opencl_backend)(N * C // 100, 100, out, dx, mean, rstd,
                                                        _dev(w, opencl_backend), _dev(b, opencl_backend),
                                                        np.int32(1), np.int32(N), np.int32(C))
    x64 = x.astype(np.float64)
    m, r = x64.mean(1), 1 / np.sqrt(x64.var(1) + 1e-5)
    np.testing.assert_allclose(mean.numpy(), m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd.numpy(), r, rtol=1e-5)
    np.testing.assert_allclose(out.numpy(), (x64 - m[:, None]) * r[:, None] * w + b, rtol=1e-4, atol=1e-5)


def test_llmc_softmax_kernel3_one_warp_per_row_matches_numpy(opencl_backend):
    N, C = 4, 100
    x = np.random.default_rng(8).standard_normal((N, C)).astype(F32) * 3
    out = _dev(np.zeros((N, C), F32), opencl_backend)
    k = _real("llmc_softmax_forward_kernel3.cu", "softmax_forward_kernel3", opencl_backend)
    k(N, 32, out, _dev(x, opencl_backend), np.int32(N), np.int32(C), shared_mem=4)  # "block size of 32"
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=2e-5, atol=1e-7)


def test_llmc_permute_kernel_matches_numpy(opencl_backend):
    d = (2, 3, 4, 5)
    x = np.arange(np.prod(d), dtype=F32).reshape(d)
    out = _dev(np.zeros(x.size, F32), opencl_backend)
    _real("llmc_permute_kernel.cu", "permute_kernel", opencl_backend)(
        -(-x.size // 64), 64, _dev(x, opencl_backend), out, *map(np.int32, d))
    np.testing.assert_array_equal(out.numpy(), x.transpose(3, 2, 0, 1).ravel())


def test_llmc_matmul_kernel4_float4_helpers_on_global_and_shared_match_numpy(opencl_backend):
    """ld_vec/st_vec reinterpret float pointers as float4 into global and shared memory (one
    copy per address space); 8 x 8 outputs per thread of a 16 x 16 block; then add_bias."""
    BT, C, OC = 256, 64, 128
    rng = np.random.default_rng(9)
    inp = rng.integers(-4, 5, (BT, C)).astype(F32)  # small integers: every sum exact
    w = rng.integers(-4, 5, (OC, C)).astype(F32)
    bias = rng.integers(-4, 5, OC).astype(F32)
    out = _dev(np.full((BT, OC), np.nan, F32), opencl_backend)
    k = _real("llmc_matmul_forward_kernel4.cu", "matmul_forward_kernel4", opencl_backend)
    k((BT // 128, OC // 128), (16, 16), out, _dev(inp, opencl_backend), _dev(w, opencl_backend),
      _dev(bias, opencl_backend), np.int32(C), np.int32(OC))
    np.testing.assert_array_equal(out.numpy(), inp @ w.T + bias)
    _real("llmc_matmul_forward_kernel4.cu", "add_bias", opencl_backend)(
        3, 64, out, _dev(bias, opencl_backend), np.int32(1), np.int32(BT), np.int32(OC))
    np.testing.assert_array_equal(out.numpy(), inp @ w.T + 2 * bias)


def test_cuda_samples_scalar_prod_with_cg_sync_and_mul24_matches_numpy(opencl_backend):
    vectors, elements = 5, 3000  # more elements than accumulators: each sums several
    rng = np.random.default_rng(10)
    a, b = (rng.integers(-8, 9, (vectors, elements)).astype(F32) for _ in range(2))
    c = _dev(np.zeros(vectors, F32), opencl_backend)
    k = _real("cudasamples_scalarProd_kernel.cu", "scalarProdGPU", opencl_backend)
    k(3, 256, c, _dev(a, opencl_backend), _dev(b, opencl_backend), np.int32(vectors), np.int32(elements))
    np.testing.assert_array_equal(c.numpy(), (a * b).sum(1))


@pytest.mark.parametrize("name", ["copy", "copySharedMem", "transposeNaive", "transposeCoalesced",
                                  "transposeNoBankConflicts"])
def test_cuda_samples_transpose_kernels_match_numpy_and_host_code_is_left_out_by_line(opencl_backend, name):
    """The sample's host includes (helper_cuda.h, helper_image.h, helper_string.h) and host
    variables (``const char *sSDKsample``, a pointer to const data, is one) are left out, each
    with a warning naming its line; the 32 x 32 tiles moved by 32 x 16 blocks compute numpy's."""
    file = REAL / "cudasamples_transpose.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert [(d.line, d.severity) for d in result.diagnostics] == [
        (21, "warning"), (22, "warning"), (23, "warning"), (25, "warning"), (36, "warning"),
        (37, "warning"), (38, "warning"), (44, "warning")]
    assert [d.construct for d in result.diagnostics][3:] == ["host variable"] * 5
    # multiples of the tile, as the sample requires; copySharedMem's guards also assume a square
    w, h = (96, 96) if name == "copySharedMem" else (96, 64)
    x = np.arange(w * h, dtype=F32).reshape(h, w)
    out = _dev(np.full(w * h, np.nan, F32), opencl_backend)
    k = kernel(result.text, name, backend=opencl_backend, options=result.options)
    k((w // 32, h // 32), (32, 16), out, _dev(x, opencl_backend), np.int32(w), np.int32(h))
    want = x.ravel() if name.startswith("copy") else x.T.ravel()
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("name, refused", [
    # SharedMemory<T> (a class template with conversion operators), its double specialisation,
    # warpReduceSum<T>, the __CUDA_ARCH__ test around __reduce_add_sync, reduce0..reduce6
    ("cudasamples_reduction_kernel.cu", [(19, "template"), (36, "template"), (51, "template"),
                                         (59, "__CUDA_ARCH__"), (62, "template"), (80, "template"),
                                         (112, "template"), (145, "template"), (177, "template"),
                                         (224, "template"), (281, "template")]),
    ("llmc_global_norm_kernel1.cu", [(4, "template")]),
])
def test_templates_launched_only_from_host_code_are_refused_on_their_lines(name, refused):
    file = REAL / name
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert result.text is None
    assert [(d.line, d.construct) for d in result.errors] == refused
    assert "names no instantiation of this one" in str(result.errors[-1])


def test_flash_attention_minimal_forward_matches_numpy_and_leaves_the_torch_host_code_out(opencl_backend):
    file = REAL / "flashattnmin_forward_kernel.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert [(d.line, d.construct) for d in result.diagnostics] == [
        (4, "#include <torch/types.h>"), (87, "host function forward")]
    k = kernel(result.text, "forward_kernel", backend=opencl_backend, options=result.options)
    B, nh, N, d, Bc, Br = 2, 2, 64, 16, 32, 32  # as the host code launches it: Bc threads
    rng = np.random.default_rng(11)
    q, kk, v = (rng.standard_normal((B, nh, N, d)).astype(F32) for _ in range(3))
    scale = 1 / np.sqrt(d)
    l = _dev(np.zeros((B, nh, N), F32), opencl_backend)
    m = _dev(np.full((B, nh, N), -np.inf, F32), opencl_backend)
    o = _dev(np.zeros((B, nh, N, d), F32), opencl_backend)
    k((B, nh), Bc, *(_dev(a, opencl_backend) for a in (q, kk, v)), *map(np.int32, (N, d, N // Bc, N // Br, Bc, Br)),
      F32(scale), l, m, o, shared_mem=(3 * Bc * d + Bc * Br) * 4)
    s = np.einsum("bhnd,bhmd->bhnm", q.astype(np.float64), kk) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("bhnm,bhmd->bhnd", p / p.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-4, atol=1e-5)



def test_declarations_before_a_warp_reduction_in_its_branch_move_with_it(opencl_backend):
    """``if (warp.meta_group_rank() == 0) { float w = lane < nwarps ? part[lane] : 0.0f;
    w = cg::reduce(warp, w, ...); ... }`` (llm.c's global_norm kernel1 writes its second step
    so): the declaration reads only the lane's own slot of a 32-element __shared__ array, so it
    moves before the if with the reduction, and every thread computes both in bounds."""
    src = _WARP_ID_CG.replace("TILE", "32").replace(
        "    float w = warp.thread_rank() < warp.meta_group_size() ? part[warp.thread_rank()] : 0.0f;\n"
        "    if (warp.meta_group_rank() == 0) {\n",
        "    if (warp.meta_group_rank() == 0) {\n"
        "        float w = warp.thread_rank() < warp.meta_group_size() ? part[warp.thread_rank()] : 0.0f;\n")
    result = translate(src, "opencl")
    assert [(d.line, "line 13" in d.why) for d in result.diagnostics
            if d.construct == "warp call hoisted out of a branch"] == [(14, True)]
    k = _port(src, "k", opencl_backend)
    n, blocks = 1000, 8
    x = np.random.default_rng(3).integers(-50, 51, blocks * 128).astype(F32)
    for shape in (128, (16, 8)):
        out = _dev(np.full(blocks, np.nan, F32), opencl_backend)
        k(blocks, shape, out, _dev(x, opencl_backend), np.int32(n))
        want = np.where(np.arange(blocks * 128) < n, x, 0).reshape(blocks, 128).sum(1)
        np.testing.assert_array_equal(out.numpy(), want, err_msg=str(shape))
    # a slot no lane bounds (part[n]) may be out of bounds for the threads the if excludes
    bad = src.replace("part[warp.thread_rank()] : 0.0f;\n        w = cg", "part[n] : 0.0f;\n        w = cg")
    errors = translate(bad, "opencl").errors
    assert [e.line for e in errors] == [14] and "the value of w reads or writes memory" in str(errors[0])


def test_cuda_samples_simple_cooperative_groups_is_refused_naming_each_construct():
    """``using namespace cooperative_groups;`` makes only cooperative_groups' own names
    unqualified: printf stays printf, and the file's sumReduction, called with a group as a
    value, is refused for that, not taken for a cooperative-groups function."""
    file = REAL / "cudasamples_simpleCooperativeGroups.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert [(d.line, d.construct) for d in result.errors] == [
        (111, "cooperative groups (threadBlockGroup)"), (115, "printf"), (120, "printf"),
        (140, "cooperative groups (tiledPartition16)"), (144, "printf")]
    assert [(d.line, d.construct) for d in result.diagnostics if d.severity == "warning"] == [
        (45, "#include <stdio.h>"), (155, "host function main")]


def test_llmc_matmul_backward_bias_kernel2_bf16_with_an_early_return_matches_numpy(opencl_backend):
    """One warp per output channel over bfloat16 memory, ``if (idx >= OC) return;`` before
    cg::reduce: channels past OC return whole warps. Small integers keep every sum exact in
    bfloat16, whose bits are float32's upper half."""
    B, T, OC = 2, 3, 6  # 4 warps per 128-thread block: the second block's last 2 warps return
    rng = np.random.default_rng(14)
    dout = rng.integers(-8, 9, (B, T, OC)).astype(F32)
    dbias = rng.integers(-8, 9, 8).astype(F32)

    def bf16(a):
        return (a.view(np.uint32) >> 16).astype(np.uint16)

    d = _dev(bf16(dbias), opencl_backend)
    _real("llmc_matmul_backward_bias_kernel2.cu", "matmul_backward_bias_kernel2", opencl_backend)(
        2, 128, d, _dev(bf16(dout), opencl_backend), np.int32(B), np.int32(T), np.int32(OC))
    want = dbias.copy()
    want[:OC] += dout.reshape(-1, OC).sum(0)
    np.testing.assert_array_equal(d.numpy(), bf16(want))  # the last two channels untouched


def test_cuda_samples_scan_with_thread_block_parameters_matches_numpy(opencl_backend):
    """Device functions taking ``cg::thread_block cta`` (the block itself: the parameter and
    the argument are dropped, ``cg::sync(cta)`` is the barrier) and ``volatile uint*`` shared
    memory; the sample's three-kernel exclusive scan of a large array."""
    file = REAL / "cudasamples_scan.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    assert "cg::thread_block" not in result.text

    def k(name):
        return kernel(result.text, name, backend=opencl_backend, options=result.options)

    rng = np.random.default_rng(15)
    short = rng.integers(0, 1000, 2048).astype(np.uint32)  # two arrays of 1024, one per block
    dst = _dev(np.zeros(2048, np.uint32), opencl_backend)
    k("scanExclusiveShared")(2, 256, dst, _dev(short, opencl_backend), np.uint32(1024))
    seg = short.reshape(2, 1024)
    np.testing.assert_array_equal(dst.numpy(), (np.cumsum(seg, 1, dtype=np.uint32) - seg).ravel())
    n = 8192  # the large path: bottom-level scans, a scan of their tops, the uniform update
    x = rng.integers(0, 1000, n).astype(np.uint32)
    src, dst, buf = _dev(x, opencl_backend), _dev(np.zeros(n, np.uint32), opencl_backend), \
        _dev(np.zeros(8, np.uint32), opencl_backend)
    k("scanExclusiveShared")(n // 1024, 256, dst, src, np.uint32(1024))
    k("scanExclusiveShared2")(1, 256, buf, dst, src, np.uint32(n // 1024), np.uint32(n // 1024))
    k("uniformUpdate")(n // 1024, 256, dst, buf)
    np.testing.assert_array_equal(dst.numpy(), np.cumsum(x, dtype=np.uint32) - x)


def test_cuda_samples_matrix_mul_instantiated_by_its_host_launches_matches_numpy(opencl_backend):
    """The whole sample: ``MatrixMulCUDA<16>`` and ``<32>``, instantiated by the host code's
    launches (left out, each host function and host header with a warning on its line), the
    tiles declared inside the loop over sub-matrices hoisted to the kernel's scope."""
    file = REAL / "cudasamples_matrixMul.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert result.ok
    assert [(d.line, d.construct) for d in result.diagnostics if d.construct.startswith("host function")] == [
        (131, "host function ConstantInit"), (141, "host function MatrixMultiply"), (290, "host function main")]
    rng = np.random.default_rng(16)
    for bs in (16, 32):
        hA, wA, wB = 2 * bs, 3 * bs, 2 * bs  # multiples of the block, as the sample requires
        a = rng.integers(-4, 5, (hA, wA)).astype(F32)
        b = rng.integers(-4, 5, (wA, wB)).astype(F32)
        c = _dev(np.full((hA, wB), np.nan, F32), opencl_backend)
        k = kernel(result.text, f"MatrixMulCUDA_{bs}", backend=opencl_backend, options=result.options)
        k((wB // bs, hA // bs), (bs, bs), c, _dev(a, opencl_backend), _dev(b, opencl_backend),
          np.int32(wA), np.int32(wB))
        np.testing.assert_array_equal(c.numpy(), a @ b, err_msg=str(bs))


def test_cuda_samples_black_scholes_with_reference_outputs_matches_numpy(opencl_backend):
    """``__device__ void BlackScholesBodyGPU(float &CallResult, float &PutResult, ...)``
    (references to the caller's scalars), fast intrinsics, ``__launch_bounds__(128)`` before
    ``__global__`` and MSVC's ``__restrict``, on float2 pairs of options."""
    opt_n, r, v = 1000, 0.02, 0.30
    rng = np.random.default_rng(17)
    s, x, t = (rng.uniform(lo, hi, opt_n).astype(F32) for lo, hi in ((5, 30), (1, 100), (0.25, 10)))
    call, put = _dev(np.zeros(opt_n, F32), opencl_backend), _dev(np.zeros(opt_n, F32), opencl_backend)
    k = _real("cudasamples_BlackScholes_kernel.cu", "BlackScholesGPU", opencl_backend)
    k(-(-opt_n // 2 // 128), 128, call, put, *(_dev(a, opencl_backend) for a in (s, x, t)),
      F32(r), F32(v), np.int32(opt_n))

    def cnd(d):  # the sample's polynomial approximation, in float64
        k_ = 1 / (1 + 0.2316419 * np.abs(d))
        c = 0.39894228040143267793994605993438 * np.exp(-0.5 * d * d) * (k_ * (0.31938153 + k_ * (
            -0.356563782 + k_ * (1.781477937 + k_ * (-1.821255978 + k_ * 1.330274429)))))
        return np.where(d > 0, 1 - c, c)

    s64, x64, t64 = (a.astype(np.float64) for a in (s, x, t))
    d1 = (np.log(s64 / x64) + (r + 0.5 * v * v) * t64) / (v * np.sqrt(t64))
    d2 = d1 - v * np.sqrt(t64)
    e = np.exp(-r * t64)
    np.testing.assert_allclose(call.numpy(), s64 * cnd(d1) - x64 * e * cnd(d2), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(put.numpy(), x64 * e * (1 - cnd(d2)) - s64 * (1 - cnd(d1)), rtol=1e-4, atol=1e-4)


def test_cuda_samples_fast_walsh_transform_both_kernels_match_numpy(opencl_backend):
    """The sample's batched Walsh-Hadamard transform for 2**13 points: one radix-4 pass in
    global memory (fwtBatch2Kernel), then four 2**11-point transforms in dynamic shared memory
    (fwtBatch1Kernel), as its host code launches them; then modulateKernel."""
    file = REAL / "cudasamples_fastWalshTransform_kernel.cu"
    result = translate(file.read_text(), "opencl", filename=file.name)
    assert [(d.line, d.construct) for d in result.diagnostics] == [
        (156, "host function fwtBatchGPU"), (187, "host function modulateGPU")]

    def k(name):
        return kernel(result.text, name, backend=opencl_backend, options=result.options)

    log2n = 13
    x = np.random.default_rng(18).integers(-8, 9, 1 << log2n).astype(F32)  # exact sums
    d = _dev(x, opencl_backend)
    k("fwtBatch2Kernel")(((1 << log2n) // 1024, 1), 256, d, d, np.int32((1 << log2n) // 4))
    k("fwtBatch1Kernel")(4, (1 << 11) // 4, d, d, np.int32(11), shared_mem=(1 << 11) * 4)
    want = x.astype(np.float64).copy()
    h = 1
    while h < want.size:  # the transform in natural (Hadamard) order
        w = want.reshape(-1, 2, h)
        want = np.stack([w[:, 0] + w[:, 1], w[:, 0] - w[:, 1]], 1).ravel()
        h *= 2
    np.testing.assert_array_equal(d.numpy(), want)
    b = np.arange(1 << log2n, dtype=F32)
    k("modulateKernel")(8, 256, d, _dev(b, opencl_backend), np.int32(1 << log2n))
    np.testing.assert_allclose(d.numpy(), want * b / (1 << log2n), rtol=1e-6)


@pytest.mark.parametrize("length, direction", [(1024, 1), (256, 0)])
def test_cuda_samples_bitonic_sort_with_a_reference_comparator_on_shared_memory(opencl_backend, length, direction):
    """sortingNetworks' ``Comparator(uint &keyA, uint &valA, uint &keyB, uint &valB, uint dir)``
    called with __shared__ elements: pointers into local memory, each use ``(*keyA)``."""
    batch = 1024 // length * 2  # two blocks of SHARED_SIZE_LIMIT keys, in arrays of `length`
    rng = np.random.default_rng(19)
    keys = np.concatenate([rng.permutation(length) for _ in range(batch)]).astype(np.uint32)
    vals = (keys * 7 + 3).astype(np.uint32)
    dk, dv = _dev(np.zeros_like(keys), opencl_backend), _dev(np.zeros_like(vals), opencl_backend)
    _real("cudasamples_bitonicSort.cu", "bitonicSortShared", opencl_backend)(
        2, 512, dk, dv, _dev(keys, opencl_backend), _dev(vals, opencl_backend), np.uint32(length),
        np.uint32(direction))
    want = np.sort(keys.reshape(batch, length), 1)
    want = want if direction else want[:, ::-1]
    np.testing.assert_array_equal(dk.numpy().reshape(batch, length), want)
    np.testing.assert_array_equal(dv.numpy(), dk.numpy() * 7 + 3)
