"""Pennycook's performance portability (arXiv:1611.07409) over the platforms measured.

For a problem p and a set of platforms H, PP = |H| / sum over i in H of 1 / e_i(p), the harmonic
mean of the efficiencies, and 0 when any platform in H does not run p correctly. accel reports it
with two efficiencies (docs/portability.md):

- architectural: the roofline efficiency, achieved / min(peak compute, intensity x peak bandwidth)
  with the peaks measured on that device (accel.conformance.bench.peaks);
- application: the best time observed on that platform (accel or any baseline) over accel's time.

A platform is one backend device on one machine ("laptop/opencl:0"). A problem is one benchmark
case (op, dtype, sizes); per op, the problems are all of that op's cases.

>>> performance_portability({"a": 0.5, "b": 0.25})
0.3333333333333333
>>> performance_portability({"a": 0.5, "b": 0.0})
0.0
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from accel.errors import ArgumentError, expected

#: result statuses meaning the platform does not run the case correctly (efficiency 0)
_NOT_RUN = ("unsupported", "error", "invalid")


def performance_portability(efficiencies: Mapping[str, float | None]) -> float | None:
    """Harmonic mean of the efficiencies; 0 if any is 0 (unsupported); None if any is unknown."""
    if not efficiencies:
        raise ArgumentError(expected("efficiencies", "at least one platform", "none"))
    values = list(efficiencies.values())
    if any(e is None for e in values):
        return None
    for e in values:
        if not 0 <= e < float("inf"):
            raise ArgumentError(expected("efficiencies", "finite values >= 0", e))
    if any(e == 0 for e in values):
        return 0.0
    return len(values) / sum(1.0 / e for e in values)


def platform_name(doc: Mapping) -> str:
    """'machine/backend' for an accel.conformance.bench.suite or accel.conformance result file."""
    machine = doc.get("machine") or {}
    return f"{machine.get('label') or machine.get('hostname') or 'unknown'}/{doc.get('backend', '?')}"


def application_efficiency(case: Mapping) -> float | None:
    """Best observed time on the platform (accel or a baseline) over accel's; None without a
    correct baseline to compare with."""
    times = [b["median_s"] for b in case.get("baselines", []) if b.get("status") == "ok"]
    if case.get("status") != "ok" or not times:
        return None
    return min(min(times), case["median_s"]) / case["median_s"]


@dataclass
class Row:
    """Performance portability of one problem (a case id, or an op) across platforms; ``why``
    says, per platform, why an efficiency is unknown (None), so the report can say it."""

    problem: str
    architectural: dict[str, float | None] = field(default_factory=dict)
    application: dict[str, float | None] = field(default_factory=dict)
    why_arch: dict[str, str] = field(default_factory=dict)
    why_app: dict[str, str] = field(default_factory=dict)

    @property
    def pp_arch(self) -> float | None:
        return performance_portability(self.architectural) if self.architectural else None

    @property
    def pp_app(self) -> float | None:
        return performance_portability(self.application) if self.application else None

    @property
    def everywhere(self) -> bool:
        """Whether every platform measured this problem (it is in the shared set)."""
        return not any(why.startswith(NOT_MEASURED) for why in self.why_arch.values())


#: why an efficiency is unknown: the case is not in that platform's file
NOT_MEASURED = "not measured"


def failed_in_conformance(conformance_docs: Iterable[Mapping]) -> set[tuple[str, str, str]]:
    """(platform, op, dtype) cells where the conformance suite failed a case: speed measured
    there does not count (Pennycook: the platform does not solve the problem correctly)."""
    bad = set()
    for doc in conformance_docs:
        for case in doc.get("cases", []):
            if case.get("status") in ("failed", "error"):
                bad.add((platform_name(doc), case.get("op"), case.get("dtype")))
    return bad


def _dtypes(case: Mapping) -> tuple[str, ...]:
    """The names conformance may file this case under: its dtype, and its quantization format
    (conformance files dequantize by format, bench by the uint8 input)."""
    fmt = (case.get("params") or {}).get("fmt")
    return (case["dtype"], fmt) if fmt else (case["dtype"],)


def _no_peak(doc: Mapping) -> str:
    return "no measured peak" + (f" ({doc['peaks_error']})" if doc.get("peaks_error") else "")


def selection(doc: Mapping) -> str:
    """What a bench file measured: its profile, and the op filter when --ops narrowed it.

    >>> selection({"profile": "quick", "ops": ["dequantize"]}), selection({"profile": "decode"})
    ('quick (ops dequantize)', 'decode')
    """
    ops = doc.get("ops")
    return str(doc.get("profile", "?")) + (f" (ops {', '.join(ops)})" if ops else "")


def per_case(bench_docs: list[Mapping], conformance_docs: Iterable[Mapping] = ()) -> list[Row]:
    """One row per case id measured anywhere, over every platform in ``bench_docs``."""
    bad = failed_in_conformance(conformance_docs)
    rows: dict[str, Row] = {}
    for doc in bench_docs:
        for case in doc.get("cases", []):
            rows.setdefault(case["id"], Row(case["id"]))
    for doc in bench_docs:
        plat = platform_name(doc)
        by_id = {c["id"]: c for c in doc.get("cases", [])}
        for cid, row in rows.items():
            case = by_id.get(cid)
            if case is None:  # not measured there (another profile): unknown, not unsupported
                row.architectural[plat] = row.application[plat] = None
                row.why_arch[plat] = row.why_app[plat] = \
                    f"{NOT_MEASURED} there (not among the cases its benchmark run chose: " \
                    f"{selection(doc)})"
            elif case["status"] in _NOT_RUN or any((plat, case["op"], d) in bad for d in _dtypes(case)):
                row.architectural[plat] = row.application[plat] = 0.0
            else:
                row.architectural[plat] = case.get("roofline_efficiency")
                row.application[plat] = application_efficiency(case)
                if row.architectural[plat] is None:
                    row.why_arch[plat] = _no_peak(doc)
                if row.application[plat] is None:
                    row.why_app[plat] = "no correct baseline ran beside it"
    return list(rows.values())


def per_op(rows: list[Row]) -> list[Row]:
    """Per op: each platform's efficiency is the harmonic mean over that op's cases measured on
    every platform (the shared problems: a case only some platforms ran would make the op
    unknown everywhere), then PP across platforms (equal to the harmonic mean over every shared
    case on every platform)."""
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row.problem.split(" ", 1)[0], []).append(row)
    return [_merged(op, group) for op, group in grouped.items()]


def _merged(op: str, group: list[Row]) -> Row:
    merged = Row(op)
    shared = [r for r in group if r.everywhere]
    for plat in group[0].architectural:
        if not shared:
            merged.architectural[plat] = merged.application[plat] = None
            merged.why_arch[plat] = merged.why_app[plat] = \
                f"{NOT_MEASURED}: no {op} case was measured on every platform"
            continue
        for kind, why in (("architectural", "why_arch"), ("application", "why_app")):
            values = {r.problem: getattr(r, kind).get(plat) for r in shared}
            getattr(merged, kind)[plat] = performance_portability(values)
            reasons = [getattr(r, why)[plat] for r in shared if plat in getattr(r, why)]
            if reasons:
                getattr(merged, why)[plat] = reasons[0]
    return merged
