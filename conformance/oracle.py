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
LEGACY = ("q8_0", "q4_0")  # the formats this module quantizes itself
#: elements and bytes per block of the formats whose quantizer is ggml's search (ggml_ref)
SUPER = {"q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210), "q8_k": (256, 292),
         "mxfp4": (32, 17), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q2_k": (256, 84),
         "q3_k": (256, 110), "iq4_nl": (32, 18), "iq4_xs": (256, 136), "q8_1": (32, 36),
         "q1_0": (128, 18), "tq1_0": (256, 54), "tq2_0": (256, 66), "nvfp4": (64, 36),
         "iq2_xxs": (256, 66), "iq2_xs": (256, 74), "iq2_s": (256, 82), "iq3_xxs": (256, 98),
         "iq3_s": (256, 110), "iq1_s": (256, 50), "iq1_m": (256, 56)}
#: the codebook formats, whose values this oracle takes from gguf-py's dequantizers (a decoder
#: written apart from accel's, by the GGUF project): restating seven grids here would only copy
CODEBOOK = ("iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m")
#: the formats whose blocks this module reads as groups w = a c - b (``group_parts``)
GROUPED = ("q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "q1_0", "tq1_0", "tq2_0",
           "nvfp4")
#: the 4-bit non-linear code values of iq4_nl and iq4_xs (ggml-common.h's kvalues_iq4nl)
_IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113])
#: twice the FP4 (E2M1) value of each mxfp4 code
_E2M1_X2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12])
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


def attention(q, k, v, mask, *, causal: bool, scale: float, mask_kind: str | None,
              window: int | None = None, softcap: float | None = None, sinks=None) -> dict:
    """Softmax attention in float64, returning the output and the terms the tolerance needs.

    GQA: query head h reads kv head h // (Hq // Hkv). Causal is bottom-right aligned: query i
    sees key j iff j <= i + Sk - Sq, and with ``window`` W also iff j > i + Sk - Sq - W.
    ``softcap`` c maps each scaled logit s to c tanh(s / c) before the mask; ``sinks`` [Hq]
    adds exp(sink - max) to each row's denominator (the max taken over the sink too). A query
    whose keys are all hidden returns zeros.
    """
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, Hq, Sq, _ = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # kv head of each q head
    with np.errstate(invalid="ignore", over="ignore"):
        logits = scale * np.einsum("bhid,bhjd->bhij", q, k)
        logits_abs = abs(scale) * np.einsum("bhid,bhjd->bhij", np.abs(q), np.abs(k))
        if softcap is not None:  # |d/ds c tanh(s/c)| <= 1: the cap never enlarges an error
            logits = softcap * np.tanh(logits / softcap)
        visible = np.ones((B, Hq, Sq, Sk), dtype=bool)
        if causal:
            i = np.arange(Sq)[:, None]
            j = np.arange(Sk)[None, :]
            visible &= j <= i + (Sk - Sq)
            if window is not None:
                visible &= j > i + (Sk - Sq) - window
        if mask_kind == "bool":
            visible &= np.broadcast_to(mask, visible.shape)
        elif mask_kind == "additive":
            logits = logits + np.broadcast_to(mask.astype(np.float64), visible.shape)
        logits = np.where(visible, logits, -np.inf)
        row_max = logits.max(axis=-1, keepdims=True)  # NaN-propagating
        sink = None if sinks is None else sinks.astype(np.float64)[None, :, None, None]
        if sink is not None:
            row_max = np.maximum(row_max, sink)
        dead = row_max == -np.inf
        weights = np.exp(logits - np.where(dead, 0.0, row_max))
        denom = weights.sum(axis=-1, keepdims=True)
        if sink is not None:
            denom = denom + np.exp(sink - np.where(dead, 0.0, row_max))
        probs = weights / np.where(dead, 1.0, denom)
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
    if fmt not in LEGACY:
        return _quantize_super(x, fmt)
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


def super_quantizer() -> str:
    """Whose bytes the K-quant / mxfp4 / q8_k quantize oracle is: ggml's own C reference
    quantizers where ggml-python is installed ("ggml"), else the CPU reference backend's numpy
    restatement of them ("cpu"), which tests/accel/formats/test_kquants.py holds byte-identical to ggml where
    both exist; that keeps GPU images without ggml-python comparing bytes. The CPU backend itself
    is never judged by its own quantizer (runner.judge)."""
    from accel.conformance import ggml_ref

    return "ggml" if ggml_ref.available() else "cpu"


def _quantize_super(x: np.ndarray, fmt: str) -> np.ndarray:
    """ggml's own quantizer (see super_quantizer) on the finite blocks; accel's definition on the
    others (docs/api.md): the bytes of an all-zero block with the scale replaced by NaN (mxfp4:
    e = 0xFF), except that q4_1, q5_0, q5_1 and q8_1 blocks with an infinity and no NaN keep the
    reference's own d (infinite) and q8_1's s is NaN."""
    block, nbytes = SUPER[fmt]
    blocks = x.astype(np.float32).reshape(-1, block)
    finite = np.isfinite(blocks).all(axis=1)
    if fmt in CODEBOOK:
        with np.errstate(invalid="ignore"):
            finite &= np.abs(np.where(np.isfinite(blocks), blocks, 0)).max(axis=1) <= 2.0**32
    out = np.zeros((len(blocks), nbytes), np.uint8)
    if finite.any():
        out[finite] = _reference_quantize(blocks[finite], fmt)
        if fmt in _CODES_AT:  # 1/d overflows (C's conversion of inf is undefined): accel's codes
            tiny = finite & _inverse_overflows(blocks, fmt)  # of an all-zero block
            zero = _reference_quantize(np.zeros((1, block), np.float32), fmt)
            out[tiny, _CODES_AT[fmt]] = zero[0, _CODES_AT[fmt]]
            if fmt == "q8_1":  # s = d * sum(codes) = +0
                out[tiny, 2:4] = 0
    if finite.all():
        return out.reshape(x.shape[:-1] + (-1,))
    if fmt in CODEBOOK:  # ggml's search aborts on these: accel's definition (docs/api.md)
        return _codebook_nonfinite(out, blocks, fmt).reshape(x.shape[:-1] + (-1,))
    if fmt == "nvfp4":  # C is defined here: a NaN never raises a sub-block's maximum, an infinity
        out[~finite] = _reference_quantize(blocks[~finite], fmt)  # saturates it; both get code 0
        return out.reshape(x.shape[:-1] + (-1,))
    if fmt == "q1_0":  # C is defined here (d = sum |x| / 128, a bit per sign): ggml's bytes,
        out[~finite] = _reference_quantize(blocks[~finite], fmt)  # a NaN d stored as 0x7E00
        nan_d = np.isnan(out[:, :2].copy().view(np.float16)[:, 0])
        out[nan_d, :2] = np.full(1, np.nan, np.float16).view(np.uint8)
        return out.reshape(x.shape[:-1] + (-1,))
    bad = blocks[~finite]
    out[~finite] = _reference_quantize(np.zeros((1, block), np.float32), fmt)
    scale_at = {"q6_k": 208, "q2_k": 80, "q3_k": 108, "tq1_0": 52, "tq2_0": 64}.get(fmt, 0)
    if fmt == "mxfp4":
        out[~finite, 0] = 0xFF
    elif fmt == "q8_k":
        out[~finite, :4] = np.full(1, np.nan, np.float32).view(np.uint8)
    else:
        d = np.full(len(bad), np.nan, np.float32)
        has_nan = np.isnan(bad).any(axis=1)
        if fmt == "q5_0":
            d = np.where(has_nan, d, _first_largest(bad) / np.float32(-16))
        elif fmt in ("q4_1", "q5_1", "q8_1"):  # (max - min) / levels or amax / 127: infinite
            d = np.where(has_nan, d, np.float32(np.inf))
        out[~finite, scale_at:scale_at + 2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
        if fmt == "q8_1":
            out[~finite, 2:4] = np.full(1, np.nan, np.float16).view(np.uint8)
    return out.reshape(x.shape[:-1] + (-1,))


def _codebook_nonfinite(out: np.ndarray, blocks: np.ndarray, fmt: str) -> np.ndarray:
    """Codebook blocks with a NaN or an infinity: an all-zero block's bytes with d = NaN; finite
    blocks beyond 2**32 in magnitude (ggml aborts from about 1e12): the same with d = +inf."""
    finite = np.isfinite(blocks).all(axis=1)
    with np.errstate(invalid="ignore"):
        huge = finite & (np.abs(np.where(finite[:, None], blocks, 0)).max(axis=1) > 2.0**32)
    bad = ~finite | huge
    out[bad] = _reference_quantize(np.zeros((1, blocks.shape[1]), np.float32), fmt)
    for rows, d in ((~finite, np.float16(np.nan)), (huge, np.float16(np.inf))):
        bits = int(np.array(d).view(np.uint16))
        if fmt == "iq1_m":  # d's nibble k is the top nibble of 16-bit scale word k (bytes 48..55)
            for k in range(4):
                out[rows, 49 + 2 * k] = out[rows, 49 + 2 * k] % 16 + ((bits >> (4 * k)) % 16) * 16
        else:
            out[rows, 0], out[rows, 1] = bits % 256, bits // 256
    return out


#: the code bytes of the formats whose codes C leaves undefined where 1/d overflows
_CODES_AT = {"q4_1": slice(4, None), "q5_0": slice(2, None), "q5_1": slice(4, None),
             "q8_1": slice(4, None), "tq1_0": slice(0, 52), "tq2_0": slice(0, 64)}


def _first_largest(blocks: np.ndarray) -> np.ndarray:
    """Each block's first element of largest magnitude, sign kept (q5_0's reference d is it
    over -16)."""
    amax = np.abs(blocks).max(axis=1)
    return blocks[np.arange(len(blocks)), np.argmax(np.abs(blocks) == amax[:, None], axis=1)]


def _inverse_overflows(blocks: np.ndarray, fmt: str) -> np.ndarray:
    """Blocks whose reference d (float32) is nonzero with 1/d beyond float32's range."""
    f32 = np.float32
    with np.errstate(all="ignore"):
        if fmt == "q5_0":
            d = (_first_largest(blocks) / f32(-16)).astype(f32)
        elif fmt == "q8_1":
            d = (np.abs(blocks).max(axis=1) / f32(127)).astype(f32)
        elif fmt in ("tq1_0", "tq2_0"):  # d = max |x|
            d = np.abs(blocks).max(axis=1).astype(f32)
        else:
            levels = f32(15 if fmt == "q4_1" else 31)
            d = ((blocks.max(axis=1) - blocks.min(axis=1)) / levels).astype(f32)
        return (d != 0) & ~np.isfinite(f32(1) / d)


def _reference_quantize(blocks: np.ndarray, fmt: str) -> np.ndarray:
    """Bytes [n, block_bytes] of finite float32 blocks by ggml's quantizer (super_quantizer)."""
    from accel.conformance import ggml_ref

    if super_quantizer() == "ggml":
        return ggml_ref.quantize(blocks, fmt)
    if fmt == "q8_1":  # an activation format: no public quantize; the cpu reference's codec
        from accel.formats import quantize_blocks, get_format

        return quantize_blocks(blocks, get_format(fmt))
    import accel  # the CPU reference, through the registry as the suite reaches backends

    return np.asarray(accel.quantize(blocks, fmt, backend="cpu").raw).reshape(len(blocks), -1)


def super_parts(raw: np.ndarray, fmt: str) -> dict[str, np.ndarray]:
    """The K-quant / mxfp4 / q8_k blocks of ``raw`` as w = a * c - b with integer codes c and
    float64 scales, per group of elements sharing a scale: ``a`` and ``b`` [blocks, groups],
    ``c`` [blocks, groups, group size] (int64); ``sc``/``m`` the integer sub-scales and mins
    inside a, b (q4_k, q5_k: a = d sc, b = dmin m; q6_k: a = d sc, b = 0; q8_k, mxfp4: one group
    per block, a = d)."""
    block, nbytes = SUPER[fmt]
    r = raw.reshape(-1, nbytes).astype(np.int64)
    n = len(r)
    f16 = lambda lo: raw.reshape(-1, nbytes)[:, lo:lo + 2].copy().view(np.float16)[:, 0].astype(np.float64)  # noqa: E731
    if fmt in ("q4_k", "q5_k"):
        d, dmin, s = f16(0), f16(2), r[:, 4:16]
        sc, m = np.zeros((n, 8), np.int64), np.zeros((n, 8), np.int64)
        for j in range(8):  # 6-bit scale and min of sub-block j
            if j < 4:
                sc[:, j], m[:, j] = s[:, j] % 64, s[:, j + 4] % 64
            else:
                sc[:, j] = s[:, j + 4] % 16 + (s[:, j - 4] // 64) * 16
                m[:, j] = s[:, j + 4] // 16 + (s[:, j] // 64) * 16
        c = np.zeros((n, 8, 32), np.int64)
        qs = r[:, -128:]
        for j in range(8):  # sub-block j: nibble j % 2 of bytes 32 (j // 2) .. + 31
            c[:, j] = (qs[:, 32 * (j // 2): 32 * (j // 2) + 32] >> (4 * (j % 2))) % 16
            if fmt == "q5_k":
                c[:, j] += ((r[:, 16:48] >> j) % 2) * 16
        return {"a": d[:, None] * sc, "b": dmin[:, None] * m, "c": c, "sc": sc, "m": m,
                "d": d, "dmin": dmin}
    if fmt == "q6_k":
        d = f16(208)
        sc = raw.reshape(-1, nbytes)[:, 192:208].view(np.int8).astype(np.int64)
        c = np.zeros((n, 256), np.int64)
        for i in range(256):  # element i of half h: its low nibble and high pair
            h, k = divmod(i, 128)
            lo = r[:, 64 * h + k % 64] >> (4 * (k // 64)) & 15
            hi = r[:, 128 + 32 * h + k % 32] >> (2 * (k // 32)) & 3
            c[:, i] = lo + 16 * hi - 32
        return {"a": d[:, None] * sc, "b": np.zeros((n, 16)), "c": c.reshape(n, 16, 16), "sc": sc,
                "m": np.zeros((n, 16), np.int64), "d": d, "dmin": np.zeros(n)}
    if fmt == "q8_k":
        d = raw.reshape(-1, nbytes)[:, :4].copy().view("<f4")[:, 0].astype(np.float64)
        c = raw.reshape(-1, nbytes)[:, 4:260].view(np.int8).astype(np.int64)
        return {"a": d[:, None], "b": np.zeros((n, 1)), "c": c[:, None, :]}
    e = r[:, 0]
    d = np.ldexp(1.0, e - 128)  # the E8M0 scale halved: the codes are twice the FP4 values
    c = _E2M1_X2[np.concatenate([r[:, 1:] % 16, r[:, 1:] // 16], axis=1)]
    return {"a": d[:, None], "b": np.zeros((n, 1)), "c": c[:, None, :]}


def _f16(raw2d: np.ndarray, at: int) -> np.ndarray:
    return raw2d[:, at:at + 2].copy().view(np.float16)[:, 0].astype(np.float64)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16 k] bytes -> [n, 32 k] codes: per 16 bytes, element j low nibble, j + 16 high."""
    q = qs.reshape(len(qs), -1, 16)
    return np.concatenate([q % 16, q // 16], axis=2).reshape(len(qs), -1)


def group_parts(raw: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of the GROUPED formats as w = a c - b per group of elements sharing a scale:
    (a, b) float64 [blocks, groups], each exactly the float32 value ggml computes (d sc, dmin m),
    and the integer code values c int64 [blocks, groups, group size], read from ggml-common.h's
    layouts."""
    nbytes = SUPER[fmt][1]
    r8 = raw.reshape(-1, nbytes)
    r = r8.astype(np.int64)
    n = len(r)
    if fmt in ("q4_1", "q5_0", "q5_1"):
        has_min = fmt != "q5_0"
        d = _f16(r8, 0)
        b = -_f16(r8, 2) if has_min else np.zeros(n)  # w = d c + m
        c = _nibbles(r[:, -16:])
        if fmt != "q4_1":  # the fifth bits: a little-endian uint32, element j at bit j
            qh = r8[:, -20:-16].copy().view("<u4").astype(np.int64)
            c = c + ((qh >> np.arange(32)) % 2) * 16
        if not has_min:
            c = c - 16
        return d[:, None], b[:, None], c[:, None, :]
    if fmt == "iq4_nl":
        return _f16(r8, 0)[:, None], np.zeros((n, 1)), _IQ4_VALUES[_nibbles(r[:, 2:])][:, None, :]
    if fmt == "nvfp4":  # four groups of 16: an unsigned E4M3 byte each (four exponent bits, three
        v = r[:, :4]    # mantissa bits; 0x7F is zero), halved; byte k of a group's 8 holds
        e, m = (v // 8) % 16, v % 8  # elements k (low nibble) and k + 8 (high)
        a = np.where(v == 0x7F, 0.0, np.where(e == 0, m * 2.0 ** -10, (8 + m) * 2.0 ** (e - 11)))
        q = r[:, 4:].reshape(n, 4, 8)
        return a, np.zeros((n, 4)), _E2M1_X2[np.concatenate([q % 16, q // 16], axis=2)]
    if fmt == "q1_0":  # bit j % 8 of byte 2 + j // 8: +d where set, -d where clear
        c = ((r[:, 2 + np.arange(128) // 8] >> (np.arange(128) % 8)) % 2) * 2 - 1
        return np.repeat(_f16(r8, 0)[:, None], 4, axis=1), np.zeros((n, 4)), c.reshape(n, 4, 32)
    if fmt == "tq2_0":  # element 128 j + 32 l + m: bits 2 l of byte 32 j + m, less 1
        e = np.arange(256)
        c = (r[:, 32 * (e // 128) + e % 32] >> (2 * ((e % 128) // 32))) % 4 - 1
        return _f16(r8, 64)[:, None], np.zeros((n, 1)), c[:, None, :]
    if fmt == "tq1_0":  # a byte b holds the base-3 digits of floor(243 b / 256), top digit first
        def digits(b: np.ndarray, k: int) -> np.ndarray:  # [n, bytes] -> [n, k, bytes]
            v = (b * 243) // 256
            return np.stack([(v // 3 ** (4 - i)) % 3 for i in range(k)], axis=1)

        c = np.concatenate([digits(r[:, :32], 5).reshape(n, 160), digits(r[:, 32:48], 5).reshape(n, 80),
                            digits(r[:, 48:52], 4).reshape(n, 16)], axis=1) - 1
        return _f16(r8, 52)[:, None], np.zeros((n, 1)), c[:, None, :]
    if fmt == "iq4_xs":
        d = _f16(r8, 0)
        scales_h = r8[:, 2:4].copy().view("<u2").astype(np.int64)
        ls = np.stack([(r[:, 4 + g // 2] >> (4 * (g % 2))) % 16 + ((scales_h[:, 0] >> (2 * g)) % 4) * 16
                       for g in range(8)], axis=1)
        c = _IQ4_VALUES[_nibbles(r[:, 8:])].reshape(n, 8, 32)
        return d[:, None] * (ls - 32), np.zeros((n, 8)), c
    # q2_k and q3_k: 16 groups of 16; element e = 128 h + 32 j + (e % 32) reads bits 2 j of
    # byte 32 h + e % 32 of the 2-bit codes (and, for q3_k, bit 4 h + j of mask byte e % 32)
    e = np.arange(256)
    h, j, l32 = e // 128, (e % 128) // 32, e % 32
    qs = r[:, 16:80] if fmt == "q2_k" else r[:, 32:96]
    c = (qs[:, 32 * h + l32] >> (2 * j)) % 4
    if fmt == "q2_k":
        sc = r[:, :16]
        d, dmin = _f16(r8, 80), _f16(r8, 82)
        return d[:, None] * (sc % 16), dmin[:, None] * (sc // 16), c.reshape(n, 16, 16)
    high = (r[:, l32] >> (4 * h + j)) % 2
    c = c - 4 * (1 - high)
    sb = r[:, 96:108]
    g = np.arange(16)
    low = np.where(g < 8, sb[:, g % 8] % 16, sb[:, g % 8] // 16)
    sc = low + ((sb[:, 8 + g % 4] >> (2 * (g // 4))) % 4) * 16 - 32
    return _f16(r8, 108)[:, None] * sc, np.zeros((n, 16)), c.reshape(n, 16, 16)


def _dequantize_grouped(raw: np.ndarray, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's to_float in its float32 operation order: (a c) - b, a and b already float32."""
    a, b, c = group_parts(raw, fmt)
    f32 = np.float32
    with np.errstate(all="ignore"):
        y = (a.astype(f32)[..., None] * c.astype(f32)).astype(f32) - b.astype(f32)[..., None]
    return y.astype(np.float64).reshape(shape)


def _x_blocks(x_raw: np.ndarray, x_fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An activation row's blocks: (d float64 [blocks], codes int64 [blocks, block], the scaled
    code sum float64 [blocks]: q8_1's stored s, else d times the exact sum)."""
    block, nbytes = (32, 34) if x_fmt == "q8_0" else SUPER[x_fmt]
    r8 = x_raw.reshape(-1, nbytes)
    if x_fmt == "q8_k":
        d = r8[:, :4].copy().view("<f4")[:, 0].astype(np.float64)
        c = r8[:, 4:4 + block].view(np.int8).astype(np.int64)
    else:
        d, c = _f16(r8, 0), r8[:, -block:].view(np.int8).astype(np.int64)
    s = _f16(r8, 2) if x_fmt == "q8_1" else d * c.sum(axis=1)
    return d, c, s


def _grouped_dot(x_raw: np.ndarray, x_fmt: str, raw: np.ndarray, fmt: str, M: int, N: int,
                 K: int) -> tuple[np.ndarray, np.ndarray]:
    """ggml's vec_dot of a GROUPED weight format with x in its vec_dot format: per group,
    a d_x (c . c_x) - b s_x, where s_x is the x block's scaled code sum (q8_1 stores it, rounded
    to float16; the groups with a b in q8_k rows are 16 or 32 codes inside one x block)."""
    a, b, c = group_parts(raw, fmt)
    L = c.shape[-1]
    G = K // L
    a, b, c = a.reshape(N, G), b.reshape(N, G), c.reshape(N, G, L)
    dx, cx, sx = _x_blocks(x_raw, x_fmt)
    xb = cx.shape[1]
    cxg = cx.reshape(M, G, L)
    dxg = np.repeat(dx.reshape(M, -1), xb // L, axis=1) if xb >= L else dx.reshape(M, G)
    if x_fmt == "q8_1":  # groups are the x blocks
        sxg = sx.reshape(M, G)
    else:
        sxg = dxg * cxg.sum(axis=-1)
    S = np.einsum("mgl,ngl->mng", cxg, c)  # exact int64
    with np.errstate(invalid="ignore", over="ignore"):
        t1 = dxg[:, None, :] * a[None] * S
        t2 = b[None] * sxg[:, None, :]
        return (t1 - t2).sum(axis=-1), (np.abs(t1) + np.abs(t2)).sum(axis=-1)


def _dequantize_super(raw: np.ndarray, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """GGML's float32 dequantization, its operation order kept: (a c) - b, a and b rounded to
    float32 first (d * sc, dmin * m)."""
    p = super_parts(raw, fmt)
    f32 = np.float32
    with np.errstate(all="ignore"):
        a, b = p["a"].astype(f32)[..., None], p["b"].astype(f32)[..., None]
        y = (a * p["c"].astype(f32)).astype(f32) - b
    return y.astype(np.float64).reshape(shape)


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
    if fmt in CODEBOOK:
        from gguf import GGMLQuantizationType, quants

        with np.errstate(all="ignore"):
            y = quants.dequantize(np.ascontiguousarray(raw).reshape(-1),
                                  GGMLQuantizationType[fmt.upper()])
        return y.astype(np.float64).reshape(shape)
    if fmt in GROUPED:
        return _dequantize_grouped(raw, fmt, shape)
    if fmt == "q8_1":
        d, c, _ = _x_blocks(raw, fmt)
        with np.errstate(invalid="ignore"):
            return (d[:, None] * c).reshape(shape)
    if fmt not in LEGACY:
        return _dequantize_super(raw, fmt, shape)
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
    if fmt in CODEBOOK:  # x's q8_k values (exact) against the weights' values, in float64
        dx, cx, _ = _x_blocks(quantize(x.reshape(M, K), x_fmt), x_fmt)
        xv = (dx[:, None] * cx).reshape(M, K)
        w = dequantize(raw, fmt, (N, K))
        with np.errstate(invalid="ignore", over="ignore"):
            out, mag = product_sum(xv, w.T), product_sum(np.abs(xv), np.abs(w).T)
        return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))
    if fmt in GROUPED:
        out, mag = _grouped_dot(quantize(x.reshape(M, K), x_fmt), x_fmt, raw, fmt, M, N, K)
        return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))
    if fmt not in LEGACY:
        out, mag = _super_dot(quantize(x.reshape(M, K), x_fmt), x_fmt, raw, fmt, M, N, K)
        return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))
    dx, cx = _parts(quantize(x.reshape(M, K), x_fmt), x_fmt, M)
    dw, cw = _parts(raw, fmt, N)
    s = np.einsum("mbi,nbi->mnb", cx, cw).astype(np.float64)  # exact in int64
    with np.errstate(invalid="ignore", over="ignore"):
        terms = dx[:, None, :] * dw[None, :, :] * s
        out, mag = terms.sum(axis=-1), np.abs(terms).sum(axis=-1)
    return out.reshape(x.shape[:-1] + (N,)), mag.reshape(x.shape[:-1] + (N,))


def _super_dot(x_raw: np.ndarray, x_fmt: str, raw: np.ndarray, fmt: str, M: int, N: int,
               K: int) -> tuple[np.ndarray, np.ndarray]:
    """GGML's integer dot products of K-quant (mxfp4) weights with q8_k (q8_0) rows: per weight
    block, sum(a c x) - sum(b x) with the integer sums taken first, and the terms' magnitudes."""
    if fmt == "mxfp4":
        dx, cx = _parts(x_raw, x_fmt, M)  # q8_0: [M, nb], [M, nb, 32]
        p = super_parts(raw, fmt)
        dw, cw = p["a"][:, 0].reshape(N, -1), p["c"][:, 0].reshape(N, -1, BLOCK)
        with np.errstate(invalid="ignore", over="ignore"):
            terms = dx[:, None, :] * dw[None] * np.einsum("mbi,nbi->mnb", cx, cw)
        return terms.sum(axis=-1), np.abs(terms).sum(axis=-1)
    px, p = super_parts(x_raw, "q8_k"), super_parts(raw, fmt)
    nb = K // 256
    dx, cx = px["a"][:, 0].reshape(M, nb), px["c"].reshape(M, nb, 256)
    G = p["sc"].shape[1]
    cw = p["c"].reshape(N, nb, G, 256 // G)
    sc, m = p["sc"].reshape(N, nb, G), p["m"].reshape(N, nb, G)
    cxg = cx.reshape(M, nb, G, 256 // G)
    S = np.einsum("mbgl,nbgl,nbg->mnb", cxg, cw, sc)  # exact int64
    Mn = np.einsum("mbg,nbg->mnb", cxg.sum(axis=-1), m)
    d, dmin = p["d"].reshape(N, nb), p["dmin"].reshape(N, nb)
    with np.errstate(invalid="ignore", over="ignore"):
        t1 = dx[:, None, :] * d[None] * S
        t2 = dx[:, None, :] * dmin[None] * Mn
    return (t1 - t2).sum(axis=-1), (np.abs(t1) + np.abs(t2)).sum(axis=-1)
