"""A whole conformance run: the profile's fixed cases, then the property-based search, on one
backend, reporting each result as it comes (for progress bars and pytest)."""
from __future__ import annotations

from typing import Callable, Iterable

from accel.backend import Backend
from accel.errors import ArgumentError, expected

from accel.conformance import profiles, properties
from accel.conformance.case import Case
from accel.conformance.ops import OPS
from accel.conformance.runner import CaseResult, run_case


def property_targets(ops: Iterable[str] | None,
                     dtypes: Iterable[str] | None) -> list[tuple[str, str]]:
    """(op, dtype) pairs the property search covers, after the --ops/--dtypes filters."""
    ops, dtypes = set(ops or profiles.OPS), set(dtypes or ())
    return [(op, dt) for op in profiles.OPS if op in ops and OPS[op].strategy is not None
            for dt in profiles.op_dtypes(op) if not dtypes or dt in dtypes]


def planned(profile: str, seed: int, ops=None, dtypes=None, *,
            flag: str = "--") -> tuple[list[Case], list[tuple[str, str]]]:
    """The fixed cases and the (op, dtype) pairs of the property search for a run; errors name
    the options as ``flag`` spells them ("--" on the CLI, "--accel-" under pytest)."""
    if profile not in profiles.PROFILES:
        raise ArgumentError(expected(f"{flag}profile", f"one of {profiles.PROFILES}", repr(profile)))
    known_dtypes = sorted({dt for op in profiles.OPS for dt in profiles.op_dtypes(op)})
    for arg, given, known in (("ops", ops, profiles.OPS), ("dtypes", dtypes, known_dtypes)):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            raise ArgumentError(expected(f"{flag}{arg}", f"names from {list(known)}", unknown))
    cases, targets = profiles.fixed_cases(profile, seed, ops, dtypes), property_targets(ops, dtypes)
    if not cases and not targets:  # a run of nothing would report "0 passed", read as a pass
        has = "; ".join(f"{op}: {', '.join(profiles.op_dtypes(op))}" for op in ops or profiles.OPS)
        given = " ".join(f"{flag}{arg} {','.join(v)}" for arg, v in (("ops", ops), ("dtypes", dtypes)) if v)
        raise ArgumentError(expected(f"{flag}ops/{flag}dtypes", "a selection matching at least one "
                                     f"case (dtypes per op: {has})", f"{given}, which matches none"))
    return cases, targets


def run(backend: Backend, *, profile: str = "quick", seed: int = 0, ops=None, dtypes=None,
        on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Every case of ``profile`` on ``backend``; ``on_result`` sees each result as it is made.

    >>> import accel
    >>> from accel.conformance import suite
    >>> results = suite.run(accel.get_backend("cpu"), ops=["dequantize"], dtypes=["q8_0"])
    >>> sorted({r.status for r in results})
    ['passed']
    """
    results: list[CaseResult] = []

    def record(result: CaseResult) -> None:
        results.append(result)
        if on_result:
            on_result(result)

    cases, targets = planned(profile, seed, ops, dtypes)
    for case in cases:
        record(run_case(backend, case))
    for op, dtype in targets:
        properties.search(backend, op, dtype, properties.EXAMPLES[profile], seed, record)
    return results
