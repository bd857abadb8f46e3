"""The oracle against hand-derived answers and against independent implementations (the gguf
package's numpy quantizers, torch's scaled_dot_product_attention): the suite's verdicts are only
as good as its oracle."""
import numpy as np
import pytest

from accel.conformance import oracle

gguf_quants = pytest.importorskip("gguf.quants", reason="gguf is the independent quantizer oracle "
                                  "(pip install 'accel-portable[test]')")
torch = pytest.importorskip("torch", reason="torch SDPA is the independent attention oracle")


def _block(values, fill=0.0):
    x = np.full(32, fill, np.float32)
    x[: len(values)] = values
    return x


def test_q4_0_matches_the_checked_examples_of_the_format_notes():
    raw = oracle.quantize(_block([-8, 0.5, -0.5, 1.5, 8, 2.5]), "q4_0")
    assert raw[:2].tobytes() == b"\x00\x3c"  # d = +1.0
    codes = np.concatenate([raw[2:] & 0xF, raw[2:] >> 4]).astype(int) - 8
    assert codes[:6].tolist() == [-8, 1, 0, 2, 7, 3]
    raw = oracle.quantize(_block([8, 1, -1]), "q4_0")
    assert raw[:2].tobytes() == b"\x00\xbc"  # d = -1.0
    codes = np.concatenate([raw[2:] & 0xF, raw[2:] >> 4]).astype(int) - 8
    assert codes[:3].tolist() == [-8, -1, 1]


def test_q8_0_rounds_ties_away_from_zero():
    raw = oracle.quantize(_block([127, 2.5, -2.5, 0.5, -0.5, 1.5]), "q8_0")
    assert raw[:2].tobytes() == b"\x00\x3c"
    assert raw[2:8].view(np.int8).tolist() == [127, 3, -3, 1, -1, 2]


def test_q4_0_zero_block_takes_the_reference_initial_plus_zero():
    # quantize_row_q4_0_ref starts from max = 0.0f and replaces it only on a strictly larger
    # magnitude, so a block of -0.0 gives d = 0.0f / -8 = -0.0 (0x8000) and codes 8
    raw = oracle.quantize(np.full(32, -0.0, np.float32), "q4_0")
    assert raw[:2].tobytes() == b"\x00\x80"
    assert set(raw[2:].tolist()) == {0x88}


@pytest.mark.parametrize("fmt,nan_block,inf_block", [
    ("q8_0", "007e" + "00" * 32, "007c" + "00" * 32),
    ("q4_0", "007e" + "88" * 16, "00fc" + "88" * 16),  # +inf is the extreme: d = inf / -8
])
def test_non_finite_blocks_follow_accels_definition(fmt, nan_block, inf_block):
    x = np.stack([_block([1.0, np.nan, np.inf]), _block([1.0, np.inf, -np.inf])])
    raw = oracle.quantize(x, fmt)
    assert raw[0].tobytes().hex() == nan_block
    assert raw[1].tobytes().hex() == inf_block


@pytest.mark.parametrize("fmt,gtype", [("q8_0", "Q8_0"), ("q4_0", "Q4_0")])
def test_quantize_and_dequantize_agree_with_the_gguf_package(fmt, gtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 256)) * 10.0 ** rng.uniform(-3, 3, (64, 1))).astype(np.float32)
    qtype = getattr(gguf_quants.GGMLQuantizationType, gtype)
    ours = oracle.quantize(x, fmt)
    theirs = gguf_quants.quantize(x, qtype)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(oracle.dequantize(ours, fmt, x.shape),
                          gguf_quants.dequantize(theirs, qtype).astype(np.float64))


def test_matmul_follows_ieee_and_is_exact_for_integers():
    a = np.array([[1.0, np.inf], [2.0, 3.0], [np.nan, 0.0]])
    b = np.array([[4.0, 1.0], [0.0, 5.0]])
    ref, mag = oracle.matmul(a, b)
    assert np.isnan(ref[0, 0]) and ref[0, 1] == np.inf  # inf * 0 is NaN
    assert ref[1].tolist() == [8.0, 17.0] and mag[1].tolist() == [8.0, 17.0]
    assert np.isnan(ref[2]).all()
    big = np.full((1, 131071), -128, np.int8)
    ref, _ = oracle.matmul(big, big.T.copy())
    assert ref.dtype == np.int64 and ref[0, 0] == 131071 * 16384


def test_matmul_broadcasts_batches_like_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    ref, _ = oracle.matmul(a, b)
    np.testing.assert_allclose(ref, a @ b, rtol=1e-13)


def test_attention_definitions_by_hand():
    v = np.arange(12, dtype=np.float64).reshape(1, 2, 3, 2)  # 2 kv heads, Sk = 3, Dv = 2
    q = np.zeros((1, 4, 3, 2))
    k = np.ones((1, 2, 3, 2))
    # equal logits: uniform weights over the visible keys; GQA head h reads kv head h // 2
    out = oracle.attention(q, k, v, None, causal=False, scale=1.0, mask_kind=None)["out"]
    assert np.allclose(out[0, :, 0], v[0, [0, 0, 1, 1]].mean(axis=1))
    # causal, bottom-right aligned, Sq = Sk: query i averages keys 0..i
    out = oracle.attention(q, k, v, None, causal=True, scale=1.0, mask_kind=None)["out"]
    assert np.allclose(out[0, 0, 1], v[0, 0, :2].mean(axis=0))
    # Sq = 1 (decode): the single query sees every key
    out = oracle.attention(q[:, :, :1], k, v, None, causal=True, scale=1.0, mask_kind=None)["out"]
    assert np.allclose(out[0, 0, 0], v[0, 0].mean(axis=0))
    # Sq > Sk: query i sees j <= i + Sk - Sq, so the first rows see nothing and give zeros
    q5 = np.zeros((1, 4, 5, 2))
    out = oracle.attention(q5, k, v, None, causal=True, scale=1.0, mask_kind=None)["out"]
    assert (out[0, :, :2] == 0).all() and np.allclose(out[0, 0, 2], v[0, 0, 0])


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"),
                                         (False, "additive")])
def test_attention_agrees_with_torch_sdpa(causal, mask):
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 4, 9, 16)), rng.standard_normal((2, 2, 9, 16)), \
        rng.standard_normal((2, 2, 9, 8))
    m = None
    if mask == "bool":
        m = rng.random((9, 9)) < 0.7
        m[:, 0] = True  # torch gives NaN for rows with no key; accel defines zeros
    elif mask == "additive":
        m = rng.standard_normal((1, 4, 9, 9))
    ours = oracle.attention(q, k, v, m, causal=causal, scale=0.3, mask_kind=mask)["out"]
    t = [torch.from_numpy(x) for x in (q, k, v)]
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *t, attn_mask=None if m is None else torch.from_numpy(m), is_causal=causal, scale=0.3,
        enable_gqa=True).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
