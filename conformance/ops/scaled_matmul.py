"""scaled_matmul's row: FP8 GEMM with tensor, row or 128 x 128 block scales (torch._scaled_mm)."""
from __future__ import annotations

from typing import Iterator

import ml_dtypes
import numpy as np

import accel
from accel import spec as S
from accel.dtypes import FP8_DTYPES, UNIT_ROUNDOFF, to_numpy_dtype

from accel.conformance import oracle, tolerance
from accel.conformance.case import Case
from accel.conformance.ops.common import OpInfo, float_verdict, normal, place

#: (a dtype, b dtype) pairs of the FP8 cases: both OCP formats mixed as torch allows, fnuz alone
_FP8_PAIRS = {"float8_e4m3fn": ("float8_e4m3fn", "float8_e5m2"), "float8_e5m2": ("float8_e4m3fn",),
              "float8_e4m3fnuz": ("float8_e4m3fnuz",)}

def _scaled_matmul_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    # tensor and row scaling at K not a multiple of 128; block scaling with a partial last N block
    shapes = {"tensor": ((7, 100), (100, 9)), "row": ((5, 33), (33, 17)),
              "block": ((6, 256), (256, 130))}
    if profile == "full":
        shapes = {**shapes, "row": ((64, 1000), (1000, 72)), "block": ((33, 1024), (1024, 257))}
    if profile == "full":  # K and N whole 16-byte chunks (the CUDA tensor-core kernel's cp.async
        # path; the shapes above take its any-shape path), several 128 x 128 tiles, partial edges
        shapes = {**shapes, "row, whole chunks": ((200, 160), (160, 144)),
                  "block, whole chunks": ((130, 384), (384, 272))}
    for b_dtype in _FP8_PAIRS[dtype]:
        for scaling, (a, b) in shapes.items():
            yield "grid", {"a": a, "b": b, "b_dtype": b_dtype, "scaling": scaling.split(",")[0],
                           "data": "normal"}
    a, b = shapes["row"]
    other = {"b_dtype": _FP8_PAIRS[dtype][0]}
    yield "grid", {"a": a, "b": b, **other, "scaling": "row", "out": "float32", "bias": "float32",
                   "data": "normal"}
    yield "grid", {"a": a, "b": b, **other, "scaling": "tensor", "out": "float16",
                   "bias": "float16", "data": "normal"}
    for data in ("maxima", "subnormal", "nan") + (("inf",) if dtype == "float8_e5m2" else ()):
        yield "special", {"a": a, "b": b, **other, "scaling": "row", "out": "float32", "data": data}
    a, b = shapes["block"]
    yield "special", {"a": a, "b": b, **other, "scaling": "block", "data": "zero_blocks"}

def _fp8(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values as FP8, by ml_dtypes' round to nearest even (never accel's own conversion)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float32).astype(to_numpy_dtype(dtype))

def _fp8_operand(shape, dtype: str, data: str, rng) -> np.ndarray:
    top = float(ml_dtypes.finfo(to_numpy_dtype(dtype)).max)
    x = np.clip(rng.standard_normal(shape) * top / 8, -top, top)
    if data == "maxima":  # +-the format's largest value: products near float32's comfortable range
        x = np.where(rng.random(shape) < 0.5, -top, top) * (rng.random(shape) < 0.5)
    elif data == "subnormal":  # the FP8 subnormals next to normal values
        tiny = float(ml_dtypes.finfo(to_numpy_dtype(dtype)).smallest_subnormal)
        x = np.where(rng.random(shape) < 0.5, rng.integers(-7, 8, shape) * tiny, x / top)
    out = _fp8(x, dtype)
    if data == "nan":  # the format's NaN encodings: 0x7F / 0xFF (e4m3fn), 0x80 (fnuz), e5m2's
        codes = {"float8_e4m3fn": [0x7F, 0xFF], "float8_e4m3fnuz": [0x80],
                 "float8_e5m2": [0x7F, 0xFE]}[dtype]
        place(out.view(np.uint8), rng, codes)
    elif data == "inf" and dtype == "float8_e5m2":  # only e5m2 has infinities
        place(out.view(np.uint8), rng, [0x7C, 0xFC])
    return out

def _scaled_matmul(case: Case, rng):
    p = case.params
    (M, K), (_, N) = p["a"], p["b"]
    b_dtype, scaling, data = p.get("b_dtype") or case.dtype, p["scaling"], p["data"]
    a = _fp8_operand((M, K), case.dtype, data, rng)
    b = _fp8_operand((K, N), b_dtype, data, rng)
    if data == "zero_blocks":  # whole scale blocks of zeros: a's first 1 x 128 tiles, one of b's
        a[:, : S.FP8_BLOCK] = 0
        b[S.FP8_BLOCK: 2 * S.FP8_BLOCK, : S.FP8_BLOCK] = 0
    sa_shape, sb_shape = S.fp8_scale_shapes(scaling, M, K, N)
    scale_a = np.exp2(rng.integers(-6, 3, sa_shape)) * rng.uniform(0.5, 1, sa_shape)
    scale_b = np.exp2(rng.integers(-6, 3, sb_shape)) * rng.uniform(0.5, 1, sb_shape)
    inputs = [a, b, np.asarray(scale_a, np.float32), np.asarray(scale_b, np.float32)]
    out = p.get("out", "bfloat16")
    bias_dtype = p.get("bias")
    if bias_dtype:
        inputs.append(rng.standard_normal(N).astype(to_numpy_dtype(bias_dtype)))
    spec = S.scaled_matmul_spec((M, K), case.dtype, (K, N), b_dtype, sa_shape, "float32", sb_shape,
                                "float32", out, (N,) if bias_dtype else None, bias_dtype)
    return spec, inputs

def _strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
        scaling = draw(st.sampled_from(["tensor", "row", "block"]))
        M, N = draw(st.integers(1, 40)), draw(st.integers(1, 300))
        K = 128 * draw(st.integers(1, 3)) if scaling == "block" else draw(st.integers(1, 300))
        b_dtype = draw(st.sampled_from({"float8_e4m3fn": ["float8_e4m3fn", "float8_e5m2"],
                                        "float8_e5m2": ["float8_e4m3fn"]}.get(dtype, [dtype])))
        case = {"a": (M, K), "b": (K, N), "b_dtype": b_dtype, "scaling": scaling,
                "out": draw(st.sampled_from(["bfloat16", "float16", "float32"])), "data": "normal",
                "seed": draw(seeds)}
        if draw(st.booleans()):
            case["bias"] = "float32"
        return case

    return params()

def _judge(backend, case: Case, spec: S.ScaledMatmulSpec, inputs: list, got: np.ndarray):
    def reference(acc: str, exact: bool):
        # exact products of scaled FP8 values, float32 sums; the float32 products by the scales
        # after each (slab) sum add two roundings of the result
        bias = inputs[4] if len(inputs) > 4 else None
        ref, mag = oracle.scaled_matmul(*inputs[:4], bias, S.FP8_BLOCK if spec.scaling == "block" else None)
        bound = tolerance.matmul_bound(ref, mag, spec.K, spec.out_dtype, acc) + \
            2 * UNIT_ROUNDOFF[acc] * (np.abs(ref) if spec.scaling != "block" else mag)
        return ref, bound
    return float_verdict(backend, case, spec, got, reference)


def _call(backend, case: Case, inputs: list):
    return accel.scaled_matmul(*inputs[:4], out_dtype=case.params.get("out", "bfloat16"),
                               bias=inputs[4] if len(inputs) > 4 else None, backend=backend)


def _bench_spec(dtype: str, p: dict) -> S.ScaledMatmulSpec:
    sa, sb = S.fp8_scale_shapes(p["scaling"], p["M"], p["K"], p["N"])
    return S.scaled_matmul_spec((p["M"], p["K"]), dtype, (p["K"], p["N"]), p.get("b_dtype", dtype), sa,
                                "float32", sb, "float32", p.get("out", "bfloat16"))


def _bench_inputs(spec: S.ScaledMatmulSpec, rng: np.random.Generator, seed: int) -> list:
    # FP8 data and its scales, as quantize_fp8 makes them
    a = accel.quantize_fp8(normal(rng, (spec.M, spec.K), "float32"), spec.a_dtype, spec.scaling)
    b = accel.quantize_fp8(normal(rng, (spec.K, spec.N), "float32"), spec.b_dtype, spec.scaling,
                           operand_of="b")
    return [a[0], b[0], a[1], b[1], None]


ROWS = (OpInfo("scaled_matmul", FP8_DTYPES, _scaled_matmul_cases, _strategy, _scaled_matmul, _judge,
               _call, slots=5, bench_spec=_bench_spec, bench_inputs=_bench_inputs),)
