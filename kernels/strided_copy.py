"""The strided copy's plan (kernels/copy.cl, :data:`accel.kernels.COPY`; importable as
``accel.kernels.strided_copy``, every name also ``accel.kernels.X``): how a view's dims merge and
the launch that gathers it into a contiguous buffer, converting between float formats on the way.
"""
from __future__ import annotations

import math

import numpy as np

from accel.dtypes import to_numpy_dtype
from accel.kernels.catalog import _FLOATS
from accel.kernels.launch import ceil_div

#: dims the strided copy takes apart (kernels/copy.cl); views of more dims after merging go
#: through the host
COPY_DIMS = 6
#: the element kinds kernels/copy.cl takes: a width in bytes (copied bit for bit) or a float
#: format (converted); the numbers are its KIND_ defines
COPY_KIND = {1: 0, 2: 1, 4: 2, 8: 3, "float32": 4, "float16": 5, "bfloat16": 6}


def copy_layout(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...],
                                                                          tuple[int, ...]] | None:
    """``shape`` and element ``strides`` with size-1 dims dropped and dims that step through
    memory as one merged, padded in front to :data:`COPY_DIMS`; None where more dims remain.

    >>> copy_layout((2, 3, 4), (12, 4, 1))  # contiguous: one dim of 24
    ((1, 1, 1, 1, 1, 24), (0, 0, 0, 0, 0, 1))
    >>> copy_layout((4, 1, 3), (1, 7, 4))[0][-2:]  # a transpose stays two dims
    (4, 3)
    """
    dims: list[list[int]] = []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * s:  # the outer dim steps exactly over this one
            dims[-1] = [dims[-1][0] * n, s]
        else:
            dims.append([n, s])
    if len(dims) > COPY_DIMS:
        return None
    dims = [[1, 0]] * (COPY_DIMS - len(dims)) + dims
    return tuple(n for n, _ in dims), tuple(s for _, s in dims)


def copy_plan(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, dtype: str,
              out_dtype: str, groups: int = 65535, lanes: int = 256) -> tuple[
                  tuple[int, int, int], tuple[int, int, int], tuple] | None:
    """(grid, block, scalar arguments) of :data:`COPY` gathering a view of ``dtype`` elements
    (sizes, strides and offset in elements) into a C-contiguous ``out_dtype`` buffer, in CUDA's
    launch semantics; None where kernels/copy.cl does not apply (a conversion other than between
    float formats, a view of more than :data:`COPY_DIMS` dims after merging): the backend's
    ``gather`` then goes through the host. Blocks are 256 work-items, up to ``lanes`` of them
    side by side along the innermost dim (as many as it needs: neighbours' loads coalesce on a
    GPU; 1 on a CPU device, where each work-item then runs along whole rows itself); the grid has
    at most ``groups`` blocks (a few per compute unit fill a device; on a CPU device each more
    costs its scheduling), and each work-item copies several elements.

    >>> grid, block, scalars = copy_plan((3, 2), (1, 3), 0, "float32", "bfloat16")
    >>> grid, block, [int(s) for s in scalars]
    ((1, 1, 1), (2, 128, 1), [4, 6, 3, 0, 1, 1, 1, 3, 2, 0, 0, 0, 0, 1, 3])
    >>> copy_plan((2,), (1,), 0, "int32", "float32") is None
    True
    >>> copy_plan((1024, 1023), (1024, 1), 0, "float32", "float32", groups=64)[:2]
    ((4, 16, 1), (256, 1, 1))
    """
    if dtype == out_dtype:
        kinds = (COPY_KIND[to_numpy_dtype(dtype).itemsize],) * 2
    elif dtype in _FLOATS and out_dtype in _FLOATS:
        kinds = (COPY_KIND[dtype], COPY_KIND[out_dtype])
    else:
        return None
    layout = copy_layout(shape, strides)
    if layout is None:
        return None
    sizes, steps = layout
    inner = sizes[-1]
    rows = math.prod(sizes[:-1])
    wide = min(lanes, 256, 1 << max(0, inner - 1).bit_length())
    block = (wide, 256 // wide, 1)
    # most of the blocks go down the rows; at least one each way (an empty view launches none)
    across = max(1, min(ceil_div(inner, wide), groups // 4))
    grid = (across, max(1, min(ceil_div(rows, block[1]), groups // across, 65535)), 1)
    i64 = np.int64
    return grid, block, (*map(np.int32, kinds), i64(rows), i64(offset), *map(i64, sizes[1:]),
                         *map(i64, steps))
