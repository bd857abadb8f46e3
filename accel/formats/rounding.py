"""The float32 arithmetic of GGML's C quantizers, restated in numpy.

Bit-exactness with ggml rests on doing every float32 operation the C code does, in its order:
numpy's float32 ops round each result (as C without FMA contraction does), and every sum C
accumulates in a loop is accumulated element after element (``seq_sum``), never pairwise.
"""
from __future__ import annotations

import numpy as np

F = np.float32


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf (ties away from zero), exact for any float32 (no v + 0.5 double rounding)."""
    r = np.trunc(v)
    frac = np.abs(v - r)
    return r + np.where(frac >= 0.5, np.sign(v), 0).astype(v.dtype)


def nearest_int(v: np.ndarray) -> np.ndarray:
    """GGML's nearest_int: add 1.5 * 2**23 in float32 and read the low mantissa bits, i.e.
    round half to even for |v| <= 2**22, and the same bits as the C code beyond (int32)."""
    bits = (v.astype(F, copy=False) + F(12582912.0)).view(np.int32)
    return (bits & 0x7FFFFF) - 0x400000


def seq_sum(a: np.ndarray, from_zero: bool = True) -> np.ndarray:
    """float32 sum over the last axis added left to right, as a C loop does (``from_zero``: the
    loop starts from 0.0f rather than the first term)."""
    a = a.astype(F, copy=not from_zero)
    if from_zero:
        a[..., 0] += F(0)  # 0.0f + -0.0f is +0.0f
    return np.add.accumulate(a, axis=-1)[..., -1]


def f16_bytes(v: np.ndarray) -> np.ndarray:
    """float32 [...] -> little-endian binary16 bytes [..., 2], rounded to nearest even."""
    return v.astype(np.float16).reshape(v.shape + (1,)).view(np.uint8)


def f16_at(raw: np.ndarray, at: int) -> np.ndarray:
    """float32 [n] of the binary16 at byte ``at`` of each block of ``raw`` [n, block_bytes]."""
    return raw[:, at:at + 2].copy().view(np.float16)[:, 0].astype(F)

