"""Launch planning for the ``cuda`` and ``hip`` backends (backends/cupy/backend.py), without a
device: which implementation computes a spec (``impl``: vendor BLAS, tensor cores or the shared
kernels), which shipped kernel variant and tensor-core kernel runs it, with which grid and block,
whether it is supported and how it accumulates, and how a kernel is built for a device arch.

Device-free: specs, arch strings and addresses in, answers out (building runs NVRTC / hiprtc,
which need no GPU); CuPy is never imported here, so CI checks every answer on a machine without a
GPU. The backend class imports from this module, never the reverse.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

from accel import kernels
from accel.backend import YES, Support, int32_sizes
from accel.errors import ArgumentError, CompileError, expected
from accel.formats import BLOCK
from accel.kernels import ceil_div, toolchains

IMPLS = ("auto", "kernels", "vendor", "tensorcore")
STATIC_SHARED_MAX = 48 * 1024  # static __shared__ per block on CUDA (and HIP's LDS default)
#: input dtypes the tensor-core matmul takes (float32 accumulation, any output float dtype)
TENSORCORE_DTYPES = ("float16", "bfloat16")
#: bfloat16 WMMA and cp.async arrive with Ampere
TENSORCORE_MIN_SM = 80
#: per op where it differs: mma.sync with FP8 (e4m3 / e5m2) operands arrives with Ada (sm_89)
TENSORCORE_OP_MIN_SM = {"scaled_matmul": 89}

#: CUDA's limits on gridDim (HIP has the same)
_GRID_X_MAX, _GRID_YZ_MAX = 2**31 - 1, 65535

#: threads per block: the per-block / per-value quantization kernels, qmatmul's weight rows
ELEMENTWISE_BLOCK = 256
QMATMUL_BLOCK = 64

#: an accel-dialect source that includes the header, or carries it inline (kernels.program_text)


# -- which implementation computes an op (pure: arch strings in, no device needed) --------------
#: per op: what its tensor-core kernel is, for the reasons supports() gives
TENSORCORE_KERNEL = {"matmul": "WMMA, kernels/matmul_wmma.cu",
                      "attention": "mma.sync, kernels/attention_mma.cu",
                      "scaled_matmul": "FP8 mma.sync, kernels/scaled_matmul_mma.cu"}


def tensorcore_reason(arch: str | None, op: str = "matmul") -> str | None:
    """Why a device of compile target ``arch`` cannot run ``op``'s tensor-core kernel, or None.

    >>> tensorcore_reason("sm_90") is None, tensorcore_reason("sm_75")[:36]
    (True, 'the tensor-core matmul needs sm_80 o')
    >>> tensorcore_reason("gfx90a", "attention")[:52]
    'the tensor-core attention (mma.sync, kernels/attenti'
    >>> tensorcore_reason("sm_89", "scaled_matmul") is None, tensorcore_reason("sm_86", "scaled_matmul")[:45]
    (True, 'the tensor-core scaled_matmul needs sm_89 or ')
    """
    if arch is None:
        return "no device arch is known"
    target = toolchains.parse_target(arch)
    if target.vendor != "nvidia":
        return f"the tensor-core {op} ({TENSORCORE_KERNEL[op]}) is CUDA-only; {arch} is AMD"
    sm = int(target.name.removeprefix("sm_").rstrip("a"))
    least = TENSORCORE_OP_MIN_SM.get(op, TENSORCORE_MIN_SM)
    if sm < least:
        what = "FP8 mma" if op == "scaled_matmul" else "bfloat16 mma, cp.async"
        return f"the tensor-core {op} needs sm_{least} or later ({what}); this device is {arch}"
    return _wmma_header_missing() if op == "matmul" else None  # attention is inline PTX


@functools.cache
def _wmma_header_missing() -> str | None:
    """NVRTC reads WMMA from mma.h, which includes crt/mma.h: a separate wheel since CUDA 13."""
    dirs = toolchains.cuda_include_dirs()
    if not any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in dirs):
        return (f"the CUDA headers NVRTC compiles with ({', '.join(dirs) or 'none found'}) lack "
                "crt/mma.h (WMMA): pip install nvidia-cuda-crt")
    return None


def _has_tensorcore_kernel(spec) -> bool:
    """Whether ``spec`` is a case accel has a tensor-core kernel for (dtype, head dims)."""

    if spec.op == "matmul":
        return spec.dtype in TENSORCORE_DTYPES
    if spec.op == "scaled_matmul":  # the OCP formats; e4m3fnuz has no NVIDIA tensor-core type
        return spec.a_dtype in kernels.MMA_FP8_DTYPES and spec.b_dtype in kernels.MMA_FP8_DTYPES
    return (spec.op == "attention" and spec.dtype in TENSORCORE_DTYPES and not spec.options
            and spec.D in kernels.ATTENTION_MMA_HEAD_DIMS and spec.Dv in kernels.ATTENTION_MMA_HEAD_DIMS)


def kernel_path(spec, impl: str, arch: str | None) -> str:
    """Which implementation computes ``spec`` under setting ``impl`` on a device of ``arch``:
    "vendor" (matmul only), "tensorcore" or "kernels". A forced "tensorcore" stays "tensorcore"
    for a case with a tensor-core kernel even where the device lacks tensor cores: supports()
    then declines with the reason.

    >>> from accel.spec import matmul_spec, attention_spec
    >>> s = matmul_spec((4, 8), "bfloat16", (8, 4), "bfloat16")
    >>> [kernel_path(s, "auto", a) for a in ("sm_90", "sm_75", "gfx90a")]
    ['tensorcore', 'kernels', 'kernels']
    >>> att = attention_spec((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), ("float16",) * 3)
    >>> kernel_path(att, "auto", "sm_80"), kernel_path(att, "vendor", "sm_80")
    ('tensorcore', 'kernels')
    >>> from accel.spec import scaled_matmul_spec
    >>> fp8 = scaled_matmul_spec((4, 32), "float8_e4m3fn", (32, 8), "float8_e5m2", (), "float32", (), "float32")
    >>> [kernel_path(fp8, "auto", a) for a in ("sm_90", "sm_89", "sm_86")]
    ['tensorcore', 'tensorcore', 'kernels']
    """
    if impl not in IMPLS:
        raise ArgumentError(expected("impl", f"one of {IMPLS}", repr(impl)))
    if impl == "vendor":
        return "vendor" if spec.op == "matmul" else "kernels"
    if _has_tensorcore_kernel(spec) and (
            impl == "tensorcore" or (impl == "auto" and tensorcore_reason(arch, spec.op) is None)):
        return "tensorcore"
    return "kernels"


def aligned16(*addresses: int) -> bool:
    """Whether every device address is 16-byte aligned (what 16-byte cp.async copies need)."""
    return all(a % 16 == 0 for a in addresses)


#: attention_mma.cu keeps logits in log2 units (scale * log2(e) multiplies them): beyond this
#: scale that factor overflows float32, so attention.cl (which multiplies by scale) computes it
MMA_SCALE_MAX = float(np.finfo(np.float32).max) / math.log2(math.e)


def tensorcore_kernel(spec, arch: str, *addresses: int):
    """(variant, kernel name) of the tensor-core kernel that computes ``spec`` (on the
    "tensorcore" path of :func:`kernel_path`) with its operands at device ``addresses`` (matmul:
    a, b; attention: q, k, v) on a device of ``arch``; None where only the SIMT kernel can.

    Matmul always has one: Hopper's wgmma kernel where the device is sm_90 and the rows are
    whole, 16-byte aligned 8-element chunks (its cp.async copies); else the WMMA kernel's
    cp.async variant where aligned; else WMMA's any-shape kernel (which is why supports() asks
    for WMMA's header even where wgmma runs). Attention's kernel copies 16-byte pieces of rows,
    so q, k and v must be 16-byte aligned, and ``|scale|`` at most MMA_SCALE_MAX; elsewhere
    attention.cl computes it, with the same float32 accumulation, also under a forced
    ``impl="tensorcore"``.

    >>> from accel.spec import matmul_spec, attention_spec
    >>> s = matmul_spec((4, 8), "float16", (8, 16), "float16")
    >>> [tensorcore_kernel(s, arch, 256, a)[1] for arch, a in (("sm_90", 512), ("sm_80", 512),
    ...                                                        ("sm_90", 514))]
    ['matmul_wgmma', 'matmul_wmma_vec', 'matmul_wmma']
    >>> att = attention_spec((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), ("float16",) * 3)
    >>> tensorcore_kernel(att, "sm_80", 256, 512, 768)[1], tensorcore_kernel(att, "sm_80", 256, 520, 768)
    ('attention_mma', None)

    FP8 scaled matmul always has one: where K and N are multiples of 16 and a and b 16-byte
    aligned (whole cp.async chunks), the wgmma kernel on sm_90 and mma.sync's cp.async kernel
    elsewhere, else mma.sync's any-shape kernel.

    >>> from accel.spec import scaled_matmul_spec
    >>> fp8 = scaled_matmul_spec((4, 32), "float8_e4m3fn", (32, 16), "float8_e4m3fn", (), "float32", (), "float32")
    >>> [tensorcore_kernel(fp8, arch, 256, a)[1] for arch, a in (("sm_90", 512), ("sm_89", 512), ("sm_90", 520))]
    ['scaled_matmul_wgmma', 'scaled_matmul_mma_vec', 'scaled_matmul_mma']
    """

    if spec.op == "attention":
        fits = aligned16(*addresses) and abs(spec.scale) <= MMA_SCALE_MAX
        return (kernel_variant(spec, "tensorcore"), "attention_mma") if fits else None
    if spec.op == "scaled_matmul":  # 16-byte FP8 chunks: cp.async where rows are whole chunks
        vec = spec.K % 16 == 0 and spec.N % 16 == 0 and aligned16(*addresses[:2])
        hopper = kernels.scaled_matmul_wgmma(spec.a_dtype, spec.b_dtype)
        if vec and hopper.nvidia_target(arch):
            return hopper, "scaled_matmul_wgmma"
        return kernel_variant(spec, "tensorcore"), "scaled_matmul_mma_vec" if vec else "scaled_matmul_mma"
    chunks = spec.K % 8 == 0 and spec.N % 8 == 0 and aligned16(*addresses)
    hopper = kernels.matmul_wgmma(spec.dtype, spec.out_dtype)
    if chunks and hopper.nvidia_target(arch):
        return hopper, "matmul_wgmma"
    return kernels.matmul_wmma(spec.dtype, spec.out_dtype), "matmul_wmma_vec" if chunks else "matmul_wmma"


# -- which shipped kernel runs a spec, and how it is launched (pure: testable without a GPU) -------
def kernel_variant(spec, path: str = "kernels"):
    """The ``accel.kernels`` variant (GPU parameters) that computes ``spec``; ``path`` is
    :func:`kernel_path`'s answer."""

    if spec.op == "matmul":
        if path == "tensorcore":
            return kernels.matmul_wmma(spec.dtype, spec.out_dtype)
        return kernels.matmul(spec.dtype, spec.out_dtype)
    if spec.op == "attention":
        if path == "tensorcore":
            return kernels.attention_mma(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype)
        return kernels.attention(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype,
                                 sinks=spec.sinks)
    if spec.op == "scaled_matmul":  # FP8 on tensor cores, else decoded in registers on any arch
        if path == "tensorcore":
            return kernels.scaled_matmul_mma(spec.a_dtype, spec.b_dtype)
        return kernels.scaled_matmul(spec.a_dtype, spec.b_dtype)
    # quant.cl holds quantize, dequantize, qmatmul and qgemv; dequantize reads bytes, any dtype
    # will do; qgemv (coalesced 16-byte weight loads) serves GEMV and small decode batches.
    # The K-quants, mxfp4 and q8_k are kquant.cl's, on the same terms.
    if spec.fmt.name in kernels.KQUANT_FORMATS:
        return kernels.kquant(spec.fmt.name, "float32" if spec.op == "dequantize" else spec.dtype)
    if kernels.gemv_applies(spec, kernels.GPU_GEMV):
        return kernels.quant(spec.fmt.name, spec.dtype, kernels.GPU_GEMV)
    return kernels.quant(spec.fmt.name, "float32" if spec.op == "dequantize" else spec.dtype)


def launch_plan(spec, variant, name: str | None = None,
                chunks: int = 1) -> tuple[str, tuple[int, int, int], tuple[int, int, int]]:
    """(kernel name, grid, block) for ``spec`` with the tiling in ``variant.defines``, following
    each kernel source's documented grid (kernels/*.cl); ``name`` picks one of a source's kernels
    with its own grid (``qgemv_stream``, ``qgemv_runs``, ``attention_combine``), else the one the
    spec implies; attention's keys split into ``chunks``."""

    d = variant.defines
    if variant.source == "matmul_wgmma.cu":  # the same grid; a warpgroup per 64 rows of a tile
        return "matmul_wgmma", (ceil_div(spec.N, d["BN"]), ceil_div(spec.M, d["BM"]), spec.batch), \
            (2 * d["BM"], 1, 1)
    if variant.source == "matmul_wmma.cu":  # the same grid; one block of warps per block tile
        return "matmul_wmma", (ceil_div(spec.N, d["BN"]), ceil_div(spec.M, d["BM"]), spec.batch), \
            (32 * d["WARPS_M"] * d["WARPS_N"], 1, 1)
    if variant.source == "scaled_matmul_mma.cu":  # x over BN-column tiles, y over BM-row tiles
        return name or variant.kernels[0], (ceil_div(spec.N, d["BN"]), ceil_div(spec.M, d["BM"]), 1), \
            (256, 1, 1)
    if spec.op == "scaled_matmul":  # x over column tiles, y over row tiles
        wg = kernels.SCALED_MATMUL_WG
        return "scaled_matmul", (*kernels.scaled_matmul_groups(spec, d, wg), 1), (wg, wg, 1)
    if spec.op == "matmul":  # x over column tiles, y over row tiles, z over the batch
        return "matmul", (ceil_div(spec.N, d["WG_N"] * d["TN"]), ceil_div(spec.M, d["WG_M"] * d["TM"]),
                          spec.batch), (d["WG_N"], d["WG_M"], 1)
    if variant.source == "attention_mma.cu":  # a block of warps per 16 * WARPS queries
        return "attention_mma", (ceil_div(spec.Sq, 16 * d["WARPS"]), spec.Hq, spec.B), \
            (32 * d["WARPS"], 1, 1)
    if name == "attention_combine":  # one thread per output value
        total = int(kernels.attention_combine_args(spec, chunks)[-1])
        return name, (ceil_div(total, ELEMENTWISE_BLOCK), 1, 1), (ELEMENTWISE_BLOCK, 1, 1)
    if spec.op == "attention":  # x over tiles of a kv head's query rows (per key chunk), y over kv heads
        grid, items = kernels.attention_grid(spec, d, chunks)
        return "attention", grid, (items, 1, 1)
    if variant.source == "kquant.cl":
        return _kquant_launch(spec, variant, name)
    if spec.op == "quantize":  # one thread per block of 32 values
        return "quantize", (ceil_div(math.prod(spec.shape) // BLOCK, ELEMENTWISE_BLOCK), 1, 1), \
            (ELEMENTWISE_BLOCK, 1, 1)
    if spec.op == "dequantize":  # one thread per value
        return "dequantize", (ceil_div(math.prod(spec.shape), ELEMENTWISE_BLOCK), 1, 1), \
            (ELEMENTWISE_BLOCK, 1, 1)
    if name == "quantize_x8":  # x's blocks into X8 words, one thread per block
        return name, (ceil_div(spec.M * spec.K // BLOCK, ELEMENTWISE_BLOCK), 1, 1), (ELEMENTWISE_BLOCK, 1, 1)
    if spec.x_fmt is not None:
        name = name or kernels.x8_kernel(d)
    if "GEMV_WG" in d:  # the GEMV kernels: qgemv, or the one named
        name = name or "qgemv"
        (groups_n, groups_m), items = kernels.gemv_launch(name, d, spec.N, spec.M)
        return name, (groups_n, groups_m, 1), (items, 1, 1)
    # qmatmul(_x8): x over groups of RN weight rows, y over groups of RM rows of x
    return name or "qmatmul", (ceil_div(spec.N, QMATMUL_BLOCK * d["RN"]), ceil_div(spec.M, d["RM"]), 1), \
        (QMATMUL_BLOCK, 1, 1)


def _kquant_launch(spec, variant, name: str | None) -> tuple[str, tuple[int, int, int], tuple[int, int, int]]:
    """kquant.cl's grids: quantize_k a thread per block (a super-block of 256, an mxfp4 block of
    32), dequantize_k a thread per 32 values; with float x qgemv_k, a block of KWG threads per RN
    weight rows and RM rows of x; qmatmul_k (named) and qmatmul_kx (x quantized first, see the
    backend's qmatmul) a thread per output, x over weight rows, y over rows of x."""
    if spec.op == "quantize":
        return "quantize_k", (ceil_div(math.prod(spec.shape) // spec.fmt.block, ELEMENTWISE_BLOCK), 1, 1), \
            (ELEMENTWISE_BLOCK, 1, 1)
    if spec.op == "dequantize":
        return "dequantize_k", (ceil_div(math.prod(spec.shape) // 32, ELEMENTWISE_BLOCK), 1, 1), \
            (ELEMENTWISE_BLOCK, 1, 1)
    name = name or ("qgemv_k" if spec.x_fmt is None else "qmatmul_kx")
    if name == "qgemv_k":
        d = variant.defines
        return name, (ceil_div(spec.N, d["RN"]), ceil_div(spec.M, d["RM"]), 1), (d["KWG"], 1, 1)
    return name, (ceil_div(spec.N, QMATMUL_BLOCK), spec.M, 1), (QMATMUL_BLOCK, 1, 1)


def support_for(spec, impl: str, arch: str | None = None) -> Support:
    """What ``supports()`` answers on a device of ``arch``: every op and dtype the spec layer
    allows, within the grid limits of the launch (vendor matmul has none of its own); a forced
    ``impl="tensorcore"`` declines float16/bfloat16 matmul and attention where the device lacks
    tensor cores (sm_80), and e4m3fn/e5m2 scaled_matmul where it lacks FP8 ones (sm_89), at
    every scale granularity alike; e4m3fnuz scaled_matmul runs scaled_matmul.cl everywhere."""
    fits = int32_sizes(spec)  # the kernels take int sizes; nor is cuBLAS's 32-bit API verified
    if not fits.ok:
        return fits
    if why := kernels.spec_declined(spec):
        return Support(False, why)
    path = kernel_path(spec, impl, arch)
    if path == "vendor":
        return YES
    if path == "tensorcore" and (why := tensorcore_reason(arch, spec.op)):
        return Support(False, f"impl='tensorcore': {why}; impl='auto' picks the shared kernels")
    variant = kernel_variant(spec, path)
    if variant.static_local_bytes > STATIC_SHARED_MAX:
        return Support(False, f"the {spec.op} kernel's tiles for this case need "
                              f"{variant.static_local_bytes} bytes of static shared memory; CUDA and "
                              f"HIP allow {STATIC_SHARED_MAX} per block")
    _, grid, _ = launch_plan(spec, variant)
    if grid[0] > _GRID_X_MAX or grid[1] > _GRID_YZ_MAX or grid[2] > _GRID_YZ_MAX:
        return Support(False, f"this case needs a grid of {grid} blocks; the limits are "
                              f"({_GRID_X_MAX}, {_GRID_YZ_MAX}, {_GRID_YZ_MAX})")
    return YES


def accumulator_for(spec, impl: str, arch: str | None = None) -> str:
    """The accumulation format actually used on a device of ``arch``: int32 for int8, float32
    for float ops (the kernels widen every operand to float32; tensor cores multiply
    float16/bfloat16 exactly and add in float32), tf32 where the user asked CuPy for it
    (CUPY_TF32=1 makes cuBLAS run float32 GEMMs on tf32 tensor cores) and for FP8 on tensor
    cores: their FP8 accumulation keeps about 14 bits (DeepSeek-V3, section 3.3.2), and
    kernels/scaled_matmul_mma.cu adds each 128-deep partial into float32, so tf32's unit
    roundoff (2^-11) bounds it.

    >>> from accel.spec import scaled_matmul_spec
    >>> s = scaled_matmul_spec((4, 32), "float8_e4m3fn", (32, 8), "float8_e4m3fn", (), "float32", (), "float32")
    >>> accumulator_for(s, "auto", "sm_90"), accumulator_for(s, "kernels", "sm_90"), accumulator_for(s, "auto", "sm_80")
    ('tf32', 'float32', 'float32')
    """
    if spec.in_dtypes[0] == "int8":
        return "int32"
    if spec.op == "scaled_matmul" and kernel_path(spec, impl, arch) == "tensorcore":
        return "tf32"
    if spec.op == "matmul" and impl == "vendor" and os.environ.get("CUPY_TF32") == "1":
        return "tf32"
    return "float32"


def build_kernel(source: str, name: str, arch: str, warp_size: int, *,
                 options: tuple[str, ...] = (), dialect: str = "accel") -> "toolchains.CompileResult":
    """Compile a kernel for a device arch exactly as the backend does (so CI can prove it without
    the device): accel-dialect sources get the portability header, every kernel gets the device's
    warp width as ``ACCEL_WARP``. Raises accel.CompileError with the log on failure."""
    include_dirs: tuple[str, ...] = ()
    if dialect == "accel":

        include_dirs = (str(kernels.HEADER.parent),)
        if not kernels.uses_header(source):  # the dialect's names come from the header
            source = f'#include "accel.h"\n#line 1 "{name}"\n{source}'
    result = toolchains.compile_source(source, arch, options=options,
                                       defines={"ACCEL_WARP": warp_size},
                                       include_dirs=include_dirs, filename=f"{name}.cu")
    if not result.ok:
        raise CompileError(name, arch, result.log)
    return result


def build_variant(variant, name: str, arch: str, warp_size: int) -> "toolchains.CompileResult":
    """Kernel ``name`` of shipped ``variant`` compiled for a device of ``arch`` as the backend
    runs it: for the compile target the variant needs there (``sm_90a`` for wgmma; an AMD arch
    as it is), with the variant's defines."""

    target = variant.nvidia_target(arch) or arch  # None for AMD archs
    return build_kernel(kernels.program_text(variant.source), name, target, warp_size,
                        options=tuple(variant.options()))


__all__ = ["IMPLS", "TENSORCORE_DTYPES", "TENSORCORE_OP_MIN_SM", "TENSORCORE_KERNEL", "STATIC_SHARED_MAX", "tensorcore_reason", "kernel_path", "aligned16",
           "tensorcore_kernel", "kernel_variant", "launch_plan", "support_for", "accumulator_for",
           "build_kernel", "build_variant"]
