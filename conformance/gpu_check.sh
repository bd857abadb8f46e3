#!/usr/bin/env bash
# The one-command GPU run (docs/gpu.md): on a machine with one NVIDIA GPU and the packages a CUDA
# image usually has (CuPy, torch, numpy, pytest, hypothesis; no network), install accel without
# dependencies, then write into OUTDIR:
#   kernels-check.json          every shipped kernel variant compiled for this GPU's arch
#   conformance-cuda.json       quick conformance profile, shared-dialect kernels (impl=kernels)
#   conformance-cuda-vendor.json  the same for matmul through cuBLAS (impl=vendor)
#   conformance-cuda-tensorcore.json  float16/bfloat16 matmul on tensor cores (impl=tensorcore),
#                               full profile: multi-tile shapes, both the cp.async and the any-shape
#                               kernel of kernels/matmul_wmma.cu
#   bench-cuda.json             `accel bench --backend cuda` (impl=auto: tensor cores for 16-bit matmul)
#   speed-goals-cuda.json       the issue's speed goals as ratios measured in this run
# Each step has its own time limit so the whole run stays within 5 minutes; a failed step is
# reported and the others still run. Exit status: 0 when every step succeeded.
#
# usage: conformance/gpu_check.sh OUTDIR   (PYTHON=python3 by default)
set -u -o pipefail

OUT=${1:?usage: conformance/gpu_check.sh OUTDIR}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
failed=()

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - t0))s"
    [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
}

step install 60 "$PY" -m pip install --no-deps --no-build-isolation --no-index -e .
step info 30 "$PY" -m accel info --width 160
if ! ARCH=$("$PY" -c "import accel; print(accel.get_backend('cuda').arch)"); then
    echo "gpu_check: the cuda backend is unavailable here (reason above); nothing to run"
    exit 1
fi
step kernels-check 60 "$PY" -m accel kernels check --targets "$ARCH" --json "$OUT/kernels-check.json"
step conformance-kernels 90 env ACCEL_CUDA_IMPL=kernels \
    "$PY" -m accel conformance --backend cuda --profile quick --no-progress --json "$OUT/conformance-cuda.json"
step conformance-vendor 45 env ACCEL_CUDA_IMPL=vendor "$PY" -m accel conformance --backend cuda \
    --profile quick --ops matmul --no-progress --json "$OUT/conformance-cuda-vendor.json"
step conformance-tensorcore 60 env ACCEL_CUDA_IMPL=tensorcore "$PY" -m accel conformance --backend cuda \
    --profile full --ops matmul --dtypes float16 bfloat16 --no-progress \
    --json "$OUT/conformance-cuda-tensorcore.json"
step bench 60 "$PY" -m accel bench --backend cuda --sizes quick --json "$OUT/bench-cuda.json"
step speed-goals 60 "$PY" - "$OUT/speed-goals-cuda.json" <<'PYTHON'
"""The issue's speed goals, each a ratio of two timings taken here, in this run, on this GPU,
with device events; every timed result is checked against its baseline's before it counts."""
import json
import statistics
import sys

import cupy
import numpy as np
import torch

import accel
from accel import spec as S
from accel.ops import execute
from accel.tensor import Tensor

be = accel.get_backend("cuda")
goals = []


def timed(fn, reps=10):
    for _ in range(2):
        fn()
    return statistics.median(be.time(fn) for _ in range(reps))


def adopt(x, dtype):
    return Tensor(be, be.import_array(x), tuple(x.shape), dtype)


def rel_err(got, ref):
    got, ref = got.float(), ref.float()
    return float((got - ref).norm() / ref.norm())


def goal(name, fn):
    try:
        entry = fn()
        entry["met"] = entry["ratio"] >= entry["goal"] and entry["rel_err"] <= entry["max_rel_err"]
    except Exception as e:  # report and go on: one broken goal must not hide the others
        entry = {"error": f"{type(e).__name__}: {e}", "met": False}
    entry["name"] = name
    goals.append(entry)
    print(json.dumps(entry))


def matmul_goal(dtype, baseline_name, target, impl):
    be.impl = impl
    N = 4096
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    a = torch.randn(N, N, device="cuda", dtype=tdt)
    b = torch.randn(N, N, device="cuda", dtype=tdt)
    spec = S.matmul_spec((N, N), dtype, (N, N), dtype)
    out = torch.empty(N, N, device="cuda", dtype=tdt)
    ta, tb, to = adopt(a, dtype), adopt(b, dtype), adopt(out, dtype)
    t_accel = timed(lambda: execute(be, spec, ta, tb, out=to))
    if dtype == "float32":  # cuBLAS SGEMM through CuPy, never tf32 (CUPY_TF32 unset)
        ca, cb = cupy.from_dlpack(a), cupy.from_dlpack(b)
        t_base = timed(lambda: cupy.matmul(ca, cb))
        ref = torch.from_dlpack(cupy.matmul(ca, cb))
    else:  # cuBLAS bf16 GEMM (tensor cores) through torch
        t_base = timed(lambda: torch.matmul(a, b))
        ref = torch.matmul(a, b)
    return {"impl": impl, "accel_s": t_accel, "baseline": baseline_name, "baseline_s": t_base,
            "ratio": t_base / t_accel, "goal": target, "tflops": spec.flops / t_accel / 1e12,
            "rel_err": rel_err(out, ref), "max_rel_err": 1e-4 if dtype == "float32" else 1e-2}


def attention_goal():
    B, H, Sq, D = 4, 16, 2048, 64
    q, k, v = (torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    spec = S.attention_spec(q.shape, k.shape, v.shape, ("bfloat16",) * 3)
    out = torch.empty_like(q)
    tq, tk, tv, to = (adopt(x, "bfloat16") for x in (q, k, v, out))
    t_accel = timed(lambda: execute(be, spec, tq, tk, tv, None, out=to))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    t_base = timed(lambda: sdpa(q, k, v))
    return {"accel_s": t_accel, "baseline": "torch scaled_dot_product_attention",
            "baseline_s": t_base, "ratio": t_base / t_accel, "goal": 0.4,
            "rel_err": rel_err(out, sdpa(q, k, v)), "max_rel_err": 2e-2}


def gemv_goal():
    N = K = 8192
    w = np.random.default_rng(0).standard_normal((N, K)).astype(np.float32)
    qw = accel.quantize(w, "q4_0", backend=be)  # quantized on the GPU by accel's kernel
    x = torch.randn(1, K, device="cuda", dtype=torch.float32)
    spec = S.qmatmul_spec((1, K), "float32", (N, K), qw.format)
    out = torch.empty(1, N, device="cuda", dtype=torch.float32)
    tx, to = adopt(x, "float32"), adopt(out, "float32")
    t_accel = timed(lambda: execute(be, spec, tx, qw.data, out=to))
    src = cupy.empty(1 << 30, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    t_copy = timed(lambda: dst.__setitem__(Ellipsis, src))
    copy_bw = 2 * src.nbytes / t_copy  # bytes read + written per second
    wf = torch.from_dlpack(cupy.asarray(accel.dequantize(qw)))
    return {"accel_s": t_accel, "baseline": "device copy bandwidth (1 GiB, read + write)",
            "baseline_s": t_copy, "gemv_bytes_per_s": spec.bytes / t_accel, "copy_bytes_per_s": copy_bw,
            "ratio": spec.bytes / t_accel / copy_bw, "goal": 0.6,
            "rel_err": rel_err(out, x @ wf.T), "max_rel_err": 1e-4}


goal("float32 matmul N=4096, shared-dialect kernel vs cuBLAS SGEMM",
     lambda: matmul_goal("float32", "cuBLAS SGEMM (cupy.matmul)", 0.5, "kernels"))
goal("bfloat16 matmul N=4096, accel's tensor-core kernel (WMMA) vs cuBLAS (tensor cores)",
     lambda: matmul_goal("bfloat16", "cuBLAS bf16 GEMM (torch.matmul)", 0.6, "tensorcore"))
goal("bfloat16 attention B=4 H=16 S=2048 D=64 vs torch SDPA", attention_goal)
goal("q4_0 GEMV N=K=8192: bytes read per second vs device copy bandwidth", gemv_goal)
doc = {"schema": "accel.gpu_speed_goals/1", "device": be.info.name, "arch": be.arch,
       "versions": {**be.versions(), "torch": torch.__version__}, "goals": goals}
with open(sys.argv[1], "w") as f:
    json.dump(doc, f, indent=1)
for g in goals:
    verdict = "MET" if g["met"] else "NOT MET"
    print(f"{verdict:8} {g['name']}: " + (f"ratio {g['ratio']:.3f} (goal {g['goal']})"
                                          if "ratio" in g else g["error"]))
PYTHON

if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu_check: every step succeeded; results in $OUT"
    exit 0
fi
echo "gpu_check: failed steps: ${failed[*]}; results in $OUT"
exit 1
