"""NVFP4 as GGML stores it: super-blocks of 64 elements, four sub-blocks of 16, each with an
unsigned E4M3 scale byte (0 and 0x7F decode to 0; ggml reads four exponent bits, so the top
bit of the byte is ignored), then 32 bytes of E2M1 codes, byte j
of sub-block s holding elements 16 s + j (low nibble) and 16 s + j + 8 (high). Like mxfp4, the
codes index twice the FP4 values (``kquants.MXFP4_VALUES``) and the decoded scale is halved.

The quantizer is ggml's ``quantize_row_nvfp4_ref``: the sub-block's largest magnitude over 6 in
UE4M3 (rounded on its fourth mantissa bit, saturating at 0x7E = 448), then each element's
nearest code. C's comparisons decide the non-finite cases: a NaN never raises the maximum and
gets code 0; an infinity saturates the scale and gets code 0 too.
"""
from __future__ import annotations

import numpy as np

from accel.formats.kquants import MXFP4_VALUES, fp4_codes
from accel.formats.rounding import F

SUB = 16


def ue4m3_value(b: np.ndarray) -> np.ndarray:
    """float32 of UE4M3 bytes, halved as GGML's ggml_ue4m3_to_fp32 (0 and 0x7F: 0; the byte's
    top bit is not read)."""
    b = b.astype(np.int32)
    e, m = (b >> 3) & 0xF, (b & 7).astype(F)
    v = np.where(e == 0, m * F(2.0**-9), (F(1) + m / F(8)) * np.exp2((e - 7).astype(F)))
    return np.where(b == 0x7F, F(0), v * F(0.5)).astype(F)


def ue4m3_byte(v: np.ndarray) -> np.ndarray:
    """UE4M3 byte of float32 v >= 0 as ggml_fp32_to_ue4m3: the mantissa's top three bits plus
    its fourth (a carry may raise the exponent), subnormals below 2**-6 rounded half up in units
    of 2**-9, saturating at 0x7E; not above zero (or NaN): 0."""
    v = v.astype(F)
    c = np.clip(np.nan_to_num(v, nan=0.0, posinf=448.0), 0, 448).astype(F)
    bits = c.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int32) - 127 + 7
    m = ((bits >> 20) & 7).astype(np.int32) + ((bits >> 19) & 1).astype(np.int32)
    e, m = np.where(m > 7, e + 1, e), np.where(m > 7, 0, m)
    normal = np.where(e >= 15, 0x7E, (np.clip(e, 0, 15) << 3) | m)
    sub = np.clip((c * F(512) + F(0.5)).astype(np.int32), 0, 7)
    out = np.where(e <= 0, sub, normal)
    return np.where(c > 0, out, 0).astype(np.uint8)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, 36] of float32 blocks [n, 64], ggml's bytes for any input."""
    x = x.astype(F, copy=False)
    n = len(x)
    xs = x.reshape(n, 4, SUB)
    with np.errstate(all="ignore"):
        amax = np.fmax.reduce(np.abs(xs), axis=2, initial=F(0))  # C's `amax < |x|`: NaN never wins
        ue = ue4m3_byte(amax / F(6))
        codes = fp4_codes(xs, ue4m3_value(ue)[..., None])
    qs = codes[..., :8] | (codes[..., 8:] << 4)
    return np.concatenate([ue, qs.reshape(n, 32)], axis=1)


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [n, 36] -> (halved scales float32 [n, 4], doubled FP4 values int8 [n, 4, 16])."""
    n = len(raw)
    qs = raw[:, 4:].reshape(n, 4, 8)
    return ue4m3_value(raw[:, :4]), MXFP4_VALUES[np.concatenate([qs & 0xF, qs >> 4], axis=2)]


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    d, q = parts(raw, fmt)
    return (d[..., None] * q.astype(F)).reshape(len(raw), 64)


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N] with x in q8_0 (blocks of 32: two nvfp4 sub-blocks each): per sub-block
    of 16 the exact integer sum, times d_x and the sub-block's scale, added in order."""
    from accel.formats import legacy

    G = K // SUB
    dw, cw = parts(w_raw, fmt)
    dw, cw = dw.reshape(N, G), cw.reshape(N, G, SUB).astype(np.float64)
    dx, _, cx = legacy.parts(x_raw, x_fmt)
    dx = np.repeat(dx.reshape(M, K // 32), 2, axis=1)
    cx = cx.astype(np.float64).reshape(M, G, SUB)
    out = np.zeros((M, N), F)
    with np.errstate(invalid="ignore", over="ignore"):
        for g in range(G):
            s = (cx[:, g] @ cw[:, g].T).astype(F)  # |s| <= 16 * 12 * 127: exact
            out += (dx[:, g, None] * dw[None, :, g]) * s
    return out
