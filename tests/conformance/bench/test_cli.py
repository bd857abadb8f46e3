"""`accel bench` end to end, and which devices `accel portability` runs."""
import json
import os
import re
import subprocess
import sys

import accel
from accel.conformance.report.cli import portability_devices


def test_accel_bench_writes_a_versioned_result_file(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "accel", "bench", "--backend", "cpu", "--ops", "dequantize",
                           "--json", str(out), "--label", "ci-box"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ACCEL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "accel.bench/1"
    assert doc["machine"]["label"] == "ci-box" and doc["backend"] == "cpu:0"
    assert doc["peaks"]["gflops"] > 0 and doc["versions"]["numpy"]
    assert {c["op"] for c in doc["cases"]} == {"dequantize"}
    assert {c["params"]["fmt"] for c in doc["cases"]} >= {"q8_0", "q4_0", "q4_k", "mxfp4"}
    assert all(c["status"] == "ok" for c in doc["cases"])
    assert "dequantize" in proc.stdout and "vs best baseline" in proc.stdout  # the summary table


def test_bad_arguments_are_refused_in_one_line_not_a_traceback(tmp_path):
    def accel_cli(*args):
        return subprocess.run([sys.executable, "-m", "accel", *args], capture_output=True, text=True,
                              timeout=120)
    proc = accel_cli("bench", "--sizes", "huge")
    assert proc.returncode == 2 and "--sizes" in proc.stderr
    proc = accel_cli("bench", "--backend", "nonesuch")
    assert proc.returncode == 2 and "nonesuch" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    proc = accel_cli("report", str(bad), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "schema" in proc.stderr and "Traceback" not in proc.stderr


def test_portability_runs_builtin_backends_only():
    devices = portability_devices()
    statuses = {s.name: s for s in accel.backends()}
    assert "cpu:0" in devices
    for d in devices:
        assert statuses[d.split(":")[0]].origin == "builtin"
    plugins = [s.name for s in statuses.values() if s.available and s.origin != "builtin"]
    assert not any(d.split(":")[0] in plugins for d in devices)


def test_accel_portability_runs_conformance_and_benchmarks_then_prints_the_report(tmp_path):
    out = tmp_path / "report"
    # two ops (one of each table) keep it to seconds; every op is what users run (the README)
    proc = subprocess.run([sys.executable, "-m", "accel", "portability", "--backends", "cpu", "-o", str(out),
                           "--label", "ci-box", "--ops", "matmul,add"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ACCEL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str((out / "report.html").resolve())
    conf = json.loads((out / "conformance-cpu.json").read_text())
    assert conf["schema"] == "accel.conformance/1" and conf["machine"]["label"] == "ci-box"
    assert {c["op"] for c in conf["cases"]} == {"matmul", "add"}
    bench = json.loads((out / "bench-cpu.json").read_text())
    assert bench["schema"] == "accel.bench/1"
    assert {c["op"] for c in bench["cases"]} == {"matmul"}
    assert [r["op"] for r in bench["decoder_ops"]] == ["add"]
    assert all(r["accel_s"] > 0 and r["ratio"] > 0 for r in bench["decoder_ops"])
    page = (out / "report.html").read_text()
    assert "ci-box/cpu:0" in page and 'class="passed">passed' in page
    assert "Decoder-step ops" in page


def test_portability_refuses_an_unknown_op_before_running_anything(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "accel", "portability", "--backends", "cpu", "-o",
                           str(tmp_path / "r"), "--ops", "matmul,nonesuch"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--ops" in proc.stderr and "nonesuch" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_bench_takes_a_decoder_op_alone(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, "-m", "accel", "bench", "--backend", "cpu", "--ops", "add",
                           "--no-baselines", "--json", str(out)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "ACCEL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["cases"] == [] and [r["op"] for r in doc["decoder_ops"]] == ["add"]
    assert "torch_s" not in doc["decoder_ops"][0] and "decoder-step ops" in proc.stdout


def test_a_busy_run_prints_the_same_warning_as_the_report(capsys):
    from accel.conformance.report import render as report
    from accel.conformance.bench.suite import busy_warning
    from accel.conformance.bench.cli import print_summary

    doc = {"backend": "cpu:0", "device": {"name": "cpu"}, "machine": {"cores": 2},
           "load": {"others_cores": 1.4}, "cases": []}
    print_summary(doc)
    printed = " ".join(capsys.readouterr().out.split())
    assert "warning: measured on a busy machine (other processes used 1.4 of its 2 cores" in printed
    assert " ".join(busy_warning(doc).split()) in printed
    report_doc = {**doc, "machine": {"cores": 2, "label": "box"}}
    assert report.busy_warnings(report.Results(bench=[report_doc])) == [
        f"Warning: box/cpu:0 was {busy_warning(report_doc)}."]
    assert busy_warning({**doc, "load": {"others_cores": 0.1}}) is None


def test_the_summary_table_prints_readable_numbers(capsys):
    # a GPU's peak and a slow case read as 60,948 GFLOP/s and 1,511 ms, never 6.09e+04 or 1.51e+03
    from accel.conformance.bench.cli import print_summary

    case = {"op": "matmul", "dtype": "float32", "params": {"N": 8}, "status": "ok", "flops": 1,
            "median_s": 1.5107, "iqr_s": 0.01, "gflops": 2345.6, "gbs": 1.0,
            "roofline_efficiency": 0.004, "baselines": []}
    doc = {"backend": "cuda:0", "device": {"name": "H200"}, "machine": {},
           "peaks": {"gflops": 60947.6, "gbs": 3971.9}, "cases": [case]}
    print_summary(doc)
    out = capsys.readouterr().out
    assert "60,948 GFLOP/s" in out and "1,511" in out and "2,346" in out and "0.4%" in out
    assert "e+0" not in out


def test_portability_fails_when_conformance_fails_and_says_so_in_the_report(tmp_path):
    """A backend with a planted bug (tests/plugins/planted: NaN read as 0): the report is written
    and names the failure, the exit status is 1; other result files in OUT are kept and named."""
    out = tmp_path / "report"
    out.mkdir()
    (out / "bench-gone0.json").write_text("{}")  # an earlier run's device, not in this one
    proc = subprocess.run([sys.executable, "-m", "accel", "portability", "--backends",
                           "planted_nan_to_zero", "--ops", "matmul", "-o", str(out)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "ACCEL_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 1, proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert re.search(r"failed: conformance on planted_nan_to_zero: \d+ failed", err), err[-2000:]
    assert "also holds bench-gone0.json: not in this report" in err
    assert proc.stdout.strip().splitlines()[-1] == str((out / "report.html").resolve())
    assert (out / "bench-gone0.json").read_text() == "{}"  # maybe another machine's only copy
    summary = (out / "summary.md").read_text()
    assert "Warning: conformance on planted_nan_to_zero:" in summary


def test_result_files_are_strict_json_and_say_what_ran(tmp_path, monkeypatch):
    from accel.conformance.bench.cli import write_json

    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv")
    out = tmp_path / "b.json"
    write_json({"cases": [{"validation": {"rel_err": float("inf")}}]}, out)
    assert json.loads(out.read_text(), parse_constant=lambda c: 1 / 0) == {
        "cases": [{"validation": {"rel_err": "inf"}}]}
    from accel.conformance.results import accel_environment

    assert accel_environment()["ACCEL_GEMV_KERNEL"] == "qgemv"


def test_float32_above_the_measured_peak_is_flagged(capsys):
    from accel.conformance.bench.cli import print_summary
    from accel.conformance.bench.suite import peak_warning

    case = {"op": "matmul", "dtype": "float32", "params": {"N": 8}, "status": "ok", "flops": 1,
            "median_s": 1e-3, "iqr_s": 1e-5, "gflops": 188.0, "gbs": 1.0,
            "roofline_efficiency": 1.88, "baselines": []}
    doc = {"backend": "cpu:0", "device": {"name": "cpu"}, "machine": {"cores": 2},
           "peaks": {"gflops": 100.0, "gbs": 30.0}, "cases": [case]}
    assert "1 float32/float64 cases ran above the measured peak (up to 188%" in peak_warning(doc)
    print_summary(doc)
    assert "warning: 1 float32/float64 cases ran above the measured peak" in " ".join(capsys.readouterr().out.split())
    assert peak_warning({**doc, "cases": [{**case, "dtype": "bfloat16"}]}) is None  # faster units
    assert peak_warning({**doc, "cases": [{**case, "roofline_efficiency": 0.9}]}) is None
