"""Device peaks measured by micro-benchmarks, cached on disk per device: the roofline's roof.

Bandwidth is a streaming copy (bytes read + bytes written, the STREAM convention); compute is a
float32 FMA-bound kernel (several independent FMA chains per work-item). On OpenCL, CUDA and HIP
both kernels go through the backend's own ``compile``/``launch``, so they measure what that
runtime can reach; on the CPU reference backend the copy is numpy's and the compute kernel is a
float32 BLAS GEMM, the FMA-bound code numpy users actually have.

>>> import accel
>>> from accel.conformance.bench.peaks import peaks
>>> p = peaks(accel.get_backend("cpu"))
>>> p.gflops > 0 and p.gbs > 0
True
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from accel.backend import Backend
from accel.errors import UnsupportedError
from accel.host import atomic_write, cache_root
from accel.conformance.bench.timing import Budget, host_timer, measure

#: a weight-streaming case rotates among copies of its weight until they span this many times the
#: device's last-level cache, so each call reads its weight from memory, not from cache
CACHE_MULTIPLE = 4
#: the share of the memory available when a run starts that each contender's weight copies (and
#: each buffer of the copy benchmark) may take: accel's host and device copies and every
#: baseline's own (ggml copies the bytes into its context, torch dequantizes them) live at once
MEMORY_SHARE = 1 / 8
#: bump when a micro-benchmark changes, so cached peaks from the old one are not reused
METHOD_VERSION = 2
#: the least bytes per buffer of the copy benchmark (v2 copies more where two buffers of this size
#: would not span CACHE_MULTIPLE x the last-level cache: on a VM whose sysfs lists a 480 MiB L3,
#: 128 MiB buffers once copied at 39 GB/s, and at 20-24 GB/s an hour later, as 1 GiB ones did)
_COPY_BYTES = 128 << 20
_ITERS = 1024


@dataclass(frozen=True)
class Peaks:
    """Measured peaks of one device: float32 GFLOP/s and GB/s (best sample of each)."""

    gflops: float
    gbs: float
    method: str = ""
    measured: str = ""


def device_key(backend: Backend) -> str:
    """A file-name-safe key naming the device, its driver and the benchmark method."""
    info = backend.info
    ident = f"{backend.name}|{info.name}|{info.vendor}|{info.driver}|v{METHOD_VERSION}"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{backend.name}-{info.name}")[:60].strip("-")
    return f"{slug}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def peaks(backend: Backend, *, refresh: bool = False, update: bool = False) -> Peaks | None:
    """The device's peaks: measured once, then read from the cache.

    ``update`` measures again and keeps, per figure, the higher of the cached and the new value:
    on a shared machine a low reading means a neighbour was busy, not that the device got slower,
    so the cache converges on the real roof over runs (a result above 100% of a roof measured
    under load would otherwise stay there). ``refresh`` discards the cache and re-measures.
    None when the backend can run neither micro-benchmark (e.g. a plugin without ``compile``).
    """
    path = cache_root() / "peaks" / f"{device_key(backend)}.json"
    cached = None if refresh else _read(path)
    if cached is not None and not update:
        return cached
    try:
        measured = measure_peaks(backend)
    except UnsupportedError:
        return None
    if cached is not None:
        measured = _best_of(cached, measured)
    _write(path, measured)
    return measured


def _best_of(cached: Peaks, new: Peaks) -> Peaks:
    """Per figure the higher of the cached and the new peak, dated when each was measured.

    >>> mixed = _best_of(Peaks(10.0, 5.0, "m", "mon"), Peaks(12.0, 4.0, "m", "tue"))
    >>> mixed.measured, _best_of(mixed, Peaks(13.0, 3.0, "m", "wed")).measured
    ('GFLOP/s tue, GB/s mon', 'GFLOP/s wed, GB/s mon')
    """
    gflops = max(cached, new, key=lambda p: p.gflops)
    gbs = max(cached, new, key=lambda p: p.gbs)
    when_gflops, when_gbs = _dated(gflops)[0], _dated(gbs)[1]
    when = when_gflops if when_gflops == when_gbs else f"GFLOP/s {when_gflops}, GB/s {when_gbs}"
    return Peaks(gflops.gflops, gbs.gbs, new.method, when)


def _dated(p: Peaks) -> tuple[str, str]:
    """When each figure of ``p`` was measured: one date, or the two _best_of wrote."""
    found = re.fullmatch(r"GFLOP/s (.*), GB/s (.*)", p.measured)
    return (found.group(1), found.group(2)) if found else (p.measured, p.measured)


def _read(path: Path) -> Peaks | None:
    """A cached value, or None when missing or unreadable (a damaged file is re-measured)."""
    try:
        data = json.loads(path.read_text())
        p = Peaks(float(data["gflops"]), float(data["gbs"]), str(data["method"]), str(data["measured"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return p if p.gflops > 0 and p.gbs > 0 else None


def _write(path: Path, value: Peaks) -> None:
    try:
        atomic_write(path, json.dumps(asdict(value), indent=1).encode())
    except OSError:  # an unwritable cache only costs re-measuring next time
        pass


def last_level_cache(backend: Backend) -> int | None:
    """Bytes of the last-level cache the backend's kernels read through: the largest CPU cache
    the OS lists (/sys/devices/system/cpu/cpu0/cache) for CPU hardware, at least what the device
    reports itself (``info.extra["cache_bytes"]``: OpenCL's global memory cache, a GPU's L2).
    None when neither is known.

    >>> import accel
    >>> last_level_cache(accel.get_backend("cpu")) is None or last_level_cache(accel.get_backend("cpu")) > 0
    True
    """
    from accel.conformance.bench.baselines import hardware_of

    sizes = [int(backend.info.extra.get("cache_bytes") or 0)]
    if hardware_of(backend) == "cpu":
        sizes += _os_cache_sizes()
    return max(sizes) or None


def available_memory() -> int:
    """Bytes of memory the OS can give this process now without swapping: MemAvailable from
    /proc/meminfo (free pages plus reclaimable cache), else the free pages sysconf counts.

    >>> available_memory() > 0
    True
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _os_cache_sizes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[int]:
    """Every cache size cpu0's sysfs entries list ("32768K"), in bytes; none off Linux."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for f in root.glob("index*/size"):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", text)
        if m:
            out.append(int(m.group(1)) * units.get(m.group(2), 1))
    return out


def measure_peaks(backend: Backend) -> Peaks:
    """Run both micro-benchmarks now (no cache)."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if backend.name == "cpu":
        gflops, gbs = _numpy_peaks(_copy_bytes(backend))
        return Peaks(gflops, gbs, "numpy copy + float32 BLAS GEMM", now)
    gflops, gbs = _kernel_peaks(backend)
    return Peaks(gflops, gbs, f"{backend.name} copy kernel + float32 FMA kernel", now)


def _best(timer, fn, work: float) -> float:
    """Best achieved rate (work per second): the fastest sample of half a second of samples, so
    a neighbour briefly taking a core on a shared machine does not lower the roof."""
    budget = Budget(time_s=0.5, work=0, min_reps=5, max_reps=500, max_time_s=2.0)
    return work / measure(timer, fn, budget=budget, work=work).min


def _numpy_peaks(copy_bytes: int) -> tuple[float, float]:
    src = np.ones(copy_bytes // 4, np.float32)
    dst = np.empty_like(src)
    gbs = _best(host_timer, lambda: np.copyto(dst, src), 2 * src.nbytes) / 1e9
    n = 2048
    a = np.ones((n, n), np.float32)
    gflops = _best(host_timer, lambda: a @ a, 2 * n ** 3) / 1e9
    return gflops, gbs


#: the device micro-benchmarks, in the accel dialect (kernels/accel.h): one source for every
#: backend that compiles kernels, and FMA is the header's, as accel's own kernels use it
_COPY = """
KERNEL void accel_peak_copy(GLOBAL const f32x4* src, GLOBAL f32x4* dst, int n) {
    int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (i < n) dst[i] = src[i];
}"""

#: FMA kernel variants (vector type, independent chains) tried per backend; the peak is the best.
#: A CPU OpenCL device (PoCL) only fills its SIMD lanes with explicit vectors; GPUs are scalar.
_FMA_VARIANTS = {"opencl": (("float", 8), ("float8", 12), ("float16", 8)),
                 "cuda": (("float", 8), ("float", 16)), "hip": (("float", 8), ("float", 16))}


def _fma_source(vec: str, chains: int) -> str:
    """An FMA-bound kernel: ``chains`` independent chains a = FMA(a, m, c) per work-item. Chains
    start from the work-item index so the compiler cannot fold the loop away, and converge
    (m < 1) so no value overflows or turns subnormal; the sum is stored so none is dead."""
    init = " ".join(f"{vec} a{j} = ({vec})((float)i * 1e-7f + {j}.0f);" for j in range(chains))
    step = " ".join(f"a{j} = FMA(a{j}, m, c);" for j in range(chains))
    total = " + ".join(f"a{j}" for j in range(chains))
    return (f"KERNEL void accel_peak_fma(GLOBAL {vec}* out, float ms, float cs, int iters) {{\n"
            f"    int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0); {vec} m = ({vec})(ms), c = ({vec})(cs);\n"
            f"    {init}\n    for (int t = 0; t < iters; ++t) {{ {step} }}\n"
            f"    out[i] = {total};\n}}\n")


def _copy_gbs(backend: Backend, block: int) -> float:
    """GB/s of a device copy of _copy_bytes, read and write counted (its buffers are freed on
    return, before the FMA kernels run)."""
    from accel.kernels import ceil_div
    from accel.tensor import Tensor

    n4 = _copy_bytes(backend) // 16
    copy = backend.compile(_COPY, "accel_peak_copy")
    src = Tensor.empty(backend, (n4 * 4,), "float32")
    dst = Tensor.empty(backend, (n4 * 4,), "float32")
    grid = (ceil_div(n4, block), 1, 1)
    return _best(backend.time, lambda: backend.launch(copy, grid, (block, 1, 1), [src, dst, np.int32(n4)]),
                 2 * 16 * n4) / 1e9


def _copy_bytes(backend: Backend) -> int:
    """Bytes per buffer of the device copy: together the two span CACHE_MULTIPLE x the last-level
    cache, as the weight-streaming benchmarks' rotation does; at least _COPY_BYTES, at most
    MEMORY_SHARE of the available memory."""
    want = CACHE_MULTIPLE * (last_level_cache(backend) or 0) // 2
    room = int(available_memory() * MEMORY_SHARE)
    return max(_COPY_BYTES, min(want, room)) // 4096 * 4096


def _kernel_peaks(backend: Backend) -> tuple[float, float]:
    from accel.tensor import Tensor

    variants = _FMA_VARIANTS.get(backend.name)
    if variants is None:
        raise UnsupportedError(backend.name, "peaks", "float32", "no micro-benchmark for this backend")
    block = 128
    gbs = _copy_gbs(backend, block)
    gflops = 0.0
    for vec, chains in variants:
        lanes = int(vec[5:] or 1)
        fma = backend.compile(_fma_source(vec, chains), "accel_peak_fma")
        # about 2048 work-items' worth of scalar lanes per compute unit keeps every unit busy
        blocks = max(1, max(1, backend.info.compute_units) * 2048 // (block * max(1, lanes // 4)))
        out = Tensor.empty(backend, (blocks * block * lanes,), "float32")
        args = [out, np.float32(0.999), np.float32(1e-3), np.int32(_ITERS)]
        work = 2 * chains * lanes * _ITERS * blocks * block
        gflops = max(gflops, _best(backend.time, lambda: backend.launch(fma, (blocks, 1, 1), (block, 1, 1),
                                                                       args), work) / 1e9)
    return gflops, gbs
