"""The one launch planner (backends/plan.py) for OpenCL devices, without a device: which kernels
a spec runs, with which grids, buffer slots and constant arguments, and the supports() verdicts,
for device facts written by hand (CUDA and HIP plans: tests/backends/cupy/test_cuda_hip.py and the tensor-core
tests). Nothing here imports a vendor package: the plans are data."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import accel.kernels as K
from accel import spec as S
from accel.backends.plan import (DEFAULT_TILES, OPERANDS, DeviceFacts, Launch, Operand, Placeholder,
                                 Scratch, Upload, plan_for, support)
from accel.errors import DTypeError, ShapeError
from accel.formats import get_format

CPU_PARAMS, GPU_PARAMS = DEFAULT_TILES["cpu"], DEFAULT_TILES["gpu"]
CPU = DeviceFacts("opencl", compute_units=2, local_mem=32 * 1024, mem_align_bytes=128)
GPU = DeviceFacts("opencl", compute_units=132, local_mem=48 * 1024, mem_align_bytes=512)
DEVICES = {"cpu": (CPU, CPU_PARAMS), "gpu": (GPU, GPU_PARAMS)}
Q4, Q8 = get_format("q4_0"), get_format("q8_0")


def _items(launch: Launch) -> tuple[int, ...]:
    """Work-items per dimension (OpenCL's global size)."""
    return tuple(g * b for g, b in zip(launch.grid, launch.block))


def _defines(params: dict) -> dict:
    """Tile parameters without the work-group size, which is no kernel define."""
    return {k: v for k, v in params.items() if k != "WG"}


def _covers(launch: Launch, items: int) -> None:
    """A one-dimensional launch has a work-item per item, short of one more group."""
    assert launch.block == (64, 1, 1) and items <= _items(launch)[0] < items + 64, (launch, items)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_shape,b_shape", [((5, 300), (300, 7)), ((3, 37, 70), (70, 301)),
                                             ((2, 1, 8, 16), (3, 16, 4))])
def test_matmul_launch_covers_every_output_once_per_batch(device, a_shape, b_shape):
    facts, params = DEVICES[device]
    spec = S.matmul_spec(a_shape, "float32", b_shape, "float32")
    [launch] = plan_for(spec, facts, params)
    p = params["matmul"]
    groups = launch.grid
    if p["LOCAL_TILE"]:  # a group per WG_M*TM x WG_N*TN tile, columns along dimension 0
        rows, cols = groups[1] * p["WG_M"] * p["TM"], groups[0] * p["WG_N"] * p["TN"]
        assert rows - p["WG_M"] * p["TM"] < spec.M <= rows and cols - p["WG_N"] * p["TN"] < spec.N <= cols
    else:  # a work-item per TM x TN block, rows along dimension 0
        rows, cols = _items(launch)[0] * p["TM"], _items(launch)[1] * p["TN"]
        assert rows - p["TM"] < spec.M <= rows and cols - p["TN"] < spec.N <= cols
    assert launch.grid[2] == spec.batch and launch.block[2] == 1
    assert (launch.kernel, launch.variant) == ("matmul", K.matmul("float32", "float32", p))
    *operands, offsets = launch.buffers
    assert operands == [Operand("a"), Operand("b"), Operand("out")] and isinstance(offsets, Upload)
    np.testing.assert_array_equal(offsets.host, spec.batch_offsets())
    assert launch.scalars == K.scalar_args(spec) and launch.what == f"matmul {launch.variant.id}"


def _decode(Sk: int = 4096, mask: bool = False) -> S.AttentionSpec:
    q, kv = (1, 32, 1, 128), (1, 8, Sk, 128)
    return S.attention_spec(q, kv, kv, ("float32",) * 3, mask_shape=(1, Sk) if mask else None,
                            mask_dtype="bool" if mask else None)


@pytest.mark.parametrize("mask", [False, True], ids=["no-mask", "mask"])
def test_decoding_attention_splits_keys_then_combines_through_one_scratch(mask):
    spec = _decode(mask=mask)
    attend, combine = plan_for(spec, GPU, GPU_PARAMS)
    chunks = K.attention_chunks(spec, attend.variant.defines, GPU.compute_units)
    assert chunks > 1 and (attend.kernel, combine.kernel) == ("attention", "attention_combine")
    splits = Scratch("splits", K.attention_splits_bytes(spec, chunks))
    assert attend.buffers == (*(Operand(n) for n in ("q", "k", "v", "out")),
                              Operand("mask") if mask else Placeholder(), splits, Placeholder())
    assert combine.buffers == (splits, Operand("out"), Placeholder())
    assert combine.variant == attend.variant
    (tiles, heads, batch), items = K.attention_grid(spec, attend.variant.defines, chunks)
    assert attend.grid == (tiles, heads, batch) and attend.block == (items, 1, 1)
    assert tiles % chunks == 0 and attend.scalars == (*K.scalar_args(spec), chunks)
    outputs = spec.B * spec.Hkv * K.attention_rows(spec) * spec.Dv
    _covers(combine, outputs)
    assert combine.scalars == K.attention_combine_args(spec, chunks) == (4, chunks, 1, 8, outputs)


def test_attention_with_sinks_reads_them_in_both_launches():
    spec = S.attention_spec((1, 32, 1, 128), (1, 8, 4096, 128), (1, 8, 4096, 128),
                            ("float32",) * 3, True, None, None, None, 1024, 30.0, (32,), "float32")
    attend, combine = plan_for(spec, GPU, GPU_PARAMS)
    assert attend.variant.defines["SINKS"] == 1 and attend.buffers[-1] == Operand("sinks")
    assert combine.buffers[-1] == Operand("sinks")
    assert attend.scalars[-3:-1] == (1024, np.float32(30.0))  # window, softcap; then chunks


def test_attention_sizes_key_chunks_for_the_units_parameter_over_the_device():
    spec = _decode()
    assert len(plan_for(spec, CPU, CPU_PARAMS)) == 1  # 8 kv heads already fill 2 units
    wide = {**CPU_PARAMS, "attention": {**K.CPU_ATTENTION, "UNITS": 64}}
    attend, _ = plan_for(spec, CPU, wide)
    assert "UNITS" not in attend.variant.defines  # a launch choice, not a kernel define


def test_attention_without_chunks_is_one_launch_with_placeholders():
    spec = S.attention_spec((2, 4, 37, 64), (2, 4, 100, 64), (2, 4, 100, 32), ("float16",) * 3)
    [launch] = plan_for(spec, CPU, CPU_PARAMS)
    assert launch.buffers[4:] == (Placeholder(),) * 3  # mask, splits, sinks
    d = launch.variant.defines
    assert d["BQ"] == K.CPU_ATTENTION["BQ"] and d["VW"] == 16  # Dv = 32, BQ = 32: full width
    (tiles, heads, batch), items = K.attention_grid(spec, d)
    assert launch.grid == (tiles, 4, 2) and launch.block == (1, 1, 1) == (items, 1, 1)
    assert tiles * d["BQ"] >= K.attention_rows(spec) == 37


def test_decoding_attention_on_a_cpu_takes_a_tile_no_taller_than_its_rows():
    spec = S.attention_spec((1, 6, 1, 24), (1, 2, 10, 24), (1, 2, 10, 24), ("float32",) * 3)
    [launch] = plan_for(spec, CPU, CPU_PARAMS)
    assert launch.variant.defines["BQ"] == 4 and launch.variant.defines["VW"] == 4  # 3 rows; 24 = 8*3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M", [1, 8, 9, 40])
def test_x_format_qmatmul_quantizes_x_into_words_then_multiplies_them(device, M):
    facts, params = DEVICES[device]
    spec = S.qmatmul_spec((M, 256), "float32", (301, 256), Q4, "q8_0")
    quantize, dot = plan_for(spec, facts, params)
    nbytes, count = K.x8_words(spec)
    words = Scratch("words", nbytes)
    assert quantize.kernel == "quantize_x8" and quantize.buffers == (Operand("x"), words)
    assert quantize.scalars == count == (M * 256 // 32,)
    _covers(quantize, int(count[0]))
    assert dot.buffers == (words, Operand("w"), Operand("out")) and dot.variant == quantize.variant
    gemv = device == "gpu" and M <= K.GEMV_MAX_M
    assert dot.kernel == ("qgemv_x8" if gemv else "qmatmul_x8") and dot.what == f"qmatmul ({dot.kernel})"
    p = params["gemv" if gemv or M == 1 else "qmatmul"]  # GEMV parameters for one row, on CPUs too
    # qmatmul_x8 takes its own weight rows where the set names them (CPU_QMATMUL's X8RN)
    assert dot.variant == K.quant("q4_0", "float32", {**_defines(p), "RN": p.get("X8RN", p["RN"])})
    if gemv:  # quant.cl's GEMV launch contract
        (groups_n, groups_m), items = K.gemv_launch("qgemv_x8", p, spec.N, M)
        assert dot.grid == (groups_n, groups_m, 1) and dot.block == (items, 1, 1)
    else:  # a work-item per RM rows of x by RN weight rows, WG per group along N
        wg = p.get("WG", 1)
        rn = p.get("X8RN", p["RN"])
        assert dot.block == (wg, 1, 1) and dot.grid == (K.ceil_div(K.ceil_div(spec.N, rn), wg),
                                                        K.ceil_div(M, p["RM"]), 1)


@pytest.mark.parametrize("M, rows", [(2, 2), (3, 4), (4, 4), (9, 4)])
def test_qmatmul_takes_no_more_rows_per_work_item_than_x_has(M, rows):
    spec = S.qmatmul_spec((M, 64), "float32", (8, 64), Q4)
    [launch] = plan_for(spec, CPU, CPU_PARAMS)
    assert launch.kernel == "qmatmul" and launch.variant.defines["RM"] == rows
    assert launch.grid[1] == K.ceil_div(M, rows)


def test_qmatmul_reads_x_directly_without_an_x_format():
    spec = S.qmatmul_spec((9, 64), "float16", (8, 64), Q8)
    [launch] = plan_for(spec, GPU, GPU_PARAMS)
    assert launch.kernel == "qmatmul" and launch.buffers == tuple(Operand(n) for n in ("x", "w", "out"))
    assert launch.variant == K.quant("q8_0", "float16", K.GPU_QMATMUL)  # WG is not a define
    assert launch.block == (64, 1, 1) and launch.grid == (1, 9, 1) and launch.scalars == (9, 8, 64)


def test_the_gemv_kernel_follows_the_device_alignment(monkeypatch):
    monkeypatch.setenv("ACCEL_GEMV_KERNEL", "qgemv_stream")  # needs x 16-byte aligned
    spec = S.qmatmul_spec((1, 8192), "float32", (301, 8192), Q4)
    assert plan_for(spec, GPU, GPU_PARAMS)[0].kernel == "qgemv_stream"
    [launch] = plan_for(spec, GPU, GPU_PARAMS, align=4)  # an adopted array's alignment
    assert launch.kernel == "qgemv" and launch.what == "qmatmul (qgemv)"
    (groups_n, groups_m), items = K.gemv_launch("qgemv", K.GPU_GEMV, 301, 1)
    assert launch.grid == (groups_n, groups_m, 1) and launch.block == (items, 1, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_and_dequantize_take_a_work_item_per_block_and_per_value(device):
    facts, params = DEVICES[device]
    [q] = plan_for(S.quantize_spec((100, 64), "float16", "q8_0"), facts, params)
    [d] = plan_for(S.dequantize_spec((7, 96), Q4), facts, params)
    assert (q.kernel, q.buffers, q.scalars) == ("quantize", (Operand("x"), Operand("out")), (200,))
    assert (d.kernel, d.buffers, d.scalars) == ("dequantize", (Operand("q"), Operand("out")), (672,))
    _covers(q, 200)
    _covers(d, 672)
    assert d.variant == K.quant("q4_0", "float32", _defines(params["qmatmul"]))


def test_supports_declines_head_dims_past_512():
    big = S.attention_spec((1, 2, 1, 576), (1, 2, 8, 576), (1, 2, 8, 64), ("float16",) * 3)
    verdict = support(big, GPU, GPU_PARAMS)
    assert not verdict.ok and "head dims up to 512" in verdict.reason and "D=576, Dv=64" in verdict.reason
    assert support(S.attention_spec((1, 2, 1, 512), (1, 2, 8, 512), (1, 2, 8, 64), ("float16",) * 3),
                   GPU, GPU_PARAMS).ok


def test_supports_declines_attention_whose_tiles_exceed_local_memory():
    spec = S.attention_spec((1, 2, 1, 256), (1, 2, 8, 256), (1, 2, 8, 128), ("float32",) * 3)
    need = K.attention("float32", 256, 128, params=K.GPU_ATTENTION).static_local_bytes
    small = DeviceFacts("opencl", 132, need - 1, 512)
    verdict = support(spec, small, GPU_PARAMS)
    assert not verdict.ok
    assert f"need {need} bytes of local memory; the device allows {need - 1}" in verdict.reason
    assert support(spec, DeviceFacts("opencl", 132, need, 512), GPU_PARAMS).ok
    assert support(spec, small, CPU_PARAMS).ok  # CPU tiles live in private memory


@pytest.mark.parametrize("fact,words", [("correctly_rounded_divide", "CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT"),
                                        ("denormals", "flushes float32 denormals")])
def test_supports_declines_quantizing_where_it_would_not_be_bit_exact(fact, words):
    inexact = DeviceFacts(**{**CPU.__dict__, fact: False})
    quantize = support(S.quantize_spec((2, 64), "float32", "q4_0"), inexact, CPU_PARAMS)
    x8 = support(S.qmatmul_spec((2, 64), "float32", (3, 64), Q4, "q8_0"), inexact, CPU_PARAMS)
    assert not quantize.ok and words in quantize.reason and x8.reason == quantize.reason
    assert support(S.qmatmul_spec((2, 64), "float32", (3, 64), Q4), inexact, CPU_PARAMS).ok
    assert support(S.dequantize_spec((2, 64), Q4), inexact, CPU_PARAMS).ok


def test_supports_declines_a_gemv_without_room_for_its_local_memory():
    need = K.gemv_local_bytes(K.GPU_GEMV, "q4_0", shuffles=False)
    small = DeviceFacts("opencl", 132, need - 1, 512)
    verdict = support(S.qmatmul_spec((1, 64), "float32", (8, 64), Q4), small, GPU_PARAMS)
    assert not verdict.ok and f"need {need} bytes of local memory; the device has {need - 1}" in verdict.reason
    assert support(S.qmatmul_spec((9, 64), "float32", (8, 64), Q4), small, GPU_PARAMS).ok  # no GEMV


def test_supports_declines_sizes_past_int32():
    huge = S.matmul_spec((2, 2**31), "float32", (2**31, 2), "float32")
    verdict = support(huge, GPU, GPU_PARAMS)
    assert not verdict.ok and "32-bit" in verdict.reason


def test_the_planner_never_imports_a_vendor_package_or_a_backend():
    code = ("import sys, accel.backends.plan; "
            "loaded = {'pyopencl', 'cupy', 'accel.backends.opencl.backend', 'accel.backends.cupy.backend',"
            " 'accel.backends.runtime'} & set(sys.modules); "
            "assert not loaded, loaded")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_long_launches_on_cpu_devices_are_split_into_paced_pieces():
    # a launch cannot be interrupted, and on a CPU device it holds every core: a plan holds at
    # most launch_flops of work per launch, so Ctrl-C waits for a piece, not the whole op
    budget = DeviceFacts("opencl", 2, 32 * 1024, 128, launch_flops=10**9)
    spec = S.attention_spec((1, 8, 1024, 128), (1, 2, 1024, 128), (1, 2, 1024, 128), ("float32",) * 3)
    [whole] = plan_for(spec, CPU, CPU_PARAMS)
    pieces = plan_for(spec, budget, CPU_PARAMS)
    assert len(pieces) >= K.ceil_div(spec.flops, 10**9) and all(p.paced for p in pieces)
    assert max(p.grid[0] for p in pieces) * spec.flops / whole.grid[0] <= 10**9
    starts = [p.offset[0] for p in pieces]
    assert starts[0] == 0 and all(a.offset[0] + a.grid[0] == b.offset[0] for a, b in zip(pieces, pieces[1:]))
    assert pieces[-1].offset[0] + pieces[-1].grid[0] == whole.grid[0]
    assert {(p.grid[1:], p.block, p.buffers, p.scalars) for p in pieces} == \
        {(whole.grid[1:], whole.block, whole.buffers, whole.scalars)}
    # a decode step's key chunks are merged by a light launch, never split
    decode = S.attention_spec((1, 32, 1, 128), (1, 8, 65536, 128), (1, 8, 65536, 128), ("float32",) * 3)
    tiny = DeviceFacts("opencl", 64, 32 * 1024, 128, launch_flops=10**7)
    plan = plan_for(decode, tiny, CPU_PARAMS)
    assert plan[-1].kernel == "attention_combine" and not plan[-1].paced and len(plan) > 2
    assert not any(p.paced for p in plan_for(spec, CPU, CPU_PARAMS))  # no budget: one launch


# -- the decoder-step ops (accel.nn's specs): kernels/decoder.cl --------------------------------
@pytest.mark.parametrize("facts", [CPU, GPU], ids=["cpu", "gpu"])
@pytest.mark.parametrize("spec, kernel, groups, slots", [
    # a group of 256 per row for the norms and softmax, with the absent operands as placeholders
    (S.norm_spec("rms_norm", (2, 3, 640), "float32", 1e-6, (640,), "float32"), "rms_norm", 6,
     ("x", "weight", "out")),
    (S.norm_spec("rms_norm", (5, 64), "float32", 0.0), "rms_norm", 5, ("x", None, "out")),
    (S.norm_spec("layer_norm", (4, 80), "float32", 1e-5, None, None, (80,), "float32"),
     "layer_norm", 4, ("x", None, "bias", "out")),
    (S.softmax_spec((2, 3, 5, 40), "float32", 0.5, (5, 40), "bool"), "softmax", 30,
     ("x", "mask", "out")),
    (S.softmax_spec((3, 50), "float32", 1.0, (3, 50), "float32"), "softmax", 3, ("x", "mask", "out")),
    (S.softmax_spec((7, 9), "float32", 1.0), "softmax", 7, ("x", None, "out")),
    (S.rope_spec("rms_norm_rope", (2, 4, 3, 256), "float32", 128, False, True, 1e-6),
     "rms_norm_rope", 24, ("x", "weight", "cos", "sin", "out")),
    # an item per output element otherwise
    # glu: a group per (row, block of 256 columns)
    (S.activation_spec("glu", (3, 1000), "float32", "gelu"), "glu", (3, 2), ("gate", "gate", "out")),
    (S.activation_spec("glu", (3, 500), "float32", "silu", (3, 500), "float32"), "glu", (3, 2),
     ("gate", "up", "out")),
    (S.activation_spec("gelu", (257,), "float32", "gelu_tanh"), "unary", 2, ("x", "out")),
    (S.rope_spec("rope", (1, 8, 1, 64), "float32", 64, True, False), "rope", 2,
     ("x", "cos", "sin", "out")),
    (S.get_rows_spec((50, 200), "float32", (2, 3)), "get_rows", 6, ("table", "ids", "out")),
    (S.binary_spec("add", (640,), "float32", (4, 640), "float32"), "binary", 10, ("a", "b", "out")),
    (S.binary_spec("mul", (4, 640), "float32", (1,), "float32"), "binary", 10, ("a", "b", "out")),
    # float16 / bfloat16 operands: the same kernels built for that dtype (IN_DT)
    (S.norm_spec("rms_norm", (5, 64), "float16", 0.0, (64,), "float16"), "rms_norm", 5, ("x", "weight", "out")),
    (S.softmax_spec((3, 50), "bfloat16", 1.0, (3, 50), "float32"), "softmax", 3, ("x", "mask", "out")),
    (S.get_rows_spec((50, 200), "bfloat16", (2, 3)), "get_rows", 6, ("table", "ids", "out")),
])
def test_decoder_ops_plan_one_launch_of_decoder_cl(facts, spec, kernel, groups, slots):
    (launch,) = plan_for(spec, facts, DEFAULT_TILES["cpu"])
    assert launch.variant == K.decoder(spec.dtype) and launch.kernel == kernel
    want = (groups, 1, 1) if isinstance(groups, int) else (*groups, 1)
    assert launch.grid == want and launch.block == (256, 1, 1)
    assert tuple(s.name if isinstance(s, Operand) else None for s in launch.buffers) == slots
    assert all(isinstance(s, (Operand, Placeholder)) for s in launch.buffers)
    assert support(spec, facts, DEFAULT_TILES["cpu"]).ok


def test_decoder_op_scalars_say_what_the_kernel_reads():
    i32, f32 = np.int32, np.float32
    (ln,) = plan_for(S.norm_spec("layer_norm", (2, 8), "float32", 1e-5, (8,), "float32"), CPU, CPU_PARAMS)
    assert ln.scalars == (i32(8), f32(1e-5), i32(1), i32(0))
    (sm,) = plan_for(S.softmax_spec((2, 3, 5, 40), "float32", 0.125, (1, 1, 5, 40), "float32"), CPU, CPU_PARAMS)
    assert sm.scalars == (i32(40), f32(0.125), i32(2), i32(5), i32(30))  # additive mask, 5 rows repeated
    (glu,) = plan_for(S.activation_spec("glu", (3, 10), "float32", "gelu_tanh"), CPU, CPU_PARAMS)
    assert glu.scalars == (i32(3), i32(5), i32(10), i32(5), i32(S.ACTIVATIONS.index("gelu_tanh")))
    (add,) = plan_for(S.binary_spec("add", (3, 6), "float32", (3, 6), "float32"), CPU, CPU_PARAMS)
    assert add.scalars == (i32(18), i32(0), *map(i32, (1, 1, 18, 0, 0, 0, 1, 0, 0, 0, 1)))  # one run
    (mul,) = plan_for(S.binary_spec("mul", (3, 1), "float16", (1, 6), "float16"), CPU, CPU_PARAMS)
    # rows times columns: dims [3, 6], a steps 1 along the rows, b 1 along the columns
    assert mul.scalars == (i32(18), i32(1), *map(i32, (1, 3, 6, 0, 0, 1, 0, 0, 0, 0, 1)))
    (rope,) = plan_for(S.rope_spec("rope", (2, 3, 4, 16), "float32", 8, False, True), CPU, CPU_PARAMS)
    assert rope.scalars == (i32(3), i32(4), i32(16), i32(8), i32(0), i32(1), i32(2 * 3 * 4 * 16))
    assert S.rope_spec("rope", (2, 3, 4, 16), "float32", 8, False, True).table_shape == (8, 4)
    (rows,) = plan_for(S.get_rows_spec((9, 700), "float32", (4,)), CPU, CPU_PARAMS)
    assert rows.grid == (4, 3, 1) and rows.scalars == (i32(700),)  # a group per id and 256 columns


@pytest.mark.parametrize("spec, words", [
    (S.softmax_spec((2, 8), "float32", 1.0, (2, 1), "bool"), "one run of middle dims"),
    (S.softmax_spec((2, 8), "float32", 1.0, (1,), "bool"), "one run of middle dims"),
    (S.binary_spec("add", (2, 1, 3, 1, 4), "float32", (1, 5, 1, 2, 1), "float32"), "at most 4 runs"),
    (S.rope_spec("rms_norm_rope", (1, 1, 2, 1024), "float32", 64, False, False, 0.0), "up to 512"),
])
def test_decoder_cases_the_kernels_do_not_take_are_declined_with_the_reason(spec, words):
    """What accel.nn then computes with the cpu reference on the host (the one fallback)."""
    verdict = support(spec, CPU, CPU_PARAMS)
    assert not verdict.ok and words in verdict.reason, verdict


@pytest.mark.parametrize("fmt, dequantize", [("q4_0", "dequantize"), ("q4_k", "dequantize_k"),
                                             ("iq2_s", "dequantize_cb")])
def test_get_rows_of_a_quantized_table_gathers_then_dequantizes(fmt, dequantize):
    # each id's row of blocks copied into scratch, which the format's own dequantize plan reads
    spec = S.get_rows_spec((40, 512), fmt, (2, 3))
    gather, *rest = plan_for(spec, CPU, CPU_PARAMS)
    row_bytes = get_format(fmt).row_bytes(512)
    assert (gather.kernel, gather.grid, gather.scalars) == ("get_rows_bytes", (6, -(-row_bytes // 256), 1),
                                                            (np.int32(row_bytes),))
    rows = gather.buffers[2]
    assert gather.buffers[:2] == (Operand("table"), Operand("ids")) and rows == Scratch("rows", 6 * row_bytes)
    want = plan_for(S.dequantize_spec((6, 512), get_format(fmt)), CPU, CPU_PARAMS)
    assert [launch.kernel for launch in rest] == [launch.kernel for launch in want] and rest[0].kernel == dequantize
    assert rest[0].buffers[0] == rows and rest[-1].buffers[-1] == Operand("out")
    assert spec.out_shape == (2, 3, 512) and spec.out_dtype == "float32"


def test_get_rows_of_a_quantized_table_takes_the_verdict_of_its_dequantize():
    # mxfp4's smallest values are float32 subnormals: a device that flushes them declines its
    # dequantize, and so the rows of an mxfp4 table, with the same reason
    flushing = replace(CPU, denormals=False)
    rows = support(S.get_rows_spec((4, 64), "mxfp4", (2,)), flushing, CPU_PARAMS)
    deq = support(S.dequantize_spec((2, 64), get_format("mxfp4")), flushing, CPU_PARAMS)
    assert not rows.ok and rows.reason == deq.reason
    assert support(S.get_rows_spec((4, 64), "mxfp4", (2,)), CPU, CPU_PARAMS).ok


def test_get_rows_spec_names_the_table_argument():
    with pytest.raises(DTypeError, match="^table.dtype"):
        S.get_rows_spec((4, 64), "int32", (2,))
    with pytest.raises(ShapeError, match=r"^table.shape\[-1\]"):
        S.get_rows_spec((4, 48), "q4_0", (2,))
    with pytest.raises(ShapeError, match="^table.shape"):
        S.get_rows_spec((4, 2, 64), "q4_0", (2,))


@pytest.mark.parametrize("op, names", [("add_rms_norm", ("x", "residual", "weight", "s", "out")),
                                       ("norm_add_rms_norm", ("x", "x_weight", "residual", "weight", "s", "out"))])
def test_the_fused_residual_norms_are_one_launch_with_two_outputs(op, names):
    # the residual sum s and the normed y, both written by one group per row
    D, weights = 640, {"weight_shape": (640,), "weight_dtype": "bfloat16"}
    if op == "norm_add_rms_norm":
        weights |= {"x_weight_shape": (640,), "x_weight_dtype": "bfloat16"}
    spec = S.residual_norm_spec(op, (3, 5, D), "bfloat16", 1e-6, (3, 5, D), "bfloat16", **weights)
    (launch,) = plan_for(spec, CPU, CPU_PARAMS)
    assert launch.variant == K.decoder("bfloat16") and (launch.kernel, launch.grid) == (op, (15, 1, 1))
    assert tuple(s.name for s in launch.buffers) == names == OPERANDS[op]
    assert launch.scalars[:2] == (np.int32(D), np.float32(1e-6)) and spec.outputs == 2
    if op == "add_rms_norm":  # the weight is optional there
        bare = S.residual_norm_spec(op, (2, 8), "float32", 0.0, (2, 8), "float32")
        assert isinstance(plan_for(bare, CPU, CPU_PARAMS)[0].buffers[2], Placeholder)
