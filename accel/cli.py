"""The ``accel`` command line: ``accel info`` and the subcommands other modules register."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Callable

#: modules that add subcommands: each defines ``register(subparsers)``; heavy imports stay inside
#: the command functions so ``accel info`` stays fast
_SUBCOMMAND_MODULES = (
    "accel.conformance.cli",   # accel conformance [matrix]
    "accel.bench_cli",         # accel bench, accel report, accel portability
    "accel.backends.opencl.tune",  # accel tune
    "accel.kernels_check",     # accel kernels check
    "accel.port",              # accel port
)


def comma_list(value: str) -> list[str]:
    """The names in a comma-separated list, blanks dropped: ``"a, b,"`` is ``["a", "b"]``."""
    return [v.strip() for v in value.split(",") if v.strip()]


def names(value: str) -> str:
    """argparse ``type`` of a comma-separated name list (``--ops``, ``--targets``): one that names
    nothing ("" or ",") is refused, since it would select nothing, or everything if read as absent."""
    if not comma_list(value):
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated names, got {value!r}")
    return value


def split_names(values: list[str] | None) -> list[str] | None:
    """The names of an option given as ``--ops a b``, ``--ops a,b`` or repeated (argparse
    ``type=names`` with ``action="extend"`` or ``"append"``); None when it was not given."""
    return [n for value in values for n in comma_list(value)] if values else None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse ``type`` of an integer option with a lower bound (``--width``, ``--seed``)."""
    def parse(value: str) -> int:
        try:
            number: int | None = int(value)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value!r}")
        return number
    return parse


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
    # an existing file (or /dev/null, /dev/stdout) needs only itself writable, a new one its folder
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {value}: permission denied")
    return path


def output_folder(value: str) -> Path:
    """argparse ``type`` of a folder a command writes its files into (``-o``): created and checked
    for writing while parsing, as ``output_file`` does for a file."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the file {value}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot create the folder {value}: {e.strerror}") from e
    if not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {value}: permission denied")
    return path


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
    if invalid:
        console.print(f"[red]device selection {escape(repr(chosen))} is invalid[/]: {escape(invalid)}")
    for s in statuses:
        if not s.available:
            console.print(f"[red]unavailable[/] [bold]{escape(s.name)}[/] ({escape(s.origin)}): "
                          f"{escape(s.reason)}")
        for why in s.skipped:
            console.print(f"[yellow]skipped[/] [bold]{escape(s.name)}[/] device: {escape(why)}")
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
    from .errors import AccelError

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
