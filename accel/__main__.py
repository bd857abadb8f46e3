"""The ``accel`` command line (``accel ...``, and ``python -m accel ...``, which runs this file):
``accel info`` and the subcommands other modules register."""
from __future__ import annotations

import argparse
import errno
import importlib
import shlex
import sys

import accel
from accel.conformance.argtypes import int_at_least

#: modules that add subcommands: each defines ``register(subparsers)``; heavy imports stay inside
#: the command functions so ``accel info`` stays fast
_SUBCOMMAND_MODULES = (
    "accel.conformance.cli",   # accel conformance [matrix]
    "accel.conformance.campaign.cli",  # accel campaign
    "accel.conformance.bench.cli",  # accel bench
    "accel.conformance.report.cli",  # accel report, accel portability
    "accel.conformance.bench.tune",  # accel tune
    "accel.kernels.check",     # accel kernels check
    "accel.kernels.port",      # accel port
    "accel.models.run",        # accel run
)


#: every environment variable accel reads: name -> what it does (docs/environment.md lists the
#: same; tests/accel/cli/test_polish.py checks both against the code's reads)
ENVIRONMENT = {
    "ACCEL_BACKEND": "device chosen when no call, accel.use() or set_backend() names one (e.g. opencl:0)",
    "ACCEL_CACHE_DIR": "where accel keeps kernel binaries, tuned parameters and device peaks "
                       "(default: $XDG_CACHE_HOME/accel, else ~/.cache/accel)",
    "XDG_CACHE_HOME": "the cache root's parent when ACCEL_CACHE_DIR is unset",
    "ACCEL_OPENCL_BUILTINS": "0 or 1: force the clang-builtin math spelling of the OpenCL kernels "
                             "(default: only for PoCL 3.0)",
    "ACCEL_GEMV_KERNEL": "the quantized GEMV kernel where several apply: qgemv (default), "
                         "qgemv_stream or qgemv_runs",
    "ACCEL_CUDA_IMPL": "how the cuda backend computes: auto (default), kernels, vendor or tensorcore",
    "ACCEL_HIP_IMPL": "how the hip backend computes: auto (default), kernels or vendor",
    "ACCEL_COMMIT": "the commit recorded in result files, in place of git's answer (a copied "
                    "tree whose .git is not its own)",
    "ACCEL_RUN_ID": "the run id result files carry (default: a new one per process), so that "
                    "several commands' files read as one run in a report",
    "POCL_CACHE_DIR": "PoCL's own kernel cache; when unset and PoCL's default folder cannot be "
                      "written (a read-only home), accel sets it under its cache root",
    "POCL_KERNEL_CACHE": "0 turns PoCL's own kernel cache off; accel then keeps its own disk copy "
                         "of built OpenCL programs (otherwise it leaves that to PoCL)",
    "POCL_AFFINITY": "1 pins PoCL's worker thread i to CPU i; accel bench, tune and portability "
                     "set it when unset (their timings were bimodal unpinned), 0 keeps them free",
    "CUDA_HOME": "a CUDA toolkit whose headers NVRTC compiles with (also CUDA_PATH)",
    "CUDA_PATH": "as CUDA_HOME",
    "CUPY_TF32": "1 lets cuBLAS run float32 matmuls on tf32 tensor cores (the tolerance model is "
                 "told so)",
    "HYPOTHESIS_STORAGE_DIRECTORY": "where accel conformance's property search keeps its files "
                                    "(default: the cache root's hypothesis folder)",
}


def info_record() -> dict:
    """What ``accel info`` shows, as data (``accel info --json``)."""
    import dataclasses
    import os

    import accel
    from accel.host import cache_root
    from accel.errors import AccelError
    from accel.registry import ignored_plugins

    chosen, invalid = accel.current_device(), None
    try:  # ACCEL_BACKEND is only resolved when a device is first used: resolve it here
        accel.get_backend(chosen)
    except AccelError as e:
        invalid = str(e)
    return {
        "version": accel.__version__,
        "selected": chosen, "selection_error": invalid,
        "backends": [{"name": s.name, "available": s.available, "reason": s.reason,
                      "origin": s.origin, "priority": s.priority, "skipped": s.skipped,
                      "formats": [f for f in s.formats if f not in _cpu_only(s, "dequantize")],
                      "quantize_on_cpu_only": [f for f in _cpu_only(s, "quantize")
                                               if f not in _cpu_only(s, "dequantize")],
                      "formats_on_cpu_only": _cpu_only(s, "dequantize"),
                      "devices": [{"device": f"{s.name}:{i}", **dataclasses.asdict(d)}
                                  for i, d in enumerate(s.devices)]}
                     for s in accel.backends()],
        "ignored_plugins": ignored_plugins(),
        "cache": str(cache_root()),
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
    }


def _cpu_only(status, op: str) -> list[str]:
    """The formats a built-in kernel runtime (OpenCL, CUDA, HIP) declares but leaves ``op`` of
    to the cpu reference (accel.kernels.kernel_declines): quantize for some."""
    if status.origin != "builtin" or status.name not in ("opencl", "cuda", "hip"):
        return []
    from accel.kernels import kernel_declines

    return [f for f in status.formats if kernel_declines(op, f)]


def _info(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if args.ray_resources:
        from accel.conformance.campaign.node import node_resources, ray_start_lines

        print("\n".join(ray_start_lines(node_resources())))
        return 0
    record = info_record()
    if args.json:
        print(json.dumps(record, indent=1, default=str))
        return 0
    # piped (a CI log, `| grep`), rich would fold the table into 80 columns and cut the device
    # ids users pass to --backend
    console = Console(width=args.width or (None if sys.stdout.isatty() else 160))
    chosen, invalid = record["selected"], record["selection_error"]
    table = Table(title="accel devices (device selection invalid: see below)" if invalid
                  else f"accel devices (automatic choice: {escape(chosen)})")
    ids = [d["device"] for s in record["backends"] for d in s["devices"]]
    # the id is what --backend takes: never folded or cut, whatever the width
    table.add_column("device", no_wrap=True, min_width=max(map(len, ids), default=6))
    for col in ("name", "vendor", "driver", "memory", "CUs", "origin"):
        table.add_column(col)
    for s in record["backends"]:
        for d in s["devices"]:
            # names come from plugins and drivers: text, not markup
            table.add_row(escape(d["device"]), escape(d["name"]), escape(d["vendor"]),
                          escape(d["driver"]),
                          f"{d['memory_bytes'] / 2**30:.1f} GiB" if d["memory_bytes"] else "",
                          str(d["compute_units"] or ""), escape(s["origin"]))
    console.print(table)
    console.print(_cache_line())
    if invalid:
        console.print(f"[red]device selection {escape(repr(chosen))} is invalid[/]: {escape(invalid)}")
    for s in record["backends"]:
        if not s["available"]:
            console.print(f"[red]unavailable[/] [bold]{escape(s['name'])}[/] ({escape(s['origin'])}): "
                          f"{escape(s['reason'])}")
        for why in s["skipped"]:
            console.print(f"[yellow]skipped[/] [bold]{escape(s['name'])}[/] device: {escape(why)}")
    for s in record["backends"]:
        if s["available"] and s["formats"]:
            cpu_only = f" (quantize of {', '.join(s['quantize_on_cpu_only'])} on the cpu reference)" \
                if s["quantize_on_cpu_only"] else ""
            if s.get("formats_on_cpu_only"):
                cpu_only += f" (not {', '.join(s['formats_on_cpu_only'])}: the cpu reference only)"
            console.print(f"formats [bold]{escape(s['name'])}[/]: {escape(' '.join(s['formats']))}"
                          + escape(cpu_only))
    for why in record["ignored_plugins"]:
        console.print(f"[yellow]ignored plugin[/] {escape(why)}")
    settings = record["environment"]
    console.print("environment: " + (", ".join(f"{escape(k)}={escape(v)}" for k, v in settings.items())
                                     if settings else "no accel variable set (docs/environment.md)"))
    return 0


def _cache_line() -> str:
    """Where accel keeps what it learns, and whether it can (asked without writing anything)."""
    from rich.markup import escape

    from accel.host import cache_root, writable_dir

    root = cache_root()
    if writable_dir(root, create=False):
        return f"cache: {escape(str(root))} (pyopencl's build cache under it)"
    return (f"cache: {escape(str(root))} [yellow](not writable: built kernels and tuned parameters "
            "are not kept, pyopencl's build cache is off)[/]")


def build_parser() -> argparse.ArgumentParser:
    # not __doc__: that is reStructuredText for developers
    parser = argparse.ArgumentParser(
        prog="accel", description="One tensor-op interface across CUDA, ROCm-HIP, OpenCL and a CPU "
                                  "reference: list devices, check conformance, benchmark, port CUDA "
                                  "kernels. 'accel COMMAND --help' describes each command.")
    parser.add_argument("--version", action="version", version=f"accel {accel.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("info", help="list backends and devices",
                       description="List every backend with its devices and the device chosen "
                                   "automatically, say why each unavailable backend or skipped "
                                   "device is missing, and which accel environment variables are "
                                   "set. Writes nothing.")
    p.add_argument("--width", type=int_at_least(1), default=None,
                   help="table width in columns (default: the terminal's; 160 when the output is "
                        "not a terminal)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--json", action="store_true", help="print the same as one JSON document")
    what.add_argument("--ray-resources", action="store_true",
                   help="print the `ray start` lines that offer this machine's devices to an "
                        "accel campaign (docs/fleet.md)")
    p.set_defaults(func=_info)
    for module in _SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not module.startswith(e.name or "?"):  # it exists but something it needs is missing
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 success, 1 a check failed (conformance, kernels check), 2 a usage error
    (or a file that could not be written)."""
    from accel.errors import AccelError

    parser = build_parser()
    args = parser.parse_args(argv)
    # the command as typed (result files record it): main's own argv, not the process's, which
    # is pytest's or another program's when accel is called in-process
    args.command_line = "accel " + shlex.join(sys.argv[1:] if argv is None else argv)
    # a command that isolates crashes in child processes re-runs these (only from a real
    # command line: an in-process caller's registered backends would not exist in a child)
    args.argv = sys.argv[1:] if argv is None else None
    if args.command is None:  # plain `accel`: what it can do
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except AccelError as e:  # the one place a typed error becomes a usage error
        return usage_error(args.command, str(e))
    except BrokenPipeError:  # `accel info --json | head`: the reader left; no traceback
        if not _stdout_closed():
            raise
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit
        return 141  # as a shell reports a process a closed pipe stopped (128 + SIGPIPE)
    except OSError as e:  # a result file that cannot be written (a /proc path, a full disk): one
        # line and status 2, never 1, which says a check failed; other OSErrors are bugs to show
        if e.filename is None and e.errno != errno.ENOSPC:
            raise
        return usage_error(args.command, f"cannot write or read a file: {e}")


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone (a BrokenPipeError from elsewhere is a real error)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        return False
    return False


def usage_error(command: str, message: str) -> int:
    """Print ``message`` as the one stderr line of a usage error of ``accel command``; returns
    the exit status of one, 2."""
    from rich.console import Console
    from rich.markup import escape

    # one line, not wrapped at the console's width
    Console(stderr=True).print(f"[red]accel {command}:[/] {escape(message)}", soft_wrap=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
