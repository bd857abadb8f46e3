"""Property-based fuzzing of every public op: random shapes, dtypes, array kinds and arguments.
Each outcome must be a correct result or an accel.AccelError: never another exception."""
import gguf
import ml_dtypes
import numpy as np
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tolerance_checks import assert_within

import accel
from accel.conformance import oracle, tolerance
from accel.dtypes import dtype_name

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int32, np.bool_, np.complex64]
KINDS = ["numpy", "torch", "accel", "list"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

dims = st.integers(0, 5)
shapes = st.lists(dims, min_size=0, max_size=5).map(tuple)


def make(draw, shape, dtype, kind):
    x = np.asarray(np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape) * 3).astype(dtype)
    if kind == "torch":
        if x.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(x.copy())
    if kind == "accel" and x.dtype != np.complex64:  # accel.Tensor has no complex dtype
        return accel.asarray(x, backend="cpu")
    if kind == "list":
        return x.tolist()
    return x


def host(x):
    if isinstance(x, accel.Tensor):
        return x.numpy()
    if isinstance(x, torch.Tensor):
        return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    return np.asarray(x)


def out_format(x) -> str:
    """The result's dtype name as the tolerance model spells it ("float16", "bfloat16", ...)."""
    return dtype_name(x.dtype)


def assert_result(got, ref: np.ndarray, bound: np.ndarray | None) -> None:
    assert_within(host(got), ref, bound, out_format(got))


def call(fn, *args, **kw):
    try:
        result = fn(*args, **kw)
    except accel.AccelError as e:
        event(f"{fn.__name__}: {type(e).__name__}")
        return None, e
    event(f"{fn.__name__}: computed")
    return result, None


@st.composite
def operand(draw, shape=None, dtype=None):
    shape = draw(shapes) if shape is None else shape
    dtype = draw(st.sampled_from(DTYPES)) if dtype is None else dtype
    kind = draw(st.sampled_from(KINDS))
    if kind == "torch" and np.dtype(dtype) == np.complex64:
        kind = "numpy"
    return make(draw, shape, dtype, kind)


VALID_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8]


@SETTINGS
@given(st.data())
def test_matmul_fuzz(data):
    if data.draw(st.booleans()):  # a well-formed call half of the time, garbage otherwise
        dtype = data.draw(st.sampled_from(VALID_DTYPES))
        batch_a, batch_b = data.draw(st.sampled_from([((), ()), ((2,), ()), ((3, 1), (2,)), ((), (1, 2))]))
        M, K, N = (data.draw(st.integers(1, 9)) for _ in range(3))
        a = make(data.draw, batch_a + (M, K), dtype, data.draw(st.sampled_from(KINDS[:3])))
        b = make(data.draw, batch_b + (K, N), dtype, data.draw(st.sampled_from(KINDS[:3])))
    else:
        dtype = data.draw(st.sampled_from(DTYPES))
        mixed = data.draw(st.booleans())
        a = data.draw(operand(dtype=dtype))
        b = data.draw(operand(dtype=data.draw(st.sampled_from(DTYPES)) if mixed else dtype))
    out_dtype = data.draw(st.sampled_from([None, None, None, "float32", "float16", "int32", "nonsense"]))
    got, err = call(accel.matmul, a, b, out_dtype=out_dtype)
    if err is None:
        ha, hb = host(a), host(b)
        ref, magnitude = oracle.matmul(ha, hb)
        assert host(got).shape == ref.shape
        exact = ha.dtype == np.int8  # int8 products are summed exactly in int32
        assert_result(got, ref, None if exact else tolerance.matmul_bound(
            ref, magnitude, ha.shape[-1], out_format(got), "float32"))


@SETTINGS
@given(st.data())
def test_attention_fuzz(data):
    B, Hkv, g, Sq, Sk, D, Dv = (data.draw(st.integers(1, 3)) for _ in range(7))
    well_formed = data.draw(st.booleans())  # half of the calls valid, garbage otherwise
    dtype = data.draw(st.sampled_from(DTYPES[:3] if well_formed else DTYPES[:4]))
    bad = "none" if well_formed else data.draw(st.sampled_from(["q_rank", "k_dim", "heads", "v_dtype"]))
    qs, ks, vs = (B, Hkv * g, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, Dv)
    if bad == "q_rank":
        qs = qs[1:]
    elif bad == "k_dim":
        ks = (B, Hkv, Sk, D + 1)
    elif bad == "heads" and Hkv > 1:
        qs = (B, Hkv * g + 1, Sq, D)
    q, k = data.draw(operand(qs, dtype)), data.draw(operand(ks, dtype))
    v = data.draw(operand(vs, np.float16 if bad == "v_dtype" else dtype))
    mask = data.draw(st.sampled_from([None, "bool", "float"] + ([] if well_formed else ["badshape"])))
    if mask == "bool":
        mask = np.random.default_rng(0).random((Sq, Sk)) > 0.5
    elif mask == "float":
        mask = np.random.default_rng(0).standard_normal((1, 1, Sq, Sk)).astype(np.float32)
    elif mask == "badshape":
        mask = np.zeros((Sq + 1, Sk), bool)
    scale = data.draw(st.sampled_from([None, 0.5, 2] + ([] if well_formed else [float("inf"), "x", True])))
    causal = data.draw(st.sampled_from([False, True] + ([] if well_formed else [1, None])))
    got, err = call(accel.attention, q, k, v, causal=causal, scale=scale, mask=mask)
    if err is None:
        assert host(got).shape == (qs[0], qs[1], qs[2], vs[3])
        mask_kind = None if mask is None else "bool" if mask.dtype == bool else "additive"
        res = oracle.attention(host(q), host(k), host(v), mask, causal=bool(causal),
                               scale=D ** -0.5 if scale is None else float(scale),
                               mask_kind=mask_kind)
        assert_result(got, res["out"], tolerance.attention_bound(res, D, Sk, out_format(got),
                                                                 "float32"))


@SETTINGS
@given(st.data())
def test_quantize_fuzz(data):
    if data.draw(st.booleans()):
        lead = data.draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
        x = make(data.draw, lead + (32 * data.draw(st.integers(1, 3)),),
                 data.draw(st.sampled_from(VALID_DTYPES[:3])), data.draw(st.sampled_from(KINDS[:3])))
    else:
        x = data.draw(operand())
    fmt = data.draw(st.sampled_from(["q8_0", "q4_0", "q8_0", "q4_0", "q2_k", 5]))
    qt, err = call(accel.quantize, x, fmt)
    if err is None:
        hx = host(x).astype(np.float32)
        t = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[fmt]
        assert np.array_equal(qt.raw, gguf.quants.quantize(hx, t))
        w = data.draw(operand(shape=data.draw(st.sampled_from([hx.shape[-1:], (2,) + hx.shape[-1:], (3,)]))))
        got, err2 = call(accel.qmatmul, w, qt)
        if err2 is None:
            hw = host(w)
            weights = gguf.quants.dequantize(qt.raw, t).astype(np.float64).reshape(-1, hx.shape[-1])
            ref = hw.astype(np.float64) @ weights.T
            magnitude = np.abs(hw.astype(np.float64)) @ np.abs(weights).T
            assert host(got).shape == ref.shape
            assert_result(got, ref, tolerance.matmul_bound(ref, magnitude, hw.shape[-1],
                                                           out_format(got), "float32"))
