"""accel.Tensor, and the array-in/array-out bridge to numpy, torch and cupy.

Foreign arrays are recognised by their type's module, so accel never imports torch or cupy
itself: if a torch tensor exists, torch is already imported.
"""
from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from .backend import Backend
from .dtypes import dtype_name, to_numpy_dtype
from .errors import ArgumentError, DeviceMismatchError, DTypeError, expected
from .registry import get_backend

#: the byte an output starts filled with where an element the op leaves unwritten must show up:
#: all-ones bytes are a NaN in every float format, where the result has a number
NAN_FILL = 0xFF


class Tensor:
    """A C-contiguous array resident on one backend's device.

    >>> import accel, numpy as np
    >>> t = accel.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), backend="cpu")
    >>> t.shape, t.dtype, t.numpy().sum()
    ((2, 3), 'float32', np.float32(15.0))
    """

    __slots__ = ("backend", "buf", "shape", "dtype")

    def __init__(self, backend: Backend, buf: Any, shape: tuple[int, ...], dtype: str):
        self.backend, self.buf, self.shape, self.dtype = backend, buf, tuple(shape), dtype

    @classmethod
    def empty(cls, backend: Backend, shape: tuple[int, ...], dtype: str) -> "Tensor":
        """An uninitialized tensor on ``backend``: write it (an op's ``out=``) before reading it.

        >>> import accel
        >>> t = accel.Tensor.empty(accel.get_backend("cpu"), (2, 3), "float16")
        >>> t.shape, t.dtype, t.nbytes
        ((2, 3), 'float16', 12)
        """
        nbytes = math.prod(shape) * to_numpy_dtype(dtype).itemsize
        return cls(backend, backend.alloc(nbytes), shape, dtype)

    @classmethod
    def from_host(cls, backend: str | Backend, host: np.ndarray) -> "Tensor":
        """A tensor on ``backend`` holding a copy of host array ``host``, of its shape and dtype
        (any strides: the copy is C-contiguous).

        >>> import accel, numpy as np
        >>> t = accel.Tensor.from_host(accel.get_backend("cpu"), np.eye(2, dtype=np.float16)[:, ::-1])
        >>> t.shape, t.dtype, t.numpy().tolist()
        ((2, 2), 'float16', [[0.0, 1.0], [1.0, 0.0]])
        """
        if check_array("host", host) != "numpy":  # also refuses masked arrays and np.matrix
            raise ArgumentError(expected("host", "a numpy array", type(host).__name__))
        backend = get_backend(backend)
        dtype = dtype_name(host.dtype, "host.dtype")
        # asarray, not ascontiguousarray: that one turns a 0-d array into shape (1,)
        return cls(backend, backend.upload(np.asarray(host, order="C")), host.shape, dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * to_numpy_dtype(self.dtype).itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """A host copy (the CPU backend may return a view of its own memory)."""
        raw = self.backend.download(self.buf, self.nbytes)
        return raw.view(to_numpy_dtype(self.dtype)).reshape(self.shape)

    def to(self, backend: str | Backend) -> "Tensor":
        """An explicit copy to another backend (the only way data moves between backends); the
        tensor itself when it is already there.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(3, dtype=np.int32), backend="cpu")
        >>> t.to("cpu") is t
        True
        >>> t.to(accel.get_backend()).numpy().tolist()  # the default device, whichever it is
        [0, 1, 2]
        """
        target = get_backend(backend)
        if target is self.backend:
            return self
        return Tensor.from_host(target, self.numpy())

    def __dlpack__(self, *args, **kwargs):
        return self._exported().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._exported().__dlpack_device__()

    def _exported(self):
        exported = self.backend.export_array(self)
        if exported is None:
            raise ArgumentError(expected("tensor", "a backend that can export DLPack",
                                         f"backend {self.backend.name}"))
        return exported

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"accel.Tensor(shape={self.shape}, dtype={self.dtype}, backend={self.backend.device_id!r})"


# -- array kinds --------------------------------------------------------------------------------
def array_kind(x: Any) -> str | None:
    """'accel', 'numpy', 'torch', 'cupy', or None for anything else."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if isinstance(x, Tensor):
        return "accel"
    mod = type(x).__module__
    if mod.startswith("torch") and "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor):
        return "torch"
    if mod.startswith("cupy") and "cupy" in sys.modules and isinstance(x, sys.modules["cupy"].ndarray):
        return "cupy"
    return None


def check_array(arg: str, x: Any) -> str:
    kind = array_kind(x)
    if kind is None:
        raise ArgumentError(expected(arg, "a numpy array, torch tensor, cupy array or accel.Tensor",
                                     type(x).__name__))
    # array types whose meaning the ops would silently drop: a mask, matrix semantics, sparsity
    if isinstance(x, (np.ma.MaskedArray, np.matrix)):
        raise ArgumentError(expected(arg, "a plain numpy array (np.asarray(x); for a masked "
                                     "array, x.filled(value))", type(x).__name__))
    if kind == "torch" and x.layout != sys.modules["torch"].strided:
        raise ArgumentError(expected(arg, "a dense (strided) torch tensor (x.to_dense())",
                                     f"layout {x.layout}"))
    return kind


def host_of(x: Any, kind: str) -> np.ndarray | None:
    """A C-contiguous numpy view/copy of a host array, or None for device-resident arrays."""
    if kind == "numpy":
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)
    if kind == "torch" and x.device.type == "cpu":
        import torch  # already imported: x is a torch tensor

        t = x.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(to_numpy_dtype("bfloat16"))
        return t.numpy()
    return None


def shape_dtype(arg: str, x: Any) -> tuple[tuple[int, ...], str]:
    """Shape and accel dtype name of any supported array, before any copy."""
    if isinstance(x, np.ndarray):
        return x.shape, dtype_name(x.dtype, f"{arg}.dtype")
    check_array(arg, x)
    return tuple(int(s) for s in x.shape), dtype_name(x.dtype, f"{arg}.dtype")


def device_backend(x: Any, kind: str) -> Backend | None:
    """The backend a device-resident operand lives on (None for host arrays)."""
    if kind == "accel":
        return x.backend
    if kind == "cupy" or (kind == "torch" and x.device.type != "cpu"):
        from .registry import backends as _list

        index = x.device.id if kind == "cupy" else (x.device.index or 0)
        for status in _list():
            if status.available and status.name in ("cuda", "hip") and index < len(status.devices):
                b = get_backend(f"{status.name}:{index}")
                if b.import_array(x) is not None:
                    return b
        raise DeviceMismatchError(expected("array", "an array on a device accel has a backend for",
                                           f"{kind} array on {getattr(x, 'device', '?')}"))
    return None


def to_tensor(arg: str, x: Any, kind: str, backend: Backend, dtype: str | None = None) -> Tensor:
    """Make ``x`` an accel.Tensor on ``backend`` (copying host arrays; never moving device ones)."""
    if kind == "accel":
        if x.backend is not backend:
            raise DeviceMismatchError(expected(arg, f"a tensor on {backend.device_id} like the other "
                                               "operands (use Tensor.to() to move it)",
                                               f"a tensor on {x.backend.device_id}"))
        return x
    host = host_of(x, kind)
    if host is None:
        buf = backend.import_array(x)
        if buf is None:
            raise DeviceMismatchError(expected(arg, f"an array on {backend.device_id}",
                                               f"{kind} array on {getattr(x, 'device', '?')}"))
        return Tensor(backend, buf, tuple(x.shape), dtype_name(x.dtype))
    return Tensor.from_host(backend, host)


def from_tensor(t: Tensor, kind: str, like: Any = None) -> Any:
    """Return a result in the kind of array the caller gave."""
    if kind == "accel":
        return t
    if kind == "numpy":
        return t.numpy()
    if kind == "torch":
        import torch

        if like is not None and like.device.type != "cpu":
            return torch.from_dlpack(t)
        host = t.numpy()
        if t.dtype == "bfloat16":
            return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(np.array(host, copy=True) if not host.flags.writeable else host)
    if kind == "cupy":
        import cupy

        return cupy.from_dlpack(t)
    raise ArgumentError(expected("kind", "an array kind", kind))


def asarray(x: Any, *, backend: str | Backend | None = None, dtype: object = None) -> Tensor:
    """An accel.Tensor on a backend's device, from any supported array (or a Tensor).

    >>> import accel, numpy as np
    >>> accel.asarray(np.ones(3), dtype="float16", backend="cpu").dtype
    'float16'
    """
    if array_kind(x) is None:
        if isinstance(x, (list, tuple, int, float, bool, np.generic)):
            try:
                x = np.asarray(x)
            except ValueError as e:  # ragged nested lists
                raise ArgumentError(expected("x", "a rectangular nested list", str(e))) from None
        else:
            check_array("x", x)
    kind = array_kind(x)
    target = get_backend(backend) if backend is not None else (device_backend(x, kind) or get_backend())
    want = dtype_name(dtype) if dtype is not None else None
    if kind == "accel":
        if x.backend is not target:
            x = x.to(target)
        if want and want != x.dtype:
            return asarray(x.numpy().astype(to_numpy_dtype(want)), backend=target)
        return x
    host = host_of(x, kind)
    if host is not None and want:
        host = host.astype(to_numpy_dtype(want))
    if host is not None:
        dtype_name(host.dtype, "x.dtype")  # refused under the argument's name
        return Tensor.from_host(target, host)
    t = to_tensor("x", x, kind, target)
    if want and want != t.dtype:
        raise DTypeError(expected("dtype", f"the array's own dtype {t.dtype} for a device array "
                                  "(convert it first)", want))
    return t
