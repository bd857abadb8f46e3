"""The decoder-step ops' rows (``accel.nn``: rms_norm, layer_norm, rope, softmax, glu, silu, gelu,
get_rows, add, mul) on a backend: each case builds host inputs from its id, runs the public op on
``accel.Tensor`` s of the backend (so device kernels run where the backend has them), and holds
the result to a float64 oracle written here, sharing no code with ``accel.nn``.

Bounds (u: the unit roundoff of float32; every bound adds the rounding to the output format, half an
ulp, or its subnormal spacing where the result is that small):
- add, mul: one rounding of the exact result: exactly the float64 result rounded to the dtype;
- rms_norm: a sum of D squares (any order: D u), a square root and a division: (D/2 + 8) u |y|;
- layer_norm: the mean and the variance sums (D u each), relative to |x - mean| / sigma:
  (D + 8) u (|x| + |mean|) / sigma |w| + (8 u) |b|;
- rope: the cos / sin tables are the float64 angle's, rounded once (accel takes the angles in
  float64, so the bound does not grow with the position), then two products and a sum: 4 u
  (|x_i| + |x_partner|);
- softmax: exp of each logit less the row's maximum (relative 4 u, plus the logit's rounding
  times its size), a sum of n terms (n u) and a division: ((n + 8) u + 2 u |s - max|) |p|;
- glu: the activation (a few ulps of g; gelu_tanh's 1 + tanh(z) cancels to an ulp of 1, i.e.
  u |g|) times up: 16 u |g| |up|. erf GELU, 0.5 g (1 + erf(g / sqrt 2)): an erf off by e ulps is
  off by at most e u (|erf| < 1); g times a rounded 1/sqrt 2 is off by 2 u relative, which moves
  erf by at most 2 u max(erf'(z) z) < 0.97 u; 1 + erf rounds by u; those times |g| / 2, then the
  two products' roundings (u |g| each, |gelu| <= |g|) and |up|: (e / 2 + 3) u |g| |up|, inside
  16 u for OpenCL's erf limit of 16 ulps (CUDA's erff: 2; PoCL's: under 1);
- silu, gelu: glu's activation with up = 1 (the same derivation, every activation): 16 u |x|. At
  +-inf the oracle is the formula's own IEEE arithmetic, as torch's erf and tanh GELU at -inf:
  +inf at +inf, NaN at -inf (-inf times the 0 of 1 + erf); far out (|x| up to 1e30, past where
  float32's tanh and erf reach +-1) the tanh form must not leave g times a residue;
- get_rows: exactly the table's rows (a quantized table: exactly its dequantized rows).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import numpy as np

from accel.conformance.case import Case
from accel.dtypes import to_numpy_dtype
from accel.formats import FORMATS
from accel import spec as S
from accel.conformance.compare import Verdict, compare_values
from accel.conformance.ops.common import FLOATS, OpInfo

U = 2.0 ** -24

_HALF_U = {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}

#: the spacing of each format's subnormals: below its normal range a rounding is absolute
_TINY = {"float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}

def _out(dtype: str, want: np.ndarray) -> np.ndarray:
    """The rounding of a result to the output's format (nothing more for float32 but its
    subnormal spacing)."""
    return _HALF_U[dtype] * np.abs(want) + _TINY[dtype]

def _data(rng, shape: tuple[int, ...], data: str, dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape) * 2
    if data == "zeros":
        x[...] = 0
    elif data == "nan":
        x.reshape(-1)[:: max(1, x.size // 3)] = np.nan
    elif data == "inf":
        x.reshape(-1)[:: max(1, x.size // 3)] = np.inf
    elif data == "large":
        x *= 1e3
    return x.astype(to_numpy_dtype(dtype))

# -- the ops: cases(profile) -> (kind, params); check(op, case, rng) -> (got, want, bound)
def _norm_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for shape in [(1, 64), (3, 5, 640), (2, 256)] + ([(4, 4096), (2, 80)] if profile == "full" else []):
        for w in (True, False):
            yield "grid", {"shape": shape, "weight": w, "data": "normal"}
    for data in ("zeros", "nan", "inf", "large"):
        yield "special", {"shape": (3, 64), "weight": True, "data": data}
    yield "special", {"shape": (2, 64), "weight": True, "data": "zeros", "eps": 0.0}
    yield "special", {"shape": (2, 64), "weight": False, "data": "normal", "eps": 0.0}

def _rms_norm_inputs(case, rng) -> list:
    p = case.params
    x = _data(rng, p["shape"], p["data"], case.dtype)
    return [x, rng.standard_normal(p["shape"][-1]).astype(x.dtype) if p["weight"] else None]

def _rms_norm_spec(case, inputs):
    x, w = inputs
    return S.norm_spec("rms_norm", x.shape, case.dtype, case.params.get("eps", 1e-6),
                       *_shape_dtype(w, case.dtype))

def _rms_norm(case, inputs):
    p = case.params
    x, w = inputs
    eps = p.get("eps", 1e-6)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        y = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + eps)
        want = y * (w.astype(np.float64) if w is not None else 1.0)
    D = p["shape"][-1]
    return want, (D / 2 + 8) * U * np.abs(want) + _out(case.dtype, want)

def _layer_norm_inputs(case, rng) -> list:
    p = case.params
    x = _data(rng, p["shape"], p["data"], case.dtype)
    D = p["shape"][-1]
    w = rng.standard_normal(D).astype(x.dtype) if p["weight"] else None
    b = rng.standard_normal(D).astype(x.dtype) if p["weight"] else None
    return [x, w, b]

def _layer_norm_spec(case, inputs):
    x, w, b = inputs
    return S.norm_spec("layer_norm", x.shape, case.dtype, case.params.get("eps", 1e-5),
                       *_shape_dtype(w, case.dtype), *_shape_dtype(b, case.dtype))

def _layer_norm(case, inputs):
    x, w, b = inputs
    D, eps = x.shape[-1], case.params.get("eps", 1e-5)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        mu = xd.mean(-1, keepdims=True)
        sd = np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + eps)
        wd = w.astype(np.float64) if w is not None else 1.0
        bd = b.astype(np.float64) if b is not None else 0.0
        want = (xd - mu) / sd * wd + bd
        mag = (np.abs(xd) + np.abs(mu)) / sd * np.abs(wd)
    return want, (D + 8) * U * mag + 8 * U * np.abs(bd) + _out(case.dtype, want)

def _rope_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for D, r, inter in [(64, 64, False), (64, 64, True), (80, 32, False), (256, 256, False)]:
        yield "grid", {"shape": (1, 2, 5, D), "rotary_dim": r, "interleaved": inter, "pos": 0,
                       "data": "normal"}
    for p0 in (2 ** 15 - 3, 2 ** 17 - 2) + ((2 ** 24 + 1, 2 ** 30) if profile == "full" else ()):
        yield "special", {"shape": (2, 1, 3, 64), "rotary_dim": 64, "interleaved": False,
                          "pos": p0, "data": "normal"}
    yield "special", {"shape": (1, 1, 4, 64), "rotary_dim": 64, "interleaved": False, "pos": 7,
                      "freq_scale": 0.25, "factors": True, "base": 1e6, "data": "normal"}
    yield "special", {"shape": (1, 2, 3, 64), "rotary_dim": 64, "interleaved": True, "pos": 3,
                      "data": "nan"}

def _rope(op, case, rng):
    p = case.params
    B, H, S, D = p["shape"]
    x = _data(rng, p["shape"], p["data"], case.dtype)
    pos = np.arange(p["pos"], p["pos"] + S, dtype=np.int64)
    r, base, fs = p["rotary_dim"], p.get("base", 10000.0), p.get("freq_scale", 1.0)
    ff = (1.0 + rng.random(r // 2) * 3).astype(np.float32) if p.get("factors") else None
    got = op("rope", x, pos, base=base, rotary_dim=r, interleaved=p["interleaved"],
             freq_scale=fs, freq_factors=ff)
    xd = x.astype(np.float64)
    i = np.arange(r // 2)
    theta = pos[:, None] * fs * base ** (-2.0 * i / r)
    if ff is not None:
        theta = theta / ff.astype(np.float64)
    c, s = np.cos(theta), np.sin(theta)
    if p["interleaved"]:
        a, b = xd[..., 0:r:2], xd[..., 1:r:2]
    else:
        a, b = xd[..., : r // 2], xd[..., r // 2: r]
    ya, yb = a * c - b * s, a * s + b * c
    want = xd.copy()
    if p["interleaved"]:
        want[..., 0:r:2], want[..., 1:r:2] = ya, yb
    else:
        want[..., : r // 2], want[..., r // 2: r] = ya, yb
    pair = np.zeros_like(xd)
    pair[..., :r] = 1
    mag = np.abs(xd).copy()
    if p["interleaved"]:
        mag[..., 0:r:2] = mag[..., 1:r:2] = np.abs(a) + np.abs(b)
    else:
        mag[..., : r // 2] = mag[..., r // 2: r] = np.abs(a) + np.abs(b)
    return got, want, 4 * U * mag * pair + _out(case.dtype, want)

def _softmax_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for shape in [(1, 8), (4, 1000), (2, 3, 64)] + ([(2, 262144)] if profile == "full" else []):
        yield "grid", {"shape": shape, "scale": 1.0, "mask": "off", "data": "normal"}
    yield "grid", {"shape": (3, 50), "scale": 0.125, "mask": "bool", "data": "normal"}
    yield "grid", {"shape": (3, 50), "scale": 1.0, "mask": "additive", "data": "normal"}
    # masks repeated along x's leading dims, as attention's: [Sq, Sk] and [1, 1, Sq, Sk]
    yield "grid", {"shape": (2, 3, 5, 40), "scale": 0.125, "mask": "additive",
                   "mask_shape": (5, 40), "data": "normal"}
    yield "grid", {"shape": (2, 3, 5, 40), "scale": 1.0, "mask": "bool",
                   "mask_shape": (1, 1, 5, 40), "data": "normal"}
    # ... and broadcast along middle dims, as transformers' masks: [B, 1, Sq, Sk], [B, 1, 1, Sk]
    yield "grid", {"shape": (2, 3, 5, 40), "scale": 0.125, "mask": "additive",
                   "mask_shape": (2, 1, 5, 40), "data": "normal"}
    yield "grid", {"shape": (2, 3, 5, 40), "scale": 1.0, "mask": "bool",
                   "mask_shape": (2, 1, 1, 40), "data": "normal"}
    yield "special", {"shape": (3, 16), "scale": 1.0, "mask": "all_masked", "data": "normal"}
    yield "special", {"shape": (2, 16), "scale": 1.0, "mask": "off", "data": "nan"}
    yield "special", {"shape": (2, 16), "scale": 1.0, "mask": "off", "data": "large"}

def _softmax_inputs(case, rng) -> list:
    p = case.params
    x = _data(rng, p["shape"], p["data"], case.dtype)
    ms = p.get("mask_shape", p["shape"])
    mask = None
    if p["mask"] in ("bool", "all_masked"):
        mask = rng.random(ms) < 0.7
        mask[..., 0] = True
        if p["mask"] == "all_masked":
            mask[0] = False
    if p["mask"] == "additive":
        mask = (rng.standard_normal(ms) * 2).astype(np.float32)
    return [x, mask]

def _softmax_spec(case, inputs):
    x, mask = inputs
    mask_dtype = None if mask is None else "bool" if mask.dtype == bool else "float32"
    return S.softmax_spec(x.shape, case.dtype, case.params["scale"],
                          None if mask is None else mask.shape, mask_dtype)

def _softmax(case, inputs):
    p = case.params
    x, mask = inputs
    n = x.shape[-1]
    keep = mask if mask is not None and mask.dtype == bool else np.ones(x.shape, bool)
    add = mask.astype(np.float64) if mask is not None and mask.dtype != bool else 0.0
    with np.errstate(all="ignore"):
        s = x.astype(np.float64) * p["scale"] + add
        s = np.where(keep, s, -np.inf)
        m = s.max(-1, keepdims=True)
        dead = m == -np.inf
        e = np.exp(s - np.where(dead, 0, m))
        want = np.where(dead, 0.0, e / e.sum(-1, keepdims=True))
        bound = ((n + 8) * U + 2 * U * np.abs(np.where(keep, s - m, 0))) * np.abs(want)
    return want, bound + _out(case.dtype, want)

def _glu_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for act in ("silu", "gelu_tanh", "gelu"):
        for split in (False, True):
            yield "grid", {"shape": (3, 64), "activation": act, "split": split, "data": "normal"}
        yield "special", {"shape": (2, 32), "activation": act, "split": False, "data": "large"}
        yield "special", {"shape": (2, 32), "activation": act, "split": False, "data": "nan"}
    if profile == "full":
        yield "grid", {"shape": (64, 2048), "activation": "gelu_tanh", "split": False, "data": "normal"}

def _glu_inputs(case, rng) -> list:
    p = case.params
    g = _data(rng, p["shape"], p["data"], case.dtype)
    u = rng.standard_normal(p["shape"]).astype(g.dtype)
    if p["split"]:  # one operand: the gate and up halves of each row
        return [np.ascontiguousarray(np.concatenate([g, u], axis=-1)), None]
    return [g, u]

def _glu_spec(case, inputs):
    gate, up = inputs
    return S.activation_spec("glu", gate.shape, case.dtype, case.params["activation"],
                             *_shape_dtype(up, case.dtype))

def _glu(case, inputs):
    p = case.params
    g, u = inputs
    if u is None:
        h = g.shape[-1] // 2
        g, u = g[..., :h], g[..., h:]
    gd, ud = g.astype(np.float64), u.astype(np.float64)
    with np.errstate(all="ignore"):
        want = _activation64(p["activation"], gd) * ud
        bound = 16 * U * np.abs(gd) * np.abs(ud) + _out(case.dtype, want)
    return want, bound

#: the activations of silu and gelu, by name (a case id reads "none" back as None: gelu's
#: approximate="none" is "gelu", "tanh" is "gelu_tanh")
_UNARY = {"silu": ("silu",), "gelu": ("gelu", "gelu_tanh")}

def _unary_cases(op: str) -> Callable[[str], Iterator[tuple[str, dict]]]:
    def cases(profile: str) -> Iterator[tuple[str, dict]]:
        for activation in _UNARY[op]:
            yield from _activation_cases(profile, activation)
    return cases

def _activation_cases(profile: str, activation: str) -> Iterator[tuple[str, dict]]:
    for shape in [(3, 64), (1, 1000)] + ([(64, 4096)] if profile == "full" else []):
        yield "grid", {"shape": shape, "activation": activation, "data": "normal"}
    for data in ("zeros", "large", "far", "nan", "infs"):
        yield "special", {"shape": (4, 32), "activation": activation, "data": data}

#: |x| far out, both signs: past where float32's erf(x / sqrt 2) and tanh reach +-1 (|x| > 5.5)
_FAR = (9.0, 30.0, 1e4, 1e13, 1e30)

def _unary_inputs(case, rng) -> list:
    p = case.params
    data = {"far": "normal", "infs": "inf"}.get(p["data"], p["data"])
    x = _data(rng, p["shape"], data, case.dtype)
    flat = x.reshape(-1)
    if p["data"] == "far":  # every far value with both signs, then the normal draws
        far = np.array(_FAR + tuple(-v for v in _FAR))[: flat.size]  # as many as fit
        flat[:far.size] = far.astype(x.dtype)
    elif p["data"] == "infs":  # -inf too (_data's "inf" plants +inf only), and -0
        flat[1:: max(1, x.size // 3)] = -np.inf
        flat[2 % flat.size] = -0.0
    return [x]

def _unary_spec(case, inputs):
    return S.activation_spec(case.op, inputs[0].shape, case.dtype, case.params["activation"])

def _activation64(name: str, x: np.ndarray) -> np.ndarray:
    """glu's, silu's and gelu's activation ``name`` of float64 ``x``, in float64 (call under
    np.errstate: +-inf and far-out values take the formula's IEEE arithmetic)."""
    if name == "silu":
        return x / (1 + np.exp(-x))
    if name == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))

def _unary(case, inputs):
    p = case.params
    xd = inputs[0].astype(np.float64)
    with np.errstate(all="ignore"):
        want = _activation64(p["activation"], xd)
        bound = 16 * U * np.abs(xd) + _out(case.dtype, want)
    return want, bound

#: get_rows' tables in the full profile: float, and every weight format of accel.formats' table
#: but the codebook family's (its quantize is ggml's grid search: seconds a table in numpy;
#: tests/accel gathers its rows), gathered as quantized rows; the quick profile takes the first
#: format of each family (each a dequantize kernel to build per device)
_TABLES = ("float", *(name for name, f in FORMATS.items() if not f.activation_only and f.family != "codebook"))
_QUICK_TABLES = ("float", *sorted({FORMATS[t].family: t for t in reversed(_TABLES[1:])}.values(), key=_TABLES.index))


def _get_rows_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for table in _TABLES if profile == "full" else _QUICK_TABLES:
        yield "grid", {"rows": 40, "cols": 256, "table": table, "ids": (7,), "data": "normal"}
    yield "grid", {"rows": 5, "cols": 64, "table": "float", "ids": (2, 3), "data": "normal"}
    yield "special", {"rows": 3, "cols": 64, "table": "float", "ids": (4,), "data": "nan"}
    if profile == "full":  # an embedding table's size class: many rows, many ids, two dims of ids
        for table in _TABLES[:3]:
            yield "grid", {"rows": 3000, "cols": 640, "table": table, "ids": (4, 96), "data": "normal"}

def _get_rows(op, case, rng):
    import accel

    p = case.params
    x = _data(rng, (p["rows"], p["cols"]), p["data"], case.dtype)
    ids = rng.integers(0, p["rows"], p["ids"]).astype(np.int32)
    if p["table"] == "float":
        got = op("get_rows", x, ids)
        return got, x.astype(np.float64)[ids], None
    q = accel.quantize(x.astype(np.float32), p["table"], backend="cpu")
    from accel.conformance import oracle

    rows = oracle.dequantize(np.asarray(q.raw), p["table"], (p["rows"], p["cols"]))
    got = op("get_rows", q, ids)
    return got, rows[ids], None

def _binary_cases(profile: str) -> Iterator[tuple[str, dict]]:
    for a, b in [((4, 64), (4, 64)), ((3, 1, 64), (5, 64)), ((2, 7), (7,)), ((1,), (6, 6))]:
        yield "grid", {"a": a, "b": b, "data": "normal"}
    yield "special", {"a": (4, 8), "b": (4, 8), "data": "nan"}
    yield "special", {"a": (4, 8), "b": (8,), "data": "inf"}
    yield "special", {"a": (4, 8), "b": (4, 8), "data": "large"}

def _binary_inputs(case, rng) -> list:
    p = case.params
    return [_data(rng, p["a"], p["data"], case.dtype), _data(rng, p["b"], "normal", case.dtype)]

def _binary_spec(case, inputs):
    a, b = inputs
    return S.binary_spec(case.op, a.shape, case.dtype, b.shape, case.dtype)

def _binary(case, inputs):
    a, b = inputs
    with np.errstate(all="ignore"):
        exact = a.astype(np.float64) + b if case.op == "add" else a.astype(np.float64) * b
        want = exact.astype(to_numpy_dtype(case.dtype)).astype(np.float64)  # one rounding
    return want, None

def _caller(backend) -> Callable:
    """``op(name, *args, **kw)``: the public op on the args as Tensors of ``backend`` (numpy
    arrays uploaded, QTensors moved there, ids int32), the result downloaded."""
    import accel
    from accel.tensor import QTensor, Tensor

    def up(a: Any) -> Any:
        if a is None or isinstance(a, (float, int, bool, str)):
            return a
        if isinstance(a, QTensor):
            return a.to(backend)
        return Tensor.from_host(backend, np.ascontiguousarray(a))

    def op(name: str, *args: Any, **kw: Any) -> np.ndarray:
        if name == "rope":  # positions and freq_factors as the host arrays they are
            x, pos = args
            out = accel.rope(up(x), pos, **kw)
        else:
            kw = {k: (up(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
            out = getattr(accel, name)(*(up(a) for a in args), **kw)
        return np.asarray(out.numpy() if isinstance(out, Tensor) else out)
    return op

# -- property search
def _norm_strategy(dtype: str):
    from hypothesis import strategies as st

    @st.composite
    def params(draw) -> dict:
        lead = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
        return {"shape": lead + (draw(st.integers(1, 700)),), "weight": draw(st.booleans()),
                "data": draw(st.sampled_from(["normal", "zeros", "large"]))}

    return params()

def _rope_strategy(dtype: str):
    from hypothesis import strategies as st

    @st.composite
    def params(draw) -> dict:
        D = 2 * draw(st.integers(1, 80))
        return {"shape": (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 6)), D),
                "rotary_dim": 2 * draw(st.integers(1, D // 2)), "interleaved": draw(st.booleans()),
                "pos": draw(st.integers(0, 2**17)), "data": "normal"}

    return params()

def _softmax_strategy(dtype: str):
    from hypothesis import strategies as st

    @st.composite
    def params(draw) -> dict:
        lead = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=2)))
        return {"shape": lead + (draw(st.integers(1, 3000)),), "scale": draw(st.sampled_from([1.0, 0.125, 4.0])),
                "mask": draw(st.sampled_from(["off", "bool", "additive"])), "data": "normal"}

    return params()

def _glu_strategy(dtype: str):
    from hypothesis import strategies as st

    @st.composite
    def params(draw) -> dict:
        return {"shape": (draw(st.integers(1, 5)), draw(st.integers(1, 300))),
                "activation": draw(st.sampled_from(["silu", "gelu_tanh", "gelu"])),
                "split": draw(st.booleans()), "data": draw(st.sampled_from(["normal", "large"]))}

    return params()

def _unary_strategy(op: str) -> Callable:
    def strategy(dtype: str):
        from hypothesis import strategies as st

        @st.composite
        def params(draw) -> dict:
            lead = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
            return {"shape": lead + (draw(st.integers(1, 700)),),
                    "activation": draw(st.sampled_from(list(_UNARY[op]))),
                    "data": draw(st.sampled_from(["normal", "large", "far"]))}

        return params()
    return strategy

def _binary_strategy(dtype: str):
    from hypothesis import strategies as st

    @st.composite
    def params(draw) -> dict:
        shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
        other = tuple(d if draw(st.booleans()) else 1 for d in shape)[draw(st.integers(0, len(shape) - 1)):]
        a, b = (shape, other) if draw(st.booleans()) else (other, shape)
        return {"a": a, "b": b, "data": draw(st.sampled_from(["normal", "large"]))}

    return params()

def _through_public_op(check: Callable) -> Callable[[Any, Case], tuple[bool, dict, str]]:
    """``run_public`` of a row: (ok, stats, reason) of a case on a backend, ``check`` giving the
    public op's result, the float64 answer and the bound."""
    def run(backend, case: Case) -> tuple[bool, dict, str]:
        rng = np.random.default_rng(case.params.get("seed", 0))
        got, want, bound = check(_caller(backend), case, rng)
        if got.shape != want.shape:
            return False, {}, f"shape {got.shape}, expected {want.shape}"
        fmt = case.dtype if case.op != "get_rows" else "float32"
        v = compare_values(got, want, bound, fmt)
        return v.ok, v.stats, v.reason
    return run


def _row(name: str, dtypes: tuple[str, ...], cases: Callable, check: Callable,
         strategy: Callable | None) -> OpInfo:
    """A row of an op without a spec yet (rope, get_rows): the case through the public op."""
    return OpInfo(name, dtypes, lambda dtype, profile: cases(profile), strategy,
                  run_public=_through_public_op(check))


def _spec_row(name: str, dtypes: tuple[str, ...], cases: Callable, inputs: Callable,
              spec_of: Callable, oracle: Callable, strategy: Callable | None) -> OpInfo:
    """A row of a decoder-step op that is a spec: ``inputs(case, rng)`` the host operands in
    the spec's operand order, ``spec_of(case, inputs)`` their spec, ``oracle(case, inputs)``
    the float64 answer and its bound (None: exact). Judged as every spec op is (guarded
    output, unmodified inputs, the cpu reference's compute path); a case the backend declines
    must be refused by the spec path (dispatch.execute) with UnsupportedError: the public op
    answers it with the cpu reference written back, which the cpu backend's own row judges."""
    def build(case: Case, rng):
        operands = inputs(case, rng)
        return spec_of(case, operands), operands

    def judge(backend, case: Case, spec, operands: list, got: np.ndarray):
        want, bound = oracle(case, operands)
        if got.shape != want.shape:
            return Verdict(False, {}, f"shape {got.shape}, expected {want.shape}")
        return compare_values(got, want, bound, case.dtype)

    def call(backend, case: Case, operands: list):
        from accel.dispatch import execute
        from accel.tensor import Tensor

        return execute(backend, spec_of(case, operands),
                       *(None if x is None else Tensor.from_host(backend, x) for x in operands))

    slots = {"rms_norm": 2, "layer_norm": 3, "softmax": 2, "glu": 2, "silu": 1, "gelu": 1, "add": 2, "mul": 2}[name]
    return OpInfo(name, dtypes, lambda dtype, profile: cases(profile), strategy, build, judge, call,
                  slots=slots)


def _shape_dtype(x: np.ndarray | None, dtype: str) -> tuple:
    """(shape, dtype) of an optional operand of the case's dtype, (None, None) when absent."""
    return (None, None) if x is None else (x.shape, dtype)


_HALVES = ("float32", "float16")
ROWS = (
    _spec_row("rms_norm", _HALVES, _norm_cases, _rms_norm_inputs, _rms_norm_spec, _rms_norm,
              _norm_strategy),
    _spec_row("layer_norm", _HALVES, _norm_cases, _layer_norm_inputs, _layer_norm_spec,
              _layer_norm, _norm_strategy),
    _row("rope", _HALVES, _rope_cases, _rope, _rope_strategy),
    _spec_row("softmax", _HALVES, _softmax_cases, _softmax_inputs, _softmax_spec, _softmax,
              _softmax_strategy),
    _spec_row("glu", _HALVES, _glu_cases, _glu_inputs, _glu_spec, _glu, _glu_strategy),
    _spec_row("silu", _HALVES, _unary_cases("silu"), _unary_inputs, _unary_spec, _unary,
              _unary_strategy("silu")),
    _spec_row("gelu", _HALVES, _unary_cases("gelu"), _unary_inputs, _unary_spec, _unary,
              _unary_strategy("gelu")),
    _row("get_rows", ("float32",), _get_rows_cases, _get_rows, None),  # by its fixed cases only
    _spec_row("add", FLOATS, _binary_cases, _binary_inputs, _binary_spec, _binary, _binary_strategy),
    _spec_row("mul", FLOATS, _binary_cases, _binary_inputs, _binary_spec, _binary, _binary_strategy),
)
