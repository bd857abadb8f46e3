"""One planted bug per backend, each on top of the correct CPU reference (whose ``compute`` turns
a spec and host arrays into the result). The docstring of each class names the defect the
conformance quick profile must catch."""
from __future__ import annotations

import dataclasses

import numpy as np

from accel.backend import Support
from accel.backends.cpu import CPUBackend
from accel.dtypes import to_numpy_dtype


class _Planted(CPUBackend):
    priority = -100  # never chosen automatically


class KOffByOne(_Planted):
    """matmul drops the last term of every dot product (a loop bound of K - 1)."""

    name = "planted_k_off_by_one"

    def compute(self, spec, *arrays):
        if spec.op == "matmul":
            a, b = arrays
            a = a.copy()
            a[..., -1] = 0
            arrays = (a, b)
        return super().compute(spec, *arrays)


class Float16Accumulation(_Planted):
    """float matmul keeps its running sum in float16 while declaring float32 accumulation."""

    name = "planted_fp16_accumulation"

    def compute(self, spec, *arrays):
        if spec.op != "matmul" or spec.dtype == "int8":
            return super().compute(spec, *arrays)
        x, y = (t.astype(np.float32) for t in arrays)
        acc = np.zeros(spec.out_shape, np.float16)
        for k in range(spec.K):
            acc = (acc + x[..., :, k:k + 1] * y[..., k:k + 1, :]).astype(np.float16)
        return acc.astype(to_numpy_dtype(spec.out_dtype))


class TopLeftCausal(_Planted):
    """causal attention aligned top-left (query i sees keys j <= i), torch's is_causal, instead of
    accel's bottom-right alignment; the two agree whenever Sq == Sk."""

    name = "planted_topleft_causal"

    def compute(self, spec, *arrays):
        if spec.op != "attention" or not spec.causal:
            return super().compute(spec, *arrays)
        q, k, v, mask = arrays
        full = (spec.B, spec.Hq, spec.Sq, spec.Sk)
        keep = np.broadcast_to(np.tri(spec.Sq, spec.Sk, dtype=bool), full)
        if mask is None or spec.mask_kind == "bool":
            new_mask = keep if mask is None else keep & np.broadcast_to(mask, full)
            kind, mdtype = "bool", "bool"
        else:
            m = np.broadcast_to(mask.astype(np.float32), full)
            new_mask, kind, mdtype = np.where(keep, m, -np.inf).astype(np.float32), "additive", "float32"
        spec2 = dataclasses.replace(spec, causal=False, mask_kind=kind, mask_shape=full,
                                    mask_dtype=mdtype)
        return super().compute(spec2, q, k, v, new_mask)


class Q8TiesToEven(_Planted):
    """q8_0 codes rounded half to even (rint, as GGML's SIMD path does) instead of the
    reference's half away from zero."""

    name = "planted_q8_ties_even"

    def compute(self, spec, *arrays):
        res = super().compute(spec, *arrays)
        if spec.op != "quantize" or spec.fmt.name != "q8_0":
            return res
        blocks = arrays[0].astype(np.float32).reshape(-1, 32)
        raw = res.reshape(-1, spec.fmt.block_bytes)
        with np.errstate(all="ignore"):
            d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
            inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            codes = np.rint(blocks * inv)
        finite = np.isfinite(blocks).all(axis=1)
        raw[finite, 2:] = codes[finite].astype(np.int8).view(np.uint8)
        return res


class DroppedGQAMapping(_Planted):
    """attention ignores the kv head index: every query head reads kv head 0."""

    name = "planted_gqa_dropped"

    def compute(self, spec, *arrays):
        if spec.op == "attention":
            q, k, v, mask = arrays
            k = np.repeat(k[:, :1], spec.Hkv, axis=1)
            v = np.repeat(v[:, :1], spec.Hkv, axis=1)
            arrays = (q, k, v, mask)
        return super().compute(spec, *arrays)


class WritesPastOutput(_Planted):
    """matmul writes one extra element just past the end of its output buffer (one thread too
    many). Buffers get slack, so the stray write never lands outside memory they own."""

    name = "planted_oob_write"

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes + 64, np.uint8)[:nbytes]

    def run(self, spec, out, *inputs) -> None:
        super().run(spec, out, *inputs)
        if spec.op == "matmul":
            size, n = to_numpy_dtype(out.dtype).itemsize, out.nbytes
            past = np.lib.stride_tricks.as_strided(out.buf, shape=(n + size,), strides=(1,))
            past[n:] = past[n - size:n]


class NaNToZero(_Planted):
    """matmul turns NaN results into 0 (a max(x, 0)-style clamp that drops NaN)."""

    name = "planted_nan_to_zero"

    def compute(self, spec, *arrays):
        res = super().compute(spec, *arrays)
        if spec.op == "matmul" and spec.dtype != "int8":
            res[np.isnan(res.astype(np.float32))] = 0
        return res


class Overclaims(_Planted):
    """supports() claims every case, but masked attention is not implemented."""

    name = "planted_overclaims"

    def supports(self, spec) -> Support:
        return Support(True)

    def compute(self, spec, *arrays):
        if spec.op == "attention" and arrays[3] is not None:
            raise NotImplementedError("attention masks are not implemented")
        return super().compute(spec, *arrays)


class TruncatedBfloat16(_Planted):
    """bfloat16 outputs keep the top 16 bits of the float32 result (truncation toward zero)
    instead of rounding to nearest with ties to even: off by under one ulp, within any bound
    a tolerance model grants for accumulated rounding."""

    name = "planted_bf16_truncation"

    def compute(self, spec, *arrays):
        if spec.op == "quantize" or spec.out_dtype != "bfloat16":
            return super().compute(spec, *arrays)
        wide = dataclasses.replace(spec, out_dtype="float32") if spec.op == "matmul" else None
        res = super().compute(wide, *arrays) if wide else _float32_result(self, spec, arrays)
        bits = np.ascontiguousarray(res, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
        return bits.view(np.float32).astype(to_numpy_dtype("bfloat16"))


def _float32_result(backend: CPUBackend, spec, arrays) -> np.ndarray:
    """The op's result before the output conversion (the reference computes in float32)."""
    with np.errstate(all="ignore"):
        return getattr(backend, "_" + spec.op)(spec, *arrays).astype(np.float32)


class TailTileRace(_Planted):
    """One element of every large output (from 65,536 elements up) holds its neighbour's value,
    as a race between two work-groups over a tail tile would leave it."""

    name = "planted_tail_race"

    def compute(self, spec, *arrays):
        res = super().compute(spec, *arrays)
        flat = res.reshape(-1)
        if flat.size >= 65536:
            at = flat.size - flat.size // 7
            flat[at] = flat[at - 1]
        return res


class FnuzDecoding(_Planted):
    """FP8 scaled matmul decodes float8_e4m3fn bytes as float8_e4m3fnuz (MI300's format: one more
    exponent bias, so every value halves, and 0x80 reads as NaN): the cross-vendor mix-up."""

    name = "planted_fnuz_decoding"

    def compute(self, spec, *arrays):
        if spec.op == "scaled_matmul":
            fnuz = to_numpy_dtype("float8_e4m3fnuz")
            arrays = tuple(x.view(np.uint8).view(fnuz) if x is not None and x.dtype ==
                           to_numpy_dtype("float8_e4m3fn") else x for x in arrays)
            spec = dataclasses.replace(spec, a_dtype="float8_e4m3fnuz", b_dtype="float8_e4m3fnuz") \
                if spec.a_dtype == "float8_e4m3fn" else spec
        return super().compute(spec, *arrays)



class SwappedK4ScaleBits(_Planted):
    """q4_k / q5_k weights read with the top two bits of sub-blocks 4-7's 6-bit scale and min
    swapped (bytes 0-3 give the mins' bits, bytes 4-7 the scales'): a slip in GGML's
    get_scale_min_k4 unpacking that leaves sub-blocks 0-3 right."""

    name = "planted_k4_scale_swap"

    def compute(self, spec, *arrays):
        fmt = getattr(spec, "fmt", None)
        if spec.op in ("dequantize", "qmatmul") and fmt is not None and fmt.name in ("q4_k", "q5_k"):
            at = 0 if spec.op == "dequantize" else 1
            raw = arrays[at].reshape(-1, fmt.block_bytes).copy()
            top_sc, top_m = raw[:, 0:4] & 0xC0, raw[:, 4:8] & 0xC0
            raw[:, 0:4] = (raw[:, 0:4] & 0x3F) | top_m
            raw[:, 4:8] = (raw[:, 4:8] & 0x3F) | top_sc
            arrays = arrays[:at] + (raw.reshape(arrays[at].shape),) + arrays[at + 1:]
        return super().compute(spec, *arrays)
