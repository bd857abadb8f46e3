"""matmul's row: ``a[..., M, K] @ b[..., K, N]`` in the float formats and int8 (exact int32)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

import accel
from accel import spec as S
from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, expected

from accel.conformance import oracle, tolerance
from accel.conformance.case import Case
from accel.conformance.compare import compare_values
from accel.conformance.ops.common import FLOATS, OpInfo, exact_int_range, float_verdict, normal, place, subnormal

# (a shape, b shape): sizes 1/2/3, primes, 63/64/65, tall-skinny, decode GEMV, long K, broadcasts
_MATMUL_QUICK = [
    ((1, 1), (1, 1)), ((2, 2), (2, 2)), ((3, 2), (2, 3)), ((17, 31), (31, 127)),
    ((63, 64), (64, 65)), ((257, 8), (8, 1)), ((1, 128), (128, 63)), ((2, 16384), (16384, 3)),
    ((2, 1, 5, 7), (3, 7, 4)), ((3, 5, 8), (8, 6)), ((4, 3), (2, 3, 5)),
]

_MATMUL_FULL = [
    ((127, 127), (127, 127)), ((128, 128), (128, 128)), ((129, 255), (255, 257)),
    ((512, 512), (512, 512)), ((64, 16384), (16384, 64)), ((4096, 64), (64, 2)),
    ((4, 1, 65, 63), (1, 3, 63, 64)),
]

def _matmul_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    shapes = _MATMUL_QUICK + (_MATMUL_FULL if profile == "full" else [])
    if dtype == "int8":
        for a, b in shapes:
            yield "exact", {"a": a, "b": b, "data": "ints"}
        yield "special", {"a": (3, 16384), "b": (16384, 2), "data": "extreme"}
        return
    for a, b in shapes:
        yield "grid", {"a": a, "b": b, "data": "normal"}
    other = "float32" if dtype != "float32" else "float16"
    yield "grid", {"a": (9, 40), "b": (40, 11), "out": other, "data": "normal"}
    yield "grid", {"a": (4, 4096), "b": (4096, 5), "data": "positive"}
    yield "special", {"a": (8, 512), "b": (512, 8), "data": "cancel"}
    yield "exact", {"a": (16, 64), "b": (64, 16), "data": "ints"}
    yield "exact", {"a": (2, 3, 5), "b": (5, 4), "data": "ints"}
    yield "exact", {"a": (5, 256), "b": (256, 3), "data": "ints"}
    for out in (None, "bfloat16", "float16") if dtype == "float32" else (None,):
        yield "exact", {"a": (16, 8), "b": (8, 24), **({"out": out} if out else {}), "data": "rounding"}
    if dtype == "float32":  # a multi-tile output of 327,680 elements, compared one by one: a
        # defect that corrupts one element in tens of thousands (a tail-tile race) shows here
        yield "grid", {"a": (512, 64), "b": (64, 640), "data": "normal"}
    for data in ("nan", "inf", "negzero", "subnormal"):
        yield "special", {"a": (6, 10), "b": (10, 7), "data": data}
    if dtype == "float16":  # float16 overflow to Inf (float32 and bfloat16 share float32's range)
        yield "special", {"a": (3, 4), "b": (4, 5), "data": "overflow"}
        yield "special", {"a": (3, 4), "b": (4, 5), "out": "float32", "data": "overflow"}

def _matmul(case: Case, rng: np.random.Generator):
    p = case.params
    spec = S.matmul_spec(p["a"], case.dtype, p["b"], case.dtype, p.get("out"))
    a_shape, b_shape, data = p["a"], p["b"], p["data"]
    if case.dtype == "int8":
        if data == "extreme":  # every product at +2**14: the largest partial sums int32 must hold
            a, b = np.full(a_shape, -128), np.full(b_shape, -128)
        else:
            a, b = rng.integers(-128, 128, a_shape), rng.integers(-128, 128, b_shape)
    else:
        a, b = _matmul_floats(data, a_shape, b_shape, spec, rng)
    dt = to_numpy_dtype(case.dtype)
    with np.errstate(over="ignore"):
        return spec, [a.astype(dt), b.astype(dt)]

def _matmul_floats(data: str, a_shape, b_shape, spec: S.MatmulSpec, rng):
    K = spec.K
    if data == "normal":
        return rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    if data == "positive":  # all terms add up: the worst case for accumulated rounding
        return rng.uniform(0, 1, a_shape), rng.uniform(0, 1, b_shape)
    if data == "ints":
        r = exact_int_range(spec.out_dtype, K)
        return rng.integers(-r, r + 1, a_shape), rng.integers(-r, r + 1, b_shape)
    if data == "rounding":  # exact float32 sums with more bits than the output format holds:
        # the one rounding to the output dtype decides the answer (to nearest, ties to even), so a
        # truncating or ties-away conversion fails; |a| <= 15, b = odd / 256 (8 significant bits),
        # K <= 16: every partial sum has at most 16 significant bits
        return (rng.integers(-15, 16, a_shape),
                (2 * rng.integers(-127, 128, b_shape) + 1) / 256)
    if data == "cancel":  # second half of K negates the first: |C| << |A||B|
        a, b = rng.standard_normal(a_shape) * 1e3, rng.standard_normal(b_shape)
        h = K // 2
        a[..., h:2 * h] = -a[..., :h] + rng.standard_normal(a[..., :h].shape)
        b[..., h:2 * h, :] = b[..., :h, :]
        return a, b
    if data == "nan":
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        place(a, rng, [np.nan])
        place(b, rng, [np.nan])
        return a, b
    if data == "inf":  # +-Inf times numbers, and Inf times zero (NaN)
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        place(a, rng, [np.inf, -np.inf])
        place(b, rng, [0.0, 0.0, np.inf])
        return a, b
    if data == "negzero":
        a = np.where(rng.random(a_shape) < 0.5, -0.0, 0.0)
        return a, rng.standard_normal(b_shape)
    if data == "subnormal":  # subnormal inputs of the case's dtype next to normal ones
        tiny = subnormal(spec.dtype)
        a = rng.integers(1, 8, a_shape) * tiny * np.where(rng.random(a_shape) < 0.5, -1, 1)
        return a, rng.standard_normal(b_shape)
    if data == "overflow":  # finite inputs whose products sum past the output format's range
        return rng.uniform(200, 250, a_shape), rng.uniform(200, 250, b_shape)
    raise ArgumentError(expected("data", "a matmul data generator", repr(data)))

def _strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
        M, K, N = (draw(st.integers(1, 40)) for _ in range(3))
        batch = draw(st.lists(st.integers(1, 3), max_size=2))
        a_batch = [d if draw(st.booleans()) else 1 for d in batch]
        b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))):]
        data = "ints" if dtype == "int8" else draw(st.sampled_from(["normal", "positive", "cancel"]))
        return {"a": tuple(a_batch) + (M, K), "b": tuple(b_batch) + (K, N), "data": data,
                "seed": draw(seeds)}

    return params()

def _judge(backend, case: Case, spec: S.MatmulSpec, inputs: list, got: np.ndarray):
    if spec.dtype == "int8":  # exact int32 sums
        return compare_values(got, oracle.matmul(*inputs)[0], None, "int32")

    def reference(acc: str, exact: bool):
        ref, mag = oracle.matmul(*inputs)
        return ref, None if exact else tolerance.matmul_bound(ref, mag, spec.K, spec.out_dtype, acc)
    return float_verdict(backend, case, spec, got, reference)


def _call(backend, case: Case, inputs: list):
    return accel.matmul(*inputs, out_dtype=case.params.get("out"), backend=backend)


def _bench_spec(dtype: str, p: dict) -> S.MatmulSpec:
    return S.matmul_spec(p.get("batch", ()) + (p["M"], p["K"]), dtype, (p["K"], p["N"]), dtype)


def _bench_inputs(spec: S.MatmulSpec, rng: np.random.Generator, seed: int) -> list:
    if spec.dtype == "int8":
        return [rng.integers(-128, 128, s, dtype=np.int8) for s in (spec.a_shape, spec.b_shape)]
    return [normal(rng, spec.a_shape, spec.dtype), normal(rng, spec.b_shape, spec.dtype)]


ROWS = (OpInfo("matmul", FLOATS + ("int8",), _matmul_cases, _strategy, _matmul, _judge, _call, slots=2,
               bench_spec=_bench_spec, bench_inputs=_bench_inputs),)
