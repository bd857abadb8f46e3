"""The ``cuda`` backend: NVIDIA GPUs through CuPy (cupy-cuda12x / cupy-cuda13x).

Everything is shared with ``hip`` in backends/cupy/backend.py (its launches planned by the one
planner, backends/plan.py); this class only states what is NVIDIA's: kernels are compiled by NVRTC for
``sm_XY`` from the device's compute capability, warps are 32 wide (read from the device all the
same), and the vendor BLAS is cuBLAS. On sm_80 and later, float16/bfloat16 matmul and attention
run on tensor cores (kernels/matmul_wmma.cu, kernels/attention_mma.cu) unless ``impl`` says
otherwise; the choice from the arch is ``accel.backends.plan.kernel_path``.

>>> import accel
>>> status = next(s for s in accel.backends() if s.name == "cuda")
>>> status.available or bool(status.reason)
True
"""
from __future__ import annotations

from accel.kernels.toolchains import cuda_arch

from accel.backends.cupy.backend import CuPyBackend


class CUDABackend(CuPyBackend):
    name = "cuda"
    platform = "cuda"
    vendor = "NVIDIA"
    vendor_blas = "cuBLAS"

    @classmethod
    def arch_of(cls, props: dict) -> str:
        return cuda_arch(props["major"], props["minor"])
