"""Shared pieces of the OpenCL tests (imported by test_opencl_*.py): which devices to run on, and
float64 oracles written from the op definitions (docs/api.md), independent of every backend's
code; the tests here check the oracles themselves on cases worked out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'accel-portable[opencl]')")

from accel.backends.opencl.devices import enumerate_devices  # noqa: E402
from accel.errors import BackendUnavailable  # noqa: E402

try:
    DEVICES = [f"opencl:{i}" for i in range(len(enumerate_devices()))]
except BackendUnavailable:
    DEVICES = []

#: every device for the cheap checks; the first (fastest, see docs/opencl.md) for the full matrix
needs_device = pytest.mark.skipif(not DEVICES, reason="no OpenCL device on this machine")
FIRST = DEVICES[:1]

U = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def matmul_bound(a64: np.ndarray, b64: np.ndarray, c64: np.ndarray, out_dtype: str) -> np.ndarray:
    """Per-element error bound of a float32-accumulated GEMM against the float64 product of the
    same (already rounded) inputs: output rounding + 5 sqrt(K) u32 |A||B| (Higham & Mary's
    probabilistic bound with lambda = 5, docs/conformance.md)."""
    K = a64.shape[-1]
    return 2 * U[out_dtype] * np.abs(c64) + 5 * math.sqrt(K) * U["float32"] * (np.abs(a64) @ np.abs(b64)) + 1e-30


def attention_ref(q, k, v, *, causal=False, scale=None, mask=None):
    """float64 attention with accel's semantics: GQA (head h reads kv head h // (Hq // Hkv)),
    bottom-right causal (query i sees key j <= i + Sk - Sq), bool mask True = keep, additive
    mask added to the logits, rows with no finite logit give zeros."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(D) if scale is None else scale
    k = np.repeat(k, Hq // Hkv, axis=1)
    v = np.repeat(v, Hq // Hkv, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask), s.shape)
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m.astype(np.float64)
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Sk)[None, :]
        s = np.where(j > i + Sk - Sq, -np.inf, s)
    mx = s.max(axis=-1, keepdims=True)
    dead = ~np.isfinite(mx)
    p = np.exp(s - np.where(dead, 0, mx))
    p = np.where(dead, 0, p)
    den = p.sum(axis=-1, keepdims=True)
    return np.where(dead, 0, (p @ v) / np.where(dead, 1, den))


def test_attention_oracle_on_hand_worked_cases():
    # one query, keys k0 = [1, 0], k1 = [0, 1], scale 1: logits [2, 0] for q = [2, 0]
    q = np.array([[[[2.0, 0.0]]]])
    k = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = np.array([[[[10.0], [20.0]]]])
    e = math.exp(2.0)
    np.testing.assert_allclose(attention_ref(q, k, v, scale=1.0), [[[[(10 * e + 20) / (e + 1)]]]])
    # bottom-right causal with Sq = 1, Sk = 2: the single query sees both keys
    np.testing.assert_allclose(attention_ref(q, k, v, causal=True, scale=1.0),
                               attention_ref(q, k, v, scale=1.0))
    # a mask hiding everything gives zeros; hiding key 0 leaves value 20
    assert (attention_ref(q, k, v, mask=np.zeros((1, 2), bool)) == 0).all()
    np.testing.assert_allclose(attention_ref(q, k, v, mask=np.array([False, True])), [[[[20.0]]]])
    # GQA: two query heads share kv head 0
    q2 = np.concatenate([q, -q], axis=1)
    out = attention_ref(q2, k, v, scale=1.0)
    np.testing.assert_allclose(out[0, 1, 0, 0], (10 + 20 * e) / (e + 1))


def test_matmul_bound_is_tight_enough_to_catch_a_dropped_term():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 512)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal((512, 8)).astype(np.float32).astype(np.float64)
    c = a @ b  # the float64 product of the (float32) inputs, as every test uses it
    bound = matmul_bound(a, b, c, "float32")
    dropped = c - a[:, :1] @ b[:1, :]  # one of 512 products missing
    assert (np.abs(dropped - c) > bound).any()
    assert (np.abs((a.astype(np.float32) @ b.astype(np.float32)) - c) <= bound).all()
