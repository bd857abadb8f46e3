"""A GGUF decoder (Gemma 3, the llama family) run through accel's public ops on one backend.

Weights stay in their GGUF format (``QTensor.from_gguf``; float tensors as float32 Tensors) on the
chosen backend, activations are ``accel.Tensor`` s there, and each layer is the public ops only:
``rms_norm``, ``qmatmul``/``matmul``, ``rope``, ``attention`` (causal, with the layer's sliding
window), ``glu``, ``add``, and ``Tensor.__setitem__`` for the KV cache. Only the logits (and, on
request, each layer's hidden state) come back to the host.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import accel
from accel.backend import Backend
from accel.errors import ArgumentError, OutOfBoundsError, ShapeError, expected
from accel.formats import FORMATS
from accel.host import host_bytes_free
from accel.models.config import ModelConfig, read_config
from accel.models.gguf_file import GGUFSource, open_gguf
from accel.nn import norm_add_rms_norm, rms_norm_rope
from accel.tensor import QTensor, Tensor

_FLOAT_TYPES = ("F32", "F16", "BF16")


class Linear:
    """``y = x @ W.T`` for a GGUF weight ``W [N, K]``: ``accel.qmatmul`` on its own quantized
    blocks, or ``accel.matmul`` on a float32 copy of ``W.T`` for a float tensor."""

    def __init__(self, tensor: Any, backend: Backend, where: str):
        self.name = tensor.name
        kind = tensor.tensor_type.name
        ne = [int(d) for d in tensor.shape]
        self.shape = (int(np.prod(ne[1:])), ne[0])  # [N, K]
        self.q: QTensor | None = None
        self.wt: Tensor | None = None
        if kind.lower() in FORMATS:
            self.q = QTensor.from_gguf(tensor, backend=backend)
        elif kind in _FLOAT_TYPES:
            w = _float_data(tensor).reshape(self.shape)
            self.wt = accel.asarray(np.ascontiguousarray(w.T), backend=backend)
        else:
            raise ArgumentError(expected(f"tensor {self.name!r} of {where}",
                                         f"a type accel computes ({', '.join(_FLOAT_TYPES)} or "
                                         f"{', '.join(f.upper() for f in FORMATS)})", kind))

    @classmethod
    def stacked(cls, tensors: Sequence[Any], backend: Backend, where: str) -> Linear | None:
        """One Linear whose output rows are those of ``tensors`` in order (one weight of their
        rows stacked: one launch where there were several), or None unless they share a type
        and K. A GGUF block never spans two rows, so the stacked blocks are the tensors' bytes
        one after another."""
        kinds = {t.tensor_type.name for t in tensors}
        ks = {int(t.shape[0]) for t in tensors}
        if len(kinds) != 1 or len(ks) != 1 or not ({k.lower() for k in kinds} <= set(FORMATS)):
            return None
        lin = cls.__new__(cls)
        lin.name = "+".join(t.name for t in tensors)
        lin.shape = (sum(int(np.prod([int(d) for d in t.shape[1:]])) for t in tensors), ks.pop())
        raw = np.concatenate([np.asarray(t.data).reshape(-1).view(np.uint8) for t in tensors])
        lin.q = QTensor.from_raw(raw, kinds.pop().lower(), lin.shape, backend=backend)
        lin.wt = None
        return lin

    def __call__(self, x: Tensor) -> Tensor:
        if self.q is not None:
            return accel.qmatmul(x, self.q)
        return accel.matmul(x, self.wt)

    def dequantized(self) -> None:
        """Keep ``W.T`` dequantized to float32 instead of the blocks: ``qmatmul``'s definition
        (x @ dequantize(W).T), with the dequantizing done once."""
        if self.q is not None:
            w = accel.dequantize(self.q)
            w = w.numpy() if isinstance(w, Tensor) else np.asarray(w)
            self.wt = accel.asarray(np.ascontiguousarray(w.T), backend=self.q.backend)
            self.q = None


def _float_data(tensor: Any) -> np.ndarray:
    data = np.asarray(tensor.data)
    if tensor.tensor_type.name == "BF16":  # gguf-py gives BF16 as its raw uint16 words
        data = (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(data, dtype=np.float32).reshape(-1)


@dataclass
class Layer:
    """One block's weights."""

    attn_norm: Tensor
    wq: Linear
    wk: Linear
    wv: Linear
    wo: Linear
    ffn_norm: Tensor
    #: the gate's and up's rows stacked ([2 ffn, d_model]: one GEMV, halves for glu) where
    #: they share a quantization type, else w_gate and w_up apart
    w_gate_up: Linear | None
    w_gate: Linear | None
    w_up: Linear | None
    w_down: Linear
    bq: Tensor | None = None
    bk: Tensor | None = None
    bv: Tensor | None = None
    q_norm: Tensor | None = None
    k_norm: Tensor | None = None
    post_attn_norm: Tensor | None = None
    post_ffw_norm: Tensor | None = None


class KVCache:
    """Keys and values of the tokens seen so far, one preallocated ``[1, Hkv, max_tokens, D]``
    Tensor pair per layer on the model's backend (unused slots zero). ``pos`` is the number of
    tokens already in it; ``reset()`` empties it.

    >>> import accel.models as m
    >>> cache = m.load(m.tiny_gguf_for_doc()).new_cache(8)
    >>> cache.max_tokens, cache.pos
    (8, 0)
    """

    def __init__(self, model: "Model", max_tokens: int):
        c = model.config
        self.model, self.max_tokens, self.pos = model, max_tokens, 0
        zeros = np.zeros((1, c.n_kv_heads, max_tokens, c.head_dim), np.float32)
        self.k = [accel.asarray(zeros, backend=model.backend) for _ in range(c.n_layers)]
        self.v = [accel.asarray(zeros, backend=model.backend) for _ in range(c.n_layers)]

    def reset(self) -> None:
        """Forget every token (the buffers are kept; stale slots are never read)."""
        self.pos = 0


def _tensor_shape(t: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in reversed([int(x) for x in t.shape]))


class Model:
    """A decoder loaded by :func:`accel.models.load`."""

    def __init__(self, source: GGUFSource, backend: Backend):
        self.source, self.backend = source, backend
        self.config: ModelConfig = read_config(source)
        c = self.config
        self._tensors = source.tensors
        self.embedding = self._table("token_embd.weight", (c.vocab, c.d_model))
        self.output_norm = self._vector("output_norm.weight", c.d_model)
        if "output.weight" in self._tensors:
            self.output = self._linear("output.weight", (c.vocab, c.d_model))
        else:  # tied to the embedding (Gemma; small llamas)
            self.output = self._linear("token_embd.weight", (c.vocab, c.d_model))
        self.rope_freqs = (self._vector("rope_freqs.weight", c.rope_dim // 2)
                           if "rope_freqs.weight" in self._tensors else None)
        self.layers = [self._layer(i) for i in range(c.n_layers)]
        if backend.name == "cpu":
            self._dequantize_where_it_fits()
        self._embed_scale = (accel.asarray(np.full((1,), c.embed_scale, np.float32), backend=backend)
                             if c.embed_scale != 1.0 else None)

    # -- loading ---------------------------------------------------------------------------
    def _linears(self) -> list[Linear]:
        parts = ("wq", "wk", "wv", "wo", "w_gate_up", "w_gate", "w_up", "w_down")
        return [self.output] + [lin for L in self.layers for n in parts
                                if (lin := getattr(L, n)) is not None]

    def _dequantize_where_it_fits(self) -> None:
        """On the cpu reference, quantized projections dequantized once at load where their
        float32 copies take at most a quarter of the free host memory: its qmatmul otherwise
        dequantizes each weight at every call (Gemma 3 270M: 1.1 GB of float32 a token)."""
        quantized = [lin for lin in self._linears() if lin.q is not None]
        need = sum(4 * lin.shape[0] * lin.shape[1] for lin in quantized)
        if need <= host_bytes_free() // 4:
            for lin in quantized:
                lin.dequantized()

    def _get(self, name: str, shape: tuple[int, ...]) -> Any:
        t = self._tensors.get(name)
        if t is None:
            raise ArgumentError(expected(f"tensor {name!r} of {self.source.name}",
                                         f"present ({self.config.arch} needs it)", "no such tensor"))
        got = _tensor_shape(t)
        if got != shape:
            raise ShapeError(expected(f"tensor {name!r} of {self.source.name}",
                                      f"shape {shape} (from the metadata)", got))
        return t

    def _vector(self, name: str, n: int) -> Tensor:
        t = self._get(name, (n,))
        if t.tensor_type.name not in _FLOAT_TYPES:
            raise ArgumentError(expected(f"tensor {name!r} of {self.source.name}",
                                         "a float tensor (F32, F16 or BF16)", t.tensor_type.name))
        return accel.asarray(_float_data(t), backend=self.backend)

    def _linear(self, name: str, shape: tuple[int, int]) -> Linear:
        return Linear(self._get(name, shape), self.backend, self.source.name)

    def _table(self, name: str, shape: tuple[int, int]) -> QTensor | Tensor:
        lin = self._linear(name, shape)
        if lin.q is not None:
            return lin.q
        return accel.asarray(_float_data(self._tensors[name]).reshape(shape), backend=self.backend)

    def _layer(self, i: int) -> Layer:
        c, p = self.config, f"blk.{i}."
        opt = lambda n, k: self._vector(p + n, k) if p + n in self._tensors else None  # noqa: E731
        layer = Layer(
            attn_norm=self._vector(p + "attn_norm.weight", c.d_model),
            wq=self._linear(p + "attn_q.weight", (c.q_dim, c.d_model)),
            wk=self._linear(p + "attn_k.weight", (c.n_kv_heads * c.head_dim, c.d_model)),
            wv=self._linear(p + "attn_v.weight", (c.n_kv_heads * c.head_dim, c.d_model)),
            wo=self._linear(p + "attn_output.weight", (c.d_model, c.q_dim)),
            ffn_norm=self._vector(p + "ffn_norm.weight", c.d_model),
            w_gate_up=Linear.stacked([self._get(p + n, (c.ffn, c.d_model)) for n in
                                      ("ffn_gate.weight", "ffn_up.weight")], self.backend,
                                     self.source.name),
            w_gate=None, w_up=None,
            w_down=self._linear(p + "ffn_down.weight", (c.d_model, c.ffn)),
            bq=opt("attn_q.bias", c.q_dim), bk=opt("attn_k.bias", c.n_kv_heads * c.head_dim),
            bv=opt("attn_v.bias", c.n_kv_heads * c.head_dim))
        if layer.w_gate_up is None:
            layer.w_gate = self._linear(p + "ffn_gate.weight", (c.ffn, c.d_model))
            layer.w_up = self._linear(p + "ffn_up.weight", (c.ffn, c.d_model))
        if c.qk_norm:
            layer.q_norm = self._vector(p + "attn_q_norm.weight", c.head_dim)
            layer.k_norm = self._vector(p + "attn_k_norm.weight", c.head_dim)
        if c.post_norms:
            layer.post_attn_norm = self._vector(p + "post_attention_norm.weight", c.d_model)
            layer.post_ffw_norm = self._vector(p + "post_ffw_norm.weight", c.d_model)
        return layer

    # -- running ---------------------------------------------------------------------------
    def new_cache(self, max_tokens: int) -> KVCache:
        """An empty KV cache for up to ``max_tokens`` tokens (at most the context length)."""
        c = self.config
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) \
                or not 1 <= max_tokens <= c.context_length:
            raise ArgumentError(expected("max_tokens", f"an integer in [1, {c.context_length}] "
                                         "(the context length)", repr(max_tokens)))
        return KVCache(self, int(max_tokens))

    def _ids(self, tokens: Any) -> np.ndarray:
        if isinstance(tokens, Tensor):
            tokens = tokens.numpy()
        try:
            arr = np.asarray(tokens)
        except (TypeError, ValueError) as e:
            raise ArgumentError(expected("tokens", "a 1-d sequence of token ids", e)) from None
        if arr.ndim != 1 or arr.size == 0:
            raise ShapeError(expected("tokens", "a non-empty 1-d sequence of token ids",
                                      f"shape {arr.shape}"))
        if arr.dtype.kind not in "iu":
            raise ArgumentError(expected("tokens", "integer token ids", f"dtype {arr.dtype}"))
        if arr.min() < 0 or arr.max() >= self.config.vocab:
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise OutOfBoundsError(expected("tokens", f"ids in [0, {self.config.vocab}) (the "
                                            "vocabulary)", bad))
        return arr.astype(np.int32)

    def _run(self, tokens: Any, cache: KVCache | None, *, last_only: bool = False,
             hidden: list[np.ndarray] | None = None) -> np.ndarray:
        c, be = self.config, self.backend
        ids = self._ids(tokens)
        n = len(ids)
        if cache is None:
            if n > c.context_length:
                raise ArgumentError(expected("tokens", f"at most {c.context_length} tokens (the "
                                             "context length)", n))
            cache = KVCache(self, n)
        elif not isinstance(cache, KVCache) or cache.model is not self:
            raise ArgumentError(expected("cache", "a KVCache of this model (model.new_cache(n))",
                                         type(cache).__name__))
        p0 = cache.pos
        if p0 + n > cache.max_tokens:
            raise ArgumentError(expected("cache", f"room for {n} more tokens after {p0}",
                                         f"a cache of {cache.max_tokens} tokens"))
        pos = np.arange(p0, p0 + n, dtype=np.int32)
        x = accel.get_rows(self.embedding, accel.asarray(ids, backend=be))
        if not isinstance(x, Tensor):
            x = accel.asarray(x, backend=be)
        if self._embed_scale is not None:
            x = accel.mul(x, self._embed_scale)
        if hidden is not None:
            hidden.append(x.numpy().copy())
        h = accel.rms_norm(x, self.layers[0].attn_norm, eps=c.eps)
        norms = [layer.attn_norm for layer in self.layers[1:]] + [self.output_norm]
        for i, layer in enumerate(self.layers):
            x, f = self._block(i, layer, x, h, pos, cache)
            # the block's last residual add, fused with the next norm (the next block's, or
            # the output's) and the branch's own post-norm where it has one: one launch
            x, h = self._residual(f, layer.post_ffw_norm, x, norms[i])
            if hidden is not None:
                hidden.append(x.numpy().copy())
        cache.pos = p0 + n
        if last_only:
            h = h[n - 1:]
        return np.asarray(self.output(h).numpy(), dtype=np.float32)

    def _block(self, i: int, L: Layer, x: Tensor, h: Tensor, pos: np.ndarray,
               cache: KVCache) -> tuple[Tensor, Tensor]:
        """Block i on the residual stream x and its normed h: the stream after the attention's
        residual add, and the feed-forward output (not yet post-normed) still to be added to it."""
        c = self.config
        n, H, Hkv, D = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        q, k, v = L.wq(h), L.wk(h), L.wv(h)
        if L.bq is not None:
            q = accel.add(q, L.bq)
        if L.bk is not None:
            k = accel.add(k, L.bk)
        if L.bv is not None:
            v = accel.add(v, L.bv)
        rope = dict(base=c.layer_rope_base[i], rotary_dim=c.rope_dim, interleaved=c.rope_interleaved,
                    freq_scale=c.layer_rope_scale[i], freq_factors=self.rope_freqs)
        q = q.reshape(1, n, H, D).transpose(0, 2, 1, 3)  # [1, H, n, D]
        k = k.reshape(1, n, Hkv, D).transpose(0, 2, 1, 3)
        if L.q_norm is not None:  # QK-norm: each head normed, then rotated (one launch each)
            q = rms_norm_rope(q, L.q_norm, pos, eps=c.eps, **rope)
            k = rms_norm_rope(k, L.k_norm, pos, eps=c.eps, **rope)
        else:
            q, k = accel.rope(q, pos, **rope), accel.rope(k, pos, **rope)
        v = v.reshape(1, n, Hkv, D).transpose(0, 2, 1, 3)
        p0 = int(pos[0])
        cache.k[i][:, :, p0:p0 + n] = k
        cache.v[i][:, :, p0:p0 + n] = v.contiguous()
        keys, values = cache.k[i][:, :, :p0 + n], cache.v[i][:, :, :p0 + n]
        o = accel.attention(q, keys, values, causal=True, scale=c.attention_scale,
                            window=c.layer_window[i])
        o = L.wo(o.transpose(0, 2, 1, 3).reshape(n, H * D))
        x, h = self._residual(o, L.post_attn_norm, x, L.ffn_norm)
        if L.w_gate_up is not None:  # [n, 2 ffn]: glu takes the first half as the gate
            g = accel.glu(L.w_gate_up(h), activation=c.activation)
        else:
            g = accel.glu(L.w_gate(h), L.w_up(h), activation=c.activation)
        return x, L.w_down(g)

    def _residual(self, branch: Tensor, branch_norm: Tensor | None, x: Tensor,
                  norm: Tensor) -> tuple[Tensor, Tensor]:
        """The residual stream after adding a block's branch (normed first by ``branch_norm``
        where the architecture has one, Gemma's post-norms), and that stream normed by
        ``norm``: one launch on a device."""
        eps = self.config.eps
        if branch_norm is None:
            return accel.rms_norm(branch, norm, eps=eps, residual=x)
        return norm_add_rms_norm(branch, branch_norm, x, norm, eps=eps)

    def forward(self, tokens: Any, cache: KVCache | None = None, *,
                last_only: bool = False) -> np.ndarray:
        """float32 logits ``[n_tokens, vocab]`` of ``tokens`` (1-d ids) after what ``cache``
        holds (None: a fresh sequence); the cache advances by ``len(tokens)``. ``last_only``:
        the last token's logits alone (``[1, vocab]``), all that greedy generation reads (the
        output head then runs on one row).

        >>> import accel.models as m
        >>> model = m.load(m.tiny_gguf_for_doc(), backend="cpu")
        >>> cache = model.new_cache(4)
        >>> a = model.forward([1, 2, 3], cache)
        >>> b = model.forward([4], cache)              # one decode step
        >>> full = model.forward([1, 2, 3, 4])
        >>> a.shape, bool(abs(full[3] - b[0]).max() < 1e-4)
        ((3, 32), True)
        """
        return self._run(tokens, cache, last_only=bool(last_only))

    def forward_hidden(self, tokens: Any, cache: KVCache | None = None
                       ) -> tuple[np.ndarray, list[np.ndarray]]:
        """As :meth:`forward`, with the hidden states on the host: the scaled embedding, then
        the residual stream after each block (``n_layers + 1`` arrays ``[n_tokens, d_model]``)."""
        hidden: list[np.ndarray] = []
        return self._run(tokens, cache, hidden=hidden), hidden

    def generate(self, tokens: Any, max_new_tokens: int, *, stop: Iterable[int] = (),
                 on_token: Callable[[int], None] | None = None) -> list[int]:
        """Greedy continuation of ``tokens``: up to ``max_new_tokens`` new ids (fewer when one
        of ``stop`` comes, which is kept), each the argmax of the last logits.

        >>> import accel.models as m
        >>> model = m.load(m.tiny_gguf_for_doc(), backend="cpu")
        >>> out = model.generate([1, 2], 3)
        >>> len(out), all(0 <= t < 32 for t in out)
        (3, True)
        """
        ids = self._ids(tokens)
        try:
            n_new = operator.index(max_new_tokens)
        except TypeError:
            n_new = -1
        if n_new < 0 or isinstance(max_new_tokens, bool):
            raise ArgumentError(expected("max_new_tokens", "a non-negative integer", repr(max_new_tokens)))
        total = len(ids) + n_new
        if total > self.config.context_length:
            raise ArgumentError(expected("max_new_tokens", f"at most {self.config.context_length - len(ids)} "
                                         f"(context length {self.config.context_length} less "
                                         f"{len(ids)} prompt tokens)", n_new))
        stops = {int(s) for s in stop}
        out: list[int] = []
        if n_new == 0:
            return out
        cache = self.new_cache(total)
        logits = self._run(ids, cache, last_only=True)
        while True:
            t = int(np.argmax(logits[-1]))
            out.append(t)
            if on_token is not None:
                on_token(t)
            if len(out) == n_new or t in stops:
                return out
            logits = self._run(np.array([t], np.int32), cache, last_only=True)


def load(path_or_reader: Any, *, backend: str | Backend | None = None) -> Model:
    """Load a GGUF decoder (``general.architecture`` gemma3, llama, mistral, qwen2 or qwen3)
    onto ``backend`` (default: accel's current selection).

    >>> import accel.models as m
    >>> model = m.load(m.tiny_gguf_for_doc(), backend="cpu")
    >>> model.config.arch, model.config.n_layers, model.config.vocab
    ('llama', 2, 32)
    """
    be = accel.get_backend(backend)
    return Model(open_gguf(path_or_reader), be)


def tiny_gguf_for_doc(path: str | None = None) -> str:
    """Write a 2-layer llama GGUF with random weights (vocab 32, d_model 64, Q8_0 projections)
    for examples; returns its path."""
    import os
    import tempfile

    import gguf

    path = path or os.path.join(tempfile.mkdtemp(prefix="accel-model-"), "tiny-llama.gguf")
    rng = np.random.default_rng(0)
    d, ffn, vocab, H, Hkv = 64, 128, 32, 4, 2
    D = d // H
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(2)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ffn)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_context_length(64)
    w.add_rope_freq_base(10000.0)

    def q8(name: str, shape: Sequence[int]) -> None:
        x = (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    w.add_tensor("token_embd.weight", rng.standard_normal((vocab, d)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(2):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
        q8(p + "attn_q.weight", (H * D, d))
        q8(p + "attn_k.weight", (Hkv * D, d))
        q8(p + "attn_v.weight", (Hkv * D, d))
        q8(p + "attn_output.weight", (d, H * D))
        q8(p + "ffn_gate.weight", (ffn, d))
        q8(p + "ffn_up.weight", (ffn, d))
        q8(p + "ffn_down.weight", (d, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
