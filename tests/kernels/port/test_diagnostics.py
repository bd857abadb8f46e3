"""What accel port refuses, on which line, and that it then writes nothing and exits non-zero;
plus the translations that need analysis (address spaces, CUDA's unsigned indices, OpenCL's
reserved words), checked by running them on PoCL."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")

from accel.kernels.port import translate  # noqa: E402
from repo_paths import TESTS  # noqa: E402

CORPUS = TESTS / "cuda_corpus"


def _errors(src: str, to: str = "opencl") -> list[tuple[int, str]]:
    result = translate(src, to, filename="k.cu")
    assert (result.text is None) == bool(result.errors)
    return [(d.line, d.construct) for d in result.errors]


#: warp_reduce.cu with a thread-dependent early return before the shuffles: not every thread of
#: the block reaches them, so the local-memory emulation (a barrier) has no faithful form
_DIVERGENT = (CORPUS / "warp_reduce.cu").read_text().replace(
    "    float v = i < n ? x[i] : 0.0f;\n", "    if (i >= n) return;\n    float v = x[i];\n")


def test_warp_shuffle_after_a_divergent_return_is_refused_with_its_lines():
    assert "if (i >= n) return;" in _DIVERGENT
    result = translate(_DIVERGENT, "opencl", filename="warp_reduce.cu")
    assert result.text is None
    assert [(d.line, d.construct) for d in result.errors] == [(9, "__shfl_down_sync")]
    first = str(result.errors[0])
    assert first.startswith("warp_reduce.cu:9: __shfl_down_sync: accel port emulates it through "
                            "local memory and a barrier")
    assert "the return on line 6 is taken by only some threads" in first
    assert "; suggested rewrite: keep the call out of thread-dependent branches" in first


#: macros hiding what the uniformity analysis must see (each once translated, then wrote past
#: its bound, computed wrong sums, or deadlocked PoCL): (source, shuffle line, why)
_MACRO_DIVERGENCE = [
    ("#define GUARD(i, n) if ((i) >= (n)) return\n"
     "__global__ void k(float* out, const float* in, int n) {\n"
     "    int t = blockIdx.x * blockDim.x + threadIdx.x;\n    GUARD(t, n);\n    float v = in[t];\n"
     "    v += __shfl_xor_sync(0xffffffff, v, 1);\n    out[t] = v;\n}\n", 6, "the macro GUARD on line 4"),
    ("#define LOOP(i, n) for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)\n"
     "__global__ void k(float* out, const float* in, int n) {\n    LOOP(i, n) {\n        float v = in[i];\n"
     "        v += __shfl_xor_sync(0xffffffff, v, 1);\n        out[i] = v;\n    }\n}\n", 5,
     "the macro LOOP on line 3"),
    ("#define IS_LEADER (threadIdx.x < 32)\n"
     "__global__ void k(float* out, const float* in) {\n    float v = in[threadIdx.x];\n"
     "    if (IS_LEADER) v += __shfl_xor_sync(0xffffffff, v, 1);\n    out[threadIdx.x] = v;\n}\n", 4,
     "the condition on line 4 ((IS_LEADER))"),
    ("#define SKIP_IF(c) if (c) continue\n"
     "__global__ void k(float* out, const float* in, int n) {\n    int t = threadIdx.x;\n    float v = in[t];\n"
     "    for (int r = 0; r < 2; r++) {\n        SKIP_IF(t >= n);\n"
     "        v += __shfl_xor_sync(0xffffffff, v, 1);\n    }\n    out[t] = v;\n}\n", 7,
     "the macro SKIP_IF on line 6"),
]


@pytest.mark.parametrize("src, at, why", _MACRO_DIVERGENCE)
def test_a_shuffle_behind_a_macro_with_divergence_is_refused_naming_the_macro(src, at, why):
    result = translate(src, "opencl", filename="k.cu")
    assert result.text is None and [(d.line, d.construct) for d in result.errors] == [(at, "__shfl_xor_sync")]
    assert why in str(result.errors[0])


def test_uniform_macros_still_let_a_shuffle_translate():
    src = ("#define FULL 0xffffffff\n#define WARP 32\n#define BLOCKS (gridDim.x * blockDim.x)\n"
           "#define CEIL(a, b) (((a) + (b) - 1) / (b))\n"
           "__global__ void k(float* out, const float* in, int n) {\n"
           "    float v = in[blockIdx.x * blockDim.x + threadIdx.x];\n"
           "    for (int r = 0; r < CEIL(n, WARP) && r < BLOCKS; r++)\n"
           "        v += __shfl_xor_sync(FULL, v, 1);\n    out[threadIdx.x] = v;\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert result.errors == [] and result.text is not None


def test_template_without_explicit_instantiation_is_refused_with_its_line():
    src = (CORPUS / "template_scale.cu").read_text().replace(
        "template __global__ void scale<float>(float*, float, int);", "")
    assert _errors(src) == [(3, "template")]


def test_explicit_instantiations_expand_with_original_lines():
    src = (CORPUS / "template_scale.cu").read_text() + (
        "template __global__ void scale<unsigned int>(unsigned int*, unsigned int, int);\n"
        "__global__ void k(float* x) {\n  x[0] = unknown_fn(x[1]);\n}\n")
    result = translate(src, "opencl", filename="t.cu")
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [
        (3, "warning", "template scale<float>"), (3, "warning", "template scale<unsigned int>"),
        (14, "error", "unknown_fn")]


K = "__global__ void k(float* x, int* c, unsigned long long* u) {\n"  # line 1 of every case


@pytest.mark.parametrize("body, construct", [
    ('  printf("%f", x[0]);', "printf"),
    ('  asm("trap;");', "inline PTX"),
    ("  cooperative_groups::this_grid().sync();", "cooperative groups (cooperative_groups::this_grid)"),
    ("  x[0] = tex1Dfetch<float>(0, 1);", "tex1Dfetch"),
    ("  x[0] = __shfl_sync(0x0000ffff, x[1], 0);", "__shfl_sync"),  # a partial mask
    ("  if (x[0] > 0) x[0] = __shfl_sync(0xffffffff, x[1], 0);", "__shfl_sync"),  # divergent
    ("  wmma::fill_fragment(f, 0.0f);", "tensor-core intrinsics (wmma::fill_fragment)"),
    ("  atomicSub(&x[0], 1.0f);", "atomicSub on float"),
    ("  atomicAdd(&u[0], 1ull);", "atomicAdd on ulong"),
    ("  atomicInc(&c[0], 5u);", "atomicInc on int"),
    ("  __threadfence();", "__threadfence"),
    ("  if (__any_sync(0xffffffff, x[0] > 0)) c[0] = 1;", "__any_sync"),
    ("  c[0] = __reduce_add_sync(0xffffffff, c[1]);", "__reduce_add_sync"),
    ("  k<<<1, 1>>>(x, c, u);", "dynamic parallelism"),
    ("  float& r = fmaxf(x[0], 1.0f);", "declarator"),  # a reference to no lvalue
    ("  x[0] = my_helper(x[1]);", "my_helper"),
    ("  float* p;", "pointer p"),
    ("  { __shared__ float pad[4]; pad[0] = 1; }", "__shared__ array"),  # hoisting would clash
])
def test_untranslatable_constructs_are_reported_on_their_line(body, construct):
    errors = _errors(K + "  int pad = 0;\n" + body + "\n}\n")
    assert (3, construct) in errors, errors


@pytest.mark.parametrize("src, line, construct", [
    ("template <typename T>\n__device__ T sq(T v) { return v * v; }\n", 1, "template"),
    ("__device__ float g;\n__global__ void k() {}\n", 1, "program-scope variable"),
    ("#define SCRATCH(n) __shared__ float n[32]\n__global__ void k(int* x) { SCRATCH(t); }\n", 1,
     "macro SCRATCH"),
    ("#include <mma.h>\n__global__ void k() {}\n", 1, "#include <mma.h>"),
    ("__global__ void k(const float3* p) {}\n", 1, "float3 pointer"),
    ("__global__ void k(bool n) {}\n", 1, "bool kernel argument"),
    ("__global__ void k(__half h) {}\n", 1, "half argument"),
    ("__global__ void k(__half* h, float* x) {\n  x[0] = h[1];\n}\n", 2, "half element access"),
    ("__global__ void k(__half* h) {\n  h[0] = h[1] * h[2];\n}\n", 2, "half store"),
    ("__device__ int f(int n) { return n ? f(n - 1) : 0; }\n__global__ void k(int* x) { x[0] = f(3); }\n",
     1, "recursion through f"),
    ("__device__ void z(float* p) { p[0] = 0; }\n"
     "__global__ void k(float* x, int c) {\n  __shared__ float s[4];\n  z(x);\n  z(s);\n"
     "  z(c ? x : s);\n}\n", 1, "pointer parameter p"),
    ("__global__ void k(float* x) {\n  extern __shared__ float a[];\n  extern __shared__ float b[];\n}\n",
     3, "second extern __shared__ array"),
    ("__global__ void kernel(float* x) {}\n", 1, "kernel name kernel"),
    ("namespace a = b;\n__global__ void k() {}\n", 1, "C++ namespace (namespace a)"),
])
def test_file_level_constructs_are_reported_on_their_line(src, line, construct):
    assert (line, construct) in _errors(src)


def test_dialect_refuses_dynamic_shared_memory():
    assert _errors((CORPUS / "stencil_halo.cu").read_text(), "dialect") == [(6, "extern __shared__")]


def _cli(tmp_path, file: Path, *extra: str) -> int:
    from accel.__main__ import main

    return main(["port", str(file), *extra])


def test_cli_exits_1_writes_nothing_and_prints_file_line_diagnostics(tmp_path, capsys):
    out, src = tmp_path / "warp.cl", tmp_path / "warp_reduce.cu"
    src.write_text(_DIVERGENT)
    assert _cli(tmp_path, src, "--to", "opencl", "-o", str(out)) == 1
    assert not out.exists()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{src}:9: __shfl_down_sync: ")
    assert err[-1] == ("accel port: 1 construct cannot be translated to opencl faithfully; "
                       "nothing was written")


def test_cli_writes_the_translation_and_exits_0(tmp_path, capsys):
    out = tmp_path / "saxpy.cl"
    assert _cli(tmp_path, CORPUS / "saxpy_gridstride.cu", "--to", "opencl", "-o", str(out)) == 0
    assert "__kernel void saxpy(" in out.read_text()
    assert _cli(tmp_path, CORPUS / "warp_reduce.cu", "--to", "hip") == 0  # warnings only
    captured = capsys.readouterr()
    assert "__shfl_down(v, offset, 32)" in captured.out
    assert "warp_reduce.cu:8: warning: __shfl_down_sync" in captured.err


def test_cli_reports_an_unreadable_file(tmp_path, capsys):
    assert _cli(tmp_path, tmp_path / "missing.cu", "--to", "hip") == 2
    assert "FILE: expected a readable CUDA source file" in " ".join(capsys.readouterr().err.split())


def test_translate_validates_its_arguments():
    from accel.errors import ArgumentError

    with pytest.raises(ArgumentError, match="to: expected one of"):
        translate("", "metal")
    with pytest.raises(ArgumentError, match="source: expected CUDA source as str"):
        translate(b"__global__ void k() {}", "hip")


# -- translations that need analysis, run on PoCL ---------------------------------------------------
ANALYSIS = r"""
#include <stdint.h>
__device__ __forceinline__ float first(const float* p) { return __ldg(p); }
__device__ void store(float* dst, float v) { dst[0] = v; }

extern "C" __global__ void analysed(const float* __restrict__ x, float* out, long long* wide,
                                    int* flags, uint32_t n) {
    extern __shared__ char smem[];
    float* stage = (float*)smem;          // a __local pointer through a cast of a __local array
    int global = threadIdx.x;             // an OpenCL keyword as a variable name
    stage[global] = x[global] * 2.0f;
    __syncthreads();
    float4 v = make_float4(stage[global], 1.0f, __fdividef(1.0f, 4.0f), (float)n);
    store(&out[4 * global], v.x + v.y);   // a __global pointer into a device function
    store(stage + global, v.z + v.w);     // the same function with a __local one: a copy
    wide[global] = threadIdx.x - 1;       // CUDA: unsigned 32-bit wrap, then widened
    flags[global] = threadIdx.x - 1 < 5u; // false for thread 0 in CUDA (unsigned compare)
    out[4 * global + 1] = first(x + global) + static_cast<float>(n);
}
"""


def test_a_function_called_in_a_macro_with_two_address_spaces_is_refused_not_garbled():
    """A macro's body is translated as a text of its own: a copy per address space cannot be
    picked for a call in it (its byte positions are not the file's), so the function is refused
    on its parameter, naming the macro call, instead of rewriting the file at the wrong bytes."""
    src = ("__constant__ float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};\n"
           "__device__ float get(const float* p, unsigned i) { return p[i]; }\n"
           "#define FROM_TABLE() get(table, threadIdx.x % 4)\n"
           "__global__ void k(float* y) {\n    __shared__ float s[64];\n"
           "    y[threadIdx.x] = get(s, 0) + get(y, 0) + FROM_TABLE();\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(2, "pointer parameter p"), (2, "call of get")]
    assert "macro's body" in str(result.errors[1])


def test_two_address_spaces_are_refused_where_a_call_passes_an_unknown_one():
    """One copy per address space needs every call's space (a function called with a __global
    and a __local pointer is copied, see test_semantics); one it cannot infer is refused."""
    assert _errors(ANALYSIS) == []
    src = ANALYSIS.replace("store(stage + global, v.z + v.w);",
                          "store(stage + global, v.z + v.w); store(n ? out : stage, 0.0f);")
    assert _errors(src) == [(4, "pointer parameter dst"), (15, "call of store")]


@pytest.fixture(scope="module")
def backend(opencl_backend):
    return opencl_backend


def test_address_spaces_unsigned_indices_and_keywords_run_as_cuda_would(backend):
    import accel
    from accel.kernel import kernel

    src = ANALYSIS.replace("store(stage + global, v.z + v.w);", "out[4 * global + 2] = v.z + v.w;")
    result = translate(src, "opencl", filename="analysed.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    n = 8
    x = np.arange(n, dtype=np.float32) + 0.5
    out = accel.asarray(np.zeros(4 * n, np.float32), backend=backend)
    wide = accel.asarray(np.zeros(n, np.int64), backend=backend)
    flags = accel.asarray(np.full(n, 7, np.int32), backend=backend)
    kernel(result.text, "analysed", backend=backend)(
        1, n, accel.asarray(x, backend=backend), out, wide, flags,
        np.uint32(n), shared_mem=4 * n)
    got = out.numpy().reshape(n, 4)
    np.testing.assert_array_equal(got[:, 0], 2 * x + 1)
    np.testing.assert_array_equal(got[:, 1], x + n)
    np.testing.assert_array_equal(got[:, 2], np.float32(0.25) + n)
    tid = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(wide.numpy(), (tid - 1) % 2**32)  # 4294967295 for thread 0
    np.testing.assert_array_equal(flags.numpy(), ((tid - 1) % 2**32 < 5).astype(np.int32))


# -- robustness: damaged input gives diagnostics, never an exception --------------------------------
def test_damaged_sources_never_crash_the_translator():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    sources = [p.read_text() for p in sorted(CORPUS.glob("*.cu"))]

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(st.sampled_from(sources), st.data(), st.sampled_from(["opencl", "hip", "dialect"]))
    def check(src, data, to):
        lines = src.splitlines(keepends=True)
        drop = data.draw(st.sets(st.integers(0, len(lines) - 1), min_size=1, max_size=3))
        damaged = "".join(line for i, line in enumerate(lines) if i not in drop)
        result = translate(damaged, to, filename="damaged.cu")
        assert result.ok == (not result.errors)
        assert all(1 <= d.line <= damaged.count("\n") + 1 for d in result.diagnostics)

    check()


def test_unsuffixed_literals_keep_cuda_double_arithmetic(backend):
    import accel
    from accel.kernel import kernel

    src = ("__global__ void tenth(float* x, int n) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    if (i < n) x[i] = x[i] * 0.1;\n}\n")
    result = translate(src, "opencl", filename="tenth.cu")
    assert [(d.line, d.severity, d.construct) for d in result.diagnostics] == [
        (3, "warning", "double literal 0.1")]
    x = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    as_cuda = (x.astype(np.float64) * 0.1).astype(np.float32)
    assert (as_cuda != x * np.float32(0.1)).any()  # the two readings really differ on this data
    dx = accel.asarray(x, backend=backend)
    kernel(result.text, "tenth", backend=backend)(32, 128, dx, np.int32(x.size))
    np.testing.assert_array_equal(dx.numpy(), as_cuda)


SUBSET = r"""
#include <cuda_runtime.h>
typedef unsigned int u32;
__constant__ float coeffs[4] = {0.5f, 0.25f, 0.125f, 2.0f};

__device__ float dot4(const float* c, float4 v) {  // called with __constant__ memory
    return c[0] * v.x + c[1] * v.y + c[2] * v.z + c[3] * v.w;
}

extern "C" {
__global__ void vec(const float4* __restrict__ in, float* out, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 v = __ldg(&in[i]);
    float4 w = make_float4(v.w, v.z, v.y, v.x);
    float acc = 0.0f;
    int k = 0;
    do {
        switch (k) {
            case 0: acc += dot4(coeffs, v); break;
            default: acc -= dot4(coeffs, w);
        }
        ++k;
    } while (k < 2);
    out[i] = acc;
}

__global__ void prefix(const float* x, float* out, int n) {
    float s = 0.0f;
    int j = 0;
    for (const float* p = x; p < x + n; ++p) {
        s += *p;
        out[j++] = s;
    }
}
}
"""


def test_typedefs_constants_vectors_and_pointer_loops_run(backend):
    import accel
    from accel.kernel import kernel

    result = translate(SUBSET, "opencl", filename="subset.cu")
    assert result.ok and not result.diagnostics, "\n".join(map(str, result.diagnostics))
    n = 37
    x = np.random.default_rng(0).integers(-8, 8, (n, 4)).astype(np.float32)  # exact sums
    out = accel.asarray(np.zeros(n, np.float32), backend=backend)
    kernel(result.text, "vec", backend=backend)(2, 32, accel.asarray(x, backend=backend), out,
                                                np.uint32(n))
    c = np.array([0.5, 0.25, 0.125, 2.0], np.float32)
    np.testing.assert_array_equal(out.numpy(), x @ c - x[:, ::-1] @ c)
    sums = accel.asarray(np.zeros(n, np.float32), backend=backend)
    kernel(result.text, "prefix", backend=backend)(1, 1, accel.asarray(x[:, 0].copy(), backend=backend),
                                                   sums, np.int32(n))
    np.testing.assert_array_equal(sums.numpy(), np.cumsum(x[:, 0]))


def test_host_code_is_left_out_of_opencl_with_warnings():
    src = ("#include <stdio.h>\n"
           "float host_buffer[16];\n"
           "__global__ void k(float* x) { x[0] = 1.0f; }\n"
           "int main() { printf(\"%f\", host_buffer[0]); return 0; }\n")
    result = translate(src, "opencl", filename="app.cu")
    assert result.ok
    assert [(d.line, d.severity) for d in result.diagnostics] == [(1, "warning"), (2, "warning"),
                                                                  (4, "warning")]
    body = result.text.split("\n", 1)[1]  # after the translation's header comment
    assert body == "__kernel void k(__global float* x) { x[0] = 1.0f; }\n"


def test_every_use_of_a_refused_declaration_is_named_with_a_fitting_rewrite():
    src = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(float* x, int* out) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  x[0] += 1.0f;
  grid.sync();
  block.sync();
  unsigned m = __ballot_sync(0xffffffff, x[1] > 0);
  out[0] = __popc(m);
}
"""
    result = translate(src, "opencl", filename="k.cu")
    found = {(d.line, d.construct): d.rewrite for d in result.errors}
    assert found[(7, "cooperative groups (grid.sync)")].startswith("split the kernel")
    assert not any(line in (1, 2, 5, 8) for line, _ in found)  # block groups translate
    assert "prefix scan" in found[(9, "__ballot_sync")]


def test_a_refused_macro_is_named_at_each_use_and_expression_or_statement_macros_translate():
    src = ("#define TID (blockIdx.x * blockDim.x + threadIdx.x)\n"
           "#define SCRATCH(n) __shared__ float n[32]\n"
           "#define STORE(p, v) do { (p)[threadIdx.x] = (v); } while (0)\n"
           "__global__ void k(float* x, int n) {\n"
           "  if (TID < n) x[TID] = expf(x[TID]);\n"
           "  SCRATCH(buf);\n"
           "  STORE(x, 1.0f);\n"
           "}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(2, "macro SCRATCH"), (6, "macro SCRATCH")]
    ok = translate("".join(ln for ln in src.splitlines(True) if "SCRATCH" not in ln), "opencl")
    assert "#define TID ((uint)get_group_id(0) * (uint)get_local_size(0) + (uint)get_local_id(0))" in ok.text
    assert "#define STORE(p, v) do { (p)[(uint)get_local_id(0)] = (v); } while (0)" in ok.text


def test_stats_count_uses_per_construct_and_the_share_of_kernels(tmp_path, capsys):
    import json

    from accel.__main__ import main

    (tmp_path / "ok.cu").write_text("__global__ void a(float* x) {\n  x[threadIdx.x] = expf(x[0]);\n"
                                    "  x[1] = expf(x[2]);\n}\n")
    (tmp_path / "bad.cu").write_text("__global__ void b(float* x) {\n  __threadfence();\n}\n"
                                     "__global__ void c(int* y) { atomicAdd(&y[0], 1); }\n")
    assert main(["port", "--stats", "--json", str(tmp_path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["files"], stats["files_ported"], stats["kernels"], stats["kernels_ported"]) == (2, 1, 3, 1)
    assert stats["constructs"]["expf"] == {"translated": 2, "warned": 2, "refused": 0}
    assert stats["constructs"]["__threadfence"]["refused"] == 1
    assert stats["constructs"]["atomicAdd"]["translated"] == 1
    assert main(["port", "--stats", str(tmp_path / "ok.cu")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("accel port --stats (opencl): 1 of 1 files, 1 of 1 kernels ported (100.0%)")
    assert "expf" in text


def test_several_files_without_stats_is_a_usage_error(tmp_path):
    from accel.__main__ import main

    (tmp_path / "a.cu").write_text("__global__ void a() {}\n")
    assert main(["port", str(tmp_path / "a.cu"), str(tmp_path / "a.cu"), "--to", "opencl"]) == 2
    assert main(["port", str(tmp_path / "a.cu")]) == 2


# -- syntax, names and preprocessor conditions: refused clearly, never passed through ----------------
@pytest.mark.parametrize("to", ["opencl", "hip", "dialect"])
@pytest.mark.parametrize("body, line", [
    ("  y[0] = 1;\n", 2),  # the closing } is missing: expected after the last statement
    ("  float (a = y[0];\n  y[1] = a;\n}\n", 2),
    ("  float a[4 = {0};\n  y[1] = a[0];\n}\n", 2),
    ("  int b = 3 @ 4;\n  y[0] = b;\n}\n", 2),
    ("  y[0] = 1;\0\n}\n", 2),
])
def test_syntax_errors_are_refused_once_on_their_line_for_every_target(body, line, to):
    result = translate("__global__ void k(float* y) {\n" + body, to, filename="k.cu")
    assert not result.ok
    assert [(d.line, d.construct) for d in result.errors] == [(line, "syntax")]
    assert str(result.errors[0]).startswith(f"k.cu:{line}: syntax: the parser ")


def test_cuda_alignment_spellings_translate_to_the_opencl_attribute():
    src = ("__global__ void k(float* y) {\n"
           "  extern __shared__ __align__(16) float buf[];\n"
           "  __shared__ __align__(8) float tile[64];\n"
           "  alignas(16) __shared__ float wide[64];\n"
           "  buf[threadIdx.x] = tile[threadIdx.x] + wide[threadIdx.x];\n"
           "  y[0] = buf[1];\n}\n")
    text = translate(src, "opencl", filename="k.cu").text
    assert "__kernel void k(__global float* y, __local float* buf) {" in text
    assert "__local __attribute__((aligned(8))) float tile[64];" in text
    assert "__attribute__((aligned(16))) __local float wide[64];" in text
    assert "__align__" not in text and "alignas" not in text and "threadIdx" not in text
    assert "__shared__ __align__(8) float tile[64];" in translate(src, "hip").text  # HIP has it


@pytest.mark.parametrize("to", ["opencl", "dialect"])
@pytest.mark.parametrize("src, line, construct", [
    ("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"
     "__global__ void k(int* x) { x[threadIdx.x] = 2; }\n", 2, "overloaded function k"),
    ("__device__ float f(float v) { return v; }\n__device__ int f(int v) { return v; }\n"
     "__global__ void k(float* x) { x[0] = f(x[1]); }\n", 2, "overloaded function f"),
    ("__device__ int min(int a, int b) { return a < b ? a : b; }\n"
     "__global__ void k(int* x) { x[0] = min(x[1], x[2]); }\n", 1, "overloaded function min"),
    ("__global__ void dot(float* x) { x[0] = 1.0f; }\n", 1, "kernel name dot"),
])
def test_definitions_opencl_cannot_tell_apart_are_refused(src, line, construct, to):
    """OpenCL C has no overloading: the first of two definitions was left in the output as
    untranslated CUDA."""
    errors = translate(src, to, filename="k.cu").errors
    assert [(d.line, d.construct) for d in errors] == [(line, construct)]


@pytest.mark.parametrize("src, found", [
    ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700\n#define S 2\n#endif\n"
     "__global__ void k(int* x) { x[0] = 1; }\n", [(1, "__CUDA_ARCH__"), (1, "__CUDA_ARCH__")]),
    ("__global__ void k(int* x) {\n#ifdef __CUDACC__\n  x[0] = 1;\n#endif\n}\n", [(2, "__CUDACC__")]),
    ("extern __shared__ float sdata[];\n__global__ void k(float* x) { sdata[0] = x[0]; }\n",
     [(1, "__shared__ at file scope")]),
    ("__device__ float4 operator+(float4 a, float4 b) { return a; }\n",
     [(1, "operator overloading (operator+)")]),
    ("__global__ void k(float* x) { x[0] = sizeof(float3); }\n", [(1, "sizeof(float3)")]),
])
def test_constructs_are_named_as_what_they_are(src, found):
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == found
    assert "outside the CUDA subset" not in " ".join(map(str, result.errors))
    if "extern" in src:
        assert "extern __shared__ float s[]; there" in result.errors[0].rewrite


def test_deep_nesting_translates_or_is_refused_in_one_line(tmp_path, capsys):
    """A 500-branch else-if chain or a 3000-term sum raised RecursionError (a traceback, exit
    1), from translate() and --stats alike."""
    from accel.__main__ import main

    chain = ("__global__ void k(int* x, int n) {\n  if (n == 0) x[0] = 0;\n"
             + "".join(f"  else if (n == {i}) x[0] = {i};\n" for i in range(1, 500)) + "}\n")

    def total(terms):
        return ("__global__ void k(float* x) {\n  x[0] = " + " + ".join(f"x[{i}]" for i in range(terms))
                + ";\n}\n")
    for to in ("opencl", "hip", "dialect"):
        assert translate(chain, to).ok and translate(total(3000), to).ok
        deep = translate(total(20000), to, filename="deep.cu")
        assert [(d.line, d.construct) for d in deep.errors] == [(2, "nesting")]
    for name, src in (("chain.cu", chain), ("sum.cu", total(3000)), ("deep.cu", total(20000))):
        (tmp_path / name).write_text(src)
    assert main(["port", "--stats", str(tmp_path)]) == 0
    assert "2 of 3 files" in capsys.readouterr().out
    assert main(["port", str(tmp_path / "deep.cu"), "--to", "opencl"]) == 1
    assert capsys.readouterr().err.splitlines()[0].startswith(f"{tmp_path / 'deep.cu'}:2: nesting: ")


def test_a_byte_order_mark_is_not_part_of_the_code(tmp_path, capsys, backend):
    from accel.__main__ import main
    from accel.kernel import kernel

    src = tmp_path / "bom.cu"
    src.write_bytes(b"\xef\xbb\xbf__global__ void k(float* x) { x[threadIdx.x] = 2.0f; }\n")
    assert main(["port", str(src), "--to", "opencl", "-o", str(tmp_path / "bom.cl")]) == 0
    text = (tmp_path / "bom.cl").read_text()
    assert "\ufeff" not in text
    kernel(text, "k", backend=backend)  # builds
    capsys.readouterr()
    assert main(["port", "--stats", str(src)]) == 0
    assert "1 of 1 files, 1 of 1 kernels ported" in capsys.readouterr().out


def test_stats_count_each_file_once_and_an_unreadable_file_is_a_usage_error(tmp_path, capsys):
    from accel.__main__ import main

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.cuh").write_text("__global__ void a(float* x) { x[0] = 1.0f; }\n")
    (tmp_path / "b.cu").write_text("__global__ void b(float* x) { __threadfence(); }\n")
    assert main(["port", "--stats", str(tmp_path), str(tmp_path / "sub" / "a.cuh"), str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("accel port --stats (opencl): 1 of 2 files")
    (tmp_path / "latin1.cu").write_bytes(b"// caf\xe9\n__global__ void c(float* x) {}\n")
    for args in (["--stats", str(tmp_path)], [str(tmp_path / "latin1.cu"), "--to", "opencl"]):
        assert main(["port", *args]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "FILE: expected a readable CUDA source file" in err and "latin1.cu" in err


def test_output_onto_the_source_file_is_a_usage_error(tmp_path, capsys):
    from accel.__main__ import main

    src = tmp_path / "a.cuh"
    cuda = "__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"
    src.write_text(cuda)
    for out in (src, tmp_path / "." / "a.cuh"):
        assert main(["port", str(src), "--to", "opencl", "-o", str(out)]) == 2
        assert "a file other than the CUDA source" in capsys.readouterr().err
    assert src.read_text() == cuda


@pytest.mark.parametrize("to", ["opencl", "hip", "dialect"])
def test_stats_count_every_warned_use_as_translated_too(to):
    """docs/porting.md: translated counts include warned uses (warpSize on HIP counted none)."""
    from accel.kernels.port.stats import tally

    files = sorted(CORPUS.glob("*.cu")) + sorted((CORPUS.parent / "port_corpus").glob("*.cu"))
    entries = [(p, p.read_text(), translate(p.read_text(), to, filename=p.name)) for p in files]
    extra = ("#include <cstdio>\nfloat host[4];\nvoid run() {}\n__global__ void k(float* x, float* y) {\n"
             "  float v = x[threadIdx.x & 31] * 0.5;\n  for (int o = warpSize / 2; o > 0; o /= 2)\n"
             "    v += __shfl_down_sync(0xffffffff, v, o);\n  y[0] = v;\n}\n"
             "__device__ void put(float* p) { p[0] = 1.0f; }\n"  # copied per address space
             "__global__ void k2(float* y) { __shared__ float s[2]; put(s); put(y); }\n")
    entries.append(("extra.cu", extra, translate(extra, to, filename="extra.cu")))
    stats = tally(entries, to)
    assert {k: v for k, v in stats["constructs"].items() if v["warned"] > v["translated"]} == {}


@pytest.mark.parametrize("to", ["opencl", "dialect"])
def test_struct_members_without_cudas_layout_or_used_as_half_values_are_refused(to):
    """A struct must keep CUDA's layout byte for byte (no pointer, bool or 1-byte enum
    members), reach a kernel through a pointer, and its half members are read only by a
    conversion to float."""
    src = ("#include <cuda_fp16.h>\nenum class Kind : unsigned char { A, B };\n"
           "typedef struct { half d; float* p; bool b; Kind k; } blk;\n"
           "__global__ void k(const blk* x, blk v, float* y) {\n"
           "  y[0] = x[0].d * 2.0f;\n  y[1] = __half2float(x->d) + (float)x[1].d;\n}\n")
    result = translate(src, to, filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [
        (3, "struct member p"), (3, "struct member b"), (3, "struct member k"),
        (4, "struct kernel argument v"), (5, "half member d")]


def test_host_only_code_is_left_out_with_warnings_naming_the_lines():
    """Host headers (PyTorch's, <time.h>), host functions and a macro only host code uses do
    not block the kernel: each is left out with a warning on its line."""
    src = ("#include <torch/extension.h>\n#include <time.h>\n"
           "#define SCRATCH(n) __shared__ float n[32]\n"
           "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"
           "void host() { SCRATCH(t); clock_t c = clock(); }\n")
    result = translate(src, "opencl", filename="k.cu")
    assert result.ok, [str(d) for d in result.diagnostics]
    assert [(d.line, d.construct) for d in result.diagnostics] == [
        (1, "#include <torch/extension.h>"), (2, "#include <time.h>"), (3, "macro SCRATCH"),
        (5, "host function host")]
    assert all(d.severity == "warning" for d in result.diagnostics)
    assert "SCRATCH" not in result.text and "clock" not in result.text


#: a gated activation as serving engines write it: templates over the element type, a function
#: pointer and a bool, const references, a namespace, a global-scope ::tanhf, and the activation
#: templates defined after the kernel that instantiates them (CUDA's two-phase lookup)
GATED = r"""
#include <cmath>
namespace ops {
template <typename T, T (*ACT)(const T&), bool ACT_FIRST>
__device__ __forceinline__ T gate(const T& a, const T& b) {
  return ACT_FIRST ? ACT(a) * b : a * ACT(b);
}
template <typename T, T (*ACT)(const T&), bool ACT_FIRST>
__global__ void gated(T* __restrict__ out, const T* __restrict__ in, const int d) {
  const long row = blockIdx.x;
  for (long i = threadIdx.x; i < d; i += blockDim.x)
    out[row * d + i] = gate<T, ACT, ACT_FIRST>(in[row * 2 * d + i], in[row * 2 * d + d + i]);
}
template <typename T>
__device__ __forceinline__ T silu(const T& v) { return (T)(((float)v) / (1.0f + expf(-(float)v))); }
template <typename T>
__device__ __forceinline__ T tanh_gelu(const T& v) {
  const float f = (float)v;
  return (T)(0.5f * f * (1.0f + ::tanhf(0.7978845608f * (f + 0.044715f * f * f * f))));
}
}  // namespace ops
template __global__ void ops::gated<float, ops::silu<float>, true>(float*, const float*, const int);
template __global__ void ops::gated<float, ops::tanh_gelu<float>, false>(float*, const float*, const int);
"""


def test_templates_over_function_pointers_and_bools_in_a_namespace_run(backend):
    import accel
    from accel.kernel import kernel

    result = translate(GATED, "opencl", filename="gated.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    copies = [d.construct for d in result.diagnostics if d.construct.startswith("template ")]
    assert "template gated<float, silu<float>, true>" in copies
    assert "template silu<float>" in copies  # instantiated by the kernel's copy, a round later
    rows, d = 3, 100
    x = np.random.default_rng(0).standard_normal((rows, 2 * d)).astype(np.float32) * 3
    a, b = x[:, :d].astype(np.float64), x[:, d:].astype(np.float64)
    gelu_b = 0.5 * b * (1 + np.tanh(0.7978845608 * (b + 0.044715 * b**3)))
    for name, want in (("gated_float_silu_float_true", a / (1 + np.exp(-a)) * b),
                       ("gated_float_tanh_gelu_float_false", a * gelu_b)):
        out = accel.asarray(np.zeros((rows, d), np.float32), backend=backend)
        kernel(result.text, name, backend=backend, options=result.options)(
            rows, 64, out, accel.asarray(x, backend=backend), np.int32(d))
        # float32 arithmetic of the same formulas: errors relative to the inputs' products
        assert np.max(np.abs(out.numpy() - want) / (1e-6 + np.abs(a * b) + np.abs(want))) < 1e-6


def test_a_reference_to_a_value_is_refused_unless_const():
    """A reference variable is a pointer to what it names (test_semantics runs it); bound to a
    value (no lvalue to point to), a const one is a copy, any other refused."""
    src = ("__global__ void k(float* y) {\n  const float& m = fmaxf(y[0], 0.0f);\n"
           "  float& r = fmaxf(y[0], 1.0f);\n  y[1] = m + r;\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in result.errors] == [(3, "declarator")]


def test_a_finding_inside_a_template_is_reported_once_not_per_copy():
    src = ("template <typename T>\n__global__ void k(T* y, int n) {\n"
           "    if (threadIdx.x < n) printf(\"%d\\n\", n);\n}\n"
           "template __global__ void k<float>(float*, int);\ntemplate __global__ void k<int>(int*, int);\n")
    assert _errors(src) == [(3, "printf")]


def test_a_typedef_of_a_type_opencl_lacks_blocks_only_where_device_code_uses_it():
    unused = ("#include <cuda_bf16.h>\ntypedef __nv_bfloat162 bf2_t;\n"
              "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    result = translate(unused, "opencl", filename="k.cu")
    assert result.ok and "bf2_t" not in result.text
    assert [(d.line, d.construct, d.severity) for d in result.diagnostics] == [
        (2, "typedef bf2_t", "warning")]
    used = unused.replace("float* y) { y[threadIdx.x] = 1.0f; }", "bf2_t* y) { }")
    assert _errors(used) == [(2, "__nv_bfloat162")]


#: a warp reduction under a thread-dependent if that cannot be hoisted before it (issue 44):
#: (the kernel's if, the reason named)
_WSUM = ("__device__ float wsum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o); return v; }\n"
         "__device__ float wput(float* p, float v) { p[0] = v; return wsum(v); }\n"
         "__device__ float wspin(float v) { while (v > 1.0f) v *= 0.5f; return wsum(v); }\n"
         "__global__ void k(float* x, float* out, int n) {\n  int i = threadIdx.x, lane = i % 32, wid = i / 32;\n"
         "  float v = x[i];\nBODY  out[i] = v;\n}\n")
_UNHOISTABLE = [
    ("  if (lane == 0) v = wsum(v);\n", "the condition on line 7 ((lane == 0)) can differ between the lanes of one warp"),
    ("  if (wid == 0) v = wsum(x[i]);\n", "its argument x[i] reads or writes memory (line 7)"),
    ("  if (wid == 0) { v *= 2.0f; v = wsum(v); }\n", "the statements before it in its branch (from line 7)"),
    ("  if (wid == 0) for (int r = 0; r < n; r++) v = wsum(v);\n", "it is inside a for (line 7) within the branch"),
    ("  if (wid == 0) v = wput(x, v);\n", "wput's parameter float* p is not a plain value"),
    ("  if (wid == 0) v = wspin(v);\n", "wspin has a loop on line 3 that may run a number of times that depends on the thread"),
    ("  if (wid == 0) wsum(v);\n", "its value is not simply assigned or declared"),
    ("  if (wid == 0) v = wsum(v) / lane;\n", None),  # the division stays in the branch: hoisted
    ("  if (wid == 0) { float t = v * 2.0f; v = wsum(t); }\n", None),  # t moves with the call
    ("  if (wid == 0) { float t = x[i]; v = wsum(t); }\n", "the statements before it in its branch "
     "(from line 7) run first and could change what it reads (the value of t reads or writes memory (line 7))"),
    ("  if (wid == 0) { float v2 = v; v = wsum(v2); }\n  float v2 = 0.0f;\n",
     "the statements before it in its branch (from line 7) run first and could change what it "
     "reads (v2 is declared more than once in k)"),
    ("  if (wid == 0) { float t = v; if (lane == 0) v = wsum(t); }\n", "the condition on line 7 ((lane == 0))"),
    ("  if (wid == 0) v = __shfl_down_sync(0xffffffff, v, 1);\n", None),
    ("  if (wid == 0) v = __shfl_down_sync(0xffffffff, x[i], 1);\n", "its argument x[i] reads or writes memory"),
]


@pytest.mark.parametrize("body, why", _UNHOISTABLE)
def test_a_warp_reduction_that_cannot_be_hoisted_out_of_its_branch_is_refused_with_why(body, why):
    result = translate(_WSUM.replace("BODY", body), "opencl", filename="k.cu")
    if why is None:
        assert result.ok and [d.line for d in result.diagnostics if d.construct.startswith("warp call hoisted")] == [7]
        return
    assert result.text is None and len(result.errors) == 1
    assert "can differ between threads, and it cannot be hoisted out of that branch: " + why in str(result.errors[0])


#: after ``if (C) return;``, a warp reduction that the early-exit predication cannot keep for
#: every thread (issue 44): (the kernel's lines after the return, the reason named)
_EXIT = ("__device__ float wsum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o); return v; }\n"
         "__global__ void k(const float* x, float* out, int n) {\n"
         "  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;\n"
         "  if (COND) return;\nBODY}\n")
_UNKEPT = [
    ("threadIdx.x >= n", "  float v = wsum(x[row]);\n", "its condition (threadIdx.x >= n) can differ between the lanes of one warp"),
    ("row >= n", "  float v = 0.0f;\n  for (int r = 0; r < 2; r++) v = wsum(v);\n",
     "line 6 holds a warp operation in another form than x = op(args); or T x = op(args);"),
    ("row >= n", "  float v = wsum(x[row * 32 + lane]);\n", "the argument x[row * 32 + lane] on line 5 reads or writes memory (line 5)"),
    ("row >= n", "  float a[2] = {1.0f, 2.0f};\n  float v = wsum(a[0]);\n", "the declaration on line 5 declares an array or a reference"),
]


@pytest.mark.parametrize("cond, body, why", _UNKEPT)
def test_an_early_return_that_cannot_be_kept_for_every_thread_is_refused_with_why(cond, body, why):
    result = translate(_EXIT.replace("COND", cond).replace("BODY", body), "opencl", filename="k.cu")
    assert result.text is None and result.errors
    assert "; the early return cannot be kept for every thread: " + why in str(result.errors[0])


def test_an_early_return_taken_by_whole_warps_before_a_reduction_is_kept_and_computes(opencl_backend):
    """``if (row >= n) return;`` with row the warp's index: the rows past n return whole warps;
    the others reduce their row (declarations split, stores guarded, the reduction for all)."""
    src = _EXIT.replace("COND", "row >= n").replace("BODY", (
        "  const float* xr = x + row * 64;\n  float v = xr[lane] + xr[lane + 32];\n"
        "  const float s = wsum(v);\n  if (lane == 0) out[row] = s;\n"))
    result = translate(src, "opencl", filename="k.cu")
    assert (4, "early return kept for every thread") in [(d.line, d.construct) for d in result.diagnostics]
    import accel
    from accel.kernel import kernel
    n = 5
    x = np.random.default_rng(13).integers(-9, 10, (8, 64)).astype(np.float32)
    out = accel.asarray(np.full(8, np.nan, np.float32), backend=opencl_backend)
    kernel(result.text, "k", backend=opencl_backend, options=result.options)(
        2, 128, accel.asarray(x, backend=opencl_backend), out, np.int32(n))
    got = out.numpy()
    np.testing.assert_array_equal(got[:n], x[:n].sum(1))
    assert np.isnan(got[n:]).all()


_BRANCHES = ("#include <cuda_bf16.h>\nDEFINE\n#if defined(USE_BF16)\ntypedef __nv_bfloat16 floatX;\n"
             "#else\ntypedef float floatX;\n#endif\n"
             "__global__ void k(floatX* y, const floatX* x) { y[threadIdx.x] = (float)x[threadIdx.x] * 2.0f; }\n")


def test_a_typedef_in_branches_of_an_if_types_the_code_only_where_the_branch_is_known():
    """llm.c's ``#if defined(ENABLE_BF16) typedef __nv_bfloat16 floatX; ... #else typedef
    float floatX;``: with ``#define USE_BF16`` outside any #if the first branch is certainly
    taken, and floatX is bfloat16 (its bits converted at the load and store); without it the
    build's -D options choose, and the two typedefs are refused rather than one guessed."""
    known = translate(_BRANCHES.replace("DEFINE", "#define USE_BF16"), "opencl", filename="k.cu")
    assert known.ok, "\n".join(map(str, known.diagnostics))
    assert "= accel_float_to_bf16(" in known.text and "accel_bf16_to_float(x[" in known.text
    unknown = translate(_BRANCHES.replace("DEFINE", ""), "opencl", filename="k.cu")
    assert [(d.line, d.construct) for d in unknown.errors] == [(6, "typedef floatX")]
    assert "defined as bfloat16 on line 4 and as float here" in str(unknown.errors[0])


@pytest.mark.parametrize("value, ok", [("a * 2.0f", True), ("a * 2.0", False), ("(int)a", False)])
def test_a_float_stored_to_half_memory_converts_as_cuda_does_and_only_a_float(value, ok):
    """``p[i] = v`` with p half*: C++'s __half(float) rounds to nearest even like __float2half;
    a double or an int converts straight to half in CUDA (one rounding), so it is refused."""
    src = ("#include <cuda_fp16.h>\n__global__ void k(__half* p, float a) {\n"
           f"  p[threadIdx.x] = {value};\n}}\n")
    result = translate(src, "opencl", filename="k.cu")
    if ok:
        assert result.ok and "vstore_half_rte(a * 2.0f, (uint)get_local_id(0), p)" in result.text
    else:
        assert [(d.line, d.construct) for d in result.errors] == [(3, "half store")]


def test_a_group_parameter_takes_only_its_own_kind_of_group():
    """``cg::thread_block b`` is dropped from the parameters (the block is the caller's own);
    an argument that is a tile, or no group, is refused on its line."""
    src = ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
           "__device__ void f(cg::thread_block b, float* s) { cg::sync(b); s[0] = 1.0f; }\n"
           "__global__ void k(float* x) {\n  cg::thread_block blk = cg::this_thread_block();\n"
           "  cg::thread_block_tile<32> w = cg::tiled_partition<32>(blk);\n  __shared__ float s[1];\n"
           "  f(ARG, s);\n  x[0] = s[0];\n}\n")
    ok = translate(src.replace("ARG", "blk"), "opencl", filename="k.cu")
    assert ok.ok and "void f(__local float* s)" in ok.text and "f(s)" in ok.text
    for arg in ("w", "x[0]"):
        result = translate(src.replace("ARG", arg), "opencl", filename="k.cu")
        assert [(d.line, d.construct) for d in result.errors] == [(8, "cooperative groups (f)")]
        assert "its parameter 1 is a block group" in str(result.errors[0])


def test_an_unnamed_template_parameter_is_refused_not_a_crash():
    """cuda-samples' MC_EstimatePiInlineQ: ``template <bool, class L, class R> struct IF``."""
    src = ("template <bool, class L, class R> struct IF { typedef R type; };\n"
           "template <int> __device__ float f(float x) { return x; }\n"
           "__global__ void k(float* y) { y[0] = 1.0f; }\n")
    assert [(d.line, d.construct) for d in translate(src, "opencl", filename="k.cu").errors] == [
        (1, "template"), (2, "template")]


def test_host_functions_declared_extern_c_are_left_out_of_the_text():
    """cuda-samples' oceanFFT: ``extern "C" void cudaGenerateSpectrumKernel(...) { k<<<...>>>(...); }``
    is host code, left out with its warning (it stayed in the text before)."""
    src = ('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
           'extern "C" void host(float* x) { k<<<1, 1>>>(x); }\n'
           'extern "C" {\n__global__ void k2(float* x) { x[0] = 2.0f; }\nvoid h2() {}\n}\n')
    result = translate(src, "opencl", filename="k.cu")
    assert result.ok and "host" not in result.text and "h2" not in result.text and "extern" not in result.text
    assert [(d.line, d.construct) for d in result.diagnostics] == [(2, "host function host"), (5, "host function h2")]


def test_a_warp_call_is_not_hoisted_before_a_condition_that_changes_what_it_reads():
    src = _WSUM.replace("BODY", "  int r = 0;\n  if ((r++) == 0 && wid == 0) v = wsum(v + r);\n")
    result = translate(src, "opencl", filename="k.cu")
    assert result.text is None
    assert "it cannot be hoisted out of that branch: the condition on line 8 changes r++" in str(result.errors[0])


def test_shared_arrays_after_a_kept_early_return_are_declarations_only(opencl_backend):
    src = _EXIT.replace("COND", "row >= n").replace("BODY", (
        "  __shared__ float part[4];\n  float v = x[row * 32 + lane];\n  v = wsum(v);\n"
        "  if (lane == 0) part[row % 4] = v;\n  if (lane == 0) out[row] = part[row % 4];\n"))
    result = translate(src, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    import accel
    from accel.kernel import kernel
    x = np.random.default_rng(20).integers(-9, 10, (8, 32)).astype(np.float32)
    out = accel.asarray(np.full(8, np.nan, np.float32), backend=opencl_backend)
    kernel(result.text, "k", backend=opencl_backend, options=result.options)(
        2, 128, accel.asarray(x, backend=opencl_backend), out, np.int32(6))
    np.testing.assert_array_equal(out.numpy()[:6], x[:6].sum(1))
    assert np.isnan(out.numpy()[6:]).all()


def test_a_kernels_default_argument_is_dropped_and_a_device_functions_unless_literal_refused():
    src = ("__device__ float f(float x, float s = 2.0f * 3.0f) { return x * s; }\n"
           "__global__ void k(float* y, float* z = NULL) { y[0] = 1.0f; }\n")
    result = translate(src, "opencl", filename="k.cu")
    assert [(d.line, d.construct, d.severity) for d in result.diagnostics] == [
        (1, "optional parameter declaration", "error"), (2, "kernel default argument", "warning")]
    ok = translate(src.split("\n", 1)[1], "opencl", filename="k.cu")
    assert ok.ok and "__global float* z)" in ok.text


def test_a_loop_counter_is_its_own_variable_for_the_uniformity_analysis(backend):
    """``for (int i = ...)`` twice, once under a thread-dependent if: the other loop's ``i``
    is still block-uniform, so the shuffle in it is emulated (it was refused by name)."""
    src = ("__global__ void k(float* x, int n) {\n  float v = x[threadIdx.x];\n"
           "  for (int i = 16; i > 0; i /= 2) v += __shfl_xor_sync(0xffffffff, v, i);\n"
           "  if (threadIdx.x < n) for (int i = 0; i < 3; i++) v += 1.0f;\n  x[threadIdx.x] = v;\n}\n")
    result = translate(src, "opencl", filename="k.cu")
    assert result.ok, "\n".join(map(str, result.diagnostics))
    import accel
    from accel.kernel import kernel
    x0 = np.arange(64, dtype=np.float32)
    x = accel.asarray(x0, backend=backend)
    kernel(result.text, "k", backend=backend, options=result.options)(1, 64, x, np.int32(40))
    want = np.repeat(x0.reshape(2, 32).sum(1), 32) + np.where(np.arange(64) < 40, 3, 0)
    np.testing.assert_array_equal(x.numpy(), want)
