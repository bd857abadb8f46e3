"""``accel report`` (one HTML + Markdown report from result files of any number of machines) and
``accel portability`` (the README's main job: conformance and benchmarks on every available
backend, then the report).

>>> from accel.conformance.report.cli import portability_devices
>>> "cpu:0" in portability_devices()
True
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from accel.conformance.argtypes import names, split_names
from accel.conformance.bench.cli import console, print_summary, run_bench, write_json

#: the conformance run of one backend must not eat the whole 10-minute budget of `portability`
CONFORMANCE_TIMEOUT_S = 300
#: GPU targets whose kernels `portability` compile-checks when their backend cannot run here
COMPILE_TARGETS = {"cuda": "sm_90", "hip": "gfx90a"}
KERNELS_CHECK_TIMEOUT_S = 240
#: a 270M-parameter model's conformance or speed run on a 2-core CPU takes a minute or two
MODEL_TIMEOUT_S = 900


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="HTML + Markdown report from result files",
        description="Merge result files from any number of machines into one cross-vendor "
                    "report: writes report.html (self-contained) and summary.md into OUT and "
                    "prints the path of report.html.")
    p.add_argument("results", nargs="+",
                   help="accel.bench/1, accel.conformance/1 and accel.kernels_check/1 JSON files "
                        "(from the --json of accel bench, accel conformance, accel kernels check)")
    p.add_argument("-o", "--out", required=True, type=_new_or_folder,
                   help="output directory (created once the report is rendered)")
    p.set_defaults(func=_report)

    p = subparsers.add_parser(
        "portability", help="conformance + benchmarks on every available backend, then the report",
        description="The main job: the quick conformance suite and the benchmarks on device 0 of "
                    "every available built-in backend, and a compile check of the kernels for GPU "
                    "targets without a device here. Writes every result file, report.html and "
                    "summary.md into OUT and prints the path of report.html last. Exit status 1 "
                    "when a conformance case failed, a run did not finish, a benchmark was "
                    "invalid or a kernel did not compile (the report is written either way).")
    p.add_argument("-o", "--out", default="report", type=_new_or_folder,
                   help="output directory (default: ./report); other result files there are "
                        "kept, named, and left out of this report")
    p.add_argument("--backends", action="extend", nargs="+", metavar="DEVICE", type=names,
                   help="devices to run, and nothing else, space or comma separated (default: "
                        "device 0 of every available built-in backend, plus a compile check for "
                        "GPU targets without a device)")
    p.add_argument("--sizes", choices=("quick", "full"), default="quick",
                   help="benchmark sizes, as for accel bench (default: %(default)s)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help="only these ops, space or comma separated, in the conformance run and in "
                        "the benchmarks where they measure it (default: every op)")
    p.add_argument("--label", default=None, help="machine name in merged reports (default: hostname)")
    p.add_argument("--model", metavar="GGUF", type=_gguf_file,
                   help="also a real model on every device: its model conformance (logits and "
                        "per-layer error against the float64 forward) and its prompt and decode "
                        "tokens/s beside llama.cpp (where llama-cpp-python is installed)")
    p.set_defaults(func=_portability)


def _new_or_folder(value: str) -> Path:
    """argparse ``type`` of report's -o: a folder or a path to create one at, left uncreated until
    the files are read and rendered (a refused file must not leave an empty folder)."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the file {value}")
    nearest = next(p for p in (path, *path.parents) if p.exists())  # "." at worst
    if not nearest.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create the folder {value}: {nearest} is a file")
    if not os.access(nearest, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {value}: permission denied")
    return path


def _gguf_file(value: str) -> Path:
    """argparse ``type`` of --model: an existing file (its contents are checked when loaded)."""
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"expected a GGUF file, got {value!r} (no such file)")
    return Path(value)


def _report(args: argparse.Namespace) -> int:
    from accel.conformance.report import render as report

    html_path, md_path = report.write(report.load(args.results), args.out)
    print(html_path)
    console().print(f"summary: {md_path}")
    return 0


def portability_devices() -> list[str]:
    """Device 0 of every available built-in backend (plugins are third-party code: not run)."""
    import accel

    return [f"{s.name}:0" for s in accel.backends() if s.available and s.origin == "builtin"]


def _as_typed(cmd: list[str]) -> str:
    """``[python, -m, accel, ...]`` as the accel command a user would type."""
    return " ".join(["accel", *cmd[3:]])


def run_conformance(device: str, out: Path, label: str, ops: list[str] | None = None) -> dict | None:
    """`accel conformance --profile quick` (of ``ops``, default all) in a subprocess (a crash
    there cannot take the report down); its result file gets this machine's identity so reports
    can merge it."""
    from accel.conformance.results import machine

    cmd = [sys.executable, "-m", "accel", "conformance", "--backend", device, "--profile", "quick",
           "--json", str(out), *(["--ops", ",".join(ops)] if ops else [])]
    out_console = console()
    out_console.print(f"[bold]conformance[/] {device}: {_as_typed(cmd)}")
    out.unlink(missing_ok=True)  # never read back an earlier run's file as this one's
    try:
        # its progress bar (stderr) shows; its tables (stdout) would bury the report path
        proc = subprocess.run(cmd, timeout=CONFORMANCE_TIMEOUT_S, stdout=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        out_console.print(f"[red]conformance on {device} exceeded {CONFORMANCE_TIMEOUT_S} s; skipped[/]")
        return None
    try:
        if proc.returncode not in (0, 1):  # 1 = cases failed (a verdict); anything else = a crash
            raise ValueError(f"exit status {proc.returncode}")
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = proc.stdout.strip().splitlines()[-3:]
        out_console.print(f"[red]conformance on {device} produced no result file[/] (exit {proc.returncode}): "
                      + " | ".join(tail))
        return None
    doc["machine"] = machine(label)  # the same record as the bench files, under the run's label
    write_json(doc, out)
    counts = {k: v for k, v in (doc.get("summary") or {}).items() if isinstance(v, int) and v}
    out_console.print(f"conformance {device}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return doc


def run_kernels_check(out: Path) -> tuple[dict | None, str | None]:
    """Compile every shipped kernel for the GPU targets whose backend is unavailable here, so the
    report shows them as "compiled only" rather than absent: (its document, what went wrong)."""
    import accel

    missing = [COMPILE_TARGETS[s.name] for s in accel.backends()
               if s.name in COMPILE_TARGETS and not s.available]
    if not missing:
        return None, None
    cmd = [sys.executable, "-m", "accel", "kernels", "check", "--targets", ",".join(missing),
           "--allow-unavailable", "--json", str(out)]
    out_console = console()
    out_console.print(f"[bold]compile check[/] {', '.join(missing)} (no device for them here): "
                  f"{_as_typed(cmd)}")
    out.unlink(missing_ok=True)
    try:
        subprocess.run(cmd, timeout=KERNELS_CHECK_TIMEOUT_S, stdout=subprocess.DEVNULL)
        doc = json.loads(out.read_text())
    except subprocess.TimeoutExpired:
        problem = f"the compile check exceeded {KERNELS_CHECK_TIMEOUT_S} s"
    except (OSError, ValueError):
        problem = "the compile check produced no result file"
    else:
        failed = sum(r.get("status") == "failed" for r in doc.get("results", []))
        return doc, f"{failed} kernel builds failed to compile" if failed else None
    out_console.print(f"[red]{problem}; skipped[/]")
    return None, problem


def run_model(device: str, model: Path, out: Path, label: str) -> tuple[list[dict], list[str]]:
    """The model's conformance and speed on ``device``, each in a subprocess (a crash there is a
    result, not the end of the report): (the documents, what failed)."""
    conf, bench = out / f"model-conformance-{device.replace(':', '')}.json", \
        out / f"model-bench-{device.replace(':', '')}.json"
    jobs = [("model conformance", conf, ["conformance", "--model", str(model), "--no-progress"]),
            ("model bench", bench, ["bench", "--model", str(model)])]
    docs, problems = [], []
    for what, path, argv in jobs:
        cmd = [sys.executable, "-m", "accel", *argv, "--backend", device, "--label", label,
               "--json", str(path)]
        console().print(f"[bold]{what}[/] {device}: {_as_typed(cmd)}")
        path.unlink(missing_ok=True)
        try:
            proc = subprocess.run(cmd, timeout=MODEL_TIMEOUT_S, stdout=subprocess.PIPE, text=True)
            sys.stdout.write(proc.stdout)
            doc = json.loads(path.read_text())
        except subprocess.TimeoutExpired:
            problems.append(f"{what} on {device} exceeded {MODEL_TIMEOUT_S} s")
            continue
        except (OSError, ValueError):
            problems.append(f"{what} on {device} produced no result file (exit {proc.returncode})")
            continue
        docs.append(doc)
        if doc.get("passed") is False:
            problems.append(f"{what} on {device}: " + (f"crashed ({doc['crashed']})"
                                                      if doc.get("crashed") else "outside its bounds"))
    return docs, problems


def _conformance_problem(device: str, doc: dict | None) -> str | None:
    if doc is None:
        return f"conformance on {device} did not finish (see above)"
    summary = doc.get("summary") or {}
    bad = ", ".join(f"{summary[k]} {k}" for k in ("failed", "error") if summary.get(k))
    return f"conformance on {device}: {bad}" if bad else None


def _bench_problem(device: str, doc: dict) -> str | None:
    bad = [c for c in doc["cases"] if c["status"] in ("invalid", "error")]
    return f"bench on {device}: {len(bad)} cases invalid or failed" if bad else None


def _warn_of_other_files(out: Path, written: list[Path]) -> None:
    """Name the result files in OUT this run did not write (an earlier run's, or files copied
    there to merge): the report leaves them out, `accel report OUT/*.json` would take them in.
    Never deleted: they may be the only copy of another machine's results."""
    others = sorted(p.name for p in out.glob("*.json") if p not in written)
    if others:
        console().print(f"[yellow]{out} also holds {', '.join(others)}: not in this report (this "
                        "run's files are); `accel report` on the folder would mix them in[/]")


def _chosen_ops(ops: list[str] | None) -> tuple[list[str] | None, list[str] | None]:
    """``--ops`` checked against the conformance suite's ops, and those of them the benchmarks
    measure (None: every op; an empty list: none of them is benchmarked)."""
    from accel.conformance import suite
    from accel.conformance.bench.suite import DECODER_OPS
    from accel.spec import OPS

    if ops is None:
        return None, None
    suite.planned("quick", 0, ops, None)  # an unknown name is refused before anything runs
    return ops, [o for o in ops if o in OPS or o in DECODER_OPS]


def _portability(args: argparse.Namespace) -> int:
    """Exit status 1 when anything failed: a conformance case, a run that did not finish, an
    invalid benchmark, a kernel that did not compile (the report is written either way)."""
    import accel
    from accel.conformance.bench.timing import pin_pocl_threads
    from accel.conformance.report import render as report
    from accel.conformance.results import machine

    pin_pocl_threads()  # before portability_devices starts PoCL
    started = time.perf_counter()
    devices = split_names(args.backends) or portability_devices()
    for device in devices:  # a typo in the last name must not cost the runs before it
        accel.get_backend(device)
    ops, bench_ops = _chosen_ops(split_names(args.ops))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)  # only now: a refused device leaves no folder
    label = args.label or machine()["label"]
    res = report.Results()
    problems: list[str | None] = []
    for device in devices:
        slug = device.replace(":", "")
        conf = run_conformance(device, out / f"conformance-{slug}.json", label, ops)
        problems.append(_conformance_problem(device, conf))
        if conf is not None:
            res.conformance.append(conf)
        if bench_ops != []:
            doc = run_bench(device, ops=bench_ops, sizes=args.sizes, label=label, command=args.command_line)
            write_json(doc, out / f"bench-{slug}.json")
            print_summary(doc)
            problems.append(_bench_problem(device, doc))
            res.bench.append(doc)
        if args.model:
            docs, failed = run_model(device, args.model, out, label)
            res.models += docs
            problems += failed
    if not args.backends:
        compiled, problem = run_kernels_check(out / "kernels-check.json")
        problems.append(problem)
        if compiled is not None:
            res.kernels.append(compiled)
    _warn_of_other_files(out, [out / f"{kind}-{d.replace(':', '')}.json" for d in devices
                               for kind in ("conformance", "bench", "model-conformance", "model-bench")]
                         + [out / "kernels-check.json"])
    found = [p for p in problems if p]
    res.warnings.extend(found)  # the report says so too, not only this run's exit status
    html_path, md_path = report.write(res, out)
    console().print(f"portability run of {', '.join(devices)} took {time.perf_counter() - started:.0f} s; "
                     f"summary: {md_path}")
    for problem in found:
        console().print(f"[red]failed:[/] {problem}")
    print(html_path.resolve())
    return 1 if found else 0
