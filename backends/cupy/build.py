"""Building the shipped kernels for a CUDA or HIP device arch, exactly as the ``cuda`` and
``hip`` backends do, without a device (NVRTC and hiprtc need no GPU), so CI proves every build
on a machine without one. CuPy is never imported here."""
from __future__ import annotations

import functools
import os

from accel import kernels
from accel.errors import CompileError
from accel.kernels import toolchains

#: static __shared__ per block on CUDA (and HIP's LDS default): the planner's local memory
STATIC_SHARED_MAX = 48 * 1024


@functools.cache
def wmma_header_missing() -> str | None:
    """NVRTC reads WMMA from mma.h, which includes crt/mma.h: a separate wheel since CUDA 13.
    The reason the tensor-core matmul cannot build here, or None."""
    dirs = toolchains.cuda_include_dirs()
    if not any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in dirs):
        return (f"the CUDA headers NVRTC compiles with ({', '.join(dirs) or 'none found'}) lack "
                "crt/mma.h (WMMA): pip install nvidia-cuda-crt")
    return None


def build_kernel(source: str, name: str, arch: str, warp_size: int, *,
                 options: tuple[str, ...] = (), dialect: str = "accel") -> "toolchains.CompileResult":
    """Compile a kernel for a device arch exactly as the backend does: accel-dialect sources get
    the portability header, every kernel gets the device's warp width as ``ACCEL_WARP``. Raises
    accel.CompileError with the log on failure."""
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
