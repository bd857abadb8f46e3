"""The CUDA tensor-core attention (kernels/attention_mma.cu) without a GPU: every shipped variant
compiles with NVRTC for sm_80 and sm_90 without spills, and its machine code really issues
tensor-core MMAs fed by ldmatrix and cp.async; the cuda backend routes 16-bit attention with the
shipped head dims there from the arch string, and everything else to the shared kernel;
supports() declines a forced "tensorcore" where the device has none; launch geometry. Whether it
computes the right numbers is the GPU run's verdict (conformance/gpu_check.sh)."""
from __future__ import annotations

import pytest
from gpu_toolchains import built_without_spills, need, sass_of

import accel.kernels as K
from accel.kernels import check as KC
from accel import spec as S
from accel.backends import plan as P
from accel.backends.plan import cuda
from planning import gpu_launch, gpu_plan, gpu_support, kernel_path
from accel.errors import DTypeError

MMA_VARIANTS = [v for v in K.variants() if v.source == "attention_mma.cu"]


def att(dtype="bfloat16", d=64, dv=64, sq=100, sk=300, hq=4, hkv=2):
    return S.attention_spec((2, hq, sq, d), (2, hkv, sk, d), (2, hkv, sk, dv), (dtype,) * 3)


@pytest.fixture(autouse=True)
def shared_binaries(gpu_build_cache, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(gpu_build_cache))


# -- the variants -------------------------------------------------------------------------------
def test_shipped_for_both_16_bit_dtypes_every_head_dim_pairing_and_each_mask():
    ids = {(v.defines["IN_DT"], v.defines["HEAD_D"], v.defines["HEAD_DV"], v.defines["MASK_KIND"])
           for v in MMA_VARIANTS}
    dims = K.ATTENTION_MMA_HEAD_DIMS
    assert {(t, d, dv, 0) for t in ("F16", "BF16") for d in dims for dv in dims} <= ids
    assert {kind for *_, kind in ids} == {0, 1, 2}
    assert all(v.dialects == ("cuda",) and v.sm_range == (80, K.SM_ANY_LATER) for v in MMA_VARIANTS)


def test_builder_takes_16_bit_floats_only():
    with pytest.raises(DTypeError, match=r"^dtype: expected one of \('float16', 'bfloat16'\)"):
        K.attention_mma("float32", 64, 64)


def test_key_tiles_shrink_for_wide_heads_to_fit_static_shared_memory():
    for d in (64, 128):
        for dv in (64, 128):
            v = K.attention_mma("float16", d, dv)
            assert v.defines["BKV"] == (64 if d + dv <= 176 else 32)
            # two stages of BKV rows of K (d) and V (dv), 16-bit, each row padded by 8 elements
            assert v.static_local_bytes == 2 * 2 * v.defines["BKV"] * (d + 8 + dv + 8) <= 48 * 1024


# -- compiled for real targets ------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_variant_compiles_to_tensor_core_code_without_spills(arch):
    need(arch)
    for v in MMA_VARIANTS:
        r = built_without_spills(v, "attention_mma", arch)
        res = r.resources["attention_mma"]
        assert res.shared_bytes == v.static_local_bytes, (v.id, res)
        sass = sass_of(r, "attention_mma")
        assert sass["HMMA"] > 0 and sass["LDSM"] > 0 and sass["LDGSTS"] > 0, (v.id, sass)
        assert sass["LDL"] == sass["STL"] == 0, (v.id, sass)


def test_kernels_check_builds_them_for_ampere_and_later_only():
    need("sm_90")
    jobs = [j for j in KC.shipped_jobs() if j.file == "attention_mma.cu"][:1]
    outcomes = {o.target: o for o in KC.check(jobs, ["sm_90", "sm_75", "gfx90a"])}
    assert outcomes["sm_90"].status == "ok"
    assert outcomes["sm_75"].status == "n/a" and outcomes["sm_75"].log == "runs on sm_80 and later"
    assert outcomes["gfx90a"].status == "n/a"


# -- which implementation runs, from the arch string ----------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90", "sm_100"])
def test_16_bit_attention_runs_on_tensor_cores_from_ampere_on(arch):
    for dtype in ("float16", "bfloat16"):
        for d, dv in ((64, 64), (128, 128), (64, 128)):
            assert kernel_path(att(dtype, d, dv), "auto", arch) == "tensorcore"
            assert gpu_support(att(dtype, d, dv), "auto", arch).ok
    assert gpu_launch(att(), arch=arch, impl="tensorcore").variant.source == "attention_mma.cu"


@pytest.mark.parametrize("spec", [att("float32"), att(d=96, dv=96), att(d=32, dv=32), att(d=64, dv=80)])
def test_cases_without_a_tensor_core_kernel_stay_on_the_shared_kernel(spec):
    for impl in ("auto", "tensorcore", "kernels", "vendor"):
        assert kernel_path(spec, impl, "sm_90") == "kernels"
    assert gpu_plan(spec, impl="kernels")[0].variant.source == "attention.cl"


def test_a_scale_whose_log2_factor_overflows_runs_the_shared_kernel():
    # attention_mma multiplies logits by scale * log2(e) in float32: 3e38 * 1.44 is infinite
    # there, while attention.cl multiplies by scale itself
    q = (1, 2, 8, 64)
    for scale, kernel in ((2.3e38, "attention_mma"), (-2.3e38, "attention_mma"), (3e38, None),
                          (-3e38, None)):
        spec = S.attention_spec(q, q, q, ("float16",) * 3, scale=scale)
        chosen = gpu_plan(spec, impl="tensorcore")[0].kernel
        assert chosen == (kernel or "attention"), scale


@pytest.mark.parametrize("arch,why", [("sm_75", "needs sm_80 or later"), ("gfx90a", "CUDA-only"),
                                      (None, "no device arch")])
def test_older_gpus_and_amd_use_the_shared_kernel_and_decline_a_forced_tensorcore(arch, why):
    assert kernel_path(att(), "auto", arch) == "kernels"
    assert gpu_support(att(), "auto", arch).ok
    verdict = gpu_support(att(), "tensorcore", arch)
    assert not verdict.ok and why in verdict.reason and verdict.reason.startswith("impl='tensorcore': ")


def test_the_attention_kernel_needs_no_wmma_header(tmp_path, monkeypatch):
    facts = cuda("sm_90", "auto", missing="no crt/mma.h")
    assert P.tensorcore_reason("sm_90", "attention", facts.tensorcore_missing) is None
    assert P.kernel_path(att(), facts) == "tensorcore"
    assert P.tensorcore_reason("sm_90", "matmul", facts.tensorcore_missing) == "no crt/mma.h"


# -- launch geometry ------------------------------------------------------------------------------
@pytest.mark.parametrize("sq", [1, 63, 64, 65, 2048])
def test_grid_covers_every_query_once(sq):
    spec = att(sq=sq)
    [launch] = gpu_plan(spec, impl="tensorcore")
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    rows = 16 * v.defines["WARPS"]
    assert name == "attention_mma" and block == (32 * v.defines["WARPS"], 1, 1)
    assert grid[0] * rows >= sq > (grid[0] - 1) * rows
    assert grid[1:] == (spec.Hq, spec.B)


def test_unaligned_operands_run_the_shared_kernel():
    # the kernel copies 16-byte pieces of q, k and v rows
    assert [launch.kernel for launch in gpu_plan(att(), impl="tensorcore", align=16)] == ["attention_mma"]
    assert gpu_plan(att(), impl="tensorcore", align=8)[0].kernel == "attention"
