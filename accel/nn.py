"""The decoder-step ops (issue 42): norms, RoPE, softmax, gated activations, embedding rows,
residual add/mul. Each takes ``backend=`` like accel's other ops and gives back the kind of
array it was given: an ``accel.Tensor`` on the same device for ``accel.Tensor`` operands, numpy
for numpy operands (``accel.ops`` sends torch tensors to their operators, ``accel.torch_ops``).

``rms_norm``, ``layer_norm``, ``softmax``, ``glu``, ``silu``, ``gelu``, ``add``, ``mul``, ``rope``,
``rms_norm_rope``, ``get_rows`` (of a float table or a QTensor) and the fused residual forms
(``rms_norm`` with ``residual``: ``add_rms_norm``; ``norm_add_rms_norm``; two outputs each) are
specs (``accel.spec``) run through ``accel.dispatch`` as accel's other ops: the backend's
``supports()`` (for OpenCL, CUDA and HIP the one planner's, backends/plan.py) decides, a plugin
computes them by its op method.

Where they run: the cpu reference computes every case in numpy (float32 arithmetic, one
rounding to the output dtype). ``accel.Tensor`` operands on OpenCL, CUDA and HIP, of any float
dtype (float32, float16, bfloat16; float32 arithmetic there too), run kernels/decoder.cl on the
device for ``rms_norm``, ``layer_norm``, ``rope``, ``glu`` (every activation), ``silu``,
``gelu`` (erf and tanh), ``softmax`` unmasked or with a bool or additive mask (any float dtype)
of x's shape, repeated along x's leading dims (``[Sq, Sk]`` against ``[B, H, Sq, Sk]``) or
broadcast along one run of middle dims (``[B, 1, Sq, Sk]``, ``[B, 1, 1, Sk]``), ``add``/``mul``
with numpy broadcasting (up to four merged runs of dims) and ``get_rows`` of a float table or
a quantized one (the rows' blocks gathered on its device, then the format's own dequantize
plan). Every other case on a backend other than ``cpu`` (a mask broadcast along two runs of
dims, an add of five runs) reads the operands to the host, computes the reference and writes
the result back to that backend: the reference's answer, with a round trip of the data
(decided in one place: ``_Call.run``, on the backend's verdict).
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from accel.backend import Backend
from accel import spec as S
from accel.dispatch import check_host_result, execute, resolve
from accel.dtypes import FLOAT_DTYPES, to_numpy_dtype
from accel.errors import ArgumentError, DTypeError, ShapeError, expected
from accel.registry import get_backend
from accel.spec import ACTIVATIONS
from accel.tensor import Operand, QTensor, Tensor, operand

_F = np.float32

# the specs of the decoder-step ops, cached (typed: True and 1 hash alike, yet only one is an eps)
_norm_spec = functools.lru_cache(maxsize=4096, typed=True)(S.norm_spec)
_softmax_spec = functools.lru_cache(maxsize=4096, typed=True)(S.softmax_spec)
_activation_spec = functools.lru_cache(maxsize=4096)(S.activation_spec)
_binary_spec = functools.lru_cache(maxsize=4096)(S.binary_spec)
_rope_spec = functools.lru_cache(maxsize=4096, typed=True)(S.rope_spec)
_get_rows_spec = functools.lru_cache(maxsize=4096)(S.get_rows_spec)
_residual_norm_spec = functools.lru_cache(maxsize=4096, typed=True)(S.residual_norm_spec)


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

    def tensor(self, arg: str) -> Tensor:
        """Operand ``arg`` as a contiguous tensor on the call's backend."""
        o = self.ops[arg]
        if o.kind == "accel":
            return o.x.contiguous()
        return Tensor.from_host(self.backend, np.ascontiguousarray(o.x))

    def out(self, result: np.ndarray) -> Any:
        result = np.ascontiguousarray(result)
        return Tensor.from_host(self.backend, result) if self.device else result

    def shape_dtype(self, arg: str) -> tuple[tuple[int, ...] | None, str | None]:
        """(shape, dtype) of operand ``arg``, (None, None) where it is absent."""
        o = self.ops.get(arg)
        return (None, None) if o is None else (o.shape, o.dtype)

    def run(self, spec: S.Spec, *args: str) -> Any:
        """Run a decoder-step ``spec`` on the operands named ``args`` (the spec's operand
        order; absent ones are None): the one place that decides where a case runs. A backend
        whose verdict takes it computes it through dispatch (the cpu reference on numpy, a
        kernel runtime's plan of kernels/decoder.cl, a plugin's op method); a case it declines
        (the device kernels take some broadcasts and mask dtypes only; a plugin without the op) is
        the cpu reference's answer on the host, written back to that backend: a round trip."""
        be = self.backend
        if not be.verdict(spec).ok:
            return self.out(get_backend("cpu").compute(spec, *(self.host(a) for a in args)))
        if not self.device and be.host_compute:  # numpy operands: dispatch's host path
            result = be.compute(spec, *(self.host(a) for a in args))
            if be.check_host_results:
                for r in result if isinstance(result, tuple) else (result,):
                    check_host_result(be, spec, r)
            return result
        out = execute(be, spec, *(None if a not in self.ops else self.tensor(a) for a in args))
        if self.device:
            return out
        return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()


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


_eps, _real = S.check_eps, S.check_real


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
        return _residual_norm("add_rms_norm", backend, eps, x=x, residual=residual, weight=weight)
    call = _Call(backend, x=x, weight=weight)
    spec = _norm_spec("rms_norm", *call.shape_dtype("x"), eps, *call.shape_dtype("weight"))
    return call.run(spec, "x", "weight")


def _residual_norm(op: str, backend: str | Backend | None, eps: float, **operands: Any) -> tuple[Any, Any]:
    """``add_rms_norm`` or ``norm_add_rms_norm``: (s, y), one spec of two outputs (one kernel
    launch on a device); on a backend that does not compute it (a plugin without the op), the ops
    it fuses, each where it runs: the same values."""
    call = _Call(backend, **operands)
    spec = _residual_norm_spec(op, *call.shape_dtype("x"), eps, *call.shape_dtype("residual"),
                               *call.shape_dtype("weight"), *call.shape_dtype("x_weight"))
    if call.backend.verdict(spec).ok:
        names = ("x", "residual", "weight") if op == "add_rms_norm" else ("x", "x_weight", "residual", "weight")
        return call.run(spec, *names)
    x = operands["x"] if op == "add_rms_norm" else rms_norm(operands["x"], operands["x_weight"],
                                                              eps=spec.eps, backend=backend)
    s = add(x, operands["residual"], backend=backend)
    return s, rms_norm(s, operands["weight"], eps=spec.eps, backend=backend)


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
    return _residual_norm("norm_add_rms_norm", backend, eps, x=x, x_weight=x_weight, residual=residual,
                          weight=weight)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, *, eps: float = 1e-5,
               backend: str | Backend | None = None) -> Any:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (population
    variance), in float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> accel.layer_norm(np.array([1.0, 3.0], np.float32), eps=0.0)
    array([-1.,  1.], dtype=float32)
    """
    call = _Call(backend, x=x, weight=weight, bias=bias)
    spec = _norm_spec("layer_norm", *call.shape_dtype("x"), eps, *call.shape_dtype("weight"),
                      *call.shape_dtype("bias"))
    return call.run(spec, "x", "weight", "bias")


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
    per_batch = pos.ndim == 2
    if norm is not None:
        e = _eps(norm[1])
        spec = _rope_spec("rms_norm_rope", shape, dt, r, bool(interleaved), per_batch, e) \
            if _vector(call, "weight", D, "x") else None
        if spec is None or not call.backend.verdict(spec).ok:
            # no weight, or a case the fused kernel does not take (D past what it holds in local
            # memory): the two ops, each where it runs; the same values
            normed = rms_norm(x, norm[0], eps=e, backend=backend)
            return _rope(normed, positions, base, rotary_dim, interleaved, freq_scale, freq_factors, backend)
        names: tuple[str, ...] = ("x", "weight", "cos", "sin")
    else:
        spec = _rope_spec("rope", shape, dt, r, bool(interleaved), per_batch)
        names = ("x", "cos", "sin")
    # the angles' cos and sin tables [S or B * S, r / 2]: operands, uploaded once per positions
    tables = _device_tables(call.backend, pos, b, r, fs, ff) if call.device else \
        [t.reshape(-1, r // 2) for t in _angles(pos, b, r, fs, ff)]
    for arg, t in zip(("cos", "sin"), tables):  # our own arrays: no need to check them as operands
        call.ops[arg] = Operand(arg, t, "accel" if call.device else "numpy", t.shape, "float32")
    return call.run(spec, *names)


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
    spec = _softmax_spec(*call.shape_dtype("x"), scale, *call.shape_dtype("mask"))
    return call.run(spec, "x", "mask")


# -- activations -------------------------------------------------------------------------------------
def silu(x: Any, *, backend: str | Backend | None = None) -> Any:
    """``x * sigmoid(x)`` in float32, output in x's dtype.

    >>> import accel, numpy as np
    >>> accel.silu(np.array([0.0, 1.0], np.float32))
    array([0.       , 0.7310586], dtype=float32)
    """
    call = _Call(backend, x=x)
    return call.run(_activation_spec("silu", *call.shape_dtype("x"), "silu"), "x")


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
    act = "gelu" if approximate == "none" else "gelu_tanh"
    return call.run(_activation_spec("gelu", *call.shape_dtype("x"), act), "x")


def glu(gate: Any, up: Any = None, *, activation: str = "silu",
        backend: str | Backend | None = None) -> Any:
    """``act(gate) * up`` (SwiGLU with "silu", GeGLU with "gelu_tanh" or "gelu"); with
    ``up=None`` the last axis of ``gate`` splits in halves, the first half the gate.

    >>> import accel, numpy as np
    >>> accel.glu(np.array([[1.0, 2.0]], np.float32), activation="silu")  # silu(1) * 2
    array([[1.4621172]], dtype=float32)
    """
    if activation not in ACTIVATIONS:  # before the operands: a bad name is the first error
        raise ArgumentError(expected("activation", f"one of {ACTIVATIONS}", repr(activation)))
    call = _Call(backend, gate=gate, up=up)
    spec = _activation_spec("glu", *call.shape_dtype("gate"), activation, *call.shape_dtype("up"))
    return call.run(spec, "gate", "up")


# -- elementwise -----------------------------------------------------------------------------------------
def _binary(name: str, a: Any, b: Any, backend: str | Backend | None) -> Any:
    call = _Call(backend, a=a, b=b)
    return call.run(_binary_spec(name, *call.shape_dtype("a"), *call.shape_dtype("b")), "a", "b")


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
    idx, ib, dev = _integers("ids", ids, None)
    quantized = isinstance(table, QTensor)  # its blocks are the operand, its format the dtype
    call = _Call(ib if backend is None and ib is not None else backend, table=table.data if quantized else table)
    if quantized:
        spec = _get_rows_spec(tuple(table.shape), table.fmt, idx.shape)
    else:
        _float(call, "table")
        spec = _get_rows_spec(call.shape("table"), call.dtype("table"), idx.shape)
    if ib is not None and ib is not call.backend:
        raise ArgumentError(expected("ids", f"on {call.backend.device_id} like table",
                                     f"a tensor on {ib.device_id}"))
    _check_ids(idx, spec.table_shape[0])
    # the ids as the kernel reads them: an int32 tensor where it is one, else int32 of the values
    ids32 = ids if isinstance(ids, Tensor) and ids.dtype == "int32" else idx.astype(np.int32)
    call.ops["ids"] = Operand("ids", ids32, "accel" if ids32 is ids else "numpy", idx.shape, "int32")
    # the rows come back as a tensor for a tensor of ids, a float table that is one, or a
    # QTensor whose kind is (quantize's input was a tensor)
    call.device = dev or (table.kind == "accel" if quantized else call.device)
    return call.run(spec, "table", "ids")


def _check_ids(idx: np.ndarray, n: int) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise ArgumentError(expected("ids", f"integers in [0, {n}) (the table's rows)", bad))


__all__ = ["rms_norm", "layer_norm", "rope", "softmax", "glu", "silu", "gelu", "get_rows", "add",
           "mul", "ACTIVATIONS"]
