"""Launch planning for the OpenCL backend (backends/opencl/backend.py), without a device: which
kernel variant computes a spec, with which global and local sizes, buffer slots and constant
arguments (a :data:`Plan` of :class:`Launch` records), and the supports() verdicts.

Device-free: specs, :class:`DeviceFacts` and tile parameters in, data out; pyopencl is never
imported here, so every plan is checked on a machine without OpenCL. The backend imports from
this module, never the reverse, and turns each Plan into kernel objects and enqueues.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Union

import numpy as np

import accel.kernels as K
from accel.backend import YES, Support, int32_sizes
from accel.spec import (AttentionSpec, DequantizeSpec, MatmulSpec, QMatmulSpec, QuantizeSpec,
                        ScaledMatmulSpec, Spec)

_MAX_HEAD_DIM = 512  # attention keeps per-query state in private arrays sized by the head dims
_LOCAL_1D = 64  # work-group size of the one-dimensional kernels (quantize, attention_combine, ...)

#: the buffers each op's backend method passes per call, in order: inputs, then the output
OPERANDS = {"matmul": ("a", "b", "out"), "attention": ("q", "k", "v", "out", "mask", "sinks"),
            "quantize": ("x", "out"), "dequantize": ("q", "out"), "qmatmul": ("x", "w", "out"),
            "scaled_matmul": ("a", "b", "scale_a", "scale_b", "bias", "out")}


@dataclass(frozen=True)
class DeviceFacts:
    """What planning reads of an OpenCL device."""

    compute_units: int
    local_mem: int
    mem_align_bytes: int  # every buffer and view starts at a multiple of it
    correctly_rounded_divide: bool
    denormals: bool
    fp64: bool = False  # cl_khr_fp64 (mxfp4's quantize rounds log2 through double)

    @classmethod
    def of(cls, device: object) -> DeviceFacts:
        """The facts of anything with attributes of these names (the backend's CLDevice)."""
        return cls(**{f.name: getattr(device, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Operand:
    """A buffer the op's call passes, named as in :data:`OPERANDS`."""

    name: str


@dataclass(frozen=True)
class Scratch:
    """A buffer of ``nbytes`` allocated per call, shared by the plan's launches naming it: a
    pooled buffer returns for reuse only behind the work already queued on the in-order queue."""

    name: str
    nbytes: int


@dataclass(frozen=True, eq=False)
class Upload:
    """Host data uploaded once per plan and set once (eq=False: arrays have no truth value)."""

    host: np.ndarray


@dataclass(frozen=True)
class Placeholder:
    """A buffer argument the kernel does not read (an absent mask, unused splits)."""


Slot = Union[Operand, Scratch, Upload, Placeholder]


@dataclass(frozen=True)
class Launch:
    """One enqueue of function ``kernel`` of ``variant``: buffer arguments, then scalars."""

    variant: K.Variant
    kernel: str
    gsize: tuple[int, ...]
    lsize: tuple[int, ...]
    buffers: tuple[Slot, ...]
    scalars: tuple
    what: str  # names the launch in error messages


Plan = tuple[Launch, ...]


def support(spec: Spec, facts: DeviceFacts, params: dict[str, dict]) -> Support:
    """The single truth of what the OpenCL backend computes correctly on a device of ``facts``
    with tile ``params``."""
    fits = int32_sizes(spec)
    if not fits.ok:
        return fits
    if isinstance(spec, MatmulSpec):
        return YES
    if isinstance(spec, AttentionSpec):
        if max(spec.D, spec.Dv) > _MAX_HEAD_DIM:
            return Support(False, f"head dims up to {_MAX_HEAD_DIM} (per-query state lives in "
                           f"private memory); got D={spec.D}, Dv={spec.Dv}")
        p, _ = _kernel_params(params["attention"])
        need = K.attention(spec.dtype, spec.D, spec.Dv, params=p).static_local_bytes
        if need > facts.local_mem:
            return Support(False, f"K/V tiles for D={spec.D}, Dv={spec.Dv} need {need} bytes of "
                           f"local memory; the device has {facts.local_mem}")
        return YES
    if why := K.spec_declined(spec, "opencl"):
        return Support(False, why)
    kq = getattr(spec, "fmt", None) is not None and spec.fmt.name in K.KQUANT_FORMATS
    if kq and isinstance(spec, QuantizeSpec) and spec.fmt.name == "mxfp4" and not facts.fp64:
        return Support(False, "the device has no cl_khr_fp64; mxfp4's quantize takes GGML's "
                       "log2f rounding from a double log2")
    # their quantize and x_format take the checks below, as q8_0's and q4_0's do
    if kq and not isinstance(spec, QuantizeSpec) and getattr(spec, "x_fmt", None) is None:
        if spec.fmt.name == "mxfp4" and not facts.denormals:
            return Support(False, "the device flushes float32 denormals (no CL_FP_DENORM); "
                           "mxfp4's smallest scales (2^-128, 2^-127) are denormal")
        return YES
    if isinstance(spec, QuantizeSpec) or (isinstance(spec, QMatmulSpec) and spec.x_fmt is not None):
        # x_format quantizes x with the same functions: bit-exact only where quantize is
        if not facts.correctly_rounded_divide:
            return Support(False, "the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT; "
                           "bit-exact GGML quantization needs a correctly rounded 1/d")
        if not facts.denormals:
            return Support(False, "the device flushes float32 denormals (no CL_FP_DENORM); GGML's "
                           "reference keeps them, so small blocks would quantize differently")
        return YES
    if isinstance(spec, QMatmulSpec):
        p, _ = _kernel_params(params[_qmatmul_params(spec, params)])
        if "GEMV_WG" in p and (need := K.gemv_local_bytes(p, spec.fmt.name, shuffles=False)) > facts.local_mem:
            return Support(False, f"the GEMV's parameters need {need} bytes of local memory; the "
                           f"device has {facts.local_mem}")
        return YES
    if isinstance(spec, DequantizeSpec):
        return YES
    if isinstance(spec, ScaledMatmulSpec):
        # FP8 decodes exactly whatever the device does with float32 subnormals, but the scaled
        # sums may be subnormal: a flushing device would return zeros where the answer is not
        if not facts.denormals:
            return Support(False, "the device flushes float32 denormals (no CL_FP_DENORM); scaled "
                           "FP8 sums can be subnormal")
        return YES
    return Support(False, f"op {getattr(spec, 'op', spec)!r} is not implemented by opencl")


def plan_for(spec: Spec, facts: DeviceFacts, params: dict[str, dict]) -> Plan:
    """The launches that compute ``spec``, in enqueue order."""
    planner = {MatmulSpec: _matmul, AttentionSpec: _attention, QuantizeSpec: _quantize,
               DequantizeSpec: _dequantize, QMatmulSpec: _qmatmul,
               ScaledMatmulSpec: _scaled_matmul}[type(spec)]
    return planner(spec, facts, params)


def _padded(n: int, local: int) -> int:
    return K.ceil_div(n, local) * local


def _operands(*names: str) -> tuple[Operand, ...]:
    return tuple(Operand(n) for n in names)


def _launch_1d(variant: K.Variant, kernel: str, items: int, buffers: tuple, scalars: tuple,
               what: str) -> Launch:
    """A work-item per item, in groups of _LOCAL_1D (the kernel checks its bound)."""
    return Launch(variant, kernel, (_padded(items, _LOCAL_1D),), (_LOCAL_1D,), buffers, scalars, what)


def _kernel_params(p: dict) -> tuple[dict, int]:
    """Split launch-only entries (WG: work-group size; UNITS: the compute units attention's key
    chunks are sized for, to override the device's) from the kernel defines."""
    p = dict(p)
    p.pop("UNITS", None)
    return p, p.pop("WG", 1)


def _matmul(spec: MatmulSpec, facts: DeviceFacts, params: dict) -> Plan:
    p, _ = _kernel_params(params["matmul"])
    v = K.matmul(spec.dtype, spec.out_dtype, p)
    M, N = spec.M, spec.N
    if p.get("LOCAL_TILE"):
        wg_m, wg_n = p["WG_M"], p["WG_N"]
        lsize = (wg_n, wg_m, 1)
        gsize = (K.ceil_div(N, wg_n * p["TN"]) * wg_n, K.ceil_div(M, wg_m * p["TM"]) * wg_m, spec.batch)
    else:
        lsize = (1, 1, 1)
        gsize = (K.ceil_div(M, p["TM"]), K.ceil_div(N, p["TN"]), spec.batch)
    buffers = (*_operands("a", "b", "out"), Upload(spec.batch_offsets()))
    return (Launch(v, "matmul", gsize, lsize, buffers, K.scalar_args(spec), f"matmul {v.id}"),)


def _lanes(*sizes: int, widest: int) -> int:
    """The widest vector width <= widest dividing every size (1 always does)."""
    for w in (16, 8, 4, 2):
        if w <= widest and all(s % w == 0 for s in sizes):
            return w
    return 1


def _attention(spec: AttentionSpec, facts: DeviceFacts, params: dict) -> Plan:
    p, _ = _kernel_params(params["attention"])
    units = params["attention"].get("UNITS", facts.compute_units)
    rows = K.attention_rows(spec)
    if not p.get("LOCAL_TILE") and rows < p["BQ"]:  # decoding: no taller a tile than the rows
        p["BQ"] = 1 << (rows - 1).bit_length()
    p["VW"] = _lanes(p["BQ"], spec.Dv, widest=p.get("VW", 1))
    v = K.attention(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype, p, spec.sinks)
    chunks = K.attention_chunks(spec, v.defines, units)
    (groups, heads, batch), items = K.attention_grid(spec, v.defines, chunks)
    mask = Operand("mask") if spec.mask_shape is not None else Placeholder()
    sinks = Operand("sinks") if spec.sinks else Placeholder()

    def attend(splits: Slot) -> Launch:
        return Launch(v, "attention", (groups * items, heads, batch), (items, 1, 1),
                      (*_operands("q", "k", "v", "out"), mask, splits, sinks), K.scalar_args(spec),
                      f"attention {v.id}")

    if chunks == 1:
        return (attend(Placeholder()),)
    # each key chunk's records in a buffer of their own per call, merged by attention_combine
    splits = Scratch("splits", K.attention_splits_bytes(spec, chunks))
    combine_args = K.attention_combine_args(spec, chunks)
    return (attend(splits), _launch_1d(v, "attention_combine", int(combine_args[-1]),
                                       (splits, Operand("out"), sinks), combine_args,
                                       f"attention_combine {v.id}"))


def _quant(fmt: str, dtype: str, params: dict) -> K.Variant:
    p, _ = _kernel_params(params)
    return K.quant(fmt, dtype, p)


def _quantize(spec: QuantizeSpec, facts: DeviceFacts, params: dict) -> Plan:
    if spec.fmt.name in K.KQUANT_FORMATS:  # a work-item per super-block
        return (_launch_1d(K.kquant(spec.fmt.name, spec.dtype), "quantize_k",
                           math.prod(spec.shape) // spec.fmt.block, _operands("x", "out"),
                           K.scalar_args(spec), "quantize_k"),)
    v = _quant(spec.fmt.name, spec.dtype, params["qmatmul"])
    return (_launch_1d(v, "quantize", math.prod(spec.shape) // 32, _operands("x", "out"),
                       K.scalar_args(spec), "quantize"),)


def _dequantize(spec: DequantizeSpec, facts: DeviceFacts, params: dict) -> Plan:
    if spec.fmt.name in K.CODEBOOK_FORMATS:  # a work-item per value, the grid a constant buffer
        return (_launch_1d(K.codebook(spec.fmt.name), "dequantize_cb", math.prod(spec.shape),
                           (Operand("q"), Upload(K.codebook_grid(spec.fmt.name)), Operand("out")),
                           K.scalar_args(spec), "dequantize_cb"),)
    if spec.fmt.name in K.KQUANT_FORMATS:  # a work-item per 32 values
        return (_launch_1d(K.kquant(spec.fmt.name), "dequantize_k", math.prod(spec.shape) // 32,
                           _operands("q", "out"), K.scalar_args(spec), "dequantize_k"),)
    v = _quant(spec.fmt.name, "float32", params["qmatmul"])
    return (_launch_1d(v, "dequantize", math.prod(spec.shape), _operands("q", "out"),
                       K.scalar_args(spec), "dequantize"),)


def _qmatmul_params(spec: QMatmulSpec, params: dict) -> str:
    """Which of the parameter sets computes ``spec``: GPU parameter sets (qgemv) also serve
    small batches, where rereading the weight per row of x from cache beats the
    one-output-per-work-item qmatmul."""
    return "gemv" if spec.M == 1 or K.gemv_applies(spec, params["gemv"]) else "qmatmul"


def _rows_per_item(p: dict, M: int) -> dict:
    """qmatmul's RM no taller than M needs, rounded up to a power of two (the shapes tune
    searches): rows past M are copies of the last one, computed and thrown away, and each costs
    as much as a real one (docs/benchmarks.md, "Why the tile defaults are what they are").

    >>> _rows_per_item({"RM": 4, "RN": 4}, 2), _rows_per_item({"RM": 4, "RN": 4}, 3)
    ({'RM': 2, 'RN': 4}, {'RM': 4, 'RN': 4})
    """
    if "GEMV_WG" in p or M >= p.get("RM", 1):
        return p
    return {**p, "RM": 1 << (M - 1).bit_length()}


def _kgemv_tile(params: dict, M: int, x_format: bool = False) -> dict:
    """qgemv_k's tiling for M rows of x: RM no taller than M needs (as _rows_per_item), and RN
    weight rows shrinking as RM grows, RN x RM at most the set's RN (the set's RN is its M = 1
    tile): each output holds a vector accumulator, so a taller RM wants a narrower RN, while
    RM = 1 decodes the weights again in every group. A set's TILE, where it has one, bounds
    RN x RM at M > 1 in place of its RN (AVX-512's 32 registers hold more accumulators:
    ``CPU_WIDE``). ``x_format``: qgemv_kx's, whose M = 1 tile is the set's XRN (where it has
    one). The measurements: docs/benchmarks.md, "Why the tile defaults are what they are".

    >>> [tuple(_kgemv_tile(dict(KWG=1, RN=2, RM=8), m)[k] for k in ("RN", "RM")) for m in (1, 3, 32)]
    [(2, 1), (1, 4), (1, 8)]
    >>> [_kgemv_tile(dict(KWG=1, RN=4, RM=8, TILE=8), m)["RN"] for m in (1, 2, 4, 8)]
    [4, 4, 2, 1]
    >>> _kgemv_tile(dict(KWG=1, RN=2, RM=8, XRN=1), 1, x_format=True)["RN"]
    1
    """
    kp, _ = _kernel_params(params)
    xrn = kp.pop("XRN", kp["RN"])
    tile = kp.pop("TILE", kp["RN"])
    rm = _rows_per_item({"RM": kp["RM"]}, M)["RM"]
    rn = xrn // rm if x_format else (kp["RN"] if rm == 1 else tile // rm)
    return {**kp, "RM": rm, "RN": max(1, rn)}


def _qmatmul(spec: QMatmulSpec, facts: DeviceFacts, params: dict) -> Plan:
    p, wg = _kernel_params(params[_qmatmul_params(spec, params)])
    x8_rows = p.pop("X8RN", None)  # qmatmul_x8's RN where the set has its own (CPU_QMATMUL)
    if spec.fmt.name in K.CODEBOOK_FORMATS:  # a work-item per weight row and 8 rows of x
        v = K.codebook(spec.fmt.name, spec.dtype)
        return (Launch(v, "qmatmul_cb", (_padded(spec.N, _LOCAL_1D), K.ceil_div(spec.M, K.CODEBOOK_ROWS)),
                       (_LOCAL_1D, 1),
                       (Operand("x"), Operand("w"), Upload(K.codebook_grid(spec.fmt.name)),
                        Operand("out")), K.scalar_args(spec), f"qmatmul (qmatmul_cb {v.id})"),)
    if spec.fmt.name in K.KQUANT_FORMATS:
        if spec.x_fmt is None:  # qgemv_k: KWG work-items per group of RN rows, split K
            kp = _kgemv_tile(params["kgemv"], spec.M)
            v = K.kquant(spec.fmt.name, spec.dtype, kp)
            groups = (K.ceil_div(spec.N, kp["RN"]), K.ceil_div(spec.M, kp["RM"]))
            return (Launch(v, "qgemv_k", (groups[0] * kp["KWG"], groups[1]), (kp["KWG"], 1),
                           _operands("x", "w", "out"), K.scalar_args(spec), f"qmatmul (qgemv_k {v.id})"),)
        # qmatmul_kx: a work-item per output, groups along N; q4_k, q6_k, mxfp4 on CPU devices (one
        # work-item per group): qgemv_kx, its vectorized integer sums over RN x RM outputs
        grid, lsize = (_padded(spec.N, _LOCAL_1D), spec.M), (_LOCAL_1D, 1)
        v, name = K.kquant(spec.fmt.name, spec.dtype), "qmatmul_kx"
        kp = _kgemv_tile(params["kgemv"], spec.M, x_format=True)
        if spec.fmt.name == "mxfp4":  # two rows of x, where its sum trees are shared (KXG 8) and
            # a block of 32 pays no tree of its own: M = 4 2.72 -> 2.33 ms, M = 8 4.74 -> 4.14,
            # M = 16 8.68 -> 7.90 (PoCL 3.1, 2-core AVX-512 VM; q4_k and q6_k were slower so)
            kp["RM"] = min(kp["RM"], 2)
        if spec.fmt.name in ("q4_k", "q6_k", "mxfp4") and kp["KWG"] == 1:
            v, name = K.kquant(spec.fmt.name, spec.dtype, kp), "qgemv_kx"
            grid, lsize = (K.ceil_div(spec.N, kp["RN"]), K.ceil_div(spec.M, kp["RM"])), (1, 1)
        nblocks = spec.M * spec.K // spec.x_fmt.block  # x quantized first: q8_k, mxfp4's q8_0
        xq = Scratch("xq", nblocks * spec.x_fmt.block_bytes)
        quantizer = (K.kquant(spec.x_fmt.name, spec.dtype), "quantize_k") \
            if spec.x_fmt.name in K.KQUANT_FORMATS else \
            (_quant("q8_0", spec.dtype, params["qmatmul"]), "quantize")
        return (_launch_1d(*quantizer, nblocks, (Operand("x"), xq), (np.int64(nblocks),),
                           f"{quantizer[1]} (x to {spec.x_fmt.name})"),
                Launch(v, name, grid, lsize, (xq, *_operands("w", "out")),
                       K.scalar_args(spec), f"qmatmul ({name})"))
    p = _rows_per_item(p, spec.M)
    if spec.x_fmt is not None:
        p["RN"] = x8_rows or p["RN"]
        name = K.x8_kernel(p)
    elif "GEMV_WG" in p:
        name = K.gemv_kernel(spec.fmt.name, spec.K, p, x_addr=facts.mem_align_bytes,
                             w_addr=facts.mem_align_bytes, local_mem=facts.local_mem, shuffles=False)
    else:
        name = "qmatmul"
    if "GEMV_WG" in p:  # the GPU GEMVs of kernels/quant.cl, each with its own launch contract
        (groups_n, groups_m), items = K.gemv_launch(name, p, spec.N, spec.M)
        lsize, gsize = (items, 1), (groups_n * items, groups_m)
    else:  # qmatmul(_x8): a work-item per RM x RN outputs
        lsize, gsize = (wg, 1), (_padded(K.ceil_div(spec.N, p["RN"]), wg), K.ceil_div(spec.M, p["RM"]))
    v = K.quant(spec.fmt.name, spec.dtype, p)

    def dot(x: Slot) -> Launch:
        return Launch(v, name, gsize, lsize, (x, *_operands("w", "out")), K.scalar_args(spec),
                      f"qmatmul ({name})")

    if spec.x_fmt is None:
        return (dot(Operand("x")),)
    nbytes, count = K.x8_words(spec)  # x quantized into X8 words first
    words = Scratch("words", nbytes)
    return (_launch_1d(v, "quantize_x8", int(count[0]), (Operand("x"), words), count, "quantize_x8"),
            dot(words))


def _scaled_matmul(spec: ScaledMatmulSpec, facts: DeviceFacts, params: dict) -> Plan:
    p, wg = _kernel_params(params["scaled_matmul"])
    v = K.scaled_matmul(spec.a_dtype, spec.b_dtype, p)
    groups_n, groups_m = K.scaled_matmul_groups(spec, p, wg)
    bias = Operand("bias") if spec.bias_dtype is not None else Placeholder()
    return (Launch(v, "scaled_matmul", (groups_n * wg, groups_m * wg), (wg, wg),
                   (*_operands("a", "b", "scale_a", "scale_b"), bias, Operand("out")),
                   K.scalar_args(spec), f"scaled_matmul {v.id}"),)
