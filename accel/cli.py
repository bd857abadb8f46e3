"""The ``accel`` command line: ``accel info`` and the subcommands other modules register."""
from __future__ import annotations

import argparse
import importlib
import sys

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
    parser = argparse.ArgumentParser(prog="accel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="list backends and devices")
    p.add_argument("--width", type=int, default=None, help="table width in columns")
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
