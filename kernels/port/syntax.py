"""The syntax layer of ``accel port``: parsing CUDA with tree-sitter, diagnostics, and rewriting
the source by syntax nodes.

A translation never re-prints the program from its tree: it records replacements keyed by the
byte range of a syntax node and renders the original text with them applied, so comments,
layout and everything the translator does not touch survive byte for byte. A replacement is a
function of the node's already-rewritten inner text, so nested rewrites compose
(``expf(threadIdx.x)`` rewrites both the call and its argument).
"""
from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from accel.errors import ArgumentError, expected


@cache
def _parser():
    try:
        import tree_sitter
        import tree_sitter_cuda
    except ModuleNotFoundError as e:
        # not "accel port" as the argument: the CLI prefixes every typed error with the command
        raise ArgumentError(expected("CUDA parser", "tree-sitter and tree-sitter-cuda (pip "
                                     "install 'accel-portable[port]')",
                                     f"missing module {e.name}")) from None
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


#: CUDA's ``__align__(n)`` is a macro for an alignment attribute, which the grammar does not
#: know; it parses ``alignas(n)``. The two spellings are swapped in the text the parser reads
#: only, at the same length, so every node's byte range still addresses the original source.
_ALIGN = re.compile(rb"\b__align__(?=\s*\()")


def parse(source: bytes):
    """The tree-sitter syntax tree of CUDA C++ source."""
    return _parser().parse(_ALIGN.sub(b"alignas  ", source))


def text(node) -> str:
    return node.text.decode("utf-8", "replace")


def walk(node) -> Iterator:
    """Every named node under ``node`` (itself included), in source order. Iterative: a
    500-branch else-if chain nests deeper than Python's recursion limit."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.named_children))


def syntax_errors(root) -> Iterator:
    """The text the parser could not read: each outermost ERROR node and each token it had to
    assume (a MISSING ``}`` or ``)``), in source order."""
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            yield n
        elif n.has_error:
            stack.extend(reversed(n.children))


def line(node) -> int:
    """1-based source line of a node."""
    return node.start_point.row + 1


@dataclass(frozen=True)
class Diagnostic:
    """One finding: ``error`` (not translated: nothing is written) or ``warning`` (translated, but
    the result rests on an assumption the reader must check)."""

    file: str
    line: int
    construct: str
    why: str
    rewrite: str
    severity: str = "error"

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.file}:{self.line}: {prefix}{self.construct}: {self.why}; suggested rewrite: {self.rewrite}"


class Rewriter:
    """Replacements keyed by node byte ranges, rendered over the original source."""

    def __init__(self, source: bytes, filename: str):
        self.source, self.filename = source, filename
        self._edits: dict[tuple[int, int], list[Callable[[str], str]]] = {}
        #: the edit ranges sorted by (start, -end), and their starts, for bisection; rebuilt
        #: after new edits (recording comes before rendering, so about once)
        self._order: list[tuple[int, int]] | None = None
        self._starts: list[int] = []
        self.diagnostics: list[Diagnostic] = []
        #: CUDA construct -> uses translated (for ``accel port --stats``)
        self.translated: Counter[str] = Counter()

    # -- recording --------------------------------------------------------------------------------
    def replace(self, node, new: str | Callable[[str], str]) -> None:
        """Replace ``node`` by ``new``: a string, or a function of the node's rewritten text."""
        fn = new if callable(new) else (lambda _inner, s=new: s)
        self._edit((node.start_byte, node.end_byte), fn)

    def delete(self, node) -> None:
        """Remove ``node`` and the blanks after it (a keyword's space, a directive's newline)."""
        end = node.end_byte
        while end < len(self.source) and self.source[end:end + 1] in (b" ", b"\t", b"\n"):
            end += 1
            if self.source[end - 1:end] == b"\n":
                break
        self._edit((node.start_byte, end), lambda _inner: "")

    def _edit(self, key: tuple[int, int], fn: Callable[[str], str]) -> None:
        self._edits.setdefault(key, []).append(fn)
        self._order = None

    def note(self, construct: str) -> None:
        """Count one use of ``construct`` translated."""
        self.translated[construct] += 1

    def error(self, node, construct: str, why: str, rewrite: str) -> None:
        self.diagnostics.append(Diagnostic(self.filename, line(node), construct, why, rewrite))

    def warn(self, node, construct: str, why: str, rewrite: str) -> None:
        self.diagnostics.append(Diagnostic(self.filename, line(node), construct, why, rewrite,
                                           "warning"))

    @property
    def failed(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)

    # -- rendering --------------------------------------------------------------------------------
    def render(self, node=None) -> str:
        """The rewritten text of ``node`` (or of the whole source), its own replacement included."""
        if node is None:
            return self._span(0, len(self.source), None)
        return self._apply((node.start_byte, node.end_byte))

    def render_inside(self, node) -> str:
        """The rewritten text of ``node`` without its own replacement (which may embed it)."""
        key = (node.start_byte, node.end_byte)
        return self._span(*key, key)

    def render_range(self, start: int, end: int) -> str:
        """The rewritten text of source bytes [start, end) (edits inside it applied)."""
        return self._span(start, end, None)

    def _apply(self, key: tuple[int, int]) -> str:
        out = self._span(key[0], key[1], key)
        for fn in self._edits.get(key, ()):
            out = fn(out)
        return out

    def _span(self, start: int, end: int, own: tuple[int, int] | None) -> str:
        """Source bytes [start, end) with every outermost edit inside applied. The edits are
        found by bisection and each level skips past the ones nested in an edit it rendered,
        so rendering a file costs about its size times its nesting depth, not its edits
        squared."""
        if self._order is None:
            self._order = sorted(self._edits, key=lambda k: (k[0], -k[1]))
            self._starts = [k[0] for k in self._order]
        order, parts, pos = self._order, [], start
        i = bisect_left(self._starts, start)
        while i < len(order) and order[i][0] < end:
            k = order[i]
            if k[1] > end or k == own:  # reaches past this span, or is the span itself
                i += 1
                continue
            parts.append(self.source[pos:k[0]].decode("utf-8", "replace"))
            parts.append(self._apply(k))
            pos = k[1]
            i = bisect_left(self._starts, pos, i + 1)  # past the edits nested in k
        parts.append(self.source[pos:end].decode("utf-8", "replace"))
        return "".join(parts)
