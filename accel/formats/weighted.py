"""Quantizing with an importance matrix (llama-quantize's ``--imatrix``: one non-negative weight
per column of the rows, the mean square of the activations that meet that column). With one,
ggml's quantizers search for the codes that minimise the weighted error, a different search for
every format; accel runs ggml's own (``ggml_quantize_chunk`` from ggml-python, the ``ggml``
extra), so the bytes are ggml's by construction. Formats ggml quantizes only this way: iq2_xxs,
iq2_xs, iq1_s (the table's ``needs_imatrix``).
"""
from __future__ import annotations

import ctypes

import numpy as np

from accel.errors import ArgumentError, DTypeError, ShapeError, UnsupportedError, expected
from accel.formats import QuantFormat
from accel.formats.codebook import SEARCH_LIMIT



def check_imatrix(imatrix: object, k: int) -> np.ndarray:
    """The importance matrix as float32 [k], or a typed error naming ``imatrix``."""
    if not isinstance(imatrix, np.ndarray) or isinstance(imatrix, (np.ma.MaskedArray, np.matrix)):
        raise ArgumentError(expected("imatrix", "a numpy array of K float32 weights (one per "
                                     "column of x)", type(imatrix).__name__))
    if imatrix.dtype.kind != "f":
        raise DTypeError(expected("imatrix.dtype", "a float dtype (float32)", str(imatrix.dtype)))
    if imatrix.shape != (k,):
        raise ShapeError(expected("imatrix.shape", f"({k},), one weight per column of x (K = {k})",
                                  imatrix.shape))
    w = imatrix.astype(np.float32)
    if not np.isfinite(w).all() or (w < 0).any():
        bad = w[~(np.isfinite(w) & (w >= 0))][0]
        raise ArgumentError(expected("imatrix", "finite weights >= 0", f"{float(bad)!r} among them"))
    return np.ascontiguousarray(w)


def quantize(x: np.ndarray, fmt: QuantFormat, imatrix: np.ndarray) -> np.ndarray:
    """ggml's bytes [rows, row_bytes] of float32 rows x [rows, K] weighted by ``imatrix`` [K]."""
    if fmt.activation_only:
        raise ArgumentError(expected("imatrix", f"None for {fmt.name}, an activation format "
                                     "(an importance matrix weighs weight formats)", "an array"))
    try:
        import ggml
    except ImportError:
        raise UnsupportedError("cpu", "quantize", fmt.name, "quantizing with an importance matrix "
                               "runs ggml's own quantizer, from ggml-python: pip install "
                               "'accel-portable[ggml]'") from None
    x = np.ascontiguousarray(x, np.float32)
    if not np.isfinite(x).all():
        raise ArgumentError(expected("x", "finite values when quantizing with an imatrix (ggml's "
                                     "weighted search has no answer for NaN or infinity)",
                                     "a NaN or an infinity"))
    if x.size and np.abs(x).max() > SEARCH_LIMIT:
        raise ArgumentError(expected("x", f"values within +-2**32 when quantizing with an imatrix "
                                     "(ggml's searches abort beyond)", float(np.abs(x).max())))
    t = getattr(ggml, f"GGML_TYPE_{fmt.ggml}")
    rows, k = x.shape
    out = np.zeros((rows, ggml.ggml_row_size(t, k)), np.uint8)
    if rows:
        ggml.ggml_quantize_chunk(t, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                 out.ctypes.data_as(ctypes.c_void_p), 0, rows, k,
                                 imatrix.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    return out
