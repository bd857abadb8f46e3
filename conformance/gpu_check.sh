#!/usr/bin/env bash
# The one-command GPU run (docs/gpu.md): on a machine with one NVIDIA GPU and the packages a CUDA
# image usually has (CuPy, torch, numpy, pytest, hypothesis; no network), install accel without
# dependencies, then write into OUTDIR:
#   kernels-check.json          every shipped kernel variant compiled for this GPU's arch
#   conformance-cuda.json       quick conformance profile, shared-dialect kernels (impl=kernels),
#                               the K-quants and mxfp4 included (their quantize bytes judged by
#                               the CPU reference's quantizer where ggml-python is absent)
#   conformance-cuda-vendor.json  the same for matmul through cuBLAS (impl=vendor)
#   conformance-cuda-gemv-stream.json  quantized matmul (full profile) with the streaming GEMV
#                               kernel (ACCEL_GEMV_KERNEL=qgemv_stream) where it applies
#   conformance-cuda-gemv-runs.json  the same with qgemv_runs (ACCEL_GEMV_KERNEL=qgemv_runs)
#   conformance-cuda-tensorcore.json  float16/bfloat16 matmul and attention on tensor cores
#                               (impl=tensorcore), full profile: multi-tile shapes, aligned and
#                               unaligned operands, so every tensor-core kernel runs (wgmma on sm_90,
#                               WMMA's cp.async and any-shape kernels, attention_mma.cu)
#   conformance-cuda-fp8-tensorcore.json  FP8 scaled_matmul of e4m3fn/e5m2 on tensor cores
#                               (impl=tensorcore: kernels/scaled_matmul_mma.cu, sm_89 and later),
#                               full profile: every pair and scale granularity, both its any-shape
#                               and its cp.async kernel, special values; e4m3fnuz stays on
#                               scaled_matmul.cl (the conformance-kernels step runs that)
#   (torch-streams step)        tests/accel/test_torch_streams_gpu.py: accel ordered on torch's stream
#   bench-cuda.json             `accel bench --backend cuda` (impl=auto: tensor cores for 16-bit ops)
#   speed-goals-cuda.json       the issue's speed goals as ratios measured in this run, with the
#                               alternatives timed too (accel.conformance.bench.gpu_goals)
#   profile-gemv.log            where Nsight Compute (ncu) is installed: the GEMV goal's kernel
#                               profiled (throughputs, occupancy, scheduler and warp-stall
#                               statistics, stall sampling by instruction)
#   profile-gemv-runs.log       the same for qgemv_runs (ACCEL_GEMV_KERNEL=qgemv_runs)
#   profile-gemv-x8.log         the same for qgemv_x8 (qmatmul with x_format="q8_0")
# The whole run took 149 s on an H200 before the speed goals timed their 21 GEMV alternatives
# (qgemv, qgemv_stream, qgemv_runs, the x_format op and qgemv_x8), the 4 GEMV diagnostics and the
# decode survey, and before the second and third profiles, the qgemv_runs conformance, the FP8
# tensor-core conformance and the FP8 speed goal (together about three minutes more, by estimate; the GEMV goal's 20 parameter sets and the decode
# survey's 5 are now compiled in parallel; the issue asks for 5 minutes); each step has
# its own time limit so that a hung step cannot stall the rest, and a failed step is reported
# while the others still run. Exit status: 0 when every step but the diagnostic profiles succeeded.
#
# usage: conformance/gpu_check.sh OUTDIR   (PYTHON=python3 by default; ACCEL_COMMIT=<hash> names
# the commit in the results where the checkout's .git is not current)
set -u -o pipefail

OUT=${1:?usage: conformance/gpu_check.sh OUTDIR}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
failed=()

step() {  # step [--diagnostic] NAME SECONDS COMMAND...: run with a time limit, log to
          # OUT/NAME.log; a diagnostic step's failure is reported, not counted
    local diagnostic=0
    if [ "$1" = "--diagnostic" ]; then diagnostic=1; shift; fi
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - t0))s"
    [ "$rc" -eq 0 ] || [ "$diagnostic" -eq 1 ] || failed+=("$name (exit $rc)")
}

# what accel imports and this run uses; a CUDA image usually has them, and without a network a
# missing one must be brought as a wheel (the message says which)
"$PY" - <<'PYTHON' || exit 1
import importlib.util, sys
need = ("numpy", "ml_dtypes", "rich", "hypothesis", "cupy", "torch", "pytest")
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages: {', '.join(missing)} "
             "(install them, or bring their wheels: pip install --no-index --no-deps WHEEL...)")
PYTHON
step install 60 "$PY" -m pip install --no-deps --no-build-isolation --no-index -e .
step info 30 "$PY" -m accel info --width 160
if ! ARCH=$("$PY" -c "import accel; print(accel.get_backend('cuda').arch)"); then
    echo "gpu_check: the cuda backend is unavailable here (reason above); nothing to run"
    exit 1
fi
step kernels-check 60 "$PY" -m accel kernels check --targets "$ARCH" --json "$OUT/kernels-check.json"
step conformance-kernels 90 env ACCEL_CUDA_IMPL=kernels \
    "$PY" -m accel conformance --backend cuda --profile quick --no-progress --json "$OUT/conformance-cuda.json"
step conformance-gemv-stream 60 env ACCEL_CUDA_IMPL=kernels ACCEL_GEMV_KERNEL=qgemv_stream \
    "$PY" -m accel conformance --backend cuda --profile full --ops qmatmul --no-progress \
    --json "$OUT/conformance-cuda-gemv-stream.json"
step conformance-gemv-runs 60 env ACCEL_CUDA_IMPL=kernels ACCEL_GEMV_KERNEL=qgemv_runs \
    "$PY" -m accel conformance --backend cuda --profile full --ops qmatmul --no-progress \
    --json "$OUT/conformance-cuda-gemv-runs.json"
step conformance-vendor 45 env ACCEL_CUDA_IMPL=vendor "$PY" -m accel conformance --backend cuda \
    --profile quick --ops matmul --no-progress --json "$OUT/conformance-cuda-vendor.json"
step conformance-tensorcore 90 env ACCEL_CUDA_IMPL=tensorcore "$PY" -m accel conformance --backend cuda \
    --profile full --ops matmul attention --dtypes float16 bfloat16 --no-progress \
    --json "$OUT/conformance-cuda-tensorcore.json"
step conformance-fp8-tensorcore 60 env ACCEL_CUDA_IMPL=tensorcore "$PY" -m accel conformance \
    --backend cuda --profile full --ops scaled_matmul --dtypes float8_e4m3fn float8_e5m2 \
    --no-progress --json "$OUT/conformance-cuda-fp8-tensorcore.json"
step torch-streams 60 "$PY" -m pytest -q -p no:cacheprovider tests/accel/test_torch_streams_gpu.py
step bench 60 "$PY" -m accel bench --backend cuda --sizes quick --json "$OUT/bench-cuda.json"
step speed-goals 270 "$PY" -m accel.conformance.bench.gpu_goals "$OUT/speed-goals-cuda.json"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
profile() {  # step NAME, KERNEL's second launch (the first loads it), caches flushed per pass,
             # with ACCEL_GEMV_KERNEL=GEMV (the float-x GEMV that impl=auto runs)
    local name=$1 kernel=$2 gemv=$3
    shift 3
    step --diagnostic "$name" 90 env ACCEL_GEMV_KERNEL="$gemv" \
        "$NCU" --clock-control none --kernel-name "regex:^$kernel\$" \
        --launch-skip 1 --launch-count 1 --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section SchedulerStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SourceCounters \
        "$PY" -m accel.conformance.bench.gpu_goals --gemv-once "$@"
}
if [ -n "$NCU" ]; then
    profile profile-gemv qgemv qgemv
    profile profile-gemv-runs qgemv_runs qgemv_runs
    profile profile-gemv-x8 qgemv_x8 qgemv q8_0
else
    echo "== profile-gemv, profile-gemv-runs, profile-gemv-x8: skipped, Nsight Compute (ncu) is not installed"
fi

if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu_check: every step succeeded; results in $OUT"
    exit 0
fi
echo "gpu_check: failed steps: ${failed[*]}; results in $OUT"
exit 1
