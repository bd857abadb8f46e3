"""accel's kernel sources, shared by the OpenCL, CUDA and HIP backends (importable as
``accel.kernels``).

Every kernel is written once against the portability header ``accel.h`` and specialised by
``-D`` defines (dtypes, tile sizes). A :class:`Variant` names one such specialisation: source
file, kernel function names and defines. :func:`variants` lists every variant accel ships, the
set the compile checks (``accel kernels check``) build for each target.

>>> import accel.kernels as K
>>> v = K.matmul("float16", "float32")
>>> v.source, v.kernels, v.defines["IN_DT"]
('matmul.cl', ('matmul',), 'F16')
>>> "#define KERNEL" in K.program_text(v.source)
True
"""
from __future__ import annotations

import re

import math
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, DTypeError, expected
from accel.formats import BLOCK, FORMATS, get_format
from accel.kernels.tiles import (CODEBOOK_ROWS, CPU_ATTENTION, CPU_GEMV, CPU_KGEMV, CPU_MATMUL,
                                 CPU_QMATMUL, CPU_SCALED_MATMUL, CPU_WIDE, GEMV_MAX_M,
                                 GPU_ATTENTION, GPU_ATTENTION_MMA, GPU_GEMV, GPU_KGEMV, GPU_MATMUL,
                                 GPU_QMATMUL, GPU_SCALED_MATMUL, GPU_SCALED_MATMUL_MMA,
                                 GPU_SCALED_MATMUL_WGMMA, GPU_WGMMA, GPU_WMMA, PLANNER_KEYS,
                                 PREFETCH_NEXT, SCALED_MATMUL_WG)
from accel.kernels.coverage import (ATTENTION_MMA_HEAD_DIMS, CODEBOOK_FORMATS, CODEBOOK_RUNTIMES,
                                    KERNEL_FORMATS, KERNEL_X_FORMATS, KQUANT_FORMATS,
                                    KQUANT_NO_QUANTIZE, MMA_FP8_DTYPES, kernel_declines,
                                    spec_declined)
from accel.kernels.launch import (GEMV_KERNELS, attention_chunks, attention_combine_args,
                                  attention_grid, attention_rows, attention_splits_bytes, ceil_div,
                                  gemv_applies, gemv_kernel, gemv_launch, gemv_local_bytes,
                                  preferred_gemv, runs_local_bytes, scaled_matmul_groups,
                                  stream_local_bytes, x8_kernel, x8_words)
from accel.kernels.variant import (DIALECTS, SM_ANY_LATER, Variant, nvidia_target)
from accel.kernels.arguments import (FLOAT_CODE, SCALING_CODE, scalar_args)
from accel.kernels.catalog import (COPY, DECODER, DTYPE_TOKEN, FP8_TOKEN, _FLOATS, attention,
                                   attention_mma, codebook, codebook_grid, kquant, matmul,
                                   matmul_wgmma, matmul_wmma, quant, scaled_matmul,
                                   scaled_matmul_mma, scaled_matmul_wgmma, variants)

HERE = Path(__file__).resolve().parent
#: the portability header every source includes (prepended by :func:`program_text`)
HEADER = HERE / "accel.h"
_USES_HEADER = re.compile(r'^\s*#\s*(include\s*[<"]accel\.h[">]|define\s+ACCEL_H\b)', re.MULTILINE)


def uses_header(text: str) -> bool:
    r"""Whether kernel text is in accel's dialect: it includes accel.h, or already holds it
    inlined (program_text's output).

    >>> uses_header('#include "accel.h"\nKERNEL void f() {}'), uses_header("__global__ void f() {}")
    (True, False)
    """
    return bool(_USES_HEADER.search(text))
#: every shipped kernel source and the ops its kernels compute (the support matrix reads a
#: kernels-check result through this): one source per op family in the shared dialect, then
#: CUDA-only tensor-core variants (matmul, attention), still written against accel.h
SOURCE_OPS = {"matmul.cl": ("matmul",), "attention.cl": ("attention",),
              "quant.cl": ("quantize", "dequantize", "qmatmul"),
              "kquant.cl": ("quantize", "dequantize", "qmatmul"),
              "matmul_wmma.cu": ("matmul",),
              "matmul_wgmma.cu": ("matmul",), "attention_mma.cu": ("attention",),
              "codebook.cl": ("dequantize", "qmatmul"),
              "scaled_matmul.cl": ("scaled_matmul",), "scaled_matmul_mma.cu": ("scaled_matmul",),
              "decoder.cl": (), "copy.cl": ()}  # decoder-step ops (accel.nn); Tensor.contiguous()
SOURCES = tuple(SOURCE_OPS)

#: the schema of `accel kernels check --json` files: check.py writes them, the support matrix and
#: the report read them (both below the tools, hence here)
KERNELS_CHECK_SCHEMA = "accel.kernels_check/1"


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


def source(name: str) -> str:
    """The text of kernel source ``name`` (one of :data:`SOURCES`, or ``accel.h``)."""
    if name not in SOURCES and name != HEADER.name:
        raise ArgumentError(expected("name", f"one of {SOURCES + (HEADER.name,)}", repr(name)))
    return (HERE / name).read_text()


def program_text(name_or_text: str, filename: str | None = None) -> str:
    """A self-contained program: the header, then the source (a file of :data:`SOURCES` or kernel
    text in the accel dialect), with a ``#line`` so compiler messages point into the source."""
    if name_or_text in SOURCES:
        filename, text = name_or_text, source(name_or_text)
    else:
        text = name_or_text
    return f'{source(HEADER.name)}\n#line 1 "{filename or "kernel"}"\n{text}'


__all__ = ["Variant", "variants", "source", "program_text", "matmul", "matmul_wmma", "attention",
           "attention_mma", "matmul_wgmma",
           "quant", "scaled_matmul", "scaled_matmul_mma", "scaled_matmul_wgmma", "scaled_matmul_groups", "gemv_kernel", "gemv_launch", "gemv_applies", "scalar_args", "preferred_gemv",
           "x8_kernel", "x8_words", "ceil_div",
           "stream_local_bytes", "gemv_local_bytes", "runs_local_bytes",
           "nvidia_target", "HEADER", "SOURCES", "DTYPE_TOKEN", "DIALECTS",
           "COPY", "DECODER", "COPY_KIND", "COPY_DIMS", "copy_layout", "copy_plan"]
