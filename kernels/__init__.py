"""accel's kernel sources, shared by the OpenCL, CUDA and HIP backends (importable as
``accel.kernels``).

Every kernel is written once against the portability header ``accel.h`` and specialised by
``-D`` defines (dtypes, tile sizes). A :class:`Variant` names one such specialisation: source
file, kernel function names and defines. :func:`variants` lists every variant accel ships, the
set the compile checks (``accel kernels check``) build for each target.

This module holds the sources themselves; the rest lives in one module a job, every public name
re-exported here (``accel.kernels.X``):

- ``tiles``: the default tile parameter sets (``GPU_*``, ``CPU_*``) and the planners' sizes;
- ``coverage``: the formats, FP8 pairs and head dims the kernels take, and ``kernel_declines``;
- ``variant``: the :class:`Variant` type and ``nvidia_target``;
- ``catalog``: the variant constructors (``matmul``, ``attention``, ``quant``, ...) and
  :func:`variants`;
- ``launch``: launch arithmetic (grids, local memory, which GEMV kernel applies);
- ``arguments``: the scalar arguments after the buffers (``scalar_args``) and their codes;
- ``strided_copy``: the plan of kernels/copy.cl (``copy_layout``, ``copy_plan``).

>>> import accel.kernels as K
>>> v = K.matmul("float16", "float32")
>>> v.source, v.kernels, v.defines["IN_DT"]
('matmul.cl', ('matmul',), 'F16')
>>> "#define KERNEL" in K.program_text(v.source)
True
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from accel.errors import ArgumentError, expected
from accel.kernels.arguments import (BINARY_DIMS, FLOAT_CODE, SCALING_CODE, SOFTMAX_MASK_CODE, broadcast_runs,
                                     scalar_args, softmax_mask_rows)
from accel.kernels.catalog import (COPY, DECODER_KERNELS, DTYPE_TOKEN, FP8_TOKEN, attention, attention_mma, decoder,
                                   codebook, codebook_grid, kquant, matmul, matmul_wgmma, matmul_wmma,
                                   quant, scaled_matmul, scaled_matmul_mma, scaled_matmul_wgmma,
                                   variants)
from accel.kernels.coverage import (ATTENTION_MMA_HEAD_DIMS, CODEBOOK_FORMATS,
                                    KERNEL_FORMATS, KERNEL_X_FORMATS, KQUANT_FORMATS,
                                    MMA_FP8_DTYPES, VECTOR_KX_FORMATS, kernel_declines,
                                    spec_declined)
from accel.kernels.launch import (GEMV_KERNELS, attention_chunks, attention_combine_args,
                                  attention_grid, attention_rows, attention_splits_bytes, ceil_div,
                                  gemv_applies, gemv_kernel, gemv_launch, gemv_local_bytes,
                                  preferred_gemv, runs_local_bytes, scaled_matmul_groups,
                                  stream_local_bytes, x8_kernel, x8_words)
from accel.kernels.strided_copy import COPY_DIMS, COPY_KIND, copy_layout, copy_plan
from accel.kernels.tiles import (CODEBOOK_ROWS, CPU_ATTENTION, CPU_GEMV, CPU_KGEMV, CPU_MATMUL,
                                 CPU_QMATMUL, CPU_SCALED_MATMUL, CPU_WIDE, GEMV_MAX_M, GPU_ATTENTION,
                                 GPU_ATTENTION_MMA, GPU_GEMV, GPU_KGEMV, GPU_MATMUL, GPU_QMATMUL,
                                 GPU_SCALED_MATMUL, GPU_SCALED_MATMUL_MMA, GPU_SCALED_MATMUL_WGMMA,
                                 GPU_WGMMA, GPU_WMMA, PLANNER_KEYS, PREFETCH_NEXT, SCALED_MATMUL_WG)
from accel.kernels.variant import DIALECTS, SM_ANY_LATER, Variant, nvidia_target

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


def source(name: str) -> str:
    """The text of kernel source ``name`` (one of :data:`SOURCES`, or ``accel.h``)."""
    if name not in SOURCES and name != HEADER.name:
        raise ArgumentError(expected("name", f"one of {SOURCES + (HEADER.name,)}", repr(name)))
    path = os.path.join(_HERE, name)
    return _read(path, os.stat(path).st_mtime_ns)


def program_text(name_or_text: str, filename: str | None = None) -> str:
    """A self-contained program: the header, then the source (a file of :data:`SOURCES` or kernel
    text in the accel dialect), with a ``#line`` so compiler messages point into the source."""
    if name_or_text in SOURCES:
        return _shipped_text(name_or_text, source(name_or_text), source(HEADER.name))
    return f'{source(HEADER.name)}\n#line 1 "{filename or "kernel"}"\n{name_or_text}'


# A plan is bound per spec (a decode step makes new ones each token): the same str object for
# the same files keeps reading and hashing a 30 KB program out of that path; an edited file
# (another modification time) is read again.
_HERE = str(HERE)


@functools.lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int) -> str:
    return Path(path).read_text()


@functools.lru_cache(maxsize=64)
def _shipped_text(name: str, text: str, header: str) -> str:
    return f'{header}\n#line 1 "{name}"\n{text}'


__all__ = ["Variant", "variants", "source", "program_text", "matmul", "matmul_wmma", "attention",
           "attention_mma", "matmul_wgmma",
           "quant", "scaled_matmul", "scaled_matmul_mma", "scaled_matmul_wgmma", "scaled_matmul_groups", "gemv_kernel", "gemv_launch", "gemv_applies", "scalar_args", "broadcast_runs", "BINARY_DIMS", "SOFTMAX_MASK_CODE", "preferred_gemv",
           "x8_kernel", "x8_words", "ceil_div",
           "stream_local_bytes", "gemv_local_bytes", "runs_local_bytes",
           "nvidia_target", "HEADER", "SOURCES", "DTYPE_TOKEN", "DIALECTS",
           "COPY", "DECODER_KERNELS", "decoder", "COPY_KIND", "COPY_DIMS", "copy_layout", "copy_plan"]
