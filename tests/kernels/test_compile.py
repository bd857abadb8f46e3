"""The shared kernel sources stay one honest dialect: every shipped variant builds on the OpenCL
devices here, GPU variants compile with hipcc for gfx90a (tests/kernels/test_check.py compiles every
GPU variant for sm_80, sm_90 and gfx90a through accel.kernels.toolchains), and the quantizer keeps every
rounding GGML's reference does (no FMA contraction) on CUDA and HIP."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gpu_toolchains import HIPCC, need_tool, nvrtc_binding
from markers import OPENCL_DEVICES, needs_opencl

import accel.kernels as K
from accel.kernels import toolchains
from accel.errors import ArgumentError, DTypeError


GPU_VARIANTS = [v for v in K.variants() if "cuda" in v.dialects]


def test_variants_are_unique_and_cover_every_source():
    vs = K.variants()
    assert len({v.id for v in vs}) == len(vs)
    assert {v.source for v in vs} == set(K.SOURCES)
    assert all(set(v.dialects) <= set(K.DIALECTS) for v in vs)
    # 16-lane vectors are OpenCL-only; CUDA and HIP get one lane per thread
    assert all(v.defines.get("VW", 1) == 1 for v in GPU_VARIANTS)
    assert {"IN_DT=F16", "IN_DT=BF16", "IN_DT=I8"} <= {o[2:] for v in vs for o in v.options()}


def test_sources_and_builders_validate_their_arguments():
    assert "accel.h" in str(K.HEADER) and K.source("accel.h").startswith("/*")
    with pytest.raises(ArgumentError, match="name"):
        K.source("../../etc/passwd")
    with pytest.raises(DTypeError, match="out_dtype"):
        K.matmul("int8", "float32")
    with pytest.raises(ArgumentError, match="fmt"):
        K.quant("q5_1")
    text = K.program_text("matmul.cl")
    assert text.index("#define KERNEL") < text.index('#line 1 "matmul.cl"')


@needs_opencl
@pytest.mark.parametrize("device", OPENCL_DEVICES)
def test_every_variant_builds_on_opencl(device):
    import accel
    from accel.backends.opencl.params import safe_lanes

    be = accel.get_backend(device)
    # every variant on the first device; every kernel (one variant per source) on the others,
    # which keeps a cold run short
    # (16-lane variants are never used where PyPI's PoCL 3.0 would abort in LLVM running them)
    usable = [v for v in K.variants() if "opencl" in v.dialects
              and not v.defines.get("VW", 1) > safe_lanes(be.dev) > 1]
    chosen = usable if device == "opencl:0" else {v.source: v for v in usable}.values()
    assert {v.source for v in chosen} == {v.source for v in K.variants() if "opencl" in v.dialects}
    for v in chosen:
        for name in v.kernels:
            be.kernel(v, name)  # raises CompileError with the log


def _nvrtc(text: str, name: str, options: list[str]):
    nvrtc = nvrtc_binding()
    prog = nvrtc.createProgram(text, name, [], [])
    try:
        nvrtc.compileProgram(prog, [*(f"-I{d}" for d in toolchains.cuda_include_dirs()), *options])
    except nvrtc.NVRTCError:
        pytest.fail(f"NVRTC failed for {name}:\n{nvrtc.getProgramLog(prog)}")
    return nvrtc, prog


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q8_k", "mxfp4", "q4_1",
                                 "q5_0", "q5_1", "q8_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs",
                                 "q1_0", "tq1_0", "tq2_0", "nvfp4"])
def test_cuda_quantizer_rounds_every_operation(fmt):
    v = K.quant(fmt, "float32") if fmt in K.KERNEL_FORMATS else K.kquant(fmt, "float32")
    entry = "quantize(" if fmt in K.KERNEL_FORMATS else "quantize_k("
    nvrtc, prog = _nvrtc(K.program_text(v.source), f"{v.source}.cu",
                         ["--gpu-architecture=compute_90", *v.options()])
    ptx = nvrtc.getPTX(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    body = next(e for e in ptx.split(".entry ")[1:] if e.startswith(entry))
    # GGML's reference rounds every product and sum: NVRTC's default --fmad=true must find none
    # to fuse (mxfp4's exact log2 through double may use fma.rn.f64 inside the library call)
    assert not re.search(r"\bfma\.\w*\.f32", body)
    if fmt != "mxfp4":  # 1/d correctly rounded (mxfp4 only compares products)
        assert "div.rn.f32" in body
    if fmt in ("q4_k", "q5_k"):  # the sub-block weights' sqrt(mean x^2)
        assert "sqrt.rn.f32" in body


def _hipcc(tmp_path: Path, variant: K.Variant, *flags: str) -> Path:
    need_tool("hipcc", HIPCC)
    src = tmp_path / f"{variant.source}.hip"
    src.write_text(K.program_text(variant.source))
    out = tmp_path / "out"
    env = dict(os.environ, HIP_PLATFORM="amd")  # else hipcc picks NVIDIA when nvcc is present
    r = subprocess.run(["hipcc", *flags, "--offload-arch=gfx90a", *variant.options(), str(src),
                        "-o", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("variant", [K.matmul("bfloat16", "float16"),
                                     K.attention("float16", 64, 64, "additive", "bfloat16"),
                                     K.quant("q4_0", "float16")], ids=lambda v: v.source)
def test_gpu_variant_compiles_with_hipcc_for_gfx90a(tmp_path, variant):
    assert _hipcc(tmp_path, variant, "--genco").stat().st_size > 1000


@pytest.mark.parametrize("fmt", ["q4_0", "q4_k"])
def test_hip_quantizer_fmas_only_inside_correctly_rounded_division(tmp_path, fmt):
    v = K.quant(fmt, "float32") if fmt in K.KERNEL_FORMATS else K.kquant(fmt, "float32")
    entry = "quantize" if fmt in K.KERNEL_FORMATS else "quantize_k"
    asm = _hipcc(tmp_path, v, "-S", "--cuda-device-only").read_text()
    body = asm[re.search(rf"^{entry}:", asm, re.M).start():]
    body = body[: body.index("s_endpgm")]
    # AMDGPU expands a correctly rounded division into div_scale, rcp, five fma / fmac steps,
    # div_fmas and div_fixup (the scheduler interleaves neighbouring divisions, so count rather
    # than cut them out); any other fma would be a contracted product and sum, such as x * id + 8.5
    divisions = len(re.findall(r"v_div_fixup_f32", body))
    assert divisions > 0 and divisions == len(re.findall(r"v_div_fmas_f32", body))
    assert len(re.findall(r"v_(fma|fmac|mad|mac)_f32|v_pk_fma", body)) == 5 * divisions


_C_SCALAR = {"int": "int32", "i64": "int64", "float": "float32"}
_OP_OF_KERNEL = {"matmul": "matmul", "matmul_wmma": "matmul", "matmul_wmma_vec": "matmul",
                 "matmul_wgmma": "matmul", "attention": "attention", "attention_mma": "attention",
                 "quantize": "quantize", "dequantize": "dequantize", "qmatmul": "qmatmul",
                 "qgemv": "qmatmul", "qgemv_stream": "qmatmul", "qgemv_runs": "qmatmul",
                 "dequantize_k": "dequantize", "qmatmul_k": "qmatmul", "quantize_k": "quantize",
                 "qmatmul_kx": "qmatmul", "qgemv_k": "qmatmul", "qgemv_kx": "qmatmul",
                 "scaled_matmul": "scaled_matmul"}


def _op_specs():
    from accel import spec as S
    from accel.formats import get_format

    q4 = get_format("q4_0")
    return {"matmul": S.matmul_spec((2, 3), "float32", (3, 4), "float32"),
            "attention": S.attention_spec((1, 2, 3, 8), (1, 1, 5, 8), (1, 1, 5, 8), ("float32",) * 3,
                                          mask_shape=(3, 5), mask_dtype="bool"),
            "quantize": S.quantize_spec((2, 64), "float32", "q4_0"),
            "dequantize": S.dequantize_spec((2, 64), q4),
            "qmatmul": S.qmatmul_spec((1, 64), "float32", (3, 64), q4),
            "scaled_matmul": S.scaled_matmul_spec((2, 8), "float8_e4m3fn", (8, 4), "float8_e5m2",
                                                  (), "float32", (), "float32")}


def test_every_kernel_signature_takes_the_scalar_args_the_backends_pass():
    # the planner passes accel.kernels.scalar_args after the buffers: its count and types must
    # be the ones every shipped kernel's parameter list ends with
    specs = _op_specs()
    seen = set()
    for src in K.SOURCES:
        text = K.source(src)
        for m in re.finditer(r"\b(\w+)\(([^()]*)\)\s*\{", text):
            name, params = m.group(1), [p.strip() for p in m.group(2).split(",")]
            if name not in _OP_OF_KERNEL or not any("GLOBAL" in p or "*" in p for p in params):
                continue
            scalars = [p.split()[-2] for p in params if "*" not in p]
            want = [type(a).__name__ for a in K.scalar_args(specs[_OP_OF_KERNEL[name]])]
            if name == "attention":  # attention.cl's key chunks follow them (the planner's)
                want.append("int32")
            assert [_C_SCALAR[t] for t in scalars] == want, (src, name, scalars)
            seen.add(name)
    assert seen == set(_OP_OF_KERNEL)
    from accel.backends.plan import DEFAULT_TILES, DeviceFacts, plan_for

    [attend] = plan_for(specs["attention"], DeviceFacts("opencl", 2, 32 * 1024, 128), DEFAULT_TILES["cpu"])
    assert [type(a).__name__ for a in attend.scalars] == [*(type(a).__name__ for a in K.scalar_args(
        specs["attention"])), "int32"]
