"""``accel conformance`` (run the suite on a backend) and ``accel conformance matrix`` (merge result
files into docs/support.md). Heavy imports stay inside the command functions."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

from accel.conformance.argtypes import comma_list, dtype_names, int_at_least, names, output_file, split_names
from accel.conformance.profiles import PROFILES  # the case lists only: no hypothesis

FAILURES_SHOWN = 25  # failing cases printed in full; the JSON file has all of them


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "conformance", help="check a backend against the oracle",
        description="Run the conformance suite on one backend: fixed grid, exact-answer, special-"
                    "value and property-based cases, each against a float64 oracle under the "
                    "tolerance model of docs/conformance.md. Exit status 1 on any failure.")
    p.add_argument("--backend", help="device to check, e.g. cpu, opencl:0 (default: automatic)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help="only these ops (space or comma separated)")
    p.add_argument("--dtypes", action="extend", nargs="+", metavar="DTYPE", type=names,
                   help="only these dtypes, space or comma separated (aliases: fp32, fp16, half, "
                        "bf16; dequantize is listed by format: q8_0, q4_0, q4_k, q5_k, q6_k, "
                        "mxfp4, q8_k)")
    p.add_argument("--profile", default=None, choices=PROFILES,
                   help="quick for CI or full for release checks (default: quick)")
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="data and property-search seed (default: 0)")
    p.add_argument("--case", action="append", metavar="ID",
                   help="run only the case with this id (as printed in a failure's repro line; "
                        "the id fixes op, dtype, shape and seed, so --ops, --dtypes, --profile "
                        "and --seed do not go with it); the result file's profile reads 'case'")
    p.add_argument("--json", metavar="PATH", type=output_file,
                   help="write the accel.conformance/1 result file here")
    p.add_argument("--timeout", type=int_at_least(0), default=600, metavar="SECONDS",
                   help="a case still running after this long is recorded as an error, the "
                        "results so far are written and the run stops with status 1 (a hung "
                        "kernel cannot be interrupted); 0: no limit (default: %(default)s)")
    p.add_argument("--label", help="machine name in merged reports, as `accel bench --label` "
                                   "(default: hostname)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-isolation", action="store_true",
                   help="run in this process: a case that crashes it (a segfault in a driver) "
                        "ends the run without a result file (default: each crash is recorded "
                        "as an error with its repro and the run goes on in a new process)")
    p.add_argument("--model", metavar="GGUF", help="model conformance instead of the suite: "
                   "this GGUF decoder on --backend against the float64 reference forward")
    p.add_argument("--tokens", metavar="IDS", help="with --model: the token ids to run "
                   "(comma or space separated; default a fixed sequence)")
    p.add_argument("--llama-logits", metavar="NPY", help="with --model: llama.cpp's logits of the "
                   "same tokens ([n_tokens, vocab], numpy .npy) to compare with, instead of running "
                   "llama-cpp-python (which runs when installed)")
    p.set_defaults(func=_run)
    # no subcommand runs the suite: the metavar keeps the usage line from demanding one
    sub = p.add_subparsers(dest="conformance_command", metavar="[matrix]",
                           help="optional; without it, the suite runs on --backend")
    m = sub.add_parser("matrix", help="merge result files into a support matrix",
                       description="Merge conformance result files (from any machines) into one "
                                   "op x dtype x backend markdown table.")
    m.add_argument("files", nargs="+", help="result JSON files from accel conformance --json "
                   "(with --model: the model section)")
    m.add_argument("-o", "--output", type=output_file,
                   help="markdown file to write (default: stdout)")
    m.add_argument("--compiled-only", nargs="*", default=["cuda,hip"], metavar="BACKEND",
                   help="backends shown as 'compiled only' when no result file covers them "
                        "(space or comma separated; default cuda,hip; none when given no name)")
    m.add_argument("--kernels-check", metavar="JSON",
                   help="an `accel kernels check --json` file: compiled-only cells rest on it")
    m.set_defaults(func=_matrix)


def _run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import accel

    from accel.errors import ArgumentError, expected

    from accel.conformance import properties, results, suite
    from accel.conformance.ops import unread_params
    from accel.conformance.case import Case
    from accel.conformance.runner import CaseResult, repro_command, run_case

    from accel.conformance import isolation, runner

    for flag, value in (("--tokens", args.tokens), ("--llama-logits", args.llama_logits)):
        if value is not None and not args.model:
            raise ArgumentError(expected(flag, "--model beside it (it applies to model conformance)",
                                         f"{flag} alone"))
    journal = isolation.child_journal()
    if journal is None and args.argv is not None and not args.no_isolation:
        if args.model:
            from accel.conformance.model_check import record_crash

            return isolation.supervise(args.argv, lambda what: record_crash(args, what))
        return isolation.supervise(args.argv)
    if args.model:  # model conformance (accel.conformance.model_check)
        from accel.conformance import model_check

        return model_check.run(args)
    # every argument is checked before the header line: a typed error here is cli.main's to report
    backend = accel.get_backend(args.backend)
    ops, dtypes = split_names(args.ops), dtype_names(args.dtypes)
    if args.case:
        given = [flag for flag, value in (("--ops", ops), ("--dtypes", dtypes),
                                          ("--profile", args.profile), ("--seed", args.seed))
                 if value is not None]
        if given:  # they would be ignored, yet written into the result file as if they applied
            raise ArgumentError(expected("--case", "no --ops, --dtypes, --profile or --seed beside "
                                         "it (a case id fixes its op, dtype, shape and seed)",
                                         " ".join(given)))
        cases, targets = [Case.parse(c) for c in args.case], []
        for case in cases:  # a mistyped key (causl=true) would run another case, and pass
            if unread := unread_params(case):
                raise ArgumentError(expected("--case", f"only parameters the {case.op} cases read "
                                             "(as in a printed repro id)",
                                             f"{', '.join(map(repr, unread))} in {case.id!r}"))
        args.profile, args.seed = "case", 0  # what the result file records: the cases named
    else:
        args.profile = args.profile or "quick"
        args.seed = 0 if args.seed is None else args.seed
        cases, targets = suite.planned(args.profile, args.seed, ops, dtypes)
    if journal is not None:
        journal.device(backend.device_id)
        runner.use_journal(journal)
    console = Console(stderr=True)
    console.print(f"conformance: [bold]{backend.device_id}[/] ({escape(backend.info.name)}), "
                  f"profile {args.profile}, seed {args.seed}, evidence: {backend.evidence}")
    total = len(cases) + len(targets) * properties.EXAMPLES.get(args.profile, 0)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=args.no_progress,
                  transient=True) as progress:
        task = progress.add_task("cases", total=total)
        got: list[CaseResult] = []

        def finish(extra: list[CaseResult]) -> int:
            """The summary and the result file of what ran (and ``extra``); the exit status."""
            done = got + extra
            report = results.make_report(backend, done, profile=args.profile, seed=args.seed,
                                         command=args.command_line,
                                         elapsed_s=time.perf_counter() - t0, label=args.label)
            _print_summary(Console(width=None if sys.stdout.isatty() else 120), report, done)
            if args.json:
                results.write(report, args.json)
                console.print(f"results written to {args.json}")
            s = report["summary"]
            return 1 if s["failed"] or s["error"] else 0

        def hung(case: Case, seconds: float) -> None:  # on the watchdog's thread: end the run
            progress.stop()
            stuck = CaseResult(case, "error", backend.evidence, time_s=seconds,
                               reason=f"did not finish within --timeout {args.timeout} s: the "
                                      "run stopped here (a hung kernel cannot be interrupted)",
                               repro=repro_command(backend, case))
            finish([stuck])
            console.print(f"[red]stopped[/]: {escape(case.id)} ran past {args.timeout} s")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

        def shown(result: CaseResult) -> CaseResult:
            got.append(result)
            progress.update(task, advance=1, description=result.case.op)
            return result

        with _watchdog(args.timeout, hung):
            if args.case:  # the cases named, not a profile: outside what suite.run plans
                for case in cases:
                    shown(run_case(backend, case))
            else:
                suite.run(backend, profile=args.profile, seed=args.seed, ops=ops, dtypes=dtypes,
                          on_result=shown)
    return finish([])


@contextlib.contextmanager
def _watchdog(seconds: int, on_timeout) -> Iterator[None]:
    """While the block runs, call ``on_timeout(case, seconds_running)`` from a daemon thread when
    the case in flight (runner.in_flight) has run longer than ``seconds`` (0: never)."""
    import threading
    import time

    from accel.conformance.runner import in_flight

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(min(1.0, seconds / 4)):
            now = in_flight()
            if now is not None and time.monotonic() - now[1] > seconds:
                on_timeout(now[0], time.monotonic() - now[1])
                return

    thread = threading.Thread(target=watch, name="accel-conformance-watchdog", daemon=True)
    if seconds:
        thread.start()
    try:
        yield
    finally:
        stop.set()


def _print_summary(console, report: dict, got: list) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"accel conformance: {report['backend']} ({report['profile']})")
    for col in ("op/dtype", "passed", "failed", "error", "unsupported", "compiled only",
                "budget used"):
        table.add_column(col, justify="left" if col == "op/dtype" else "right")
    used = budget_used(got)
    for key, c in report["summary"]["by_op_dtype"].items():
        bad = c["failed"] + c["error"]
        table.add_row(key, str(c["passed"]), f"[red]{c['failed']}[/]" if bad else "0",
                      str(c["error"]), str(c["unsupported"]), str(c["compiled_only"]),
                      _budget_text(used[key]) if key in used else "-")
    console.print(table)
    failures = [r for r in got if not r.ok]
    for r in failures[:FAILURES_SHOWN]:
        console.print(f"[red]{r.status.upper()}[/] {escape(r.case.id)}\n  {escape(r.reason)}\n"
                      f"  repro: {escape(r.repro)}", soft_wrap=True)
    if len(failures) > FAILURES_SHOWN:
        console.print(f"... and {len(failures) - FAILURES_SHOWN} more failing cases (see --json)")
    s = report["summary"]
    console.print(f"{s['passed']} passed, {s['failed']} failed, {s['error']} errors, "
                  f"{s['unsupported']} unsupported, {s['compiled_only']} compiled only "
                  f"in {report['elapsed_s']:.1f} s")


def _budget_text(share: float) -> str:
    """A share of the error budget: a percentage, or far past it a multiple of the bound."""
    return f"{share:.0%}" if share < 10 else f"{share:.2g}x the bound"


def budget_used(got: list) -> dict[str, float]:
    """Per op/dtype, the largest share of its error bound any case's worst element used (max
    err / bound, the ``err_over_bound`` of each case's stats): drift shows here before a case
    fails. Cases judged exactly (bound 0) have no budget and are left out."""
    used: dict[str, float] = {}
    for r in got:
        share = r.stats.get("err_over_bound")
        if share is not None:
            key = f"{r.case.op}/{r.case.dtype}"
            used[key] = max(used.get(key, 0.0), share)
    return used


def _matrix(args: argparse.Namespace) -> int:
    import json

    from accel.errors import ArgumentError, expected

    from accel.conformance import matrix, model_check, results

    docs = [results.load(f, also=(model_check.SCHEMA,)) for f in args.files]
    models = [(d, f) for d, f in zip(docs, args.files) if d["schema"] == model_check.SCHEMA]
    reports = [d for d in docs if d["schema"] != model_check.SCHEMA]
    sources = [f for d, f in zip(docs, args.files) if d["schema"] != model_check.SCHEMA]
    try:
        kernels_check = json.loads(Path(args.kernels_check).read_text()) if args.kernels_check else None
    except (OSError, ValueError) as e:
        raise ArgumentError(expected("--kernels-check", "a readable JSON file", e)) from None
    compiled_only = tuple(n for value in args.compiled_only for n in comma_list(value))
    text = matrix.render(reports, sources, compiled_only, kernels_check, models)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
