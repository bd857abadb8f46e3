"""The GGUF on-ramp: tensors written with gguf.GGUFWriter and read back with GGUFReader become
QTensors with accel's dimension order, and compute what the weights they were written from do."""
from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.errors import ArgumentError, ShapeError

gguf = pytest.importorskip("gguf", reason="gguf (a test dependency) is not installed")

from markers import needs_opencl  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small file mixing formats as llama.cpp's mixed quantizations do, plus a float tensor."""
    rng = np.random.default_rng(0)
    weights = {"blk.0.attn_q.weight": ("q4_0", rng.standard_normal((48, 128)).astype(np.float32)),
               "blk.0.ffn_down.weight": ("q8_0", rng.standard_normal((32, 256)).astype(np.float32)),
               "blk.0.experts.weight": ("q4_0", rng.standard_normal((2, 16, 64)).astype(np.float32)),
               # a Q4_K_M-style block: Q4_K everywhere, Q6_K for the sensitive tensors; Q5_K, MXFP4
               "blk.1.attn_q.weight": ("q4_k", rng.standard_normal((24, 512)).astype(np.float32)),
               "blk.1.ffn_down.weight": ("q6_k", rng.standard_normal((16, 256)).astype(np.float32)),
               "blk.1.attn_v.weight": ("q5_k", rng.standard_normal((8, 256)).astype(np.float32)),
               "blk.1.ffn_gate_exps.weight": ("mxfp4", rng.standard_normal((2, 4, 64)).astype(np.float32))}
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    quantized = {}
    for name, (fmt, w) in weights.items():
        quantized[name] = accel.quantize(w, fmt)
        writer.add_tensor(name, quantized[name].raw.copy(),
                          raw_dtype=getattr(gguf.GGMLQuantizationType, fmt.upper()))
    writer.add_tensor("output_norm.weight", np.ones(128, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(str(path)), quantized


def test_round_trip_keeps_format_shape_and_bytes(model):
    reader, quantized = model
    for t in reader.tensors:
        if t.name not in quantized:
            continue
        qt = accel.QTensor.from_gguf(t)
        want = quantized[t.name]
        assert (qt.fmt, qt.shape) == (want.fmt, want.shape)
        assert np.array_equal(qt.raw, want.raw)
        # gguf's own reference dequantizer reads the same values
        ref = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        assert np.array_equal(accel.dequantize(qt), ref.reshape(want.shape))


@pytest.mark.parametrize("backend", ["cpu", pytest.param("opencl:0", marks=needs_opencl)])
def test_qmatmul_on_weights_read_from_the_file(model, backend):
    reader, quantized = model
    t = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    got = accel.qmatmul(x, accel.QTensor.from_gguf(t, backend=backend), backend=backend)
    want = accel.qmatmul(x, quantized[t.name], backend="cpu")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["blk.1.attn_q.weight", "blk.1.ffn_down.weight"])
def test_k_quant_weights_from_the_file_multiply_as_written(model, name):
    """The Q4_K / Q6_K tensors read back compute, with float x and with x in q8_k (GGML's
    integer dot products), what the dequantized weights they were written from do."""
    reader, quantized = model
    t = next(t for t in reader.tensors if t.name == name)
    qt = accel.QTensor.from_gguf(t)
    assert qt.fmt == quantized[name].fmt and qt.shape == quantized[name].shape
    x = np.random.default_rng(2).standard_normal((3, qt.shape[1])).astype(np.float32)
    w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64)
    ref, mag = x.astype(np.float64) @ w.T, np.abs(x.astype(np.float64)) @ np.abs(w).T
    assert np.all(np.abs(accel.qmatmul(x, qt) - ref) <= 1e-5 * mag)
    # q8_k keeps x to 8 bits: within a percent of the float product, not equal to it
    xq = accel.qmatmul(x, qt, x_format="q8_k")
    assert np.all(np.abs(xq - ref) <= 0.02 * mag) and not np.array_equal(xq, accel.qmatmul(x, qt))


def test_a_float_tensor_comes_back_as_a_plain_tensor(model):
    reader, _ = model
    t = next(t for t in reader.tensors if t.name == "output_norm.weight")
    got = accel.QTensor.from_gguf(t)
    assert isinstance(got, accel.Tensor) and got.dtype == "float32"
    assert np.array_equal(got.numpy(), np.asarray(t.data).reshape(got.shape))
    with pytest.raises(ArgumentError, match="tensor: expected a tensor of gguf.GGUFReader"):
        accel.QTensor.from_gguf(np.zeros(4))


def test_from_raw_refuses_dims_in_ggml_order(model):
    """The bytes of a [48, 128] Q4_0 weight are [48, 72]; given as [72, 48] (dims reversed) the
    byte count matches, and accepting them would read every row wrong."""
    _, quantized = model
    raw = quantized["blk.0.attn_q.weight"].raw
    with pytest.raises(ShapeError, match=r"raw.shape: expected \(48, 72\)"):
        accel.QTensor.from_raw(raw.reshape(72, 48), "q4_0", (48, 128))
    flat = accel.QTensor.from_raw(raw.reshape(-1), "q4_0", (48, 128))  # flat bytes still fine
    assert np.array_equal(flat.raw, raw)
