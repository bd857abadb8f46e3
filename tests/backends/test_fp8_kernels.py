"""The FP8 scaled-matmul kernel (kernels/scaled_matmul.cl): its launches cover every output on
every backend's planner (no device needed); on the OpenCL devices here it decodes every byte of
every format as ml_dtypes does, and the conformance suite catches it decoding e4m3fn as e4m3fnuz;
its CUDA and HIP builds are compiled in tests/backends/cupy/test_cuda_hip.py and tests/kernels/test_check.py."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import accel
import accel.kernels as K
from accel import spec as S
from accel.backends.plan import IMPLS, DeviceFacts, Operand, Placeholder, plan_for, support
from markers import needs_opencl
from planning import gpu_plan, gpu_support, kernel_path
from accel.dtypes import FP8_DTYPES

E4, E5, FNUZ = FP8_DTYPES
#: every (a, b) format pair accel.spec allows
PAIRS = [(E4, E4), (E4, E5), (E5, E4), (FNUZ, FNUZ)]
FACTS = {"cpu": DeviceFacts("opencl", compute_units=2, local_mem=32 * 1024, mem_align_bytes=128),
         "gpu": DeviceFacts("opencl", compute_units=132, local_mem=48 * 1024, mem_align_bytes=512)}
PARAMS = {"cpu": {"scaled_matmul": K.CPU_SCALED_MATMUL},
          "gpu": {"scaled_matmul": {**K.GPU_SCALED_MATMUL, "WG": K.SCALED_MATMUL_WG}}}


def _spec(M, K_, N, scaling="row", pair=(E4, E4), out="bfloat16", bias=None):
    sa, sb = S.fp8_scale_shapes(scaling, M, K_, N)
    return S.scaled_matmul_spec((M, K_), pair[0], (K_, N), pair[1], sa, "float32", sb, "float32",
                                out, (N,) if bias else None, bias)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("M,K_,N,scaling", [(1, 1, 1, "tensor"), (7, 100, 33, "row"),
                                            (70, 256, 130, "block")])
def test_opencl_launch_covers_every_output_with_the_operands_in_order(device, M, K_, N, scaling):
    spec = _spec(M, K_, N, scaling, bias="bfloat16" if scaling == "block" else None)
    [launch] = plan_for(spec, FACTS[device], PARAMS[device])
    d = launch.variant.defines
    assert launch.kernel == "scaled_matmul" and (d["A_FP8"], d["B_FP8"]) == ("e4m3fn", "e4m3fn")
    items = [g * b for g, b in zip(launch.grid, launch.block)]
    cols, rows = items[0] * d["TN"], items[1] * d["TM"]
    assert cols >= N > cols - launch.block[0] * d["TN"] and rows >= M > rows - launch.block[1] * d["TM"]
    bias = Operand("bias") if spec.bias_dtype else Placeholder()
    assert launch.buffers == (*map(Operand, ("a", "b", "scale_a", "scale_b")), bias, Operand("out"))
    # the granularity and dtypes travel as arguments: one build per format pair
    assert [int(x) for x in launch.scalars] == [M, N, K_, K.SCALING_CODE[scaling],
                                                K.FLOAT_CODE["bfloat16"], 2 if spec.bias_dtype else -1]


@pytest.mark.parametrize("M,N", [(1, 1), (65, 129), (300, 7)])
def test_cuda_and_hip_grids_cover_every_output(M, N):
    spec = _spec(M, 128, N, "block")
    [launch] = gpu_plan(spec, impl="kernels")
    v, name, grid, block = launch.variant, launch.kernel, launch.grid, launch.block
    d = v.defines
    assert name == "scaled_matmul" and block == (K.SCALED_MATMUL_WG, K.SCALED_MATMUL_WG, 1)
    cols, rows = grid[0] * block[0] * d["TN"], grid[1] * block[1] * d["TM"]
    assert cols >= N > cols - block[0] * d["TN"] and rows >= M > rows - block[1] * d["TM"]
    assert grid[2] == 1 and "cuda" in v.dialects and d.get("VW", 1) == 1


@pytest.mark.parametrize("pair", PAIRS)
def test_every_pair_is_supported_on_every_path_and_opencl_declines_flushing_devices(pair):
    spec = _spec(5, 256, 9, "block", pair, "float16", "float32")
    for impl in IMPLS:  # the shared kernel, or FP8 tensor cores (tests/kernels/test_scaled_matmul_mma.py)
        tensorcore = impl in ("auto", "tensorcore") and FNUZ not in pair
        assert kernel_path(spec, impl, "sm_90") == ("tensorcore" if tensorcore else "kernels")
        assert kernel_path(spec, impl, "sm_80") == ("tensorcore" if impl == "tensorcore" and
                                                       FNUZ not in pair else "kernels")
        assert gpu_support(spec, impl, "sm_90").ok and gpu_support(spec, impl, "gfx90a").ok == (
            not (impl == "tensorcore" and FNUZ not in pair))
    assert support(spec, FACTS["cpu"], PARAMS["cpu"]).ok
    flushing = dataclasses.replace(FACTS["cpu"], denormals=False)
    verdict = support(spec, flushing, PARAMS["cpu"])
    assert not verdict.ok and "denormals" in verdict.reason


@needs_opencl
@pytest.mark.parametrize("pair", PAIRS)
def test_every_byte_of_both_operands_decodes_as_ml_dtypes(pair):
    # a = all 256 codes times b = 1 (then a = 1 times all codes of b): float32 out, unit scales,
    # so each output is one decoded byte, exactly (0 + x * 1 is x)
    codes = np.arange(256, dtype=np.uint8)
    one = np.float32(1)
    for side, dtype in enumerate(pair):
        fp8 = codes.view(getattr(ml_dtypes, dtype))
        other = np.ones((1, 1), getattr(ml_dtypes, pair[1 - side]))
        a, b = (fp8.reshape(256, 1), other) if side == 0 else (other, fp8.reshape(1, 256))
        got = accel.scaled_matmul(a, b, one, one, out_dtype="float32", backend="opencl:0").reshape(-1)
        want = fp8.astype(np.float32)
        assert np.array_equal(np.isnan(got), np.isnan(want)), dtype
        finite = ~np.isnan(want)
        assert np.array_equal(got[finite], want[finite]), (dtype, codes[finite][got[finite] != want[finite]])


@needs_opencl
def test_the_suite_catches_e4m3fn_decoded_as_fnuz_on_opencl(monkeypatch):
    from accel.backends.opencl import OpenCLBackend
    from accel.conformance import suite

    # the cross-vendor mix-up, planted in the real kernel: e4m3fn bytes through fnuz's decoder
    monkeypatch.setitem(K.FP8_TOKEN, E4, K.FP8_TOKEN[FNUZ])
    results = suite.run(OpenCLBackend(0), profile="quick", ops=["scaled_matmul"], dtypes=[E4])
    # every value halves (and 0x80 reads as NaN): each case fails, none errors
    assert results and {r.status for r in results} == {"failed"}, [(r.case.id, r.status) for r in results]


@needs_opencl
def test_the_gpu_tiling_runs_correctly_on_pocl(opencl_with):
    # CUDA and HIP run GPU_SCALED_MATMUL (one lane per work-item, 16 x 16 groups), which no GPU
    # checks here: the same variant on the OpenCL device passes the quick profile
    from accel.conformance import suite

    be = opencl_with(scaled_matmul={**K.GPU_SCALED_MATMUL, "WG": K.SCALED_MATMUL_WG})
    results = suite.run(be, profile="quick", ops=["scaled_matmul"], dtypes=[E5])
    assert results and all(r.status == "passed" for r in results), \
        [(r.case.id, r.reason) for r in results if r.status != "passed"]
    [launch] = plan_for(_spec(5, 33, 17), be.facts, be.params)  # what those cases ran
    assert launch.block == (K.SCALED_MATMUL_WG,) * 2 + (1,) and launch.variant.defines["VW"] == 1
