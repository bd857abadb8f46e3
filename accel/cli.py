"""The ``accel`` command line: ``accel info`` and the subcommands other modules register."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

#: modules that add subcommands: each defines ``register(subparsers)``; heavy imports stay inside
#: the command functions so ``accel info`` stays fast
_SUBCOMMAND_MODULES = (
    "accel.conformance.cli",   # accel conformance [matrix]
    "accel.bench_cli",         # accel bench, accel report, accel portability
    "accel.backends.opencl.tune",  # accel tune
    "accel.kernels_check",     # accel kernels check
    "accel.port",              # accel port
)


def split_names(values: list[str] | None) -> list[str] | None:
    """``--ops a b`` and ``--ops a,b`` alike (argparse ``action="extend", nargs="+"``)."""
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def output_file(value: str) -> Path:
    """argparse ``type`` of a file a command writes (``--json``, ``-o``): its folder is created
    and checked for writing while parsing, so a long run cannot fail at its end on the path."""
    path = Path(value)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot create the folder {path.parent}: {e.strerror}") from e
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a folder; expected a file name")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {value}: permission denied")
    return path


def _info(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import accel

    console = Console(width=args.width)
    statuses = accel.backends()
    table = Table(title=f"accel devices (automatic choice: {accel.current_device()})")
    for col in ("device", "name", "vendor", "driver", "memory", "CUs", "origin"):
        table.add_column(col)
    for s in statuses:
        for i, d in enumerate(s.devices):
            table.add_row(f"{s.name}:{i}", d.name, d.vendor, d.driver,
                          f"{d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "",
                          str(d.compute_units or ""), s.origin)
    console.print(table)
    for s in statuses:
        if not s.available:
            console.print(f"[red]unavailable[/] [bold]{s.name}[/] ({s.origin}): {escape(s.reason)}")
        for why in s.skipped:
            console.print(f"[yellow]skipped[/] [bold]{s.name}[/] device: {escape(why)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    # not __doc__: that is reStructuredText for developers
    parser = argparse.ArgumentParser(
        prog="accel", description="One tensor-op interface across CUDA, ROCm-HIP, OpenCL and a CPU "
                                  "reference: list devices, check conformance, benchmark, port CUDA "
                                  "kernels. 'accel COMMAND --help' describes each command.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="list backends and devices",
                       description="List every backend with its devices and the device chosen "
                                   "automatically, and say why each unavailable backend or skipped "
                                   "device is missing. Writes nothing.")
    p.add_argument("--width", type=int, default=None,
                   help="table width in columns (default: the terminal's, or 80)")
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
    """Exit status: 0 success, 1 a check failed (conformance, kernels check), 2 a usage error."""
    from .errors import AccelError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AccelError as e:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[red]accel {args.command}:[/] {escape(str(e))}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
