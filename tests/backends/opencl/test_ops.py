"""Every op of the OpenCL backend, on real OpenCL devices (PoCL here), against float64 oracles
and GGML's reference quantizer (the gguf package): both kernel parameter sets (the CPU default and
the GPU local-memory tiles) run for real."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import DEVICES, FIRST, U, attention_ref, matmul_bound

import accel
import accel.kernels as K
from accel import spec as S
from accel.tensor import Tensor

pytestmark = needs_opencl
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.fixture(scope="module", params=["cpu-params", "gpu-params"])
def be(request, opencl_with):
    """opencl:0 with its default (CPU-device) parameters, and a second instance running the GPU
    parameter set (local-memory tiles, one lane per work-item) on the same real device."""
    if request.param == "cpu-params":
        return accel.get_backend(FIRST[0])
    return opencl_with(matmul=K.GPU_MATMUL, attention={**K.GPU_ATTENTION, "TEAM": 8},
                       qmatmul={**K.GPU_QMATMUL, "WG": 16}, gemv=dict(K.GPU_GEMV, GEMV_WG=16))


def run(be, spec, *hosts):
    tensors = [Tensor(be, be.upload(np.ascontiguousarray(h)), h.shape, accel.dtypes.dtype_name(h.dtype))
               if h is not None else None for h in hosts]
    if spec.op == "attention":
        return accel.dispatch.execute(be, spec, *tensors[:3], tensors[3]).numpy()
    return accel.dispatch.execute(be, spec, *tensors).numpy()


# -- matmul ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,out_dtype", [("float32", "float32"), ("float16", "float16"),
                                             ("bfloat16", "bfloat16"), ("float16", "float32"),
                                             ("bfloat16", "float32"), ("float32", "bfloat16")])
def test_matmul_within_bound_of_float64(be, rng, dtype, out_dtype):
    # odd sizes: every edge path (partial row and column blocks) and a broadcast batch
    a = rng.standard_normal((2, 1, 37, 129)).astype(NP[dtype])
    b = rng.standard_normal((3, 129, 45)).astype(NP[dtype])
    spec = S.matmul_spec(a.shape, dtype, b.shape, dtype, out_dtype)
    got = run(be, spec, a, b).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    assert got.shape == (2, 3, 37, 45)
    assert (np.abs(got - want) <= matmul_bound(a64, b64, want, out_dtype)).all()


def test_matmul_small_integers_exact(be, rng):
    # products and sums of small integers are exact in float32: any correct kernel is bit-exact
    a = rng.integers(-8, 9, (70, 300)).astype(np.float32)
    b = rng.integers(-8, 9, (300, 33)).astype(np.float32)
    got = run(be, S.matmul_spec(a.shape, "float32", b.shape, "float32"), a, b)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_matmul_int8_exact_beyond_float32_range(be, rng):
    # K = 1500 extreme values: partial sums pass 2**24, where a float32 path would round
    a = rng.choice(np.array([-128, 127, -127], np.int8), (19, 1500))
    b = rng.choice(np.array([-128, 127], np.int8), (1500, 21))
    got = run(be, S.matmul_spec(a.shape, "int8", b.shape, "int8"), a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_matmul_batch_broadcast_picks_the_right_matrices(be, rng):
    a = rng.integers(-4, 5, (4, 1, 5, 6)).astype(np.float32)
    b = rng.integers(-4, 5, (1, 3, 6, 7)).astype(np.float32)
    got = run(be, S.matmul_spec(a.shape, "float32", b.shape, "float32"), a, b)
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)))


# -- attention ---------------------------------------------------------------------------------------
def _attn(be, rng, dtype, B, Hq, Hkv, Sq, Sk, D, Dv, causal, mask=None, scale=None):
    q = rng.standard_normal((B, Hq, Sq, D)).astype(NP[dtype])
    k = rng.standard_normal((B, Hkv, Sk, D)).astype(NP[dtype])
    v = rng.standard_normal((B, Hkv, Sk, Dv)).astype(NP[dtype])
    spec = S.attention_spec(q.shape, k.shape, v.shape, (dtype,) * 3, causal, scale,
                            None if mask is None else mask.shape,
                            None if mask is None else accel.dtypes.dtype_name(mask.dtype))
    got = run(be, spec, q, k, v, mask).astype(np.float64)
    want = attention_ref(q, k, v, causal=causal, scale=scale, mask=mask)
    return got, want, np.abs(v.astype(np.float64)).max()


def _attention_ok(got, want, vmax, dtype, Sk):
    # output rounding, plus float32 softmax/accumulation error growing like sqrt(Sk) u32
    bound = 2 * U[dtype] * np.abs(want) + 16 * math.sqrt(Sk) * U["float32"] * vmax
    return (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_gqa_causal(be, rng, dtype, causal):
    # Sq != Sk (bottom-right alignment matters), D != Dv, GQA 6 -> 2, ragged tiles
    got, want, vmax = _attn(be, rng, dtype, 2, 6, 2, 21, 53, 40, 24, causal)
    assert _attention_ok(got, want, vmax, dtype, 53)


def test_attention_masks_and_fully_masked_rows(be, rng):
    keep = rng.random((1, 3, 17, 70)) > 0.3
    keep[0, 1, 4] = False  # a fully masked row: accel defines it as zeros
    got, want, vmax = _attn(be, rng, "float32", 2, 3, 3, 17, 70, 32, 32, False, mask=keep)
    assert _attention_ok(got, want, vmax, "float32", 70)
    assert (got[:, 1, 4] == 0).all()
    add = np.where(rng.random((17, 70)) > 0.5, 0, -np.inf).astype(np.float16)  # broadcast [Sq, Sk]
    add[3] = rng.standard_normal(70)
    got, want, vmax = _attn(be, rng, "float16", 1, 2, 1, 17, 70, 32, 16, True, mask=add, scale=0.3)
    assert _attention_ok(got, want, vmax, "float16", 70)


def test_attention_scale_multiplies_logits_not_q(be):
    # q * scale overflows float32 (2 * 3e38) while every logit, q . k * scale, is finite: the
    # answer is the softmax of finite logits (weights 1 : e^-3e28 here, so v's first row)
    q = np.zeros((1, 1, 1, 8), np.float32)
    q[..., 0] = 2
    k = np.zeros((1, 1, 2, 8), np.float32)
    k[0, 0, :, 0] = [1e-10, 0.5e-10]
    v = np.stack([np.full(8, 1.0), np.full(8, 2.0)]).astype(np.float32)[None, None]
    spec = S.attention_spec(q.shape, k.shape, v.shape, ("float32",) * 3, scale=3e38)
    np.testing.assert_array_equal(run(be, spec, q, k, v, None), np.ones((1, 1, 1, 8), np.float32))


def test_attention_causal_decode_rows_and_empty_rows(be, rng):
    # Sq > Sk with causal: the first Sq - Sk queries see no key at all and must give zeros
    got, want, vmax = _attn(be, rng, "float32", 1, 2, 2, 40, 10, 16, 16, True)
    assert (got[:, :, :30] == 0).all()
    assert _attention_ok(got, want, vmax, "float32", 10)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_gqa_rows_with_per_head_masks(be, rng, causal):
    # a kv head's 3 query heads are one run of 15 rows, so tiles span heads: every row must take
    # its own head's mask row and its own query's causal bound
    keep = rng.random((2, 6, 5, 13)) > 0.4
    keep[1, 4, 2] = False  # fully masked, in the middle head of a group: zeros
    keep[0, 2] = True  # one head keeps every key: the heads' masks differ
    got, want, vmax = _attn(be, rng, "float32", 2, 6, 2, 5, 13, 16, 8, causal, mask=keep)
    assert _attention_ok(got, want, vmax, "float32", 13)
    assert (got[1, 4, 2] == 0).all()


@pytest.mark.parametrize("D,Dv,qsplit", [(64, 32, 4), (40, 24, 2), (20, 12, 1), (33, 7, 1)])
def test_attention_head_dims_split_across_work_items(be, rng, D, Dv, qsplit):
    # GPU groups split a row's head dims over QSPLIT work-items in groups of 4 (fewer where that
    # does not divide them); every split must give the same attention
    assert K.attention("float32", D, Dv).defines["QSPLIT"] == qsplit
    got, want, vmax = _attn(be, rng, "float32", 1, 4, 2, 9, 37, D, Dv, True)
    assert _attention_ok(got, want, vmax, "float32", 37)


@pytest.mark.parametrize("Hq,Hkv", [(8, 2), (4, 2), (3, 1), (3, 3)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_decode_step(be, rng, Hq, Hkv, dtype):
    # Sq = 1 against a longer cache, causal: 4, 2, 3 (a tile of 4 with one padding row) and 1
    # rows per kv head, so CPU devices build 4-, 2- and 1-row tiles
    got, want, vmax = _attn(be, rng, dtype, 2, Hq, Hkv, 1, 77, 64, 64, True)
    assert _attention_ok(got, want, vmax, dtype, 77)


@pytest.fixture(scope="module")
def chunked(be, opencl_with):
    """``be``'s parameters, with attention's keys split into chunks (flash-decoding) wherever
    there are at least two key tiles per chunk, as a device with many compute units would."""
    return opencl_with(**{**be.params, "attention": {**be.params["attention"], "UNITS": 10**6}})


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,Dv,causal", [
    (2, 8, 2, 1, 300, 64, 64, True),  # a decode step against a long cache
    (1, 6, 2, 21, 200, 40, 24, True),  # prefill: chunks past a row's last key see nothing
    (1, 3, 3, 5, 97, 32, 16, False),  # a ragged last chunk
])
def test_attention_key_chunks_match_one_pass(chunked, rng, B, Hq, Hkv, Sq, Sk, D, Dv, causal):
    spec = S.attention_spec((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, Dv), ("float32",) * 3, causal)
    params = {k: v for k, v in chunked.params["attention"].items() if k != "UNITS"}
    assert K.attention_chunks(spec, K.attention("float32", D, Dv, params=params).defines, 10**6) > 1
    got, want, vmax = _attn(chunked, rng, "float32", B, Hq, Hkv, Sq, Sk, D, Dv, causal)
    assert _attention_ok(got, want, vmax, "float32", Sk)


def test_attention_key_chunks_keep_masked_rows_and_nans(chunked, rng):
    keep = rng.random((1, 4, 3, 150)) > 0.5
    keep[0, 1, 2] = False  # fully masked: zeros, whatever the chunks
    keep[0, 2, 0, :100] = False  # visible only in the last chunks
    q = rng.standard_normal((1, 4, 3, 32)).astype(np.float32)
    q[0, 3, 1, 5] = np.nan  # NaN in: NaN out, as in one pass
    k = rng.standard_normal((1, 2, 150, 32)).astype(np.float32)
    v = rng.standard_normal((1, 2, 150, 32)).astype(np.float32)
    spec = S.attention_spec(q.shape, k.shape, v.shape, ("float32",) * 3, False, None, keep.shape, "bool")
    got = run(chunked, spec, q, k, v, keep).astype(np.float64)
    want = attention_ref(q, k, v, causal=False, mask=keep)
    assert (got[0, 1, 2] == 0).all() and np.isnan(got[0, 3, 1]).all()
    got[0, 3, 1] = want[0, 3, 1] = 0  # (the float64 reference does not carry the NaN)
    assert _attention_ok(got, want, np.abs(v).max(), "float32", 150)


# -- quantization: bit-exact with GGML's reference ------------------------------------------------
gguf = pytest.importorskip("gguf", reason="the gguf package is the independent GGML oracle")
QTYPE = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}


def _blocks(rng, n):
    x = rng.standard_normal((n, 32)).astype(np.float32) * rng.choice([1e-36, 1e-5, 1.0, 3e4], (n, 1))
    x[0] = [2.5, -2.5, 0.5, -0.5, 1.5, 127, *[0.0] * 26]  # q8_0 ties: d = 1 exactly
    x[1] = [-8, 0.5, -0.5, 1.5, 8, 2.5, *[0.0] * 26]  # q4_0 ties and first-of-equal-magnitudes
    x[2] = 0.0
    return x.astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantize_bit_exact_with_ggml_reference(device, rng, fmt):
    be = accel.get_backend(device)
    x = _blocks(rng, 300).reshape(25, 12 * 32)
    got = run(be, S.quantize_spec(x.shape, "float32", fmt), x)
    np.testing.assert_array_equal(got, gguf.quants.quantize(x, QTYPE[fmt]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_quantize_half_inputs_bit_exact(rng, dtype):
    be = accel.get_backend(FIRST[0])
    x = rng.standard_normal((7, 64)).astype(NP[dtype])
    for fmt in ("q8_0", "q4_0"):
        got = run(be, S.quantize_spec(x.shape, dtype, fmt), x)
        np.testing.assert_array_equal(got, gguf.quants.quantize(x.astype(np.float32), QTYPE[fmt]))


@pytest.mark.parametrize("fmt,d_bits", [("q8_0", 0x0000), ("q4_0", 0x8000)])
def test_quantize_signed_zero_blocks_follow_ggml_c(fmt, d_bits):
    # ggml-quants.c starts its search from max = +0.0 and replaces it only on a strictly larger
    # magnitude, so any all-zero block gets d = +0.0 / 127 or +0.0 / -8 = -0.0, whatever the signs
    # of its zeros (gguf's numpy port takes the sign of the block's first zero instead)
    be = accel.get_backend(FIRST[0])
    x = np.zeros((3, 32), np.float32)
    x[1] = -0.0
    x[2, ::2] = -0.0
    got = run(be, S.quantize_spec(x.shape, "float32", fmt), x)
    assert (got[:, :2].copy().view(np.uint16)[:, 0] == d_bits).all()
    assert (got[:, 2:] == (0 if fmt == "q8_0" else 0x88)).all()


def test_quantize_non_finite_blocks_follow_accel_definition():
    be = accel.get_backend(FIRST[0])
    x = np.ones((3, 32), np.float32)
    x[0, 7] = np.nan
    x[1, 3] = np.inf
    x[2, 9] = -np.inf
    q8 = run(be, S.quantize_spec(x.shape, "float32", "q8_0"), x)
    q4 = run(be, S.quantize_spec(x.shape, "float32", "q4_0"), x)
    assert q8[0, :2].view(np.uint16)[0] == 0x7E00 and q4[0, :2].view(np.uint16)[0] == 0x7E00
    assert q8[1, :2].view(np.float16)[0] == np.inf  # amax / 127
    assert q4[1, :2].view(np.float16)[0] == -np.inf and q4[2, :2].view(np.float16)[0] == np.inf  # m / -8
    assert (q8[:, 2:] == 0).all()  # int8 code 0
    assert (q4[:, 2:] == 0x88).all()  # both nibbles 8, i.e. code - 8 = 0


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_dequantize_bit_exact_with_ggml_reference(rng, fmt):
    be = accel.get_backend(FIRST[0])
    raw = gguf.quants.quantize(_blocks(rng, 64).reshape(8, 256), QTYPE[fmt])
    got = run(be, S.dequantize_spec((8, 256), accel.formats.get_format(fmt)), raw)
    np.testing.assert_array_equal(got, gguf.quants.dequantize(raw, QTYPE[fmt]))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("M", [1, 7])
def test_qmatmul_within_bound_of_float64(be, rng, fmt, dtype, M):
    N, Kd = 37, 320
    w = rng.standard_normal((N, Kd)).astype(np.float32)
    raw = gguf.quants.quantize(w, QTYPE[fmt])
    wd = gguf.quants.dequantize(raw, QTYPE[fmt]).astype(np.float64)
    x = rng.standard_normal((M, Kd)).astype(NP[dtype])
    got = run(be, S.qmatmul_spec(x.shape, dtype, (N, Kd), accel.formats.get_format(fmt)), x, raw)
    x64 = x.astype(np.float64)
    want = x64 @ wd.T
    assert (np.abs(got.astype(np.float64) - want) <= matmul_bound(x64, wd.T, want, dtype)).all()


# -- outputs never spill past their bytes ----------------------------------------------------------------
def test_outputs_written_through_views_leave_guard_bytes_alone(be, rng):
    align = be.alignment
    a = rng.standard_normal((13, 17)).astype(np.float32)
    spec = S.matmul_spec(a.shape, "float32", (17, 11), "float32")
    nbytes = 13 * 11 * 4
    big = be.upload(np.full(align + nbytes + align, 0xAB, np.uint8))
    out = Tensor(be, be.view(big, align, nbytes), (13, 11), "float32")
    b = rng.standard_normal((17, 11)).astype(np.float32)
    ta, tb = (Tensor(be, be.upload(h), h.shape, "float32") for h in (a, b))
    accel.dispatch.execute(be, spec, ta, tb, out=out)
    raw = be.download(big, align + nbytes + align)
    assert (raw[:align] == 0xAB).all() and (raw[align + nbytes:] == 0xAB).all()
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
