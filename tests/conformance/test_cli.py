"""``accel conformance`` and ``accel conformance matrix`` end to end (in process), and the pytest
plugin in a subprocess, as a user runs them."""
import json
import shlex
import subprocess
import sys

import pytest

from accel.__main__ import main
from accel.conformance import results
from accel import kernels
from accel.kernels import KERNELS_CHECK_SCHEMA
from markers import needs_planted
from vendor_sites import vendor_site
from repo_paths import ROOT




def _run(capsys, *argv):
    code = main(["conformance", *argv])
    return code, capsys.readouterr().out


def test_passing_run_writes_a_versioned_result_file(capsys, tmp_path):
    path = tmp_path / "cpu.json"
    code, out = _run(capsys, "--backend", "cpu", "--ops", "dequantize,matmul", "--dtypes", "q8_0",
                     "int8", "--no-progress", "--json", str(path), "--label", "box-7")
    assert code == 0, out
    report = results.load(path)
    assert report["machine"]["label"] == "box-7"  # as accel bench --label names it
    assert report["schema"] == results.SCHEMA and report["backend"] == "cpu:0"
    assert report["device"]["name"] and report["versions"]["numpy"] and report["profile"] == "quick"
    s = report["summary"]
    assert s["total"] == len(report["cases"]) > 0 and s["passed"] == s["total"]
    assert set(s["by_op_dtype"]) == {"dequantize/q8_0", "matmul/int8"}
    case = report["cases"][0]
    assert {"id", "op", "dtype", "params", "status", "evidence", "stats", "time_s", "reason",
            "repro"} <= set(case)
    assert "dequantize/q8_0" in out and "passed" in out


@needs_planted
def test_failing_run_exits_1_and_prints_a_repro_that_reproduces(capsys):
    code, out = _run(capsys, "--backend", "planted_topleft_causal", "--ops", "attention",
                     "--dtypes", "float32", "--no-progress")
    assert code == 1
    repro = next(line.split("repro: ", 1)[1] for line in out.splitlines() if "repro: " in line)
    argv = shlex.split(repro)
    assert argv[:2] == ["accel", "conformance"]
    code, out = _run(capsys, *argv[2:], "--no-progress")
    assert code == 1 and "1 failed" in out.replace("\n", " ")


def test_unknown_backend_and_bad_case_are_clear_errors(capsys):
    assert main(["conformance", "--backend", "nosuch"]) == 2
    assert main(["conformance", "--backend", "cpu", "--case", "matmul/float32"]) == 2
    assert "--case" in capsys.readouterr().err
    assert main(["conformance", "--backend", "cpu", "--ops", "matmull"]) == 2
    assert "--ops: expected names from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # refused by the parser, before any work
        main(["conformance", "--backend", "cpu", "--profile", "huge"])
    assert e.value.code == 2 and "invalid choice: 'huge'" in capsys.readouterr().err


@needs_planted
def test_matrix_merges_files_and_marks_gpu_backends_compiled_only(capsys, tmp_path):
    files = []
    for name in ("cpu", "planted_declines_bf16", "planted_k_off_by_one"):
        path = tmp_path / f"{name}.json"
        _run(capsys, "--backend", name, "--ops", "matmul", "--dtypes", "float32,bfloat16",
             "--no-progress", "--json", str(path))
        files.append(str(path))
    out_md = tmp_path / "support.md"
    assert main(["conformance", "matrix", *files, "-o", str(out_md)]) == 0
    text = out_md.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| bfloat16 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith("passed") and cells[2] == "unsupported"
    assert cells[3].startswith("FAILED") and cells[4:] == ["implemented", "implemented"]
    assert "planted_declines_bf16:0" in text and "cuda (no GPU run)" in text
    # with compile evidence: cuda's matmul kernels built, one of hip's did not
    check = tmp_path / "kernels-check.json"
    matmul = [v for v in kernels.variants() if v.source.startswith("matmul")]
    failing = next(v for v in matmul if v.source == "matmul.cl")
    check.write_text(json.dumps({"schema": KERNELS_CHECK_SCHEMA, "results":
        _check_rows("sm_90", matmul) + _check_rows("gfx90a", matmul, failing={failing.id})}))
    assert main(["conformance", "matrix", *files, "--kernels-check", str(check), "-o", str(out_md)]) == 0
    row = next(line for line in out_md.read_text().splitlines() if line.startswith("| bfloat16 |"))
    assert [c.strip() for c in row.strip("|").split("|")][4:] == ["compiled only", "FAILED to compile"]


def _check_rows(target: str, variants, failing=frozenset()) -> list[dict]:
    """kernels-check rows of shipped variants built for ``target``: ok, or failed for the ids in
    ``failing``."""
    return [{"job": v.id, "file": v.source, "target": target,
             "status": "failed" if v.id in failing else "ok"} for v in variants]


def test_matrix_rejects_files_of_another_schema(tmp_path, capsys):
    bad = tmp_path / "old.json"
    bad.write_text(json.dumps({"schema": "accel.conformance/0", "cases": []}))
    assert main(["conformance", "matrix", str(bad)]) == 2
    assert "accel.conformance/1" in capsys.readouterr().err


@needs_planted
def test_pytest_plugin_runs_the_same_cases():
    from importlib.metadata import entry_points

    registered = any(ep.value == "accel.conformance.pytest_plugin"
                     for ep in entry_points(group="pytest11"))
    load = [] if registered else ["-p", "accel.conformance.pytest_plugin"]
    base = [sys.executable, "-m", "pytest", *load, "--pyargs", "accel.conformance", "-q",
            "-p", "no:cacheprovider", "--accel-ops", "matmul", "--accel-dtypes", "float32"]
    good = subprocess.run(base + ["--accel-backend", "cpu"], capture_output=True, text=True,
                          timeout=300)
    assert good.returncode == 0, good.stdout[-2000:]
    bad = subprocess.run(base + ["--accel-backend", "planted_nan_to_zero"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 1
    assert "repro: accel conformance --backend planted_nan_to_zero:0 --case 'matmul/float32/special" \
        in bad.stdout


def test_pytest_plugin_takes_the_commands_dtype_aliases_and_writes_nothing_here(tmp_path):
    import os

    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "accel.conformance", "-q",
                           "-p", "no:cacheprovider", "-p", "no:benchmark", "--accel-backend", "cpu",
                           "--accel-ops", "dequantize,matmul", "--accel-dtypes", "bf16,q8_0"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert os.listdir(tmp_path) == []  # hypothesis kept ./.hypothesis/ here under pytest


def test_matrix_gives_x_format_cases_rows_of_their_own():
    # a GPU result file from before x_format has no such cases: its cell must say "-", not
    # borrow the verdict of the float-x cases
    from accel.conformance.matrix import render

    def case(i, **params):
        return {"id": f"c{i}", "op": "qmatmul", "dtype": "float16", "status": "passed",
                "params": {"fmt": "q4_0", **params}}
    summary = dict(passed=3, failed=0, error=0, unsupported=0)
    new = {"backend": "cpu:0", "profile": "quick", "seed": 0, "summary": summary,
           "cases": [case(0), case(1, x_fmt="q8_0"), case(2, x_fmt="q8_0")]}
    old = {**new, "backend": "opencl:0", "cases": [case(0)]}
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in render([new, old], ["new.json", "old.json"], compiled_only=()).splitlines()
            if line.startswith("| float16 x q4_0")}
    assert rows == {"float16 x q4_0": ["passed (1)", "passed (1)"],
                    "float16 x q4_0, x_format=q8_0": ["passed (2)", "-"]}


def test_compiled_only_columns_leave_out_formats_the_backend_does_not_declare():
    # hip compiles the quantize kernels, which vouches for quantize in the formats it declares
    # (q4_0, the K-quants since kquant.cl builds for GPUs); a format it does not declare, such as
    # one a newer accel's result file brings (iq9_z here), must not borrow that verdict, nor
    # may an op the shared kernels leave to the cpu reference (iq2_xs's quantize, ggml's grid search: only decoded)
    from accel.backends.cupy.hip import HIPBackend
    from accel.conformance.matrix import render

    assert {"q4_0", "q4_k", "iq2_xs"} <= set(HIPBackend.formats) and "iq9_z" not in HIPBackend.formats
    assert kernels.kernel_declines("quantize", "iq2_xs") and not kernels.kernel_declines("dequantize", "iq2_xs")
    cases = [{"id": f"c{i}", "op": "quantize", "dtype": "float32", "status": "passed",
              "params": {"fmt": f}} for i, f in enumerate(("q4_0", "q4_k", "iq2_xs", "iq9_z"))]
    cases += [{"id": f"d{f}", "op": "dequantize", "dtype": f, "status": "passed", "params": {}}
              for f in ("iq2_xs", "iq9_z")]
    doc = {"backend": "cpu:0", "profile": "quick", "seed": 0, "cases": cases,
           "summary": dict(passed=6, failed=0, error=0, unsupported=0)}
    check = {"schema": KERNELS_CHECK_SCHEMA, "results": _check_rows("gfx90a", kernels.variants())}
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in render([doc], ["r.json"], compiled_only=("hip",), kernels_check=check).splitlines()
            if line.startswith(("| float32 ->", "| iq2_xs", "| iq9_z"))}
    assert rows == {"float32 -> q4_0": ["passed (1)", "compiled only"],
                    "float32 -> q4_k": ["passed (1)", "compiled only"],
                    "float32 -> iq2_xs": ["passed (1)", "-"], "float32 -> iq9_z": ["passed (1)", "-"],
                    "iq2_xs": ["passed (1)", "compiled only"], "iq9_z": ["passed (1)", "-"]}


def test_every_shipped_kernel_source_vouches_for_its_ops_in_the_matrix():
    # a failed build of any shipped source (the CUDA-only tensor-core ones included) shows as
    # FAILED for the ops it computes on the vendor's backend, never as "compiled only"
    from accel.conformance.matrix import compile_verdicts

    for source, ops in kernels.SOURCE_OPS.items():
        for target, backend in (("sm_90", "cuda"), ("gfx90a", "hip")):
            meant = [v for v in kernels.variants() if backend in v.dialects]
            failing = {v.id for v in meant if v.source == source}
            if not failing:  # CUDA-only sources: nothing of theirs is built for AMD
                continue
            rows = _check_rows(target, meant, failing)
            verdicts = compile_verdicts({"schema": KERNELS_CHECK_SCHEMA, "results": rows})
            assert {op: verdicts[(backend, op)] for op in ops} == dict.fromkeys(ops, "FAILED to compile")
    ok = compile_verdicts({"schema": KERNELS_CHECK_SCHEMA, "results": _check_rows("sm_90", kernels.variants())})
    assert set(ok.values()) == {"compiled only"} and {op for _, op in ok} == {
        "matmul", "attention", "quantize", "dequantize", "qmatmul", "scaled_matmul"}


def test_compile_verdicts_rest_on_builds_that_ran():
    # a target with no toolchain there ("unavailable") vouches for nothing: it neither fails an op
    # nor passes one, and another target's build still decides
    from accel.conformance.matrix import compile_verdicts
    from accel.kernels import SOURCE_OPS, variants

    matmul = [v for v in variants() if "matmul" in SOURCE_OPS[v.source]]

    def rows(target, status, chosen=matmul):
        return [{"job": v.id, "file": v.source, "target": target, "status": status} for v in chosen]

    def verdicts(*groups):
        return compile_verdicts({"schema": KERNELS_CHECK_SCHEMA, "results": [r for g in groups for r in g]})

    got = verdicts(rows("sm_90", "ok"), rows("sm_80", "unavailable"), rows("gfx90a", "ok"),
                   rows("gfx90a", "failed", matmul[:1]), rows("gfx1100", "unavailable"))
    assert (got[("cuda", "matmul")], got[("hip", "matmul")]) == ("compiled only", "FAILED to compile")
    assert verdicts(rows("gfx1100", "unavailable")) == {}
    # one variant of the op built is not the op built; a user's own matmul.cl vouches for nothing
    assert verdicts(rows("sm_90", "ok", matmul[:1])) == {}
    user = {"job": "matmul.cl", "file": "matmul.cl", "target": "sm_90", "status": "ok"}
    assert verdicts([user]) == {}


def test_the_result_files_table_says_compiled_only_where_builds_ran(tmp_path, capsys):
    # the committed H200 check built sm_90 only: hip is untested there, not "compiled only"
    assert main(["conformance", "matrix", str(ROOT / "docs/results/conformance-cpu.json"),
                 "--kernels-check", str(ROOT / "docs/results/kernels-check-h200.json")]) == 0
    table = capsys.readouterr().out
    assert "| cuda | - | compiled only |" in table and "| hip | - | untested |" in table


def test_the_matrix_legend_explains_every_word_a_cell_says():
    from accel.conformance.matrix import LEGEND, compile_verdict, verdict

    said = {verdict(c)[1] for c in ({"passed": 2}, {"failed": 1}, {"passed": 1, "unsupported": 1},
                                    {"unsupported": 1}, {"compiled_only": 1}, {})}
    said |= {compile_verdict(ok, failed)[1] for ok, failed in ((1, 0), (1, 1))} | {"implemented"}
    assert {text.split(" (")[0] for text in said} == {word.split(" (")[0] for word, _ in LEGEND}


def test_a_failure_in_any_file_of_a_backend_stays_in_the_matrix():
    from accel.conformance.matrix import render

    def rep(status):
        return {"backend": "cuda:0", "device": {"name": "H200"}, "profile": "quick", "seed": 0,
                "summary": {"passed": 0, "failed": 0, "error": 0, "unsupported": 0},
                "cases": [{"id": "matmul/float16/a", "op": "matmul", "dtype": "float16", "status": status}]}

    for reports in ([rep("failed"), rep("passed")], [rep("passed"), rep("failed")]):
        table = render(reports, ["a.json", "b.json"], compiled_only=())
        assert "| float16 | FAILED (1/1) |" in table, table
    assert "| float16 | passed (1) |" in render([rep("unsupported"), rep("passed")], ["a", "b"], compiled_only=())


def test_matrix_refuses_a_kernels_check_file_that_is_not_one(tmp_path, capsys):
    """A conformance file given as --kernels-check would silently turn every compiled-only cell
    into "-": refused, naming the option."""
    conf = tmp_path / "cpu.json"
    assert main(["conformance", "--backend", "cpu", "--ops", "matmul", "--dtypes", "int8",
                 "--no-progress", "--json", str(conf)]) == 0
    capsys.readouterr()
    assert main(["conformance", "matrix", str(conf), "--kernels-check", str(conf)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--kernels-check: expected an accel.kernels_check/1 file" in err and "got accel.conformance/1" in err


def test_a_case_id_refuses_the_selection_flags_it_would_ignore(capsys):
    case = "matmul/float32/special/a=6x10,b=10x7,data=nan,seed=0"
    assert main(["conformance", "--backend", "cpu", "--case", case, "--seed", "7"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--case: expected no --ops, --dtypes, --profile or --seed beside it" in err and "got --seed" in err


def test_a_case_run_records_its_profile_as_case(tmp_path):
    out = tmp_path / "case.json"
    case = "matmul/float32/special/a=6x10,b=10x7,data=nan,seed=0"
    assert main(["conformance", "--backend", "cpu", "--case", case, "--no-progress", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["profile"] == "case" and doc["summary"]["passed"] == 1
    assert doc["commit"] is not None and "environment" in doc


_HANGS = '''
import time
from accel.backends.cpu import CPUBackend

class Hangs(CPUBackend):
    name = "vx_hangs"
    calls = 0

    def compute(self, spec, *arrays):
        Hangs.calls += 1
        while Hangs.calls == 3:  # a kernel that never returns, on the third call
            time.sleep(1)
        return super().compute(spec, *arrays)
'''


def _conformance_on(tmp_path, backend: str, cls: str, source: str, *flags: str):
    """`accel conformance` (a real process) of the q8_0 dequantize cases on the vendor backend
    ``backend`` (class ``cls`` in ``source``): (the process, the --json path)."""
    import os

    site = vendor_site(tmp_path, f"site_{backend}", {backend: f"{backend}:{cls}"}, {backend: source})
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "accel", "conformance", "--backend", backend,
                           "--ops", "dequantize", "--dtypes", "q8_0", "--no-progress", *flags,
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(site)})
    return proc, out


def test_a_hung_case_is_an_error_with_the_results_so_far(tmp_path):
    # a hanging backend once hung the run with no file and no case named
    proc, out = _conformance_on(tmp_path, "vx_hangs", "Hangs", _HANGS, "--timeout", "2")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    # the first case ran both its paths (op method, compute()): the second case hung
    assert [c["status"] for c in doc["cases"]] == ["passed", "error"]
    stuck = doc["cases"][-1]
    assert "did not finish within --timeout 2 s" in stuck["reason"]
    assert stuck["repro"].startswith("accel conformance --backend vx_hangs:0 --case ")
    assert f"stopped: {stuck['id']} ran past 2 s" in " ".join(proc.stderr.split())


_CRASHES = '''
import ctypes
from accel.backends.cpu import CPUBackend

class Crashes(CPUBackend):
    name = "vx_crashes"

    def compute(self, spec, *arrays):
        if spec.out_shape[0] == 5:  # a driver that segfaults on one shape
            ctypes.string_at(0)
        return super().compute(spec, *arrays)
'''


def test_a_case_that_crashes_the_process_is_recorded_and_the_run_goes_on(tmp_path):
    # a segfaulting backend once ended the run with no file and no case named
    proc, out = _conformance_on(tmp_path, "vx_crashes", "Crashes", _CRASHES)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    bad = [c for c in doc["cases"] if c["status"] != "passed"]
    assert [c["params"]["shape"] for c in bad] == [[5, 160]]
    assert bad[0]["status"] == "error" and bad[0]["reason"].startswith("crashed: the process died of SIGSEGV")
    assert bad[0]["repro"] == f"accel conformance --backend vx_crashes:0 --case '{bad[0]['id']}'"
    # the cases after it ran in a new process, each once
    ids = [c["id"] for c in doc["cases"]]
    assert len(ids) == len(set(ids)) and doc["summary"]["passed"] == len(ids) - 1 >= 4
    assert f"CRASHED (SIGSEGV (signal 11)) in {bad[0]['id']}" in " ".join(proc.stderr.split())


def test_no_isolation_runs_in_the_process_and_a_crash_ends_it(tmp_path):
    proc, out = _conformance_on(tmp_path, "vx_crashes", "Crashes", _CRASHES, "--no-isolation")
    assert proc.returncode == -11 and not out.exists()
