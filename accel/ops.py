"""The public ops: check the arguments, turn them into a spec, and run it (``accel.dispatch``);
torch tensors go through the same ops registered as PyTorch operators (``accel.torch_ops``), so
a call works eagerly, under autograd and under ``torch.compile``.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from accel import nn as _nn
from accel import spec as S
from accel.backend import Backend
from accel.dispatch import attention_spec_cached, execute, matmul_spec_cached, resolve, run
from accel.dtypes import FLOAT_DTYPES, FP8_DTYPES, FP8_MAX, convert, dtype_name
from accel.errors import ArgumentError, DTypeError, ShapeError, expected
from accel.tensor import QTensor, check_array, from_tensor, host_of, operand, to_tensor

def matmul(a: Any, b: Any, *, out_dtype: object = None, backend: str | Backend | None = None) -> Any:
    """``a[..., M, K] @ b[..., K, N]`` with batch broadcasting, float32 accumulation (int32 for
    int8), output in the input dtype unless ``out_dtype`` says otherwise.

    >>> import accel, numpy as np
    >>> accel.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))[0, 0]
    np.float32(3.0)
    """
    if (type(a) is not _ndarray or type(b) is not _ndarray) and \
            (ts := _torch_operands(("a", a), ("b", b))) is not None:  # two numpy arrays never are
        return _torch_op("matmul")(*ts, _torch_dtype(out_dtype), _device(backend))
    ops = oa, ob = operand("a", a), operand("b", b)
    spec = matmul_spec_cached(oa.shape, oa.dtype, ob.shape, ob.dtype,
                        None if out_dtype is None else dtype_name(out_dtype, "out_dtype"))
    return run(spec, backend, ops)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              mask: Any = None, window: int | None = None, softcap: float | None = None,
              sinks: Any = None, backend: str | Backend | None = None) -> Any:
    """Scaled dot-product attention with GQA, bottom-right causal alignment and an optional
    boolean (True = keep) or additive mask; fully masked rows give zeros. ``window=W`` (with
    causal) keeps each query's last W keys; ``softcap=c`` maps scaled logits to c*tanh(s/c)
    before masking; ``sinks`` ``[Hq]`` float32 adds one logit per head to the denominator.

    >>> import accel, numpy as np
    >>> q = np.ones((1, 4, 1, 8), np.float32); kv = np.ones((1, 2, 5, 8), np.float32)
    >>> accel.attention(q, kv, kv, causal=True).shape
    (1, 4, 1, 8)
    """
    named = (("q", q), ("k", k), ("v", v)) + (() if mask is None else (("mask", mask),))
    if (ts := _torch_operands(*named)) is not None:
        if window is not None or softcap is not None or sinks is not None:
            raise ArgumentError(expected("window, softcap, sinks", "None for torch tensors (the "
                                         "torch operator takes them in a later change)",
                                         "one of them set"))
        S.check_attention_flags(causal, scale)  # torch's schema would cast them with its own error
        tq, tk, tv, *tmask = ts
        return _torch_op("attention")(tq, tk, tv, tmask[0] if tmask else None, causal, scale,
                                      _device(backend))
    ops = (operand("q", q), operand("k", k), operand("v", v),
           None if mask is None else operand("mask", mask))
    oq, ok, ov, om = ops
    args = (oq.shape, ok.shape, ov.shape, (oq.dtype, ok.dtype, ov.dtype), causal, scale,
            None if om is None else om.shape, None if om is None else om.dtype)
    if window is not None or softcap is not None or sinks is not None:
        osk = None if sinks is None else operand("sinks", sinks)
        spec = S.attention_spec(*args, window, softcap, None if osk is None else osk.shape,
                                None if osk is None else osk.dtype)
        be, _ = resolve(backend, ops + (osk,))
        if not be.attention_options and osk is None and softcap is None and om is None:
            # a window alone is a boolean mask: lowered to one for backends without the option
            i = np.arange(spec.Sq)[:, None] + (spec.Sk - spec.Sq)
            keep = np.arange(spec.Sk)[None, :] > i - spec.window
            spec = S.attention_spec(*args[:6], keep.shape, "bool")
            return run(spec, be, ops[:3] + (operand("mask", keep),))
        return run(spec, be, ops + (osk,))
    try:
        spec = attention_spec_cached(*args)
    except TypeError:  # an unhashable scale or causal (a list, an array): the spec itself names it
        spec = S.attention_spec(*args)
    return run(spec, backend, ops)


def quantize(x: Any, fmt: str, *, imatrix: np.ndarray | None = None,
             backend: str | Backend | None = None) -> QTensor:
    """Quantize along the last axis into GGUF blocks of ``fmt`` (any format of
    ``accel.formats.FORMATS``; bit-exact with GGML's reference quantizer). The QTensor
    lives on the backend that computed it (the kernel runtimes leave q2_k, q3_k, iq4_nl and
    iq4_xs to the cpu reference: ``accel.kernels.kernel_declines``).

    ``imatrix``: llama-quantize's importance matrix, float32 ``[K]`` (one weight >= 0 per
    column): ggml's weighted quantizer (ggml-python) on the host, its bytes; required by the
    formats ggml quantizes only that way (iq2_xxs, iq2_xs, iq1_s). The QTensor then lives on
    ``backend`` (default: x's).

    >>> import accel, numpy as np
    >>> accel.quantize(np.linspace(-1, 1, 64, dtype=np.float32), "q4_0").raw.shape
    (36,)
    """
    ox = operand("x", x)
    spec = S.quantize_spec(ox.shape, ox.dtype, fmt)
    be, _ = resolve(backend, (ox,))
    if imatrix is not None:
        from accel.formats import weighted

        w = weighted.check_imatrix(imatrix, ox.shape[-1])
        host = (ox.x.numpy() if ox.kind == "accel" else np.asarray(ox.x)).astype(np.float32)
        raw = weighted.quantize(host.reshape(-1, ox.shape[-1]), spec.fmt, w)
        qt = QTensor.from_raw(raw.reshape(-1), spec.fmt.name, ox.shape, backend=be)
        qt.kind = ox.kind
        return qt
    out = execute(be, spec, to_tensor(ox, be))
    return QTensor(out, spec.fmt, ox.shape, kind=ox.kind)


def dequantize(qt: QTensor) -> Any:
    """float32 values of a QTensor, in the kind of array it was quantized from (numpy for
    ``QTensor.from_raw``).

    >>> import accel, numpy as np
    >>> accel.dequantize(accel.quantize(np.full(32, 254.0, np.float32), "q8_0"))[:2]  # d = 2
    array([254., 254.], dtype=float32)
    """
    if not isinstance(qt, QTensor):
        raise ArgumentError(expected("qt", "an accel.QTensor", type(qt).__name__))
    out = execute(qt.backend, S.dequantize_spec(qt.shape, qt.format), qt.data)
    return from_tensor(out, qt.kind)


def qmatmul(x: Any, w: QTensor, *, x_format: str | None = None,
            backend: str | Backend | None = None) -> Any:
    """``x[..., K] @ dequantize(w).T`` for a quantized weight ``w`` of logical shape ``[N, K]``.

    With ``x_format="q8_0"``, x is first quantized to Q8_0 (bit-exact with :func:`quantize`) and
    each pair of blocks is multiplied exactly in integers, then scaled by both blocks' d: the
    semantics of GGML's CPU matmul, faster on GPUs (integer dot products), less accurate (x
    rounded to 8 bits per block).

    >>> import accel, numpy as np
    >>> w = accel.quantize(np.full((3, 32), 127, np.float32), "q8_0")  # exactly representable
    >>> accel.qmatmul(np.ones((2, 32), np.float32), w)
    array([[4064., 4064., 4064.],
           [4064., 4064., 4064.]], dtype=float32)
    >>> x = np.full((1, 32), 0.3, np.float32)
    >>> accel.qmatmul(x, w), accel.qmatmul(x, w, x_format="q8_0")  # x's codes: 127, d: 0.3 / 127
    (array([[1219.2001, 1219.2001, 1219.2001]], dtype=float32), array([[1218.7318, 1218.7318, 1218.7318]], dtype=float32))
    """
    if not isinstance(w, QTensor):
        raise ArgumentError(expected("w", "an accel.QTensor (see accel.quantize)", type(w).__name__))
    if _torch_tensors(x) and x.requires_grad and sys.modules["torch"].is_grad_enabled():
        # the gradient needs the operator; a QTensor's bytes come along as a uint8 tensor, after
        # the same checks as below (the operator knows the weight only by its bytes)
        S.qmatmul_spec(tuple(x.shape), dtype_name(x.dtype, "x.dtype"), w.shape, w.format, x_format)
        raw = sys.modules["torch"].from_numpy(w.raw.copy())
        return _torch_op("qmatmul")(x, raw, w.fmt, w.shape[0], x_format, _device(backend))
    ops = (operand("x", x), operand("w", w.data))
    spec = S.qmatmul_spec(ops[0].shape, ops[0].dtype, w.shape, w.format, x_format)
    return run(spec, backend, ops, result_like=ops[0])


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: object = "bfloat16",
                  bias: Any = None, backend: str | Backend | None = None) -> Any:
    """``(a * scale_a) @ (b * scale_b) + bias`` for FP8 ``a [M, K]`` and ``b [K, N]``
    (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz): exact products, float32 accumulation, one
    rounding to ``out_dtype``. The scales' shapes choose the granularity: ``()`` and ``()`` per
    tensor, ``[M, 1]`` and ``[1, N]`` per row (torch._scaled_mm), ``[M, K/128]`` and
    ``[K/128, N/128]`` per block (DeepSeek-V3); float32, as :func:`quantize_fp8` makes them.

    >>> import accel, numpy as np
    >>> a, sa = accel.quantize_fp8(np.full((2, 128), 7.0, np.float32), "float8_e4m3fn")
    >>> b, sb = accel.quantize_fp8(np.full((128, 4), 3.5, np.float32), "float8_e4m3fn", operand_of="b")
    >>> float(sa), float(sb), accel.scaled_matmul(a, b, sa, sb, out_dtype="float32")[0, 0]
    (0.015625, 0.0078125, np.float32(3136.0))
    """
    _refuse_gradients("scaled_matmul", a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    scale_a, scale_b = (_scalar_scale(n, s) for n, s in (("scale_a", scale_a), ("scale_b", scale_b)))
    ops = oa, ob, osa, osb, obias = (operand("a", a), operand("b", b), operand("scale_a", scale_a),
                                     operand("scale_b", scale_b),
                                     None if bias is None else operand("bias", bias))
    spec = S.scaled_matmul_spec(oa.shape, oa.dtype, ob.shape, ob.dtype, osa.shape, osa.dtype,
                                osb.shape, osb.dtype, dtype_name(out_dtype, "out_dtype"),
                                None if obias is None else obias.shape,
                                None if obias is None else obias.dtype)
    return run(spec, backend, ops)


def quantize_fp8(x: Any, dtype: str, granularity: str = "tensor", *,
                 operand_of: str = "a") -> tuple[np.ndarray, np.ndarray]:
    """``(data, scale)`` with ``x ~ data * scale``: amax scaling (scale = amax / the format's
    largest value, 1 for an all-zero group), ``data`` rounded to nearest even, the inverse of
    what :func:`scaled_matmul` takes for operand ``operand_of`` ("a" [M, K] or "b" [K, N]) at
    ``granularity`` "tensor", "row" (a: per row, b: per column) or "block" (a: 1x128, b:
    128x128). A host array in, numpy out (the data as an ml_dtypes float8 array). A group
    holding a NaN or an infinity gets a non-finite scale (NaN, inf) and reads back as NaN: it is
    never silently clamped. A group of subnormal values gets the subnormal scale closest above
    amax / max, so its data stays within the format.

    >>> import accel, numpy as np
    >>> data, scale = accel.quantize_fp8(np.array([[1.0, -896.0]], np.float32), "float8_e4m3fn")
    >>> data.astype(np.float32).tolist(), float(scale)  # 896 = 2 x 448
    ([[0.5, -448.0]], 2.0)
    """
    try:
        name = dtype_name(dtype, "dtype")  # a string, numpy/ml_dtypes or torch dtype
    except DTypeError:
        name = None
    if name not in FP8_DTYPES:
        raise ArgumentError(expected("dtype", f"one of {FP8_DTYPES}", repr(dtype)))
    if granularity not in S.SCALINGS:
        raise ArgumentError(expected("granularity", f"one of {S.SCALINGS}", repr(granularity)))
    if operand_of not in ("a", "b"):
        raise ArgumentError(expected("operand_of", "'a' ([M, K]) or 'b' ([K, N])", repr(operand_of)))
    ox = operand("x", x)
    host = host_of(ox.x, ox.kind)
    if host is None or ox.dtype not in FLOAT_DTYPES or len(ox.shape) != 2:
        raise ArgumentError(expected("x", f"a 2-d host array of {FLOAT_DTYPES}",
                                     f"a {ox.kind} {ox.dtype} array of shape {ox.shape}"))
    rows, cols = ox.shape
    k = rows if operand_of == "b" else cols
    if granularity == "block" and k % S.FP8_BLOCK:
        raise ShapeError(expected("x.shape", f"K a multiple of {S.FP8_BLOCK} for block scaling", ox.shape))
    group = {("tensor", "a"): (rows, cols), ("tensor", "b"): (rows, cols), ("row", "a"): (1, cols),
             ("row", "b"): (rows, 1), ("block", "a"): (1, S.FP8_BLOCK),
             ("block", "b"): (S.FP8_BLOCK, S.FP8_BLOCK)}[granularity, operand_of]
    values = host.astype(np.float32)
    want = S.fp8_scale_shapes(granularity, rows, cols, cols)[0] if operand_of == "a" else \
        S.fp8_scale_shapes(granularity, cols, rows, cols)[1]
    amax = _group_amax(values, group) if values.size else np.zeros(want or (1, 1), np.float32)
    # amax 0: scale 1; NaN or inf: a non-finite scale, so the group reads back as NaN
    scale = np.where(amax == 0, np.float32(1), _fp8_scale(amax, FP8_MAX[name]))
    expanded = np.repeat(np.repeat(scale, group[0], axis=0), group[1], axis=1)[:rows, :cols]
    with np.errstate(all="ignore"):
        data = convert(values / expanded, name)
    return data, scale.reshape(()) if granularity == "tensor" else scale


def _fp8_scale(amax: np.ndarray, largest: float) -> np.ndarray:
    """amax / largest in float32; where that is subnormal (amax below float32's smallest normal
    times ``largest``) it underflows to 0 (0/0 data) or to a value so coarse that the data
    overflows the format (inf, or NaN in the fnuz formats), so there it is rounded up until
    amax / scale fits. A normal quotient is within an ulp: its data always fits."""
    tiny = np.finfo(np.float32)
    with np.errstate(under="ignore", divide="ignore", invalid="ignore"):
        scale = np.maximum(amax / np.float32(largest), tiny.smallest_subnormal)
        too_small = (scale < tiny.tiny) & (amax.astype(np.float64) / scale > largest)
    return np.where(too_small, np.nextafter(scale, np.float32(np.inf)), scale).astype(np.float32)


def _group_amax(values: np.ndarray, group: tuple[int, int]) -> np.ndarray:
    """max |x| over each (group[0] x group[1]) tile of a 2-d array (edge tiles partial)."""
    gr, gc = max(1, group[0]), max(1, group[1])
    rows, cols = values.shape
    padded = np.zeros((-(-rows // gr) * gr, -(-cols // gc) * gc), np.float32)
    padded[:rows, :cols] = np.abs(values)
    return padded.reshape(padded.shape[0] // gr, gr, padded.shape[1] // gc, gc).max(axis=(1, 3))


def _scalar_scale(arg: str, s: Any) -> Any:
    """A Python or numpy number as scaled_matmul's float32 scale (a finite one: a scale of inf
    or NaN would turn every output into NaN); anything else (arrays: data) as it came."""
    if isinstance(s, bool):  # True would silently be a scale of 1
        raise ArgumentError(expected(arg, "a float32 scale (number or array)", repr(s)))
    if isinstance(s, (int, float, np.integer, np.floating)):  # np.float32 as much as 0.5
        if not S.finite_in_float32(s):
            shown = repr(s) if len(repr(s)) < 40 else f"{repr(s)[:20]}... ({len(repr(s))} digits)"
            raise ArgumentError(expected(arg, "a scale finite in float32", shown))
        return np.asarray(np.float32(s))
    return np.asarray(s) if isinstance(s, np.generic) else s


def _refuse_gradients(op: str, **operands: Any) -> None:
    """An ArgumentError where a torch operand asks for a gradient ``op`` has no formula for: its
    result would otherwise come back silently detached."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return
    for arg, x in operands.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            raise ArgumentError(expected(arg, f"a tensor that does not require grad ({op} has no "
                                         "derivative: detach it or use torch.no_grad())",
                                         f"{arg}.requires_grad"))


_ndarray = np.ndarray


def _torch_operands(*named: tuple[str, Any]) -> tuple | None:
    """The operands as the torch operator takes them, or None where the op runs on accel's own
    dispatch: every operand a torch tensor, or some of them one that requires grad (then host
    arrays, a numpy mask say, join as torch tensors rather than the gradient being lost)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    is_torch = [isinstance(x, torch.Tensor) for _, x in named]
    if all(is_torch):
        return tuple(x for _, x in named)
    grad = torch.is_grad_enabled() and any(t and x.requires_grad for t, (_, x) in zip(is_torch, named))
    if not grad:
        return None
    device = next(x.device for t, (_, x) in zip(is_torch, named) if t and x.requires_grad)
    out = []
    for t, (arg, x) in zip(is_torch, named):
        kind = check_array(arg, x) if not t else "torch"
        if t:
            out.append(x)
        elif kind == "numpy" and device.type == "cpu":
            host = host_of(x, kind)
            name = dtype_name(host.dtype, f"{arg}.dtype")
            if name == "bfloat16" or name.startswith("float8"):  # torch reads no ml_dtypes array:
                bits = np.int16 if name == "bfloat16" else np.uint8  # through the bits
                out.append(torch.from_numpy(host.view(bits)).view(getattr(torch, name)))
            else:
                out.append(torch.from_numpy(host))
        else:
            raise ArgumentError(expected(arg, f"a torch tensor on {device} like the operand that "
                                         "requires grad (the gradient runs through torch's "
                                         "autograd), or a numpy array with cpu tensors", kind))
    return tuple(out)


def _torch_tensors(*arrays: Any) -> bool:
    """Whether every operand is a torch tensor: then the op runs as its torch operator (autograd,
    torch.compile). Recognised by type, so accel never imports torch itself."""
    torch = sys.modules.get("torch")
    return torch is not None and all(isinstance(x, torch.Tensor) for x in arrays)


def _torch_op(name: str):
    from accel import torch_ops  # torch is imported: a torch tensor came in

    return getattr(torch_ops, name)


def _torch_dtype(dtype: object):
    if dtype is None:
        return None
    import torch

    return getattr(torch, dtype_name(dtype, "out_dtype"))


def _device(backend: str | Backend | None) -> str | None:
    return backend.device_id if isinstance(backend, Backend) else backend


# -- the decoder-step ops (accel.nn computes them): torch tensors go to their operators ----------
def _torch_all(*arrays: Any) -> bool:
    return _torch_tensors(*(a for a in arrays if a is not None))


@functools.wraps(_nn.rms_norm)
def rms_norm(x: Any, weight: Any = None, *, eps: float = 1e-6, residual: Any = None,
             backend: str | Backend | None = None) -> Any:
    if _torch_all(x, weight, residual):
        if residual is not None:  # the two operators (autograd through both)
            s = add(x, residual, backend=backend)
            return s, rms_norm(s, weight, eps=eps, backend=backend)
        return _torch_op("rms_norm")(x, weight, _nn._eps(eps), _device(backend))
    return _nn.rms_norm(x, weight, eps=eps, residual=residual, backend=backend)


@functools.wraps(_nn.layer_norm)
def layer_norm(x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5,
               backend: str | Backend | None = None) -> Any:
    if _torch_all(x, weight, bias):
        return _torch_op("layer_norm")(x, weight, bias, _nn._eps(eps), _device(backend))
    return _nn.layer_norm(x, weight, bias, eps=eps, backend=backend)


@functools.wraps(_nn.silu)
def silu(x: Any, *, backend: str | Backend | None = None) -> Any:
    if _torch_all(x):  # act(x) * 1, exactly act(x), with glu's autograd
        return _torch_op("glu")(x, _ones_like(x), "silu", _device(backend))
    return _nn.silu(x, backend=backend)


@functools.wraps(_nn.gelu)
def gelu(x: Any, approximate: str = "none", *, backend: str | Backend | None = None) -> Any:
    if _torch_all(x) and approximate in ("none", "tanh"):
        act = "gelu_tanh" if approximate == "tanh" else "gelu"
        return _torch_op("glu")(x, _ones_like(x), act, _device(backend))
    return _nn.gelu(x, approximate, backend=backend)


def _ones_like(x: Any) -> Any:
    import torch

    return torch.ones_like(x)


@functools.wraps(_nn.get_rows)
def get_rows(table: Any, ids: Any, *, backend: str | Backend | None = None) -> Any:
    if _torch_all(table, ids):
        return _torch_op("get_rows")(table, ids, _device(backend))
    return _nn.get_rows(table, ids, backend=backend)


@functools.wraps(_nn.softmax)
def softmax(x: Any, *, scale: float = 1.0, mask: Any = None,
            backend: str | Backend | None = None) -> Any:
    if _torch_all(x, mask):
        return _torch_op("softmax")(x, _nn._real("scale", scale), _device(backend), mask)
    return _nn.softmax(x, scale=scale, mask=mask, backend=backend)


@functools.wraps(_nn.add)
def add(a: Any, b: Any, *, backend: str | Backend | None = None) -> Any:
    if _torch_all(a, b):
        return _torch_op("add")(a, b, _device(backend))
    return _nn.add(a, b, backend=backend)


@functools.wraps(_nn.mul)
def mul(a: Any, b: Any, *, backend: str | Backend | None = None) -> Any:
    if _torch_all(a, b):
        return _torch_op("mul")(a, b, _device(backend))
    return _nn.mul(a, b, backend=backend)


@functools.wraps(_nn.glu)
def glu(gate: Any, up: Any = None, *, activation: str = "silu",
        backend: str | Backend | None = None) -> Any:
    if activation in _nn.ACTIVATIONS and _torch_all(gate, up):
        if up is None:
            if not gate.ndim or gate.shape[-1] % 2:
                raise ShapeError(expected("gate.shape", "an even last dimension (gate and up "
                                          "halves) when up is None", tuple(gate.shape)))
            gate, up = gate.chunk(2, dim=-1)
        return _torch_op("glu")(gate, up, activation, _device(backend))
    return _nn.glu(gate, up, activation=activation, backend=backend)


@functools.wraps(_nn.rope)
def rope(x: Any, positions: Any, *, base: float = 10000.0, rotary_dim: int | None = None,
         interleaved: bool = False, freq_scale: float = 1.0, freq_factors: Any = None,
         backend: str | Backend | None = None) -> Any:
    if _torch_all(x, positions, freq_factors):
        return _torch_op("rope")(x, positions, _nn._real("base", base, positive=True), rotary_dim,
                                 interleaved, _nn._real("freq_scale", freq_scale), freq_factors,
                                 _device(backend))
    return _nn.rope(x, positions, base=base, rotary_dim=rotary_dim, interleaved=interleaved,
                    freq_scale=freq_scale, freq_factors=freq_factors, backend=backend)


__all__ = ["matmul", "attention", "quantize", "dequantize", "qmatmul", "scaled_matmul", "quantize_fp8",
           "rms_norm", "layer_norm", "softmax", "add", "mul", "glu", "silu", "gelu", "get_rows", "rope"]
