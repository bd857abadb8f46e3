"""The one implementation behind the ``cuda`` and ``hip`` backends, on CuPy.

CuPy's Python API is the same on CUDA and ROCm; what differs is made explicit by the two thin
subclasses (backends/cupy/cuda.py, backends/cupy/hip.py): the platform CuPy must be built for, the arch the
kernels are compiled for (``sm_XY`` / ``gfx...``, read from the device), the warp width passed to
every kernel as ``ACCEL_WARP`` (32, or 64 on CDNA wavefronts, read from the device), the vendor
BLAS name and how versions are spelled.

Kernels are built by ``accel.kernels.toolchains`` (NVRTC / hiprtc, the same code path ``accel kernels
check`` proves in CI without a GPU), cached on disk, and loaded with ``cupy.RawModule(path=...)``.

The implementation is chosen per backend instance by ``backend.impl`` (default from the
environment variable ``ACCEL_CUDA_IMPL`` / ``ACCEL_HIP_IMPL``, else ``"auto"``):

- ``"kernels"``: the shared-dialect kernels from ``accel.kernels`` for every op;
- ``"vendor"``: matmul through the vendor BLAS (cuBLAS / hipBLAS via ``cupy.matmul``), every
  other op still through the shared kernels;
- ``"tensorcore"``: float16/bfloat16 matmul and attention (head dims 64 and 128) on NVIDIA
  tensor cores (kernels/matmul_wgmma.cu, matmul_wmma.cu, attention_mma.cu; sm_80 and later),
  and FP8 scaled_matmul of e4m3fn/e5m2 (kernels/scaled_matmul_mma.cu; sm_89 and later);
  declined with the reason elsewhere; the planner picks one by the operands' alignment),
  everything else as ``"kernels"``;
- ``"auto"``: ``"tensorcore"`` where the device has it, else ``"kernels"``.

Which of these computes a spec, with which kernels, grids and blocks, and whether it is
supported is decided without a device by the one planner of every kernel runtime,
backends/plan.py (:class:`accel.backends.runtime.KernelRuntime` runs its plans); this module is
the device side: discovery, memory, loading and launching kernels, timing, DLPack.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from typing import Any, Callable, ClassVar, Iterator

import numpy as np

from accel import kernels
from accel.backend import DeviceInfo
from accel.backends.runtime import KernelRuntime
from accel.dtypes import exact_int8_matmul, to_numpy_dtype
from accel.errors import (ArgumentError, BackendUnavailable, CompileError, DeviceError,
                          DTypeError, UnsupportedError, expected)
from accel.kernels import toolchains
from accel.registry import ForkGuard
from accel.tensor import Tensor

from accel.backends.cupy.build import STATIC_SHARED_MAX, build_kernel, build_variant, wmma_header_missing
from accel.backends import plan
from accel.backends.plan import (DEFAULT_TILES, IMPLS, TENSORCORE_KERNEL, Launch, Operand, Placeholder,
                                 Scratch, Upload, kernel_path, tensorcore_reason)


#: a CUDA or HIP context does not survive fork(): a forked child's first call would fail or hang
FORK_GUARD = ForkGuard("CUDA/HIP")


# -- availability -----------------------------------------------------------------------------
def format_version(platform: str, version: int) -> str:
    """Spell a runtime/driver version integer the way each vendor does.

    >>> format_version("cuda", 12080), format_version("hip", 60342134)
    ('12.8', '6.3.42134')
    """
    if platform == "cuda":
        return f"{version // 1000}.{version % 1000 // 10}"
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


def unavailable_reason(platform: str, *, cupy_version: str, built_for_hip: bool,
                       driver_version: int | None, runtime_version: int | None,
                       query_error: str | None = None, device_count: int | None = None) -> str | None:
    """Why CuPy cannot give this platform a device, or None when it can. Pure: the facts come in
    as arguments so every branch is testable on any machine.

    >>> unavailable_reason("cuda", cupy_version="14.2.0", built_for_hip=False, driver_version=0,
    ...                    runtime_version=13020, query_error="cudaErrorInsufficientDriver")[:39]
    'no NVIDIA GPU driver on this machine: C'
    """
    vendor, stack = ("NVIDIA", "CUDA") if platform == "cuda" else ("AMD", "ROCm")
    if built_for_hip != (platform == "hip"):
        other = "ROCm (a cupy-rocm-* wheel)" if built_for_hip else "CUDA (a cupy-cuda* wheel)"
        want = "cupy-rocm-7-0" if platform == "hip" else "cupy-cuda12x or cupy-cuda13x"
        return f"the installed CuPy {cupy_version} is built for {other}, not {stack}: install {want}"
    runtime = format_version(platform, runtime_version) if runtime_version else "unknown"
    if driver_version == 0:
        return (f"no {vendor} GPU driver on this machine: CuPy {cupy_version} ({stack} runtime "
                f"{runtime}) is installed, but the driver reports version 0 (no GPU or driver)")
    if platform == "cuda" and driver_version and runtime_version and (
            driver_version // 1000 < runtime_version // 1000
            or (query_error and "InsufficientDriver" in query_error)):
        return (f"the NVIDIA driver is too old: it supports CUDA {format_version('cuda', driver_version)}"
                f", CuPy {cupy_version} needs CUDA {runtime}; update the driver or install the CuPy "
                f"wheel for CUDA {driver_version // 1000}")
    if query_error:
        return f"{stack} device query failed: {query_error}"
    if not device_count:
        return f"no {vendor} GPU found ({stack} runtime {runtime} sees 0 devices)"
    return None




def _cupy():
    """CuPy, imported only when a backend is used (``import accel`` never pays for it)."""
    import cupy

    return cupy


# -- xp-generic helpers: the same code runs on cupy arrays on the device and numpy arrays in tests --
def bf16_bits_to_f32(xp, bits):
    """bfloat16 bit patterns (uint16) -> float32, exactly."""
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


def f32_to_bf16_bits(xp, x):
    """float32 -> bfloat16 bit patterns, round to nearest even; NaN stays a quiet NaN."""
    u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(xp.uint16)
    quiet_nan = ((u >> 16) | 0x40).astype(xp.uint16)
    return xp.where((u & 0x7FFFFFFF) > 0x7F800000, quiet_nan, rounded)


def to_f32(xp, x, dtype: str):
    """A float32 copy/view of an operand stored as ``dtype`` (bfloat16 as uint16 bits)."""
    return bf16_bits_to_f32(xp, x) if dtype == "bfloat16" else x.astype(xp.float32, copy=False)


def from_f32(xp, x, dtype: str):
    """float32 values as stored for ``dtype`` (bfloat16 as uint16 bits), rounded to nearest even."""
    return f32_to_bf16_bits(xp, x) if dtype == "bfloat16" else x.astype(to_numpy_dtype(dtype))


def vendor_matmul(xp, a, b, dtype: str, out_dtype: str):
    """``a @ b`` through the array library's BLAS (cuBLAS/hipBLAS for cupy): float inputs are
    widened to float32 (exact) and multiplied in float32, int8 exactly; stored as ``out_dtype``."""
    if dtype == "int8":
        return exact_int8_matmul(xp, a, b)
    return from_f32(xp, xp.matmul(to_f32(xp, a, dtype), to_f32(xp, b, dtype)), out_dtype)


def _storage_dtype(dtype: str):
    """The numpy dtype a device buffer of ``dtype`` is viewed as (bfloat16 as its uint16 bits)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else to_numpy_dtype(dtype)


# -- the backend --------------------------------------------------------------------------------
class CuPyBackend(KernelRuntime):
    """One CuPy device; subclasses fix the platform (``cuda`` or ``hip``)."""

    platform: ClassVar[str]
    vendor: ClassVar[str]
    vendor_blas: ClassVar[str]
    priority = 30  # above OpenCL on a GPU (20) and the CPU reference (10)
    alignment = 256  # cudaMalloc / hipMalloc alignment: views at these offsets stay aligned

    # -- discovery ---------------------------------------------------------------------------------
    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        found, reason = cls._probe()
        if reason:
            raise BackendUnavailable(f"backend {cls.name!r}: {reason}")
        return list(found)

    @classmethod
    @functools.cache
    def _probe(cls) -> tuple[tuple[DeviceInfo, ...], str | None]:
        """(devices, None) or ((), reason); cached, and never raises."""
        try:
            cupy = _cupy()
            from cupy.cuda import runtime
        except ImportError as e:
            if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "cupy":
                return (), (f"CuPy is not installed: pip install "
                            f"'accel-portable[{'rocm' if cls.platform == 'hip' else 'cuda12'}]'")
            return (), f"CuPy failed to import: {type(e).__name__}: {e}"
        except Exception as e:  # a broken CuPy install (missing shared libraries, ...)
            return (), f"CuPy failed to import: {type(e).__name__}: {e}"
        facts: dict[str, Any] = {"cupy_version": cupy.__version__, "built_for_hip": bool(runtime.is_hip)}
        if facts["built_for_hip"] != (cls.platform == "hip"):
            return (), unavailable_reason(cls.platform, driver_version=None, runtime_version=None,
                                          **facts)
        for key, query in (("driver_version", runtime.driverGetVersion),
                           ("runtime_version", runtime.runtimeGetVersion),
                           ("device_count", runtime.getDeviceCount)):
            try:
                facts[key] = query()
            except Exception as e:  # CUDARuntimeError / HIP errors: the reason says which
                facts.setdefault("query_error", f"{type(e).__name__}: {e}")
                facts[key] = None
        reason = unavailable_reason(cls.platform, **facts)
        if reason:
            return (), reason
        try:
            found = tuple(cls._describe(runtime.getDeviceProperties(i), facts)
                          for i in range(facts["device_count"]))
        except Exception as e:
            return (), f"device properties query failed: {type(e).__name__}: {e}"
        return found, None

    @classmethod
    def _describe(cls, props: dict, facts: dict) -> DeviceInfo:
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        extra = {"arch": cls.arch_of(props), "warp_size": int(props["warpSize"]),
                 "cache_bytes": int(props.get("l2CacheSize", 0)),
                 "runtime": format_version(cls.platform, facts["runtime_version"]),
                 "cupy": facts["cupy_version"]}
        driver = f"{cls.platform.upper()} driver {format_version(cls.platform, facts['driver_version'])}"
        return DeviceInfo(name, cls.vendor, driver, int(props["totalGlobalMem"]),
                          int(props["multiProcessorCount"]), extra)

    @classmethod
    def arch_of(cls, props: dict) -> str:
        """The compile target of a device from its properties (``sm_XY`` or ``gfx...``)."""
        raise NotImplementedError

    def __init__(self, index: int = 0):
        super().__init__(index)
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        FORK_GUARD.started()
        self.cupy = _cupy()
        self.device = self.cupy.cuda.Device(index)
        self.arch: str = self.info.extra["arch"]
        self.warp_size: int = self.info.extra["warp_size"]
        env = f"ACCEL_{self.platform.upper()}_IMPL"
        impl = os.environ.get(env, "auto")
        if impl not in IMPLS:
            raise ArgumentError(expected(env, f"one of {IMPLS}", repr(impl)))
        facts_of = {"cuda": plan.cuda, "hip": plan.hip}[self.platform]
        self.facts = facts_of(self.arch, impl, self.info.compute_units, wmma_header_missing())
        self.tiles = DEFAULT_TILES["gpu"]
        self._modules: dict[tuple, Any] = {}
        self._shipped: dict[tuple, Any] = {}
        self._scratch: dict[int, Any] = {}  # stream -> its scratch buffer (see scratch())
        self._retired: list[Any] = []

    # -- implementation choice ---------------------------------------------------------------
    @property
    def impl(self) -> str:
        """"auto" (default: "tensorcore" where the device has it), "kernels" (shared-dialect
        kernels for every op), "vendor" (vendor BLAS for matmul) or "tensorcore" (float16/bfloat16
        matmul and attention on tensor cores, sm_80+ CUDA only; e4m3fn/e5m2 scaled_matmul, sm_89+)."""
        return self.facts.impl

    @impl.setter
    def impl(self, value: str) -> None:
        self.facts = self.facts.with_impl(value)
        self.settings_changed()

    # -- memory: a buffer is a 1-d uint8 cupy array ---------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        with self.device:
            return self.cupy.empty(nbytes, self.cupy.uint8)

    def upload(self, host: np.ndarray) -> Any:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        with self.device:
            return self.cupy.asarray(np.ascontiguousarray(host).reshape(-1).view(np.uint8))

    def download(self, buf: Any, nbytes: int) -> np.ndarray:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        with self.device:
            return self.cupy.asnumpy(buf[:nbytes])

    def view(self, buf: Any, offset: int, nbytes: int) -> Any:
        return buf[offset: offset + nbytes]

    def synchronize(self) -> None:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        with self.device:
            self.cupy.cuda.get_current_stream().synchronize()

    def import_array(self, x: Any) -> Any | None:
        """Zero-copy: a contiguous cupy array or torch GPU tensor on this device becomes a uint8
        view of the same memory; None for arrays elsewhere."""
        mod = type(x).__module__
        if mod.startswith("cupy"):
            if x.device.id != self.index:
                return None
            return self.cupy.ascontiguousarray(x).reshape(-1).view(self.cupy.uint8)
        if mod.startswith("torch"):
            import torch

            on_platform = bool(getattr(torch.version, "hip", None)) == (self.platform == "hip")
            if x.device.type != "cuda" or x.device.index != self.index or not on_platform:
                return None
            with self.device:
                return self.cupy.from_dlpack(x.detach().contiguous().reshape(-1).view(torch.uint8))
        return None

    def export_array(self, tensor) -> Any:
        """A cupy array viewing ``tensor``, strides and offset included (bfloat16 as
        ml_dtypes.bfloat16, which CuPy >= 14 carries through DLPack)."""
        item = to_numpy_dtype(tensor.dtype)
        try:
            start = tensor.buf.data + tensor.offset * item.itemsize
            return self.cupy.ndarray(tensor.shape, item, start,
                                     tuple(s * item.itemsize for s in tensor.strides))
        except TypeError as e:  # an older CuPy without ml_dtypes support
            raise DTypeError(expected("tensor.dtype", f"a dtype CuPy {self.cupy.__version__} can "
                                      "export (bfloat16 needs CuPy >= 14)", tensor.dtype)) from e

    def _array(self, t) -> Any:
        """A typed cupy view of a tensor's buffer (bfloat16 as its uint16 bits)."""
        return t.buf[: t.nbytes].view(_storage_dtype(t.dtype)).reshape(t.shape)

    # -- kernels ------------------------------------------------------------------------------------
    def compile(self, source: str, name: str, *, options: tuple[str, ...] = (),
                dialect: str = "accel") -> Any:
        """Build ``name`` for this device's arch (cached in memory, and on disk by
        accel.kernels.toolchains); CompileError carries the compiler log."""
        if dialect not in ("accel", "cuda"):
            raise UnsupportedError(self.device_id, "user kernels", "",
                                   f"the {self.name} backend compiles the accel and cuda dialects, "
                                   f"not {dialect!r} (translate it with `accel port`)")
        return self._build(source, name, tuple(options), dialect, self.arch)

    def _build(self, source: str, name: str, options: tuple[str, ...], dialect: str, target: str) -> Any:
        key = (source, name, options, dialect, target)
        if key not in self._modules:
            self._modules[key] = self._load(
                build_kernel(source, name, target, self.warp_size, options=options, dialect=dialect), name)
        return self._modules[key]

    def _load(self, result: "toolchains.CompileResult", name: str) -> Any:
        """Kernel ``name`` of a compiled binary, loaded on this device."""
        try:
            with self.device:
                return self.cupy.RawModule(path=str(result.path)).get_function(name)
        except Exception as e:  # no such kernel in the module, or the driver rejects the binary
            raise CompileError(name, result.target, f"loading the {result.target} binary failed: "
                                                    f"{type(e).__name__}: {e}") from e

    def launch(self, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: list, shared_mem: int = 0) -> None:
        """Enqueue with CUDA semantics; accel.Tensor arguments pass their device buffer."""
        raw = tuple(self.launch_buffer(i, a) if isinstance(a, Tensor) else a for i, a in enumerate(args))
        try:
            with self.device:
                kernel(tuple(grid), tuple(block), raw, shared_mem=int(shared_mem))
        except Exception as e:  # invalid configuration, out of resources: a device error
            raise DeviceError(f"launching {getattr(kernel, 'kernel', kernel)!r} with grid {grid}, "
                              f"block {block}, shared_mem {shared_mem} on {self.device_id} failed: "
                              f"{type(e).__name__}: {e}") from e

    def gather(self, src, dtype: str) -> Any:
        """The view's elements in C order as ``dtype``, copied by kernels/copy.cl (bit for bit,
        or converted between float formats); other conversions through the host."""
        plan = kernels.copy_plan(src.shape, src.strides, src.offset, src.dtype, dtype,
                                 groups=32 * max(1, self.info.compute_units))
        if plan is None:
            return super().gather(src, dtype)
        grid, block, scalars = plan
        out = self.alloc(math.prod(src.shape) * to_numpy_dtype(dtype).itemsize)
        if out.nbytes:
            with self.device, self.stream_of((src,)):
                self.launch(self.shipped(kernels.COPY, "strided_copy"), grid, block,
                            [src.buf, out, *scalars])
        return out

    def stream_of(self, tensors: tuple) -> Any:
        """Where work on ``tensors`` is enqueued: torch's current stream on this device when one
        of them is torch memory (so accel's kernels are ordered with torch's work on it), else
        CuPy's current stream. A context manager."""
        torch = sys.modules.get("torch")
        if torch is None or not any(isinstance(getattr(t, "base", None), torch.Tensor)
                                    for t in tensors if t is not None):
            return contextlib.nullcontext()
        current = torch.cuda.current_stream(self.index)
        # CuPy 14 takes the stream protocol (a torch stream speaks it); before, the raw handle
        if hasattr(self.cupy.cuda.Stream, "from_external") and hasattr(current, "__cuda_stream__"):
            return self.cupy.cuda.Stream.from_external(current)
        return self.cupy.cuda.ExternalStream(current.cuda_stream, self.index)

    # -- plans (backends/plan.py) --------------------------------------------------------------
    def run(self, spec, out, *inputs) -> None:
        if spec.op == "matmul" and kernel_path(spec, self.facts) == "vendor":
            a, b = inputs
            with self.calling(inputs):
                self._array(out)[...] = vendor_matmul(self.cupy, self._array(a), self._array(b),
                                                      spec.dtype, spec.out_dtype)
            return
        super().run(spec, out, *inputs)

    @contextlib.contextmanager
    def calling(self, inputs: tuple) -> Iterator[None]:
        with self.device, self.stream_of(inputs):  # the stream is entered with its device current
            yield

    def bind(self, launch: Launch, index: dict[str, int]) -> Callable[..., None]:
        """The launch's kernel, built and loaded once, with its constants in place; a call fills
        in its buffers."""
        kernel = self.shipped(launch.variant, launch.kernel)
        args = [None if isinstance(slot, (Operand, Scratch)) else self._constant(slot)
                for slot in launch.buffers] + list(launch.scalars)
        picks = [(i, index[slot.name]) for i, slot in enumerate(launch.buffers)
                 if isinstance(slot, (Operand, Scratch))]
        grid, block, shared = launch.grid, launch.block, launch.variant.dynamic_local_bytes

        def run(*bufs: Any) -> None:
            call = list(args)
            for i, j in picks:
                call[i] = bufs[j]
            self.launch(kernel, grid, block, call, shared)

        return run

    def scratch_buffers(self, sizes: tuple[int, ...]) -> tuple:
        """Slices of :meth:`scratch`, each starting 256-byte aligned."""
        starts = [0]
        for n in sizes:
            starts.append(starts[-1] + -(-n // 256) * 256)
        buf = self.scratch(starts[-1])
        return tuple(buf[a: a + n] for a, n in zip(starts, sizes))

    def operand_alignment(self, inputs: tuple) -> int:
        """Adopted arrays (torch, CuPy views) may start anywhere: the least alignment of the
        inputs' addresses, up to the allocator's 256 bytes."""
        align = self.alignment
        for t in inputs:
            ptr = 0 if t is None else t.buf.data.ptr
            if ptr:
                align = min(align, ptr & -ptr)
        return align

    def _constant(self, slot: Upload | Placeholder) -> Any:
        return self.upload(slot.host) if isinstance(slot, Upload) else self._optional(None)

    def shipped(self, variant, name: str) -> Any:
        """Kernel ``name`` of shipped ``variant``, built for the compile target it needs on this
        device and loaded once per variant (no source reading or hashing on later calls)."""
        fn = self._shipped.get((variant, name))
        if fn is None:
            fn = self._load(build_variant(variant, name, self.arch, self.warp_size), name)
            if variant.dynamic_local_bytes > STATIC_SHARED_MAX:  # an opt-in above 48 KiB
                with self.device:
                    fn.max_dynamic_shared_size_bytes = variant.dynamic_local_bytes
            self._shipped[(variant, name)] = fn
        return fn

    def scratch(self, nbytes: int) -> Any:
        """At least ``nbytes`` of device memory owned by the backend for the current stream (its
        kernels use it in stream order). Never returned to CuPy's pool while the backend lives:
        a CUDA graph that captured a launch keeps the address, and a pooled buffer freed after
        the call could be handed to another allocation that the graph's replays would overwrite.
        Grown to powers of two; an outgrown buffer is retired, not freed, for the same reason."""
        with self.device:
            stream = self.cupy.cuda.get_current_stream().ptr
            buf = self._scratch.get(stream)
            if buf is None or buf.nbytes < nbytes:
                if buf is not None:
                    self._retired.append(buf)
                buf = self._scratch[stream] = self.cupy.empty(1 << max(8, (nbytes - 1).bit_length()),
                                                               self.cupy.uint8)
        return buf

    def _optional(self, operand: Any) -> Any:
        """``operand``, or for None a device buffer the kernel never reads (attention without a
        mask, sinks or key chunks; scaled_matmul without a bias)."""
        if operand is not None:
            return operand
        if not hasattr(self, "_unused_buf"):
            self._unused_buf = self.alloc(256)
        return self._unused_buf

    # -- timing and versions ----------------------------------------------------------------------
    def time(self, fn) -> float:
        """Seconds between two device events around the work ``fn`` enqueues, run with this
        device current: accel's kernels or any CuPy call (the cuBLAS baseline is timed so)."""
        with self.device:
            start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return self.cupy.cuda.get_elapsed_time(start, end) / 1e3

    def versions(self) -> dict[str, str]:
        out = {"cupy": self.cupy.__version__, f"{self.platform}_runtime": self.info.extra["runtime"],
               "driver": self.info.driver, "arch": self.arch, "impl": self.impl}
        try:
            out["compiler"] = toolchains.toolchain_version(self.arch)
        except BackendUnavailable as e:
            out["compiler"] = f"unavailable: {e}"
        if self.platform == "cuda":  # result files then say whether 16-bit matmul had tensor cores
            out["tensorcore"] = "; ".join(filter(None, (tensorcore_reason(self.arch, op, self.facts.tensorcore_missing)
                                                        for op in TENSORCORE_KERNEL))) or "available"
        return out

    def __repr__(self) -> str:
        return f"<accel backend {self.device_id}: {self.info.name} ({self.arch}, impl={self.impl})>"


__all__ = ["CuPyBackend", "format_version", "unavailable_reason", "vendor_matmul", "bf16_bits_to_f32",
           "f32_to_bf16_bits"]
