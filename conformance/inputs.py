"""Turning a case into its op spec and host inputs (already rounded to the case's dtypes).

Every data generator is a pure function of the case parameters and ``params["seed"]``. The
generators that target a defect say which one in their docstring.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from accel import spec as S
from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, expected
from accel.formats import BLOCK, get_format

from accel.conformance.case import Case

_PRECISION_BITS = {"float32": 24, "float16": 11, "bfloat16": 8}


def _subnormal(dtype: str) -> float:
    """A value well inside the subnormal range of ``dtype``."""
    info = ml_dtypes.finfo(to_numpy_dtype(dtype))
    return float(info.smallest_normal) / 8


def exact_int_range(out_dtype: str, K: int) -> int:
    """Largest r such that every partial sum of K products of integers in [-r, r] is an exact
    integer in the output format and in any accumulator at least as precise as float16."""
    limit = 2 ** min(_PRECISION_BITS[out_dtype], 11)
    return max(1, math.isqrt(limit // K))


def _place(x: np.ndarray, rng: np.random.Generator, values: list[float]) -> None:
    """Write ``values`` at distinct random positions of x (in place)."""
    flat = x.reshape(-1)
    for pos, value in zip(rng.choice(flat.size, size=min(len(values), flat.size), replace=False),
                          values):
        flat[pos] = value


# -- matmul ----------------------------------------------------------------------------------
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
        _place(a, rng, [np.nan])
        _place(b, rng, [np.nan])
        return a, b
    if data == "inf":  # +-Inf times numbers, and Inf times zero (NaN)
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        _place(a, rng, [np.inf, -np.inf])
        _place(b, rng, [0.0, 0.0, np.inf])
        return a, b
    if data == "negzero":
        a = np.where(rng.random(a_shape) < 0.5, -0.0, 0.0)
        return a, rng.standard_normal(b_shape)
    if data == "subnormal":  # subnormal inputs of the case's dtype next to normal ones
        tiny = _subnormal(spec.dtype)
        a = rng.integers(1, 8, a_shape) * tiny * np.where(rng.random(a_shape) < 0.5, -1, 1)
        return a, rng.standard_normal(b_shape)
    if data == "overflow":  # finite inputs whose products sum past the output format's range
        return rng.uniform(200, 250, a_shape), rng.uniform(200, 250, b_shape)
    raise ArgumentError(expected("data", "a matmul data generator", repr(data)))


# -- attention -------------------------------------------------------------------------------
def _attention(case: Case, rng: np.random.Generator):
    p = case.params
    mask_kind = p.get("mask")
    mask_shape = p.get("mask_shape") if mask_kind else None
    mask_dtype = {"bool": "bool", "additive": p.get("mask_dtype") or case.dtype}.get(mask_kind)
    sinks = p.get("sinks")  # None, or where the sink logits sit against the row's logits
    Hq = p["q"][1]
    spec = S.attention_spec(p["q"], p["k"], p["v"], (case.dtype,) * 3, p.get("causal", False),
                            p.get("scale"), mask_shape, mask_dtype, p.get("window"),
                            p.get("softcap"), None if sinks is None else (Hq,),
                            None if sinks is None else "float32")
    q, k, v = (rng.standard_normal(p[n]) for n in ("q", "k", "v"))
    data = p["data"]
    if data == "equal":  # every logit 0: uniform weights, output = mean of the visible v rows
        q = np.zeros(p["q"])
        v = rng.integers(-4, 5, p["v"]).astype(np.float64)
    elif data == "rounding":  # as "equal", with means of up to 12 significant bits (16 keys
        # of |v| <= 255, exact in every input format): the output conversion rounds them
        q = np.zeros(p["q"])
        v = rng.integers(-255, 256, p["v"]).astype(np.float64)
    elif data == "large":  # logits ~ +-1e4: an unstabilised softmax overflows
        q, k = q * 100, k * 100
    elif data == "nan_q":
        _place(q, rng, [np.nan])
    elif data == "nan_v":
        _place(v, rng, [np.nan])
    elif data != "normal":
        raise ArgumentError(expected("data", "an attention data generator", repr(data)))
    dt = to_numpy_dtype(case.dtype)
    inputs = [q.astype(dt), k.astype(dt), v.astype(dt)]
    if mask_kind:
        inputs.append(_mask(spec, mask_kind, p.get("mask_data", "random"), rng))
    if sinks is not None:  # after the mask's slot (None when there is no mask)
        inputs += [None] * (4 - len(inputs)) + [_sinks(sinks, Hq, rng)]
    return spec, inputs


def _sinks(data: str, Hq: int, rng: np.random.Generator) -> np.ndarray:
    """One sink logit per query head: "normal" among the logits (~N(0, D) unscaled, so around
    +-1 after 1/sqrt(D)), "above" far above them (the output tends to 0), "below" far below
    (no effect), "mixed" heads of each kind plus an infinite one of either sign."""
    if data == "normal":
        return rng.standard_normal(Hq).astype(np.float32)
    if data == "above":
        return np.full(Hq, 60.0, np.float32)
    if data == "below":
        return np.full(Hq, -60.0, np.float32)
    if data == "mixed":
        return np.resize(np.array([0.5, 40.0, -40.0, -np.inf, 3.0], np.float32), Hq)
    raise ArgumentError(expected("sinks", "a sinks data generator", repr(data)))


def _mask(spec: S.AttentionSpec, kind: str, data: str, rng) -> np.ndarray:
    shape = spec.mask_shape
    keep = rng.random(shape) < 0.75
    if data == "pow2":  # exactly 4 visible keys per row: the exact-answer mask
        keep = np.argsort(rng.random(shape), axis=-1) < 4
    elif data == "dead_rows":  # some rows see no key at all: their output is defined as zeros
        if keep.ndim >= 2:
            keep[..., ::2, :] = False
        else:  # a per-key mask hides the same keys from every row
            keep[:] = False
    if kind == "bool":
        return keep
    values = np.where(keep, rng.standard_normal(shape) * 2, -np.inf)
    if data == "random":
        values[..., 0] = 0.0  # random additive masks keep a key per row (dead rows tested apart)
    return values.astype(to_numpy_dtype(spec.mask_dtype))


# -- quantization ------------------------------------------------------------------------------
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
        _place(x, rng, [_subnormal(case.dtype), -_subnormal(case.dtype)])
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
            _place(x, rng, [np.nan] if data == "nan" else [np.inf, -np.inf])
        elif data != "normal":
            raise ArgumentError(expected("data", "a qmatmul data generator", repr(data)))
    return spec, [x.astype(to_numpy_dtype(case.dtype)), raw.reshape(N, f.row_bytes(K))]


# -- FP8 scaled matmul ----------------------------------------------------------------------------
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
        _place(out.view(np.uint8), rng, codes)
    elif data == "inf" and dtype == "float8_e5m2":  # only e5m2 has infinities
        _place(out.view(np.uint8), rng, [0x7C, 0xFC])
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


_BUILDERS = {"matmul": _matmul, "attention": _attention, "quantize": _quantize,
             "dequantize": _dequantize, "qmatmul": _qmatmul, "scaled_matmul": _scaled_matmul}


class _ReadKeys(dict):
    """A case's params that remember which keys the builder read."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.read: set = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def unread_params(case: Case) -> list[str]:
    """The parameters of ``case`` that its op's builder never reads: in a hand-written ``--case``
    id, a mistyped key (``causl=true``) would otherwise run another case and pass."""
    from accel.conformance import decoder_ops

    params = _ReadKeys(case.params)
    if case.op in decoder_ops.OPS:  # their runner reads the parameters (run on the reference)
        from accel.registry import get_backend

        decoder_ops.run(get_backend("cpu"), Case(case.op, case.dtype, case.kind, params))
    else:
        build(Case(case.op, case.dtype, case.kind, params))
    return [k for k in case.params if k not in params.read]


def build(case: Case):
    """(spec, host inputs) for a case; raises an AccelError for parameters the spec rejects."""
    if case.op not in _BUILDERS:
        raise ArgumentError(expected("op", f"one of {sorted(_BUILDERS)}", repr(case.op)))
    rng = np.random.default_rng(case.params.get("seed", 0))
    try:
        return _BUILDERS[case.op](case, rng)
    except (KeyError, TypeError, ValueError) as e:  # a hand-written --case id missing a parameter
        raise ArgumentError(expected("case", f"the parameters a {case.op} case needs (as in a "
                                     "printed repro id)", f"{case.id!r} ({type(e).__name__}: {e})")) from None
