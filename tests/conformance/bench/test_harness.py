"""The timing harness: statistics on known inputs, budgets, synchronization, and the check that
the timed work really ran."""
import itertools
import re
import time

import numpy as np
import pytest

import accel
from accel.conformance.bench import suite as bench
from accel.conformance.bench import timing
from accel.backend import Support
from accel.backends.cpu import CPUBackend
from accel.conformance.bench.suite import Case
from accel.conformance.bench.timing import Budget, Stats, measure
from markers import needs_opencl


def test_stats_on_known_samples():
    # odd count: sorted 1..5, median 3, quartiles 2 and 4 (linear interpolation)
    assert Stats.of([5.0, 1.0, 4.0, 2.0, 3.0]) == Stats(median=3.0, iqr=2.0, min=1.0, n=5)
    # even count: median (2+3)/2; q1 = 1 + 0.75*(2-1), q3 = 3 + 0.25*(4-3)
    s = Stats.of([4.0, 3.0, 2.0, 1.0])
    assert (s.median, s.iqr, s.min, s.n) == (2.5, 1.5, 1.0, 4)
    with pytest.raises(accel.ArgumentError, match="samples"):
        Stats.of([])


def scripted_timer(times):
    """A timer returning scripted durations, calling the timed function each time like a real one."""
    it = iter(times)
    calls = []

    def timer(fn):
        fn()
        calls.append(1)
        return next(it)
    return timer, calls


def test_time_budget_stops_after_enough_time():
    timer, _ = scripted_timer(itertools.repeat(0.1))
    budget = Budget(time_s=0.5, work=0, min_reps=3, max_reps=100, max_time_s=10, warmup=1)
    s = measure(timer, lambda: None, budget=budget)
    assert s.n == 5  # 5 x 0.1 s reaches the 0.5 s budget
    assert s.median == pytest.approx(0.1)


def test_work_budget_keeps_measuring_until_spent():
    timer, _ = scripted_timer(itertools.repeat(0.1))
    budget = Budget(time_s=0.0, work=1e4, min_reps=1, max_reps=100, max_time_s=10, warmup=1)
    assert measure(timer, lambda: None, budget=budget, work=1e3).n == 10


def test_time_cap_wins_over_work_budget_and_min_reps_hold():
    timer, _ = scripted_timer(itertools.repeat(1.0))
    budget = Budget(time_s=0.0, work=1e12, min_reps=2, max_reps=100, max_time_s=3, warmup=1)
    assert measure(timer, lambda: None, budget=budget, work=1.0).n == 3
    timer, _ = scripted_timer(itertools.repeat(5.0))
    assert measure(timer, lambda: None, budget=budget, work=1.0).n == 2


def test_short_calls_are_batched_and_divided():
    calls = []
    # a slow first (compiling) warm-up call, then the calibration call takes 1e-5 s, so samples
    # batch ceil(2e-4 / 1e-5) = 20 calls; each batch takes 4e-4 s
    timer, _ = scripted_timer(itertools.chain([1.0, 1e-5], itertools.repeat(4e-4)))
    budget = Budget(time_s=0, work=0, min_reps=3, max_reps=3, max_time_s=1, min_sample_s=2e-4, warmup=1)
    s = measure(timer, lambda: calls.append(1), budget=budget)
    assert len(calls) == 2 + 3 * 20
    assert s.median == pytest.approx(2e-5)


def test_flush_runs_before_every_sample_and_disables_batching():
    events = []
    timer, _ = scripted_timer(itertools.chain([1e-6], itertools.repeat(1e-6)))
    budget = Budget(time_s=0, work=0, min_reps=4, max_reps=4, max_time_s=1, warmup=1)
    measure(timer, lambda: events.append("run"), budget=budget, flush=lambda: events.append("flush"))
    assert events == ["run", "run"] + ["flush", "run"] * 4


def test_contenders_are_sampled_in_interleaved_rounds():
    order = []
    a = timing.Contender(lambda f: (f(), 0.1)[1], lambda: order.append("a"))
    b = timing.Contender(lambda f: (f(), 0.3)[1], lambda: order.append("b"))
    budget = Budget(time_s=0.3, work=0, min_reps=2, max_reps=100, max_time_s=10, warmup=1)
    sa, sb = timing.measure_all([a, b], budget=budget)
    # warm-up + calibration of each, then alternate until each spent its 0.3 s
    assert order == ["a", "a", "b", "b", "a", "b", "a", "b", "a"]
    assert (sa.n, sa.median, sb.n, sb.median) == (3, 0.1, 2, 0.3)


def test_fast_contenders_sample_in_blocks_between_switches():
    order = []
    a = timing.Contender(lambda f: (f(), 0.02)[1], lambda: order.append("a"))
    b = timing.Contender(lambda f: (f(), 0.3)[1], lambda: order.append("b"))
    budget = Budget(time_s=0.1, work=0, min_reps=1, max_reps=100, max_time_s=10, warmup=1, block_s=0.05)
    sa, sb = timing.measure_all([a, b], budget=budget)
    # after warm-up + calibration, a samples 3 x 0.02 s (>= 0.05 s) per block, b one 0.3 s sample
    assert "".join(order) == "aabb" + "aaa" + "b" + "aa"
    assert (sa.n, sb.n) == (5, 1)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


def test_settle_waits_for_a_spinning_worker_thread():
    import threading

    spinner = threading.Thread(target=_spin, args=(0.3,))
    spinner.start()
    waited = timing.settle(5.0)
    assert not spinner.is_alive() or waited >= 5.0, f"returned after {waited:.2f} s, spinner still busy"
    spinner.join()
    assert timing.settle(5.0) < 1.0  # quiet now: one or a few windows


def test_each_contenders_block_starts_after_the_previous_ones_threads_went_quiet():
    """A contender whose library leaves a worker thread spinning (numpy's OpenBLAS does, ~0.1 s)
    must not have that thread's CPU use land on the next contender's samples."""
    import threading

    spinners, overlaps = [], []

    def leaves_a_spinner():
        t = threading.Thread(target=_spin, args=(0.15,))
        t.start()
        spinners.append(t)

    def next_one():
        overlaps.append(any(t.is_alive() for t in spinners))

    a = timing.Contender(lambda f: (f(), 0.1)[1], leaves_a_spinner)
    b = timing.Contender(lambda f: (f(), 0.1)[1], next_one)
    budget = Budget(time_s=0.2, work=0, min_reps=2, max_reps=4, max_time_s=10, warmup=0)
    timing.measure_all([a, b], budget=budget)
    for t in spinners:
        t.join()
    samples = overlaps[2:]  # after b's own warm-up and calibration, which run back to back with a's
    assert samples and not any(samples)


def test_a_failing_contender_gets_its_exception_and_the_others_still_run():
    def boom():
        raise RuntimeError("library broke")
    ok = timing.Contender(lambda f: (f(), 0.1)[1], lambda: None)
    bad = timing.Contender(lambda f: (f(), 0.1)[1], boom)
    s, err = timing.measure_all([ok, bad], budget=timing.TINY)
    assert s.n == 3 and isinstance(err, RuntimeError)
    with pytest.raises(RuntimeError, match="library broke"):
        measure(bad.timer, bad.fn, budget=timing.TINY)


class RecordingCPU(CPUBackend):
    """The real CPU backend, logging synchronizations and op calls."""

    def __init__(self):
        super().__init__(0)
        self.log = []

    def synchronize(self):
        self.log.append("sync")

    def run(self, spec, out, *inputs):
        self.log.append(spec.op)
        super().run(spec, out, *inputs)


def test_every_timed_call_is_bracketed_by_synchronization():
    be = RecordingCPU()
    rec = bench.run_case(be, Case.make("matmul", "float32", M=8, N=8, K=8), budget=timing.TINY)
    assert rec["status"] == "ok"
    # the log must be a sequence of timed windows: sync, one or more matmuls, sync
    windows = "".join("s" if e == "sync" else "m" for e in be.log)
    assert re.fullmatch(r"(sm+s)+", windows), windows
    assert windows.count("sm") == 2 + 3  # warm-up, calibration, then TINY's 3 samples


class SkipsAfterWarmup(CPUBackend):
    """Computes the warm-up call only: later calls return without writing the output."""

    def __init__(self):
        super().__init__(0)
        self.calls = 0

    def run(self, spec, out, *inputs):
        self.calls += 1
        if self.calls == 1:
            super().run(spec, out, *inputs)


def test_timed_work_that_did_not_run_is_caught():
    rec = bench.run_case(SkipsAfterWarmup(), Case.make("matmul", "float32", M=16, N=16, K=16),
                         budget=timing.TINY)
    assert rec["status"] == "invalid"
    assert "read back after timing" in rec["reason"]


class WrongMatmul(CPUBackend):
    def run(self, spec, out, *inputs):
        super().run(spec, out, *inputs)
        out.buf[:4] = 0  # clobber the first float


def test_wrong_result_is_caught():
    rec = bench.run_case(WrongMatmul(0), Case.make("matmul", "float32", M=16, N=16, K=16),
                         budget=timing.TINY)
    assert rec["status"] == "invalid"


class NoAttention(CPUBackend):
    def supports(self, spec):
        return Support(False, "no attention here") if spec.op == "attention" else super().supports(spec)


def test_declined_case_is_reported_not_timed():
    case = Case.make("attention", "float32", B=1, Hq=2, Hkv=1, Sq=4, Sk=4, D=8, causal=True)
    rec = bench.run_case(NoAttention(0), case, budget=timing.TINY)
    assert (rec["status"], rec["reason"]) == ("unsupported", "no attention here")
    assert "median_s" not in rec


def test_result_record_has_every_documented_field():
    cpu = accel.get_backend("cpu")
    from accel.conformance.bench.baselines import for_backend

    rec = bench.run_case(cpu, Case.make("matmul", "float32", M=32, N=32, K=32), budget=timing.TINY,
                         baselines=for_backend(cpu))
    for key in ("id", "op", "dtype", "params", "flops", "bytes", "intensity", "median_s", "iqr_s",
                "min_s", "reps", "gflops", "gbs", "roofline_efficiency", "validation", "baselines",
                "best_baseline", "ratio_to_best", "status"):
        assert key in rec, key
    numpy_base = next(b for b in rec["baselines"] if b["name"] == "numpy")
    assert numpy_base["status"] == "ok" and numpy_base["version"] == np.__version__
    best = min(b["median_s"] for b in rec["baselines"] if b["status"] == "ok")
    assert rec["ratio_to_best"] == pytest.approx(best / rec["median_s"])


@pytest.mark.parametrize("case", bench.cases("quick"), ids=lambda c: c.id)
def test_every_quick_case_builds_a_valid_spec_and_inputs(case):
    spec = case.spec()
    host = case.host_inputs()
    assert spec.flops >= 0 and spec.bytes > 0
    assert len(host) == {"matmul": 2, "attention": 4, "quantize": 1, "dequantize": 1, "qmatmul": 2,
                         "scaled_matmul": 5}[case.op]


def test_full_profile_cases_are_valid_specs_covering_every_op():
    full = bench.cases("full")
    assert {c.op for c in full} == set(accel.spec.OPS)
    assert all(c.spec().flops >= 0 for c in full)
    assert max(c.spec().flops for c in full if c.op == "matmul") == 2 * 2048 ** 3


def test_unknown_op_and_profile_are_typed_errors():
    with pytest.raises(accel.ArgumentError, match="sizes"):
        bench.cases("huge")
    with pytest.raises(accel.ArgumentError, match="ops"):
        bench.cases("quick", ["conv"])
    with pytest.raises(accel.ArgumentError, match="op"):
        Case.make("conv", "float32")


def test_spread_above_a_quarter_of_the_median_is_flagged_noisy():
    assert bench.noisy({"status": "ok", "median_s": 1.0, "iqr_s": 0.3})
    assert not bench.noisy({"status": "ok", "median_s": 1.0, "iqr_s": 0.2})
    assert not bench.noisy({"status": "unsupported"})


@needs_opencl
def test_an_opencl_case_is_timed_on_the_device_and_validated():
    be = accel.get_backend("opencl:0")
    t0 = time.perf_counter()
    rec = bench.run_case(be, Case.make("matmul", "float32", M=64, N=64, K=64), budget=timing.TINY)
    wall = time.perf_counter() - t0
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["validation"]["rel_err"] < 1e-5
    assert 0 < rec["min_s"] <= rec["median_s"] <= wall  # device seconds from profiling events


def test_a_machine_where_other_processes_use_cpu_is_busy():
    assert not bench.busy({"load": {"others_cores": 0.2}})
    assert bench.busy({"load": {"others_cores": 0.9}})
    assert not bench.busy({"load": {"others_cores": None}}) and not bench.busy({})


def test_cpu_watch_separates_this_process_from_the_others():
    watch = bench.CPUWatch()
    cpu0, t0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < 0.3:  # burn 0.3 s of this process's own CPU time
        sum(range(1000))
    # however loaded the machine is, own cores = our CPU seconds per wall second
    expected_own = (time.process_time() - cpu0) / (time.perf_counter() - t0)
    use = watch.usage()
    if use["machine_cores"] is None:
        pytest.skip("no /proc/stat on this OS")
    assert use["own_cores"] == pytest.approx(expected_own, abs=0.15)
    assert use["machine_cores"] >= use["own_cores"] - 0.1  # the machine's busy time includes ours
    assert use["others_cores"] == pytest.approx(max(0.0, use["machine_cores"] - use["own_cores"]), abs=0.02)


def test_every_profile_includes_the_portability_set():
    shared = {c.id for c in bench.portability_cases()}
    assert shared <= {c.id for c in bench.cases("quick")} and shared <= {c.id for c in bench.cases("full")}
    assert {c.op for c in bench.portability_cases()} == set(accel.spec.OPS)


_PINNED_CHILD = """
import os, numpy as np, accel
from accel.conformance.bench.timing import pin_pocl_threads
print("pinned", pin_pocl_threads())
be = accel.get_backend("opencl:0")
accel.matmul(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32), backend=be)
single = 0
for t in os.listdir("/proc/self/task"):
    allowed = [l for l in open(f"/proc/self/task/{t}/status") if l.startswith("Cpus_allowed_list")][0]
    single += "," not in allowed and "-" not in allowed.split(":")[1]
print("single-cpu threads", single)
"""


@needs_opencl
def test_bench_commands_pin_pocl_workers_unless_told_otherwise():
    """pin_pocl_threads sets POCL_AFFINITY=1 before PoCL starts, and PoCL's worker threads then
    run on one CPU each; a POCL_AFFINITY the user set is left as it is."""
    import os
    import subprocess
    import sys

    cpus = os.cpu_count() or 1
    if cpus < 2 or not set(range(cpus)) <= os.sched_getaffinity(0):
        pytest.skip("pinning needs a process allowed on every CPU, and more than one")
    env = {k: v for k, v in os.environ.items() if k != "POCL_AFFINITY"}
    run = lambda e: subprocess.run([sys.executable, "-c", _PINNED_CHILD], env=e, capture_output=True,  # noqa: E731
                                   text=True, timeout=300)
    pinned, told = run(env), run({**env, "POCL_AFFINITY": "0"})
    assert "pinned True" in pinned.stdout, pinned.stdout + pinned.stderr
    assert int(pinned.stdout.split("single-cpu threads")[1]) >= 2, pinned.stdout
    assert "pinned False" in told.stdout and "single-cpu threads 0" in told.stdout, told.stdout + told.stderr
