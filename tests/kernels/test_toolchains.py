"""accel.kernels.toolchains compiles for real GPU targets with the real NVRTC and hiprtc, no GPU needed.

Expected values come from the kernels' sources (a __shared__ float[256] is 1024 bytes) or from
the toolchains' documented behaviour, never from accel's own output.
"""

import pytest
from gpu_toolchains import need, sass_of

from accel.kernels import toolchains as T
from accel.errors import AccelError, ArgumentError, BackendUnavailable

SHARED = """extern "C" __global__ void reverse(float* x) {
    __shared__ float tile[256];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[255 - threadIdx.x];
}
"""

BROKEN = """extern "C" __global__ void broken(float* x) {
    int i = threadIdx.x;

    x[i] = undeclared_value;
}
"""

# 24 live values per thread updated in a loop: fits in registers, spills under a small cap
HEAVY = """extern "C" __global__ void heavy(const float* x, float* y, int n) {
    float a[24];
    #pragma unroll
    for (int i = 0; i < 24; ++i) a[i] = x[threadIdx.x * 24 + i];
    for (int r = 0; r < n; ++r) {
        #pragma unroll
        for (int i = 0; i < 24; ++i) a[i] = a[i] * a[(i + 7) % 24] + a[(i + 13) % 24];
    }
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < 24; ++i) s += a[i];
    y[threadIdx.x] = s;
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name,vendor,toolchain", [
    ("sm_80", "nvidia", "nvrtc"), ("sm_90", "nvidia", "nvrtc"), ("sm_90a", "nvidia", "nvrtc"),
    ("gfx90a", "amd", "hiprtc"), ("gfx1100", "amd", "hiprtc"), ("gfx90a:sramecc+:xnack-", "amd", "hiprtc")])
def test_parse_target(name, vendor, toolchain):
    t = T.parse_target(name)
    assert (t.name, t.vendor, t.toolchain) == (name, vendor, toolchain)


@pytest.mark.parametrize("bad", ["sm90", "sm_9", "compute_90", "gfx", "GFX90A", "opencl", "", None, 90])
def test_bad_target_is_a_typed_error_naming_the_argument(bad):
    with pytest.raises(ArgumentError, match=r"^target: expected .*sm_XY.*gfx"):
        T.parse_target(bad)


def test_arch_mapping_from_device_properties():
    assert [T.cuda_arch(*cc) for cc in ((8, 0), (8, 6), (9, 0), (12, 0))] == \
        ["sm_80", "sm_86", "sm_90", "sm_120"]
    assert T.hip_arch(b"gfx90a:sramecc+:xnack-\x00\x00") == "gfx90a:sramecc+:xnack-"
    assert T.hip_arch("gfx1100") == "gfx1100"
    with pytest.raises(ArgumentError):
        T.hip_arch("Radeon")


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "gfx90a"])
def test_compiles_for_real_targets_and_reports_shared_memory(target):
    need(target)
    r = T.compile_source(SHARED, target)
    assert r.ok, r.log
    assert r.binary[:4] == b"\x7fELF" and r.path.read_bytes() == r.binary
    res = r.resources["reverse"]
    assert res.shared_bytes == 256 * 4
    assert res.registers and res.registers > 0
    assert res.spills == 0


def test_binaries_differ_per_arch():
    need("sm_80", "sm_90")
    assert T.compile_source(SHARED, "sm_80").binary != T.compile_source(SHARED, "sm_90").binary


@pytest.mark.parametrize("target,where", [("sm_90", "kernel.cu(4)"), ("gfx90a", ":4:")])
def test_compile_error_is_a_result_with_the_log(target, where):
    need(target)
    r = T.compile_source(BROKEN, target)
    assert not r.ok and r.binary is None and r.path is None
    assert "undeclared_value" in r.log and where in r.log


def test_spills_are_reported_when_registers_are_capped():
    need("sm_90")
    free = T.compile_source(HEAVY, "sm_90").resources["heavy"]
    capped = T.compile_source(HEAVY, "sm_90", options=("--maxrregcount=16",)).resources["heavy"]
    assert free.spills == 0
    assert capped.spills > 0 and capped.stack_bytes > 0


def test_wavefront_width_from_amd_metadata():
    need("gfx90a")
    # CDNA (gfx90a) runs 64-wide wavefronts, RDNA (gfx1030) 32-wide by default
    assert T.compile_source(SHARED, "gfx90a").resources["reverse"].detail["wavefront_size"] == 64
    assert T.compile_source(SHARED, "gfx1030").resources["reverse"].detail["wavefront_size"] == 32


def test_defines_reach_the_compiler():
    need("sm_90")
    src = 'extern "C" __global__ void k(int* x) { static_assert(WIDTH == 64, "width"); x[0] = WIDTH; }'
    assert T.compile_source(src, "sm_90", defines={"WIDTH": 64}).ok
    failed = T.compile_source(src, "sm_90", defines={"WIDTH": 32})
    assert not failed.ok and "width" in failed.log
    with pytest.raises(ArgumentError, match="defines"):
        T.compile_source(src, "sm_90", defines={"NOT AN IDENTIFIER": 1})


def test_cache_hit_miss_and_corruption(private_cache, tmp_path):
    need("sm_90")
    first = T.compile_source(SHARED, "sm_90")
    again = T.compile_source(SHARED, "sm_90")
    assert not first.cached and again.cached and again.binary == first.binary
    assert again.resources == first.resources
    # a torn entry is never loaded: the digest check sends it back to the compiler
    first.path.write_bytes(first.binary[: len(first.binary) // 2])
    rebuilt = T.compile_source(SHARED, "sm_90")
    assert not rebuilt.cached and rebuilt.binary == first.binary
    # another program's whole entry copied under this one's name is not loaded either
    other = T.compile_source(SHARED + "\n// another program", "sm_90")
    first.path.write_bytes(other.binary)
    first.path.with_suffix(".json").write_bytes(other.path.with_suffix(".json").read_bytes())
    assert not T.compile_source(SHARED, "sm_90").cached
    # editing a header in an include dir misses the cache
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "width.h").write_text("#define WIDTH 1\n")
    src = '#include "width.h"\nextern "C" __global__ void k(int* x) { x[0] = WIDTH; }'
    assert not T.compile_source(src, "sm_90", include_dirs=(inc,)).cached
    assert T.compile_source(src, "sm_90", include_dirs=(inc,)).cached
    (inc / "width.h").write_text("#define WIDTH 2\n")
    assert not T.compile_source(src, "sm_90", include_dirs=(inc,)).cached


def test_target_without_device_library_is_unavailable_not_a_crash():
    need("gfx90a")
    reason = T._amd_device_library_missing(T.parse_target("gfx1100"))
    if reason is None:  # a ROCm that has gfx11 device libraries builds it
        assert T.compile_source(SHARED, "gfx1100").ok
    else:
        with pytest.raises(BackendUnavailable, match="oclc_isa_version_1100"):
            T.compile_source(SHARED, "gfx1100")
        assert issubclass(T.ToolchainUnavailable, AccelError)


def test_hiprtc_crash_is_a_failed_compile_and_the_worker_restarts():
    need("gfx90a")
    if T._amd_device_library_missing(T.parse_target("gfx1100")) is None:
        pytest.skip("this ROCm has gfx1100 device libraries, so hiprtc has no known crash to provoke")
    worker = T._hiprtc()
    ok, log, code = worker.compile(SHARED, "k.hip", ["--offload-arch=gfx1100"])  # bypasses the check
    assert not ok and code is None and "crashed" in log
    assert T.compile_source(SHARED, "gfx90a", use_cache=False).ok


def test_hiprtc_and_pocl_live_in_one_process():
    """comgr's LLVM and PoCL's LLVM abort a process that loads both; the worker keeps them apart."""
    need("gfx90a")
    cl = pytest.importorskip("pyopencl", reason="pyopencl is needed to load PoCL's LLVM")
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    if not devices:
        pytest.skip("no OpenCL device to load an OpenCL compiler")
    ctx = cl.Context(devices[:1])
    cl.Program(ctx, "__kernel void k(__global float* x) { x[0] = 1.0f; }").build()
    assert T.compile_source(SHARED, "gfx90a", use_cache=False).ok


def test_toolchain_version_names_the_library():
    need("sm_90", "gfx90a")
    assert T.toolchain_version("sm_90").startswith("nvrtc ")
    assert T.toolchain_version("gfx90a").startswith("hiprtc ")


def test_build_options_order_and_arch():
    opts = T.build_options(T.parse_target("sm_80"), (13, 0), options=("-lineinfo",), defines={"A": None})
    assert opts[0] == "--gpu-architecture=sm_80" and "--ptxas-options=-v" in opts
    assert opts.index("-DA") < opts.index("-lineinfo") == len(opts) - 1
    old = T.build_options(T.parse_target("sm_80"), (12, 0))
    assert "--ptxas-options=-v" not in old  # NVRTC before 12.1 rejects ptxas options


# one m16n8k16 bf16 tensor-core instruction through inline PTX
ONE_MMA = """extern "C" __global__ void mma(const unsigned* a, const unsigned* b, float* d) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    unsigned t = threadIdx.x;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[4 * t]), "r"(a[4 * t + 1]), "r"(a[4 * t + 2]), "r"(a[4 * t + 3]),
                   "r"(b[2 * t]), "r"(b[2 * t + 1]));
    for (int i = 0; i < 4; ++i) d[4 * t + i] = c[i];
}
"""


def _sass(source: str, name: str, options: tuple[str, ...] = ()) -> dict:
    need("sm_90")
    r = T.compile_source(source, "sm_90", options=options, use_cache=False)
    assert r.ok, r.log
    return sass_of(r, name)


def test_sass_counts_see_tensor_core_instructions():
    assert _sass(ONE_MMA, "mma")["HMMA"] == 1
    assert _sass(SHARED, "reverse")["HMMA"] == 0


def test_sass_counts_see_local_memory():
    # spills under a register cap are stores to and loads from local memory
    counts = _sass(HEAVY, "heavy", ("--maxrregcount=16",))
    assert counts["LDL"] >= 1 and counts["STL"] >= 1
    free = _sass(HEAVY, "heavy")
    assert free["LDL"] == free["STL"] == 0 and free["FFMA"] >= 24


def test_sass_is_counted_when_asked_and_kept_with_the_cached_entry():
    need("sm_90")
    plain = T.compile_source(ONE_MMA, "sm_90")
    assert plain.ok and "sass" not in plain.resources["mma"].detail  # running never needs it
    asked = T.compile_source(ONE_MMA, "sm_90", sass=True)  # a cache hit, disassembled now
    assert asked.cached and asked.resources["mma"].detail["sass"]["HMMA"] == 1
    again = T.compile_source(ONE_MMA, "sm_90")  # the counts were stored with the entry
    assert again.cached and again.resources["mma"].detail["sass"]["HMMA"] == 1
    assert again.resources["mma"].registers == plain.resources["mma"].registers
