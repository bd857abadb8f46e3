"""GGML's non-linear 4-bit formats: iq4_nl (blocks of 32, one float16 scale) and iq4_xs
(super-blocks of 256: a float16 scale and eight 6-bit sub-scales), whose codes index the table
``kvalues_iq4nl``. The quantizer is ggml's ``quantize_row_iq4_nl_impl`` as ``ggml_quantize_chunk``
runs it without an importance matrix (weights x**2, seven trial scales each side).
"""
from __future__ import annotations

import numpy as np

from accel.formats.rounding import F, f16_at, f16_bytes, nearest_int, seq_sum

#: ggml's kvalues_iq4nl: the value of each 4-bit code
VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                  np.int8)
_VF = VALUES.astype(F)
_NTRY = 7
_EPS = F(1e-15)  # GROUP_MAX_EPS


def _best_index(v: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8: the code whose value is nearest v, the lower one on a tie."""
    mu = np.clip(np.searchsorted(_VF, v, side="right"), 1, 15)
    lower = (v - _VF[mu - 1]) < (_VF[mu] - v)
    idx = np.where(lower, mu - 1, mu)
    return np.where(v <= _VF[0], 0, np.where(v >= _VF[15], 15, idx)).astype(np.uint8)


def _fit(xb: np.ndarray, w: np.ndarray, iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = _VF[_best_index(iscale[:, None] * xb)]
    return seq_sum(w * q * xb), seq_sum(w * q * q)


def _block_scales(xb: np.ndarray) -> np.ndarray:
    """The least-squares scale of each group xb [n, 32] over the trial scales (0 for a group
    below GROUP_MAX_EPS)."""
    w = xb * xb
    ax = np.abs(xb)
    mx = np.take_along_axis(xb, ax.argmax(axis=1)[:, None], axis=1)[:, 0]
    amax = ax.max(axis=1)
    dead = amax < _EPS
    mx = np.where(dead, F(1), mx)
    d = -mx / _VF[0]
    sumqx, sumq2 = _fit(xb, w, F(1) / d)
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, F(1)), F(0))
    best = d * sumqx
    for itry in range(-_NTRY, _NTRY + 1):
        sumqx, sumq2 = _fit(xb, w, F(itry + int(VALUES[0])) / mx)
        win = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(win, sumqx / np.where(win, sumq2, F(1)), d)
        best = np.where(win, d * sumqx, best)
    return np.where(dead, F(0), d).astype(F)


def _nibbles(L: np.ndarray) -> np.ndarray:
    """Codes [n, k] -> k / 2 bytes: per 32 codes, j in the low nibble and j + 16 in the high."""
    L = L.reshape(len(L), -1, 2, 16)
    return (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(len(L), -1)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """ggml's quantizer of iq4_nl ([n, 32] -> [n, 18]) or iq4_xs ([n, 256] -> [n, 136]).

    A block with a NaN or an infinity gets a NaN scale and the other bytes of an all-zero block
    (accel's definition)."""
    x = x.astype(F, copy=False)
    bad = ~np.isfinite(x).all(axis=1)
    x = np.where(bad[:, None], F(0), x)
    n = len(x)
    with np.errstate(all="ignore"):
        scales = _block_scales(x.reshape(-1, 32)).reshape(n, -1)
        if fmt == "iq4_nl":
            d = scales[:, 0]
            inv = np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0))
            L = _best_index(inv[:, None] * x)
            d = np.where(bad, F(np.nan), d)
            return np.concatenate([f16_bytes(d), _nibbles(L)], axis=1)
        # iq4_xs: the sub-scales in 6 bits against d = -max_scale / 32
        ab = np.abs(scales)
        ab[np.isnan(ab)] = 0  # C's strict > passes over a NaN scale (x**2 overflowed), from 0
        max_scale = np.where(ab.max(axis=1) > 0, np.take_along_axis(
            scales, ab.argmax(axis=1)[:, None], axis=1)[:, 0], F(0))
        d = -max_scale / F(32)
        inv = np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0))
        ls = np.clip(nearest_int(inv[:, None] * scales), -32, 31)
        dl = d[:, None] * ls.astype(F)
        idl = np.where(dl != 0, F(1) / np.where(dl != 0, dl, F(1)), F(0))
        L = _best_index(np.repeat(idl, 32, axis=1) * x)
    u = (ls + 32).astype(np.uint16)
    lo = (u & 0xF).astype(np.uint8).reshape(n, 4, 2)
    scales_l = lo[:, :, 0] | (lo[:, :, 1] << 4)
    scales_h = ((u >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(axis=1, dtype=np.uint16)
    d = np.where(bad, F(np.nan), d)
    out = np.concatenate([f16_bytes(d), scales_h.astype("<u2").view(np.uint8).reshape(n, 2),
                          scales_l, _nibbles(L)], axis=1)
    return out  # a non-finite block: NaN d, then the bytes of an all-zero block


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes -> (the scale of each group of 32 [n, groups], as ggml's float32 d (ls - 32); the
    code values [n, groups, 32])."""
    n = len(raw)
    d = f16_at(raw, 0)
    qs = raw[:, -(raw.shape[1] - (2 if fmt == "iq4_nl" else 8)):].reshape(n, -1, 16)
    q = VALUES[np.concatenate([qs & 0xF, qs >> 4], axis=2)]
    if fmt == "iq4_nl":
        return d[:, None], q
    h = raw[:, 2:4].copy().view("<u2")[:, 0].astype(np.int32)
    sl = raw[:, 4:8].astype(np.int32)
    ib = np.arange(8)
    ls = ((sl[:, ib // 2] >> (4 * (ib % 2))) & 0xF) | (((h[:, None] >> (2 * ib)) & 3) << 4)
    return d[:, None] * (ls - 32).astype(F), q


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    dl, q = parts(raw, fmt)
    return (dl[..., None] * q.astype(F)).reshape(len(raw), -1)


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N] of ggml's dot products with x in q8_0 (iq4_nl) or q8_k (iq4_xs): per group
    of 32, d_x d_w (ls - 32) times the exact integer sum of code values times x codes."""
    from accel.formats import kquants, legacy

    dl, q = parts(w_raw, fmt)
    G = K // 32
    dl, q = dl.reshape(N, G), q.reshape(N, G, 32).astype(np.float64)
    if x_fmt == "q8_0":
        dx, _, cx = legacy.parts(x_raw, x_fmt)
        dxg = dx.reshape(M, G)
    else:  # q8_k: one float32 d per 256
        dq, cx, _ = kquants.parts(x_raw, x_fmt)
        dxg = np.repeat(dq.reshape(M, -1), 8, axis=1)
    cx = cx.astype(np.float64).reshape(M, G, 32)
    out = np.zeros((M, N), F)
    for g in range(G):
        s = (cx[:, g] @ q[:, g].T).astype(F)  # exact integers
        out += (dxg[:, g, None] * dl[None, :, g]) * s
    return out
