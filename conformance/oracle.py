"""The oracle: what each op must return, in float64 (int64 for integer ops).

Written as the plainest numpy that is obviously right, from the inputs *after* they were rounded
to the case's dtype. It shares no code with any backend (the CPU reference included), so a bug
there cannot hide by being copied here. Sums are explicit products reduced by numpy, not BLAS,
so IEEE NaN/Inf propagation is exactly the textbook one.
"""
from __future__ import annotations

import math

import numpy as np

BLOCK = 32  # GGML block length, restated here so the oracle depends on no accel module
_CHUNK_ELEMS = 1 << 22  # products held at once by the reduction: bounds the oracle's memory


def product_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[..., M, K] @ b[..., K, N]`` as a sum of explicit products, chunked over K.

    Works for float64 and int64 alike (exact for integers); broadcasting follows numpy.
    """
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    step = max(1, _CHUNK_ELEMS // max(1, math.prod(batch) * M * N))
    total = np.zeros(batch + (M, N), dtype=np.result_type(a, b))
    for k0 in range(0, K, step):
        prods = a[..., :, k0:k0 + step, None] * b[..., None, k0:k0 + step, :]
        total = total + prods.sum(axis=-2)
    return total


def matmul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A B, |A| |B|) in float64, or int64 for integer inputs (then |A||B| is unused)."""
    if a.dtype.kind in "iu":
        a64, b64 = a.astype(np.int64), b.astype(np.int64)
        return product_sum(a64, b64), product_sum(np.abs(a64), np.abs(b64))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return product_sum(a64, b64), product_sum(np.abs(a64), np.abs(b64))


def scaled_matmul(a, b, scale_a, scale_b, bias, block: int | None) -> tuple[np.ndarray, np.ndarray]:
    """((a sa)(b sb) + bias, |a sa||b sb|) in float64: every FP8 value decoded exactly, the
    scales applied to the operands (``block``: each scale covers a 1 x block tile of a and a
    block x block tile of b; None: scalars or [M, 1] / [1, N])."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    sa, sb = scale_a.astype(np.float64), scale_b.astype(np.float64)
    if block:
        M, K = a64.shape
        N = b64.shape[1]
        sa = np.repeat(sa, block, axis=1)[:, :K]
        sb = np.repeat(np.repeat(sb, block, axis=0), block, axis=1)[:K, :N]
    else:
        sa, sb = sa.reshape(-1, 1), sb.reshape(1, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        ref, mag = matmul(a64 * sa, b64 * sb)
        return (ref if bias is None else ref + bias.astype(np.float64)), mag


def attention(q, k, v, mask, *, causal: bool, scale: float, mask_kind: str | None) -> dict:
    """Softmax attention in float64, returning the output and the terms the tolerance needs.

    GQA: query head h reads kv head h // (Hq // Hkv). Causal is bottom-right aligned: query i
    sees key j iff j <= i + Sk - Sq. A query whose keys are all hidden returns zeros.
    """
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, Hq, Sq, _ = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # kv head of each q head
    with np.errstate(invalid="ignore", over="ignore"):
        logits = scale * np.einsum("bhid,bhjd->bhij", q, k)
        logits_abs = abs(scale) * np.einsum("bhid,bhjd->bhij", np.abs(q), np.abs(k))
        visible = np.ones((B, Hq, Sq, Sk), dtype=bool)
        if causal:
            i = np.arange(Sq)[:, None]
            j = np.arange(Sk)[None, :]
            visible &= j <= i + (Sk - Sq)
        if mask_kind == "bool":
            visible &= np.broadcast_to(mask, visible.shape)
        elif mask_kind == "additive":
            logits = logits + np.broadcast_to(mask.astype(np.float64), visible.shape)
        logits = np.where(visible, logits, -np.inf)
        row_max = logits.max(axis=-1, keepdims=True)  # NaN-propagating
        dead = row_max == -np.inf
        weights = np.exp(logits - np.where(dead, 0.0, row_max))
        probs = weights / np.where(dead, 1.0, weights.sum(axis=-1, keepdims=True))
        probs = np.where(dead, 0.0, probs)
        out = np.einsum("bhij,bhjd->bhid", probs, v)
        weighted_abs_v = np.einsum("bhij,bhjd->bhid", probs, np.abs(v))
    return {"out": out, "logits": logits, "logits_abs": logits_abs, "row_max": row_max,
            "visible": visible & np.isfinite(logits), "weighted_abs_v": weighted_abs_v}


# -- GGML block quantization: the reference quantizer, step by step in float32 -----------------
def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf: ties away from zero. Exact: |v| + 0.5 is exact in float64 for float32 v."""
    v64 = v.astype(np.float64)
    return np.sign(v64) * np.floor(np.abs(v64) + 0.5)


def _block_scale(blocks: np.ndarray, fmt: str) -> np.ndarray:
    """The reference's float32 ``d`` per block, for finite blocks."""
    amax = np.abs(blocks).max(axis=1)
    if fmt == "q8_0":
        return (amax / np.float32(127)).astype(np.float32)
    # q4_0: the first element of largest magnitude, with its sign; the reference starts from +0.0
    # and only replaces it on a strictly larger magnitude, so an all-zero block keeps +0.0.
    first = np.argmax(np.abs(blocks) == amax[:, None], axis=1)
    m = np.where(amax > 0, blocks[np.arange(len(blocks)), first], np.float32(0.0))
    return (m.astype(np.float32) / np.float32(-8)).astype(np.float32)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """GGUF block bytes ``[..., K // 32 * block_bytes]`` of x quantized along its last axis.

    Finite blocks follow GGML's reference quantizer; accel defines what C leaves undefined: any
    NaN gives d = NaN (0x7E00) and zero codes, else an infinity gives the reference's (infinite) d
    and zero codes; a d so small that 1/d overflows float32 gives zero codes.
    """
    blocks = x.astype(np.float32).reshape(-1, BLOCK)
    has_nan = np.isnan(blocks).any(axis=1)
    finite = np.isfinite(blocks).all(axis=1)
    with np.errstate(all="ignore"):
        d = _block_scale(blocks, fmt)
        d = np.where(has_nan, np.float32(np.nan), d).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        inv = np.where(np.isfinite(inv), inv, np.float32(0))  # accel's rule where 1/d overflows
        scaled = (blocks * inv[:, None]).astype(np.float32)
        if fmt == "q8_0":
            codes = _round_half_away(scaled)
            codes = np.where(finite[:, None], codes, 0).astype(np.int8).view(np.uint8)
        else:
            shifted = (scaled + np.float32(8.5)).astype(np.float32)  # the reference's float32 add
            codes = np.minimum(15, np.trunc(shifted.astype(np.float64)))
            codes = np.where(finite[:, None], codes, 8).astype(np.uint8)
            codes = codes[:, :BLOCK // 2] | (codes[:, BLOCK // 2:] << 4)
    with np.errstate(over="ignore"):  # d beyond 65504 becomes infinite, as in the reference
        d16 = d.astype(np.float16)
    d16 = np.where(has_nan, np.float16(np.nan), d16)  # canonical quiet NaN 0x7E00
    out = np.concatenate([d16.view(np.uint8).reshape(-1, 2), codes], axis=1)
    return out.reshape(x.shape[:-1] + (-1,))


def _parts(raw: np.ndarray, fmt: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(d float64 [rows, nb], codes int64 [rows, nb, 32]) of GGUF blocks (Q4_0 codes less 8)."""
    block_bytes = 2 + (BLOCK if fmt == "q8_0" else BLOCK // 2)
    blocks = raw.reshape(-1, block_bytes)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
    if fmt == "q8_0":
        codes = blocks[:, 2:].view(np.int8).astype(np.int64)
    else:
        packed = blocks[:, 2:].astype(np.int64)
        codes = np.concatenate([packed & 0xF, packed >> 4], axis=1) - 8
    return d.reshape(rows, -1), codes.reshape(rows, -1, BLOCK)


def dequantize(raw: np.ndarray, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """float64 values of GGUF blocks (exactly representable in float32)."""
    d, codes = _parts(raw, fmt, 1)
    with np.errstate(invalid="ignore"):
        return (codes * d[..., None]).reshape(shape)


def qmatmul(x: np.ndarray, raw: np.ndarray, fmt: str, N: int) -> tuple[np.ndarray, np.ndarray]:
    """``x[..., K] @ dequantize(w).T`` and its |x| |w|^T, in float64."""
    K = x.shape[-1]
    w = dequantize(raw, fmt, (N, K))
    x2 = x.astype(np.float64).reshape(-1, K)
    with np.errstate(invalid="ignore", over="ignore"):
        out = product_sum(x2, w.T)
        mag = product_sum(np.abs(x2), np.abs(w).T)
    return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))


def qmatmul_quantized_x(x: np.ndarray, raw: np.ndarray, fmt: str, N: int,
                        x_fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """``qmatmul(x, w, x_format=x_fmt)``: x quantized (by this oracle's quantizer), then per block
    pair d_x d_w times the exact integer dot product of the codes, summed; and the sum of the
    terms' magnitudes. float64: every term is exact (22-bit scale product, 20-bit integer)."""
    K = x.shape[-1]
    M = x.size // K
    dx, cx = _parts(quantize(x.reshape(M, K), x_fmt), x_fmt, M)
    dw, cw = _parts(raw, fmt, N)
    s = np.einsum("mbi,nbi->mnb", cx, cw).astype(np.float64)  # exact in int64
    with np.errstate(invalid="ignore", over="ignore"):
        terms = dx[:, None, :] * dw[None, :, :] * s
        out, mag = terms.sum(axis=-1), np.abs(terms).sum(axis=-1)
    return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))
