"""What every op's row shares: the row itself (:class:`OpInfo`), the dtype and format lists the
cases run over, the data helpers, and the verdict on a floating-point result."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import ml_dtypes
import numpy as np

from accel.backend import Backend
from accel.dtypes import UNIT_ROUNDOFF, to_numpy_dtype
from accel.formats import FORMATS as QFORMATS

from accel.conformance.case import Case
from accel.conformance.compare import Verdict, compare_values

FLOATS = ("float32", "float16", "bfloat16")
FORMATS = ("q8_0", "q4_0")
#: every other format of the table (q8_1 has no public quantize): quantize judged against ggml's
#: own quantizer (ggml_ref)
NEW_FORMATS = tuple(f for f in QFORMATS if f not in FORMATS + ("q8_1",))
WEIGHT_FORMATS = tuple(f for f in NEW_FORMATS if not QFORMATS[f].activation_only)
NEW_BLOCK = {f: QFORMATS[f].block for f in NEW_FORMATS}
_PRECISION_BITS = {"float32": 24, "float16": 11, "bfloat16": 8}

#: (dtype, profile) -> the profile's fixed cases of the op in that dtype, as (kind, params)
Cases = Callable[[str, str], Iterator[tuple[str, dict]]]


@dataclass(frozen=True)
class OpInfo:
    """One op as the conformance suite sees it (PyTorch's OpInfo; ggml's type_traits for ops):
    the profiles, the property search, the runner and the support matrix read this row, and
    nothing else names the op. The op's semantics (validation, shapes, FLOP and byte counts)
    are its spec in ``accel.spec``; the oracle here shares no code with any backend.

    - ``cases(dtype, profile)``: the fixed cases; ``strategy(dtype)``: hypothesis' draws of a
      case's params (None: fixed cases only);
    - ``build(case, rng)``: the spec and the host inputs, in ``Backend.run`` order (None for an
      absent optional operand), ``slots`` long at least;
    - ``judge(backend, case, spec, inputs, got)``: the verdict on an output;
    - ``call(backend, case, inputs)``: the public op on the inputs (a declined case must raise
      UnsupportedError through it);
    - ``unjudged(backend, spec)``: why a case cannot be judged on that backend here, or None;
    - ``run_public(backend, case)``: for the ops without a spec yet (accel.nn's), the whole case
      through the public op: ``(ok, stats, reason)``; such rows have no build/judge/call;
    - ``bench_spec(dtype, params)``, ``bench_inputs(spec, rng, seed)``: a benchmark case's spec
      from its sizes (M, N, K, ...) and seeded random operands (accel bench, accel tune).
    """

    name: str
    dtypes: tuple[str, ...]
    cases: Cases
    strategy: Callable[[str], Any] | None = None
    build: Callable[[Case, np.random.Generator], tuple[Any, list]] | None = None
    judge: Callable[..., Verdict] | None = None
    call: Callable[[Backend, Case, list], Any] | None = None
    slots: int = 0
    unjudged: Callable[[Backend, Any], str | None] | None = None
    run_public: Callable[[Backend, Case], tuple[bool, dict, str]] | None = None
    bench_spec: Callable[[str, dict], Any] | None = None
    bench_inputs: Callable[[Any, np.random.Generator, int], list] | None = None


def subnormal(dtype: str) -> float:
    """A value well inside the subnormal range of ``dtype``."""
    info = ml_dtypes.finfo(to_numpy_dtype(dtype))
    return float(info.smallest_normal) / 8

def exact_int_range(out_dtype: str, K: int) -> int:
    """Largest r such that every partial sum of K products of integers in [-r, r] is an exact
    integer in the output format and in any accumulator at least as precise as float16."""
    limit = 2 ** min(_PRECISION_BITS[out_dtype], 11)
    return max(1, math.isqrt(limit // K))

def place(x: np.ndarray, rng: np.random.Generator, values: list[float]) -> None:
    """Write ``values`` at distinct random positions of x (in place)."""
    flat = x.reshape(-1)
    for pos, value in zip(rng.choice(flat.size, size=min(len(values), flat.size), replace=False),
                          values):
        flat[pos] = value


def normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal values drawn in float32, in ``dtype`` (a benchmark's operands)."""
    return rng.standard_normal(shape, np.float32).astype(to_numpy_dtype(dtype))


def float_verdict(backend: Backend, case: Case, spec: Any, got: np.ndarray,
                  reference: Callable[[str, bool], tuple[np.ndarray, np.ndarray | None]]) -> Verdict:
    """The verdict on a floating-point output: ``reference(acc, exact)`` gives the float64 answer
    and its bound (None: exact) for the accumulator the backend declares; an ``exact`` case's
    answer is rounded once to the output format (to nearest, ties to even) before comparing."""
    acc = backend.accumulator(spec)
    if acc not in UNIT_ROUNDOFF:
        return Verdict(False, {}, f"accumulator({spec.op}) declared {acc!r}, not a float format "
                       f"the tolerance model knows ({sorted(UNIT_ROUNDOFF)})")
    exact = case.kind == "exact"
    ref, bound = reference(acc, exact)
    if exact:  # exact sums (float32 accumulation), then the one rounding of the output
        # conversion, to nearest with ties to even: exact-answer data may need it
        ref = ref.astype(to_numpy_dtype(spec.out_dtype)).astype(np.float64)
    verdict = compare_values(got, ref, bound, spec.out_dtype)
    verdict.stats["accumulator"] = acc
    return verdict
