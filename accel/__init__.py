"""accel: one tensor-op interface, portable across CUDA, ROCm-HIP, OpenCL and a CPU reference.

>>> import accel, numpy as np
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> accel.matmul(a, a.T, backend="cpu")
array([[ 5., 14.],
       [14., 50.]], dtype=float32)
"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers see the function; at run time the package answers calls too
    from accel.registry import backends as backends
else:
    from accel import backends  # the package doubles as the listing function (backends/__init__.py)
from accel.backend import Backend, DeviceInfo, Support
from accel.errors import (AccelError, ArgumentError, BackendUnavailable, CompileError, DeviceError,
                          DeviceMismatchError, DTypeError, OutOfBoundsError, ShapeError,
                          UnsupportedError)
from accel.kernel import kernel  # the function; shadows the submodule name on purpose
from accel import ops as _ops
from accel.ops import *  # noqa: F403  the ops, as accel.ops.__all__ lists them
from accel.registry import current_device, get_backend, set_backend, use
from accel.tensor import QTensor, Tensor, asarray

if __import__("sys").modules.get("torch") is not None:  # torch.ops.accel.* as soon as both are
    try:  # imported; accel never imports torch itself (nor pays for it)
        from accel import torch_ops as _torch_ops
    except (ImportError, AttributeError):  # a torch without torch.library.custom_op (< 2.4):
        pass  # accel's own ops still work, torch tensors then fail at the call with the reason


def __getattr__(name: str) -> str:
    if name == "__version__":  # pyproject.toml is the one version source
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("accel-portable")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            return "0+unknown"
    raise AttributeError(f"module 'accel' has no attribute {name!r}")


__all__ = [
    "asarray", "Tensor", "QTensor", "kernel",
    "backends", "get_backend", "set_backend", "use", "current_device", "Backend", "DeviceInfo",
    "Support", "AccelError", "ArgumentError", "ShapeError", "DTypeError", "BackendUnavailable",
    "UnsupportedError", "DeviceMismatchError", "CompileError", "DeviceError", "OutOfBoundsError",
]
__all__ += _ops.__all__  # the ops
