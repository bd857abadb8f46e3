"""The ``hip`` backend: AMD GPUs through CuPy for ROCm (cupy-rocm-7-0).

Everything is shared with ``cuda`` in backends/cupy/backend.py (its launches planned by the one
planner, backends/plan.py); this class only states what is AMD's: kernels are compiled by hiprtc for
the device's ``gcnArchName`` (``gfx90a``, ``gfx1100``, feature flags kept), the wavefront is 64
wide on CDNA and 32 on RDNA (read from the device and passed to kernels as ``ACCEL_WARP``), and
the vendor BLAS is hipBLAS.

>>> import accel
>>> status = next(s for s in accel.backends() if s.name == "hip")
>>> status.available or bool(status.reason)
True
"""
from __future__ import annotations

from accel.kernels.toolchains import hip_arch

from accel.backends.cupy.backend import CuPyBackend


class HIPBackend(CuPyBackend):
    name = "hip"
    platform = "hip"
    vendor = "AMD"
    vendor_blas = "hipBLAS"

    @classmethod
    def arch_of(cls, props: dict) -> str:
        return hip_arch(props["gcnArchName"])
