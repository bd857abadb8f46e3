"""``accel bench --model MODEL.gguf``: a GGUF decoder's prompt processing and decode speed on one
backend, beside llama.cpp (llama-cpp-python, the optional ``llama`` extra) on the same file, the
same token ids and the same machine, in the same run.

Both sides run the same greedy work: a prompt of ``PROMPT_TOKENS`` ids (BOS, then ids drawn with
a fixed seed), whose last logits give the first new token, then ``DECODE_TOKENS`` single-token
steps, each the argmax of the previous logits. Prompt tokens/s is the prompt's length over the
time to its logits; decode tokens/s counts the steps after it. Each side first runs a short
warm-up (accel builds its kernels on first use; llama.cpp maps its weights), and llama.cpp is
timed with 1 and with all the machine's threads, the best kept: ggml's threads meet at spinning
barriers and collapse beside any busy thread (../shared/notes/models.md).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from accel.conformance.isolation import isolated

SCHEMA = "accel.bench_model/1"
PROMPT_TOKENS = 128
DECODE_TOKENS = 64
#: the warm-up run's prompt and new tokens
_WARMUP = (8, 2)


def prompt_ids(vocab: int, n: int, bos: int | None, seed: int = 0) -> list[int]:
    """``n`` token ids: ``bos`` (where the model has one), then ids drawn from [0, vocab) with
    ``seed``, the same for every backend and for llama.cpp.

    >>> prompt_ids(100, 4, 2)[0], len(prompt_ids(100, 4, None))
    (2, 4)
    """
    rng = np.random.default_rng(seed)
    head = [] if bos is None else [int(bos)]
    return head + [int(t) for t in rng.integers(0, vocab, n - len(head))]


def _greedy(first: Callable[[list[int]], np.ndarray], step: Callable[[int], np.ndarray],
            ids: list[int], n_new: int) -> dict[str, Any]:
    """Time a prompt then ``n_new`` - 1 decode steps; the tokens and both rates."""
    t0 = time.perf_counter()
    out = [int(np.argmax(first(ids)))]
    t1 = time.perf_counter()
    while len(out) < n_new:
        out.append(int(np.argmax(step(out[-1]))))
    t2 = time.perf_counter()
    steps = n_new - 1
    return {"prompt_tokens": len(ids), "prompt_s": t1 - t0,
            "prompt_tokens_per_s": len(ids) / (t1 - t0), "decode_tokens": steps,
            "decode_s": t2 - t1, "decode_tokens_per_s": steps / (t2 - t1) if steps else None,
            "tokens": out}


def time_accel(model, ids: list[int], n_new: int) -> dict[str, Any]:
    """accel's greedy run of ``ids`` then ``n_new`` tokens on the model's backend."""
    def run(prompt: list[int], new: int) -> dict[str, Any]:
        cache = model.new_cache(len(prompt) + new)
        return _greedy(lambda p: model.forward(p, cache, last_only=True)[-1],
                       lambda t: model.forward([t], cache, last_only=True)[-1], prompt, new)

    run(ids[:_WARMUP[0]], _WARMUP[1])
    return run(ids, n_new)


def llama_cpp_version() -> str | None:
    """llama-cpp-python's version, or None where it is not installed."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return getattr(llama_cpp, "__version__", "unknown")


def time_llama_cpp(path: str, ids: list[int], n_new: int, threads: int) -> dict[str, Any]:
    """llama.cpp's greedy run of the same ids with ``threads`` threads (its CPU backend)."""
    from llama_cpp import Llama

    n_ctx = len(ids) + n_new + 8  # n_batch = n_ctx: its scores then have a row per position
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads,
                n_threads_batch=threads, verbose=False)

    def first(prompt: list[int]) -> np.ndarray:
        llm.reset()
        llm.eval(prompt)
        return llm.scores[llm.n_tokens - 1]

    def step(t: int) -> np.ndarray:
        llm.eval([t])
        return llm.scores[llm.n_tokens - 1]

    _greedy(first, step, ids[:_WARMUP[0]], _WARMUP[1])
    rec = _greedy(first, step, ids, n_new)
    rec["threads"] = threads
    llm.close() if hasattr(llm, "close") else None
    return rec


def bench_model(path: str, backend: str, *, prompt_tokens: int = PROMPT_TOKENS,
                decode_tokens: int = DECODE_TOKENS, with_llama: bool = True,
                say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The model section of a bench document: accel on ``backend`` and, where llama-cpp-python
    is installed and ``with_llama``, llama.cpp on the same ids, with the ratios accel / llama.cpp."""
    import accel.models as models
    from accel.conformance.bench.timing import pin_pocl_threads

    pin_pocl_threads()
    t = time.perf_counter()
    model = models.load(path, backend=backend)
    cfg = model.config
    say(f"loaded {cfg.arch} ({cfg.n_layers} layers) on {model.backend.device_id} in "
        f"{time.perf_counter() - t:.1f} s")
    room = cfg.context_length - 1  # a context shorter than the run: a third of it decodes
    if prompt_tokens + decode_tokens > room:
        decode_tokens = min(decode_tokens, room // 3)
        prompt_tokens = room - decode_tokens
    ids = prompt_ids(cfg.vocab, prompt_tokens, cfg.bos_token_id)
    n_new = decode_tokens + 1  # the prompt's own token, then the decode steps
    rec: dict[str, Any] = {"model": os.path.basename(path), "arch": cfg.arch,
                           "backend": model.backend.device_id,
                           "accel": time_accel(model, ids, n_new)}
    a = rec["accel"]
    say(f"accel {rec['backend']}: prompt {a['prompt_tokens_per_s']:.1f} tokens/s, decode "
        f"{a['decode_tokens_per_s']:.1f} tokens/s")
    version = llama_cpp_version()
    if not with_llama or version is None:
        rec["llama_cpp"] = {"status": "not run", "reason": "llama-cpp-python is not installed "
                            "(pip install 'accel-portable[llama]')" if version is None else "--no-baselines"}
        return rec
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        runs = [isolated(time_llama_cpp, path, ids, n_new, n) for n in sorted({1, cores})]
    except (ValueError, RuntimeError, OSError) as e:  # a file llama.cpp does not load: no baseline
        reason = f"llama.cpp (llama-cpp-python {version}) gave no baseline: {e}"
        rec["llama_cpp"] = {"status": "error", "reason": reason}
        say(reason)
        return rec
    best = {k: max(r[k] for r in runs) for k in ("prompt_tokens_per_s", "decode_tokens_per_s")}
    rec["llama_cpp"] = {"status": "ok", "version": f"llama-cpp-python {version}", "runs": [
        {k: r[k] for k in ("threads", "prompt_tokens_per_s", "decode_tokens_per_s")} for r in runs],
        **best, "same_tokens": runs[-1]["tokens"] == a["tokens"]}
    rec["ratio"] = {k.split("_")[0]: a[k] / best[k] for k in best}
    say(f"llama.cpp (best of {', '.join(str(r['threads']) for r in runs)} threads): prompt "
        f"{best['prompt_tokens_per_s']:.1f} tokens/s, decode {best['decode_tokens_per_s']:.1f} "
        f"tokens/s; accel / llama.cpp: prompt {rec['ratio']['prompt']:.2f}x, decode "
        f"{rec['ratio']['decode']:.2f}x")
    return rec
