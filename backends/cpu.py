"""The CPU reference backend: numpy (BLAS) and ml_dtypes, correct for every case the API allows.

Float matmul runs through float32 BLAS; exact int8 GEMM through float32 BLAS on K-chunks small
enough that every partial sum is an exact integer; attention in query blocks so memory stays
O(S x block); quantization follows the GGML reference quantizer bit for bit.
"""
from __future__ import annotations

import functools
import math
import os
import platform

import numpy as np

from accel.backend import YES, Backend, DeviceInfo, Support
from accel.dtypes import to_numpy_dtype
from accel.exact_int8 import exact_int8_matmul
from accel.formats import BLOCK, FORMATS
from accel.spec import FP8_BLOCK, X_FORMATS
from accel.hostmem import host_bytes_free, host_memory_error

# attention query-block rows x keys held at once: bounds scratch memory to ~64 MB of float32
_ATTN_SCRATCH = 1 << 24
# results from this size on are weighed against free host memory first: numpy's allocation
# succeeds under Linux's overcommit, and the out-of-memory killer ends the process as it is filled
_CHECKED_BYTES = 1 << 26


def _arr(t) -> np.ndarray:
    return t.buf[: t.nbytes].view(to_numpy_dtype(t.dtype)).reshape(t.shape)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf (ties away from zero), exact for any float32 (no v + 0.5 double rounding)."""
    r = np.trunc(v)
    frac = np.abs(v - r)
    return r + np.where(frac >= 0.5, np.sign(v), 0).astype(v.dtype)


def quantize_blocks(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGML reference quantizer on float32 blocks [n, 32]; returns bytes [n, block_bytes].

    Non-finite blocks (accel's definition, docs/api.md): a NaN anywhere gives d = NaN and all
    zero codes; otherwise an infinity gives the reference d (infinite) and all zero codes.
    Either way the block dequantizes to NaN. A d so small that 1/d overflows gives zero codes.
    """
    x = x.astype(np.float32, copy=False)
    finite = np.isfinite(x).all(axis=1, keepdims=True)
    has_nan = np.isnan(x).any(axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        if fmt == "q8_0":
            d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
        else:
            idx = np.abs(x).argmax(axis=1)[:, None]
            m = np.take_along_axis(x, idx, axis=1)
            # the reference starts from m = +0.0f and only replaces it on a strictly larger |x|,
            # so an all-zero block (even of -0.0) has d = +0 / -8 = -0.0
            d = np.where(m == 0, np.float32(0), m) / np.float32(-8)
        d = np.where(has_nan, np.float32(np.nan), d).astype(np.float32)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
        inv = np.where(finite & np.isfinite(inv), inv, np.float32(0))  # 1/d overflow: zero codes
        v = (x * inv).astype(np.float32)
        v = np.where(finite, v, np.float32(0))
        if fmt == "q8_0":
            codes = round_half_away(v).astype(np.int8).view(np.uint8)
        else:
            c = np.minimum(np.float32(15), np.trunc(v + np.float32(8.5))).astype(np.uint8)
            codes = c[:, : BLOCK // 2] | (c[:, BLOCK // 2:] << 4)
    dbytes = d.astype(np.float16).view(np.uint8)
    return np.concatenate([dbytes, codes], axis=1)


def block_parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [n, block_bytes] -> (d [n, 1], codes [n, 32]) as float32 (Q4_0 codes less 8)."""
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    if fmt == "q8_0":
        q = raw[:, 2:].view(np.int8).astype(np.float32)
    else:
        qs = raw[:, 2:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - np.float32(8)
    return d, q


def dequantize_blocks(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, block_bytes] -> float32 [n, 32]."""
    d, q = block_parts(raw, fmt)
    return q * d


def block_dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
              K: int) -> np.ndarray:
    """float32 [M, N]: sum over blocks b of (d_x d_w) s_b, s_b the exact integer dot product of
    block b's codes, added block after block in float32 (GGML's vec_dot semantics)."""
    nb = K // BLOCK
    dx, cx = (a.reshape(M, nb, -1) for a in block_parts(x_raw, x_fmt))
    dw, cw = (a.reshape(N, nb, -1) for a in block_parts(w_raw, fmt))
    out = np.zeros((M, N), np.float32)
    for b in range(nb):
        s = cx[:, b] @ cw[:, b].T  # integers below 2**24 (32 * 127 * 128): exact in float32
        out += (dx[:, b] * dw[:, b].T) * s  # float16 d times float16 d: exact in float32
    return out


# -- K-quants, mxfp4 and q8_k: GGML's reference quantizers (ggml-quants.c), vectorized over
# blocks. Bit-exactness rests on doing every float32 operation the C code does, in its order:
# numpy's float32 ops round each result (as C without FMA contraction does), and every sum C
# accumulates in a loop is accumulated element after element here (_seq_sum), never pairwise.
_F = np.float32
# GGML's E2M1 code -> twice the FP4 value (OCP MX v1.0), its kvalues_mxfp4 table
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """GGML's nearest_int: add 1.5 * 2**23 in float32 and read the low mantissa bits, i.e.
    round half to even for |v| <= 2**22, and the same bits as the C code beyond (int32)."""
    bits = (v.astype(_F, copy=False) + _F(12582912.0)).view(np.int32)
    return (bits & 0x7FFFFF) - 0x400000


def _seq_sum(a: np.ndarray, from_zero: bool = True) -> np.ndarray:
    """float32 sum over the last axis added left to right, as a C loop does (``from_zero``: the
    loop starts from 0.0f rather than the first term)."""
    a = a.astype(_F, copy=not from_zero)
    if from_zero:
        a[..., 0] += _F(0)  # 0.0f + -0.0f is +0.0f
    return np.add.accumulate(a, axis=-1)[..., -1]


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    """float32 [...] -> little-endian binary16 bytes [..., 2], rounded to nearest even."""
    return v.astype(np.float16).reshape(v.shape + (1,)).view(np.uint8)


def _make_qkx2(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
               nstep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """make_qkx2_quants on groups x, weights w [n, 32]: (scale [n], -min [n], codes [n, 32]) of
    the affine fit x ~ scale * L + min searched over nstep + 1 trial scales (the minimum of
    weighted squared error; a trial wins only when strictly better, the running min carried)."""
    mn = np.minimum(x.min(axis=1), _F(0))
    mx = x.max(axis=1)
    flat = mx == mn
    sum_w = _seq_sum(w, from_zero=False)
    sum_x = _seq_sum(w * x, from_zero=False)
    rng = np.where(flat, _F(1), mx - mn)
    iscale = _F(nmax) / rng
    scale = _F(1) / iscale
    L = np.clip(_nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    diff = scale[:, None] * L.astype(_F) + mn[:, None] - x
    best = _seq_sum(w * (diff * diff))
    for step in range(nstep + 1):
        iscale = (_F(rmin) + _F(rdelta) * _F(step) + _F(nmax)) / np.where(flat, _F(1), mx - mn)
        la = np.clip(_nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        lf = la.astype(_F)
        wl = w * lf
        sum_l, sum_l2, sum_xl = _seq_sum(wl), _seq_sum(wl * lf), _seq_sum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        D = np.where(ok, D, _F(1))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        pos = this_min > 0
        this_min = np.where(pos, _F(0), this_min)
        this_scale = np.where(pos, sum_xl / np.where(pos, sum_l2, _F(1)), this_scale)
        diff = this_scale[:, None] * lf + this_min[:, None] - x
        err = _seq_sum(w * (diff * diff))
        win = ok & (err < best) & ~flat
        L = np.where(win[:, None], la, L)
        best = np.where(win, err, best)
        scale = np.where(win, this_scale, scale)
        mn = np.where(win, this_min, mn)
    scale = np.where(flat, _F(0), scale)
    return scale.astype(_F), (-mn).astype(_F), np.where(flat[:, None], 0, L).astype(np.uint8)


def _pack_scales_k4(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins [n, 8] -> GGML's 12-byte layout: sub-blocks 0-3 in the low
    6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in the nibbles of bytes 8-11, their top
    two bits in the top bits of bytes 0-7."""
    out = np.zeros((len(ls), 12), np.uint8)
    out[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    out[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return out


def _unpack_scales_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGML's 12-byte scales layout [n, 12] -> 6-bit scales and mins [n, 8] (get_scale_min_k4)."""
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _quantize_qk(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K (nmax 15) / Q5_K (nmax 31) on super-blocks x [n, 256]: (header bytes [n, 16]: d,
    dmin and the packed scales; codes [n, 256] in 0..nmax)."""
    n = len(x)
    xs = x.reshape(n * 8, 32)
    av_x = np.sqrt(_seq_sum(xs * xs) / _F(32))
    w = av_x[:, None] + np.abs(xs)
    rmin, nstep = (-1.0, 20) if nmax == 15 else (-0.5, 15)
    scales, mins, L = _make_qkx2(xs, w, nmax, rmin, 0.1, nstep)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    # the C loop starts from +0.0f and its strict > passes over a NaN (an overflowed fit)
    max_scale = np.maximum(np.fmax.reduce(scales, axis=1), _F(0))
    max_min = np.maximum(np.fmax.reduce(mins, axis=1), _F(0))
    inv_scale = np.where(max_scale > 0, _F(63) / np.where(max_scale > 0, max_scale, _F(1)), _F(0))
    inv_min = np.where(max_min > 0, _F(63) / np.where(max_min > 0, max_min, _F(1)), _F(0))
    # stored in a uint8_t before MIN(63, .): the low byte of the int
    ls = np.minimum(63, _nearest_int(inv_scale[:, None] * scales) & 0xFF).astype(np.uint8)
    lm = np.minimum(63, _nearest_int(inv_min[:, None] * mins) & 0xFF).astype(np.uint8)
    d16 = (max_scale / _F(63)).astype(np.float16)
    dmin16 = (max_min / _F(63)).astype(np.float16)
    d = d16.astype(_F)[:, None] * ls.astype(_F)
    dm = dmin16.astype(_F)[:, None] * lm.astype(_F)
    live = d != 0  # a sub-block whose scale is 0 keeps the codes of the scale search
    xs = xs.reshape(n, 8, 32)
    q = np.clip(_nearest_int((xs + dm[..., None]) / np.where(live, d, _F(1))[..., None]), 0, nmax)
    L = np.where(live[..., None], q, L.reshape(n, 8, 32)).astype(np.uint8).reshape(n, 256)
    head = np.concatenate([_f16_bytes(d16), _f16_bytes(dmin16), _pack_scales_k4(ls, lm)], axis=1)
    return head, L


def _make_qx(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants with rmse_type 1 (weights x**2) on groups x [n, 16]: (scale [n], codes
    [n, 16] in 0..2 nmax - 1): the symmetric fit from -nmax / max, then 18 trial scales
    -(nmax + 0.1 i) / max, i = -9..9, a trial taken when strictly better."""
    idx = np.abs(x).argmax(axis=1)[:, None]  # the first of largest magnitude, its sign kept
    amax = np.take_along_axis(np.abs(x), idx, axis=1)[:, 0]
    mx = np.take_along_axis(x, idx, axis=1)[:, 0]
    zero = amax < _F(1e-15)
    mx = np.where(zero, _F(1), mx)
    w = x * x

    def trial(iscale):
        l = np.clip(_nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(_F)
        return l, _seq_sum(w * x * lf), _seq_sum(w * lf * lf)

    l, sumlx, suml2 = trial(_F(-nmax) / mx)
    L = l + nmax
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, _F(1)), _F(0))
    best = scale * sumlx
    for i in [*range(-9, 0), *range(1, 10)]:
        l, sumlx, suml2 = trial(-(_F(nmax) + _F(0.1) * _F(i)) / mx)
        win = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = np.where(win[:, None], l + nmax, L)
        scale = np.where(win, sumlx / np.where(win, suml2, _F(1)), scale)
        best = np.where(win, scale * sumlx, best)
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, L)


def _quantize_q6_k(x: np.ndarray) -> np.ndarray:
    n = len(x)
    xs = x.reshape(n * 16, 16)
    scales, L = _make_qx(xs, 32)
    scales, L = scales.reshape(n, 16), L.reshape(n, 16, 16)
    abs_scales = np.abs(scales)
    abs_scales[np.isnan(abs_scales)] = 0  # the C scan's strict > passes over a NaN (overflow)
    idx = abs_scales.argmax(axis=1)[:, None]
    max_abs = np.take_along_axis(abs_scales, idx, axis=1)[:, 0]
    zero = max_abs < _F(1e-15)
    max_scale = np.where(zero, _F(1), np.take_along_axis(scales, idx, axis=1)[:, 0])
    iscale = _F(-128) / max_scale
    d16 = np.where(zero, _F(0), _F(1) / iscale).astype(np.float16)
    sc = (np.minimum(127, _nearest_int(iscale[:, None] * scales)) & 0xFF).astype(np.uint8)
    d = d16.astype(_F)[:, None] * sc.view(np.int8).astype(_F)
    live = d != 0  # as in Q4_K, a zero scale keeps the search's codes
    q = np.clip(_nearest_int(xs.reshape(n, 16, 16) / np.where(live, d, _F(1))[..., None]), -32, 31) + 32
    L = np.where(live[..., None], q, L).astype(np.uint8).reshape(n, 2, 4, 32)  # [n, half, quarter, l]
    lo = L & 0xF
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)
    out = np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc, _f16_bytes(d16)], axis=1)
    out[zero] = 0  # an all-zero super-block is all zero bytes
    return out


def _quantize_q8_k(x: np.ndarray) -> np.ndarray:
    n = len(x)
    idx = np.abs(x).argmax(axis=1)[:, None]
    mx = np.take_along_axis(x, idx, axis=1)[:, 0]
    zero = mx == 0
    iscale = _F(-127) / np.where(zero, _F(1), mx)
    q = np.minimum(127, _nearest_int(iscale[:, None] * x))
    q = np.where(zero[:, None], 0, q).astype(np.int8)
    bsums = q.reshape(n, 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16)
    d = np.where(zero, _F(0), _F(1) / iscale).astype(_F)
    return np.concatenate([d.reshape(n, 1).view(np.uint8), q.view(np.uint8),
                           bsums.astype("<i2").view(np.uint8)], axis=1)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """GGML's E8M0 scale, halved (its E2M1 codes are twice the FP4 values): 2**(e - 128)."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    return bits.view(_F)


def _quantize_mxfp4(x: np.ndarray) -> np.ndarray:
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        # log2f's float32 result, floored: via float64 so the rounding to float32 (which decides
        # amax just below a power of two) is the correctly rounded one
        lg = np.floor(np.log2(amax.astype(np.float64)).astype(_F))
    lg = np.where(amax > 0, lg, _F(0))
    # (uint8_t) of a float: C converts through int; the low byte is kept
    e = np.where(amax > 0, (lg - _F(2) + _F(127)).astype(np.int32) & 0xFF, 0).astype(np.uint8)
    d = _e8m0_half(e)[:, None]
    best = np.zeros(x.shape, np.uint8)
    best_err = np.abs(_F(MXFP4_VALUES[0]) * d - x)
    for i in range(1, 16):  # the first code of least error wins, as the C loop's strict <
        err = np.abs(_F(MXFP4_VALUES[i]) * d - x)
        better = err < best_err
        best = np.where(better, np.uint8(i), best)
        best_err = np.where(better, err, best_err)
    return np.concatenate([e[:, None], best[:, :16] | (best[:, 16:] << 4)], axis=1)


def quantize_super(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGML's reference quantizer of ``fmt`` (q4_k, q5_k, q6_k, q8_k, mxfp4) on float32 blocks
    [n, block]; returns bytes [n, block_bytes].

    A block holding a NaN or an infinity (C leaves it undefined): its scale is NaN and every
    other byte zero, so it dequantizes to NaN; mxfp4, which has no NaN scale in GGML's decoding,
    gets e = 0xFF (OCP's NaN scale) and zero codes.
    """
    x = x.astype(_F, copy=False)
    bad = ~np.isfinite(x).all(axis=1)
    xf = np.where(bad[:, None], _F(0), x)
    with np.errstate(all="ignore"):
        if fmt in ("q4_k", "q5_k"):
            head, L = _quantize_qk(xf, 15 if fmt == "q4_k" else 31)
            L = L.reshape(len(x), 4, 2, 32)  # [n, 64-chunk, half, l]
            qs = (L[:, :, 0] & 0xF) | ((L[:, :, 1] & 0xF) << 4)
            parts = [head]
            if fmt == "q5_k":
                hi = (L >> 4).astype(np.uint8)  # fifth bits: chunk c's halves at bits 2c, 2c + 1
                qh = np.zeros((len(x), 32), np.uint8)
                for c in range(4):
                    qh |= (hi[:, c, 0] << (2 * c)) | (hi[:, c, 1] << (2 * c + 1))
                parts.append(qh)
            out = np.concatenate(parts + [qs.reshape(len(x), 128)], axis=1)
            nan_at = slice(0, 2)
        elif fmt == "q6_k":
            out, nan_at = _quantize_q6_k(xf), slice(208, 210)
        elif fmt == "q8_k":
            out, nan_at = _quantize_q8_k(xf), slice(0, 4)
        else:
            out = _quantize_mxfp4(xf)
            out[bad] = 0
            out[bad, 0] = 0xFF
            return out
    out[bad] = 0
    nan = np.full(1, np.nan, np.float16 if nan_at.stop - nan_at.start == 2 else _F).view(np.uint8)
    out[np.ix_(bad, np.arange(nan_at.start, nan_at.stop))] = nan
    return out


def super_parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, ...]:
    """Bytes [n, block_bytes] of ``fmt`` -> its integer codes and scales, as GGML's dot
    products read them: q4_k/q5_k (d [n], dmin [n], sc [n, 8], m [n, 8], q [n, 8, 32]);
    q6_k (d [n], sc [n, 16], q [n, 16, 16] less 32); q8_k (d [n], q [n, 256], bsums [n, 16]);
    mxfp4 (d [n], q [n, 32]: twice the FP4 values)."""
    n = len(raw)
    if fmt in ("q4_k", "q5_k"):
        d = raw[:, 0:2].copy().view(np.float16)[:, 0].astype(_F)
        dmin = raw[:, 2:4].copy().view(np.float16)[:, 0].astype(_F)
        sc, m = _unpack_scales_k4(raw[:, 4:16])
        qs = raw[:, -128:].reshape(n, 4, 1, 32)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=2)  # [n, 64-chunk, half, l]
        if fmt == "q5_k":
            qh = raw[:, 16:48]
            shifts = np.arange(8, dtype=np.uint8).reshape(4, 2, 1)
            q = q | (((qh[:, None, None, :] >> shifts) & 1) << 4)
        return d, dmin, sc, m, q.reshape(n, 8, 32)
    if fmt == "q6_k":
        ql = raw[:, :128].reshape(n, 2, 2, 32)  # [n, half, 32-byte run, l]
        qh = raw[:, 128:192].reshape(n, 2, 1, 32)
        low = np.stack([ql[:, :, 0] & 0xF, ql[:, :, 1] & 0xF, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
        high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(4, 1)) & 3
        q = (low | (high << 4)).astype(np.int16) - 32  # [n, half, quarter, l]
        sc = raw[:, 192:208].view(np.int8)
        d = raw[:, 208:210].copy().view(np.float16)[:, 0].astype(_F)
        return d, sc, q.reshape(n, 16, 16)
    if fmt == "q8_k":
        d = raw[:, :4].copy().view("<f4")[:, 0].astype(_F)
        return d, raw[:, 4:260].view(np.int8), raw[:, 260:].copy().view("<i2")
    qs = raw[:, 1:17]
    return _e8m0_half(raw[:, 0]), MXFP4_VALUES[np.concatenate([qs & 0xF, qs >> 4], axis=1)]


def dequantize_super(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, block_bytes] -> float32 [n, block], each value in GGML's float32 operation order."""
    p = super_parts(raw, fmt)
    if fmt in ("q4_k", "q5_k"):
        d, dmin, sc, m, q = p
        d1 = d[:, None] * sc.astype(_F)
        m1 = dmin[:, None] * m.astype(_F)
        return (d1[..., None] * q.astype(_F) - m1[..., None]).reshape(len(raw), -1)
    if fmt == "q6_k":
        d, sc, q = p
        return ((d[:, None] * sc.astype(_F))[..., None] * q.astype(_F)).reshape(len(raw), -1)
    d, q = p[:2]
    return q.astype(_F) * d[:, None]


def super_dot(x_raw: np.ndarray, w_raw: np.ndarray, fmt: str, M: int, N: int, K: int) -> np.ndarray:
    """float32 [M, N] of GGML's integer dot products of q8_k (K-quant weights) or q8_0 (mxfp4)
    rows x_raw with weight rows w_raw: per (super-)block the exact integer sums, scaled by the
    two blocks' scales and added block after block in float32."""
    nb = K // (32 if fmt == "mxfp4" else 256)
    out = np.zeros((M, N), np.float32)
    if fmt == "mxfp4":
        dx = x_raw[:, :2].copy().view(np.float16)[:, 0].astype(_F).reshape(M, nb)
        cx = x_raw[:, 2:].view(np.int8).astype(np.float64).reshape(M, nb, 32)
        dw, cw = super_parts(w_raw, fmt)
        dw, cw = dw.reshape(N, nb), cw.astype(np.float64).reshape(N, nb, 32)
        for b in range(nb):
            s = (cx[:, b] @ cw[:, b].T).astype(_F)  # |s| <= 32 * 127 * 12: exact
            out += (dw[None, :, b] * dx[:, b, None]) * s
        return out
    dx, qx, bsums = super_parts(x_raw, "q8_k")
    dx, bsums = dx.reshape(M, nb), bsums.astype(np.int64).reshape(M, nb, -1)
    qx = qx.astype(np.float64).reshape(M, nb, -1)
    parts = super_parts(w_raw, fmt)
    sub = 16 if fmt == "q6_k" else 32
    for b in range(nb):
        xs = qx[:, b].reshape(M, -1, sub)
        if fmt == "q6_k":
            d, sc, q = (a.reshape((N, nb) + a.shape[1:])[:, b] for a in parts)
            s = np.einsum("mjl,njl->mnj", xs, q.astype(np.float64))  # exact integers
            isum = (s * sc.astype(np.float64)[None]).sum(axis=2)
            out += (d[None, :] * dx[:, b, None]) * isum.astype(_F)
            continue
        d, dmin, sc, m, q = (a.reshape((N, nb) + a.shape[1:])[:, b] for a in parts)
        s = np.einsum("mjl,njl->mnj", xs, q.astype(np.float64))
        isum = (s * sc.astype(np.float64)[None]).sum(axis=2)
        # the mins meet x through its block sums: sum over sub-blocks of m_j * sum(x codes)
        pair = bsums[:, b].reshape(M, 8, 2).sum(axis=2)
        msum = pair.astype(np.float64) @ m.astype(np.float64).T
        out += (d[None, :] * dx[:, b, None]) * isum.astype(_F) - (dmin[None, :] * dx[:, b, None]) * msum.astype(_F)
    return out


class CPUBackend(Backend):
    """The reference backend, always available."""
    x_formats = X_FORMATS  # it computes every x_format accel defines
    attention_options = True  # window, softcap and sinks (issue 42)
    formats = tuple(FORMATS)  # and every format

    name = "cpu"
    priority = 10
    alignment = 64
    host_compute = True  # numpy operands go straight to compute()
    check_host_results = False  # the reference: the test suite checks its results

    @classmethod
    @functools.cache
    def devices(cls) -> list[DeviceInfo]:
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
        except OSError:
            pass
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 0
        return [DeviceInfo(model, platform.machine(), f"numpy {np.__version__}", mem,
                           len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)]

    # memory: a buffer is a 1-d uint8 numpy array
    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return host.reshape(-1).view(np.uint8).copy()  # a new buffer: never alias the caller's

    def download(self, buf: np.ndarray, nbytes: int) -> np.ndarray:
        return buf[:nbytes]

    def view(self, buf: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
        return buf[offset: offset + nbytes]

    def export_array(self, tensor) -> np.ndarray:
        return self.host_view(tensor)  # its own memory, strides and all: no copy

    def versions(self) -> dict[str, str]:
        import ml_dtypes

        return {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__}

    def supports(self, spec) -> Support:
        return YES  # the reference computes every case the API allows

    # ops: numpy in, numpy out; ``compute`` is also dispatch's path for numpy operands
    def run(self, spec, out, *inputs) -> None:
        arrays = [None if t is None else _arr(t) for t in inputs]
        _arr(out)[...] = self.compute(spec, *arrays)

    def compute(self, spec, *arrays: np.ndarray | None) -> np.ndarray:
        """Compute ``spec`` on host arrays, returning a new array of ``spec.out_dtype``."""
        try:
            if spec.op == "matmul" and spec.dtype == spec.out_dtype == "float32":
                # the hot path of tiny calls: exactly numpy's own a @ b (its warnings included),
                # weighed against free memory only by numpy's own allocation
                return np.matmul(*arrays)
            if _out_bytes(spec) >= _CHECKED_BYTES and _out_bytes(spec) > host_bytes_free():
                raise MemoryError
            with np.errstate(all="ignore"):  # NaN, inf, float16 overflow: IEEE's answers
                res = getattr(self, "_" + spec.op)(spec, *arrays)
                target = to_numpy_dtype(spec.out_dtype)
                return res if res.dtype == target else res.astype(target)
        except MemoryError:  # the result, or a float32 copy an op makes on the way
            raise host_memory_error("out", _out_bytes(spec), f"the {spec.op} result on cpu:0 "
                                    "and what computing it needs") from None

    def _matmul(self, spec, a, b) -> np.ndarray:
        if spec.dtype == "int8":
            return exact_int8_matmul(np, a, b)
        return np.matmul(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False))

    def _attention(self, spec, q, k, v, mask, sinks=None) -> np.ndarray:
        qf, kf, vf = (t.astype(np.float32, copy=False) for t in (q, k, v))
        mf = None
        if mask is not None:
            mf = np.broadcast_to(mask, (spec.B, spec.Hq, spec.Sq, spec.Sk))
        res = np.empty(spec.out_shape, np.float32)
        g, off = spec.group, spec.Sk - spec.Sq
        rows = max(1, min(spec.Sq, _ATTN_SCRATCH // max(1, spec.Sk * g)))
        keys = np.arange(spec.Sk)
        for b in range(spec.B):
            for hk in range(spec.Hkv):
                heads = slice(hk * g, (hk + 1) * g)
                kt, vv = kf[b, hk].T, vf[b, hk]
                for i0 in range(0, spec.Sq, rows):
                    i1 = min(spec.Sq, i0 + rows)
                    s = np.matmul(qf[b, heads, i0:i1], kt) * np.float32(spec.scale)  # [g, r, Sk]
                    if spec.softcap is not None:
                        c = np.float32(spec.softcap)
                        s = c * np.tanh(s / c)
                    if mf is not None:
                        m = mf[b, heads, i0:i1]
                        if spec.mask_kind == "bool":
                            s = np.where(m, s, np.float32(-np.inf))
                        else:
                            s = s + m.astype(np.float32)
                    if spec.causal:
                        hidden = keys[None, :] > (np.arange(i0, i1) + off)[:, None]
                        if spec.window is not None:
                            hidden |= keys[None, :] <= (np.arange(i0, i1) + off - spec.window)[:, None]
                        s = np.where(hidden[None], np.float32(-np.inf), s)
                    if sinks is not None:
                        sk = sinks.astype(np.float32)[heads][:, None, None]
                        res[b, heads, i0:i1] = _softmax_pv(s, vv, sk)
                    else:
                        res[b, heads, i0:i1] = _softmax_pv(s, vv)
        return res

    def _quantize(self, spec, x) -> np.ndarray:
        return _quantize(x, spec.fmt.name).reshape(spec.out_shape)

    def _dequantize(self, spec, q) -> np.ndarray:
        raw = q.reshape(-1, spec.fmt.block_bytes)
        if spec.fmt.name in _LEGACY:
            return dequantize_blocks(raw, spec.fmt.name).reshape(spec.out_shape)
        return dequantize_super(raw, spec.fmt.name).reshape(spec.out_shape)

    def _qmatmul(self, spec, x, w) -> np.ndarray:
        raw = w.reshape(-1, spec.fmt.block_bytes)
        fmt = spec.fmt.name
        if spec.x_fmt is not None:
            xq = _quantize(x, spec.x_fmt.name)
            if fmt in _LEGACY:
                out = block_dot(xq, spec.x_fmt.name, raw, fmt, spec.M, spec.N, spec.K)
            else:
                out = super_dot(xq, raw, fmt, spec.M, spec.N, spec.K)
            return out.reshape(spec.out_shape)
        if fmt in _LEGACY:
            wf = dequantize_blocks(raw, fmt)
        else:
            wf = dequantize_super(raw, fmt)
        return np.matmul(x.astype(np.float32, copy=False), wf.reshape(spec.N, spec.K).T)

    def _scaled_matmul(self, spec, a, b, scale_a, scale_b, bias) -> np.ndarray:
        af, bf = a.astype(np.float32), b.astype(np.float32)  # every FP8 value is a float32
        sa, sb = scale_a.astype(np.float32), scale_b.astype(np.float32)
        if spec.scaling == "block":  # each 128-deep slab of K has its own scales
            out = np.zeros(spec.out_shape, np.float32)
            for i, k0 in enumerate(range(0, spec.K, FP8_BLOCK)):
                slab = np.matmul(af[:, k0:k0 + FP8_BLOCK], bf[k0:k0 + FP8_BLOCK])
                out += slab * sa[:, i:i + 1] * np.repeat(sb[i], FP8_BLOCK)[None, : spec.N]
        else:  # scalars, or [M, 1] and [1, N]
            out = np.matmul(af, bf) * sa.reshape(-1, 1) * sb.reshape(1, -1)
        return out if bias is None else out + bias.astype(np.float32)


_LEGACY = ("q8_0", "q4_0")  # the formats of quantize_blocks; the others are quantize_super's


def _quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGUF bytes [n, block_bytes] of x's float32 values in blocks of ``fmt``."""
    blocks = x.astype(np.float32, copy=False).reshape(-1, FORMATS[fmt].block)
    return quantize_blocks(blocks, fmt) if fmt in _LEGACY else quantize_super(blocks, fmt)


def _out_bytes(spec) -> int:
    return math.prod(spec.out_shape) * to_numpy_dtype(spec.out_dtype).itemsize


def _softmax_pv(s: np.ndarray, v: np.ndarray, sink: np.ndarray | None = None) -> np.ndarray:
    """Row softmax of logits s [..., Sk] times v [Sk, Dv]; rows with no finite logit give 0. A
    ``sink`` logit (broadcast to s[..., :1]) joins the denominator with no value."""
    m = s.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    dead = m == -np.inf
    p = np.exp(s - np.where(dead, np.float32(0), m))
    denom = p.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + np.exp(sink - np.where(dead, np.float32(0), m))
    o = np.matmul(p, v) / np.where(dead, np.float32(1), denom)
    return np.where(dead, np.float32(0), o)
