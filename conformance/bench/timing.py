"""Timing that can be trusted: contenders sampled in interleaved rounds until a time and a work
budget are spent, short calls batched, and a robust summary of the samples. The benchmarks
(accel.conformance.bench.suite), the device peaks (accel.conformance.bench.peaks) and the GPU speed goals all time through here.

>>> from accel.conformance.bench.timing import TINY, Contender, measure_all
>>> def takes(seconds):  # a timer that calls the work and reports a fixed duration
...     return lambda fn: (fn(), seconds)[1]
>>> work = lambda: None
>>> [s.median for s in measure_all([Contender(takes(0.1), work), Contender(takes(0.3), work)],
...                                budget=TINY)]
[0.1, 0.3]
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from accel.backend import Backend
from accel.errors import ArgumentError, expected

#: times a callable: returns the seconds the work it does (or enqueues) takes
Timer = Callable[[Callable[[], Any]], float]


def host_timer(fn: Callable[[], Any]) -> float:
    """Wall-clock seconds of ``fn``: the timer of host libraries (numpy, torch on the CPU), whose
    work is done when the call returns.

    >>> host_timer(lambda: None) >= 0
    True
    """
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- statistics ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stats:
    """Robust summary of per-call times in seconds (median and IQR resist a noisy neighbour)."""

    median: float
    iqr: float
    min: float
    n: int

    @classmethod
    def of(cls, samples: Iterable[float]) -> "Stats":
        """
        >>> Stats.of([4.0, 1.0, 3.0, 2.0, 5.0])
        Stats(median=3.0, iqr=2.0, min=1.0, n=5)
        """
        x = np.asarray(list(samples), dtype=np.float64)
        if x.size == 0:
            raise ArgumentError(expected("samples", "at least one time", "none"))
        q1, med, q3 = np.percentile(x, [25, 50, 75])
        return cls(float(med), float(q3 - q1), float(x.min()), int(x.size))


# -- budgets ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """How long to measure one case: like ggml's perf mode, repeat until both a time budget and a
    work budget (FLOPs, or bytes for FLOP-free ops) are spent, within hard caps."""

    time_s: float  # minimum measuring time
    work: float  # minimum FLOPs (or bytes) processed
    min_reps: int
    max_reps: int
    max_time_s: float  # hard cap, wins over the work budget
    min_sample_s: float = 2e-4  # calls are batched so one sample is at least this long
    warmup: int = 1
    block_s: float = 0.05  # with several contenders, each samples this long before the next
    settle_s: float = 0.5  # before a contender's block, at most this long waiting for quiet (settle)


TINY = Budget(time_s=0.0, work=0, min_reps=3, max_reps=3, max_time_s=1.0, settle_s=0.0)  # tests
QUICK = Budget(time_s=0.15, work=0, min_reps=3, max_reps=200, max_time_s=1.0)
FULL = Budget(time_s=1.0, work=1e10, min_reps=5, max_reps=10_000, max_time_s=3.0, warmup=2)
BUDGETS = {"tiny": TINY, "quick": QUICK, "full": FULL, "decode": QUICK, "gemv": QUICK}


@dataclass
class Contender:
    """One thing to time: ``fn`` enqueues the work, ``timer`` times a callable (``backend.time``:
    device events, or a host clock around synchronization), ``warmup`` (default ``fn``) runs the
    warm-up calls, e.g. into another output buffer."""

    timer: Timer
    fn: Callable[[], Any]
    warmup: Callable[[], Any] | None = None


def pin_pocl_threads() -> bool:
    """Ask PoCL's CPU driver to pin its worker thread i to CPU i (``POCL_AFFINITY=1``) for this
    process, unless the environment already says either way or the process may not run on every
    CPU (PoCL aborts when pinning fails); returns whether pinning is on. It takes effect only if
    no OpenCL call has started PoCL yet, so the commands that time (bench, tune, portability) call
    it first. Unpinned, on a 2-core VM, accel's samples went bimodal after other contenders ran
    (PoCL, q8_0 x q8_0 4096 x 4096 at M = 1: IQR 0.3-0.64 ms on a 0.8-1.2 ms median in 4 of 10
    runs, the minimum 0.73 in all; slow samples took about twice the fast ones, as if both
    workers shared a core for a while). Pinned: IQR 0.05-0.11 in 10 of 10, no contender slower."""
    if "POCL_AFFINITY" in os.environ:
        return os.environ["POCL_AFFINITY"] == "1"
    cpus = os.cpu_count() or 1
    if not hasattr(os, "sched_getaffinity") or not set(range(cpus)) <= os.sched_getaffinity(0):
        return False
    os.environ["POCL_AFFINITY"] = "1"
    return True


def settle(max_s: float, window_s: float = 0.01) -> float:
    """Wait (at most ``max_s`` seconds) until no thread of this process burns CPU, and return the
    seconds waited: a library's worker threads can spin after its call returns (numpy's OpenBLAS
    for about 0.1 s, measured here), taking a core from whatever is timed next. Quiet means the
    process used under a quarter of the CPU time of a ``window_s`` sleep.

    >>> 0 <= settle(0.2) <= 0.3
    True
    """
    start = time.perf_counter()
    while time.perf_counter() - start < max_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < 0.25 * window_s:
            break
    return time.perf_counter() - start


class _Run:
    """Sampling state of one contender."""

    def __init__(self, c: Contender):
        self.c, self.inner, self.samples, self.spent = c, 1, [], 0.0
        self.error: BaseException | None = None

    def batch(self) -> None:
        for _ in range(self.inner):
            self.c.fn()

    def done(self, budget: Budget, work: float) -> bool:
        n = len(self.samples)
        if self.error is not None or n >= budget.max_reps:
            return True
        return n >= budget.min_reps and (self.spent >= budget.max_time_s or (
            self.spent >= budget.time_s and n * self.inner * work >= budget.work))

    def block(self, budget: Budget, work: float, flush: Callable[[], None] | None) -> None:
        """Samples until this contender has run ``block_s`` in this round, or is done."""
        start, taken = self.spent, 0
        while not self.done(budget, work) and (taken == 0 or self.spent - start < budget.block_s):
            if flush is not None:
                flush()
            t = self.c.timer(self.batch)
            self.samples.append(t / self.inner)
            self.spent += t
            taken += 1


def measure_all(contenders: list[Contender], *, budget: Budget = QUICK, work: float = 0,
                flush: Callable[[], None] | None = None) -> list[Stats | BaseException]:
    """Time several contenders (accel and its baselines) in interleaved rounds, so a neighbour's
    load on a shared machine hits all of them alike and their ratio stays fair. Each is warmed
    up and calibrated, then sampled in blocks of ``budget.block_s`` per round until its own
    budget is spent: blocks rather than single samples, so only a block's first sample finds
    caches holding the previous contender's data (the others run warm, as in a loop).

    Each block starts on a quiet process (``settle``): the previous contender's spinning worker
    threads would otherwise be timed as this one's.

    Short calls are batched ``inner`` times per sample (calibrated on one call after warm-up) so
    timer resolution and launch latency do not dominate; with ``flush`` every sample is one call
    preceded by a cache flush. A contender that raises gets its exception instead of Stats.
    """
    runs = [_Run(c) for c in contenders]
    for r in runs:
        try:
            for _ in range(max(1, budget.warmup)):
                r.c.timer(r.c.warmup or r.c.fn)
            probe = r.c.timer(r.c.warmup or r.c.fn)
        except Exception as e:  # reported per contender: one failing library must not stop the rest
            r.error = e
            continue
        if flush is None and 0 <= probe < budget.min_sample_s:
            r.inner = min(1000, max(1, math.ceil(budget.min_sample_s / max(probe, 1e-9))))
    while not all(r.done(budget, work) for r in runs):
        for r in runs:
            if r.done(budget, work):
                continue
            try:
                if len(runs) > 1:
                    settle(budget.settle_s)
                r.block(budget, work, flush)
            except Exception as e:
                r.error = e
    return [r.error if r.error is not None else Stats.of(r.samples) for r in runs]


def measure(timer: Timer, fn: Callable[[], Any], *, budget: Budget = QUICK, work: float = 0,
            flush: Callable[[], None] | None = None, warmup: Callable[[], Any] | None = None) -> Stats:
    """Time one contender (see ``measure_all``); raises what ``fn`` raises.

    >>> s = measure(lambda f: (f(), 0.5)[1], lambda: None, budget=TINY)
    >>> s.median, s.n
    (0.5, 3)
    """
    (result,) = measure_all([Contender(timer, fn, warmup)], budget=budget, work=work, flush=flush)
    if isinstance(result, BaseException):
        raise result
    return result


def cache_flusher(backend: Backend, nbytes: int = 256 << 20) -> Callable[[], None]:
    """A callable that evicts caches between samples by writing ``nbytes`` of memory: host
    memory for the CPU backend, a host-to-device upload elsewhere (the contract has no fill)."""
    scratch = np.zeros(nbytes, np.uint8)
    if backend.name == "cpu":
        def flush() -> None:
            scratch[...] += 1
    else:
        def flush() -> None:
            backend.upload(scratch)
            backend.synchronize()
    return flush
