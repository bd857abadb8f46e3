"""The CPU reference backend: numpy (BLAS) and ml_dtypes, correct for every case the API allows.

Float matmul runs through float32 BLAS; exact int8 GEMM through float32 BLAS on K-chunks small
enough that every partial sum is an exact integer; attention in query blocks so memory stays
O(S x block); quantization follows the GGML reference quantizer bit for bit.
"""
from __future__ import annotations

import functools
import math
import os
import platform

import numpy as np

from accel.backend import YES, Backend, DeviceInfo, Support
from accel.dtypes import exact_int8_matmul, to_numpy_dtype
from accel.formats import FORMATS, X_FORMATS, dequantize_blocks, quantize_blocks
from accel.spec import ACTIVATIONS, FP8_BLOCK
from accel.host import host_bytes_free, host_memory_error

# attention query-block rows x keys held at once: bounds scratch memory to ~64 MB of float32
_ATTN_SCRATCH = 1 << 24
# results from this size on are weighed against free host memory first: numpy's allocation
# succeeds under Linux's overcommit, and the out-of-memory killer ends the process as it is filled
_CHECKED_BYTES = 1 << 26


def _arr(t) -> np.ndarray:
    return t.buf[: t.nbytes].view(to_numpy_dtype(t.dtype)).reshape(t.shape)


class CPUBackend(Backend):
    """The reference backend, always available."""
    x_formats = X_FORMATS  # it computes every x_format accel defines
    attention_options = True  # window, softcap and sinks (issue 42)
    formats = tuple(FORMATS)  # and every format

    name = "cpu"
    priority = 10
    alignment = 64
    host_compute = True  # numpy operands go straight to compute()
    check_host_results = False  # the reference: the test suite checks its results

    @classmethod
    @functools.cache
    def devices(cls) -> list[DeviceInfo]:
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
        except OSError:
            pass
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 0
        return [DeviceInfo(model, platform.machine(), f"numpy {np.__version__}", mem,
                           len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)]

    # memory: a buffer is a 1-d uint8 numpy array
    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return host.reshape(-1).view(np.uint8).copy()  # a new buffer: never alias the caller's

    def download(self, buf: np.ndarray, nbytes: int) -> np.ndarray:
        return buf[:nbytes]

    def view(self, buf: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
        return buf[offset: offset + nbytes]

    def export_array(self, tensor) -> np.ndarray:
        return self.host_view(tensor)  # its own memory, strides and all: no copy

    def versions(self) -> dict[str, str]:
        import ml_dtypes

        return {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__}

    def supports(self, spec) -> Support:
        # the reference computes every case the API allows, but quantizing into the codebook
        # formats, which is ggml's own search (ggml-python) and, for some, needs an imatrix
        if spec.op == "quantize" and spec.fmt.family == "codebook":
            from accel.formats.codebook import quantize_declined

            if why := quantize_declined(spec.fmt.name):
                return Support(False, why)
        return YES

    # ops: numpy in, numpy out; ``compute`` is also dispatch's path for numpy operands
    def run(self, spec, out, *inputs) -> None:
        arrays = [None if t is None else _arr(t) for t in inputs]
        result = self.compute(spec, *arrays)
        for o, r in zip(out, result) if isinstance(out, tuple) else ((out, result),):
            _arr(o)[...] = r

    def compute(self, spec, *arrays: np.ndarray | None) -> np.ndarray:
        """Compute ``spec`` on host arrays, returning a new array of ``spec.out_dtype``."""
        try:
            if spec.op == "matmul" and spec.dtype == spec.out_dtype == "float32":
                # the hot path of tiny calls: exactly numpy's own a @ b (its warnings included),
                # weighed against free memory only by numpy's own allocation
                return np.matmul(*arrays)
            if _out_bytes(spec) >= _CHECKED_BYTES and _out_bytes(spec) > host_bytes_free():
                raise MemoryError
            with np.errstate(all="ignore"):  # NaN, inf, float16 overflow: IEEE's answers
                res = getattr(self, "_" + spec.op)(spec, *arrays)
                target = to_numpy_dtype(spec.out_dtype)
                if isinstance(res, tuple):  # a spec of several outputs
                    return tuple(r if r.dtype == target else r.astype(target) for r in res)
                return res if res.dtype == target else res.astype(target)
        except MemoryError:  # the result, or a float32 copy an op makes on the way
            raise host_memory_error("out", _out_bytes(spec), f"the {spec.op} result on cpu:0 "
                                    "and what computing it needs") from None

    def _matmul(self, spec, a, b) -> np.ndarray:
        if spec.dtype == "int8":
            return exact_int8_matmul(np, a, b)
        return np.matmul(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False))

    def _attention(self, spec, q, k, v, mask, sinks=None) -> np.ndarray:
        qf, kf, vf = (t.astype(np.float32, copy=False) for t in (q, k, v))
        mf = None
        if mask is not None:
            mf = np.broadcast_to(mask, (spec.B, spec.Hq, spec.Sq, spec.Sk))
        res = np.empty(spec.out_shape, np.float32)
        g, off = spec.group, spec.Sk - spec.Sq
        rows = max(1, min(spec.Sq, _ATTN_SCRATCH // max(1, spec.Sk * g)))
        keys = np.arange(spec.Sk)
        for b in range(spec.B):
            for hk in range(spec.Hkv):
                heads = slice(hk * g, (hk + 1) * g)
                kt, vv = kf[b, hk].T, vf[b, hk]
                for i0 in range(0, spec.Sq, rows):
                    i1 = min(spec.Sq, i0 + rows)
                    s = np.matmul(qf[b, heads, i0:i1], kt) * np.float32(spec.scale)  # [g, r, Sk]
                    if spec.softcap is not None:
                        c = np.float32(spec.softcap)
                        s = c * np.tanh(s / c)
                    if mf is not None:
                        m = mf[b, heads, i0:i1]
                        if spec.mask_kind == "bool":
                            s = np.where(m, s, np.float32(-np.inf))
                        else:
                            s = s + m.astype(np.float32)
                    if spec.causal:
                        hidden = keys[None, :] > (np.arange(i0, i1) + off)[:, None]
                        if spec.window is not None:
                            hidden |= keys[None, :] <= (np.arange(i0, i1) + off - spec.window)[:, None]
                        s = np.where(hidden[None], np.float32(-np.inf), s)
                    if sinks is not None:
                        sk = sinks.astype(np.float32)[heads][:, None, None]
                        res[b, heads, i0:i1] = _softmax_pv(s, vv, sk)
                    else:
                        res[b, heads, i0:i1] = _softmax_pv(s, vv)
        return res

    def _quantize(self, spec, x) -> np.ndarray:
        return _quantize(x, spec.fmt).reshape(spec.out_shape)

    def _dequantize(self, spec, q) -> np.ndarray:
        raw = q.reshape(-1, spec.fmt.block_bytes)
        return dequantize_blocks(raw, spec.fmt).reshape(spec.out_shape)

    def _qmatmul(self, spec, x, w) -> np.ndarray:
        raw = w.reshape(-1, spec.fmt.block_bytes)
        if spec.x_fmt is not None:
            xq = _quantize(x, spec.x_fmt)
            out = spec.fmt.codec.dot(xq, spec.x_fmt.name, raw, spec.fmt.name, spec.M, spec.N, spec.K)
            return out.reshape(spec.out_shape)
        # weight rows a few at a time: each slab's float32 copy stays in cache and its memory is
        # reused, where one dequantized copy of a large weight (671 MB for Gemma 3's output head)
        # cost more in page faults than in arithmetic (Gemma 3 270M decode: 632 -> 410 ms a token)
        xf = x.astype(np.float32, copy=False).reshape(spec.M, spec.K)
        out = np.empty((spec.M, spec.N), np.float32)
        rows = max(1, _SLAB_FLOATS // spec.K)
        per_row = spec.K // spec.fmt.block
        for r0 in range(0, spec.N, rows):
            r1 = min(spec.N, r0 + rows)
            wf = dequantize_blocks(raw[r0 * per_row:r1 * per_row], spec.fmt).reshape(r1 - r0, spec.K)
            np.matmul(xf, wf.T, out=out[:, r0:r1])
        return out.reshape(spec.out_shape)

    def _scaled_matmul(self, spec, a, b, scale_a, scale_b, bias) -> np.ndarray:
        af, bf = a.astype(np.float32), b.astype(np.float32)  # every FP8 value is a float32
        sa, sb = scale_a.astype(np.float32), scale_b.astype(np.float32)
        if spec.scaling == "block":  # each 128-deep slab of K has its own scales
            out = np.zeros(spec.out_shape, np.float32)
            for i, k0 in enumerate(range(0, spec.K, FP8_BLOCK)):
                slab = np.matmul(af[:, k0:k0 + FP8_BLOCK], bf[k0:k0 + FP8_BLOCK])
                out += slab * sa[:, i:i + 1] * np.repeat(sb[i], FP8_BLOCK)[None, : spec.N]
        else:  # scalars, or [M, 1] and [1, N]
            out = np.matmul(af, bf) * sa.reshape(-1, 1) * sb.reshape(1, -1)
        return out if bias is None else out + bias.astype(np.float32)

    # the decoder-step ops (accel.nn): float32 arithmetic, one rounding to the output dtype
    # (compute's); also the host reference accel.nn falls back to where a backend declines
    def _rms_norm(self, spec, x, weight) -> np.ndarray:
        xf = x.astype(_F)
        ms = np.mean(np.square(xf, dtype=_F), axis=-1, keepdims=True, dtype=_F)
        y = xf / np.sqrt(ms + _F(spec.eps))
        return y * weight.astype(_F) if weight is not None else y

    def _layer_norm(self, spec, x, weight, bias) -> np.ndarray:
        xf = x.astype(_F)
        c = xf - np.mean(xf, axis=-1, keepdims=True, dtype=_F)
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True, dtype=_F) + _F(spec.eps))
        if weight is not None:
            y = y * weight.astype(_F)
        return y + bias.astype(_F) if bias is not None else y

    def _softmax(self, spec, x, mask) -> np.ndarray:
        z = x.astype(_F) * _F(spec.scale)
        if mask is not None:
            z = np.where(mask, z, _F(-np.inf)) if spec.mask_dtype == "bool" else z + mask.astype(_F)
        mx = np.max(z, axis=-1, keepdims=True) if z.shape[-1] else np.zeros(z.shape[:-1] + (1,), _F)
        dead = mx == -np.inf
        e = np.exp(z - np.where(dead, _F(0), mx))
        y = e / np.where(dead, _F(1), np.sum(e, axis=-1, keepdims=True, dtype=_F))
        return np.where(dead, _F(0), y)

    def _glu(self, spec, gate, up) -> np.ndarray:
        g = gate.astype(_F)
        if up is None:  # the gate's halves
            h = spec.out_shape[-1]
            g, u = g[..., :h], g[..., h:]
        else:
            u = up.astype(_F)
        return _activation(spec.activation, g) * u

    def _silu(self, spec, x) -> np.ndarray:
        return _activation(spec.activation, x.astype(_F))

    _gelu = _silu

    def _rope(self, spec, x, cos, sin) -> np.ndarray:
        B, _, S, _ = spec.shape
        r, h = spec.rotary_dim, spec.rotary_dim // 2
        shape = (B, 1, S, h) if spec.per_batch else (S, h)  # broadcast over the heads
        c, s = cos.reshape(shape).astype(_F, copy=False), sin.reshape(shape).astype(_F, copy=False)
        xf = x.astype(_F)
        y = xf.copy()
        x0, x1 = (xf[..., 0:r:2], xf[..., 1:r:2]) if spec.interleaved else (xf[..., :h], xf[..., h:r])
        first, second = (np.s_[..., 0:r:2], np.s_[..., 1:r:2]) if spec.interleaved else \
            (np.s_[..., :h], np.s_[..., h:r])
        y[first] = x0 * c - x1 * s
        y[second] = x0 * s + x1 * c
        return y

    def _add_rms_norm(self, spec, x, residual, weight) -> tuple[np.ndarray, np.ndarray]:
        s = (x.astype(_F) + residual.astype(_F)).astype(to_numpy_dtype(spec.dtype))  # add's rounding
        return s, self._rms_norm(spec, s, weight)

    def _norm_add_rms_norm(self, spec, x, x_weight, residual, weight) -> tuple[np.ndarray, np.ndarray]:
        normed = self._rms_norm(spec, x, x_weight).astype(to_numpy_dtype(spec.dtype))
        return self._add_rms_norm(spec, normed, residual, weight)

    def _rms_norm_rope(self, spec, x, weight, cos, sin) -> np.ndarray:
        # the two ops' values: the norm rounded to x's dtype, then the rotation
        normed = self._rms_norm(spec, x, weight).astype(to_numpy_dtype(spec.dtype))
        return self._rope(spec, normed, cos, sin)

    def _get_rows(self, spec, table, ids) -> np.ndarray:
        if spec.fmt is None:
            return table[ids]
        raw = table.reshape(spec.table_shape[0], -1)[ids.reshape(-1)]  # the rows' blocks
        return dequantize_blocks(raw.reshape(-1, spec.fmt.block_bytes), spec.fmt).reshape(spec.out_shape)

    def _add(self, spec, a, b) -> np.ndarray:
        return a.astype(_F) + b.astype(_F)

    def _mul(self, spec, a, b) -> np.ndarray:
        return a.astype(_F) * b.astype(_F)


_F = np.float32


def _silu(g: np.ndarray) -> np.ndarray:
    return g / (_F(1) + np.exp(-g))


def _gelu_tanh(g: np.ndarray) -> np.ndarray:
    c = _F(math.sqrt(2.0 / math.pi))
    return _F(0.5) * g * (_F(1) + np.tanh(c * (g + _F(0.044715) * g * g * g)))


def _gelu_erf(g: np.ndarray) -> np.ndarray:  # exact erf per element (numpy has none)
    erf = np.vectorize(math.erf, otypes=[np.float64])(g / math.sqrt(2)).astype(_F)
    return (_F(0.5) * g * (_F(1) + erf)).astype(_F)


def _activation(name: str, g: np.ndarray) -> np.ndarray:
    """Activation ``name`` of float32 ``g``, in float32: by accel.spec.ACTIVATIONS' order, as
    kernels/decoder.cl's act_f codes."""
    return (_silu, _gelu_tanh, _gelu_erf)[ACTIVATIONS.index(name)](g)


#: float32 weights dequantized at once by the float-x qmatmul (1 MB, a slab in cache: 2^16 and
#: 2^20 were slower on the Gemma decode, 424 and 731 ms a token)
_SLAB_FLOATS = 1 << 18


def _quantize(x: np.ndarray, fmt) -> np.ndarray:
    """GGUF bytes [n, block_bytes] of x's float32 values in blocks of ``fmt``."""
    return quantize_blocks(x.astype(np.float32, copy=False).reshape(-1, fmt.block), fmt)


def _out_bytes(spec) -> int:
    return math.prod(spec.out_shape) * to_numpy_dtype(spec.out_dtype).itemsize


def _softmax_pv(s: np.ndarray, v: np.ndarray, sink: np.ndarray | None = None) -> np.ndarray:
    """Row softmax of logits s [..., Sk] times v [Sk, Dv]; rows with no finite logit give 0. A
    ``sink`` logit (broadcast to s[..., :1]) joins the denominator with no value."""
    m = s.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    dead = m == -np.inf
    p = np.exp(s - np.where(dead, np.float32(0), m))
    denom = p.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + np.exp(sink - np.where(dead, np.float32(0), m))
    o = np.matmul(p, v) / np.where(dead, np.float32(1), denom)
    return np.where(dead, np.float32(0), o)
