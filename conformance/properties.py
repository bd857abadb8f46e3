"""Property-based cases: hypothesis draws case parameters (shapes, broadcasting, masks, data
generators, data seeds: each op row's ``strategy``), runs them, and on a failure shrinks to the
smallest failing case.

The search is seeded with the run's ``--seed`` and uses no example database, so a run is
reproducible; the failing case's id (printed with ``accel conformance --case ID``) rebuilds the
exact inputs without searching again.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator

from hypothesis import HealthCheck, Phase, given, seed, settings

from accel.backend import Backend

from accel.conformance.case import Case
from accel.conformance.ops import OPS
from accel.conformance.runner import CaseResult, run_case

#: examples per (op, dtype) in each profile
EXAMPLES = {"quick": 10, "full": 100}


@contextlib.contextmanager
def _storage_under_cache_root() -> Iterator[None]:
    """hypothesis keeps files under ./.hypothesis unless told otherwise (it reads the variable when
    it touches its storage): during a search it is told accel's cache root, so a conformance run
    (the command, the pytest plugin, a campaign) writes nothing in the user's folder; a value
    the user set wins; the variable is put back."""
    from accel.host import cache_root

    before = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache_root() / "hypothesis"))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)


def search(backend: Backend, op: str, dtype: str, examples: int, run_seed: int,
           on_result: Callable[[CaseResult], None]) -> None:
    """Run ``examples`` drawn cases (one drawn twice runs and is reported once); report each one
    run before the first failure, then only the shrunk failing case (hypothesis replays it
    last)."""
    found: dict[str, CaseResult] = {}  # by id: hypothesis may draw one case more than once
    failing: list[CaseResult] = []

    @seed(run_seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink],
              report_multiple_bugs=False, print_blob=False)
    @given(OPS[op].strategy(dtype))
    def prop(params: dict) -> None:
        case = Case(op, dtype, "property", params)
        result = found.get(case.id) or run_case(backend, case)
        if result.ok and not failing:
            found[case.id] = result
        if not result.ok:
            failing[:] = [result]
            raise AssertionError(result.reason)

    try:
        with _storage_under_cache_root():
            prop()
    except Exception:  # the failure itself (or hypothesis' report of it) is in ``failing``
        if not failing:
            raise
    for result in [*found.values(), *failing]:
        on_result(result)
