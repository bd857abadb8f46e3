"""What a user would run instead of accel, measured in the same run on the same hardware.

CPU hardware (the CPU backend, and OpenCL devices that are CPUs): numpy, torch, ggml's own CPU
kernels (llama.cpp's, through ggml-python) and gguf-py's numpy quantizers (a reference
implementation, labelled so: not a kernel anyone decodes with). CUDA/ROCm GPUs: torch on the device and cuBLAS/hipBLAS through CuPy. An OpenCL device:
CLBlast through pyclblast when installed. Each baseline carries its library version and computes
the op's own semantics (dtype, causal alignment, GQA), so its result is validated like accel's.

>>> import accel
>>> from accel.conformance.bench.baselines import for_backend
>>> "numpy" in [b.name for b in for_backend(accel.get_backend("cpu"))]
True
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from accel import spec as S
from accel.backend import Backend
from accel.dtypes import to_numpy_dtype
from accel.formats import FORMATS, get_format
from accel.conformance.bench.timing import Timer, host_timer


@dataclass
class Prepared:
    """A baseline ready to time: ``run`` enqueues the work, ``timer`` times it (device events
    for device libraries), ``result`` returns the last output on the host for validation.
    ``computes`` is the spec the baseline really computes when it differs from the case's (ggml
    quantizes float activations to Q8_0 itself): its result is validated against that spec's
    reference, and ``note`` says so in the record. ``weight_bytes``: the bytes of weight one
    call streams when the baseline keeps the weight in another form than accel's (dequantized
    at load); the benchmark sizes its weight copies by it."""

    run: Callable[[], Any]
    timer: Timer
    result: Callable[[], np.ndarray]
    computes: S.Spec | None = None
    note: str = ""
    weight_bytes: int | None = None


class Unsupported(Exception):
    """Raised by a baseline's ``prepare`` when its library refuses the case (torch._scaled_mm
    without block scales, say): the record says why, and no number stands in for it."""


@dataclass(frozen=True)
class Baseline:
    name: str
    version: str
    #: None: the baseline does not compute this op; raises Unsupported for a case its library refuses
    prepare: Callable[[S.Spec, list, Backend], Prepared | None]


#: the CPU threads ggml computes with: every core this process may run on, as llama.cpp does
GGML_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

#: the weight formats ggml's CPU mul_mat takes: each quantizes float32 activations to its
#: ``vec_dot`` format (ggml-cpu's ``vec_dot_type``) before the integer block dot products
GGML_WEIGHT_FORMATS = tuple(name for name, f in FORMATS.items() if f.vec_dot is not None)


def hardware_of(backend: Backend) -> str:
    """'cpu', 'cuda', 'rocm', or 'other': which hardware the backend's device is, so baselines
    run on the same silicon (an OpenCL device that is a CPU gets the CPU libraries)."""
    if backend.name == "cpu":
        return "cpu"
    if backend.name == "cuda":
        return "cuda"
    if backend.name == "hip":
        return "rocm"
    if backend.name == "opencl":
        # the OpenCL backend records CL_DEVICE_TYPE as extra["kind"]: "cpu", "gpu", ...
        return "cpu" if backend.info.extra.get("kind") == "cpu" else "other"
    return "other"


def for_backend(backend: Backend) -> list[Baseline]:
    """The baselines applicable to ``backend``'s hardware, for the libraries installed here."""
    hw = hardware_of(backend)
    out: list[Baseline] = []
    if hw == "cpu":
        out.append(Baseline("numpy", np.__version__, _numpy))
        if _has("gguf"):
            from importlib.metadata import version

            out.append(Baseline("gguf-py (numpy reference)", version("gguf"), _gguf))
        out.append(ggml_baseline())
        if GGML_THREADS > 1:
            # ggml's threads meet at spinning barriers: with a core taken by a neighbour (or by
            # PoCL's own threads in this process) they were measured 5x slower than one thread
            # on this 2-core machine class, so one thread is timed too and the best counts
            out.append(ggml_baseline(1))
        if _has("torch"):
            import torch

            out.append(Baseline("torch", torch.__version__, _torch_on("cpu")))
            if _has("gguf"):
                out.append(Baseline("torch (weights dequantized at load)", torch.__version__,
                                    _torch_dequantized))
    if hw in ("cuda", "rocm"):
        if _has("torch"):
            import torch

            gpu = torch.version.hip if hw == "rocm" else torch.version.cuda
            if torch.cuda.is_available() and gpu:
                out.append(Baseline("torch", f"{torch.__version__} ({hw} {gpu})",
                                    _torch_on(f"cuda:{backend.index}")))
        if _has("cupy"):
            import cupy

            out.append(Baseline("hipBLAS (cupy)" if hw == "rocm" else "cuBLAS (cupy)",
                                f"cupy {cupy.__version__}", _cupy))
    if backend.name == "opencl" and _has("pyclblast"):
        from importlib.metadata import version

        out.append(Baseline("CLBlast", f"pyclblast {version('pyclblast')}", _clblast))
    return out


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class _Last:
    """Keeps the most recent result of a baseline call for the validation read-back."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn, self.value = fn, None

    def __call__(self) -> None:
        self.value = self.fn()


# -- numpy (and gguf's numpy quantizers) ----------------------------------------------------------
def _numpy(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
    if spec.op == "matmul":
        a, b = host
        # what a numpy user does: float32 BLAS for low precision, float64 BLAS for exact int8
        # (numpy's integer matmul has no BLAS and runs ~1000x slower)
        work = np.float64 if spec.dtype == "int8" else np.float32
        out = to_numpy_dtype(spec.out_dtype)
        fn = _Last(lambda: (a.astype(work, copy=False) @ b.astype(work, copy=False)).astype(out))
    elif spec.op == "attention":
        q, k, v, _ = host
        fn = _Last(lambda: _numpy_attention(spec, q, k, v))
    else:
        return None
    return Prepared(fn, host_timer, lambda: fn.value)


def _numpy_attention(spec: S.AttentionSpec, q, k, v) -> np.ndarray:
    """Textbook attention with the score matrix materialised, in float32."""
    g = spec.group
    kf = np.repeat(k.astype(np.float32), g, axis=1)
    vf = np.repeat(v.astype(np.float32), g, axis=1)
    s = (q.astype(np.float32) @ kf.swapaxes(-1, -2)) * np.float32(spec.scale)
    if spec.causal:
        s = np.where(_bottom_right(spec.Sq, spec.Sk), s, np.float32(-np.inf))
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((s / s.sum(axis=-1, keepdims=True)) @ vf).astype(to_numpy_dtype(spec.dtype))


def _bottom_right(sq: int, sk: int) -> np.ndarray:
    """accel's causal rule: query i sees key j when j <= i + Sk - Sq."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)


#: the formats gguf-py quantizes (it dequantizes every one accel has but q8_k)
_GGUF_QUANTIZES = ("q8_0", "q4_0", "mxfp4")


def _gguf(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
    from gguf import GGMLQuantizationType, quants

    if spec.op not in ("quantize", "dequantize", "qmatmul"):
        return None
    needs = {spec.op == "quantize" and spec.fmt.name, getattr(spec, "x_fmt", None) and spec.x_fmt.name}
    if needs - {False, None} - set(_GGUF_QUANTIZES):
        return None  # gguf-py has no quantizer for the K-quants (nor for q8_k)
    qtype = GGMLQuantizationType[spec.fmt.name.upper()]
    if spec.op == "quantize":
        x = host[0].astype(np.float32)
        fn = _Last(lambda: quants.quantize(x, qtype))
    elif spec.op == "dequantize":
        raw = host[0]
        fn = _Last(lambda: quants.dequantize(raw, qtype))
    elif spec.x_fmt is None:
        x, raw = host
        fn = _Last(lambda: x.astype(np.float32) @ quants.dequantize(raw, qtype).T)
    else:  # GGML's semantics in gguf-py's terms: x through its quantizer, then float products
        x, raw = host
        xtype = GGMLQuantizationType[spec.x_fmt.name.upper()]
        fn = _Last(lambda: quants.dequantize(quants.quantize(x.astype(np.float32), xtype), xtype)
                   @ quants.dequantize(raw, qtype).T)
    return Prepared(fn, host_timer, lambda: fn.value)


# -- ggml's CPU kernels through ggml-python -------------------------------------------------------
def ggml_baseline(threads: int = GGML_THREADS) -> Baseline:
    """ggml's CPU ``mul_mat`` (llama.cpp's kernels) on ``threads`` threads (default: every
    core). Without ggml-python the baseline still exists and every qmatmul record says why it
    has no number.

    >>> ggml_baseline().name, ggml_baseline(1).name
    ('ggml', 'ggml, 1 thread')
    """
    count = f"{threads} thread{'s' if threads > 1 else ''}"
    name = "ggml" if threads == GGML_THREADS else f"ggml, {count}"
    if not _has("ggml"):
        def missing(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
            if spec.op != "qmatmul":
                return None
            raise ModuleNotFoundError("ggml-python is not installed (pip install 'accel-portable[ggml]')")
        return Baseline(name, "not installed", missing)
    from importlib.metadata import version

    def prepare(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
        return _ggml(spec, host, threads)
    return Baseline(name, f"ggml-python {version('ggml-python')}, {count}", prepare)


class _GgmlMatmul:
    """One ggml context holding the weight (accel's bytes are GGML's blocks, copied as they
    are), the activations, and the graph of ``mul_mat``; freed with this object."""

    def __init__(self, spec: S.QMatmulSpec, x: np.ndarray, raw: np.ndarray, threads: int):
        import ggml

        self.ggml, self.shape, self.threads = ggml, (spec.M, spec.N), threads
        wtype = getattr(ggml, f"GGML_TYPE_{spec.fmt.name.upper()}")
        x = np.ascontiguousarray(x, np.float32).reshape(spec.M, spec.K)
        graph_bytes = ggml.ggml_graph_overhead() + 8 * ggml.ggml_tensor_overhead()
        # the work buffer ggml_graph_compute_with_ctx takes from the context holds x quantized
        work = 2 * x.nbytes + (1 << 20) * threads
        size = raw.nbytes + x.nbytes + spec.M * spec.N * 4 + graph_bytes + work
        if hasattr(ggml, "ggml_cpu_init"):
            ggml.ggml_cpu_init()
        self.ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=False))
        w = ggml.ggml_new_tensor_2d(self.ctx, wtype, spec.K, spec.N)  # ne0: elements of one row
        xt = ggml.ggml_new_tensor_2d(self.ctx, ggml.GGML_TYPE_F32, spec.K, spec.M)
        if ggml.ggml_nbytes(w) != raw.nbytes:
            raise ValueError(f"ggml's {spec.fmt.name} tensor takes {ggml.ggml_nbytes(w)} bytes, "
                             f"accel's {raw.nbytes}: not the same block layout")
        ctypes.memmove(ggml.ggml_get_data(w), raw.ctypes.data, raw.nbytes)
        ctypes.memmove(ggml.ggml_get_data(xt), x.ctypes.data, x.nbytes)
        self.y = ggml.ggml_mul_mat(self.ctx, w, xt)
        self.graph = ggml.ggml_new_graph(self.ctx)
        ggml.ggml_build_forward_expand(self.graph, self.y)

    def run(self) -> None:
        self.ggml.ggml_graph_compute_with_ctx(self.ctx, self.graph, self.threads)

    def result(self) -> np.ndarray:
        data = ctypes.cast(self.ggml.ggml_get_data(self.y), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(data, shape=self.shape).copy()

    def __del__(self) -> None:
        if getattr(self, "ctx", None):
            self.ggml.ggml_free(self.ctx)


def _ggml(spec: S.Spec, host: list, threads: int) -> Prepared | None:
    if spec.op != "qmatmul" or spec.dtype != "float32" or spec.fmt.vec_dot is None:
        return None
    x_fmt = get_format(spec.fmt.vec_dot)
    if spec.x_fmt is not None and spec.x_fmt != x_fmt:
        return None  # other activation semantics than ggml's
    mm = _GgmlMatmul(spec, *host, threads)
    computes = S.qmatmul_spec(spec.x_shape, spec.dtype, (spec.N, spec.K), spec.fmt, x_fmt.name)
    note = "" if spec.x_fmt == x_fmt else f"ggml quantizes x to {x_fmt.name} itself (its own semantics)"
    return Prepared(mm.run, host_timer, mm.result, computes=computes, note=note)


# -- torch (CPU, CUDA, ROCm) ----------------------------------------------------------------------
def _torch_on(device: str) -> Callable[[S.Spec, list, Backend], Prepared | None]:
    def prepare(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
        import torch
        import torch.nn.functional as F

        def dev(x):
            if x.dtype == to_numpy_dtype("bfloat16"):
                return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).to(device)
            return torch.from_numpy(x).to(device)

        if spec.op == "matmul":
            a, b = (dev(x) for x in host)
            if spec.dtype == "int8":
                if a.ndim != 2 or spec.M <= 16 or spec.K % 8 or spec.N % 8:
                    return None  # torch._int_mm's shape constraints
                fn = _Last(lambda: torch._int_mm(a, b))
            else:
                fn = _Last(lambda: torch.matmul(a, b))
        elif spec.op == "scaled_matmul":
            fn = _Last(_torch_scaled_mm(torch, spec, host, device))
        elif spec.op == "attention":
            q, k, v = (dev(x) for x in host[:3])
            causal = torch_causal(spec)
            fn = _Last(lambda: F.scaled_dot_product_attention(q, k, v, scale=spec.scale,
                                                              enable_gqa=spec.Hq != spec.Hkv, **causal))
        else:
            return None
        timer = host_timer if device == "cpu" else _torch_event_timer(torch)

        def result() -> np.ndarray:
            return fn.value.float().cpu().numpy()
        return Prepared(fn, timer, result)
    return prepare


def _torch_dequantized(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
    """What a torch user without quantized kernels runs: the weight dequantized once when the
    model loads (gguf-py's dequantizer, as transformers does for GGUF files, outside the timing),
    then a float32 matmul that streams 4 bytes per weight."""
    import torch
    from gguf import GGMLQuantizationType, quants

    if spec.op != "qmatmul" or spec.x_fmt is not None:
        return None
    x, raw = host
    w = torch.from_numpy(quants.dequantize(raw, GGMLQuantizationType[spec.fmt.name.upper()]))
    xt = torch.from_numpy(np.asarray(x, np.float32))
    fn = _Last(lambda: torch.matmul(xt, w.T))
    return Prepared(fn, host_timer, lambda: fn.value.numpy(), weight_bytes=w.nbytes)


def _torch_scaled_mm(torch, spec: S.ScaledMatmulSpec, host: list, device: str) -> Callable[[], Any]:
    """torch._scaled_mm on ``device`` with accel's operands (b column-major, as it requires),
    tried once here: a scaling, dtype pair or bias this torch build refuses (the CPU build takes
    no block scales) raises Unsupported with torch's own first line."""
    a, b, scale_a, scale_b, bias = host

    def fp8(x: np.ndarray, dtype: str):
        return torch.from_numpy(x.view(np.uint8)).view(getattr(torch, dtype)).to(device)

    args = (fp8(a, spec.a_dtype), fp8(np.ascontiguousarray(b.T), spec.b_dtype).t())
    kwargs = dict(scale_a=torch.from_numpy(scale_a).to(device), scale_b=torch.from_numpy(scale_b).to(device),
                  out_dtype=getattr(torch, spec.out_dtype))
    if bias is not None:
        kwargs["bias"] = torch.from_numpy(bias.view(np.int16)).view(torch.bfloat16).to(device) \
            if spec.bias_dtype == "bfloat16" else torch.from_numpy(bias).to(device)
    try:
        torch._scaled_mm(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Unsupported(f"torch {torch.__version__} _scaled_mm on {device} refuses {spec.scaling} "
                          f"scaling of {spec.a_dtype} x {spec.b_dtype}: {reason}") from None
    return lambda: torch._scaled_mm(*args, **kwargs)


def torch_causal(spec: S.AttentionSpec) -> dict[str, Any]:
    """scaled_dot_product_attention's arguments for accel's bottom-right causal rule, through
    torch's own causal paths: a dense boolean mask would knock torch off its flash kernels (an
    H200 took 15.3 ms with the mask, 10.3 ms with causal_lower_right, same output), handicapping
    the baseline. is_causal aligns top-left, which is bottom-right when Sq == Sk; a single query
    (Sq == 1) sees every key, so it needs no mask at all."""
    if not spec.causal or spec.Sq == 1:
        return {}
    if spec.Sq == spec.Sk:
        return {"is_causal": True}
    from torch.nn.attention.bias import causal_lower_right

    return {"attn_mask": causal_lower_right(spec.Sq, spec.Sk)}  # device-free: torch places it


def _torch_event_timer(torch) -> Timer:
    def timer(fn: Callable[[], Any]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return timer


# -- cuBLAS / hipBLAS through CuPy ------------------------------------------------------------------
def _cupy(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
    import cupy

    if spec.op != "matmul" or spec.dtype not in ("float32", "float16"):
        return None
    with cupy.cuda.Device(backend.index):
        a, b = (cupy.asarray(x) for x in host)
    fn = _Last(lambda: cupy.matmul(a, b))
    # the backend's own timer: events around the work on its device's current stream, where
    # CuPy enqueues the matmul as it enqueues accel's kernels
    return Prepared(fn, backend.time, lambda: cupy.asnumpy(fn.value))


# -- CLBlast through pyclblast on the backend's own OpenCL queue --------------------------------------
def _clblast(spec: S.Spec, host: list, backend: Backend) -> Prepared | None:
    import pyclblast
    import pyopencl.array as cla

    queue = getattr(backend, "queue", None)
    if spec.op != "matmul" or spec.dtype != "float32" or len(spec.a_shape) != 2 or queue is None:
        return None
    a, b = (cla.to_device(queue, x) for x in host)
    c = cla.empty(queue, spec.out_shape, np.float32)

    def run() -> None:
        pyclblast.gemm(queue, spec.M, spec.N, spec.K, a, b, c, a_ld=spec.K, b_ld=spec.N, c_ld=spec.N)

    # the backend's own timer, as for accel's calls: it reads the profiling events of accel's
    # kernels, and with none enqueued (CLBlast's only) it is the host clock between two
    # queue.finish() on the queue both share
    return Prepared(run, backend.time, lambda: c.get())
