"""Running an op on checked operands: pick the backend, check ``supports()``, compute (on host
arrays for a ``host_compute`` backend, else on device tensors) and hand the result back in the
kind of array the caller gave. ``accel.ops`` (the public ops) and ``accel.torch_ops`` (the same
ops as PyTorch operators) both run through here.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from accel import spec as S
from accel.backend import Backend
from accel.dtypes import NAME_OF_NUMPY
from accel.errors import ArgumentError, DeviceError, DeviceMismatchError, UnsupportedError, expected
from accel.registry import get_backend
from accel.tensor import Operand, Tensor, device_backend, from_tensor, to_tensor

# specs are pure functions of shapes and dtypes: caching them keeps tiny calls cheap (typed for
# attention: True and 1 hash alike, yet only one of them is a valid ``causal``)
matmul_spec_cached = functools.lru_cache(maxsize=4096)(S.matmul_spec)
attention_spec_cached = functools.lru_cache(maxsize=4096, typed=True)(S.attention_spec)


def resolve(backend: str | Backend | None,
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
    return _computed(backend, spec, inputs, out)


def _computed(backend: Backend, spec: S.Spec, inputs: tuple, out: Tensor | None) -> Tensor | tuple[Tensor, ...]:
    """:func:`execute` after its support check (a spec of several ``outputs``: a tuple of them)."""
    if out is None and getattr(spec, "outputs", 1) > 1:
        out = tuple(Tensor.empty(backend, spec.out_shape, spec.out_dtype) for _ in range(spec.outputs))
    elif out is None:
        out = Tensor.empty(backend, spec.out_shape, spec.out_dtype)
    elif (out.backend, out.shape, out.dtype) != (backend, spec.out_shape, spec.out_dtype) or \
            not out.is_contiguous:  # kernels write C order from the buffer's start
        raise ArgumentError(expected("out", f"a contiguous {spec.out_dtype} tensor of shape "
                                     f"{spec.out_shape} on {backend.device_id}", repr(out)))
    if math.prod(spec.out_shape):
        backend.run(spec, out, *inputs)
    return out


def run(spec: S.Spec, backend: str | Backend | None, operands: tuple[Operand | None, ...],
              result_like: Operand | None = None) -> Any:
    """Run ``spec`` on ``operands`` (checked, in the op's argument order; None for an absent
    optional one) and return the result in the kind of array the caller gave."""
    be, hosts = resolve(backend, operands)
    check_supported(be, spec)
    if hosts is not None and be.host_compute:
        result = be.compute(spec, *hosts)
        if be.check_host_results:
            check_host_result(be, spec, result)
        return result
    out = _computed(be, spec, tuple(None if op is None else to_tensor(op, be) for op in operands), None)
    # the result takes the kind of ``result_like`` if given, else Tensor if any operand is one,
    # else the first operand's kind
    like = result_like or next((op for op in operands if op is not None and op.kind == "accel"),
                               operands[0])
    return from_tensor(out, like.kind, like.x)


def check_host_result(backend: Backend, spec: S.Spec, result: Any) -> None:
    """A host_compute backend's result as the spec defines it, or an error naming the backend
    (a plugin returning a wrong shape must not reach the user as an answer)."""
    want = (spec.out_shape, spec.out_dtype)
    got = (getattr(result, "shape", None), NAME_OF_NUMPY.get(getattr(result, "dtype", None)))
    if not isinstance(result, np.ndarray) or got != want:
        described = (f"an array of shape {got[0]}, dtype {result.dtype}" if isinstance(result, np.ndarray)
                     else f"a {type(result).__name__}")
        raise DeviceError(f"backend {backend.device_id!r} returned {described} for {spec.op}; "
                          f"expected a numpy array of shape {want[0]}, dtype {want[1]}")


__all__ = ["resolve", "check_supported", "execute", "run", "check_host_result"]
