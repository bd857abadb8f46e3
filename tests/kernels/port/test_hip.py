"""The CUDA corpus translated to HIP and compiled for a real AMD target (gfx90a, a 64-lane
wavefront) with hiprtc, plus the warp-size findings and hipify renames, and the corpus itself
checked to be real CUDA by compiling it with NVRTC/nvcc."""
from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")

from gpu_toolchains import HIPCC, need, need_tool  # noqa: E402

from accel.kernels.port import translate  # noqa: E402
from repo_paths import TESTS  # noqa: E402

CORPUS = TESTS / "cuda_corpus"
FILES = sorted(p.name for p in CORPUS.glob("*.cu"))


def _hiprtc(source: str, target: str = "gfx90a"):
    from accel.kernels import toolchains
    need(target)
    return toolchains.compile_source(source, target, use_cache=False)


def _hip(file: str):
    result = translate((CORPUS / file).read_text(), "hip", filename=file)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    return result


@pytest.mark.parametrize("file", FILES)
def test_every_corpus_kernel_translates_to_hip_and_builds_with_hiprtc(file):
    result = _hip(file)
    built = _hiprtc(result.text)
    if "hip_bf16.h" in result.text and "hip/hip_bf16.h' file not found" in built.log:
        # Debian's ROCm 5 has no bfloat16 header: the translation warns so (ROCm 6.0+)
        assert any("ROCm 6.0" in str(d) for d in result.diagnostics)
        return
    assert built.ok, built.log
    assert built.binary[:4] == b"\x7fELF"  # an AMD code object


def test_hip_translation_also_builds_with_hipcc(tmp_path):
    """hipcc needs the headers hiprtc has built in: the translation includes them for hipcc
    only (guarded by __HIPCC_RTC__)."""
    need_tool("hipcc", HIPCC)
    src = tmp_path / "softmax.hip"
    src.write_text(_hip("softmax_rows.cu").text)
    proc = subprocess.run(["hipcc", "--genco", "--offload-arch=gfx90a", str(src), "-o",
                           str(tmp_path / "softmax.co")], capture_output=True, text=True,
                          env=dict(os.environ, HIP_PLATFORM="amd"), timeout=300)
    assert proc.returncode == 0, proc.stderr


#: the real kernels' excerpts that compile on their own (the transpose sample includes its
#: folder's helper headers, as matrixMul and fastWalshTransform do, flash-attention-minimal
#: PyTorch's)
REAL_FILES = sorted(p.name for p in (CORPUS.parent / "port_real").glob("*.cu")
                    if p.name not in ("cudasamples_transpose.cu", "flashattnmin_forward_kernel.cu",
                                      "cudasamples_matrixMul.cu", "cudasamples_fastWalshTransform_kernel.cu"))


@pytest.mark.parametrize("path", [CORPUS / f for f in FILES] +
                         [CORPUS.parent / "port_real" / f for f in REAL_FILES], ids=lambda p: p.name)
def test_the_corpus_is_real_cuda(path, tmp_path):
    need_tool("nvcc", "the CUDA toolkit")
    proc = subprocess.run(["nvcc", "-cubin", "-arch=sm_80", str(path), "-o",
                           str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_warp_shuffles_keep_32_lane_semantics_and_are_flagged():
    result = _hip("warp_reduce.cu")
    assert "__shfl_down(v, offset, 32)" in result.text
    assert "__shfl_down_sync" not in result.text
    found = {(d.line, d.severity, d.construct.split(" ")[0]) for d in result.diagnostics}
    assert (8, "warning", "__shfl_down_sync") in found  # the 32-wide mask it drops
    assert (10, "warning", "&") in found  # threadIdx.x & 31: lane arithmetic
    assert all(d.severity == "warning" for d in result.diagnostics)


def test_warp_size_becomes_32_to_match_the_shuffle_width():
    src = ("__global__ void k(float* x) {\n"
           "  float v = x[threadIdx.x];\n"
           "  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);\n"
           "  x[threadIdx.x] = v;\n}\n")
    result = translate(src, "hip", filename="k.cu")
    assert "for (int o = 32 / 2;" in result.text and "__shfl_xor(v, o, 32)" in result.text
    assert [(d.line, d.construct) for d in result.diagnostics if d.construct == "warpSize"] == [(3, "warpSize")]
    built = _hiprtc(result.text)
    assert built.ok, built.log


def test_warp_votes_are_refused_for_hip():
    src = ("__global__ void k(int* out, const float* x) {\n"
           "  unsigned m = __ballot_sync(0xffffffff, x[threadIdx.x] > 0);\n"
           "  out[threadIdx.x] = __popc(m);\n}\n")
    result = translate(src, "hip", filename="vote.cu")
    assert not result.ok
    assert [(d.line, d.construct) for d in result.errors] == [(2, "__ballot_sync")]
    assert "64-bit mask" in result.errors[0].why


def test_runtime_api_renames_and_unknown_names():
    src = ('#include <cuda_runtime.h>\n'
           '__global__ void k(float* x) { x[0] = 1.0f; }\n'
           'int main() {\n'
           '  float* d; cudaStream_t s; cudaStreamCreate(&s);\n'
           '  cudaMalloc(&d, 4);\n'
           '  k<<<1, 1, 0, s>>>(d);\n'
           '  cudaError_t e = cudaDeviceSynchronize();\n'
           '  cudaGraphLaunch(0, s);\n'
           '  return e == cudaSuccess ? 0 : 1;\n}\n')
    result = translate(src, "hip", filename="host.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(8, "cudaGraphLaunch")]
    # the same file without the unverified call translates completely
    ok = translate(src.replace("  cudaGraphLaunch(0, s);\n", ""), "hip", filename="host.cu")
    for cuda, hip in (("cudaStream_t s", "hipStream_t s"), ("cudaStreamCreate(&s)", "hipStreamCreate(&s)"),
                      ("cudaMalloc(&d, 4)", "hipMalloc(&d, 4)"), ("cudaError_t e = cudaDeviceSynchronize()",
                                                                 "hipError_t e = hipDeviceSynchronize()"),
                      ("cudaSuccess", "hipSuccess")):
        assert cuda not in ok.text and hip in ok.text
    assert "#include <hip/hip_runtime.h>" in ok.text and "cuda_runtime.h" not in ok.text
    assert "k<<<1, 1, 0, s>>>(d)" in ok.text  # HIP launches with the same chevrons


@pytest.mark.parametrize("src, line, construct", [
    ('#include <cufft.h>\n__global__ void k() {}\n', 1, "#include <cufft.h>"),
    ('__global__ void k(int* x) {\n  asm volatile("mov.u32 %0, %%laneid;" : "=r"(x[0]));\n}\n', 2,
     "inline PTX"),
    ('#include <mma.h>\n__global__ void k() {\n  nvcuda::wmma::fragment<int, 16, 16, 16, int> f;\n}\n', 1,
     "#include <mma.h>"),
])
def test_nvidia_only_constructs_are_refused_for_hip(src, line, construct):
    result = translate(src, "hip", filename="x.cu")
    assert not result.ok
    assert (line, construct) in [(d.line, d.construct) for d in result.errors]


def test_macro_bodies_are_translated_too():
    src = ("#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) return 1; } while (0)\n"
           "#define WARP_SIZE 32\n"
           "__global__ void k(float* x) { x[0] = INFINITY; }\n"
           "int main() { float* d; CHECK(cudaMalloc(&d, 4)); return 0; }\n")
    result = translate(src, "hip", filename="m.cu")
    assert "#define CHECK(call) do { hipError_t e = (call); if (e != hipSuccess) return 1; } while (0)" \
        in result.text
    assert "CHECK(hipMalloc(&d, 4))" in result.text
    assert [(d.line, d.severity) for d in result.diagnostics] == [(2, "warning")]
    bad = translate("#define LAUNCH cudaGraphLaunch(0, 0)\n", "hip", filename="m.cu")
    assert [(d.line, d.construct) for d in bad.errors] == [(1, "cudaGraphLaunch")]


DIALECT_FILES = [f for f in FILES if f not in ("stencil_halo.cu", "warp_reduce.cu", "block_reduce_warps.cu")]


@pytest.mark.parametrize("file", DIALECT_FILES)
def test_dialect_translation_builds_for_cuda_and_hip(file, tmp_path):
    """accel's dialect is one source for every backend: the translation, behind the portability
    header the backends prepend, builds with NVRTC for sm_80 and with hipcc for gfx90a (it runs
    on PoCL in test_opencl.py)."""
    _build_dialect((CORPUS / file).read_text(), file, tmp_path)


def test_dialect_helpers_and_casts_build_for_cuda_and_hip(tmp_path):
    """The OpenCL-only prologue (typed intrinsics, compare-and-swap atomics) leaves CUDA's own
    functions on the CUDA and HIP side."""
    src = ("__global__ void k(float* f, unsigned int* u, int* i, int n) {\n"
           "  __shared__ unsigned int s[4];\n"
           "  atomicAdd(&f[0], 1.0f);\n  atomicInc(&u[0], 7u);\n  atomicDec(&s[0], 3u);\n"
           "  i[0] = 32 - 2 * __popc(u[1]) + __clz(i[1]) + __ffs(i[2]);\n"
           "  u[2] = min(blockIdx.x * blockDim.x, n) + __brev(u[3]) + __umulhi(u[4], 3u);\n"
           "  f[1] = __int_as_float(i[3]) + abs(f[2]) + (float)abs(i[4]);\n"
           "}\n")
    _build_dialect(src, "helpers.cu", tmp_path)


def test_dialect_cxx_spellings_build_for_cuda_and_hip(tmp_path):
    """Functional casts, alignment attributes, static kernels and shared arrays, and functions
    renamed off OpenCL's builtins: the dialect's spelling of each builds on CUDA and HIP too."""
    src = ("typedef unsigned int u32;\n"
           "__device__ float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }\n"
           "__global__ static void k(float* x, const __grid_constant__ int n) {\n"
           "  static __shared__ __align__(16) float tile[64];\n"
           "  alignas(16) __shared__ float4 q[16];\n"
           "  tile[threadIdx.x] = x[threadIdx.x];\n"
           "  if (threadIdx.x < 16) q[threadIdx.x] = make_float4(1.0f, 2.0f, 3.0f, 4.0f);\n"
           "  __syncthreads();\n"
           "  x[threadIdx.x] = clamp(float(int(tile[threadIdx.x])), 0.0f, q[0].w) + u32(n) + sizeof(float4);\n"
           "}\n")
    _build_dialect(src, "spellings.cu", tmp_path)


def test_dialect_limits_build_for_cuda_and_hip(tmp_path):
    # the translation drops <climits>; NVRTC has none of its macros, so accel.h defines them
    src = ("#include <climits>\n#include <cstdint>\n"
           "__global__ void k(long long* x, int* y) {\n"
           "  x[0] = LLONG_MAX; x[1] = INT64_MIN; y[0] = INT_MAX; y[1] = INT32_MIN;\n"
           "  y[2] = (int)UINT16_MAX + SCHAR_MIN;\n}\n")
    _build_dialect(src, "limits.cu", tmp_path)


def _build_dialect(source: str, file: str, tmp_path) -> None:
    from accel import kernels
    result = translate(source, "dialect", filename=file)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    program = kernels.program_text(result.text, file)
    from accel.kernels import toolchains
    need("sm_80")
    built = toolchains.compile_source(program, "sm_80", use_cache=False)
    assert built.ok, built.log
    need_tool("hipcc", HIPCC)
    src = tmp_path / "k.hip"
    src.write_text(program)
    proc = subprocess.run(["hipcc", "--genco", "--offload-arch=gfx90a", str(src), "-o",
                           str(tmp_path / "k.co")], capture_output=True, text=True,
                          env=dict(os.environ, HIP_PLATFORM="amd"), timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_library_names_map_from_the_table_and_unknown_ones_are_refused():
    src = ("#include <cublas_v2.h>\n#include <curand.h>\nint main() {\n"
           "  cublasHandle_t h; cublasCreate(&h);\n"
           "  float one = 1.0f, *a = 0;\n"
           "  cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 4, &one, a, 4, a, 4, &one, a, 4);\n"
           "  cublasLtMatmul(0);\n"
           "  curandGenerator_t g; curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);\n"
           "  curandGenerateNormal(g, a, 16, 0.0f, 1.0f);\n"
           "  cudaMemcpyToSymbol(a, a, 4);\n"
           "  return st == CUBLAS_STATUS_SUCCESS ? 0 : 1;\n}\n")
    result = translate(src, "hip", filename="host.cu")
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [
        (7, "error", "cublasLtMatmul"), (9, "warning", "curandGenerateNormal")]
    assert "no verified hipBLAS equivalent" in result.errors[0].why
    ok = translate(src.replace("  cublasLtMatmul(0);\n", ""), "hip", filename="host.cu").text
    for hip in ("#include <hipblas/hipblas.h>", "#include <hiprand/hiprand.h>", "hipblasHandle_t h",
                "hipblasCreate(&h)", "hipblasSgemm(h, HIPBLAS_OP_N, HIPBLAS_OP_T", "HIPBLAS_STATUS_SUCCESS",
                "hiprandCreateGenerator(&g, HIPRAND_RNG_PSEUDO_DEFAULT)", "hiprandGenerateNormal",
                "hipMemcpyToSymbol"):
        assert hip in ok
    assert "cublas" not in ok and "curand" not in ok
    counted = translate(src, "hip").translated
    assert counted["cublasSgemm"] == 1 and counted["#include <cublas_v2.h>"] == 1
    fft = translate("int main() {\n  cufftHandle p;\n  cufftPlan1d(&p, 8, CUFFT_C2C, 1);\n}\n", "hip")
    assert [(d.line, d.construct) for d in fft.errors] == [(2, "cufftHandle"), (3, "cufftPlan1d"),
                                                          (3, "CUFFT_C2C")]


def test_a_variable_named_warp_size_is_the_users_own():
    """Only CUDA's builtin becomes 32: `int warpSize` turned into `int 32`."""
    src = ("const int warpSize = 16;\n"
           "__global__ void a(float* x, int warpSize) { x[threadIdx.x] = warpSize; }\n"
           "__global__ void b(float* x) { x[0] = warpSize; }\n")
    result = translate(src, "hip", filename="k.cu")
    assert result.ok and result.text.endswith(src) and not result.diagnostics
    src = ("__global__ void k(float* x) {\n  x[0] = warpSize;\n"
           "  { const int warpSize = 16; x[1] = warpSize; }\n  x[2] = warpSize;\n}\n")
    result = translate(src, "hip", filename="k.cu")
    assert "x[0] = 32;\n  { const int warpSize = 16; x[1] = warpSize; }\n  x[2] = 32;" in result.text
    assert [d.line for d in result.diagnostics] == [2, 4]
    assert result.translated["warpSize"] == 2  # warned uses are translated uses (--stats)
    built = _hiprtc(result.text)
    assert built.ok, built.log


def test_runtime_names_map_to_the_names_hip_declares():
    """hipDeviceProp, hipDevAttr..., hipPointerAttributes do not exist in HIP."""
    src = ("int main() {\n  cudaDeviceProp p; cudaPointerAttributes a; int v;\n"
           "  cudaDeviceAttr at = cudaDevAttrMultiProcessorCount;\n"
           "  cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, 0);\n"
           "  cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0);\n  return 0;\n}\n")
    result = translate(src, "hip", filename="host.cu")
    for hip in ("hipDeviceProp_t p;", "hipPointerAttribute_t a;",
                "hipDeviceAttribute_t at = hipDeviceAttributeMultiprocessorCount;",
                "hipDeviceGetAttribute(&v, hipDeviceAttributeMaxThreadsPerBlock, 0);",
                "hipDeviceGetAttribute(&v, hipDeviceAttributeWarpSize, 0);"):
        assert hip in result.text
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [
        (5, "warning", "cudaDevAttrWarpSize")]  # 64 on CDNA, where the device code keeps 32
    refused = translate(src.replace("MaxThreadsPerBlock", "ComputeCapabilityMajor"), "hip")
    assert [d.construct for d in refused.errors] == ["cudaDevAttrComputeCapabilityMajor"]
    assert "hipDeviceAttributeComputeCapabilityMajor" in refused.errors[0].rewrite


def test_tests_of_cuda_compiler_macros_are_kept_with_a_warning():
    """HIP's compilers define no __CUDA_ARCH__: the code under #if __CUDA_ARCH__ >= 800 would
    silently disappear."""
    src = "#if __CUDA_ARCH__ >= 800\n__device__ float f() { return 1.0f; }\n#endif\n"
    result = translate(src, "hip", filename="k.cu")
    assert result.ok and result.text.endswith(src)
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [(1, "warning", "__CUDA_ARCH__")]
    assert "__HIP_DEVICE_COMPILE__" in result.diagnostics[0].rewrite


def test_dynamic_parallelism_is_refused_and_the_files_own_macros_keep_their_names():
    src = ("#define CUBLAS_CHECK(x) x\n"
           "__global__ void child(float* x) { x[0] = 1; }\n"
           "__global__ void parent(float* x) { child<<<1, 1>>>(x); }\n"
           "void host(void** a) { CUBLAS_CHECK(cudaLaunchCooperativeKernel((void*)child, 1, 1, a, 0, 0)); }\n")
    refused = translate(src, "hip", filename="k.cu")
    assert [(d.line, d.construct) for d in refused.errors] == [(3, "dynamic parallelism")]
    ported = translate(src.replace("child<<<1, 1>>>(x);", "x[1] = 2;"), "hip", filename="k.cu")
    assert ported.ok, [str(d) for d in ported.diagnostics]
    assert "CUBLAS_CHECK(hipLaunchCooperativeKernel(" in ported.text
    assert "HIPBLAS_CHECK" not in ported.text


def test_real_shuffle_kernel_translates_to_hip_and_builds_with_hiprtc():
    src = (CORPUS.parent / "port_real" / "llmc_softmax_forward_kernel4.cu").read_text()
    result = translate(src, "hip", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    built = _hiprtc(result.text)
    assert built.ok, built.log


def test_cg_reduce_is_refused_for_hip_where_rocm_lacks_it():
    src = (CORPUS.parent / "port_real" / "llmc_layernorm_forward_kernel3.cu").read_text()
    result = translate(src, "hip", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [
        (5, "#include <cooperative_groups/reduce.h>"), (27, "cooperative groups (cg::reduce)"),
        (27, "cooperative groups (cg::plus<float>)"), (39, "cooperative groups (cg::reduce)"),
        (39, "cooperative groups (cg::plus<float>)")]


def test_bfloat16_and_cache_hints_take_rocm_names_and_plain_accesses():
    src = ("#include <cuda_bf16.h>\ntypedef __nv_bfloat16 floatX;\n"
           "__global__ void k(floatX* out, const floatX* in, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) __stcs(&out[i], __float2bfloat16(2.0f * __bfloat162float(__ldcs(&in[i]))));\n}\n")
    result = translate(src, "hip", filename="k.cu")
    assert result.ok, result.errors
    assert "typedef __hip_bfloat16 floatX;" in result.text and "#include <hip/hip_bf16.h>" in result.text
    assert "__ldcs" not in result.text and "__stcs" not in result.text
    assert "(*(&out[i]) = (__float2bfloat16(2.0f * __bfloat162float((*(&in[i]))))))" in result.text
    assert any("ROCm 6.0" in str(d) for d in result.diagnostics if d.severity == "warning")


def test_8_and_16_bit_stdint_types_build_with_hiprtc():
    """ROCm 5's hiprtc declares int32_t and wider but not int8_t..uint16_t (ggml's quant blocks
    hold int8_t): the translation defines those it uses, for hiprtc only."""
    src = ("#include <stdint.h>\n__global__ void k(const int8_t* q, const uint16_t* h, int16_t* s, "
           "uint8_t* u, int n) {\n  int i = threadIdx.x;\n"
           "  if (i < n) { s[i] = q[i] * 2; u[i] = (uint8_t)(h[i] >> 8); }\n}\n")
    result = translate(src, "hip", filename="k.cu")
    assert result.ok, result.errors
    built = _hiprtc(result.text)
    assert built.ok, built.log


#: the real kernels (tests/port_real) whose HIP translation builds without other files: with
#: hiprtc, or with hipcc where they include cooperative groups (ROCm 5's hiprtc fails inside
#: that header; the translation warns so). cudasamples_transpose.cu and
#: flashattnmin_forward_kernel.cu keep their host code and its includes (the sample's
#: helper_cuda.h, PyTorch's headers), which only their own projects provide.
_REAL_HIP = [("llmc_adamw_kernel2.cu", "hiprtc"), ("llmc_crossentropy_forward_kernel1.cu", "hiprtc"),
             ("llmc_layernorm_forward_kernel2.cu", "hiprtc"), ("llmc_matmul_forward_kernel4.cu", "hiprtc"),
             ("llmc_permute_kernel.cu", "hiprtc"), ("llmc_softmax_forward_kernel3.cu", "hiprtc"),
             ("cudasamples_shfl_scan_test.cu", "hiprtc"), ("cudasamples_scalarProd_kernel.cu", "hipcc"),
             ("cudasamples_simpleCooperativeGroups.cu", "hipcc"),  # host code and printf too
             ("cudasamples_scan.cu", "hipcc"), ("cudasamples_BlackScholes_kernel.cu", "hiprtc"),
             ("cudasamples_bitonicSort.cu", "hipcc")]


@pytest.mark.parametrize("file, compiler", _REAL_HIP)
def test_real_kernels_translate_to_hip_and_build_for_gfx90a(file, compiler, tmp_path):
    """NULL (matmul_forward_kernel4's ``bias != NULL``, shfl_scan's default argument) is
    defined for hiprtc, which has no <stddef.h>."""
    result = translate((CORPUS.parent / "port_real" / file).read_text(), "hip", filename=file)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    cg = any(d.construct == "#include <cooperative_groups.h>" for d in result.diagnostics)
    assert cg == (compiler == "hipcc")
    if compiler == "hiprtc":
        built = _hiprtc(result.text)
        assert built.ok, built.log
        return
    need_tool("hipcc", HIPCC)
    src = tmp_path / "k.hip"
    src.write_text(result.text)
    proc = subprocess.run(["hipcc", "--genco", "--offload-arch=gfx90a", str(src), "-o",
                           str(tmp_path / "k.co")], capture_output=True, text=True,
                          env=dict(os.environ, HIP_PLATFORM="amd"), timeout=300)
    assert proc.returncode == 0, proc.stderr
