"""The decoder-step ops (issue 42): norms, RoPE, softmax, gated activations, embedding rows,
residual add/mul. Each takes ``backend=`` like accel's other ops and gives back the kind of
array it was given: an ``accel.Tensor`` on the same device for ``accel.Tensor`` operands, numpy
for numpy operands.

Where they run: the cpu reference computes every case in numpy (float32 arithmetic, one
rounding to the output dtype). float32 ``accel.Tensor`` operands on OpenCL, CUDA and HIP run
kernels/decoder.cl on the device for ``rms_norm``, ``layer_norm``, ``rope``, ``glu`` (every
activation), ``silu``, ``gelu`` (erf and tanh), ``softmax`` unmasked or with a bool or float32
mask of x's shape or repeated along x's leading dims (``[Sq, Sk]`` against ``[B, H, Sq, Sk]``),
``add``/``mul`` of the same shapes or with one operand repeated along the other's leading dims
(a bias, a scalar) and ``get_rows`` of a float32 table; a quantized table's rows are gathered
on its device and dequantized there by the format's own dequantize plan. Every other case on a
backend other than ``cpu`` (other dtypes, other broadcasts, a float16 or bfloat16 mask) reads
the operands to the host, computes the reference and writes the result back to that backend:
the reference's answer, with a round trip of the data.
"""
from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from accel.backend import Backend
from accel.dispatch import execute, resolve
from accel.dtypes import FLOAT_DTYPES, to_numpy_dtype
from accel.errors import ArgumentError, DTypeError, ShapeError, expected
from accel.spec import dequantize_spec
from accel.tensor import QTensor, Tensor, operand

_F = np.float32
_BLOCK = 256  # DEC_BLOCK of kernels/decoder.cl
ACTIVATIONS = ("silu", "gelu_tanh", "gelu")  # in the order of decoder.cl's act_f codes


# -- operands -------------------------------------------------------------------------------
class _Call:
    """The operands of one call, checked, with the backend they resolve to."""

    def __init__(self, backend: str | Backend | None, **named: Any):
        self.ops = {k: operand(k, v) for k, v in named.items() if v is not None}
        self.backend, _ = resolve(backend, tuple(self.ops.values()))
        self.device = any(o.kind == "accel" for o in self.ops.values())
        for o in self.ops.values():
            if o.kind not in ("numpy", "accel"):
                raise ArgumentError(expected(o.arg, "a numpy array or an accel.Tensor (the "
                                             "decoder ops take no other array kinds yet)", o.kind))

    def host(self, arg: str) -> np.ndarray | None:
        o = self.ops.get(arg)
        if o is None:
            return None
        return o.x.numpy() if o.kind == "accel" else np.asarray(o.x)

    def dtype(self, arg: str) -> str:
        return self.ops[arg].dtype

    def shape(self, arg: str) -> tuple[int, ...]:
        return self.ops[arg].shape

    def kernel(self, name: str, *, bools: tuple[str, ...] = ()) -> Any:
        """The device kernel ``name`` where the operands are accel.Tensors of float32 (those
        named in ``bools`` may be bool, one byte each on a device) on a backend that builds
        kernels/decoder.cl (OpenCL, CUDA, HIP), else None (the host reference)."""
        get = getattr(self.backend, "decoder_kernel", None)
        if get is None or not self.device or any(
                (o.dtype != "float32" and not (k in bools and o.dtype == "bool"))
                or math.prod(o.shape) >= 2**31 for k, o in self.ops.items()):
            return None  # the kernels take float32 and 32-bit sizes
        return get(name)

    def tensor(self, arg: str) -> Tensor:
        """Operand ``arg`` as a contiguous tensor on the call's backend."""
        o = self.ops[arg]
        if o.kind == "accel":
            return o.x.contiguous()
        return Tensor.from_host(self.backend, np.ascontiguousarray(o.x))

    def out(self, result: np.ndarray) -> Any:
        result = np.ascontiguousarray(result)
        return Tensor.from_host(self.backend, result) if self.device else result


def _float(call: _Call, arg: str) -> str:
    dt = call.dtype(arg)
    if dt not in FLOAT_DTYPES:
        raise DTypeError(expected(f"{arg}.dtype", f"one of {FLOAT_DTYPES}", dt))
    return dt


def _same_dtype(call: _Call, arg: str, like: str) -> None:
    if arg in call.ops and call.dtype(arg) != call.dtype(like):
        raise DTypeError(expected(f"{arg}.dtype", f"the dtype of {like} ({call.dtype(like)})",
                                  call.dtype(arg)))


def _vector(call: _Call, arg: str, n: int, like: str) -> bool:
    """Whether the optional [n] operand ``arg`` of ``like``'s dtype is there (checked without
    reading it: a device tensor stays on its device)."""
    if arg not in call.ops:
        return False
    _same_dtype(call, arg, like)
    if call.shape(arg) != (n,):
        raise ShapeError(expected(f"{arg}.shape", f"({n},), the last dimension of {like}",
                                  call.shape(arg)))
    return True


def _eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(eps)) or float(eps) < 0:
        raise ArgumentError(expected("eps", "a finite real number >= 0", repr(eps)))
    return float(eps)


def _real(arg: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)) or (positive and float(value) <= 0):
        raise ArgumentError(expected(arg, "a finite real number" + (" > 0" if positive else ""),
                                     repr(value)))
    return float(value)


def _integers(arg: str, x: Any, backend: str | Backend | None) -> tuple[np.ndarray, Backend | None, bool]:
    """An integer index operand (numpy of any integer dtype, or an int32/int8 accel.Tensor)."""
    if isinstance(x, Tensor):
        if x.dtype not in ("int32", "int8"):
            raise DTypeError(expected(f"{arg}.dtype", "an integer dtype", x.dtype))
        return x.numpy().astype(np.int64), x.backend, True
    if not isinstance(x, np.ndarray) or isinstance(x, (np.ma.MaskedArray, np.matrix)):
        raise ArgumentError(expected(arg, "a numpy integer array or an accel.Tensor",
                                     type(x).__name__))
    if not np.issubdtype(x.dtype, np.integer):
        raise DTypeError(expected(f"{arg}.dtype", "an integer dtype", str(x.dtype)))
    return x.astype(np.int64), None, False


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(to_numpy_dtype(dtype))


# -- norms ------------------------------------------------------------------------------------
def rms_norm(x: Any, weight: Any = None, *, eps: float = 1e-6, residual: Any = None,
             backend: str | Backend | None = None) -> Any:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis, in float32, output in x's
    dtype; ``weight`` ``[D]`` of x's dtype (None: no scaling).

    ``residual``: an array of x's shape and dtype; the call then returns the pair
    ``(s, rms_norm(s))`` for ``s = add(x, residual)``: a pre-norm block's residual add and the
    next norm, one kernel on a device (the same values as the two ops apart).

    >>> import accel, numpy as np
    >>> np.round(accel.rms_norm(np.array([[3.0, 4.0]], np.float32), eps=0.0) ** 2, 4)  # ms 12.5
    array([[0.72, 1.28]], dtype=float32)
    >>> s, y = accel.rms_norm(np.array([[1.0, 4.0]], np.float32), eps=0.0,
    ...                       residual=np.array([[2.0, 0.0]], np.float32))
    >>> s, np.round(y ** 2, 4)
    (array([[3., 4.]], dtype=float32), array([[0.72, 1.28]], dtype=float32))
    """
    if residual is not None:
        return _add_rms_norm(x, residual, weight, eps, backend)
    call = _Call(backend, x=x, weight=weight)
    dt = _float(call, "x")
    e = _eps(eps)
    if not call.shape("x"):
        raise ShapeError(expected("x.shape", "at least 1 dimension [..., D]", call.shape("x")))
    w = _vector(call, "weight", call.shape("x")[-1], "x")
    if (k := call.kernel("rms_norm_f32")) is not None and math.prod(call.shape("x")):
        xt = call.tensor("x")
        wt = call.tensor("weight") if w else xt
        out = Tensor.empty(call.backend, xt.shape, "float32")
        D = xt.shape[-1]
        call.backend.decoder_launch(k, (math.prod(xt.shape[:-1]), 1, 1), (_BLOCK, 1, 1),
                            [xt, wt, out, np.int32(D), np.float32(e), np.int32(w)])
        return out
    xf = call.host("x").astype(_F)
    with np.errstate(all="ignore"):
        ms = np.mean(np.square(xf, dtype=_F), axis=-1, keepdims=True, dtype=_F)
        y = xf / np.sqrt(ms + _F(e))
        if w:
            y = y * call.host("weight").astype(_F)
    return call.out(_round(y, dt))


def _residual_call(backend: str | Backend | None, eps: float, **operands: Any) -> tuple[_Call, float]:
    """The call of a fused residual form: x float, residual of x's shape and dtype, eps checked."""
    call = _Call(backend, **operands)
    _float(call, "x")
    _same_dtype(call, "residual", "x")
    if call.shape("residual") != call.shape("x") or not call.shape("x"):
        raise ShapeError(expected("residual.shape", f"x's shape {call.shape('x')} (at least 1 "
                                  "dimension)", call.shape("residual")))
    return call, _eps(eps)


def _add_rms_norm(x: Any, residual: Any, weight: Any, eps: float,
                  backend: str | Backend | None) -> tuple[Any, Any]:
    call, e = _residual_call(backend, eps, x=x, residual=residual, weight=weight)
    w = _vector(call, "weight", call.shape("x")[-1], "x")
    if (k := call.kernel("add_rms_norm_f32")) is not None and math.prod(call.shape("x")):
        xt, rt = call.tensor("x"), call.tensor("residual")
        wt = call.tensor("weight") if w else xt
        s, y = (Tensor.empty(call.backend, xt.shape, "float32") for _ in range(2))
        call.backend.decoder_launch(k, (math.prod(xt.shape[:-1]), 1, 1), (_BLOCK, 1, 1),
                                    [xt, rt, wt, s, y, np.int32(xt.shape[-1]), np.float32(e),
                                     np.int32(w)])
        return s, y
    s = add(x, residual, backend=backend)
    return s, rms_norm(s, weight, eps=e, backend=backend)


def norm_add_rms_norm(x: Any, x_weight: Any, residual: Any, weight: Any, *, eps: float = 1e-6,
                      backend: str | Backend | None = None) -> tuple[Any, Any]:
    """``(s, rms_norm(s, weight))`` for ``s = add(rms_norm(x, x_weight), residual)``: a
    sandwich-norm block's branch norm, residual add and next pre-norm (Gemma's post-norms), the
    same bits as the three calls; one kernel launch on a device (accel.models' decode path).

    >>> import accel, numpy as np
    >>> from accel.nn import norm_add_rms_norm
    >>> one = np.ones(2, np.float32)
    >>> s, y = norm_add_rms_norm(np.array([[3.0, 4.0]], np.float32), one, np.zeros((1, 2), np.float32), one)
    >>> bool(np.allclose(s, accel.rms_norm(np.array([[3.0, 4.0]], np.float32))))
    True
    """
    call, e = _residual_call(backend, eps, x=x, x_weight=x_weight, residual=residual, weight=weight)
    D = call.shape("x")[-1]
    if _vector(call, "x_weight", D, "x") and _vector(call, "weight", D, "x") \
            and (k := call.kernel("norm_add_rms_norm_f32")) is not None and math.prod(call.shape("x")):
        xt, pw, rt, wt = (call.tensor(a) for a in ("x", "x_weight", "residual", "weight"))
        s, y = (Tensor.empty(call.backend, xt.shape, "float32") for _ in range(2))
        call.backend.decoder_launch(k, (math.prod(xt.shape[:-1]), 1, 1), (_BLOCK, 1, 1),
                                    [xt, pw, rt, wt, s, y, np.int32(D), np.float32(e)])
        return s, y
    return _add_rms_norm(rms_norm(x, x_weight, eps=e, backend=backend), residual, weight, e, backend)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5,
               backend: str | Backend | None = None) -> Any:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (population
    variance), in float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> accel.layer_norm(np.array([1.0, 3.0], np.float32), eps=0.0)
    array([-1.,  1.], dtype=float32)
    """
    call = _Call(backend, x=x, weight=weight, bias=bias)
    dt = _float(call, "x")
    e = _eps(eps)
    if not call.shape("x"):
        raise ShapeError(expected("x.shape", "at least 1 dimension [..., D]", call.shape("x")))
    n = call.shape("x")[-1]
    w, b = _vector(call, "weight", n, "x"), _vector(call, "bias", n, "x")
    if (k := call.kernel("layer_norm_f32")) is not None and math.prod(call.shape("x")):
        xt = call.tensor("x")
        wt = call.tensor("weight") if w else xt  # absent: a buffer the kernel never reads
        bt = call.tensor("bias") if b else xt
        out = Tensor.empty(call.backend, xt.shape, "float32")
        call.backend.decoder_launch(k, (math.prod(xt.shape[:-1]), 1, 1), (_BLOCK, 1, 1),
                                    [xt, wt, bt, out, np.int32(n), np.float32(e), np.int32(w),
                                     np.int32(b)])
        return out
    xf = call.host("x").astype(_F)
    with np.errstate(all="ignore"):
        c = xf - np.mean(xf, axis=-1, keepdims=True, dtype=_F)
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True, dtype=_F) + _F(e))
        if w:
            y = y * call.host("weight").astype(_F)
        if b:
            y = y + call.host("bias").astype(_F)
    return call.out(_round(y, dt))


# -- RoPE ---------------------------------------------------------------------------------------
def rope(x: Any, positions: Any, *, base: float = 10000.0, rotary_dim: int | None = None,
         interleaved: bool = False, freq_scale: float = 1.0, freq_factors: Any = None,
         backend: str | Backend | None = None) -> Any:
    """Rotary position embedding of ``x [B, H, S, D]`` at integer ``positions`` ``[S]`` or
    ``[B, S]``: pair ``i`` of the first ``rotary_dim`` dims (NEOX halves ``(i, i + r/2)`` by
    default, GPT-J neighbours ``(2i, 2i + 1)`` with ``interleaved=True``) turns by
    ``position * freq_scale * base^(-2i / rotary_dim) / freq_factors[i]``; the other dims pass
    through. Angles and rotation in float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> x = np.array([[[[1.0, 0.0]]]], np.float32)                     # B=H=S=1, D=2
    >>> np.round(accel.rope(x, np.array([1]), base=1.0), 4)            # turned by 1 radian
    array([[[[0.5403, 0.8415]]]], dtype=float32)
    """
    return _rope(x, positions, base, rotary_dim, interleaved, freq_scale, freq_factors, backend)


def rms_norm_rope(x: Any, weight: Any, positions: Any, *, eps: float = 1e-6, base: float = 10000.0,
                  rotary_dim: int | None = None, interleaved: bool = False,
                  freq_scale: float = 1.0, freq_factors: Any = None,
                  backend: str | Backend | None = None) -> Any:
    """``rope(rms_norm(x, weight, eps=eps), positions, ...)`` for ``x [B, H, S, D]``: a QK-norm
    model's per-head norm and rotation of its queries or keys (gemma3, qwen3), the same bits as
    the two calls; one kernel launch on a device for head dims up to 512 (accel.models' path).

    >>> import accel, numpy as np
    >>> from accel.nn import rms_norm_rope
    >>> x = np.array([[[[3.0, 4.0]]]], np.float32)
    >>> y = rms_norm_rope(x, np.ones(2, np.float32), np.array([1]), base=1.0)
    >>> bool(np.array_equal(y, accel.rope(accel.rms_norm(x, np.ones(2, np.float32)), np.array([1]), base=1.0)))
    True
    """
    return _rope(x, positions, base, rotary_dim, interleaved, freq_scale, freq_factors, backend,
                 norm=(weight, eps))


#: the largest head dim rms_norm_rope_f32 holds in local memory (its NORM_ROPE_D)
_NORM_ROPE_D = 512


def _rope(x: Any, positions: Any, base: float, rotary_dim: int | None, interleaved: bool,
          freq_scale: float, freq_factors: Any, backend: str | Backend | None,
          norm: tuple[Any, float] | None = None) -> Any:
    """rope, or with ``norm = (weight, eps)`` rope of x's rms_norm (rms_norm_rope)."""
    call = _Call(backend, x=x, freq_factors=freq_factors, **({"weight": norm[0]} if norm else {}))
    dt = _float(call, "x")
    shape = call.shape("x")
    if len(shape) != 4:
        raise ShapeError(expected("x.shape", "4 dimensions [B, H, S, D]", shape))
    B, H, S, D = shape
    pos, pos_backend, _ = _integers("positions", positions, None)
    if pos_backend is not None and pos_backend is not call.backend:
        raise ArgumentError(expected("positions", f"on {call.backend.device_id} like x",
                                     f"a tensor on {pos_backend.device_id}"))
    if pos.shape not in ((S,), (B, S)):
        raise ShapeError(expected("positions.shape", f"({S},) or ({B}, {S}) for x of shape {shape}",
                                  pos.shape))
    if pos.size and pos.min() < 0:
        raise ArgumentError(expected("positions", "non-negative integers", int(pos.min())))
    r = D if rotary_dim is None else rotary_dim
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 2 or r % 2 or r > D:
        raise ArgumentError(expected("rotary_dim", f"None or an even integer in [2, D = {D}]",
                                     repr(rotary_dim)))
    r = int(r)
    if not isinstance(interleaved, (bool, np.bool_)):
        raise ArgumentError(expected("interleaved", "a bool", repr(interleaved)))
    b = _real("base", base, positive=True)
    fs = _real("freq_scale", freq_scale)
    ff = None
    if "freq_factors" in call.ops:
        if call.dtype("freq_factors") != "float32":
            raise DTypeError(expected("freq_factors.dtype", "float32", call.dtype("freq_factors")))
        if call.shape("freq_factors") != (r // 2,):
            raise ShapeError(expected("freq_factors.shape", f"({r // 2},) (rotary_dim / 2)",
                                      call.shape("freq_factors")))
        ff = call.host("freq_factors").astype(_F)
    if norm is not None:
        e = _eps(norm[1])
        has_w = _vector(call, "weight", D, "x")
        if has_w and D <= _NORM_ROPE_D and (k := call.kernel("rms_norm_rope_f32")) is not None \
                and math.prod(shape):
            xt, wt = call.tensor("x"), call.tensor("weight")
            out = Tensor.empty(call.backend, shape, "float32")
            tabs = _device_tables(call.backend, pos, b, r, fs, ff)
            call.backend.decoder_launch(k, (B * H * S, 1, 1), (_BLOCK, 1, 1),
                                        [xt, wt, *tabs, out, np.int32(H), np.int32(S), np.int32(D),
                                         np.float32(e), np.int32(r), np.int32(bool(interleaved)),
                                         np.int32(pos.ndim == 2)])
            return out
        normed = rms_norm(x, norm[0], eps=e, backend=backend)
        return _rope(normed, positions, base, rotary_dim, interleaved, freq_scale, freq_factors, backend)
    if (k := call.kernel("rope_f32")) is not None and math.prod(shape):
        xt = call.tensor("x")
        out = Tensor.empty(call.backend, shape, "float32")
        n = math.prod(shape)
        tabs = _device_tables(call.backend, pos, b, r, fs, ff)
        call.backend.decoder_launch(k, (-(-n // _BLOCK), 1, 1), (_BLOCK, 1, 1),
                            [xt, *tabs, out, np.int32(H), np.int32(S), np.int32(D), np.int32(r),
                             np.int32(bool(interleaved)), np.int32(pos.ndim == 2), np.int32(n)])
        return out
    cos, sin = _angles(pos, b, r, fs, ff)
    xf = call.host("x").astype(_F)
    y = xf.copy()
    if interleaved:
        x0, x1 = xf[..., 0:r:2], xf[..., 1:r:2]
        y[..., 0:r:2] = x0 * cos - x1 * sin
        y[..., 1:r:2] = x0 * sin + x1 * cos
    else:
        h = r // 2
        x0, x1 = xf[..., :h], xf[..., h:r]
        y[..., :h] = x0 * cos - x1 * sin
        y[..., h:r] = x0 * sin + x1 * cos
    return call.out(_round(y, dt))


def _angles(pos: np.ndarray, base: float, r: int, fs: float,
            ff: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of every position's angles, float32: ``[S, r/2]`` or ``[B, 1, S, r/2]``. The
    angles are taken in float64 (then cos and sin rounded once): in float32 a position above
    2**24 would itself round, and the angle's error grow with the position."""
    inv = float(base) ** (-np.arange(0, r, 2, dtype=np.float64) / r)  # [r/2]
    if ff is not None:
        inv = inv / ff.astype(np.float64)
    theta = (pos.astype(np.float64) * fs)[..., None] * inv  # [S, r/2] or [B, S, r/2]
    if theta.ndim == 3:
        theta = theta[:, None]  # [B, 1, S, r/2]
    return np.cos(theta).astype(_F), np.sin(theta).astype(_F)


#: the cos / sin tables last uploaded, by backend and angles: a decoder's layers rotate Q and K
#: at the same positions with one or two bases, so most calls find theirs on the device already
_TABLES: dict[tuple, tuple[Tensor, Tensor]] = {}
_TABLES_KEPT = 8
_TABLES_LOCK = threading.Lock()


def _device_tables(backend: Backend, pos: np.ndarray, base: float, r: int, fs: float,
                   ff: np.ndarray | None) -> list[Tensor]:
    key = (id(backend), pos.shape, pos.tobytes(), base, r, fs, None if ff is None else ff.tobytes())
    with _TABLES_LOCK:  # threads decoding on one backend share the tables
        if key not in _TABLES:
            if len(_TABLES) >= _TABLES_KEPT:
                del _TABLES[next(iter(_TABLES))]
            _TABLES[key] = tuple(Tensor.from_host(backend, np.ascontiguousarray(t.reshape(-1, r // 2)))
                                 for t in _angles(pos, base, r, fs, ff))
        return list(_TABLES[key])


# -- softmax --------------------------------------------------------------------------------------
def check_softmax_mask(mask_dtype: str, mask_shape: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """Check a softmax mask against x's ``shape``: bool or a float dtype, broadcastable to x (the
    one check of ``softmax`` and its torch operator's fake, so a bad mask fails while tracing)."""
    if mask_dtype != "bool" and mask_dtype not in FLOAT_DTYPES:
        raise DTypeError(expected("mask.dtype", f"bool or one of {FLOAT_DTYPES}", mask_dtype))
    try:
        if np.broadcast_shapes(mask_shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ShapeError(expected("mask.shape", f"broadcastable to x's shape {shape}",
                                  mask_shape)) from None


def softmax(x: Any, *, scale: float = 1.0, mask: Any = None,
            backend: str | Backend | None = None) -> Any:
    """``softmax(x * scale + mask)`` over the last axis in float32, output in x's dtype. ``mask``
    broadcasts to x: boolean (True = keep) or additive float; a row with no finite logit left
    gives zeros.

    >>> import accel, numpy as np
    >>> accel.softmax(np.log(np.array([[1.0, 3.0]], np.float32)))
    array([[0.25, 0.75]], dtype=float32)
    """
    call = _Call(backend, x=x, mask=mask)
    dt = _float(call, "x")
    s = _real("scale", scale)
    shape = call.shape("x")
    if not shape:
        raise ShapeError(expected("x.shape", "at least 1 dimension", shape))
    masked = "mask" in call.ops
    if masked:
        mdt, mshape = call.dtype("mask"), call.shape("mask")
        check_softmax_mask(mdt, mshape, shape)
    n = shape[-1]
    # the kernel reads a mask of whole rows of n repeated along x's leading dims (the same shape;
    # [Sq, Sk] against [B, H, Sq, Sk]); a scalar's one element and other broadcasts: the host path
    if math.prod(shape) and (not masked or _repeats_along_leading_dims(mshape, shape)
                             and math.prod(mshape) % n == 0) \
            and (k := call.kernel("softmax_f32", bools=("mask",))) is not None:
        xt = call.tensor("x")
        mt = call.tensor("mask") if masked else xt
        mode = 0 if not masked else 1 if mdt == "bool" else 2
        keep, addend = (mt, xt) if mode == 1 else (xt, mt)  # x's buffer where the mode reads none
        out = Tensor.empty(call.backend, xt.shape, "float32")
        call.backend.decoder_launch(k, (math.prod(xt.shape[:-1]), 1, 1), (_BLOCK, 1, 1),
                                    [xt, keep, addend, out, np.int32(n), np.float32(s),
                                     np.int32(mode), np.int32(math.prod(mt.shape) // n if masked else 1)])
        return out
    with np.errstate(all="ignore"):
        z = call.host("x").astype(_F) * _F(s)
        if masked:
            m = call.host("mask")
            z = np.where(m, z, _F(-np.inf)) if mdt == "bool" else z + m.astype(_F)
        mx = np.max(z, axis=-1, keepdims=True) if z.shape[-1] else np.zeros(z.shape[:-1] + (1,), _F)
        dead = mx == -np.inf
        e = np.exp(z - np.where(dead, _F(0), mx))
        y = e / np.where(dead, _F(1), np.sum(e, axis=-1, keepdims=True, dtype=_F))
        y = np.where(dead, _F(0), y)
    return call.out(_round(y, dt))


# -- activations -------------------------------------------------------------------------------------
def _act(name: str, g: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "silu":
            return g / (_F(1) + np.exp(-g))
        if name == "gelu_tanh":
            c = _F(math.sqrt(2.0 / math.pi))
            return _F(0.5) * g * (_F(1) + np.tanh(c * (g + _F(0.044715) * g * g * g)))
        from math import erf  # exact erf per element (numpy has none): gelu is not a hot path here
        return (_F(0.5) * g * (_F(1) + np.vectorize(erf, otypes=[np.float64])(g / math.sqrt(2))
                               .astype(_F))).astype(_F)


def silu(x: Any, *, backend: str | Backend | None = None) -> Any:
    """``x * sigmoid(x)`` in float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> accel.silu(np.array([0.0, 1.0], np.float32))
    array([0.       , 0.7310586], dtype=float32)
    """
    call = _Call(backend, x=x)
    dt = _float(call, "x")
    if (k := call.kernel("unary_f32")) is not None and math.prod(call.shape("x")):
        return _unary(call, k, "silu")
    return call.out(_round(_act("silu", call.host("x").astype(_F)), dt))


def _unary(call: _Call, k: Any, act: str) -> Tensor:
    xt = call.tensor("x")
    n = math.prod(xt.shape)
    out = Tensor.empty(call.backend, xt.shape, "float32")
    call.backend.decoder_launch(k, (-(-n // _BLOCK), 1, 1), (_BLOCK, 1, 1),
                                [xt, out, np.int32(n), np.int32(ACTIVATIONS.index(act))])
    return out


def gelu(x: Any, approximate: str = "none", *, backend: str | Backend | None = None) -> Any:
    """GELU, ``x * Phi(x)`` (``approximate="none"``, erf) or its tanh approximation
    (``"tanh"``), as torch's ``gelu``; float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> accel.gelu(np.array([1.0], np.float32)), accel.gelu(np.array([1.0], np.float32), "tanh")
    (array([0.8413447], dtype=float32), array([0.841192], dtype=float32))
    """
    if approximate not in ("none", "tanh"):
        raise ArgumentError(expected("approximate", "'none' or 'tanh'", repr(approximate)))
    call = _Call(backend, x=x)
    dt = _float(call, "x")
    name = "gelu" if approximate == "none" else "gelu_tanh"
    if (k := call.kernel("unary_f32")) is not None and math.prod(call.shape("x")):
        return _unary(call, k, name)
    return call.out(_round(_act(name, call.host("x").astype(_F)), dt))


def glu(gate: Any, up: Any = None, *, activation: str = "silu",
        backend: str | Backend | None = None) -> Any:
    """``act(gate) * up`` (SwiGLU with "silu", GeGLU with "gelu_tanh" or "gelu"); with
    ``up=None`` the last axis of ``gate`` splits in halves, the first half the gate.

    >>> import accel, numpy as np
    >>> accel.glu(np.array([[1.0, 2.0]], np.float32), activation="silu")  # silu(1) * 2
    array([[1.4621172]], dtype=float32)
    """
    if activation not in ACTIVATIONS:
        raise ArgumentError(expected("activation", f"one of {ACTIVATIONS}", repr(activation)))
    call = _Call(backend, gate=gate, up=up)
    dt = _float(call, "gate")
    shape = call.shape("gate")
    if "up" in call.ops:
        _same_dtype(call, "up", "gate")
        if call.shape("up") != shape:
            raise ShapeError(expected("up.shape", f"the shape of gate {shape}", call.shape("up")))
    elif not shape or shape[-1] % 2:
        raise ShapeError(expected("gate.shape", "an even last dimension (gate and up halves) "
                                  "when up is None", shape))
    out_shape = shape if "up" in call.ops else shape[:-1] + (shape[-1] // 2,)
    if (k := call.kernel("glu_f32")) is not None and math.prod(out_shape):
        gt = call.tensor("gate")
        ut = call.tensor("up") if "up" in call.ops else gt
        h = out_shape[-1]
        rows = math.prod(out_shape) // h
        stride, up_off = (h, 0) if "up" in call.ops else (2 * h, h)
        out = Tensor.empty(call.backend, out_shape, "float32")
        call.backend.decoder_launch(k, (-(-(rows * h) // _BLOCK), 1, 1), (_BLOCK, 1, 1),
                            [gt, ut, out, np.int32(rows), np.int32(h), np.int32(stride),
                             np.int32(up_off), np.int32(ACTIVATIONS.index(activation))])
        return out
    g = call.host("gate").astype(_F)
    if "up" in call.ops:
        u = call.host("up").astype(_F)
    else:
        g, u = g[..., :out_shape[-1]], g[..., out_shape[-1]:]
    with np.errstate(all="ignore"):
        return call.out(_round(_act(activation, g) * u, dt))


# -- elementwise -----------------------------------------------------------------------------------------
def _binary(name: str, a: Any, b: Any, backend: str | Backend | None) -> Any:
    call = _Call(backend, a=a, b=b)
    dt = _float(call, "a")
    _same_dtype(call, "b", "a")
    try:
        shape = np.broadcast_shapes(call.shape("a"), call.shape("b"))
    except ValueError:
        raise ShapeError(expected("a, b shapes", "shapes that broadcast",
                                  f"{call.shape('a')} and {call.shape('b')}")) from None
    big, small = ("a", "b") if call.shape("a") == shape else ("b", "a")
    if call.shape(big) == shape and _repeats_along_leading_dims(call.shape(small), shape) \
            and (k := call.kernel("binary_f32")) is not None and math.prod(call.shape(big)):
        # a + b and a * b are commutative in IEEE arithmetic: the repeated operand goes second
        at, bt = call.tensor(big), call.tensor(small)
        n = math.prod(at.shape)
        out = Tensor.empty(call.backend, at.shape, "float32")
        call.backend.decoder_launch(k, (-(-n // _BLOCK), 1, 1), (_BLOCK, 1, 1),
                                    [at, bt, out, np.int32(n), np.int32(name == "mul"),
                                     np.int32(max(1, math.prod(bt.shape)))])
        return out
    fa, fb = call.host("a").astype(_F), call.host("b").astype(_F)
    with np.errstate(all="ignore"):
        return call.out(_round(fa + fb if name == "add" else fa * fb, dt))


def _repeats_along_leading_dims(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Whether an operand of shape ``small`` broadcast to ``big`` repeats its elements whole
    along big's leading dims (the same shape, a bias of the last dims, a scalar)."""
    core = small[next((i for i, d in enumerate(small) if d != 1), len(small)):]  # leading 1s off
    return big[len(big) - len(core):] == core if core else True


def add(a: Any, b: Any, *, backend: str | Backend | None = None) -> Any:
    """``a + b`` with numpy broadcasting, computed in float32 and rounded once to the inputs'
    dtype (both the same float dtype).

    >>> import accel, numpy as np
    >>> accel.add(np.ones((2, 2), np.float16), np.array([1.0, 2.0], np.float16))
    array([[2., 3.],
           [2., 3.]], dtype=float16)
    """
    return _binary("add", a, b, backend)


def mul(a: Any, b: Any, *, backend: str | Backend | None = None) -> Any:
    """``a * b`` with numpy broadcasting, computed in float32 and rounded once to the inputs'
    dtype.

    >>> import accel, numpy as np
    >>> accel.mul(np.full(3, 1.5, np.float32), np.float32(2) * np.ones(3, np.float32))
    array([3., 3., 3.], dtype=float32)
    """
    return _binary("mul", a, b, backend)


# -- embedding rows ----------------------------------------------------------------------------------------
def _quantized_rows_on_device(table: QTensor, idx: np.ndarray, be: Backend) -> Tensor | None:
    """The rows of a quantized table at ``idx`` gathered and dequantized on its device (a
    decode step's embedding lookup without a host round trip), or None where that backend
    has no decoder kernels or declines the format's dequantize."""
    get = getattr(be, "decoder_kernel", None)
    N, D = table.shape
    spec = dequantize_spec((idx.size, D), table.format)
    if table.backend is not be or get is None or not idx.size or not be.verdict(spec).ok:
        return None
    rb = table.format.row_bytes(D)
    raw = Tensor.empty(be, (idx.size, rb), "uint8")
    be.decoder_launch(get("get_rows_bytes"), (idx.size, -(-rb // _BLOCK), 1), (_BLOCK, 1, 1),
                      [table.data, Tensor.from_host(be, idx.astype(np.int32).reshape(-1)), raw,
                       np.int32(rb)])
    return execute(be, spec, raw).reshape(idx.shape + (D,))



def get_rows(table: Any, ids: Any, *, backend: str | Backend | None = None) -> Any:
    """Rows of ``table [N, D]`` at integer ``ids`` (any shape): output ``ids.shape + (D,)``.
    A float table gives rows in its dtype; an ``accel.QTensor`` gives the rows as float32,
    equal to ``accel.dequantize`` of the table (any format: the selected rows' own bytes are
    dequantized by the format's codec).

    >>> import accel, numpy as np
    >>> t = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> accel.get_rows(t, np.array([[2, 0]]))
    array([[[4., 5.],
            [0., 1.]]], dtype=float32)
    """
    if isinstance(table, QTensor):
        if len(table.shape) != 2:
            raise ShapeError(expected("table.shape", "a 2-d table [N, D]", table.shape))
        N, D = table.shape
        idx, ib, dev = _integers("ids", ids, backend)
        _check_ids(idx, N)
        be = ib if ib is not None else (table.backend if backend is None else resolve(backend, ())[0])
        rows = _quantized_rows_on_device(table, idx, be)
        if rows is not None:
            return rows if dev or table.kind == "accel" else rows.numpy()
        flat = idx.reshape(-1)
        uniq, where = np.unique(flat, return_inverse=True)
        if table.backend.name != "cpu" and uniq.size * 8 < N:  # a few rows: read only those
            data = table.data.reshape(N, -1)
            raw = np.stack([data[int(i)].numpy() for i in uniq])[where.reshape(-1)]
        else:
            raw = np.asarray(table.raw).reshape(N, -1)[flat]
        rows = QTensor.from_raw(np.ascontiguousarray(raw), table.fmt, (idx.size, D), backend="cpu")
        # the format's own dequantize, whatever it is (what accel.dequantize runs)
        deq = execute(rows.backend, dequantize_spec(rows.shape, rows.format), rows.data)
        out = deq.numpy().reshape(idx.shape + (D,))
        return Tensor.from_host(be, out) if dev or table.kind == "accel" else out
    idx, ib, dev = _integers("ids", ids, None)
    call = _Call(ib if backend is None and ib is not None else backend, table=table)
    _float(call, "table")
    if len(call.shape("table")) != 2:
        raise ShapeError(expected("table.shape", "a 2-d table [N, D]", call.shape("table")))
    if ib is not None and ib is not call.backend:
        raise ArgumentError(expected("ids", f"on {call.backend.device_id} like table",
                                     f"a tensor on {ib.device_id}"))
    _check_ids(idx, call.shape("table")[0])
    get = getattr(call.backend, "decoder_kernel", None)
    D = call.shape("table")[1]
    if get is not None and (dev or call.device) and call.dtype("table") == "float32" \
            and 0 < idx.size * D < 2**31:
        k = get("get_rows_f32")
        it = ids.contiguous() if isinstance(ids, Tensor) and ids.dtype == "int32" else \
            Tensor.from_host(call.backend, idx.astype(np.int32).reshape(-1))
        out = Tensor.empty(call.backend, idx.shape + (D,), "float32")
        call.backend.decoder_launch(k, (idx.size, -(-D // _BLOCK), 1), (_BLOCK, 1, 1),
                                    [call.tensor("table"), it, out, np.int32(D)])
        return out
    out = call.host("table")[idx]
    if dev and not call.device:
        return Tensor.from_host(call.backend, np.ascontiguousarray(out))
    return call.out(out)


def _check_ids(idx: np.ndarray, n: int) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise ArgumentError(expected("ids", f"integers in [0, {n}) (the table's rows)", bad))


__all__ = ["rms_norm", "layer_norm", "rope", "softmax", "glu", "silu", "gelu", "get_rows", "add",
           "mul", "ACTIVATIONS"]
