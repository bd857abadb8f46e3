"""The OpenCL backend (pyopencl): runs accel's shared kernels (``accel.kernels``) on any OpenCL
1.2 device, PoCL on CPUs included. See docs/opencl.md.

``OpenCLBackend`` is imported on first access, so ``accel tune`` can register its command
without importing pyopencl (the ``accel`` CLI must start where pyopencl is not installed).
"""


def __getattr__(name: str):
    if name == "OpenCLBackend":
        from accel.backends.opencl.backend import OpenCLBackend

        return OpenCLBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OpenCLBackend"]
