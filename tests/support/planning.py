"""Launch plans for the devices the tests name, from the one planner (backends/plan.py), with
no device: CUDA and HIP devices as their backend states its facts, and their launches."""
from __future__ import annotations

from accel.backends import plan as P
from accel.backends.cupy.build import wmma_header_missing

GPU_TILES = P.DEFAULT_TILES["gpu"]
CPU_TILES = P.DEFAULT_TILES["cpu"]


def gpu(arch: str | None = "sm_90", impl: str = "kernels") -> P.DeviceFacts:
    """A CUDA (``sm_*``; None: of no known arch) or HIP (``gfx*``) device of ``arch``, as the
    cupy backend states it."""
    make = P.hip if arch and arch.startswith("gfx") else P.cuda
    return make(arch, impl, missing=wmma_header_missing())


def tensorcore_reason(arch: str | None, op: str = "matmul") -> str | None:
    """Why a device of ``arch`` runs no tensor-core ``op`` here (this machine's CUDA headers
    included)."""
    return P.tensorcore_reason(arch, op, wmma_header_missing())


def kernel_path(spec, impl: str, arch: str | None) -> str:
    return P.kernel_path(spec, gpu(arch, impl))


def gpu_plan(spec, arch: str = "sm_90", impl: str = "kernels", tiles: dict | None = None,
             align: int = 256) -> P.Plan:
    return P.plan_for(spec, gpu(arch, impl), GPU_TILES if tiles is None else tiles, align)


def gpu_launch(spec, kernel: str | None = None, **kw) -> P.Launch:
    """The launch of ``kernel`` in ``spec``'s plan, or its last one (the op's product)."""
    plan = gpu_plan(spec, **kw)
    return plan[-1] if kernel is None else next(launch for launch in plan if launch.kernel == kernel)


def gpu_support(spec, impl: str = "auto", arch: str | None = "sm_90", tiles: dict | None = None):
    return P.support(spec, gpu(arch, impl), GPU_TILES if tiles is None else tiles)


def gemv_tiles(**changes) -> dict:
    """The GPU tiles with the GEMV set changed."""
    return {**GPU_TILES, "gemv": {**GPU_TILES["gemv"], **changes}}
