"""Tiny GGUF decoders for the model tests (tests/accel/models) and the campaign's model run
(tests/conformance/campaign): random weights, real names and layouts, written with
gguf.GGUFWriter."""
from __future__ import annotations

import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package writes and reads the model files")

Q8 = gguf.GGMLQuantizationType.Q8_0


def write_model(path, arch, *, n_layers=2, d=64, H=4, Hkv=2, D=16, ffn=128, vocab=48,
                window=None, bias=False, skip=(), extra_kv=None, tied=True):
    """A random decoder of ``arch`` with Q8_0 projections and F32 norms."""
    rng = np.random.default_rng(hash(arch) % 2**32)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ffn)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_context_length(32)
    w.add_rope_freq_base(10000.0 if arch != "gemma3" else 1e6)
    if window:
        w.add_sliding_window(window)
    for k, v in (extra_kv or {}).items():
        w.add_uint32(k, v)

    def add(name, x, quant=True):
        if name in skip:
            return
        if quant:
            w.add_tensor(name, gguf.quants.quantize(x.astype(np.float32), Q8), raw_dtype=Q8)
        else:
            w.add_tensor(name, x.astype(np.float32))

    def mat(n, k):
        return rng.standard_normal((n, k)) / math.sqrt(k) * 2

    add("token_embd.weight", rng.standard_normal((vocab, d)))
    if not tied:
        add("output.weight", mat(vocab, d))
    add("output_norm.weight", 1 + 0.1 * rng.standard_normal(d), quant=False)
    for i in range(n_layers):
        p = f"blk.{i}."
        for n in ("attn_norm", "ffn_norm") + (("post_attention_norm", "post_ffw_norm")
                                               if arch == "gemma3" else ()):
            add(p + n + ".weight", 1 + 0.1 * rng.standard_normal(d), quant=False)
        if arch in ("gemma3", "qwen3"):
            add(p + "attn_q_norm.weight", 1 + 0.1 * rng.standard_normal(D), quant=False)
            add(p + "attn_k_norm.weight", 1 + 0.1 * rng.standard_normal(D), quant=False)
        add(p + "attn_q.weight", mat(H * D, d))
        add(p + "attn_k.weight", mat(Hkv * D, d))
        add(p + "attn_v.weight", mat(Hkv * D, d))
        if bias:
            for n, k in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                add(p + f"attn_{n}.bias", 0.1 * rng.standard_normal(k), quant=False)
        add(p + "attn_output.weight", mat(d, H * D))
        add(p + "ffn_gate.weight", mat(ffn, d))
        add(p + "ffn_up.weight", mat(ffn, d))
        add(p + "ffn_down.weight", mat(d, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
