"""Per-op launch planning for the OpenCL backend: which kernel variant a spec runs, its global and
local sizes and constant arguments, decided once per spec; and the supports() verdicts.
"""
from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Callable

import pyopencl as cl

import accel.kernels as K
from accel.backend import YES, Support, int32_sizes
from accel.spec import AttentionSpec, DequantizeSpec, MatmulSpec, QMatmulSpec, QuantizeSpec

if TYPE_CHECKING:
    from .backend import OpenCLBackend

_MAX_HEAD_DIM = 256  # attention keeps per-query state in private arrays sized by the head dims
_LOCAL_1D = 64  # work-group size of the element-wise kernels (quantize, dequantize)


def support(be: "OpenCLBackend", spec) -> Support:
    """The single truth of what the OpenCL backend computes correctly on this device."""
    fits = int32_sizes(spec)
    if not fits.ok:
        return fits
    if isinstance(spec, MatmulSpec):
        return YES
    if isinstance(spec, AttentionSpec):
        if max(spec.D, spec.Dv) > _MAX_HEAD_DIM:
            return Support(False, f"head dims up to {_MAX_HEAD_DIM} (per-query state lives in "
                           f"private memory); got D={spec.D}, Dv={spec.Dv}")
        p, _ = _kernel_params(be.params["attention"])
        need = K.attention(spec.dtype, spec.D, spec.Dv, params=p).static_local_bytes
        if need > be.dev.local_mem:
            return Support(False, f"K/V tiles for D={spec.D}, Dv={spec.Dv} need {need} bytes of "
                           f"local memory; the device has {be.dev.local_mem}")
        return YES
    if isinstance(spec, QuantizeSpec) or (isinstance(spec, QMatmulSpec) and spec.x_fmt is not None):
        # x_format quantizes x with the same functions: bit-exact only where quantize is
        if not be.dev.correctly_rounded_divide:
            return Support(False, "the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT; "
                           "bit-exact GGML quantization needs a correctly rounded 1/d")
        if not be.dev.denormals:
            return Support(False, "the device flushes float32 denormals (no CL_FP_DENORM); GGML's "
                           "reference keeps them, so small blocks would quantize differently")
        return YES
    if isinstance(spec, QMatmulSpec):
        p, _ = _kernel_params(be.params[_qmatmul_params(be, spec)])
        if "GEMV_WG" in p and (need := K.gemv_local_bytes(p, spec.fmt.name, shuffles=False)) > be.dev.local_mem:
            return Support(False, f"the GEMV's parameters need {need} bytes of local memory; the "
                           f"device has {be.dev.local_mem}")
        return YES
    if isinstance(spec, DequantizeSpec):
        return YES
    return Support(False, f"op {getattr(spec, 'op', spec)!r} is not implemented by opencl")


def _padded(n: int, local: int) -> int:
    return K.ceil_div(n, local) * local


def plan_for(be: "OpenCLBackend", spec) -> Callable[..., None]:
    """A callable taking the spec's buffers (inputs then output) and enqueueing the work."""
    planner = {MatmulSpec: _matmul, AttentionSpec: _attention, QuantizeSpec: _quantize,
               DequantizeSpec: _dequantize, QMatmulSpec: _qmatmul}[type(spec)]
    return planner(be, spec)


def _launcher(be, kernel: cl.Kernel, gsize, lsize, what: str, tail: tuple) -> Callable[..., None]:
    """The plan's kernel object is its own, so its constant arguments are set once here; a call
    sets only the buffers (pyopencl's scalar set_arg costs ~7 us each, a buffer's ~0.1 us)."""
    n_bufs = kernel.num_args - len(tail)
    for i, value in enumerate(tail):
        kernel.set_arg(n_bufs + i, value)

    lock = threading.Lock()  # set_arg + enqueue on one shared cl.Kernel must not interleave

    def run(*bufs) -> None:
        with lock:
            for i, buf in enumerate(bufs):
                kernel.set_arg(i, buf)
            be._enqueue(kernel, gsize, lsize, what)

    run.constants = tail  # OpenCL does not retain buffers set as arguments: the plan must
    return run


def _kernel_params(p: dict) -> tuple[dict, int]:
    """Split launch-only entries (WG: work-group size; UNITS: the compute units attention's key
    chunks are sized for, to override the device's) from the kernel defines."""
    p = dict(p)
    p.pop("UNITS", None)
    return p, p.pop("WG", 1)


def _matmul(be, spec: MatmulSpec):
    p, _ = _kernel_params(be.params["matmul"])
    v = K.matmul(spec.dtype, spec.out_dtype, p)
    kernel = be.kernel(v, "matmul")
    offs_buf = be.upload(spec.batch_offsets())
    M, N = spec.M, spec.N
    if p.get("LOCAL_TILE"):
        wg_m, wg_n = p["WG_M"], p["WG_N"]
        lsize = (wg_n, wg_m, 1)
        gsize = (K.ceil_div(N, wg_n * p["TN"]) * wg_n, K.ceil_div(M, wg_m * p["TM"]) * wg_m, spec.batch)
    else:
        lsize = (1, 1, 1)
        gsize = (K.ceil_div(M, p["TM"]), K.ceil_div(N, p["TN"]), spec.batch)
    return _launcher(be, kernel, gsize, lsize, f"matmul {v.id}", (offs_buf, *K.scalar_args(spec)))


def _lanes(*sizes: int, widest: int) -> int:
    """The widest vector width <= widest dividing every size (1 always does)."""
    for w in (16, 8, 4, 2):
        if w <= widest and all(s % w == 0 for s in sizes):
            return w
    return 1


def _attention(be, spec: AttentionSpec):
    p, _ = _kernel_params(be.params["attention"])
    units = be.params["attention"].get("UNITS", be.dev.compute_units)
    rows = K.attention_rows(spec)
    if not p.get("LOCAL_TILE") and rows < p["BQ"]:  # decoding: no taller a tile than the rows
        p["BQ"] = 1 << (rows - 1).bit_length()
    p["VW"] = _lanes(p["BQ"], spec.Dv, widest=p.get("VW", 1))
    v = K.attention(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype, p)
    chunks = K.attention_chunks(spec, v.defines, units)
    (groups, heads, batch), items = K.attention_grid(spec, v.defines, chunks)
    attend = _launcher(be, be.kernel(v, "attention"), (groups * items, heads, batch), (items, 1, 1),
                       f"attention {v.id}", K.scalar_args(spec))
    if chunks == 1:
        return lambda q, k, v_, out, mask: attend(q, k, v_, out, mask, be._placeholder)
    combine_args = K.attention_combine_args(spec, chunks)
    combine = _launcher(be, be.kernel(v, "attention_combine"), (_padded(int(combine_args[-1]), _LOCAL_1D),),
                        (_LOCAL_1D,), f"attention_combine {v.id}", combine_args)
    nbytes = K.attention_splits_bytes(spec, chunks)

    def run(q, k, v_, out, mask) -> None:  # the chunks' records in a buffer of their own per call
        splits = be.alloc(nbytes)
        attend(q, k, v_, out, mask, splits)
        combine(splits, out)

    return run


def _quant_kernel(be, fmt: str, dtype: str, name: str, params: dict | None = None) -> cl.Kernel:
    p, _ = _kernel_params(params or be.params["qmatmul"])
    return be.kernel(K.quant(fmt, dtype, p), name)


def _quantize(be, spec: QuantizeSpec):
    nblocks = math.prod(spec.shape) // 32
    kernel = _quant_kernel(be, spec.fmt.name, spec.dtype, "quantize")
    return _launcher(be, kernel, (_padded(nblocks, _LOCAL_1D),), (_LOCAL_1D,), "quantize",
                     K.scalar_args(spec))


def _dequantize(be, spec: DequantizeSpec):
    n = math.prod(spec.shape)
    kernel = _quant_kernel(be, spec.fmt.name, "float32", "dequantize")
    return _launcher(be, kernel, (_padded(n, _LOCAL_1D),), (_LOCAL_1D,), "dequantize",
                     K.scalar_args(spec))


def _qmatmul_params(be, spec: QMatmulSpec) -> str:
    """Which of the backend's parameter sets computes ``spec``: GPU parameter sets (qgemv) also
    serve small batches, where rereading the weight per row of x from cache beats the
    one-output-per-work-item qmatmul."""
    return "gemv" if spec.M == 1 or K.gemv_applies(spec, be.params["gemv"]) else "qmatmul"


def _qmatmul(be, spec: QMatmulSpec):
    p, wg = _kernel_params(be.params[_qmatmul_params(be, spec)])
    if spec.x_fmt is not None:
        name = K.x8_kernel(p)
    elif "GEMV_WG" in p:  # every buffer and view starts at a multiple of the base-address alignment
        name = K.gemv_kernel(spec.fmt.name, spec.K, p, x_addr=be.alignment, w_addr=be.alignment,
                             local_mem=be.dev.local_mem, shuffles=False)
    else:
        name = "qmatmul"
    if "GEMV_WG" in p:  # the GPU GEMVs of kernels/quant.cl, each with its own launch contract
        (groups_n, groups_m), items = K.gemv_launch(name, p, spec.N, spec.M)
        lsize, gsize = (items, 1), (groups_n * items, groups_m)
    else:  # qmatmul(_x8): a work-item per RM x RN outputs
        lsize, gsize = (wg, 1), (_padded(K.ceil_div(spec.N, p["RN"]), wg), K.ceil_div(spec.M, p["RM"]))
    kernel = _quant_kernel(be, spec.fmt.name, spec.dtype, name, p)
    dot = _launcher(be, kernel, gsize, lsize, f"qmatmul ({name})", K.scalar_args(spec))
    if spec.x_fmt is None:
        return dot
    # x quantized into X8 words first, in a buffer of its own per call (pooled buffers return
    # for reuse only behind the work already queued on this in-order queue)
    nbytes, count = K.x8_words(spec)
    quantize = _launcher(be, _quant_kernel(be, spec.fmt.name, spec.dtype, "quantize_x8", p),
                         (_padded(int(count[0]), _LOCAL_1D),), (_LOCAL_1D,), "quantize_x8", count)

    def run(x, w, out) -> None:
        words = be.alloc(nbytes)
        quantize(x, words)
        dot(words, w, out)

    return run
