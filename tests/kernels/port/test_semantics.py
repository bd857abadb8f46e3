"""Translations that must compute what CUDA computes, one test per class of difference between
CUDA's and OpenCL's builtins (result types, signedness, overload resolution, reinterpretation),
run for real on PoCL against numpy values worked out here with CUDA's rules."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
pytest.importorskip("pyopencl", reason="the OpenCL runs need pyopencl ([opencl] extra)")

import accel  # noqa: E402
from accel.kernel import kernel  # noqa: E402
from accel.kernels.port import translate  # noqa: E402


@pytest.fixture(scope="module")
def backend(opencl_backend):
    return opencl_backend


@pytest.fixture(params=["opencl", "dialect"])
def to(request):
    return request.param


def _run(backend, to: str, src: str, *arrays: np.ndarray, n: int) -> list[np.ndarray]:
    """Translate ``src`` (kernel ``k``), launch it over ``n`` work-items with ``arrays`` (all
    device buffers) followed by ``int n``, and return the arrays as the kernel left them."""
    result = translate(src, to, filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    dev = [accel.asarray(a, backend=backend) for a in arrays]
    kernel(result.text, "k", backend=backend, options=result.options)((n + 63) // 64, 64, *dev,
                                                                      np.int32(n))
    return [d.numpy() for d in dev]


RNG = np.random.default_rng(24)


def test_popc_and_clz_results_are_signed_int(backend, to):
    """OpenCL's popcount/clz return the argument's (unsigned) type; CUDA's return int, so
    ``32 - 2 * __popc(x)`` and ``(31 - __clz(x)) / 2`` go negative instead of wrapping."""
    src = """__global__ void k(const unsigned* a, const unsigned* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[3 * i] = 32 - 2 * __popc(a[i] ^ b[i]);
    out[3 * i + 1] = (15 - __clz(a[i])) / 2;
    out[3 * i + 2] = (__popcll((unsigned long long)a[i] << 32) - 40) / 3;
  }
}"""
    n = 100
    a = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[:4] = [0, 1, 0xFFFFFFFF, 0x80000000]
    b = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    (_, _, out) = _run(backend, to, src, a, b, np.zeros(3 * n, np.int32), n=n)
    pop = np.array([bin(int(v)).count("1") for v in a ^ b])
    popa = np.array([bin(int(v)).count("1") for v in a])
    clz = np.array([32 - int(v).bit_length() for v in a])
    expect = np.stack([32 - 2 * pop, np.trunc((15 - clz) / 2), np.trunc((popa - 40) / 3)], axis=1)
    np.testing.assert_array_equal(out.reshape(n, 3), expect.astype(np.int32))


def test_mixed_type_min_max_builds_and_picks_cuda_overload(backend, to):
    """``min(uint, int)`` is ambiguous in OpenCL C; CUDA computes it unsigned (so -1 is the
    largest value), and float min/max ignore NaN like fminf/fmaxf."""
    src = """#define CAP 7
__global__ void k(const int* s, const float* f, unsigned* u, float* g, int n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    u[2 * i] = min(blockIdx.x * blockDim.x + blockDim.x, s[i]);
    u[2 * i + 1] = max(i, CAP);
    g[i] = max(f[i], 0) + min(f[i], 1.0f);
  }
}"""
    n = 70
    s = RNG.integers(-5, 200, n).astype(np.int32)
    f = RNG.standard_normal(n).astype(np.float32)
    f[:2] = np.nan
    _, _, u, g = _run(backend, to, src, s, f, np.zeros(2 * n, np.uint32), np.zeros(n, np.float32),
                      n=n)
    i = np.arange(n, dtype=np.uint32)
    block_end = (i // 64 + 1) * 64
    np.testing.assert_array_equal(u[0::2], np.minimum(block_end, s.astype(np.uint32)))
    np.testing.assert_array_equal(u[1::2], np.maximum(i, 7))
    np.testing.assert_array_equal(g, np.fmax(f, 0) + np.fmin(f, 1))


def test_integer_abs_stays_signed_and_float_abs_is_fabs(backend, to):
    src = """__global__ void k(const int* a, const float* f, int* out, float* g, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = (abs(a[i]) - 10) / 4 + (int)(labs((long long)a[i] * 3) > 30);
    g[i] = abs(f[i]);
  }
}"""
    n = 64
    a = RNG.integers(-40, 40, n).astype(np.int32)
    f = RNG.standard_normal(n).astype(np.float32)
    *_, out, g = _run(backend, to, src, a, f, np.zeros(n, np.int32), np.zeros(n, np.float32), n=n)
    expect = np.trunc((np.abs(a) - 10) / 4).astype(np.int32) + (np.abs(a.astype(np.int64) * 3) > 30)
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(g, np.abs(f))


def test_bit_intrinsics_ffs_brev_mulhi_mul24(backend, to):
    src = """__global__ void k(const unsigned* a, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[5 * i] = __ffs((int)a[i]);
    out[5 * i + 1] = __brev(a[i]);
    out[5 * i + 2] = __umulhi(a[i], 0x9E3779B9u);
    out[5 * i + 3] = __mulhi((int)a[i], -7);
    out[5 * i + 4] = __umul24(a[i], a[i] >> 3);
  }
}"""
    n = 80
    a = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    a[:3] = [0, 0x80000000, 1]
    _, out = _run(backend, to, src, a, np.zeros(5 * n, np.uint32), n=n)
    out = out.reshape(n, 5)
    ai = [int(v) for v in a]
    ffs = [(v & -v).bit_length() for v in ai]
    brev = [int(f"{v:032b}"[::-1], 2) for v in ai]
    umulhi = [(v * 0x9E3779B9) >> 32 for v in ai]
    mulhi = [((v - 2**32 if v >= 2**31 else v) * -7 >> 32) % 2**32 for v in ai]
    umul24 = [((v & 0xFFFFFF) * ((v >> 3) & 0xFFFFFF)) % 2**32 for v in ai]
    np.testing.assert_array_equal(out, np.array([ffs, brev, umulhi, mulhi, umul24], np.uint64).T)



def test_intrinsics_in_macro_bodies_take_the_macros_parameters(backend, to):
    """``#define IMUL(a, b) __mul24(a, b)`` (cuda-samples' scalarProd): the intrinsic's OpenCL
    form is written with the macro's own parameters, not text from elsewhere in the file."""
    src = """#define IMUL(a, b) __mul24(a, b)
#define HI(x, y) __umulhi(x, y)
__global__ void k(const unsigned* a, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { out[2 * i] = IMUL((int)a[i], i - 40); out[2 * i + 1] = HI(a[i], 0x9E3779B9u); }
}"""
    n = 80
    a = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    _, out = _run(backend, to, src, a, np.zeros(2 * n, np.uint32), n=n)
    s24 = [((int(v) & 0xFFFFFF) ^ 0x800000) - 0x800000 for v in a]
    want = [[(s * (i - 40)) % 2**32, (int(v) * 0x9E3779B9) >> 32] for i, (s, v) in enumerate(zip(s24, a))]
    np.testing.assert_array_equal(out.reshape(n, 2), np.array(want, np.uint64))


_HALF2 = """#include <cuda_fp16.h>
union pack4 { float4 f; half2 h[4]; };
typedef union { unsigned int u; half2 h; } bits_t;
struct pair_t { half2 v; float s; };
__global__ void k(const float4* in, const half2* x, half2* y, pair_t* ps, const unsigned* w, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    pack4 p;
    p.f = in[i];
    float s = 0.0f;
    for (int j = 0; j < 4; j++) {
        float2 t = __half22float2(p.h[j]);
        s += t.x + t.y;
    }
    float2 a = __half22float2(x[i]);
    y[i] = __floats2half2_rn(a.x * 3.0f, a.y + 1.0f);
    ps[i].v = __float22half2_rn(make_float2(s, -s));
    union { unsigned int u; half2 h; } q;
    q.u = w[i];
    bits_t b;
    b.h = x[i];
    out[2 * i] = s + __low2float(ps[i].v) + __high2float(__ldg(&x[i]));
    out[2 * i + 1] = __low2float(q.h) + (float)(b.u & 1u);
}"""


def test_half2_in_unions_structs_and_pointers_is_kept_as_bits_and_converted(backend):
    """half2 as OpenCL keeps it without cl_khr_fp16: its 4 bytes (ushort2, CUDA's size and
    alignment) in memory, unions and structs, read through __half22float2 / __low2float /
    __high2float and written through __floats2half2_rn / __float22half2_rn, rounding to
    nearest even like numpy's float16; a union reads another member's bytes as CUDA's does."""
    result = translate(_HALF2, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    n = 70
    packed = RNG.standard_normal((n, 8)).astype(np.float16)
    x = (RNG.standard_normal((n, 2)) * 10).astype(np.float16)
    w = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    pair = np.dtype([("v", "<f2", 2), ("s", "<f4")])
    dev = [accel.asarray(a, backend=backend) for a in (
        packed.view(np.float32), x, np.zeros((n, 2), np.float16), np.zeros(n * 8, np.uint8), w,
        np.zeros(2 * n, np.float32))]
    kernel(result.text, "k", backend=backend, options=result.options)(2, 64, *dev, np.int32(n))
    s = np.zeros(n, np.float32)  # in the kernel's order
    for j in range(4):
        s += packed[:, 2 * j].astype(np.float32) + packed[:, 2 * j + 1].astype(np.float32)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(dev[2].numpy(), np.stack([xf[:, 0] * 3, xf[:, 1] + 1], 1).astype(np.float16))
    ps = dev[3].numpy().view(pair)
    np.testing.assert_array_equal(ps["v"], np.stack([s, -s], 1).astype(np.float16))
    out = dev[5].numpy().reshape(n, 2)
    np.testing.assert_array_equal(out[:, 0], s + s.astype(np.float16).astype(np.float32) + xf[:, 1])
    with np.errstate(invalid="ignore"):  # random bits: some are NaN halves, which stay NaN
        low = (w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
        np.testing.assert_array_equal(out[:, 1], low + (x.view(np.uint32)[:, 0] & 1).astype(np.float32))


@pytest.mark.parametrize("body, construct", [
    ("float a = p.h[0].x;", "half2 member element access"),  # the bits, not the number
    ("half2 v = x[i];", "half2 variable"),
    ("float a = x[i].x;", "half2 element access"),
    ("y[i] = x[i] + x[i];", "half2 store"),
    ("float a = ps[i].v.y;", "half2 member v"),
])
def test_half2_used_as_a_number_is_refused(body, construct):
    src = _HALF2.replace("    out[2 * i] = s", f"    {body}\n    out[2 * i] = s")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(22, construct)]


def test_half_array_members_read_without_a_conversion_are_refused():
    """``a + b[i].d[0]`` with ``half d[2]``: the member holds the bits (ushort), which a plain
    read would add as an integer."""
    src = ("#include <cuda_fp16.h>\ntypedef struct { half d[2]; int q; } blk;\n"
           "__global__ void k(const blk* b, float* out) {\n  int i = threadIdx.x;\n"
           "  float a = b[i].d[1];\n  out[i] = a + b[i].d[0];\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(6, "half member element access")]


def test_template_parameters_with_defaults_take_them_as_cpp_does(backend):
    """llama.cpp's ``template<int width = WARP_SIZE> float warp_reduce_sum(float x)`` called as
    ``warp_reduce_sum(x)``: the value parameter takes its default, a type parameter no argument
    gives takes its own; ``warp_reduce_sum<8>(x)`` names the first and defaults the rest."""
    src = """#define WARP_SIZE 32
template<int width = WARP_SIZE, typename A = float>
static __device__ __forceinline__ float warp_reduce_sum(float x) {
    for (int offset = width/2; offset > 0; offset >>= 1) {
        x += (A)__shfl_xor_sync(0xffffffff, x, offset, width);
    }
    return x;
}
__global__ void k(const float* x, float* out, int n) {
    float v = x[threadIdx.x];
    out[threadIdx.x] = warp_reduce_sum(v);
    out[64 + threadIdx.x] = warp_reduce_sum<8>(v);
}"""
    x = RNG.integers(-50, 50, 64).astype(np.float32)
    _, out = _run(backend, "opencl", src, x, np.zeros(128, np.float32), n=64)
    np.testing.assert_array_equal(out[:64], np.repeat(x.reshape(2, 32).sum(1), 32))
    np.testing.assert_array_equal(out[64:], np.repeat(x.reshape(8, 8).sum(1), 8))


def test_a_template_called_with_and_without_its_arguments_expands_once(backend):
    """``sq<float>(a)`` and ``sq(b)`` in one file: the template waits until the translator
    spells the second call's arguments, then both calls name the one copy ``sq_float``."""
    src = ("template<typename T> __device__ T sq(T x) { return x * x; }\n"
           "__global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = sq<float>(y[i]) + sq(y[i] + 1.0f); }\n")
    assert translate(src, "opencl").text.count("sq_float(") == 4  # prototype, definition, 2 calls
    y = RNG.integers(-9, 9, 40).astype(np.float32)
    (out,) = _run(backend, "opencl", src, y.copy(), n=40)
    np.testing.assert_array_equal(out, y * y + (y + 1) * (y + 1))


#: written for this test in the style of llama.cpp's norm.cu: a kernel template over the block
#: size, instantiated by the host code's launches, with ``if constexpr`` and ``static_assert``
_RMS_NORM = """#include <cstdint>
#define WARP_SIZE 32
template<int width = WARP_SIZE>
static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = width/2; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, width);
    }
    return x;
}
template <int block_size>
static __global__ void rms_norm_f32(const float * x, float * dst, const int ncols, const int64_t stride_row, const float eps) {
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    x   += row*stride_row;
    dst += row*ncols;
    float tmp = 0.0f;
    for (int col = tid; col < ncols; col += block_size) {
        const float xi = x[col];
        tmp += xi * xi;
    }
    tmp = warp_reduce_sum(tmp);
    if constexpr (block_size > WARP_SIZE) {
        static_assert(block_size == 1024, "unexpected block_size");
        __shared__ float s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = s_sum[lane_id];
        tmp = warp_reduce_sum(tmp);
    }
    const float mean = tmp / ncols;
    const float scale = rsqrtf(mean + eps);
    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = scale * x[col];
    }
}
static void rms_norm_f32_cuda(const float * x, float * dst, const int ncols, const int nrows, const int64_t stride_row, const float eps, cudaStream_t stream) {
    if (ncols < 1024) {
        const dim3 block_dims(WARP_SIZE, 1, 1);
        rms_norm_f32<WARP_SIZE><<<nrows, block_dims, 0, stream>>>(x, dst, ncols, stride_row, eps);
    } else {
        const dim3 block_dims(1024, 1, 1);
        rms_norm_f32<1024><<<nrows, block_dims, 0, stream>>>(x, dst, ncols, stride_row, eps);
    }
}
"""


def test_if_constexpr_and_static_assert_in_template_copies(backend):
    """``if constexpr (block_size > WARP_SIZE)``: a plain ``if`` on the copy's constant takes
    the branch CUDA's compiler kept; ``static_assert`` (CUDA's compiler checked it, and in the
    copy whose branch is discarded it does not hold) is left out."""
    result = translate(_RMS_NORM, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    assert "constexpr" not in result.text and "static_assert" not in result.text
    rng = np.random.default_rng(21)
    for block, ncols in ((32, 200), (1024, 3000)):
        x = rng.standard_normal((3, ncols)).astype(np.float32)
        out = accel.asarray(np.zeros_like(x), backend=backend)
        name = "rms_norm_f32_WARP_SIZE" if block == 32 else "rms_norm_f32_1024"
        kernel(result.text, name, backend=backend, options=result.options)(
            3, block, accel.asarray(x, backend=backend), out, np.int32(ncols), np.int64(ncols), np.float32(1e-6))
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(out.numpy(), x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6),
                                   rtol=2e-5, atol=1e-6, err_msg=name)


#: llm.c's blockReduce as its common.h writes it: a template over a function-pointer alias
#: (``using``), with literal default arguments
_LLMC_BLOCK_REDUCE = """#define WARP_SIZE 32U
__device__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
    return val;
}
using reduction_func_t = float (*) (float);
template<reduction_func_t warp_reduction>
__device__ inline float blockReduce(float val, bool final_sync=false, float out_of_bounds=0.0f) {
    __shared__ float shared_val[WARP_SIZE];
    const int lane_id = threadIdx.x % WARP_SIZE;
    const int warp_id = threadIdx.x / WARP_SIZE;
    const int num_warps = blockDim.x / WARP_SIZE;
    float warp_val = warp_reduction(val);
    if (lane_id == 0) { shared_val[warp_id] = warp_val; }
    __syncthreads();
    warp_val = (lane_id < num_warps) ? shared_val[lane_id] : out_of_bounds;
    float block_val = warp_reduction(warp_val);
    if (final_sync) {
        __syncthreads();
    }
    return block_val;
}
__global__ void k(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = blockReduce<warpReduceSum>(v);
    float t = blockReduce<warpReduceSum>(v * 2.0f, true);
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = s; out[2 * blockIdx.x + 1] = t; }
}
"""


def test_device_function_default_arguments_and_function_pointer_aliases(backend):
    """``blockReduce<warpReduceSum>(v)`` with ``bool final_sync=false, float
    out_of_bounds=0.0f``: each call that leaves a literal default out passes it; ``using
    reduction_func_t = float (*)(float);`` types the template's parameter, and is left out."""
    result = translate(_LLMC_BLOCK_REDUCE, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    assert "blockReduce_warpReduceSum(v, false, 0.0f," in result.text
    n = 300
    x = RNG.integers(-50, 50, 384).astype(np.float32)
    out = accel.asarray(np.zeros(6, np.float32), backend=backend)
    kernel(result.text, "k", backend=backend, options=result.options)(
        3, 128, out, accel.asarray(x, backend=backend), np.int32(n))
    sums = np.where(np.arange(384) < n, x, 0).reshape(3, 128).sum(1)
    np.testing.assert_array_equal(out.numpy(), np.stack([sums, 2 * sums], 1).ravel())

def test_reinterpretation_and_sincos(backend, to):
    src = """__global__ void k(const float* f, int* bits, float* back, float* sc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    bits[i] = __float_as_int(f[i]) >> 23;
    back[i] = __uint_as_float(__float_as_uint(f[i]) ^ 0x80000000u);
    float s, c;
    sincosf(f[i], &s, &c);
    sc[2 * i] = s;
    __sincosf(f[i], &s, &sc[2 * i + 1]);
  }
}"""
    n = 64
    f = (RNG.standard_normal(n) * 3).astype(np.float32)
    _, bits, back, sc = _run(backend, to, src, f, np.zeros(n, np.int32), np.zeros(n, np.float32),
                             np.zeros(2 * n, np.float32), n=n)
    np.testing.assert_array_equal(bits, f.view(np.int32) >> 23)  # arithmetic shift: signed
    np.testing.assert_array_equal(back, -f)
    np.testing.assert_allclose(sc[0::2], np.sin(f.astype(np.float64)), atol=2e-6)
    np.testing.assert_allclose(sc[1::2], np.cos(f.astype(np.float64)), atol=2e-6)


def test_cxx_casts_function_macros_and_restrict_ldg(backend, to):
    src = """#define IDX(r, c, ld) ((r) * (ld) + (c))
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n / 4) {
    const float4* v = reinterpret_cast<const float4*>(x);
    float4 q = __ldg(&v[i]);
    float* out = const_cast<float*>(y);
    out[IDX(i, 0, 4)] = q.w;
    out[IDX(i, 1, 4)] = static_cast<float>(static_cast<int>(q.x * 10.0f));
  }
}"""
    n = 128
    x = RNG.standard_normal(n).astype(np.float32)
    _, y = _run(backend, to, src, x, np.zeros(n, np.float32), n=n)
    q = x.reshape(-1, 4)
    np.testing.assert_array_equal(y.reshape(-1, 4)[:, 0], q[:, 3])
    np.testing.assert_array_equal(y.reshape(-1, 4)[:, 1], np.trunc(q[:, 0] * np.float32(10)))


def test_abs_of_an_untyped_argument_is_refused_not_guessed():
    result = translate("#define F(x) (x)\n__global__ void k(int* c) {\n  c[0] = abs(F(c[1]));\n}",
                       "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(3, "abs")]


def test_a_looser_opencl_error_bound_is_reported_with_both_bounds():
    src = ("__global__ void k(float* x) {\n  x[0] = expf(x[1]) + __expf(x[2]);\n"
           "  x[3] = powf(x[4], 2.5f) + fabsf(x[5]);\n  float s, c;\n  sincosf(x[6], &s, &c);\n}")
    result = translate(src, "opencl", filename="k.cu")
    warned = {(d.line, d.construct): d.why for d in result.diagnostics if d.severity == "warning"}
    assert set(warned) == {(2, "expf precision"), (3, "powf precision"), (5, "sincosf precision")}
    assert warned[(3, "powf precision")] == ("OpenCL 1.2 allows 16 ulp for pow where CUDA "
                                             "documents 4 ulp for powf (single precision)")


def test_conversion_rounding_funnel_shift_byte_perm_and_saturate(backend, to):
    src = """__global__ void k(const float* f, const unsigned* u, int* i, unsigned* o, float* g, int n) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) {
    i[2 * t] = __float2int_rn(f[t]);
    i[2 * t + 1] = __float2int_rd(f[t]);
    o[3 * t] = __funnelshift_l(u[t], u[t] * 7u, t);
    o[3 * t + 1] = __funnelshift_rc(u[t], ~u[t], t);
    o[3 * t + 2] = __byte_perm(u[t], ~u[t], 0x7531u + t);
    g[2 * t] = __saturatef(f[t] / 4.0f);
    float h = f[t] * 1e-9f, p = h * h;
    g[2 * t + 1] = __fadd_rn(__fmul_rn(h, h), -p);  // 0 unless contracted into an fma
  }
}"""
    n = 64
    f = (RNG.standard_normal(n) * 1e9).astype(np.float32)
    f[:6] = [2.5, -2.5, np.nan, 3e9, -3e9, np.inf]
    f[6:12] = [0.5, 1.5, -0.5, 3.7, -3.7, 1e-3]
    u = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    _, _, i, o, g = _run(backend, to, src, f, u, np.zeros(2 * n, np.int32), np.zeros(3 * n, np.uint32),
                         np.zeros(2 * n, np.float32), n=n)
    sat = lambda v: np.int32(0) if np.isnan(v) else np.int32(np.clip(v, -2**31, 2**31 - 1))  # noqa: E731
    np.testing.assert_array_equal(i[0::2], [sat(np.rint(v)) for v in f.astype(np.float64)])
    np.testing.assert_array_equal(i[1::2], [sat(np.floor(v)) for v in f.astype(np.float64)])
    ui = [int(v) for v in u]
    fl = [((((x * 7) % 2**32) << 32 | x) << (t & 31)) >> 32 & 0xFFFFFFFF for t, x in enumerate(ui)]
    fr = [((((~x) % 2**32) << 32 | x) >> min(t, 32)) & 0xFFFFFFFF for t, x in enumerate(ui)]

    def perm(x: int, y: int, s: int) -> int:
        v = (y << 32) | x
        return sum(((v >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4))
    bp = [perm(x, ~x % 2**32, 0x7531 + t) for t, x in enumerate(ui)]
    np.testing.assert_array_equal(o.reshape(n, 3), np.array([fl, fr, bp], np.uint64).T)
    with np.errstate(invalid="ignore"):
        q = f / np.float32(4)
        np.testing.assert_array_equal(g[0::2], np.where(np.isnan(q), 0, np.clip(q, 0, 1)))
        h = f * np.float32(1e-9)
        np.testing.assert_array_equal(g[1::2], np.where(np.isfinite(h * h), 0, np.nan))


def test_unsigned_and_16_bit_buffers_reach_kernels_but_not_ops(backend):
    src = """__global__ void k(unsigned int* u32, unsigned short* u16, short* i16,
                  unsigned long long* u64, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    u32[i] = 0xFFFFFFF0u + i;
    u16[i] = (unsigned short)(65530 + i);
    i16[i] = (short)(-i);
    u64[i] = 0xFFFFFFFFFFFFFFF0ull + i;
  }
}"""
    n = 8
    i = np.arange(n)
    u32, u16, i16, u64 = _run(backend, "opencl", src, np.zeros(n, np.uint32), np.zeros(n, np.uint16),
                              np.zeros(n, np.int16), np.zeros(n, np.uint64), n=n)
    assert (u32.dtype, u16.dtype, i16.dtype, u64.dtype) == (np.uint32, np.uint16, np.int16, np.uint64)
    np.testing.assert_array_equal(u32, (0xFFFFFFF0 + i) % 2**32)
    np.testing.assert_array_equal(u16, (65530 + i) % 2**16)
    np.testing.assert_array_equal(i16, -i)
    np.testing.assert_array_equal(u64, np.uint64(0xFFFFFFFFFFFFFFF0) + i.astype(np.uint64))
    with pytest.raises(accel.DTypeError, match="a.dtype"):
        accel.matmul(np.ones((2, 2), np.uint32), np.ones((2, 2), np.uint32), backend="cpu")


def test_constexpr_enum_goto_static_assert_and_limits_build_and_run(backend):
    src = """#include <climits>
enum { BLOCK = 64, HALF = BLOCK / 2 };
constexpr int SHIFT = 3;
static_assert(sizeof(float) == 4, "float is 32-bit");
__global__ void k(int* x, int n) {
  constexpr int scale = 1 << SHIFT;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) goto done;
  x[i] = i < HALF ? i * scale : INT_MAX;
done:
  return;
}"""
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.diagnostics] == [(4, "static_assert")]
    (x,) = _run(backend, "opencl", src, np.zeros(50, np.int32), n=40)
    want = np.where(np.arange(50) < 32, np.arange(50) * 8, 2**31 - 1)
    want[40:] = 0
    np.testing.assert_array_equal(x, want)


def test_float_atomic_add_is_a_compare_and_swap_loop(backend, to):
    """Integer-valued floats: every order of the additions gives the same sums."""
    src = """__global__ void k(const float* v, const int* bin, float* sums, int n) {
  __shared__ float local[4];
  if (threadIdx.x < 4) local[threadIdx.x] = 0.0f;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float old = -1.0f;
  if (i < n) old = atomicAdd(&local[bin[i]], v[i]);
  __syncthreads();
  if (threadIdx.x < 4) atomicAdd(&sums[threadIdx.x], local[threadIdx.x]);
  if (i < n && old < 0.0f) sums[4] = 1.0f;  // atomicAdd returns the old value, never negative here
}"""
    n = 500
    v = RNG.integers(0, 9, n).astype(np.float32)
    b = RNG.integers(0, 4, n).astype(np.int32)
    _, _, sums = _run(backend, to, src, v, b, np.zeros(5, np.float32), n=n)
    np.testing.assert_array_equal(sums, [*np.bincount(b, v, 4), 0])


def test_atomic_inc_and_dec_wrap_at_the_limit_like_cuda(backend):
    """OpenCL's atomic_inc/atomic_dec never wrap; CUDA's wrap at the limit, in global and shared
    memory. Every work-item bumps the same counters, so the final values are known."""
    src = """__global__ void k(unsigned int* g, unsigned int* seen, int n) {
  __shared__ unsigned int s[2];
  if (threadIdx.x == 0) { s[0] = 0u; s[1] = 0u; }
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    seen[i] = atomicInc(&g[0], 9u);
    atomicDec(&g[1], 4u);
    atomicInc(&s[0], 6u);
    atomicDec(&s[1], 2u);
  }
  __syncthreads();
  if (threadIdx.x == 0) { g[2] = s[0]; g[3] = s[1]; }
}"""
    n = 64  # one block: the shared counters see all 64 updates
    g, seen = _run(backend, "opencl", src, np.zeros(4, np.uint32), np.zeros(n, np.uint32), n=n)
    assert sorted(seen) == sorted(k % 10 for k in range(n))  # 0..9 over and over, in some order
    dec = lambda v, lim, k: [v := (lim if v == 0 or v > lim else v - 1) for _ in range(k)][-1]  # noqa: E731
    assert list(g) == [n % 10, dec(0, 4, n), n % 7, dec(0, 2, n)]
    (g_dialect, _) = _run(backend, "dialect", src, np.zeros(4, np.uint32), np.zeros(n, np.uint32), n=n)
    np.testing.assert_array_equal(g_dialect, g)


def test_min_of_size_t_and_int_builds_and_computes_in_64_bits(backend, to):
    src = """__global__ void k(const int* lim, long long* out, int n) {
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (long long)min(i * 1000000000, lim[i]) - 1;
}"""
    n = 40
    lim = RNG.integers(-5, 2**31 - 1, n).astype(np.int32)
    _, out = _run(backend, to, src, lim, np.zeros(n, np.int64), n=n)
    i = np.arange(n, dtype=np.uint64)
    want = np.minimum(i * np.uint64(10**9), lim.astype(np.int64).astype(np.uint64)).astype(np.int64) - 1
    np.testing.assert_array_equal(out, want)


def test_cxx_spellings_opencl_lacks_build_and_compute_as_cuda(backend, to):
    """Each of these builds with nvcc and was passed through into OpenCL C that does not build:
    functional casts, __grid_constant__, static kernels and __shared__ arrays, sizeof of a
    vector type, alignment on shared arrays, <limits.h>/<stdint.h> limits OpenCL lacks, and
    helper_math.h-style functions named like OpenCL builtins (clamp, dot)."""
    src = """#include <limits.h>
#include <stdint.h>
typedef unsigned int u32;
__device__ float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
__device__ float dot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__global__ static void k(const float* a, long long* w, float* out, const __grid_constant__ int n) {
  static __shared__ __align__(16) float tile[64];
  alignas(16) __shared__ float4 quad[16];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = a[i];
  if (threadIdx.x < 16) quad[threadIdx.x] = make_float4(a[i], 1.0f, 2.0f, 3.0f);
  __syncthreads();
  if (i < n) {
    out[2 * i] = clamp(float(int(tile[threadIdx.x])) / 4, -1.0f, 1.0f) + sizeof(float4);
    out[2 * i + 1] = dot(quad[threadIdx.x % 16], quad[threadIdx.x % 16]);
    w[3 * i] = LLONG_MAX - i;
    w[3 * i + 1] = INT32_MIN + i;
    unsigned int wrapped = unsigned(i) - u32(1);
    w[3 * i + 2] = wrapped;
  }
}"""
    n = 128  # two whole blocks of 64
    a = (RNG.standard_normal(n) * 6).astype(np.float32)
    _, w, out = _run(backend, to, src, a, np.zeros(3 * n, np.int64), np.zeros(2 * n, np.float32), n=n)
    i = np.arange(n)
    q = a[i // 64 * 64 + i % 16]
    np.testing.assert_array_equal(out[0::2], np.clip(np.trunc(a) / 4, -1, 1).astype(np.float32) + 16)
    np.testing.assert_allclose(out[1::2], q * q + 14, rtol=1e-6)
    np.testing.assert_array_equal(w[0::3], 2**63 - 1 - i)
    np.testing.assert_array_equal(w[1::3], -2**31 + i)
    np.testing.assert_array_equal(w[2::3], (i - 1) % 2**32)  # unsigned(0) - 1u wraps


def test_template_copies_get_distinct_names_and_functional_casts_of_the_type(backend, to):
    """shift<1> and shift<-1> once both became shift_1, and a copy fill_float beside the
    file's own fill_float: the first of each pair was left in the output untranslated."""
    src = """template <typename T>
__global__ void fill(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = T(i) / T(2) + T(0);
}
template <int S>
__global__ void shift(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += S;
}
__global__ void fill_float(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = -1.0f;
}
template __global__ void fill<float>(float*, int);
template __global__ void fill<unsigned int>(unsigned int*, int);
template __global__ void shift<1>(float*, int);
template __global__ void shift<-1>(float*, int);
"""
    result = translate(src, to, filename="t.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    assert sorted(d.rewrite.split()[-1] for d in result.diagnostics) == [
        "fill_float_2", "fill_unsigned_int", "shift_1", "shift_m1"]
    n = 50
    i = np.arange(n)

    def run(name, a):
        x = accel.asarray(a, backend=backend)
        kernel(result.text, name, backend=backend, options=result.options)(1, 64, x, np.int32(n))
        return x.numpy()

    np.testing.assert_array_equal(run("fill_float_2", np.zeros(n, np.float32)), i / 2)
    np.testing.assert_array_equal(run("fill_unsigned_int", np.zeros(n, np.uint32)), i // 2)
    np.testing.assert_array_equal(run("fill_float", np.zeros(n, np.float32)), np.full(n, -1))
    np.testing.assert_array_equal(run("shift_1", np.zeros(n, np.float32)), np.ones(n))
    np.testing.assert_array_equal(run("shift_m1", np.zeros(n, np.float32)), -np.ones(n))


def test_conditional_compilation_is_left_to_the_opencl_preprocessor(backend, to):
    """#if and #ifdef, at file scope and in a function, mean the same to OpenCL's preprocessor
    (every branch is translated); a test of a macro only CUDA's compilers define does not, and
    is refused where it stands."""
    src = """#define B 128
#if B > 64
#define SCALE 2
#else
#define SCALE 1
#endif
__global__ void k(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef NEGATE
  if (i < n) x[i] = -SCALE * x[threadIdx.x];
#else
  if (i < n) x[i] = SCALE * x[threadIdx.x];
#endif
}"""
    x = RNG.standard_normal(64).astype(np.float32)
    (got,) = _run(backend, to, src, x.copy(), n=64)
    np.testing.assert_array_equal(got, 2 * x)
    arch = ("#ifdef __CUDA_ARCH__\n#define SCALE 2.0f\n#else\n#define SCALE 1.0f\n#endif\n"
            + src[src.index("__global__"):])
    result = translate(arch, to, filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(1, "__CUDA_ARCH__")]
    assert "another branch" in result.errors[0].why


def test_a_float_condition_of_the_conditional_operator_is_tested_against_zero(backend, to):
    """OpenCL C refuses a floating-point condition for ?: (ggml's ``d ? 1.0f/d : 0.0f``); CUDA's
    is true for every value but zero, NaN included."""
    src = """__global__ void k(const float* a, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] ? 1.0f / a[i] : -1.0f;
}"""
    a = np.array([0, -0.0, 2, np.nan, np.inf, -0.5], np.float32)
    (_, out) = _run(backend, to, src, a, np.zeros(6, np.float32), n=6)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(out, np.where(a != 0, np.float32(1) / a, np.float32(-1)))


def test_cache_hinted_half_and_bfloat16_loads_and_stores_are_plain_accesses(backend, to):
    """``__ldg``/``__ldcs``/``__ldcg`` around a half or bfloat16 element (by ``&p[i]`` or
    ``p + i``) read it like ``p[i]``; ``__stcs``/``__stcg``/``__stwb`` of a converted value or a
    copied element store like ``p[i] = ...``: the hint changes caching, not values."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    src = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void k(const float* a, const __half* h, const __nv_bfloat16* b, __half* oh,
                  __nv_bfloat16* ob, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = __ldg(&a[i]) + __half2float(__ldg(&h[i])) + __bfloat162float(__ldcs(b + i))
              + 2.0f * (float)__ldcg(&b[i]) + __ldcs(a + i);
    out[i] = v;
    __stcs(&oh[i], __float2half(v));
    __stcg(ob + i, __float2bfloat16(v));
    __stwb(&ob[n + i], __ldcs(&b[i]));
  }
}"""
    n = 100
    a = RNG.standard_normal(n).astype(np.float32)
    h = RNG.standard_normal(n).astype(np.float16)
    b = RNG.standard_normal(n).astype(bf16)
    *_, oh, ob, out = _run(backend, to, src, a, h, b, np.zeros(n, np.float16),
                           np.zeros(2 * n, bf16), np.zeros(n, np.float32), n=n)
    bf = b.astype(np.float32)
    want = a + h.astype(np.float32) + bf + np.float32(2) * bf + a  # float32 sums, in CUDA's order
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(oh, want.astype(np.float16))
    np.testing.assert_array_equal(ob.view(np.uint16), np.concatenate([want.astype(bf16), b]).view(np.uint16))


#: a reduction helper run on a __shared__ tile and on a block's slice of a global buffer; the
#: helper it calls is split in turn (its copies call one copy each)
_TWO_SPACES = """__device__ void add_into(float* d, int i, int j) { d[i] += d[j]; }
__device__ float block_reduce(float* data, int tid) {
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) add_into(data, tid, tid + s);
        __syncthreads();
    }
    return data[0];
}
__global__ void k(const float* x, float* scratch, float* out, int n) {
    __shared__ float tile[64];
    int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
    float v = i < n ? x[i] : 0.0f;
    tile[tid] = v;
    scratch[i] = v * v;
    __syncthreads();
    float s = block_reduce(tile, tid);
    float q = block_reduce(scratch + blockIdx.x * blockDim.x, tid);
    if (tid == 0) { out[2 * blockIdx.x] = s; out[2 * blockIdx.x + 1] = q; }
}"""


def test_a_helper_called_with_global_and_shared_pointers_gets_a_copy_per_space(backend, to):
    """OpenCL 1.2 has no generic address space: one copy per space the calls pass, named after
    it, each call naming its copy, with a warning on the helper's line."""
    result = translate(_TWO_SPACES, to, filename="k.cu")
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [
        (1, "warning", "device function add_into"), (2, "warning", "device function block_reduce")]
    assert "call it as block_reduce_global or block_reduce_local" in str(result.diagnostics[1])
    n = 300
    x = RNG.integers(-50, 51, n).astype(np.float32)  # integers: every partial sum is exact
    blocks = (n + 63) // 64
    *_, out = _run(backend, to, _TWO_SPACES, x, np.zeros(blocks * 64, np.float32),
                   np.zeros(2 * blocks, np.float32), n=n)
    padded = np.concatenate([x, np.zeros(blocks * 64 - n, np.float32)]).reshape(blocks, 64)
    np.testing.assert_array_equal(out.reshape(blocks, 2), np.stack([padded.sum(1), (padded ** 2).sum(1)], 1))


def test_prototypes_declare_functions_as_their_translation_defines_them(backend):
    """A prototype (the user's, or a template copy's, which CUDA's two-phase lookup needs) is
    the translated head: a __global or __local pointer, the shuffle scratch argument; one per
    copy of a function called with pointers into two address spaces."""
    src = """__device__ void put(float* p, float v);
__device__ float lane_sum(float v);
template <typename T> __device__ void twice(T* p, T v) { p[0] = 2 * v; }
__global__ void k(float* out, float* twice_out, int n) {
    __shared__ float s[64];
    float v = lane_sum(1.0f);
    put(s + threadIdx.x, v);
    __syncthreads();
    if (threadIdx.x == 0) { put(out + blockIdx.x, s[31]); twice<float>(twice_out + blockIdx.x, s[0]); }
}
__device__ void put(float* p, float v) { p[0] = v; }
__device__ float lane_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}"""
    *_, out, twice_out = _run(backend, "opencl", src, np.zeros(2, np.float32), np.zeros(2, np.float32), n=64)
    np.testing.assert_array_equal(out, [32, 0]), np.testing.assert_array_equal(twice_out, [64, 0])


_DEDUCED = """template <typename T>
__device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
template <typename T>
__device__ void store_max(T* p, const T& a, T b) { p[0] = a > b ? a : b; }
__global__ void k(const float* x, const int* y, float* out, int* iout, float* top, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    int w = i < n ? y[i] : 0;
    float s = warp_sum(v);
    int t = warp_sum(w);
    if ((threadIdx.x & 31) == 0) { out[i / 32] = s; iout[i / 32] = t; }
    if (i == 0) store_max(top, x[0], x[1]);
}"""


def test_template_calls_that_deduce_their_arguments_are_instantiated(backend):
    """``warp_sum(v)`` names no template arguments: C++ deduces T from v's type, and so does
    the translation (float and int here), spelling ``warp_sum<float>`` before expanding. (The
    dialect has no warp emulation.)"""
    to = "opencl"
    result = translate(_DEDUCED, to, filename="k.cu")
    assert [(d.line, d.construct) for d in result.diagnostics if d.construct.startswith("template")] == [
        (1, "template warp_sum<float>"), (1, "template warp_sum<int>"), (6, "template store_max<float>")]
    n = 200
    x = RNG.integers(-50, 51, n).astype(np.float32)  # integers: the sums are exact in float
    y = RNG.integers(-1000, 1000, n).astype(np.int32)
    *_, out, iout, top = _run(backend, to, _DEDUCED, x, y, np.zeros(8, np.float32),
                              np.zeros(8, np.int32), np.zeros(1, np.float32), n=n)
    pad = lambda a: np.concatenate([a, np.zeros(256 - n, a.dtype)]).reshape(8, 32)  # noqa: E731
    np.testing.assert_array_equal(out, pad(x).sum(1))
    np.testing.assert_array_equal(iout, pad(y).sum(1))
    assert top[0] == max(x[0], x[1])
    mixed = translate(_DEDUCED.replace("warp_sum(w)", "warp_sum(w, 1)"), to, filename="k.cu")
    assert [(d.line, d.construct) for d in mixed.errors] == [
        (1, "template"), (13, "template call warp_sum")]


_REFERENCES = """__device__ void minmax(float v, float& lo, float& hi) { lo = fminf(lo, v); hi = fmaxf(hi, v); }
__device__ void bump(int& count) { ++count; }
__global__ void k(const float* x, float* window, float* range, int* counts, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float& xi = x[i];
    float lo = xi, hi = xi;
    for (int j = 1; j < 4; ++j) minmax(x[(i + j) % n], lo, hi);
    window[2 * i] = lo;
    window[2 * i + 1] = hi;
    minmax(x[i], range[2 * i], range[2 * i + 1]);
    int c = 0;
    int& alias = c;
    bump(c);
    bump(alias);
    bump(counts[i]);
    int& out = counts[n + i];
    out = c;
}"""


def test_reference_parameters_write_the_callers_variables(backend, to):
    """``float& lo``: OpenCL C has no references, so the parameter is a pointer to the caller's
    variable, in its address space (private here, global there: a copy each), each use is
    ``*lo`` and each call passes ``&(v)``; a reference variable ``int& out = counts[j];`` is
    such a pointer too."""
    n = 70
    x = RNG.standard_normal(n).astype(np.float32)
    bounds = RNG.standard_normal((n, 2)).astype(np.float32)
    counts = RNG.integers(0, 9, 2 * n).astype(np.int32)
    _, window, range_, got = _run(backend, to, _REFERENCES, x, np.zeros(2 * n, np.float32),
                                  bounds.ravel().copy(), counts.copy(), n=n)
    near = np.stack([np.roll(x, -j) for j in range(4)])
    np.testing.assert_array_equal(window.reshape(n, 2), np.stack([near.min(0), near.max(0)], 1))
    np.testing.assert_array_equal(range_.reshape(n, 2), np.stack(
        [np.minimum(bounds[:, 0], x), np.maximum(bounds[:, 1], x)], 1))
    np.testing.assert_array_equal(got, np.concatenate([counts[:n] + 1, np.full(n, 2)]))


def test_std_math_in_device_code_is_cudas_overload(backend, to):
    """``std::max(a, b)``, ``std::min``, ``std::abs``, ``std::exp`` on floats in device code are
    the float overloads, as the unqualified calls; on ints, the int ones."""
    src = """#include <cmath>
#include <algorithm>
__global__ void k(const float* a, const int* b, float* out, int* iout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = std::max(a[i], 0.5f) + std::min(a[i], -0.5f) + std::abs(a[i]) + std::exp(a[i]);
    iout[i] = std::max(b[i], 3) - std::abs(b[i]);
  }
}"""
    n = 50
    a = RNG.standard_normal(n).astype(np.float32)
    b = RNG.integers(-9, 9, n).astype(np.int32)
    *_, out, iout = _run(backend, to, src, a, b, np.zeros(n, np.float32), np.zeros(n, np.int32), n=n)
    want = np.maximum(a, 0.5) + np.minimum(a, -0.5) + np.abs(a) + np.exp(a.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_array_equal(iout, np.maximum(b, 3) - np.abs(b))


def test_enums_name_their_type_and_scoped_enums_become_prefixed_constants(backend, to):
    """C++ names the type of ``enum Mode { ... }`` Mode (C only ``enum Mode``), and its scoped
    ``enum class Act : int`` has enumerators ``Act::Gelu`` (C has no scopes), here also as a
    template argument: the translation typedefs the types and spells ``Act_Gelu``."""
    src = """enum class Act : int { Relu, Gelu = 3 };
enum Mode { ADD, MUL };
template <Act A>
__device__ float act(float x) { return A == Act::Gelu ? x * 0.5f : fmaxf(x, 0.0f); }
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    Mode m = i % 2 ? MUL : ADD;
    Act a = Act::Relu;
    if (i < n) y[i] = m == MUL ? act<Act::Gelu>(x[i]) * 2.0f : act<Act::Relu>(x[i]) + (int)Act::Gelu + (int)a;
}"""
    n = 40
    x = RNG.standard_normal(n).astype(np.float32)
    (_, y) = _run(backend, to, src, x, np.zeros(n, np.float32), n=n)
    np.testing.assert_array_equal(y, np.where(np.arange(n) % 2, x * np.float32(0.5) * 2,
                                              np.maximum(x, 0) + 3))



#: the block reductions inference engines write: warp shuffles, and a __shared__ array for the
#: warps' partials, in inline device functions
_BLOCK_REDUCE = """#define WARP_SIZE 32
__inline__ __device__ float warp_sum(float val) {
#pragma unroll
  for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1)
    val += __shfl_xor_sync(0xffffffff, val, mask, 32);
  return val;
}
__inline__ __device__ float warp_max(float val) {
  for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1)
    val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, mask, 32));
  return val;
}
__inline__ __device__ float block_sum(float val, float* shared) {
  int lane = threadIdx.x & 0x1f, wid = threadIdx.x >> 5;
  val = warp_sum(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : 0.0f;
  return warp_sum(val);
}
__inline__ __device__ float block_max(float val, float* shared) {
  int lane = threadIdx.x & 0x1f, wid = threadIdx.x >> 5;
  val = warp_max(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : -INFINITY;
  return warp_max(val);
}
__global__ void softmax(float* __restrict__ out, const float* __restrict__ in, const int cols) {
  __shared__ float s_max, s_sum, red[WARP_SIZE];
  const float* row = in + blockIdx.x * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_max(m, red);
  if (threadIdx.x == 0) s_max = m;
  __syncthreads();
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - s_max);
  s = block_sum(s, red);
  if (threadIdx.x == 0) s_sum = s;
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] = expf(row[c] - s_max) / s_sum;
}"""


def _softmax_rows(backend, src: str) -> None:
    result = translate(src, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    rows, cols = 3, 300
    x = (RNG.standard_normal((rows, cols)) * 3).astype(np.float32)
    out = accel.asarray(np.zeros((rows, cols), np.float32), backend=backend)
    kernel(result.text, "softmax", backend=backend, options=result.options)(
        rows, 128, out, accel.asarray(x, backend=backend), np.int32(cols))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-8)


def test_device_functions_are_inlined_so_every_call_links_and_syncs(backend):
    """OpenCL C's ``inline`` is C99's: without ``static`` there is no external definition, and
    PoCL fails to link the calls it does not inline (here: the shuffling reductions); left
    uninlined, functions with barriers gave wrong rows on some first launches (1 in 7)."""
    text = translate(_BLOCK_REDUCE, "opencl").text
    for name in ("warp_sum", "block_sum", "accel_shfl_float"):
        assert f"static inline __attribute__((always_inline)) float {name}(" in text
    _softmax_rows(backend, _BLOCK_REDUCE)


def test_shared_arrays_of_device_functions_are_declared_by_each_kernel(backend):
    """``static __shared__ float shared[32]`` in a device function (the reductions above, as
    inference engines write them) is one array per block in CUDA: the kernel declares it, one
    per declaring function (both name theirs ``shared``), and passes it down the calls."""
    src = _BLOCK_REDUCE.replace(", red[WARP_SIZE]", "").replace(", red)", ")")
    for name in ("block_sum", "block_max"):
        src = src.replace(f"float {name}(float val, float* shared) {{",
                          f"float {name}(float val) {{\n  static __shared__ float shared[WARP_SIZE];")
    result = translate(src, "opencl", filename="k.cu")
    assert [d.line for d in result.diagnostics if d.construct == "__shared__ in a device function"] == [14, 23]
    _softmax_rows(backend, src)


def test_size_t_kernel_arguments_are_64_bit_unsigned(backend, to):
    """OpenCL forbids size_t kernel arguments; CUDA's is 64-bit unsigned, OpenCL's ulong (and
    ptrdiff_t's long), which the launch passes as np.uint64 / np.int64 alike."""
    src = """__global__ void k(float* y, size_t n, ptrdiff_t shift) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = (float)((ptrdiff_t)i + shift) + (float)(n >> 33);
}"""
    result = translate(src, to, filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    y = accel.asarray(np.zeros(128, np.float32), backend=backend)
    kernel(result.text, "k", backend=backend, options=result.options)(
        2, 64, y, np.uint64(1 << 34), np.int64(-5))  # n past 32 bits: every thread stores
    np.testing.assert_array_equal(y.numpy(), (np.arange(128) - 5 + 2).astype(np.float32))
