"""The float64 reference forward of a GGUF decoder, and llama-perplexity's measures.

The oracle of model conformance: plain numpy in float64, every weight dequantized by gguf-py
(``gguf.quants.dequantize``, llama.cpp's own Python package), the architecture read from the
file's metadata here, apart from accel (no accel op, backend or ``accel.models`` code runs in
it). It follows llama.cpp's graphs (src/models/gemma3.cpp, llama.cpp, qwen2.cpp, qwen3.cpp):

- embedding rows (Gemma: times sqrt(d_model)); per block: RMSNorm -> Q, K, V (+ biases where the
  file has them) -> per-head RMSNorm of Q and K (gemma3, qwen3) -> RoPE (GPT-J pairs for
  llama/mistral, NEOX halves for gemma3/qwen2/qwen3) -> causal attention over the layer's
  window (Gemma 3: 512 on five layers of six, RoPE base 10,000 there) -> output projection
  (-> RMSNorm, Gemma) -> residual; RMSNorm -> act(gate) * up -> down (-> RMSNorm, Gemma) ->
  residual; final RMSNorm, then the output head (tied to the embedding when the file has no
  ``output.weight``).

>>> import numpy as np, accel.models
>>> ref = ModelReference(accel.models.tiny_gguf_for_doc())
>>> logits, hidden = ref.forward([1, 2, 3])
>>> logits.shape, logits.dtype, len(hidden)
((3, 32), dtype('float64'), 3)
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from accel.errors import ArgumentError, expected

_F64 = np.float64
#: architecture -> (NEOX halves?, activation, QK-norm?, post-norms?, embeddings times sqrt(d)?)
_ARCH = {"gemma3": (True, "gelu_tanh", True, True, True), "llama": (False, "silu", False, False, False),
         "mistral": (False, "silu", False, False, False), "qwen2": (True, "silu", False, False, False),
         "qwen3": (True, "silu", True, False, False)}
_CHUNK = 16384  # output-head rows dequantized at a time (the Gemma head is 262,144 x 640)


def _gguf() -> Any:
    import gguf

    return gguf


class ModelReference:
    """A GGUF decoder's float64 forward (whole sequences, no cache)."""

    def __init__(self, path_or_reader: Any):
        gguf = _gguf()
        self.reader = (path_or_reader if isinstance(path_or_reader, gguf.GGUFReader)
                       else gguf.GGUFReader(str(path_or_reader)))
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self._meta("general.architecture")
        if self.arch not in _ARCH:
            raise ArgumentError(expected("general.architecture", f"one of {sorted(_ARCH)}",
                                         repr(self.arch)))
        self.neox, self.act, self.qk_norm, self.post_norms, scale_embd = _ARCH[self.arch]
        a = self.arch
        self.n_layers = self._meta(f"{a}.block_count")
        self.d = self._meta(f"{a}.embedding_length")
        self.n_heads = self._meta(f"{a}.attention.head_count")
        self.n_kv = self._meta(f"{a}.attention.head_count_kv", self.n_heads)
        self.head_dim = self._meta(f"{a}.attention.key_length", self.d // self.n_heads)
        self.rope_dim = self._meta(f"{a}.rope.dimension_count", self.head_dim)
        self.eps = float(self._meta(f"{a}.attention.layer_norm_rms_epsilon"))
        base = float(self._meta(f"{a}.rope.freq_base", 10000.0))
        factor = (float(self._meta(f"{a}.rope.scaling.factor", 1.0))
                  if self._meta(f"{a}.rope.scaling.type", "none") == "linear" else 1.0)
        window = self._meta(f"{a}.attention.sliding_window", None)
        self.embed_scale = math.sqrt(self.d) if scale_embd else 1.0
        self.scale = 1.0 / math.sqrt(self.head_dim)
        if a == "gemma3":
            swa_base = float(self._meta(f"{a}.rope.freq_base_swa", 10000.0))
            local = [(i + 1) % 6 != 0 for i in range(self.n_layers)]  # llama.cpp's pattern of 6
            pattern = self._meta(f"{a}.attention.sliding_window_pattern", None)
            if isinstance(pattern, list):
                local = [bool(p) for p in pattern]
            elif isinstance(pattern, int):
                local = [(i + 1) % pattern != 0 for i in range(self.n_layers)]
            self.layers = [(window, swa_base, 1.0) if loc else (None, base, 1.0 / factor)
                           for loc in local]
            if self.n_layers == 62:  # 27B
                self.scale = 1.0 / math.sqrt(self.d // self.n_heads)
        else:
            self.layers = [(window, base, 1.0 / factor)] * self.n_layers
        ff = self.tensors.get("rope_freqs.weight")
        self.freq_factors = None if ff is None else self.weight("rope_freqs.weight")

    def _meta(self, key: str, default: Any = ...) -> Any:
        f = self.reader.fields.get(key)
        if f is None:
            if default is ...:
                raise ArgumentError(expected(f"metadata key {key!r}", "present", "no such key"))
            return default
        v = f.contents()
        return v[0] if isinstance(v, list) and v and key.endswith(("head_count", "head_count_kv")) else v

    def weight(self, name: str, rows: Any = None) -> np.ndarray:
        """Tensor ``name`` dequantized by gguf-py, as float64 in accel's ``[..., K]`` order
        (only ``rows`` of a 2-d tensor when given)."""
        gguf = _gguf()
        t = self.tensors[name]
        data = t.data if rows is None else t.data[rows]
        if t.tensor_type.name == "BF16":
            out = (np.asarray(data).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            out = gguf.quants.dequantize(np.asarray(data), t.tensor_type)
        return np.asarray(out, dtype=_F64)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.weight(name).T

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * self.weight(name)

    def _rope(self, x: np.ndarray, pos: np.ndarray, base: float, fscale: float) -> np.ndarray:
        """x [n, H, D] at positions [n]."""
        r = self.rope_dim
        inv = base ** (-np.arange(0, r, 2, dtype=_F64) / r)
        if self.freq_factors is not None:
            inv = inv / self.freq_factors
        theta = (pos.astype(_F64) * fscale)[:, None] * inv  # [n, r/2]
        cos, sin = np.cos(theta)[:, None], np.sin(theta)[:, None]
        y = x.copy()
        if self.neox:
            a, b = x[..., : r // 2], x[..., r // 2: r]
            y[..., : r // 2], y[..., r // 2: r] = a * cos - b * sin, a * sin + b * cos
        else:
            a, b = x[..., 0:r:2], x[..., 1:r:2]
            y[..., 0:r:2], y[..., 1:r:2] = a * cos - b * sin, a * sin + b * cos
        return y

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int | None) -> np.ndarray:
        """q [n, H, D], k/v [n, Hkv, D], same positions: causal, keys i - window < j <= i."""
        n = q.shape[0]
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        keep = j <= i
        if window is not None:
            keep &= i - j < window
        group = self.n_heads // self.n_kv
        out = np.empty_like(q)
        for h in range(self.n_heads):
            s = (q[:, h] @ k[:, h // group].T) * self.scale
            s = np.where(keep, s, -np.inf)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            out[:, h] = p @ v[:, h // group]
        return out

    def _act(self, g: np.ndarray) -> np.ndarray:
        if self.act == "silu":
            return g / (1.0 + np.exp(-g))
        return 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))

    def forward(self, tokens: Sequence[int]) -> tuple[np.ndarray, list[np.ndarray]]:
        """float64 logits ``[n, vocab]`` and the hidden states (the scaled embedding, then the
        residual stream after each block) of one sequence starting at position 0."""
        ids = np.asarray(tokens, dtype=np.int64)
        n, H, Hkv, D = len(ids), self.n_heads, self.n_kv, self.head_dim
        pos = np.arange(n)
        x = self.weight("token_embd.weight", ids) * self.embed_scale
        hidden = [x.copy()]
        for il, (window, base, fscale) in enumerate(self.layers):
            p = f"blk.{il}."
            h = self._norm(x, p + "attn_norm.weight")
            qkv = []
            for w in "qkv":
                y = self._linear(h, p + f"attn_{w}.weight")
                if p + f"attn_{w}.bias" in self.tensors:
                    y = y + self.weight(p + f"attn_{w}.bias")
                qkv.append(y)
            q, k, v = qkv
            q, k, v = q.reshape(n, H, D), k.reshape(n, Hkv, D), v.reshape(n, Hkv, D)
            if self.qk_norm:
                q = self._norm(q, p + "attn_q_norm.weight")
                k = self._norm(k, p + "attn_k_norm.weight")
            q, k = self._rope(q, pos, base, fscale), self._rope(k, pos, base, fscale)
            o = self._linear(self._attention(q, k, v, window).reshape(n, H * D), p + "attn_output.weight")
            if self.post_norms:
                o = self._norm(o, p + "post_attention_norm.weight")
            x = x + o
            h = self._norm(x, p + "ffn_norm.weight")
            f = self._act(self._linear(h, p + "ffn_gate.weight")) * self._linear(h, p + "ffn_up.weight")
            f = self._linear(f, p + "ffn_down.weight")
            if self.post_norms:
                f = self._norm(f, p + "post_ffw_norm.weight")
            x = x + f
            hidden.append(x.copy())
        h = self._norm(x, "output_norm.weight")
        head = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        rows = int(self.tensors[head].shape[1])
        logits = np.empty((n, rows), _F64)
        for r0 in range(0, rows, _CHUNK):
            r1 = min(rows, r0 + _CHUNK)
            logits[:, r0:r1] = h @ self.weight(head, slice(r0, r1)).T
        return logits, hidden


# -- llama-perplexity's measures ------------------------------------------------------------
def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=_F64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def kl_divergence(ref_logits: Any, logits: Any) -> np.ndarray:
    """Per token, ``KL(P_ref || P)`` in nats of the softmax distributions (llama-perplexity's
    ``--kl-divergence``, the reference being its base run).

    >>> import numpy as np
    >>> float(kl_divergence(np.zeros((1, 2)), np.log([[0.9, 0.1]]))[0].round(4))  # KL(U || [.9, .1])
    0.5108
    """
    lr, lt = _log_softmax(ref_logits), _log_softmax(logits)
    return np.sum(np.exp(lr) * (lr - lt), axis=-1)


def logit_measures(ref_logits: Any, logits: Any, next_tokens: Any = None) -> dict[str, float]:
    """llama-perplexity's measures of ``logits`` against ``ref_logits`` (both ``[n, vocab]``):
    mean and max KL divergence, top-1 agreement ("same top p"), and the RMS of delta p, the
    change in the probability of each token's target: ``next_tokens`` (``[n]``; the text's next
    tokens, as llama-perplexity takes them) or, when None, the reference's top-1 token.

    >>> import numpy as np
    >>> m = logit_measures(np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([[2.0, 0.0], [1.0, 0.0]]))
    >>> m["top1_agreement"], m["max_kl"] > m["mean_kl"] > 0
    (0.5, True)
    """
    ref, got = np.asarray(ref_logits, _F64), np.asarray(logits, _F64)
    if ref.shape != got.shape or ref.ndim != 2:
        raise ArgumentError(expected("logits", f"the reference's shape {ref.shape} [n, vocab]",
                                     got.shape))
    kl = kl_divergence(ref, got)
    target = ref.argmax(-1) if next_tokens is None else np.asarray(next_tokens, dtype=np.int64)
    rows = np.arange(len(ref))
    dp = np.exp(_log_softmax(got))[rows, target] - np.exp(_log_softmax(ref))[rows, target]
    return {"n_tokens": int(len(ref)), "mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
            "top1_agreement": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
            "rms_delta_p": float(np.sqrt(np.mean(dp ** 2)))}


def relative_errors(ref_hidden: Sequence[np.ndarray], hidden: Sequence[np.ndarray]) -> list[float]:
    """Per hidden state, ``||h - h_ref|| / ||h_ref||`` (Frobenius norm over the tokens).

    >>> relative_errors([np.ones((2, 2))], [np.full((2, 2), 1.5)])
    [0.5]
    """
    out = []
    for r, h in zip(ref_hidden, hidden, strict=True):
        r = np.asarray(r, _F64)
        out.append(float(np.linalg.norm(np.asarray(h, _F64) - r) / max(np.linalg.norm(r), 1e-300)))
    return out
