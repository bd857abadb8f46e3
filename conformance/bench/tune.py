"""``accel tune``: search the OpenCL kernels' tile parameters on a device and store the fastest
per device; ``params.params_for`` applies them automatically from then on.

Each candidate is first checked against the CPU reference on small problems (a parameter set
that computes wrong answers is never stored), then timed with profiling events on the op's
representative problems, each call on the next of several copies of its operands as the
benchmarks rotate a weight (beyond the last-level cache, as decode reads it); per problem the
fastest of ``--repeat`` runs counts, and a candidate's time is the sum over its problems (the
GEMVs: x in float and x quantized, ggml's semantics, whose kernels share one parameter set).
"""
from __future__ import annotations

import argparse
import itertools

import numpy as np

from accel.conformance.bench.peaks import last_level_cache
from accel.conformance.bench.suite import Case, reference, weight_copies
from accel.tensor import Tensor

#: representative problems (timed) per tunable op
PROBLEMS = {"matmul": "float32 matmul M=1024 N=1025 K=1027",
            "attention": "float32 causal attention B=1 H=4 S=1024 D=64",
            "qmatmul": "q4_0 qmatmul M=64 N=K=2048",
            "gemv": "q4_0 qmatmul M=1 N=K=4096, x float32 and x_format=q8_0",
            "kgemv": "q4_k qmatmul M=1 N=K=4096, x float32 and x_format=q8_k"}


def _cases(op: str, small: bool) -> list[Case]:
    """The problems ``op`` is tuned on: small ragged ones check a candidate's results, large
    ones (PROBLEMS) are timed. The GEMVs run decode's M = 1 with x in float32 and x quantized
    (qgemv_k's RN and qgemv_kx's XRN, qmatmul's and qmatmul_x8's RN on CPU devices); qgemv_k's
    small checks take M = 3, so the rows of x a work-item shares are checked too (the "gemv" set
    computes M = 1 only on CPU devices)."""
    if op == "matmul":
        n = 67 if small else 1024
        return [Case.make("matmul", "float32", M=n, N=n + 1, K=n + 3)]
    if op == "attention":
        s = 45 if small else 1024
        return [Case.make("attention", "float32", B=1, Hq=4, Hkv=4, Sq=s, Sk=s, D=64, causal=True)]
    if op in ("gemv", "kgemv"):  # q4_k: kquant.cl's qgemv_k / qgemv_kx, K-quants and mxfp4
        fmt, x_fmt = ("q4_k", "q8_k") if op == "kgemv" else ("q4_0", "q8_0")
        m, n, k = (3 if op == "kgemv" else 1, 97, 512) if small else (1, 4096, 4096)
        return [Case.make("qmatmul", "float32", M=m, N=n, K=k, fmt=fmt, **x)
                for x in ({}, {"x_fmt": x_fmt})]
    m, n = (5, 96) if small else (64, 2048)
    # q4_0: the format decode runs most, and the one with more work per byte
    return [Case.make("qmatmul", "float32", M=m, N=n, K=n, fmt="q4_0")]


def operand_sets(be, case: Case, cache_bytes: int | None) -> list[list]:
    """``case``'s operands on ``be``, in as many copies as the benchmarks rotate a weight among
    (suite.weight_copies: CACHE_MULTIPLE x the last-level cache), so a GEMV is timed reading its
    weight from memory as decode does, not from the cache a lone copy sits in. Warm, the choice
    differed: kgemv's XRN 2 won by 1% in cache where XRN 1 had taken 0.56 ms against 0.70
    rotated (2-core AVX-512 VM)."""
    hosts, spec = case.host_inputs(), case.spec()
    sets = [_upload(be, hosts) for _ in range(weight_copies(spec, cache_bytes))]
    out = Tensor.empty(be, spec.out_shape, spec.out_dtype)
    for operands in sets:  # a buffer's first use is slower than the reads after (suite._use_each_copy)
        be.run(spec, out, *operands)
    be.synchronize()
    return sets


def _upload(be, hosts: list) -> list:
    return [None if h is None else Tensor.from_host(be, h) for h in hosts]


def _run(be, spec, sets: list[list], params: dict, op: str, repeat: int):
    """(output, best seconds) of ``spec`` with ``params`` for ``op`` on backend ``be``, each call
    on the next of the operand ``sets``."""
    be.params = {**be.params, op: params}
    out = Tensor.empty(be, spec.out_shape, spec.out_dtype)
    turn = itertools.cycle(sets)
    go = lambda: be.run(spec, out, *next(turn))  # noqa: E731
    go()
    best = min(be.time(go) for _ in range(max(1, repeat)))
    return out.numpy(), best


def _correct(be, op: str, params: dict) -> bool:
    """The candidate agrees with the CPU reference (the benchmarks' own) on small ragged
    problems, element by element: stricter than the benchmarks' normwise check, since a stored
    parameter set is trusted from then on."""
    for case in _cases(op, small=True):
        hosts = case.host_inputs()
        got, _ = _run(be, case.spec(), [_upload(be, hosts)], params, op, 1)
        want = reference(case, hosts)
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max()))):
            return False
    return True


def tune(be, ops: list[str], repeat: int = 10, store: bool = True, echo=print) -> dict[str, dict]:
    """Search each op's candidates on backend ``be``; store and return the fastest per op."""
    from accel.errors import AccelError

    from accel.backends.opencl.params import candidates, params_for, safe_lanes, save_tuned, store_path

    kind = "cpu" if be.dev.kind == "cpu" else "gpu"
    cache_bytes = last_level_cache(be)
    found = {}
    for op in ops:
        cases = _cases(op, small=False)
        sets = operand_sets(be, cases[0], cache_bytes)  # an op's problems differ in x_format only
        timed = [(case.spec(), sets) for case in cases]
        results = []
        for cand in candidates(op, kind, safe_lanes(be.dev)):
            try:
                if not _correct(be, op, cand):
                    echo(f"  {op} {cand}: WRONG RESULTS, skipped")
                    continue
                seconds = sum(_run(be, spec, op_sets, cand, op, repeat)[1] for spec, op_sets in timed)
            except AccelError as e:  # e.g. a work-group too large for this device
                echo(f"  {op} {cand}: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            results.append((seconds, cand))
            echo(f"  {op} {cand}: {seconds * 1e3:.2f} ms")
        if results:
            seconds, best = min(results, key=lambda r: r[0])
            found[op] = best
            echo(f"{op} ({PROBLEMS[op]}): best {best} at {seconds * 1e3:.2f} ms")
            if store:
                try:
                    save_tuned(be.dev, op, best)
                    echo(f"{op}: stored in {store_path(be.dev)} (accel tune --show, --reset)")
                except OSError as e:  # a read-only cache: the search's result is still printed above
                    echo(f"{op}: not stored, {store_path(be.dev)} cannot be written: "
                         f"{e.strerror or e}")
    be.params = params_for(be.dev)
    return found


def _tune(args: argparse.Namespace) -> int:
    import accel
    from accel.conformance.argtypes import split_names
    from accel.conformance.bench.timing import pin_pocl_threads
    from accel.errors import ArgumentError, expected

    pin_pocl_threads()

    ops = split_names(args.ops) or list(PROBLEMS)
    unknown = [o for o in ops if o not in PROBLEMS]
    if unknown:
        raise ArgumentError(expected("--ops", f"a subset of {list(PROBLEMS)}", unknown))
    be = accel.get_backend(args.backend)
    if be.name != "opencl":
        raise ArgumentError(expected("--backend", "an OpenCL device such as opencl:0", args.backend))
    if args.show or args.reset:
        return _show_or_reset(be, args.reset)
    print(f"tuning {', '.join(ops)} on {be.device_id} ({be.dev.name})")
    tune(be, ops, args.repeat, store=not args.dry_run)
    return 0


def _show_or_reset(be, reset: bool) -> int:
    """Print what is stored for the device (and where), or remove it: the kernels then use the
    built-in defaults again."""
    import json

    from accel.backends.opencl.params import store_path, tuned_in_effect

    path = store_path(be.dev)
    used, ignored = tuned_in_effect(be.dev)
    if reset:
        if not (path.exists() or path.is_symlink()):
            print(f"{be.device_id}: nothing was stored ({path})")
            return 0
        path.unlink()
        print(f"{be.device_id}: removed {path}"
              + ("" if used or ignored else " (it held nothing accel could read)")
              + "; the built-in parameters apply")
        return 0
    print(f"{be.device_id} ({be.dev.name}): {path}")
    print(json.dumps(used, indent=1, sort_keys=True) if used else "nothing stored applies: the "
          "built-in parameters are used")
    if ignored:  # stored by an older accel, or edited: the kernels use the defaults for these
        print("stored but ignored (not a parameter set this version of accel tune can choose; "
              "the built-in parameters apply; run accel tune again):")
        print(json.dumps(ignored, indent=1, sort_keys=True))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from accel.conformance.argtypes import int_at_least, names

    p = subparsers.add_parser(
        "tune", help="search OpenCL kernel tile sizes and store the best per device",
        description="Search the OpenCL kernels' tile parameters on one device: each candidate is "
                    "checked against the CPU reference on a small problem, then timed on a "
                    "representative one; the fastest is stored per device in accel's cache "
                    "(nothing with --dry-run) and used automatically from then on.")
    p.add_argument("--backend", default="opencl:0",
                   help="OpenCL device to tune (default: %(default)s)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help=f"ops to tune, space or comma separated, from {', '.join(PROBLEMS)} "
                        "(default: all)")
    p.add_argument("--repeat", type=int_at_least(1), default=10,
                   help="timed runs per candidate, the fastest counts (default: %(default)s)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--dry-run", action="store_true", help="search and print, but store nothing")
    what.add_argument("--show", action="store_true",
                      help="print the parameters stored for the device, and where; search nothing")
    what.add_argument("--reset", action="store_true",
                      help="remove the stored parameters (the built-in ones apply again)")
    p.set_defaults(func=_tune)
