"""accel.attention semantics on the CPU reference, against torch's SDPA run in float64 with
explicitly built masks (an implementation independent of accel)."""
import numpy as np
import pytest
import torch

import accel


def reference(q, k, v, *, causal=False, scale=None, mask=None):
    """float64 SDPA from the already-rounded inputs; GQA by repeating kv heads; fully masked rows
    set to zero (torch returns NaN there)."""
    tq, tk, tv = (torch.from_numpy(np.asarray(t, np.float64)) for t in (q, k, v))
    g = tq.shape[1] // tk.shape[1]
    tk, tv = tk.repeat_interleave(g, 1), tv.repeat_interleave(g, 1)
    Sq, Sk = tq.shape[2], tk.shape[2]
    bias = torch.zeros(Sq, Sk, dtype=torch.float64)
    if causal:
        keep = torch.arange(Sk)[None, :] <= torch.arange(Sq)[:, None] + (Sk - Sq)
        bias = bias.masked_fill(~keep, -np.inf)
    if mask is not None:
        m = torch.from_numpy(np.asarray(mask))
        bias = bias + (torch.zeros(m.shape, dtype=torch.float64).masked_fill(~m, -np.inf)
                       if m.dtype == torch.bool else m.to(torch.float64))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bias, scale=scale)
    dead = torch.isinf(bias.expand(out.shape[:-1] + (Sk,))).all(-1, keepdim=True) if (causal or mask is not None) else None
    if dead is not None:
        out = out.masked_fill(dead, 0.0)
    return out.numpy()


def check(got, ref, dtype):
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,Dv", [
    (1, 1, 1, 1, 1, 32, 32), (2, 4, 2, 5, 9, 64, 64), (1, 8, 1, 1, 17, 80, 48), (1, 8, 8, 31, 31, 128, 128),
])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_float64_reference(rng, dtype, B, Hq, Hkv, Sq, Sk, D, Dv, causal):
    npd = accel.dtypes.to_numpy_dtype(dtype)
    q = rng.standard_normal((B, Hq, Sq, D)).astype(npd)
    k = rng.standard_normal((B, Hkv, Sk, D)).astype(npd)
    v = rng.standard_normal((B, Hkv, Sk, Dv)).astype(npd)
    got = accel.attention(q, k, v, causal=causal, backend="cpu")
    assert got.dtype == npd and got.shape == (B, Hq, Sq, Dv)
    check(got, reference(q, k, v, causal=causal), dtype)


def test_gqa_head_mapping_uses_integer_division(rng):
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    v = np.zeros((1, 2, 6, 8), np.float32)
    v[0, 1] = 1.0  # only kv head 1 carries ones: query heads 2 and 3 read it
    got = accel.attention(q, k, v, backend="cpu")
    assert np.allclose(got[0, :2], 0) and np.allclose(got[0, 2:], 1)


def test_causal_is_bottom_right_aligned_for_decode(rng):
    # Sq = 1 with a KV cache: the single query sees every key
    q = rng.standard_normal((1, 1, 1, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, 10, 16)).astype(np.float32)
    v = rng.standard_normal((1, 1, 10, 16)).astype(np.float32)
    assert np.allclose(accel.attention(q, k, v, causal=True, backend="cpu"),
                       accel.attention(q, k, v, causal=False, backend="cpu"), atol=1e-6)


def test_bool_and_additive_masks_combine_with_causal(rng):
    q = rng.standard_normal((2, 2, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 16)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 16)).astype(np.float32)
    bmask = rng.random((2, 1, 4, 7)) > 0.3
    amask = rng.standard_normal((4, 7)).astype(np.float32)
    check(accel.attention(q, k, v, causal=True, mask=bmask, backend="cpu"),
          reference(q, k, v, causal=True, mask=bmask), "float32")
    check(accel.attention(q, k, v, causal=True, mask=amask, backend="cpu"),
          reference(q, k, v, causal=True, mask=amask), "float32")


def test_fully_masked_rows_are_zero(rng):
    q = rng.standard_normal((1, 1, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 1, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, 1, 5, 8)).astype(np.float32)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    got = accel.attention(q, k, v, mask=mask, backend="cpu")
    assert np.all(got[0, 0, 1] == 0) and np.all(np.isfinite(got))
    additive = np.where(mask, 0, -np.inf).astype(np.float32)
    assert np.array_equal(accel.attention(q, k, v, mask=additive, backend="cpu"), got)


def test_custom_scale_and_huge_logits_stay_finite(rng):
    q = (rng.standard_normal((1, 1, 4, 8)) * 1e4).astype(np.float32)
    k = (rng.standard_normal((1, 1, 6, 8)) * 1e4).astype(np.float32)
    v = rng.standard_normal((1, 1, 6, 8)).astype(np.float32)
    got = accel.attention(q, k, v, scale=0.5, backend="cpu")
    assert np.all(np.isfinite(got))
    check(got, reference(q, k, v, scale=0.5), "float32")


def test_blocked_long_sequence_matches_reference(rng):
    # Sk * group large enough that the CPU backend processes queries in several blocks
    q = rng.standard_normal((1, 2, 300, 8)).astype(np.float32)
    k = rng.standard_normal((1, 1, 70000, 8)).astype(np.float32)
    v = rng.standard_normal((1, 1, 70000, 8)).astype(np.float32)
    got = accel.attention(q, k, v, causal=True, backend="cpu")
    check(got, reference(q, k, v, causal=True), "float32")


def test_nan_in_a_key_poisons_only_rows_that_see_it():
    q = np.ones((1, 1, 2, 4), np.float32)
    k = np.ones((1, 1, 2, 4), np.float32)
    k[0, 0, 1, 0] = np.nan
    v = np.ones((1, 1, 2, 4), np.float32)
    got = accel.attention(q, k, v, causal=True, backend="cpu")
    assert np.all(got[0, 0, 0] == 1) and np.all(np.isnan(got[0, 0, 1]))
