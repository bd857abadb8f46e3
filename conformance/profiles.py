"""The fixed case lists: the ``quick`` profile (CI, every category at modest sizes, cheap enough
for PoCL) and the ``full`` profile (release checks: the quick cases plus large shapes).

Sizes cover 1, 2, 3, primes (17, 31, 127), powers of two and their neighbours (63, 64, 65),
tall-and-skinny and decode shapes, K up to 16384 and broadcast batches.
"""
from __future__ import annotations

from typing import Iterator

from accel.conformance.case import Case
from accel.dtypes import FP8_DTYPES
from accel.conformance import decoder_ops
from accel.formats import FORMATS as QFORMATS

PROFILES = ("quick", "full")
FLOATS = ("float32", "float16", "bfloat16")
FORMATS = ("q8_0", "q4_0")
#: every other format of the table (q8_1 has no public quantize): quantize judged against ggml's
#: own quantizer (ggml_ref)
NEW_FORMATS = tuple(f for f in QFORMATS if f not in FORMATS + ("q8_1",))
_WEIGHT_FORMATS = tuple(f for f in NEW_FORMATS if not QFORMATS[f].activation_only)
_NEW_BLOCK = {f: QFORMATS[f].block for f in NEW_FORMATS}

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

# attention: (B, Hq, Hkv, Sq, Sk, D, Dv, causal)
_ATTN_QUICK = [
    (1, 2, 2, 17, 17, 32, 32, False),
    (1, 8, 8, 3, 16, 32, 32, False), (1, 8, 4, 3, 16, 32, 32, False),  # GQA ratio 1, 2
    (1, 8, 2, 3, 16, 32, 32, True), (1, 8, 1, 3, 16, 32, 32, True),  # GQA ratio 4, 8
    (1, 4, 2, 5, 33, 64, 64, True),  # causal, Sq < Sk
    (1, 8, 1, 1, 65, 128, 128, True),  # decode
    (1, 2, 1, 9, 4, 32, 32, True),  # causal, Sq > Sk: the first rows see no key
    (1, 2, 2, 31, 31, 80, 128, True),  # D = 80, Dv > D, causal Sq = Sk
    (2, 4, 2, 7, 12, 64, 32, False),  # batch 2, Dv < D
    (1, 2, 1, 6, 10, 80, 128, False),  # Dv > D, GQA
]
_ATTN_FULL = [
    (1, 8, 2, 128, 128, 128, 128, True), (2, 16, 2, 64, 256, 64, 64, False),
    (1, 32, 8, 1, 1024, 128, 128, True), (1, 4, 4, 127, 65, 80, 80, True),
]


def _attn(B, Hq, Hkv, Sq, Sk, D, Dv, causal, **extra) -> dict:
    return {"q": (B, Hq, Sq, D), "k": (B, Hkv, Sk, D), "v": (B, Hkv, Sk, Dv), "causal": causal,
            **extra}


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


def _attention_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    shapes = _ATTN_QUICK + (_ATTN_FULL if profile == "full" else [])
    for shape in shapes:
        yield "grid", _attn(*shape, data="normal")
    yield "grid", _attn(1, 4, 2, 6, 20, 32, 32, False, scale=0.3, data="normal")
    other = "float32" if dtype != "float32" else "float16"
    masks = [  # (kind, shape it broadcasts from, data, mask dtype if not the input's, causal)
        ("bool", (6, 20), "random", None, False), ("bool", (1, 1, 6, 20), "dead_rows", None, True),
        ("additive", (1, 4, 6, 20), "random", None, True),
        ("additive", (6, 20), "dead_rows", None, False),
        ("additive", (1, 1, 6, 20), "random", other, True),
    ]
    for kind, mshape, mdata, mdtype, causal in masks:
        yield "grid", _attn(1, 4, 2, 6, 20, 32, 32, causal, mask=kind, mask_shape=mshape,
                            mask_data=mdata, mask_dtype=mdtype, data="normal")
    yield "exact", _attn(1, 4, 2, 5, 16, 32, 32, False, data="equal")
    yield "exact", _attn(1, 2, 1, 3, 1, 64, 64, False, data="equal")
    yield "exact", _attn(1, 4, 2, 5, 16, 32, 32, False, data="rounding")
    if dtype == "float32":  # 262,144 output elements over many query and key tiles
        yield "grid", _attn(1, 8, 2, 256, 256, 128, 128, True, data="normal")
    yield "exact", _attn(1, 2, 2, 4, 8, 32, 32, False, mask="bool", mask_shape=(1, 2, 4, 8),
                         mask_data="pow2", data="equal")
    yield "special", _attn(1, 2, 2, 7, 9, 64, 64, False, data="large")
    yield "special", _attn(1, 2, 1, 5, 8, 32, 32, True, data="large")
    yield "special", _attn(1, 2, 2, 4, 6, 32, 32, False, data="nan_q")
    yield "special", _attn(1, 2, 1, 4, 6, 32, 32, False, data="nan_v")
    yield from _attention_option_cases(profile)


def _attention_option_cases(profile: str) -> Iterator[tuple[str, dict]]:
    """window, softcap and sinks (issue 42), at head dims already built for the cases above
    (window and softcap are kernel arguments; sinks a variant of their own)."""
    for window in (1, 4, 50):  # one key, a few, more than there are
        yield "grid", _attn(1, 4, 2, 6, 20, 32, 32, True, window=window, data="normal")
    yield "grid", _attn(1, 4, 1, 1, 700, 32, 32, True, window=64, data="normal")  # decode: key chunks
    yield "grid", _attn(1, 4, 2, 6, 20, 32, 32, False, softcap=0.5, data="normal")
    yield "special", _attn(1, 2, 2, 7, 9, 32, 32, True, softcap=30.0, data="large")
    for sinks in ("normal", "above", "below", "mixed"):
        yield "grid", _attn(1, 5, 1, 3, 16, 32, 32, True, sinks=sinks, data="normal")
    yield "grid", _attn(1, 5, 1, 1, 700, 32, 32, True, window=100, sinks="mixed", data="normal")
    yield "grid", _attn(1, 4, 2, 6, 20, 32, 32, True, window=5, softcap=20.0, sinks="normal",
                        mask="additive", mask_shape=(6, 20), mask_data="dead_rows", data="normal")
    if profile == "full":  # Gemma 3's local layers (D 256, window 512) and D = 512
        yield "grid", _attn(1, 4, 1, 1, 1500, 256, 256, True, window=512, data="normal")
        yield "grid", _attn(1, 4, 1, 40, 600, 256, 256, True, window=512, softcap=50.0, data="normal")
        yield "grid", _attn(1, 2, 1, 5, 40, 512, 512, True, window=16, sinks="normal", data="normal")


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
        b = _NEW_BLOCK[fmt]
        for shape in [(1, b), (3, 2 * b), (2, 2, b)] + ([(64, 16 * b)] if profile == "full" else []):
            yield "grid", {"shape": shape, "fmt": fmt, "data": "normal"}
        specials = ("zeros", "signs", "positive", "negative", "constant", "outliers", "nonfinite",
                    "subnormal", "overflow", "tiny")
        if dtype != "float32":  # half inputs: their conversion, not the format, is what differs
            specials = ("zeros", "nonfinite", "subnormal") + (("overflow",) if dtype == "bfloat16" else ())
        for data in specials:
            yield "special", {"shape": (5, 2 * b), "fmt": fmt, "data": data}


def _dequantize_cases(fmt: str, profile: str) -> Iterator[tuple[str, dict]]:
    b = _NEW_BLOCK.get(fmt, 32)
    sizes = [(1, b), (5, 5 * b), (256, 1024 if b == 32 else 2048)] + (
        [(256, 4096)] if profile == "full" else [])
    for shape in sizes:
        yield "exact", {"shape": shape, "data": "random"}
    yield "special", {"shape": (2, 4 * b), "data": "special_d"}  # 8 blocks: every special scale


def _qmatmul_cases(dtype: str, profile: str) -> Iterator[tuple[str, dict]]:
    shapes = [((1, 32), 1), ((3, 64), 17), ((2, 3, 96), 31), ((1, 4096), 8)]
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
        for x, N in [((1, 32), 1), ((3, 96), 17), ((5, 64 * 33), 37), ((1, 4096), 8)] + (
                [((64, 4096), 256), ((9, 2560), 40), ((1, 512), 4500)] if profile == "full" else []):
            yield "grid", {"x": x, "N": N, "fmt": fmt, "x_fmt": "q8_0", "data": "normal"}
        for data, x, N in (("nan", (3, 64), 5), ("inf", (2, 256), 16)):  # a row of NaN (docs/api.md)
            yield "special", {"x": x, "N": N, "fmt": fmt, "x_fmt": "q8_0", "data": data}
    for fmt in _WEIGHT_FORMATS:  # float x, then x in the format's vec_dot partner
        b = _NEW_BLOCK[fmt]
        x_fmt = QFORMATS[fmt].vec_dot
        shapes = [((1, b), 1), ((3, 2 * b), 17), ((2, 3, b), 5)] + (
            [((8, 16 * b), 64), ((1, 16 * b), 4500)] if profile == "full" else [])
        for xf in ({}, {"x_fmt": x_fmt}):
            for x, N in shapes:
                yield "grid", {"x": x, "N": N, "fmt": fmt, **xf, "data": "normal"}
            for data in ("nan", "inf"):
                yield "special", {"x": (3, 2 * b), "N": 5, "fmt": fmt, **xf, "data": data}


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


#: op -> (dtypes it is defined for, generator of (kind, params))
_OPS = {
    "matmul": (FLOATS + ("int8",), _matmul_cases),
    "attention": (FLOATS, _attention_cases),
    "quantize": (FLOATS, _quantize_cases),
    "dequantize": (FORMATS + NEW_FORMATS, _dequantize_cases),
    "qmatmul": (FLOATS, _qmatmul_cases),
    "scaled_matmul": (FP8_DTYPES, _scaled_matmul_cases),
    # the decoder-step ops (accel.nn), run through the public op on the backend's Tensors
    **{op: (dtypes, lambda dtype, profile, op=op: decoder_ops.cases(op, dtype, profile))
       for op, (dtypes, _gen, _run) in decoder_ops.OPS.items()},
}
OPS = tuple(_OPS)


def op_dtypes(op: str) -> tuple[str, ...]:
    return _OPS[op][0]


def fixed_cases(profile: str, seed: int, ops=None, dtypes=None) -> list[Case]:
    """The profile's fixed cases (everything but the property-based search)."""
    out = []
    for op, (op_dtypes_, gen) in _OPS.items():
        if ops and op not in ops:
            continue
        for dtype in op_dtypes_:
            if dtypes and dtype not in dtypes:
                continue
            for kind, params in gen(dtype, profile):
                out.append(Case(op, dtype, kind, {**params, "seed": seed}))
    return out
