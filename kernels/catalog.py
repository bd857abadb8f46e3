"""The variants accel ships (importable as ``accel.kernels.catalog``; every name is also
``accel.kernels.X``): one constructor per kernel source that turns dtypes, formats and a tile
parameter set into a :class:`~accel.kernels.Variant`, and :func:`variants`, every one of them:
the set ``accel kernels check`` compiles for each target.
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np

from accel.errors import ArgumentError, DTypeError, expected
from accel.formats import get_format
from accel.kernels.coverage import (ATTENTION_MMA_HEAD_DIMS, CODEBOOK_FORMATS, KERNEL_FORMATS,
                                    KQUANT_FORMATS, MMA_FP8_DTYPES, VECTOR_KX_FORMATS)
from accel.kernels.tiles import (CODEBOOK_ROWS, CPU_ATTENTION, CPU_GEMV, CPU_KGEMV, CPU_MATMUL,
                                 CPU_QMATMUL, CPU_SCALED_MATMUL, GPU_ATTENTION, GPU_ATTENTION_MMA,
                                 GPU_GEMV, GPU_KGEMV, GPU_MATMUL, GPU_QMATMUL, GPU_SCALED_MATMUL,
                                 GPU_SCALED_MATMUL_MMA, GPU_SCALED_MATMUL_WGMMA, GPU_WGMMA, GPU_WMMA,
                                 PLANNER_KEYS)
from accel.kernels.variant import DIALECTS, SM_ANY_LATER, Variant

#: accel dtype -> the dtype token the header's LOAD_/STORE_ macros are named by
DTYPE_TOKEN = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int8": "I8",
               "int32": "I32", "uint8": "U8", "bool": "U8"}
#: the FP8 formats' names in scaled_matmul.cl's A_FP8 / B_FP8 defines (its decoders' suffixes)
FP8_TOKEN = {"float8_e4m3fn": "e4m3fn", "float8_e5m2": "e5m2", "float8_e4m3fnuz": "e4m3fnuz"}

_FLOATS = ("float32", "float16", "bfloat16")


def _token(dtype: str, allowed: tuple[str, ...], arg: str) -> str:
    if dtype not in allowed:
        raise DTypeError(expected(arg, f"one of {allowed}", repr(dtype)))
    return DTYPE_TOKEN[dtype]


def _dialects(params: dict) -> tuple[str, ...]:
    return DIALECTS if params.get("VW", 1) == 1 else ("opencl",)


def _token_of(dtype: str, tokens: dict, arg: str) -> str:
    if dtype not in tokens:
        raise DTypeError(expected(arg, f"one of {tuple(tokens)}", repr(dtype)))
    return tokens[dtype]


def matmul(in_dtype: str, out_dtype: str, params: dict | None = None) -> Variant:
    """The matmul variant for ``in_dtype`` inputs (int8 gives exact int32 GEMM)."""
    p = dict(GPU_MATMUL if params is None else params)
    if in_dtype == "int8":
        dt = {"IN_DT": "I8", "OUT_DT": _token(out_dtype, ("int32",), "out_dtype"), "ACC_INT": 1}
    else:
        dt = {"IN_DT": _token(in_dtype, _FLOATS, "in_dtype"),
              "OUT_DT": _token(out_dtype, _FLOATS, "out_dtype"), "ACC_INT": 0}
    return Variant("matmul.cl", ("matmul",), {**dt, **p}, _dialects(p))


def matmul_wmma(in_dtype: str, out_dtype: str, params: dict | None = None) -> Variant:
    """The CUDA tensor-core matmul (sm_80+) for float16/bfloat16 inputs, float32 accumulation.

    >>> v = matmul_wmma("bfloat16", "float32")
    >>> v.kernels, v.dialects, v.defines["IN_DT"]
    (('matmul_wmma', 'matmul_wmma_vec'), ('cuda',), 'BF16')
    """
    p = dict(GPU_WMMA if params is None else params)
    dt = {"IN_DT": _token(in_dtype, ("float16", "bfloat16"), "in_dtype"),
          "OUT_DT": _token(out_dtype, _FLOATS, "out_dtype")}
    return Variant("matmul_wmma.cu", ("matmul_wmma", "matmul_wmma_vec"), {**dt, **p}, ("cuda",),
                   sm_range=(80, SM_ANY_LATER))


def matmul_wgmma(in_dtype: str, out_dtype: str, params: dict | None = None) -> Variant:
    """The Hopper tensor-core matmul (wgmma, built for sm_90a; sm_90 devices only) for
    float16/bfloat16 inputs, float32 accumulation; K and N multiples of 8, A and B 16-byte
    aligned (the backend routes other cases to :func:`matmul_wmma`).

    >>> v = matmul_wgmma("bfloat16", "bfloat16")
    >>> v.nvidia_target("sm_90"), v.nvidia_target("sm_80"), v.dynamic_local_bytes
    ('sm_90a', None, 197632)
    """
    p = dict(GPU_WGMMA if params is None else params)
    dt = {"IN_DT": _token(in_dtype, ("float16", "bfloat16"), "in_dtype"),
          "OUT_DT": _token(out_dtype, _FLOATS, "out_dtype")}
    return Variant("matmul_wgmma.cu", ("matmul_wgmma",), {**dt, **p}, ("cuda",),
                   sm_range=(90, 90), arch_suffix="a")


def attention(dtype: str, head_dim: int, head_dim_v: int, mask: str | None = None,
              mask_dtype: str | None = None, params: dict | None = None,
              sinks: bool = False) -> Variant:
    """The attention variant; ``mask`` is None, "bool" or "additive" (in ``mask_dtype``);
    ``sinks``: the kernels read one sink logit per query head (window and softcap are scalar
    arguments of every variant)."""
    p = dict(GPU_ATTENTION if params is None else params)
    if "QSPLIT" in p:  # a power of two: halved until 4 * QSPLIT divides both head dims
        while p["QSPLIT"] > 1 and (head_dim % (4 * p["QSPLIT"]) or head_dim_v % (4 * p["QSPLIT"])):
            p["QSPLIT"] //= 2
    d = _attention_defines(dtype, _FLOATS, head_dim, head_dim_v, mask, mask_dtype)
    if sinks:
        d["SINKS"] = 1
    return Variant("attention.cl", ("attention", "attention_combine"), {**d, **p}, _dialects(p))


def attention_mma(dtype: str, head_dim: int, head_dim_v: int, mask: str | None = None,
                  mask_dtype: str | None = None, params: dict | None = None) -> Variant:
    """The CUDA tensor-core flash attention (sm_80+, mma.sync) for float16/bfloat16; the same
    semantics and arguments as :func:`attention`. 64 keys per shared tile where two stages of
    K and V rows fit 48 KiB, else 32.

    >>> v = attention_mma("bfloat16", 128, 128)
    >>> v.defines["BKV"], v.static_local_bytes, v.sm_range
    (32, 34816, (80, 999))
    """
    p = dict(GPU_ATTENTION_MMA if params is None else params)
    d = _attention_defines(dtype, ("float16", "bfloat16"), head_dim, head_dim_v, mask, mask_dtype)
    for bkv in ((p["BKV"],) if "BKV" in p else (64, 32)):
        v = Variant("attention_mma.cu", ("attention_mma",), {**d, **p, "BKV": bkv}, ("cuda",),
                    sm_range=(80, SM_ANY_LATER))
        if v.static_local_bytes <= 48 * 1024:
            break
    return v


def _attention_defines(dtype: str, dtypes: tuple[str, ...], head_dim: int, head_dim_v: int,
                       mask: str | None, mask_dtype: str | None) -> dict:
    kind = {None: 0, "bool": 1, "additive": 2}
    if mask not in kind:
        raise ArgumentError(expected("mask", "None, 'bool' or 'additive'", repr(mask)))
    d = {"IN_DT": _token(dtype, dtypes, "dtype"), "HEAD_D": int(head_dim),
         "HEAD_DV": int(head_dim_v), "MASK_KIND": kind[mask]}
    if mask == "bool":
        d["MASK_DT"] = "U8"
    elif mask == "additive":
        d["MASK_DT"] = _token(mask_dtype, _FLOATS, "mask_dtype")
    return d


def _without_planner_keys(params: dict) -> dict:
    """``params`` without the planner's keys: what a variant is built with."""
    return {k: v for k, v in params.items() if k not in PLANNER_KEYS}


def quant(fmt: str, dtype: str = "float32", params: dict | None = None) -> Variant:
    """The Q8_0/Q4_0 variant: ``quantize`` reads ``dtype``, ``qmatmul`` reads and writes it."""
    if fmt not in KERNEL_FORMATS:
        raise ArgumentError(expected("fmt", f"one of {KERNEL_FORMATS}", repr(fmt)))
    p = _without_planner_keys(GPU_QMATMUL if params is None else params)
    t = _token(dtype, _FLOATS, "dtype")
    d = {f"FMT_{fmt.upper()}": 1, "IN_DT": t, "OUT_DT": t}
    names = ("quantize", "dequantize", "qmatmul", "qgemv", "quantize_x8", "qmatmul_x8", "qgemv_x8")
    if "STREAM_ROWS" in p:
        names += ("qgemv_stream",)
    if "RUNS_WG" in p:
        names += ("qgemv_runs",)
    return Variant("quant.cl", names, {**d, **p}, _dialects(p))


def kquant(fmt: str, dtype: str = "float32", params: dict | None = None) -> Variant:
    """The kquant.cl variant of a K-quant / mxfp4 / q8_k format: ``quantize_k``, ``qmatmul_k``
    and ``qgemv_k`` read x in ``dtype``, ``qmatmul_k``, ``qgemv_k`` and ``qmatmul_kx`` (x
    quantized to the format's vec_dot partner first; not q8_k) write it; ``dequantize_k`` writes
    float32. ``params`` tile ``qgemv_k`` (GPU_KGEMV's keys; default GPU_KGEMV), its USUB capped
    at the format's sub-blocks per block.

    >>> kquant("q4_k").kernels
    ('dequantize_k', 'qmatmul_k', 'qgemv_k', 'quantize_k', 'qmatmul_kx', 'qgemv_kx')
    >>> kquant("mxfp4", params=CPU_KGEMV).defines["USUB"]  # a block of 32 is one sub-block
    1
    """
    if fmt not in KQUANT_FORMATS:
        raise ArgumentError(expected("fmt", f"one of {KQUANT_FORMATS}", repr(fmt)))
    t = _token(dtype, _FLOATS, "dtype")
    p = _without_planner_keys(GPU_KGEMV if params is None else params)
    p["USUB"] = min(p.get("USUB", 1), get_format(fmt).block // 32)
    names = ("dequantize_k", "qmatmul_k", "qgemv_k", "quantize_k") + (
        () if fmt in ("q8_k", "q8_1") else ("qmatmul_kx",)) + (
        ("qgemv_kx",) if fmt in VECTOR_KX_FORMATS else ())
    return Variant("kquant.cl", names, {f"FMT_{fmt.upper()}": 1, "IN_DT": t, "OUT_DT": t, **p},
                   _dialects(p))


def codebook(fmt: str, dtype: str = "float32") -> Variant:
    """The codebook.cl variant of a codebook format: ``dequantize_cb`` (float32 out),
    ``qmatmul_cb`` (x and out in ``dtype``) and ``qmatmul_cbx`` (x quantized to q8_k, out in
    ``dtype``); all take the format's grid as a buffer (:func:`codebook_grid`).

    >>> codebook("iq2_xs").kernels
    ('dequantize_cb', 'qmatmul_cb', 'qmatmul_cbx')
    """
    if fmt not in CODEBOOK_FORMATS:
        raise ArgumentError(expected("fmt", f"one of {CODEBOOK_FORMATS}", repr(fmt)))
    return Variant("codebook.cl", ("dequantize_cb", "qmatmul_cb", "qmatmul_cbx"),
                   {f"FMT_{fmt.upper()}": 1, "IN_DT": _token(dtype, _FLOATS, "dtype"),
                    "CB_RM": CODEBOOK_ROWS})


def codebook_grid(fmt: str) -> np.ndarray:
    """The float32 grid codebook.cl's kernels read for ``fmt``, flat (gguf-py's, at run time)."""
    from accel.formats import codebook as cb

    return cb.grid(fmt).reshape(-1)


def scaled_matmul(a_dtype: str, b_dtype: str, params: dict | None = None) -> Variant:
    """The FP8 scaled-matmul variant (kernels/scaled_matmul.cl) for a and b in FP8 formats
    ``a_dtype`` and ``b_dtype``; the scaling, output and bias dtypes are kernel arguments
    (:func:`scalar_args`), so one build per pair serves them all.

    >>> v = scaled_matmul("float8_e4m3fn", "float8_e5m2")
    >>> v.kernels, v.defines["A_FP8"], v.defines["B_FP8"]
    (('scaled_matmul',), 'e4m3fn', 'e5m2')
    """
    p = dict(GPU_SCALED_MATMUL if params is None else params)
    d = {"A_FP8": _token_of(a_dtype, FP8_TOKEN, "a_dtype"), "B_FP8": _token_of(b_dtype, FP8_TOKEN, "b_dtype")}
    return Variant("scaled_matmul.cl", ("scaled_matmul",), {**d, **p}, _dialects(p))


def scaled_matmul_mma(a_dtype: str, b_dtype: str) -> Variant:
    """The FP8 tensor-core scaled matmul (kernels/scaled_matmul_mma.cu: mma.sync, sm_89 and
    later) for a and b in e4m3fn or e5m2; the same arguments as :func:`scaled_matmul`, so the
    scaling, output and bias dtypes are kernel arguments here too. Kernels:
    ``scaled_matmul_mma`` (any shape) and ``scaled_matmul_mma_vec`` (K and N multiples of 16, a
    and b 16-byte aligned).

    >>> v = scaled_matmul_mma("float8_e5m2", "float8_e4m3fn")
    >>> v.defines["A_FP8"], v.nvidia_target("sm_90"), v.nvidia_target("sm_86"), v.dynamic_local_bytes
    ('e5m2', 'sm_90', None, 81920)
    """
    return Variant("scaled_matmul_mma.cu", ("scaled_matmul_mma", "scaled_matmul_mma_vec"),
                   {**_mma_fp8(a_dtype, b_dtype), **GPU_SCALED_MATMUL_MMA}, ("cuda",),
                   sm_range=(89, SM_ANY_LATER))


def scaled_matmul_wgmma(a_dtype: str, b_dtype: str) -> Variant:
    """The FP8 scaled matmul on Hopper's wgmma (``scaled_matmul_wgmma`` in
    kernels/scaled_matmul_mma.cu, built for sm_90a; sm_90 devices only) for a and b in e4m3fn or
    e5m2, K and N multiples of 16, a and b 16-byte aligned (the backend routes other cases to
    :func:`scaled_matmul_mma`); the same arguments.

    >>> v = scaled_matmul_wgmma("float8_e4m3fn", "float8_e4m3fn")
    >>> v.nvidia_target("sm_90"), v.nvidia_target("sm_89"), v.dynamic_local_bytes
    ('sm_90a', None, 164864)
    """
    return Variant("scaled_matmul_mma.cu", ("scaled_matmul_wgmma",),
                   {**_mma_fp8(a_dtype, b_dtype), **GPU_SCALED_MATMUL_WGMMA, "WGMMA": 1}, ("cuda",),
                   sm_range=(90, 90), arch_suffix="a")


def _mma_fp8(a_dtype: str, b_dtype: str) -> dict:
    tokens = {t: FP8_TOKEN[t] for t in MMA_FP8_DTYPES}
    return {"A_FP8": _token_of(a_dtype, tokens, "a_dtype"), "B_FP8": _token_of(b_dtype, tokens, "b_dtype")}


#: the one build of kernels/copy.cl: every dtype comes as an argument
COPY = Variant("copy.cl", ("strided_copy",), {})
#: kernels/decoder.cl's kernels (accel.nn's decoder-step ops), as the source declares them
DECODER_KERNELS = tuple(re.findall(r"^KERNEL void (\w+)\(", (Path(__file__).parent / "decoder.cl").read_text(), re.M))


@cache
def decoder(dtype: str = "float32") -> Variant:
    """kernels/decoder.cl for ``dtype`` operands and output (float32 arithmetic).

    >>> decoder("bfloat16").id
    'decoder.cl[IN_DT=BF16]'
    """
    return Variant("decoder.cl", DECODER_KERNELS, {"IN_DT": _token(dtype, _FLOATS, "dtype")})


def _scaled_matmul_variants() -> list[Variant]:
    """Every format pair accel.spec allows, on GPU and on CPU parameters."""
    e4, e5, fnuz = "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"
    pairs = ((e4, e4), (e4, e5), (e5, e4), (fnuz, fnuz))
    return [scaled_matmul(a, b, params) for params in (GPU_SCALED_MATMUL, CPU_SCALED_MATMUL) for a, b in pairs] + \
        [build(a, b) for build in (scaled_matmul_mma, scaled_matmul_wgmma) for a, b in pairs
         if a in MMA_FP8_DTYPES]


@cache
def variants() -> tuple[Variant, ...]:
    """Every kernel variant accel ships: what ``accel kernels check`` compiles per target.

    >>> import accel.kernels as K
    >>> all(v.source in K.SOURCES for v in K.variants())
    True
    """
    out: list[Variant] = []
    for params in (GPU_MATMUL, CPU_MATMUL):
        out += [matmul(i, o, params) for i in _FLOATS for o in _FLOATS]
        out.append(matmul("int8", "int32", params))
    out += [matmul_wmma(i, o) for i in ("float16", "bfloat16") for o in _FLOATS]
    out += [matmul_wgmma(i, o) for i in ("float16", "bfloat16") for o in _FLOATS]
    for params in (GPU_ATTENTION, CPU_ATTENTION):
        for dt in _FLOATS:
            for d in (64, 128):
                out.append(attention(dt, d, d, params=params))
        out.append(attention("float32", 64, 64, "bool", params=params))
        out += [attention("float16", 64, 64, "additive", m, params=params) for m in _FLOATS]
        out.append(attention("bfloat16", 256, 256, "bool", params=params, sinks=True))  # gpt-oss, Gemma
    out += [attention_mma(dt, d, dv) for dt in ("float16", "bfloat16")
            for d in ATTENTION_MMA_HEAD_DIMS for dv in ATTENTION_MMA_HEAD_DIMS]
    out.append(attention_mma("bfloat16", 64, 64, "bool"))
    out += [attention_mma("float16", 64, 64, "additive", m) for m in _FLOATS]
    for params in (GPU_QMATMUL, GPU_GEMV, CPU_QMATMUL, CPU_GEMV):
        out += [quant(f, dt, params) for f in KERNEL_FORMATS for dt in _FLOATS]
    out += [kquant(f, dt, p) for p in (GPU_KGEMV, CPU_KGEMV) for f in KQUANT_FORMATS for dt in _FLOATS]
    out += [codebook(f) for f in CODEBOOK_FORMATS] + [codebook("iq2_xxs", dt) for dt in _FLOATS[1:]]
    out += _scaled_matmul_variants()
    out += [COPY] + [decoder(dt) for dt in _FLOATS]
    return tuple(dict.fromkeys(out))
