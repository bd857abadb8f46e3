"""What a released command line has: --version, help with no command, info as JSON, every
environment variable documented and shown, dtype aliases, one list syntax, nothing written
in the current folder by a conformance run."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import accel
from accel.__main__ import ENVIRONMENT, main
from accel.conformance.argtypes import dtype_names
from repo_paths import ROOT


def _accel(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "accel", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    proc = _accel("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"accel {version('accel-portable')}"
    assert accel.__version__ == version("accel-portable")


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: accel") and "conformance" in out and "info" in out


def test_info_json_lists_backends_devices_and_the_variables_set(monkeypatch, capsys):
    for name in ENVIRONMENT:  # whatever the machine running the suite has set
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv")
    assert main(["info", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    cpu = next(b for b in record["backends"] if b["name"] == "cpu")
    assert cpu["available"] and cpu["devices"][0]["device"] == "cpu:0"
    assert record["selected"] and record["version"] == accel.__version__
    assert record["environment"] == {"ACCEL_GEMV_KERNEL": "qgemv"}


def test_info_lists_every_format_per_backend_and_what_stays_on_the_cpu(capsys):
    from accel.formats import FORMATS
    from accel.kernels import CODEBOOK_FORMATS, kernel_declines

    assert main(["info", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    cpu = next(b for b in record["backends"] if b["name"] == "cpu")
    assert set(cpu["formats"]) == set(FORMATS) and cpu["quantize_on_cpu_only"] == []
    for b in record["backends"]:
        if b["name"] in ("opencl", "cuda", "hip") and b["formats"]:
            # every format decodes on every kernel runtime (one planner); none quantizes the
            # codebook ones (ggml's grid search)
            assert set(b["formats"]) == set(FORMATS) and b["formats_on_cpu_only"] == []
            assert b["quantize_on_cpu_only"] == [f for f in b["formats"] if kernel_declines("quantize", f)]
            assert set(b["quantize_on_cpu_only"]) == set(CODEBOOK_FORMATS)
            assert "nvfp4" in b["formats"]
    assert main(["info"]) == 0
    assert "formats cpu: q8_0 q4_0" in capsys.readouterr().out


def test_info_table_says_which_variables_are_set(monkeypatch, capsys):
    monkeypatch.setenv("ACCEL_OPENCL_BUILTINS", "0")
    assert main(["info", "--width", "200"]) == 0
    assert "ACCEL_OPENCL_BUILTINS=0" in capsys.readouterr().out


def _variables_read_by_the_code() -> set[str]:
    pattern = re.compile(r"""(?:environ\.get|getenv|environ\.setdefault)\(\s*["']([A-Z0-9_]+)["']|environ\[["']([A-Z0-9_]+)["']\]""")
    found = set()
    for folder in ("accel", "backends", "conformance", "kernels"):
        for path in (ROOT / folder).rglob("*.py"):
            for m in pattern.finditer(path.read_text()):
                found.add(m.group(1) or m.group(2))
    return found


def test_every_variable_the_code_reads_is_documented():
    read = _variables_read_by_the_code()
    assert "ACCEL_BACKEND" in read, "the scan must see the reads it checks"
    assert read <= set(ENVIRONMENT), f"undocumented: {sorted(read - set(ENVIRONMENT))}"
    page = (ROOT / "docs" / "environment.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", page, re.M))
    assert documented == set(ENVIRONMENT)


@pytest.mark.parametrize("given, want", [(["fp16,bf16"], ["float16", "bfloat16"]),
                                         (["half", "float32"], ["float16", "float32"]),
                                         (["FP32", "int8"], ["float32", "int8"])])
def test_dtype_aliases(given, want):
    assert dtype_names(given) == want


def test_conformance_accepts_aliases_and_writes_nothing_here(tmp_path):
    env = {**__import__("os").environ, "ACCEL_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    work = tmp_path / "work"
    work.mkdir()
    proc = _accel("conformance", "--backend", "cpu", "--ops", "attention", "--dtypes", "fp32",
                  "--no-progress", cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "attention/float32" in proc.stdout
    assert list(work.iterdir()) == []  # no .hypothesis folder (it lives under the cache root)
    assert (tmp_path / "cache" / "hypothesis").is_dir()


def test_an_in_process_run_leaves_the_environment_as_it_was(monkeypatch, tmp_path):
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    assert main(["conformance", "--backend", "cpu", "--ops", "dequantize", "--dtypes", "q8_0",
                 "--no-progress"]) == 0
    assert "HYPOTHESIS_STORAGE_DIRECTORY" not in __import__("os").environ


def test_matrix_compiled_only_takes_spaces_or_commas(tmp_path, capsys):
    from accel.conformance import results, suite

    backend = accel.get_backend("cpu")
    report = results.make_report(backend, suite.run(backend, ops=["dequantize"], dtypes=["q8_0"]),
                                 profile="quick", seed=0, command="accel conformance", elapsed_s=0.0)
    path = tmp_path / "cpu.json"
    results.write(report, path)
    tables = []
    for option in (["cuda", "hip"], ["cuda,hip"], []):
        assert main(["conformance", "matrix", str(path), "--compiled-only", *option]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1] and "| cuda | - | untested |" in tables[0]
    assert "| cuda |" not in tables[2] and "| hip |" not in tables[2]


def test_the_package_is_typed_and_licensed():
    assert (ROOT / "accel" / "py.typed").exists()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    toml = (ROOT / "pyproject.toml").read_text()
    assert 'license = "MIT"' in toml and '"setuptools>=77"' in toml and '"py.typed"' in toml
    assert not re.search(r'^__version__ = ', (ROOT / "accel" / "__init__.py").read_text(), re.M)


def test_a_missing_parser_is_one_line_with_one_prefix(tmp_path):
    """Without tree-sitter-cuda (an optional extra), accel port says what to install, once
    prefixed (it printed 'accel port: accel port: ...')."""
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    code = ("import sys; sys.modules['tree_sitter_cuda'] = None\n"  # as if the extra were absent
            "from accel.__main__ import main\n"
            f"sys.exit(main(['port', {str(src)!r}, '--to', 'opencl']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("accel port:") == 1 and "pip install 'accel-portable[port]'" in proc.stderr


@pytest.mark.parametrize("command, option, names", [
    (["portability"], "--backends", ["cpu:0", "opencl:0"]),
    (["kernels", "check"], "--targets", ["sm_80", "gfx90a"]),
    (["conformance"], "--ops", ["matmul", "attention"]),
    (["bench"], "--ops", ["matmul", "qmatmul"]),
    (["tune"], "--ops", ["matmul", "gemv"])])
def test_every_list_option_takes_spaces_or_commas(command, option, names):
    from accel.conformance.argtypes import split_names
    from accel.__main__ import build_parser

    parser = build_parser()
    spaced = parser.parse_args([*command, option, *names])
    commas = parser.parse_args([*command, option, ",".join(names)])
    dest = option.lstrip("-")
    assert split_names(getattr(spaced, dest)) == split_names(getattr(commas, dest)) == names


def test_a_file_that_cannot_be_written_is_one_line_and_status_2(tmp_path):
    """/proc takes no new file though root passes os.access; /dev/full fails on the write."""
    for path, why in (("/proc/accel-result.json", "/proc/accel-result.json"),
                      ("/dev/full", "No space left on device")):
        proc = subprocess.run([sys.executable, "-m", "accel", "conformance", "--backend", "cpu",
                               "--ops", "matmul", "--dtypes", "int8", "--no-progress", "--json", path],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, (path, proc.stderr[-1000:])
        assert "Traceback" not in proc.stderr and why in proc.stderr


def test_info_keeps_device_ids_whole_when_piped(capsys):
    assert main(["info"]) == 0
    printed = capsys.readouterr().out
    for s in accel.backends():
        for i, _ in enumerate(s.devices):
            assert f"{s.name}:{i}" in printed


@pytest.mark.parametrize("argv, words", [
    (["info", "--json", "--ray-resources"], ["not allowed with"]),
    (["port", "--stats", "tests/port_corpus", "-o", "stats.txt"], ["--output", "--stats"]),
    (["port", "tests/port_corpus/block_sum.cu", "--to", "hip", "--json"], ["--json", "--stats"]),
])
def test_conflicting_flags_are_refused_not_ignored(argv, words, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    argv = [a if a != "stats.txt" else str(tmp_path / a) for a in argv]
    try:
        status = main(argv)
    except SystemExit as e:  # argparse's own refusal
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_accel_imports_where_torch_is_blocked_or_too_old():
    """`sys.modules["torch"] = None` (how tests block torch) must not break `import accel`."""
    code = "import sys; sys.modules['torch'] = None; import accel; print(accel.matmul.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "matmul", out.stderr


def test_an_oserror_that_is_no_file_problem_is_not_called_one(monkeypatch):
    """Only a file that cannot be written or read is a one-line status 2; another OSError (a
    library that fails to load) is a bug to show, not a 'file' message."""
    import accel.__main__ as cli

    def broken(args):
        raise OSError("libggml.so: cannot open shared object file")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["info"].set_defaults(func=broken)
    with pytest.raises(OSError, match="libggml"):
        main(["info"])
