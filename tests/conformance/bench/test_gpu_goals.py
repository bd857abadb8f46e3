"""The speed-goal script of the GPU run (accel.conformance.bench.gpu_goals) runs to its end on any
machine: where no CUDA device exists it writes a result file saying why and exits 1, so the
script itself (imports, arguments, output) is checked before a GPU session depends on it."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

import accel
from accel.conformance.bench import gpu_goals
from accel.tensor import Tensor
from markers import OPENCL_DEVICES, import_cupy, needs_opencl


def test_without_a_cuda_device_it_says_why_and_fails(tmp_path):
    status = next(s for s in accel.backends() if s.name == "cuda")
    if status.available:
        pytest.skip("a CUDA device is present: the GPU run itself measures the goals")
    out = tmp_path / "goals.json"
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.bench.gpu_goals", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "accel.gpu_speed_goals/2" and doc["goals"] == []
    assert doc["error"].startswith("BackendUnavailable: ") and status.reason in doc["error"]
    assert "nothing measured" in proc.stdout


@pytest.mark.parametrize("args", [[], ["a.json", "b.json"], ["a.json", "q8_0"]])
def test_usage_error_exits_2(args):
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.bench.gpu_goals", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_time_all_times_every_contender_and_keeps_a_failure_to_itself():
    # interleaved rounds of accel.conformance.bench.timing.measure_all on a virtual clock that each contender
    # advances by its own fixed duration, so the medians are known exactly: a contender that
    # raises is reported as its exception, the others still get their times, wherever it stands
    be = accel.get_backend("cpu")
    clock = [0.0]

    def broken():
        raise ZeroDivisionError("planted")

    def two_ms():
        clock[0] += 0.002

    def four_ms():
        clock[0] += 0.004

    def timer(fn):
        start = clock[0]
        fn()
        return clock[0] - start

    times = gpu_goals.time_all(be, {"2 ms": two_ms, "broken": broken, "4 ms": four_ms}, timer)
    assert times["2 ms"] == pytest.approx(0.002) and times["4 ms"] == pytest.approx(0.004)
    assert isinstance(times["broken"], ZeroDivisionError)
    for order in ({"broken": broken, "2 ms": two_ms}, {"2 ms": two_ms, "broken": broken}):
        times = gpu_goals.time_all(be, order, timer)
        assert isinstance(times["broken"], ZeroDivisionError)
        assert times["2 ms"] == pytest.approx(0.002)


def test_time_all_times_on_the_backends_clock_by_default():
    # without a timer it uses backend.time (here the CPU backend's host clock around the work)
    times = gpu_goals.time_all(accel.get_backend("cpu"), {"2 ms": lambda: time.sleep(0.002)})
    assert 0.002 <= times["2 ms"] < 1


def test_an_entry_judges_its_first_run_and_records_failed_alternatives():
    runs = {"auto": (2.0, 1e-6), "alt": (1.0, 2e-6), "bad": (RuntimeError("no launch"), float("nan"))}
    e = gpu_goals.entry("goal", 0.5, 1e-5, "base", 1.0, runs)
    assert (e["judged"], e["ratio"], e["rel_err"]) == ("auto", 0.5, 1e-6)
    assert e["alternatives"]["alt"]["ratio"] == 1.0
    assert e["alternatives"]["bad"] == {"error": "RuntimeError: no launch"}
    with pytest.raises(RuntimeError, match="no launch"):  # the judged run failing fails the goal
        gpu_goals.entry("goal", 0.5, 1e-5, "base", 1.0, {"bad": runs["bad"], "auto": runs["auto"]})


@pytest.mark.parametrize("x_format", [[], ["q8_0"]])
def test_the_profiler_run_without_a_cuda_device_says_why_and_fails(x_format):
    status = next(s for s in accel.backends() if s.name == "cuda")
    if status.available:
        pytest.skip("a CUDA device is present: gpu_check.sh profiles the GEMV there")
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.bench.gpu_goals", "--gemv-once",
                           *x_format], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no GEMV run: BackendUnavailable" in proc.stderr


@pytest.mark.parametrize("survey,expected", [
    ({"decode_survey": {"method": "CUDA graph", "runs": {
        "impl=auto (qgemv, GPU_GEMV)": {"seconds": 4e-6, "ratio": 0.5, "rel_err": 1e-7},
        "qgemv {'RN': 2}": {"error": "CUDARuntimeError: cudaErrorIllegalAddress"}}}},
     ["impl=auto (qgemv, GPU_GEMV): 0.004 ms, ratio 0.500",
      "qgemv {'RN': 2}: CUDARuntimeError: cudaErrorIllegalAddress"]),
    ({"decode_survey_error": "OutOfMemoryError: out of memory"},
     ["(not a goal): OutOfMemoryError: out of memory"]),
], ids=["alternative failed", "survey failed"])
def test_the_report_prints_every_goal_and_the_survey_whatever_failed(capsys, survey, expected):
    goal = gpu_goals.entry("q4_0 GEMV", 0.6, 1e-4, "copy", 1e-5,
                           {"impl=auto": (2e-5, 1e-7), "alt": (RuntimeError("no launch"), float("nan"))})
    goal.update(met=False, **survey)
    gpu_goals.print_report({"goals": [goal, {"name": "attention", "error": "KeyError: 'x'", "met": False}]})
    printed = capsys.readouterr().out
    assert "NOT MET  q4_0 GEMV: ratio 0.500" in printed and "alt: RuntimeError: no launch" in printed
    assert "NOT MET  attention: KeyError: 'x'" in printed and "decode survey" in printed
    for line in expected:
        assert line in printed, line


def test_an_entry_takes_the_ratio_it_is_given():
    # the GEMV goal's ratios are bandwidths: bytes over seconds over the copy bandwidth
    e = gpu_goals.entry("gemv", 0.6, 1e-4, "copy", 1.0, {"auto": (2.0, 0.0), "alt": (4.0, 0.0)},
                        ratio=lambda s: 8.0 / s / 2.0)
    assert e["ratio"] == 2.0 and e["alternatives"]["alt"]["ratio"] == 1.0


@needs_opencl
def test_the_read_probe_reads_every_word_once():
    # the GEMV goal's read ceiling (gpu_goals.READ_PROBE) on an OpenCL device: each work-item's
    # word is the xor of exactly the 16-byte words a grid-stride loop gives it (3 groups of 64:
    # 1000 words leave a tail after its loop of 4 loads in flight)
    be = accel.get_backend(OPENCL_DEVICES[0])
    words = np.random.default_rng(0).integers(0, 2**32, size=(1000, 4), dtype=np.uint32)
    a = Tensor(be, be.upload(words.view(np.int32)), (4000,), "int32")
    out = Tensor.empty(be, (192,), "int32")
    be.launch(be.compile(gpu_goals.READ_PROBE, "read_probe"), (3, 1, 1), (64, 1, 1), [a, out, np.int64(1000)])
    want = [np.bitwise_xor.reduce(words[me::192].ravel()) for me in range(192)]
    assert (out.numpy().view(np.uint32) == want).all()


@pytest.mark.parametrize("arch", ["sm_90", "gfx90a"])
def test_the_read_probe_builds_for_gpus(arch):
    from gpu_toolchains import need

    from accel.backends.cupy import build as cupy_build

    need(arch)
    r = cupy_build.build_kernel(gpu_goals.READ_PROBE, "read_probe", arch, 32 if arch.startswith("sm") else 64)
    assert r.resources["read_probe"].spills == 0


def test_the_report_prints_the_probes_without_an_error_figure(capsys):
    goal = gpu_goals.entry("q4_0 GEMV", 0.6, 1e-4, "copy", 1e-5, {"impl=auto": (2e-5, 1e-7)})
    goal.update(met=False, probes=gpu_goals.records(
        {gpu_goals.PROBES["read"]: (1e-5, None), gpu_goals.PROBES[1]: (RuntimeError("no launch"), None)},
        lambda s: 1e-5 / s))
    gpu_goals.print_report({"goals": [goal]})
    printed = capsys.readouterr().out
    assert f"{gpu_goals.PROBES['read']}: 0.010 ms, ratio 1.000\n" in printed
    assert f"{gpu_goals.PROBES[1]}: RuntimeError: no launch" in printed


def test_the_probes_rely_only_on_cupy_api_that_exists():
    # gpu_goals.gemv_probes runs only on a GPU: what it calls on CuPy must at least exist here.
    # CuPyBackend.compile returns RawModule.get_function's RawKernel, whose CUfunction handle is
    # .kernel.ptr (a RawKernel has no .ptr of its own), with the static shared memory and
    # registers the probes record
    cupy = import_cupy()
    from cupy.cuda.function import Function
    from cupy_backends.cuda.api import driver

    assert "RawKernel" in cupy.RawModule.get_function.__doc__.split("Returns:")[1]
    assert not hasattr(cupy.RawKernel, "ptr") and hasattr(Function, "ptr")
    assert all(hasattr(cupy.RawKernel, a) for a in ("kernel", "shared_size_bytes", "num_regs"))
    assert "(intptr_t func, int blockSize, size_t dynamicSMemSize)" in \
        driver.occupancyMaxActiveBlocksPerMultiprocessor.__doc__


def test_prebuild_fills_the_cache_the_backend_reads(tmp_path, monkeypatch):
    # the goals compile their GEMV parameter sets at once; the backend's own build of the same
    # variant (CuPyBackend._build -> build_kernel, any kernel name of the program) then hits the
    # cache (an empty, private one here) instead of compiling again
    from gpu_toolchains import need

    from accel import kernels
    from accel.backends.cupy import build as cupy_build

    need("sm_90")
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    variants = [kernels.quant("q4_0", "float32", {**kernels.GPU_GEMV, "RUNS_TEAMS": t}) for t in (3, 5)]
    gpu_goals.prebuild("sm_90", 32, variants)
    for v in variants:
        r = cupy_build.build_kernel(kernels.program_text(v.source), "qgemv_runs", "sm_90", 32,
                                   options=tuple(v.options()))
        assert r.ok and r.cached and "qgemv_runs" in r.resources
