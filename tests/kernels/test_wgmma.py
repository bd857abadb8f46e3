"""The Hopper tensor-core matmul (kernels/matmul_wgmma.cu) without a GPU: every shipped variant
compiles with NVRTC for sm_90a without spills and its machine code issues HGMMA (wgmma) fed by
cp.async; it is built for sm_90 devices only (sm_90a code runs nowhere else) and refuses any
other target with a clear #error; the backend routes aligned 16-bit matmuls there on sm_90 only;
launch geometry and the dynamic shared memory it needs. Numbers: the GPU run's verdict."""
from __future__ import annotations

import pytest
from gpu_toolchains import built_without_spills, need, sass_of

import accel.kernels as K
from accel.kernels import check as KC
from accel import spec as S
from accel.kernels import toolchains
from planning import gpu_launch

WGMMA_VARIANTS = [v for v in K.variants() if v.source == "matmul_wgmma.cu"]


@pytest.fixture(autouse=True)
def shared_binaries(gpu_build_cache, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(gpu_build_cache))


def test_every_input_and_output_dtype_is_shipped_for_hopper_only():
    pairs = {(v.defines["IN_DT"], v.defines["OUT_DT"]) for v in WGMMA_VARIANTS}
    assert pairs == {(i, o) for i in ("F16", "BF16") for o in ("F32", "F16", "BF16")}
    for v in WGMMA_VARIANTS:
        assert v.dialects == ("cuda",)
        assert v.nvidia_target("sm_90") == "sm_90a"
        assert v.nvidia_target("sm_80") is v.nvidia_target("sm_100") is v.nvidia_target("gfx90a") is None


def test_sm_90a_builds_tensor_core_code_without_spills():
    need("sm_90")
    for v in WGMMA_VARIANTS:
        r = built_without_spills(v, "matmul_wgmma", "sm_90a", threads=2 * v.defines["BM"])
        assert "matmul_wgmma" in r.resources, v.id
        sass = sass_of(r, "matmul_wgmma")
        assert sass["HGMMA"] > 0 and sass["LDGSTS"] > 0, (v.id, sass)
        assert sass["LDL"] == sass["STL"] == 0, (v.id, sass)


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
def test_other_targets_are_refused_with_the_reason(target):
    need(target)
    v = WGMMA_VARIANTS[0]
    r = toolchains.compile_source(K.program_text(v.source), target, defines=dict(v.defines),
                                  include_dirs=(str(K.HEADER.parent),), use_cache=False)
    assert not r.ok and "matmul_wgmma.cu needs sm_90a" in r.log


def test_kernels_check_builds_them_as_sm_90a_for_sm_90_only():
    need("sm_90")
    jobs = [j for j in KC.shipped_jobs() if j.file == "matmul_wgmma.cu"][:1]
    outcomes = {o.target: o for o in KC.check(jobs, ["sm_90", "sm_80", "gfx90a"])}
    assert outcomes["sm_90"].status == "ok" and outcomes["sm_90"].log.startswith("built as sm_90a")
    assert outcomes["sm_80"].status == "n/a" and outcomes["sm_80"].log == "runs on sm_90 only"
    assert outcomes["gfx90a"].status == "n/a"


def test_dynamic_shared_memory_is_the_stages_of_both_tiles_plus_alignment():
    for v in WGMMA_VARIANTS:
        d = v.defines
        assert v.dynamic_local_bytes == d["STAGES"] * (d["BM"] * d["BK"] + d["BK"] * d["BN"]) * 2 + 1024
        assert 48 * 1024 < v.dynamic_local_bytes <= 227 * 1024  # an opt-in, within sm_90's limit


@pytest.mark.parametrize("m,n,batch", [(1, 8, 1), (128, 256, 1), (129, 264, 3), (4096, 4096, 1)])
def test_grid_covers_the_output_once(m, n, batch):
    spec = S.matmul_spec((batch, m, 64), "bfloat16", (64, n), "bfloat16")
    launch = gpu_launch(spec, arch="sm_90", impl="tensorcore")
    name, grid, block, d = launch.kernel, launch.grid, launch.block, launch.variant.defines
    assert name == "matmul_wgmma" and block == (2 * d["BM"], 1, 1)
    assert grid[0] * d["BN"] >= n > (grid[0] - 1) * d["BN"]
    assert grid[1] * d["BM"] >= m > (grid[1] - 1) * d["BM"]
    assert grid[2] == batch
