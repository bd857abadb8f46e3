"""The one planner (backends/plan.py) against the two it replaces (backends/opencl/plan.py and
backends/cupy/plan.py with the CuPy backend's own sequencing of multi-launch ops): over a grid
of specs x {PoCL CPU, an OpenCL GPU, sm_80, sm_90, gfx90a} x implementation choices x operand
alignments, the same launches (variant, kernel, grid, block, argument slots, scalars) and the
same supports() verdicts. Written before the old planners go; it goes with them."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import accel.kernels as K
from accel import spec as S
from accel.backends import plan as P
from accel.backends.cupy import plan as CP
from accel.backends.opencl import plan as OP
from accel.formats import get_format

FORMATS = K.KERNEL_FORMATS + K.KQUANT_FORMATS + K.CODEBOOK_FORMATS


def _specs() -> list:
    f32 = ("float32",) * 3
    out = []
    for dt in ("float32", "float16", "bfloat16", "int8"):
        for a, b in (((5, 300), (300, 7)), ((3, 37, 64), (64, 304)), ((128, 256), (256, 512)),
                     ((2, 1, 8, 16), (3, 16, 4))):
            out.append(S.matmul_spec(a, dt, b, dt))
    for dt, d, dv in (("float32", 64, 64), ("float16", 128, 128), ("bfloat16", 64, 64),
                      ("float16", 80, 80), ("float32", 256, 256), ("float32", 512, 512),
                      ("float32", 576, 512)):
        for q, kv in (((1, 8, 1, d), (1, 2, 4096, d)), ((2, 4, 77, d), (2, 4, 77, d)),
                      ((1, 32, 1, d), (1, 8, 9, d))):
            dts = (dt,) * 3
            out.append(S.attention_spec(q, kv[:3] + (d,), kv[:3] + (dv,), dts))
            out.append(S.attention_spec(q, kv[:3] + (d,), kv[:3] + (dv,), dts, causal=True,
                                        mask_shape=(1, 1, q[2], kv[2]), mask_dtype="bool"))
    for kw in (dict(window=4, causal=True), dict(softcap=30.0), dict(sinks_shape=(8,), sinks_dtype="float32")):
        out.append(S.attention_spec((1, 8, 1, 64), (1, 2, 700, 64), (1, 2, 700, 64), f32, **kw))
        out.append(S.attention_spec((1, 8, 16, 64), (1, 8, 16, 64), (1, 8, 16, 64), ("float16",) * 3, **kw))
    out.append(S.attention_spec((1, 4, 16, 64), (1, 4, 16, 64), (1, 4, 16, 64), ("float16",) * 3,
                                mask_shape=(1, 4, 16, 16), mask_dtype="float16", scale=1e38))
    for name in FORMATS:
        fmt = get_format(name)
        k = 512 if fmt.block <= 256 else fmt.block * 2
        for dt in ("float32", "float16"):
            out.append(S.quantize_spec((4, k), dt, fmt))
        out.append(S.dequantize_spec((4, k), fmt))
        for m in (1, 3, 8, 9, 64):
            out.append(S.qmatmul_spec((m, k), "float32", (300, k), fmt))
            if fmt.vec_dot is not None:
                out.append(S.qmatmul_spec((m, k), "float32", (300, k), fmt, fmt.vec_dot))
        out.append(S.qmatmul_spec((2, k), "bfloat16", (64, k), fmt))
    for a, b in (("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn"),
                 ("float8_e4m3fnuz", "float8_e4m3fnuz")):
        for m, k, n in ((4, 256, 128), (5, 40, 24)):
            out.append(S.scaled_matmul_spec((m, k), a, (k, n), b, (), "float32", (), "float32"))
            out.append(S.scaled_matmul_spec((m, k), a, (k, n), b, (m, 1), "float32", (1, n), "float32",
                                            bias_shape=(n,), bias_dtype="bfloat16"))
    return out


SPECS = _specs()


def _slot(slot) -> tuple:
    name = type(slot).__name__
    if name in ("Operand",):
        return ("operand", slot.name)
    if name == "Scratch":
        return ("scratch", slot.nbytes)
    if name == "Upload":
        return ("upload", slot.host.tobytes())
    return ("placeholder",)


def _scalars(values) -> tuple:
    return tuple((np.asarray(v).dtype.str, np.asarray(v).item()) for v in values)


def _new(plan) -> list:
    return [(launch.variant, launch.kernel, launch.grid, launch.block,
             tuple(map(_slot, launch.buffers)), _scalars(launch.scalars)) for launch in plan]


def _pad(t) -> tuple:
    t = tuple(t)
    return t + (1,) * (3 - len(t))


# -- OpenCL: the old planner's records in the new terms -------------------------------------------
OPENCL = {
    "pocl": (OP.DeviceFacts(compute_units=2, local_mem=256 * 1024, mem_align_bytes=128,
                            correctly_rounded_divide=True, denormals=True, fp64=True),
             P.DEFAULT_TILES["cpu"]),
    "gpu": (OP.DeviceFacts(compute_units=132, local_mem=48 * 1024, mem_align_bytes=512,
                           correctly_rounded_divide=True, denormals=True, fp64=True),
            P.DEFAULT_TILES["gpu"]),
    "flushing": (OP.DeviceFacts(compute_units=16, local_mem=32 * 1024, mem_align_bytes=128,
                                correctly_rounded_divide=False, denormals=False, fp64=False),
                 P.DEFAULT_TILES["gpu"]),
}


def _old_opencl(plan) -> list:
    return [(launch.variant, launch.kernel,
             _pad(g // b for g, b in zip(launch.gsize, launch.lsize)), _pad(launch.lsize),
             tuple(map(_slot, launch.buffers)), _scalars(launch.scalars)) for launch in plan]


@pytest.mark.parametrize("device", OPENCL)
def test_opencl_plans_and_verdicts_match_the_old_planner(device):
    old_facts, tiles = OPENCL[device]
    facts = P.DeviceFacts("opencl", old_facts.compute_units, old_facts.local_mem,
                          old_facts.mem_align_bytes, old_facts.correctly_rounded_divide,
                          old_facts.denormals, old_facts.fp64)
    compared = 0
    for spec in SPECS:
        old, new = OP.support(spec, old_facts, tiles), P.support(spec, facts, tiles)
        assert old.ok == new.ok, (spec, old, new)
        if old.ok:
            assert _new(P.plan_for(spec, facts, tiles)) == _old_opencl(OP.plan_for(spec, old_facts, tiles)), spec
            compared += 1
    assert compared > len(SPECS) // 2


# -- CUDA and HIP: the old planner plus the CuPy backend's op methods, device-free ------------------
def _args(spec, op_inputs: tuple, splits=None) -> tuple:
    """CuPyBackend.kernel_args's buffers by name (None: its placeholder buffer)."""
    slot = (lambda n: ("placeholder",) if n is None else ("operand", n))
    if spec.op == "matmul":
        return (*map(slot, op_inputs), slot("out"), ("upload", spec.batch_offsets().tobytes()))
    if spec.op == "attention":
        q, k, v, mask, sinks = op_inputs
        return tuple(map(slot, (q, k, v, "out", mask))) + (splits or ("placeholder",), slot(sinks))
    if spec.op == "scaled_matmul":
        *operands, bias = op_inputs
        return (*map(slot, operands), slot(bias), slot("out"))
    return (*map(slot, op_inputs), slot("out"))


def _record(spec, variant, name, args, chunks=1, scalars=None) -> tuple:
    planned, grid, block = CP.launch_plan(spec, variant, name, chunks)
    return (variant, name or planned, tuple(grid), tuple(block), tuple(args),
            _scalars(K.scalar_args(spec) if scalars is None else scalars))


def _old_cupy(spec, impl: str, arch: str, align: int, units: int) -> list:
    """The launches CuPyBackend's op method for ``spec`` made (before the one planner)."""
    mask = "mask" if spec.op == "attention" and spec.mask_shape is not None else None
    inputs = {"matmul": ("a", "b"), "attention": ("q", "k", "v", mask, "sinks" if getattr(spec, "sinks", False) else None),
              "quantize": ("x",), "dequantize": ("q",), "qmatmul": ("x", "w"),
              "scaled_matmul": ("a", "b", "scale_a", "scale_b",
                                "bias" if getattr(spec, "bias_dtype", None) else None)}[spec.op]
    path = CP.kernel_path(spec, impl, arch)
    if path == "tensorcore":
        chosen = CP.tensorcore_kernel(spec, arch, align, align, align)
        if chosen is not None:
            tc_inputs = inputs[:4] + (None,) if spec.op == "attention" else inputs
            return [_record(spec, chosen[0], chosen[1], _args(spec, tc_inputs))]
    if spec.op == "attention":
        v = CP.kernel_variant(spec)
        chunks = K.attention_chunks(spec, v.defines, units)
        if chunks == 1:
            return [_record(spec, v, None, _args(spec, inputs))]
        splits = ("scratch", K.attention_splits_bytes(spec, chunks))
        sinks = ("operand", "sinks") if spec.sinks else ("placeholder",)
        return [_record(spec, v, None, _args(spec, inputs, splits), chunks),
                _record(spec, v, "attention_combine", (splits, ("operand", "out"), sinks), chunks,
                        K.attention_combine_args(spec, chunks))]
    if spec.op == "qmatmul" and spec.fmt.name in K.KQUANT_FORMATS and spec.x_fmt is not None:
        xspec = S.quantize_spec((spec.M, spec.K), spec.dtype, spec.x_fmt)
        xq = ("scratch", spec.M * spec.K // spec.x_fmt.block * spec.x_fmt.block_bytes)
        return [_record(xspec, CP.kernel_variant(xspec), None, (("operand", "x"), xq)),
                _record(spec, CP.kernel_variant(spec), None, (xq, ("operand", "w"), ("operand", "out")))]
    if spec.op == "qmatmul" and spec.x_fmt is not None:
        v = CP.kernel_variant(spec)
        nbytes, count = K.x8_words(spec)
        words = ("scratch", nbytes)
        return [_record(spec, v, "quantize_x8", (("operand", "x"), words), scalars=count),
                _record(spec, v, None, (words, ("operand", "w"), ("operand", "out")))]
    name = None
    if spec.op == "qmatmul" and spec.fmt.name in K.KERNEL_FORMATS and K.gemv_applies(spec, K.GPU_GEMV):
        name = K.gemv_kernel(spec.fmt.name, spec.K, K.GPU_GEMV, x_addr=align, w_addr=align,
                             local_mem=CP.STATIC_SHARED_MAX)
    return [_record(spec, CP.kernel_variant(spec), name, _args(spec, inputs))]


@pytest.mark.parametrize("arch,impl", list(itertools.product(("sm_80", "sm_90", "gfx90a"),
                                                             ("auto", "kernels", "tensorcore"))))
def test_cuda_and_hip_plans_and_verdicts_match_the_old_planner(arch, impl):
    runtime = "hip" if arch.startswith("gfx") else "cuda"
    units = 132
    facts = P.DeviceFacts(runtime, units, CP.STATIC_SHARED_MAX, 256, arch=arch, impl=impl,
                          tensorcore_missing=CP._wmma_header_missing() if runtime == "cuda" else None)
    compared = 0
    for spec in SPECS:
        old, new = CP.support_for(spec, impl, arch), P.support(spec, facts, P.DEFAULT_TILES["gpu"])
        assert old.ok == new.ok, (spec, old, new)
        if not old.ok:
            continue
        for align in (256, 2):
            want = _old_cupy(spec, impl, arch, align, units)
            got = _new(P.plan_for(spec, facts, P.DEFAULT_TILES["gpu"], align=align))
            assert got == want, (spec, align)
        compared += 1
    assert compared > len(SPECS) // 2
