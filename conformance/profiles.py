"""The fixed case lists: the ``quick`` profile (CI, every category at modest sizes, cheap enough
for PoCL) and the ``full`` profile (release checks: the quick cases plus large shapes), from the
op table (each row's ``cases``).

Sizes cover 1, 2, 3, primes (17, 31, 127), powers of two and their neighbours (63, 64, 65),
tall-and-skinny and decode shapes, K up to 16384 and broadcast batches.
"""
from __future__ import annotations

from accel.conformance.case import Case
from accel.conformance.ops import OPS as _ROWS

PROFILES = ("quick", "full")
#: the ops of the suite, in the order runs take them
OPS = tuple(_ROWS)


def op_dtypes(op: str) -> tuple[str, ...]:
    return _ROWS[op].dtypes


def fixed_cases(profile: str, seed: int, ops=None, dtypes=None) -> list[Case]:
    """The profile's fixed cases (everything but the property-based search)."""
    out = []
    for op, row in _ROWS.items():
        if ops and op not in ops:
            continue
        for dtype in row.dtypes:
            if dtypes and dtype not in dtypes:
                continue
            for kind, params in row.cases(dtype, profile):
                out.append(Case(op, dtype, kind, {**params, "seed": seed}))
    return out
