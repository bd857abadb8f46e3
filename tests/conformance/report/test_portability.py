"""Pennycook's performance portability metric and how result files feed it."""
import pytest

import accel
from accel.conformance.report import portability as P


def test_harmonic_mean_by_hand():
    assert P.performance_portability({"a": 0.5, "b": 0.25}) == pytest.approx(2 / (2 + 4))
    assert P.performance_portability({"a": 0.8}) == pytest.approx(0.8)
    assert P.performance_portability({"a": 1.0, "b": 1.0, "c": 1.0}) == pytest.approx(1.0)


def test_unsupported_platform_gives_zero_and_unknown_gives_none():
    assert P.performance_portability({"a": 0.9, "b": 0.0}) == 0.0
    assert P.performance_portability({"a": 0.9, "b": None}) is None


def test_bad_efficiencies_are_typed_errors():
    with pytest.raises(accel.ArgumentError, match="efficiencies"):
        P.performance_portability({})
    with pytest.raises(accel.ArgumentError, match="efficiencies"):
        P.performance_portability({"a": -0.1})


def doc(machine, backend, cases):
    return {"schema": "accel.bench/1", "machine": {"label": machine}, "backend": backend, "cases": cases}


def case(cid, status="ok", t=1.0, eff=0.5, baselines=()):
    op, dtype = cid.split()[:2]
    return {"id": cid, "op": op, "dtype": dtype, "status": status, "median_s": t,
            "roofline_efficiency": eff,
            "baselines": [{"name": n, "status": "ok", "median_s": bt} for n, bt in baselines]}


def test_application_efficiency_is_best_observed_over_accel():
    assert P.application_efficiency(case("matmul float32", t=2.0, baselines=[("numpy", 1.0)])) == 0.5
    # accel faster than every baseline: it is the best observed, efficiency 1
    assert P.application_efficiency(case("matmul float32", t=1.0, baselines=[("numpy", 3.0)])) == 1.0
    assert P.application_efficiency(case("matmul float32", t=1.0)) is None


def test_per_case_and_per_op_over_two_machines():
    docs = [doc("box1", "cuda:0", [case("matmul float32 N=1", eff=0.8, t=1, baselines=[("torch", 0.5)]),
                                   case("attention float32 S=1", eff=0.4, t=1, baselines=[("torch", 1)])]),
            doc("box2", "opencl:0", [case("matmul float32 N=1", eff=0.2, t=1, baselines=[("numpy", 0.25)]),
                                     case("attention float32 S=1", status="unsupported")])]
    rows = {r.problem: r for r in P.per_case(docs)}
    mm = rows["matmul float32 N=1"]
    assert mm.architectural == {"box1/cuda:0": 0.8, "box2/opencl:0": 0.2}
    assert mm.pp_arch == pytest.approx(2 / (1 / 0.8 + 1 / 0.2))
    assert mm.pp_app == pytest.approx(2 / (2 + 4))
    assert rows["attention float32 S=1"].pp_arch == 0.0
    ops = {r.problem: r for r in P.per_op(list(rows.values()))}
    assert ops["matmul"].pp_arch == pytest.approx(mm.pp_arch)
    assert ops["attention"].pp_arch == 0.0


def test_failed_conformance_zeroes_the_platform():
    docs = [doc("box1", "cpu:0", [case("matmul float16 N=1", eff=0.9)]),
            doc("box1", "opencl:0", [case("matmul float16 N=1", eff=0.9)])]
    conf = [{"schema": "accel.conformance/1", "machine": {"label": "box1"}, "backend": "opencl:0",
             "cases": [{"op": "matmul", "dtype": "float16", "status": "failed"}]}]
    row = P.per_case(docs, conf)[0]
    assert row.architectural["box1/opencl:0"] == 0.0 and row.pp_arch == 0.0
    assert P.per_case(docs)[0].pp_arch == pytest.approx(0.9)


def test_case_missing_on_a_platform_is_unknown_not_unsupported():
    docs = [doc("a", "cpu:0", [case("matmul float32 N=9")]), doc("b", "cpu:0", [])]
    row = P.per_case(docs)[0]
    assert row.architectural["b/cpu:0"] is None and row.pp_arch is None


def test_conformance_filed_by_quant_format_matches_the_bench_case():
    deq = {**case("dequantize uint8 rows=8", eff=0.5), "params": {"fmt": "q4_0"}}
    docs = [doc("box1", "opencl:0", [deq])]
    conf = [{"machine": {"label": "box1"}, "backend": "opencl:0",
             "cases": [{"op": "dequantize", "dtype": "q4_0", "status": "failed"}]}]
    assert P.per_case(docs, conf)[0].architectural["box1/opencl:0"] == 0.0
    conf[0]["cases"][0]["dtype"] = "q8_0"  # another format's failure does not count
    assert P.per_case(docs, conf)[0].architectural["box1/opencl:0"] == 0.5
