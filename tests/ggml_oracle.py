"""ggml's own C reference quantizers (the ``ggml-python`` test extra) as the oracle for accel's
quantize and dequantize: ``ggml_quantize_chunk`` for the weight formats (no importance matrix,
so the ``*_ref`` quantizers), libggml-base's ``quantize_row_q8_K_ref`` for q8_k, and the type
traits' ``to_float`` (``dequantize_row_q8_K``) back.

ggml-python builds ggml from source; its quantizers live in libggml-base, which ggml's CMake
compiles without -march flags: on x86-64 that is SSE2 with no FMA, so every float32 operation
rounds on its own, as numpy's do (docs/conformance.md, "The ggml oracle").
"""
from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

ggml = pytest.importorskip("ggml", reason="ggml-python (the test extra that builds ggml's C "
                           "quantizers) is not installed")

TYPES = {"q8_0": ggml.GGML_TYPE_Q8_0, "q4_0": ggml.GGML_TYPE_Q4_0, "q4_k": ggml.GGML_TYPE_Q4_K,
         "q5_k": ggml.GGML_TYPE_Q5_K, "q6_k": ggml.GGML_TYPE_Q6_K, "q8_k": ggml.GGML_TYPE_Q8_K,
         "mxfp4": ggml.GGML_TYPE_MXFP4}


# q8_k's reference (de)quantizer: exported by libggml-base, not in ggml's type traits' table
_BASE = ctypes.CDLL(str(pathlib.Path(ggml.__file__).parent / "lib" / "libggml-base.so"))
_BASE.quantize_row_q8_K_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
_BASE.quantize_row_q8_K_ref.restype = None
_BASE.dequantize_row_q8_K.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
_BASE.dequantize_row_q8_K.restype = None


def _traits(fmt: str):
    return ggml.ggml_get_type_traits(TYPES[fmt]).contents


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """uint8 [rows, row_bytes]: ggml's reference quantization of float32 rows x [rows, K]."""
    x = np.ascontiguousarray(x, np.float32)
    rows, k = x.shape
    out = np.zeros((rows, ggml.ggml_row_size(TYPES[fmt], k)), np.uint8)
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if fmt == "q8_k":  # an activation format: not in ggml_quantize_chunk
        _BASE.quantize_row_q8_K_ref(x.ctypes.data, out.ctypes.data, x.size)
    else:
        ggml.ggml_quantize_chunk(TYPES[fmt], src, out.ctypes.data_as(ctypes.c_void_p), 0, rows, k, None)
    return out


def dequantize(raw: np.ndarray, fmt: str, k: int) -> np.ndarray:
    """float32 [rows, k]: ggml's to_float of block bytes raw [rows, row_bytes]."""
    raw = np.ascontiguousarray(raw, np.uint8)
    out = np.zeros((raw.size // ggml.ggml_row_size(TYPES[fmt], k), k), np.float32)
    if fmt == "q8_k":
        _BASE.dequantize_row_q8_K(raw.ctypes.data, out.ctypes.data, out.size)
    else:
        _traits(fmt).to_float(raw.ctypes.data_as(ctypes.c_void_p),
                              out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size)
    return out
