"""The K-quants (q4_k, q5_k, q6_k and the activation format q8_k) and mxfp4: GGML's reference
quantizers (``ggml-quants.c``), vectorized over blocks, their decoders and integer dot products.
"""
from __future__ import annotations

import numpy as np

from accel.formats.rounding import F as _F, f16_at, f16_bytes, nearest_int, seq_sum


# GGML's E2M1 code -> twice the FP4 value (OCP MX v1.0), its kvalues_mxfp4 table
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
#: the K-quants whose sub-blocks have a scale and a min (w = d sc q - dmin m) ...
_WITH_MINS = ("q2_k", "q4_k", "q5_k")
#: ... and those with a signed scale only (w = d sc q)
_SYMMETRIC = ("q3_k", "q6_k")
_SIXTEENS = ("q2_k", "q3_k", "q6_k")  # sub-blocks of 16 (the others: 32)


def _make_qkx2(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
               nstep: int, use_mad: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """make_qkx2_quants on groups x, weights w [n, 32]: (scale [n], -min [n], codes [n, 32]) of
    the affine fit x ~ scale * L + min searched over nstep + 1 trial scales (the minimum of
    weighted squared error, or absolute error with ``use_mad``; a trial wins only when strictly
    better, the running min carried)."""
    err_of = np.abs if use_mad else np.square
    mn = np.minimum(x.min(axis=1), _F(0))
    mx = x.max(axis=1)
    flat = mx == mn
    sum_w = seq_sum(w, from_zero=False)
    sum_x = seq_sum(w * x, from_zero=False)
    rng = np.where(flat, _F(1), mx - mn)
    iscale = _F(nmax) / rng
    scale = _F(1) / iscale
    L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    diff = scale[:, None] * L.astype(_F) + mn[:, None] - x
    best = seq_sum(w * err_of(diff))
    for step in range(nstep + 1):
        iscale = (_F(rmin) + _F(rdelta) * _F(step) + _F(nmax)) / np.where(flat, _F(1), mx - mn)
        la = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        lf = la.astype(_F)
        wl = w * lf
        sum_l, sum_l2, sum_xl = seq_sum(wl), seq_sum(wl * lf), seq_sum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        D = np.where(ok, D, _F(1))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
        pos = this_min > 0
        this_min = np.where(pos, _F(0), this_min)
        this_scale = np.where(pos, sum_xl / np.where(pos, sum_l2, _F(1)), this_scale)
        diff = this_scale[:, None] * lf + this_min[:, None] - x
        err = seq_sum(w * err_of(diff))
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
    av_x = np.sqrt(seq_sum(xs * xs) / _F(32))
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
    ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF).astype(np.uint8)
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF).astype(np.uint8)
    d16 = (max_scale / _F(63)).astype(np.float16)
    dmin16 = (max_min / _F(63)).astype(np.float16)
    d = d16.astype(_F)[:, None] * ls.astype(_F)
    dm = dmin16.astype(_F)[:, None] * lm.astype(_F)
    live = d != 0  # a sub-block whose scale is 0 keeps the codes of the scale search
    xs = xs.reshape(n, 8, 32)
    q = np.clip(nearest_int((xs + dm[..., None]) / np.where(live, d, _F(1))[..., None]), 0, nmax)
    L = np.where(live[..., None], q, L.reshape(n, 8, 32)).astype(np.uint8).reshape(n, 256)
    head = np.concatenate([f16_bytes(d16), f16_bytes(dmin16), _pack_scales_k4(ls, lm)], axis=1)
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
        l = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(_F)
        return l, seq_sum(w * x * lf), seq_sum(w * lf * lf)

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
    sc = (np.minimum(127, nearest_int(iscale[:, None] * scales)) & 0xFF).astype(np.uint8)
    d = d16.astype(_F)[:, None] * sc.view(np.int8).astype(_F)
    live = d != 0  # as in Q4_K, a zero scale keeps the search's codes
    q = np.clip(nearest_int(xs.reshape(n, 16, 16) / np.where(live, d, _F(1))[..., None]), -32, 31) + 32
    L = np.where(live[..., None], q, L).astype(np.uint8).reshape(n, 2, 4, 32)  # [n, half, quarter, l]
    lo = L & 0xF
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)
    out = np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc, f16_bytes(d16)], axis=1)
    out[zero] = 0  # an all-zero super-block is all zero bytes
    return out


def _quantize_q8_k(x: np.ndarray) -> np.ndarray:
    n = len(x)
    idx = np.abs(x).argmax(axis=1)[:, None]
    mx = np.take_along_axis(x, idx, axis=1)[:, 0]
    zero = mx == 0
    iscale = _F(-127) / np.where(zero, _F(1), mx)
    q = np.minimum(127, nearest_int(iscale[:, None] * x))
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
    best = fp4_codes(x, _e8m0_half(e)[:, None])
    return np.concatenate([e[:, None], best[:, :16] | (best[:, 16:] << 4)], axis=1)


def fp4_codes(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """GGML's best_index_mxfp4: per element the E2M1 code whose value times the (halved) scale
    d is nearest x; the first code of least error wins, as the C loop's strict < (so a NaN or
    an infinity, whose every error compares false, gets code 0)."""
    best = np.zeros(x.shape, np.uint8)
    best_err = np.abs(_F(MXFP4_VALUES[0]) * d - x)
    for i in range(1, 16):
        err = np.abs(_F(MXFP4_VALUES[i]) * d - x)
        better = err < best_err
        best = np.where(better, np.uint8(i), best)
        best_err = np.where(better, err, best_err)
    return best


def _pack_2bit(L: np.ndarray) -> np.ndarray:
    """Codes [n, 256] in 0..3 -> 64 bytes: per half of 128, byte l holds elements l, l + 32,
    l + 64 and l + 96 in its bit pairs 0-1 .. 6-7."""
    L = L.astype(np.uint8).reshape(len(L), 2, 4, 32)
    return (L[:, :, 0] | (L[:, :, 1] << 2) | (L[:, :, 2] << 4) | (L[:, :, 3] << 6)).reshape(len(L), 64)


def _unpack_2bit(qs: np.ndarray) -> np.ndarray:
    """The inverse of _pack_2bit: 64 bytes -> codes [n, 256]."""
    q = qs.reshape(len(qs), 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(4, 1)
    return (q & 3).reshape(len(qs), 256)


def _quantize_q2_k(x: np.ndarray) -> np.ndarray:
    n = len(x)
    xs = x.reshape(n * 16, 16)
    scales, mins, L = _make_qkx2(xs, np.abs(xs), 3, -0.5, 0.1, 15, use_mad=True)
    scales, mins = scales.reshape(n, 16), mins.reshape(n, 16)
    # C's running maxima start from 0.0f, and their strict > passes over a NaN
    max_scale = np.maximum(np.fmax.reduce(scales, axis=1), _F(0))
    max_min = np.maximum(np.fmax.reduce(mins, axis=1), _F(0))
    inv_s = np.where(max_scale > 0, _F(15) / np.where(max_scale > 0, max_scale, _F(1)), _F(0))
    inv_m = np.where(max_min > 0, _F(15) / np.where(max_min > 0, max_min, _F(1)), _F(0))
    sc = (nearest_int(inv_s[:, None] * scales) & 0xFF) | ((nearest_int(inv_m[:, None] * mins) << 4) & 0xFF)
    sc = sc.astype(np.uint8)
    d16 = (max_scale / _F(15)).astype(np.float16)
    dmin16 = (max_min / _F(15)).astype(np.float16)
    d = d16.astype(_F)[:, None] * (sc & 0xF).astype(_F)
    dm = dmin16.astype(_F)[:, None] * (sc >> 4).astype(_F)
    live = d != 0  # a sub-block whose scale is 0 keeps the codes of the scale search
    x3 = xs.reshape(n, 16, 16)
    q = np.clip(nearest_int((x3 + dm[..., None]) / np.where(live, d, _F(1))[..., None]), 0, 3)
    L = np.where(live[..., None], q, L.reshape(n, 16, 16)).reshape(n, 256)
    return np.concatenate([sc, _pack_2bit(L), f16_bytes(d16), f16_bytes(dmin16)], axis=1)


def _make_q3(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_q3_quants with do_rmse on groups x [n, 16]: (scale [n], codes [n, 16] in
    0..2 nmax - 1): the symmetric fit from -nmax / max, then up to five passes that move one
    code at a time when the weighted (x**2) fit strictly improves."""
    idx = np.abs(x).argmax(axis=1)[:, None]
    mx = np.take_along_axis(x, idx, axis=1)[:, 0]
    zero = np.abs(mx) < _F(1e-15)
    mx = np.where(zero, _F(1), mx)
    w = x * x
    L = np.clip(nearest_int((_F(-nmax) / mx)[:, None] * x), -nmax, nmax - 1)
    Lf = L.astype(_F)
    sumlx, suml2 = seq_sum(w * x * Lf), seq_sum(w * Lf * Lf)
    for _ in range(5):  # a pass that changes nothing leaves the state, so the next does too
        for i in range(x.shape[1]):
            wi, xi, li = w[:, i], x[:, i], L[:, i].astype(_F)
            slx = sumlx - wi * xi * li
            sl2 = suml2 - wi * li * li
            pos = slx > 0
            new = np.clip(nearest_int(xi * sl2 / np.where(pos, slx, _F(1))), -nmax, nmax - 1)
            nf = new.astype(_F)
            slx2, sl22 = slx + wi * xi * nf, sl2 + wi * nf * nf
            take = pos & (new != L[:, i]) & (sl22 > 0) & (slx2 * slx2 * suml2 > sumlx * sumlx * sl22)
            L[:, i] = np.where(take, new, L[:, i])
            sumlx = np.where(take, slx2, sumlx)
            suml2 = np.where(take, sl22, suml2)
    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, _F(1)), _F(0))
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, L + nmax)


def _q3_scales(s: np.ndarray) -> np.ndarray:
    """q3_k's 12 scale bytes [n, 12] -> the 16 signed 6-bit sub-scales [n, 16]."""
    j = np.arange(16)
    low = np.where(j < 8, s[:, j % 8] & 0xF, s[:, j % 8] >> 4).astype(np.int32)
    high = (s[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return (low | (high.astype(np.int32) << 4)) - 32


def _quantize_q3_k(x: np.ndarray) -> np.ndarray:
    n = len(x)
    xs = x.reshape(n * 16, 16)
    scales, L = _make_q3(xs, 4)
    scales, L = scales.reshape(n, 16), L.reshape(n, 16, 16)
    ab = np.abs(scales)
    ab[np.isnan(ab)] = 0
    max_scale = np.take_along_axis(scales, ab.argmax(axis=1)[:, None], axis=1)[:, 0]
    live_block = ab.max(axis=1) > 0
    iscale = _F(-32) / np.where(live_block, max_scale, _F(1))
    l = (nearest_int(iscale[:, None] * scales) & 0xFF).astype(np.uint8).view(np.int8)  # (int8_t)
    l = np.where(live_block[:, None], np.clip(l.astype(np.int32), -32, 31) + 32, 0)
    packed = np.zeros((n, 12), np.uint8)
    packed[:, :8] = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    hi = (l >> 4).reshape(n, 4, 4)  # [n, j // 4, j % 4]
    packed[:, 8:] = (hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)).astype(np.uint8)
    packed = np.where(live_block[:, None], packed, 0).astype(np.uint8)
    d16 = np.where(live_block, _F(1) / iscale, _F(0)).astype(np.float16)
    d = d16.astype(_F)[:, None] * _q3_scales(packed).astype(_F)
    live = d != 0
    q = np.clip(nearest_int(xs.reshape(n, 16, 16) / np.where(live, d, _F(1))[..., None]), -4, 3) + 4
    L = np.where(live[..., None], q, L).reshape(n, 256)
    hbit = (L > 3).reshape(n, 8, 32)  # element 32 b + m: bit b of hmask byte m
    hmask = (hbit.astype(np.uint8) << np.arange(8, dtype=np.uint8)[:, None]).sum(axis=1, dtype=np.uint8)
    return np.concatenate([hmask, _pack_2bit(L & 3), packed, f16_bytes(d16)], axis=1)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGML's reference quantizer of ``fmt`` (q2_k .. q6_k, q8_k, mxfp4) on float32 blocks
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
        elif fmt == "q2_k":
            out, nan_at = _quantize_q2_k(xf), slice(80, 82)
        elif fmt == "q3_k":
            out, nan_at = _quantize_q3_k(xf), slice(108, 110)
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


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, ...]:
    """Bytes [n, block_bytes] of ``fmt`` -> its integer codes and scales, as GGML's dot
    products read them: q4_k/q5_k (d [n], dmin [n], sc [n, 8], m [n, 8], q [n, 8, 32]);
    q2_k (the same with 16 sub-blocks of 16); q6_k (d [n], sc [n, 16], q [n, 16, 16] less 32;
    q3_k the same, less 4); q8_k (d [n], q [n, 256], bsums [n, 16]);
    mxfp4 (d [n], q [n, 32]: twice the FP4 values)."""
    n = len(raw)
    if fmt == "q2_k":
        sc = raw[:, :16]
        return (f16_at(raw, 80), f16_at(raw, 82), sc & 0xF, sc >> 4,
                _unpack_2bit(raw[:, 16:80]).reshape(n, 16, 16))
    if fmt == "q3_k":
        low = _unpack_2bit(raw[:, 32:96]).astype(np.int16)
        e = np.arange(256)
        high = (raw[:, e % 32] >> (e // 32).astype(np.uint8)) & 1  # element e: bit e // 32 of byte e % 32
        q = low - 4 * (1 - high.astype(np.int16))
        return f16_at(raw, 108), _q3_scales(raw[:, 96:108]), q.reshape(n, 16, 16)
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


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, block_bytes] -> float32 [n, block], each value in GGML's float32 operation order."""
    p = parts(raw, fmt)
    if fmt in _WITH_MINS:
        d, dmin, sc, m, q = p
        d1 = d[:, None] * sc.astype(_F)
        m1 = dmin[:, None] * m.astype(_F)
        return (d1[..., None] * q.astype(_F) - m1[..., None]).reshape(len(raw), -1)
    if fmt in _SYMMETRIC:
        d, sc, q = p
        return ((d[:, None] * sc.astype(_F))[..., None] * q.astype(_F)).reshape(len(raw), -1)
    d, q = p[:2]
    return q.astype(_F) * d[:, None]


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N] of GGML's integer dot products of q8_k (K-quant weights) or q8_0 (mxfp4)
    rows x_raw with weight rows w_raw: per (super-)block the exact integer sums, scaled by the
    two blocks' scales and added block after block in float32."""
    nb = K // (32 if fmt == "mxfp4" else 256)
    out = np.zeros((M, N), np.float32)
    if fmt == "mxfp4":
        dx = x_raw[:, :2].copy().view(np.float16)[:, 0].astype(_F).reshape(M, nb)
        cx = x_raw[:, 2:].view(np.int8).astype(np.float64).reshape(M, nb, 32)
        dw, cw = parts(w_raw, fmt)
        dw, cw = dw.reshape(N, nb), cw.astype(np.float64).reshape(N, nb, 32)
        for b in range(nb):
            s = (cx[:, b] @ cw[:, b].T).astype(_F)  # |s| <= 32 * 127 * 12: exact
            out += (dw[None, :, b] * dx[:, b, None]) * s
        return out
    dx, qx, bsums = parts(x_raw, "q8_k")
    dx, bsums = dx.reshape(M, nb), bsums.astype(np.int64).reshape(M, nb, -1)
    qx = qx.astype(np.float64).reshape(M, nb, -1)
    wp = parts(w_raw, fmt)
    sub = 16 if fmt in _SIXTEENS else 32
    for b in range(nb):
        xs = qx[:, b].reshape(M, -1, sub)
        if fmt in _SYMMETRIC:
            d, sc, q = (a.reshape((N, nb) + a.shape[1:])[:, b] for a in wp)
            s = np.einsum("mjl,njl->mnj", xs, q.astype(np.float64))  # exact integers
            isum = (s * sc.astype(np.float64)[None]).sum(axis=2)
            out += (d[None, :] * dx[:, b, None]) * isum.astype(_F)
            continue
        d, dmin, sc, m, q = (a.reshape((N, nb) + a.shape[1:])[:, b] for a in wp)
        s = np.einsum("mjl,njl->mnj", xs, q.astype(np.float64))
        isum = (s * sc.astype(np.float64)[None]).sum(axis=2)
        # the mins meet x through its block sums: sum over sub-blocks of m_j * sum(x codes)
        pair = bsums[:, b].reshape(M, m.shape[1], -1).sum(axis=2)
        msum = pair.astype(np.float64) @ m.astype(np.float64).T
        out += (d[None, :] * dx[:, b, None]) * isum.astype(_F) - (dmin[None, :] * dx[:, b, None]) * msum.astype(_F)
    return out
