"""The OpenCL backend (pyopencl): runs accel's shared kernels (``accel.kernels``) on any OpenCL
1.2 device, PoCL on CPUs included. See docs/opencl.md."""
from .backend import OpenCLBackend

__all__ = ["OpenCLBackend"]
