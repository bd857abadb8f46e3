"""argparse types shared by every accel command and the conformance pytest plugin: name lists,
bounded integers, and output paths checked while parsing, so a long run cannot fail at its end.

A tool helper, outside the interface package: it sits in the conformance layer, the lowest one
all its users may import (``accel conformance`` and the pytest plugin are conformance modules;
the other commands are tools).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable


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
    # an existing file (or /dev/null, /dev/stdout) needs only itself writable; a new one is
    # created and removed (os.access lets root "write" into /proc, where no file can be made)
    if path.exists():
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write {value}: permission denied")
        return path
    try:
        path.open("x").close()
        path.unlink()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {value}: {e.strerror}") from e
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


#: dtype names torch and NumPy users type, as accel spells them
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                 "bf16": "bfloat16", "i8": "int8"}


def dtype_names(values: list[str] | None) -> list[str] | None:
    """The dtypes of a ``--dtypes`` option (space or comma separated, aliases such as fp16, half
    and bf16 resolved); None when it was not given."""
    names = split_names(values)
    return None if names is None else [DTYPE_ALIASES.get(n.lower(), n) for n in names]

