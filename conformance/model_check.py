"""``accel conformance --model MODEL.gguf``: a fixed token sequence through a backend's
``accel.models`` forward and through the float64 reference (model_ref.py), judged by the
per-layer relative error of the hidden state and llama-perplexity's logit measures.

Bounds (issue 43): mean KL at most 1e-4 and top-1 agreement at least 99%. Beside it, where
llama-cpp-python is installed or a saved logits file is given, the same measures against
llama.cpp's logits on the same file and tokens, with mean KL at most 0.025 (llama.cpp rounds
each activation to 8 bits before its quantized dot products; on Gemma 3 270M Q4_K_M it differs
from itself on the weights dequantized to F32 by about 0.015).
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

SCHEMA = "accel.model-conformance/1"
MEAN_KL_BOUND = 1e-4
TOP1_BOUND = 0.99
LLAMA_KL_BOUND = 0.025
DEFAULT_TOKENS = 16


def default_tokens(vocab: int, bos: int | None, n: int = DEFAULT_TOKENS) -> list[int]:
    """A fixed sequence (no tokenizer needed): BOS when the file has one, then ids drawn with
    seed 0 from the vocabulary."""
    ids = np.random.default_rng(0).integers(0, vocab, n).tolist()
    return ([bos] if bos is not None else []) + ids[: n - (bos is not None)]


def llama_cpp_logits(path: str, tokens: list[int]) -> np.ndarray:
    """llama.cpp's logits ``[n, vocab]`` (float32) of ``tokens`` on the GGUF at ``path``, through
    llama-cpp-python (run it in a child: isolation.isolated)."""
    from llama_cpp import Llama

    n = len(tokens)
    llm = Llama(model_path=path, n_ctx=n + 8, n_batch=n + 8, logits_all=True, verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[:n], np.float32)
    llm.close() if hasattr(llm, "close") else None
    return out


def _against_llama_cpp(path: str, tokens: list[int], logits: np.ndarray,
                       saved: str | None) -> dict:
    """The llama.cpp section of a record: the measures of accel's logits against llama.cpp's
    (a saved ``.npy`` of them, or llama-cpp-python's run), or why there are none."""
    from accel.conformance.isolation import isolated
    from accel.conformance.model_ref import logit_measures
    from accel.errors import ArgumentError, expected

    if saved is not None:
        try:
            ref = np.load(saved)
        except (OSError, ValueError) as e:
            raise ArgumentError(expected("--llama-logits", "a .npy file of llama.cpp's logits "
                                         "[n_tokens, vocab]", f"{saved!r} ({e})")) from None
        if ref.shape != logits.shape:
            raise ArgumentError(expected("--llama-logits", f"logits of shape {logits.shape} "
                                         "(these tokens, the model's vocabulary)", ref.shape))
        source = f"saved logits {saved}"
    else:
        try:
            import llama_cpp
        except ImportError:
            return {"status": "not run", "reason": "llama-cpp-python is not installed (pip install "
                    "'accel-portable[llama]') and no --llama-logits file was given"}
        source = f"llama-cpp-python {getattr(llama_cpp, '__version__', 'unknown')}"
        try:
            ref = isolated(llama_cpp_logits, str(path), tokens)
        except RuntimeError as e:  # a file it does not load, a build that dies
            return {"status": "error", "reason": f"{source} gave no logits: {e}"}
    m = logit_measures(ref, logits)
    return {"status": "ok", "source": source, "logits": m, "bounds": {"mean_kl": LLAMA_KL_BOUND},
            "passed": m["mean_kl"] <= LLAMA_KL_BOUND}


def check_model(path: str, backend: Any, tokens: Sequence[int] | None = None,
                llama_logits: str | None = None) -> dict:
    """The model-conformance record of ``path`` on ``backend``: against the float64 forward,
    and against llama.cpp where it runs here or ``llama_logits`` (a saved ``.npy``) is given."""
    import accel.models as models
    from accel.conformance.model_ref import ModelReference, logit_measures, relative_errors

    model = models.load(path, backend=backend)
    c = model.config
    toks = list(tokens) if tokens else default_tokens(c.vocab, c.bos_token_id)
    logits, hidden = model.forward_hidden(toks)
    ref_logits, ref_hidden = ModelReference(path).forward(toks)
    m = logit_measures(ref_logits, logits)
    errs = relative_errors(ref_hidden, hidden)
    ok = m["mean_kl"] <= MEAN_KL_BOUND and m["top1_agreement"] >= TOP1_BOUND
    llama = _against_llama_cpp(str(path), toks, logits, llama_logits)
    return {"schema": SCHEMA, "model": str(path), "arch": c.arch,
            "backend": model.backend.device_id, "tokens": [int(t) for t in toks],
            "layer_relative_error": {("embedding" if i == 0 else f"blk.{i - 1}"): e
                                     for i, e in enumerate(errs)},
            "logits": m, "bounds": {"mean_kl": MEAN_KL_BOUND, "top1_agreement": TOP1_BOUND},
            "llama_cpp": llama, "passed": bool(ok and llama.get("passed", True))}


def record_crash(args: Any, what: str) -> None:
    """The record of a model run whose process died (``what``: the signal), written where
    ``--json`` asks, so a crash is a result and not a missing file."""
    from accel.conformance.results import machine

    rec = {"schema": SCHEMA, "model": str(args.model),
           "backend": args.backend or "default", "passed": False, "crashed": what,
           "repro": args.command_line, "machine": machine(args.label)}
    print(f"model conformance of {args.model} on {rec['backend']}: CRASHED ({what}); repro: "
          f"{args.command_line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


def run(args: Any) -> int:
    """The CLI's branch for ``--model``: print, optionally write JSON; exit 1 on a failure."""
    import accel

    tokens = [int(t) for t in args.tokens.replace(",", " ").split()] if args.tokens else None
    from accel.conformance.results import commit, machine

    rec = check_model(args.model, accel.get_backend(args.backend), tokens, args.llama_logits)
    rec.update(machine=machine(args.label), commit=commit(), command=args.command_line)
    for name, e in rec["layer_relative_error"].items():
        print(f"{name:>10}  relative error {e:.3e}")
    m = rec["logits"]
    print(f"logits: mean KL {m['mean_kl']:.3e} (bound {MEAN_KL_BOUND:g}), max KL {m['max_kl']:.3e}, "
          f"top-1 {m['top1_agreement']:.1%} (bound {TOP1_BOUND:.0%}), RMS dp {m['rms_delta_p']:.3e} "
          f"over {m['n_tokens']} tokens on {rec['backend']}")
    ll = rec["llama_cpp"]
    if ll["status"] == "ok":
        lm = ll["logits"]
        print(f"against llama.cpp ({ll['source']}): mean KL {lm['mean_kl']:.3e} (bound "
              f"{LLAMA_KL_BOUND:g}), max KL {lm['max_kl']:.3e}, top-1 {lm['top1_agreement']:.1%}, "
              f"RMS dp {lm['rms_delta_p']:.3e}")
    else:
        print(f"against llama.cpp: {ll['status']}: {ll['reason']}")
    print("PASS" if rec["passed"] else "FAIL")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
    return 0 if rec["passed"] else 1
