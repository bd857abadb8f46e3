"""The one launch planner of every kernel runtime (OpenCL, CUDA, HIP), without a device.

``plan_for(spec, facts, tiles)`` says which shipped kernel variants compute a spec, in which
order, with which grid (blocks per dimension, CUDA's terms) and block, which buffer fills each
argument slot and which constants follow: a :data:`Plan` of :class:`Launch` records.
``support(spec, facts, tiles)`` gives the verdict from the same decisions. A runtime
(``backends/opencl/backend.py``, ``backends/cupy/backend.py``) only builds each variant, binds
the slots to buffers and enqueues; what differs between runtimes is data in
:class:`DeviceFacts` (the runtime, its arch and implementation choice, local memory, rounding).

Device-free: specs, facts and tile parameters in, data out. No vendor package is imported here,
so every plan for every device is checked on a machine without one.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Union

import numpy as np

import accel.kernels as K
from accel.backend import YES, Support, int32_sizes
from accel.errors import ArgumentError, expected
from accel.formats import get_format
from accel.kernels import toolchains
from accel.spec import ACTIVATIONS, DECODER_OPS, Spec, dequantize_spec

#: the buffers an op's call passes, in order: its inputs (as ``Backend.run`` gets them), then
#: the output; a plan's :class:`Operand` slots name them
OPERANDS = {"matmul": ("a", "b", "out"), "attention": ("q", "k", "v", "mask", "sinks", "out"),
            "quantize": ("x", "out"), "dequantize": ("q", "out"), "qmatmul": ("x", "w", "out"),
            "scaled_matmul": ("a", "b", "scale_a", "scale_b", "bias", "out"),
            # the decoder-step ops of accel.nn (kernels/decoder.cl)
            "rms_norm": ("x", "weight", "out"), "layer_norm": ("x", "weight", "bias", "out"),
            "softmax": ("x", "mask", "out"), "glu": ("gate", "up", "out"), "silu": ("x", "out"),
            "gelu": ("x", "out"), "add": ("a", "b", "out"), "mul": ("a", "b", "out"),
            "rope": ("x", "cos", "sin", "out"), "rms_norm_rope": ("x", "weight", "cos", "sin", "out"),
            "get_rows": ("table", "ids", "out"), "add_rms_norm": ("x", "residual", "weight", "s", "out"),
            "norm_add_rms_norm": ("x", "x_weight", "residual", "weight", "s", "out")}

#: tile parameters by device class: OpenCL devices start from these (``accel tune`` stores
#: better ones per device), CUDA and HIP run the GPU set. WG: work-group size of the
#: one-output-per-item kernels (qmatmul, scaled_matmul), a launch setting and no define.
DEFAULT_TILES = {
    "cpu": {"matmul": K.CPU_MATMUL, "attention": K.CPU_ATTENTION, "qmatmul": K.CPU_QMATMUL,
            "gemv": K.CPU_GEMV, "kgemv": K.CPU_KGEMV, "scaled_matmul": K.CPU_SCALED_MATMUL},
    "gpu": {"matmul": K.GPU_MATMUL, "attention": K.GPU_ATTENTION,
            "qmatmul": {**K.GPU_QMATMUL, "WG": 64}, "gemv": K.GPU_GEMV, "kgemv": K.GPU_KGEMV,
            "scaled_matmul": {**K.GPU_SCALED_MATMUL, "WG": K.SCALED_MATMUL_WG}},
}

IMPLS = ("auto", "kernels", "vendor", "tensorcore")
_MAX_HEAD_DIM = 512  # attention.cl keeps per-query state in private arrays sized by head dims
#: CUDA's limits on gridDim (HIP's are the same)
_CUDA_GRID_MAX = (2**31 - 1, 65535, 65535)
#: input dtypes of the tensor-core matmul and attention (float32 accumulation)
TENSORCORE_DTYPES = ("float16", "bfloat16")
#: per op: the tensor-core kernel, and the first NVIDIA arch that runs it (bfloat16 mma and
#: cp.async arrive with Ampere, FP8 mma with Ada)
TENSORCORE_KERNEL = {"matmul": "WMMA, kernels/matmul_wmma.cu",
                     "attention": "mma.sync, kernels/attention_mma.cu",
                     "scaled_matmul": "FP8 mma.sync, kernels/scaled_matmul_mma.cu"}
TENSORCORE_MIN_SM = {"matmul": 80, "attention": 80, "scaled_matmul": 89}
#: attention_mma.cu keeps logits in log2 units (scale * log2(e) multiplies them): beyond this
#: scale that factor overflows float32, so attention.cl (which multiplies by scale) computes it
MMA_SCALE_MAX = float(np.finfo(np.float32).max) / math.log2(math.e)


@dataclass(frozen=True)
class DeviceFacts:
    """What planning reads of a device.

    ``runtime``: "opencl", "cuda" or "hip"; ``local_mem``: bytes of local (shared) memory a
    group's kernel may declare; ``mem_align_bytes``: every buffer and view starts at a multiple
    of it; ``arch``: the CUDA/HIP compile target; ``impl``: which implementation computes what
    (:func:`kernel_path`; OpenCL runs the shared kernels only); ``tensorcore_missing``: why the
    tensor-core kernels cannot build here (a header the toolchain lacks), None when they can;
    ``launch_flops``: the most work one launch may hold (0: any), on devices whose launches
    cannot be interrupted and take seconds (CPU devices): longer ones are split (:func:`plan_for`).
    """

    runtime: str
    compute_units: int
    local_mem: int
    mem_align_bytes: int
    correctly_rounded_divide: bool = True
    denormals: bool = True
    fp64: bool = True  # cl_khr_fp64 (mxfp4's quantize rounds log2 through double)
    arch: str | None = None
    impl: str = "kernels"
    tensorcore_missing: str | None = None
    launch_flops: int = 0

    @property
    def block_1d(self) -> int:
        """Work-items per group of the one-dimensional kernels (quantize, attention_combine, ...)."""
        return 64 if self.runtime == "opencl" else 256

    @property
    def shuffles(self) -> bool:
        """Whether the GEMVs reduce with warp shuffles (CUDA, HIP) or in local memory (OpenCL)."""
        return self.runtime != "opencl"

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ArgumentError(expected("impl", f"one of {IMPLS}", repr(self.impl)))

    def with_impl(self, impl: str) -> DeviceFacts:
        return replace(self, impl=impl)


@dataclass(frozen=True)
class Operand:
    """A buffer the op's call passes, named as in :data:`OPERANDS`."""

    name: str


@dataclass(frozen=True)
class Scratch:
    """``nbytes`` of device memory per call, shared by the plan's launches naming it and used in
    queue order."""

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
    """One launch of function ``kernel`` of ``variant``: ``grid`` groups of ``block`` work-items
    (three dims each), buffer arguments, then scalars; ``what`` names it in error messages.
    A piece of a split launch covers groups ``offset`` onward (kernels count GROUP_ID from
    there) and is ``paced``: the runtime lets at most one more piece wait in its queue, so an
    interrupted call leaves little work behind."""

    variant: K.Variant
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    buffers: tuple[Slot, ...]
    scalars: tuple
    what: str
    offset: tuple[int, int, int] = (0, 0, 0)
    paced: bool = False


Plan = tuple[Launch, ...]


def _launch(variant: K.Variant, kernel: str, grid: tuple[int, ...], block: tuple[int, ...],
            buffers: tuple, scalars: tuple, what: str | None = None) -> Launch:
    pad = (1, 1, 1)
    return Launch(variant, kernel, tuple(grid) + pad[len(grid):], tuple(block) + pad[len(block):],
                  buffers, tuple(scalars), what or f"{kernel} ({variant.id})")


def _operands(*names: str) -> tuple[Operand, ...]:
    return tuple(Operand(n) for n in names)


def _launch_1d(facts: DeviceFacts, variant: K.Variant, kernel: str, items: int, buffers: tuple,
               scalars: tuple, what: str | None = None) -> Launch:
    """A work-item per item, in groups of ``facts.block_1d`` (the kernel checks its bound)."""
    return _launch(variant, kernel, (K.ceil_div(items, facts.block_1d),), (facts.block_1d,),
                   buffers, scalars, what)


def _kernel_params(p: dict) -> tuple[dict, int]:
    """Split launch-only entries (WG: work-group size; UNITS: the compute units attention's key
    chunks are sized for, to override the device's) from the kernel defines."""
    p = dict(p)
    p.pop("UNITS", None)
    return p, p.pop("WG", 1)


# -- which implementation computes a spec (CUDA and HIP choose; OpenCL runs the shared kernels) --
def tensorcore_reason(arch: str | None, op: str = "matmul", missing: str | None = None) -> str | None:
    """Why a device of compile target ``arch`` cannot run ``op``'s tensor-core kernel, or None;
    ``missing``: what the toolchain lacks for WMMA (the matmul's header), if anything.

    >>> tensorcore_reason("sm_90") is None, tensorcore_reason("sm_75")[:36]
    (True, 'the tensor-core matmul needs sm_80 o')
    >>> tensorcore_reason("gfx90a", "attention")[:52]
    'the tensor-core attention (mma.sync, kernels/attenti'
    >>> tensorcore_reason("sm_89", "scaled_matmul") is None, tensorcore_reason("sm_86", "scaled_matmul")[:45]
    (True, 'the tensor-core scaled_matmul needs sm_89 or ')
    """
    if arch is None:
        return "no device arch is known"
    target = toolchains.parse_target(arch)
    if target.vendor != "nvidia":
        return f"the tensor-core {op} ({TENSORCORE_KERNEL[op]}) is CUDA-only; {arch} is AMD"
    sm = int(target.name.removeprefix("sm_").rstrip("a"))
    least = TENSORCORE_MIN_SM[op]
    if sm < least:
        what = "FP8 mma" if op == "scaled_matmul" else "bfloat16 mma, cp.async"
        return f"the tensor-core {op} needs sm_{least} or later ({what}); this device is {arch}"
    return missing if op == "matmul" else None  # attention and FP8 are inline PTX


def has_tensorcore_kernel(spec: Spec) -> bool:
    """Whether ``spec`` is a case accel has a tensor-core kernel for (dtype, head dims)."""
    if spec.op == "matmul":
        return spec.dtype in TENSORCORE_DTYPES
    if spec.op == "scaled_matmul":  # the OCP formats; e4m3fnuz has no NVIDIA tensor-core type
        return spec.a_dtype in K.MMA_FP8_DTYPES and spec.b_dtype in K.MMA_FP8_DTYPES
    return (spec.op == "attention" and spec.dtype in TENSORCORE_DTYPES and not spec.options
            and spec.D in K.ATTENTION_MMA_HEAD_DIMS and spec.Dv in K.ATTENTION_MMA_HEAD_DIMS)


def kernel_path(spec: Spec, facts: DeviceFacts) -> str:
    """Which implementation computes ``spec`` under ``facts.impl``: "vendor" (matmul only),
    "tensorcore" or "kernels". A forced "tensorcore" stays "tensorcore" for a case with a
    tensor-core kernel even where the device lacks tensor cores: support() then declines with
    the reason.

    >>> from accel.spec import matmul_spec, attention_spec
    >>> s = matmul_spec((4, 8), "bfloat16", (8, 4), "bfloat16")
    >>> [kernel_path(s, cuda(a, "auto")) for a in ("sm_90", "sm_75")], kernel_path(s, hip("gfx90a", "auto"))
    (['tensorcore', 'kernels'], 'kernels')
    >>> att = attention_spec((1, 2, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64), ("float16",) * 3)
    >>> kernel_path(att, cuda("sm_80", "auto")), kernel_path(att, cuda("sm_80", "vendor"))
    ('tensorcore', 'kernels')
    """
    if facts.impl == "vendor":
        return "vendor" if spec.op == "matmul" else "kernels"
    if facts.runtime != "opencl" and has_tensorcore_kernel(spec) and (
            facts.impl == "tensorcore" or (facts.impl == "auto" and tensorcore_reason(
                facts.arch, spec.op, facts.tensorcore_missing) is None)):
        return "tensorcore"
    return "kernels"


def cuda(arch: str, impl: str = "auto", compute_units: int = 132, missing: str | None = None) -> DeviceFacts:
    """The facts of a CUDA device of compile target ``arch`` (48 KiB of static shared memory
    per block; cudaMalloc's 256-byte alignment)."""
    return DeviceFacts("cuda", compute_units, 48 * 1024, 256, arch=arch,
                       impl=impl, tensorcore_missing=missing)


def hip(arch: str, impl: str = "auto", compute_units: int = 110, missing: str | None = None) -> DeviceFacts:
    """The facts of a HIP device of compile target ``arch`` (HIP's LDS default as CUDA's; no
    tensor cores accel uses, so nothing is ``missing`` for them)."""
    return DeviceFacts("hip", compute_units, 48 * 1024, 256, arch=arch, impl=impl)


# -- support ----------------------------------------------------------------------------------------
def support(spec: Spec, facts: DeviceFacts, tiles: dict[str, dict]) -> Support:
    """The single truth of what a kernel runtime computes correctly on a device of ``facts``
    with tile parameters ``tiles``."""
    fits = int32_sizes(spec)  # the kernels take int sizes; nor is cuBLAS's 32-bit API verified
    if not fits.ok:
        return fits
    path = kernel_path(spec, facts)
    if path == "vendor":
        return YES
    if path == "tensorcore" and (why := tensorcore_reason(facts.arch, spec.op, facts.tensorcore_missing)):
        return Support(False, f"impl='tensorcore': {why}; impl='auto' picks the shared kernels")
    if why := _kernel_verdict(spec, facts, tiles, path):
        return Support(False, why)
    if facts.runtime != "opencl":
        for launch in plan_for(spec, facts, tiles):
            if any(g > most for g, most in zip(launch.grid, _CUDA_GRID_MAX)):
                return Support(False, f"this case needs a grid of {launch.grid} blocks; the limits "
                                      f"are {_CUDA_GRID_MAX}")
    return YES


def _kernel_verdict(spec: Spec, facts: DeviceFacts, tiles: dict, path: str) -> str | None:
    """Why the shared (or tensor-core) kernels cannot compute ``spec`` here, or None."""
    if spec.op == "get_rows" and spec.fmt:  # the format's dequantize decides
        return _kernel_verdict(_rows_dequantized(spec), facts, tiles, path)
    if spec.op in DECODER_OPS:
        return _decoder_declined(spec)
    if spec.op == "attention" and max(spec.D, spec.Dv) > _MAX_HEAD_DIM:
        return (f"head dims up to {_MAX_HEAD_DIM} (per-query state lives in private memory); "
                f"got D={spec.D}, Dv={spec.Dv}")
    if why := K.spec_declined(spec):
        return why
    if spec.op in ("matmul", "attention", "scaled_matmul"):
        need = max(launch.variant.static_local_bytes for launch in plan_for(spec, facts, tiles))
        if need > facts.local_mem:
            return (f"the {spec.op} kernel's tiles for this case need {need} bytes of "
                    f"{'local' if facts.runtime == 'opencl' else 'static shared'} memory; the device "
                    f"allows {facts.local_mem}")
        if spec.op == "scaled_matmul" and not facts.denormals:
            # FP8 decodes exactly whatever the device does with float32 subnormals, but the
            # scaled sums may be subnormal: a flushing device would return zeros
            return ("the device flushes float32 denormals (no CL_FP_DENORM); scaled FP8 sums "
                    "can be subnormal")
        return None
    name = spec.fmt.name
    quantizes = spec.op == "quantize" or (spec.op == "qmatmul" and spec.x_fmt is not None)
    if quantizes and name == "mxfp4" and spec.op == "quantize" and not facts.fp64:
        return ("the device has no cl_khr_fp64; mxfp4's quantize takes GGML's log2f rounding "
                "from a double log2")
    if name in K.KQUANT_FORMATS and not quantizes:
        if name == "mxfp4" and not facts.denormals:
            return ("the device flushes float32 denormals (no CL_FP_DENORM); mxfp4's smallest "
                    "scales (2^-128, 2^-127) are denormal")
        return None
    if quantizes:  # x_format quantizes x with quantize's functions: bit-exact only where it is
        if not facts.correctly_rounded_divide:
            return ("the device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT; bit-exact "
                    "GGML quantization needs a correctly rounded 1/d")
        if not facts.denormals:
            return ("the device flushes float32 denormals (no CL_FP_DENORM); GGML's reference "
                    "keeps them, so small blocks would quantize differently")
        return None
    if spec.op == "qmatmul" and name in K.KERNEL_FORMATS:
        p, _ = _kernel_params(tiles[_qmatmul_tiles(spec, tiles)])
        if "GEMV_WG" in p and (need := K.gemv_local_bytes(p, name, shuffles=facts.shuffles)) > facts.local_mem:
            return f"the GEMV's parameters need {need} bytes of local memory; the device has {facts.local_mem}"
    return None


# -- the decoder-step ops: kernels/decoder.cl --------------------------------------------------------
#: DEC_BLOCK of kernels/decoder.cl: a group per row (norms, softmax), else an item per element
DECODER_BLOCK = 256
#: NORM_ROPE_D of kernels/decoder.cl: the longest row rms_norm_rope holds in local memory
NORM_ROPE_D = 512


def _decoder_declined(spec: Spec) -> str | None:
    """Why kernels/decoder.cl does not compute a decoder-step ``spec``, or None. accel.nn then
    computes the cpu reference on the host and writes the result back (the one such fallback)."""
    if spec.op == "rms_norm_rope" and spec.shape[-1] > NORM_ROPE_D:
        return (f"kernels/decoder.cl's rms_norm_rope holds a row of up to {NORM_ROPE_D} "
                f"values in local memory; D = {spec.shape[-1]}")
    if spec.op in ("add", "mul") and K.broadcast_runs(spec.a_shape, spec.b_shape) is None:
        return (f"kernels/decoder.cl's binary walks at most {K.BINARY_DIMS} runs of broadcast "
                f"dims; got {spec.a_shape} and {spec.b_shape}")
    if spec.op == "softmax" and spec.mask_shape is not None and \
            K.softmax_mask_rows(spec.mask_shape, spec.shape) is None:
        return (f"kernels/decoder.cl's softmax takes a mask of x's shape, or broadcast along "
                f"x's leading dims or one run of middle dims; got {spec.mask_shape} against "
                f"{spec.shape}")
    return None


def _decoder(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    """One launch of kernels/decoder.cl: a group of DECODER_BLOCK per row for the norms and
    softmax, a group per (row, block of columns) for glu and get_rows, an item per output element
    otherwise. An absent operand is a placeholder; the scalars are the kernel's, after its
    buffers (int32 and float32).

    >>> from accel.spec import softmax_spec
    >>> (launch,) = _decoder(softmax_spec((2, 3, 5, 8), "float32", 0.5, (5, 8), "bool"), None, {}, 0)
    >>> launch.kernel, launch.grid, launch.scalars
    ('softmax', (30, 1, 1), (np.int32(8), np.float32(0.5), np.int32(1), np.int32(5), np.int32(30)))
    """
    def opt(name: str, there: bool) -> Slot:
        return Operand(name) if there else Placeholder()

    i32, f32 = np.int32, np.float32
    rows = math.prod(spec.out_shape[:-1])
    items = (K.ceil_div(math.prod(spec.out_shape), DECODER_BLOCK),)
    op = spec.op
    if op in ("rms_norm", "layer_norm"):
        grid, slots = (rows,), (Operand("x"), opt("weight", spec.weight))
        slots += (opt("bias", spec.bias),) if op == "layer_norm" else ()
        scalars = (i32(spec.D), f32(spec.eps), i32(spec.weight)) + ((i32(spec.bias),) if op == "layer_norm" else ())
        name = op
    elif op in ("add_rms_norm", "norm_add_rms_norm"):  # a group per row; outputs s, then y
        first = _operands("x", "residual") if op == "add_rms_norm" else _operands("x", "x_weight", "residual")
        name, grid, slots = op, (rows,), (*first, opt("weight", spec.weight), Operand("s"))
        scalars = (i32(spec.D), f32(spec.eps)) + ((i32(spec.weight),) if op == "add_rms_norm" else ())
    elif op == "softmax":  # the mask's rows: kernels.arguments.softmax_mask_rows
        inner, outer = K.softmax_mask_rows(spec.mask_shape, spec.shape) if spec.mask_shape else (1, 1)
        name, grid, slots = op, (rows,), (Operand("x"), opt("mask", spec.mask_shape is not None))
        scalars = (i32(spec.n), f32(spec.scale), i32(K.SOFTMAX_MASK_CODE[spec.mask_dtype]), i32(inner), i32(outer))
    elif op in ("rope", "rms_norm_rope"):  # cos / sin tables [S or B * S, r / 2]
        B, H, S, D = spec.shape
        flags = (i32(spec.rotary_dim), i32(spec.interleaved), i32(spec.per_batch))
        if op == "rope":
            name, grid, slots = op, items, _operands("x", "cos", "sin")
            scalars = (i32(H), i32(S), i32(D), *flags, i32(math.prod(spec.shape)))
        else:  # a group per row, which it norms, then rotates
            name, grid, slots = op, (rows,), _operands("x", "weight", "cos", "sin")
            scalars = (i32(H), i32(S), i32(D), f32(spec.eps), *flags)
    elif op == "get_rows" and spec.fmt:  # the rows' blocks gathered, then the format's dequantize
        return _quantized_rows(spec, facts, tiles, align)
    elif op == "get_rows":  # a group per (id, block of columns)
        name, slots, scalars = op, _operands("table", "ids"), (i32(spec.table_shape[1]),)
        grid = (math.prod(spec.ids_shape), K.ceil_div(spec.table_shape[1], DECODER_BLOCK))
    elif op == "glu":  # a group per (row, block of columns); up: its operand or the gate's 2nd half
        h = spec.out_shape[-1]
        stride, up_off = (2 * h, h) if spec.split else (h, 0)
        name, grid = op, (rows, K.ceil_div(h, DECODER_BLOCK))
        slots = (Operand("gate"), Operand("gate" if spec.split else "up"))
        scalars = (i32(rows), i32(h), i32(stride), i32(up_off), i32(ACTIVATIONS.index(spec.activation)))
    elif op in ("silu", "gelu"):
        name, grid, slots = "unary", items, _operands("x")
        scalars = (i32(math.prod(spec.shape)), i32(ACTIVATIONS.index(spec.activation)))
    else:  # add / mul: the merged dims, then a's and b's strides along them
        sizes, sa, sb = K.broadcast_runs(spec.a_shape, spec.b_shape)
        name, grid, slots = "binary", items, _operands("a", "b")
        scalars = (i32(math.prod(spec.out_shape)), i32(op == "mul"), *map(i32, (*sizes[1:], *sa, *sb)))
    return (_launch(K.decoder(spec.dtype), name, grid, (DECODER_BLOCK,), (*slots, Operand("out")),
                    scalars, f"kernel {name!r}"),)


def _quantized_rows(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    """get_rows of a quantized table: decoder.cl's get_rows_bytes copies each id's row of blocks
    into scratch (a group per id and 256 bytes), which the format's own dequantize plan reads."""
    n, D = math.prod(spec.ids_shape), spec.table_shape[1]
    row_bytes = spec.fmt.row_bytes(D)
    rows = Scratch("rows", n * row_bytes)
    gather = _launch(K.decoder(), "get_rows_bytes", (n, K.ceil_div(row_bytes, DECODER_BLOCK)), (DECODER_BLOCK,),
                     (Operand("table"), Operand("ids"), rows), (np.int32(row_bytes),), "kernel 'get_rows_bytes'")
    deq = _dequantize(_rows_dequantized(spec), facts, tiles, align)
    return (gather, *(replace(launch, buffers=tuple(rows if s == Operand("q") else s for s in launch.buffers))
                      for launch in deq))


def _rows_dequantized(spec) -> Spec:
    """The dequantize that get_rows of a quantized table runs on the gathered rows."""
    return dequantize_spec((math.prod(spec.ids_shape), spec.table_shape[1]), spec.fmt)


# -- plans ------------------------------------------------------------------------------------------
def plan_for(spec: Spec, facts: DeviceFacts, tiles: dict[str, dict], align: int | None = None) -> Plan:
    """The launches that compute ``spec``, in enqueue order, on a device of ``facts`` with tile
    parameters ``tiles``. ``align``: the alignment in bytes every input buffer of this call has
    (default ``facts.mem_align_bytes``): the tensor-core kernels' and GEMVs' vector copies need
    16 bytes, which an adopted array (a torch or CuPy view) need not have.

    >>> from accel.spec import matmul_spec
    >>> s = matmul_spec((4, 8), "float16", (8, 16), "float16")
    >>> [launch.kernel for launch in plan_for(s, cuda("sm_90"), DEFAULT_TILES["gpu"])]
    ['matmul_wgmma']
    >>> [launch.kernel for launch in plan_for(s, cuda("sm_90"), DEFAULT_TILES["gpu"], align=2)]
    ['matmul_wmma']
    """
    align = facts.mem_align_bytes if align is None else align
    if kernel_path(spec, facts) == "tensorcore" and (launch := _tensorcore(spec, facts, tiles, align)):
        return (launch,)
    planner = {"matmul": _matmul, "attention": _attention, "quantize": _quantize,
               "dequantize": _dequantize, "qmatmul": _qmatmul, "scaled_matmul": _scaled_matmul,
               **dict.fromkeys(DECODER_OPS, _decoder)}[spec.op]
    plan = planner(spec, facts, tiles, align)
    if facts.launch_flops and spec.flops > facts.launch_flops and spec.op not in DECODER_OPS:
        return tuple(piece for launch in plan for piece in _pieces(launch, spec, facts))
    return plan


#: kernels whose work is not the op's FLOPs (x quantized first, key chunks merged): never split
_LIGHT = ("quantize", "quantize_k", "quantize_x8", "attention_combine")


def _pieces(launch: Launch, spec: Spec, facts: DeviceFacts) -> tuple[Launch, ...]:
    """``launch`` split along grid dim 0 into paced pieces of at most ``facts.launch_flops``
    of ``spec``'s work each (work spread evenly over the groups; a group is never split).

    >>> from accel.spec import matmul_spec
    >>> s = matmul_spec((4096, 4096), "float32", (4096, 4096), "float32")
    >>> cpu = DeviceFacts("opencl", 2, 32 * 1024, 128, launch_flops=2 * 10**10)
    >>> pieces = plan_for(s, cpu, DEFAULT_TILES["cpu"])
    >>> len(pieces), pieces[1].offset, sum(p.grid[0] for p in pieces) == -(-4096 // 12)
    (8, (48, 0, 0), True)
    """
    groups = launch.grid[0]
    count = min(groups, K.ceil_div(spec.flops, facts.launch_flops))
    if launch.kernel in _LIGHT or count == 1:
        return (launch,)
    per = groups // count
    return tuple(replace(launch, grid=(min(per, groups - start), *launch.grid[1:]), offset=(start, 0, 0),
                         paced=True, what=f"{launch.what} [groups {start}..]")
                 for start in range(0, groups, per))


def _tensorcore(spec: Spec, facts: DeviceFacts, tiles: dict, align: int) -> Launch | None:
    """The tensor-core launch for ``spec`` with inputs aligned to ``align`` bytes, or None where
    only the shared kernels can compute it. ``tiles`` may hold the attention kernel's
    (``attention_mma``: GPU_ATTENTION_MMA's keys).

    Matmul always has one: Hopper's wgmma kernel where the device is sm_90 and the rows are
    whole, 16-byte aligned 8-element chunks (its cp.async copies); else the WMMA kernel's
    cp.async variant where aligned; else WMMA's any-shape kernel. Attention's kernel copies
    16-byte pieces of rows, so q, k and v must be 16-byte aligned and ``|scale|`` at most
    MMA_SCALE_MAX. FP8 scaled matmul: where K and N are multiples of 16 and a and b 16-byte
    aligned (whole cp.async chunks), the wgmma kernel on sm_90 and mma.sync's cp.async kernel
    elsewhere, else mma.sync's any-shape kernel.
    """
    aligned = align % 16 == 0
    if spec.op == "attention":
        if not (aligned and abs(spec.scale) <= MMA_SCALE_MAX):
            return None
        v = K.attention_mma(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype,
                            tiles.get("attention_mma"))
        d = v.defines
        mask = Operand("mask") if spec.mask_shape is not None else Placeholder()
        return _launch(v, "attention_mma", (K.ceil_div(spec.Sq, 16 * d["WARPS"]), spec.Hq, spec.B),
                       (32 * d["WARPS"],), (*_operands("q", "k", "v", "out"), mask, Placeholder(),
                                            Placeholder()), K.scalar_args(spec))
    if spec.op == "scaled_matmul":
        vec = spec.K % 16 == 0 and spec.N % 16 == 0 and aligned
        v = K.scaled_matmul_wgmma(spec.a_dtype, spec.b_dtype)
        if vec and v.nvidia_target(facts.arch):
            name = "scaled_matmul_wgmma"
        else:
            v = K.scaled_matmul_mma(spec.a_dtype, spec.b_dtype)
            name = "scaled_matmul_mma_vec" if vec else "scaled_matmul_mma"
        d = v.defines
        bias = Operand("bias") if spec.bias_dtype is not None else Placeholder()
        return _launch(v, name, (K.ceil_div(spec.N, d["BN"]), K.ceil_div(spec.M, d["BM"])), (256,),
                       (*_operands("a", "b", "scale_a", "scale_b"), bias, Operand("out")),
                       K.scalar_args(spec))
    chunks = spec.K % 8 == 0 and spec.N % 8 == 0 and aligned
    v = K.matmul_wgmma(spec.dtype, spec.out_dtype)
    if chunks and v.nvidia_target(facts.arch):
        name, block = "matmul_wgmma", 2 * v.defines["BM"]  # a warpgroup per 64 rows of a tile
    else:
        v = K.matmul_wmma(spec.dtype, spec.out_dtype)
        name = "matmul_wmma_vec" if chunks else "matmul_wmma"
        block = 32 * v.defines["WARPS_M"] * v.defines["WARPS_N"]  # a block of warps per tile
    d = v.defines
    return _launch(v, name, (K.ceil_div(spec.N, d["BN"]), K.ceil_div(spec.M, d["BM"]), spec.batch),
                   (block,), (*_operands("a", "b", "out"), Upload(spec.batch_offsets())),
                   K.scalar_args(spec))


def _matmul(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    p, _ = _kernel_params(tiles["matmul"])
    v = K.matmul(spec.dtype, spec.out_dtype, p)
    if p.get("LOCAL_TILE"):  # a group per WG_M*TM x WG_N*TN tile, columns along x
        grid = (K.ceil_div(spec.N, p["WG_N"] * p["TN"]), K.ceil_div(spec.M, p["WG_M"] * p["TM"]), spec.batch)
        block = (p["WG_N"], p["WG_M"])
    else:  # a work-item per TM x TN block, rows along x
        grid, block = (K.ceil_div(spec.M, p["TM"]), K.ceil_div(spec.N, p["TN"]), spec.batch), (1,)
    return (_launch(v, "matmul", grid, block, (*_operands("a", "b", "out"), Upload(spec.batch_offsets())),
                    K.scalar_args(spec), f"matmul {v.id}"),)


def _lanes(*sizes: int, widest: int) -> int:
    """The widest vector width <= widest dividing every size (1 always does)."""
    for w in (16, 8, 4, 2):
        if w <= widest and all(s % w == 0 for s in sizes):
            return w
    return 1


def _attention(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    p, _ = _kernel_params(tiles["attention"])
    units = tiles["attention"].get("UNITS", facts.compute_units)
    rows = K.attention_rows(spec)
    if not p.get("LOCAL_TILE") and rows < p["BQ"]:  # decoding: no taller a tile than the rows
        p["BQ"] = 1 << (rows - 1).bit_length()
    p["VW"] = _lanes(p["BQ"], spec.Dv, widest=p.get("VW", 1))
    v = K.attention(spec.dtype, spec.D, spec.Dv, spec.mask_kind, spec.mask_dtype, p, spec.sinks)
    chunks = K.attention_chunks(spec, v.defines, units)
    grid, items = K.attention_grid(spec, v.defines, chunks)
    mask = Operand("mask") if spec.mask_shape is not None else Placeholder()
    sinks = Operand("sinks") if spec.sinks else Placeholder()

    def attend(splits: Slot) -> Launch:
        return _launch(v, "attention", grid, (items,), (*_operands("q", "k", "v", "out"), mask, splits, sinks),
                       (*K.scalar_args(spec), np.int32(chunks)), f"attention {v.id}")

    if chunks == 1:
        return (attend(Placeholder()),)
    # flash-decoding: each key chunk's records in scratch, merged by attention_combine
    splits = Scratch("splits", K.attention_splits_bytes(spec, chunks))
    combine = K.attention_combine_args(spec, chunks)
    return (attend(splits), _launch_1d(facts, v, "attention_combine", int(combine[-1]),
                                       (splits, Operand("out"), sinks), combine,
                                       f"attention_combine {v.id}"))


def _quant(fmt: str, dtype: str, tiles: dict) -> K.Variant:
    p, _ = _kernel_params(tiles["qmatmul"])
    return K.quant(fmt, dtype, p)


def _quantizer(fmt: str, dtype: str, tiles: dict) -> tuple[K.Variant, str, int]:
    """(variant, kernel, values per work-item) of ``fmt``'s quantize: kquant.cl's a work-item
    per super-block (or mxfp4 block), quant.cl's a work-item per block of 32."""
    if fmt in K.KQUANT_FORMATS:
        return K.kquant(fmt, dtype), "quantize_k", get_format(fmt).block
    return _quant(fmt, dtype, tiles), "quantize", 32


def _quantize(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    v, name, per = _quantizer(spec.fmt.name, spec.dtype, tiles)
    return (_launch_1d(facts, v, name, math.prod(spec.shape) // per, _operands("x", "out"),
                       K.scalar_args(spec), name),)


def _dequantize(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    fmt, values = spec.fmt.name, math.prod(spec.shape)
    if fmt in K.CODEBOOK_FORMATS:  # a work-item per 8 values, the grid a constant buffer
        return (_launch_1d(facts, K.codebook(fmt), "dequantize_cb", values // 8,
                           (Operand("q"), Upload(K.codebook_grid(fmt)), Operand("out")),
                           K.scalar_args(spec), "dequantize_cb"),)
    if fmt in K.KQUANT_FORMATS:  # a work-item per 32 values
        return (_launch_1d(facts, K.kquant(fmt), "dequantize_k", values // 32, _operands("q", "out"),
                           K.scalar_args(spec), "dequantize_k"),)
    return (_launch_1d(facts, _quant(fmt, "float32", tiles), "dequantize", values, _operands("q", "out"),
                       K.scalar_args(spec), "dequantize"),)


def _qmatmul_tiles(spec, tiles: dict) -> str:
    """Which of the tile sets computes a q8_0/q4_0 ``spec``: GPU sets (qgemv) also serve small
    batches, where rereading the weight per row of x from cache beats the one-output-per-item
    qmatmul."""
    return "gemv" if spec.M == 1 or K.gemv_applies(spec, tiles["gemv"]) else "qmatmul"


def _rows_per_item(p: dict, M: int) -> dict:
    """qmatmul's RM no taller than M needs, rounded up to a power of two: rows past M are copies
    of the last one, computed and thrown away, each costing as much as a real one
    (docs/benchmarks.md, "Why the tile defaults are what they are").

    >>> _rows_per_item({"RM": 4, "RN": 4}, 2), _rows_per_item({"RM": 4, "RN": 4}, 3)
    ({'RM': 2, 'RN': 4}, {'RM': 4, 'RN': 4})
    """
    if "GEMV_WG" in p or M >= p.get("RM", 1):
        return p
    return {**p, "RM": 1 << (M - 1).bit_length()}


def _kgemv_tile(tiles: dict, M: int, x_format: bool = False) -> dict:
    """qgemv_k's tiling for M rows of x: RM no taller than M needs (as _rows_per_item), and RN
    weight rows shrinking as RM grows, RN x RM at most the set's RN (the set's RN is its M = 1
    tile): each output holds a vector accumulator. A set's TILE, where it has one, bounds
    RN x RM at M > 1 in place of its RN (AVX-512's 32 registers hold more accumulators:
    ``CPU_WIDE``). ``x_format``: qgemv_kx's, whose M = 1 tile is the set's XRN (where it has
    one). Measurements behind these rules: docs/benchmarks.md, "Why the tile defaults are what they are".

    >>> [tuple(_kgemv_tile(dict(KWG=1, RN=2, RM=8), m)[k] for k in ("RN", "RM")) for m in (1, 3, 32)]
    [(2, 1), (1, 4), (1, 8)]
    >>> [_kgemv_tile(dict(KWG=1, RN=4, RM=8, TILE=8), m)["RN"] for m in (1, 2, 4, 8)]
    [4, 4, 2, 1]
    >>> _kgemv_tile(dict(KWG=1, RN=2, RM=8, XRN=1), 1, x_format=True)["RN"]
    1
    """
    kp, _ = _kernel_params(tiles)
    xrn = kp.pop("XRN", kp["RN"])
    tile = kp.pop("TILE", kp["RN"])
    rm = _rows_per_item({"RM": kp["RM"]}, M)["RM"]
    rn = xrn // rm if x_format else (kp["RN"] if rm == 1 else tile // rm)
    return {**kp, "RM": rm, "RN": max(1, rn)}


def _quantize_x(spec, facts: DeviceFacts, tiles: dict, scratch: Scratch) -> Launch:
    """x quantized to ``spec.x_fmt`` into ``scratch`` by the quantize op's own kernel."""
    v, name, per = _quantizer(spec.x_fmt.name, spec.dtype, tiles)
    blocks = spec.M * spec.K // per
    return _launch_1d(facts, v, name, blocks, (Operand("x"), scratch), (np.int64(blocks),),
                      f"{name} (x to {spec.x_fmt.name})")


def _qmatmul(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    fmt = spec.fmt.name
    if fmt in K.CODEBOOK_FORMATS:  # a work-item per weight row and CODEBOOK_ROWS rows of x
        return _codebook_matmul(spec, facts, tiles)
    if fmt in K.KQUANT_FORMATS:
        return _kquant_matmul(spec, facts, tiles)
    p, wg = _kernel_params(tiles[_qmatmul_tiles(spec, tiles)])
    x8_rows = p.pop("X8RN", None)  # qmatmul_x8's RN where the set has its own (CPU_QMATMUL)
    p = _rows_per_item(p, spec.M)
    if spec.x_fmt is not None:
        p["RN"] = x8_rows or p["RN"]
        name = K.x8_kernel(p)
    elif "GEMV_WG" in p:
        name = K.gemv_kernel(fmt, spec.K, p, x_addr=align, w_addr=align, local_mem=facts.local_mem,
                             shuffles=facts.shuffles)
    else:
        name = "qmatmul"
    if "GEMV_WG" in p:  # the GPU GEMVs of kernels/quant.cl, each with its own launch contract
        grid, items = K.gemv_launch(name, p, spec.N, spec.M)
        block = (items,)
    else:  # qmatmul(_x8): a work-item per RM x RN outputs
        grid, block = (K.ceil_div(K.ceil_div(spec.N, p["RN"]), wg), K.ceil_div(spec.M, p["RM"])), (wg,)
    v = K.quant(fmt, spec.dtype, p)

    def dot(x: Slot) -> Launch:
        return _launch(v, name, grid, block, (x, *_operands("w", "out")), K.scalar_args(spec),
                       f"qmatmul ({name})")

    if spec.x_fmt is None:
        return (dot(Operand("x")),)
    nbytes, count = K.x8_words(spec)  # x quantized into X8 words first
    words = Scratch("words", nbytes)
    return (_launch_1d(facts, v, "quantize_x8", int(count[0]), (Operand("x"), words), count, "quantize_x8"),
            dot(words))


def _codebook_matmul(spec, facts: DeviceFacts, tiles: dict) -> Plan:
    """codebook.cl's products, a work-item per weight row and CODEBOOK_ROWS rows of x: with
    float x, qmatmul_cb; with x_format (q8_k), x quantized to it first, then qmatmul_cbx."""
    v, fmt = K.codebook(spec.fmt.name, spec.dtype), spec.fmt.name
    x: Slot = Operand("x")
    plan: tuple[Launch, ...] = ()
    if spec.x_fmt is not None:
        x = Scratch("xq", spec.M * spec.K // spec.x_fmt.block * spec.x_fmt.block_bytes)
        plan = (_quantize_x(spec, facts, tiles, x),)
    name = "qmatmul_cb" if spec.x_fmt is None else "qmatmul_cbx"
    return plan + (_launch(v, name, (K.ceil_div(spec.N, 64), K.ceil_div(spec.M, K.CODEBOOK_ROWS)), (64,),
                           (x, Operand("w"), Upload(K.codebook_grid(fmt)), Operand("out")),
                           K.scalar_args(spec), f"qmatmul ({name} {v.id})"),)


def _kquant_matmul(spec, facts: DeviceFacts, tiles: dict) -> Plan:
    """kquant.cl's products: with float x, qgemv_k (KWG work-items per group of RN weight rows
    and RM rows of x, splitting K); with an x_format, x quantized to it first, then qmatmul_kx
    (a work-item per output) or, for q4_k, q6_k and mxfp4 on one-item groups (CPU devices),
    qgemv_kx: vectorized integer sums over RN x RM outputs."""
    fmt = spec.fmt.name
    if spec.x_fmt is None:
        kp = _kgemv_tile(tiles["kgemv"], spec.M)
        v = K.kquant(fmt, spec.dtype, kp)
        return (_launch(v, "qgemv_k", (K.ceil_div(spec.N, kp["RN"]), K.ceil_div(spec.M, kp["RM"])),
                        (kp["KWG"],), _operands("x", "w", "out"), K.scalar_args(spec),
                        f"qmatmul (qgemv_k {v.id})"),)
    grid, block = (K.ceil_div(spec.N, 64), spec.M), (64,)
    v, name = K.kquant(fmt, spec.dtype), "qmatmul_kx"
    kp = _kgemv_tile(tiles["kgemv"], spec.M, x_format=True)
    if spec.fmt.block == 32:  # two rows of x, where their sum trees are shared (docs/benchmarks.md)
        kp["RM"] = min(kp["RM"], 2)
    if fmt in K.VECTOR_KX_FORMATS and kp["KWG"] == 1:
        v, name = K.kquant(fmt, spec.dtype, kp), "qgemv_kx"
        grid, block = (K.ceil_div(spec.N, kp["RN"]), K.ceil_div(spec.M, kp["RM"])), (1,)
    xq = Scratch("xq", spec.M * spec.K // spec.x_fmt.block * spec.x_fmt.block_bytes)
    return (_quantize_x(spec, facts, tiles, xq),
            _launch(v, name, grid, block, (xq, *_operands("w", "out")), K.scalar_args(spec),
                    f"qmatmul ({name})"))


def _scaled_matmul(spec, facts: DeviceFacts, tiles: dict, align: int) -> Plan:
    p, wg = _kernel_params(tiles["scaled_matmul"])
    v = K.scaled_matmul(spec.a_dtype, spec.b_dtype, p)
    bias = Operand("bias") if spec.bias_dtype is not None else Placeholder()
    return (_launch(v, "scaled_matmul", K.scaled_matmul_groups(spec, p, wg), (wg, wg),
                    (*_operands("a", "b", "scale_a", "scale_b"), bias, Operand("out")),
                    K.scalar_args(spec), f"scaled_matmul {v.id}"),)


def accumulator(spec: Spec, facts: DeviceFacts) -> str:
    """The accumulation format used for ``spec`` on a device of ``facts``: int32 for int8,
    float32 for float ops (the kernels widen every operand to float32; tensor cores multiply
    float16/bfloat16 exactly and add in float32), tf32 where the user asked CuPy for it
    (CUPY_TF32=1 makes cuBLAS run float32 GEMMs on tf32 tensor cores) and for FP8 on tensor
    cores: their FP8 accumulation keeps about 14 bits (DeepSeek-V3, section 3.3.2), and
    kernels/scaled_matmul_mma.cu adds each 128-deep partial into float32, so tf32's unit
    roundoff (2^-11) bounds it.

    >>> from accel.spec import scaled_matmul_spec
    >>> s = scaled_matmul_spec((4, 32), "float8_e4m3fn", (32, 8), "float8_e4m3fn", (), "float32", (), "float32")
    >>> accumulator(s, cuda("sm_90")), accumulator(s, cuda("sm_90", "kernels")), accumulator(s, cuda("sm_80"))
    ('tf32', 'float32', 'float32')
    """
    if spec.in_dtypes[0] == "int8":
        return "int32"
    path = kernel_path(spec, facts)
    if spec.op == "scaled_matmul" and path == "tensorcore":
        return "tf32"
    if path == "vendor" and os.environ.get("CUPY_TF32") == "1":
        return "tf32"
    return "float32"
