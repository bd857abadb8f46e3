"""The GGUF block formats' rows: quantize (ggml's bytes), dequantize (exact values) and qmatmul
(float x, or x in an activation format with exact integer block dots)."""
from __future__ import annotations

import functools
import math
from typing import Iterator

import numpy as np

import accel
from accel import spec as S
from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, expected
from accel.formats import BLOCK, FORMATS as QFORMATS, get_format
from accel.tensor import QTensor

from accel.conformance import oracle, tolerance
from accel.conformance.case import Case
from accel.conformance.compare import compare_bytes, compare_values
from accel.conformance.ops.common import (FLOATS, FORMATS, NEW_BLOCK, NEW_FORMATS, WEIGHT_FORMATS,
                                          OpInfo, exact_int_range, float_verdict, normal, place, subnormal)

# -- cases
def _quantize_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    sizes = [(1, 32), (3, 96), (2, 2, 64)] + ([(256, 1024)] if dtype == "float32" else []) + (
        [(64, 4096)] if profile == "full" else [])  # 8,192 blocks: many work-groups and tails
    for fmt in FORMATS:
        for shape in sizes:
            yield "grid", {"shape": shape, "fmt": fmt, "data": "normal"}
        for data in ("ties", "zeros", "signs", "nonfinite", "subnormal") + (
                ("overflow", "tiny") if dtype != "float16" else ()):  # beyond float16's range
            yield "special", {"shape": (6, 64), "fmt": fmt, "data": data}
    for fmt in NEW_FORMATS:  # one block, many blocks, ragged rows, leading dims
        if QFORMATS[fmt].needs_imatrix:  # accel.quantize takes no imatrix yet: nothing to judge
            continue
        b = NEW_BLOCK[fmt]
        for shape in [(1, b), (3, 2 * b), (2, 2, b)] + ([(64, 16 * b)] if profile == "full" else []):
            yield "grid", {"shape": shape, "fmt": fmt, "data": "normal"}
        specials = ("zeros", "signs", "positive", "negative", "constant", "outliers", "nonfinite",
                    "subnormal", "overflow", "tiny")
        if dtype != "float32":  # half inputs: their conversion, not the format, is what differs
            specials = ("zeros", "nonfinite", "subnormal") + (("overflow",) if dtype == "bfloat16" else ())
        for data in specials:
            yield "special", {"shape": (5, 2 * b), "fmt": fmt, "data": data}

def _dequantize_cases(fmt: str, profile: str) -> Iterator[tuple[str, dict]]:
    b = NEW_BLOCK.get(fmt, 32)
    sizes = [(1, b), (5, 5 * b), (256, 1024 if b == 32 else 2048)] + (
        [(256, 4096)] if profile == "full" else [])
    for shape in sizes:
        yield "exact", {"shape": shape, "data": "random"}
    yield "special", {"shape": (2, 4 * b), "data": "special_d"}  # 8 blocks: every special scale

def _qmatmul_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    # The quick profile reads float16 and bfloat16 x at one shape per path (M = 3, several weight
    # rows): their x loads are what differs, and every shape builds its own tile of each format's
    # kernel (M picks RM); the full profile takes every shape in every dtype.
    every_shape = profile == "full" or dtype == "float32"
    shapes = [((1, 32), 1), ((3, 64), 17), ((2, 3, 96), 31), ((1, 4096), 8)]
    if not every_shape:
        shapes = [((3, 64), 17)]
    if profile == "full":  # long K; K / 64 odd (rows at every 4-byte offset mod 16) over two
        # 32-pair slices, the second with one pair; 10 slices of which the last pass has 2; a
        # decode batch of 5 rows; thousands of weight rows (more groups than a GPU holds at once)
        shapes += [((64, 4096), 256), ((1, 16384), 64), ((3, 64 * 33), 37), ((2, 64 * 300), 19),
                   ((5, 2560), 40), ((1, 512), 4500)]
    for fmt in FORMATS:
        for x, N in shapes:
            yield "grid", {"x": x, "N": N, "fmt": fmt, "data": "normal"}
        yield "exact", {"x": (4, 32), "N": 9, "fmt": fmt, "data": "ints"}
        yield "exact", {"x": (3, 32), "N": 20, "fmt": fmt, "data": "rounding"}
        if dtype == "float32":  # 262,144 outputs over many weight-row groups
            yield "grid", {"x": (64, 256), "N": 4096, "fmt": fmt, "data": "normal"}
        yield "special", {"x": (3, 64), "N": 5, "fmt": fmt, "data": "nan"}
        yield "special", {"x": (2, 256), "N": 16, "fmt": fmt, "data": "inf"}  # +-inf times codes
        # x quantized to Q8_0 (GGML's semantics): one block; rows at every even offset of their
        # 16-byte words (K / 32 odd); a decode batch; long K; more groups than a GPU holds
        for x, N in ([((1, 32), 1), ((3, 96), 17), ((5, 64 * 33), 37), ((1, 4096), 8)] + (
                [((64, 4096), 256), ((9, 2560), 40), ((1, 512), 4500)] if profile == "full" else [])
                if every_shape else [((3, 96), 17)]):
            yield "grid", {"x": x, "N": N, "fmt": fmt, "x_fmt": "q8_0", "data": "normal"}
        for data, x, N in (("nan", (3, 64), 5), ("inf", (2, 256), 16)):  # a row of NaN (docs/api.md)
            yield "special", {"x": x, "N": N, "fmt": fmt, "x_fmt": "q8_0", "data": data}
    for fmt in WEIGHT_FORMATS:  # float x, then x in the format's vec_dot partner
        b = NEW_BLOCK[fmt]
        x_fmt = QFORMATS[fmt].vec_dot
        shapes = [((1, b), 1), ((3, 2 * b), 17), ((2, 3, b), 5)] + (
            [((8, 16 * b), 64), ((1, 16 * b), 4500)] if profile == "full" else [])
        if not every_shape:
            shapes = [((3, 2 * b), 17)]
        for xf in ({}, {"x_fmt": x_fmt}):
            for x, N in shapes:
                yield "grid", {"x": x, "N": N, "fmt": fmt, **xf, "data": "normal"}
            for data in ("nan", "inf"):
                yield "special", {"x": (3, 2 * b), "N": 5, "fmt": fmt, **xf, "data": data}

# -- inputs
def _quant_blocks(data: str, fmt: str, nblocks: int, rng) -> np.ndarray:
    """float64 blocks [nblocks, 32] for the quantizer's edge cases."""
    x = rng.standard_normal((nblocks, BLOCK)) * 10.0 ** rng.uniform(-3, 3, (nblocks, 1))
    top = 127.0 if fmt == "q8_0" else 8.0
    if data == "normal":
        return x
    if data == "ties":  # d = +-1 or 0.5 exactly, every other element half-way between two codes
        k = rng.integers(-int(top), int(top), (nblocks, BLOCK)) + 0.5
        x = k.astype(np.float64)
        x[:, 0] = -top if fmt == "q4_0" else top
        x[1::2, 0] *= -1  # the extreme element of every other block is positive for q4_0
        x[2::3] *= 0.5
        return x
    if data == "zeros":  # all-zero blocks, with signed zeros
        x[:] = 0.0
        x[1::2] = -0.0
        x[2::3, ::2] = -0.0
        return x
    if data in ("positive", "negative"):  # one-signed blocks: K-quants' min of 0, or all of it
        return np.abs(x) if data == "positive" else -np.abs(x)
    if data == "constant":  # flat groups (K-quants' max == min), of either sign
        return np.where(np.arange(nblocks)[:, None] % 2, -3.25, 0.7) * np.ones_like(x)
    if data == "outliers":  # one element in 50 a thousand times the rest
        return np.where(rng.random(x.shape) < 0.02, x * 1e3, x)
    if data == "signs":  # the extreme is negative, positive, or both with equal magnitude
        m = np.abs(x).max(axis=1) * 2
        x[0::3, 5] = -m[0::3]
        x[1::3, 7] = m[1::3]
        x[2::3, 3], x[2::3, 9] = m[2::3], -m[2::3]
        return x
    if data == "nonfinite":  # NaN, +Inf, -Inf, and mixes inside otherwise normal blocks
        specials = [(np.nan,), (np.inf,), (-np.inf,), (np.inf, np.nan), (-np.inf, np.inf)]
        for i in range(nblocks):
            for j, value in enumerate(specials[i % len(specials)]):
                x[i, 3 + 11 * j] = value
        return x
    if data == "overflow":  # max |x| over 127 * 65504: d rounds to float16 infinity
        x = rng.standard_normal((nblocks, BLOCK)) * 1e6
        x[:, 1] = 1e7
        return x
    if data == "tiny":  # max |x| below ~127 * 2**-128: 1/d overflows (every other block), or not
        x = rng.standard_normal((nblocks, BLOCK)) * 1e-39
        x[1::2] *= 1e3
        return x
    if data == "subnormal":  # tiny blocks: d is a float16 subnormal; subnormal elements
        x = rng.standard_normal((nblocks, BLOCK)) * 1e-4
        return x
    raise ArgumentError(expected("data", "a quantize data generator", repr(data)))

def _quantize(case: Case, rng):
    p = case.params
    spec = S.quantize_spec(p["shape"], case.dtype, p["fmt"])
    nblocks = math.prod(p["shape"]) // BLOCK  # generated in 32-element groups, all formats
    x = _quant_blocks(p["data"], p["fmt"], nblocks, rng)
    if p["data"] == "subnormal":
        place(x, rng, [subnormal(case.dtype), -subnormal(case.dtype)])
    with np.errstate(over="ignore"):
        return spec, [x.reshape(p["shape"]).astype(to_numpy_dtype(case.dtype))]

def _random_super_blocks(fmt: str, nblocks: int, rng, data: str) -> np.ndarray:
    """Random blocks of any format but q8_0 / q4_0: random codes, sub-scales and mins, float
    scales of modest size (``special_d``: zero, signed zero, subnormal, largest, infinite and NaN
    ones)."""
    f = get_format(fmt)
    raw = rng.integers(0, 256, (nblocks, f.block_bytes), dtype=np.uint8)
    if fmt == "mxfp4":  # every exponent byte is a finite scale; keep most near 1
        raw[:, 0] = rng.integers(110, 140, nblocks)
        if data == "special_d":
            raw[: min(4, nblocks), 0] = np.array([0, 1, 254, 255], np.uint8)[:nblocks]
        return raw
    if fmt == "nvfp4":  # every UE4M3 byte is a finite scale (0x7F and 0: zero)
        if data == "special_d":
            specials = np.array([[0, 1, 0x7E, 0x7F], [0xFF, 0x80, 0x08, 0x77]], np.uint8)
            raw[: min(2, nblocks), :4] = specials[: min(2, nblocks)]
        return raw
    for off, name in f.scales:  # the table's float scales: d (and dmin or m)
        dt = np.dtype(name).type
        d = (rng.standard_normal(nblocks) * (0.05 if dt == np.float16 else 1e-3)).astype(dt)
        if data == "special_d":
            top = 65504.0 if dt == np.float16 else 3e38
            specials = np.array([0.0, -0.0, 6e-8, -3e-6, top, np.inf, -np.inf, np.nan], dt)
            d[: len(specials)] = specials[:nblocks]
        raw[:, off: off + d.itemsize] = d.view(np.uint8).reshape(nblocks, -1)
    return raw

def random_blocks(fmt: str, nblocks: int, rng, data: str = "random") -> np.ndarray:
    """Raw GGUF blocks with random codes and scales d; ``data="special_d"`` puts zero, signed
    zero, subnormal, largest, infinite and NaN scales in the mix."""
    f = get_format(fmt)
    if fmt not in ("q8_0", "q4_0"):
        if data not in ("random", "special_d"):
            raise ArgumentError(expected("data", f"'random' or 'special_d' blocks of {fmt}", repr(data)))
        return _random_super_blocks(fmt, nblocks, rng, data)
    raw = rng.integers(0, 256, (nblocks, f.block_bytes), dtype=np.uint8)
    d = (rng.standard_normal(nblocks) * 0.05).astype(np.float16)
    if data == "special_d":
        specials = np.array([0.0, -0.0, 6e-8, -3e-6, 65504.0, np.inf, -np.inf, np.nan],
                            dtype=np.float16)
        d[: len(specials)] = specials[:nblocks]
    elif data == "unit_d":  # d = 1 and small codes: dequantized weights are small integers
        d[:] = 1.0
        codes = rng.integers(-8, 8, (nblocks, BLOCK))
        if fmt == "q8_0":
            raw[:, 2:] = codes.astype(np.int8).view(np.uint8)
        else:
            nib = (codes + 8).astype(np.uint8)
            raw[:, 2:] = nib[:, :BLOCK // 2] | (nib[:, BLOCK // 2:] << 4)
    elif data != "random":
        raise ArgumentError(expected("data", "a block generator", repr(data)))
    raw[:, :2] = d.view(np.uint8).reshape(-1, 2)
    return raw

def _dequantize(case: Case, rng):
    p = case.params
    f = get_format(case.dtype)
    shape = p["shape"]
    spec = S.dequantize_spec(shape, f)
    raw = random_blocks(case.dtype, math.prod(shape) // f.block, rng, p["data"])
    return spec, [raw.reshape(shape[:-1] + (f.row_bytes(shape[-1]),))]

def _qmatmul(case: Case, rng):
    p = case.params
    f = get_format(p["fmt"])
    x_shape, N = p["x"], p["N"]
    K = x_shape[-1]
    spec = S.qmatmul_spec(x_shape, case.dtype, (N, K), f, p.get("x_fmt"))
    data = p["data"]
    exact_sums = data in ("ints", "rounding")
    raw = random_blocks(p["fmt"], N * K // f.block, rng, "unit_d" if exact_sums else "random")
    if data == "ints":  # |x| <= r, |w| <= 8: every partial sum is an exact integer
        r = max(1, exact_int_range(case.dtype, K) ** 2 // 8)
        x = rng.integers(-r, r + 1, x_shape).astype(np.float64)
    elif data == "rounding":  # |x| <= 255 (exact in every input format), |w| <= 8, K <= 32: exact
        # float32 sums of up to 16 significant bits, which the output conversion rounds
        x = rng.integers(-255, 256, x_shape).astype(np.float64)
    else:
        x = rng.standard_normal(x_shape)
        if data in ("nan", "inf"):
            place(x, rng, [np.nan] if data == "nan" else [np.inf, -np.inf])
        elif data != "normal":
            raise ArgumentError(expected("data", "a qmatmul data generator", repr(data)))
    return spec, [x.astype(to_numpy_dtype(case.dtype)), raw.reshape(N, f.row_bytes(K))]

# -- property search
def _quantize_strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
        rows, blocks = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        data = draw(st.sampled_from(["normal", "ties", "zeros", "signs", "nonfinite", "subnormal"]))
        return {"shape": (rows, 32 * blocks), "fmt": draw(st.sampled_from(["q8_0", "q4_0"])),
                "data": data, "seed": draw(seeds)}

    return params()

def _dequantize_strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
        rows, blocks = draw(st.integers(1, 3)), draw(st.integers(1, 4))
        return {"shape": (rows, get_format(dtype).block * blocks),
                "data": draw(st.sampled_from(["random", "special_d"])),
                "seed": draw(seeds)}

    return params()

def _qmatmul_strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
        x = tuple(draw(st.lists(st.integers(1, 4), max_size=2))) + (32 * draw(st.integers(1, 4)),)
        case = {"x": x, "N": draw(st.integers(1, 24)), "fmt": draw(st.sampled_from(["q8_0", "q4_0"])),
                "data": "normal", "seed": draw(seeds)}
        if draw(st.booleans()):
            case["x_fmt"] = "q8_0"
        return case

    return params()

# -- verdicts
def _unjudged(backend, spec: S.QuantizeSpec) -> str | None:
    """The K-quants' quantize oracle is ggml's own quantizer, and without ggml-python it is the
    CPU reference's, which cannot judge the CPU reference itself."""
    if spec.fmt.name in oracle.SUPER and backend.name == "cpu" and oracle.super_quantizer() == "cpu":
        return (f"not judged here: {spec.fmt.name}'s quantize oracle is ggml's own quantizer "
                "(pip install 'accel-portable[ggml]'); without it the CPU reference would be "
                "judged by itself")
    return None


def _judge_quantize(backend, case: Case, spec: S.QuantizeSpec, inputs: list, got: np.ndarray):
    ref = oracle.quantize(inputs[0], spec.fmt.name)
    blocks = ref.size // spec.fmt.block_bytes
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite scale reads back so
        values = oracle.dequantize(ref, spec.fmt.name, (blocks, spec.fmt.block))
    return compare_bytes(got, ref, spec.fmt.block_bytes, ~np.isfinite(values).all(axis=1))


def _judge_dequantize(backend, case: Case, spec: S.DequantizeSpec, inputs: list, got: np.ndarray):
    return compare_values(got, oracle.dequantize(inputs[0], spec.fmt.name, spec.shape), None,
                          "float32", signed_zero=True)


def _judge_qmatmul(backend, case: Case, spec: S.QMatmulSpec, inputs: list, got: np.ndarray):
    def reference(acc: str, exact: bool):
        if spec.x_fmt is not None:  # float32 sums of K / 32 exact terms
            ref, mag = oracle.qmatmul_quantized_x(inputs[0], inputs[1], spec.fmt.name, spec.N,
                                                  spec.x_fmt.name)
            terms = spec.K // oracle.BLOCK
        else:
            ref, mag = oracle.qmatmul(inputs[0], inputs[1], spec.fmt.name, spec.N)
            terms = spec.K
        return ref, None if exact else tolerance.matmul_bound(ref, mag, terms, spec.out_dtype, acc)
    return float_verdict(backend, case, spec, got, reference)


# -- the public ops
def _call_quantize(backend, case: Case, inputs: list):
    return accel.quantize(inputs[0], case.params["fmt"], backend=backend)


def _call_dequantize(backend, case: Case, inputs: list):
    return accel.dequantize(QTensor.from_raw(inputs[0], case.dtype, case.params["shape"], backend=backend))


def _call_qmatmul(backend, case: Case, inputs: list):
    p = case.params
    w = QTensor.from_raw(inputs[1], p["fmt"], (p["N"], p["x"][-1]), backend=backend)
    return accel.qmatmul(inputs[0], w, x_format=p.get("x_fmt"), backend=backend)


# -- benchmark cases: rows x K weights, quantized by the cpu reference
def _quantized(x: np.ndarray, fmt: str) -> np.ndarray:
    # formats ggml quantizes only with an importance matrix: uniform weights (plain least squares)
    im = np.ones(x.shape[-1], np.float32) if get_format(fmt).needs_imatrix else None
    return accel.quantize(x, fmt, imatrix=im, backend="cpu").raw


@functools.lru_cache(maxsize=2)
def _seeded_weight(n: int, k: int, fmt: str, seed: int) -> np.ndarray:
    w = _quantized(np.random.default_rng([seed, n, k]).standard_normal((n, k), np.float32), fmt)
    w.flags.writeable = False
    return w


def _quantized_weight(n: int, k: int, fmt: str, seed: int) -> np.ndarray:
    """A seeded random [n, k] weight quantized to ``fmt``, the same for every M and x_format (the
    CPU reference quantizes a 4096 x 4096 q4_k weight in about 16 s, q6_k in 8: a decode
    sweep's cases share one); a fresh copy each call, so no caller can change another's."""
    return _seeded_weight(n, k, fmt, seed).copy()


ROWS = (
    OpInfo("quantize", FLOATS, _quantize_cases, _quantize_strategy, _quantize, _judge_quantize,
           _call_quantize, slots=1, unjudged=_unjudged,
           bench_spec=lambda dtype, p: S.quantize_spec((p["rows"], p["K"]), dtype, p["fmt"]),
           bench_inputs=lambda spec, rng, seed: [normal(rng, spec.shape, spec.dtype)]),
    # dequantize's dtypes are its formats
    OpInfo("dequantize", FORMATS + NEW_FORMATS, _dequantize_cases, _dequantize_strategy, _dequantize,
           _judge_dequantize, _call_dequantize, slots=1,
           bench_spec=lambda dtype, p: S.dequantize_spec((p["rows"], p["K"]), get_format(p["fmt"])),
           bench_inputs=lambda spec, rng, seed: [_quantized(normal(rng, spec.shape, "float32"), spec.fmt.name)]),
    OpInfo("qmatmul", FLOATS, _qmatmul_cases, _qmatmul_strategy, _qmatmul, _judge_qmatmul,
           _call_qmatmul, slots=2,
           bench_spec=lambda dtype, p: S.qmatmul_spec((p["M"], p["K"]), dtype, (p["N"], p["K"]),
                                                      get_format(p["fmt"]), p.get("x_fmt")),
           bench_inputs=lambda spec, rng, seed: [normal(rng, spec.x_shape, spec.dtype),
                                                 _quantized_weight(spec.N, spec.K, spec.fmt.name, seed)]),
)
