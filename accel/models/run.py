"""``accel run MODEL.gguf --tokens IDS | --prompt TEXT [-n N] [--backend B]``: greedy
continuation with one progress line per phase (stderr). ``--tokens`` needs no tokenizer;
``--prompt`` tokenizes with the GGUF's own vocabulary through transformers' GGUF tokenizer
support (``pip install transformers``) and is a usage error naming that when it is missing."""
from __future__ import annotations

import argparse
import os
import sys
import time


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run a GGUF decoder: greedy continuation",
                              description="Load a GGUF decoder (gemma3, llama, mistral, qwen2, "
                                          "qwen3) on a backend and print the greedy continuation.")
    p.add_argument("model", help="the GGUF file")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--tokens", help="prompt token ids, comma or space separated")
    what.add_argument("--prompt", help="prompt text (needs transformers for the tokenizer)")
    p.add_argument("-n", type=int, default=32, help="new tokens at most (default: %(default)s)")
    p.add_argument("--backend", help="device, e.g. cpu, opencl:0 (default: automatic)")
    p.set_defaults(func=_run)


def _tokenizer(path: str):
    from accel.errors import ArgumentError, expected

    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ArgumentError(expected("--prompt", "the transformers package for the GGUF's "
                                     "tokenizer (pip install transformers), or use --tokens",
                                     "no transformers")) from None
    return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                         gguf_file=os.path.basename(path))


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
        tok = _tokenizer(args.model)
        ids = list(tok(args.prompt)["input_ids"])
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
