"""ggml's own C reference quantizers, through the ``ggml-python`` package (the ``ggml`` extra):
the conformance oracle of quantize for the formats whose quantizer is a search (the K-quants,
mxfp4, q8_k), which the plainest numpy cannot restate without becoming a second implementation.

Weight formats go through ``ggml_quantize_chunk`` with no importance matrix (the ``*_ref``
quantizers); q8_k, an activation format, through libggml-base's ``quantize_row_q8_K_ref``.
ggml-python builds ggml from source, and its quantizers live in libggml-base, which ggml's CMake
compiles without -march flags: on x86-64 no FMA instruction exists there, so every float32
operation rounds on its own, as numpy's do (docs/conformance.md, "The ggml oracle").
"""
from __future__ import annotations

import ctypes
import functools
import pathlib
from typing import Any

import numpy as np

from accel.formats import FORMATS

GGML_TYPES = {f.name: f.ggml for f in FORMATS.values()}
#: activation formats ggml_quantize_chunk does not take: their reference row quantizers
_ROW_QUANTIZERS = {"q8_k": "quantize_row_q8_K_ref", "q8_1": "quantize_row_q8_1_ref"}


@functools.cache
def _lib() -> tuple[Any, ctypes.CDLL]:
    """(the ggml module, libggml-base), or an ImportError saying how to get them."""
    try:
        import ggml
    except ImportError as e:
        raise ImportError(f"ggml's reference quantizers (the oracle of K-quant and mxfp4 "
                                 f"quantization) need ggml-python: pip install "
                                 f"'accel-portable[ggml]' ({e})") from None
    base = ctypes.CDLL(str(pathlib.Path(ggml.__file__).parent / "lib" / "libggml-base.so"))
    for name in (*_ROW_QUANTIZERS.values(), "dequantize_row_q8_K"):  # not in ggml's type traits
        getattr(base, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        getattr(base, name).restype = None
    return ggml, base


def available() -> bool:
    try:
        _lib()
    except ImportError:
        return False
    return True


def _type(fmt: str) -> int:
    return getattr(_lib()[0], f"GGML_TYPE_{GGML_TYPES[fmt]}")


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """uint8 [rows, row_bytes]: ggml's reference quantization of float32 rows x [rows, K]."""
    ggml, base = _lib()
    x = np.ascontiguousarray(x, np.float32)
    rows, k = x.shape
    out = np.zeros((rows, ggml.ggml_row_size(_type(fmt), k)), np.uint8)
    if fmt in _ROW_QUANTIZERS:
        getattr(base, _ROW_QUANTIZERS[fmt])(x.ctypes.data, out.ctypes.data, x.size)
    else:
        ggml.ggml_quantize_chunk(_type(fmt), x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                 out.ctypes.data_as(ctypes.c_void_p), 0, rows, k, None)
    return out


def dequantize(raw: np.ndarray, fmt: str, k: int) -> np.ndarray:
    """float32 [rows, k]: ggml's to_float of block bytes raw [rows, row_bytes]."""
    ggml, base = _lib()
    raw = np.ascontiguousarray(raw, np.uint8)
    out = np.zeros((raw.size // ggml.ggml_row_size(_type(fmt), k), k), np.float32)
    if fmt == "q8_k":
        base.dequantize_row_q8_K(raw.ctypes.data, out.ctypes.data, out.size)
    else:
        ggml.ggml_get_type_traits(_type(fmt)).contents.to_float(
            raw.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            out.size)
    return out
