"""OpenCL device discovery: every device of every platform, in one documented order, with the
capabilities accel's kernels depend on read from the device itself.

Order (``opencl:N`` is the N-th): GPUs, then accelerators, then CPUs; within a kind, the newest
driver version first (so Debian's PoCL 3.1, which targets AVX-512, comes before PyPI's 3.0);
then platform name, platform version and device name; last, the order the ICD loader reported
them in. The order depends only on what is installed, never on chance.

A device whose compiler cannot build a one-line kernel is left out of that order, with the
reason kept for ``accel info``: PyPI's PoCL 3.0 (LLVM 14) fails every build on CPUs its LLVM does
not know, such as AMD's Zen 5 ("unknown target CPU 'generic'"), where Debian's PoCL 3.1 works.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import pyopencl as cl
from pyopencl.characterize import has_src_build_cache

from accel.backend import DeviceInfo
from accel.errors import BackendUnavailable
from accel.registry import ForkGuard

from accel.backends.opencl.compiler_caches import place_runtime_caches, pyopencl_cache_dir

#: OpenCL in a child forked after it started here blocks forever (PoCL's threads are gone)
FORK_GUARD = ForkGuard("OpenCL")

_KIND_RANK = {"gpu": 0, "accelerator": 1, "cpu": 2}


@dataclass(frozen=True)
class CLDevice:
    """One OpenCL device and what accel reads from it."""

    device: cl.Device
    platform_name: str
    platform_version: str
    name: str
    driver_version: str
    kind: str  # "gpu", "accelerator", "cpu" or "other"
    compute_units: int
    global_mem: int
    max_alloc: int
    local_mem: int
    max_work_group: int
    mem_align_bytes: int
    fp16: bool
    fp64: bool
    correctly_rounded_divide: bool
    denormals: bool
    cache_bytes: int = 0  # CL_DEVICE_GLOBAL_MEM_CACHE_SIZE: the cache global memory goes through

    @property
    def cache_key(self) -> str:
        """Identity of the compiler that builds for this device: a driver upgrade changes it."""
        return "|".join((self.platform_name, self.platform_version, self.name, self.driver_version,
                         cl.VERSION_TEXT))

    @property
    def driver(self) -> str:
        """E.g. "OpenCL 3.0 PoCL 3.1+debian": the platform string up to its build details."""
        return " ".join(self.platform_version.split()[:4])

    @property
    def driver_caches_builds(self) -> bool:
        """Whether the driver keeps builds from source on disk itself (pyopencl's judgement:
        PoCL, NVIDIA), so that a second process's build of the same program is a cache hit.
        PoCL's cache is off under POCL_KERNEL_CACHE=0."""
        if self.platform_name == "Portable Computing Language":
            return os.environ.get("POCL_KERNEL_CACHE", "1") != "0"
        return bool(has_src_build_cache(self.device))

    def info(self) -> DeviceInfo:
        return DeviceInfo(self.name, self.platform_name, self.driver,
                          self.global_mem, self.compute_units,
                          {"kind": self.kind, "platform_version": self.platform_version,
                           "fp16": self.fp16, "fp64": self.fp64, "local_mem_bytes": self.local_mem,
                           "max_work_group_size": self.max_work_group,
                           "correctly_rounded_divide": self.correctly_rounded_divide,
                           "denormals": self.denormals,
                           "mem_base_addr_align_bytes": self.mem_align_bytes,
                           "cache_bytes": self.cache_bytes},
                          max_buffer_bytes=self.max_alloc)


def _version(text: str) -> tuple[int, ...]:
    m = re.match(r"\D*(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


def _kind(dev: cl.Device) -> str:
    t = dev.type
    for kind, flag in (("gpu", cl.device_type.GPU), ("accelerator", cl.device_type.ACCELERATOR),
                       ("cpu", cl.device_type.CPU)):
        if t & flag:
            return kind
    return "other"


def _describe(platform: cl.Platform, dev: cl.Device) -> CLDevice:
    ext = dev.extensions.split()
    fp = dev.single_fp_config
    return CLDevice(
        device=dev, platform_name=platform.name.strip(), platform_version=platform.version.strip(),
        name=dev.name.strip(), driver_version=dev.driver_version.strip(), kind=_kind(dev),
        compute_units=dev.max_compute_units, global_mem=dev.global_mem_size,
        cache_bytes=dev.global_mem_cache_size,
        max_alloc=dev.max_mem_alloc_size, local_mem=dev.local_mem_size,
        max_work_group=dev.max_work_group_size, mem_align_bytes=max(1, dev.mem_base_addr_align // 8),
        fp16="cl_khr_fp16" in ext, fp64="cl_khr_fp64" in ext,
        correctly_rounded_divide=bool(fp & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT),
        denormals=bool(fp & cl.device_fp_config.DENORM))


def sort_key(d: CLDevice, found_at: int) -> tuple:
    """The documented order (module docstring)."""
    newest_first = tuple(-p for p in _version(d.driver_version))
    return (_KIND_RANK.get(d.kind, 3), newest_first, d.platform_name, d.platform_version, d.name,
            found_at)


_PROBE = "__kernel void accel_probe(__global int* out) { out[0] = 1; }"


def build_failure(d: CLDevice, source: str = _PROBE) -> str | None:
    """Why this device cannot build ``source`` (by default a one-line kernel), or None."""
    try:
        cl.Program(cl.Context([d.device]), source).build(cache_dir=pyopencl_cache_dir())
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines()]
        detail = next((ln for ln in lines if "error" in ln.lower() and "clBuildProgram" not in ln),
                      lines[0] if lines else type(e).__name__)
        what = "a one-line kernel" if source == _PROBE else "the source"
        return f"{d.name} ({d.driver}): its compiler cannot build {what}: {detail}"
    return None


@functools.cache
def _survey() -> tuple[tuple[CLDevice, ...], tuple[str, ...]]:
    """(usable devices in the documented order, why each other device was left out)."""
    place_runtime_caches()  # before PoCL and pyopencl first look for them
    FORK_GUARD.started()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise BackendUnavailable(f"no OpenCL platform found ({e}); install an ICD, e.g. "
                                 "pip install pocl-binary-distribution") from None
    found: list[CLDevice] = []
    for p in platforms:
        try:
            found += [_describe(p, d) for d in p.get_devices()]
        except cl.Error:  # a platform without devices reports DEVICE_NOT_FOUND
            continue
    if not found:
        raise BackendUnavailable("OpenCL platforms found but no device on any of them: "
                                 f"{[p.name for p in platforms]}")
    order = sorted(range(len(found)), key=lambda i: sort_key(found[i], i))
    failures = {i: build_failure(found[i]) for i in order}
    usable = tuple(found[i] for i in order if failures[i] is None)
    return usable, tuple(f for f in failures.values() if f is not None)


def enumerate_devices() -> tuple[CLDevice, ...]:
    """The usable OpenCL devices in the documented order; raises BackendUnavailable when there is
    none, saying why."""
    usable, skipped = _survey()
    if not usable:
        raise BackendUnavailable("no OpenCL device can build kernels: " + "; ".join(skipped)
                                 + " (on a CPU newer than PyPI's PoCL knows: apt-get install "
                                 "pocl-opencl-icd)")
    return usable


def skipped_devices() -> tuple[str, ...]:
    """Each device found but left out, with why (empty when every device builds kernels)."""
    try:
        return _survey()[1]
    except BackendUnavailable:
        return ()
