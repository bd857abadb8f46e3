"""The cuda and hip backends: everything that does not need a GPU, against the real CuPy, NVRTC
and hiprtc installed here (no mocks). Launch geometry and the kernels' compile path are proven
for real targets; running them needs a GPU (conformance/gpu_check.sh).
"""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from gpu_toolchains import build_shipped, distinct, hot_loop, need, sass_of
from markers import cuda_gpu_count, import_cupy
from planning import gemv_tiles, gpu, gpu_launch, gpu_plan, gpu_support

import accel
import accel.kernels as K
from accel import spec as S
from accel.errors import AccelError, BackendUnavailable, CompileError
from accel.formats import get_format

from accel.backends.cupy import backend as CB
from accel.backends.cupy.build import build_kernel
from accel.backends.cupy.cuda import CUDABackend
from accel.backends.cupy.hip import HIPBackend
from accel.conformance.bench import gpu_goals
from accel.dtypes import exact_int8_matmul
from repo_paths import ROOT


@pytest.fixture(autouse=True)
def shared_binaries(gpu_build_cache, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(gpu_build_cache))


@pytest.fixture
def cupy():
    """CuPy, on a machine without a GPU (these tests check the reasons given then)."""
    cupy = import_cupy()
    if cuda_gpu_count() > 0:
        pytest.skip("checks the reasons given when no GPU is present; this machine has one")
    return cupy


# -- availability that explains itself ----------------------------------------------------------
def test_backends_listing_explains_cuda_and_hip(cupy):
    rows = {s.name: s for s in accel.backends(refresh=True)}
    cuda, hip = rows["cuda"], rows["hip"]
    assert not cuda.available and not hip.available
    if cupy.cuda.runtime.is_hip:
        assert "built for ROCm" in cuda.reason
    else:
        assert "built for CUDA" in hip.reason and "cupy-rocm" in hip.reason
        if cupy.cuda.runtime.driverGetVersion() == 0:
            assert cuda.reason.startswith("no NVIDIA GPU driver on this machine")
            assert cupy.__version__ in cuda.reason


@pytest.mark.parametrize("name", ["cuda", "hip"])
def test_unavailable_backend_raises_the_typed_error(cupy, name):
    with pytest.raises(BackendUnavailable):
        accel.get_backend(name)
    with pytest.raises(BackendUnavailable):
        accel.matmul(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), backend=name)


def test_cupy_missing_is_a_reason():
    code = ("import sys; sys.modules['cupy'] = None\n"  # an import of cupy now fails as if absent
            "from accel.backends.cupy.cuda import CUDABackend\n"
            "from accel.errors import BackendUnavailable\n"
            "try:\n    CUDABackend.devices()\nexcept BackendUnavailable as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "CuPy is not installed:" in out.stdout and "accel-portable[cuda12]" in out.stdout


def test_reasons_for_each_situation():
    common = dict(cupy_version="14.2.0", runtime_version=13000, query_error=None)
    wrong = CB.unavailable_reason("hip", built_for_hip=False, driver_version=None,
                                  **{**common, "runtime_version": None})
    assert "built for CUDA" in wrong and "cupy-rocm-7-0" in wrong
    old = CB.unavailable_reason("cuda", built_for_hip=False, driver_version=12040, device_count=None,
                                **{**common, "query_error": "cudaErrorInsufficientDriver"})
    assert "too old" in old and "CUDA 12.4" in old and "CUDA 13.0" in old
    # CUDA's minor-version compatibility: a 13.0 driver runs a 13.2 runtime
    assert CB.unavailable_reason("cuda", built_for_hip=False, driver_version=13000,
                                 device_count=1, **{**common, "runtime_version": 13020}) is None
    none = CB.unavailable_reason("cuda", built_for_hip=False, driver_version=13000, device_count=0,
                                 **common)
    assert none.startswith("no NVIDIA GPU found")
    amd = CB.unavailable_reason("hip", built_for_hip=True, driver_version=0, device_count=None,
                                **{**common, "runtime_version": 70051831})
    assert amd.startswith("no AMD GPU driver") and "ROCm runtime 7.0.51831" in amd
    failed = CB.unavailable_reason("hip", built_for_hip=True, driver_version=60342134,
                                   device_count=None, **{**common, "query_error": "hipErrorNoDevice"})
    assert "device query failed: hipErrorNoDevice" in failed


def test_version_spelling():
    assert CB.format_version("cuda", 13020) == "13.2"
    assert CB.format_version("cuda", 12080) == "12.8"
    assert CB.format_version("hip", 60342134) == "6.3.42134"


def test_arch_from_device_properties():
    assert CUDABackend.arch_of({"major": 9, "minor": 0}) == "sm_90"
    assert CUDABackend.arch_of({"major": 8, "minor": 0}) == "sm_80"
    assert HIPBackend.arch_of({"gcnArchName": b"gfx90a:sramecc+:xnack-"}) == "gfx90a:sramecc+:xnack-"
    assert HIPBackend.arch_of({"gcnArchName": "gfx1100"}) == "gfx1100"


def test_accumulator_is_honest(monkeypatch):
    mm = S.matmul_spec((4, 8), "float32", (8, 4), "float32")
    i8 = S.matmul_spec((4, 8), "int8", (8, 4), "int8")
    monkeypatch.delenv("CUPY_TF32", raising=False)
    from accel.backends.plan import accumulator

    assert accumulator(mm, gpu("sm_90", "vendor")) == "float32"
    assert accumulator(i8, gpu("sm_90", "kernels")) == "int32"
    monkeypatch.setenv("CUPY_TF32", "1")
    assert accumulator(mm, gpu("sm_90", "vendor")) == "tf32"
    assert accumulator(mm, gpu("sm_90", "kernels")) == "float32"  # our kernels never use tf32


# -- the vendor path's arithmetic, run on numpy (the same code runs on cupy arrays) ---------------
def test_bfloat16_conversions_match_ml_dtypes(rng):
    x = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 1e3,
                        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-40], np.float32),
                        # exact ties between two bfloat16 values: round half to even
                        np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)], np.float32)])
    bits = CB.f32_to_bf16_bits(np, x)
    assert np.array_equal(bits, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.array_equal(CB.bf16_bits_to_f32(np, bits), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    # quiet, negative and signalling NaNs (0x7F800001 would round into infinity without care)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], np.uint32).view(np.float32)
    assert np.isnan(CB.bf16_bits_to_f32(np, CB.f32_to_bf16_bits(np, nans))).all()


@pytest.mark.parametrize("dtype,out_dtype", [("float32", "float32"), ("float16", "float32"),
                                             ("bfloat16", "bfloat16"), ("float16", "float16")])
def test_vendor_matmul_against_float64(rng, dtype, out_dtype):
    np_in = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a = rng.standard_normal((2, 33, 70)).astype(np_in)
    b = rng.standard_normal((70, 17)).astype(np_in)
    store = (lambda v: v.view(np.uint16)) if dtype == "bfloat16" else (lambda v: v)
    got = CB.vendor_matmul(np, store(a), store(b), dtype, out_dtype)
    if out_dtype == "bfloat16":
        got = got.view(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    u_out = {"float32": 2**-24, "float16": 2**-11, "bfloat16": 2**-8}[out_dtype]
    err = np.abs(got.astype(np.float64) - ref)
    assert got.shape == (2, 33, 17)
    assert (err <= 2 * u_out * np.abs(ref) + 5 * np.sqrt(70) * 2**-24 * bound + 1e-30).all()


def test_int8_matmul_is_exact_across_chunks(rng):
    K = 3000  # three 1024-chunks: partial sums would not be exact in float32 as one chunk
    a = rng.integers(-128, 128, (5, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, 6)).astype(np.int8)
    a[0, :] = -128
    b[:, 0] = -128  # the largest products: 2**14 each, K of them
    got = exact_int8_matmul(np, a, b)
    assert got.dtype == np.int32
    assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    assert got[0, 0] == K * 2**14


# -- launch geometry: every output covered, limits declined ------------------------------------
MM_SPECS = [S.matmul_spec((1, 1), "float32", (1, 1), "float32"),
            S.matmul_spec((3, 65, 129), "bfloat16", (129, 63), "bfloat16"),
            S.matmul_spec((2, 1, 100, 64), "int8", (3, 64, 70), "int8")]


@pytest.mark.parametrize("spec", MM_SPECS)
def test_matmul_grid_covers_the_output(spec):
    [launch] = gpu_plan(spec)
    name, grid, block, d = launch.kernel, launch.grid, launch.block, launch.variant.defines
    assert name == "matmul" and block == (d["WG_N"], d["WG_M"], 1)
    cols, rows = grid[0] * d["WG_N"] * d["TN"], grid[1] * d["WG_M"] * d["TM"]
    assert cols >= spec.N > cols - d["WG_N"] * d["TN"]
    assert rows >= spec.M > rows - d["WG_M"] * d["TM"]
    assert grid[2] == spec.batch


def test_decode_attention_splits_its_keys_over_the_device():
    # flash-decoding: a decode step has one row tile per kv head, 8 groups for an H200's 132
    # SMs; its keys are split into chunks (each at least 2 tiles), then merged per output value
    decode = S.attention_spec((1, 32, 1, 128), (1, 8, 4096, 128), (1, 8, 4096, 128), ("float32",) * 3)
    attend, combine = gpu_plan(decode)
    chunks = K.attention_chunks(decode, attend.variant.defines, 132)
    name, grid = attend.kernel, attend.grid
    assert (name, grid[1:]) == ("attention", (8, 1)) and grid[0] * 8 >= 2 * 128 and chunks > 1
    assert K.attention_grid(decode, attend.variant.defines)[0][0] * chunks == grid[0]
    assert combine.kernel == "attention_combine" and combine.grid[0] * combine.block[0] >= 8 * 4 * 128
    prefill = S.attention_spec((4, 16, 2048, 64), (4, 16, 2048, 64), (4, 16, 2048, 64), ("float32",) * 3)
    assert [launch.kernel for launch in gpu_plan(prefill)] == ["attention"]


def test_other_ops_cover_their_work():
    att = S.attention_spec((2, 8, 200, 64), (2, 2, 300, 64), (2, 2, 300, 32), ("float16",) * 3)
    launch = gpu_plan(att)[0]
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    # a group per tile of the 4 * 200 rows of the 4 query heads sharing a kv head, per kv head
    # and key chunk
    tile = block[0] // v.defines["QSPLIT"] * v.defines["BQ"]
    tiles = grid[0] // K.attention_chunks(att, v.defines, gpu().compute_units)
    assert name == "attention" and grid[1:] == (2, 2) and tiles * tile >= 4 * 200 > (tiles - 1) * tile
    q = S.quantize_spec((3, 4096), "float32", "q4_0")
    [launch] = gpu_plan(q)
    name, grid, block = launch.kernel, launch.grid, launch.block
    assert name == "quantize" and grid[0] * block[0] >= 3 * 4096 // 32
    dq = S.dequantize_spec((3, 4096), get_format("q8_0"))
    [launch] = gpu_plan(dq)
    name, grid, block = launch.kernel, launch.grid, launch.block
    assert name == "dequantize" and grid[0] * block[0] >= 3 * 4096
    qm = S.qmatmul_spec((70, 256), "bfloat16", (300, 256), get_format("q8_0"))
    [launch] = gpu_plan(qm)
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    assert name == "qmatmul" and grid[0] * block[0] * v.defines["RN"] >= 300
    assert grid[1] * v.defines["RM"] >= 70


@pytest.mark.parametrize("fmt", ["q4_k", "q5_k", "q6_k", "mxfp4", "q8_k"])
def test_kquant_formats_plan_kquant_cl_covering_their_work(fmt):
    from accel import kernels as K

    f = get_format(fmt)
    q = S.quantize_spec((3, 1024), "bfloat16", fmt)
    [launch] = gpu_plan(q)
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    assert v == K.kquant(fmt, "bfloat16") and name == "quantize_k"
    assert grid[0] * block[0] >= 3 * 1024 // f.block  # a thread per block
    dq = S.dequantize_spec((3, 1024), f)
    [launch] = gpu_plan(dq)
    name, grid, block = launch.kernel, launch.grid, launch.block
    assert name == "dequantize_k" and grid[0] * block[0] >= 3 * 1024 // 32
    qm = S.qmatmul_spec((70, 512), "float16", (301, 512), f)
    [launch] = gpu_plan(qm)
    d, name, grid, block = launch.variant.defines, launch.kernel, launch.grid, launch.block
    assert name == "qgemv_k" and block == (d["KWG"], 1, 1)  # a warp per RN rows, split K
    assert grid[0] * d["RN"] >= 301 > (grid[0] - 1) * d["RN"] and grid[1] * d["RM"] >= 70
    for arch in ("sm_90", "gfx90a"):
        assert gpu_support(q, "auto", arch).ok and gpu_support(qm, "auto", arch).ok
    if fmt != "q8_k":  # x quantized to the format's vec_dot partner, then qmatmul_kx
        qx = S.qmatmul_spec((5, 512), "float32", (301, 512), f, f.vec_dot)
        quantize_x, launch = gpu_plan(qx)
        name, grid, block = launch.kernel, launch.grid, launch.block
        assert name == "qmatmul_kx" and grid[0] * block[0] >= 301 and grid[1] * block[1] >= 5
        assert quantize_x.variant.source == ("kquant.cl" if f.vec_dot == "q8_k" else "quant.cl")
        assert gpu_support(qx, "auto", "sm_80").ok


@pytest.mark.parametrize("m", [1, 7, 8])
def test_gemv_and_decode_batches_run_qgemv_covering_every_output(m):
    qm = S.qmatmul_spec((m, 256), "bfloat16", (301, 256), get_format("q4_0"))
    [launch] = gpu_plan(qm)
    d, name, grid, block = launch.variant.defines, launch.kernel, launch.grid, launch.block
    assert name == "qgemv" and block == (d["GEMV_WG"] * d["GEMV_TEAMS"], 1, 1)
    rows = d["GEMV_TEAMS"] * d["RN"]  # weight rows per block
    assert grid[0] * rows >= 301 > (grid[0] - 1) * rows
    assert grid[1] * d["RM"] >= m > (grid[1] - 1) * d["RM"]


@pytest.mark.parametrize("m,kernel,ksplit", [(1, "qgemv_x8", 1), (8, "qgemv_x8", 1), (9, "qmatmul_x8", 1),
                                              (1, "qgemv_x8", 2), (8, "qgemv_x8", 2)])
def test_x_format_quantizes_x_then_covers_every_output(m, kernel, ksplit):
    # the two launches of qmatmul(x_format="q8_0"): quantize_x8, one thread per block of x, then
    # qgemv_x8 (up to M = 8; GEMV_KSPLIT teams share a group's rows) or qmatmul_x8
    from accel import kernels as K

    qm = S.qmatmul_spec((m, 256), "float16", (301, 256), get_format("q4_0"), "q8_0")
    tiles = gemv_tiles(GEMV_KSPLIT=ksplit) if ksplit > 1 else None
    quantize_x8, launch = gpu_plan(qm, tiles=tiles)
    name, grid, block = quantize_x8.kernel, quantize_x8.grid, quantize_x8.block
    assert name == "quantize_x8" and grid[0] * block[0] >= m * 256 // 32 > (grid[0] - 1) * block[0]
    name, grid, block, d = launch.kernel, launch.grid, launch.block, launch.variant.defines
    assert name == kernel and gpu_support(qm, "auto", "sm_90", tiles).ok
    if kernel == "qgemv_x8":
        assert block == (d["GEMV_WG"] * d["GEMV_TEAMS"], 1, 1)
        rows = d["GEMV_TEAMS"] // ksplit * d["RN"]  # weight rows per block
        assert grid[0] * rows >= 301 > (grid[0] - 1) * rows
    else:
        assert grid[0] * block[0] * d["RN"] >= 301
    assert grid[1] * d["RM"] >= m > (grid[1] - 1) * d["RM"]


@pytest.mark.parametrize("fmt,params", [("q4_0", {}), ("q8_0", {}), ("q4_0", {"GEMV_KSPLIT": 2}),
                                        ("q8_0", {"GEMV_KSPLIT": 4}), ("q4_0", {"GEMV_WG": 64, "GEMV_TEAMS": 2})],
                         ids=str)
def test_gemv_local_bytes_are_what_ptxas_reports(fmt, params):
    # supports() declines a variant whose static shared memory passes 48 KiB on what
    # gemv_local_bytes says, so it must be the compiler's own count of qgemv's
    need("sm_90")
    from accel import kernels as K

    p = {**K.GPU_GEMV, **params}
    r = build_shipped(K.quant(fmt, "float32", p), "qgemv", "sm_90")
    assert r.resources["qgemv"].shared_bytes == K.gemv_local_bytes(p, fmt)


def test_a_gemv_split_past_48_kib_of_shared_memory_does_not_build():
    # every kernel of quant.cl is built together: with K split 4 ways Q4_0's qgemv would stage
    # 49216 bytes, so the variant (and with it qgemv_x8) cannot be built at all
    need("sm_90")
    from accel import kernels as K

    over = K.quant("q4_0", "float32", {**K.GPU_GEMV, "GEMV_KSPLIT": 4})
    assert over.static_local_bytes == 49216 > 48 * 1024
    with pytest.raises(CompileError, match="qgemv"):
        build_shipped(over, "qgemv_x8", "sm_90")


@pytest.mark.parametrize("m", [1, 8])
def test_gemv_stream_groups_cover_every_output(m, monkeypatch):
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv_stream")
    qm = S.qmatmul_spec((m, 8192), "float32", (301, 8192), get_format("q4_0"))
    [launch] = gpu_plan(qm)
    d, name, grid, block = launch.variant.defines, launch.kernel, launch.grid, launch.block
    assert name == "qgemv_stream" and block == (32 * d["STREAM_WARPS"], 1, 1)
    assert grid[0] * d["STREAM_ROWS"] >= 301 > (grid[0] - 1) * d["STREAM_ROWS"]
    assert grid[1:] == (m, 1)  # one group row per row of x


_STREAM_BUILDS = [(arch, fmt, {}) for arch in ("sm_80", "sm_90") for fmt in ("q4_0", "q8_0")] + \
    [("sm_90", "q4_0", p) for p in gpu_goals.STREAM_ALTERNATIVES]  # timed by the GPU run too


@pytest.mark.parametrize("arch,fmt,params", _STREAM_BUILDS, ids=str)
def test_gemv_stream_compiles_to_cp_async_within_its_register_budget(arch, fmt, params):
    # a variant that cannot build (static shared memory past 48 KiB, ...) would cost a GPU run
    need(arch)
    from accel import kernels as K

    p = {**K.GPU_GEMV, **params}
    v = K.quant(fmt, "float32", p)
    r = build_shipped(v, "qgemv_stream", arch)
    res = r.resources["qgemv_stream"]
    # the residency it asks for: STREAM_MIN_GROUPS groups of 32 * STREAM_WARPS threads per SM
    assert res.registers <= 65536 // (p["STREAM_MIN_GROUPS"] * 32 * p["STREAM_WARPS"])
    block = {"q4_0": 18, "q8_0": 34}[fmt]  # ring of row slices, x staging, one sum per warp and row
    assert res.shared_bytes == p["STREAM_WARPS"] * (p["STREAM_STAGES"] * (64 * block + 16) + 2048
                                                     + 4 * p["STREAM_ROWS"])
    assert res.shared_bytes == K.stream_local_bytes(p, fmt)
    assert sass_of(r, "qgemv_stream")["LDGSTS"] > 0  # the weight streams through cp.async
    # the row loop: cp.async copies, no local memory (the register cap may spill a few setup
    # values before it), no x sums recomputed per row (their FADDs stay outside)
    loop = hot_loop(r, "qgemv_stream")
    assert loop["LDGSTS"] > 0 and loop["LDL"] == loop["STL"] == 0, loop
    if fmt == "q4_0":
        assert loop["FADD"] <= loop["FFMA"] // 20, loop


#: kernel, the prefix of its tiling's defines, and its Q4_0 codes per work-item and row per loop
_GEMVS = {"qgemv": ("GEMV", "RN", 32), "qgemv_runs": ("RUNS", "RUNS_RN", 32 * 8)}
_GEMV_BUILDS = distinct([(kernel, arch, fmt, dtype, {}) for kernel in _GEMVS for arch in ("sm_80", "sm_90")
                for fmt in ("q4_0", "q8_0") for dtype in ("float32", "float16", "bfloat16")] + \
    [(kernel, "sm_90", "q4_0", "float32", p)  # timed by the GPU run too: a failed build would waste it
     for kernel, alternatives in (("qgemv", gpu_goals.QGEMV_ALTERNATIVES + gpu_goals.DECODE_ALTERNATIVES),
                                  ("qgemv_runs", gpu_goals.RUNS_ALTERNATIVES + gpu_goals.DECODE_RUNS_ALTERNATIVES))
     for p in alternatives])


@pytest.mark.parametrize("kernel,arch,fmt,dtype,params", _GEMV_BUILDS, ids=str)
def test_gemv_keeps_its_loop_in_registers(kernel, arch, fmt, dtype, params):
    # within the register cap its launch bounds ask for (GEMV_MIN_GROUPS or RUNS_MIN_GROUPS groups
    # per SM: by default 512 work-items for Q4_0, 384 for Q8_0's larger blocks) it spills nothing,
    # so no local memory in the loop (qgemv_runs: a run's 36 or 68 words per row stay in
    # registers), which holds a byte permute per code of each of its rows
    need(arch)
    from accel import kernels as K

    prefix, rows, codes = _GEMVS[kernel]
    p = {**K.GPU_GEMV, **params}
    items = p[f"{prefix}_WG"] * p[f"{prefix}_TEAMS"]
    groups = p.get(f"{prefix}_MIN_GROUPS") or max(1, {"q4_0": 512, "q8_0": 384}[fmt] // items)
    r = build_shipped(K.quant(fmt, dtype, p), kernel, arch)
    assert r.resources[kernel].spills == 0
    assert r.resources[kernel].registers <= min(255, 65536 // (groups * items))
    loop = hot_loop(r, kernel)
    assert loop["LDL"] == loop["STL"] == 0, loop
    if fmt == "q4_0":
        assert loop["PRMT"] >= codes * p[rows], loop


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_qgemv_probes_keep_what_they_measure(fmt):
    # the GPU run's diagnostics (gpu_goals.PROBES): GEMV_PROBE=1 keeps the loop's global loads,
    # x staging and barrier and drops every FMA; GEMV_PROBE=2 keeps every FMA and load (its
    # weight addresses stay put, the loads are not hoisted out of the loop)
    need("sm_90")
    from accel import kernels as K

    def loop(**probe):
        r = build_shipped(K.quant(fmt, "float32", {**K.GPU_GEMV, **probe}), "qgemv", "sm_90")
        return hot_loop(r, "qgemv", "BAR")  # the one barrier per tile marks the loop
    real, loads, arithmetic = loop(), loop(GEMV_PROBE=1), loop(GEMV_PROBE=2)
    assert real["FFMA"] >= 32 * K.GPU_GEMV["RN"] and loads["FFMA"] == 0, (real, loads)
    assert (loads["LDG"], loads["STS"], loads["BAR"]) == (real["LDG"], real["STS"], real["BAR"])
    assert (arithmetic["FFMA"], arithmetic["LDG"]) == (real["FFMA"], real["LDG"]), arithmetic


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("kernel,waves", [("qgemv", 3), ("qgemv_x8", 3), ("qgemv_runs", 2)])
def test_gemv_words_stay_in_registers_on_gfx90a(fmt, kernel, waves):
    # no scratch memory: hiprtc kept the loaded words there (qgemv, qgemv_x8: 144 / 208 bytes
    # read back every tile, until PICK_WORD; qgemv_runs' Q8_0: 560, until LOAD_WORDS unrolled its
    # 17 loads per row), and CDNA2's 512 VGPRs per SIMD lane hold `waves` waves. Finding qgemv's
    # block offset once per row (as on CUDA) takes more here, hence GEMV_OFFSET_PER_TILE on HIP
    need("gfx90a")
    from accel import kernels as K

    res = build_shipped(K.quant(fmt, "float16", K.GPU_GEMV), kernel, "gfx90a").resources[kernel]
    assert res.stack_bytes == 0 and res.registers <= 512 // waves, (res.registers, res.stack_bytes)


@pytest.mark.parametrize("arch", ["sm_90", "gfx90a"])
def test_attention_keeps_its_state_in_registers(arch):
    # a row's query and output split over QSPLIT work-items, and groups TEAM work-items at
    # compile time (without that hipcc budgets registers for 1024: 128 VGPRs). Before both, at
    # D = 128 sm_90 kept 576 bytes per thread in local memory and gfx90a spilled 659 VGPRs
    need(arch)
    from accel import kernels as K

    for dtype, d, mask in (("float32", 128, None), ("bfloat16", 128, None), ("float16", 64, "bool")):
        res = build_shipped(K.attention(dtype, d, d, mask), "attention", arch).resources["attention"]
        assert (res.spills, res.stack_bytes) == (0, 0), (dtype, d, res.registers, res.spills, res.stack_bytes)


def test_grid_limits_are_declined_with_a_reason():
    huge_batch = S.matmul_spec((70000, 2, 2), "float32", (2, 2), "float32")
    verdict = gpu_support(huge_batch, "kernels")
    assert not verdict.ok and "65535" in verdict.reason
    assert gpu_support(huge_batch, "vendor").ok  # cuBLAS batches have no such limit
    assert gpu_support(MM_SPECS[1], "kernels").ok


# -- the backend's own compile path, for real GPU targets -----------------------------------------
def test_warp_width_reaches_every_kernel():
    need("sm_90")
    src = 'KERNEL void k(GLOBAL int* x) { static_assert(ACCEL_WARP == 64, "warp"); x[0] = ACCEL_WARP; }'
    assert build_kernel(src, "k", "sm_90", 64).ok
    with pytest.raises(CompileError, match="warp") as info:
        build_kernel(src, "k", "sm_90", 32)
    assert info.value.target == "sm_90" and isinstance(info.value, AccelError)


SHIPPED_SPECS = [
    *MM_SPECS, S.matmul_spec((4, 4), "float16", (4, 4), "float16", "float32"),
    S.attention_spec((1, 4, 5, 64), (1, 2, 9, 64), (1, 2, 9, 64), ("float32",) * 3, causal=True),
    S.attention_spec((1, 2, 5, 128), (1, 2, 9, 128), (1, 2, 9, 128), ("bfloat16",) * 3,
                     mask_shape=(5, 9), mask_dtype="bool"),
    S.attention_spec((1, 2, 5, 80), (1, 2, 9, 80), (1, 2, 9, 48), ("float16",) * 3,
                     mask_shape=(1, 1, 5, 9), mask_dtype="float16"),
    # head dims that split a row over 2 work-items, and over none
    S.attention_spec((1, 4, 5, 40), (1, 2, 9, 40), (1, 2, 9, 24), ("float32",) * 3),
    S.attention_spec((1, 2, 5, 20), (1, 2, 9, 20), (1, 2, 9, 12), ("float32",) * 3, causal=True),
    S.quantize_spec((2, 64), "float16", "q8_0"), S.dequantize_spec((2, 64), get_format("q4_0")),
    S.qmatmul_spec((3, 64), "float32", (5, 64), get_format("q4_0")),
    S.quantize_spec((2, 256), "float32", "q4_k"), S.dequantize_spec((2, 256), get_format("q6_k")),
    S.qmatmul_spec((3, 256), "bfloat16", (5, 256), get_format("q5_k")),
    S.scaled_matmul_spec((3, 256), "float8_e4m3fnuz", (256, 5), "float8_e4m3fnuz", (3, 2), "float32",
                         (2, 1), "float32", "float16", (5,), "float32"),
]


@pytest.mark.parametrize("spec", SHIPPED_SPECS, ids=lambda s: f"{s.op}-{s.in_dtypes[0]}")
def test_every_op_kernel_builds_for_sm_90(spec):
    need("sm_90")
    launch = gpu_launch(spec)
    v, name = launch.variant, launch.kernel
    r = build_shipped(v, name, "sm_90")
    assert name in r.resources and r.resources[name].spills == 0


def test_gpu_check_script_parses():
    """The GPU run cannot run here; at least its shell and its embedded Python must parse (the
    speed-goal module runs here too: tests/conformance/bench/test_gpu_goals.py)."""
    import re

    script = ROOT / "conformance" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    body = re.search(r"<<'PYTHON'[^\n]*\n(.*?)\nPYTHON\n", script.read_text(), re.S).group(1)
    compile(body, "preflight", "exec")
    for step in ("conformance --backend cuda --profile quick", "bench --backend cuda",
                 "ACCEL_CUDA_IMPL=vendor", "-m accel.conformance.bench.gpu_goals"):
        assert step in script.read_text()


def test_attention_head_dims_beyond_static_shared_memory_are_declined_not_miscompiled():
    from accel import kernels
    from accel.kernels import toolchains

    def spec(d):
        return S.attention_spec((1, 1, 1, d), (1, 1, 8, d), (1, 1, 8, d), ("float16",) * 3)

    # 16 keys of K and V rows plus 64 x 17 partial logits: D = 344 fits 48 KiB, D = 352 does not
    assert gpu_support(spec(344), "kernels", "sm_90").ok
    declined = gpu_support(spec(352), "kernels", "sm_90")
    assert not declined.ok and "static shared memory" in declined.reason
    need("sm_90")
    for d, builds in ((344, True), (352, False)):  # the verdict agrees with the real compiler
        v = gpu_launch(spec(d)).variant
        r = toolchains.compile_source(kernels.program_text(v.source), "sm_90",
                                      defines={"ACCEL_WARP": 32, **v.defines}, filename=v.source)
        assert r.ok is builds, r.log[-500:]


def test_sizes_beyond_int32_kernel_arguments_are_declined_not_overflowed():
    huge = S.matmul_spec((1, 2**31), "float16", (2**31, 1), "float16")
    verdict = gpu_support(huge, "kernels", "sm_90")
    assert not verdict.ok and "32-bit" in verdict.reason and "K" in verdict.reason
    assert not gpu_support(huge, "vendor", "sm_90").ok  # declined until verified on a GPU
    # 16 query heads on one kv head: 2**31 rows in attention.cl's one run, though Sq fits
    gqa = S.attention_spec((1, 16, 2**27, 8), (1, 1, 16, 8), (1, 1, 16, 8), ("float16",) * 3)
    verdict = gpu_support(gqa, "kernels", "sm_90")
    assert not verdict.ok and "rows_per_kv_head" in verdict.reason


@pytest.mark.parametrize("fmt", K.CODEBOOK_FORMATS)
def test_codebook_formats_plan_codebook_cl_on_gpus_as_on_opencl(fmt):
    # one planner: the grid uploaded once per plan, a thread per 8 values (dequantize), a thread per
    # weight row and CODEBOOK_ROWS rows of x (qmatmul; with x_format, x to q8_k first by the q8_k
    # quantizer); quantize stays ggml's search on the cpu
    f = get_format(fmt)
    dq = S.dequantize_spec((3, 512), f)
    qm = S.qmatmul_spec((9, 512), "float16", (70, 512), f)
    qx = S.qmatmul_spec((9, 512), "float16", (70, 512), f, "q8_k")
    for arch in ("sm_90", "gfx90a"):
        q8k, mx = gpu_plan(qx, arch=arch)
        assert (q8k.kernel, q8k.variant.defines["FMT_Q8_K"], mx.kernel) == ("quantize_k", 1, "qmatmul_cbx")
        assert mx.buffers[0] is q8k.buffers[1] and mx.buffers[0].nbytes == 9 * 2 * 292
        assert mx.grid[0] * mx.block[0] >= 70 and mx.grid[1] * K.CODEBOOK_ROWS >= 9
        assert gpu_support(qx, "auto", arch).ok
        [d] = gpu_plan(dq, arch=arch)
        assert d.kernel == "dequantize_cb" and d.grid[0] * d.block[0] >= 3 * 512 // 8
        np.testing.assert_array_equal(d.buffers[1].host, K.codebook_grid(fmt))
        [m] = gpu_plan(qm, arch=arch)
        assert m.kernel == "qmatmul_cb" and m.grid[0] * m.block[0] >= 70
        assert m.grid[1] * K.CODEBOOK_ROWS >= 9 and gpu_support(qm, "auto", arch).ok
        declined = gpu_support(S.quantize_spec((3, 512), "float32", fmt), "auto", arch)
        assert not declined.ok and "ggml's search" in declined.reason
    need("sm_90")
    for launch in (d, m, mx):
        r = build_shipped(launch.variant, launch.kernel, "sm_90")
        assert r.resources[launch.kernel].spills == 0
