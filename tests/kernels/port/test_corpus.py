"""The porting corpus (tests/port_corpus/): realistic CUDA kernels written for this suite, each
translated by ``accel port --to opencl`` and run through ``accel.kernel`` on PoCL against a numpy
reference worked out here; the kernels with no faithful OpenCL 1.2 form (``refused_*.cu``) must
be refused with every offending use named on its line.

Sizes are small: the point is semantics (edge blocks, signedness, index widths), and the OpenCL
builds are cached on disk, so the suite stays fast.
"""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
pytest.importorskip("pyopencl", reason="the OpenCL runs need pyopencl ([opencl] extra)")

import accel  # noqa: E402
from accel.kernel import kernel  # noqa: E402
from accel.kernels.port import translate  # noqa: E402
from repo_paths import TESTS  # noqa: E402

CORPUS = TESTS / "port_corpus"
F32 = np.float32


@cache
def _translated(file: str):
    result = translate((CORPUS / file).read_text(), "opencl", filename=file)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    return result


class Runner:
    """Launches a corpus kernel: numpy arrays become device tensors (copied back after the
    launch), numpy scalars pass as they are."""

    def __init__(self, backend):
        self.backend = backend

    def __call__(self, file: str, name: str, grid, block, *args, shared_mem: int = 0) -> list:
        result = _translated(file)
        k = kernel(result.text, name, backend=self.backend, options=result.options)
        dev = [accel.asarray(np.ascontiguousarray(a), backend=self.backend)
               if isinstance(a, np.ndarray) else a for a in args]
        k(grid, block, *dev, shared_mem=shared_mem)
        return [d.numpy() if isinstance(a, np.ndarray) else None for a, d in zip(args, dev)]


@pytest.fixture(scope="module")
def run(opencl_backend):
    return Runner(opencl_backend)


def rng():
    return np.random.default_rng(2024)


def blocks(n: int, b: int) -> int:
    return (n + b - 1) // b


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- the kernels ---------------------------------------------------------------------------------
def case_vec_add_int64(run):
    n = 5000
    a, b = rng().standard_normal((2, n)).astype(F32)
    *_, c, _ = run("vec_add_int64.cu", "vec_add", 3, 128, a, b, np.zeros(n, F32), np.int64(n))
    np.testing.assert_array_equal(c, a + b)


def case_leaky_relu(run):
    x = rng().standard_normal(777).astype(F32)
    (y, *_) = run("leaky_relu.cu", "leaky_relu", blocks(777, 64), 64, x.copy(), F32(0.1), np.int32(777))
    np.testing.assert_array_equal(y, np.where(x > 0, x, x * F32(0.1)))


def case_gelu_tanh(run):
    x = (rng().standard_normal(500) * 3).astype(F32)
    _, y, _ = run("gelu_tanh.cu", "gelu_forward", 8, 64, x, np.zeros_like(x), np.int32(500))
    xd = x.astype(np.float64)
    close(y, 0.5 * xd * (1 + np.tanh(0.7978845608 * (xd + 0.044715 * xd**3))), 1e-5, 1e-6)


def case_silu_mul(run):
    g, u = rng().standard_normal((2, 300)).astype(F32)
    *_, out, _ = run("silu_mul.cu", "silu_mul", 5, 64, g, u, np.zeros(300, F32), np.int32(300))
    gd = g.astype(np.float64)
    close(out, gd / (1 + np.exp(-gd)) * u, 1e-5, 1e-6)


def case_sigmoid_fast(run):
    x = (rng().standard_normal(300) * 4).astype(F32)
    _, y, _ = run("sigmoid_fast.cu", "sigmoid_fast", 5, 64, x, np.zeros_like(x), np.int32(300))
    close(y, 1 / (1 + np.exp(-x.astype(np.float64))), 1e-5, 1e-6)


def case_block_sum(run):
    n = 1000
    x = rng().integers(-9, 9, n).astype(F32)
    nb = blocks(n, 256)
    _, part, _ = run("block_sum.cu", "block_sum", nb, 128, x, np.zeros(nb, F32), np.int32(n))
    np.testing.assert_array_equal(part, np.add.reduceat(x, np.arange(0, n, 256)))


def case_dot_atomic(run):
    a, b = rng().integers(-20, 20, (2, 3000)).astype(np.int32)
    *_, r, _ = run("dot_atomic.cu", "dot_i32", 4, 256, a, b, np.zeros(1, np.int32), np.int32(3000))
    assert r[0] == int(a.astype(np.int64) @ b)


def case_scan_hillis_steele(run):
    n = 600
    x = rng().integers(0, 5, n).astype(F32)
    _, y, _ = run("scan_hillis_steele.cu", "scan_block", blocks(n, 256), 256, x, np.zeros(n, F32), np.int32(n))
    want = np.concatenate([np.cumsum(x[s:s + 256]) for s in range(0, n, 256)])
    np.testing.assert_array_equal(y, want)


def case_scan_blelloch(run):
    n = 700
    x = rng().integers(0, 100, n).astype(np.int32)
    nb = blocks(n, 256)
    _, y, tot, _ = run("scan_blelloch.cu", "exclusive_scan", nb, 128, x, np.zeros(n, np.int32),
                       np.zeros(nb, np.int32), np.int32(n))
    chunks = [x[s:s + 256] for s in range(0, n, 256)]
    np.testing.assert_array_equal(y, np.concatenate([np.cumsum(c) - c for c in chunks]))
    np.testing.assert_array_equal(tot, [c.sum() for c in chunks])


def case_transpose_naive(run):
    a = rng().standard_normal((37, 50)).astype(F32)
    _, t, *_ = run("transpose_naive.cu", "transpose_naive", (blocks(50, 16), blocks(37, 8)), (16, 8),
                   a, np.zeros((50, 37), F32), np.int32(37), np.int32(50))
    np.testing.assert_array_equal(t, a.T)


def case_transpose_tile16(run):
    a = rng().integers(-1000, 1000, (45, 33)).astype(np.int32)
    _, t, *_ = run("transpose_tile16.cu", "transpose_tiled", (blocks(33, 16), blocks(45, 16)), (16, 16),
                   a, np.zeros((33, 45), np.int32), np.int32(45), np.int32(33))
    np.testing.assert_array_equal(t, a.T)


def case_gemm_naive(run):
    m, n, k = 20, 30, 17
    a = rng().integers(-4, 4, (m, k)).astype(F32)
    b = rng().integers(-4, 4, (k, n)).astype(F32)
    c = rng().integers(-4, 4, (m, n)).astype(F32)
    *_, out = run("gemm_naive.cu", "sgemm_naive", (blocks(m, 8), blocks(n, 8)), (8, 8), np.int32(m),
                  np.int32(n), np.int32(k), F32(2), a, b, F32(-1), c)
    np.testing.assert_array_equal(out, 2 * (a @ b) - c)


def case_gemm_tiled(run):
    m, n, k = 33, 21, 40
    a = rng().integers(-4, 4, (m, k)).astype(F32)
    b = rng().integers(-4, 4, (k, n)).astype(F32)
    _, _, c, *_ = run("gemm_tiled.cu", "gemm_tiled", (blocks(n, 16), blocks(m, 16)), (16, 16), a, b,
                      np.zeros((m, n), F32), np.int32(m), np.int32(n), np.int32(k))
    np.testing.assert_array_equal(c, a @ b)


def case_gemv_rows(run):
    a = rng().integers(-5, 5, (70, 19)).astype(F32)
    x = rng().integers(-5, 5, 19).astype(F32)
    _, _, y, *_ = run("gemv_rows.cu", "gemv", 2, 64, a, x, np.zeros(70, F32), np.int32(70), np.int32(19))
    np.testing.assert_array_equal(y, a @ x)


def case_softmax_block(run):
    x = (rng().standard_normal((6, 200)) * 3).astype(F32)
    _, y, _ = run("softmax_block.cu", "softmax_rows", 6, 64, x, np.zeros_like(x), np.int32(200),
                  shared_mem=64 * 4)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    close(y, e / e.sum(1, keepdims=True), 1e-5, 1e-7)


def case_layernorm(run):
    x = rng().standard_normal((5, 300)).astype(F32)
    g, b = rng().standard_normal((2, 300)).astype(F32)
    *_, y, _, _ = run("layernorm.cu", "layernorm", 5, 128, x, g, b, np.zeros_like(x), np.int32(300), F32(1e-5))
    xd = x.astype(np.float64)
    want = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * g + b
    close(y, want, 1e-4, 1e-5)


def case_rmsnorm(run):
    x = rng().standard_normal((4, 130)).astype(F32)
    w = rng().standard_normal(130).astype(F32)
    (out, *_) = run("rmsnorm.cu", "rmsnorm", 4, 64, np.zeros_like(x), x, w, np.int32(130), F32(1e-6))
    xd = x.astype(np.float64)
    close(out, xd / np.sqrt((xd**2).mean(1, keepdims=True) + 1e-6) * w, 1e-5, 1e-6)


def case_rope(run):
    tokens, heads, d = 5, 3, 16
    q = rng().standard_normal((tokens, heads, d)).astype(F32)
    (out, *_) = run("rope.cu", "rope", (tokens, heads), 8, q.copy(), np.int32(heads), np.int32(d),
                    F32(10000))
    pos = np.arange(tokens)[:, None, None]
    freq = 10000.0 ** (-2.0 * np.arange(d // 2) / d)
    ang = pos * freq
    a, b = q[..., 0::2].astype(np.float64), q[..., 1::2].astype(np.float64)
    want = np.empty_like(q, dtype=np.float64)
    want[..., 0::2] = a * np.cos(ang) - b * np.sin(ang)
    want[..., 1::2] = a * np.sin(ang) + b * np.cos(ang)
    close(out, want, 1e-4, 1e-5)


def case_scale_float4(run):
    x = rng().standard_normal(400).astype(F32)
    _, y, *_ = run("scale_float4.cu", "scale_bias_vec4", 2, 64, x, np.zeros_like(x), F32(1.5), F32(-2),
                   np.int32(100))
    close(y, 1.5 * x.astype(np.float64) - 2, 1e-6, 1e-7)  # a * x + b may be one fma (CUDA too)


def case_copy_float2_ldg(run):
    src = rng().standard_normal((6, 24)).astype(F32)  # stride 12 float2s, copy the first 10
    _, dst, *_ = run("copy_float2_ldg.cu", "copy_rows_f2", (1, 6), 32, src, np.zeros((6, 20), F32),
                     np.int32(6), np.int32(10), np.int32(12))
    np.testing.assert_array_equal(dst, src[:, :20])


def case_half_convert(run):
    x = rng().standard_normal(300).astype(np.float16)
    _, y, *_ = run("half_convert.cu", "half_scale_shift", 5, 64, x, np.zeros_like(x), F32(0.3), F32(1),
                   np.int32(300))
    np.testing.assert_array_equal(y, (x.astype(F32) * F32(0.3) + F32(1)).astype(np.float16))


def case_histogram_u32(run):
    keys = rng().integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    _, bins, _ = run("histogram_u32.cu", "histogram64", 4, 128, keys, np.zeros(64, np.uint32), np.int32(4000))
    np.testing.assert_array_equal(bins, np.bincount(keys >> 26, minlength=64))


def case_atomic_max_float_cas(run):
    x = rng().standard_normal(1000).astype(F32)
    _, r, _ = run("atomic_max_float_cas.cu", "max_reduce", 8, 128, x, np.full(1, -np.inf, F32), np.int32(1000))
    assert r[0] == x.max()


def case_atomic_add_float_cas(run):
    vals = rng().integers(-5, 5, 900).astype(F32)
    bins = rng().integers(0, 7, 900).astype(np.int32)
    *_, sums, _ = run("atomic_add_float_cas.cu", "bin_sums", 8, 128, vals, bins, np.zeros(7, F32), np.int32(900))
    np.testing.assert_array_equal(sums, np.bincount(bins, vals, 7).astype(F32))


def case_scatter_add_float(run):
    v = rng().integers(-5, 5, 800).astype(F32)  # small integers: every order sums exactly
    idx = rng().integers(0, 9, 800).astype(np.int32)
    *_, out, _ = run("scatter_add_float.cu", "scatter_add", 7, 128, v, idx, np.zeros(9, F32), np.int32(800))
    np.testing.assert_array_equal(out, np.bincount(idx, v, 9).astype(F32))


def case_hamming_popc(run):
    a, b = rng().integers(0, 2**32, (2, 200), dtype=np.uint64).astype(np.uint32)
    *_, score, norm, _ = run("hamming_popc.cu", "binary_similarity", 4, 64, a, b, np.zeros(200, np.int32),
                             np.zeros(200, F32), np.int32(200))
    dist = np.array([bin(int(v)).count("1") for v in a ^ b])
    np.testing.assert_array_equal(score, 32 - 2 * dist)
    np.testing.assert_array_equal(norm, ((32 - 2 * dist) / 32).astype(F32))


def case_bit_reverse_perm(run):
    x = rng().standard_normal(256).astype(F32)
    _, y, _ = run("bit_reverse_perm.cu", "bit_reverse_permute", 4, 64, x, np.zeros_like(x), np.int32(8))
    j = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)])
    want = np.empty_like(x)
    want[j] = x
    np.testing.assert_array_equal(y, want)


def case_log2_bucket_clz(run):
    s = rng().integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32) >> rng().integers(0, 32, 300).astype(np.uint32)
    s[:3] = [0, 1, 0xFFFFFFFF]
    _, b, _ = run("log2_bucket_clz.cu", "size_class", 5, 64, s, np.zeros(300, np.int32), np.int32(300))
    want = [-1 if v == 0 else (int(v).bit_length() - 1) // 2 for v in s]
    np.testing.assert_array_equal(b, want)


def case_ffs_lowest_set(run):
    occ = rng().integers(0, 2**32, 200, dtype=np.uint64).astype(np.uint32)
    occ[:2] = [0xFFFFFFFF, 0]
    _, slot, _ = run("ffs_lowest_set.cu", "lowest_free", 4, 64, occ, np.zeros(200, np.int32), np.int32(200))
    free = [int(~v & 0xFFFFFFFF) for v in occ]
    np.testing.assert_array_equal(slot, [(f & -f).bit_length() - 1 for f in free])


def _mix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def case_mulhi_hash(run):
    keys = rng().integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)
    _, slots, *_ = run("mulhi_hash.cu", "hash_slots", 5, 64, keys, np.zeros(300, np.uint32), np.uint32(1000),
                       np.int32(300))
    np.testing.assert_array_equal(slots, [(_mix32(int(k)) * 1000) >> 32 for k in keys])


def case_int64_offsets(run):
    img = rng().standard_normal((40, 50)).astype(F32)
    r = rng().integers(0, 40, 100).astype(np.int32)
    c = rng().integers(0, 50, 100).astype(np.int32)
    *_, out, _, _ = run("int64_offsets.cu", "gather_pitched", 2, 64, img, r, c, np.zeros(100, F32),
                        np.int64(50), np.int32(100))
    np.testing.assert_array_equal(out, img[r, c])


def case_template_axpy(run):
    x, y = rng().standard_normal((2, 130)).astype(F32)
    *_, yf, _ = run("template_axpy.cu", "axpy_float", 3, 64, F32(2), x, y.copy(), np.int32(130))
    close(yf, 2 * x.astype(np.float64) + y, 1e-6, 1e-7)  # possibly one fma, as nvcc contracts
    xi, yi = rng().integers(-99, 99, (2, 130)).astype(np.int32)
    *_, yo, _ = run("template_axpy.cu", "axpy_int", 3, 64, np.int32(-3), xi, yi.copy(), np.int32(130))
    np.testing.assert_array_equal(yo, -3 * xi + yi)


def case_template_block_reduce(run):
    x = rng().integers(-9, 9, 1000).astype(F32)
    _, part, _ = run("template_block_reduce.cu", "reduce_sum_256_float", 4, 256, x, np.zeros(4, F32),
                     np.int32(1000))
    np.testing.assert_array_equal(part, np.add.reduceat(x, np.arange(0, 1000, 256)))
    xi = rng().integers(-99, 99, 500).astype(np.int32)
    _, pi, _ = run("template_block_reduce.cu", "reduce_sum_128_int", 4, 128, xi, np.zeros(4, np.int32),
                   np.int32(500))
    np.testing.assert_array_equal(pi, np.add.reduceat(xi, np.arange(0, 500, 128)))


def case_template_device_fn(run):
    x = (rng().standard_normal(100) * 2).astype(F32)
    k = rng().integers(-30, 30, 100).astype(np.int32)
    _, xf, _, ki, _ = run("template_device_fn.cu", "clamp_both", 2, 64, x, np.zeros_like(x), k,
                          np.zeros_like(k), np.int32(100))
    np.testing.assert_array_equal(xf, np.clip(x, -1, 1))
    np.testing.assert_array_equal(ki, np.clip(k, -10, 10))


def case_macros_cublas_style(run):
    rows, cols = 40, 5
    a = rng().standard_normal((cols, rows)).astype(F32)  # column-major [rows, cols]
    s = rng().standard_normal(cols).astype(F32)
    per_col = 64
    (out, *_) = run("macros_cublas_style.cu", "scale_columns", blocks(per_col * cols, 64), 64, a.copy(), s,
                    np.int32(rows), np.int32(cols))
    np.testing.assert_array_equal(out, a * s[:, None])


def case_poly_constant(run):
    x = rng().standard_normal(200).astype(F32)
    _, y, _ = run("poly_constant.cu", "poly_eval", 4, 64, x, np.zeros_like(x), np.int32(200))
    c = np.array([0.5, -1.25, 0.75, 2.0, -0.125], F32)
    acc = np.full_like(x, c[4])
    for k in range(3, -1, -1):
        acc = acc * x + c[k]
    close(y, acc, 1e-6, 1e-6)


def case_conv1d_const(run):
    x = rng().standard_normal(300).astype(F32)
    _, y, _ = run("conv1d_const.cu", "blur1d", 5, 64, x, np.zeros_like(x), np.int32(300))
    close(y, np.convolve(x.astype(np.float64), [0.0625, 0.25, 0.375, 0.25, 0.0625], "same"), 1e-6, 1e-6)


def case_jacobi2d(run):
    u = rng().standard_normal((20, 30)).astype(F32)
    _, un, *_ = run("jacobi2d.cu", "jacobi_step", (blocks(30, 16), blocks(20, 8)), (16, 8), u, u.copy(),
                    np.int32(30), np.int32(20))
    want = u.copy()
    want[1:-1, 1:-1] = F32(0.25) * (u[1:-1, :-2] + u[1:-1, 2:] + u[:-2, 1:-1] + u[2:, 1:-1])
    close(un, want, 1e-6, 1e-6)


def case_row_sum_2d(run):
    m = rng().integers(-2**30, 2**30, (21, 70)).astype(np.int32)
    _, sums, *_ = run("row_sum_2d.cu", "row_sums", blocks(21, 8), (32, 8), m, np.zeros(21, np.int64),
                      np.int32(21), np.int32(70))
    np.testing.assert_array_equal(sums, m.astype(np.int64).sum(1))


def case_chunk_min_mixed(run):
    n = 1000  # 64 threads x 4 per block: the last block's chunk ends at n, not past it
    x = rng().integers(-9, 9, n).astype(F32)
    nb = blocks(n, 256)
    _, sums, _ = run("chunk_min_mixed.cu", "chunk_sums", nb, 64, x, np.zeros(nb, F32), np.int32(n))
    np.testing.assert_array_equal(sums, np.add.reduceat(x, np.arange(0, n, 256)))


def case_kernel_loop_macro(run):
    n = 3000
    top, bottom = rng().standard_normal((2, n)).astype(F32) * 4
    *_, diff, _, _ = run("kernel_loop_macro.cu", "relu_backward", 3, 128, top, bottom, np.zeros(n, F32),
                         F32(6), np.int32(n))
    np.testing.assert_array_equal(diff, np.where((bottom > 0) & (bottom < 6), top, 0))


def case_l1_distance_abs(run):
    a, b = rng().integers(-50, 50, (2, 30, 8)).astype(np.int32)
    _, _, dist, gap, *_ = run("l1_distance_abs.cu", "l1_rows", 1, 64, a, b, np.zeros(30, np.int32),
                              np.zeros(30, np.int32), np.int32(8), np.int32(30), np.int32(200))
    d = np.abs(a - b).sum(1)
    np.testing.assert_array_equal(dist, d)
    np.testing.assert_array_equal(gap, np.trunc((np.abs(d - 200) - 5) / 2).astype(np.int32))


def case_cross_entropy(run):
    z = (rng().standard_normal((50, 10)) * 3).astype(F32)
    t = rng().integers(0, 10, 50).astype(np.int32)
    *_, loss, _, _ = run("cross_entropy.cu", "cross_entropy", 1, 64, z, t, np.zeros(50, F32), np.int32(50),
                         np.int32(10))
    zd = z.astype(np.float64)
    m = zd.max(1)
    close(loss, np.log(np.exp(zd - m[:, None]).sum(1)) + m - zd[np.arange(50), t], 1e-5, 1e-5)


def case_adam_step(run):
    n = 200
    p, g = rng().standard_normal((2, n)).astype(F32)
    m, v = np.zeros(n, F32), np.zeros(n, F32)
    out = run("adam_step.cu", "adam_step", 4, 64, p.copy(), g, m, v, F32(1e-3), F32(0.9), F32(0.999),
              F32(1e-8), np.int32(1), np.int32(n))
    gd = g.astype(np.float64)
    mh, vh = 0.1 * gd / 0.1, 0.001 * gd * gd / 0.001
    close(out[0], p - 1e-3 * mh / (np.sqrt(vh) + 1e-8), 1e-5, 1e-6)


def case_bias_relu_2d(run):
    y = rng().standard_normal((13, 40)).astype(F32)
    b = rng().standard_normal(40).astype(F32)
    (out, *_) = run("bias_relu_2d.cu", "bias_relu", (blocks(40, 16), blocks(13, 4)), (16, 4), y.copy(), b,
                    np.int32(13), np.int32(40))
    np.testing.assert_array_equal(out, np.maximum(y + b, 0))


def case_embedding_gather(run):
    table = rng().standard_normal((50, 24)).astype(F32)
    ids = rng().integers(0, 50, 9).astype(np.int64)
    ids[0], ids[1] = -3, 50  # out of range: the padding row
    *_, out, _, _ = run("embedding_gather.cu", "embedding", 9, 16, ids, table, np.zeros((9, 24), F32),
                        np.int32(24), np.int64(50))
    np.testing.assert_array_equal(out, table[np.where((ids < 0) | (ids >= 50), 0, ids)])


def case_argmax_rows(run):
    x = rng().integers(0, 20, (7, 300)).astype(F32)  # many ties: the first index wins
    _, idx, _ = run("argmax_rows.cu", "argmax_rows", 7, 128, x, np.zeros(7, np.int32), np.int32(300))
    np.testing.assert_array_equal(idx, x.argmax(1))


def case_bitonic_sort_block(run):
    keys = rng().integers(-1000, 1000, (3, 256)).astype(np.int32)
    (out,) = run("bitonic_sort_block.cu", "bitonic_sort256", 3, 256, keys)
    np.testing.assert_array_equal(out, np.sort(keys, 1))


def case_compact_atomic(run):
    x = rng().standard_normal(500).astype(F32)
    _, out, count, _ = run("compact_atomic.cu", "compact_positive", 8, 64, x, np.zeros(500, F32),
                           np.zeros(1, np.int32), np.int32(500))
    kept = np.sort(x[x > 0])
    assert count[0] == kept.size
    np.testing.assert_array_equal(np.sort(out[:count[0]]), kept)


def case_count_nonzero(run):
    x = rng().standard_normal(600).astype(F32)
    x[rng().random(600) < 0.6] = 0
    x[-1] = 0
    _, nnz, last, _ = run("count_nonzero.cu", "nnz_stats", 10, 64, x, np.zeros(1, np.uint32),
                          np.full(1, -1, np.int32), np.int32(600))
    assert (nnz[0], last[0]) == (np.count_nonzero(x), np.flatnonzero(x).max())


def case_quantize_int8(run):
    x = (rng().standard_normal(300) * 2).astype(F32)
    x[:4] = [0.25, 0.75, 100, -100]  # ties to even, saturation
    _, q, *_ = run("quantize_int8.cu", "quantize_i8", 5, 64, x, np.zeros(300, np.int8), F32(20), np.int32(300))
    np.testing.assert_array_equal(q, np.clip(np.rint(x * F32(20)), -127, 127).astype(np.int8))


def case_dequantize_int8(run):
    q = rng().integers(-128, 128, (6, 50)).astype(np.int8)
    s = rng().random(6).astype(F32)
    *_, y, _, _ = run("dequantize_int8.cu", "dequant_rows", 5, 64, q, s, np.zeros((6, 50), F32), np.int32(50),
                      np.int32(300))
    np.testing.assert_array_equal(y, q.astype(F32) * s[:, None])


def case_pairwise_dist(run):
    a = rng().standard_normal((10, 3)).astype(F32)
    b = rng().standard_normal((17, 3)).astype(F32)
    *_, d, _, _ = run("pairwise_dist.cu", "pairwise_dist", (blocks(17, 16), blocks(10, 4)), (16, 4), a, b,
                      np.zeros((10, 17), F32), np.int32(10), np.int32(17))
    close(d, np.sqrt(((a[:, None, :].astype(np.float64) - b[None]) ** 2).sum(-1)), 1e-5, 1e-6)


def case_mul24_index(run):
    x = rng().standard_normal(300).astype(F32)
    _, y, _ = run("mul24_index.cu", "mul24_copy", 5, 64, x, np.zeros_like(x), np.int32(300))
    np.testing.assert_array_equal(y, x[(np.arange(300) * 3) % 300])


def case_morton_encode(run):
    xs, ys = rng().integers(0, 2**16, (2, 200)).astype(np.uint16)

    def spread(v: int) -> int:
        return sum(((v >> b) & 1) << (2 * b) for b in range(16))
    *_, codes, _ = run("morton_encode.cu", "morton2d", 4, 64, xs, ys, np.zeros(200, np.uint32), np.int32(200))
    np.testing.assert_array_equal(codes, [spread(int(x)) | (spread(int(y)) << 1) for x, y in zip(xs, ys)])


def case_warp_sum_shfl(run):
    # 200 of 256 threads have data: the shuffles run in every warp, out-of-range threads add 0
    x = rng().standard_normal(256).astype(F32)
    _, out, _ = run("warp_sum_shfl.cu", "sum_all", 2, 128, x, np.zeros(1, F32), np.int32(200))
    close(out, [x[:200].astype(np.float64).sum()], 1e-5, 1e-5)


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}

#: each use of the wmma API in refused_wmma.cu: the declarations, calls and fragments
_WMMA_USES = [(5, "wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major>"),
              (6, "wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major>"),
              (7, "wmma::fragment<wmma::accumulator, 16, 16, 16, float>"),
              (8, "wmma::fill_fragment"), (8, "fc"), (9, "wmma::load_matrix_sync"), (9, "fa"),
              (10, "wmma::load_matrix_sync"), (10, "fb"), (11, "wmma::mma_sync"), (11, "fc"),
              (11, "fa"), (11, "fb"), (11, "fc"), (12, "wmma::store_matrix_sync"), (12, "fc"),
              (12, "wmma::mem_row_major")]

#: the kernels with no faithful OpenCL 1.2 form: every error, (line, construct), in order
REFUSED = {
    "refused_ballot_compact.cu": [(6, "__ballot_sync"), (7, "__lanemask_lt")],
    "refused_dynamic_parallelism.cu": [(7, "dynamic parallelism")],
    "refused_grid_sync.cu": [
        (5, "cooperative groups (cg::grid_group)"), (5, "cooperative groups (cg::this_grid)"),
        (8, "cooperative groups (grid.sync)")],
    "refused_half2_math.cu": [(6, "__hadd2")],  # half2 pointers are memory, kept as bits
    "refused_inline_ptx.cu": [(4, "inline PTX")],
    "refused_printf.cu": [(5, "printf")],
    "refused_texture.cu": [(2, "cudaTextureObject_t"), (4, "tex1Dfetch")],
    "refused_wmma.cu": [(2, "#include <mma.h>"), (3, "tensor-core intrinsics (using namespace nvcuda)"),
                        *[(line, f"tensor-core intrinsics ({use})") for line, use in _WMMA_USES]],
}


def test_the_corpus_is_complete():
    """Every kernel file has a numpy check or an expected refusal, and there are at least 50."""
    files = {p.name for p in CORPUS.glob("*.cu")}
    checked = {f for f in files if f.removesuffix(".cu") in CASES}
    assert files == checked | set(REFUSED), sorted(files - checked - set(REFUSED))
    assert len(files) >= 50


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_kernel_ports_and_matches_numpy(run, name):
    CASES[name](run)


@pytest.mark.parametrize("file", sorted(REFUSED))
def test_corpus_kernel_is_refused_at_each_use(file):
    result = translate((CORPUS / file).read_text(), "opencl", filename=file)
    assert result.text is None
    assert [(d.line, d.construct) for d in result.errors] == REFUSED[file]
    assert all(str(d).startswith(f"{file}:{d.line}: ") for d in result.errors)


def test_the_guide_quotes_the_corpus_statistics():
    """docs/porting.md quotes ``accel port --stats`` on this corpus: it must be today's figure."""
    from accel.kernels.port.stats import format_text, sources, tally

    entries = [(p, p.read_text(), translate(p.read_text(), "opencl", filename=str(p)))
               for p in sources([CORPUS])]
    first = format_text(tally(entries, "opencl")).splitlines()[0]
    assert first in (CORPUS.parent.parent / "docs" / "porting.md").read_text()
