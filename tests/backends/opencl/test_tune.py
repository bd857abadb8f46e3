"""``accel tune``: candidates are valid for their device kind, the search stores the fastest
correct parameters per device, and a new backend instance on that device uses them."""
from __future__ import annotations

import pytest

from markers import needs_opencl
from opencl_common import FIRST

from accel.backends.opencl import OpenCLBackend
from accel.backends.opencl.params import DEFAULTS, candidates, params_for
from accel.conformance.bench.tune import PROBLEMS, tune
from accel.__main__ import build_parser, main

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


@needs_opencl
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


@needs_opencl
def test_tune_command_is_registered_and_validates_ops(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    args = build_parser().parse_args(["tune", "--backend", FIRST[0], "--ops", "gemv"])
    assert args.ops == ["gemv"] and args.backend == FIRST[0]
    assert main(["tune", "--ops", "matmul,bogus"]) == 2  # a typed error, printed as one line
    assert "--ops" in capsys.readouterr().err
    assert main(["tune", "--backend", "cpu", "--ops", "gemv"]) == 2
    assert "--backend" in capsys.readouterr().err


@needs_opencl
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


def test_gemv_problems_cover_float_and_quantized_x():
    from accel.conformance.bench.tune import _cases

    for op, x_fmt in (("gemv", "q8_0"), ("kgemv", "q8_k")):
        for small in (True, False):
            specs = [c.spec() for c in _cases(op, small)]
            assert [s.x_fmt.name if s.x_fmt else None for s in specs] == [None, x_fmt]
            assert {s.M for s in specs} == ({3} if small and op == "kgemv" else {1})


def test_cpu_kgemv_candidates_keep_the_default_rows_of_x():
    """RM only matters at M > 1, which the M = 1 timing cannot see: tune keeps the default."""
    cands = candidates("kgemv", "cpu", 16)
    assert {c["RM"] for c in cands} == {DEFAULTS["cpu"]["kgemv"]["RM"]}
    assert len({c["XRN"] for c in cands}) > 1 and len({c["RN"] for c in cands}) > 1


@needs_opencl
def test_tune_kgemv_chooses_qgemv_kx_rows_and_the_planner_uses_them(tmp_path, monkeypatch):
    """Two candidates that differ only in XRN (qgemv_kx's rows at M = 1): the stored winner's
    XRN is the M = 1 tile of the x_format plan on a new backend instance."""
    import accel.spec as S
    from accel.backends.opencl import params as P
    from accel.backends.plan import plan_for
    from accel.formats import get_format

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    be = OpenCLBackend(0)
    if be.dev.kind != "cpu":
        pytest.skip("XRN is a CPU-device parameter (GPUs plan qmatmul_kx)")
    full = P.candidates
    pair = [c for c in full("kgemv", "cpu", P.safe_lanes(be.dev)) if c["RN"] == 2 and c["PFN"]][:2]
    assert len(pair) == 2 and pair[0]["XRN"] != pair[1]["XRN"]
    monkeypatch.setattr(P, "candidates", lambda op, kind, lanes: pair if op == "kgemv" else full(op, kind, lanes))
    lines = []
    found = tune(be, ["kgemv"], repeat=1, echo=lines.append)
    assert found["kgemv"] in pair and sum(ln.startswith("  kgemv {") and ln.endswith(" ms") for ln in lines) == 2
    fresh = OpenCLBackend(0)
    assert fresh.params["kgemv"] == found["kgemv"]
    spec = S.qmatmul_spec((1, 4096), "float32", (64, 4096), get_format("q4_k"), "q8_k")
    launch = plan_for(spec, fresh.facts, fresh.params)[-1]
    assert launch.kernel == "qgemv_kx" and launch.variant.defines["RN"] == found["kgemv"]["XRN"]


@needs_opencl
def test_cpu_devices_with_16_lanes_take_more_gemv_rows(tmp_path, monkeypatch):
    """Untuned, a CPU device PoCL builds 16-lane vectors for (AVX-512) takes CPU_WIDE's rows per
    work-item in the GEMVs; other CPU devices keep the CPU defaults."""
    import accel.kernels as K
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import safe_lanes

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))  # nothing tuned
    for dev in [d for d in enumerate_devices() if d.kind == "cpu"]:
        wide = safe_lanes(dev) == 16
        p = params_for(dev)
        for op, changes in K.CPU_WIDE.items():
            base = DEFAULTS["cpu"][op]
            assert all(base.get(k) != v for k, v in changes.items())  # a change: the check can fail
            assert all((p[op].get(k) == v) == wide for k, v in changes.items()), (dev.name, op, p[op])


@needs_opencl
def test_gemv_operands_are_rotated_beyond_the_cache_as_the_benchmarks_do():
    from accel.conformance.bench.suite import CACHE_MULTIPLE, MAX_COPIES
    from accel.conformance.bench.tune import _cases, operand_sets

    be = OpenCLBackend(0)
    case = _cases("gemv", small=False)[0]
    cache = 8 << 20
    sets = operand_sets(be, case, cache)
    weights = {id(s[1]) for s in sets}  # each set its own weight
    assert len(weights) == len(sets)
    weight_bytes = case.spec().weight_bytes
    assert len(sets) * weight_bytes >= min(CACHE_MULTIPLE * cache, MAX_COPIES * weight_bytes)
    assert len(operand_sets(be, case, None)) == 1  # no cache known: one copy


@needs_opencl
def test_stored_parameters_can_be_shown_reset_and_are_recorded_in_results(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import save_tuned, safe_lanes, store_path

    dev = enumerate_devices()[0]
    other = next(c for c in candidates("matmul", "cpu", safe_lanes(dev)) if c != params_for(dev)["matmul"])
    save_tuned(dev, "matmul", other)
    assert json.loads(OpenCLBackend(0).versions()["opencl_tuned"]) == {"matmul": other}
    assert main(["tune", "--backend", FIRST[0], "--show"]) == 0
    shown = capsys.readouterr().out
    assert str(store_path(dev)) in shown and json.loads(shown.split("\n", 1)[1]) == {"matmul": other}
    assert main(["tune", "--backend", FIRST[0], "--reset"]) == 0
    assert "removed" in capsys.readouterr().out and not store_path(dev).exists()
    assert OpenCLBackend(0).versions()["opencl_tuned"] == "none"


@needs_opencl
def test_a_stored_set_the_kernels_ignore_is_neither_shown_nor_recorded_as_in_effect(
        tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import safe_lanes, save_tuned, store_path

    dev = enumerate_devices()[0]
    stale = {**params_for(dev)["qmatmul"], "RM": 3}  # no candidate has RM 3 (an older version's)
    assert stale not in candidates("qmatmul", dev.kind, safe_lanes(dev))
    save_tuned(dev, "qmatmul", stale)
    be = OpenCLBackend(0)
    assert be.params["qmatmul"]["RM"] != 3 and be.versions()["opencl_tuned"] == "none"
    assert main(["tune", "--backend", FIRST[0], "--show"]) == 0
    shown = capsys.readouterr().out
    assert "nothing stored applies" in shown and "stored but ignored" in shown
    assert json.loads(shown.split("ignored", 1)[1].split(":", 1)[1]) == {"qmatmul": stale}
    # an unreadable store is removed, and said to have held nothing readable
    store_path(dev).write_text("{not json")
    assert main(["tune", "--backend", FIRST[0], "--reset"]) == 0
    assert "held nothing accel could read" in capsys.readouterr().out
    assert not store_path(dev).exists()
