"""``accel tune``: candidates are valid for their device kind, the search stores the fastest
correct parameters per device, and a new backend instance on that device uses them."""
from __future__ import annotations

import pytest

from test_opencl_common import FIRST, needs_device

from accel.backends.opencl import OpenCLBackend
from accel.backends.opencl.params import DEFAULTS, candidates, params_for
from accel.conformance.bench.tune import PROBLEMS, tune
from accel.cli import build_parser, main

@pytest.mark.parametrize("kind,lanes", [("cpu", 16), ("cpu", 8), ("gpu", 1)])
def test_candidates_respect_vector_width(kind, lanes):
    for op in PROBLEMS:
        cands = candidates(op, kind, lanes)
        assert cands and len({tuple(sorted(c.items())) for c in cands}) == len(cands)
        for c in cands:
            assert c["VW"] == lanes
            if "TN" in c and not c.get("LOCAL_TILE"):
                assert c["TN"] % lanes == 0
            if "BQ" in c:
                assert c["BQ"] % lanes == 0
        assert set(DEFAULTS[kind][op]) - {"WG"} <= set(cands[0]) | {"WG"}


@needs_device
def test_tune_stores_the_best_and_new_instances_use_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    be = OpenCLBackend(0)
    lines = []
    found = tune(be, ["gemv"], repeat=1, echo=lines.append)
    assert set(found) == {"gemv"}
    assert any("best" in ln for ln in lines)
    assert params_for(be.dev)["gemv"] == found["gemv"]
    assert OpenCLBackend(0).params["gemv"] == found["gemv"]
    assert be.params["gemv"] == found["gemv"]  # the tuned instance was reset to the stored set


@needs_device
def test_tune_command_is_registered_and_validates_ops(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    args = build_parser().parse_args(["tune", "--backend", FIRST[0], "--ops", "gemv"])
    assert args.ops == ["gemv"] and args.backend == FIRST[0]
    assert main(["tune", "--ops", "matmul,bogus"]) == 2  # a typed error, printed as one line
    assert "--ops" in capsys.readouterr().err
    assert main(["tune", "--backend", "cpu", "--ops", "gemv"]) == 2
    assert "--backend" in capsys.readouterr().err


@needs_device
def test_stored_parameters_the_device_cannot_take_fall_back_to_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import save_tuned, safe_lanes

    dev = enumerate_devices()[0]
    default = params_for(dev)["matmul"]
    save_tuned(dev, "matmul", dict(default, VW=2 * safe_lanes(dev)))  # wider than the compiler takes
    assert params_for(dev)["matmul"] == default
    save_tuned(dev, "matmul", dict(default, TN=default["VW"] + 1))  # not a whole number of vectors
    assert params_for(dev)["matmul"] == default
    for broken in ({"VW": 0}, {"TN": "16"}, {"TM": 0}, dict(default, TM=5)):  # hand-edited files
        save_tuned(dev, "matmul", broken)
        assert params_for(dev)["matmul"] == default

    other = next(c for c in candidates("matmul", "cpu", safe_lanes(dev)) if c != default)
    save_tuned(dev, "matmul", other)  # what tune itself stores is used
    assert params_for(dev)["matmul"] == other
