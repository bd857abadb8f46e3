"""Bad command-line input is a usage error (exit 2) naming the argument, what was expected and what
came, before any work starts; and a selection that selects nothing is refused, not passed."""
from __future__ import annotations

import argparse

import pytest

import accel
from accel.__main__ import build_parser, main
from repo_paths import TESTS

DATA = TESTS / "kernels_check_data"
PARSER = build_parser()
COMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices


def _usage_error(capsys, argv: list[str]) -> str:
    """stderr of an argv that argparse must refuse with exit status 2."""
    with pytest.raises(SystemExit) as exit_:
        PARSER.parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


#: argv that argparse must refuse, the argument its message names, and the value it quotes
REFUSED = [
    (["conformance", "--ops", ","], "argument --ops", "','"),
    (["conformance", "--ops", "matmul", "--dtypes", ""], "argument --dtypes", "''"),
    (["bench", "--ops", ","], "argument --ops", "','"),
    (["tune", "--ops", "", "--dry-run"], "argument --ops", "''"),
    (["kernels", "check", "--targets", "", "x.cu"], "argument --targets", "''"),
    (["kernels", "check", "--targets", " , ", "x.cu"], "argument --targets", "' , '"),
    (["conformance", "--seed", "-1"], "argument --seed", "'-1'"),
    (["info", "--width", "0"], "argument --width", "'0'"),
    (["info", "--width", "-5"], "argument --width", "'-5'"),
    (["kernels", "check", "--width", "0"], "argument --width", "'0'"),
    (["tune", "--repeat", "0"], "argument --repeat", "'0'"),
    (["tune", "--repeat", "-1"], "argument --repeat", "'-1'"),
]


@pytest.mark.parametrize("argv,named,got", REFUSED, ids=[" ".join(argv) for argv, _, _ in REFUSED])
def test_empty_lists_and_out_of_range_numbers_are_usage_errors(capsys, argv, named, got):
    if argv[0] not in COMMANDS:
        pytest.skip(f"accel {argv[0]} is not registered here (a package it needs is missing)")
    err = _usage_error(capsys, argv)
    assert f"{named}: expected" in err and f"got {got}" in err


@pytest.mark.parametrize("command", [["report", "results.json"], ["portability", "--backends", "cpu"]],
                         ids=lambda c: c[0])
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_output_folder_that_cannot_be_one_is_refused_before_the_run(tmp_path, capsys, command, where):
    (tmp_path / "file").touch()
    out = tmp_path / "file" if where == "a file" else tmp_path / "file" / "sub"
    err = _usage_error(capsys, [*command, "-o", str(out)])
    assert "argument -o/--out" in err and str(out) in err


def test_a_non_utf8_kernel_file_is_a_usage_error_naming_it(tmp_path, capsys):
    source = tmp_path / "bin.cu"
    source.write_bytes(b"\xff\xfe\x00__global__ void k() {}\n")
    assert main(["kernels", "check", str(source), "--targets", "sm_90"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "FILE: expected a readable kernel source file" in err and str(source) in err


def test_kernels_check_with_no_target_for_its_files_is_not_a_pass(capsys):
    # OpenCL C is built for opencl only: against the default GPU targets nothing would compile
    assert main(["kernels", "check", str(DATA / "scale.cl")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--targets: expected a target at least one source is built for" in err
    assert "meant for opencl only" in err


def test_conformance_filters_that_match_no_case_are_a_usage_error(capsys):
    assert main(["conformance", "--backend", "cpu", "--ops", "attention", "--dtypes", "int8",
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "passed" not in captured.out  # nothing ran
    err = " ".join(captured.err.split())
    assert "--ops/--dtypes: expected a selection matching at least one case" in err
    assert "attention: float32, float16, bfloat16" in err and "got --ops attention --dtypes int8" in err


def test_a_bench_selection_of_no_case_is_a_usage_error(capsys, tmp_path):
    # the decode sweep has no matmul: an empty result file would replace a real one in a report
    out = tmp_path / "empty.json"
    assert main(["bench", "--backend", "cpu", "--ops", "matmul", "--sizes", "decode",
                 "--json", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "ops: expected ops the decode sizes measure (qmatmul), got ['matmul']" in err
    assert not out.exists()


def test_portability_checks_every_backend_before_running_any(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["portability", "--backends", "echo", "nope", "-o", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "backend: expected one of" in err and "got 'nope'" in err
    assert "conformance" not in err and not out.exists()  # echo was not run; no folder was made


@pytest.fixture
def selection(monkeypatch):
    """Set ACCEL_BACKEND for this test (accel reads it once; set_backend(None) reads it again)."""
    def select(device: str) -> None:
        monkeypatch.setenv("ACCEL_BACKEND", device)
        accel.set_backend(None)
    yield select
    monkeypatch.undo()
    accel.set_backend(None)


@pytest.mark.parametrize("device,why", [
    ("[/]", "backend: expected one of"),
    ("cpu:x", "backend: expected a device string 'name' or 'name:index', got 'cpu:x'"),
    ("cpu:7", "backend: expected a device index below"),
])
def test_info_says_an_invalid_selection_is_invalid_and_why(selection, capsys, device, why):
    selection(device)
    assert main(["info", "--width", "400"]) == 0
    out = capsys.readouterr().out
    assert f"device selection {device!r} is invalid" in out and why in out
    assert "automatic choice" not in out


def test_info_shows_a_valid_selection_as_the_choice(selection, capsys):
    selection("cpu")
    assert main(["info", "--width", "400"]) == 0
    out = capsys.readouterr().out
    assert "automatic choice: cpu" in out and "is invalid" not in out


def test_an_existing_writable_output_needs_no_writable_folder():
    import argparse

    from accel.conformance.argtypes import output_file

    assert str(output_file("/dev/null")) == "/dev/null"
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        output_file("/tmp")
