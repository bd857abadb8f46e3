"""attention's row: scaled dot-product attention with GQA, bottom-right causal masking, masks,
and issue 42's sliding window, soft-capping and sinks."""
from __future__ import annotations

from typing import Iterator

import numpy as np

import accel
from accel import spec as S
from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, expected

from accel.conformance import oracle, tolerance
from accel.conformance.case import Case
from accel.conformance.ops.common import FLOATS, OpInfo, float_verdict, normal, place

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
        place(q, rng, [np.nan])
    elif data == "nan_v":
        place(v, rng, [np.nan])
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

#: (D, Dv) pairs drawn: those of the fixed grid. Head sizes are compile-time constants of most
#: attention kernels (each new pair is a new build, ~10 s on PoCL), while the search's value is in
#: the shapes around them: batch, GQA ratio, Sq vs Sk, causal, masks and their broadcasting.
HEAD_DIMS = [(32, 32), (64, 64), (128, 128), (64, 32), (80, 128)]

#: the (D, Dv) of the masked grid cases, used by every masked draw for the same reason
MASKED_HEAD_DIMS = (32, 32)

def _strategy(dtype: str):
    from hypothesis import strategies as st

    seeds = st.integers(0, 2**31 - 1)

    @st.composite
    def params(draw) -> dict:
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
        params.update(data="normal", seed=draw(seeds))
        return params

    return params()

def _judge(backend, case: Case, spec: S.AttentionSpec, inputs: list, got: np.ndarray):
    def reference(acc: str, exact: bool):
        mask, sinks = (inputs[i] if len(inputs) > i else None for i in (3, 4))
        res = oracle.attention(*inputs[:3], mask, causal=spec.causal, scale=spec.scale,
                               mask_kind=spec.mask_kind, window=spec.window,
                               softcap=spec.softcap, sinks=sinks)
        return res["out"], None if exact else tolerance.attention_bound(res, spec.D, spec.Sk, spec.dtype, acc)
    return float_verdict(backend, case, spec, got, reference)


def _call(backend, case: Case, inputs: list):
    p = case.params
    return accel.attention(*inputs[:3], causal=p.get("causal", False), scale=p.get("scale"),
                           mask=inputs[3] if len(inputs) > 3 else None, window=p.get("window"),
                           softcap=p.get("softcap"), sinks=inputs[4] if len(inputs) > 4 else None,
                           backend=backend)


# the mask's slot is always passed (None when absent); sinks, when a case has them, follow it, as
# accel.attention passes them: backends written before sinks never see a fifth operand
def _bench_spec(dtype: str, p: dict) -> S.AttentionSpec:
    kv = (p["B"], p["Hkv"], p["Sk"], p["D"])
    return S.attention_spec((p["B"], p["Hq"], p["Sq"], p["D"]), kv, kv, (dtype,) * 3, p.get("causal", False))


def _bench_inputs(spec: S.AttentionSpec, rng: np.random.Generator, seed: int) -> list:
    kv = (spec.B, spec.Hkv, spec.Sk, spec.D)
    return [normal(rng, (spec.B, spec.Hq, spec.Sq, spec.D), spec.dtype), normal(rng, kv, spec.dtype),
            normal(rng, kv, spec.dtype), None]


ROWS = (OpInfo("attention", FLOATS, _attention_cases, _strategy, _attention, _judge, _call, slots=4,
               bench_spec=_bench_spec, bench_inputs=_bench_inputs),)
