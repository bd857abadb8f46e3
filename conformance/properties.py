"""Property-based cases: hypothesis draws case parameters (shapes, broadcasting, masks, data
generators, data seeds), runs them, and on a failure shrinks to the smallest failing case.

The search is seeded with the run's ``--seed`` and uses no example database, so a run is
reproducible; the failing case's id (printed with ``accel conformance --case ID``) rebuilds the
exact inputs without searching again.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from accel.backend import Backend
from accel.formats import get_format

from accel.conformance.case import Case
from accel.conformance.runner import CaseResult, run_case

#: examples per (op, dtype) in each profile
EXAMPLES = {"quick": 10, "full": 100}

_seeds = st.integers(0, 2**31 - 1)
#: (D, Dv) pairs drawn: those of the fixed grid. Head sizes are compile-time constants of most
#: attention kernels (each new pair is a new build, ~10 s on PoCL), while the search's value is in
#: the shapes around them: batch, GQA ratio, Sq vs Sk, causal, masks and their broadcasting.
HEAD_DIMS = [(32, 32), (64, 64), (128, 128), (64, 32), (80, 128)]
#: the (D, Dv) of the masked grid cases, used by every masked draw for the same reason
MASKED_HEAD_DIMS = (32, 32)


@st.composite
def _matmul(draw, dtype: str) -> dict:
    M, K, N = (draw(st.integers(1, 40)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_batch = [d if draw(st.booleans()) else 1 for d in batch]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))):]
    data = "ints" if dtype == "int8" else draw(st.sampled_from(["normal", "positive", "cancel"]))
    return {"a": tuple(a_batch) + (M, K), "b": tuple(b_batch) + (K, N), "data": data,
            "seed": draw(_seeds)}


@st.composite
def _attention(draw, dtype: str) -> dict:
    B, Hkv = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    Hq = Hkv * draw(st.sampled_from([1, 2, 4]))
    Sq, Sk = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    mask = draw(st.sampled_from([None, "bool", "additive"]))
    D, Dv = draw(st.sampled_from(HEAD_DIMS)) if mask is None else MASKED_HEAD_DIMS
    params = {"q": (B, Hq, Sq, D), "k": (B, Hkv, Sk, D), "v": (B, Hkv, Sk, Dv),
              "causal": draw(st.booleans())}
    if mask:
        shape = draw(st.sampled_from([(Sq, Sk), (B, 1, Sq, Sk), (1, Hq, Sq, Sk), (Sk,)]))
        params.update(mask=mask, mask_shape=shape,
                      mask_data=draw(st.sampled_from(["random", "dead_rows"])))
    if draw(st.booleans()):
        params["scale"] = draw(st.sampled_from([0.05, 0.5, 2.0]))
    # issue 42's options: window and softcap are kernel arguments (no new build); sinks are a
    # variant of their own, so drawn only at the masked cases' head dims
    if params["causal"] and draw(st.booleans()):
        params["window"] = draw(st.integers(1, 30))
    if draw(st.booleans()):
        params["softcap"] = draw(st.sampled_from([0.5, 5.0, 50.0]))
    if (D, Dv) == MASKED_HEAD_DIMS and draw(st.booleans()):
        params["sinks"] = draw(st.sampled_from(["normal", "above", "below", "mixed"]))
    params.update(data="normal", seed=draw(_seeds))
    return params


@st.composite
def _quantize(draw, dtype: str) -> dict:
    rows, blocks = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    data = draw(st.sampled_from(["normal", "ties", "zeros", "signs", "nonfinite", "subnormal"]))
    return {"shape": (rows, 32 * blocks), "fmt": draw(st.sampled_from(["q8_0", "q4_0"])),
            "data": data, "seed": draw(_seeds)}


@st.composite
def _dequantize(draw, dtype: str) -> dict:
    rows, blocks = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return {"shape": (rows, get_format(dtype).block * blocks),
            "data": draw(st.sampled_from(["random", "special_d"])),
            "seed": draw(_seeds)}


@st.composite
def _qmatmul(draw, dtype: str) -> dict:
    x = tuple(draw(st.lists(st.integers(1, 4), max_size=2))) + (32 * draw(st.integers(1, 4)),)
    case = {"x": x, "N": draw(st.integers(1, 24)), "fmt": draw(st.sampled_from(["q8_0", "q4_0"])),
            "data": "normal", "seed": draw(_seeds)}
    if draw(st.booleans()):
        case["x_fmt"] = "q8_0"
    return case


@st.composite
def _scaled_matmul(draw, dtype: str) -> dict:
    scaling = draw(st.sampled_from(["tensor", "row", "block"]))
    M, N = draw(st.integers(1, 40)), draw(st.integers(1, 300))
    K = 128 * draw(st.integers(1, 3)) if scaling == "block" else draw(st.integers(1, 300))
    b_dtype = draw(st.sampled_from({"float8_e4m3fn": ["float8_e4m3fn", "float8_e5m2"],
                                    "float8_e5m2": ["float8_e4m3fn"]}.get(dtype, [dtype])))
    case = {"a": (M, K), "b": (K, N), "b_dtype": b_dtype, "scaling": scaling,
            "out": draw(st.sampled_from(["bfloat16", "float16", "float32"])), "data": "normal",
            "seed": draw(_seeds)}
    if draw(st.booleans()):
        case["bias"] = "float32"
    return case


@st.composite
def _norm(draw, dtype: str) -> dict:
    lead = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    return {"shape": lead + (draw(st.integers(1, 700)),), "weight": draw(st.booleans()),
            "data": draw(st.sampled_from(["normal", "zeros", "large"]))}


@st.composite
def _rope(draw, dtype: str) -> dict:
    D = 2 * draw(st.integers(1, 80))
    return {"shape": (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 6)), D),
            "rotary_dim": 2 * draw(st.integers(1, D // 2)), "interleaved": draw(st.booleans()),
            "pos": draw(st.integers(0, 2**17)), "data": "normal"}


@st.composite
def _softmax(draw, dtype: str) -> dict:
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
    return {"shape": lead + (draw(st.integers(1, 3000)),), "scale": draw(st.sampled_from([1.0, 0.125, 4.0])),
            "mask": draw(st.sampled_from(["off", "bool", "additive"])), "data": "normal"}


@st.composite
def _glu(draw, dtype: str) -> dict:
    return {"shape": (draw(st.integers(1, 5)), draw(st.integers(1, 300))),
            "activation": draw(st.sampled_from(["silu", "gelu_tanh", "gelu"])),
            "split": draw(st.booleans()), "data": draw(st.sampled_from(["normal", "large"]))}


@st.composite
def _binary(draw, dtype: str) -> dict:
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    other = tuple(d if draw(st.booleans()) else 1 for d in shape)[draw(st.integers(0, len(shape) - 1)):]
    a, b = (shape, other) if draw(st.booleans()) else (other, shape)
    return {"a": a, "b": b, "data": draw(st.sampled_from(["normal", "large"]))}


STRATEGIES = {"matmul": _matmul, "attention": _attention, "quantize": _quantize,
              "dequantize": _dequantize, "qmatmul": _qmatmul, "scaled_matmul": _scaled_matmul,
              # the decoder-step ops (decoder_ops.py), get_rows by its fixed cases only
              "rms_norm": _norm, "layer_norm": _norm, "rope": _rope, "softmax": _softmax,
              "glu": _glu, "add": _binary, "mul": _binary}


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
    @given(STRATEGIES[op](dtype))
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
