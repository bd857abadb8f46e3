"""accel.Tensor and QTensor (GGUF blocks on a device), and the array-in/array-out bridge to
numpy, torch and cupy.

Foreign arrays are recognised by their type's module, so accel never imports torch or cupy
itself: if a torch tensor exists, torch is already imported.
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, NamedTuple

import numpy as np

from accel.backend import Backend
from accel.dtypes import NAME_OF_NUMPY, convert, dtype_name, to_numpy_dtype
from accel.errors import (ArgumentError, DeviceError, DeviceMismatchError, DTypeError, ShapeError,
                          expected)
from accel.formats import FORMATS, QuantFormat, check_quantizable_shape, get_format
from accel.registry import backends as list_backends
from accel.registry import get_backend

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
        return cls._upload(get_backend(backend), host, dtype_name(host.dtype, "host.dtype"))

    @classmethod
    def _upload(cls, backend: Backend, host: np.ndarray, dtype: str) -> "Tensor":
        """from_host for an array already checked (dispatch checks each operand once)."""
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
        if t.dtype == torch.bfloat16 or t.dtype.itemsize == 1 and t.dtype.is_floating_point:
            # numpy has no bfloat16 or FP8: through the bits, into ml_dtypes' types
            bits = t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.uint8).numpy()
            return bits.view(to_numpy_dtype(dtype_name(t.dtype)))
        return t.numpy()
    return None


class Operand(NamedTuple):
    """An op's argument, checked once: its name, the array, its kind, shape and accel dtype."""

    arg: str
    x: Any
    kind: str
    shape: tuple[int, ...]
    dtype: str


def operand(arg: str, x: Any) -> Operand:
    """``x`` checked as argument ``arg`` of an op, before any copy.

    >>> operand("a", np.zeros((2, 3), np.float16))[2:]
    ('numpy', (2, 3), 'float16')
    """
    if type(x) is _ndarray:  # the hot path; subclasses (np.matrix, masked) are checked below
        name = NAME_OF_NUMPY.get(x.dtype)
        if name is not None:
            # tuple.__new__ skips the NamedTuple constructor's Python frame (a third of a
            # microsecond per operand, on calls whose whole budget is a few)
            return _new_tuple(Operand, (arg, x, "numpy", x.shape, name))
    kind = check_array(arg, x)
    return Operand(arg, x, kind, tuple(int(s) for s in x.shape), dtype_name(x.dtype, arg + ".dtype"))


_new_tuple, _ndarray = tuple.__new__, np.ndarray


def device_backend(x: Any, kind: str) -> Backend | None:
    """The backend a device-resident operand lives on (None for host arrays)."""
    if kind == "accel":
        return x.backend
    if kind == "cupy" or (kind == "torch" and x.device.type != "cpu"):
        index = x.device.id if kind == "cupy" else (x.device.index or 0)
        for status in list_backends():
            if status.available and status.name in ("cuda", "hip") and index < len(status.devices):
                b = get_backend(f"{status.name}:{index}")
                if b.import_array(x) is not None:
                    return b
        raise DeviceMismatchError(expected("array", "an array on a device accel has a backend for",
                                           f"{kind} array on {getattr(x, 'device', '?')}"))
    return None


# -- host memory ----------------------------------------------------------------------------------
def host_bytes_free() -> int:
    """Bytes the host can still give this process: the kernel's MemAvailable, or less where an
    address-space limit (``ulimit -v``, RLIMIT_AS) leaves less room."""
    free = sys.maxsize
    try:
        with open("/proc/meminfo", "rb") as f:
            free = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith(b"MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            free = min(free, limit - used)
    except (ImportError, OSError, ValueError):
        pass
    return max(0, free)


def host_memory_error(arg: str, nbytes: int, what: str) -> DeviceError:
    """The error for host memory ``arg`` needs (``nbytes``, for ``what``) and cannot get."""
    return DeviceError(expected(arg, f"at most the {host_bytes_free()} bytes of host memory left "
                                f"for {what}", f"{nbytes} bytes"))


def _host_copy(op: Operand, backend: Backend) -> np.ndarray | None:
    """host_of(op), checked first where it copies: a broadcast or strided view can stand for far
    more bytes than it holds, so its size is weighed against the host's free memory and the
    device's before the copy is made."""
    x = op.x
    if op.kind == "numpy" and not x.flags.c_contiguous:
        device = backend.info.memory_bytes
        if device and x.nbytes > device:
            raise DeviceError(expected(op.arg, f"at most the {device} bytes of memory "
                                       f"{backend.device_id} has", f"a view of {x.nbytes} bytes"))
        if x.nbytes > host_bytes_free():
            raise host_memory_error(op.arg, x.nbytes, "its contiguous copy")
    try:
        return host_of(x, op.kind)
    except MemoryError:
        raise host_memory_error(op.arg, x.nbytes, "its contiguous copy") from None


def to_tensor(op: Operand, backend: Backend) -> Tensor:
    """Make a checked operand an accel.Tensor on ``backend`` (copying host arrays; never moving
    device ones)."""
    x, kind = op.x, op.kind
    if kind == "accel":
        if x.backend is not backend:
            raise DeviceMismatchError(expected(op.arg, f"a tensor on {backend.device_id} like the "
                                               "other operands (use Tensor.to() to move it)",
                                               f"a tensor on {x.backend.device_id}"))
        return x
    host = _host_copy(op, backend)
    if host is None:
        buf = backend.import_array(x)
        if buf is None:
            raise DeviceMismatchError(expected(op.arg, f"an array on {backend.device_id}",
                                               f"{kind} array on {getattr(x, 'device', '?')}"))
        return Tensor(backend, buf, op.shape, op.dtype)
    return Tensor._upload(backend, host, op.dtype)


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
        host = convert(host, want)  # to nearest even; FP8 overflow as torch's Tensor.to
    if host is not None:
        return Tensor._upload(target, host, dtype_name(host.dtype, "x.dtype"))
    t = to_tensor(operand("x", x), target)
    if want and want != t.dtype:
        raise DTypeError(expected("dtype", f"the array's own dtype {t.dtype} for a device array "
                                  "(convert it first)", want))
    return t


class QTensor:
    """A tensor quantized along its last axis in a GGUF block format.

    ``raw`` is a numpy uint8 array ``[..., K // block * block_bytes]`` in GGUF block layout, ``shape``
    the logical shape ``[..., K]``. ``data`` is the backend-resident copy the ops read.

    >>> import numpy as np, accel
    >>> qt = accel.quantize(np.full((2, 64), 127, np.float32), "q8_0")  # d = 127 / 127 = 1
    >>> qt.shape, qt.raw.shape, float(accel.dequantize(qt)[1, 63])
    ((2, 64), (2, 68), 127.0)
    """

    def __init__(self, data: Tensor, fmt: QuantFormat, shape: tuple[int, ...], kind: str = "numpy"):
        self.data = data  # accel.Tensor of uint8, shape [..., row_bytes]
        self.format = fmt
        self.shape = tuple(shape)
        self.kind = kind  # the array kind dequantize() returns (that of quantize's input)

    @property
    def fmt(self) -> str:
        return self.format.name

    @property
    def backend(self) -> Backend:
        return self.data.backend

    @property
    def raw(self) -> np.ndarray:
        """The block bytes, read-only: on a host backend they are the weight's own storage, and
        writing them would change the weight behind accel's back (copy them to edit)."""
        view = self.data.numpy().view()
        view.flags.writeable = False
        return view

    @classmethod
    def from_raw(cls, raw: Any, fmt: str, shape: tuple[int, ...], *,
                 backend: str | Backend | None = None) -> QTensor:
        """Wrap GGUF block bytes (e.g. rows read from a GGUF file) after checking their length.

        >>> import numpy as np, accel
        >>> accel.QTensor.from_raw(np.zeros((4, 18), np.uint8), "q4_0", (4, 32)).shape
        (4, 32)
        """
        f = get_format(fmt)
        try:
            shape = tuple(shape)  # once: a generator would be spent by the check below
            ints = all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_))
                       for s in shape)
        except TypeError:  # not iterable
            ints = False
        if not ints:  # 4.5 or True would silently become 4 or 1
            raise ShapeError(expected("shape", "a tuple of ints [..., K]", repr(shape)))
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ShapeError(expected("shape", "non-negative sizes", repr(shape)))
        check_quantizable_shape(shape, f, "shape")
        want = shape[:-1] + (f.row_bytes(shape[-1]),)
        if isinstance(raw, QTensor):
            raise ArgumentError(expected("raw", "GGUF block bytes as a uint8 array (a QTensor's "
                                         "are its .raw)", "a QTensor"))
        host = raw.numpy() if isinstance(raw, Tensor) else np.asarray(raw)
        if host.dtype != np.uint8:
            raise ArgumentError(expected("raw", "a uint8 array", f"dtype {host.dtype}"))
        if host.size != int(np.prod(want)):
            raise ShapeError(expected("raw", f"{int(np.prod(want))} bytes ({fmt} blocks for "
                                      f"shape {shape}, i.e. {want})", f"{host.size} bytes"))
        if host.ndim > 1 and host.shape != want:  # e.g. a GGUF tensor's dims taken in ggml order
            raise ShapeError(expected("raw.shape", f"{want} ({fmt} blocks of shape {shape}), or "
                                      "the bytes flat", host.shape))
        return cls(asarray(host.reshape(want), backend=backend), f, shape)

    @classmethod
    def from_gguf(cls, tensor: Any, *, backend: str | Backend | None = None) -> QTensor:
        """A quantized tensor read by ``gguf.GGUFReader`` (an item of its ``.tensors``), with
        GGUF's dimension order (innermost first) turned into accel's ``[..., K]``.

        >>> import numpy as np, accel, gguf, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "w.gguf")
        >>> w = gguf.GGUFWriter(path, "llama")
        >>> w.add_tensor("w", accel.quantize(np.ones((3, 64), np.float32), "q8_0").raw.copy(),
        ...              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
        >>> accel.QTensor.from_gguf(gguf.GGUFReader(path).tensors[0])
        QTensor(q8_0, shape=(3, 64), backend='cpu:0')
        """
        kind = getattr(getattr(tensor, "tensor_type", None), "name", None)
        if kind is None or not hasattr(tensor, "shape") or not hasattr(tensor, "data"):
            raise ArgumentError(expected("tensor", "a tensor of gguf.GGUFReader(path).tensors",
                                         type(tensor).__name__))
        fmt = kind.lower()
        if fmt not in FORMATS:
            raise ArgumentError(expected("tensor", f"a GGUF tensor of a type accel reads "
                                         f"({', '.join(f.upper() for f in FORMATS)}; others are "
                                         "plain arrays: use tensor.data)",
                                         f"{kind} tensor {getattr(tensor, 'name', '')!r}"))
        shape = tuple(int(d) for d in reversed(tensor.shape))  # GGUF lists ne[0] = K first
        return cls.from_raw(np.asarray(tensor.data), fmt, shape, backend=backend)

    def to(self, backend: str | Backend) -> QTensor:
        """The same blocks on another backend (a copy; this QTensor is unchanged).

        >>> import numpy as np, accel
        >>> qt = accel.quantize(np.ones((2, 32), np.float32), "q8_0", backend="cpu")
        >>> qt.to("cpu").backend is qt.backend, qt.to("cpu").shape
        (True, (2, 32))
        """
        return QTensor(self.data.to(backend), self.format, self.shape, self.kind)

    def __repr__(self) -> str:
        return f"QTensor({self.fmt}, shape={self.shape}, backend={self.data.backend.device_id!r})"
