"""A report users can trust (issue 25): the project's own results folder renders, result files are
validated on load, machines named alike stay apart, Pennycook tables align problems across
profiles and say why a cell is empty, baselines are not handicapped, charts read true, and a
report renders without matplotlib."""
import base64
import copy
import json
import struct
import subprocess
import sys

import pytest

import accel
from accel.conformance.bench import suite as bench
from accel.conformance.bench import timing
from accel.conformance.report import render as report
from accel.conformance.report import schemas
from repo_paths import ROOT

DOCS_RESULTS = ROOT / "docs" / "results"


def accel_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accel", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def committed():
    return report.load(sorted(DOCS_RESULTS.glob("*.json")))


# -- the obvious command works on the project's own results ----------------------------------------
def test_accel_report_renders_the_committed_results_folder_and_skips_other_files(tmp_path):
    out = tmp_path / "out"
    proc = accel_cli("report", *map(str, sorted(DOCS_RESULTS.glob("*.json"))), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    assert "speed-goals-cuda-h200.json left out: schema &#x27;accel.gpu_speed_goals/2&#x27;" in page


def test_a_refused_file_leaves_no_output_folder(tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps({"schema": "accel.bench/1"}))
    out = tmp_path / "never"
    proc = accel_cli("report", str(bad), "-o", str(out))
    assert proc.returncode == 2 and not out.exists()


# -- validation on load -------------------------------------------------------------------------------
def test_the_published_schemas_are_the_ones_the_code_uses():
    published = {p.name: json.loads(p.read_text()) for p in (ROOT / "docs" / "schemas").glob("*.json")}
    assert published == {schemas.published_name(n): s for n, s in schemas.SCHEMAS.items()}


def test_every_committed_result_file_of_a_known_schema_is_valid():
    for path in DOCS_RESULTS.glob("*.json"):
        schemas.validate(json.loads(path.read_text()), path)  # raises on a broken file


def _bench_doc() -> dict:
    return json.loads((DOCS_RESULTS / "bench-cuda-h200.json").read_text())


@pytest.mark.parametrize("break_it, message", [
    (lambda d: d["cases"][1].pop("median_s"), r"cases\[1\]: 'median_s' is a required property"),
    (lambda d: d.pop("machine"), "'machine' is a required property"),
    (lambda d: d["cases"][0].update(status="fast"), r"cases\[0\]\.status: 'fast' is not one of"),
    (lambda d: d["device"].update(name=3), r"device\.name: 3 is not of type 'string'"),
    # what rendering reads, refused on load rather than a KeyError or TypeError deep in it
    (lambda d: d["cases"][0].pop("best_baseline"),
     r"cases\[0\]: 'best_baseline' is a dependency of 'ratio_to_best'"),
    (lambda d: d.update(load={"others_cores": "1.2"}), r"load\.others_cores: '1.2' is not of type"),
    (lambda d: next(c for c in d["cases"] if c["op"] == "qmatmul")["params"].pop("fmt"),
     r"cases\[\d+\]\.params: 'fmt' is a required property"),
])
def test_a_malformed_file_is_named_with_what_is_wrong(tmp_path, break_it, message):
    doc = _bench_doc()
    break_it(doc)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(accel.ArgumentError, match=f"^{path}: {message}"):
        report.load([path])
    proc = accel_cli("report", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(path) in proc.stderr


# -- machine identity -------------------------------------------------------------------------------
def test_machines_named_alike_stay_apart_with_a_warning(committed):
    platforms = [report.PP.platform_name(d) for d in committed.bench]
    assert platforms == ["vm (16-core Intel Xeon)/cuda:0", "vm (2-core AMD EPYC)/opencl:0"]
    # the conformance files come from a third 'vm' (a 2-core Xeon): three machines kept apart
    assert any("3 different machines are labelled 'vm'" in w and "'vm (2-core Intel Xeon)'" in w
               for w in committed.warnings)
    rows = report.machine_rows(committed)
    assert {(r[3], r[4]) for r in rows} == {("Intel(R) Xeon(R) Processor", 16), ("AMD EPYC", 2),
                                           ("Intel(R) Xeon(R) Processor", 2)}
    series = report.bar_series(committed, "matmul")[0]
    assert "torch on vm (16-core Intel Xeon), cuda" in series and "torch on vm (2-core AMD EPYC), cpu" in series


def test_two_runs_of_one_platform_keep_the_newest_and_say_so(tmp_path):
    old, new = _bench_doc(), _bench_doc()
    old["machine"]["run_id"], new["machine"]["run_id"] = "run-a", "run-b"
    new["created"] = "2027-01-01T00:00:00+00:00"
    new["cases"][0]["median_s"] = old["cases"][0]["median_s"] * 2  # the re-measured value
    paths = []
    for name, doc in (("new.json", new), ("old.json", old)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(doc))
    res = report.load(paths)
    assert [d["created"] for d in res.bench] == [new["created"]]
    assert [c["median_s"] for c in res.bench[0]["cases"]] == [c["median_s"] for c in new["cases"]]
    assert any(f"{len(old['cases'])} case(s) of {paths[1]}" in w and old["created"] in w
               for w in res.warnings)


def test_files_of_one_platform_measuring_different_cases_merge(tmp_path):
    # the quick run, then the decode sweep alone, under one ACCEL_RUN_ID: neither is left out
    doc = _bench_doc()
    first, second = copy.deepcopy(doc), copy.deepcopy(doc)
    first["cases"], second["cases"] = doc["cases"][:3], doc["cases"][3:]
    first["profile"], second["profile"] = "quick", "decode"
    second["created"] = "2027-01-01T00:00:00+00:00"
    paths = [tmp_path / "quick.json", tmp_path / "decode.json"]
    for path, d in zip(paths, (first, second)):
        path.write_text(json.dumps(d))
    res = report.load(paths)
    assert len(res.bench) == 1 and res.bench[0]["profile"] == "quick, decode"
    assert [c["id"] for c in res.bench[0]["cases"]] == [c["id"] for c in doc["cases"]]
    assert not any("measured again" in w for w in res.warnings)
    # the same file given twice is one file: nothing replaced, nothing said
    twice = report.load([paths[0], paths[0]])
    assert len(twice.bench[0]["cases"]) == 3 and not any("measured again" in w for w in twice.warnings)


def test_a_case_without_intensity_renders(tmp_path):
    doc = _bench_doc()  # intensity may be null (a case of zero bytes) or absent (older files)
    doc["cases"][0]["intensity"] = None
    doc["cases"][1].pop("intensity")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    proc = accel_cli("report", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "report.html").exists()


def test_an_absent_case_names_the_op_filter_that_left_it_out():
    full = _bench_doc()
    narrow = {**copy.deepcopy(full), "machine": {**full["machine"], "label": "other"},
              "ops": ["matmul"], "profile": "quick"}
    narrow["cases"] = [c for c in full["cases"] if c["op"] == "matmul"]
    row = next(r for r in report.PP.per_case([full, narrow]) if r.problem.startswith("qmatmul"))
    assert row.why_arch[report.PP.platform_name(narrow)] == \
        "not measured there (not among the cases its benchmark run chose: quick (ops matmul))"


def test_result_files_carry_a_run_id():
    from accel.conformance.results import RUN_ID, machine

    assert machine("x")["run_id"] == RUN_ID and len(RUN_ID) >= 8


# -- Pennycook tables ----------------------------------------------------------------------------------
def test_per_op_pp_uses_the_problems_every_platform_measured(committed):
    ops = {r.problem: r for r in report.PP.per_op(report.PP.per_case(committed.bench, committed.conformance))}
    assert ops["matmul"].pp_arch is not None and ops["matmul"].pp_app is not None
    assert "no attention case was measured on every platform" in next(iter(ops["attention"].why_arch.values()))


def test_an_empty_cell_says_why(tmp_path):
    doc = _bench_doc()
    doc["peaks"], doc["peaks_error"] = None, "UnsupportedError: no compiler"
    for case in doc["cases"]:  # as run_suite writes them without peaks
        case["roofline_efficiency"] = None
    row = next(r for r in report.PP.per_case([doc]) if r.problem.startswith("quantize"))
    plat = report.PP.platform_name(doc)
    assert row.why_arch[plat] == "no measured peak (UnsupportedError: no compiler)"
    assert row.why_app[plat] == "no correct baseline ran beside it"
    assert report._eff_cell(row, plat) == "– (no peak) / – (no baseline)"


# -- representative headlines ----------------------------------------------------------------------------
def test_headlines_come_from_a_representative_size():
    biggest = max(c.spec().flops for c in bench.cases("quick") if c.op == "matmul")
    assert biggest >= 2 * 2048 ** 3  # a 512^3 matmul is launch-bound on a GPU

    def case(op, ratio, **params):
        c = bench.Case.make(op, "float32", **params)
        return {"id": c.id, "op": op, "dtype": "float32", "params": c.p, "flops": c.spec().flops,
                "bytes": c.spec().bytes, "ratio_to_best": ratio, "best_baseline": "torch"}
    doc = {"machine": {"label": "m"}, "backend": "cuda:0", "cases": [
        case("matmul", 0.19, M=512, N=512, K=512), case("matmul", 0.9, M=2048, N=2048, K=2048),
        # a quick-only probe with more FLOPs than the shared GEMV: the headline is the shared one
        case("qmatmul", 40.0, M=8, N=2048, K=2048, fmt="q8_0"),
        case("qmatmul", 2.0, M=1, N=4096, K=4096, fmt="q8_0")]}
    assert report.headlines(report.Results(bench=[doc])) == [
        "m/cuda:0 matmul float32 M=2048 N=2048 K=2048: 0.90x torch",
        "m/cuda:0 qmatmul float32 M=1 N=4096 K=4096 fmt=q8_0: 2.00x torch"]


# -- charts and tables -------------------------------------------------------------------------------------
def _png_size(uri: str) -> tuple[int, int]:
    raw = base64.b64decode(uri.split(",", 1)[1])
    return struct.unpack(">II", raw[16:24])


def test_a_narrow_range_gets_a_linear_axis_and_decades_a_log_one():
    assert report.value_scale([134.0, 187.0]) == "linear"
    assert report.value_scale([0.5, 60000.0]) == "log"


def test_bar_charts_are_shown_at_their_own_size(committed):
    colors = report.series_colors(committed)
    uris = report.op_bars(committed, "matmul", colors)
    assert len(uris) > 1  # 14 matmul cases: split, not squeezed into one wide figure
    for uri in uris:
        width, _ = _png_size(uri)
        assert width <= 1200  # the page's width: the browser never shrinks its labels


def test_numbers_have_thousands_separators_not_exponents(committed):
    page = report.render_html(committed)
    assert "1.51e+03" not in page and "6.095e+04" not in page
    assert ">60,948<" in page  # the H200's measured peak GFLOP/s in the Machines table
    assert "overflow-wrap:anywhere" in page  # long cells wrap instead of running off the page


def test_a_report_without_matplotlib_has_no_charts_and_says_so(monkeypatch, tmp_path):
    doc = _bench_doc()
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    html_path, _ = report.write(report.Results(bench=[doc]), tmp_path)
    page = html_path.read_text()
    assert "Charts left out: matplotlib is not installed" in page and "<img" not in page
    assert "accel-portable[bench]" in page


def test_the_bench_summary_still_renders(capsys):
    from accel.conformance.bench.cli import print_summary

    print_summary(_bench_doc())
    assert "matmul" in capsys.readouterr().out


def test_an_unwritable_output_is_a_typed_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(accel.ArgumentError, match="--out: expected a folder the report can be written into"):
        report.write(report.Results(bench=[_bench_doc()]), blocker / "sub")


def test_times_in_the_throughput_table_have_no_exponents():
    doc = _bench_doc()
    case = next(c for c in doc["cases"] if c["status"] == "ok" and c["baselines"])
    case["median_s"], case["baselines"][0]["median_s"] = 1.5107, 4.77  # 1,511 ms and 4,770 ms
    page = report.render_html(report.Results(bench=[doc]))
    assert ">1,511<" in page and f"{case['baselines'][0]['name']} 4,770" in page
    assert "e+03" not in page


def test_a_conformance_file_labelled_otherwise_on_the_same_machine_still_zeroes_its_pp(tmp_path):
    # `accel bench --label rev` beside `accel conformance` (the host name): one machine
    bench_doc = _bench_doc()
    machine = {**bench_doc["machine"], "label": "rev"}
    bench_doc["machine"] = machine
    failed = {"schema": "accel.conformance/1", "backend": bench_doc["backend"],
              "device": bench_doc["device"], "machine": {**machine, "label": machine["hostname"] + "-x"},
              "cases": [{"op": "matmul", "dtype": "float32", "status": "failed"}]}
    paths = [tmp_path / "bench.json", tmp_path / "conf.json"]
    for path, d in zip(paths, (bench_doc, failed)):
        path.write_text(json.dumps(d))
    res = report.load(paths)
    assert [report.PP.platform_name(d) for d in res.conformance] == [report.PP.platform_name(res.bench[0])]
    assert any(str(paths[1]) in n and "shown under 'rev'" in n for n in res.notes)
    row = next(r for r in report.PP.per_case(res.bench, res.conformance)
               if r.problem.startswith("matmul float32"))
    assert set(row.architectural.values()) == {0.0}
    # another machine (other host) keeps its own label: nothing is paired across machines
    failed["machine"]["hostname"] = "elsewhere"
    paths[1].write_text(json.dumps(failed))
    res = report.load(paths)
    assert report.PP.platform_name(res.conformance[0]) != report.PP.platform_name(res.bench[0])


def test_summary_md_marks_a_noisy_ratio_as_the_page_does():
    doc = _bench_doc()
    case = next(c for c in doc["cases"] if c["status"] == "ok" and c.get("best_baseline"))
    case["iqr_s"] = case["median_s"]  # a neighbour disturbed accel's samples
    res = report.Results(bench=[doc])
    line = next(ln for ln in report.render_markdown(res).splitlines() if case_label_in(ln, case))
    assert line.endswith("(noisy)")
    assert "(noisy)" in report.throughput_section(res)


def case_label_in(line: str, case: dict) -> bool:
    return f"{case['op']} {case['dtype']} {report.case_label(case)}:" in line


def test_a_conformance_file_without_a_machine_pairs_with_a_machine_of_two_bench_files(tmp_path):
    # the quick run and a decode sweep: two files, one machine; its failures must reach the PP
    doc = _bench_doc()
    quick, decode = copy.deepcopy(doc), copy.deepcopy(doc)
    quick["cases"], decode["cases"] = doc["cases"][:3], doc["cases"][3:]
    decode["created"] = "2027-01-01T00:00:00+00:00"
    failed = {"schema": "accel.conformance/1", "backend": doc["backend"], "device": doc["device"],
              "machine": None, "cases": [{"op": "matmul", "dtype": "float32", "status": "failed"}]}
    paths = [tmp_path / "quick.json", tmp_path / "decode.json", tmp_path / "conf.json"]
    for path, d in zip(paths, (quick, decode, failed)):
        path.write_text(json.dumps(d))
    res = report.load(paths)
    assert [report.PP.platform_name(d) for d in res.conformance] == [report.PP.platform_name(res.bench[0])]
