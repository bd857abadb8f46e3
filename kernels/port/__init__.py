r"""``accel port FILE.cu --to hip|opencl|dialect [-o OUT]``: translate CUDA kernels, or say exactly
which construct on which line cannot be translated faithfully, why, and what to write instead.

>>> from accel.kernels.port import translate
>>> r = translate("__global__ void k(float* x) { x[threadIdx.x] = expf(x[threadIdx.x]); }", "opencl")
>>> print(r.text.splitlines()[-1])
__kernel void k(__global float* x) { x[(uint)get_local_id(0)] = exp(x[(uint)get_local_id(0)]); }
>>> bad = translate("__global__ void k(float* x) {\n  x[0] = __shfl_sync(0xffffu, x[0], 0);\n}",
...                 "opencl", filename="k.cu")
>>> bad.ok, str(bad.diagnostics[0]).split(";")[0]
(False, 'k.cu:2: __shfl_sync: its mask 0xffffu names only some lanes, which the block-wide emulation cannot honour')
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from accel.conformance.argtypes import output_file
from accel.errors import ArgumentError, expected
from accel.kernels.port.syntax import Diagnostic, Rewriter, line, parse, syntax_errors
from accel.kernels.port.templates import Expansion, expand

TARGETS = ("hip", "opencl", "dialect")
#: the deepest syntax tree accel port translates (a 3000-term sum nests 3000 levels); the
#: translators recurse a few Python frames per level of the tree
_MAX_DEPTH = 5000
_FRAMES_PER_LEVEL = 8


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
    raw = source.removeprefix("\ufeff").encode()  # a byte-order mark is no part of the code
    tree = parse(raw)
    depth, deepest = _depth(tree.root_node)
    if depth > _MAX_DEPTH:
        return PortResult(to, None, [Diagnostic(
            filename, line(deepest), "nesting", f"the code nests {depth} levels deep, beyond the "
            f"{_MAX_DEPTH} accel port follows", "split the expression or else-if chain (partial "
            "sums, a switch, a lookup table)")])
    with _recursion_limit(_FRAMES_PER_LEVEL * depth + 1000):
        return _translate(raw, tree, to, filename)


def _depth(root) -> tuple[int, object]:
    """The depth of the syntax tree and its deepest node (found without recursion)."""
    best, deepest, stack = 0, root, [(root, 0)]
    while stack:
        node, d = stack.pop()
        if d > best:
            best, deepest = d, node
        stack.extend((c, d + 1) for c in node.named_children)
    return best, deepest


@contextmanager
def _recursion_limit(frames: int):
    """Python's recursion limit raised to ``frames`` while a deep tree is translated."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _translate(raw: bytes, tree, to: str, filename: str) -> PortResult:
    expansion = None
    for split in range(_EXPANSION_ROUNDS + 1):
        for _ in range(_EXPANSION_ROUNDS if to != "hip" else 0):  # HIP keeps templates
            # a copy may call another template with arguments it now spells (a function-pointer
            # argument silu<float>): expanded in the next round, lines mapped back through each
            more = expand(raw, tree.root_node)
            if more is None:
                break
            expansion = more if expansion is None else _compose(expansion, more)
            raw = expansion.source
            tree = parse(raw)
        rw = Rewriter(raw, filename)
        if to == "hip":
            from accel.kernels.port.hip import translate_hip

            out, options = translate_hip(rw, tree.root_node), ()
            break
        from accel.kernels.port.dialect import DIALECT, translate_dialect
        from accel.kernels.port.opencl import BUILD_OPTIONS, OPENCL, OpenCLTranslator

        tr = OpenCLTranslator(rw, tree.root_node, OPENCL if to == "opencl" else DIALECT)
        out, options = (tr.opencl_text(), BUILD_OPTIONS) if to == "opencl" else (translate_dialect(tr), ())
        # a function called with pointers into two address spaces, or a template whose call
        # deduces its arguments: again, with a copy per space or the arguments spelled out
        # (whose calls may split a function they call in the next round); past the last round,
        # the translation's errors stand
        more = tr.rewrites() if split < _EXPANSION_ROUNDS else None
        if more is None:
            break
        expansion = more if expansion is None else _compose(expansion, more)
        raw = expansion.source
        tree = parse(raw)
    for node in syntax_errors(tree.root_node):  # for every target, wherever the node is
        rw.error(node, "syntax", _unreadable(node), "fix the syntax (check it compiles with nvcc)")
    diagnostics = rw.diagnostics
    if expansion is not None:
        diagnostics = [replace(d, line=expansion.lines[d.line - 1]) for d in diagnostics] + list(
            expansion.notes) + [
            Diagnostic(filename, line, f"template {name}<{', '.join(args)}>", "OpenCL C has no "
                       "templates: expanded into one function per instantiation",
                       f"launch or call it as {copy}", "warning")
            for name, args, copy, line in expansion.copies]
    # a finding in a template is in each of its copies (on the template's own line): said once;
    # elsewhere each use is named, two on one line included
    seen: set[tuple] = set()
    diagnostics = [d for d in diagnostics
                   if (expansion is None and d.construct != "syntax")
                   or (key := (d.line, d.construct, d.why, d.rewrite, d.severity)) not in seen
                   and not seen.add(key)]
    diagnostics = sorted(diagnostics, key=lambda d: (d.line, d.severity != "error"))
    translated = dict(rw.translated)
    if expansion is not None:
        if expansion.copies:
            translated["template"] = len(expansion.copies)
        if expansion.notes:  # functions copied per address space
            translated["device function"] = len(expansion.notes)
    return PortResult(to, None if rw.failed else out, diagnostics, options, translated)


#: rounds of template expansion (templates naming templates in their arguments, nested)
_EXPANSION_ROUNDS = 4


def _compose(first: Expansion, then: Expansion) -> Expansion:
    """Two rounds of expansion as one: ``then``'s lines mapped to the original through ``first``."""
    return Expansion(then.source, [first.lines[n - 1] for n in then.lines],
                     first.copies + [(name, args, copy, first.lines[line - 1])
                                     for name, args, copy, line in then.copies],
                     first.notes + tuple(replace(d, line=first.lines[d.line - 1]) for d in then.notes))


def _unreadable(node) -> str:
    """Why a syntax error node is one: the token the parser missed, or the text it could not
    read (its first line, shortened)."""
    if node.is_missing:
        unclosed = " (one opened before and not closed?)" if node.type in (")", "]", "}") else ""
        return f"the parser expected {node.type!r} here{unclosed}"
    excerpt = (node.text.decode("utf-8", "replace").strip().splitlines() or [""])[0][:40]
    return f"the parser could not read {excerpt!r} as CUDA C++"


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
    if args.output and path.exists() and Path(args.output).exists() \
            and os.path.samefile(path, args.output):
        raise ArgumentError(expected("--output", "a file other than the CUDA source (the "
                                     "translation would overwrite it)", str(args.output)))
    result = translate(_read(path), args.to, filename=str(path))
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


def _read(path: Path) -> str:
    """A CUDA file's text. One that cannot be read (missing, not UTF-8) is a usage error (2)
    naming it, not an untranslatable file (1), in both modes of the command."""
    try:
        return path.read_text(encoding="utf-8-sig")  # without a byte-order mark, for --stats too
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise ArgumentError(expected("FILE", "a readable CUDA source file", f"{str(path)!r} ({why})")) from e


def _stats(args: argparse.Namespace) -> int:
    import json

    from accel.kernels.port.stats import format_text, sources, tally

    to = args.to or "opencl"
    entries = []
    for path in sources([Path(f) for f in args.file]):
        text = _read(path)
        try:
            result = translate(text, to, filename=str(path))
        except Exception as e:  # noqa: BLE001 - a translator bug on one file is counted, not fatal
            result = e
        entries.append((path, text, result))
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
