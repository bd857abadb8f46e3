"""The ``accel`` command line: ``accel info`` and the subcommands other modules register."""
from __future__ import annotations

import argparse
import importlib
import sys

from accel.argtypes import int_at_least

#: modules that add subcommands: each defines ``register(subparsers)``; heavy imports stay inside
#: the command functions so ``accel info`` stays fast
_SUBCOMMAND_MODULES = (
    "accel.conformance.cli",   # accel conformance [matrix]
    "accel.conformance.bench.cli",  # accel bench
    "accel.conformance.report.cli",  # accel report, accel portability
    "accel.conformance.bench.tune",  # accel tune
    "accel.kernels.check",     # accel kernels check
    "accel.port",              # accel port
)


def _info(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import accel
    from accel.errors import AccelError

    console = Console(width=args.width)
    statuses = accel.backends()
    chosen, invalid = accel.current_device(), ""
    try:  # ACCEL_BACKEND is only resolved when a device is first used: resolve it here
        accel.get_backend(chosen)
    except AccelError as e:
        invalid = str(e)
    table = Table(title="accel devices (device selection invalid: see below)" if invalid
                  else f"accel devices (automatic choice: {escape(chosen)})")
    for col in ("device", "name", "vendor", "driver", "memory", "CUs", "origin"):
        table.add_column(col)
    for s in statuses:
        for i, d in enumerate(s.devices):
            # names come from plugins and drivers: text, not markup
            table.add_row(escape(f"{s.name}:{i}"), escape(d.name), escape(d.vendor), escape(d.driver),
                          f"{d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "",
                          str(d.compute_units or ""), escape(s.origin))
    console.print(table)
    console.print(_cache_line())
    if invalid:
        console.print(f"[red]device selection {escape(repr(chosen))} is invalid[/]: {escape(invalid)}")
    for s in statuses:
        if not s.available:
            console.print(f"[red]unavailable[/] [bold]{escape(s.name)}[/] ({escape(s.origin)}): "
                          f"{escape(s.reason)}")
        for why in s.skipped:
            console.print(f"[yellow]skipped[/] [bold]{escape(s.name)}[/] device: {escape(why)}")
    return 0


def _cache_line() -> str:
    """Where accel keeps what it learns, and whether it can (asked without writing anything)."""
    from rich.markup import escape

    from accel.diskcache import cache_root, writable_dir

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
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="list backends and devices",
                       description="List every backend with its devices and the device chosen "
                                   "automatically, and say why each unavailable backend or skipped "
                                   "device is missing. Writes nothing.")
    p.add_argument("--width", type=int_at_least(1), default=None,
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
    from accel.errors import AccelError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AccelError as e:  # the one place a typed error becomes a usage error
        return usage_error(args.command, str(e))


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
