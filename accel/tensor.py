"""accel.Tensor and QTensor (GGUF blocks on a device), and the array-in/array-out bridge to
numpy, torch, cupy, pyopencl and any DLPack producer.

Foreign arrays are recognised by their type (checked only once its module is imported, so accel
never imports torch or cupy itself: if a torch tensor exists, torch is already imported), other
producers by the DLPack protocol or the CUDA array interface.
"""
from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple

import numpy as np
import ml_dtypes

from accel.backend import Backend
from accel.dtypes import NAME_OF_NUMPY, convert, dtype_name, to_numpy_dtype
from accel.errors import (ArgumentError, BackendUnavailable, DeviceError, DeviceMismatchError,
                          DTypeError, OutOfBoundsError, ShapeError, expected)
from accel.formats import FORMATS, QuantFormat, check_quantizable_shape, get_format
from accel.host import host_bytes_free, host_memory_error
from accel.registry import backends as list_backends
from accel.registry import get_backend

#: the byte an output starts filled with where an element the op leaves unwritten must show up:
#: all-ones bytes are a NaN in every float format, where the result has a number
NAN_FILL = 0xFF


class Tensor:
    """An array resident on one backend's device: a buffer, and the shape, dtype, strides and
    offset (in elements) it is read with.

    ``reshape``, ``transpose``/``.T`` and basic indexing (ints, slices, ``...``, ``None``) are
    views over the same buffer wherever numpy's would be (no copy, no host); ``contiguous()``
    and ``astype()`` copy on the device. An op given a view materializes it with the same device
    copy first: the backends compute on C-contiguous tensors only.

    >>> import accel, numpy as np
    >>> t = accel.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), backend="cpu")
    >>> t.shape, t.dtype, t.numpy().sum()
    ((2, 3), 'float32', np.float32(15.0))
    >>> v = t.T[1:]
    >>> v.shape, v.strides, v.offset, v.is_contiguous, v.numpy().tolist()
    ((2, 2), (1, 3), 1, False, [[1.0, 4.0], [2.0, 5.0]])
    """

    __slots__ = ("backend", "buf", "shape", "dtype", "_strides", "offset", "base")

    def __init__(self, backend: Backend, buf: Any, shape: tuple[int, ...], dtype: str,
                 strides: tuple[int, ...] | None = None, offset: int = 0, base: Any = None):
        self.backend, self.buf, self.shape, self.dtype = backend, buf, tuple(shape), dtype
        # None: C-contiguous (the per-call path builds outputs and stores no strides)
        self._strides = None if strides is None else tuple(strides)
        self.offset = offset
        #: the foreign array (torch, cupy, pyopencl) whose memory ``buf`` is, kept alive with it
        self.base = base

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
        return self.size * to_numpy_dtype(self.dtype).itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements, as numpy's ``size``."""
        return math.prod(self.shape)

    def __len__(self) -> int:
        """The first dimension, as numpy's; a 0-d tensor has no length (TypeError, as numpy).

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.zeros((3, 4), np.float32), backend="cpu")
        >>> len(t), t.size, [row.shape for row in t]
        (3, 12, [(4,), (4,), (4,)])
        """
        if not self.shape:
            raise TypeError("len() of a 0-d accel.Tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        """The truth of a one-element tensor, as numpy's (read from the device); any other size
        is ambiguous, so an error rather than Python's fallback to ``len``, which made
        ``if accel.asarray(np.zeros(1)):`` true.

        >>> import accel, numpy as np
        >>> bool(accel.asarray(np.zeros(1, np.float32), backend="cpu"))
        False
        """
        if self.size != 1:
            raise ArgumentError(expected("the tensor", "one element for a truth value (use "
                                         ".numpy().any() or .all())", f"shape {self.shape}"))
        return bool(self.numpy().reshape(()))

    @property
    def strides(self) -> tuple[int, ...]:
        """Steps between neighbours along each axis, in elements (numpy's are in bytes)."""
        return _c_strides(self.shape) if self._strides is None else self._strides

    @property
    def is_contiguous(self) -> bool:
        """Whether the elements lie in C order from the buffer's first byte: what the backends
        compute on (others are materialized by :meth:`contiguous`)."""
        return self.offset == 0 and (self._strides is None
                                     or self._strides == _c_strides(self.shape))

    def numpy(self) -> np.ndarray:
        """A host copy (the CPU backend may return a view of its own memory)."""
        t = self.contiguous()
        raw = t.backend.download(t.buf, t.nbytes)
        return raw.view(to_numpy_dtype(t.dtype)).reshape(t.shape)

    # -- views and copies ----------------------------------------------------------------------
    def _view(self, layout: np.ndarray, origin: int) -> "Tensor":
        """The tensor numpy's ``layout`` (a view of :meth:`_layout`, whose first element was at
        address ``origin``) describes over this tensor's buffer."""
        item = layout.itemsize
        start = (layout.__array_interface__["data"][0] - origin) // item
        strides = tuple(s // item for s in layout.strides)
        offset = self.offset + start
        # a size-1 dim's stride steps nowhere: a view that is C-ordered but for those (a
        # transpose that moves a dim of 1, a KV cache's prefix of its one head) is contiguous
        c = _c_strides(layout.shape)
        keep = None if offset == 0 and all(n == 1 or a == b for n, a, b in
                                           zip(layout.shape, strides, c)) else strides
        return Tensor(self.backend, self.buf, layout.shape, self.dtype, keep, offset, self.base)

    def _layout(self) -> tuple[np.ndarray, int]:
        """A numpy array with this tensor's shape and strides over no memory of its own (never
        read: numpy only computes the shapes, strides and offsets of views of it), and the
        address of its first element."""
        item = to_numpy_dtype(self.dtype).itemsize
        probe = np.lib.stride_tricks.as_strided(
            _PROBE[item], self.shape, tuple(s * item for s in self.strides), writeable=False)
        return probe, probe.__array_interface__["data"][0]

    def reshape(self, *shape: int | tuple[int, ...]) -> "Tensor":
        """This tensor with another shape (one size may be -1): a view where numpy's reshape
        would be one, else a device copy (:meth:`contiguous`) reshaped.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(6, dtype=np.int32), backend="cpu")
        >>> t.reshape(2, -1).numpy().tolist(), t.reshape((3, 2)).buf is t.buf
        ([[0, 1, 2], [3, 4, 5]], True)
        """
        want = _reshape_target(self.shape, shape[0] if len(shape) == 1 and isinstance(
            shape[0], (tuple, list)) else shape)
        if self._strides is None and self.offset == 0:  # C order already: the per-call path
            return Tensor(self.backend, self.buf, want, self.dtype, base=self.base)
        probe, origin = self._layout()
        try:
            return self._view(np.reshape(probe, want, copy=False), origin)
        except ValueError:  # no view has this shape: copy on the device, then view the copy
            flat = self.contiguous()
            return Tensor(flat.backend, flat.buf, want, flat.dtype, base=flat.base)

    def transpose(self, *axes: int) -> "Tensor":
        """A view with the axes permuted (reversed when none are given), as numpy's.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.zeros((2, 3, 4), np.float32), backend="cpu")
        >>> t.transpose(0, 2, 1).shape, t.transpose().shape, t.transpose().strides
        ((2, 4, 3), (4, 3, 2), (1, 4, 12))
        """
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        probe, origin = self._layout()
        try:
            return self._view(probe.transpose(order or None), origin)
        except (ValueError, TypeError) as e:  # numpy's AxisError is a ValueError
            raise ShapeError(expected("axes", f"a permutation of range({self.ndim})",
                                      f"{order!r} ({e})")) from None

    @property
    def T(self) -> "Tensor":
        """The axes reversed (a view), as numpy's ``.T``."""
        return self.transpose()

    def __getitem__(self, key: Any) -> "Tensor":
        """Basic indexing as numpy's (ints, slices with any step, ``...``, ``None``): a view.
        Index arrays and masks (numpy's advanced indexing, which copies) are refused.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), backend="cpu")
        >>> t[1].numpy().tolist(), t[::2, -1].numpy().tolist(), t[..., None, 0].shape
        ([4.0, 5.0, 6.0, 7.0], [3.0, 11.0], (3, 1))
        """
        items = key if isinstance(key, tuple) else (key,)
        for k in items:
            if not (k is None or k is Ellipsis or isinstance(k, slice) or (
                    isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)))):
                raise ArgumentError(expected("key", "ints, slices, ... or None (basic indexing; "
                                             "copy to the host with .numpy() for index arrays)",
                                             type(k).__name__))
        ellipses = sum(k is Ellipsis for k in items)
        if ellipses > 1:
            raise ArgumentError(expected("key", "at most one ... (Ellipsis)", repr(key)))
        if not ellipses:  # all-int keys then give a 0-d view, not a scalar
            items += (Ellipsis,)
        probe, origin = self._layout()
        try:
            return self._view(probe[items], origin)
        except IndexError as e:
            raise OutOfBoundsError(expected("key", f"indices within shape {self.shape}",
                                            f"{key!r} ({e})")) from None
        except (ValueError, TypeError) as e:  # a step of 0, a slice bound that is not an int
            raise ArgumentError(expected("key", "slices of ints with a non-zero step",
                                         f"{key!r} ({e})")) from None

    def __setitem__(self, key: Any, value: Any) -> None:
        """Write ``value`` (a numpy array, or an accel.Tensor on this tensor's backend, of this
        dtype, broadcastable to the indexed shape) into the view ``self[key]`` (basic indexing
        as :meth:`__getitem__`), on the device (``Backend.write``): a KV cache is a
        preallocated Tensor and ``cache[:, :, pos:pos + 1] = k``.

        >>> import accel, numpy as np
        >>> cache = accel.asarray(np.zeros((1, 2, 4, 3), np.float32), backend="cpu")
        >>> cache[:, :, 1:2] = np.ones((1, 2, 1, 3), np.float32)
        >>> cache.numpy()[0, :, :, 0].tolist()
        [[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
        """
        target = self[key]
        if isinstance(value, Tensor):
            if value.backend is not self.backend:
                raise DeviceMismatchError(expected("value", f"a tensor on {self.backend.device_id}",
                                                   f"one on {value.backend.device_id}"))
            vdtype = value.dtype
        elif type(value) is np.ndarray:
            vdtype = NAME_OF_NUMPY.get(value.dtype, str(value.dtype))
        else:
            raise ArgumentError(expected("value", "a numpy array or an accel.Tensor",
                                         type(value).__name__))
        if vdtype != self.dtype:
            raise DTypeError(expected("value.dtype", f"{self.dtype}, the tensor's dtype", vdtype))
        try:
            fits = np.broadcast_shapes(tuple(value.shape), target.shape) == target.shape
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(expected("value.shape", f"broadcastable to {target.shape} (self[key])",
                                      tuple(value.shape)))
        if not math.prod(target.shape):
            return
        if isinstance(value, Tensor) and tuple(value.shape) == target.shape:
            src = value.contiguous()
        else:
            host = value.numpy() if isinstance(value, Tensor) else value
            src = Tensor._upload(self.backend, np.ascontiguousarray(
                np.broadcast_to(host, target.shape)), self.dtype)
        self.backend.write(target, src)

    def contiguous(self) -> "Tensor":
        """This tensor when it is C-contiguous from its buffer's start, else a copy that is,
        made on the device (kernels/copy.cl on OpenCL, CUDA and HIP).

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(4, dtype=np.float16).reshape(2, 2), backend="cpu")
        >>> t.contiguous() is t, t.T.contiguous().is_contiguous
        (True, True)
        """
        if self.is_contiguous:
            return self
        return Tensor(self.backend, self.backend.gather(self, self.dtype), self.shape, self.dtype,
                      base=self.base)

    def astype(self, dtype: object, *, copy: bool = True) -> "Tensor":
        """A C-contiguous copy converted to ``dtype`` (to nearest even), as numpy's ``astype``;
        this tensor itself for its own dtype when ``copy=False``. Conversions between float32,
        float16 and bfloat16 run on the device; others go through the host.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.array([1.0, 2.5, 1e-8], np.float32), backend="cpu")
        >>> t.astype("float16").numpy().tolist(), t.astype(np.float32, copy=False) is t
        ([1.0, 2.5, 0.0], True)
        """
        want = dtype_name(dtype, "dtype")
        if want == self.dtype and not copy:
            return self
        return Tensor(self.backend, self.backend.gather(self, want), self.shape, want,
                      base=self.base)

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

    # -- interchange ------------------------------------------------------------------------
    def __dlpack__(self, *args, **kwargs):
        return self._exported().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._exported().__dlpack_device__()

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface of a tensor on a CUDA or HIP backend (zero-copy, for CuPy,
        Numba and others); AttributeError elsewhere, so ``hasattr`` tells."""
        exported = self.backend.export_array(self)
        if exported is None or not hasattr(exported, "__cuda_array_interface__"):
            raise AttributeError(f"__cuda_array_interface__: a tensor on {self.backend.device_id} "
                                 "is not in CUDA memory")
        return exported.__cuda_array_interface__

    def _exported(self):
        exported = self.backend.export_array(self)
        if not hasattr(exported, "__dlpack__"):
            raise ArgumentError(expected("tensor", "a backend that can export DLPack",
                                         f"backend {self.backend.device_id} (use .numpy())"))
        if isinstance(exported, np.ndarray) and (self.dtype == "bfloat16" or self.dtype.startswith("float8")):
            # ml_dtypes' types, which numpy's DLPack cannot name: torch's can, over the same memory
            torch = sys.modules.get("torch")
            if torch is None:
                raise ArgumentError(expected("tensor", "a dtype numpy's DLPack export knows (import "
                                             "torch for bfloat16 and FP8, or use .numpy())", self.dtype))
            bits = torch.from_numpy(exported.view(np.uint8 if exported.itemsize == 1 else np.int16))
            return bits.view(getattr(torch, self.dtype))
        return exported

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy's array protocol, with NumPy 2's ``copy``: False gives a view or raises
        ValueError (only a tensor in host memory, on the CPU backend, has one), True always
        copies, None copies where it must.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.ones(2, np.float32), backend="cpu")
        >>> np.asarray(t, dtype=np.float64).dtype
        dtype('float64')
        >>> np.shares_memory(np.asarray(t, copy=False), t.buf)
        True
        """
        if copy is False:
            host = self.backend.export_array(self)
            if not isinstance(host, np.ndarray) or (dtype is not None
                                                    and np.dtype(dtype) != host.dtype):
                raise ValueError(expected("copy", "True or None: a tensor on "
                                          f"{self.backend.device_id} cannot be viewed as a numpy "
                                          f"array of dtype {dtype or self.dtype} without a copy",
                                          False))
            return host
        a = self.numpy()
        if dtype is not None:
            return a.astype(dtype, copy=bool(copy))
        return np.array(a, copy=True) if copy else a

    def __repr__(self) -> str:
        view = "" if self.is_contiguous else f", strides={self.strides}, offset={self.offset}"
        return (f"accel.Tensor(shape={self.shape}, dtype={self.dtype}{view}, "
                f"backend={self.backend.device_id!r})")


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides in elements.

    >>> _c_strides((2, 3, 4)), _c_strides(())
    ((12, 4, 1), ())
    """
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def _reshape_target(shape: tuple[int, ...], want: Any) -> tuple[int, ...]:
    """``want`` checked as a reshape of ``shape`` (numpy's rules; one -1 is inferred)."""
    want = tuple(want)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_))
               for s in want):
        raise ShapeError(expected("shape", "ints", repr(want)))
    size, known = math.prod(shape), math.prod(s for s in want if s != -1)
    if want.count(-1) > 1 or any(s < -1 for s in want):
        raise ShapeError(expected("shape", "non-negative sizes and at most one -1", repr(want)))
    if -1 in want and known and size % known == 0:
        want = tuple(size // known if s == -1 else int(s) for s in want)
    if -1 in want or math.prod(want) != size:
        raise ShapeError(expected("shape", f"{size} elements in all (from shape {shape})",
                                  repr(want)))
    return tuple(int(s) for s in want)


#: one element of each width for :meth:`Tensor._layout` to stand its strides on
_PROBE = {n: np.zeros(1, f"V{n}") for n in (1, 2, 4, 8, 16)}


# -- array kinds --------------------------------------------------------------------------------
def array_kind(x: Any) -> str | None:
    """'accel', 'numpy', 'torch', 'cupy', 'pyopencl', or None for anything else (objects that
    only speak DLPack or the CUDA array interface are first made one of these by :func:`adopt`)."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if isinstance(x, Tensor):
        return "accel"
    mod = type(x).__module__
    if mod.startswith("torch") and "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor):
        return "torch"
    if mod.startswith("cupy") and "cupy" in sys.modules and isinstance(x, sys.modules["cupy"].ndarray):
        return "cupy"
    if "pyopencl.array" in sys.modules and isinstance(x, sys.modules["pyopencl.array"].Array):
        return "pyopencl"
    return None


#: DLPack device types (dlpack.h's DLDeviceType) accel takes: host memory, and CUDA or ROCm memory
_DL_CPU, _DL_CUDA, _DL_ROCM = 1, 2, 10


def adopt(arg: str, x: Any) -> Any:
    """``x`` as an array kind accel knows: itself where it is one; an object speaking DLPack
    (``__dlpack__``, e.g. a JAX array) as a numpy array (host memory, zero-copy through
    ``np.from_dlpack``; torch's where numpy lacks the dtype) or a cupy array (GPU memory); one
    with only ``__cuda_array_interface__`` (Numba, ...) as a cupy array. Anything else is
    returned unchanged for :func:`check_array` to refuse.

    >>> class Producer:  # any DLPack producer, here wrapping numpy
    ...     def __init__(self, a): self.a = a
    ...     def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
    ...     def __dlpack_device__(self): return self.a.__dlpack_device__()
    >>> adopt("x", Producer(np.arange(3.0))).tolist()
    [0.0, 1.0, 2.0]
    """
    if array_kind(x) is not None:
        return x
    kind = type(x)
    if hasattr(kind, "__dlpack__") and hasattr(kind, "__dlpack_device__"):
        device, _ = x.__dlpack_device__()
        if device == _DL_CPU:
            try:
                return np.from_dlpack(x)
            except (BufferError, TypeError, ValueError, RuntimeError) as e:
                if "torch" not in sys.modules:  # bfloat16 and FP8 are not numpy dtypes
                    raise DTypeError(expected(arg, "a DLPack array of a dtype numpy reads (or "
                                              "import torch, whose from_dlpack reads bfloat16)",
                                              f"{type(x).__name__} ({e})")) from None
                # read by torch, handed on as the ml_dtypes numpy view of its memory: a host
                # producer's result comes back as numpy, whatever the dtype
                return host_of(sys.modules["torch"].from_dlpack(x), "torch")
        if device in (_DL_CUDA, _DL_ROCM):
            return _on_gpu(arg, x, "from_dlpack")
        raise DeviceMismatchError(expected(arg, "a DLPack array in host, CUDA or ROCm memory",
                                           f"{type(x).__name__} on DLPack device type {device}"))
    if hasattr(x, "__cuda_array_interface__"):
        return _on_gpu(arg, x, "asarray")  # zero-copy: CuPy reads the interface
    return x


def _on_gpu(arg: str, x: Any, how: str) -> Any:
    """GPU array ``x`` as a cupy array (``cupy.from_dlpack`` or ``cupy.asarray``), or a
    BackendUnavailable saying why CuPy cannot take it (not installed, no GPU or driver)."""
    try:
        import cupy

        return getattr(cupy, how)(x)
    except Exception as e:  # ImportError, or CuPy's runtime errors: no device, no driver
        raise BackendUnavailable(expected(arg, f"a GPU array CuPy can take (cupy.{how})",
                                          f"{type(x).__name__}: {type(e).__name__}: {e}")) from None


def check_array(arg: str, x: Any) -> str:
    kind = array_kind(x)
    if kind is None:
        raise ArgumentError(expected(arg, "a numpy array, torch tensor, cupy array, pyopencl "
                                     "array, accel.Tensor or an object with __dlpack__",
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
    x = adopt(arg, x)
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
    if kind == "pyopencl":
        for status in list_backends():
            if status.available and status.name == "opencl":
                for index in range(len(status.devices)):
                    b = get_backend(f"opencl:{index}")
                    if b.import_array(x) is not None:
                        return b
        raise DeviceMismatchError(expected("array", "a pyopencl array in the context of an accel "
                                           "OpenCL backend (make it with accel.get_backend("
                                           "'opencl').queue; or pass x.get(), a host copy)",
                                           f"one in context {x.context}"))
    return None


# -- operands to tensors and back -----------------------------------------------------------
def _host_copy(op: Operand, backend: Backend) -> np.ndarray | None:
    """host_of(op), checked first where it copies: a broadcast or strided view can stand for far
    more bytes than it holds, so its size is weighed against the host's free memory and the
    device's before the copy is made."""
    x = op.x
    if op.kind == "numpy" and not x.flags.c_contiguous:
        info, device = backend.info, backend.device_id
        for limit, what in ((info.max_buffer_bytes, f"the {info.max_buffer_bytes} bytes of the "
                                                    f"largest buffer {device} can hold"),
                            (info.memory_bytes, f"the {info.memory_bytes} bytes of memory {device} has")):
            if limit and x.nbytes > limit:
                raise DeviceError(expected(op.arg, f"at most {what}", f"a view of {x.nbytes} bytes"))
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
        return x.contiguous()  # a view is copied on its device: backends read dense tensors
    host = _host_copy(op, backend)
    if host is None:
        buf = backend.import_array(x)
        if buf is None:
            where = getattr(x, "device", None) or getattr(x, "context", "?")
            raise DeviceMismatchError(expected(op.arg, f"an array on {backend.device_id}",
                                               f"{kind} array on {where}"))
        if kind == "pyopencl":  # any strides and offset: a view of the buffer, copied on the device
            item = x.dtype.itemsize
            if x.offset % item or any(s % item for s in x.strides):
                raise ArgumentError(expected(op.arg, "a pyopencl array whose offset and strides "
                                             "are whole elements",
                                             f"offset {x.offset}, strides {x.strides}"))
            return Tensor(backend, buf, op.shape, op.dtype, tuple(s // item for s in x.strides),
                          x.offset // item, base=x).contiguous()
        return Tensor(backend, buf, op.shape, op.dtype, base=x)
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
    if kind == "pyopencl":
        return t.backend.export_array(t)  # a pyopencl array over the result's buffer
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
            x = adopt("x", x)
            check_array("x", x)
    kind = array_kind(x)
    target = get_backend(backend) if backend is not None else (device_backend(x, kind) or get_backend())
    want = dtype_name(dtype) if dtype is not None else None
    if kind == "accel":
        if x.backend is not target:
            x = x.to(target)
        return x.astype(want, copy=False) if want else x
    host = host_of(x, kind)
    if host is not None and want:
        host = convert(host, want)  # to nearest even; FP8 overflow as torch's Tensor.to
    if host is not None:
        return Tensor._upload(target, host, dtype_name(host.dtype, "x.dtype"))
    t = to_tensor(operand("x", x), target)
    return t.astype(want, copy=False) if want else t  # a device array converts on its device


def _quantized_shape(shape: Any, fmt: QuantFormat) -> tuple[int, ...]:
    """``shape`` as a QTensor's logical shape, checked: ints, none negative, whole blocks."""
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
    check_quantizable_shape(shape, fmt, "shape")
    return shape


#: GGUF's float tensor types: QTensor.from_gguf gives them as plain accel.Tensors
_GGUF_FLOATS = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}


class QTensor:
    """A tensor quantized along its last axis in a GGUF block format.

    ``raw`` is a numpy uint8 array ``[..., K // block * block_bytes]`` in GGUF block layout, ``shape``
    the logical shape ``[..., K]``. ``data`` is the backend-resident copy the ops read.

    >>> import numpy as np, accel
    >>> qt = accel.quantize(np.full((2, 64), 127, np.float32), "q8_0")  # d = 127 / 127 = 1
    >>> qt.shape, qt.raw.shape, float(accel.dequantize(qt)[1, 63])
    ((2, 64), (2, 68), 127.0)
    """

    def __init__(self, data: Tensor, fmt: QuantFormat | str, shape: tuple[int, ...], kind: str = "numpy"):
        f = get_format(fmt)
        shape = _quantized_shape(shape, f)
        if not isinstance(data, Tensor):
            raise ArgumentError(expected("data", "an accel.Tensor of GGUF block bytes (for a host "
                                         "array: QTensor.from_raw)", type(data).__name__))
        want = shape[:-1] + (f.row_bytes(shape[-1]),)
        if data.dtype != "uint8" or data.shape != want:  # else the kernels read past the rows
            raise ShapeError(expected("data", f"uint8 of shape {want} ({f.name} blocks of shape "
                                      f"{shape})", f"{data.dtype} of shape {data.shape}"))
        self.data = data  # accel.Tensor of uint8, shape [..., row_bytes]
        self.format = f
        self.shape = shape
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
        shape = _quantized_shape(shape, f)
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
    def from_gguf(cls, tensor: Any, *, backend: str | Backend | None = None) -> QTensor | Tensor:
        """A quantized tensor read by ``gguf.GGUFReader`` (an item of its ``.tensors``), with
        GGUF's dimension order (innermost first) turned into accel's ``[..., K]``; an F32, F16 or
        BF16 tensor comes back as a plain ``accel.Tensor`` of that dtype and shape.

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
        shape = tuple(int(d) for d in reversed(tensor.shape))  # GGUF lists ne[0] = K first
        if kind in _GGUF_FLOATS:  # a plain array: the same on-ramp as any host array
            host = np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8)  # BF16 comes as bytes
            want = np.dtype(_GGUF_FLOATS[kind])
            if host.size != int(np.prod(shape)) * want.itemsize:
                raise ShapeError(expected("tensor", f"{int(np.prod(shape)) * want.itemsize} bytes of "
                                          f"{kind} for shape {shape}", f"{host.size} bytes"))
            return asarray(host.view(want).reshape(shape), backend=backend)
        if fmt not in FORMATS:
            raise ArgumentError(expected("tensor", f"a GGUF tensor of a type accel reads "
                                         f"({', '.join(f.upper() for f in FORMATS)}, "
                                         f"{', '.join(_GGUF_FLOATS)})",
                                         f"{kind} tensor {getattr(tensor, 'name', '')!r}"))
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
