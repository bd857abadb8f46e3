"""``accel run MODEL.gguf --tokens IDS | --prompt TEXT [-n N] [--backend B]``: greedy
continuation with one progress line per phase (stderr). ``--tokens`` needs no tokenizer;
``--prompt`` tokenizes with the GGUF's own vocabulary through llama-cpp-python (a vocab-only
load) or transformers' GGUF tokenizer, and is a usage error naming both when neither is
installed."""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from typing import Any


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run a GGUF decoder: greedy continuation",
                              description="Load a GGUF decoder (gemma3, llama, mistral, qwen2, "
                                          "qwen3) on a backend and print the greedy continuation.")
    p.add_argument("model", help="the GGUF file")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--tokens", help="prompt token ids, comma or space separated")
    what.add_argument("--prompt", help="prompt text (tokenized by llama-cpp-python or "
                                       "transformers, whichever is installed)")
    p.add_argument("-n", type=int, default=32, help="new tokens at most (default: %(default)s)")
    p.add_argument("--backend", help="device, e.g. cpu, opencl:0 (default: automatic)")
    p.set_defaults(func=_run)


class _Tokenizer:
    """The GGUF's own vocabulary: llama.cpp's (llama-cpp-python, a vocab-only load: fast) where
    installed, else transformers' GGUF tokenizer (slow to build for a large vocabulary: 33 s for
    Gemma 3's 262,144 tokens here)."""

    def __init__(self, path: str):
        from accel.errors import ArgumentError, expected

        try:
            import llama_cpp
        except ImportError:
            pass
        else:
            _quiet_llama_log(llama_cpp)
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            self.encode = lambda text: llm.tokenize(text.encode(), add_bos=True, special=True)
            self.decode = lambda ids: llm.detokenize(ids).decode(errors="replace")
            return
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ArgumentError(expected("--prompt", "a tokenizer for the GGUF's vocabulary: "
                                         "llama-cpp-python (pip install 'accel-portable[llama]') "
                                         "or transformers (pip install transformers), or use "
                                         "--tokens", "neither installed")) from None
        tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                            gguf_file=os.path.basename(path))
        self.encode = lambda text: list(tok(text)["input_ids"])
        self.decode = tok.decode


def _quiet_llama_log(llama_cpp: Any) -> None:
    """llama.cpp's own log off: with verbose=False its context setup still prints (a warning
    that a vocab-only load has no training context) between accel's progress lines. A failed
    load still raises."""
    global _LOG_SINK
    if _LOG_SINK is None:
        _LOG_SINK = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
        llama_cpp.llama_log_set(_LOG_SINK, ctypes.c_void_p(0))


_LOG_SINK: Any = None  # the callback llama.cpp holds: kept alive here


def _run(args: argparse.Namespace) -> int:
    import accel.models as models
    from accel.errors import ArgumentError, expected

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.n < 0:
        raise ArgumentError(expected("-n", "a non-negative integer", args.n))
    t = time.perf_counter()
    model = models.load(args.model, backend=args.backend)
    say(f"loaded {model.config.arch} ({model.config.n_layers} layers) on "
        f"{model.backend.device_id} in {time.perf_counter() - t:.1f} s")
    tok = None
    if args.prompt is not None:
        t = time.perf_counter()
        tok = _Tokenizer(args.model)
        ids = [int(i) for i in tok.encode(args.prompt)]
        say(f"tokenized: {len(ids)} tokens in {time.perf_counter() - t:.1f} s")
    else:
        try:
            ids = [int(x) for x in args.tokens.replace(",", " ").split()]
        except ValueError:
            raise ArgumentError(expected("--tokens", "integer ids", repr(args.tokens))) from None
    t = time.perf_counter()
    stop = [model.config.eos_token_id] if model.config.eos_token_id is not None else []
    out: list[int] = []
    first = []

    def on_token(token: int) -> None:
        if not out:
            first.append(time.perf_counter())
            say(f"prompt: {len(ids)} tokens in {first[0] - t:.2f} s")
        out.append(token)
        if tok is None:
            print(token, end=" ", flush=True)

    model.generate(ids, args.n, stop=stop, on_token=on_token)
    if tok is not None:
        print(tok.decode(out), flush=True)
    else:
        print(flush=True)
    if len(out) > 1:
        dt = time.perf_counter() - first[0]
        say(f"decode: {len(out) - 1} tokens in {dt:.2f} s ({(len(out) - 1) / dt:.1f} tokens/s)")
    return 0
