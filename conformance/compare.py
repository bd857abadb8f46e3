"""Judging one output against the oracle: the statistics every case records, and the verdict.

Float results pass when every element is within its bound and NaN/Inf agree: a NaN exactly where
the oracle has one, an infinity of the oracle's sign where the true value overflows the output
format (either a finite value or the infinity when it lies within the bound of the overflow
threshold). Exact results (integers, quantized bytes, exact-answer cases) pass on equality only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from accel.conformance.tolerance import FINFO
from accel.conformance.tolerance import overflow_threshold


@dataclass
class Verdict:
    ok: bool
    stats: dict = field(default_factory=dict)
    reason: str = ""


def ulp(values: np.ndarray, fmt: str) -> np.ndarray:
    """The spacing of format ``fmt`` at each |value| (1 for integer formats)."""
    if fmt not in FINFO:
        return np.ones_like(values, dtype=np.float64)
    info = FINFO[fmt]
    mag = np.abs(values.astype(np.float64))
    _, exp = np.frexp(np.where(np.isfinite(mag), mag, 0.0))
    exp = np.where(mag == 0, int(info.minexp) + 1, exp)
    return np.ldexp(1.0, np.maximum(exp - 1, int(info.minexp)) - int(info.nmant))


def _where(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def compare_values(out: np.ndarray, ref: np.ndarray, bound: np.ndarray | None,
                   fmt: str, *, signed_zero: bool = False) -> Verdict:
    """Compare a backend's output with the oracle. ``bound=None`` demands exact equality;
    ``signed_zero`` that a zero carry the oracle's sign too (dequantize: exactly code x d, so a
    zero code under a negative scale is -0.0)."""
    got = out.astype(np.float64)
    ref = ref.astype(np.float64)
    exact = bound is None
    bound = np.zeros_like(ref) if exact else np.broadcast_to(bound, ref.shape)
    ref_nan, got_nan = np.isnan(ref), np.isnan(got)
    with np.errstate(invalid="ignore", over="ignore"):
        if fmt in FINFO:
            threshold = overflow_threshold(fmt)
            must_inf = np.isinf(ref) | (np.abs(ref) - bound >= threshold)
            may_inf = must_inf | (np.abs(ref) + bound >= threshold)
        else:
            must_inf = may_inf = np.zeros(ref.shape, dtype=bool)
        same_sign = np.sign(got) == np.sign(ref)
        problems = [
            (got_nan & ~ref_nan, "NaN where the oracle has none"),
            (ref_nan & ~got_nan, "a number where the oracle has NaN"),
            (must_inf & ~ref_nan & ~(np.isinf(got) & same_sign), "no infinity of the right sign "
             "where the result overflows"),
            (np.isinf(got) & ~ref_nan & ~(may_inf & same_sign), "an infinity where the result "
             "is finite"),
        ]
        comparable = np.isfinite(ref) & ~must_inf & np.isfinite(got)
        err = np.where(comparable, np.abs(got - ref), 0.0)
        over = comparable & (err > bound)
        ratio = np.where(comparable & (bound > 0), err / np.where(bound > 0, bound, 1.0), 0.0)
        ulps = np.where(comparable, err / ulp(ref, fmt), 0.0)
        ref_energy = float(np.sum(np.where(comparable, ref, 0.0) ** 2))
        err_energy = float(np.sum(err ** 2))
        wrong_zero = (got == 0) & (ref == 0) & (np.signbit(got) != np.signbit(ref)) if signed_zero \
            else np.zeros(ref.shape, dtype=bool)
    nan_inf_ok = not any(mask.any() for mask, _ in problems)
    nmse = err_energy / ref_energy if ref_energy > 0 else (0.0 if err_energy == 0 else float("inf"))
    stats = {
        "max_abs_err": float(err.max(initial=0.0)),
        "err_over_bound": None if exact else float(ratio.max(initial=0.0)),
        "nmse": nmse,
        "max_ulp": float(ulps.max(initial=0.0)),
        "nan_inf_ok": nan_inf_ok,
        "mismatches": int(over.sum() + wrong_zero.sum() + sum(int(m.sum()) for m, _ in problems)),
        "elements": int(ref.size),
        "exact": exact,
    }
    for mask, what in problems + [(wrong_zero, "a zero of the wrong sign")]:
        if mask.any():
            at = _where(mask)
            return Verdict(False, stats, f"{int(mask.sum())} element(s) with {what}; first at "
                           f"{at}: got {float(got[at])!r}, oracle {float(ref[at])!r}")
    if over.any():
        at = np.unravel_index(np.argmax(np.where(over, err - bound, -1.0)), ref.shape)
        at = tuple(int(i) for i in at)
        rule = "exactly" if exact else f"within {bound[at]:.3g}"
        return Verdict(False, stats, f"{int(over.sum())} of {ref.size} element(s) off; worst at "
                       f"{at}: got {float(got[at])!r}, oracle {float(ref[at])!r}, required {rule}")
    return Verdict(True, stats)


def compare_bytes(out: np.ndarray, ref: np.ndarray, block_bytes: int,
                  special_scale: np.ndarray) -> Verdict:
    """Bit-exact comparison of quantized blocks; ``special_scale`` marks the reference blocks
    whose scale is NaN or infinite (each format keeps its scale elsewhere: the caller decodes)."""
    got, want = out.reshape(-1, block_bytes), ref.reshape(-1, block_bytes)
    bad = (got != want).any(axis=1)
    stats = {"mismatched_blocks": int(bad.sum()), "blocks": int(len(want)),
             "mismatched_bytes": int((got != want).sum()), "exact": True,
             "nan_inf_ok": bool(not (bad & special_scale).any())}
    if not bad.any():
        return Verdict(True, stats)
    i = int(np.argmax(bad))
    return Verdict(False, stats, f"{int(bad.sum())} of {len(want)} block(s) differ; first is block "
                   f"{i}: got {got[i].tobytes().hex()}, reference {want[i].tobytes().hex()}")
