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
  declined with the reason elsewhere; :func:`accel.backends.cupy.plan.tensorcore_kernel` picks
  one by the operands' addresses), everything else as ``"kernels"``;
- ``"auto"``: ``"tensorcore"`` where the device has it, else ``"kernels"``.

Which of these computes a spec, with which kernel, grid and block, and whether it is supported
is decided without a device in backends/cupy/plan.py; this module is the device side: discovery,
memory, loading and launching kernels, timing, DLPack.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from typing import Any, ClassVar

import numpy as np

from accel import kernels
from accel.backend import Backend, DeviceInfo, Support
from accel.backends.runtime import DecoderKernels
from accel.dtypes import exact_int8_matmul, to_numpy_dtype
from accel.errors import (ArgumentError, BackendUnavailable, CompileError, DeviceError,
                          DTypeError, UnsupportedError, expected)
from accel.kernels import toolchains
from accel.registry import ForkGuard
from accel.spec import quantize_spec
from accel.tensor import Tensor

from accel.backends.cupy.plan import (IMPLS, STATIC_SHARED_MAX, TENSORCORE_KERNEL, accumulator_for,
                                      build_kernel, build_variant, kernel_path, kernel_variant,
                                      launch_plan, support_for, tensorcore_kernel, tensorcore_reason)


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
class CuPyBackend(DecoderKernels, Backend):
    """One CuPy device; subclasses fix the platform (``cuda`` or ``hip``)."""
    # the x_formats and formats its kernels compute (quant.cl's and kquant.cl's)
    x_formats = kernels.KERNEL_X_FORMATS + ("q8_1", "q8_k")
    formats = kernels.KERNEL_FORMATS + kernels.KQUANT_FORMATS + kernels.CODEBOOK_FORMATS
    attention_options = True  # attention.cl's window, softcap and sinks

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
        self._impl = os.environ.get(env, "auto")
        if self._impl not in IMPLS:
            raise ArgumentError(expected(env, f"one of {IMPLS}", repr(self._impl)))
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
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        if value not in IMPLS:
            raise ArgumentError(expected("impl", f"one of {IMPLS}", repr(value)))
        self._impl = value
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

    # -- ops ------------------------------------------------------------------------------------
    def run(self, spec, out, *inputs) -> None:
        with self.device, self.stream_of(inputs):  # the stream is entered with its device current
            super().run(spec, out, *inputs)

    def supports(self, spec) -> Support:
        return support_for(spec, self.impl, self.arch)

    def accumulator(self, spec) -> str:
        return accumulator_for(spec, self.impl, self.arch)

    def kernel_args(self, spec, out, *inputs, splits: Any = None) -> list:
        """The arguments every shipped kernel of ``spec``'s op takes: the op's inputs (tensors,
        attention's mask after the output and a placeholder for none; scaled_matmul's bias
        before the output, a placeholder for none), the output, matmul's
        batch offsets, attention's key-chunk records (``splits``; a placeholder for one pass),
        then :func:`accel.kernels.scalar_args`."""

        if spec.op == "matmul":
            with self.device:
                bufs = [*inputs, out, self.cupy.asarray(spec.batch_offsets().reshape(-1))]
        elif spec.op == "attention":
            q, k, v, mask, *sinks = inputs
            bufs = [q, k, v, out, self._optional(mask), self._optional(splits),
                    self._optional(sinks[0] if sinks else None)]
        elif spec.op == "scaled_matmul":
            *operands, bias = inputs
            bufs = [*operands, self._optional(bias), out]
        else:
            bufs = [*inputs, out]
        return bufs + list(kernels.scalar_args(spec))

    def run_variant(self, spec, variant, args: list, name: str | None = None, chunks: int = 1) -> None:
        """Launch shipped ``variant`` (kernel ``name``, else the one launch_plan names) on
        ``args`` (:meth:`kernel_args`), built once per variant for the compile target it needs
        on this device. The ops call it with the variant they choose; the speed-goal script
        (accel.conformance.bench.gpu_goals) with the alternatives it times."""
        planned, grid, block = launch_plan(spec, variant, name, chunks)
        self.launch(self.shipped(variant, name or planned), grid, block, args,
                    variant.dynamic_local_bytes)

    def shipped(self, variant, name: str) -> Any:
        """Kernel ``name`` of shipped ``variant``, built and loaded once per variant (no source
        reading or hashing on later calls)."""
        fn = self._shipped.get((variant, name))
        if fn is None:
            fn = self._load(build_variant(variant, name, self.arch, self.warp_size), name)
            if variant.dynamic_local_bytes > STATIC_SHARED_MAX:  # an opt-in above 48 KiB
                with self.device:
                    fn.max_dynamic_shared_size_bytes = variant.dynamic_local_bytes
            self._shipped[(variant, name)] = fn
        return fn

    def _compute(self, spec, *inputs: Any, out: Any, name: str | None = None) -> None:
        """Run ``spec``'s kernel on the path ``impl`` gives it: the tensor-core kernel chosen by
        the operands' addresses where there is one, else the shipped shared-dialect variant
        (kernel ``name``, else the one launch_plan names)."""
        args = self.kernel_args(spec, out, *inputs)
        if kernel_path(spec, self.impl, self.arch) == "tensorcore":
            # matmul's a, b; attention's q, k, v; scaled_matmul's a, b (and scale_a, unused)
            addresses = (t.buf.data.ptr for t in inputs[:3])
            chosen = tensorcore_kernel(spec, self.arch, *addresses)
            if chosen is not None:
                self.run_variant(spec, chosen[0], args, chosen[1])
                return
        self.run_variant(spec, kernel_variant(spec), args, name)

    def matmul(self, spec, out, a, b) -> None:
        if kernel_path(spec, self.impl, self.arch) == "vendor":
            with self.device:
                self._array(out)[...] = vendor_matmul(self.cupy, self._array(a), self._array(b),
                                                      spec.dtype, spec.out_dtype)
            return
        self._compute(spec, a, b, out=out)

    def attention(self, spec, out, q, k, v, mask, sinks=None) -> None:

        if kernel_path(spec, self.impl, self.arch) == "tensorcore":
            self._compute(spec, q, k, v, mask, out=out)
            return
        variant = kernel_variant(spec)
        chunks = kernels.attention_chunks(spec, variant.defines, self.info.compute_units)
        if chunks == 1:
            self.run_variant(spec, variant, self.kernel_args(spec, out, q, k, v, mask, sinks))
            return
        # flash-decoding: each key chunk's records in scratch, then merged into out
        splits = self.scratch(kernels.attention_splits_bytes(spec, chunks))
        self.run_variant(spec, variant,
                         self.kernel_args(spec, out, q, k, v, mask, sinks, splits=splits),
                         chunks=chunks)
        self.run_variant(spec, variant, [splits, out, self._optional(sinks),
                                         *kernels.attention_combine_args(spec, chunks)],
                         "attention_combine", chunks)

    def quantize(self, spec, out, x) -> None:
        self._compute(spec, x, out=out)

    def dequantize(self, spec, out, q) -> None:
        self._compute(spec, q, out=out)

    def qmatmul(self, spec, out, x, w) -> None:

        if spec.fmt.name in kernels.KQUANT_FORMATS:
            self._kquant_matmul(spec, out, x, w)
            return
        if spec.x_fmt is not None:
            self.run_x8(spec, kernel_variant(spec), out, x, w)
            return
        name = None
        if kernels.gemv_applies(spec, kernels.GPU_GEMV):  # which GEMV: by K and the addresses
            name = kernels.gemv_kernel(spec.fmt.name, spec.K, kernels.GPU_GEMV, x_addr=x.buf.data.ptr,
                                       w_addr=w.buf.data.ptr, local_mem=STATIC_SHARED_MAX)
        self._compute(spec, x, w, out=out, name=name)

    def scaled_matmul(self, spec, out, a, b, scale_a, scale_b, bias) -> None:
        self._compute(spec, a, b, scale_a, scale_b, bias, out=out)

    def run_x8(self, spec, variant, out: Any, x: Any, w: Any) -> None:
        """A quantized matmul with ``x_fmt`` through shipped ``variant``: ``quantize_x8`` writes
        x's X8 words into :meth:`scratch`, then the variant's X8 kernel (launch_plan's choice)
        multiplies them with ``w``. The op runs it with its own variant; the speed-goal script
        with the parameter sets it times."""

        nbytes, count = kernels.x8_words(spec)
        words = self.scratch(nbytes)
        self.run_variant(spec, variant, [x, words, *count], "quantize_x8")
        self.run_variant(spec, variant, self.kernel_args(spec, out, words, w))

    def _kquant_matmul(self, spec, out: Any, x: Any, w: Any) -> None:
        """A K-quant / mxfp4 quantized matmul: with float x, kquant.cl's qmatmul_k; with an
        ``x_fmt``, x quantized to it first (q8_k by kquant.cl, mxfp4's q8_0 by quant.cl: the
        quantize op's own kernels) into :meth:`scratch`, then qmatmul_kx."""
        variant = kernel_variant(spec)
        if spec.x_fmt is None:
            self.run_variant(spec, variant, self.kernel_args(spec, out, x, w))
            return
        xspec = quantize_spec((spec.M, spec.K), spec.dtype, spec.x_fmt)
        xq = self.scratch(spec.M * spec.K // spec.x_fmt.block * spec.x_fmt.block_bytes)
        self.run_variant(xspec, kernel_variant(xspec), self.kernel_args(xspec, xq, x))
        self.run_variant(spec, variant, self.kernel_args(spec, out, xq, w))

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
            out["tensorcore"] = "; ".join(filter(None, (tensorcore_reason(self.arch, op)
                                                        for op in TENSORCORE_KERNEL))) or "available"
        return out

    def __repr__(self) -> str:
        return f"<accel backend {self.device_id}: {self.info.name} ({self.arch}, impl={self.impl})>"


__all__ = ["CuPyBackend", "format_version", "unavailable_reason", "vendor_matmul", "bf16_bits_to_f32",
           "f32_to_bf16_bits"]
