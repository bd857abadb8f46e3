"""Kernel tile parameters per device: documented defaults by device kind, overridden by what
``accel tune`` measured and stored for this exact device (docs/opencl.md).
"""
from __future__ import annotations

import itertools
import json
import os

import accel.kernels as K
from accel.errors import ArgumentError, expected

from accel.host import atomic_write, locked, read_regular

from accel.backends.opencl.cache import device_dir
from accel.backends.plan import DEFAULT_TILES
from accel.backends.opencl.devices import CLDevice

#: the default tile parameters for each device kind (the planner's)
DEFAULTS = DEFAULT_TILES
#: the ops ``accel tune`` searches (the FP8 scaled matmul has its defaults only, so far)
TUNABLE = ("matmul", "attention", "qmatmul", "gemv", "kgemv")


def store_path(dev: CLDevice):
    """The file ``accel tune`` stores this device's parameters in."""
    return device_dir(dev, "tune") / "params.json"


def tuned(dev: CLDevice) -> dict[str, dict]:
    """What ``accel tune`` stored for this device ({} when nothing, or when unreadable: not a
    regular file, not JSON, or JSON nested past the parser's recursion limit)."""
    blob = read_regular(store_path(dev))
    try:
        data = json.loads(blob) if blob is not None else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):  # valid JSON but not what tune writes: as unreadable
        return {}
    return {op: p for op, p in data.items() if op in TUNABLE and isinstance(p, dict)}


def safe_lanes(dev: CLDevice) -> int:
    """Widest float vector a CPU device's compiler handles: 16 lanes only where PoCL names an
    AVX-512 target (its device name or platform string says "avx512"). PyPI's PoCL 3.0 named
    znver3 (AVX2) and aborted the whole process in LLVM codegen on 16-lane fma() (not re-checked
    with the builtins it now gets), so it gets 8."""
    if dev.kind != "cpu":
        return 1
    return 16 if "avx512" in (dev.name + dev.platform_version).lower() else 8


def clang_builtins(dev: CLDevice) -> bool:
    """Whether to build the device's kernels with ``ACCEL_CLANG_BUILTINS``: for compilers that
    leave OpenCL library functions as calls, as PyPI's PoCL 3.0 does with every fma or fmax
    (docs/kernels.md, "Why no library calls"). ``ACCEL_OPENCL_BUILTINS=1`` (or 0) forces the
    choice, e.g. to run PoCL 3.0's spelling on Debian's PoCL; a compiler without clang 14's
    builtins then fails to build."""
    forced = os.environ.get("ACCEL_OPENCL_BUILTINS", "").strip()
    if forced not in ("", "0", "1"):
        raise ArgumentError(expected("ACCEL_OPENCL_BUILTINS", "0, 1 or unset", repr(forced)))
    if forced:
        return forced == "1"
    return "PoCL 3.0" in dev.platform_version


def build_options(dev: CLDevice) -> tuple[str, ...]:
    """The options every program on this device is built with: no warnings in the log, bit-exact
    division where the device offers it (kernels/accel.h, FDIV_RN) and the math spelling above."""
    # -w: PoCL notes ABI changes of wide vectors in the build log, and pyopencl turns a non-empty
    # log into a CompilerWarning; silencing them at the compiler keeps the process's warning
    # filters untouched (warnings.catch_warnings() swaps them for every thread at once)
    options = ["-w"]
    if dev.correctly_rounded_divide:
        options.append("-cl-fp32-correctly-rounded-divide-sqrt")
    if clang_builtins(dev):
        options.append("-DACCEL_CLANG_BUILTINS=1")
    return tuple(options)


#: the CPU GEMVs' software prefetches tune tries (kernels.PREFETCH_NEXT): the next work-item's
#: rows or none; kgemv also 2 KB along each row (which only qgemv_kx's one-row walks took)
_GEMV_PREFETCHES = (K.PREFETCH_NEXT, dict(PF=0, PFN=0))
_KGEMV_PREFETCHES = (*_GEMV_PREFETCHES, dict(PF=2048, PFN=0))


def candidates(op: str, kind: str, lanes: int) -> list[dict]:
    """The parameter sets searched for ``op`` on a device of ``kind`` (cpu or gpu)."""
    if kind == "cpu":
        if op == "matmul":
            return [dict(LOCAL_TILE=0, TM=tm, TN=tn, VW=lanes)
                    for tm, tn in itertools.product((4, 8, 12, 14), (lanes, 2 * lanes, 4 * lanes))]
        if op == "attention":
            return [dict(LOCAL_TILE=0, BQ=bq, BKV=bkv, VW=lanes)
                    for bq, bkv in itertools.product((lanes, 2 * lanes, 4 * lanes), (16, 32, 64))]
        if op == "qmatmul":
            return [{**K.CPU_QMATMUL, "RM": rm, "RN": rn, "VW": lanes}  # X8RN: the default
                    for rm, rn in itertools.product((2, 4, 8), (2, 4, 8))]
        if op == "kgemv":  # qgemv_k's and qgemv_kx's rows at M = 1; RM stays the default, which
            # only M > 1 uses (tuned at M = 1 it would be chosen by noise, and M = 8 took 26 ms at
            # RM = 1 against 6.9 at RM = 8: docs of plan._kgemv_tile)
            base = {**K.CPU_KGEMV, **(K.CPU_WIDE["kgemv"] if lanes >= 16 else {})}
            return [{**base, "RN": rn, "XRN": xrn, **prefetch, "VW": lanes}
                    for rn, xrn, prefetch in itertools.product((1, 2, 4, 8), (1, 2, 4), _KGEMV_PREFETCHES)]
        return [{**K.CPU_GEMV, "RN": rn, **prefetch, "VW": lanes}
                for rn, prefetch in itertools.product((1, 2, 4, 8, 16), _GEMV_PREFETCHES)]
    if op == "matmul":
        return [dict(LOCAL_TILE=1, WG_M=wg, WG_N=wg, TM=t, TN=t, TK=tk, VW=1)
                for wg, t, tk in itertools.product((8, 16), (2, 4, 8), (8, 16))]
    if op == "attention":
        return [{**K.GPU_ATTENTION, "BKV": bkv, "TEAM": team, "QSPLIT": qsplit}
                for bkv, team, qsplit in itertools.product((16, 32), (64, 128), (2, 4))]
    if op == "kgemv":
        return [{**K.GPU_KGEMV, "KWG": kwg, "RN": rn} for kwg, rn in itertools.product((16, 32, 64), (1, 2, 4))]
    if op == "gemv":  # qgemv's tiling; qgemv_stream's parameters ride along unchanged
        return [{**K.GPU_GEMV, "RN": rn, "GEMV_WG": wg, "GEMV_TEAMS": teams}
                for wg, teams, rn in itertools.product((16, 32, 64), (2, 4, 8), (1, 2, 4))]
    return [dict(RM=rm, RN=1, VW=1, WG=wg) for rm, wg in itertools.product((1, 4), (32, 64, 128, 256))]


def tuned_in_effect(dev: CLDevice) -> tuple[dict[str, dict], dict[str, dict]]:
    """What ``accel tune`` stored for ``dev``, split into the sets the kernels use and the ones
    they ignore: only a parameter set tune itself could choose in this version applies (a store
    written before a candidate changed, or edited by hand, must not crash the compiler or break
    a kernel's layout)."""
    kind = "cpu" if dev.kind == "cpu" else "gpu"
    lanes = safe_lanes(dev)
    used, ignored = {}, {}
    for op, choice in tuned(dev).items():  # tuned() keeps the TUNABLE ops only
        (used if choice in candidates(op, kind, lanes) else ignored)[op] = choice
    return used, ignored


def params_for(dev: CLDevice) -> dict[str, dict]:
    """Default parameters for the device's kind (on CPU devices with 16-lane vectors, with
    ``CPU_WIDE``'s changes), with tuned values on top (vector widths never above ``safe_lanes``)."""
    kind = "cpu" if dev.kind == "cpu" else "gpu"
    base = DEFAULTS[kind]
    lanes = safe_lanes(dev)
    wide = K.CPU_WIDE if kind == "cpu" and lanes >= 16 else {}
    used, _ = tuned_in_effect(dev)
    return {op: used.get(op) or dict(base[op], **wide.get(op, {}), VW=min(base[op].get("VW", 1), lanes))
            for op in base}


def save_tuned(dev: CLDevice, op: str, params: dict) -> None:
    """Store ``params`` for ``op``, keeping what is stored for the other ops (under the store's
    lock: concurrent tuners of other ops must not overwrite this with what they read before).
    Raises OSError when the store cannot be written."""
    store = store_path(dev)
    with locked(store):
        data = tuned(dev)
        data[op] = params
        atomic_write(store, json.dumps(data, indent=1, sort_keys=True).encode())
