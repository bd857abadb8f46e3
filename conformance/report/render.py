"""The portability report: one self-contained HTML page (plots embedded as PNG data URIs, no
network needed) and a Markdown summary, from ``accel.bench/1`` and ``accel.conformance/1`` result
files, possibly from several machines (an NVIDIA box, an AMD box, a laptop) merged into one.

>>> import accel, tempfile
>>> from accel.conformance.bench import suite as bench, timing
>>> from accel.conformance.report import render as report
>>> doc = bench.run_suite(accel.get_backend("cpu"), bench.cases("quick", ["dequantize"])[:1],
...                       budget=timing.TINY, with_baselines=False)
>>> html_path, md_path = report.write(report.Results(bench=[doc]), tempfile.mkdtemp())
>>> html_path.name, md_path.name
('report.html', 'summary.md')
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from accel.conformance.report import portability as PP
from accel.conformance.report.schemas import MODEL_BENCH_SCHEMA, MODEL_CONFORMANCE_SCHEMA, validate
from accel.conformance.bench.suite import SCHEMA as BENCH_SCHEMA
from accel.conformance.bench.suite import busy_warning, peak_warning, portability_cases
from accel.conformance.bench.suite import noisy as is_noisy
from accel.conformance.matrix import BUILT, LEGEND, compile_verdict, merge_cases, verdict
from accel.conformance.results import SCHEMA as CONFORMANCE_SCHEMA
from accel.errors import ArgumentError, expected
from accel.kernels import KERNELS_CHECK_SCHEMA  # compile-only evidence


@dataclass
class Results:
    """Result documents to report on, by kind, and what the reader must be told about them:
    ``notes`` (files left out) and ``warnings`` (machines or runs that could be confused)."""

    bench: list[dict] = field(default_factory=list)
    conformance: list[dict] = field(default_factory=list)
    kernels: list[dict] = field(default_factory=list)
    #: accel.model-conformance/1 and accel.bench_model/1 documents (the model section)
    models: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def platforms(self) -> list[str]:
        seen: dict[str, None] = {}
        for doc in self.bench + self.conformance:
            seen[PP.platform_name(doc)] = None
        return list(seen)


def _read(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ArgumentError(expected("RESULTS", "a readable result file", f"{path}: {e.strerror}")) from None
    except ValueError as e:
        raise ArgumentError(expected("RESULTS", "a JSON result file", f"{path}: {e}")) from None


def load(paths: Iterable[str | Path]) -> Results:
    """Read result files, each validated against its published schema (schemas.py); JSON files
    of other kinds (speed goals, anything without an accel result schema) are left out with a
    note, so ``accel report docs/results/*.json`` works. Conformance files without a ``machine``
    are attached to the bench file of the same backend and device when exactly one matches."""
    res = Results()
    kinds = {BENCH_SCHEMA: res.bench, CONFORMANCE_SCHEMA: res.conformance, KERNELS_CHECK_SCHEMA: res.kernels,
             MODEL_CONFORMANCE_SCHEMA: res.models, MODEL_BENCH_SCHEMA: res.models}
    files: dict[int, str] = {}  # id(doc) -> its path, for warnings that name files
    for path in paths:
        doc = _read(path)
        files[id(doc)] = str(path)
        schema = validate(doc, path)
        if schema is None:
            found = doc.get("schema") if isinstance(doc, dict) else None
            res.notes.append(f"{path} left out: {f'schema {found!r}' if found else 'no schema field'} "
                             f"is not a result file the report renders ({', '.join(kinds)})")
            continue
        kinds[schema].append(doc)
    for doc in res.conformance:
        _pair_with_bench(doc, res.bench, files, res.notes)
    res.warnings += name_machines(res.bench + res.conformance)
    res.bench = _merged_bench_per_platform(res.bench, files, res.warnings)
    res.conformance = _merged_per_platform(res.conformance)
    return res


def _pair_with_bench(doc: dict, bench: list[dict], files: Mapping[int, str], notes: list[str]) -> None:
    """Give a conformance file the machine record of the bench files of its device when it has
    none, or when it names its machine differently (`accel bench --label laptop` beside a
    conformance run that kept the host name) while host, CPU and cores say it is the same
    machine: one label for one device, else the conformance failures would not reach its PP."""
    same = [b for b in bench if b.get("backend") == doc.get("backend")
            and _device_name(b) == _device_name(doc)]
    mine = doc.get("machine") or {}
    if not mine:  # one machine's bench files (a quick run and a decode sweep, say): that machine
        if len({_label(b["machine"]) for b in same}) == 1:
            doc["machine"] = same[0]["machine"]
        return
    if any(_label(b["machine"]) == _label(mine) for b in same):
        return
    ident = {k: mine.get(k) for k in _IDENTITY}
    labels = {_label(b["machine"]) for b in same
              if all(b["machine"].get(k) == v for k, v in ident.items() if v not in (None, ""))}
    if len(labels) == 1 and all(v not in (None, "") for v in ident.values()):
        label = labels.pop()
        doc["machine"] = {**mine, "label": label}
        notes.append(f"{files[id(doc)]}: labelled {_label(mine)!r}, shown under {label!r}, the "
                     "label of the benchmark files of the same host, CPU and device")


# -- machine identity ------------------------------------------------------------------------
#: what tells two machines apart when they carry the same label (hostname by default: every
#: cloud VM may be "vm"); the OS string is left out, since a reboot into a new kernel does not
#: make another machine
_IDENTITY = ("hostname", "cpu", "cores")


def _label(m: Mapping) -> str:
    return m.get("label") or m.get("hostname") or "unknown"


def _hardware(m: Mapping) -> str:
    """'2-core AMD EPYC' from a machine record."""
    cpu = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b", "", str(m.get("cpu") or "")).split("@")[0]
    cores = f"{m['cores']}-core " if m.get("cores") else ""
    return (cores + " ".join(cpu.split())).strip()


def name_machines(docs: list[dict]) -> list[str]:
    """Give distinct machines that share a label distinct labels (in place: every table, chart
    and platform name then tells them apart) and return a warning per such label. Before this,
    a 2-core EPYC VM and a 16-core H200 VM, both hostname "vm", merged into one machine."""
    by_label: dict[str, list[tuple[dict, list[dict]]]] = defaultdict(list)
    for doc in docs:
        m = doc.get("machine") or {}
        ident = {k: str(m[k]) for k in _IDENTITY if m.get(k) not in (None, "")}
        groups = by_label[_label(m)]
        for known, members in groups:
            # a record with only some fields (a hand-written {"label": ...}) joins any machine
            # it does not contradict
            if all(known.get(k, v) == v for k, v in ident.items()):
                known.update(ident)
                members.append(doc)
                break
        else:
            groups.append((ident, [doc]))
    warnings = []
    for label, groups in by_label.items():
        if len(groups) < 2:
            continue
        names = _distinct_names(label, [known for known, _ in groups])
        for name, (_, members) in zip(names, groups):
            for doc in members:
                doc["machine"] = {**(doc.get("machine") or {}), "label": name}
        warnings.append(f"{len(groups)} different machines are labelled {label!r}; shown as "
                        f"{', '.join(repr(n) for n in names)}. Give each machine its own --label.")
    return warnings


def _distinct_names(label: str, machines: list[Mapping]) -> list[str]:
    """'label (what differs)' for each machine: its cores and CPU, else its hostname, else its
    position (``machines``: each one's identity fields)."""
    for describe in (_hardware, lambda m: m.get("hostname", "")):
        names = [f"{label} ({describe(m)})" for m in machines]
        if len(set(names)) == len(names) and all(describe(m) for m in machines):
            return names
    return [f"{label} (#{i + 1})" for i in range(len(machines))]


def _merged_bench_per_platform(docs: list[dict], files: Mapping[int, str],
                               warnings: list[str]) -> list[dict]:
    """One bench document per platform (machine, backend and device) holding the cases of all its
    files: files often measure different parts (the quick run, then the decode sweep alone), and
    dropping all but the newest would silently lose them. A case measured in several files comes
    from the newest (by creation time; the later file given on a tie), so re-running a machine's
    benchmark replaces its rows instead of doubling them, and ``warnings`` names the files whose
    cases were left out. The platform's own fields (peaks, load, versions) are the newest file's;
    its profile says what every file measured. ``files``: id(doc) -> the path it was read from."""
    by_platform: dict[tuple[str, str], list[dict]] = {}
    for doc in docs:
        by_platform.setdefault((PP.platform_name(doc), _device_name(doc)), []).append(doc)
    out = []
    for (plat, device), group in by_platform.items():
        group = sorted(group, key=lambda d: str(d.get("created", "")))  # stable: ties keep order
        newest = group[-1]
        cases: dict[str, tuple[dict, dict]] = {}
        replaced: dict[int, int] = defaultdict(int)  # id(doc) -> its cases a newer file replaced
        for doc in group:
            for case in doc.get("cases", []):
                old = cases.get(case["id"])
                if old is not None and files[id(old[0])] != files[id(doc)]:
                    replaced[id(old[0])] += 1
                cases[case["id"]] = (doc, case)
        for doc in group:
            if replaced[id(doc)]:
                warnings.append(f"{plat} ({device}): {replaced[id(doc)]} case(s) of {files[id(doc)]} "
                                f"({doc.get('created', '?')}) were measured again in a newer file; "
                                "the newer measurements are shown.")
        selections = dict.fromkeys(PP.selection(d) for d in group)
        out.append({**newest, "profile": ", ".join(selections), "ops": None,  # now in the profile
                    "cases": [case for _, case in cases.values()]})
    return out


def _merged_per_platform(docs: list[dict]) -> list[dict]:
    """One conformance document per platform holding the cases of all its files, merged as the
    support matrix merges them (matrix.merge_cases: a failure in any file counts): files often
    cover different parts (one per implementation, or one op's full profile), so keeping only the
    newest would drop the others' cases."""
    by_platform: dict[str, list[dict]] = {}
    for doc in docs:
        by_platform.setdefault(PP.platform_name(doc), []).append(doc)
    return [{**group[-1], "cases": list(merge_cases(group).values())} for group in by_platform.values()]


def _device_name(doc: Mapping) -> str:
    dev = doc.get("device")
    return dev.get("name", "") if isinstance(dev, Mapping) else str(dev or "")


# -- formatting -----------------------------------------------------------------------------
def number(x: float | None, digits: int = 3) -> str:
    """A number as a reader reads it: '1,510' rather than '1.51e+03', 3 significant digits below
    1,000.

    >>> number(1510.7), number(60947.6), number(85.33), number(0.00123), number(None)
    ('1,511', '60,948', '85.3', '0.00123', '–')
    >>> number(431.2, 2), number(43.12, 2), number(99.7, 2), number(999.7)
    ('431', '43', '100', '1,000')
    """
    if x is None:
        return "–"
    if abs(float(f"{x:.{digits}g}")) >= min(1000, 10 ** digits):  # '.2g' writes 430 as '4.3e+02'
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if abs(x) >= 1e-4 or x == 0 else f"{x:.1e}"


def percent(x: float | None) -> str:
    """A percentage with 2 significant digits below 10%, so 0.4% does not read as 0%.

    >>> percent(0.87), percent(0.0039), percent(0.0), percent(None)
    ('87%', '0.39%', '0%', '–')
    """
    if x is None:
        return "–"
    return f"{100 * x:.0f}%" if x == 0 or x >= 0.1 else f"{100 * x:.2g}%"


def case_label(case: Mapping) -> str:
    """Compact parameters: 'M=512 N=512 K=512', 'B=1 Hq=8 Hkv=2 Sq=256 Sk=256 D=64 causal'."""
    parts = []
    for k, v in case["params"].items():
        if v is True:
            parts.append(k)
        elif v is not False:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def ratio_text(case: Mapping) -> str:
    """'0.52x numpy' (above 1: accel is faster than the best baseline); a ratio below 0.01 keeps
    two significant digits, so it never reads as zero.

    >>> ratio_text({"ratio_to_best": 1234.5, "best_baseline": "numpy"})
    '1,234.50x numpy'
    >>> ratio_text({"ratio_to_best": 0.0027, "best_baseline": "ggml"}), ratio_text({})
    ('0.0027x ggml', '–')
    """
    r = case.get("ratio_to_best")
    if r is None:
        return "–"
    return f"{r:,.2f}x {case['best_baseline']}" if r >= 0.01 else f"{r:.2g}x {case['best_baseline']}"


def headline(doc: Mapping, case: Mapping) -> str:
    """'laptop/opencl:0 matmul float32 M=512 N=512 K=512: 0.52x numpy'."""
    return f"{PP.platform_name(doc)} {case['op']} {case['dtype']} {case_label(case)}: {ratio_text(case)}"


# -- support matrix ----------------------------------------------------------------------------
@dataclass
class Cell:
    """One support-matrix cell: its cases' counts per status, and how they were obtained ("ran",
    "compiled only")."""

    counts: Counter[str] = field(default_factory=Counter)
    evidence: set[str] = field(default_factory=set)


def support_matrix(res: Results) -> tuple[list[str], list[tuple[str, str]],
                                          dict[tuple[str, str, str], Cell]]:
    """(platforms, (op, dtype) rows, (platform, op, dtype) -> Cell) from conformance files; a
    platform with benchmarks but no conformance file shows as untested."""
    platforms = res.platforms
    cells: dict[tuple[str, str, str], Cell] = defaultdict(Cell)
    rows: dict[tuple[str, str], None] = {}
    for doc in res.conformance:
        plat = PP.platform_name(doc)
        for case in doc.get("cases", []):
            key = (case.get("op", "?"), case.get("dtype", "?"))
            rows[key] = None
            cell = cells[(plat,) + key]
            cell.counts[case.get("status", "error")] += 1
            cell.evidence.add(case.get("evidence", "ran"))
    return platforms, sorted(rows), cells


def cell_verdict(cell: Cell | None) -> tuple[str, str]:
    """(text, css class) of one support-matrix cell: docs/support.md's words for the same counts,
    and the evidence where cases ran (a compiled-only or unsupported verdict already says it)."""
    cell = cell or Cell()
    kind, text = verdict(cell.counts)
    if kind in ("passed", "partial", "failed"):
        text += ", " + " and ".join(sorted(cell.evidence))
    return text, kind


def _legend_html() -> str:
    return "; ".join(f"<b>{html.escape(word)}</b>: {html.escape(meaning)}"
                     for word, meaning in LEGEND) + "."


# -- plots --------------------------------------------------------------------------------------
# Figures are drawn at 100 dpi and shown at their own size (the page is 1200 px wide, figures at
# most 11 in), so a 10 pt label is about 14 px on screen, not shrunk below readability.
_FIG_WIDTH_IN = 11.0
_TICK_PT, _LABEL_PT, _TITLE_PT = 10, 11, 13
#: bar groups per chart: more would squeeze their tick labels together
_GROUPS_PER_CHART = 6
#: a value axis goes logarithmic only when its values span more than this factor (decades); a
#: log axis over 130..190 GB/s makes a 1.4x difference look like 10x
_LOG_SPAN = 30.0

_OP_COLORS = {"matmul": "tab:blue", "attention": "tab:orange", "qmatmul": "tab:green",
              "quantize": "tab:red", "dequantize": "tab:purple"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _pyplot():
    """matplotlib's pyplot on the file-only backend; ImportError without the bench extra (the
    report then leaves the charts out: plots_section)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _tick(v: float, _=None) -> str:
    """Axis numbers with thousands separators: 60,000 rather than 6e4 or 60000."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"


def value_scale(values: Iterable[float]) -> str:
    """'log' when the positive values span decades, else 'linear' (bars from zero).

    >>> value_scale([130, 190]), value_scale([20, 60000]), value_scale([])
    ('linear', 'log', 'linear')
    """
    pos = [v for v in values if v > 0]
    return "log" if pos and max(pos) / min(pos) > _LOG_SPAN else "linear"


def _style(ax, title: str, xlabel: str | None, ylabel: str) -> None:
    ax.set_title(title, fontsize=_TITLE_PT)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=_LABEL_PT)
    ax.set_ylabel(ylabel, fontsize=_LABEL_PT)
    ax.tick_params(labelsize=_TICK_PT)


def _set_value_scale(ax, scale: str) -> None:
    """The y axis log, or linear from zero, with readable numbers on either."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale(scale)
    if scale == "log":
        _plain_ticks(ax.yaxis)
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))


def roofline_plot(doc: Mapping) -> str | None:
    """Roofline of one platform: measured roof, accel's cases (filled) and baselines (hollow).
    Both axes span decades (intensity 0.1..1000, rates from GB/s to TFLOP/s): log-log is the
    roofline's own scale."""
    peaks = doc.get("peaks")
    points = [c for c in doc.get("cases", []) if c.get("status") == "ok" and c.get("flops")
              and c.get("intensity") is not None]
    if not peaks or not points:
        return None
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.2), layout="constrained")
    xs = [c["intensity"] for c in points]
    x = np.logspace(np.log10(min(min(xs) / 4, 0.1)), np.log10(max(max(xs) * 4, 100)), 200)
    roof = np.minimum(peaks["gflops"], x * peaks["gbs"])
    ax.plot(x, roof, color="black", lw=1.5,
            label=f"roof: {number(peaks['gflops'])} GFLOP/s, {number(peaks['gbs'])} GB/s")
    seen = set()
    for c in points:
        op = c["op"]
        ax.scatter(c["intensity"], c["gflops"], color=_OP_COLORS.get(op, "gray"), zorder=3,
                   label=f"accel {op}" if op not in seen else None)
        seen.add(op)
        for b in c.get("baselines", []):
            if b.get("status") == "ok":
                ax.scatter(c["intensity"], b["gflops"], facecolors="none", zorder=2,
                           edgecolors=_OP_COLORS.get(op, "gray"), marker="s")
    ax.scatter([], [], facecolors="none", edgecolors="gray", marker="s", label="baselines (best of)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_ticks(ax.xaxis)
    _plain_ticks(ax.yaxis)
    _style(ax, f"Roofline: {PP.platform_name(doc)} ({_device_name(doc)})",
           "arithmetic intensity (FLOP/byte)", "throughput (GFLOP/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=_TICK_PT, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _png(fig)


def decode_curves(doc: Mapping) -> dict[str, dict[str, dict[int, float]]]:
    """The decode sweep in one bench file: per weight format (and activation format, and N x K),
    per series (accel, then each baseline), GB/s of weight bytes by M. Only groups with two or
    more M values: a curve, not a point.

    >>> case = lambda m, gbs: {"op": "qmatmul", "status": "ok", "params": {"M": m, "N": 8, "K": 32,
    ...                        "fmt": "q4_0"}, "weight_gbs": gbs, "baselines": []}
    >>> decode_curves({"cases": [case(1, 2.0), case(2, 3.0)]})
    {'q4_0 N=8 K=32': {'accel': {1: 2.0, 2: 3.0}}}
    """
    groups: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for c in doc.get("cases", []):
        if c["op"] != "qmatmul" or c.get("status") != "ok" or c.get("weight_gbs") is None:
            continue
        p = c["params"]
        key = f"{p['fmt']}{' x ' + p['x_fmt'] if p.get('x_fmt') else ''} N={p['N']} K={p['K']}"
        groups[key]["accel"][p["M"]] = c["weight_gbs"]
        for b in c.get("baselines", []):
            if b.get("status") == "ok" and b.get("weight_gbs") is not None:
                groups[key][b["name"]][p["M"]] = b["weight_gbs"]
    return {k: {n: dict(v) for n, v in g.items()} for k, g in groups.items() if len(g["accel"]) > 1}


def decode_plot(doc: Mapping) -> str | None:
    """GB/s of weight bytes against M, one panel per weight format (two panels a row): accel,
    each baseline (one colour per series in every panel), and the device's measured copy
    bandwidth (the memory-bound roof). None without a sweep."""
    curves = decode_curves(doc)
    if not curves:
        return None
    plt = _pyplot()
    import matplotlib

    names = sorted({n for series in curves.values() for n in series}, key=lambda n: (n != "accel", n))
    palette = matplotlib.colormaps["tab10"].colors
    color = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    cols = min(2, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(_FIG_WIDTH_IN, 3.6 * rows + 1), layout="constrained",
                             squeeze=False, sharey=True)
    peaks = doc.get("peaks")
    handles: dict[str, Any] = {}
    for ax, (group, series) in zip(axes.flat, curves.items()):
        for name in names:
            if name not in series:
                continue
            ms = sorted(series[name])
            (line,) = ax.plot(ms, [series[name][m] for m in ms], marker="o", color=color[name],
                              lw=2.2 if name == "accel" else 1.2, ls="-" if name == "accel" else "--")
            handles.setdefault(name, line)
        if peaks:
            handles.setdefault(f"copy bandwidth {number(peaks['gbs'])} GB/s",
                               ax.axhline(peaks["gbs"], color="black", lw=1, ls=":"))
        ms = sorted({m for by_m in series.values() for m in by_m})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.minorticks_off()
        _set_value_scale(ax, "linear")
        _style(ax, group, "M (tokens)", "GB/s of weight bytes")
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(curves):]:
        ax.set_visible(False)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               ncols=min(3, len(handles)), fontsize=_TICK_PT, frameon=False)
    fig.suptitle(f"Decode: {PP.platform_name(doc)} ({_device_name(doc)}), weights beyond the "
                 "last-level cache", fontsize=_TITLE_PT)
    return _png(fig)


def _plain_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (0.5, 2, 3,000) rather than 5x10^-1; minor ticks get
    labels at 2 and 5, or all of them when the axis spans less than a decade."""
    from matplotlib.ticker import FuncFormatter

    def minor(v: float, _) -> str:
        lo, hi = sorted(axis.get_view_interval())
        narrow = lo > 0 and math.log10(hi / lo) < 1
        return _tick(v) if narrow or f"{v:.0e}"[0] in "25" else ""

    axis.set_major_formatter(FuncFormatter(_tick))
    axis.set_minor_formatter(FuncFormatter(minor))


def _baseline_series(doc: Mapping, baseline: Mapping) -> str:
    """A baseline's bar series: per machine and hardware ('torch on vm, cuda'), so torch on a
    GPU box and torch on a laptop never share a bar or a colour."""
    machine = PP.platform_name(doc).rsplit("/", 1)[0]
    hardware = (doc.get("device") or {}).get("hardware") or doc.get("backend", "?")
    return f"{baseline['name']} on {machine}, {hardware}"


def series_colors(res: Results) -> dict[str, str]:
    """One color per bar series (accel on a platform, or a baseline on a machine), the same in
    every chart so a reader can follow a series from op to op."""
    import matplotlib

    names = set()
    for doc in res.bench:
        names.add(f"accel {PP.platform_name(doc)}")
        for c in doc.get("cases", []):
            names.update(_baseline_series(doc, b) for b in c.get("baselines", []))
    palette = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"].colors
    return {n: matplotlib.colors.to_hex(palette[i % len(palette)])
            for i, n in enumerate(sorted(names, key=_series_order))}


def _series_order(name: str) -> tuple[bool, str]:
    """accel's series first, then the baselines, each alphabetically."""
    return not name.startswith("accel "), name


def bar_series(res: Results, op: str) -> tuple[dict[str, dict[str, float]], bool]:
    """(series -> case key -> rate, whether the rate is GFLOP/s rather than GB/s) for one op:
    each platform's accel result and each machine's baselines (a baseline's best run there)."""
    series: dict[str, dict[str, float]] = defaultdict(dict)
    unit_flops = True
    for doc in res.bench:
        for c in doc.get("cases", []):
            if c["op"] != op or c.get("status") != "ok":
                continue
            unit_flops = bool(c["flops"])
            rate = "gflops" if unit_flops else "gbs"
            key = f"{c['dtype']}\n{case_label(c)}"
            series[f"accel {PP.platform_name(doc)}"][key] = c[rate]
            for b in c.get("baselines", []):
                if b.get("status") == "ok":
                    name = _baseline_series(doc, b)
                    series[name][key] = max(series[name].get(key, 0.0), b[rate])
    return series, unit_flops


def op_bars(res: Results, op: str, colors: dict[str, str]) -> list[str]:
    """Grouped bars for one op, at most _GROUPS_PER_CHART cases per chart; the value axis is
    linear from zero unless the values span decades."""
    series, unit_flops = bar_series(res, op)
    keys = list(dict.fromkeys(k for vals in series.values() for k in vals))
    size = math.ceil(len(keys) / math.ceil(len(keys) / _GROUPS_PER_CHART)) if keys else 1
    chunks = [keys[i:i + size] for i in range(0, len(keys), size)]  # even: no 1-case leftover chart
    return [_bars(op, series, chunk, unit_flops, colors, f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else "")
            for i, chunk in enumerate(chunks)]


def _bars(op: str, series: dict[str, dict[str, float]], labels: list[str], unit_flops: bool,
          colors: dict[str, str], part: str) -> str:
    plt = _pyplot()
    shown = {n: v for n, v in sorted(series.items(), key=lambda kv: _series_order(kv[0]))
             if any(k in v for k in labels)}
    fig, ax = plt.subplots(figsize=(_FIG_WIDTH_IN, 5.5), layout="constrained")
    width = 0.8 / len(shown)
    for i, (name, vals) in enumerate(shown.items()):
        xs = [j + (i - (len(shown) - 1) / 2) * width for j, k in enumerate(labels) if k in vals]
        ax.bar(xs, [vals[k] for k in labels if k in vals], width, label=name, color=colors[name],
               hatch="" if name.startswith("accel") else "//", edgecolor="white")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([_wrap(k) for k in labels])
    scale = value_scale(v for vals in shown.values() for k, v in vals.items() if k in labels)
    _set_value_scale(ax, scale)
    _style(ax, f"{op}{part}: accel and baselines (higher is better; {scale} axis)", None,
           "throughput (GFLOP/s)" if unit_flops else "bandwidth (GB/s)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=min(3, len(shown)), fontsize=_TICK_PT, frameon=False)
    return _png(fig)


def _wrap(label: str, width: int = 14) -> str:
    """Break long parameter strings at spaces so tick labels do not overlap."""
    out, line = [], ""
    for word in label.replace("\n", " \n ").split(" "):
        if word == "\n" or (line and len(line) + len(word) + 1 > width):
            out.append(line)
            line = "" if word == "\n" else word
        elif word:
            line = f"{line} {word}".strip()
    return "\n".join(out + [line])


# -- HTML --------------------------------------------------------------------------------------
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;
color:#1b1f24;padding:0 16px;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px;max-width:100%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.passed,.partial{background:#dafbe1}.failed{background:#ffd7d5}.compiled{background:#fff1c2}
.unsupported,.untested{background:#eef1f4;color:#57606a}
.noisy{background:#fff1c2}.warn{background:#fff1c2;border:1px solid #d4a72c;padding:8px 12px}.scroll{overflow-x:auto}img{max-width:100%;height:auto}
td.n{white-space:nowrap}td.wide{min-width:14em;overflow-wrap:anywhere}.note{color:#57606a;font-size:13px}
figure{margin:12px 0}figcaption{font-size:13px;color:#57606a}
"""


def _table(headers: list[str], rows: list[list[Any]], numeric: Iterable[int] = ()) -> str:
    numeric = set(numeric)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if isinstance(v, tuple):  # (text, css class)
                cells.append(f'<td class="{v[1]}">{html.escape(v[0])}</td>')
            else:
                cls = ' class="n"' if i in numeric else ""
                cells.append(f"<td{cls}>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def _versions(doc: Mapping) -> str:
    return ", ".join(f"{k} {v}" for k, v in doc.get("versions", {}).items())


def machine_rows(res: Results) -> list[list[Any]]:
    """One row per distinct machine record (name, host, OS, CPU, cores, python, run ids): a row
    is never shared by two machines, and one machine's files from several runs list each run."""
    rows: dict[tuple, set[str]] = {}
    for doc in res.bench + res.conformance:
        m = doc.get("machine") or {}
        key = (_label(m), m.get("hostname", ""), m.get("platform", ""), m.get("cpu", ""),
               m.get("cores", ""), m.get("python", ""))
        rows.setdefault(key, set()).add(m.get("run_id") or "")
    return [[*key, ", ".join(sorted(r for r in runs if r)) or "–"] for key, runs in rows.items()]


def _wide(rows: list[list[Any]], column: int) -> list[list[Any]]:
    """``rows`` with one column's cells marked to wrap anywhere (long OS strings, version lists)."""
    return [[(str(v), "wide") if i == column else v for i, v in enumerate(r)] for r in rows]


def machines_section(res: Results) -> str:
    prows = []
    for doc in res.bench:
        dev, peaks = doc.get("device", {}), doc.get("peaks") or {}
        others = (doc.get("load") or {}).get("others_cores")
        prows.append([PP.platform_name(doc), dev.get("name", ""), dev.get("driver", ""),
                      (_versions(doc), "wide"), number(peaks.get("gflops")), number(peaks.get("gbs")),
                      ", ".join(f"{k} {v}" for k, v in doc.get("baselines", {}).items()),
                      number(others),
                      f"{doc.get('profile', '')}, {doc.get('created', '')}"])
    for doc in res.conformance:
        prows.append([PP.platform_name(doc) + " (conformance)", _device_name(doc),
                      (doc.get("device") or {}).get("driver", "") if isinstance(doc.get("device"), Mapping) else "",
                      (_versions(doc), "wide"), "", "", "", "",
                      f"{doc.get('profile', '')}, commit {_short_commit(doc.get('commit'))}"])
    return ("<h2>Machines, devices and versions</h2>"
            + _table(["machine", "host", "OS", "CPU", "cores", "python", "run ids"],
                     _wide(machine_rows(res), 2), numeric=(4,))
            + _table(["platform", "device", "driver", "library versions", "peak GFLOP/s",
                      "peak GB/s", "baselines (versions)", "cores used by others", "profile, date"],
                     prows, numeric=(4, 5, 7))
            + '<p class="note">Peaks are measured on each device by accel.conformance.bench.peaks (a streaming copy '
              "and a float32 FMA-bound kernel), not taken from data sheets.</p>")


def _short_commit(commit: object) -> str:
    """A commit as 12 hex digits, its "+dirty" (uncommitted edits) kept: the run is not the
    commit's code."""
    text = str(commit or "")
    head, dirty = text.removesuffix("+dirty"), text.endswith("+dirty")
    return (head[:12] + ("+dirty" if dirty else "")) if head else "?"


def support_section(res: Results) -> str:
    platforms, rows, cells = support_matrix(res)
    if not res.conformance:
        return ("<h2>Support matrix (conformance)</h2><p class=note>No conformance result files "
                "were given: run <code>accel conformance --json</code> and pass its file.</p>")
    body = []
    for op, dtype in rows:
        body.append([op, dtype] + [cell_verdict(cells.get((p, op, dtype))) for p in platforms])
    return ("<h2>Support matrix (conformance)</h2>"
            '<p class="note">Each cell: verdict of the conformance suite for that op and dtype, '
            "worded as in docs/support.md, with its evidence (ran = executed on the device; "
            f"compiled only = built for the target without a device to run it). {_legend_html()}</p>"
            + _table(["op", "dtype"] + platforms, body))


def repeatability_rows(res: Results) -> list[list[Any]]:
    """[platform, op/dtype, runs, cases, bit-identical cases, flaky cases] of every conformance
    file a campaign ran with --bitwise (its ``repeatability`` record)."""
    rows = []
    for doc in res.conformance:
        rep = doc.get("repeatability") or {}
        for key, row in rep.get("by_op_dtype", {}).items():
            rows.append([PP.platform_name(doc), key, rep["runs"], row["cases"], row["identical"],
                         row["flaky"]])
    return rows


def repeatability_section(res: Results) -> str:
    rows = repeatability_rows(res)
    if not rows:
        return ""
    return ("<h2>Repeatability (accel campaign --bitwise)</h2>"
            '<p class="note">Each case ran several times on the same device with the same inputs: '
            "how many gave bit-identical outputs every time, and how many changed verdict (flaky: "
            "those fail).</p>"
            + _table(["platform", "op/dtype", "runs", "cases", "bit-identical", "flaky"], rows,
                     numeric=(2, 3, 4, 5)))


def _defines_of(row: Mapping) -> dict:
    """A kernels-check row's defines; rows written before they carried them have them only in
    their job id, ``source[NAME=VALUE,...]``, as accel kernels check names a shipped variant."""
    if "defines" in row:
        return row["defines"]
    _, _, body = str(row.get("job", "")).partition("[")
    return dict(kv.split("=", 1) for kv in body.rstrip("]").split(",") if "=" in kv)


def compiled_matrix(res: Results) -> tuple[list[str], dict[tuple[str, str], dict[str, dict]]]:
    """(targets, (kernel source, input dtype) -> target -> {"ok", "failed", "regs", "spills"})
    from `accel kernels check` files: kernels built for GPU targets with no GPU to run them."""
    targets: dict[str, None] = {}
    rows: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    for doc in res.kernels:
        for r in doc.get("results", []):
            if r.get("status") not in BUILT:
                continue
            targets[r["target"]] = None
            in_dtype = str(_defines_of(r).get("IN_DT", "-"))
            # a user's own file (accel kernels check FILE: no variant's defines, in the row or
            # in a [..] job id) is named apart from accel's sources, even when it shares a name
            variant = bool(_defines_of(r)) or "[" in str(r.get("job", ""))
            source = r.get("file", "?") + ("" if variant else " (your file)")
            cell = rows[(source, in_dtype)].setdefault(
                r["target"], {"ok": 0, "failed": 0, "regs": 0, "spills": 0})
            cell[r["status"]] += 1
            for k in (r.get("kernels") or {}).values():
                cell["regs"] = max(cell["regs"], k.get("registers") or 0)
                cell["spills"] = max(cell["spills"], k.get("spills") or 0)
    return list(targets), dict(sorted(rows.items()))


def compiled_verdict(cell: Mapping | None) -> tuple[str, str]:
    """(text, css class) of one compiled-table cell: the support matrix's compile verdict, with
    how many variants built and the most registers (and spills) a kernel of them uses."""
    ok, failed = (cell["ok"], cell["failed"]) if cell else (0, 0)
    kind, text = compile_verdict(ok, failed)
    total = ok + failed
    if failed:
        text += f" ({failed}/{total})"
    elif ok:
        spills = f", spills {cell['spills']}" if cell["spills"] else ""
        text += f" ({ok}/{total}, ≤{cell['regs']} regs{spills})"
    return text, kind


def compiled_section(res: Results) -> str:
    targets, rows = compiled_matrix(res)
    if not rows:
        return ""
    body = [[src, dt] + [compiled_verdict(cells.get(t)) for t in targets] for (src, dt), cells in rows.items()]
    return ("<h2>GPU targets built without a GPU (evidence: compiled only)</h2>"
            '<p class="note">From <code>accel kernels check</code>: every shipped kernel variant '
            "(and any file of yours it checked) compiled for each target with NVRTC (sm_*) or hiprtc (gfx*), with the most registers "
            "a kernel uses; compiled is not ran: conformance on a real device is the verdict.</p>"
            + _table(["kernel source", "input dtype"] + targets, body))


def noisy_ratio(case: Mapping) -> bool:
    """Whether either time a case's ratio rests on (accel's, the best baseline's) was noisy."""
    best = [b for b in case.get("baselines", []) if b.get("name") == case.get("best_baseline")]
    return any(is_noisy(x) for x in [case] + best[:1])


def throughput_section(res: Results) -> str:
    body = []
    for doc in res.bench:
        plat = PP.platform_name(doc)
        for c in doc.get("cases", []):
            if c["status"] != "ok":
                body.append([plat, c["op"], c["dtype"], case_label(c), (c["status"], "unsupported"),
                             c.get("reason", ""), "", "", "", "", "", ""])
                continue
            noisy = noisy_ratio(c)
            body.append([plat, c["op"], c["dtype"], case_label(c),
                         (number(c['median_s'] * 1e3) + (" (noisy)" if noisy else ""), "n noisy" if noisy else "n"),
                         f"{number(c['iqr_s'] * 1e3, 2)} / {number(c['min_s'] * 1e3)}",
                         number(c["gflops"]) if c["flops"] else "–", number(c["gbs"]),
                         number(c.get("intensity")), percent(c.get("roofline_efficiency")),
                         ratio_text(c), _baseline_times(c)])
    return ("<h2>Throughput, ratios and efficiencies</h2>"
            '<p class="note">Median of repeated device-timed calls; IQR and min in ms. Ratio = '
            "best baseline's median time / accel's (above 1: accel is faster). Roofline efficiency "
            "= achieved / min(peak compute, intensity × peak bandwidth). (noisy): the IQR of accel's or "
            "the best baseline's samples exceeds a quarter of its median, so a neighbour disturbed the "
            "measurement: re-run before trusting that ratio.</p>"
            + _table(["platform", "op", "dtype", "params", "median ms", "IQR / min ms", "GFLOP/s",
                      "GB/s", "FLOP/byte", "roofline eff.", "vs best baseline", "baselines (ms)"],
                     body, numeric=(6, 7, 8, 9)))


def _baseline_times(case: Mapping) -> str:
    parts = []
    for b in case.get("baselines", []):
        val = number(b["median_s"] * 1e3) if b.get("status") == "ok" else b.get("status", "?")
        parts.append(f"{b['name']} {val}")
    return "; ".join(parts)


#: the short word a PP cell shows for why an efficiency is unknown (the note below the table
#: gives each platform's full reason)
def _short_why(why: str) -> str:
    if why.startswith(PP.NOT_MEASURED):
        return "not measured"
    return "no peak" if why.startswith("no measured peak") else "no baseline"


def _eff_cell(row: PP.Row, plat: str) -> str:
    """'87% / 100%', with the reason in place of an unknown efficiency: '– (no peak) / 19%'."""
    arch, app = row.architectural.get(plat), row.application.get(plat)
    return " / ".join(percent(v) if v is not None else f"– ({_short_why(why.get(plat, ''))})"
                      for v, why in ((arch, row.why_arch), (app, row.why_app)))


def empty_reasons(rows: list[PP.Row]) -> list[str]:
    """Every distinct reason a PP cell of these rows is empty, with its platforms."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        for why in (row.why_arch, row.why_app):
            for plat, text in why.items():
                if plat not in reasons[text]:
                    reasons[text].append(plat)
    return [f"{', '.join(plats)}: {text}" for text, plats in reasons.items()]


def portability_section(res: Results) -> str:
    rows = PP.per_case(res.bench, res.conformance)
    ops = PP.per_op(rows)
    platforms = [PP.platform_name(d) for d in res.bench]
    unbenched = [p for p in dict.fromkeys(PP.platform_name(d) for d in res.conformance) if p not in platforms]
    shared = [r for r in rows if r.everywhere]
    others = [r for r in rows if not r.everywhere]

    def table(rs: list[PP.Row]) -> str:
        body = [[r.problem, number(r.pp_arch), number(r.pp_app)] + [_eff_cell(r, p) for p in platforms]
                for r in rs]
        return _table(["problem", "PP architectural", "PP application"]
                      + [f"{p} (arch / app)" for p in platforms], body, numeric=(1, 2))

    def why(rs: list[PP.Row]) -> str:
        items = "".join(f"<li>{html.escape(r)}</li>" for r in empty_reasons(rs))
        return f'<p class="note">Why a cell is empty (–):</p><ul class="note">{items}</ul>' if items else ""

    if not res.bench:
        return ("<h2>Performance portability (Pennycook)</h2><p class=note>No benchmark result "
                "files were given: run <code>accel bench --json</code> and pass its file.</p>")
    parts = ["<h2>Performance portability (Pennycook)</h2>"
             '<p class="note">PP = harmonic mean over the platforms of the efficiency, 0 when any '
             "platform does not run the problem correctly (unsupported, failed conformance or "
             "invalid result). Architectural: vs the measured roofline; application: vs the best "
             "time observed on that platform. Per op, over the problems measured on every platform "
             "(every profile includes the portability set, so runs of different profiles share it). "
             "See docs/portability.md (arXiv:1611.07409).</p>"
             + (f'<p class="note">PP is over the {len(platforms)} platforms with benchmark files; '
                f"{', '.join(map(html.escape, unbenched))} (conformance results only) "
                "appear in the support matrix, not here.</p>" if unbenched else ""),
             "<h3>Per op</h3>", table(ops), why(ops),
             f"<h3>Per case, measured on every platform ({len(shared)})</h3>", table(shared), why(shared)]
    if others:
        parts += [f"<h3>Per case, measured on some platforms only ({len(others)})</h3>",
                  '<p class="note">Their PP is unknown: a platform did not measure them (not among the '
                  "cases its run chose: profile or --ops); each platform's own efficiencies still show.</p>", table(others), why(others)]
    return "".join(parts)


_NO_PLOTS = ("<h2>Charts</h2><p class=note>Charts left out: matplotlib is not installed here "
             "(<code>pip install 'accel-portable[bench]'</code>); every number is in the tables above.</p>")


def plots_section(res: Results) -> str:
    try:
        _pyplot()
    except ImportError:  # the bench extra is optional: a report without charts, and why
        return _NO_PLOTS
    parts = ["<h2>Rooflines</h2>"]
    for doc in res.bench:
        uri = roofline_plot(doc)
        if uri:
            parts.append(f'<figure><img alt="roofline {html.escape(PP.platform_name(doc))}" src="{uri}">'
                         "<figcaption>Filled: accel; hollow squares: baselines on the same device. "
                         "FLOP-free ops (quantize, dequantize) are in the tables only.</figcaption></figure>")
    for doc in res.bench:
        uri = decode_plot(doc)
        if uri:
            parts.append(f'<h2>Decode: {html.escape(PP.platform_name(doc))}</h2><figure><img alt="decode '
                         f'{html.escape(PP.platform_name(doc))}" src="{uri}"><figcaption>Quantized GEMV '
                         "as LLM decode runs it: GB/s of quantized weight bytes per call (weights "
                         "rotated among copies spanning 4x the last-level cache, so they come from "
                         "memory) against M, the tokens per call. A baseline that streams other "
                         "bytes (torch's float32 weights) is shown at the rate it consumes the "
                         "quantized model.</figcaption></figure>")
    parts.append("<h2>Per op: backends and baselines</h2>")
    ops = dict.fromkeys(c["op"] for d in res.bench for c in d.get("cases", []))
    colors = series_colors(res)
    for op in ops:
        for uri in op_bars(res, op, colors):
            parts.append(f'<figure><img alt="{html.escape(op)} bars" src="{uri}"></figure>')
    return "".join(parts)


def headlines(res: Results) -> list[str]:
    """One line per platform and op: its largest case (most work: the representative size, not a
    launch-bound one) compared with a baseline, taken from the portability set when the file has
    it, so every platform's headline is about the same problem."""
    shared = {c.id for c in portability_cases()}
    out = []
    for doc in res.bench:
        biggest: dict[str, Mapping] = {}
        for c in doc.get("cases", []):
            if c.get("ratio_to_best") is None:
                continue
            prev = biggest.get(c["op"])
            if prev is None or _headline_rank(c, shared) > _headline_rank(prev, shared):
                biggest[c["op"]] = c
        out += [headline(doc, c) for c in biggest.values()]
    return out


def _headline_rank(case: Mapping, shared: set[str]) -> tuple[bool, int, int]:
    return case.get("id") in shared, case["flops"], case["bytes"]


def busy_warnings(res: Results) -> list[str]:
    """A warning per benchmark file measured while its machine was busy or with a peak measured
    too low, and per machine or run that load() found could be confused with another."""
    return ([f"Warning: {PP.platform_name(doc)} was {warning}." for doc in res.bench
             if (warning := busy_warning(doc))]
            + [f"Warning: {PP.platform_name(doc)}: {warning}." for doc in res.bench
               if (warning := peak_warning(doc))]
            + [f"Warning: {w}" for w in res.warnings])


def render_html(res: Results) -> str:
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    summary = "".join(f"<li>{html.escape(h)}</li>" for h in headlines(res))
    warnings = "".join(f'<p class="warn">{html.escape(w)}</p>' for w in busy_warnings(res))
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in res.notes)
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>accel portability report"
            f"</title><style>{_CSS}</style></head><body><h1>accel portability report</h1>"
            f'<p class="note">Generated {now} from {len(res.bench)} benchmark and '
            f"{len(res.conformance)} conformance and {len(res.kernels)} compile-check result files; "
            f"{len(res.platforms)} platforms.</p>{warnings}{notes}"
            f"<h2>Headline ratios</h2><p class=note>Per platform and op, the largest case: accel's speed "
            f"relative to the best baseline on the same device (above 1x: accel is faster).</p><ul>{summary or '<li>no baseline comparisons</li>'}</ul>"
            + support_section(res) + repeatability_section(res) + compiled_section(res) + portability_section(res) + throughput_section(res)
            + decoder_section(res) + model_section(res) + plots_section(res) + machines_section(res) + "</body></html>")


# -- the decoder-step ops: accel beside torch's CPU eager on the same device ---------------------
def decoder_op_rows(res: Results) -> list[list[str]]:
    """Per platform and decoder-step op (accel bench's decoder_ops): accel ms, GB/s, torch ms
    and torch / accel."""
    rows = []
    for d in res.bench:
        for r in d.get("decoder_ops") or []:
            if "error" in r:
                rows.append([PP.platform_name(d), r["op"], "error", "", "", r["error"][:80]])
                continue
            rows.append([PP.platform_name(d), r["op"], number(r["accel_s"] * 1e3),
                         number(r["accel_gbs"]), number(r["torch_s"] * 1e3) if "torch_s" in r else "-",
                         f"{r['ratio']:.2f}" if "ratio" in r else "-"])
    return rows


_DECODER_HEADERS = ["platform", "op", "accel ms", "GB/s", "torch ms", "torch / accel"]


def decoder_section(res: Results) -> str:
    rows = decoder_op_rows(res)
    if not rows:
        return ""
    return ("<h2>Decoder-step ops</h2><p class=note>4096 x 4096 float32 on each platform beside "
            "torch's CPU eager on the same host in the same run (goal on OpenCL: torch / accel at "
            "least 0.8).</p>" + _table(_DECODER_HEADERS, rows))


# -- a real model: its logits against the float64 forward, its speed beside llama.cpp ----------
def _model_docs(res: Results, schema: str) -> list[dict]:
    return [d for d in res.models if d["schema"] == schema]


def model_tables(res: Results) -> list[tuple[list[str], list[list[Any]]]]:
    """(headers, rows) of the model conformance and the model speed tables (those with rows)."""
    out = []
    conf = [[d["model"].rsplit("/", 1)[-1], PP.platform_name(d)]
            + ([f"crashed ({d['crashed']})", "", "", ""] if d.get("crashed") else
               [number(d["logits"]["mean_kl"]), number(d["logits"]["max_kl"]),
                percent(d["logits"]["top1_agreement"]), number(d["logits"]["rms_delta_p"])])
            + ["pass" if d["passed"] else "FAIL"] for d in _model_docs(res, MODEL_CONFORMANCE_SCHEMA)]
    if conf:
        out.append((["model", "platform", "mean KL", "max KL", "top-1", "RMS dp", "verdict"], conf))
    speed = []
    for d in _model_docs(res, MODEL_BENCH_SCHEMA):
        a, ref, ratio = d["accel"], d.get("llama_cpp") or {}, d.get("ratio") or {}
        speed.append([d["model"], PP.platform_name(d), number(a["prompt_tokens_per_s"]),
                      number(a["decode_tokens_per_s"]),
                      number(ref.get("prompt_tokens_per_s")), number(ref.get("decode_tokens_per_s")),
                      f"{number(ratio.get('prompt'))}x / {number(ratio.get('decode'))}x" if ratio
                      else ref.get("reason", "-")])
    if speed:
        out.append((["model", "platform", "prompt tok/s", "decode tok/s", "llama.cpp prompt",
                     "llama.cpp decode", "accel / llama.cpp"], speed))
    return out


def layer_error_plot(res: Results) -> str | None:
    """Per model, the relative error of each layer's hidden state against the float64 forward,
    one line per platform (log scale)."""
    docs = [d for d in _model_docs(res, MODEL_CONFORMANCE_SCHEMA) if d.get("layer_relative_error")]
    if not docs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for d in docs:
        errs = list(d["layer_relative_error"].values())
        ax.plot(range(len(errs)), [max(e, 1e-20) for e in errs], marker="o", markersize=3,
                label=f"{PP.platform_name(d)} ({d['model'].rsplit('/', 1)[-1]})")
    ax.set_yscale("log")
    _style(ax, "Hidden state vs the float64 forward", "layer (0 = embedding)", "relative error")
    ax.legend(fontsize=_TICK_PT)
    fig.tight_layout()
    return _png(fig)


def model_section(res: Results) -> str:
    if not res.models:
        return ""
    parts = ["<h2>Models</h2><p class=note>A real GGUF decoder through accel on each platform: "
             "logits against an independent float64 forward of the same weights (mean KL bound "
             "1e-4, top-1 at least 99%), and tokens/s beside llama.cpp on the same ids in the "
             "same run.</p>"]
    parts += [_table(headers, rows) for headers, rows in model_tables(res)]
    try:
        uri = layer_error_plot(res)
    except ImportError:
        uri = None
    if uri:
        parts.append(f'<figure><img alt="per-layer error" src="{uri}"><figcaption>Relative error '
                     "of the hidden state after each layer, per platform.</figcaption></figure>")
    return "".join(parts)


# -- Markdown --------------------------------------------------------------------------------------
def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(v).replace("|", "/") for v in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(res: Results) -> str:
    out = ["# accel portability summary", ""] + [f"> {w}\n" for w in busy_warnings(res)]
    out += [f"_{n}_\n" for n in res.notes]
    platforms, rows, cells = support_matrix(res)
    if rows:
        out += ["## Support matrix", "", _md_table(["op", "dtype"] + platforms, [
            [op, dt] + [cell_verdict(cells.get((p, op, dt)))[0] for p in platforms] for op, dt in rows]), ""]
    if rep := repeatability_rows(res):
        out += ["## Repeatability (bit-identical outputs over repeated runs)", "",
                _md_table(["platform", "op/dtype", "runs", "cases", "bit-identical", "flaky"],
                          [[str(v) for v in r] for r in rep]), ""]
    targets, compiled = compiled_matrix(res)
    if compiled:
        out += ["## GPU targets built without a GPU (compiled only)", "", _md_table(
            ["kernel source", "input dtype"] + targets,
            [[src, dt] + [compiled_verdict(cells.get(t))[0] for t in targets]
             for (src, dt), cells in compiled.items()]), ""]
    for headers, rows in model_tables(res):
        out += [_md_table(headers, [[str(v) for v in r] for r in rows]), ""]
    if not res.bench:
        out += ["No benchmark result files were given: no performance portability or ratios "
                "(run `accel bench --json` and pass its file).", ""]
        return "\n".join(out)
    ops = PP.per_op(PP.per_case(res.bench, res.conformance))
    out += ["## Performance portability per op", "",
            _md_table(["op", "PP architectural", "PP application"],
                      [[r.problem, number(r.pp_arch), number(r.pp_app)] for r in ops]), ""]
    if reasons := empty_reasons(ops):
        out += [f"- –: {why}" for why in reasons] + [""]
    if dec := decoder_op_rows(res):
        out += ["## Decoder-step ops (4096 x 4096 float32, beside torch's CPU eager)", "",
                _md_table(_DECODER_HEADERS, dec), ""]
    out += ["## Ratios to the best baseline on the same device", ""]
    out += [f"- {headline(d, c)} ({percent(c.get('roofline_efficiency'))} of roofline)"
            + (" (noisy)" if noisy_ratio(c) else "")
            for d in res.bench for c in d.get("cases", []) if c.get("status") == "ok"]
    skipped = [f"- {PP.platform_name(d)} {c['id']}: {c['status']} ({c.get('reason', '')})"
               for d in res.bench for c in d.get("cases", []) if c.get("status") != "ok"]
    if skipped:
        out += ["", "## Not measured", ""] + skipped
    return "\n".join(out) + "\n"


def write(res: Results, out_dir: str | Path) -> tuple[Path, Path]:
    """Write report.html and summary.md into ``out_dir`` (created only once both are rendered,
    so a failure leaves no empty folder behind); returns their paths."""
    if not (res.bench or res.conformance or res.kernels or res.models):
        raise ArgumentError(expected("RESULTS", "at least one accel result file",
                                     "none" + "".join(f"; {n}" for n in res.notes)))
    res.warnings += [w for w in name_machines(res.bench + res.conformance) if w not in res.warnings]
    page, summary = render_html(res), render_markdown(res)
    out = Path(out_dir)
    html_path, md_path = out / "report.html", out / "summary.md"
    try:
        out.mkdir(parents=True, exist_ok=True)
        html_path.write_text(page, encoding="utf-8")
        md_path.write_text(summary, encoding="utf-8")
    except OSError as e:  # -o is checked only for being a folder: say why writing failed
        raise ArgumentError(expected("--out", "a folder the report can be written into",
                                     f"{out}: {e.strerror}")) from None
    return html_path, md_path
