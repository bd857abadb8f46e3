"""Array in, array out: numpy, torch and accel.Tensor operands come back as what they were."""
import ml_dtypes
import numpy as np
import pytest
import torch
from tolerance_checks import assert_within

import accel
from accel.conformance import oracle, tolerance
from accel.dtypes import dtype_name, to_numpy_dtype


def test_numpy_in_numpy_out(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    out = accel.matmul(a, a.T)
    assert type(out) is np.ndarray


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_in_torch_out(rng, dtype):
    a = torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)).to(dtype)
    out = accel.matmul(a, a.T)  # a transposed (non-contiguous) torch view is fine
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == (3, 3)
    a64 = a.double().numpy()
    ref, magnitude = oracle.matmul(a64, a64.T)
    fmt = dtype_name(dtype)
    assert_within(out.double().numpy(), ref, tolerance.matmul_bound(ref, magnitude, 4, fmt, "float32"), fmt)


def test_torch_attention_and_quant_round_trip(rng):
    q = torch.from_numpy(rng.standard_normal((1, 2, 3, 32)).astype(np.float32)).to(torch.bfloat16)
    out = accel.attention(q, q, q, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (1, 2, 3, 32)
    q64 = q.double().numpy()
    res = oracle.attention(q64, q64, q64, None, causal=True, scale=32 ** -0.5, mask_kind=None)
    assert_within(out.double().numpy(), res["out"],
                  tolerance.attention_bound(res, 32, 3, "bfloat16", "float32"), "bfloat16")
    # the same bytes, values and products as numpy operands give
    x = rng.standard_normal((2, 32)).astype(np.float32)
    qt = accel.quantize(torch.from_numpy(x), "q8_0")
    assert np.array_equal(np.asarray(qt.raw), np.asarray(accel.quantize(x, "q8_0").raw))
    deq = accel.dequantize(qt)
    assert isinstance(deq, torch.Tensor) and np.array_equal(deq.numpy(), oracle.dequantize(
        np.asarray(qt.raw), "q8_0", (2, 32)))
    y = accel.qmatmul(torch.from_numpy(x[:1]), qt)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_array_equal(y.numpy(), accel.qmatmul(x[:1], qt))


def test_tensor_in_tensor_out_and_mixed_with_numpy(rng):
    a = rng.standard_normal((2, 5)).astype(np.float32)
    t = accel.asarray(a, backend="cpu")
    out = accel.matmul(t, a.T)
    assert isinstance(out, accel.Tensor) and out.backend is t.backend
    ref, magnitude = oracle.matmul(a, a.T)
    assert_within(out.numpy(), ref, tolerance.matmul_bound(ref, magnitude, 5, "float32", "float32"), "float32")
    assert np.allclose(out.numpy(), a @ a.T, rtol=1e-6)


def test_asarray_dtype_conversion_and_tensor_moves(rng):
    a = rng.standard_normal((2, 3))
    t = accel.asarray(a, dtype="bfloat16", backend="cpu")
    assert t.dtype == "bfloat16" and t.numpy().dtype == ml_dtypes.bfloat16
    assert np.array_equal(t.numpy(), a.astype(ml_dtypes.bfloat16))
    moved = t.to("echo")
    assert moved.backend.name == "echo" and np.array_equal(moved.numpy(), t.numpy())
    assert np.array_equal(np.asarray(t), t.numpy())


def test_tensor_exports_dlpack_where_the_backend_can():
    t = accel.asarray(np.ones(3, np.float32), backend="cpu")
    assert np.array_equal(np.from_dlpack(t), np.ones(3, np.float32))
    assert torch.equal(torch.from_dlpack(t), torch.ones(3))


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"])
def test_dlpack_exports_ml_dtypes_tensors_through_torch(dtype):
    t = accel.asarray(np.full(4, 2, to_numpy_dtype(dtype)), backend="cpu")
    out = torch.from_dlpack(t)
    assert out.dtype == getattr(torch, dtype) and out.float().tolist() == [2.0] * 4


def test_a_host_dlpack_producer_of_bfloat16_gets_numpy_back():
    """numpy's DLPack cannot read bfloat16: torch reads it, and the result still comes back in
    numpy (ml_dtypes), as for any host producer (docs/api.md)."""
    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    a = Producer(torch.full((2, 3), 2.0, dtype=torch.bfloat16))
    b = Producer(torch.ones(3, 4, dtype=torch.bfloat16))
    out = accel.matmul(a, b, backend="cpu")
    assert type(out) is np.ndarray and out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).tolist() == [[6.0] * 4] * 2
