"""A decoder's hyperparameters, read from GGUF metadata (the keys llama.cpp writes and reads).

The per-architecture facts GGUF does not carry (Gemma 3's local RoPE base and its one global
layer in six, which RoPE layout each family uses) are written here once, from llama.cpp's
model loader, and named in :data:`ARCHITECTURES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from accel.errors import ArgumentError, expected

#: architecture -> what GGUF does not say about it
ARCHITECTURES: dict[str, dict[str, Any]] = {
    # NEOX RoPE (halves), GELU-tanh gate, QK-RMSNorm, post-norms, embeddings times sqrt(d),
    # local layers base 10,000 with a sliding window, every sixth layer global
    "gemma3": dict(rope_interleaved=False, activation="gelu_tanh", qk_norm=True, post_norms=True,
                   embed_scale=True, swa_period=6, rope_base_swa=10000.0),
    # GGUF's llama files have Q and K permuted for GPT-J (pairwise) RoPE
    "llama": dict(rope_interleaved=True, activation="silu"),
    "mistral": dict(rope_interleaved=True, activation="silu"),
    "qwen2": dict(rope_interleaved=False, activation="silu"),
    "qwen3": dict(rope_interleaved=False, activation="silu", qk_norm=True),
}


@dataclass(frozen=True)
class ModelConfig:
    """A decoder's shape and constants. ``layer_window[i]`` is layer i's sliding window (None:
    full causal attention), ``layer_rope_base[i]`` its RoPE base and ``layer_rope_scale[i]`` its
    RoPE position scale (1 / the linear scaling factor).

    >>> c = ModelConfig(arch="llama", n_layers=1, d_model=8, n_heads=2, n_kv_heads=1, head_dim=4,
    ...                 v_head_dim=4, ffn=16, vocab=10, eps=1e-5, rope_base=1e4, rope_dim=4,
    ...                 rope_interleaved=True, rope_freq_scale=1.0, context_length=64,
    ...                 layer_window=(None,), layer_rope_base=(1e4,), layer_rope_scale=(1.0,),
    ...                 attention_scale=0.5,
    ...                 embed_scale=1.0, activation="silu", qk_norm=False, post_norms=False)
    >>> c.gqa_ratio, c.q_dim
    (2, 8)
    """

    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    v_head_dim: int
    ffn: int
    vocab: int
    eps: float
    rope_base: float
    rope_dim: int
    rope_interleaved: bool
    rope_freq_scale: float
    context_length: int
    layer_window: tuple[int | None, ...]
    layer_rope_base: tuple[float, ...]
    layer_rope_scale: tuple[float, ...]
    attention_scale: float
    embed_scale: float
    activation: str
    qk_norm: bool
    post_norms: bool
    sliding_window: int | None = None
    rope_base_swa: float | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def gqa_ratio(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection, ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim


def _key(source: Any, key: str, kind: type, *, default: Any = ..., positive: bool = True) -> Any:
    value = source.field(key)
    if value is None:
        if default is ...:
            raise ArgumentError(expected(f"metadata key {key!r} of {source.name}",
                                         "present (the architecture needs it)", "no such key"))
        return default
    if isinstance(value, list):  # per-layer arrays (some converters): one value for all layers
        if value and all(v == value[0] for v in value):
            value = value[0]
        else:
            raise ArgumentError(expected(f"metadata key {key!r} of {source.name}",
                                         "one value for every layer", value))
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or not positive)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and (value > 0 or not positive)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ArgumentError(expected(f"metadata key {key!r} of {source.name}",
                                     f"a {'positive ' if positive and kind in (int, float) else ''}"
                                     f"{kind.__name__}", repr(value)))
    return value


def read_config(source: Any) -> ModelConfig:
    """The :class:`ModelConfig` of an opened GGUF (:func:`accel.models.gguf_file.open_gguf`);
    a missing key or an architecture accel does not run is an ``ArgumentError`` naming it."""
    arch = _key(source, "general.architecture", str)
    if arch not in ARCHITECTURES:
        raise ArgumentError(expected(f"metadata key 'general.architecture' of {source.name}",
                                     f"one of {sorted(ARCHITECTURES)}", repr(arch)))
    facts = ARCHITECTURES[arch]
    k = lambda name, kind, **kw: _key(source, f"{arch}.{name}", kind, **kw)  # noqa: E731
    n_layers = k("block_count", int)
    d_model = k("embedding_length", int)
    n_heads = k("attention.head_count", int)
    n_kv = k("attention.head_count_kv", int, default=n_heads)
    if n_heads % n_kv:
        raise ArgumentError(expected(f"metadata key '{arch}.attention.head_count_kv' of {source.name}",
                                     f"a divisor of head_count = {n_heads}", n_kv))
    head_dim = k("attention.key_length", int, default=d_model // n_heads)
    v_head_dim = k("attention.value_length", int, default=head_dim)
    if v_head_dim != head_dim:
        raise ArgumentError(expected(f"metadata key '{arch}.attention.value_length' of {source.name}",
                                     f"key_length = {head_dim} (accel's models keep one head dim)",
                                     v_head_dim))
    tokens = source.field("tokenizer.ggml.tokens")
    embd = source.tensors.get("token_embd.weight")
    vocab_default = len(tokens) if tokens else (int(embd.shape[1]) if embd is not None else ...)
    vocab = k("vocab_size", int, default=vocab_default)
    rope_dim = k("rope.dimension_count", int, default=head_dim)
    if rope_dim % 2 or rope_dim > head_dim:
        raise ArgumentError(expected(f"metadata key '{arch}.rope.dimension_count' of {source.name}",
                                     f"an even number at most key_length = {head_dim}", rope_dim))
    base = k("rope.freq_base", float, default=10000.0)
    scaling = k("rope.scaling.type", str, default="none")
    if scaling not in ("none", "linear"):
        raise ArgumentError(expected(f"metadata key '{arch}.rope.scaling.type' of {source.name}",
                                     "'none' or 'linear' (the RoPE scalings accel's models run)",
                                     repr(scaling)))
    factor = k("rope.scaling.factor", float, default=1.0) if scaling == "linear" else 1.0
    window = None
    windows: list[int | None]
    bases: list[float]
    scales: list[float]
    base_swa = None
    if facts.get("swa_period"):  # gemma3: local layers unless (i + 1) % period == 0
        window = k("attention.sliding_window", int)
        base_swa = k("rope.freq_base_swa", float, default=facts["rope_base_swa"])
        pattern = source.field(f"{arch}.attention.sliding_window_pattern")
        if isinstance(pattern, list) and len(pattern) == n_layers:
            local = [bool(p) for p in pattern]
        else:
            period = pattern if isinstance(pattern, int) and pattern >= 1 else facts["swa_period"]
            local = [(i + 1) % period != 0 for i in range(n_layers)]
        windows = [window if loc else None for loc in local]
        bases = [base_swa if loc else base for loc in local]
        scales = [1.0 if loc else 1.0 / factor for loc in local]  # scaling: global layers only
    else:
        window = k("attention.sliding_window", int, default=None)
        windows, bases = [window] * n_layers, [base] * n_layers
        scales = [1.0 / factor] * n_layers
    if arch == "gemma3" and n_layers == 62:  # Gemma 3 27B scales queries by d_model / heads
        scale = 1.0 / math.sqrt(d_model // n_heads)
    else:
        scale = 1.0 / math.sqrt(head_dim)
    if source.field(f"{arch}.final_logit_softcapping") is not None and arch != "gemma3":
        raise ArgumentError(expected(f"metadata key '{arch}.final_logit_softcapping' of "
                                     f"{source.name}", "absent (no logit soft-capping in accel's "
                                     f"{arch})", source.field(f"{arch}.final_logit_softcapping")))
    return ModelConfig(
        arch=arch, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim, v_head_dim=v_head_dim, ffn=k("feed_forward_length", int), vocab=vocab,
        eps=k("attention.layer_norm_rms_epsilon", float), rope_base=base, rope_dim=rope_dim,
        rope_interleaved=facts["rope_interleaved"], rope_freq_scale=1.0 / factor,
        context_length=k("context_length", int), layer_window=tuple(windows),
        layer_rope_base=tuple(bases), layer_rope_scale=tuple(scales), attention_scale=scale,
        embed_scale=math.sqrt(d_model) if facts.get("embed_scale") else 1.0,
        activation=facts["activation"], qk_norm=bool(facts.get("qk_norm")),
        post_norms=bool(facts.get("post_norms")), sliding_window=window, rope_base_swa=base_swa,
        bos_token_id=_key(source, "tokenizer.ggml.bos_token_id", int, default=None, positive=False),
        eos_token_id=_key(source, "tokenizer.ggml.eos_token_id", int, default=None, positive=False),
        name=_key(source, "general.name", str, default=""))
