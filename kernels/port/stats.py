r"""``accel port --stats DIR_OR_FILES``: what the translator did with a body of CUDA code, per
construct (uses translated, warned, refused) and per kernel (the share in files that port), as
text or JSON, like hipify's statistics. This module counts; the command translates.

>>> from accel.kernels.port import translate
>>> srcs = {"a.cu": "__global__ void k(float* x) { x[threadIdx.x] = expf(x[0]); }",
...         "b.cu": "__global__ void k(float* x) { x[0] = __shfl_sync(0xffu, x[0], 0); }"}
>>> s = tally([(f, t, translate(t, "opencl", filename=f)) for f, t in srcs.items()], "opencl")
>>> s["kernels"], s["kernels_ported"], s["constructs"]["expf"]
(2, 1, {'translated': 1, 'warned': 1, 'refused': 0})
>>> s["constructs"]["__shfl_sync"]["refused"]
1
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from accel.errors import ArgumentError, expected
from accel.kernels.port.syntax import Diagnostic, parse, walk

#: diagnostics whose construct names a use ("double literal 0.1", "template scale<float>"):
#: counted under the prefix
_PREFIXES = ("double literal", "template call", "template", "host function", "macro",
             "pointer parameter", "pointer", "kernel name", "recursion through", "typedef",
             "device function", "call of", "struct member", "struct kernel argument",
             "half member", "bfloat16 member")


def kind(d: Diagnostic) -> str:
    """The construct a diagnostic counts under: ``expf precision`` -> ``expf``, ``cooperative
    groups (grid.sync)`` -> ``cooperative groups``, ``double literal 0.1`` -> ``double literal``."""
    c = d.construct.split(" (")[0].removesuffix(" precision")
    return next((p for p in _PREFIXES if c.startswith(p + " ")), c)


def sources(paths: list[Path]) -> list[Path]:
    """The .cu/.cuh files named, or found under the directories named, in order, each once
    (a file named twice, or named and inside a directory named, counts once)."""
    found = []
    for p in paths:
        if p.is_dir():
            found.extend(sorted(q for q in p.rglob("*") if q.suffix in (".cu", ".cuh") and q.is_file()))
        elif p.is_file():
            found.append(p)
        else:
            raise ArgumentError(expected("FILE", "a CUDA file or a directory of them", repr(str(p))))
    out, seen = [], set()
    for p in found:
        if (key := p.resolve()) not in seen:
            seen.add(key)
            out.append(p)
    return out


def _kernels(source: bytes) -> int:
    return sum(1 for n in walk(parse(source).root_node) if n.type == "function_definition"
               and any(c.type == "__global__" for c in n.children))


def tally(entries, to: str) -> dict:
    """Count, over ``(path, source, PortResult)`` entries, the uses of each construct translated
    (warned ones included), warned and refused, and the kernels in files that ported."""
    constructs: dict[str, dict[str, int]] = defaultdict(lambda: {"translated": 0, "warned": 0,
                                                                 "refused": 0})
    files, kernels, kernels_ported, refused_files, failed = 0, 0, 0, [], {}
    reasons: dict[str, int] = defaultdict(int)  # construct -> files it blocks
    for path, source, result in entries:
        n = _kernels(source.encode())
        files, kernels = files + 1, kernels + n
        if isinstance(result, Exception):  # the translator itself failed on the file
            failed[str(path)] = f"{type(result).__name__}: {result}"
            continue
        if result.ok:
            kernels_ported += n
        else:
            refused_files.append(str(path))
            for k in sorted({kind(d) for d in result.errors}):
                reasons[k] += 1
        for name, count in result.translated.items():
            constructs[name]["translated"] += count
        for d in result.diagnostics:
            constructs[kind(d)]["warned" if d.severity == "warning" else "refused"] += 1
    return {"to": to, "files": files, "files_ported": files - len(refused_files) - len(failed),
            "files_refused": len(refused_files), "files_failed": len(failed),
            "refused_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            "failed_files": failed,
            "kernels": kernels, "kernels_ported": kernels_ported,
            "kernel_share": kernels_ported / kernels if kernels else 0.0,
            "refused_files": refused_files,
            "constructs": {k: constructs[k] for k in sorted(constructs)}}


def format_text(stats: dict) -> str:
    """The statistics as a table: the constructs with refusals first, then by use count."""
    rows = sorted(stats["constructs"].items(),
                  key=lambda kv: (-kv[1]["refused"], -kv[1]["translated"], kv[0]))
    width = max([len(k) for k, _ in rows] + [len("construct")])
    lines = [f"accel port --stats ({stats['to']}): {stats['files_ported']} of {stats['files']} "
             f"files, {stats['kernels_ported']} of {stats['kernels']} kernels ported "
             f"({100 * stats['kernel_share']:.1f}%)",
             f"refused: {stats['files_refused']} files" + "".join(
                 f"{', ' if i else ' ('}{k} {v}" for i, (k, v) in enumerate(
                     stats["refused_by_reason"].items())) + (")" if stats["refused_by_reason"] else ""),
             f"failed: {stats['files_failed']} files" + "".join(
                 f"\n  {p}: {why}" for p, why in stats["failed_files"].items()),
             f"{'construct':<{width}}  translated  warned  refused"]
    lines += [f"{k:<{width}}  {v['translated']:>10}  {v['warned']:>6}  {v['refused']:>7}"
              for k, v in rows]
    return "\n".join(lines) + "\n"
