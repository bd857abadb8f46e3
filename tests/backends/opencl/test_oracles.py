"""The float64 oracles of the OpenCL tests (tests/support/opencl_common.py) on cases worked out by
hand: the OpenCL tests are only as good as these."""
import math

import numpy as np

from opencl_common import attention_ref, matmul_bound


def test_attention_oracle_on_hand_worked_cases():
    # one query, keys k0 = [1, 0], k1 = [0, 1], scale 1: logits [2, 0] for q = [2, 0]
    q = np.array([[[[2.0, 0.0]]]])
    k = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = np.array([[[[10.0], [20.0]]]])
    e = math.exp(2.0)
    np.testing.assert_allclose(attention_ref(q, k, v, scale=1.0), [[[[(10 * e + 20) / (e + 1)]]]])
    # bottom-right causal with Sq = 1, Sk = 2: the single query sees both keys
    np.testing.assert_allclose(attention_ref(q, k, v, causal=True, scale=1.0),
                               attention_ref(q, k, v, scale=1.0))
    # a mask hiding everything gives zeros; hiding key 0 leaves value 20
    assert (attention_ref(q, k, v, mask=np.zeros((1, 2), bool)) == 0).all()
    np.testing.assert_allclose(attention_ref(q, k, v, mask=np.array([False, True])), [[[[20.0]]]])
    # GQA: two query heads share kv head 0
    q2 = np.concatenate([q, -q], axis=1)
    out = attention_ref(q2, k, v, scale=1.0)
    np.testing.assert_allclose(out[0, 1, 0, 0], (10 + 20 * e) / (e + 1))


def test_matmul_bound_is_tight_enough_to_catch_a_dropped_term():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 512)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal((512, 8)).astype(np.float32).astype(np.float64)
    c = a @ b  # the float64 product of the (float32) inputs, as every test uses it
    bound = matmul_bound(a, b, c, "float32")
    dropped = c - a[:, :1] @ b[:1, :]  # one of 512 products missing
    assert (np.abs(dropped - c) > bound).any()
    assert (np.abs((a.astype(np.float32) @ b.astype(np.float32)) - c) <= bound).all()
