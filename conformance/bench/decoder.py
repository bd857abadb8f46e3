"""The decoder-step ops' speed goal (issue 42): rms_norm, rope, glu, add and get_rows on
float32 accel.Tensors of 4096 x 4096 elements, against torch's CPU eager on the same data in
the same run, timed interleaved (``timing.measure_all``); prints torch's time over accel's (the
goal: at least 0.8 on OpenCL). ``python -m accel.conformance.bench.decoder --backend opencl``.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

import accel
from accel.conformance.bench.timing import BUDGETS, Budget, Contender, host_timer, measure_all

GOAL = 0.8


#: the ops timed here, in table order (``accel bench --ops`` takes them beside the suite's)
OPS = ("rms_norm", "rope", "glu", "add", "get_rows")


def cases(be: accel.Backend, n: int = 4096) -> list[tuple[str, Callable[[], Any], Callable[[], Any], int]]:
    """(name, accel call, torch call, bytes moved) for each memory-bound op at ``n`` x ``n``."""
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    tx, tw = accel.asarray(x, backend=be), accel.asarray(w, backend=be)
    px, pw = torch.from_numpy(x), torch.from_numpy(w)
    heads, d = max(1, n // 128), min(n, 128)
    r4 = x.reshape(1, heads, n * n // (heads * d), d)
    t4, p4 = accel.asarray(r4, backend=be), torch.from_numpy(np.ascontiguousarray(r4))
    pos = np.arange(r4.shape[2])
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.from_numpy(pos.astype(np.float32))[:, None] * inv
    cos, sin = torch.cos(ang), torch.sin(ang)

    def torch_rope() -> Any:
        a, b = p4[..., : d // 2], p4[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    half = np.ascontiguousarray(x[:, : n // 2]), np.ascontiguousarray(x[:, n // 2:])
    tg, tu = (accel.asarray(h, backend=be) for h in half)
    pg, pu = (torch.from_numpy(h) for h in half)
    ids = rng.integers(0, n, n).astype(np.int32)
    tids, pids = accel.asarray(ids, backend=be), torch.from_numpy(ids.astype(np.int64))
    nb = n * n * 4
    return [
        ("rms_norm", lambda: accel.rms_norm(tx, tw),
         lambda: px * torch.rsqrt(px.pow(2).mean(-1, keepdim=True) + 1e-6) * pw, 2 * nb),
        ("rope", lambda: accel.rope(t4, pos), torch_rope, 2 * nb),
        ("glu", lambda: accel.glu(tg, tu), lambda: torch.nn.functional.silu(pg) * pu, 3 * nb // 2),
        ("add", lambda: accel.add(tx, tx), lambda: px + px, 3 * nb),
        ("get_rows", lambda: accel.get_rows(tx, tids),
         lambda: torch.nn.functional.embedding(pids, px), 2 * nb),
    ]


def run(backend: str | accel.Backend = "opencl", n: int = 4096, budget: Budget = BUDGETS["quick"],
        ops: list[str] | None = None, with_baselines: bool = True) -> list[dict]:
    """One row per op (``ops``: a subset of :data:`OPS`): accel's median seconds and GB/s, and
    with the baseline torch's median and the ratio torch / accel (the goal's measure)."""
    be = accel.get_backend(backend) if isinstance(backend, str) else backend
    rows = []
    for name, ours, theirs, nbytes in cases(be, n):
        if ops is not None and name not in ops:
            continue
        contenders = [Contender(be.time, ours)] + ([Contender(host_timer, theirs)] if with_baselines else [])
        a, *t = measure_all(contenders, budget=budget)
        row = {"op": name, "n": n, "bytes": nbytes}
        if failed := [r for r in (a, *t) if isinstance(r, BaseException)]:
            row["error"] = repr(failed[0])
        else:
            row.update(accel_s=a.median, accel_gbs=nbytes / a.median / 1e9)
            if t:
                row.update(torch_s=t[0].median, ratio=t[0].median / a.median)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when an op misses the goal or failed."""
    p = argparse.ArgumentParser(prog="python -m accel.conformance.bench.decoder")
    p.add_argument("--backend", default="opencl")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--budget", choices=sorted(BUDGETS), default="quick")
    args = p.parse_args(argv)
    rows = run(args.backend, args.n, BUDGETS[args.budget])
    print(f"{'op':10} {'accel ms':>9} {'torch ms':>9} {'torch/accel':>12} {'GB/s':>7}")
    ok = True
    for r in rows:
        if "error" in r:
            ok = False
            print(f"{r['op']:10} error: {r['error']}")
            continue
        ok &= r["ratio"] >= GOAL
        print(f"{r['op']:10} {r['accel_s'] * 1e3:9.3f} {r['torch_s'] * 1e3:9.3f} "
              f"{r['ratio']:12.2f} {r['accel_gbs']:7.1f}")
    print(f"goal: torch/accel >= {GOAL} for every op: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = ["cases", "run", "main", "GOAL", "OPS"]
