"""``accel bench``: benchmark one device against its baselines, with a progress bar and a
summary table.

Heavy imports (torch, backends) stay inside the command functions so ``accel info`` stays fast.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from accel.conformance.argtypes import names, output_file, split_names

def register(subparsers) -> None:
    from accel.conformance.bench.decoder import OPS as DECODER_OPS
    from accel.spec import OPS

    p = subparsers.add_parser(
        "bench", help="benchmark one backend against baselines on its device",
        description="Benchmark accel's ops on one device beside what a user would run instead "
                    "there (numpy, torch, cuBLAS, ...), against the device's measured peaks "
                    "(roofline). Prints a summary table; --json writes the accel.bench/1 result "
                    "file. Exit status 1 when a case errors or its result is wrong.")
    p.add_argument("--backend", default=None, help="device, e.g. cpu or opencl:0 (default: automatic)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help=f"ops to run, space or comma separated, from {', '.join(OPS)} and the "
                        f"decoder-step ops {', '.join(DECODER_OPS)} (4096 x 4096 float32 "
                        "beside torch's CPU eager; not in --sizes decode or gemv) (default: all)")
    p.add_argument("--sizes", choices=("quick", "full", "decode", "gemv"), default="quick",
                   help="quick: small cases, short budgets (minutes on PoCL); full: release sizes; "
                        "decode: the LLM decode sweep, quantized GEMV at M = 1..32, N = K = 4096, "
                        "weights beyond the last-level cache; gemv: the M = 1 GEMV of every weight "
                        "format (default: %(default)s)")
    p.add_argument("--json", default=None, type=output_file,
                   help="write the accel.bench/1 result file here")
    p.add_argument("--no-baselines", action="store_true", help="measure accel only")
    p.add_argument("--flush", action="store_true", help="flush caches between repetitions")
    p.add_argument("--label", default=None, help="machine name in merged reports (default: hostname)")
    p.add_argument("--refresh-peaks", action="store_true",
                   help="discard the cached device peaks (default: re-measure and keep the best)")
    p.add_argument("--model", metavar="GGUF", default=None,
                   help="time a GGUF decoder instead of the op cases: a 128-token prompt and 64 "
                        "decode steps on --backend, beside llama.cpp (llama-cpp-python, best of 1 "
                        "and all threads) on the same ids in the same run")
    p.set_defaults(func=_bench)


def console():
    from rich.console import Console

    return Console(stderr=True)


def run_bench(device: str, *, ops=None, sizes: str = "quick", with_baselines: bool = True,
              flush: bool = False, label: str | None = None, refresh_peaks: bool = False,
              command: str = "") -> dict:
    """Benchmark one device with a progress bar; returns the accel.bench/1 document
    (``command``: the accel command line that ran it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import accel
    from accel.conformance.bench import suite as bench
    from accel.conformance.bench import timing

    timing.pin_pocl_threads()
    backend = accel.get_backend(device)
    suite = bench.cases(sizes, ops)
    out_console = console()
    out_console.print(f"[bold]accel bench[/] {backend.device_id} ({backend.info.name}): "
                      f"{len(suite)} cases, {sizes} sizes; measuring device peaks first")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=out_console, transient=True) as progress:
        task = progress.add_task(f"{backend.device_id}", total=len(suite))

        def advance(case, rec):
            progress.update(task, advance=1, description=f"{backend.device_id} {case.id}")
        decoder_ops = [] if sizes in bench.SWEEPS else [o for o in bench.DECODER_OPS
                                                    if ops is None or o in ops]
        return bench.run_suite(backend, suite, budget=timing.BUDGETS[sizes], with_baselines=with_baselines,
                               flush=flush, label=label, profile=sizes, on_case=advance,
                               peaks_mode="refresh" if refresh_peaks else "update",
                               command=command, ops=ops, decoder_ops=decoder_ops)


def print_summary(doc: dict) -> None:
    """The summary table of one bench document."""
    from rich.console import Console
    from rich.table import Table

    from accel.conformance.bench.suite import busy_warning, peak_warning
    from accel.conformance.report.render import case_label, number, percent, ratio_text

    peaks = doc.get("peaks")
    roof = (f"peaks: {number(peaks['gflops'])} GFLOP/s, {number(peaks['gbs'])} GB/s" if peaks
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
        table.add_row(c["op"], c["dtype"], case_label(c), number(c["median_s"] * 1e3),
                      number(c["iqr_s"] * 1e3, 2), number(c["gflops"]) if c["flops"] else "–",
                      number(c["gbs"]), percent(eff), ratio_text(c))
    # piped output (CI logs) gets a width that fits the table instead of rich's 80 columns
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    if streaming := [c for c in doc["cases"] if c["status"] == "ok" and c.get("weight_gbs") is not None]:
        console.print(weight_table(doc, streaming))
    if doc.get("decoder_ops"):
        console.print(decoder_table(doc["decoder_ops"]))
    for warning in filter(None, (busy_warning(doc), peak_warning(doc))):
        console.print(f"[yellow]warning: {warning}[/]")


def decoder_table(rows: list[dict]):
    """The decoder-step ops at n x n float32: accel's time and GB/s, torch's CPU eager time and
    torch / accel (their goal: at least 0.8 on OpenCL)."""
    from rich.table import Table

    from accel.conformance.bench.decoder import GOAL
    from accel.conformance.report.render import number

    table = Table(title=f"decoder-step ops, {rows[0]['n']} x {rows[0]['n']} float32 (goal: "
                        f"torch / accel >= {GOAL})")
    for col in ("op", "accel ms", "GB/s", "torch ms", "torch / accel"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["op"], "[yellow]error[/]", "", "", r["error"][:60])
            continue
        table.add_row(r["op"], number(r["accel_s"] * 1e3), number(r["accel_gbs"]),
                      number(r["torch_s"] * 1e3) if "torch_s" in r else "–",
                      f"{r['ratio']:.2f}" if "ratio" in r else "–")
    return table


def weight_table(doc: dict, cases: list[dict]):
    """Weight-streaming cases (decode): GB/s of weight bytes for accel and each baseline, the
    fraction of the measured copy bandwidth, and accel's speed over ggml's best (the issue's
    ratios)."""
    from rich.table import Table

    from accel.conformance.report.render import case_label, number, percent

    names = list(dict.fromkeys(b["name"] for c in cases for b in c["baselines"]))
    table = Table(title="GB/s of weight bytes (weights beyond the last-level cache)")
    for col in ("params", "working set MB", "accel", "of copy bw", *names, "accel / best ggml"):
        table.add_column(col, justify="left" if col == "params" else "right")
    for c in cases:
        by_name = {b["name"]: b for b in c["baselines"]}
        cells = [number(b["weight_gbs"]) if b.get("status") == "ok" else b["status"]
                 for b in (by_name.get(n, {"status": "–"}) for n in names)]
        ggml = [b["median_s"] for b in c["baselines"] if b["name"].startswith("ggml") and b["status"] == "ok"]
        ratio = f"{min(ggml) / c['median_s']:.2f}x" if ggml else "–"
        table.add_row(case_label(c), number(c["working_set_bytes"] / 1e6), number(c["weight_gbs"]),
                      percent(c.get("copy_fraction")), *cells, ratio)
    return table


def write_json(doc: dict, path: str | Path) -> None:
    """A result document as strict JSON: non-finite numbers (an invalid case's relative error)
    as the strings results.finite writes, which every JSON reader takes."""
    from accel.conformance.results import finite

    Path(path).write_text(json.dumps(finite(doc), indent=1, allow_nan=False))


def _bench(args: argparse.Namespace) -> int:
    if args.model:
        return _bench_model(args)
    doc = run_bench(args.backend or _default_device(), ops=split_names(args.ops), sizes=args.sizes,
                    with_baselines=not args.no_baselines, flush=args.flush, label=args.label,
                    refresh_peaks=args.refresh_peaks, command=args.command_line)
    print_summary(doc)
    if args.json:
        write_json(doc, args.json)
        console().print(f"wrote {args.json}")
    errors = any(c["status"] in ("invalid", "error") for c in doc["cases"])
    return 1 if errors or any("error" in r for r in doc.get("decoder_ops", [])) else 0


def _default_device() -> str:
    from accel.registry import current_device

    return current_device()


def _bench_model(args: argparse.Namespace) -> int:
    """``accel bench --model``: the model's prompt and decode speed, printed and (--json) written
    as an ``accel.bench_model/1`` document."""
    import accel
    from accel.conformance.bench.model import SCHEMA, bench_model
    from accel.conformance.results import commit, finite, machine
    from accel.errors import ArgumentError, expected

    if args.ops or args.sizes != "quick" or args.flush:
        raise ArgumentError(expected("--model", "no --ops, --sizes or --flush beside it (a model "
                                     "run times the model alone)", "them together"))
    if not Path(args.model).is_file():
        raise ArgumentError(expected("--model", "a GGUF file", f"{args.model!r} (no such file)"))
    err = console()
    rec = bench_model(args.model, args.backend or _default_device(),
                      with_llama=not args.no_baselines, say=err.print)
    if args.json:
        doc = {"schema": SCHEMA, "machine": machine(args.label), "commit": commit(),
               "command": args.command_line, "accel": accel.__version__, **rec}
        Path(args.json).write_text(json.dumps(finite(doc), indent=1, allow_nan=False))
        err.print(f"wrote {args.json}")
    return 0
