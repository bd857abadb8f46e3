"""The CUDA tensor-core matmul (kernels/matmul_wmma.cu) without a GPU: its variants compile with
NVRTC for sm_80 and sm_90 without spills and really use WMMA (and cp.async where aligned); the
cuda backend's choice of implementation from the device's arch string; supports() declining a
forced "tensorcore" where the device has none; launch geometry; typed errors. Whether the kernel
computes the right numbers is the GPU run's verdict (conformance/gpu_check.sh)."""
from __future__ import annotations

import re

import pytest
from gpu_toolchains import built_without_spills, missing, need, ptx_entries

import accel.kernels as K
from accel.kernels import check as KC
from accel import spec as S
from accel.kernels import toolchains
from accel.backends.cupy.build import wmma_header_missing
from accel.backends.plan import accumulator
from planning import gpu, gpu_launch, gpu_support, kernel_path, tensorcore_reason
from accel.backends.cupy.cuda import CUDABackend
from accel.errors import ArgumentError, DTypeError
from repo_paths import ROOT

WMMA_VARIANTS = [v for v in K.variants() if v.source == "matmul_wmma.cu"]
BF16 = S.matmul_spec((3, 65, 129), "bfloat16", (129, 63), "bfloat16")
F16 = S.matmul_spec((64, 32), "float16", (32, 48), "float16", "float32")
F32 = S.matmul_spec((64, 32), "float32", (32, 48), "float32")
I8 = S.matmul_spec((4, 8), "int8", (8, 4), "int8")


@pytest.fixture(autouse=True)
def shared_binaries(gpu_build_cache, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(gpu_build_cache))


def need_wmma(*archs: str) -> None:
    """NVRTC for ``archs`` and the WMMA header (crt/mma.h, the nvidia-cuda-crt wheel): skipped
    without them, failed in CI (ACCEL_REQUIRE_TOOLCHAINS=1) like every compile test."""
    need(*archs)
    if why := wmma_header_missing():
        missing(why)


# -- the variants -------------------------------------------------------------------------------
def test_every_input_and_output_dtype_is_shipped_cuda_only():
    pairs = {(v.defines["IN_DT"], v.defines["OUT_DT"]) for v in WMMA_VARIANTS}
    assert pairs == {(i, o) for i in ("F16", "BF16") for o in ("F32", "F16", "BF16")}
    assert all(v.dialects == ("cuda",) for v in WMMA_VARIANTS)
    assert all(v.kernels == ("matmul_wmma", "matmul_wmma_vec") for v in WMMA_VARIANTS)
    assert "matmul_wmma.cu" in K.SOURCES


def test_builder_rejects_what_tensor_cores_do_not_take():
    with pytest.raises(DTypeError, match=r"^in_dtype: expected one of \('float16', 'bfloat16'\)"):
        K.matmul_wmma("float32", "float32")
    with pytest.raises(DTypeError, match="^in_dtype: expected"):
        K.matmul_wmma("int8", "int32")
    with pytest.raises(DTypeError, match="^out_dtype: expected"):
        K.matmul_wmma("bfloat16", "int32")


# -- compiled for real targets ------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_variant_compiles_without_spills(arch):
    need_wmma(arch)
    for v in WMMA_VARIANTS:
        # two blocks per SM, so one block's loads overlap another's MMAs
        threads = 32 * v.defines["WARPS_M"] * v.defines["WARPS_N"]
        r = built_without_spills(v, "matmul_wmma", arch, threads, blocks_per_sm=2)
        assert set(r.resources) == {"matmul_wmma", "matmul_wmma_vec"}, v.id
        for res in r.resources.values():
            assert res.shared_bytes <= 48 * 1024  # the static shared memory limit


def test_kernels_check_builds_them_for_nvidia_and_skips_amd():
    need_wmma("sm_90")
    jobs = [j for j in KC.shipped_jobs() if j.file == "matmul_wmma.cu"]
    assert len(jobs) == len(WMMA_VARIANTS)
    outcomes = KC.check(jobs, ["sm_90", "gfx90a"])
    assert {o.status for o in outcomes if o.target == "sm_90"} == {"ok"}
    assert {o.status for o in outcomes if o.target == "gfx90a"} == {"n/a"}


@pytest.mark.parametrize("dtype,token", [("bfloat16", "bf16"), ("float16", "f16")])
def test_tensor_cores_and_async_copies_are_really_used(dtype, token):
    need_wmma("sm_80")
    entries = ptx_entries(K.matmul_wmma(dtype, "float32"), "sm_80")
    assert set(entries) == {"matmul_wmma", "matmul_wmma_vec"}
    for body in entries.values():
        # fragments of a and b in the input type; the MMA's d and c are float32 (PTX spells
        # .f32.f32 for f16 inputs and .f32.bf16.bf16.f32 for bf16)
        loads = set(re.findall(r"wmma\.load\.([ab])\.sync\.aligned\.row\.m16n16k16(?:\.shared)?\.(\w+)", body))
        assert loads == {("a", token), ("b", token)}
        mma = set(re.findall(r"wmma\.mma\.sync\.aligned\.row\.row\.m16n16k16\.f32\.([\w.]+)", body))
        assert mma == {"f32" if token == "f16" else f"{token}.{token}.f32"}
    assert "cp.async.cg.shared.global" in entries["matmul_wmma_vec"]
    assert "cp.async" not in entries["matmul_wmma"]  # the any-shape kernel loads element by element


# -- which implementation runs, from the arch string ----------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"])
def test_ampere_and_later_have_tensor_cores(arch):
    need_wmma()
    assert tensorcore_reason(arch) is None
    assert kernel_path(BF16, "auto", arch) == "tensorcore"
    assert kernel_path(F16, "auto", arch) == "tensorcore"


@pytest.mark.parametrize("arch,why", [("sm_75", "needs sm_80 or later"), ("sm_70", "this device is sm_70"),
                                      ("gfx90a", "CUDA-only"), ("gfx1100", "CUDA-only"),
                                      (None, "no device arch")])
def test_older_gpus_and_amd_fall_back_to_the_shared_kernels(arch, why):
    assert why in tensorcore_reason(arch)
    assert kernel_path(BF16, "auto", arch) == "kernels"
    assert gpu_support(BF16, "auto", arch).ok


def test_each_setting_picks_its_path():
    for arch in ("sm_90", "sm_75", "gfx90a"):
        assert kernel_path(BF16, "kernels", arch) == "kernels"  # the SIMT kernel, as asked
        assert kernel_path(BF16, "vendor", arch) == "vendor"
        assert kernel_path(BF16, "tensorcore", arch) == "tensorcore"  # forced: supports() judges
        # tensor cores take 16-bit floats only: float32 and int8 stay on the shared kernels
        for spec in (F32, I8):
            assert kernel_path(spec, "auto", arch) == "kernels"
            assert kernel_path(spec, "tensorcore", arch) == "kernels"
    assert gpu_launch(BF16, arch="sm_80", impl="tensorcore").variant.source == "matmul_wmma.cu"
    assert gpu_launch(BF16, arch="sm_80", impl="kernels").variant.source == "matmul.cl"


@pytest.mark.parametrize("arch", ["sm_75", "gfx90a"])
def test_forced_tensorcore_is_declined_with_the_reason(arch):
    verdict = gpu_support(BF16, "tensorcore", arch)
    assert not verdict.ok
    assert verdict.reason.startswith("impl='tensorcore': ") and arch in verdict.reason
    assert gpu_support(F32, "tensorcore", arch).ok  # not a tensor-core case: shared kernel


def test_forced_tensorcore_is_supported_on_hopper():
    need_wmma()
    assert gpu_support(BF16, "tensorcore", "sm_90").ok
    assert gpu_support(F16, "tensorcore", "sm_80").ok


def test_headers_without_wmma_fall_back_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "cuda_fp16.h").write_text("")  # a CUDA include dir as the runtime wheel has it
    monkeypatch.setattr(toolchains, "cuda_include_dirs", lambda: (str(tmp_path),))
    wmma_header_missing.cache_clear()
    try:
        assert "lack crt/mma.h (WMMA): pip install nvidia-cuda-crt" in tensorcore_reason("sm_90")
        assert kernel_path(BF16, "auto", "sm_90") == "kernels"
        verdict = gpu_support(BF16, "tensorcore", "sm_90")
        assert not verdict.ok and "nvidia-cuda-crt" in verdict.reason
    finally:
        wmma_header_missing.cache_clear()


def test_a_toolkit_supplies_what_the_runtime_wheel_lacks(tmp_path, monkeypatch):
    # a CUDA machine image: the runtime wheel's headers without crt/, a toolkit under CUDA_HOME
    wheel, toolkit = tmp_path / "wheel", tmp_path / "toolkit"
    (toolkit / "include" / "crt").mkdir(parents=True)
    wheel.mkdir()
    for d in (wheel, toolkit / "include"):
        (d / "cuda_fp16.h").write_text("")
    (toolkit / "include" / "crt" / "mma.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    real = toolchains.cuda_include_dirs
    real.cache_clear()
    wmma_header_missing.cache_clear()
    try:
        dirs = toolchains.cuda_include_dirs()
        assert str(toolkit / "include") in dirs
        monkeypatch.setattr(toolchains, "cuda_include_dirs", lambda: (str(wheel), str(toolkit / "include")))
        assert wmma_header_missing() is None
        opts = toolchains.build_options(toolchains.parse_target("sm_90"), (13, 0))
        assert opts.index(f"-I{wheel}") < opts.index(f"-I{toolkit / 'include'}")  # wheel first
    finally:
        real.cache_clear()
        wmma_header_missing.cache_clear()


def test_accumulation_stays_float32(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")  # asks cuBLAS for tf32; WMMA on 16-bit inputs is unaffected
    for impl in ("auto", "tensorcore"):
        assert accumulator(BF16, gpu("sm_90", impl)) == "float32"
        assert accumulator(F16, gpu("sm_90", impl)) == "float32"


# -- launch geometry ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [BF16, F16, S.matmul_spec((1, 1), "float16", (1, 1), "float16"),
                                  S.matmul_spec((2, 1, 257, 64), "bfloat16", (3, 64, 129), "bfloat16")])
def test_grid_covers_the_output_once(spec):
    launch = gpu_launch(spec, arch="sm_80", impl="tensorcore", align=2)  # the any-shape kernel
    name, grid, block, d = launch.kernel, launch.grid, launch.block, launch.variant.defines
    assert name == "matmul_wmma" and block == (32 * d["WARPS_M"] * d["WARPS_N"], 1, 1)
    assert grid[0] * d["BN"] >= spec.N > (grid[0] - 1) * d["BN"]
    assert grid[1] * d["BM"] >= spec.M > (grid[1] - 1) * d["BM"]
    assert grid[2] == spec.batch


def test_grid_limits_are_declined():
    need_wmma()
    huge_batch = S.matmul_spec((70000, 2, 2), "bfloat16", (2, 2), "bfloat16")
    verdict = gpu_support(huge_batch, "tensorcore", "sm_90")
    assert not verdict.ok and "65535" in verdict.reason


def test_the_async_kernels_need_aligned_whole_chunks():
    spec = S.matmul_spec((5, 64), "bfloat16", (64, 24), "bfloat16")
    for arch, fast in (("sm_80", "matmul_wmma_vec"), ("sm_90", "matmul_wgmma"), ("sm_100", "matmul_wmma_vec")):
        def pick(a_addr, b_addr, s=spec):
            align = min(a_addr & -a_addr, b_addr & -b_addr, 256)
            return gpu_launch(s, arch=arch, impl="tensorcore", align=align).kernel

        assert pick(1 << 20, 256) == fast
        assert pick((1 << 20) + 8, 256) == "matmul_wmma"  # A 8-byte aligned only
        assert pick(256, 256 + 2) == "matmul_wmma"
        odd_k = S.matmul_spec((5, 60), "bfloat16", (60, 24), "bfloat16")
        odd_n = S.matmul_spec((5, 64), "bfloat16", (64, 20), "bfloat16")
        assert pick(256, 256, odd_k) == pick(256, 256, odd_n) == "matmul_wmma"


# -- typed errors -------------------------------------------------------------------------------
def test_a_bad_impl_is_a_typed_error():
    backend = object.__new__(CUDABackend)  # the property needs no device, only its facts
    backend.facts = gpu("sm_90", "auto")
    backend.impl = "vendor"
    assert backend.impl == "vendor"
    backend.impl = "tensorcore"
    assert backend.impl == "tensorcore"
    with pytest.raises(ArgumentError, match=r"^impl: expected one of \('auto', 'kernels', 'vendor', "
                                            r"'tensorcore'\), got 'wmma'$"):
        backend.impl = "wmma"
    assert backend.impl == "tensorcore"  # a rejected value changes nothing
    with pytest.raises(ArgumentError, match="^impl: expected"):
        kernel_path(BF16, "cublas", "sm_90")
    with pytest.raises(ArgumentError, match="^target: expected"):
        tensorcore_reason("sm90")


def test_the_gpu_run_covers_the_tensorcore_paths():
    script = (ROOT / "conformance" / "gpu_check.sh").read_text()
    assert "ACCEL_CUDA_IMPL=tensorcore" in script and "--dtypes float16 bfloat16" in script
    assert "--ops matmul attention" in script and "-m accel.conformance.bench.gpu_goals" in script
