"""The decoder-step ops (issue 42) against float64 formulas written here (no code shared with
accel), their typed errors, Tensor in -> Tensor out, and Tensor.__setitem__ on cpu and OpenCL."""
from __future__ import annotations

import math

import numpy as np
import pytest

import accel
from accel.errors import ArgumentError, DeviceMismatchError, DTypeError, ShapeError
from accel.dtypes import to_numpy_dtype

RNG = np.random.default_rng(42)
F64 = np.float64


def _opencl():
    try:
        return accel.get_backend("opencl")
    except accel.AccelError as e:  # no OpenCL device on this machine: say why
        pytest.skip(f"no OpenCL backend here: {e}")


def close(got, want, dtype="float32", scale=1.0):
    """float32 arithmetic rounded once to ``dtype``: a few ulps of the output format plus the
    float32 error of short reductions, relative to the data's magnitude ``scale``."""
    u = {"float32": 2.0**-24, "float16": 2.0**-11}[dtype]
    got = np.asarray(got, F64)
    tol = 8 * u * np.abs(want) + 64 * 2.0**-24 * scale
    assert got.shape == want.shape
    bad = ~(np.abs(got - want) <= tol)
    assert not bad.any(), f"{bad.sum()} of {bad.size} off, worst {np.abs(got - want).max()}"


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rms_norm_against_float64(dtype):
    x = RNG.standard_normal((3, 5, 64)).astype(dtype)
    w = RNG.standard_normal(64).astype(dtype)
    xd, wd = x.astype(F64), w.astype(F64)
    want = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * wd
    got = accel.rms_norm(x, w)
    assert got.dtype == x.dtype
    close(got, want, dtype, scale=4)
    close(accel.rms_norm(x, eps=0.0), xd / np.sqrt((xd * xd).mean(-1, keepdims=True)), dtype, 4)


def test_rms_norm_zero_row_and_eps_zero():
    x = np.zeros((2, 8), np.float32)
    assert np.array_equal(accel.rms_norm(x, eps=1e-6), x)  # 0 / sqrt(eps)
    assert np.isnan(accel.rms_norm(x, eps=0.0)).all()      # 0 / 0, as IEEE says


def test_layer_norm_against_float64():
    x = (RNG.standard_normal((4, 80)) * 3 + 5).astype(np.float32)
    w, b = RNG.standard_normal(80).astype(np.float32), RNG.standard_normal(80).astype(np.float32)
    xd = x.astype(F64)
    c = xd - xd.mean(-1, keepdims=True)
    want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    close(accel.layer_norm(x, w, b), want, scale=8)


def _rope64(x, pos, base, r, interleaved, fs, ff):
    x = x.astype(F64)
    out = x.copy()
    B, H, S, D = x.shape
    pos = np.broadcast_to(np.asarray(pos, F64).reshape(-1, S) if np.ndim(pos) == 2 else pos, (B, S))
    for i in range(r // 2):
        theta = pos * fs * base ** (-2.0 * i / r) / (1.0 if ff is None else float(ff[i]))
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + r // 2)
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., a] * s + x[..., b] * c
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 32])
def test_rope_against_float64(interleaved, rotary_dim):
    x = RNG.standard_normal((2, 3, 6, 80)).astype(np.float32)
    pos = np.array([0, 1, 7, 100, 4095, 32767], np.int64)
    ff = None if rotary_dim is None else (1 + RNG.random(16)).astype(np.float32)
    got = accel.rope(x, pos, rotary_dim=rotary_dim, interleaved=interleaved, freq_scale=0.5,
                     freq_factors=ff)
    want = _rope64(x, pos, 10000.0, rotary_dim or 80, interleaved, 0.5, ff)
    # the angle's float32 error grows with the position: ~ position x 2^-23 radians
    tol = 4 * (np.abs(x).max() * 2) * (pos.max() * 0.5 * 2.0**-23 + 2.0**-22)
    assert np.abs(got - want).max() <= tol
    if rotary_dim:
        assert np.array_equal(got[..., 32:], x[..., 32:])  # the rest passes through


def test_rope_positions_per_batch_and_float16():
    x = RNG.standard_normal((2, 1, 3, 16)).astype(np.float16)
    pos = np.array([[0, 1, 2], [5, 6, 7]], np.int32)
    want = _rope64(x, pos, 500.0, 16, False, 1.0, None)
    close(accel.rope(x, pos, base=500.0), want, "float16", scale=2)


def test_softmax_against_float64_and_masks():
    x = (RNG.standard_normal((3, 4, 50)) * 4).astype(np.float32)
    xd = x.astype(F64) * 0.5
    e = np.exp(xd - xd.max(-1, keepdims=True))
    close(accel.softmax(x, scale=0.5), e / e.sum(-1, keepdims=True))
    keep = RNG.random((4, 50)) > 0.3
    keep[1] = False  # a fully masked row gives zeros
    got = accel.softmax(x, mask=keep)
    md = np.where(keep, x.astype(F64), -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(md - md.max(-1, keepdims=True))
        want = np.nan_to_num(e / e.sum(-1, keepdims=True))
    close(got, want)
    assert np.array_equal(got[:, 1], np.zeros((3, 50), np.float32))
    add = np.where(keep, 0.0, -np.inf).astype(np.float32)
    close(accel.softmax(x, mask=add), want)


def test_softmax_long_row():
    x = RNG.standard_normal(262144).astype(np.float32)
    e = np.exp(x.astype(F64) - x.max())
    close(accel.softmax(x), e / e.sum())


def _gelu64(g):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in g.reshape(-1)]).reshape(g.shape)


def test_activations_against_float64():
    g = (RNG.standard_normal((4, 64)) * 3).astype(np.float32)
    gd = g.astype(F64)
    silu = gd / (1 + np.exp(-gd))
    tanh = 0.5 * gd * (1 + np.tanh(math.sqrt(2 / math.pi) * (gd + 0.044715 * gd**3)))
    close(accel.silu(g), silu, scale=4)
    close(accel.gelu(g), _gelu64(gd), scale=4)
    close(accel.gelu(g, "tanh"), tanh, scale=4)
    u = RNG.standard_normal((4, 64)).astype(np.float32)
    close(accel.glu(g, u), silu * u, scale=8)
    close(accel.glu(g, u, activation="gelu_tanh"), tanh * u, scale=8)
    close(accel.glu(g, u, activation="gelu"), _gelu64(gd) * u, scale=8)
    both = np.concatenate([g, u], axis=-1)
    close(accel.glu(both), silu * u, scale=8)  # up=None: first half the gate


def test_add_mul_broadcast_and_one_rounding():
    a = RNG.standard_normal((3, 1, 5)).astype(np.float16)
    b = RNG.standard_normal((4, 5)).astype(np.float16)
    got = accel.add(a, b)
    assert got.shape == (3, 4, 5) and got.dtype == np.float16
    assert np.array_equal(got, (a.astype(F64) + b.astype(F64)).astype(np.float16))
    assert np.array_equal(accel.mul(a, b), (a.astype(F64) * b.astype(F64)).astype(np.float16))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("a_shape, b_shape, device", [
    ((4, 8), (8,), True), ((8,), (4, 8), True), ((2, 3, 8), (1, 3, 8), True), ((5, 6), (1,), True),
    ((4, 8), (), True), ((4, 8), (4, 8), True), ((4, 8), (4, 1), True), ((1, 8), (4, 1), True),
    ((3, 1, 5, 1), (4, 1, 6), True), ((3, 1, 5, 1, 2), (4, 1, 6, 1), False)])
def test_add_mul_broadcasts_run_on_the_device(a_shape, b_shape, dtype, device, monkeypatch):
    # numpy's broadcasting in one kernel launch while the output's dims merge into at most 4
    # runs (a bias, a scalar, an outer sum, rows times columns); past that the host's, with the
    # same bits: one rounding of the exact sum or product
    from opencl_common import recorded_launches

    be = _opencl()
    a, b = (RNG.standard_normal(s).astype(np.float32).astype(to_numpy_dtype(dtype)) for s in (a_shape, b_shape))
    seen = recorded_launches(be, monkeypatch)
    for name, exact in (("add", a.astype(F64) + b.astype(F64)), ("mul", a.astype(F64) * b.astype(F64))):
        got = getattr(accel, name)(accel.asarray(a, backend=be), accel.asarray(b, backend=be))
        assert isinstance(got, accel.Tensor) and got.dtype == dtype
        assert np.array_equal(got.numpy(), exact.astype(np.float32).astype(to_numpy_dtype(dtype)))
    assert sum("binary" in what for what, _, _ in seen) == (2 if device else 0)


def test_get_rows_float_and_quantized():
    t = RNG.standard_normal((10, 64)).astype(np.float32)
    ids = np.array([[3, 0], [9, 3]])
    got = accel.get_rows(t, ids)
    assert got.shape == (2, 2, 64) and np.array_equal(got[1, 0], t[9])
    for fmt in ("q8_0", "q4_0"):  # K-quants too once the formats package lands (issue 40)
        w = RNG.standard_normal((6, 256)).astype(np.float32)
        q = accel.quantize(w, fmt)
        full = np.asarray(accel.dequantize(q))
        rows = accel.get_rows(q, np.array([5, 1, 5], np.int32))
        assert np.array_equal(rows, full[[5, 1, 5]]), fmt


def test_ops_on_opencl_tensors_stay_tensors():
    be = _opencl()
    x = RNG.standard_normal((1, 2, 3, 16)).astype(np.float32)
    w = np.ones(16, np.float32)
    tx = accel.asarray(x, backend=be)
    for fn in (lambda a: accel.rms_norm(a, accel.asarray(w, backend=be)),
               lambda a: accel.rope(a, np.arange(3)), accel.softmax, accel.silu,
               lambda a: accel.add(a, a)):
        out = fn(tx)
        assert isinstance(out, accel.Tensor) and out.backend is be
        close(out.numpy(), np.asarray(fn(x)).astype(F64), scale=4)
    ids = accel.asarray(np.array([1, 0], np.int32), backend=be)
    rows = accel.get_rows(np.arange(6, dtype=np.float32).reshape(3, 2), ids)
    assert isinstance(rows, accel.Tensor) and rows.numpy().tolist() == [[2.0, 3.0], [0.0, 1.0]]


@pytest.mark.parametrize("where", ["cpu", "opencl"])
def test_setitem_kv_cache(where):
    be = accel.get_backend("cpu") if where == "cpu" else _opencl()
    host = np.zeros((2, 3, 8, 4), np.float32)
    cache = accel.asarray(host, backend=be)
    keep = cache[:, 1]  # a view made before the writes sees them
    for pos in (0, 5, 7):
        k = RNG.standard_normal((2, 3, 1, 4)).astype(np.float32)
        cache[:, :, pos:pos + 1] = k if pos != 5 else accel.asarray(k, backend=be)
        host[:, :, pos:pos + 1] = k
    assert np.array_equal(cache.numpy(), host)
    assert np.array_equal(keep.numpy(), host[:, 1])
    cache[0, :, ::2, 1:3] = np.full((3, 4, 2), 7, np.float32)  # strided, within bounds
    host[0, :, ::2, 1:3] = 7
    cache[1] = np.float32(2) * np.ones(4, np.float32)  # broadcast value
    host[1] = 2
    assert np.array_equal(cache.numpy(), host)


def test_setitem_refuses_bad_values():
    cache = accel.asarray(np.zeros((2, 4), np.float32), backend="cpu")
    with pytest.raises(ShapeError, match="value.shape"):
        cache[:, 0:1] = np.zeros((2, 2), np.float32)
    with pytest.raises(DTypeError, match="value.dtype"):
        cache[:, 0] = np.zeros(2, np.float16)
    with pytest.raises(ArgumentError, match="value"):
        cache[:, 0] = [1.0, 2.0]
    with pytest.raises(accel.OutOfBoundsError):
        cache[5] = np.zeros(4, np.float32)
    assert not cache.numpy().any()  # nothing written by any refused call


def test_setitem_refuses_other_device():
    be = _opencl()
    cache = accel.asarray(np.zeros((2, 4), np.float32), backend="cpu")
    with pytest.raises(DeviceMismatchError, match="value"):
        cache[0] = accel.asarray(np.zeros(4, np.float32), backend=be)


@pytest.mark.parametrize("call, error, arg", [
    (lambda: accel.rms_norm(np.ones((2, 4), np.float32), np.ones(3, np.float32)), ShapeError, "weight.shape"),
    (lambda: accel.rms_norm(np.ones(4, np.int32)), DTypeError, "x.dtype"),
    (lambda: accel.rms_norm(np.ones(4, np.float32), eps=-1.0), ArgumentError, "eps"),
    (lambda: accel.layer_norm(np.ones((2, 4), np.float32), None, np.ones(5, np.float32)), ShapeError, "bias.shape"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.arange(2)), ShapeError, "positions.shape"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.array([0.0, 1.0, 2.0])), DTypeError, "positions.dtype"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.array([0, -1, 2])), ArgumentError, "positions"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.arange(3), rotary_dim=5), ArgumentError, "rotary_dim"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.arange(3), rotary_dim=10), ArgumentError, "rotary_dim"),
    (lambda: accel.rope(np.ones((1, 1, 3, 8), np.float32), np.arange(3), freq_factors=np.ones(3, np.float32)), ShapeError, "freq_factors.shape"),
    (lambda: accel.softmax(np.ones((2, 4), np.float32), mask=np.ones((3, 4), bool)), ShapeError, "mask.shape"),
    (lambda: accel.glu(np.ones((2, 4), np.float32), activation="relu"), ArgumentError, "activation"),
    (lambda: accel.glu(np.ones((2, 3), np.float32)), ShapeError, "gate.shape"),
    (lambda: accel.glu(np.ones((2, 4), np.float32), np.ones((2, 3), np.float32)), ShapeError, "up.shape"),
    (lambda: accel.gelu(np.ones(2, np.float32), "fast"), ArgumentError, "approximate"),
    (lambda: accel.add(np.ones((2, 3), np.float32), np.ones((4,), np.float32)), ShapeError, "a, b shapes"),
    (lambda: accel.mul(np.ones(3, np.float32), np.ones(3, np.float16)), DTypeError, "b.dtype"),
    (lambda: accel.get_rows(np.ones((3, 2), np.float32), np.array([3])), ArgumentError, "ids"),
    (lambda: accel.get_rows(np.ones((3, 2), np.float32), np.array([-1])), ArgumentError, "ids"),
    (lambda: accel.get_rows(accel.quantize(np.ones((2, 32), np.float32), "q8_0"), np.array([2])), ArgumentError, "ids"),
])
def test_typed_errors_name_the_argument(call, error, arg):
    with pytest.raises(error, match=f"^{arg}: expected"):
        call()


def _attention64(q, k, v, causal, window=None, softcap=None, sinks=None):
    q, k, v = (t.astype(F64) for t in (q, k, v))
    B, Hq, Sq, D = q.shape
    g, Sk = Hq // k.shape[1], k.shape[2]
    out = np.zeros((B, Hq, Sq, v.shape[-1]))
    for b in range(B):
        for h in range(Hq):
            for i in range(Sq):
                s = k[b, h // g] @ q[b, h, i] / math.sqrt(D)
                if softcap is not None:
                    s = softcap * np.tanh(s / softcap)
                last = i + Sk - Sq
                keep = np.arange(Sk) <= last if causal else np.ones(Sk, bool)
                if window is not None:
                    keep &= np.arange(Sk) > last - window
                logits = list(s[keep]) + ([] if sinks is None else [float(sinks[h])])
                if not logits:
                    continue
                m = max(logits)
                e = np.exp(s[keep] - m)
                den = e.sum() + (0.0 if sinks is None else math.exp(float(sinks[h]) - m))
                out[b, h, i] = e @ v[b, h // g][keep] / den
    return out


@pytest.mark.parametrize("window", [None, 1, 3, 50])
@pytest.mark.parametrize("softcap", [None, 2.0])
@pytest.mark.parametrize("sink_level", [None, -30.0, 0.0, 30.0])
def test_attention_window_softcap_sinks_against_float64(window, softcap, sink_level):
    q = RNG.standard_normal((1, 4, 5, 32)).astype(np.float32)
    k = RNG.standard_normal((1, 2, 9, 32)).astype(np.float32)
    v = RNG.standard_normal((1, 2, 9, 16)).astype(np.float32)
    sinks = None if sink_level is None else (sink_level + RNG.standard_normal(4)).astype(np.float32)
    got = accel.attention(q, k, v, causal=True, window=window, softcap=softcap, sinks=sinks,
                          backend="cpu")
    want = _attention64(q, k, v, True, window, softcap, sinks)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    if window is None and softcap is None and sinks is None:
        assert np.array_equal(got, accel.attention(q, k, v, causal=True, backend="cpu"))


def test_attention_head_dim_256_and_512_with_window():
    for D in (256, 512):
        q = RNG.standard_normal((1, 2, 2, D)).astype(np.float32)
        k = RNG.standard_normal((1, 1, 6, D)).astype(np.float32)
        got = accel.attention(q, k, k, causal=True, window=4, backend="cpu")
        assert np.abs(got - _attention64(q, k, k, True, 4)).max() <= 1e-5 * 4


def test_attention_options_declined_where_not_computed():
    """A backend that does not declare attention_options (a plugin written before them) is
    never handed softcap or sinks; a window alone reaches it as the equivalent mask."""
    from accel.backends.cpu import CPUBackend

    class Older(CPUBackend):
        name = "older"
        attention_options = False

    be = Older()
    q = RNG.standard_normal((1, 1, 3, 16)).astype(np.float32)
    with pytest.raises(accel.UnsupportedError, match="window, softcap and sinks"):
        accel.attention(q, q, q, causal=True, softcap=5.0, backend=be)
    with pytest.raises(accel.UnsupportedError, match="window, softcap and sinks"):
        accel.attention(q, q, q, causal=True, window=1, sinks=np.zeros(1, np.float32), backend=be)
    got = accel.attention(q, q, q, causal=True, window=2, backend=be)
    assert np.abs(got - _attention64(q, q, q, True, 2)).max() <= 1e-5


@pytest.mark.parametrize("Sq, Sk, D", [(6, 20, 32), (1, 700, 64), (3, 40, 512)])
def test_attention_options_on_opencl_against_float64(Sq, Sk, D):
    """window, softcap and sinks computed by attention.cl (one pass, and the key chunks of a
    decode step), D up to 512."""
    be = _opencl()
    q = RNG.standard_normal((1, 4, Sq, D)).astype(np.float32)
    k = RNG.standard_normal((1, 2, Sk, D)).astype(np.float32)
    v = RNG.standard_normal((1, 2, Sk, D)).astype(np.float32)
    sinks = np.array([0.5, 30.0, -30.0, -np.inf], np.float32)
    for window, softcap in ((None, 2.0), (5, None), (Sk + 3, 50.0)):
        got = accel.attention(q, k, v, causal=True, window=window, softcap=softcap, sinks=sinks,
                              backend=be)
        want = _attention64(q, k, v, True, window, softcap, sinks)
        assert np.abs(got - want).max() <= 1e-4, (window, softcap)


@pytest.mark.parametrize("Sq", [1, 6])
def test_attention_window_on_opencl_against_float64(Sq):
    """A window alone on OpenCL, on device Tensors in and out."""
    be = _opencl()
    q = RNG.standard_normal((1, 4, Sq, 32)).astype(np.float32)
    k = RNG.standard_normal((1, 2, 11, 32)).astype(np.float32)
    v = RNG.standard_normal((1, 2, 11, 32)).astype(np.float32)
    for window in (1, 4, 20):
        got = accel.attention(accel.asarray(q, backend=be), accel.asarray(k, backend=be),
                              accel.asarray(v, backend=be), causal=True, window=window)
        assert isinstance(got, accel.Tensor) and got.backend is be
        want = _attention64(q, k, v, True, window)
        assert np.abs(got.numpy() - want).max() <= 1e-4


@pytest.mark.parametrize("kwargs, error, arg", [
    (dict(window=2), ArgumentError, "window"),  # without causal
    (dict(causal=True, window=0), ArgumentError, "window"),
    (dict(causal=True, softcap=-1.0), ArgumentError, "softcap"),
    (dict(sinks=np.zeros(3, np.float32)), ShapeError, "sinks.shape"),
    (dict(sinks=np.zeros(2, np.float16)), DTypeError, "sinks.dtype"),
])
def test_attention_option_errors(kwargs, error, arg):
    q = np.ones((1, 2, 2, 8), np.float32)
    with pytest.raises(error, match=f"^{arg}: expected"):
        accel.attention(q, q, q, **kwargs)


def test_opencl_device_kernels_against_float64():
    """kernels/decoder.cl (float32 Tensors on OpenCL) against the float64 formulas."""
    be = _opencl()
    x = RNG.standard_normal((2, 3, 7, 300)).astype(np.float32)  # rows longer than a work-group
    w = RNG.standard_normal(300).astype(np.float32)
    tx, tw = accel.asarray(x, backend=be), accel.asarray(w, backend=be)
    xd = x.astype(F64)
    out = accel.rms_norm(tx, tw, eps=1e-5)
    assert isinstance(out, accel.Tensor) and out.backend is be
    close(out.numpy(), xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-5) * w, scale=8)
    close(accel.rms_norm(tx).numpy(), xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6), scale=8)

    def ln64(a):  # float64 layer_norm, no weight or bias, eps 1e-5
        a = a.astype(F64)
        return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    close(accel.layer_norm(tx, tw).numpy(), ln64(x) * w, scale=8)  # weight or bias alone
    close(accel.layer_norm(tx, bias=tw).numpy(), ln64(x) + w, scale=8)
    far = x + np.float32(1e4)  # mean 1e4, spread 2: a one-pass E[x^2] - mean^2 is off by ~1e3
    close(accel.layer_norm(accel.asarray(far, backend=be)).numpy(), ln64(far), scale=1e4)
    xr = x[..., :80]
    pos = np.array([[0, 3, 9, 100, 2000, 31, 7], [1, 2, 3, 4, 5, 6, 32768]])
    for interleaved, r in ((False, 80), (True, 80), (False, 32), (True, 16)):
        got = accel.rope(accel.asarray(xr, backend=be), pos, rotary_dim=r, interleaved=interleaved)
        want = _rope64(xr, pos, 10000.0, r, interleaved, 1.0, None)
        assert np.abs(got.numpy() - want).max() <= 8 * 4 * (32768 * 2.0**-23 + 2.0**-22)
    gd, ud = xd[..., :150], xd[..., 150:]
    silu = gd / (1 + np.exp(-gd))
    close(accel.glu(tx).numpy(), silu * ud, scale=16)
    tanh = 0.5 * gd * (1 + np.tanh(math.sqrt(2 / math.pi) * (gd + 0.044715 * gd**3)))
    g, u = (accel.asarray(np.ascontiguousarray(a), backend=be) for a in (x[..., :150], x[..., 150:]))
    close(accel.glu(g, u, activation="gelu_tanh").numpy(), tanh * ud, scale=16)
    close(accel.add(tx, tx).numpy(), 2 * xd)
    close(accel.mul(tx, tx).numpy(), xd * xd, scale=16)
    sm = (RNG.standard_normal((3, 70000)) * 5).astype(np.float32)
    sm[1] = -np.inf  # no finite logit: zeros
    zd = sm.astype(F64) * 0.7
    with np.errstate(invalid="ignore"):
        e = np.exp(zd - zd.max(-1, keepdims=True))
        want = np.nan_to_num(e / e.sum(-1, keepdims=True))
    close(accel.softmax(accel.asarray(sm, backend=be), scale=0.7).numpy(), want)
    close(accel.silu(tx).numpy(), xd / (1 + np.exp(-xd)), scale=4)
    close(accel.gelu(tx, "tanh").numpy(),
          0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3))), scale=4)
    table = RNG.standard_normal((50, 33)).astype(np.float32)
    ids = np.array([[49, 0, 7], [7, 7, 1]], np.int32)
    rows = accel.get_rows(accel.asarray(table, backend=be), accel.asarray(ids, backend=be))
    assert isinstance(rows, accel.Tensor) and np.array_equal(rows.numpy(), table[ids])
    assert np.array_equal(accel.get_rows(accel.asarray(table, backend=be), ids.astype(np.int64)).numpy(),
                          table[ids])
    import accel.kernels as K

    # the spec ops ran their plans (kernels/decoder.cl's variant)
    planned = {name for vid, name in be._variant_programs if vid == K.decoder("float32").id}
    assert {"rms_norm", "layer_norm", "glu", "binary", "softmax",
            "unary", "rope", "get_rows"} <= planned


@pytest.mark.parametrize("fmt", ["q4_0", "q5_0", "q8_0", "q4_k", "nvfp4", "iq2_s"])
def test_get_rows_of_a_quantized_table_on_opencl(fmt, monkeypatch):
    """The rows' blocks gathered on the device and dequantized there (one gather, then the
    format's dequantize plan: no row comes to the host), equal to dequantize's rows."""
    from opencl_common import recorded_launches

    be = _opencl()
    w = RNG.standard_normal((40, 256)).astype(np.float32)
    host = accel.quantize(w, fmt, backend="cpu")
    q = accel.QTensor.from_raw(host.raw, fmt, w.shape, backend=be)
    full = np.asarray(accel.dequantize(host))
    seen = recorded_launches(be, monkeypatch)
    for ids in (np.array([3]), np.array([[39, 3], [3, 0]]), np.arange(40)[::-1]):  # few, many
        assert np.array_equal(accel.get_rows(q, ids), full[ids])  # numpy-kind QTensor: numpy
        rows = accel.get_rows(q, accel.asarray(ids.astype(np.int32), backend=be))
        assert isinstance(rows, accel.Tensor) and rows.backend is be
        assert np.array_equal(rows.numpy(), full[ids])
    assert sum("get_rows_bytes" in what for what, _, _ in seen) == 6
    # a QTensor is used where it lives: ids or backend= elsewhere are refused, not moved
    with pytest.raises(DeviceMismatchError, match="^backend"):
        accel.get_rows(host, accel.asarray(np.array([1], np.int32), backend=be))
    with pytest.raises(DeviceMismatchError, match="^backend"):
        accel.get_rows(host, np.array([1]), backend=be)


def _rope_torch64(x, pos):
    """GPT-J RoPE in torch float64 (rotary_dim = D), for autograd's reference gradient."""
    import torch

    D = x.shape[-1]
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    th = torch.tensor(pos, dtype=torch.float64)[:, None] * inv
    c, s = torch.cos(th), torch.sin(th)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def test_torch_operators_gradients_against_float64():
    torch = pytest.importorskip("torch", reason="the torch operators need torch")
    import accel.torch_ops  # noqa: F401  (registers torch.ops.accel.* when accel came first)

    def grads(fn, *xs):
        leaves = [x.detach().clone().requires_grad_() for x in xs]
        out = fn(*leaves)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        return out.detach().double(), [t.grad.double() for t in leaves]

    x, w = torch.randn(3, 16), torch.randn(16)
    a, b = torch.randn(2, 3), torch.randn(3)
    for ours, ref, args in [
        (lambda x, w: accel.rms_norm(x, w),
         lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (x, w)),
        (accel.add, lambda a, b: a + b, (a, b)),
        (accel.mul, lambda a, b: a * b, (a, b)),
        (lambda x: accel.softmax(x, scale=0.5), lambda x: torch.softmax(0.5 * x, -1), (x,)),
        (lambda g, u: accel.glu(g, u), lambda g, u: torch.nn.functional.silu(g) * u, (a, a.flip(0))),
        (lambda g, u: accel.glu(g, u, activation="gelu_tanh"),
         lambda g, u: torch.nn.functional.gelu(g, approximate="tanh") * u, (a, a.flip(0))),
        (lambda g, u: accel.glu(g, u, activation="gelu"),
         lambda g, u: torch.nn.functional.gelu(g) * u, (a, a.flip(0))),
        (lambda x: accel.glu(x), lambda x: torch.nn.functional.silu(x[:, :8]) * x[:, 8:], (x,)),
        (lambda x: accel.rope(x, torch.tensor([0, 3, 50]), interleaved=True),
         lambda x: _rope_torch64(x, [0, 3, 50]), (x.reshape(1, 1, 3, 16),)),
    ]:
        got, gg = grads(ours, *args)
        want, gw = grads(ref, *(t.double() for t in args))
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        for g1, g2 in zip(gg, gw):
            assert torch.allclose(g1, g2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["cpu", "opencl"])
def test_gelu_tanh_far_out_and_nan_logits(where):
    # PoCL's tanh stops a few ulps short of -1: 0.5 g (1 + tanh z) once gave -2.98e22 at -1e30
    be = _opencl() if where == "opencl" else accel.get_backend("cpu")
    g = np.array([-1e30, -1e13, -9.0, -3.0, -0.5, 0.0, 0.5, 3.0, 9.0, 1e13], np.float32)
    gd = g.astype(F64)
    want = 0.5 * gd * (1 + np.tanh(math.sqrt(2 / math.pi) * (gd + 0.044715 * gd**3)))
    got = accel.gelu(accel.Tensor.from_host(be, g), approximate="tanh").numpy().astype(F64)
    # float32's 1 + tanh(z) is off by an ulp of 1, times |g| / 2 (the reference's own formula)
    assert np.all(np.abs(got - want) <= 2e-6 * np.abs(want) + 2**-23 * np.abs(gd)), (got, want)
    far = gd <= -9  # where the true value is below 1e-27: that residue must not be scaled by g
    assert np.all(np.abs(got[far]) <= 1e-25), got[far]
    up = np.ones_like(g)
    glu = accel.glu(accel.Tensor.from_host(be, g), accel.Tensor.from_host(be, up),
                    activation="gelu_tanh").numpy().astype(F64)
    assert np.array_equal(glu, got)
    # a NaN logit makes its row NaN (fmax once dropped it); a row of -inf stays all zeros
    x = np.array([[0.0, np.nan, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    y = accel.softmax(accel.Tensor.from_host(be, x)).numpy()
    assert np.isnan(y[0]).all() and np.array_equal(y[1], np.zeros(3, np.float32))


def test_rope_angles_are_exact_past_float32_positions():
    # a position above 2**24 rounded in float32 once rotated by the wrong angle, silently
    D = 8
    x = RNG.standard_normal((1, 1, 2, D)).astype(np.float32)
    pos = np.array([2**24 + 1, 2**30 + 3])
    y = accel.rope(x, pos, base=10000.0)
    inv = 10000.0 ** (-np.arange(0, D, 2) / D)
    theta = pos[:, None].astype(F64) * inv
    xd = x.astype(F64)[0, 0]
    h = D // 2
    want = np.concatenate([xd[:, :h] * np.cos(theta) - xd[:, h:] * np.sin(theta),
                           xd[:, :h] * np.sin(theta) + xd[:, h:] * np.cos(theta)], axis=-1)
    assert np.abs(y[0, 0].astype(F64) - want).max() < 1e-5


def test_decoder_kernels_are_shipped_variants_for_every_dialect():
    import accel.kernels as K

    for dtype in ("float32", "float16", "bfloat16"):
        variant = K.decoder(dtype)
        assert variant in K.variants() and variant.dialects == K.DIALECTS
        assert set(variant.kernels) >= {"rms_norm", "layer_norm", "rope", "softmax", "glu"}


def test_torch_layer_norm_silu_gelu_get_rows_are_operators_with_autograd():
    torch = pytest.importorskip("torch", reason="the torch extra")
    from torch.library import opcheck

    from accel import torch_ops

    x = torch.randn(3, 64, requires_grad=True)
    w, b = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)
    y, ref = accel.layer_norm(x, w, b), torch.nn.functional.layer_norm(x, (64,), w, b, eps=1e-5)
    assert isinstance(y, torch.Tensor) and (y - ref).abs().max() < 1e-5
    g = torch.randn_like(y)
    for got, want in zip(torch.autograd.grad(y, (x, w, b), g), torch.autograd.grad(ref, (x, w, b), g)):
        assert (got - want).abs().max() < 1e-5
    assert (accel.silu(x) - torch.nn.functional.silu(x)).abs().max() < 1e-6
    for approximate in ("none", "tanh"):
        got = accel.gelu(x, approximate)
        assert (got - torch.nn.functional.gelu(x, approximate=approximate)).abs().max() < 1e-5
        (gx,) = torch.autograd.grad(got.sum(), x)
        want = torch.autograd.grad(torch.nn.functional.gelu(x, approximate=approximate).sum(), x)[0]
        assert (gx - want).abs().max() < 1e-5
    table, ids = torch.randn(10, 8, requires_grad=True), torch.tensor([[1, 3], [3, 9]])
    rows = accel.get_rows(table, ids)
    assert torch.equal(rows, table[ids])
    (gt,) = torch.autograd.grad(rows, table, torch.ones_like(rows))
    assert gt[3].tolist() == [2.0] * 8 and gt[0].tolist() == [0.0] * 8  # looked up twice, never
    opcheck(torch_ops.layer_norm, (x.detach(), w.detach(), b.detach(), 1e-5, None))
    opcheck(torch_ops.get_rows, (table.detach(), ids, None))


@pytest.mark.parametrize("where", ["cpu", "opencl"])
def test_rms_norm_with_residual_is_the_add_then_the_norm(where):
    """One kernel on a device; the same bits as accel.add then accel.rms_norm."""
    be = _opencl() if where == "opencl" else accel.get_backend("cpu")
    x, r = (RNG.standard_normal((3, 640)).astype(np.float32) for _ in range(2))
    w = RNG.standard_normal(640).astype(np.float32)
    tx, tr, tw = (accel.asarray(a, backend=be) for a in (x, r, w))
    s, y = accel.rms_norm(tx, tw, eps=1e-6, residual=tr)
    assert isinstance(s, accel.Tensor) and s.backend is be and y.backend is be
    s2 = accel.add(tx, tr)
    assert np.array_equal(s.numpy(), s2.numpy())
    assert np.array_equal(y.numpy(), accel.rms_norm(s2, tw, eps=1e-6).numpy())
    s64 = x.astype(F64) + r
    want = s64 / np.sqrt(np.mean(s64 ** 2, axis=-1, keepdims=True) + 1e-6) * w
    assert np.abs(y.numpy() - want).max() <= 1e-5 * np.abs(want).max()


def test_rms_norm_residual_bad_input_names_the_argument():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(accel.ShapeError, match="residual.shape"):
        accel.rms_norm(x, residual=np.ones((2, 4), np.float32))
    with pytest.raises(accel.DTypeError, match="residual.dtype"):
        accel.rms_norm(x, residual=np.ones((2, 8), np.float16))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("where", ["cpu", "opencl"])
def test_norm_add_rms_norm_is_the_three_calls(where, dtype, monkeypatch):
    """Gemma's post-norm, residual add and next norm: one kernel on a device, the same bits as
    rms_norm, add and rms_norm (rows longer than a work-group, and a large residual; bfloat16
    rounded between the ops as they round)."""
    from accel.nn import norm_add_rms_norm

    be = _opencl() if where == "opencl" else accel.get_backend("cpu")
    x, r = RNG.standard_normal((4, 640)).astype(np.float32), 1e3 * RNG.standard_normal((4, 640)).astype(np.float32)
    pw, w = (RNG.standard_normal(640).astype(np.float32) for _ in range(2))
    x, r, pw, w = (a.astype(to_numpy_dtype(dtype)) for a in (x, r, pw, w))
    tx, tr, tpw, tw = (accel.asarray(a, backend=be) for a in (x, r, pw, w))
    launches = []
    if where == "opencl":
        from opencl_common import recorded_launches
        launches = recorded_launches(be, monkeypatch)
    s, y = norm_add_rms_norm(tx, tpw, tr, tw, eps=1e-6)
    assert len(launches) == (1 if where == "opencl" else 0)
    s2 = accel.add(accel.rms_norm(tx, tpw, eps=1e-6), tr)
    assert np.array_equal(s.numpy(), s2.numpy())
    assert np.array_equal(y.numpy(), accel.rms_norm(s2, tw, eps=1e-6).numpy())
    with pytest.raises(accel.ShapeError, match="^x_weight.shape"):
        norm_add_rms_norm(tx, tw[:5], tr, tw)
    with pytest.raises(accel.ShapeError, match="^residual.shape"):
        norm_add_rms_norm(tx, tpw, tr[:2], tw)


@pytest.mark.parametrize("where", ["cpu", "opencl"])
@pytest.mark.parametrize("interleaved, rotary_dim, D, dtype", [(False, None, 256, "float32"), (True, 64, 80, "float32"),
                                                               (False, 32, 512, "float32"), (False, None, 256, "float16")])
def test_rms_norm_rope_is_the_two_calls(where, interleaved, rotary_dim, D, dtype, monkeypatch):
    """A QK-norm model's per-head norm and rotation: one kernel on a device (x a transposed view
    of [B, S, H, D] rows, as accel.models passes it), the same bits as rms_norm then rope (in
    float16, the norm rounded before the rotation as the two calls round it)."""
    from accel.nn import rms_norm_rope

    be = _opencl() if where == "opencl" else accel.get_backend("cpu")
    rows = RNG.standard_normal((1, 3, 4, D)).astype(to_numpy_dtype(dtype))  # [B, S, H, D]
    w = RNG.standard_normal(D).astype(to_numpy_dtype(dtype))
    pos = np.array([5, 6, 70_000])
    tx, tw = accel.asarray(rows, backend=be).transpose(0, 2, 1, 3), accel.asarray(w, backend=be)
    kw = dict(base=1e6, rotary_dim=rotary_dim, interleaved=interleaved)
    launches = []
    if where == "opencl":
        from opencl_common import recorded_launches
        launches = recorded_launches(be, monkeypatch)
    got = rms_norm_rope(tx, tw, pos, eps=1e-6, **kw)
    assert sum("rms_norm_rope" in what for what, _, _ in launches) == (where == "opencl")
    want = accel.rope(accel.rms_norm(tx, tw, eps=1e-6), pos, **kw)
    assert np.array_equal(np.asarray(got.numpy()), np.asarray(want.numpy()))
    with pytest.raises(accel.ShapeError, match="^weight.shape"):
        rms_norm_rope(tx, tw[:4], pos)


def _softmax64(x, scale, keep=None, add=None):
    """float64 softmax of x * scale (+ add, keep False: -inf) over the last axis; zeros where a
    row has no finite logit."""
    z = x.astype(F64) * scale
    if add is not None:
        z = z + add
    if keep is not None:
        z = np.where(keep, z, -np.inf)
    with np.errstate(invalid="ignore"):
        m = z.max(-1, keepdims=True)
        dead = m == -np.inf
        e = np.exp(z - np.where(dead, 0.0, m))
        return np.where(dead, 0.0, e / e.sum(-1, keepdims=True))


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("mshape", [(2, 3, 5, 300), (5, 300), (1, 1, 5, 300), (300,)])
@pytest.mark.parametrize("on_device", [True, False], ids=["tensor-mask", "numpy-mask"])
def test_masked_softmax_runs_on_opencl(kind, mshape, on_device, monkeypatch):
    """One softmax launch (no host round trip) for a mask of x's shape or repeated along its
    leading dims; against float64 and the host reference: fully masked rows give zeros, a NaN
    logit makes its row NaN unless masked out, -inf logits weigh nothing."""
    from opencl_common import recorded_launches

    be = _opencl()
    x = (RNG.standard_normal((2, 3, 5, 300)) * 4).astype(np.float32)  # rows longer than a group
    keep = RNG.random(mshape) > 0.3
    keep[..., :7] = False  # keys 0-6 masked out for every query
    keep[..., 7] = True
    if len(mshape) > 1:
        keep[..., 1, :] = False  # query 1 sees nothing: a row of zeros
    x[0, 0, 2, 7] = np.nan       # kept: its row NaN
    x[0, 1, 3, :7] = np.nan      # masked out: dropped by a bool mask, NaN + -inf under an additive
    x[1, 2, 4, 10:] = -np.inf    # -inf logits: weight 0
    mask = keep if kind == "bool" else np.where(keep, RNG.standard_normal(mshape), -np.inf).astype(np.float32)
    m = accel.asarray(mask, backend=be) if on_device else mask
    seen = recorded_launches(be, monkeypatch)
    got = accel.softmax(accel.asarray(x, backend=be), scale=0.3, mask=m)
    assert isinstance(got, accel.Tensor) and got.backend is be
    assert [what for what, _, _ in seen] == ["kernel 'softmax'"]
    got = got.numpy()
    want = _softmax64(x, 0.3, keep=keep) if kind == "bool" else _softmax64(x, 0.3, add=mask.astype(F64))
    host = accel.softmax(x, scale=0.3, mask=mask)
    assert np.isnan(got[0, 0, 2]).all() and np.isnan(got[0, 1, 3]).all() == (kind == "additive")
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isnan(host), np.isnan(want))
    ok = ~np.isnan(want)
    close(got[ok], want[ok])
    close(got[ok], host[ok].astype(F64))
    if len(mshape) > 1:
        assert np.array_equal(got[..., 1, :], np.zeros((2, 3, 300), np.float32))
    assert np.array_equal(got[1, 2, 4, 10:], np.zeros(290, np.float32))


def test_masks_the_kernel_does_not_take_stay_on_the_host_path(monkeypatch):
    """A mask broadcast along one middle run of dims ([B, 1, Sq, Sk], [B, 1, 1, Sk]) runs
    softmax, bool or additive of any float dtype; one broadcast along two separate runs, a
    scalar mask: the host reference's answer on the device (no softmax launch); bad masks name
    the argument."""
    from opencl_common import recorded_launches

    be = _opencl()
    x = RNG.standard_normal((2, 3, 4, 40)).astype(np.float32)
    tx = accel.asarray(x, backend=be)
    for shape, dtype in [((2, 1, 4, 40), "bool"), ((2, 1, 1, 40), "bool"), ((4, 40), "float16"),
                         ((2, 1, 4, 40), "bfloat16")]:
        if dtype == "bool":
            mask = RNG.random(shape) > 0.3
            mask[..., 0] = True
            want = _softmax64(x, 1.0, keep=mask)
        else:
            mask = RNG.standard_normal(shape).astype(to_numpy_dtype(dtype))
            want = _softmax64(x, 1.0, add=mask.astype(F64))
        seen = recorded_launches(be, monkeypatch)
        close(accel.softmax(tx, mask=accel.asarray(mask, backend=be)).numpy(), want)
        assert ["softmax" in what for what, _, _ in seen] == [True], shape
    two_runs = RNG.random((1, 3, 1, 40)) > 0.3
    seen = recorded_launches(be, monkeypatch)
    for mask, want in [(two_runs, _softmax64(x, 1.0, keep=two_runs)),
                       (np.array([False]), np.zeros(x.shape))]:
        got = accel.softmax(tx, mask=accel.asarray(mask, backend=be))
        assert isinstance(got, accel.Tensor) and got.backend is be
        close(got.numpy(), want)
    assert not any("softmax" in what for what, _, _ in seen)
    with pytest.raises(DTypeError, match="^mask.dtype"):
        accel.softmax(tx, mask=accel.asarray(np.ones((4, 40), np.int32), backend=be))
    with pytest.raises(ShapeError, match="^mask.shape"):
        accel.softmax(tx, mask=accel.asarray(np.ones((3, 40), bool), backend=be))


@pytest.mark.parametrize("where", ["cpu", "opencl"])
def test_erf_gelu_far_out_and_special_values(where, monkeypatch):
    """erf GELU (gelu and glu's "gelu") on the device: unary and glu, no host round trip;
    within (e / 2 + 3) u |g| of float64 (conformance/ops/decoder.py's analysis, e < 1 ulp of
    PoCL's erf), -0 far out on the left (no residue scaled by g), inf, -inf and NaN as the host
    reference (0.5 * -inf * 0 is NaN)."""
    be = _opencl() if where == "opencl" else accel.get_backend("cpu")
    g = np.array([-1e30, -1e13, -9.0, -5.6, -3.0, -0.5, -1e-30, 0.0, 1e-40, 0.5, 3.0, 9.0, 1e13,
                  3e38, np.inf, -np.inf, np.nan], np.float32)
    g = np.concatenate([g, (RNG.standard_normal(500) * 4).astype(np.float32)])
    launches = []
    if where == "opencl":
        from opencl_common import recorded_launches
        launches = recorded_launches(be, monkeypatch)
    got = accel.gelu(accel.Tensor.from_host(be, g)).numpy()
    glu = accel.glu(accel.Tensor.from_host(be, g), accel.Tensor.from_host(be, np.ones_like(g)),
                    activation="gelu").numpy()
    assert [w for w, _, _ in launches] == ([] if where == "cpu" else ["kernel 'unary'", "kernel 'glu'"])
    assert np.array_equal(glu, got, equal_nan=True)
    assert np.array_equal(got[-503:-500], [np.inf, np.nan, np.nan], equal_nan=True)
    assert np.array_equal(got[:4], np.zeros(4)) and np.signbit(got[:4]).all()  # -0.0
    fin = np.isfinite(g)
    gd = g[fin].astype(F64)
    want = 0.5 * gd * (1 + np.array([math.erf(v / math.sqrt(2)) for v in gd]))
    assert np.all(np.abs(got[fin] - want) <= 4 * 2.0**-24 * np.abs(gd) + 2.0**-149)
    host = accel.gelu(g)
    assert np.array_equal(np.isnan(got), np.isnan(host)) and np.array_equal(got[~fin], host[~fin], equal_nan=True)
