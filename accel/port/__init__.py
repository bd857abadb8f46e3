r"""``accel port FILE.cu --to hip|opencl|dialect [-o OUT]``: translate CUDA kernels, or say exactly
which construct on which line cannot be translated faithfully, why, and what to write instead.

>>> from accel.port import translate
>>> r = translate("__global__ void k(float* x) { x[threadIdx.x] = expf(x[threadIdx.x]); }", "opencl")
>>> print(r.text.splitlines()[-1])
__kernel void k(__global float* x) { x[(uint)get_local_id(0)] = exp(x[(uint)get_local_id(0)]); }
>>> bad = translate("__global__ void k(float* x) {\n  x[0] = __shfl_sync(~0u, x[0], 0);\n}", "opencl",
...                 filename="k.cu")
>>> bad.ok, str(bad.diagnostics[0]).split(";")[0]
(False, 'k.cu:2: __shfl_sync: warp-level primitives have no OpenCL 1.2 equivalent (no subgroups on the target)')
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from accel.argtypes import output_file
from accel.errors import ArgumentError, expected
from accel.port.syntax import Diagnostic, Rewriter, parse
from accel.port.templates import expand

TARGETS = ("hip", "opencl", "dialect")


@dataclass(frozen=True)
class PortResult:
    """A translation: ``text`` (None when any error was found), every diagnostic, and the
    compiler options the translated code needs to compute what the CUDA code did."""

    target: str
    text: str | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    options: tuple[str, ...] = ()
    #: CUDA construct -> uses translated (warned ones included), for ``accel port --stats``
    translated: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.text is not None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def translate(source: str, to: str, *, filename: str = "<source>") -> PortResult:
    """Translate CUDA C++ ``source`` to ``to`` ("hip", "opencl" or "dialect"). Never raises for
    untranslatable code: the result lists the diagnostics and carries no text."""
    if not isinstance(source, str):
        raise ArgumentError(expected("source", "CUDA source as str", type(source).__name__))
    if to not in TARGETS:
        raise ArgumentError(expected("to", f"one of {TARGETS}", repr(to)))
    raw = source.encode()
    tree = parse(raw)
    expansion = expand(raw, tree.root_node) if to != "hip" else None  # HIP keeps templates
    if expansion is not None:
        raw = expansion.source
        tree = parse(raw)
    rw = Rewriter(raw, filename)
    if to == "opencl":
        from accel.port.opencl import BUILD_OPTIONS, OpenCLTranslator

        out, options = OpenCLTranslator(rw, tree.root_node).opencl_text(), BUILD_OPTIONS
    elif to == "hip":
        from accel.port.hip import translate_hip

        out, options = translate_hip(rw, tree.root_node), ()
    else:
        from accel.port.dialect import translate_dialect

        out, options = translate_dialect(rw, tree.root_node), ()
    diagnostics = rw.diagnostics
    if expansion is not None:
        diagnostics = [replace(d, line=expansion.lines[d.line - 1]) for d in diagnostics] + [
            Diagnostic(filename, line, f"template {name}<{', '.join(args)}>", "OpenCL C has no "
                       "templates: expanded into one function per instantiation",
                       f"launch or call it as {copy}", "warning")
            for name, args, copy, line in expansion.copies]
    diagnostics = sorted(diagnostics, key=lambda d: (d.line, d.severity != "error"))
    translated = dict(rw.translated)
    if expansion is not None:
        translated["template"] = len(expansion.copies)
    return PortResult(to, None if rw.failed else out, diagnostics, options, translated)


def _command(args: argparse.Namespace) -> int:
    if args.stats:
        if args.output:  # --stats prints; a file named for a translation would stay unwritten
            raise ArgumentError(expected("--output", "no file with --stats (it prints its table; "
                                         "redirect it)", str(args.output)))
        return _stats(args)
    if args.json:
        raise ArgumentError(expected("--json", "--stats beside it (a translation is source "
                                     "text)", "--json without --stats"))
    if len(args.file) != 1:
        raise ArgumentError(expected("FILE", "one CUDA file to translate (several only with "
                                     "--stats)", f"{len(args.file)} paths"))
    if args.to is None:
        raise ArgumentError(expected("--to", f"one of {TARGETS}", "nothing"))
    path = Path(args.file[0])
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:  # a usage error (2), not an untranslatable file (1)
        why = getattr(e, "strerror", None) or e
        raise ArgumentError(expected("FILE", "a readable CUDA source file", f"{str(path)!r} ({why})")) from e
    result = translate(source, args.to, filename=str(path))
    for d in result.diagnostics:
        print(d, file=sys.stderr)
    if not result.ok:
        n = len(result.errors)
        print(f"accel port: {n} construct{'s' * (n != 1)} cannot be translated to {args.to} "
              "faithfully; nothing was written", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_text(result.text)
    else:
        sys.stdout.write(result.text)
    return 0


def _stats(args: argparse.Namespace) -> int:
    import json

    from accel.port.stats import format_text, sources, tally

    to = args.to or "opencl"
    entries = []
    for path in sources([Path(f) for f in args.file]):
        text = path.read_text(errors="replace")
        entries.append((path, text, translate(text, to, filename=str(path))))
    stats = tally(entries, to)
    sys.stdout.write(json.dumps(stats, indent=2) + "\n" if args.json else format_text(stats))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "port", help="translate CUDA kernels to HIP, OpenCL C or accel's dialect",
        description="Translate a CUDA file. Constructs that cannot be translated faithfully are "
                    "reported as FILE:LINE: construct: why; suggested rewrite, and the command "
                    "exits 1 without writing anything (2 when FILE cannot be read). Warnings "
                    "(translated, but check the assumption) do not change the exit status.")
    p.add_argument("file", nargs="+", help="CUDA source file (.cu); with --stats, files and "
                   "directories (searched for .cu/.cuh)")
    p.add_argument("--to", choices=TARGETS, help="target language (with --stats: default opencl)")
    p.add_argument("--stats", action="store_true",
                   help="translate without writing and print, per construct, the uses "
                        "translated, warned and refused, and the share of kernels ported")
    p.add_argument("--json", action="store_true", help="with --stats: print JSON")
    p.add_argument("-o", "--output", type=output_file,
                   help="write the translation here (default: stdout)")
    p.set_defaults(func=_command)
