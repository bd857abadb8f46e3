"""The support matrix: result files from any machines merged into one op x dtype x backend table
(docs/support.md), in the spirit of llama.cpp's docs/ops.md.

A backend named in ``compiled_only`` with no result file (cuda and hip on machines without their
GPUs) gets a column for the ops it implements. With an ``accel kernels check --json`` file the
cell rests on it: "compiled only" when every shipped kernel of that op built for the vendor's
targets, "FAILED to compile" when one did not (a target with no toolchain there vouches for
nothing); without one it only says the op is "implemented". ``verdict`` and ``compile_verdict``
word every cell, here and in the HTML report (accel.conformance.report.render).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Mapping

from accel import kernels
from accel.conformance.profiles import OPS, op_dtypes
from accel.errors import ArgumentError, expected

#: every word a cell can say and what it means: the legend of docs/support.md and of the report
LEGEND = (
    ("passed (n)", "all n cases ran and matched the oracle"),
    ("FAILED (f/r)", "f of the r cases that ran failed or crashed"),
    ("partial (p passed, u unsupported)", "the claimed cases passed, the others were declined "
                                          "through supports()"),
    ("unsupported", "every case declined"),
    ("compiled only", "kernels built for a real target (per accel kernels check), never run"),
    ("FAILED to compile", "a kernel of the op did not build for one of the vendor's targets (per "
                          "accel kernels check)"),
    ("implemented", "the backend has the op but no compile result was given"),
    ("-", "no result"),
)

#: kernels-check statuses of a build that ran: "n/a" (not meant for that compiler) and
#: "unavailable" (no toolchain there) rows say nothing about the kernel
BUILT = ("ok", "failed")


def verdict(counts: Mapping[str, int]) -> tuple[str, str]:
    """(kind, text) of a cell from its case counts per status; the one place a verdict is
    worded, so docs/support.md and the HTML report read the same counts the same. ``kind`` is
    "passed", "partial", "failed", "compiled", "unsupported" or "untested" (the report's css
    class)."""
    passed, unsupported = counts.get("passed", 0), counts.get("unsupported", 0)
    bad = counts.get("failed", 0) + counts.get("error", 0)
    if bad:
        return "failed", f"FAILED ({bad}/{passed + bad})"
    if counts.get("compiled_only"):
        return "compiled", "compiled only"
    if passed and unsupported:
        return "partial", f"partial ({passed} passed, {unsupported} unsupported)"
    if passed:
        return "passed", f"passed ({passed})"
    if unsupported:
        return "unsupported", "unsupported"
    return "untested", "-"


def compile_verdict(ok: int, failed: int) -> tuple[str, str]:
    """(kind, text) of compile evidence from the number of builds that succeeded and failed: one
    failure decides."""
    if failed:
        return "failed", "FAILED to compile"
    if ok:
        return "compiled", "compiled only"
    return "untested", "-"


def _row_key(case: dict) -> tuple[str, str]:
    params = case.get("params", {})
    fmt, x_fmt = params.get("fmt"), params.get("x_fmt")
    return case["op"], case["dtype"] + (f" -> {fmt}" if case["op"] == "quantize" and fmt else
                                        f" x {fmt}" if fmt else "") + \
        (f", x_format={x_fmt}" if x_fmt else "")


#: which verdict counts when files of one backend and device disagree on a case (another
#: implementation's run, or a re-run): a failure anywhere is never hidden by a pass elsewhere,
#: and a case that ran outranks one only compiled or declined; the later file wins a tie
_PRECEDENCE = {"failed": 4, "error": 4, "passed": 3, "compiled_only": 2, "unsupported": 1}


def merge_cases(docs: list[dict]) -> dict:
    """Case id -> case over conformance documents of one backend and device (see _PRECEDENCE);
    a case without an id (not one accel wrote) is kept as it is."""
    merged: dict = {}
    for k, doc in enumerate(docs):
        for i, case in enumerate(doc.get("cases", [])):
            key = case.get("id", (k, i))
            old = merged.get(key)
            if old is None or (_PRECEDENCE.get(case.get("status"), 4)
                               >= _PRECEDENCE.get(old.get("status"), 4)):
                merged[key] = case
    return merged


def _columns(reports: list[dict]) -> dict[str, dict]:
    """Column label -> {case id: case}; files for the same backend and device merge (merge_cases)."""
    groups: dict[str, list[dict]] = {}
    for rep in reports:
        groups.setdefault(f"{rep['backend']} ({rep.get('device', {}).get('name', '?')})", []).append(rep)
    return {label: merge_cases(docs) for label, docs in groups.items()}


def _backend_class(name: str) -> type | None:
    from accel.errors import AccelError
    from accel.registry import _load_class

    try:
        return _load_class(name)
    except AccelError:
        return None


def _declares(cls: type, case: dict) -> bool:
    """Whether a backend class takes ``case`` by its declared contract (the op, and for quantized
    ops the formats in ``formats`` / ``x_formats``), as supports() declines first, no device needed."""
    params = case.get("params", {})
    # a dequantize case names its format as its input dtype
    fmt = case.get("dtype") if case["op"] == "dequantize" else params.get("fmt")
    x_fmt = params.get("x_fmt")
    return (cls.implements(case["op"]) and (fmt is None or fmt in cls.formats)
            and (x_fmt is None or x_fmt in cls.x_formats)
            and not kernels.kernel_declines(case["op"], fmt, x_fmt))


def compile_verdicts(kernels_check: dict) -> dict[tuple[str, str], str]:
    """(backend, op) -> "compiled only" or "FAILED to compile", from a kernels-check result file
    (NVIDIA targets vouch for cuda, AMD ones for hip)."""
    from accel.kernels import KERNELS_CHECK_SCHEMA, SOURCE_OPS

    # another result file would silently turn every compiled-only cell into "-"
    if not isinstance(kernels_check, dict) or kernels_check.get("schema") != KERNELS_CHECK_SCHEMA:
        got = kernels_check.get("schema") if isinstance(kernels_check, dict) else None
        raise ArgumentError(expected("--kernels-check", f"an {KERNELS_CHECK_SCHEMA} file (accel "
                                     "kernels check --json)", got or "no accel result schema"))
    from accel.kernels import variants

    # only accel's own variants vouch for its ops: a user's file named matmul.cl does not
    shipped = {v.id: v for v in variants()}
    builds: dict[tuple[str, str], Counter[str]] = {}
    seen: dict[str, set[str]] = {"cuda": set(), "hip": set()}  # variants built or not applicable
    for row in kernels_check.get("results", []):
        backend = "cuda" if row["target"].startswith("sm_") else "hip" if row["target"].startswith("gfx") else None
        if backend is None or row.get("job") not in shipped:
            continue
        if row["status"] in ("ok", "n/a"):
            seen[backend].add(row["job"])
        if row["status"] not in BUILT:
            continue
        for op in SOURCE_OPS.get(row["file"], ()):
            builds.setdefault((backend, op), Counter())[row["status"]] += 1
    out = {}
    for (backend, op), n in builds.items():
        # "compiled only" needs every shipped variant of the op meant for the vendor's compiler
        meant = {vid for vid, v in shipped.items() if op in SOURCE_OPS.get(v.source, ())
                 and backend in v.dialects}
        complete = not n["failed"] and meant <= seen[backend]
        out[backend, op] = compile_verdict(n["ok"] if complete else 0, n["failed"])[1]
    return {key: text for key, text in out.items() if text != "-"}


def model_rows(models: list[tuple[dict, str]]) -> list[str]:
    """The markdown "models" section: a row per model-conformance record (``accel conformance
    --model M --backend B --json F``, with the file it came from): the verdict, the logits
    against the float64 forward and against llama.cpp, the largest per-layer error."""
    if not models:
        return []
    lines = ["", "## models", "",
             "| model | arch | backend | verdict | mean KL (f64) | top-1 (f64) | worst layer error "
             "| mean KL (llama.cpp) | file |", "|---|---|---|---|---|---|---|---|---|"]
    for rec, src in models:
        name = Path(str(rec.get("model", "?"))).name
        if rec.get("crashed"):
            lines.append(f"| {name} | - | {rec.get('backend', '?')} | CRASHED ({rec['crashed']}) "
                         f"| - | - | - | - | {src} |")
            continue
        m, layers, ll = rec["logits"], rec.get("layer_relative_error", {}), rec.get("llama_cpp", {})
        worst = max(layers.items(), key=lambda kv: kv[1]) if layers else None
        llama = (f"{ll['logits']['mean_kl']:.2e}" if ll.get("status") == "ok"
                 else ll.get("status", "-"))
        lines.append(f"| {name} | {rec.get('arch', '?')} | {rec.get('backend', '?')} | "
                     f"{'passed' if rec.get('passed') else 'FAILED'} ({m['n_tokens']} tokens) | "
                     f"{m['mean_kl']:.2e} | {m['top1_agreement']:.1%} | "
                     f"{f'{worst[1]:.2e} ({worst[0]})' if worst else '-'} | {llama} | {src} |")
    return lines


def render(reports: list[dict], sources: list[str],
           compiled_only: tuple[str, ...] = ("cuda", "hip"), kernels_check: dict | None = None,
           models: list[tuple[dict, str]] = ()) -> str:
    """The markdown support matrix for ``reports`` (read from ``sources``), and a models section
    for model-conformance ``models`` (record, file) where there are any."""
    compiled = compile_verdicts(kernels_check) if kernels_check else {}
    cols = _columns(reports)
    seen_names = {rep.get("backend_name", rep["backend"].split(":")[0]) for rep in reports}
    extra = {name: _backend_class(name) for name in compiled_only if name not in seen_names}
    legend = "; ".join(f"**{word}**: {meaning}" for word, meaning in LEGEND) + "."
    lines = ["# Support matrix", "",
             "Generated by `accel conformance matrix` from conformance result files; regenerate it "
             "rather than editing it.", "", legend, "", "## Result files", "",
             "| backend | device | evidence | profile | seed | commit | passed | failed | "
             "unsupported | file |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for rep, src in zip(reports, sources):
        s = rep["summary"]
        lines.append(f"| {rep['backend']} | {rep.get('device', {}).get('name', '?')} | "
                     f"{rep.get('evidence', 'ran')} | {rep['profile']} | {rep['seed']} | "
                     f"{rep.get('commit', '')[:12]} | {s['passed']} | {s['failed'] + s['error']} | "
                     f"{s['unsupported']} | {src} |")
    for name, cls in extra.items():
        why = "no result file from a run on its GPU" if cls is not None else "backend not installed"
        built = [text for (backend, _), text in compiled.items() if backend == name]
        evidence = ("FAILED to compile" if "FAILED to compile" in built
                    else "compiled only" if built else "untested")
        lines.append(f"| {name} | - | {evidence} | - | - | - | - | - | - | ({why}) |")
    headers = list(cols) + [f"{name} (no GPU run)" for name in extra]
    for op in OPS:
        rows: dict[str, dict[str, Counter]] = {}
        examples: dict[str, dict] = {}  # a case of each row, for the compiled-only columns
        for label, cases in cols.items():
            for case in cases.values():
                if case["op"] == op:
                    _, row = _row_key(case)
                    rows.setdefault(row, {}).setdefault(label, Counter())[case["status"]] += 1
                    examples.setdefault(row, case)
        if not rows and not any(cls and cls.implements(op) for cls in extra.values()):
            continue
        if not rows:
            rows = {dt: {} for dt in op_dtypes(op)}
        lines += ["", f"## {op}", "", "| dtype | " + " | ".join(headers) + " |",
                  "|---|" + "---|" * len(headers)]
        for row in sorted(rows):
            cells = [verdict(rows[row].get(label, Counter()))[1] for label in cols]
            case = examples.get(row, {"op": op})
            cells += [(compiled.get((name, op), "-") if kernels_check else "implemented")
                      if cls and _declares(cls, case) else "-" for name, cls in extra.items()]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += model_rows(list(models))
    return "\n".join(lines) + "\n"
