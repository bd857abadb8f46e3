"""Judging a test's result as the conformance suite judges a case: against the float64 oracle,
within the tolerance model's bound, NaN/Inf where the oracle has them."""
import numpy as np

from accel.conformance.compare import compare_values


def assert_within(got, ref: np.ndarray, bound: np.ndarray | None, fmt: str) -> None:
    """``got`` (a host array in format ``fmt``) within the tolerance model's ``bound`` of the
    float64 oracle ``ref``, NaN/Inf where it has them (accel.conformance.compare's verdict)."""
    verdict = compare_values(np.asarray(got), ref, bound, fmt)
    assert verdict.ok, verdict.reason
