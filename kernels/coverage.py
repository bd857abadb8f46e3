"""Which quantization formats, FP8 pairs and head dims the shipped kernels take, and the one
reason the kernel runtimes give for the rest (importable as ``accel.kernels.coverage``; every name
is also ``accel.kernels.X``): the planner, the backends' ``supports()`` and the support matrix
read these rows. The format lists come from the format table (``accel.formats.FORMATS``): a new
format is kquant.cl's unless it is a codebook one.
"""
from __future__ import annotations

from accel.formats import FORMATS

#: the quantization formats quant.cl's kernels read and write, and the x_formats its qmatmul
#: quantizes x into; the OpenCL, CUDA and HIP backends decline the others (Backend.verdict)
KERNEL_FORMATS = ("q8_0", "q4_0")
KERNEL_X_FORMATS = ("q8_0",)
#: the formats kquant.cl reads (quantize, dequantize, qmatmul with float x and with x_format),
#: on every dialect: every row of the table but quant.cl's and the codebook ones
KQUANT_FORMATS = tuple(f.name for f in FORMATS.values()
                       if f.name not in KERNEL_FORMATS and f.family != "codebook")
#: the formats whose x_format product has qgemv_kx, the vectorized integer sums of CPU devices
VECTOR_KX_FORMATS = ("q4_k", "q5_k", "q6_k", "mxfp4", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k",
                     "q3_k", "iq4_xs", "tq2_0")
#: the codebook formats (iq1_*, iq2_*, iq3_*): kernels/codebook.cl (dequantize, qmatmul with float
#: x or x in q8_k; the grid a buffer from gguf-py)
CODEBOOK_FORMATS = tuple(f.name for f in FORMATS.values() if f.family == "codebook")
#: FP8 formats with NVIDIA tensor-core types (mma.sync .e4m3 / .e5m2); e4m3fnuz has none
MMA_FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
#: head dims the tensor-core attention ships for (each pairing compiled and SASS-checked in CI)
ATTENTION_MMA_HEAD_DIMS = (64, 128)


def kernel_declines(op: str, fmt: str | None, x_fmt: str | None = None) -> str | None:
    """Why the shared kernels do not compute ``op`` on ``fmt`` (with x in ``x_fmt``), or None:
    the one reason every kernel runtime's ``supports()`` (through the one planner), and the
    support matrix's compiled-only columns, give where kquant.cl or codebook.cl has no kernel
    for it.

    >>> kernel_declines("quantize", "q2_k") is None, kernel_declines("quantize", "iq2_xs")[:22]
    (True, 'quantize to iq2_xs is ')
    >>> kernel_declines("dequantize", "iq2_xs") is None
    True
    """
    if fmt in CODEBOOK_FORMATS:
        if op == "quantize":
            return (f"quantize to {fmt} is ggml's search over the grid: the cpu reference runs it "
                    "(ggml-python); the device kernels dequantize it and take it in qmatmul")
        return None
    return None


def spec_declined(spec) -> str | None:
    """:func:`kernel_declines` for a spec (a quantize, dequantize or qmatmul spec, or any other)."""
    fmt, x_fmt = getattr(spec, "fmt", None), getattr(spec, "x_fmt", None)
    return kernel_declines(spec.op, fmt and fmt.name, x_fmt and x_fmt.name)
