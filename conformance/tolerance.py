"""The tolerance model: a per-element error bound for every float result (docs/conformance.md).

Reductions get a probabilistic bound (Higham & Mary 2019) scaled by the accumulator the backend
declares, not a fixed rtol/atol: a fixed tolerance both fails correct long reductions (through
cancellation) and passes wrong short ones. Quantize, dequantize and int8 matmul are exact.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from accel.dtypes import UNIT_ROUNDOFF

#: lambda in ``lambda sqrt(n) u``: all-positive data reaches ~1.05 sqrt(n) u, so 3 is the least
#: safe value; 5 leaves ~2x headroom while a float16-accumulating GEMM still exceeds it 27-406x
LAMBDA = 5.0
#: roundings in attention outside the two reductions (scale, mask add, max subtraction, exp,
#: normalisation, online-softmax rescaling), each bounded by u_acc relative
ATTENTION_EXTRA_ROUNDINGS = 8

#: the float formats results and accumulators come in (compare.py reads it too)
FINFO = {
    "float64": np.finfo(np.float64),
    "float32": np.finfo(np.float32),
    "float16": np.finfo(np.float16),
    "bfloat16": ml_dtypes.finfo(ml_dtypes.bfloat16),
    "tf32": np.finfo(np.float32),  # tf32 keeps float32's exponent range
}


def smallest_normal(fmt: str) -> float:
    return float(FINFO[fmt].smallest_normal)


def overflow_threshold(fmt: str) -> float:
    """Magnitudes at or above this round to infinity under round-to-nearest."""
    info = FINFO[fmt]
    ulp_at_max = 2.0 ** (int(info.maxexp) - 1 - int(info.nmant))
    return float(info.max) + ulp_at_max / 2


def floor(out_fmt: str, acc_fmt: str, terms: int) -> float:
    """Absolute slack for results near underflow: a flushed-to-zero output (smallest normal of
    the output) plus each of ``terms`` flushed-to-zero products in the accumulator."""
    return smallest_normal(out_fmt) + terms * smallest_normal(acc_fmt)


def matmul_bound(ref: np.ndarray, magnitude: np.ndarray, K: int, out_fmt: str,
                 acc_fmt: str) -> np.ndarray:
    """``2 u_out |C| + lambda sqrt(K) u_acc (|A||B|) + floor`` per element."""
    u_out, u_acc = UNIT_ROUNDOFF[out_fmt], UNIT_ROUNDOFF[acc_fmt]
    return (2 * u_out * np.abs(ref) + LAMBDA * math.sqrt(K) * u_acc * magnitude
            + floor(out_fmt, acc_fmt, K))


def attention_bound(oracle: dict, D: int, Sk: int, in_fmt: str, acc_fmt: str) -> np.ndarray:
    """Per-element bound on attention output (derivation in docs/conformance.md).

    A logit error e_j moves output i by at most 2 max_j|e_j| sum_j p_j |v_j|; rounding the
    probabilities to the input format (as FlashAttention does before the PV product) adds
    u_in sum_j p_j |v_j|; the PV reduction adds lambda sqrt(Sk) u_acc sum_j p_j |v_j|.
    """
    u_out = u_in = UNIT_ROUNDOFF[in_fmt]
    u_acc = UNIT_ROUNDOFF[acc_fmt]
    vis = oracle["visible"]
    with np.errstate(invalid="ignore"):
        row_max = np.where(np.isfinite(oracle["row_max"]), np.abs(oracle["row_max"]), 0.0)
        logit_err = (LAMBDA * math.sqrt(D) * u_acc * oracle["logits_abs"]
                     + ATTENTION_EXTRA_ROUNDINGS * u_acc * (np.abs(oracle["logits"]) + row_max))
    worst_logit_err = np.where(vis, logit_err, 0.0).max(axis=-1, keepdims=True)
    per_weight = (2 * worst_logit_err + u_in + LAMBDA * math.sqrt(Sk) * u_acc
                  + ATTENTION_EXTRA_ROUNDINGS * u_acc)
    bound = (2 * u_out * np.abs(oracle["out"]) + per_weight * oracle["weighted_abs_v"]
             + floor(in_fmt, acc_fmt, Sk + D))
    # a row that sees no key is exactly zero (docs/api.md): no floor there, or float16's (its
    # smallest normal) would let 3e-5 written into such rows pass
    return np.where(vis.any(axis=-1, keepdims=True), bound, 0.0)
