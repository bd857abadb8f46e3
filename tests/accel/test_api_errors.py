"""Every typed error is reachable from a bad input, and its message names the argument, what was
expected and what came."""
import numpy as np
import pytest

import accel

f32 = np.ones((2, 3), np.float32)
q4 = np.ones((1, 2, 3, 8), np.float32)
kv = np.ones((1, 1, 5, 8), np.float32)


def _fp8_pair() -> tuple:
    a, _ = accel.quantize_fp8(np.ones((2, 128), np.float32), "float8_e4m3fn")
    b, _ = accel.quantize_fp8(np.ones((128, 3), np.float32), "float8_e4m3fn", operand_of="b")
    return a, b


@pytest.mark.parametrize("call,error,words", [
    (lambda: accel.matmul(f32, f32.astype(np.float16).T), accel.DTypeError, ["b.dtype", "float32", "float16"]),
    (lambda: accel.matmul(f32.astype(np.float64), f32.T.astype(np.float64)), accel.DTypeError, ["a.dtype", "float64"]),
    (lambda: accel.matmul(np.ones(3, np.float32), np.ones(3, np.float32)), accel.ShapeError, ["a.shape", "2 dimensions", "(3,)"]),
    (lambda: accel.matmul(f32, f32), accel.ShapeError, ["b.shape[-2]", "K", "2"]),
    (lambda: accel.matmul(np.ones((2, 2, 3), np.float32), np.ones((3, 3, 2), np.float32)), accel.ShapeError, ["batch", "broadcastable"]),
    (lambda: accel.matmul(f32, f32.T, out_dtype="int8"), accel.DTypeError, ["out_dtype", "int8"]),
    (lambda: accel.matmul(np.ones((2, 3), np.int8), np.ones((3, 2), np.int8), out_dtype="float32"), accel.DTypeError, ["out_dtype", "int32"]),
    (lambda: accel.matmul(f32, f32.T, out_dtype="complex"), accel.DTypeError, ["out_dtype", "complex"]),
    (lambda: accel.matmul([[1.0]], f32), accel.ArgumentError, ["a", "numpy array", "list"]),
    (lambda: accel.matmul(np.ones((2, 0), np.float32), np.ones((0, 2), np.float32)), accel.ShapeError, ["a.shape[-1]", "K >= 1"]),
    (lambda: accel.attention(q4, kv, kv, scale=1e300), accel.ArgumentError, ["scale", "float32"]),
    (lambda: accel.attention(q4, kv, kv, scale=10**400), accel.ArgumentError, ["scale"]),
    (lambda: accel.attention(q4, kv, kv[:, :, :3]), accel.ShapeError, ["v.shape[1:3]", "(1, 5)", "(1, 3)"]),
    (lambda: accel.attention(q4, kv[..., :4], kv), accel.ShapeError, ["k.shape[3]", "8", "4"]),
    (lambda: accel.attention(np.ones((1, 3, 3, 8), np.float32), np.ones((1, 2, 5, 8), np.float32), np.ones((1, 2, 5, 8), np.float32)), accel.ShapeError, ["q.shape[1]", "multiple", "3"]),
    (lambda: accel.attention(q4[0], kv, kv), accel.ShapeError, ["q.shape", "4 positive dimensions"]),
    (lambda: accel.attention(q4, kv.astype(np.float16), kv), accel.DTypeError, ["k.dtype", "float32", "float16"]),
    (lambda: accel.attention(q4.astype(np.int8), kv.astype(np.int8), kv.astype(np.int8)), accel.DTypeError, ["q.dtype", "int8"]),
    (lambda: accel.attention(q4, kv, kv, mask=np.ones((3, 6), bool)), accel.ShapeError, ["mask.shape", "broadcastable", "(3, 6)"]),
    (lambda: accel.attention(q4, kv, kv, mask=np.ones((3, 5), np.int32)), accel.DTypeError, ["mask.dtype", "int32"]),
    (lambda: accel.attention(q4, kv, kv, scale=float("nan")), accel.ArgumentError, ["scale", "finite"]),
    (lambda: accel.attention(q4, kv, kv, scale=[1.0]), accel.ArgumentError, ["scale"]),
    (lambda: accel.attention(q4, kv, kv, causal="yes"), accel.ArgumentError, ["causal", "bool", "'yes'"]),
    (lambda: accel.quantize(np.ones((2, 33), np.float32), "q8_0"), accel.ShapeError, ["x.shape[-1]", "multiple of 32", "33"]),
    (lambda: accel.quantize(np.ones(32, np.float32), "q7_1"), accel.ArgumentError, ["fmt", "q8_0", "q7_1"]),
    (lambda: accel.quantize(np.array(1.0, np.float32), "q8_0"), accel.ShapeError, ["x.shape", "at least 1 dimension", "()"]),
    (lambda: accel.quantize(np.ones(32, np.int8), "q8_0"), accel.DTypeError, ["x.dtype", "int8"]),
    (lambda: accel.dequantize(np.ones(32)), accel.ArgumentError, ["qt", "QTensor", "ndarray"]),
    (lambda: accel.qmatmul(np.ones((2, 32), np.float32), np.ones((3, 32), np.float32)), accel.ArgumentError, ["w", "QTensor"]),
    (lambda: accel.qmatmul(np.ones((2, 64), np.float32), accel.quantize(np.ones((3, 32), np.float32), "q8_0")), accel.ShapeError, ["x.shape[-1]", "32", "64"]),
    (lambda: accel.matmul(f32, f32.T, backend="nonexistent"), accel.BackendUnavailable, ["backend", "nonexistent"]),
    (lambda: accel.matmul(f32, f32.T, backend="cpu:7"), accel.BackendUnavailable, ["backend", "below 1", "cpu:7"]),
    (lambda: accel.matmul(f32, f32.T, backend="cpu:x"), accel.ArgumentError, ["backend", "name:index"]),
    (lambda: accel.asarray(object()), accel.ArgumentError, ["x", "object"]),
    (lambda: accel.asarray([[1.0], [1.0, 2.0]]), accel.ArgumentError, ["x", "rectangular"]),
    (lambda: accel.QTensor.from_raw(np.zeros(18, np.uint8), "q4_0", 32), accel.ShapeError, ["shape", "tuple of ints", "32"]),
    (lambda: accel.QTensor.from_raw(np.zeros(18, np.uint8), "q4_0", (-1, -2, 32)), accel.ShapeError, ["shape", "non-negative"]),
    (lambda: accel.asarray(np.ones(2), dtype="float128"), accel.DTypeError, ["dtype", "float128"]),
    (lambda: accel.attention(q4, kv, kv, causal=np.array(True)), accel.ArgumentError, ["causal", "bool", "array(True)"]),
    (lambda: accel.matmul(np.ma.masked_array(f32, mask=f32 > 0), f32.T), accel.ArgumentError, ["a", "plain numpy array", "MaskedArray"]),
    (lambda: accel.matmul(f32, f32.T.view(np.matrix)), accel.ArgumentError, ["b", "plain numpy array", "matrix"]),
    (lambda: accel.matmul(np.ones((2, 2), np.complex64), np.ones((2, 2), np.complex64)), accel.DTypeError, ["a.dtype", "a dtype accel knows", "complex64"]),
    (lambda: accel.QTensor.from_raw(accel.quantize(np.ones(32, np.float32), "q4_0"), "q4_0", (1, 32)), accel.ArgumentError, ["raw", "uint8 array", "QTensor"]),
    (lambda: accel.QTensor.from_raw(np.zeros(36, np.uint8), "q4_0", (2.5, 32)), accel.ShapeError, ["shape", "tuple of ints", "2.5"]),
    (lambda: accel.QTensor.from_raw(np.zeros(18, np.uint8), "q4_0", (True, 32)), accel.ShapeError, ["shape", "tuple of ints", "True"]),
    (lambda: accel.QTensor.from_raw(np.zeros((2, 18), np.uint8), "q4_0", (2, 40)), accel.ShapeError, ["shape[-1]", "multiple of 32", "40"]),
    # a QTensor built by hand: the kernels would read past bytes that are not its rows
    (lambda: accel.QTensor(accel.asarray(np.zeros((1, 18), np.uint8)), "q4_0", (64, 256)), accel.ShapeError, ["data", "(64, 144)", "(1, 18)"]),
    (lambda: accel.QTensor(accel.asarray(np.zeros((2, 18), np.float32)), "q4_0", (2, 32)), accel.ShapeError, ["data", "uint8", "float32"]),
    (lambda: accel.QTensor(np.zeros((2, 18), np.uint8), "q4_0", (2, 32)), accel.ArgumentError, ["data", "accel.Tensor", "from_raw", "ndarray"]),
    (lambda: accel.QTensor(accel.asarray(np.zeros((2, 18), np.uint8)), "q4_x", (2, 32)), accel.ArgumentError, ["fmt", "q4_x"]),
    (lambda: accel.QTensor(accel.asarray(np.zeros((2, 18), np.uint8)), "q4_0", (2, 48)), accel.ShapeError, ["shape[-1]", "multiple of 32", "48"]),
    (lambda: accel.quantize_fp8(f32, np.dtype(np.float32)), accel.ArgumentError, ["dtype", "float8_e4m3fn", "float32"]),
    (lambda: accel.scaled_matmul(*_fp8_pair(), 10**400, 1.0), accel.ArgumentError, ["scale_a", "finite", "digits"]),
    (lambda: accel.scaled_matmul(*_fp8_pair(), 1.0, float("nan")), accel.ArgumentError, ["scale_b", "finite", "nan"]),
    (lambda: accel.scaled_matmul(*_fp8_pair(), True, 1.0), accel.ArgumentError, ["scale_a", "True"]),
    (lambda: accel.scaled_matmul(*_fp8_pair(), 1.0, 1.0, out_dtype=None), accel.DTypeError, ["out_dtype", "None"]),
])
def test_bad_input_raises_typed_error_naming_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, accel.AccelError)
    for word in words:
        assert word in str(info.value)


def test_a_sparse_torch_tensor_is_refused_not_densified_by_accident():
    torch = pytest.importorskip("torch")
    with pytest.raises(accel.ArgumentError, match="^a: expected a dense .*sparse_coo"):
        accel.matmul(torch.ones(2, 3).to_sparse(), torch.ones(3, 4))


def test_a_numpy_scalar_scale_is_checked_without_overflow_warnings():
    with np.errstate(all="raise"):  # an overflow in the range check itself would raise here
        for scale in (np.float16(0.125), np.float32(0.125), np.float32(3e38)):
            assert accel.attention(q4, kv, kv, scale=scale).shape == q4.shape


def test_from_raw_takes_any_iterable_shape():
    raw = np.zeros((4, 18), np.uint8)
    assert accel.QTensor.from_raw(raw, "q4_0", (s for s in (4, 32))).shape == (4, 32)


def test_quantized_bytes_are_read_only_where_they_are_the_weights_storage():
    qt = accel.quantize(np.ones((2, 32), np.float32), "q8_0", backend="cpu")
    before = accel.dequantize(qt).copy()
    with pytest.raises(ValueError, match="read-only"):
        qt.raw[0, 0] = 0
    assert np.array_equal(accel.dequantize(qt), before)


def test_declined_case_raises_unsupported_error_naming_backend_op_dtype_and_reason():
    q = np.ones((1, 1, 2, 8), np.float32)
    with pytest.raises(accel.UnsupportedError) as info:
        accel.attention(q, q, q, backend="echo")
    msg = str(info.value)
    assert "echo" in msg and "attention" in msg and "float32" in msg and "declined on purpose" in msg


def test_operands_on_different_backends_are_refused():
    a = accel.asarray(f32, backend="cpu")
    b = accel.asarray(f32.T.copy(), backend="echo")
    with pytest.raises(accel.DeviceMismatchError, match="cpu:0"):
        accel.matmul(a, b)
    with pytest.raises(accel.DeviceMismatchError, match="backend"):
        accel.matmul(a, f32.T, backend="echo")


def test_validation_does_not_depend_on_earlier_calls():
    q = np.ones((1, 1, 2, 8), np.float32)
    accel.attention(q, q, q, causal=True)
    with pytest.raises(accel.ArgumentError, match="causal"):
        accel.attention(q, q, q, causal=1)  # 1 == True, but only a bool is a valid flag


def test_execute_checks_the_output_it_is_given():
    be = accel.get_backend("cpu")
    spec = accel.spec.matmul_spec((4, 4), "float32", (4, 4), "float32")
    a = accel.asarray(np.eye(4, dtype=np.float32), backend=be)
    small = accel.Tensor.empty(be, (2, 2), "float32")
    with pytest.raises(accel.ArgumentError, match="out"):
        accel.dispatch.execute(be, spec, a, a, out=small)


def test_error_classes_also_subclass_the_matching_builtin():
    assert issubclass(accel.ShapeError, ValueError) and issubclass(accel.DTypeError, TypeError)
    assert issubclass(accel.UnsupportedError, NotImplementedError)
