"""The format table's codecs against ggml's own quantizers (ggml-python) and gguf-py's
dequantizers: every weight format byte for byte, on rows at the formats' edges."""
import numpy as np
import pytest

import accel
from accel.errors import ArgumentError, ShapeError
from accel.formats import FORMATS

gguf = pytest.importorskip("gguf", reason="gguf-py (the test extra) is the dequantize reference")

WEIGHTS = [f for f in FORMATS.values() if not f.activation_only]
NEW = ("q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "q1_0", "tq1_0", "tq2_0", "nvfp4",
       "iq2_s", "iq3_xxs", "iq3_s", "iq1_m")


def _reference_values(raw: np.ndarray, f, k: int) -> np.ndarray:
    """gguf-py's dequantized values, or ggml's own to_float where gguf-py has no decoder (q1_0)."""
    if f.name == "q1_0":
        from accel.conformance import ggml_ref
        if not ggml_ref.available():
            pytest.skip("gguf-py has no q1_0 decoder and ggml-python (the ggml extra) is missing")
        return ggml_ref.dequantize(raw.reshape(-1, f.row_bytes(k)), f.name, k)
    return gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, f.ggml))


def _rows(block: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    K = 2 * max(block, 256)
    rows = [rng.standard_normal(K) * 3,                       # plain
            np.zeros(K), np.full(K, -2.5),                    # all-zero and constant rows
            rng.standard_normal(K) * (rng.random(K) < 0.05) * 1e3,  # sparse outliers
            rng.standard_normal(K) * 1e-6,                    # tiny values (subnormal fp16 scales)
            np.linspace(-1, 1, K)]
    return np.array(rows, np.float32)


@pytest.fixture(scope="module")
def ggml_ref():
    from accel.conformance import ggml_ref
    if not ggml_ref.available():
        pytest.skip("ggml-python (the ggml extra) is not installed: it is the quantize oracle")
    return ggml_ref


#: the codebook formats ggml quantizes only with an importance matrix (its quantizer aborts
#: without one): accel.quantize declines them
NEEDS_IMATRIX = tuple(f.name for f in FORMATS.values() if f.needs_imatrix)


@pytest.mark.parametrize("fmt", [f.name for f in FORMATS.values() if f.name not in NEEDS_IMATRIX])
def test_quantize_gives_ggml_bytes(fmt, ggml_ref):
    x = _rows(FORMATS[fmt].block)
    got = accel.quantize(x, fmt, backend="cpu").raw
    assert np.array_equal(got, ggml_ref.quantize(x, fmt))


@pytest.mark.parametrize("fmt", NEEDS_IMATRIX)
def test_quantize_without_the_imatrix_ggml_needs_is_declined_by_name(fmt):
    with pytest.raises(accel.UnsupportedError, match=f"{fmt} only with an importance matrix: pass imatrix="):
        accel.quantize(np.ones((1, 256), np.float32), fmt, backend="cpu")


@pytest.mark.parametrize("fmt", NEEDS_IMATRIX + ("q4_k", "q5_0", "iq4_xs", "iq3_s"))
def test_quantize_with_an_imatrix_gives_ggmls_weighted_bytes(fmt, ggml_ref):
    import ctypes

    import ggml

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    im = (rng.random(512) * np.linspace(0.1, 10, 512)).astype(np.float32)
    t = getattr(ggml, f"GGML_TYPE_{fmt.upper()}")
    want = np.zeros((3, ggml.ggml_row_size(t, 512)), np.uint8)
    ggml.ggml_quantize_chunk(t, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                             want.ctypes.data_as(ctypes.c_void_p), 0, 3, 512,
                             im.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    q = accel.quantize(x, fmt, imatrix=im)
    assert np.array_equal(np.asarray(q.raw).reshape(3, -1), want) and q.shape == (3, 512)
    if not FORMATS[fmt].needs_imatrix:  # the weights change the search's answer
        assert not np.array_equal(q.raw, accel.quantize(x, fmt).raw)


@pytest.mark.parametrize("bad, error, match", [
    (np.ones(255, np.float32), ShapeError, r"imatrix.shape: expected \(256,\)"),
    (np.ones(256, np.int32), accel.DTypeError, "imatrix.dtype"),
    (np.full(256, -1.0, np.float32), ArgumentError, "imatrix: expected finite weights >= 0"),
    (np.full(256, np.nan, np.float32), ArgumentError, "imatrix: expected finite weights >= 0"),
    ([1.0] * 256, ArgumentError, "imatrix: expected a numpy array")])
def test_a_bad_imatrix_is_a_typed_error_naming_it(bad, error, match):
    with pytest.raises(error, match=match):
        accel.quantize(np.ones((2, 256), np.float32), "iq2_xxs", imatrix=bad)
    with pytest.raises(ArgumentError, match="x: expected finite values"):
        accel.quantize(np.full((1, 256), np.inf, np.float32), "iq2_xxs", imatrix=np.ones(256, np.float32))


def _blocks_of(f, x, ggml_ref) -> np.ndarray:
    """ggml's bytes of x, or random blocks with modest float16 scales where ggml needs an imatrix."""
    if f.name not in NEEDS_IMATRIX:
        return ggml_ref.quantize(x, f.name)
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 256, (x.size // f.block, f.block_bytes), dtype=np.uint8)
    raw[:, :2] = (rng.standard_normal(len(raw)) * 0.05).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(x.shape[0], -1)


@pytest.mark.parametrize("f", WEIGHTS, ids=lambda f: f.name)
def test_dequantize_equals_gguf_py(f, ggml_ref):  # ggml's to_float for q1_0
    x = _rows(f.block)
    raw = _blocks_of(f, x, ggml_ref)
    qt = accel.QTensor.from_raw(raw, f.name, x.shape, backend="cpu")
    want = _reference_values(raw, f, x.shape[1])
    got = accel.dequantize(qt)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("fmt", NEW)
def test_qmatmul_with_the_x_format_is_ggmls_block_dot(fmt):
    """x quantized to the weight's vec_dot format: the result is sum d_x d_w (integer dot), i.e.
    dequantized x times dequantized w, up to float32 rounding (q8_1's sum is a float16)."""
    f = FORMATS[fmt]
    rng = np.random.default_rng(3)
    w = accel.quantize(rng.standard_normal((6, 512)).astype(np.float32), fmt, backend="cpu")
    x = rng.standard_normal((3, 512)).astype(np.float32)
    xd = accel.dequantize(accel.quantize(x, f.vec_dot, backend="cpu")).astype(np.float64)
    want = xd @ accel.dequantize(w).astype(np.float64).T
    got = accel.qmatmul(x, w, x_format=f.vec_dot, backend="cpu")
    bound = 2e-6 if f.vec_dot != "q8_1" else 2e-3  # s = fp16(d * sum) carries a float16 rounding
    assert np.abs(got - want).max() <= bound * np.abs(want).max()
    assert np.abs(accel.qmatmul(x, w, backend="cpu") - x @ accel.dequantize(w).T).max() <= 1e-4


@pytest.mark.parametrize("fmt", NEW + NEEDS_IMATRIX)
def test_gguf_file_of_every_new_type_loads(fmt, tmp_path, ggml_ref):
    f = FORMATS[fmt]
    x = _rows(f.block)[:3]
    raw = np.ascontiguousarray(_blocks_of(f, x, ggml_ref))
    path = str(tmp_path / "w.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("w", raw, raw_dtype=getattr(gguf.GGMLQuantizationType, f.ggml))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    qt = accel.QTensor.from_gguf(gguf.GGUFReader(path).tensors[0])
    assert qt.fmt == fmt and qt.shape == x.shape
    assert np.array_equal(accel.dequantize(qt), _reference_values(raw, f, x.shape[1]).reshape(x.shape))


@pytest.mark.parametrize("fmt", NEW)
def test_bad_bytes_and_shapes_are_typed_errors(fmt):
    f = FORMATS[fmt]
    with pytest.raises(ShapeError, match="raw"):
        accel.QTensor.from_raw(np.zeros(f.block_bytes + 1, np.uint8), fmt, (1, f.block))
    with pytest.raises(ShapeError, match="x.shape"):
        accel.quantize(np.zeros((2, f.block + 16), np.float32), fmt)
    with pytest.raises(ArgumentError, match="x_format"):
        accel.qmatmul(np.zeros((1, f.block), np.float32),
                      accel.quantize(np.zeros((1, f.block), np.float32), fmt),
                      x_format="q8_1" if f.vec_dot != "q8_1" else "q8_0")


@pytest.mark.parametrize("kind,dtype", [("F32", np.float32), ("F16", np.float16), ("BF16", "bfloat16")])
def test_float_gguf_tensors_come_back_as_plain_tensors(kind, dtype, tmp_path):
    import ml_dtypes
    want = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    host = want.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    path = str(tmp_path / "f.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("t", host.view(np.uint16) if kind == "BF16" else host,
                 raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    t = accel.QTensor.from_gguf(gguf.GGUFReader(path).tensors[0], backend="cpu")
    assert isinstance(t, accel.Tensor) and t.shape == (2, 3, 4)
    assert np.array_equal(t.numpy().astype(np.float32), want)
