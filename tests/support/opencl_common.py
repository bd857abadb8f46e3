"""Shared pieces of the OpenCL tests (tests/backends/opencl, tests/faults): which devices to run on,
and float64 oracles written from the op definitions (docs/api.md), independent of every backend's
code; tests/backends/opencl/test_oracles.py checks the oracles themselves on cases worked out by
hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install 'accel-portable[opencl]')")

from markers import OPENCL_DEVICES  # noqa: E402

#: every device for the cheap checks (skip without one: markers.needs_opencl); the first (fastest,
#: see docs/opencl.md) for the full matrix
DEVICES = OPENCL_DEVICES
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


def recorded_launches(be, monkeypatch) -> list:
    """What OpenCL backend ``be`` enqueues from now on, as (what, global size, local size): still
    enqueued."""
    seen, real = [], be._enqueue

    def enqueue(kernel, gsize, lsize, what, offset=None):
        seen.append((what, gsize, lsize))
        return real(kernel, gsize, lsize, what, offset)

    monkeypatch.setattr(be, "_enqueue", enqueue)
    return seen
