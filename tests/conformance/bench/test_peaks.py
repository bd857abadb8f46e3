"""Device peaks: measured, cached per device on disk, never trusted when damaged."""
import dataclasses
import json
import math

import pytest

import accel
from accel.conformance.bench import peaks as P
from accel.backends.cpu import CPUBackend
from markers import needs_opencl


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    return tmp_path


def positive(x: float) -> bool:
    """A measured rate: finite and above a floor no machine is near (1e-3 GFLOP/s or GB/s), which
    catches a unit error; how fast is for the benchmarks, not the tests."""
    return math.isfinite(x) and x > 1e-3


def cached_file(cache, backend):
    return cache / "peaks" / f"{P.device_key(backend)}.json"


def test_cpu_peaks_are_measured_then_read_from_the_cache(cache):
    cpu = accel.get_backend("cpu")
    first = P.peaks(cpu)
    assert positive(first.gflops) and positive(first.gbs)
    path = cached_file(cache, cpu)
    assert json.loads(path.read_text())["gflops"] == first.gflops
    # plant known values: a second call must return them rather than measure again
    path.write_text(json.dumps({"gflops": 123.0, "gbs": 4.5, "method": "planted", "measured": "x"}))
    assert P.peaks(cpu) == P.Peaks(123.0, 4.5, "planted", "x")
    assert P.peaks(cpu, refresh=True).method != "planted"


@pytest.mark.parametrize("damage", ["{", '{"gflops": "fast"}', '{"gflops": 0, "gbs": 0, "method": "", "measured": ""}'])
def test_damaged_cache_is_remeasured_and_rewritten(cache, damage):
    cpu = accel.get_backend("cpu")
    path = cached_file(cache, cpu)
    path.parent.mkdir(parents=True)
    path.write_text(damage)
    p = P.peaks(cpu)
    assert positive(p.gflops) and p.method != ""
    assert json.loads(path.read_text())["gflops"] == p.gflops


def test_cache_key_changes_with_the_driver():
    a = CPUBackend(0)
    b = CPUBackend(0)
    b.info = dataclasses.replace(b.info, driver="another driver")
    assert P.device_key(a) != P.device_key(b)
    assert "/" not in P.device_key(a) and " " not in P.device_key(a)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    from accel.host import cache_root

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x"
    monkeypatch.delenv("ACCEL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "accel"


@needs_opencl
def test_opencl_peaks_run_through_the_backends_compile_and_launch(cache):
    be = accel.get_backend("opencl")
    p = P.measure_peaks(be)
    assert positive(p.gflops) and positive(p.gbs)
    assert p.method.startswith("opencl")


@pytest.mark.parametrize("target", ["sm_90", "gfx90a"])
def test_gpu_peak_kernels_compile_for_real_targets(target):
    from accel.kernels import toolchains
    from gpu_toolchains import need  # skips (or fails in CI) without the compiler

    need(target)
    from accel import kernels

    sources = [P._COPY] + [P._fma_source(v, c) for v, c in P._FMA_VARIANTS["cuda"]]
    for src in sources:
        r = toolchains.compile_source(kernels.program_text(src), target)
        assert r.ok, r.log
        assert r.resources and all(res.spills == 0 for res in r.resources.values()), r.resources


def test_update_keeps_the_higher_of_cached_and_measured(cache):
    cpu = accel.get_backend("cpu")
    path = cached_file(cache, cpu)
    path.parent.mkdir(parents=True)
    # a cached compute roof no machine reaches, and a bandwidth far below any real one
    path.write_text(json.dumps({"gflops": 1e9, "gbs": 1e-3, "method": "old", "measured": "x"}))
    p = P.peaks(cpu, update=True)
    assert p.gflops == 1e9 and p.gbs > 1e-3
    assert json.loads(path.read_text())["gbs"] == p.gbs


def test_a_peak_kept_from_the_cache_keeps_its_date(cache):
    cpu = accel.get_backend("cpu")
    path = cached_file(cache, cpu)
    path.parent.mkdir(parents=True)
    # a cached roof no run here reaches: kept, with the date it was measured, not today's
    path.write_text(json.dumps({"gflops": 1e9, "gbs": 1e9, "method": "m", "measured": "long ago"}))
    kept = P.peaks(cpu, update=True)
    assert (kept.gflops, kept.gbs, kept.measured) == (1e9, 1e9, "long ago")
    path.write_text(json.dumps({"gflops": 1e9, "gbs": 1e-9, "method": "m", "measured": "long ago"}))
    mixed = P.peaks(cpu, update=True)
    assert mixed.measured.startswith("GFLOP/s long ago, GB/s ") and mixed.gbs > 1e-9
