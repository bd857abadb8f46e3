"""Exact int8 GEMM through float BLAS, for any array library with numpy's API (numpy, cupy).

Integer matmul has no BLAS (numpy's runs at ~0.3 GOP/s here), but int8 values are exact in
float32 and so is a sum of up to 1024 products: |a*b| <= 2**14, and 1024 * 2**14 = 2**24, float32's
exact-integer range. K is split into such chunks, each a float32 GEMM, and the chunks are added in
float64 (exact below 2**53); accel.spec bounds K so the total fits int32.
"""
from __future__ import annotations

CHUNK = 1024


def exact_int8_matmul(xp, a, b):
    """``a @ b`` for int8 arrays, exactly, as int32 (``xp`` is numpy or cupy).

    >>> import numpy as np
    >>> a = np.full((1, 3000), -128, np.int8)
    >>> int(exact_int8_matmul(np, a, a.T.copy())[0, 0]) == 3000 * 128 * 128
    True
    """
    K = a.shape[-1]
    acc = None
    for k0 in range(0, K, CHUNK):
        part = xp.matmul(a[..., k0:k0 + CHUNK].astype(xp.float32),
                         b[..., k0:k0 + CHUNK, :].astype(xp.float32)).astype(xp.float64)
        acc = part if acc is None else acc + part
    return acc.astype(xp.int32)
