"""GGML's sign and ternary formats: q1_0 (blocks of 128 signs with one float16 scale, the mean
|x|) and tq1_0 / tq2_0 (BitNet b1.58's ternary weights, super-blocks of 256 with codes -1, 0, 1
packed five to a byte in base 3, or four to a byte in 2 bits): the reference quantizers of
``ggml-quants.c`` bit for bit, the decoders, and ggml's integer dot products (q1_0 with x in
q8_0, the ternary ones with x in q8_k).

Non-finite blocks: q1_0's C code is defined for them (d = sum |x| / 128 is infinite or NaN, a
bit per sign), and accel follows it, a NaN d stored as 0x7E00; a tq block holding a NaN or an
infinity (where C converts NaN) stores a NaN d and the codes of an all-zero block, as does one
whose 1/d overflows float32 (its codes: those of an all-zero block, d as computed).
"""
from __future__ import annotations

import numpy as np

from accel.formats.rounding import F, f16_at, f16_bytes, round_half_away, seq_sum

#: (byte offset of d, bytes of codes before it) of each layout
_D_AT = {"q1_0": 0, "tq1_0": 52, "tq2_0": 64}
#: 3^n for the n-th trit of a base-3 byte, as uint8 multipliers (ggml's pow3)
_POW3 = np.array([1, 3, 9, 27, 81, 243], np.uint8)
_F16_NAN = np.array([0x00, 0x7E], np.uint8)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGML's reference quantizer of ``fmt`` on float32 blocks [n, block]."""
    x = x.astype(F, copy=False)
    n = len(x)
    if fmt == "q1_0":
        with np.errstate(invalid="ignore", over="ignore"):
            d = seq_sum(np.abs(x)) / F(128)
        bits = (x >= 0).astype(np.uint8).reshape(n, 16, 8)
        qs = (bits << np.arange(8, dtype=np.uint8)).sum(axis=2, dtype=np.uint8)
        out = np.concatenate([f16_bytes(d), qs], axis=1)
        out[np.isnan(d), :2] = _F16_NAN
        return out
    finite = np.isfinite(x).all(axis=1)
    with np.errstate(all="ignore"):
        d = np.where(finite, np.abs(x).max(axis=1), F(np.nan)).astype(F)
        inv = np.where(d != 0, F(1) / d, F(0)).astype(F)
        inv = np.where(np.isfinite(inv) & finite, inv, F(0))  # 1/d overflow: zero-block codes
        xs = np.where(finite[:, None], x, F(0))  # a non-finite block: an all-zero block's codes
        t = (round_half_away((xs * inv[:, None]).astype(F)) + 1).astype(np.int32)  # 0, 1, 2
    if fmt == "tq2_0":  # element 128 j + 32 n + m: bits 2n of byte 32 j + m
        t = t.reshape(n, 2, 4, 32)
        qs = (t << (2 * np.arange(4)).reshape(1, 1, 4, 1)).sum(axis=2).reshape(n, 64)
    else:  # five trits a byte over bytes 0-31 (elements m + 32 i), 32-47 (160 + m + 16 i), then
        # four over qh 0-3 (240 + j + 4 i) shifted to the top trit; each byte the ceiling of
        # its base-3 value times 256 / 243
        def pack(trits: np.ndarray) -> np.ndarray:  # [n, k, bytes] -> ceil(v * 256 / 243)
            v = np.zeros(trits.shape[::2], np.int32)
            for i in range(trits.shape[1]):
                v = v * 3 + trits[:, i]
            return ((v * 256 + 242) // 243).astype(np.uint8)

        head = pack(t[:, :160].reshape(n, 5, 32))
        mid = pack(t[:, 160:240].reshape(n, 5, 16))
        qh = pack(np.concatenate([t[:, 240:].reshape(n, 4, 4), np.zeros((n, 1, 4), np.int32)], axis=1))
        qs = np.concatenate([head, mid, qh], axis=1)
    out = np.concatenate([qs.astype(np.uint8), f16_bytes(d)], axis=1)
    out[~finite, -2:] = _F16_NAN
    return out


def parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Bytes [n, block_bytes] -> (d float32 [n, 1], codes int32 [n, block]: q1_0's -1 / +1,
    tq's -1 / 0 / 1)."""
    n = len(raw)
    d = f16_at(raw, _D_AT[fmt])[:, None]
    if fmt == "q1_0":
        bits = (raw[:, 2:, None] >> np.arange(8, dtype=np.uint8)) & 1
        return d, bits.reshape(n, 128).astype(np.int32) * 2 - 1
    if fmt == "tq2_0":
        q = (raw[:, :64].reshape(n, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
        return d, q.reshape(n, 256).astype(np.int32) - 1

    def trits(b: np.ndarray, k: int) -> np.ndarray:  # [n, bytes] -> [n, k, bytes]: the top trit
        q = (b[:, None, :] * _POW3[:k, None]).astype(np.uint8)  # first (uint8 products wrap)
        return (q.astype(np.int32) * 3) >> 8

    head, mid, qh = trits(raw[:, :32], 5), trits(raw[:, 32:48], 5), trits(raw[:, 48:52], 4)
    q = np.concatenate([head.reshape(n, 160), mid.reshape(n, 80), qh.reshape(n, 16)], axis=1)
    return d, q - 1


def dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    """float32 [n, block]: code times d, one rounding (ggml's to_float)."""
    d, q = parts(raw, fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.multiply(q, d, dtype=F)


def dot(x_raw: np.ndarray, x_fmt: str, w_raw: np.ndarray, fmt: str, M: int, N: int,
        K: int) -> np.ndarray:
    """float32 [M, N] of ggml's dot products: q1_0 with q8_0 (per weight block, d_w times the
    sum over its four x blocks of d_x times the exact integer sum), tq1_0 / tq2_0 with q8_k
    (per super-block, the exact integer sum times d_x d_w), added block after block."""
    from accel.formats import kquants, legacy

    dw, cw = parts(w_raw, fmt)
    block = cw.shape[1]
    nb = K // block
    dw, cw = dw.reshape(N, nb), cw.astype(np.float64).reshape(N, nb, block)
    out = np.zeros((M, N), F)
    with np.errstate(invalid="ignore", over="ignore"):
        if x_fmt == "q8_0":
            dx, _, cx = legacy.parts(x_raw, x_fmt)
            dx, cx = dx.reshape(M, nb, 4), cx.astype(np.float64).reshape(M, nb, 4, 32)
            cw4 = cw.reshape(N, nb, 4, 32)
            for b in range(nb):
                sumi = np.zeros((M, N), F)
                for k in range(4):
                    s = (cx[:, b, k] @ cw4[:, b, k].T).astype(F)  # |s| <= 32 * 128: exact
                    sumi += dx[:, b, k, None] * s
                out += dw[None, :, b] * sumi
            return out
        dq, cq, _ = kquants.parts(x_raw, x_fmt)
        dq, cq = dq.reshape(M, nb), cq.astype(np.float64).reshape(M, nb, block)
        for b in range(nb):
            s = (cq[:, b] @ cw[:, b].T).astype(F)  # |s| <= 256 * 128: exact
            out += s * (dq[:, b, None] * dw[None, :, b])
    return out
