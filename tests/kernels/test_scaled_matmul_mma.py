"""The FP8 tensor-core scaled matmul (kernels/scaled_matmul_mma.cu) without a GPU: its variants
compile with NVRTC for sm_89 and sm_90 (the wgmma kernel for sm_90a) without spills and really
issue FP8 mma.sync or wgmma (and cp.async where aligned); the cuda backend's choice of it from the device's arch and the format
pair; supports() declining a forced "tensorcore" where the device has no FP8 tensor cores;
launch geometry; the accumulator it declares. Whether it computes the right numbers is the GPU
run's verdict (conformance/gpu_check.sh, step conformance-fp8-tensorcore)."""
from __future__ import annotations

import re

import pytest
from gpu_toolchains import built_without_spills, need, ptx_entries

import accel.kernels as K
from accel import spec as S
from accel.backends.plan import accumulator
from planning import gpu, gpu_launch, gpu_support, kernel_path
from accel.dtypes import FP8_DTYPES
from accel.errors import DTypeError
from accel.kernels import check as KC
from repo_paths import ROOT

E4, E5, FNUZ = FP8_DTYPES
MMA_VARIANTS = [v for v in K.variants() if v.source == "scaled_matmul_mma.cu" and "WGMMA" not in v.defines]
WGMMA_VARIANTS = [v for v in K.variants() if v.source == "scaled_matmul_mma.cu" and "WGMMA" in v.defines]
#: sm_89's most dynamic shared memory per block (99 KiB; sm_90 allows 227 KiB)
ADA_SHARED_MAX = 99 * 1024


@pytest.fixture(autouse=True)
def shared_binaries(gpu_build_cache, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(gpu_build_cache))


def _spec(M, K_, N, scaling="row", pair=(E4, E4), out="bfloat16"):
    sa, sb = S.fp8_scale_shapes(scaling, M, K_, N)
    return S.scaled_matmul_spec((M, K_), pair[0], (K_, N), pair[1], sa, "float32", sb, "float32", out)


# -- the variants -------------------------------------------------------------------------------
def test_the_ocp_pairs_torch_allows_are_shipped_for_sm89_and_later():
    pairs = {(v.defines["A_FP8"], v.defines["B_FP8"]) for v in MMA_VARIANTS}
    assert pairs == {("e4m3fn", "e4m3fn"), ("e4m3fn", "e5m2"), ("e5m2", "e4m3fn")}
    for v in MMA_VARIANTS:
        assert v.dialects == ("cuda",) and v.kernels == ("scaled_matmul_mma", "scaled_matmul_mma_vec")
        assert v.nvidia_target("sm_89") == "sm_89" and v.nvidia_target("sm_90") == "sm_90"
        assert v.nvidia_target("sm_86") is None and v.nvidia_target("gfx942") is None
        assert 48 * 1024 < v.dynamic_local_bytes <= ADA_SHARED_MAX


def test_the_wgmma_kernel_is_shipped_for_the_same_pairs_on_sm90a_only():
    pairs = {(v.defines["A_FP8"], v.defines["B_FP8"]) for v in WGMMA_VARIANTS}
    assert pairs == {(v.defines["A_FP8"], v.defines["B_FP8"]) for v in MMA_VARIANTS}
    for v in WGMMA_VARIANTS:
        assert v.kernels == ("scaled_matmul_wgmma",) and v.dialects == ("cuda",)
        assert v.nvidia_target("sm_90") == "sm_90a"
        assert v.nvidia_target("sm_89") is None and v.nvidia_target("sm_100") is None
        assert 48 * 1024 < v.dynamic_local_bytes <= 227 * 1024


def test_fnuz_has_no_tensor_core_variant():
    for build in (K.scaled_matmul_mma, K.scaled_matmul_wgmma):
        with pytest.raises(DTypeError, match=r"^a_dtype: expected one of \('float8_e4m3fn', 'float8_e5m2'\)"):
            build(FNUZ, FNUZ)


# -- compiled for real targets ------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_89", "sm_90"])
def test_every_variant_compiles_without_spills(arch):
    need(arch)
    for v in MMA_VARIANTS:
        r = built_without_spills(v, "scaled_matmul_mma", arch, threads=256)  # one block per SM
        assert set(r.resources) == {"scaled_matmul_mma", "scaled_matmul_mma_vec"}, v.id


def test_the_wgmma_kernel_compiles_for_sm90a_without_spills():
    need("sm_90")
    for v in WGMMA_VARIANTS:
        r = built_without_spills(v, "scaled_matmul_wgmma", "sm_90", threads=256)
        assert r.target == "sm_90a" and set(r.resources) == {"scaled_matmul_wgmma"}


def test_kernels_check_builds_them_for_ada_and_hopper_only():
    need("sm_89", "sm_90")
    jobs = [j for j in KC.shipped_jobs() if j.file == "scaled_matmul_mma.cu"]
    assert len(jobs) == len(MMA_VARIANTS) + len(WGMMA_VARIANTS)
    outcomes = KC.check(jobs, ["sm_80", "sm_89", "sm_90", "gfx90a"], sass=False)

    def status(target, wgmma):
        return {o.status for o in outcomes if o.target == target and ("WGMMA" in o.defines) == wgmma}
    assert [status(t, False) for t in ("sm_80", "sm_89", "sm_90", "gfx90a")] == [{"n/a"}, {"ok"}, {"ok"}, {"n/a"}]
    assert [status(t, True) for t in ("sm_80", "sm_89", "sm_90", "gfx90a")] == [{"n/a"}, {"n/a"}, {"ok"}, {"n/a"}]


PAIR_TYPES = [((E4, E4), "e4m3.e4m3"), ((E4, E5), "e4m3.e5m2"), ((E5, E4), "e5m2.e4m3")]


@pytest.mark.parametrize("pair,types", PAIR_TYPES)
def test_fp8_mma_and_async_copies_are_really_used(pair, types):
    entries = ptx_entries(K.scaled_matmul_mma(*pair), "sm_89")
    assert set(entries) == {"scaled_matmul_mma", "scaled_matmul_mma_vec"}
    for body in entries.values():
        mma = set(re.findall(r"mma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.(\w+\.\w+)\.f32", body))
        assert mma == {types}
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in body
    assert "cp.async.cg.shared.global" in entries["scaled_matmul_mma_vec"]
    assert "cp.async" not in entries["scaled_matmul_mma"]  # the any-shape kernel loads bytes


@pytest.mark.parametrize("pair,types", PAIR_TYPES)
def test_the_hopper_kernel_really_issues_fp8_wgmma(pair, types):
    entries = ptx_entries(K.scaled_matmul_wgmma(*pair), "sm_90a")
    assert set(entries) == {"scaled_matmul_wgmma"}
    body = entries["scaled_matmul_wgmma"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.(\w+\.\w+)", body)) == {types}
    assert "cp.async.cg.shared.global" in body and "fence.proxy.async" in body


# -- which implementation runs ------------------------------------------------------------------
@pytest.mark.parametrize("arch,path", [("sm_89", "tensorcore"), ("sm_90", "tensorcore"),
                                       ("sm_90a", "tensorcore"), ("sm_100", "tensorcore"),
                                       ("sm_86", "kernels"), ("sm_80", "kernels"),
                                       ("gfx942", "kernels"), (None, "kernels")])
@pytest.mark.parametrize("scaling", S.SCALINGS)
def test_auto_takes_fp8_tensor_cores_from_sm89_at_every_granularity(arch, path, scaling):
    for pair in ((E4, E4), (E4, E5), (E5, E4)):
        spec = _spec(33, 256, 130, scaling, pair)
        assert kernel_path(spec, "auto", arch) == path
        assert gpu_launch(spec, arch=arch or "sm_90", impl="auto" if arch else path).variant.source == (
            "scaled_matmul_mma.cu" if path == "tensorcore" else "scaled_matmul.cl")
        assert gpu_support(spec, "auto", arch).ok
    fnuz = _spec(33, 256, 130, scaling, (FNUZ, FNUZ))
    assert kernel_path(fnuz, "auto", arch) == kernel_path(fnuz, "tensorcore", arch) == "kernels"


def test_forced_tensorcore_is_declined_below_sm89_with_the_reason():
    spec = _spec(5, 64, 9)
    verdict = gpu_support(spec, "tensorcore", "sm_86")
    assert not verdict.ok
    assert "scaled_matmul needs sm_89 or later (FP8 mma); this device is sm_86" in verdict.reason
    assert "AMD" in gpu_support(spec, "tensorcore", "gfx942").reason
    assert gpu_support(spec, "tensorcore", "sm_89").ok
    assert kernel_path(spec, "kernels", "sm_90") == kernel_path(spec, "vendor", "sm_90") == "kernels"


def test_the_async_kernel_needs_whole_aligned_16_byte_chunks():
    for arch, fast in (("sm_89", "scaled_matmul_mma_vec"), ("sm_90", "scaled_matmul_wgmma"),
                       ("sm_100", "scaled_matmul_mma_vec")):
        def pick(spec, a=256, b=512, arch=arch):
            return gpu_launch(spec, arch=arch, impl="tensorcore", align=min(a & -a, b & -b, 256)).kernel

        assert pick(_spec(5, 64, 32)) == fast
        assert pick(_spec(5, 64, 32), a=264) == pick(_spec(5, 64, 32), b=520) == "scaled_matmul_mma"
        assert pick(_spec(5, 72, 32)) == pick(_spec(5, 64, 40)) == "scaled_matmul_mma"


@pytest.mark.parametrize("M,N", [(1, 1), (129, 257), (8192, 8192), (300, 7)])
@pytest.mark.parametrize("arch", ["sm_89", "sm_90"])  # mma.sync's kernel, wgmma's
def test_grid_covers_the_output_once(M, N, arch):
    spec = _spec(M, 128, N, "block")
    launch = gpu_launch(spec, arch=arch, impl="tensorcore")
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    d = v.defines
    assert name in v.kernels and block == (256, 1, 1) and grid[2] == 1
    assert grid[0] * d["BN"] >= N > (grid[0] - 1) * d["BN"]
    assert grid[1] * d["BM"] >= M > (grid[1] - 1) * d["BM"]


def test_the_tensor_core_path_declares_its_reduced_accumulation():
    spec = _spec(5, 64, 9, "tensor", out="float32")
    assert accumulator(spec, gpu("sm_90", "auto")) == "tf32"
    assert accumulator(spec, gpu("sm_89", "tensorcore")) == "tf32"
    assert accumulator(spec, gpu("sm_86", "auto")) == "float32"
    assert accumulator(spec, gpu("sm_90", "kernels")) == "float32"
    fnuz = _spec(5, 64, 9, "tensor", (FNUZ, FNUZ), "float32")
    assert accumulator(fnuz, gpu("sm_90", "auto")) == "float32"


# -- what the GPU run checks --------------------------------------------------------------------
def test_the_full_profile_reaches_both_kernels_for_every_pair():
    from accel.conformance import suite
    from accel.conformance.ops import build

    cases, _ = suite.planned("full", 0, ["scaled_matmul"], [E4, E5])
    reached: dict[tuple[str, str], set[str]] = {}
    for case in cases:
        spec = build(case)[0]
        # fresh device buffers are 256-byte aligned: the shapes decide
        for arch in ("sm_89", "sm_90"):
            name = gpu_launch(spec, arch=arch, impl="tensorcore").kernel
            reached.setdefault((spec.a_dtype, spec.b_dtype), set()).add(f"{name} {spec.scaling}")
    want = {f"{k} {g}" for k in ("scaled_matmul_mma", "scaled_matmul_mma_vec", "scaled_matmul_wgmma")
            for g in ("row", "block")}
    assert set(reached) == {(E4, E4), (E4, E5), (E5, E4)}
    assert all(want <= got for got in reached.values()), reached


def test_the_gpu_run_checks_fp8_on_tensor_cores():
    script = (ROOT / "conformance" / "gpu_check.sh").read_text()
    step = script[script.index("step conformance-fp8-tensorcore"):]
    step = step[: step.index("\nstep ")]
    for part in ("ACCEL_CUDA_IMPL=tensorcore", "--backend cuda", "--profile full", "--ops scaled_matmul",
                 "--dtypes float8_e4m3fn float8_e5m2"):
        assert part in step, part
