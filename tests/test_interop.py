"""Array in, array out: numpy, torch and accel.Tensor operands come back as what they were."""
import ml_dtypes
import numpy as np
import pytest
import torch

import accel


def test_numpy_in_numpy_out(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    out = accel.matmul(a, a.T)
    assert type(out) is np.ndarray


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_in_torch_out(rng, dtype):
    a = torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)).to(dtype)
    out = accel.matmul(a, a.T)  # a transposed (non-contiguous) torch view is fine
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == (3, 3)
    ref = (a.double() @ a.T.double()).to(dtype)
    assert torch.allclose(out.double(), ref.double(), rtol=2e-2, atol=1e-2)


def test_torch_attention_and_quant_round_trip(rng):
    q = torch.randn(1, 2, 3, 32)
    out = accel.attention(q, q, q, causal=True)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 2, 3, 32)
    qt = accel.quantize(torch.ones(2, 32), "q8_0")
    assert isinstance(accel.dequantize(qt), torch.Tensor)
    assert isinstance(accel.qmatmul(torch.ones(1, 32), qt), torch.Tensor)


def test_tensor_in_tensor_out_and_mixed_with_numpy(rng):
    a = rng.standard_normal((2, 5)).astype(np.float32)
    t = accel.asarray(a, backend="cpu")
    out = accel.matmul(t, a.T)
    assert isinstance(out, accel.Tensor) and out.backend is t.backend
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
