"""The command line's help and the files it writes: every command says in plain text what it does
and what its options default to, its usage does not demand what is optional, a missing input is a
usage error (exit 2) naming the file, and an output file lands where it is asked to go, folders
created, or is refused before the run."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from accel.__main__ import build_parser, main
from repo_paths import TESTS

DATA = TESTS / "kernels_check_data"
CORPUS = TESTS / "cuda_corpus"


def _commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command under ``parser`` by its words ("kernels check"), subcommands included."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = f"{path} {name}".strip()
                found[words] = sub
                found.update(_commands(sub, words))
    return found


PARSER = build_parser()
COMMANDS = {"": PARSER, **_commands(PARSER)}


def _option_help(command: str, option: str) -> str:
    """An option's help as --help prints it, ``%(default)s`` filled in, before line wrapping."""
    action = next(a for a in COMMANDS[command]._actions if option in a.option_strings)
    return (action.help or "") % vars(action)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "accel")
def test_every_command_describes_itself_in_plain_text(command):
    parser = COMMANDS[command]
    assert parser.description and len(parser.description.split()) >= 5
    assert "``" not in parser.format_help()  # reStructuredText from a docstring


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "accel")
def test_every_option_with_a_default_shows_it(command):
    for action in COMMANDS[command]._actions:
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in _option_help(command, action.option_strings[-1]), action.option_strings


@pytest.mark.parametrize("command,option,shown", [
    ("conformance", "--profile", "(default: quick)"),
    ("conformance", "--seed", "(default: 0)"),
    ("bench", "--sizes", "(default: quick)"),
    ("portability", "--sizes", "(default: quick)"),
    ("info", "--width", "(default: the terminal's"),  # None: rich measures the terminal
    ("kernels check", "--width", "(default: the terminal's"),
    ("tune", "--ops", "(default: all)"),
    ("tune", "--repeat", "(default: 10)"),
])
def test_the_defaults_asked_for_are_shown(command, option, shown):
    if command not in COMMANDS:
        pytest.skip(f"accel {command} is not registered here (a package it needs is missing)")
    assert shown in _option_help(command, option)


def test_conformance_usage_shows_its_subcommand_as_optional():
    usage = COMMANDS["conformance"].format_usage()
    assert "[matrix]" in usage and "{matrix}" not in usage


def test_report_help_names_every_schema_it_reads():
    from accel.conformance.report.render import BENCH_SCHEMA, CONFORMANCE_SCHEMA, KERNELS_CHECK_SCHEMA

    results = next(a for a in COMMANDS["report"]._actions if a.dest == "results")
    for schema in (BENCH_SCHEMA, CONFORMANCE_SCHEMA, KERNELS_CHECK_SCHEMA):
        assert schema in results.help


def test_port_of_a_missing_file_is_a_usage_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "missing.cu"
    assert main(["port", str(missing), "--to", "hip"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "FILE: expected a readable CUDA source file" in err and str(missing) in err


def test_conformance_json_goes_into_a_new_folder(tmp_path):
    out = tmp_path / "new" / "nested" / "conformance.json"
    assert main(["conformance", "--backend", "cpu", "--ops", "matmul", "--dtypes", "float32",
                 "--no-progress", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["schema"] == "accel.conformance/1"


def test_kernels_check_json_goes_into_a_new_folder(tmp_path):
    out = tmp_path / "new" / "nested" / "check.json"
    # with no OpenCL device here its row is "unavailable", accepted: the file is written either way
    assert main(["kernels", "check", str(DATA / "scale.cl"), "--targets", "opencl",
                 "--allow-unavailable", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["schema"] == "accel.kernels_check/1"


def test_port_output_goes_into_a_new_folder(tmp_path):
    pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
    out = tmp_path / "new" / "nested" / "saxpy.cl"
    assert main(["port", str(CORPUS / "saxpy_gridstride.cu"), "--to", "opencl", "-o", str(out)]) == 0
    assert "__kernel void saxpy(" in out.read_text()


@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_an_unwritable_output_is_refused_before_the_run(tmp_path, capsys, where):
    (tmp_path / "file").touch()
    out = tmp_path / "file" / "x.json" if where == "under a file" else tmp_path
    with pytest.raises(SystemExit) as exit_:
        main(["conformance", "--backend", "cpu", "--no-progress", "--json", str(out)])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and "argument --json" in captured.err
    assert "conformance: cpu" not in captured.err  # nothing ran


def test_gpu_goals_help_runs_nothing_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "accel.conformance.bench.gpu_goals", "--help"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "OUT.json" in proc.stdout and "--gemv-once" in proc.stdout and "``" not in proc.stdout
    assert list(tmp_path.iterdir()) == []
