"""Benchmarks that can be trusted: the cases, each timed on the device (accel.conformance.bench.timing) with its
baselines side by side on the same device, a check that the timed work ran, FLOP/byte counts
from the op specs and a roofline; the records and result documents they make.

The result file format (``accel.bench/1``) is documented in docs/benchmarks.md.

>>> import accel
>>> from accel.conformance.bench import suite as bench, timing
>>> case = bench.Case.make("matmul", "float32", M=64, N=64, K=64)
>>> r = bench.run_case(accel.get_backend("cpu"), case, budget=timing.TINY, baselines=[], peaks=None)
>>> r["status"], r["flops"]
('ok', 524288)
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from accel import spec as S
from accel.backend import Backend
from accel.dtypes import to_numpy_dtype
from accel.errors import AccelError, ArgumentError, expected
from accel.formats import FORMATS, get_format
from accel.dispatch import execute
from accel.tensor import NAN_FILL, Tensor
from accel.conformance.ops import OPS
from accel.conformance.results import accel_environment, commit, machine
from accel.conformance.bench.baselines import Unsupported
from accel.conformance.bench.decoder import OPS as DECODER_OPS
from accel.conformance.bench.peaks import CACHE_MULTIPLE, MEMORY_SHARE, available_memory
from accel.conformance.bench.timing import QUICK, Budget, Contender, Stats, cache_flusher, measure_all

if TYPE_CHECKING:
    from accel.conformance.bench.peaks import Peaks

SCHEMA = "accel.bench/1"


# -- cases ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One benchmark case: an op, a dtype and the parameters its spec is built from."""

    op: str
    dtype: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def make(cls, op: str, dtype: str, **params: Any) -> "Case":
        if op not in S.OPS:
            raise ArgumentError(expected("op", f"one of {S.OPS}", repr(op)))
        return cls(op, dtype, tuple(params.items()))

    @property
    def p(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def id(self) -> str:
        return f"{self.op} {self.dtype} " + " ".join(f"{k}={v}" for k, v in self.params)

    def spec(self) -> S.Spec:
        """The op spec (validation, shapes, FLOPs and bytes come from accel.spec alone), built
        by the op's row (conformance/ops)."""
        return OPS[self.op].bench_spec(self.dtype, self.p)

    def host_inputs(self, seed: int = 0) -> list[np.ndarray | None]:
        """Seeded random operands as host arrays (None for an absent optional operand)."""
        rng = np.random.default_rng(seed)
        return OPS[self.op].bench_inputs(self.spec(), rng, seed)


def portability_cases() -> list[Case]:
    """The shared problem set every profile includes, so result files from machines run with
    different profiles (a GPU box on quick, a laptop on full) have problems in common for the
    performance-portability tables. Each op's largest case here is a representative size, not a
    launch-bound one (a 512^3 matmul takes ~0.2 ms of launch overhead on a GPU), so headlines built
    from it are comparable across devices; all of it runs in well under a minute on PoCL."""
    make = Case.make
    out = [make("matmul", "float32", M=n, N=n, K=n) for n in (512, 2048)]
    out += [make("matmul", dt, M=1024, N=1024, K=1024) for dt in ("float16", "bfloat16", "int8")]
    out.append(make("attention", "float32", B=1, Hq=8, Hkv=8, Sq=512, Sk=512, D=64, causal=False))
    out.append(make("attention", "float16", B=1, Hq=8, Hkv=2, Sq=1024, Sk=1024, D=64, causal=True))
    out.append(make("attention", "float32", B=1, Hq=32, Hkv=8, Sq=1, Sk=4096, D=128,
                    causal=True))  # decode step with a KV cache
    for op in ("quantize", "dequantize"):
        dt = "float32" if op == "quantize" else "uint8"
        out += [make(op, dt, rows=1024, K=4096, fmt=f) for f in ("q8_0", "q4_0")]
    out += [make("qmatmul", "float32", M=1, N=4096, K=4096, fmt=f) for f in ("q8_0", "q4_0")]
    # the decode GEMV with GGML's semantics (x quantized to Q8_0, integer dot products)
    out.append(make("qmatmul", "float32", M=1, N=4096, K=4096, fmt="q4_0", x_fmt="q8_0"))
    # FP8 GEMM with torch._scaled_mm's row-wise scales (backends without FP8 decline it)
    out.append(make("scaled_matmul", "float8_e4m3fn", M=1024, N=1024, K=1024, scaling="row"))
    return out


def _profile_cases(sizes: str) -> list[Case]:
    """What a profile adds to the portability set: small launch-bound probes (quick), or the
    release sizes (full)."""
    make = Case.make
    if sizes == "quick":
        return [make("matmul", "float32", M=256, N=256, K=256),
                *(make("qmatmul", "float32", M=8, N=2048, K=2048, fmt=f) for f in ("q8_0", "q4_0")),
                *_new_format_cases(rows=64, N=256, K=2048)]
    out = [make("matmul", "float32", M=n, N=n, K=n) for n in (1024, 2048)]
    out += [make("matmul", dt, M=n, N=n, K=n) for dt in ("float16", "bfloat16", "int8") for n in (1024, 2048)]
    for dt in ("float32", "float16", "bfloat16"):
        out += [make("attention", dt, B=1, Hq=8, Hkv=8, Sq=s, Sk=s, D=64, causal=False) for s in (512, 1024, 2048)]
    out += [make("attention", "float16", B=1, Hq=8, Hkv=2, Sq=s, Sk=s, D=64, causal=True) for s in (512, 1024, 2048)]
    # the OpenCL issue's attention goal is stated for this case (vs torch SDPA)
    out.append(make("attention", "float32", B=1, Hq=8, Hkv=8, Sq=2048, Sk=2048, D=64, causal=True))
    out.append(make("attention", "float32", B=1, Hq=32, Hkv=8, Sq=1, Sk=8192, D=128, causal=True))
    for op in ("quantize", "dequantize"):
        dt = "float32" if op == "quantize" else "uint8"
        out += [make(op, dt, rows=4096, K=4096, fmt=f) for f in ("q8_0", "q4_0")]
    out += [make("qmatmul", "float32", M=32, N=4096, K=4096, fmt=f) for f in ("q8_0", "q4_0")]
    out.append(make("scaled_matmul", "float8_e4m3fn", M=2048, N=2048, K=2048, scaling="block"))
    return out + _new_format_cases(rows=1024, N=4096, K=4096)


#: the K-quants and mxfp4 as weights (q8_k is an activation format: its own cases would time
#: what the x_format cases already include)
_NEW_WEIGHTS = ("q4_k", "q5_k", "q6_k", "mxfp4")


def _new_format_cases(rows: int, N: int, K: int) -> list[Case]:
    """quantize and dequantize of each K-quant and mxfp4, and its qmatmul at M = 1 and M = 8 with
    float x and with x in the format's vec_dot partner (sizes small in quick: the CPU reference
    quantizes the weights first, a scale search of about a microsecond per value)."""
    make = Case.make
    out = [make(op, "float32" if op == "quantize" else "uint8", rows=rows, K=K, fmt=f)
           for op in ("quantize", "dequantize") for f in _NEW_WEIGHTS]
    for f in _NEW_WEIGHTS:
        x_fmt = get_format(f).vec_dot
        out += [make("qmatmul", "float32", M=m, N=N, K=K, fmt=f, **x) for m in (1, 8)
                for x in ({}, {"x_fmt": x_fmt})]
    return out


#: the weight formats of the decode sweep: the GGUF formats LLM weights ship in
DECODE_FORMATS = ("q4_0", "q8_0", "q4_k", "q6_k", "mxfp4")
#: the decode sweep's batch sizes: one token, then batched decoding
DECODE_M = (1, 2, 4, 8, 16, 32)
#: the sweep's matrix: a 7-8B model's attention projection
DECODE_NK = 4096


def decode_cases(formats: Iterable[str] = DECODE_FORMATS, ms: Iterable[int] = DECODE_M) -> list[Case]:
    """LLM decode: quantized weight [N, K] times M float32 activations, per format and M, all
    memory-bound (the ``decode`` sizes; no portability set: it answers one question). Each format
    runs twice: with float activations, and with x quantized to the format ggml's CPU kernels
    quantize it to (the format's ``vec_dot``), the semantics ggml itself computes.

    >>> [c.id for c in decode_cases()][:2]
    ['qmatmul float32 M=1 N=4096 K=4096 fmt=q4_0', 'qmatmul float32 M=2 N=4096 K=4096 fmt=q4_0']
    >>> decode_cases()[len(DECODE_M)].id
    'qmatmul float32 M=1 N=4096 K=4096 fmt=q4_0 x_fmt=q8_0'
    """
    out = []
    for f in formats:
        for x_fmt in (None, get_format(f).vec_dot):
            extra = {} if x_fmt is None else {"x_fmt": x_fmt}
            sweep = [Case.make("qmatmul", "float32", M=m, N=DECODE_NK, K=DECODE_NK, fmt=f, **extra)
                     for m in ms]
            if x_fmt is None or _valid(sweep[0]):
                out += sweep
    return out


def gemv_cases() -> list[Case]:
    """The decode GEMV (M = 1, N = K = 4096) of every weight format, float x and x in the
    format's ``vec_dot``: the ``gemv`` sizes, the table of docs/benchmarks.md.

    >>> len({c.p["fmt"] for c in gemv_cases()})
    24
    """
    return decode_cases([f for f, row in FORMATS.items() if not row.activation_only], (1,))


def _valid(case: Case) -> bool:
    """Whether accel's spec accepts the case (an activation format accel lacks is left out)."""
    try:
        case.spec()
    except ArgumentError:
        return False
    return True


#: the --sizes choices
SIZES = ("quick", "full", "decode", "gemv")
#: the sizes that are one qmatmul sweep (no portability set, no decoder-step ops)
SWEEPS = ("decode", "gemv")
#: the size of the decoder-step ops' cases (accel.conformance.bench.decoder: n x n float32)
DECODER_N = 4096


def cases(sizes: str = "quick", ops: Iterable[str] | None = None) -> list[Case]:
    """The benchmark cases of a profile: the portability set (portability_cases) and the
    profile's own sizes, each case once. ``quick`` stays within a couple of minutes on
    OpenCL-on-PoCL (10-50x slower than BLAS on 2 CPU cores); ``decode`` is the decode sweep
    alone (decode_cases).

    >>> [c.id for c in cases("quick", ["quantize"])][1:3]
    ['quantize float32 rows=1024 K=4096 fmt=q4_0', 'quantize float32 rows=64 K=2048 fmt=q4_k']
    """
    if sizes not in SIZES:
        raise ArgumentError(expected("sizes", f"one of {SIZES}", repr(sizes)))
    chosen = {"decode": decode_cases, "gemv": gemv_cases}.get(
        sizes, lambda: portability_cases() + _profile_cases(sizes))()
    unique = {c.id: c for c in chosen}
    out = sorted(unique.values(), key=lambda c: S.OPS.index(c.op))  # stable: by op, then as listed
    if ops is not None:
        wanted = set(ops)
        unknown = wanted - set(S.OPS) - set(DECODER_OPS)
        if unknown:
            raise ArgumentError(expected("ops", f"names from {S.OPS + DECODER_OPS}", sorted(unknown)))
        chosen_ops = sorted({c.op for c in out}, key=S.OPS.index)
        out = [c for c in out if c.op in wanted]
        if not out and not (wanted & set(DECODER_OPS) and sizes not in SWEEPS):
            # an empty result file would stand in a report for a real one
            raise ArgumentError(expected("ops", f"ops the {sizes} sizes measure "
                                         f"({', '.join(chosen_ops)})", sorted(wanted)))
    return out


# -- validation -------------------------------------------------------------------------------
#: normwise relative error accepted when checking that the timed work ran and computed this op
#: (conformance owns the strict per-element verdict; this only catches skipped or garbage work)
VALIDATION_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2, "int32": 0.0, "uint8": 0.0}


def check_result(got: np.ndarray, ref: np.ndarray, out_dtype: str) -> tuple[bool, float]:
    """(ok, normwise relative error) of ``got`` against ``ref``; NaN anywhere fails.

    >>> check_result(np.ones(4, np.float32), np.ones(4, np.float32), "float32")
    (True, 0.0)
    """
    g = np.asarray(got, np.float64).reshape(-1)
    r = np.asarray(ref, np.float64).reshape(-1)
    if g.shape != r.shape:
        return False, math.inf
    if not np.isfinite(g).all():
        return False, math.inf
    denom = float(np.linalg.norm(r)) or 1.0
    err = float(np.linalg.norm(g - r)) / denom
    return err <= VALIDATION_TOL.get(out_dtype, 1e-4), err


def reference(case: Case | S.Spec, host: list[np.ndarray | None]) -> np.ndarray:
    """The op's result on the CPU reference backend (accel's semantics by definition), for a
    case or a spec."""
    from accel.registry import get_backend

    cpu = get_backend("cpu")
    spec = case.spec() if isinstance(case, Case) else case
    ins = [None if h is None else Tensor.from_host(cpu, h) for h in host]
    return execute(cpu, spec, *ins).numpy()


def _sentinel(backend: Backend, spec: S.Spec) -> Tensor:
    """An output tensor whose bytes start as NAN_FILL (NaN in every float format)."""
    dtype = to_numpy_dtype(spec.out_dtype)
    fill = np.full(math.prod(spec.out_shape) * dtype.itemsize, NAN_FILL, np.uint8)
    return Tensor.from_host(backend, fill.view(dtype).reshape(spec.out_shape))


# -- memory-bound cases: weights rotated beyond the last-level cache ---------------------------------
# (CACHE_MULTIPLE x the cache, within MEMORY_SHARE of the memory: peaks, with the machine's facts)
#: at most this many copies: a small weight then spans less (its calls time launches, not memory)
#: and the record says how much; 256 copies of a 4096 x 4096 q4_0 weight span 2.4 GB, 4x a
#: 600 MB L3 (at 1024, the quick profile's small K-quant weights took 1024 copies each, and a
#: CPU portability run 162 s against 126)
MAX_COPIES = 256


def streams_weights(spec: S.Spec) -> bool:
    """Whether a case is a weight-streaming GEMV/GEMM (qmatmul), timed with a cold weight and
    reported as GB/s of weight bytes."""
    return spec.op == "qmatmul"


def weight_copies(spec: S.Spec, cache_bytes: int | None, copy_bytes: int | None = None,
                  memory: int | None = None) -> int:
    """How many copies of the weight make a working set of CACHE_MULTIPLE x the cache, for a
    contender that keeps ``copy_bytes`` per copy (default: the quantized weight's bytes; a
    baseline that dequantizes at load keeps more, so needs fewer), within MAX_COPIES and
    MEMORY_SHARE of ``memory`` (default: what is available now).

    >>> spec = S.qmatmul_spec((1, 4096), "float32", (4096, 4096), get_format("q4_0"))
    >>> weight_copies(spec, 32 << 20), weight_copies(spec, 32 << 20, 4096 * 4096 * 4), weight_copies(spec, None)
    (15, 2, 1)
    """
    if cache_bytes is None or not streams_weights(spec):
        return 1
    per_copy = copy_bytes or spec.weight_bytes
    room = int((available_memory() if memory is None else memory) * MEMORY_SHARE) // per_copy
    return max(1, min(MAX_COPIES, room, math.ceil(CACHE_MULTIPLE * cache_bytes / per_copy)))


class _Rotation:
    """Calls one of several equivalent callables per call, in turn; ``last`` is the one that
    ran last (its result is the one read back)."""

    def __init__(self, items: list):
        self.items, self.i = items, -1

    def next(self):
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]

    @property
    def last(self):
        return self.items[max(self.i, 0)]


def _weight_rates(spec: S.Spec, seconds: float, peaks: "Peaks | None") -> dict[str, float | None]:
    """GB/s of weight bytes and its fraction of the device's measured copy bandwidth."""
    gbs = spec.weight_bytes / seconds / 1e9
    return {"weight_gbs": gbs, "copy_fraction": gbs / peaks.gbs if peaks and peaks.gbs > 0 else None}


# -- running ----------------------------------------------------------------------------------
def rates(spec: S.Spec, seconds: float, peaks: "Peaks | None") -> dict[str, float | None]:
    """Throughput and roofline numbers for one time. The roofline bound is the time the device
    needs at its measured peaks, max(flops / peak compute, bytes / peak bandwidth); efficiency is
    that bound over the measured time, i.e. achieved / min(peak, intensity x bandwidth).

    >>> from accel.conformance.bench.peaks import Peaks
    >>> r = rates(S.matmul_spec((2, 2), "float32", (2, 2), "float32"), 1e-6, Peaks(100.0, 10.0))
    >>> r["gflops"], r["gbs"], round(r["roofline_efficiency"], 3)
    (0.016, 0.048, 0.005)
    """
    flops, nbytes = spec.flops, spec.bytes
    out = {"gflops": flops / seconds / 1e9, "gbs": nbytes / seconds / 1e9,
           "roofline_efficiency": None}
    if peaks is not None and peaks.gflops > 0 and peaks.gbs > 0:
        bound = max(flops / (peaks.gflops * 1e9), nbytes / (peaks.gbs * 1e9))
        out["roofline_efficiency"] = bound / seconds
    return out


def run_case(backend: Backend, case: Case, *, budget: Budget = QUICK, baselines: list | None = None,
             peaks: "Peaks | None" = None, flush: bool = False, seed: int = 0,
             cache_bytes: int | None = None, memory: int | None = None) -> dict[str, Any]:
    """Measure one case on ``backend`` and, interleaved with it, on each applicable baseline;
    returns the result record (docs/benchmarks.md). Never raises for a case that fails: the
    record says why. A weight-streaming case rotates accel and every baseline among copies of
    its weight spanning CACHE_MULTIPLE x ``cache_bytes`` (the device's last-level cache), within
    MEMORY_SHARE of ``memory`` bytes each (default: what is available now)."""
    spec = case.spec()
    rec: dict[str, Any] = {"id": case.id, "op": case.op, "dtype": case.dtype, "params": case.p,
                           "flops": spec.flops, "bytes": spec.bytes,
                           "intensity": spec.flops / spec.bytes if spec.bytes else None,
                           "baselines": []}
    if memory is None:  # before any contender takes its copies
        memory = available_memory()
    copies = weight_copies(spec, cache_bytes, memory=memory)
    if streams_weights(spec):
        rec.update(weight_bytes=spec.weight_bytes, copies=copies, cache_bytes=cache_bytes,
                   working_set_bytes=copies * spec.weight_bytes)
    verdict = backend.verdict(spec)
    if not verdict.ok:
        return {**rec, "status": "unsupported", "reason": verdict.reason}
    host = case.host_inputs(seed)
    ref = reference(case, host)
    # each copy is its own memory (a baseline may wrap host arrays without copying them)
    hosts = [host] + [[None if h is None else h.copy() for h in host] for _ in range(copies - 1)]
    try:
        sets = _Rotation([[None if h is None else Tensor.from_host(backend, h) for h in hs] for hs in hosts])
        warm, out = _sentinel(backend, spec), _sentinel(backend, spec)
    except Exception as e:  # any device's allocation errors (a plugin's, CuPy's): this case fails,
        return {**rec, "status": "error", "reason": f"{type(e).__name__}: {e}"}
    # warm-up and calibration write `warm`; only the timed calls write `out`, so reading `out`
    # back afterwards proves the timed work ran
    contenders = [Contender(backend.time, lambda: execute(backend, spec, *sets.next(), out=out),
                            lambda: execute(backend, spec, *sets.next(), out=warm))]
    prepared = []
    for base in baselines or []:
        try:
            ready = _prepare_copies(base, spec, hosts, backend, cache_bytes, memory)
        except Unsupported as e:  # the library refuses this case: say why, time nothing
            rec["baselines"].append({"name": base.name, "version": base.version,
                                     "status": "unsupported", "reason": str(e)})
            continue
        except Exception as e:  # a third-party library failing must not stop the run
            rec["baselines"].append(_failed(base, e))
            continue
        if ready is not None:  # None: the baseline does not compute this op
            p, n = ready
            prepared.append((base, p, n))
            contenders.append(Contender(p.timer, p.run))
    _use_each_copy(contenders, [copies] + [n for _, _, n in prepared])
    results = measure_all(contenders, budget=budget, work=spec.flops or spec.bytes,
                          flush=cache_flusher(backend) if flush else None)
    for (base, p, n), res in zip(prepared, results[1:]):
        rec["baselines"].append(_baseline_record(base, p, res, spec, ref, host, peaks, n))
    stats = results[0]
    if isinstance(stats, BaseException):
        return {**rec, "status": "error", "reason": f"{type(stats).__name__}: {stats}"}
    ok, err = check_result(out.numpy(), ref, spec.out_dtype)
    rec.update(_timing(stats), **rates(spec, stats.median, peaks))
    if streams_weights(spec):
        rec.update(_weight_rates(spec, stats.median, peaks))
    rec["validation"] = {"rel_err": err, "tol": VALIDATION_TOL.get(spec.out_dtype, 1e-4)}
    if not ok:
        return {**rec, "status": "invalid", "reason": f"result read back after timing is wrong "
                                                      f"(normwise relative error {err:.3g})"}
    rec["status"] = "ok"
    good = [b for b in rec["baselines"] if b["status"] == "ok"]
    if good:
        best = min(good, key=lambda b: b["median_s"])
        rec["best_baseline"] = best["name"]
        rec["ratio_to_best"] = best["median_s"] / stats.median
    return rec


#: IQR above this fraction of the median flags a measurement as noisy (a shared machine's
#: neighbour, frequency changes): its ratios deserve a re-run before anyone acts on them
NOISY_IQR = 0.25


def _timing(stats: Stats) -> dict[str, Any]:
    return {"median_s": stats.median, "iqr_s": stats.iqr, "min_s": stats.min, "reps": stats.n}


def noisy(record: dict) -> bool:
    """Whether a measured record (a case or a baseline) is too spread to trust."""
    return record.get("status") == "ok" and record["iqr_s"] > NOISY_IQR * record["median_s"]


#: seconds each contender spends at most on _use_each_copy: a memory-bound call (the calls whose
#: timing the copies are for) passes every copy within it; a slow one, bound by its arithmetic,
#: stops early (the CPU reference backend's qmatmul would take minutes over 200 copies)
FIRST_USE_S = 0.5


def _use_each_copy(contenders: list[Contender], copies: list[int]) -> None:
    """Each contender's warm-up call once per weight copy it rotates among, before timing: a
    buffer's first use costs more than reading it (PoCL 3.1, q4_k 4096 x 4096 x q8_k: 0.75 ms a
    call on a first pass over 150 freshly uploaded copies, 0.47 on the second), and decode reads
    the weights of a model loaded long before. Failures are left for measure_all to report."""
    for c, n in zip(contenders, copies):
        call, spent = c.warmup or c.fn, 0.0
        for _ in range(n if n > 1 else 0):
            try:
                spent += c.timer(call)
            except Exception:
                break
            if spent > FIRST_USE_S:
                break


def _prepare_copies(base, spec: S.Spec, hosts: list[list], backend: Backend,
                    cache_bytes: int | None, memory: int) -> "tuple[Prepared, int] | None":
    """``base`` prepared once per weight copy it needs (weight_copies for the bytes one of its
    copies keeps, at most one per host copy), run in turn; with the number of copies."""
    from accel.conformance.bench.baselines import Prepared

    first = base.prepare(spec, hosts[0], backend)
    if first is None:
        return None
    n = min(len(hosts), weight_copies(spec, cache_bytes, first.weight_bytes, memory))
    if n == 1:
        return first, 1
    turn = _Rotation([first] + [base.prepare(spec, h, backend) for h in hosts[1:n]])
    return Prepared(lambda: turn.next().run(), first.timer, lambda: turn.last.result(),
                    first.computes, first.note, first.weight_bytes), n


def _failed(base, e: BaseException) -> dict[str, Any]:
    return {"name": base.name, "version": base.version, "status": "error",
            "reason": f"{type(e).__name__}: {e}"}


def _baseline_record(base, prepared, res: "Stats | BaseException", spec: S.Spec, ref: np.ndarray,
                     host: list, peaks: "Peaks | None", copies: int = 1) -> dict[str, Any]:
    """A baseline's timing, validated against the same reference as accel's result (or, for a
    baseline that computes other semantics, its own spec's reference on the same inputs)."""
    if isinstance(res, BaseException):
        return _failed(base, res)
    try:
        if prepared.computes is not None and prepared.computes != spec:
            ref = reference(prepared.computes, host)
        ok, err = check_result(prepared.result(), ref, spec.out_dtype)
    except Exception as e:
        return _failed(base, e)
    out = {"name": base.name, "version": base.version, "status": "ok" if ok else "invalid",
           **_timing(res), **rates(spec, res.median, peaks), "rel_err": err}
    if streams_weights(spec):
        out.update(_weight_rates(spec, res.median, peaks), copies=copies,
                   working_set_bytes=copies * (prepared.weight_bytes or spec.weight_bytes))
    if prepared.note:
        out["note"] = prepared.note
    return out


class CPUWatch:
    """How much CPU other processes used while a run went on: the machine's busy time (from
    /proc/stat) minus this process's own (all its threads, PoCL's included), per second of wall
    time, in cores. None where /proc/stat does not exist."""

    def __init__(self):
        self.start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
        own = os.times()
        return time.perf_counter(), busy, own.user + own.system

    def usage(self) -> dict[str, float | None]:
        """Average cores busy since construction: on the whole machine, by this process, and by
        everything else (the difference)."""
        end = self._now()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return {"machine_cores": None, "own_cores": None, "others_cores": None}
        wall, busy, own = (e - s for e, s in zip(end, self.start))
        return {"machine_cores": round(busy / wall, 2), "own_cores": round(own / wall, 2),
                "others_cores": round(max(0.0, busy - own) / wall, 2)}


#: other processes using more than this many cores on average make a run "busy"
BUSY_CORES = 0.5


def busy(doc: dict) -> bool:
    """Whether other processes used a noticeable share of the machine while it benchmarked: a
    threaded BLAS sharing its cores then slows down by up to 100x, which skews ratios."""
    others = (doc.get("load") or {}).get("others_cores")
    return others is not None and others > BUSY_CORES


def busy_warning(doc: dict) -> str | None:
    """What to tell the reader of a benchmark file measured on a busy machine (None otherwise);
    printed by accel bench and shown in the report."""
    if not busy(doc):
        return None
    return (f"measured on a busy machine (other processes used {doc['load']['others_cores']} of "
            f"its {(doc.get('machine') or {}).get('cores', '?')} cores on average): ratios against "
            "threaded libraries (BLAS, torch) can be off by 10-100x; re-run on an idle machine")


def peak_warning(doc: dict) -> str | None:
    """What to tell the reader when float32/float64 cases ran faster than the measured peak
    allows (only units faster than the FMA peak kernel, for 8/16-bit types, can): the peak was
    measured low, so every roofline percentage of the file is too high."""
    over = [c["roofline_efficiency"] for c in doc.get("cases", []) if c.get("status") == "ok"
            and c.get("dtype") in ("float32", "float64") and (c.get("roofline_efficiency") or 0) > 1.05]
    if not over:
        return None
    return (f"{len(over)} float32/float64 cases ran above the measured peak (up to "
            f"{100 * max(over):.0f}% of roofline): the peak was measured low (a busy machine?), so "
            "the roofline percentages are too high; re-run with --refresh-peaks on an idle machine")


def run_suite(backend: Backend, suite: list[Case], *, budget: Budget = QUICK,
              with_baselines: bool = True, flush: bool = False, label: str | None = None,
              profile: str = "quick", on_case: Callable[[Case, dict], None] | None = None,
              peaks_mode: str = "update", command: str = "",
              ops: Iterable[str] | None = None, decoder_ops: Iterable[str] = ()) -> dict[str, Any]:
    """Benchmark ``suite`` on ``backend``; returns an ``accel.bench/1`` document (``command``: the
    accel command line that ran it, recorded as it was typed; ``ops``: the op filter that chose
    ``suite`` from the profile, recorded so a report can say why a case is absent;
    ``decoder_ops``: names of :data:`DECODER_OPS` timed after the suite). ``peaks_mode``:
    "cached" (measure only when nothing is cached), "update" (measure and keep the best of cache
    and now, the default) or "refresh" (measure and replace the cache); see accel.conformance.bench.peaks."""
    from accel import __version__
    from accel.conformance.bench import baselines as B
    from accel.conformance.bench import peaks as P

    from accel.conformance.bench import decoder

    watch = CPUWatch()
    try:
        device_peaks = P.peaks(backend, refresh=peaks_mode == "refresh", update=peaks_mode == "update")
        peaks_error = None
    except AccelError as e:  # the report shows no roofline for this device, and says why
        device_peaks, peaks_error = None, f"{type(e).__name__}: {e}"
    bases = B.for_backend(backend) if with_baselines else []
    cache_bytes = P.last_level_cache(backend)
    # before the first case: the memory a case frees stays with its allocators (PoCL's kept 8 of
    # 23 GB) for the next to reuse, but no longer counts as available
    memory = available_memory()
    results = []
    for case in suite:
        rec = run_case(backend, case, budget=budget, baselines=bases, peaks=device_peaks, flush=flush,
                       cache_bytes=cache_bytes, memory=memory)
        results.append(rec)
        if on_case is not None:
            on_case(case, rec)
    # the decoder-step ops, timed apart at n x n float32 beside torch's CPU eager (their goal)
    dec_ops = [o for o in DECODER_OPS if o in set(decoder_ops)]
    try:
        dec_rows = decoder.run(backend, DECODER_N, budget, dec_ops, with_baselines) if dec_ops else []
    except ImportError as e:  # their inputs and baseline come from torch (the all extra)
        dec_rows = [{"op": o, "n": DECODER_N, "error": f"needs torch: {e}"} for o in dec_ops]
    info = backend.info
    return {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(label),
        "load": watch.usage(),
        "backend": backend.device_id,
        "device": {"name": info.name, "vendor": info.vendor, "driver": info.driver,
                   "memory_bytes": info.memory_bytes, "compute_units": info.compute_units,
                   "hardware": B.hardware_of(backend)},
        "versions": {"accel": __version__, "numpy": np.__version__, **backend.versions()},
        "commit": commit(),
        "command": command,
        "environment": accel_environment(),
        "profile": profile,
        "ops": sorted(ops) if ops is not None else None,
        "settings": {**asdict(budget), "flush": flush, "pocl_affinity": os.environ.get("POCL_AFFINITY")},
        "peaks": asdict(device_peaks) if device_peaks is not None else None,
        "peaks_error": peaks_error,
        "cache_bytes": cache_bytes,
        "baselines": {b.name: b.version for b in bases},
        "cases": results,
        "decoder_ops": dec_rows,
    }

