"""The backend contract: what a vendor backend implements, and nothing more.

A backend is one device of one runtime: it allocates and copies raw bytes, says through
``supports(spec)`` which op cases it computes correctly, computes them into a preallocated output,
and times work on its device. Validation, shapes, dtypes and FLOP counts come to it already
decided in a spec (``accel.spec``); a backend never re-validates.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol

import numpy as np

from accel.dtypes import convert, to_numpy_dtype
from accel.errors import AccelError, ArgumentError, DeviceError, UnsupportedError, expected
from accel.spec import Spec


class DeviceArray(Protocol):
    """An ``accel.Tensor`` as a backend sees it: one of its buffers, with a shape and a dtype.
    (A protocol, not the class: accel.tensor builds on this module.) Op methods only ever get
    C-contiguous tensors starting at the buffer's first byte; a view (``strides`` and
    ``offset`` in elements) reaches only :meth:`Backend.gather` and ``export_array``."""

    buf: Any
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def nbytes(self) -> int: ...

    @property
    def strides(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Support:
    """The answer of ``Backend.supports``: ``ok``, or the reason it is declined.

    >>> import accel
    >>> from accel.spec import matmul_spec
    >>> accel.get_backend("cpu").supports(matmul_spec((2, 3), "float32", (3, 4), "float32"))
    Support(ok=True, reason='')
    """

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


YES = Support(True)

_INT32_MAX = 2**31 - 1
_VERDICTS_KEPT = 4096


def int32_sizes(spec: Spec) -> Support:
    """Whether the sizes of ``spec`` fit the 32-bit int arguments accel's shared kernels take
    (offsets are 64-bit inside them): the check every kernel-based backend's supports() makes.

    >>> from accel.spec import matmul_spec
    >>> int32_sizes(matmul_spec((1, 2**31), "float16", (2**31, 1), "float16")).ok
    False
    """
    sizes = {"matmul": lambda: dict(M=spec.M, N=spec.N, K=spec.K, batch=spec.batch),
             # attention.cl runs the Hq / Hkv heads sharing a kv head as one run of rows, and
             # a group's last tile (at most 256 rows) may reach past it
             "attention": lambda: dict(Sq=spec.Sq, Sk=spec.Sk, heads=spec.B * spec.Hq,
                                       rows_per_kv_head_and_a_tile=spec.Hq // spec.Hkv * spec.Sq + 256),
             "qmatmul": lambda: dict(M=spec.M, N=spec.N, K=spec.K),
             "scaled_matmul": lambda: dict(M=spec.M, N=spec.N, K=spec.K),
             "quantize": lambda: dict(blocks=spec.rows * spec.shape[-1] // spec.fmt.block),
             "dequantize": lambda: dict(elements=spec.rows * spec.shape[-1])}.get(
        spec.op, lambda: dict(elements=max(math.prod(spec.out_shape),  # the decoder-step ops
                                           math.prod(getattr(spec, "shape", ())))))()
    big = {k: v for k, v in sizes.items() if v > _INT32_MAX}
    if big:
        return Support(False, f"sizes are passed to the kernels as 32-bit ints; {big} exceed {_INT32_MAX}")
    return YES


@dataclass(frozen=True)
class DeviceInfo:
    """What ``accel info`` shows about one device.

    >>> import accel
    >>> info = accel.get_backend("cpu").info
    >>> isinstance(info, accel.DeviceInfo) and info.compute_units >= 1
    True
    """

    name: str
    vendor: str = ""
    driver: str = ""
    memory_bytes: int = 0
    compute_units: int = 0
    extra: dict = field(default_factory=dict)
    max_buffer_bytes: int = 0  # the largest single buffer, where smaller than memory_bytes


class Backend:
    """Base class of every backend. A subclass must set ``name`` and implement ``devices``, the
    memory primitives (``alloc``, ``upload``, ``download``, ``view``) and the op methods it
    claims (``matmul(spec, out, a, b)``, ``attention(spec, out, q, k, v, mask)``,
    ``quantize(spec, out, x)``, ``dequantize(spec, out, q)``, ``qmatmul(spec, out, x, w)``, and
    accel.nn's decoder-step ops alike: a method named by the spec's ``op``, its operands in
    backends/plan.py's ``OPERANDS`` order);
    every other member has a working default and is marked *optional* below.

    Buffers are opaque backend handles holding raw bytes; ``accel.Tensor`` pairs one with a shape
    and dtype. Op methods receive the spec, a preallocated output tensor (a tuple of them for a
    spec of several ``outputs``) and the input tensors.

    >>> import accel
    >>> be = accel.get_backend("cpu")
    >>> isinstance(be, accel.Backend), be.device_id
    (True, 'cpu:0')
    """

    name: ClassVar[str]
    priority: ClassVar[int] = 0  # automatic selection picks the highest available
    evidence: ClassVar[str] = "ran"  # what a conformance verdict of this backend rests on
    alignment: ClassVar[int] = 1  # byte alignment a view() offset must have
    #: the ``qmatmul(x_format=...)`` formats whose semantics the backend's qmatmul computes; a
    #: backend that does not list one is never asked to (see :meth:`verdict`)
    x_formats: ClassVar[tuple[str, ...]] = ()
    #: the quantization formats whose quantize, dequantize and qmatmul the backend computes; ops on
    #: any other format are declined before ``supports()`` is asked (see :meth:`verdict`). The
    #: default is the formats accel had before the K-quants and mxfp4, so a backend written then
    #: is never handed a layout it cannot read.
    formats: ClassVar[tuple[str, ...]] = ("q8_0", "q4_0")
    #: whether the backend computes attention's ``window``, ``softcap`` and ``sinks`` (issue 42);
    #: a backend that does not say so is never handed them (see :meth:`verdict`)
    attention_options: ClassVar[bool] = False
    #: whether :meth:`compute` takes host numpy arrays: dispatch then hands numpy operands to it
    #: directly, with no Tensor wrapping on the hot path (the CPU reference)
    host_compute: ClassVar[bool] = False
    #: whether dispatch checks a ``compute`` result's kind, shape and dtype before handing it to
    #: the user (a plugin's wrong result is an error naming it); the CPU reference turns it off:
    #: its results are what the test suite checks, and the check costs a fifth of a tiny call
    check_host_results: ClassVar[bool] = True
    #: supports() verdicts cached by :meth:`verdict`, bounded (a decode loop makes a new spec per
    #: step); a class default, so a plugin whose __init__ skips super().__init__ still works
    _verdicts: dict[Spec, Support] | None = None

    def __init__(self, index: int = 0):
        self.index = index
        self.info: DeviceInfo = self.devices()[index]

    # -- discovery -------------------------------------------------------------------------
    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        """The devices this backend can use; raise BackendUnavailable with the reason if none."""
        raise NotImplementedError

    @classmethod
    def skipped_devices(cls) -> list[str]:
        """Optional: devices found but left out of ``devices()``, each with why (e.g. a driver
        whose compiler cannot build for this CPU); ``accel info`` prints them."""
        return []

    @classmethod
    def auto_priority(cls, devices: list[DeviceInfo]) -> int:
        """Optional: rank for automatic selection given the devices found (e.g. an OpenCL CPU
        device ranks below the CPU reference, an OpenCL GPU above it); default ``priority``."""
        return cls.priority

    @property
    def device_id(self) -> str:
        """``name:index``, the device string that selects this instance."""
        return f"{self.name}:{self.index}"

    # -- memory -------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        """A new, uninitialized device buffer of ``nbytes`` bytes (0 allowed)."""
        raise NotImplementedError

    def upload(self, host: np.ndarray) -> Any:
        """A new device buffer holding the bytes of a C-contiguous host array."""
        raise NotImplementedError

    def download(self, buf: Any, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``buf`` as a host uint8 array (synchronizes)."""
        raise NotImplementedError

    def view(self, buf: Any, offset: int, nbytes: int) -> Any:
        """A buffer aliasing ``buf[offset:offset + nbytes]`` of a buffer made by ``upload()``
        (offset a multiple of alignment); the conformance suite's guard regions rely on it."""
        raise NotImplementedError

    def gather(self, src: DeviceArray, dtype: str) -> Any:
        """Optional: a new buffer holding the elements of view ``src`` (``src.strides`` and
        ``src.offset`` in elements over ``src.buf``) in C order, as ``dtype``: what
        ``Tensor.contiguous()`` and ``Tensor.astype()`` run. The default goes through the host
        (download, numpy, upload); device backends override it with a copy kernel.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), backend="cpu").T
        >>> be = t.backend
        >>> be.download(be.gather(t, "float16"), 12).view(np.float16).tolist()
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        """
        return self.upload(np.ascontiguousarray(convert(self.host_view(src), dtype)))

    def write(self, dst: DeviceArray, src: DeviceArray) -> None:
        """Optional: copy the elements of C-contiguous ``src`` into view ``dst`` (same shape and
        dtype, strides and offset in elements over ``dst.buf``): what ``Tensor.__setitem__``
        runs. The default works where buffers are host memory (numpy arrays, as on the CPU
        backend); device backends override it.

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.zeros((2, 3), np.float32), backend="cpu")
        >>> t.backend.write(t[:, 1], accel.asarray(np.ones(2, np.float32), backend="cpu"))
        >>> t.numpy().tolist()
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
        """
        if not isinstance(dst.buf, np.ndarray):
            raise UnsupportedError(self.name, "Tensor.__setitem__", dst.dtype, "this backend "
                                   "defines no write(dst, src) for its device buffers")
        self.host_view(dst)[...] = self.host_view(src)

    def host_view(self, src: DeviceArray) -> np.ndarray:
        """View ``src`` as a host numpy array over a download of the bytes it reaches (a view of
        the buffer itself where ``download`` returns one, as on the CPU backend).

        >>> import accel, numpy as np
        >>> t = accel.asarray(np.arange(6, dtype=np.int32).reshape(2, 3), backend="cpu")
        >>> t.backend.host_view(t[:, ::-2]).tolist()
        [[2, 0], [5, 3]]
        """
        item = to_numpy_dtype(src.dtype)
        reach = [(n - 1) * s for n, s in zip(src.shape, src.strides)]
        if 0 in src.shape:
            return np.empty(src.shape, item)
        end = (src.offset + sum(r for r in reach if r > 0) + 1) * item.itemsize
        raw = self.download(src.buf, end)
        return np.ndarray(src.shape, item, buffer=raw, offset=src.offset * item.itemsize,
                          strides=tuple(s * item.itemsize for s in src.strides))

    def synchronize(self) -> None:
        """Optional (required where work runs asynchronously): wait until all work queued on
        the device has finished."""

    def import_array(self, x: Any) -> Any | None:
        """Optional: zero-copy adoption of a foreign device array (cupy, torch.cuda) on this
        device, or None when ``x`` is not one. Host arrays never come here."""
        return None

    def export_array(self, tensor: DeviceArray) -> Any | None:
        """Optional: the backend's native array viewing ``tensor``'s memory (zero-copy, strides
        and offset included): what ``Tensor.__dlpack__`` exports where it has ``__dlpack__``
        (``Tensor.__dlpack__`` raises a clear error where it has not, or for None)."""
        return None

    # -- ops ----------------------------------------------------------------------------------
    @classmethod
    def implements(cls, op: str) -> bool:
        """Whether the class computes ``op`` at all (before any case is asked): by default,
        whether it has an op method of that name; kernel runtimes run every op they plan."""
        return hasattr(cls, op)

    def supports(self, spec: Spec) -> Support:
        """The single truth of what this backend computes correctly, with the reason when not.
        Read through :meth:`verdict`, never directly. Default: the ops it has a method for."""
        if not self.implements(spec.op):
            return Support(False, f"op {spec.op} is not implemented by {self.name}")
        return YES

    def verdict(self, spec: Spec) -> Support:
        """``supports(spec)`` as dispatch, the conformance suite and the benchmarks read it, cached
        per spec until :meth:`settings_changed`. A quantized matmul with an ``x_fmt`` the backend
        does not list in ``x_formats`` is declined first: a backend written before that option
        would compute the float product instead; so is an op on a quantization format it does not
        list in ``formats``.

        >>> from accel.spec import qmatmul_spec
        >>> from accel.formats import get_format
        >>> class Old(Backend):
        ...     name = "old"
        ...     def __init__(self): pass
        ...     def qmatmul(self, spec, out, x, w): pass
        >>> Old().verdict(qmatmul_spec((1, 32), "float32", (2, 32), get_format("q4_0"), "q8_0")).reason
        "x_format='q8_0' is not among old's x_formats ()"
        """
        try:  # the per-call path: one lookup
            return self._verdicts[spec]  # type: ignore[index]
        except (KeyError, TypeError):  # not cached yet, or no cache yet (None)
            pass
        x_fmt, fmt = getattr(spec, "x_fmt", None), getattr(spec, "fmt", None)
        if fmt is not None and fmt.name not in self.formats:
            found = Support(False, f"format {fmt.name!r} is not among {self.name}'s formats "
                                   f"{self.formats} (no kernels for it yet)")
        elif getattr(spec, "options", False) and not self.attention_options:
            found = Support(False, f"attention's window, softcap and sinks are not computed by "
                                   f"{self.name} yet")
        elif x_fmt is not None and x_fmt.name not in self.x_formats:
            found = Support(False, f"x_format={x_fmt.name!r} is not among {self.name}'s "
                                   f"x_formats {self.x_formats}")
        else:
            found = self._asked_supports(spec)
        if self._verdicts is None or len(self._verdicts) >= _VERDICTS_KEPT:
            self._verdicts = {}
        self._verdicts[spec] = found
        return found

    def _asked_supports(self, spec: Spec) -> Support:
        """supports(spec), held to its contract: a plugin's exception or a bare bool becomes an
        error naming the backend and the op, not a KeyError from somewhere inside it."""
        try:
            found = self.supports(spec)
        except AccelError:
            raise
        except Exception as e:
            raise DeviceError(f"backend {self.name!r}: supports() raised {type(e).__name__}: {e} "
                              f"(for {spec.op})") from e
        if not isinstance(found, Support):
            raise DeviceError(f"backend {self.name!r}: supports() returned {found!r} for {spec.op}; "
                              "the contract is an accel.Support(ok, reason)")
        return found

    def settings_changed(self) -> None:
        """Call after changing anything ``supports()`` reads (an implementation choice, kernel
        parameters): drops the cached verdicts. Backends that derive more from their settings
        (launch plans) extend it."""
        self._verdicts = None

    def accumulator(self, spec: Spec) -> str:
        """Optional: the accumulation format this backend uses for ``spec`` (read by the
        tolerance model); default float32, int32 for int8."""
        return "int32" if spec.in_dtypes[0] == "int8" else "float32"

    def run(self, spec: Spec, out: DeviceArray, *inputs: DeviceArray | None) -> None:
        """Optional: compute ``spec`` into ``out``; the default calls the op method of the same
        name."""
        method = getattr(self, spec.op, None)
        if method is None:  # supports() accepted an op the class never implemented
            raise DeviceError(f"backend {self.name!r}: supports() accepts {spec.op}, but the class "
                              f"defines no {spec.op}(spec, out, ...) method (compute() serves "
                              "numpy operands only; accel.Tensor operands need the op method)")
        method(spec, out, *inputs)

    def compute(self, spec: Spec, *inputs: np.ndarray | None) -> np.ndarray:
        """Optional, for backends with ``host_compute``: ``spec``'s result as a new host array
        of ``spec.out_dtype``, from numpy inputs of any strides (None for an absent optional
        one)."""
        raise NotImplementedError(f"{self.name} does not compute on host arrays (host_compute is False)")

    # -- user kernels (accel.kernel, accel kernels check) ---------------------------------------
    def compile(self, source: str, name: str, *, options: tuple[str, ...] = (),
                dialect: str = "accel") -> Any:
        """Optional: build kernel ``name`` from ``source`` (cached); raise CompileError with the
        log. ``dialect`` is "accel" (kernels/ portability header), "cuda" or "opencl"."""
        raise UnsupportedError(self.name, "user kernels", "", "this backend does not compile "
                               "kernels (the opencl, cuda and hip backends do)")

    def launch(self, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: list, shared_mem: int = 0) -> None:
        """Optional, with ``compile``: enqueue a compiled kernel with CUDA launch semantics (grid
        counts blocks)."""
        raise UnsupportedError(self.name, "user kernels", "", "this backend does not launch kernels")

    def launch_buffer(self, index: int, tensor: Any) -> Any:
        """The buffer an accel.Tensor kernel argument ``args[index]`` passes to ``launch``: a
        kernel sees raw memory, so a view (strides, offset) or another device's tensor is refused."""
        if tensor.backend is not self or not tensor.is_contiguous:
            raise ArgumentError(expected(f"args[{index}]", f"a contiguous tensor on {self.device_id} "
                                         "(a view's .contiguous())", repr(tensor)))
        return tensor.buf

    # -- timing ---------------------------------------------------------------------------------
    def time(self, fn: Callable[[], Any]) -> float:
        """Optional: seconds the device spends on the work ``fn`` enqueues. The default
        synchronizes around a host clock; device backends override it with their events."""
        self.synchronize()
        t0 = time.perf_counter()
        fn()
        self.synchronize()
        return time.perf_counter() - t0

    def versions(self) -> dict[str, str]:
        """Optional: runtime and library versions recorded in result files."""
        return {}

    def __repr__(self) -> str:
        return f"<accel backend {self.device_id}: {self.info.name}>"
