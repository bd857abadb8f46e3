"""``accel bench``, ``accel report`` and ``accel portability`` (the README's main-job command).

Heavy imports (matplotlib, torch, backends) stay inside the command functions so ``accel info``
stays fast.

>>> from accel.bench_cli import portability_devices
>>> "cpu:0" in portability_devices()
True
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from .cli import names, output_file, output_folder, split_names

#: the conformance run of one backend must not eat the whole 10-minute budget of `portability`
CONFORMANCE_TIMEOUT_S = 300
#: GPU targets whose kernels `portability` compile-checks when their backend cannot run here
COMPILE_TARGETS = {"cuda": "sm_90", "hip": "gfx90a"}
KERNELS_CHECK_TIMEOUT_S = 240


def register(subparsers) -> None:
    from accel.spec import OPS

    p = subparsers.add_parser(
        "bench", help="benchmark one backend against baselines on its device",
        description="Benchmark accel's ops on one device beside what a user would run instead "
                    "there (numpy, torch, cuBLAS, ...), against the device's measured peaks "
                    "(roofline). Prints a summary table; --json writes the accel.bench/1 result "
                    "file. Exit status 1 when a case errors or its result is wrong.")
    p.add_argument("--backend", default=None, help="device, e.g. cpu or opencl:0 (default: automatic)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help=f"ops to run, space or comma separated, from {', '.join(OPS)} (default: all)")
    p.add_argument("--sizes", choices=("quick", "full"), default="quick",
                   help="quick: small cases, short budgets (minutes on PoCL); full: release sizes "
                        "(default: %(default)s)")
    p.add_argument("--json", default=None, type=output_file,
                   help="write the accel.bench/1 result file here")
    p.add_argument("--no-baselines", action="store_true", help="measure accel only")
    p.add_argument("--flush", action="store_true", help="flush caches between repetitions")
    p.add_argument("--label", default=None, help="machine name in merged reports (default: hostname)")
    p.add_argument("--refresh-peaks", action="store_true",
                   help="discard the cached device peaks (default: re-measure and keep the best)")
    p.set_defaults(func=_bench)

    p = subparsers.add_parser(
        "report", help="HTML + Markdown report from result files",
        description="Merge result files from any number of machines into one cross-vendor "
                    "report: writes report.html (self-contained) and summary.md into OUT and "
                    "prints the path of report.html.")
    p.add_argument("results", nargs="+",
                   help="accel.bench/1, accel.conformance/1 and accel.kernels_check/1 JSON files "
                        "(from the --json of accel bench, accel conformance, accel kernels check)")
    p.add_argument("-o", "--out", required=True, type=output_folder, help="output directory")
    p.set_defaults(func=_report)

    p = subparsers.add_parser(
        "portability", help="conformance + benchmarks on every available backend, then the report",
        description="The main job: the quick conformance suite and the benchmarks on device 0 of "
                    "every available built-in backend, and a compile check of the kernels for GPU "
                    "targets without a device here. Writes every result file, report.html and "
                    "summary.md into OUT and prints the path of report.html last.")
    p.add_argument("-o", "--out", default="report", type=output_folder,
                   help="output directory (default: ./report)")
    p.add_argument("--backends", nargs="+", default=None,
                   help="devices to run, and nothing else (default: device 0 of every available "
                        "built-in backend, plus a compile check for GPU targets without a device)")
    p.add_argument("--sizes", choices=("quick", "full"), default="quick",
                   help="benchmark sizes, as for accel bench (default: %(default)s)")
    p.add_argument("--label", default=None, help="machine name in merged reports (default: hostname)")
    p.set_defaults(func=_portability)


def _console():
    from rich.console import Console

    return Console(stderr=True)


def run_bench(device: str, *, ops=None, sizes: str = "quick", with_baselines: bool = True,
              flush: bool = False, label: str | None = None, refresh_peaks: bool = False) -> dict:
    """Benchmark one device with a progress bar; returns the accel.bench/1 document."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import accel
    from accel import bench, timing

    backend = accel.get_backend(device)
    suite = bench.cases(sizes, ops)
    console = _console()
    console.print(f"[bold]accel bench[/] {backend.device_id} ({backend.info.name}): "
                  f"{len(suite)} cases, {sizes} sizes; measuring device peaks first")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"{backend.device_id}", total=len(suite))

        def advance(case, rec):
            progress.update(task, advance=1, description=f"{backend.device_id} {case.id}")
        return bench.run_suite(backend, suite, budget=timing.BUDGETS[sizes], with_baselines=with_baselines,
                               flush=flush, label=label, profile=sizes, on_case=advance,
                               peaks_mode="refresh" if refresh_peaks else "update")


def print_summary(doc: dict) -> None:
    """The summary table of one bench document."""
    from rich.console import Console
    from rich.table import Table

    from accel.bench import busy_warning
    from accel.report import case_label, ratio_text

    peaks = doc.get("peaks")
    roof = (f"peaks: {peaks['gflops']:.0f} GFLOP/s, {peaks['gbs']:.0f} GB/s" if peaks
            else f"no peaks: {doc.get('peaks_error') or 'not measurable on this backend'}")
    table = Table(title=f"{doc['backend']} on {doc['device']['name']} ({roof})")
    for col in ("op", "dtype", "params", "median ms", "IQR ms", "GFLOP/s", "GB/s", "roofline",
                "vs best baseline"):
        table.add_column(col, justify="right" if col not in ("op", "dtype", "params", "vs best baseline")
                         else "left")
    for c in doc["cases"]:
        if c["status"] != "ok":
            table.add_row(c["op"], c["dtype"], case_label(c), f"[yellow]{c['status']}[/]", "", "", "", "",
                          c.get("reason", "")[:60])
            continue
        eff = c.get("roofline_efficiency")
        table.add_row(c["op"], c["dtype"], case_label(c), f"{c['median_s'] * 1e3:.3g}",
                      f"{c['iqr_s'] * 1e3:.2g}", f"{c['gflops']:.3g}" if c["flops"] else "–",
                      f"{c['gbs']:.3g}", "–" if eff is None else f"{100 * eff:.0f}%", ratio_text(c))
    # piped output (CI logs) gets a width that fits the table instead of rich's 80 columns
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    if warning := busy_warning(doc):
        console.print(f"[yellow]warning: {warning}[/]")


def _write_json(doc: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(doc, indent=1))


def _bench(args: argparse.Namespace) -> int:
    doc = run_bench(args.backend or _default_device(), ops=split_names(args.ops), sizes=args.sizes,
                    with_baselines=not args.no_baselines, flush=args.flush, label=args.label,
                    refresh_peaks=args.refresh_peaks)
    print_summary(doc)
    if args.json:
        _write_json(doc, args.json)
        _console().print(f"wrote {args.json}")
    return 1 if any(c["status"] in ("invalid", "error") for c in doc["cases"]) else 0


def _default_device() -> str:
    from accel.registry import current_device

    return current_device()


def _report(args: argparse.Namespace) -> int:
    from accel import report

    html_path, md_path = report.write(report.load(args.results), args.out)
    print(html_path)
    _console().print(f"summary: {md_path}")
    return 0


def portability_devices() -> list[str]:
    """Device 0 of every available built-in backend (plugins are third-party code: not run)."""
    import accel

    return [f"{s.name}:0" for s in accel.backends() if s.available and s.origin == "builtin"]


def _as_typed(cmd: list[str]) -> str:
    """``[python, -m, accel, ...]`` as the accel command a user would type."""
    return " ".join(["accel", *cmd[3:]])


def run_conformance(device: str, out: Path, label: str) -> dict | None:
    """`accel conformance --profile quick` in a subprocess (a crash there cannot take the report
    down); its result file gets this machine's identity so reports can merge it."""
    from accel.bench import machine

    cmd = [sys.executable, "-m", "accel", "conformance", "--backend", device, "--profile", "quick",
           "--json", str(out)]
    console = _console()
    console.print(f"[bold]conformance[/] {device}: {_as_typed(cmd)}")
    out.unlink(missing_ok=True)  # never read back an earlier run's file as this one's
    try:
        # its progress bar (stderr) shows; its tables (stdout) would bury the report path
        proc = subprocess.run(cmd, timeout=CONFORMANCE_TIMEOUT_S, stdout=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        console.print(f"[red]conformance on {device} exceeded {CONFORMANCE_TIMEOUT_S} s; skipped[/]")
        return None
    try:
        if proc.returncode not in (0, 1):  # 1 = cases failed (a verdict); anything else = a crash
            raise ValueError(f"exit status {proc.returncode}")
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        tail = proc.stdout.strip().splitlines()[-3:]
        console.print(f"[red]conformance on {device} produced no result file[/] (exit {proc.returncode}): "
                      + " | ".join(tail))
        return None
    doc["machine"] = machine(label)  # the same record as the bench files, under the run's label
    _write_json(doc, out)
    counts = {k: v for k, v in (doc.get("summary") or {}).items() if isinstance(v, int) and v}
    console.print(f"conformance {device}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return doc


def run_kernels_check(out: Path) -> dict | None:
    """Compile every shipped kernel for the GPU targets whose backend is unavailable here, so the
    report shows them as "compiled only" rather than absent."""
    import accel

    missing = [COMPILE_TARGETS[s.name] for s in accel.backends()
               if s.name in COMPILE_TARGETS and not s.available]
    if not missing:
        return None
    cmd = [sys.executable, "-m", "accel", "kernels", "check", "--targets", ",".join(missing),
           "--allow-unavailable", "--json", str(out)]
    console = _console()
    console.print(f"[bold]compile check[/] {', '.join(missing)} (no device for them here): "
                  f"{_as_typed(cmd)}")
    out.unlink(missing_ok=True)
    try:
        subprocess.run(cmd, timeout=KERNELS_CHECK_TIMEOUT_S, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())
    except subprocess.TimeoutExpired:
        console.print(f"[red]compile check exceeded {KERNELS_CHECK_TIMEOUT_S} s; skipped[/]")
    except (OSError, ValueError):
        console.print("[red]compile check produced no result file; skipped[/]")
    return None


def _portability(args: argparse.Namespace) -> int:
    import accel
    from accel import report
    from accel.bench import machine

    started = time.perf_counter()
    devices = args.backends or portability_devices()
    for device in devices:  # a typo in the last name must not cost the runs before it
        accel.get_backend(device)
    out = args.out
    label = args.label or machine()["label"]
    res = report.Results()
    for device in devices:
        slug = device.replace(":", "")
        conf = run_conformance(device, out / f"conformance-{slug}.json", label)
        if conf is not None:
            res.conformance.append(conf)
        doc = run_bench(device, sizes=args.sizes, label=label)
        _write_json(doc, out / f"bench-{slug}.json")
        print_summary(doc)
        res.bench.append(doc)
    if not args.backends:
        compiled = run_kernels_check(out / "kernels-check.json")
        if compiled is not None:
            res.kernels.append(compiled)
    html_path, md_path = report.write(res, out)
    _console().print(f"portability run of {', '.join(devices)} took {time.perf_counter() - started:.0f} s; "
                     f"summary: {md_path}")
    print(html_path.resolve())
    return 0
