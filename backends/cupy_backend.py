"""The one implementation behind the ``cuda`` and ``hip`` backends, on CuPy.

CuPy's Python API is the same on CUDA and ROCm; what differs is made explicit by the two thin
subclasses (backends/cuda.py, backends/hip.py): the platform CuPy must be built for, the arch the
kernels are compiled for (``sm_XY`` / ``gfx...``, read from the device), the warp width passed to
every kernel as ``ACCEL_WARP`` (32, or 64 on CDNA wavefronts, read from the device), the vendor
BLAS name and how versions are spelled.

Kernels are built by ``accel.toolchains`` (NVRTC / hiprtc, the same code path ``accel kernels
check`` proves in CI without a GPU), cached on disk, and loaded with ``cupy.RawModule(path=...)``.

The implementation is chosen per backend instance by ``backend.impl`` (default from the
environment variable ``ACCEL_CUDA_IMPL`` / ``ACCEL_HIP_IMPL``, else ``"auto"``):

- ``"kernels"``: the shared-dialect kernels from ``accel.kernels`` for every op;
- ``"vendor"``: matmul through the vendor BLAS (cuBLAS / hipBLAS via ``cupy.matmul``), every
  other op still through the shared kernels;
- ``"tensorcore"``: float16/bfloat16 matmul and attention (head dims 64 and 128) on NVIDIA
  tensor cores (kernels/matmul_wgmma.cu, matmul_wmma.cu, attention_mma.cu; sm_80 and later,
  declined with the reason elsewhere; :func:`tensorcore_kernel` picks one by the operands'
  addresses), everything else as ``"kernels"``;
- ``"auto"``: ``"tensorcore"`` where the device has it, else ``"kernels"``.
"""
from __future__ import annotations

import functools
import math
import os
import re
from typing import Any, ClassVar

import numpy as np

from accel import toolchains
from accel.backend import YES, Backend, DeviceInfo, Support, int32_sizes
from accel.dtypes import to_numpy_dtype
from accel.errors import (ArgumentError, BackendUnavailable, CompileError, DeviceError,
                          DTypeError, UnsupportedError, expected)
from accel.exact_int8 import exact_int8_matmul
from accel.formats import BLOCK
from accel.kernels import ceil_div
from accel.spec import X_FORMATS

IMPLS = ("auto", "kernels", "vendor", "tensorcore")
_STATIC_SHARED_MAX = 48 * 1024  # static __shared__ per block on CUDA (and HIP's LDS default)
#: input dtypes the tensor-core matmul takes (float32 accumulation, any output float dtype)
TENSORCORE_DTYPES = ("float16", "bfloat16")
#: bfloat16 WMMA and cp.async arrive with Ampere
TENSORCORE_MIN_SM = 80

#: CUDA's limits on gridDim (HIP has the same)
_GRID_X_MAX, _GRID_YZ_MAX = 2**31 - 1, 65535

#: threads per block: the per-block / per-value quantization kernels, qmatmul's weight rows
ELEMENTWISE_BLOCK = 256
QMATMUL_BLOCK = 64


# -- availability -----------------------------------------------------------------------------
def format_version(platform: str, version: int) -> str:
    """Spell a runtime/driver version integer the way each vendor does.

    >>> format_version("cuda", 12080), format_version("hip", 60342134)
    ('12.8', '6.3.42134')
    """
    if platform == "cuda":
        return f"{version // 1000}.{version % 1000 // 10}"
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


def unavailable_reason(platform: str, *, cupy_version: str, built_for_hip: bool,
                       driver_version: int | None, runtime_version: int | None,
                       query_error: str | None = None, device_count: int | None = None) -> str | None:
    """Why CuPy cannot give this platform a device, or None when it can. Pure: the facts come in
    as arguments so every branch is testable on any machine.

    >>> unavailable_reason("cuda", cupy_version="14.2.0", built_for_hip=False, driver_version=0,
    ...                    runtime_version=13020, query_error="cudaErrorInsufficientDriver")[:39]
    'no NVIDIA GPU driver on this machine: C'
    """
    vendor, stack = ("NVIDIA", "CUDA") if platform == "cuda" else ("AMD", "ROCm")
    if built_for_hip != (platform == "hip"):
        other = "ROCm (a cupy-rocm-* wheel)" if built_for_hip else "CUDA (a cupy-cuda* wheel)"
        want = "cupy-rocm-7-0" if platform == "hip" else "cupy-cuda12x or cupy-cuda13x"
        return f"the installed CuPy {cupy_version} is built for {other}, not {stack}: install {want}"
    runtime = format_version(platform, runtime_version) if runtime_version else "unknown"
    if driver_version == 0:
        return (f"no {vendor} GPU driver on this machine: CuPy {cupy_version} ({stack} runtime "
                f"{runtime}) is installed, but the driver reports version 0 (no GPU or driver)")
    if platform == "cuda" and driver_version and runtime_version and (
            driver_version // 1000 < runtime_version // 1000
            or (query_error and "InsufficientDriver" in query_error)):
        return (f"the NVIDIA driver is too old: it supports CUDA {format_version('cuda', driver_version)}"
                f", CuPy {cupy_version} needs CUDA {runtime}; update the driver or install the CuPy "
                f"wheel for CUDA {driver_version // 1000}")
    if query_error:
        return f"{stack} device query failed: {query_error}"
    if not device_count:
        return f"no {vendor} GPU found ({stack} runtime {runtime} sees 0 devices)"
    return None


#: an accel-dialect source that includes the header, or carries it inline (kernels.program_text)
_HAS_HEADER = re.compile(r'^\s*#\s*(include\s*[<"]accel\.h[">]|define\s+ACCEL_H\b)', re.MULTILINE)


def _cupy():
    """CuPy, imported only when a backend is used (``import accel`` never pays for it)."""
    import cupy

    return cupy


# -- xp-generic helpers: the same code runs on cupy arrays on the device and numpy arrays in tests --
def bf16_bits_to_f32(xp, bits):
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


def f32_to_bf16_bits(xp, x):
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(xp.uint16)
    quiet_nan = ((u >> 16) | 0x40).astype(xp.uint16)
    return xp.where((u & 0x7FFFFFFF) > 0x7F800000, quiet_nan, rounded)


def to_f32(xp, x, dtype: str):
    """A float32 copy/view of an operand stored as ``dtype`` (bfloat16 as uint16 bits)."""
    return bf16_bits_to_f32(xp, x) if dtype == "bfloat16" else x.astype(xp.float32, copy=False)


def from_f32(xp, x, dtype: str):
    """float32 values as stored for ``dtype`` (bfloat16 as uint16 bits), rounded to nearest even."""
    return f32_to_bf16_bits(xp, x) if dtype == "bfloat16" else x.astype(to_numpy_dtype(dtype))


def vendor_matmul(xp, a, b, dtype: str, out_dtype: str):
    """``a @ b`` through the array library's BLAS (cuBLAS/hipBLAS for cupy): float inputs are
    widened to float32 (exact) and multiplied in float32, int8 exactly; stored as ``out_dtype``."""
    if dtype == "int8":
        return exact_int8_matmul(xp, a, b)
    return from_f32(xp, xp.matmul(to_f32(xp, a, dtype), to_f32(xp, b, dtype)), out_dtype)


def _storage_dtype(dtype: str):
    """The numpy dtype a device buffer of ``dtype`` is viewed as (bfloat16 as its uint16 bits)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else to_numpy_dtype(dtype)


# -- which implementation computes an op (pure: arch strings in, no device needed) --------------
#: per op: what its tensor-core kernel is, for the reasons supports() gives
_TENSORCORE_KERNEL = {"matmul": "WMMA, kernels/matmul_wmma.cu",
                      "attention": "mma.sync, kernels/attention_mma.cu"}


def tensorcore_reason(arch: str | None, op: str = "matmul") -> str | None:
    """Why a device of compile target ``arch`` cannot run ``op``'s tensor-core kernel, or None.

    >>> tensorcore_reason("sm_90") is None, tensorcore_reason("sm_75")[:36]
    (True, 'the tensor-core matmul needs sm_80 o')
    >>> tensorcore_reason("gfx90a", "attention")[:52]
    'the tensor-core attention (mma.sync, kernels/attenti'
    """
    if arch is None:
        return "no device arch is known"
    target = toolchains.parse_target(arch)
    if target.vendor != "nvidia":
        return f"the tensor-core {op} ({_TENSORCORE_KERNEL[op]}) is CUDA-only; {arch} is AMD"
    sm = int(target.name.removeprefix("sm_").rstrip("a"))
    if sm < TENSORCORE_MIN_SM:
        return (f"the tensor-core {op} needs sm_{TENSORCORE_MIN_SM} or later (bfloat16 mma, "
                f"cp.async); this device is {arch}")
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
    from accel import kernels

    if spec.op == "matmul":
        return spec.dtype in TENSORCORE_DTYPES
    return (spec.op == "attention" and spec.dtype in TENSORCORE_DTYPES
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
    """
    from accel import kernels

    if spec.op == "attention":
        fits = aligned16(*addresses) and abs(spec.scale) <= MMA_SCALE_MAX
        return (kernel_variant(spec, "tensorcore"), "attention_mma") if fits else None
    chunks = spec.K % 8 == 0 and spec.N % 8 == 0 and aligned16(*addresses)
    hopper = kernels.matmul_wgmma(spec.dtype, spec.out_dtype)
    if chunks and hopper.nvidia_target(arch):
        return hopper, "matmul_wgmma"
    return kernels.matmul_wmma(spec.dtype, spec.out_dtype), "matmul_wmma_vec" if chunks else "matmul_wmma"


# -- which shipped kernel runs a spec, and how it is launched (pure: testable without a GPU) -------
def kernel_variant(spec, path: str = "kernels"):
    """The ``accel.kernels`` variant (GPU parameters) that computes ``spec``; ``path`` is
    :func:`kernel_path`'s answer."""
    from accel import kernels

    if spec.op == "matmul":
        if path == "tensorcore":
            return kernels.matmul_wmma(spec.dtype, spec.out_dtype)
        return kernels.matmul(spec.dtype, spec.out_dtype)
    if spec.op == "attention":
        build = kernels.attention_mma if path == "tensorcore" else kernels.attention
        return build(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype)
    # quant.cl holds quantize, dequantize, qmatmul and qgemv; dequantize reads bytes, any dtype
    # will do; qgemv (coalesced 16-byte weight loads) serves GEMV and small decode batches
    if kernels.gemv_applies(spec, kernels.GPU_GEMV):
        return kernels.quant(spec.fmt.name, spec.dtype, kernels.GPU_GEMV)
    return kernels.quant(spec.fmt.name, "float32" if spec.op == "dequantize" else spec.dtype)


def launch_plan(spec, variant, name: str | None = None,
                chunks: int = 1) -> tuple[str, tuple[int, int, int], tuple[int, int, int]]:
    """(kernel name, grid, block) for ``spec`` with the tiling in ``variant.defines``, following
    each kernel source's documented grid (kernels/*.cl); ``name`` picks one of a source's kernels
    with its own grid (``qgemv_stream``, ``qgemv_runs``, ``attention_combine``), else the one the
    spec implies; attention's keys split into ``chunks``."""
    from accel import kernels

    d = variant.defines
    if variant.source == "matmul_wgmma.cu":  # the same grid; a warpgroup per 64 rows of a tile
        return "matmul_wgmma", (ceil_div(spec.N, d["BN"]), ceil_div(spec.M, d["BM"]), spec.batch), \
            (2 * d["BM"], 1, 1)
    if variant.source == "matmul_wmma.cu":  # the same grid; one block of warps per block tile
        return "matmul_wmma", (ceil_div(spec.N, d["BN"]), ceil_div(spec.M, d["BM"]), spec.batch), \
            (32 * d["WARPS_M"] * d["WARPS_N"], 1, 1)
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


def support_for(spec, impl: str, arch: str | None = None) -> Support:
    """What ``supports()`` answers on a device of ``arch``: every op and dtype the spec layer
    allows, within the grid limits of the launch (vendor matmul has none of its own); a forced
    ``impl="tensorcore"`` declines float16/bfloat16 matmul and attention where the device lacks
    tensor cores."""
    fits = int32_sizes(spec)  # the kernels take int sizes; nor is cuBLAS's 32-bit API verified
    if not fits.ok:
        return fits
    path = kernel_path(spec, impl, arch)
    if path == "vendor":
        return YES
    if path == "tensorcore" and (why := tensorcore_reason(arch, spec.op)):
        return Support(False, f"impl='tensorcore': {why}; impl='auto' picks the shared kernels")
    variant = kernel_variant(spec, path)
    if variant.static_local_bytes > _STATIC_SHARED_MAX:
        return Support(False, f"the {spec.op} kernel's tiles for this case need "
                              f"{variant.static_local_bytes} bytes of static shared memory; CUDA and "
                              f"HIP allow {_STATIC_SHARED_MAX} per block")
    _, grid, _ = launch_plan(spec, variant)
    if grid[0] > _GRID_X_MAX or grid[1] > _GRID_YZ_MAX or grid[2] > _GRID_YZ_MAX:
        return Support(False, f"this case needs a grid of {grid} blocks; the limits are "
                              f"({_GRID_X_MAX}, {_GRID_YZ_MAX}, {_GRID_YZ_MAX})")
    return YES


def accumulator_for(spec, impl: str) -> str:
    """The accumulation format actually used: int32 for int8, float32 for float ops (the kernels
    widen every operand to float32; tensor cores multiply float16/bfloat16 exactly and add in
    float32), tf32 only where the user asked CuPy for it (CUPY_TF32=1 makes cuBLAS run float32
    GEMMs on tf32 tensor cores)."""
    if spec.in_dtypes[0] == "int8":
        return "int32"
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
        from accel import kernels

        include_dirs = (str(kernels.HEADER.parent),)
        if not _HAS_HEADER.search(source):  # the dialect's names come from the header
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
    from accel import kernels

    target = variant.nvidia_target(arch) or arch  # None for AMD archs
    return build_kernel(kernels.program_text(variant.source), name, target, warp_size,
                        options=tuple(variant.options()))


# -- the backend --------------------------------------------------------------------------------
class CuPyBackend(Backend):
    """One CuPy device; subclasses fix the platform (``cuda`` or ``hip``)."""
    x_formats = X_FORMATS  # it computes every x_format accel defines

    platform: ClassVar[str]
    vendor: ClassVar[str]
    vendor_blas: ClassVar[str]
    priority = 30  # above OpenCL on a GPU (20) and the CPU reference (10)
    alignment = 256  # cudaMalloc / hipMalloc alignment: views at these offsets stay aligned

    # -- discovery ---------------------------------------------------------------------------------
    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        found, reason = cls._probe()
        if reason:
            raise BackendUnavailable(f"backend {cls.name!r}: {reason}")
        return list(found)

    @classmethod
    @functools.cache
    def _probe(cls) -> tuple[tuple[DeviceInfo, ...], str | None]:
        """(devices, None) or ((), reason); cached, and never raises."""
        try:
            cupy = _cupy()
            from cupy.cuda import runtime
        except ImportError as e:
            if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "cupy":
                return (), (f"CuPy is not installed: pip install "
                            f"'accel-portable[{'rocm' if cls.platform == 'hip' else 'cuda12'}]'")
            return (), f"CuPy failed to import: {type(e).__name__}: {e}"
        except Exception as e:  # a broken CuPy install (missing shared libraries, ...)
            return (), f"CuPy failed to import: {type(e).__name__}: {e}"
        facts: dict[str, Any] = {"cupy_version": cupy.__version__, "built_for_hip": bool(runtime.is_hip)}
        if facts["built_for_hip"] != (cls.platform == "hip"):
            return (), unavailable_reason(cls.platform, driver_version=None, runtime_version=None,
                                          **facts)
        for key, query in (("driver_version", runtime.driverGetVersion),
                           ("runtime_version", runtime.runtimeGetVersion),
                           ("device_count", runtime.getDeviceCount)):
            try:
                facts[key] = query()
            except Exception as e:  # CUDARuntimeError / HIP errors: the reason says which
                facts.setdefault("query_error", f"{type(e).__name__}: {e}")
                facts[key] = None
        reason = unavailable_reason(cls.platform, **facts)
        if reason:
            return (), reason
        try:
            found = tuple(cls._describe(runtime.getDeviceProperties(i), facts)
                          for i in range(facts["device_count"]))
        except Exception as e:
            return (), f"device properties query failed: {type(e).__name__}: {e}"
        return found, None

    @classmethod
    def _describe(cls, props: dict, facts: dict) -> DeviceInfo:
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        extra = {"arch": cls.arch_of(props), "warp_size": int(props["warpSize"]),
                 "runtime": format_version(cls.platform, facts["runtime_version"]),
                 "cupy": facts["cupy_version"]}
        driver = f"{cls.platform.upper()} driver {format_version(cls.platform, facts['driver_version'])}"
        return DeviceInfo(name, cls.vendor, driver, int(props["totalGlobalMem"]),
                          int(props["multiProcessorCount"]), extra)

    @classmethod
    def arch_of(cls, props: dict) -> str:
        """The compile target of a device from its properties (``sm_XY`` or ``gfx...``)."""
        raise NotImplementedError

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.cupy = _cupy()
        self.device = self.cupy.cuda.Device(index)
        self.arch: str = self.info.extra["arch"]
        self.warp_size: int = self.info.extra["warp_size"]
        env = f"ACCEL_{self.platform.upper()}_IMPL"
        self._impl = os.environ.get(env, "auto")
        if self._impl not in IMPLS:
            raise ArgumentError(expected(env, f"one of {IMPLS}", repr(self._impl)))
        self._modules: dict[tuple, Any] = {}
        self._shipped: dict[tuple, Any] = {}
        self._scratch: dict[int, Any] = {}  # stream -> its scratch buffer (see scratch())
        self._retired: list[Any] = []

    # -- implementation choice ---------------------------------------------------------------
    @property
    def impl(self) -> str:
        """"auto" (default: "tensorcore" where the device has it), "kernels" (shared-dialect
        kernels for every op), "vendor" (vendor BLAS for matmul) or "tensorcore" (float16/bfloat16
        matmul and attention on tensor cores, sm_80+ CUDA only)."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        if value not in IMPLS:
            raise ArgumentError(expected("impl", f"one of {IMPLS}", repr(value)))
        self._impl = value
        self.settings_changed()

    # -- memory: a buffer is a 1-d uint8 cupy array ---------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        with self.device:
            return self.cupy.empty(nbytes, self.cupy.uint8)

    def upload(self, host: np.ndarray) -> Any:
        with self.device:
            return self.cupy.asarray(np.ascontiguousarray(host).reshape(-1).view(np.uint8))

    def download(self, buf: Any, nbytes: int) -> np.ndarray:
        with self.device:
            return self.cupy.asnumpy(buf[:nbytes])

    def view(self, buf: Any, offset: int, nbytes: int) -> Any:
        return buf[offset: offset + nbytes]

    def synchronize(self) -> None:
        with self.device:
            self.cupy.cuda.get_current_stream().synchronize()

    def import_array(self, x: Any) -> Any | None:
        """Zero-copy: a contiguous cupy array or torch GPU tensor on this device becomes a uint8
        view of the same memory; None for arrays elsewhere."""
        mod = type(x).__module__
        if mod.startswith("cupy"):
            if x.device.id != self.index:
                return None
            return self.cupy.ascontiguousarray(x).reshape(-1).view(self.cupy.uint8)
        if mod.startswith("torch"):
            import torch

            on_platform = bool(getattr(torch.version, "hip", None)) == (self.platform == "hip")
            if x.device.type != "cuda" or x.device.index != self.index or not on_platform:
                return None
            with self.device:
                return self.cupy.from_dlpack(x.detach().contiguous().reshape(-1).view(torch.uint8))
        return None

    def export_array(self, tensor) -> Any:
        """A cupy array viewing ``tensor`` (bfloat16 as ml_dtypes.bfloat16, which CuPy >= 14
        carries through DLPack)."""
        raw = tensor.buf[: tensor.nbytes]
        try:
            return raw.view(to_numpy_dtype(tensor.dtype)).reshape(tensor.shape)
        except TypeError as e:  # an older CuPy without ml_dtypes support
            raise DTypeError(expected("tensor.dtype", f"a dtype CuPy {self.cupy.__version__} can "
                                      "export (bfloat16 needs CuPy >= 14)", tensor.dtype)) from e

    def _array(self, t) -> Any:
        """A typed cupy view of a tensor's buffer (bfloat16 as its uint16 bits)."""
        return t.buf[: t.nbytes].view(_storage_dtype(t.dtype)).reshape(t.shape)

    # -- kernels ------------------------------------------------------------------------------------
    def compile(self, source: str, name: str, *, options: tuple[str, ...] = (),
                dialect: str = "accel") -> Any:
        """Build ``name`` for this device's arch (cached in memory, and on disk by
        accel.toolchains); CompileError carries the compiler log."""
        if dialect not in ("accel", "cuda"):
            raise UnsupportedError(self.device_id, "kernel", "-",
                                   f"the {self.name} backend compiles the accel and cuda dialects, "
                                   f"not {dialect!r} (translate it with `accel port`)")
        return self._build(source, name, tuple(options), dialect, self.arch)

    def _build(self, source: str, name: str, options: tuple[str, ...], dialect: str, target: str) -> Any:
        key = (source, name, options, dialect, target)
        if key not in self._modules:
            self._modules[key] = self._load(
                build_kernel(source, name, target, self.warp_size, options=options, dialect=dialect), name)
        return self._modules[key]

    def _load(self, result: "toolchains.CompileResult", name: str) -> Any:
        """Kernel ``name`` of a compiled binary, loaded on this device."""
        try:
            with self.device:
                return self.cupy.RawModule(path=str(result.path)).get_function(name)
        except Exception as e:  # no such kernel in the module, or the driver rejects the binary
            raise CompileError(name, result.target, f"loading the {result.target} binary failed: "
                                                    f"{type(e).__name__}: {e}") from e

    def launch(self, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: list, shared_mem: int = 0) -> None:
        """Enqueue with CUDA semantics; accel.Tensor arguments pass their device buffer."""
        from accel.tensor import Tensor

        raw = tuple(a.buf if isinstance(a, Tensor) else a for a in args)
        try:
            with self.device:
                kernel(tuple(grid), tuple(block), raw, shared_mem=int(shared_mem))
        except Exception as e:  # invalid configuration, out of resources: a device error
            raise DeviceError(f"launching {getattr(kernel, 'kernel', kernel)!r} with grid {grid}, "
                              f"block {block}, shared_mem {shared_mem} on {self.device_id} failed: "
                              f"{type(e).__name__}: {e}") from e

    # -- ops ------------------------------------------------------------------------------------
    def supports(self, spec) -> Support:
        return support_for(spec, self.impl, self.arch)

    def accumulator(self, spec) -> str:
        return accumulator_for(spec, self.impl)

    def kernel_args(self, spec, out, *inputs, splits: Any = None) -> list:
        """The arguments every shipped kernel of ``spec``'s op takes: the op's inputs (tensors,
        attention's mask after the output and a placeholder for none), the output, matmul's
        batch offsets, attention's key-chunk records (``splits``; a placeholder for one pass),
        then :func:`accel.kernels.scalar_args`."""
        from accel import kernels

        if spec.op == "matmul":
            with self.device:
                bufs = [*inputs, out, self.cupy.asarray(spec.batch_offsets().reshape(-1))]
        elif spec.op == "attention":
            *qkv, mask = inputs
            bufs = [*qkv, out, self._unused() if mask is None else mask,
                    self._unused() if splits is None else splits]
        else:
            bufs = [*inputs, out]
        return bufs + list(kernels.scalar_args(spec))

    def run_variant(self, spec, variant, args: list, name: str | None = None, chunks: int = 1) -> None:
        """Launch shipped ``variant`` (kernel ``name``, else the one launch_plan names) on
        ``args`` (:meth:`kernel_args`), built once per variant for the compile target it needs
        on this device. The ops call it with the variant they choose; the speed-goal script
        (accel.conformance.gpu_goals) with the alternatives it times."""
        planned, grid, block = launch_plan(spec, variant, name, chunks)
        name = name or planned
        fn = self._shipped.get((variant, name))
        if fn is None:  # built once per variant: no source reading or hashing on later calls
            fn = self._load(build_variant(variant, name, self.arch, self.warp_size), name)
            if variant.dynamic_local_bytes > _STATIC_SHARED_MAX:  # an opt-in above 48 KiB
                with self.device:
                    fn.max_dynamic_shared_size_bytes = variant.dynamic_local_bytes
            self._shipped[(variant, name)] = fn
        self.launch(fn, grid, block, args, variant.dynamic_local_bytes)

    def _compute(self, spec, *inputs: Any, out: Any, name: str | None = None) -> None:
        """Run ``spec``'s kernel on the path ``impl`` gives it: the tensor-core kernel chosen by
        the operands' addresses where there is one, else the shipped shared-dialect variant
        (kernel ``name``, else the one launch_plan names)."""
        args = self.kernel_args(spec, out, *inputs)
        if kernel_path(spec, self.impl, self.arch) == "tensorcore":
            addresses = (t.buf.data.ptr for t in inputs[:3])  # matmul's a, b; attention's q, k, v
            chosen = tensorcore_kernel(spec, self.arch, *addresses)
            if chosen is not None:
                self.run_variant(spec, chosen[0], args, chosen[1])
                return
        self.run_variant(spec, kernel_variant(spec), args, name)

    def matmul(self, spec, out, a, b) -> None:
        if kernel_path(spec, self.impl, self.arch) == "vendor":
            with self.device:
                self._array(out)[...] = vendor_matmul(self.cupy, self._array(a), self._array(b),
                                                      spec.dtype, spec.out_dtype)
            return
        self._compute(spec, a, b, out=out)

    def attention(self, spec, out, q, k, v, mask) -> None:
        from accel import kernels

        if kernel_path(spec, self.impl, self.arch) == "tensorcore":
            self._compute(spec, q, k, v, mask, out=out)
            return
        variant = kernel_variant(spec)
        chunks = kernels.attention_chunks(spec, variant.defines, self.info.compute_units)
        if chunks == 1:
            self.run_variant(spec, variant, self.kernel_args(spec, out, q, k, v, mask))
            return
        # flash-decoding: each key chunk's records in scratch, then merged into out
        splits = self.scratch(kernels.attention_splits_bytes(spec, chunks))
        self.run_variant(spec, variant, self.kernel_args(spec, out, q, k, v, mask, splits=splits),
                         chunks=chunks)
        self.run_variant(spec, variant, [splits, out, *kernels.attention_combine_args(spec, chunks)],
                         "attention_combine", chunks)

    def quantize(self, spec, out, x) -> None:
        self._compute(spec, x, out=out)

    def dequantize(self, spec, out, q) -> None:
        self._compute(spec, q, out=out)

    def qmatmul(self, spec, out, x, w) -> None:
        from accel import kernels

        if spec.x_fmt is not None:
            self.run_x8(spec, kernel_variant(spec), out, x, w)
            return
        name = None
        if kernels.gemv_applies(spec, kernels.GPU_GEMV):  # which GEMV: by K and the addresses
            name = kernels.gemv_kernel(spec.fmt.name, spec.K, kernels.GPU_GEMV, x_addr=x.buf.data.ptr,
                                       w_addr=w.buf.data.ptr, local_mem=_STATIC_SHARED_MAX)
        self._compute(spec, x, w, out=out, name=name)

    def run_x8(self, spec, variant, out: Any, x: Any, w: Any) -> None:
        """A quantized matmul with ``x_fmt`` through shipped ``variant``: ``quantize_x8`` writes
        x's X8 words into :meth:`scratch`, then the variant's X8 kernel (launch_plan's choice)
        multiplies them with ``w``. The op runs it with its own variant; the speed-goal script
        with the parameter sets it times."""
        from accel import kernels

        nbytes, count = kernels.x8_words(spec)
        words = self.scratch(nbytes)
        self.run_variant(spec, variant, [x, words, *count], "quantize_x8")
        self.run_variant(spec, variant, self.kernel_args(spec, out, words, w))

    def scratch(self, nbytes: int) -> Any:
        """At least ``nbytes`` of device memory owned by the backend for the current stream (its
        kernels use it in stream order). Never returned to CuPy's pool while the backend lives:
        a CUDA graph that captured a launch keeps the address, and a pooled buffer freed after
        the call could be handed to another allocation that the graph's replays would overwrite.
        Grown to powers of two; an outgrown buffer is retired, not freed, for the same reason."""
        with self.device:
            stream = self.cupy.cuda.get_current_stream().ptr
            buf = self._scratch.get(stream)
            if buf is None or buf.nbytes < nbytes:
                if buf is not None:
                    self._retired.append(buf)
                buf = self._scratch[stream] = self.cupy.empty(1 << max(8, (nbytes - 1).bit_length()),
                                                               self.cupy.uint8)
        return buf

    def _unused(self) -> Any:
        """A device buffer for a pointer argument the kernel never reads (attention without a
        mask)."""
        if not hasattr(self, "_unused_buf"):
            self._unused_buf = self.alloc(256)
        return self._unused_buf

    # -- timing and versions ----------------------------------------------------------------------
    def time(self, fn) -> float:
        """Seconds between two device events around the work ``fn`` enqueues, run with this
        device current: accel's kernels or any CuPy call (the cuBLAS baseline is timed so)."""
        with self.device:
            start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return self.cupy.cuda.get_elapsed_time(start, end) / 1e3

    def versions(self) -> dict[str, str]:
        out = {"cupy": self.cupy.__version__, f"{self.platform}_runtime": self.info.extra["runtime"],
               "driver": self.info.driver, "arch": self.arch, "impl": self.impl}
        try:
            out["compiler"] = toolchains.toolchain_version(self.arch)
        except BackendUnavailable as e:
            out["compiler"] = f"unavailable: {e}"
        if self.platform == "cuda":  # result files then say whether 16-bit matmul had tensor cores
            out["tensorcore"] = "; ".join(filter(None, (tensorcore_reason(self.arch, op)
                                                        for op in _TENSORCORE_KERNEL))) or "available"
        return out

    def __repr__(self) -> str:
        return f"<accel backend {self.device_id}: {self.info.name} ({self.arch}, impl={self.impl})>"


__all__ = ["CuPyBackend", "IMPLS", "TENSORCORE_DTYPES", "tensorcore_reason", "kernel_path", "aligned16",
           "tensorcore_kernel", "kernel_variant", "launch_plan", "support_for", "accumulator_for",
           "build_kernel", "build_variant", "format_version",
           "unavailable_reason", "vendor_matmul", "bf16_bits_to_f32",
           "f32_to_bf16_bits"]
