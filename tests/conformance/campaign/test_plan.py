"""accel campaign without Ray: the shard plan is the suite's own plan, fuzz shards reach campaign
scale and their failures reproduce from the printed line, repeats catch a flaky kernel, and
--resume refuses settings that differ from the campaign's."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import accel
from accel.backends.cpu import CPUBackend
from accel.__main__ import build_parser, main
from accel.conformance import properties, suite
from accel.conformance.campaign import node, store
from accel.conformance.campaign.cli import settings_from
from accel.conformance.campaign.plan import Settings, shards
from accel.conformance.case import Case
from accel.conformance.runner import run_case


def test_fixed_shards_are_the_suites_cases_in_order_then_one_search_per_target():
    settings = Settings(("cpu",), ops=("matmul", "quantize"), dtypes=("float16",), shard_size=5)
    plan = shards(settings)
    cases, targets = suite.planned("quick", 0, ["matmul", "quantize"], ["float16"])
    assert [cid for s in plan for cid in s.cases] == [c.id for c in cases]
    assert max(len(s.cases) for s in plan) == 5
    searches = [s for s in plan if not s.cases]
    assert [(s.op, s.dtype, s.examples, s.seed) for s in searches] == [
        (op, dt, properties.EXAMPLES["quick"], 0) for op, dt in targets]
    assert len({s.id for s in plan}) == len(plan)


def test_a_fuzz_campaign_of_24_seeds_draws_over_10000_cases_per_backend():
    plan = shards(Settings(("cpu",), profile="fuzz", seeds=24, examples=25))
    assert not any(s.cases for s in plan)
    assert len({(s.op, s.dtype, s.seed) for s in plan}) == len(plan)
    assert sum(s.size for s in plan) >= 10_000


def test_a_fuzz_failure_reproduces_from_its_repro_line(capsys):
    backend = accel.get_backend("planted_k_off_by_one")
    shard = shards(Settings(("planted_k_off_by_one",), profile="fuzz", seed=3, examples=5,
                            ops=("matmul",), dtypes=("float32",)))[0]
    got = node.run_shard(backend, shard)
    failed = [c for c in got["cases"] if c["status"] == "failed"]
    assert failed, got["cases"]
    repro = failed[-1]["repro"]
    assert repro.startswith("accel conformance --backend planted_k_off_by_one:0 --case ")
    case_id = repro.split("--case ", 1)[1].strip("'")
    assert main(["conformance", "--backend", "planted_k_off_by_one:0", "--case", case_id,
                 "--no-progress"]) == 1
    assert "1 failed" in capsys.readouterr().out


class EveryOtherCallWrong(CPUBackend):
    """The CPU reference with a race that shows on every second call: one output element off."""

    name = "flaky_in_this_test"

    def __init__(self, index: int = 0):
        super().__init__(index)
        self.runs = 0

    def run(self, spec, out, *inputs):  # each run of a case: the Tensor path, then compute()
        self.runs += 1
        super().run(spec, out, *inputs)

    def compute(self, spec, *arrays):
        res = super().compute(spec, *arrays)
        if self.runs % 2 == 0:
            res.reshape(-1)[0] += np.float32(1)
        return res


def test_repeats_fail_a_case_whose_verdict_changes_and_record_bit_identity():
    case = Case("matmul", "float32", "grid", {"a": (4, 8), "b": (8, 3), "data": "normal", "seed": 1})
    flaky = EveryOtherCallWrong()
    record = node.repeated(flaky, run_case(flaky, case), 3)
    assert record["repeat"] == {"runs": 3, "statuses": ["passed", "failed", "passed"],
                                "bit_identical": False}
    assert record["status"] == "failed" and record["reason"].startswith("flaky: ")
    cpu = accel.get_backend("cpu")
    steady = node.repeated(cpu, run_case(cpu, case), 3)
    assert steady["status"] == "passed" and steady["repeat"]["bit_identical"] is True
    table = store.repeatability([record, steady], 3)["by_op_dtype"]["matmul/float32"]
    assert table == {"cases": 2, "identical": 1, "flaky": 1, "bit_identical": False}


def _campaign_args(out, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["campaign", "--out", str(out), *argv])


def test_resume_takes_the_campaigns_settings_and_refuses_different_ones(tmp_path):
    started = Settings(("cpu",), profile="fuzz", seeds=3, repeat=2)
    previous = {"settings": started.to_json()}
    assert settings_from(_campaign_args(tmp_path, "--resume"), previous) == started
    assert settings_from(_campaign_args(tmp_path, "--resume", "--seeds", "3"), previous) == started
    with pytest.raises(accel.ArgumentError, match="--seeds.*3.*5"):
        settings_from(_campaign_args(tmp_path, "--resume", "--seeds", "5"), previous)
    with pytest.raises(accel.ArgumentError, match="--seeds.*--profile fuzz"):
        settings_from(_campaign_args(tmp_path, "--seeds", "5"), None)
    # a backend name nothing here knows is refused before Ray starts
    with pytest.raises(accel.ArgumentError, match="--backends.*cpu.*opencl.*'nope'"):
        settings_from(_campaign_args(tmp_path, "--backends", "cpu,nope"), None)
    # --bitwise alone repeats each case twice
    assert settings_from(_campaign_args(tmp_path, "--bitwise"), None).repeat == 2


def test_a_shard_record_survives_a_line_cut_short(tmp_path):
    store.append(tmp_path, "p", {"shard": "fixed-0000", "cases": [], "time_s": 0.1})
    with store.lines_path(tmp_path, "p").open("a") as f:
        f.write('{"shard": "fixed-0001", "cas')  # the driver killed mid-write
    assert list(store.finished(tmp_path, "p")) == ["fixed-0000"]


def test_bitwise_results_reach_the_report(tmp_path):
    from accel.conformance import results
    from accel.conformance.report import render

    settings = Settings(("cpu",), ops=("dequantize",), dtypes=("q8_0",), repeat=2, bitwise=True)
    plan = shards(settings)
    cpu = accel.get_backend("cpu")
    done = {s.id: node.run_shard(cpu, s, settings.repeat) for s in plan}
    worker = node.DeviceWorker("cpu").record()
    doc = store.platform_document({"key": "cpu-x", **worker}, plan, done, settings, "accel campaign")
    results.write(doc, tmp_path / "conformance-cpu-x.json")
    text = render.render_markdown(render.load([tmp_path / "conformance-cpu-x.json"]))
    assert f"| {doc['machine']['label']}/cpu:0 | dequantize/q8_0 | 2 | 14 | 14 | 0 |" in text
    with pytest.raises(accel.ArgumentError, match="--repeat"):
        settings_from(_campaign_args(tmp_path, "--bitwise", "--repeat", "1"), None)


def test_without_ray_the_command_names_the_extra(tmp_path):
    # a Python where `import ray` fails, as on a machine without the extra
    code = ("import sys; sys.modules['ray'] = None; from accel.__main__ import main; "
            f"sys.exit(main(['campaign', '--cluster', 'local', '--out', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2
    assert "accel-portable[fleet]" in proc.stderr


def test_ray_resources_offer_every_available_device(capsys):
    resources = node.node_resources()
    assert resources["accel_cpu"] == 1
    for s in accel.backends():
        assert resources.get(f"accel_{s.name}", 0) == (len(s.devices) if s.available else 0)
    head, worker = node.ray_start_lines(resources)
    assert head.startswith("ray start --head --resources=") and "--address=" in worker
    assert json.loads(head.split("=", 1)[1].strip("'")) == resources
    assert main(["info", "--ray-resources"]) == 0
    assert capsys.readouterr().out.splitlines() == [head, worker]


@pytest.mark.parametrize("address,why", [("127.0.0.1:{port}", "nothing answers"),
                                         ("ray://127.0.0.1:{port}", "nothing answers"),
                                         ("no-port-here", "no HOST:PORT")])
def test_a_cluster_address_nothing_answers_at_is_refused_at_once(tmp_path, address, why):
    pytest.importorskip("ray", reason="Ray (the fleet extra) is not installed")
    import socket

    with socket.socket() as s:  # a port just freed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import sys; from accel.__main__ import main; sys.exit(main(['campaign', '--cluster', "
            f"{address.format(port=port)!r}, '--out', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stderr
    assert "--cluster: expected" in proc.stderr and why in proc.stderr


def test_a_case_two_fuzz_searches_both_drew_is_counted_once_and_a_failure_wins():
    """Searches with different seeds can draw the same case (hypothesis' simplest example first):
    the platform's file lists and counts it once, failed where any of its runs failed."""
    settings = Settings(("cpu",), profile="fuzz", seeds=2, examples=3, ops=("matmul",),
                        dtypes=("float32",))
    plan = shards(settings)
    assert len(plan) == 2
    cpu = accel.get_backend("cpu")
    done = {s.id: node.run_shard(cpu, s, settings.repeat) for s in plan}
    first = done[plan[0].id]["cases"][0]
    done[plan[1].id]["cases"].append({**first, "status": "failed", "reason": "a flaky device"})
    drawn = [c["id"] for s in plan for c in done[s.id]["cases"]]
    worker = node.DeviceWorker("cpu").record()
    doc = store.platform_document({"key": "cpu-x", **worker}, plan, done, settings, "accel campaign")
    ids = [c["id"] for c in doc["cases"]]
    assert ids == list(dict.fromkeys(drawn)) and doc["summary"]["total"] == len(ids) < len(drawn)
    assert next(c for c in doc["cases"] if c["id"] == first["id"])["status"] == "failed"
