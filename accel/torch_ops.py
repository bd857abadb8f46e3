"""accel's ops as PyTorch operators: ``torch.ops.accel.matmul``, ``attention``, ``qmatmul``,
``quantize`` and ``dequantize``, registered with ``torch.library.custom_op``.

Each has a fake implementation (shapes and dtypes from ``accel.spec``, so ``torch.compile`` traces
through with no graph break and bad shapes fail at trace time with accel's typed errors) and, where
the op is differentiable, an autograd formula: matmul and attention in every float input, qmatmul
in x (the weight is frozen). Where a path is not differentiable (quantize; qmatmul with
``x_format``), asking for a gradient is an error at the call, never a silently dropped gradient.

``accel.matmul`` and the other public ops route torch tensors here; ``import accel`` after torch
registers the operators too, so importing this module is only needed to call
``torch.ops.accel.*`` when accel was imported before torch.
The backend is the ``backend`` argument or the current selection for cpu tensors, and accel's
cuda/hip backend of the tensors' device for GPU tensors; data never moves between devices.

>>> import torch, accel, accel.torch_ops
>>> a = torch.ones(2, 3, requires_grad=True)
>>> y = torch.ops.accel.matmul(a, torch.ones(3, 4))
>>> y.sum().backward(); a.grad
tensor([[4., 4., 4.],
        [4., 4., 4.]])
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import torch

from accel import dispatch
from accel import spec as S
from accel.dtypes import dtype_name, to_numpy_dtype
from accel.errors import ArgumentError, DTypeError, expected
from accel.formats import check_quantizable_shape, get_format
from accel.tensor import Tensor, check_array, operand, to_tensor

_TORCH_DTYPES = {name: getattr(torch, name) for name in
                 ("float32", "float16", "bfloat16", "int8", "int32", "uint8")}


def _torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


def _host(arg: str, t: torch.Tensor) -> Any:
    """What accel's dispatch takes for torch tensor argument ``arg``: a numpy view of a cpu
    tensor, a DLPack import (cupy) of a GPU tensor, so nothing is copied between devices."""
    check_array(arg, t)  # a sparse tensor is refused, not densified
    if t.device.type == "cpu":
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: through its bits
            return t.view(torch.int16).numpy().view(to_numpy_dtype("bfloat16"))
        return t.numpy()
    import cupy  # GPU tensors: accel's cuda/hip backends run on CuPy arrays

    return cupy.from_dlpack(t.detach())


def _torch(result: Any, like: torch.Tensor) -> torch.Tensor:
    """A dispatch result (numpy or cupy) as a torch tensor on ``like``'s device, owning its memory."""
    if isinstance(result, np.ndarray):
        if result.dtype == to_numpy_dtype("bfloat16"):  # torch reads no ml_dtypes array
            return torch.from_numpy(result.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(np.array(result, copy=True))
    return torch.from_dlpack(result).to(like.device)


def _backend(backend: Optional[str], *tensors: torch.Tensor) -> Optional[str]:
    """GPU tensors choose their device's backend themselves (dispatch reads it from the arrays)."""
    return backend if all(t.device.type == "cpu" for t in tensors) else None


# -- matmul -----------------------------------------------------------------------------------
@torch.library.custom_op("accel::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None,
           backend: Optional[str] = None) -> torch.Tensor:
    ops = (operand("a", _host("a", a)), operand("b", _host("b", b)))
    spec = dispatch.matmul_spec_cached(ops[0].shape, ops[0].dtype, ops[1].shape, ops[1].dtype,
                                       None if out_dtype is None else dtype_name(out_dtype, "out_dtype"))
    return _torch(dispatch.run(spec, _backend(backend, a, b), ops), a)


@matmul.register_fake
def _(a, b, out_dtype=None, backend=None):
    spec = S.matmul_spec(tuple(a.shape), dtype_name(a.dtype, "a.dtype"), tuple(b.shape),
                         dtype_name(b.dtype, "b.dtype"),
                         None if out_dtype is None else dtype_name(out_dtype, "out_dtype"))
    return a.new_empty(spec.out_shape, dtype=_torch_dtype(spec.out_dtype))


def _matmul_context(ctx, inputs, output) -> None:
    a, b, _, backend = inputs
    ctx.save_for_backward(a, b)
    ctx.backend = backend


def _matmul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    if grad.numel() == 0:  # M or N (or a batch dim) is 0: the sums over them are empty, so zero
        return (torch.zeros_like(a) if ctx.needs_input_grad[0] else None,
                torch.zeros_like(b) if ctx.needs_input_grad[1] else None, None, None)
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:  # dA = dC @ B^T, summed over the batch dims A was broadcast over
        grad_a = matmul(grad.to(b.dtype), b.mT, backend=ctx.backend).sum_to_size(a.shape)
    if ctx.needs_input_grad[1]:  # dB = A^T @ dC
        grad_b = matmul(a.mT, grad.to(a.dtype), backend=ctx.backend).sum_to_size(b.shape)
    return grad_a, grad_b, None, None


matmul.register_autograd(_matmul_backward, setup_context=_matmul_context)


# -- attention --------------------------------------------------------------------------------
def _attention_spec(q, k, v, mask, causal, scale) -> S.AttentionSpec:
    names = tuple(dtype_name(t.dtype, f"{n}.dtype") for n, t in (("q", q), ("k", k), ("v", v)))
    return S.attention_spec(tuple(q.shape), tuple(k.shape), tuple(v.shape), names, causal, scale,
                            None if mask is None else tuple(mask.shape),
                            None if mask is None else dtype_name(mask.dtype, "mask.dtype"))


@torch.library.custom_op("accel::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
              causal: bool = False, scale: Optional[float] = None,
              backend: Optional[str] = None) -> torch.Tensor:
    ops = (operand("q", _host("q", q)), operand("k", _host("k", k)), operand("v", _host("v", v)),
           None if mask is None else operand("mask", _host("mask", mask)))
    spec = _attention_spec(q, k, v, mask, causal, scale)
    return _torch(dispatch.run(spec, _backend(backend, q, k, v), ops), q)


@attention.register_fake
def _(q, k, v, mask=None, causal=False, scale=None, backend=None):
    spec = _attention_spec(q, k, v, mask, causal, scale)
    return q.new_empty(spec.out_shape, dtype=_torch_dtype(spec.out_dtype))


def _attention_context(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, backend = inputs
    ctx.save_for_backward(q, k, v, mask)
    ctx.causal, ctx.scale, ctx.backend = causal, scale, backend


def _attention_backward(ctx, grad):
    """The softmax-Jacobian product, in float32, with accel's matmul for the four products:
    P = softmax(S), dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = s dS K,
    dK = s dS^T Q; GQA heads sum into their kv head, an additive mask gets dS."""
    q, k, v, mask = ctx.saved_tensors
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    group, scale = Hq // Hkv, ctx.scale if ctx.scale is not None else 1 / math.sqrt(D)

    def mm(x, y):
        return matmul(x.contiguous(), y.contiguous(), backend=ctx.backend)

    qf = q.float()
    kf, vf = (t.float().repeat_interleave(group, dim=1) for t in (k, v))  # kv head per q head
    logits = mm(qf, kf.mT) * scale
    keep = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if ctx.causal:  # bottom-right: query i sees keys j <= i + Sk - Sq
        keep = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
    if mask is not None and mask.dtype == torch.bool:
        keep = keep & mask
    elif mask is not None:
        logits = logits + mask.float()
    logits = logits.masked_fill(~keep, -math.inf)
    p = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # a row that sees no key gives zeros
    g = grad.float()
    dv = mm(p.mT, g)
    dp = mm(g, vf.mT)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = mm(ds, kf) * scale
    dk = mm(ds.mT, qf) * scale

    def per_kv_head(t):
        return t.view(B, Hkv, group, *t.shape[2:]).sum(dim=2)

    grad_mask = None
    if mask is not None and mask.dtype != torch.bool and ctx.needs_input_grad[3]:
        grad_mask = ds.sum_to_size(mask.shape).to(mask.dtype)
    return (dq.to(q.dtype), per_kv_head(dk).to(k.dtype), per_kv_head(dv).to(v.dtype), grad_mask,
            None, None, None)


attention.register_autograd(_attention_backward, setup_context=_attention_context)


# -- quantized ops: weights as raw GGUF block bytes (uint8 [..., K // 32 * block_bytes]) ---------
@torch.library.custom_op("accel::qmatmul", mutates_args=())
def qmatmul(x: torch.Tensor, w: torch.Tensor, fmt: str, N: int, x_format: Optional[str] = None,
            backend: Optional[str] = None) -> torch.Tensor:
    ops = (operand("x", _host("x", x)), operand("w", _host("w", w)))
    spec = _qmatmul_spec(x, w, fmt, N, x_format)
    return _torch(dispatch.run(spec, _backend(backend, x, w), ops, result_like=ops[0]), x)


@qmatmul.register_fake
def _(x, w, fmt, N, x_format=None, backend=None):
    spec = _qmatmul_spec(x, w, fmt, N, x_format)
    return x.new_empty(spec.out_shape, dtype=_torch_dtype(spec.out_dtype))


def _qmatmul_spec(x: torch.Tensor, w: torch.Tensor, fmt: str, N: int,
                  x_format: Optional[str]) -> S.QMatmulSpec:
    """The call checked: the weight [N, K] is known only by its bytes, so K is x's, whole
    blocks of it, and w must be exactly the bytes of N such rows."""
    f = get_format(fmt)
    if isinstance(N, bool) or not isinstance(N, int) or N < 0:
        raise ArgumentError(expected("N", "the weight's rows, an int >= 0", repr(N)))
    x_shape = tuple(x.shape)
    check_quantizable_shape(x_shape, f)
    spec = S.qmatmul_spec(x_shape, dtype_name(x.dtype, "x.dtype"), (N, x_shape[-1]), f, x_format)
    _check_raw("w", w, f.row_bytes(spec.K), (N,))
    return spec


def _qmatmul_context(ctx, inputs, output) -> None:
    x, w, fmt, N, x_format, backend = inputs
    if x_format is not None:
        raise ArgumentError(expected("x_format", "None when x requires a gradient (x quantized to "
                                     f"{x_format} has no derivative; use torch.no_grad() or "
                                     "x_format=None)", repr(x_format)))
    ctx.save_for_backward(w)
    ctx.fmt, ctx.K, ctx.backend = fmt, x.shape[-1], backend


def _qmatmul_backward(ctx, grad):
    (w,) = ctx.saved_tensors  # dx = dy @ dequantize(w)
    weight = dequantize(w, ctx.fmt, [w.shape[0], ctx.K], backend=ctx.backend)
    if grad.numel() == 0:  # N (or M) is 0: an empty sum
        return grad.new_zeros(*grad.shape[:-1], ctx.K), None, None, None, None, None
    rows = grad.float().reshape(-1, grad.shape[-1])  # x may be one vector, or carry batch dims
    grad_x = matmul(rows, weight, backend=ctx.backend).reshape(*grad.shape[:-1], ctx.K)
    return grad_x.to(grad.dtype), None, None, None, None, None


qmatmul.register_autograd(_qmatmul_backward, setup_context=_qmatmul_context)


@torch.library.custom_op("accel::quantize", mutates_args=())
def quantize(x: torch.Tensor, fmt: str, backend: Optional[str] = None) -> torch.Tensor:
    ox = operand("x", _host("x", x))
    spec = S.quantize_spec(ox.shape, ox.dtype, fmt)
    be, _ = dispatch.resolve(_backend(backend, x), (ox,))
    out = dispatch.execute(be, spec, to_tensor(ox, be))
    return _torch(_out_array(out, x), x)


@quantize.register_fake
def _(x, fmt, backend=None):
    spec = S.quantize_spec(tuple(x.shape), dtype_name(x.dtype, "x.dtype"), fmt)
    return x.new_empty(spec.out_shape, dtype=torch.uint8)


def _not_differentiable(ctx, inputs, output) -> None:
    raise ArgumentError(expected("x", "a tensor that does not require grad (quantize has no "
                                 "derivative: detach x or use torch.no_grad())", "x.requires_grad"))


def _never_called(ctx, grad):  # setup_context refuses first
    raise AssertionError("quantize has no derivative")


quantize.register_autograd(_never_called, setup_context=_not_differentiable)


@torch.library.custom_op("accel::dequantize", mutates_args=())
def dequantize(raw: torch.Tensor, fmt: str, shape: list[int], backend: Optional[str] = None) -> torch.Tensor:
    f = get_format(fmt)
    spec = S.dequantize_spec(tuple(shape), f)
    _check_raw("raw", raw, f.row_bytes(spec.shape[-1]), spec.shape[:-1])
    orw = operand("raw", _host("raw", raw))
    be, _ = dispatch.resolve(_backend(backend, raw), (orw,))
    out = dispatch.execute(be, spec, to_tensor(orw, be))
    return _torch(_out_array(out, raw), raw)


@dequantize.register_fake
def _(raw, fmt, shape, backend=None):
    f = get_format(fmt)
    spec = S.dequantize_spec(tuple(shape), f)
    _check_raw("raw", raw, f.row_bytes(spec.shape[-1]), spec.shape[:-1])
    return raw.new_empty(spec.out_shape, dtype=torch.float32)


def _check_raw(arg: str, raw: torch.Tensor, row_bytes: int, rows: tuple) -> None:
    """GGUF block bytes: uint8, exactly the rows' bytes (else a kernel reads past them)."""
    if raw.dtype != torch.uint8:
        raise DTypeError(expected(f"{arg}.dtype", "torch.uint8 (GGUF block bytes)", raw.dtype))
    want = tuple(rows) + (row_bytes,)
    if tuple(raw.shape) != want:
        raise ArgumentError(expected(f"{arg}.shape", f"{want} (GGUF blocks of the logical shape)",
                                     tuple(raw.shape)))


def _out_array(out: Tensor, like: torch.Tensor) -> Any:
    """An accel Tensor as the kind of array ``_torch`` takes (host for cpu tensors)."""
    if like.device.type == "cpu":
        return out.numpy()
    import cupy

    return cupy.from_dlpack(out)


# -- decoder-step ops (issue 42): the accel.nn reference or kernels forward, torch's float32
# formulas backward ---------------------------------------------------------------------------
def _nn(name: str, like: torch.Tensor, backend: Optional[str], *tensors: Any, **kw: Any) -> torch.Tensor:
    from accel import nn

    hosts = [None if t is None else _host(f"arg{i}", t) for i, t in enumerate(tensors)]
    return _torch(getattr(nn, name)(*hosts, backend=_backend(backend, like), **kw), like)


@torch.library.custom_op("accel::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6,
             backend: Optional[str] = None) -> torch.Tensor:
    return _nn("rms_norm", x, backend, x, weight, eps=eps)


@rms_norm.register_fake
def _(x, weight=None, eps=1e-6, backend=None):
    return torch.empty_like(x)


def _rms_norm_context(ctx, inputs, output) -> None:
    x, weight, eps, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_backward(ctx, grad):
    x, w = ctx.saved_tensors
    xf, gf = x.float(), grad.float()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = gf if w is None else gf * w.float()
    gx = r * gw - xf * r.pow(3) * (gw * xf).mean(-1, keepdim=True)
    gwt = None if w is None else (gf * xf * r).reshape(-1, x.shape[-1]).sum(0).to(w.dtype)
    return gx.to(x.dtype), gwt, None, None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_rms_norm_context)


@torch.library.custom_op("accel::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               backend: Optional[str] = None) -> torch.Tensor:
    return _nn("layer_norm", x, backend, x, weight, bias, eps=eps)


@layer_norm.register_fake
def _(x, weight=None, bias=None, eps=1e-5, backend=None):
    return torch.empty_like(x)


def _layer_norm_context(ctx, inputs, output) -> None:
    x, weight, bias, eps, _ = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.has_bias = eps, bias is not None


def _layer_norm_backward(ctx, grad):
    # y = xh w + b with xh = (x - mean) r, r = 1 / sqrt(var + eps): the usual layer-norm adjoint
    x, w = ctx.saved_tensors
    xf, gf = x.float(), grad.float()
    mu = xf.mean(-1, keepdim=True)
    r = torch.rsqrt((xf - mu).pow(2).mean(-1, keepdim=True) + ctx.eps)
    xh = (xf - mu) * r
    gw = gf if w is None else gf * w.float()
    gx = r * (gw - gw.mean(-1, keepdim=True) - xh * (gw * xh).mean(-1, keepdim=True))
    flat = lambda t: t.reshape(-1, x.shape[-1]).sum(0)  # noqa: E731
    gwt = None if w is None else flat(gf * xh).to(w.dtype)
    gbt = flat(gf).to(x.dtype) if ctx.has_bias else None
    return gx.to(x.dtype), gwt, gbt, None, None


layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_context)


@torch.library.custom_op("accel::get_rows", mutates_args=())
def get_rows(table: torch.Tensor, ids: torch.Tensor, backend: Optional[str] = None) -> torch.Tensor:
    from accel import nn

    result = nn.get_rows(_host("table", table), ids.detach().cpu().numpy(),
                         backend=_backend(backend, table))
    return _torch(result, table)


@get_rows.register_fake
def _(table, ids, backend=None):
    return table.new_empty(tuple(ids.shape) + tuple(table.shape[1:]))


def _get_rows_context(ctx, inputs, output) -> None:
    table, ids, _ = inputs
    ctx.save_for_backward(ids)
    ctx.rows = table.shape[0]


def _get_rows_backward(ctx, grad):
    # each looked-up row's gradient added to its table row (rows looked up twice: twice)
    (ids,) = ctx.saved_tensors
    g = grad.reshape(-1, grad.shape[-1])
    out = g.new_zeros((ctx.rows, grad.shape[-1])).index_add_(0, ids.reshape(-1).long(), g)
    return out, None, None


get_rows.register_autograd(_get_rows_backward, setup_context=_get_rows_context)


@torch.library.custom_op("accel::add", mutates_args=())
def add(a: torch.Tensor, b: torch.Tensor, backend: Optional[str] = None) -> torch.Tensor:
    return _nn("add", a, backend, a, b)


@torch.library.custom_op("accel::mul", mutates_args=())
def mul(a: torch.Tensor, b: torch.Tensor, backend: Optional[str] = None) -> torch.Tensor:
    return _nn("mul", a, backend, a, b)


def _binary_fake(a, b, backend=None):
    return a.new_empty(torch.broadcast_shapes(a.shape, b.shape))


add.register_fake(_binary_fake)
mul.register_fake(_binary_fake)


def _binary_context(ctx, inputs, output) -> None:
    a, b, _ = inputs
    ctx.save_for_backward(a, b)


def _add_backward(ctx, grad):
    a, b = ctx.saved_tensors
    return grad.sum_to_size(a.shape).to(a.dtype), grad.sum_to_size(b.shape).to(b.dtype), None


def _mul_backward(ctx, grad):
    a, b = ctx.saved_tensors
    g = grad.float()
    return ((g * b.float()).sum_to_size(a.shape).to(a.dtype),
            (g * a.float()).sum_to_size(b.shape).to(b.dtype), None)


add.register_autograd(_add_backward, setup_context=_binary_context)
mul.register_autograd(_mul_backward, setup_context=_binary_context)


@torch.library.custom_op("accel::softmax", mutates_args=())
def softmax(x: torch.Tensor, scale: float = 1.0, backend: Optional[str] = None,
            mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``softmax(x * scale + mask)`` over the last axis (``accel.softmax``): ``mask`` broadcasts
    to x, bool (True = keep) or additive float; a row with no finite logit left gives zeros.
    ``mask`` comes last so that the positional ``(x, scale, backend)`` calls keep their meaning."""
    from accel import nn

    result = nn.softmax(_host("x", x), scale=scale,
                        mask=None if mask is None else _host("mask", mask),
                        backend=_backend(backend, x) if mask is None else _backend(backend, x, mask))
    return _torch(result, x)


@softmax.register_fake
def _(x, scale=1.0, backend=None, mask=None):
    if mask is not None:  # a bad mask fails while tracing, with accel's typed error
        S.check_softmax_mask(dtype_name(mask.dtype, "mask.dtype"), tuple(mask.shape), tuple(x.shape))
    return torch.empty_like(x)


def _softmax_context(ctx, inputs, output) -> None:
    x, scale, backend, mask = inputs
    if mask is not None and mask.requires_grad:
        raise ArgumentError(expected("mask", "a tensor that does not require grad (softmax's "
                                     "gradient is taken in x only: detach the mask)",
                                     "mask.requires_grad"))
    ctx.save_for_backward(output)
    ctx.scale = scale


def _softmax_backward(ctx, grad):
    # dx = scale * y * (g - sum(g * y)); a fully masked row has y = 0, so its gradient is 0
    (y,) = ctx.saved_tensors
    yf, gf = y.float(), grad.float()
    return (ctx.scale * yf * (gf - (gf * yf).sum(-1, keepdim=True))).to(y.dtype), None, None, None


softmax.register_autograd(_softmax_backward, setup_context=_softmax_context)


@torch.library.custom_op("accel::glu", mutates_args=())
def glu(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu",
        backend: Optional[str] = None) -> torch.Tensor:
    return _nn("glu", gate, backend, gate, up, activation=activation)


@glu.register_fake
def _(gate, up, activation="silu", backend=None):
    return torch.empty_like(gate)


def _glu_context(ctx, inputs, output) -> None:
    gate, up, activation, _ = inputs
    ctx.save_for_backward(gate, up)
    ctx.activation = activation


def _act_and_slope(name: str, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """act(g) and act'(g) in float32."""
    if name == "silu":
        s = torch.sigmoid(g)
        return g * s, s * (1 + g * (1 - s))
    if name == "gelu_tanh":
        c = math.sqrt(2 / math.pi)
        t = torch.tanh(c * (g + 0.044715 * g ** 3))
        return 0.5 * g * (1 + t), 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * c * (1 + 3 * 0.044715 * g * g)
    cdf = 0.5 * (1 + torch.erf(g / math.sqrt(2)))
    return g * cdf, cdf + g * torch.exp(-0.5 * g * g) / math.sqrt(2 * math.pi)


def _glu_backward(ctx, grad):
    gate, up = ctx.saved_tensors
    act, slope = _act_and_slope(ctx.activation, gate.float())
    gf = grad.float()
    return (gf * up.float() * slope).to(gate.dtype), (gf * act).to(up.dtype), None, None


glu.register_autograd(_glu_backward, setup_context=_glu_context)


@torch.library.custom_op("accel::rope", mutates_args=())
def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
         rotary_dim: Optional[int] = None, interleaved: bool = False, freq_scale: float = 1.0,
         freq_factors: Optional[torch.Tensor] = None, backend: Optional[str] = None) -> torch.Tensor:
    from accel import nn

    result = nn.rope(_host("x", x), positions.detach().cpu().numpy(), base=base,
                     rotary_dim=rotary_dim, interleaved=interleaved, freq_scale=freq_scale,
                     freq_factors=None if freq_factors is None else _host("freq_factors", freq_factors),
                     backend=_backend(backend, x))
    return _torch(result, x)


@rope.register_fake
def _(x, positions, base=10000.0, rotary_dim=None, interleaved=False, freq_scale=1.0,
      freq_factors=None, backend=None):
    return torch.empty_like(x)


def _rope_context(ctx, inputs, output) -> None:
    x, positions, base, rotary_dim, interleaved, freq_scale, freq_factors, backend = inputs
    ctx.save_for_backward(positions, freq_factors)
    ctx.args = (base, rotary_dim, interleaved, freq_scale, backend)


def _rope_backward(ctx, grad):
    # a rotation's adjoint is the rotation by the opposite angle: the same op at -freq_scale
    positions, freq_factors = ctx.saved_tensors
    base, rotary_dim, interleaved, freq_scale, backend = ctx.args
    gx = rope(grad.contiguous(), positions, base, rotary_dim, interleaved, -freq_scale,
              freq_factors, backend)
    return gx, None, None, None, None, None, None, None


rope.register_autograd(_rope_backward, setup_context=_rope_context)


OPERATORS = (matmul, attention, qmatmul, quantize, dequantize, rms_norm, layer_norm, add, mul,
             softmax, glu, rope, get_rows)
