"""The pytest-benchmark suite: run on demand only.

Files here are named ``bench_*.py`` so plain ``pytest`` never collects them; they are collected
when this directory (or a file in it) is named on the command line:

    pytest tests/benchmarks --benchmark-autosave          # record
    pytest tests/benchmarks --benchmark-compare           # compare with the last record

ACCEL_BENCH_BACKENDS (comma-separated devices, default: cpu and opencl:0 when available) and
ACCEL_BENCH_SIZES (quick or full, default quick) choose what runs. Ratios against the goals of
the issues are printed at the end of the session.
"""
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_LINES = pytest.StashKey[list]()


def _requested(config: pytest.Config) -> bool:
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    # a bench file named explicitly is collected by pytest itself; a directory walk needs this hook
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path) and _requested(parent.config)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``bench_device``: each device to benchmark; ``bench_case``: each case of the profile."""
    if "bench_device" in metafunc.fixturenames:
        metafunc.parametrize("bench_device", bench_devices(), scope="module")
    if "bench_case" in metafunc.fixturenames:
        from accel.conformance.bench import suite as bench

        cases = bench.cases(bench_sizes())
        metafunc.parametrize("bench_case", cases, ids=[c.id.replace(" ", "-") for c in cases])


def bench_devices() -> list[str]:
    env = os.environ.get("ACCEL_BENCH_BACKENDS")
    if env:
        return [d.strip() for d in env.split(",") if d.strip()]
    import accel

    return ["cpu"] + [f"{s.name}:0" for s in accel.backends() if s.available and s.name == "opencl"]


def bench_sizes() -> str:
    return os.environ.get("ACCEL_BENCH_SIZES", "quick")


@pytest.fixture(scope="session")
def opencl():
    """opencl:0, or a skip saying why there is none."""
    import accel

    status = next(s for s in accel.backends() if s.name == "opencl")
    if not status.available:
        pytest.skip(f"OpenCL backend unavailable: {status.reason}")
    return accel.get_backend("opencl:0")


@pytest.fixture(scope="session")
def ratio_lines(pytestconfig) -> list:
    """Lines printed in the terminal summary (ratios against the issues' goals)."""
    return pytestconfig.stash.setdefault(_LINES, [])


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_LINES, [])
    if lines:
        terminalreporter.section("accel overhead and speed ratios")
        for line in lines:
            terminalreporter.write_line(line)
