"""GGML's codebook formats: iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s and iq1_m (super-blocks
of 256). Each group of 4 or 8 weights is one entry of a grid of sign-free magnitudes (ggml-common.h's
``iq2xxs_grid`` .. ``iq1s_grid``), with a sign per weight (7 stored bits and their parity,
``ksigns_iq2xs``, or 8 stored bits) or, for iq1, a shared offset of +-1/8; a float16 d and small
integer sub-scales per group of 16 or 32 scale them.

The grids are data, read at run time from gguf-py (``gguf.quants``), which ships them for its own
dequantizers; the byte layouts and the decoding below follow ggml's ``dequantize_row_iq*`` with
their float32 operation order (scale = d times the sub-scale's factor, then scale times value).

Quantizing into these formats is a search over the grid guided by an importance matrix; ggml's
own quantizer (ggml-python's ``ggml_quantize_chunk``, the ``ggml`` extra) does it here, for the
formats ggml quantizes without an importance matrix. iq2_xxs, iq2_xs and iq1_s need one:
``accel.quantize(x, fmt, imatrix=...)`` (accel.formats.weighted).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from accel.formats.rounding import F, f16_at

_DELTA = F(0.125)  # IQ1S_DELTA
_GRIDS = {"iq2_xxs": "IQ2_XXS", "iq2_xs": "IQ2_XS", "iq2_s": "IQ2_S", "iq3_xxs": "IQ3_XXS",
          "iq3_s": "IQ3_S", "iq1_s": "IQ1_S", "iq1_m": "IQ1_S"}


@functools.cache
def grid(fmt: str) -> np.ndarray:
    """float32 [entries, 4 or 8]: the format's grid, from gguf-py."""
    try:
        from gguf import quants
    except ImportError as e:  # a dependency of accel: only a broken install lacks it
        raise ImportError(f"the {fmt} grid comes from gguf-py (pip install gguf): {e}") from None
    cls = getattr(quants, _GRIDS[fmt])
    cls.init_grid()
    return np.ascontiguousarray(cls.grid.reshape(cls.grid_shape), dtype=F)


@functools.cache
def _ksigns() -> np.ndarray:
    """ksigns_iq2xs: 7 sign bits and, as bit 7, their parity (the 8th sign)."""
    i = np.arange(128)
    parity = np.array([bin(v).count("1") & 1 for v in i])
    return (i | (parity << 7)).astype(np.uint8)


def _bits(b: np.ndarray) -> np.ndarray:
    """[...] bytes -> [..., 8] signs +1 / -1, bit j set: negative."""
    return F(1) - F(2) * ((b[..., None] >> np.arange(8, dtype=np.uint8)) & 1).astype(F)


def _u16(raw: np.ndarray, at: int, count: int) -> np.ndarray:
    return raw[:, at:at + 2 * count].copy().view("<u2").astype(np.int64)


def _u32(raw: np.ndarray, at: int, count: int) -> np.ndarray:
    return raw[:, at:at + 4 * count].copy().view("<u4").astype(np.int64)


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [n, block_bytes] -> (each group's float32 scale [n, groups], the float32 values of
    its weights [n, groups, group size]: a grid entry's magnitudes with their signs, or iq1's
    entries plus its offset); a weight is scale times value, one rounding."""
    n = len(raw)
    g = grid(fmt)
    if fmt == "iq2_xxs":  # per 32: u32 of 4 grid bytes, u32 of 4 x 7 sign bits and a 4-bit scale
        w = _u32(raw, 2, 16).reshape(n, 8, 2)
        idx = (w[..., 0, None] >> (8 * np.arange(4))) & 255
        signs = _ksigns()[(w[..., 1, None] >> (7 * np.arange(4))) & 127]
        scale = (f16_at(raw, 0)[:, None] * (F(0.5) + (w[..., 1] >> 28).astype(F))).astype(F) * F(0.25)
        return scale, (g[idx] * _bits(signs)).reshape(n, 8, 32)
    if fmt == "iq2_xs":  # per 8 weights a u16: 9 grid bits, 7 sign bits; a 4-bit scale per 16
        q = _u16(raw, 2, 32)
        s = raw[:, 66:74].astype(np.int64)
        sub = np.stack([s & 15, s >> 4], axis=2).reshape(n, 16)
        scale = (f16_at(raw, 0)[:, None] * (F(0.5) + sub.astype(F))).astype(F) * F(0.25)
        vals = g[q & 511] * _bits(_ksigns()[q >> 9])
        return scale, vals.reshape(n, 16, 16)
    if fmt == "iq2_s":  # 32 grid bytes + 2 high bits each from qh, 32 sign bytes, 4-bit scales
        qs, signs, qh = raw[:, 2:34].astype(np.int64), raw[:, 34:66], raw[:, 66:74].astype(np.int64)
        l = np.arange(32) % 4
        idx = qs | ((qh[:, np.arange(32) // 4] << (8 - 2 * l)) & 0x300)
        s = raw[:, 74:82].astype(np.int64)
        sub = np.stack([s & 15, s >> 4], axis=2).reshape(n, 16)
        scale = (f16_at(raw, 0)[:, None] * (F(0.5) + sub.astype(F))).astype(F) * F(0.25)
        return scale, (g[idx] * _bits(signs)).reshape(n, 16, 16)
    if fmt == "iq3_xxs":  # 64 grid bytes (4 values each), per 32 a u32 of 4 x 7 sign bits and scale
        qs = raw[:, 2:66].astype(np.int64).reshape(n, 8, 8)
        w = _u32(raw, 66, 8)
        signs = _ksigns()[(w[..., None] >> (7 * np.arange(4))) & 127]  # [n, 8, 4]: 8 per 2 entries
        scale = (f16_at(raw, 0)[:, None] * (F(0.5) + (w >> 28).astype(F))).astype(F) * F(0.5)
        return scale, (g[qs].reshape(n, 8, 4, 8) * _bits(signs)).reshape(n, 8, 32)
    if fmt == "iq3_s":  # 64 grid bytes + a ninth bit each from qh, 32 sign bytes, 4-bit scales
        qs, qh = raw[:, 2:66].astype(np.int64), raw[:, 66:74].astype(np.int64)
        signs, s = raw[:, 74:106], raw[:, 106:110].astype(np.int64)
        e = np.arange(64)  # entry e: bit e % 8 of qh byte e // 8
        idx = qs | (((qh[:, e // 8] >> (e % 8)) & 1) << 8)
        sub = np.stack([s & 15, s >> 4], axis=2).reshape(n, 8)
        scale = f16_at(raw, 0)[:, None] * (1 + 2 * sub).astype(F)
        return scale.astype(F), (g[idx].reshape(n, 32, 8) * _bits(signs)).reshape(n, 8, 32)
    if fmt == "iq1_s":  # per 32: 4 grid bytes + 3 high bits each, a 3-bit scale and a sign of delta
        qs, qh = raw[:, 2:34].astype(np.int64).reshape(n, 8, 4), _u16(raw, 34, 8)
        idx = qs | (((qh[..., None] >> (3 * np.arange(4))) & 7) << 8)
        delta = np.where(qh & 0x8000, -_DELTA, _DELTA).astype(F)
        scale = f16_at(raw, 0)[:, None] * (2 * ((qh >> 12) & 7) + 1).astype(F)
        vals = g[idx] + delta[..., None, None]
        return scale.astype(F), vals.reshape(n, 8, 32)
    # iq1_m: 32 grid bytes, per pair of entries a byte of two 3-bit high parts and delta signs,
    # per 16 a 3-bit scale; d is a float16 spread over the top nibbles of the four scale words
    qs, qh = raw[:, :32].astype(np.int64).reshape(n, 16, 2), raw[:, 32:48].astype(np.int64)
    sc = _u16(raw, 48, 4)
    d16 = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0xF0) | ((sc[:, 2] >> 4) & 0xF00) | (sc[:, 3] & 0xF000)
    d = d16.astype(np.uint16).view(np.float16).astype(F)
    h = np.stack([qh & 7, (qh >> 4) & 7], axis=2)  # [n, 16, 2]: high bits of entries 2p, 2p + 1
    idx = qs | (h << 8)
    delta = np.where(np.stack([qh & 0x08, qh & 0x80], axis=2), -_DELTA, _DELTA).astype(F)
    k = np.arange(16)  # group of 16 k: 3 bits at 3 (k % 4) of scale word k // 4
    sub = (sc[:, k // 4] >> (3 * (k % 4))) & 7
    scale = d[:, None] * (2 * sub + 1).astype(F)
    vals = g[idx] + delta[..., None]
    return scale.astype(F), vals.reshape(n, 16, 16)


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and infinite d: IEEE's answers
        scale, vals = parts(raw, fmt)
        return (scale[..., None] * vals).astype(F).reshape(len(raw), 256)


def quantize_declined(fmt: str) -> str | None:
    """Why ``quantize`` into ``fmt`` cannot run here, or None."""
    from accel.formats import FORMATS

    if FORMATS[fmt].needs_imatrix:
        return (f"ggml quantizes {fmt} only with an importance matrix: pass imatrix= (llama-"
                "quantize's per-column weights, float32 [K]) to accel.quantize")
    try:
        import ggml  # noqa: F401
    except ImportError:
        return (f"quantize to {fmt} runs ggml's own quantizer (a search over the grid), from "
                "ggml-python: pip install 'accel-portable[ggml]'")
    return None


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """ggml's bytes [n, block_bytes] of float32 blocks [n, 256] (ggml_quantize_chunk with no
    importance matrix; quantize_declined says where that is not possible). A block holding a NaN
    or an infinity gets the bytes of an all-zero block with a NaN d, one beyond 2**32 in
    magnitude those with an infinite d (ggml's search aborts on both)."""
    import ggml

    from accel.errors import UnsupportedError

    if why := quantize_declined(fmt):
        raise UnsupportedError("cpu", "quantize", fmt, why)
    x = np.ascontiguousarray(x, np.float32)
    t = getattr(ggml, f"GGML_TYPE_{fmt.upper()}")
    out = np.zeros((len(x), ggml.ggml_row_size(t, 256)), np.uint8)
    with np.errstate(invalid="ignore"):
        amax = np.abs(x).max(axis=1, initial=0)
    finite, huge = np.isfinite(x).all(axis=1), amax > SEARCH_LIMIT
    ok = finite & ~huge
    if ok.any():
        good = np.ascontiguousarray(x[ok])
        done = np.zeros((len(good), out.shape[1]), np.uint8)
        ggml.ggml_quantize_chunk(t, good.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                 done.ctypes.data_as(ctypes.c_void_p), 0, len(good), 256, None)
        out[ok] = done
    if not ok.all():  # ggml's search aborts the process on these: accel's definition instead
        zero = quantize(np.zeros((1, 256), np.float32), fmt)[0]
        out[~ok] = zero
        out[~finite] = _with_d(out[~finite], fmt, np.float16(np.nan))
        out[finite & huge] = _with_d(out[finite & huge], fmt, np.float16(np.inf))
    return out


#: blocks beyond this magnitude abort ggml's search (from about 1e12); their float16 d would be
#: infinite long before (d is near max |x| / 60 at most)
SEARCH_LIMIT = F(2.0**32)


def _with_d(blocks: np.ndarray, fmt: str, d: np.float16) -> np.ndarray:
    """``blocks`` with their float16 d set to ``d`` (iq1_m: its four nibbles in the top nibbles
    of the four scale words)."""
    blocks = blocks.copy()
    bits = int(np.array(d, np.float16).view(np.uint16))
    if fmt != "iq1_m":
        blocks[:, :2] = np.array([bits & 255, bits >> 8], np.uint8)
        return blocks
    for k in range(4):  # nibble k of d: bits 12..15 of scale word k (its byte 49 + 2 k)
        blocks[:, 49 + 2 * k] = (blocks[:, 49 + 2 * k] & 0x0F) | (((bits >> (4 * k)) & 15) << 4)
    return blocks


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N] with x in q8_k: per group, d_x times the weight group's scale times the
    exact sum of its values times x's codes (float64), summed over the row."""
    from accel.formats import kquants

    with np.errstate(invalid="ignore", over="ignore"):
        scale, vals = parts(w_raw, fmt)
    nb = K // 256
    G, L = scale.shape[1], vals.shape[2]
    scale = scale.reshape(N, nb * G).astype(np.float64)
    vals = vals.reshape(N, nb * G, L).astype(np.float64)
    dq, cq, _ = kquants.parts(x_raw, x_fmt)
    dx = np.repeat(dq.reshape(M, nb).astype(np.float64), G, axis=1)
    cx = cq.astype(np.float64).reshape(M, nb * G, L)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.einsum("mgl,ngl->mng", cx, vals)  # exact: small integers times multiples of 1/8
        return np.einsum("mng,mg,ng->mn", s, dx, scale).astype(F)
