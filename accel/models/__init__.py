"""Real decoder models from GGUF files, run through accel's public ops on any backend.

``load(path)`` reads the file's metadata into a :class:`ModelConfig`, keeps every weight in its
GGUF format on the backend (``QTensor.from_gguf``) and gives a :class:`Model` with
``forward(tokens, cache=None)`` (float32 logits ``[n_tokens, vocab]``), ``new_cache(max_tokens)``
and greedy ``generate``. Architectures: ``gemma3`` and the llama family (``llama``,
``mistral``, ``qwen2``, ``qwen3``). docs/models.md describes the layers and the checks.

>>> import accel.models
>>> model = accel.models.load(accel.models.tiny_gguf_for_doc(), backend="cpu")
>>> model.forward([1, 2, 3]).shape
(3, 32)
"""
from accel.models.config import ARCHITECTURES, ModelConfig, read_config
from accel.models.decoder import KVCache, Model, load, tiny_gguf_for_doc
from accel.models.gguf_file import GGUFSource, open_gguf

__all__ = ["load", "Model", "ModelConfig", "KVCache", "ARCHITECTURES", "read_config", "open_gguf",
           "GGUFSource", "tiny_gguf_for_doc"]
