"""GGML's blocks of 32 with one float16 scale (q8_0, q4_0, q5_0) or a scale and a minimum
(q4_1, q5_1), and the activation format q8_1: the reference quantizers of ``ggml-quants.c``
bit for bit, the decoders, and ggml's integer block dot products.

Non-finite blocks (accel's definition where C's is undefined, docs/api.md): a NaN anywhere gives
d = NaN and the codes of a zero block; otherwise an infinity gives the reference's d (infinite
for the symmetric formats, NaN for those with a minimum) and the codes of a zero block. Either way
the block dequantizes to NaN. A d so small that 1/d overflows gives the codes of a zero block.
"""
from __future__ import annotations

import numpy as np

from accel.formats.rounding import F, f16_at, round_half_away

BLOCK = 32
#: (code bits, whether the format stores a minimum) of each weight format here
_LAYOUT = {"q8_0": (8, False), "q4_0": (4, False), "q5_0": (5, False), "q4_1": (4, True),
           "q5_1": (5, True), "q8_1": (8, False)}


def _first_at(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(x, idx[:, None], axis=1)[:, 0]


def _pack(codes: np.ndarray, bits: int) -> list[np.ndarray]:
    """Codes [n, 32] (0..2**bits - 1) -> ggml's byte fields: the fifth bits as a little-endian
    uint32 (element j at bit j) before 16 bytes of nibbles (element j low, j + 16 high)."""
    c = codes.astype(np.uint32)
    nib = ((c[:, :16] & 0xF) | ((c[:, 16:] & 0xF) << 4)).astype(np.uint8)
    if bits == 4:
        return [nib]
    qh = (((c >> 4) & 1) << np.arange(32, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    return [qh.astype("<u4").view(np.uint8).reshape(-1, 4), nib]


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGML's reference quantizer of ``fmt`` on float32 blocks [n, 32]: bytes [n, block_bytes]."""
    bits, has_min = _LAYOUT[fmt]
    x = x.astype(F, copy=False)
    finite = np.isfinite(x).all(axis=1, keepdims=True)
    has_nan = np.isnan(x).any(axis=1, keepdims=True)
    with np.errstate(all="ignore"):
        if has_min:
            # C scans with strict < and >: the first of equal extremes (which decides -0.0 / +0.0)
            lo = _first_at(x, np.argmin(x, axis=1))[:, None]
            hi = _first_at(x, np.argmax(x, axis=1))[:, None]
            # an infinity and no NaN: the reference's d is infinite (all +inf too, where
            # first-of-equal extremes would give inf - inf)
            d = np.where(finite, (hi - lo) / F((1 << bits) - 1), F(np.inf))
        elif bits == 8:
            d = np.abs(x).max(axis=1, keepdims=True) / F(127)
        else:
            m = _first_at(x, np.abs(x).argmax(axis=1))[:, None]
            # the reference starts from m = +0.0f and only replaces it on a strictly larger |x|,
            # so an all-zero block (even of -0.0) has d = +0 / -8 = -0.0
            d = np.where(m == 0, F(0), m) / F(-(1 << (bits - 1)))
        d = np.where(has_nan, F(np.nan), d).astype(F)
        inv = np.where(d == 0, F(0), F(1) / d).astype(F)
        inv = np.where(finite & np.isfinite(inv), inv, F(0))  # 1/d overflow: a zero block's codes
        if has_min:
            v = np.where(finite, ((x - lo) * inv).astype(F), F(0))
            codes = np.trunc(v + F(0.5)).astype(np.int32) & 0xFF  # (uint8_t)(x0 + 0.5f)
            if bits == 4:
                codes = np.minimum(15, codes)
        else:
            v = np.where(finite, (x * inv).astype(F), F(0))
            if bits == 8:
                codes = round_half_away(v).astype(np.int32)
            else:
                half = 1 << (bits - 1)
                codes = np.minimum(2 * half - 1, np.trunc(v + F(half + 0.5)).astype(np.int32))
    fields = [d.astype(np.float16).view(np.uint8)]
    if has_min:
        fields.append(np.where(finite, lo, F(0)).astype(np.float16).view(np.uint8))
    if fmt == "q8_1":  # s = d * sum(codes), the int sum converted to float first
        with np.errstate(invalid="ignore"):  # a non-finite block's s is NaN (0 * inf included)
            s = np.where(finite, codes.sum(axis=1, keepdims=True).astype(F) * d, F(np.nan))
        fields.append(s.astype(np.float16).view(np.uint8))
    if bits == 8:
        fields.append(codes.astype(np.int8).view(np.uint8))
    else:
        fields += _pack(codes, bits)
    return np.concatenate(fields, axis=1)


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Bytes [n, block_bytes] -> (d [n, 1], m [n, 1] or None, codes [n, 32]) as float32, the
    symmetric formats' codes centred (q4_0 less 8, q5_0 less 16)."""
    bits, has_min = _LAYOUT[fmt]
    d = f16_at(raw, 0)[:, None]
    m = f16_at(raw, 2)[:, None] if has_min else None
    if bits == 8:
        return d, m, raw[:, -BLOCK:].view(np.int8).astype(F)
    qs = raw[:, -16:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)
    if bits == 5:
        qh = raw[:, -20:-16].copy().view("<u4")
        q |= (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.int32)
    return d, m, (q if has_min else q - (1 << (bits - 1))).astype(F)


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, block_bytes] -> float32 [n, 32], as ggml's to_float: q d (+ m), each rounded
    once. The codes stay 8-bit integers until the product (the float-x qmatmul of the cpu
    reference dequantizes every weight row of every call through here)."""
    bits, has_min = _LAYOUT[fmt]
    d = f16_at(raw, 0)[:, None]
    if bits == 8:
        q = raw[:, -BLOCK:].view(np.int8)
    else:
        qs = raw[:, -16:]
        q = np.empty((len(raw), BLOCK), np.uint8)
        q[:, :16], q[:, 16:] = qs & 0x0F, qs >> 4
        if bits == 5:
            qh = raw[:, -20:-16].copy().view("<u4")
            q |= (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)
        if not has_min:
            q = q.view(np.int8) - np.int8(1 << (bits - 1))
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.multiply(q, d, dtype=F)
        if has_min:
            y += f16_at(raw, 2)[:, None]
    return y


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N]: per block pair (d_x d_w) times the exact integer dot product of the codes,
    plus m_w s_x for the formats with a minimum (x in q8_1, whose s is d_x times its code sum),
    added block after block in float32 (ggml's vec_dot)."""
    nb = K // BLOCK
    dx, _, cx = parts(x_raw, x_fmt)
    dw, mw, cw = parts(w_raw, fmt)
    dx, cx, dw, cw = dx.reshape(M, nb), cx.reshape(M, nb, BLOCK), dw.reshape(N, nb), cw.reshape(N, nb, BLOCK)
    sx = f16_at(x_raw, 2).reshape(M, nb) if mw is not None else None
    mw = None if mw is None else mw.reshape(N, nb)
    out = np.zeros((M, N), F)
    for b in range(nb):
        s = cx[:, b] @ cw[:, b].T  # integers below 2**24 (32 * 127 * 128): exact in float32
        term = (dx[:, b, None] * dw[None, :, b]) * s
        if mw is not None:
            term = term + mw[None, :, b] * sx[:, b, None]
        out += term
    return out
