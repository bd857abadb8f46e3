"""The public ops: turn arrays into a validated spec, pick the backend, check ``supports()``,
compute into a fresh output, and hand the result back in the kind of array the caller gave.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from accel import spec as S
from accel.backend import Backend
from accel.dtypes import dtype_name
from accel.errors import ArgumentError, DeviceMismatchError, UnsupportedError, expected
from accel.registry import get_backend
from accel.tensor import Operand, QTensor, Tensor, device_backend, from_tensor, operand, to_tensor

# specs are pure functions of shapes and dtypes: caching them keeps tiny calls cheap (typed for
# attention: True and 1 hash alike, yet only one of them is a valid ``causal``)
_matmul_spec = functools.lru_cache(maxsize=4096)(S.matmul_spec)
_attention_spec = functools.lru_cache(maxsize=4096, typed=True)(S.attention_spec)


def _resolve(backend: str | Backend | None,
             operands: tuple[Operand | None, ...]) -> tuple[Backend, list[Any] | None]:
    """The backend to run on, and the operands' arrays when every one is a numpy array (else
    None): device-resident operands decide, ``backend=`` or the current selection otherwise;
    any disagreement is an error (accel never moves data silently)."""
    resident: Backend | None = None
    resident_arg = ""
    hosts: list[Any] | None = []
    for op in operands:
        if op is None or op.kind == "numpy":
            if hosts is not None:
                hosts.append(None if op is None else op.x)
            continue
        hosts = None
        b = device_backend(op.x, op.kind)
        if b is None:
            continue
        if resident is not None and b is not resident:
            raise DeviceMismatchError(expected(op.arg, f"an operand on {resident.device_id} like "
                                               f"{resident_arg}", f"one on {b.device_id}"))
        resident, resident_arg = b, op.arg
    if backend is not None:
        chosen = backend if isinstance(backend, Backend) else get_backend(backend)
        if resident is not None and chosen is not resident:
            raise DeviceMismatchError(expected("backend", f"{resident.device_id}, where {resident_arg} "
                                               "lives (move it with Tensor.to())", chosen.device_id))
        return chosen, hosts
    return resident or get_backend(), hosts


def check_supported(backend: Backend, spec: S.Spec) -> None:
    """Raise UnsupportedError unless the backend supports ``spec`` (:meth:`Backend.verdict`)."""
    verdict = backend.verdict(spec)
    if not verdict.ok:
        raise UnsupportedError(backend.device_id, spec.op, spec.in_dtypes[0], verdict.reason)


def execute(backend: Backend, spec: S.Spec, *inputs: Tensor | None, out: Tensor | None = None) -> Tensor:
    """Run a validated spec on tensors already on ``backend`` (the conformance suite passes a
    guarded ``out``)."""
    check_supported(backend, spec)
    if out is None:
        out = Tensor.empty(backend, spec.out_shape, spec.out_dtype)
    elif (out.backend, out.shape, out.dtype) != (backend, spec.out_shape, spec.out_dtype):
        raise ArgumentError(expected("out", f"a {spec.out_dtype} tensor of shape {spec.out_shape} on "
                                     f"{backend.device_id}", repr(out)))
    if math.prod(spec.out_shape):
        backend.run(spec, out, *inputs)
    return out


def _dispatch(spec: S.Spec, backend: str | Backend | None, operands: tuple[Operand | None, ...],
              result_like: Operand | None = None) -> Any:
    """Run ``spec`` on ``operands`` (checked, in the op's argument order; None for an absent
    optional one) and return the result in the kind of array the caller gave."""
    be, hosts = _resolve(backend, operands)
    check_supported(be, spec)
    if hosts is not None and be.host_compute:
        return be.compute(spec, *hosts)
    out = execute(be, spec, *(None if op is None else to_tensor(op, be) for op in operands))
    # the result takes the kind of ``result_like`` if given, else Tensor if any operand is one,
    # else the first operand's kind
    like = result_like or next((op for op in operands if op is not None and op.kind == "accel"),
                               operands[0])
    return from_tensor(out, like.kind, like.x)


def matmul(a: Any, b: Any, *, out_dtype: object = None, backend: str | Backend | None = None) -> Any:
    """``a[..., M, K] @ b[..., K, N]`` with batch broadcasting, float32 accumulation (int32 for
    int8), output in the input dtype unless ``out_dtype`` says otherwise.

    >>> import accel, numpy as np
    >>> accel.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))[0, 0]
    np.float32(3.0)
    """
    ops = oa, ob = operand("a", a), operand("b", b)
    spec = _matmul_spec(oa.shape, oa.dtype, ob.shape, ob.dtype,
                        None if out_dtype is None else dtype_name(out_dtype, "out_dtype"))
    return _dispatch(spec, backend, ops)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              mask: Any = None, backend: str | Backend | None = None) -> Any:
    """Scaled dot-product attention with GQA, bottom-right causal alignment and an optional
    boolean (True = keep) or additive mask; fully masked rows give zeros.

    >>> import accel, numpy as np
    >>> q = np.ones((1, 4, 1, 8), np.float32); kv = np.ones((1, 2, 5, 8), np.float32)
    >>> accel.attention(q, kv, kv, causal=True).shape
    (1, 4, 1, 8)
    """
    ops = (operand("q", q), operand("k", k), operand("v", v),
           None if mask is None else operand("mask", mask))
    oq, ok, ov, om = ops
    args = (oq.shape, ok.shape, ov.shape, (oq.dtype, ok.dtype, ov.dtype), causal, scale,
            None if om is None else om.shape, None if om is None else om.dtype)
    try:
        spec = _attention_spec(*args)
    except TypeError:  # an unhashable scale or causal (a list, an array): the spec itself names it
        spec = S.attention_spec(*args)
    return _dispatch(spec, backend, ops)


def quantize(x: Any, fmt: str, *, backend: str | Backend | None = None) -> QTensor:
    """Quantize along the last axis into GGUF ``q8_0`` or ``q4_0`` blocks (bit-exact with GGML's
    reference quantizer). The QTensor lives on the backend that computed it.

    >>> import accel, numpy as np
    >>> accel.quantize(np.linspace(-1, 1, 64, dtype=np.float32), "q4_0").raw.shape
    (36,)
    """
    ox = operand("x", x)
    spec = S.quantize_spec(ox.shape, ox.dtype, fmt)
    be, _ = _resolve(backend, (ox,))
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
    ops = (operand("x", x), operand("w", w.data))
    spec = S.qmatmul_spec(ops[0].shape, ops[0].dtype, w.shape, w.format, x_format)
    return _dispatch(spec, backend, ops, result_like=ops[0])


__all__ = ["matmul", "attention", "quantize", "dequantize", "qmatmul", "execute", "check_supported"]
