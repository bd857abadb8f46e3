"""``accel conformance --model MODEL.gguf``: a fixed token sequence through a backend's
``accel.models`` forward and through the float64 reference (model_ref.py), judged by the
per-layer relative error of the hidden state and llama-perplexity's logit measures.

Bounds (issue 43): mean KL at most 1e-4 and top-1 agreement at least 99%.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

SCHEMA = "accel.model-conformance/1"
MEAN_KL_BOUND = 1e-4
TOP1_BOUND = 0.99
DEFAULT_TOKENS = 16


def default_tokens(vocab: int, bos: int | None, n: int = DEFAULT_TOKENS) -> list[int]:
    """A fixed sequence (no tokenizer needed): BOS when the file has one, then ids drawn with
    seed 0 from the vocabulary."""
    ids = np.random.default_rng(0).integers(0, vocab, n).tolist()
    return ([bos] if bos is not None else []) + ids[: n - (bos is not None)]


def check_model(path: str, backend: Any, tokens: Sequence[int] | None = None) -> dict:
    """The model-conformance record of ``path`` on ``backend``."""
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
    return {"schema": SCHEMA, "model": str(path), "arch": c.arch,
            "backend": model.backend.device_id, "tokens": [int(t) for t in toks],
            "layer_relative_error": {("embedding" if i == 0 else f"blk.{i - 1}"): e
                                     for i, e in enumerate(errs)},
            "logits": m, "bounds": {"mean_kl": MEAN_KL_BOUND, "top1_agreement": TOP1_BOUND},
            "passed": bool(ok)}


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

    rec = check_model(args.model, accel.get_backend(args.backend), tokens)
    rec.update(machine=machine(args.label), commit=commit(), command=args.command_line)
    for name, e in rec["layer_relative_error"].items():
        print(f"{name:>10}  relative error {e:.3e}")
    m = rec["logits"]
    print(f"logits: mean KL {m['mean_kl']:.3e} (bound {MEAN_KL_BOUND:g}), max KL {m['max_kl']:.3e}, "
          f"top-1 {m['top1_agreement']:.1%} (bound {TOP1_BOUND:.0%}), RMS dp {m['rms_delta_p']:.3e} "
          f"over {m['n_tokens']} tokens on {rec['backend']}: {'PASS' if rec['passed'] else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
    return 0 if rec["passed"] else 1
