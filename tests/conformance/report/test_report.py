"""The portability report: merging several machines' result files, every section present, plots
embedded (no network needed), a Markdown summary, and the `accel report` command."""
import base64
import copy
import json
import re
import subprocess
import sys

import pytest

import accel
from accel.conformance.bench import suite as bench
from accel.conformance.report import render as report
from accel.conformance.bench import timing
from accel.conformance import matrix
from repo_paths import ROOT

DOCS_RESULTS = ROOT / "docs" / "results"


@pytest.fixture(scope="module")
def cpu_doc(tmp_path_factory):
    """A real (tiny) benchmark run of the CPU backend on this machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCEL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        suite = [bench.Case.make("matmul", "float32", M=64, N=64, K=64),
                 bench.Case.make("attention", "float32", B=1, Hq=2, Hkv=1, Sq=16, Sk=16, D=16, causal=True),
                 bench.Case.make("dequantize", "uint8", rows=8, K=64, fmt="q8_0")]
        return bench.run_suite(accel.get_backend("cpu"), suite, budget=timing.TINY, label="laptop")


def other_machine(doc, label, backend, device, speedup, baseline):
    """The same cases as if measured on another machine: a test fixture for the merge (real GPU
    result files come from GPU machines; their format is the one produced above)."""
    other = copy.deepcopy(doc)
    other["machine"] = {**doc["machine"], "label": label, "hostname": label}
    other["backend"] = backend
    other["device"] = {**doc["device"], "name": device, "hardware": "cuda"}
    other["peaks"] = {"gflops": 50000.0, "gbs": 3000.0, "method": "fixture", "measured": ""}
    for c in other["cases"]:
        c["median_s"] /= speedup
        c["gflops"] *= speedup
        c["gbs"] *= speedup
        best = min(c["baselines"], key=lambda b: b["median_s"])
        c["baselines"] = [{**best, "name": baseline, "median_s": best["median_s"] / speedup}]
        c["best_baseline"] = baseline
    return other


def conformance(label, backend, device, status, evidence):
    return {"schema": "accel.conformance/1", "backend": backend, "device": {"name": device},
            "machine": {"label": label} if label else None, "versions": {"x": "1"}, "profile": "quick",
            "cases": [{"op": "matmul", "dtype": "float32", "params": {}, "status": status,
                       "evidence": evidence, "stats": {}},
                      {"op": "attention", "dtype": "float32", "params": {}, "status": "passed",
                       "evidence": evidence, "stats": {}}]}


@pytest.fixture(scope="module")
def files(cpu_doc, tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    docs = {
        "bench-laptop-cpu.json": cpu_doc,
        "bench-nvidia-cuda.json": other_machine(cpu_doc, "nvidia-box", "cuda:0", "NVIDIA H100", 40, "torch"),
        "bench-amd-hip.json": other_machine(cpu_doc, "amd-box", "hip:0", "AMD MI250X", 30, "hipBLAS (cupy)"),
        # no machine field: must attach to the laptop's cpu bench file by backend and device
        "conf-laptop-cpu.json": conformance(None, "cpu:0", cpu_doc["device"]["name"], "passed", "ran"),
        "conf-nvidia-cuda.json": conformance("nvidia-box", "cuda:0", "NVIDIA H100", "failed", "ran"),
        "conf-amd-hip.json": conformance("amd-box", "hip:0", "AMD MI250X", "compiled_only", "compiled only"),
    }
    for name, doc in docs.items():
        (d / name).write_text(json.dumps(doc))
    return sorted(d.iterdir())


@pytest.fixture(scope="module")
def written(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    html_path, md_path = report.write(report.load(files), out)
    return html_path.read_text(), md_path.read_text()


PLATFORMS = ("laptop/cpu:0", "nvidia-box/cuda:0", "amd-box/hip:0")


def test_every_section_is_present(written):
    html, _ = written
    for heading in ("Headline ratios", "Support matrix (conformance)", "Performance portability (Pennycook)",
                    "Throughput, ratios and efficiencies", "Rooflines", "Per op: backends and baselines",
                    "Machines, devices and versions"):
        assert f">{heading}<" in html, heading
    for plat in PLATFORMS:
        assert plat in html


def test_plots_are_embedded_pngs_and_nothing_is_fetched(written):
    html, _ = written
    uris = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', html)
    # a roofline per platform (3) + bars for the two ops with FLOPs and the one without (3)
    assert len(uris) == 6
    for u in uris:
        assert base64.b64decode(u)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html and "<link" not in html


def test_support_matrix_merges_machines_with_evidence(files):
    res = report.load(files)
    platforms, rows, cells = report.support_matrix(res)
    assert set(PLATFORMS) <= set(platforms)
    assert ("matmul", "float32") in rows
    assert report.cell_verdict(cells[("laptop/cpu:0", "matmul", "float32")]) == ("passed (1), ran", "passed")
    assert report.cell_verdict(cells[("nvidia-box/cuda:0", "matmul", "float32")]) == ("FAILED (1/1), ran", "failed")
    assert report.cell_verdict(cells[("amd-box/hip:0", "matmul", "float32")]) == ("compiled only", "compiled")
    assert report.cell_verdict(None) == ("-", "untested")


def test_markdown_summary_has_matrix_metric_and_ratios(written):
    _, md = written
    assert "## Support matrix" in md and "## Performance portability per op" in md
    header = next(ln for ln in md.splitlines() if ln.startswith("| op | dtype |"))
    row = next(ln for ln in md.splitlines() if ln.startswith("| matmul | float32 |"))
    cells = dict(zip(header.strip("| ").split(" | "), row.strip("| ").split(" | ")))
    assert cells["laptop/cpu:0"] == "passed (1), ran"
    assert cells["nvidia-box/cuda:0"] == "FAILED (1/1), ran"
    assert cells["amd-box/hip:0"] == "compiled only"
    # failed conformance on the nvidia box zeroes matmul's portability
    assert re.search(r"\| matmul \| 0 \| 0 \|", md)
    assert re.search(r"- nvidia-box/cuda:0 matmul float32 M=64 N=64 K=64: [0-9.]+x torch", md)


def test_headline_ratio_reads_like_the_issue(cpu_doc):
    case = {"op": "matmul", "dtype": "float32", "params": {"N": 2048}, "ratio_to_best": 0.52,
            "best_baseline": "numpy"}
    assert report.headline({"machine": {"label": "m"}, "backend": "opencl:0"}, case) == \
        "m/opencl:0 matmul float32 N=2048: 0.52x numpy"


def test_a_file_that_is_not_json_is_a_typed_error(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("not json")
    with pytest.raises(accel.ArgumentError, match="JSON result file"):
        report.load([p])


@pytest.mark.parametrize("content, why", [('{"schema": "other/1"}', "schema 'other/1'"),
                                          ("[1, 2]", "no schema field")])
def test_other_json_files_are_left_out_with_a_note(tmp_path, content, why):
    p = tmp_path / "r.json"
    p.write_text(content)
    res = report.load([p])
    assert res.notes == [f"{p} left out: {why} is not a result file the report renders "
                         "(accel.bench/1, accel.conformance/1, accel.kernels_check/1, "
                         "accel.model-conformance/1, accel.bench_model/1)"]
    with pytest.raises(accel.ArgumentError, match="at least one accel result file"):
        report.write(res, tmp_path / "out")


def test_a_missing_file_and_no_results_are_typed_errors(tmp_path):
    with pytest.raises(accel.ArgumentError, match="readable"):
        report.load([tmp_path / "missing.json"])
    with pytest.raises(accel.ArgumentError, match="at least one"):
        report.write(report.Results(), tmp_path)


def test_accel_report_command_prints_the_page_path(files, tmp_path):
    out = tmp_path / "rep"
    proc = subprocess.run([sys.executable, "-m", "accel", "report", *map(str, files), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(out / "report.html")
    assert (out / "summary.md").read_text().startswith("# accel portability summary")


def test_compile_only_evidence_from_kernels_check_files(tmp_path):
    def result(file, defines, target, status, regs):
        # the job id is deliberately not "file[defines]": the report must read the fields
        return {"job": f"variant {regs}", "file": file, "defines": defines, "target": target,
                "status": status, "log": "", "kernels": {"k": {"registers": regs, "spills": 0}}}
    doc = {"schema": "accel.kernels_check/1", "targets": ["sm_90", "gfx90a"], "results": [
        result("matmul.cl", {"IN_DT": "F32", "TM": 4}, "sm_90", "ok", 60),
        result("matmul.cl", {"IN_DT": "F32", "TM": 8}, "sm_90", "ok", 90),
        result("matmul.cl", {"IN_DT": "F32", "TM": 4}, "gfx90a", "failed", 0),
        result("matmul.cl", {"IN_DT": "F32", "TM": 8}, "gfx90a", "ok", 70),
        result("quant.cl", {"IN_DT": "F16"}, "gfx90a", "n/a", 0),
        result("quant.cl", {"IN_DT": "F16"}, "gfx1100", "unavailable", 0)]}
    path = tmp_path / "kernels-check.json"
    path.write_text(json.dumps(doc))
    res = report.load([path])
    targets, rows = report.compiled_matrix(res)
    assert targets == ["sm_90", "gfx90a"] and list(rows) == [("matmul.cl", "F32")]
    cells = rows[("matmul.cl", "F32")]
    assert report.compiled_verdict(cells["sm_90"]) == ("compiled only (2/2, ≤90 regs)", "compiled")
    assert report.compiled_verdict(cells["gfx90a"]) == ("FAILED to compile (1/2)", "failed")
    assert report.compiled_verdict(None) == ("-", "untested")
    html_path, md_path = report.write(res, tmp_path / "out")
    assert ">GPU targets built without a GPU (evidence: compiled only)<" in html_path.read_text()
    assert "| matmul.cl | F32 | compiled only (2/2, ≤90 regs) | FAILED to compile (1/2) |" in md_path.read_text()


def test_busy_machine_gets_a_warning_in_both_outputs(cpu_doc, tmp_path):
    doc = copy.deepcopy(cpu_doc)
    doc["load"] = {"machine_cores": 1.9, "own_cores": 1.0, "others_cores": 0.9}
    doc["machine"]["cores"] = 2
    html_path, md_path = report.write(report.Results(bench=[doc]), tmp_path)
    assert 'class="warn">Warning: laptop/cpu:0 was measured on a busy machine' in html_path.read_text()
    assert "> Warning: laptop/cpu:0 was measured on a busy machine" in md_path.read_text()
    doc["load"] = {"machine_cores": 1.1, "own_cores": 1.0, "others_cores": 0.1}
    html_path, _ = report.write(report.Results(bench=[doc]), tmp_path)
    assert "busy machine" not in html_path.read_text()


def test_a_rerun_on_the_same_platform_replaces_the_older_file(cpu_doc, tmp_path):
    old, new = copy.deepcopy(cpu_doc), copy.deepcopy(cpu_doc)
    old["created"], new["created"] = "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"
    new["cases"] = new["cases"][:1]
    paths = []
    for name, doc in (("new.json", new), ("old.json", old)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(doc))
    res = report.load(paths)
    assert len(res.bench) == 1 and res.bench[0]["created"] == new["created"]


def test_kernels_check_rows_without_defines_read_them_from_the_job_id(tmp_path):
    # rows written before they carried their defines (docs/results/kernels-check-h200.json) have
    # them in the job id accel kernels check gave the variant; a user file's job has none
    rows = [{"job": "quant.cl[FMT_Q4_0=1,IN_DT=F16,RN=4]", "file": "quant.cl", "target": "sm_90",
             "status": "ok", "log": "", "toolchain": "", "cached": False, "kernels": {}},
            {"job": "axpy.cu", "file": "axpy.cu", "target": "sm_90", "status": "ok", "log": "",
             "toolchain": "", "cached": False, "kernels": {}}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": "accel.kernels_check/1", "targets": ["sm_90"], "results": rows}))
    assert list(report.compiled_matrix(report.load([path]))[1]) == [("axpy.cu (your file)", "-"),
                                                                     ("quant.cl", "F16")]


def test_a_users_file_named_like_a_shipped_source_is_its_own_row(tmp_path):
    rows = [{"job": "matmul.cl[IN_DT=F32,TM=4]", "file": "matmul.cl", "target": "sm_90", "status": "ok"},
            {"job": "matmul.cl", "file": "matmul.cl", "target": "sm_90", "status": "ok"}]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"schema": "accel.kernels_check/1", "targets": ["sm_90"], "results": rows}))
    assert list(report.compiled_matrix(report.load([path]))[1]) == [("matmul.cl", "F32"),
                                                                     ("matmul.cl (your file)", "-")]


def test_the_committed_kernels_check_files_still_read():
    res = report.load(sorted(DOCS_RESULTS.glob("kernels-check*.json")))
    targets, rows = report.compiled_matrix(res)
    assert res.kernels and "sm_90" in targets and any(src == "matmul.cl" for src, _ in rows)


@pytest.mark.parametrize("statuses", [
    {"passed": 3}, {"passed": 2, "unsupported": 1}, {"unsupported": 2}, {"compiled_only": 2, "unsupported": 1},
    {"passed": 1, "failed": 1, "error": 1, "unsupported": 2}])
def test_the_report_words_a_cell_as_the_support_matrix_does(statuses):
    """The same counts read the same in docs/support.md and the report (which adds the evidence)."""
    cases = [{"id": f"{status}{i}", "op": "matmul", "dtype": "float32", "params": {}, "status": status,
              "evidence": "ran"} for status, n in statuses.items() for i in range(n)]
    doc = {"schema": "accel.conformance/1", "backend": "cpu:0", "device": {"name": "cpu"},
           "machine": {"label": "m"}, "profile": "quick", "seed": 0, "cases": cases,
           "summary": dict.fromkeys(("passed", "failed", "error", "unsupported"), 0)}
    row = next(line for line in matrix.render([doc], ["r.json"], compiled_only=()).splitlines()
               if line.startswith("| float32 |"))
    markdown = row.strip("| ").split(" | ")[1]
    _, _, cells = report.support_matrix(report.Results(conformance=[doc]))
    text, kind = report.cell_verdict(cells[("m/cpu:0", "matmul", "float32")])
    assert text in (markdown, f"{markdown}, ran") and (kind, markdown) == matrix.verdict(statuses)
    assert markdown.split(" (")[0] in {word.split(" (")[0] for word, _ in matrix.LEGEND}


def test_conformance_files_of_one_platform_merge_case_by_case(tmp_path):
    # a GPU run writes one file per implementation or op (shared kernels, vendor matmul, a full
    # attention profile): the support matrix must show all of them, and a case failed in one
    # file stays failed whatever another file (another implementation) says, in any order
    def conf(name, cases):
        doc = {"schema": "accel.conformance/1", "backend": "cuda:0", "device": {"name": "H200"},
               "machine": {"label": "gpu-box"}, "profile": "quick", "seed": 0,
               "cases": [{"id": f"{op}/float16/{n}", "op": op, "dtype": "float16", "status": status,
                          "evidence": "ran"} for op, n, status in cases]}
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        return path

    kernels = conf("kernels.json", [("matmul", 1, "passed"), ("matmul", 2, "failed")])
    attention = conf("attention.json", [("attention", 1, "passed"), ("attention", 2, "unsupported")])
    vendor = conf("vendor.json", [("matmul", 2, "passed"), ("attention", 2, "passed")])
    for order in ([kernels, attention, vendor], [vendor, attention, kernels]):
        _, rows, cells = report.support_matrix(report.load(order))
        assert rows == [("attention", "float16"), ("matmul", "float16")]
        assert dict(cells[("gpu-box/cuda:0", "matmul", "float16")].counts) == {"passed": 1, "failed": 1}
        assert dict(cells[("gpu-box/cuda:0", "attention", "float16")].counts) == {"passed": 2}


def test_a_dirty_commit_stays_dirty_in_the_report():
    assert report._short_commit("99caf5bc1b3a4d5e+dirty") == "99caf5bc1b3a+dirty"
    assert report._short_commit("99caf5bc1b3a4d5e") == "99caf5bc1b3a"
    assert report._short_commit(None) == report._short_commit("") == "?"


def test_a_report_without_benchmarks_says_so_instead_of_empty_tables():
    conf = {"schema": "accel.conformance/1", "backend": "cpu:0", "machine": {"label": "box"},
            "device": {"name": "cpu"}, "summary": {"passed": 1}, "cases": []}
    res = report.Results(conformance=[conf])
    assert "No benchmark result files were given" in report.portability_section(res)
    assert "No benchmark result files were given" in report.render_markdown(res)
