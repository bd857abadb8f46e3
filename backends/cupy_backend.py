"""The one implementation behind the ``cuda`` and ``hip`` backends, on CuPy.

CuPy's Python API is the same on CUDA and ROCm; what differs is made explicit by the two thin
subclasses (backends/cuda.py, backends/hip.py): the platform CuPy must be built for, the arch the
kernels are compiled for (``sm_XY`` / ``gfx...``, read from the device), the warp width passed to
every kernel as ``ACCEL_WARP`` (32, or 64 on CDNA wavefronts, read from the device), the vendor
BLAS name and how versions are spelled.

Kernels are built by ``accel.toolchains`` (NVRTC / hiprtc, the same code path ``accel kernels
check`` proves in CI without a GPU), cached on disk, and loaded with ``cupy.RawModule(path=...)``.

Two implementations, chosen per backend instance by ``backend.impl`` (default from the
environment variable ``ACCEL_CUDA_IMPL`` / ``ACCEL_HIP_IMPL``):

- ``"kernels"``: the shared-dialect kernels from ``accel.kernels`` for every op;
- ``"vendor"``: matmul through the vendor BLAS (cuBLAS / hipBLAS via ``cupy.matmul``), every
  other op still through the shared kernels.
"""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from accel import toolchains
from accel.backend import YES, Backend, DeviceInfo, Support
from accel.dtypes import to_numpy_dtype
from accel.errors import (ArgumentError, BackendUnavailable, CompileError, DeviceError,
                          UnsupportedError, expected)

IMPLS = ("kernels", "vendor")

#: accel dtype -> the dtype token of the portability header's *_DT defines (kernels/accel.h)
DT_TOKEN = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int8": "I8", "int32": "I32",
            "uint8": "U8"}

#: CUDA's limit on gridDim.y and gridDim.z (x allows 2**31 - 1); HIP has the same limits
_GRID_YZ_MAX = 65535

#: GPU tiling of kernels/matmul.cl: WG_M x WG_N threads, each owning TM x TN outputs, TK-deep tiles
#: staged through shared memory (64 x 64 outputs per block)
MATMUL_TILE = {"LOCAL_TILE": 1, "WG_M": 16, "WG_N": 16, "TM": 4, "TN": 4, "TK": 16}

#: |int8 * int8| <= 2**14, so 1024-term partial sums are exact in float32 (24-bit significand)
_INT8_CHUNK = 1024


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


def exact_int8_matmul(xp, a, b):
    """int8 GEMM exactly in int32 through float32 BLAS on K-chunks whose partial sums are exact
    integers, added in float64 (exact below 2**53; the spec bounds K so the sum fits int32)."""
    K = a.shape[-1]
    acc = None
    for k0 in range(0, K, _INT8_CHUNK):
        part = xp.matmul(a[..., k0:k0 + _INT8_CHUNK].astype(xp.float32),
                         b[..., k0:k0 + _INT8_CHUNK, :].astype(xp.float32)).astype(xp.float64)
        acc = part if acc is None else acc + part
    return acc.astype(xp.int32)


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
class CuPyBackend(Backend):
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
            return (), (f"CuPy is not installed ({e.name or e}): pip install "
                        f"'accel-portable[{'rocm' if cls.platform == 'hip' else 'cuda12'}]'")
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
                 "runtime": format_version(cls.platform, facts["runtime_version"]),
                 "cupy": facts["cupy_version"]}
        return DeviceInfo(name, cls.vendor,
                          f"{cls.platform.upper()} driver {format_version(cls.platform, facts['driver_version'])}",
                          int(props["totalGlobalMem"]), int(props["multiProcessorCount"]), extra)

    @classmethod
    def arch_of(cls, props: dict) -> str:
        """The compile target of a device from its properties (``sm_XY`` or ``gfx...``)."""
        raise NotImplementedError

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.cupy = _cupy()
        self.device = self.cupy.cuda.Device(index)
        self.arch: str = self.info.extra["arch"]
        self.warp_size: int = self.info.extra["warp_size"]
        self._impl = "kernels"
        self.impl = os.environ.get(f"ACCEL_{self.platform.upper()}_IMPL", "kernels")
        self._modules: dict[tuple, Any] = {}

    # -- implementation choice ---------------------------------------------------------------
    @property
    def impl(self) -> str:
        """"kernels" (shared-dialect kernels for every op) or "vendor" (vendor BLAS for matmul)."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        if value not in IMPLS:
            raise ArgumentError(expected("impl", f"one of {IMPLS}", repr(value)))
        self._impl = value
        self.__dict__.pop("_support_cache", None)  # accel.ops caches verdicts, which depend on impl

    # -- memory: a buffer is a 1-d uint8 cupy array ---------------------------------------------
    def alloc(self, nbytes: int) -> Any:
        with self.device:
            return self.cupy.empty(nbytes, self.cupy.uint8)

    def upload(self, host: np.ndarray) -> Any:
        with self.device:
            return self.cupy.asarray(np.ascontiguousarray(host).reshape(-1).view(np.uint8))

    def download(self, buf: Any, nbytes: int) -> np.ndarray:
        with self.device:
            return self.cupy.asnumpy(buf[:nbytes])

    def view(self, buf: Any, offset: int, nbytes: int) -> Any:
        return buf[offset: offset + nbytes]

    def synchronize(self) -> None:
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
        """A cupy array viewing ``tensor`` (bfloat16 as ml_dtypes.bfloat16)."""
        return tensor.buf[: tensor.nbytes].view(to_numpy_dtype(tensor.dtype)).reshape(tensor.shape)

    def _array(self, t) -> Any:
        """A typed cupy view of a tensor's buffer (bfloat16 as its uint16 bits)."""
        return t.buf[: t.nbytes].view(_storage_dtype(t.dtype)).reshape(t.shape)

    # -- kernels ------------------------------------------------------------------------------------
    def compile(self, source: str, name: str, *, options: tuple[str, ...] = (),
                dialect: str = "accel") -> Any:
        """Build ``name`` for this device's arch (cached in memory, and on disk by
        accel.toolchains); CompileError carries the compiler log."""
        if dialect not in ("accel", "cuda"):
            raise UnsupportedError(self.device_id, "kernel", "-",
                                   f"the {self.name} backend compiles the accel and cuda dialects, "
                                   f"not {dialect!r}")
        key = (source, name, tuple(options), dialect)
        if key in self._modules:
            return self._modules[key]
        include_dirs: tuple[str, ...] = ()
        if dialect == "accel":
            from accel import kernels

            include_dirs = (str(Path(kernels.__file__).parent),)
            if "accel.h" not in source:  # shipped kernel files rely on the header being supplied
                source = f'#include "accel.h"\n#line 1 "{name}"\n{source}'
        result = toolchains.compile_source(source, self.arch, options=tuple(options),
                                           defines={"ACCEL_WARP": self.warp_size},
                                           include_dirs=include_dirs, filename=f"{name}.cu")
        if not result.ok:
            raise CompileError(name, self.arch, result.log)
        try:
            with self.device:
                fn = self.cupy.RawModule(path=str(result.path)).get_function(name)
        except Exception as e:  # no such kernel in the module, or the driver rejects the binary
            raise CompileError(name, self.arch, f"loading the {self.arch} binary failed: "
                                                f"{type(e).__name__}: {e}") from e
        self._modules[key] = fn
        return fn

    def launch(self, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: list, shared_mem: int = 0) -> None:
        """Enqueue with CUDA semantics; accel.Tensor arguments pass their device buffer."""
        from accel.tensor import Tensor

        raw = tuple(a.buf if isinstance(a, Tensor) else a for a in args)
        try:
            with self.device:
                kernel(tuple(grid), tuple(block), raw, shared_mem=int(shared_mem))
        except Exception as e:  # invalid configuration, out of resources: a device error
            raise DeviceError(f"launching {getattr(kernel, 'kernel', kernel)!r} with grid {grid}, "
                              f"block {block}, shared_mem {shared_mem} on {self.device_id} failed: "
                              f"{type(e).__name__}: {e}") from e

    def _shipped(self, file: str, kernel: str, defines: dict[str, object]) -> Any:
        """A kernel from the shipped shared-dialect source ``file`` with ``defines``."""
        from accel import kernels

        source = (Path(kernels.__file__).parent / file).read_text()
        options = tuple(f"-D{k}={v}" for k, v in defines.items())
        return self.compile(source, kernel, options=options, dialect="accel")

    # -- ops ------------------------------------------------------------------------------------
    def supports(self, spec) -> Support:
        if spec.op != "matmul":
            return Support(False, f"the shared-dialect {spec.op} kernel is not wired into the "
                                  f"{self.name} backend yet")
        if self.impl == "vendor":
            return YES
        blocks_m = -(-spec.M // (MATMUL_TILE["WG_M"] * MATMUL_TILE["TM"]))
        if blocks_m > _GRID_YZ_MAX or spec.batch > _GRID_YZ_MAX:
            return Support(False, f"M = {spec.M} and batch = {spec.batch} need more than "
                                  f"{_GRID_YZ_MAX} blocks in grid y/z")
        return YES

    def accumulator(self, spec) -> str:
        if spec.in_dtypes[0] == "int8":
            return "int32"
        # CuPy runs float32 GEMMs on tf32 tensor cores only when CUPY_TF32=1 asks for it
        if spec.op == "matmul" and self.impl == "vendor" and os.environ.get("CUPY_TF32") == "1":
            return "tf32"
        return "float32"

    def matmul(self, spec, out, a, b) -> None:
        if self.impl == "vendor":
            with self.device:
                self._array(out)[...] = vendor_matmul(self.cupy, self._array(a), self._array(b),
                                                      spec.dtype, spec.out_dtype)
            return
        t = MATMUL_TILE
        fn = self._shipped("matmul.cl", "matmul", {
            "IN_DT": DT_TOKEN[spec.dtype], "OUT_DT": DT_TOKEN[spec.out_dtype],
            "ACC_INT": int(spec.dtype == "int8"), **t})
        ia, ib = spec.batch_offsets()
        with self.device:
            boff = self.cupy.asarray(np.stack([ia, ib], axis=1).astype(np.int32).reshape(-1))
        grid = (-(-spec.N // (t["WG_N"] * t["TN"])), -(-spec.M // (t["WG_M"] * t["TM"])), spec.batch)
        self.launch(fn, grid, (t["WG_N"], t["WG_M"], 1),
                    [a, b, out, boff, np.int32(spec.M), np.int32(spec.N), np.int32(spec.K)])

    # -- timing and versions ----------------------------------------------------------------------
    def time(self, fn) -> float:
        """Seconds between two device events around the work ``fn`` enqueues."""
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
        return out

    def __repr__(self) -> str:
        return f"<accel backend {self.device_id}: {self.info.name} ({self.arch}, impl={self.impl})>"


__all__ = ["CuPyBackend", "IMPLS", "DT_TOKEN", "MATMUL_TILE", "format_version",
           "unavailable_reason", "vendor_matmul", "exact_int8_matmul", "bf16_bits_to_f32",
           "f32_to_bf16_bits"]
