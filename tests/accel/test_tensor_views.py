"""accel.Tensor as a device array: views (reshape, transpose, basic indexing) over the same
buffer, device copies (contiguous, astype), NumPy 2's __array__ protocol, and inputs that speak
DLPack or are pyopencl arrays."""
import numpy as np
import pytest
import torch

import accel
from accel.conformance import oracle, tolerance
from accel.dtypes import to_numpy_dtype
from markers import cuda_gpu_count
from tolerance_checks import assert_within

BACKENDS = ["cpu", "opencl"]

# each view is written twice, for numpy and for accel.Tensor: the reference is numpy's
VIEWS = {
    "T": lambda x: x.T,
    "transpose": lambda x: x.transpose(1, 0, 2),
    "int": lambda x: x[1],
    "negative int": lambda x: x[-1, 0],
    "slice": lambda x: x[:, 1:3],
    "step": lambda x: x[:, ::2, 1::3],
    "reversed": lambda x: x[::-1, :, ::-2],
    "ellipsis, None": lambda x: x[..., None, 2],
    "reshape view": lambda x: x.reshape(6, 4),
    "reshape -1": lambda x: x.reshape(-1),
    "reshape needs a copy": lambda x: x.transpose(2, 0, 1).reshape(4, -1),
    "chain": lambda x: x[:, 1:].transpose(2, 1, 0)[::3].reshape(2, 2, 2),
    "empty": lambda x: x[:, 3:],
    "one element": lambda x: x[1, 2, 3],
    "one element, ...": lambda x: x[..., 1, 2, 3],
}


def _backend(name, opencl_backend):
    return opencl_backend if name == "opencl" else accel.get_backend(name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", VIEWS)
def test_views_read_what_numpy_views_read(backend, view, opencl_backend):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = accel.asarray(a, backend=_backend(backend, opencl_backend))
    got, want = VIEWS[view](t), np.asarray(VIEWS[view](a))
    assert isinstance(got, accel.Tensor) and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    if view != "reshape needs a copy":  # numpy's is a view: so is accel's
        assert got.buf is t.buf
        assert got.strides == tuple(s // 4 for s in want.strides)


def test_views_never_touch_the_data_and_materialize_on_the_device(opencl_backend):
    t = accel.asarray(np.arange(12, dtype=np.float16).reshape(3, 4), backend=opencl_backend)
    with _transfers(opencl_backend) as moved:
        v = t[1:, ::-1].T
        c = v.contiguous()
        r = t.T.reshape(12)  # no view has this shape: a device copy
    assert moved == {"upload": 0, "download": 0}
    assert c.is_contiguous and c.buf is not t.buf and r.is_contiguous
    np.testing.assert_array_equal(c.numpy(), np.arange(12, dtype=np.float16).reshape(3, 4)[1:, ::-1].T)
    np.testing.assert_array_equal(r.numpy(), np.arange(12, dtype=np.float16).reshape(3, 4).T.reshape(12))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_c_ordered_but_for_dims_of_one_is_contiguous(backend, opencl_backend):
    # a decode step's [1, S=1, H, D] -> [1, H, 1, D] transpose and the prefix of a one-head KV
    # cache read the same memory in the same order: the kernels take them without a copy
    be = opencl_backend if backend == "opencl" else backend
    x = np.arange(2 * 1 * 4 * 3, dtype=np.float32).reshape(2, 1, 4, 3)
    t = accel.asarray(x, backend=be)
    for view, ref in ((t[:1].transpose(0, 2, 1, 3), x[:1].transpose(0, 2, 1, 3)),
                      (t[:, :, :2][:1], x[:, :, :2][:1])):
        assert view.is_contiguous == ref.flags.c_contiguous and view.buf is t.buf
        assert view.contiguous() is view if view.is_contiguous else True
        np.testing.assert_array_equal(view.numpy(), ref)
    cache = accel.asarray(np.arange(10 * 3, dtype=np.float32).reshape(1, 1, 10, 3), backend=be)
    prefix = cache[:, :, :4]
    assert prefix.is_contiguous and prefix.contiguous() is prefix
    np.testing.assert_array_equal(accel.add(prefix, prefix).numpy() if backend == "opencl" else
                                  prefix.numpy() * 2, np.arange(12, dtype=np.float32).reshape(1, 1, 4, 3) * 2)
    assert not t[:, :, :2].is_contiguous  # a real gap between rows stays a strided view


def test_bad_views_are_typed_errors():
    t = accel.asarray(np.zeros((2, 3), np.float32), backend="cpu")
    with pytest.raises(accel.OutOfBoundsError, match="key"):
        t[2]
    with pytest.raises(IndexError):  # numpy's exception type too
        t[:, -4]
    with pytest.raises(accel.ArgumentError, match="basic indexing"):
        t[np.array([0, 1])]
    with pytest.raises(accel.ArgumentError, match="basic indexing"):
        t[True]
    with pytest.raises(accel.ShapeError, match="6 elements"):
        t.reshape(4, -1)
    with pytest.raises(accel.ShapeError, match="at most one -1"):
        t.reshape(-1, -1)
    with pytest.raises(accel.ShapeError, match="axes"):
        t.transpose(0, 0)
    with pytest.raises(accel.DTypeError, match="dtype"):
        t.astype("float31")
    with pytest.raises(accel.ArgumentError, match=r"at most one \.\.\. \(Ellipsis\)"):
        t[..., 0, ...]
    with pytest.raises(TypeError, match="0-d"):
        len(t[0, 0])
    with pytest.raises(accel.ArgumentError, match=r"^key: expected slices of ints with a non-zero step"):
        t[::0]  # numpy's own ValueError, not an accel error, before
    with pytest.raises(accel.ArgumentError, match="non-zero step"):
        t[0.5:]


@pytest.mark.parametrize("backend", BACKENDS)
def test_truth_values_read_as_numpy(backend, opencl_backend):
    def dev(a):
        return accel.asarray(np.asarray(a, np.float32), backend=backend)
    # Python fell back to len(): a tensor holding one 0.0 was true
    assert bool(dev([0.0])) is False and bool(dev([2.0])) is True and bool(dev(0.0)) is False
    for ambiguous in ([1.0, 1.0], np.zeros((0,))):
        with pytest.raises(accel.ArgumentError, match=r"^the tensor: expected one element"):
            bool(dev(ambiguous))


def test_sizes_and_iteration_read_as_numpy():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    t = accel.asarray(a, backend="cpu")
    assert (len(t), t.size, t.ndim) == (3, 6, 2)
    assert [row.numpy().tolist() for row in t] == a.tolist()


FLOATS = ["float32", "float16", "bfloat16"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("src", FLOATS + ["int32"])
@pytest.mark.parametrize("dst", FLOATS + ["int8"])
def test_astype_rounds_as_numpy_and_ml_dtypes(backend, src, dst, opencl_backend, rng):
    x = (rng.standard_normal((5, 33)) * 300).astype(to_numpy_dtype(src))
    x[0, :4] = np.array([np.inf, -np.inf, 65519.0, 1e-7]).astype(x.dtype) if src != "int32" else 7
    t = accel.asarray(x, backend=_backend(backend, opencl_backend))[:, 1:].T  # a strided view
    with np.errstate(over="ignore", invalid="ignore"):  # float16's overflow; int8's out of range
        got = t.astype(dst)
        want = np.ascontiguousarray(x[:, 1:].T).astype(to_numpy_dtype(dst))
    assert got.dtype == dst and got.shape == (32, 5) and got.is_contiguous
    if dst == "int8":  # casting overflow is undefined: only values in range are compared
        inside = np.abs(x[:, 1:].T.astype(np.float32)) <= 100
        np.testing.assert_array_equal(got.numpy()[inside], want[inside])
    else:  # bit for bit: the same rounding to nearest even, infinities and subnormals included
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))


def test_astype_between_floats_stays_on_the_device(opencl_backend, rng):
    t = accel.asarray(rng.standard_normal((4, 8)).astype(np.float32), backend=opencl_backend)
    with _transfers(opencl_backend) as moved:
        h = t.T.astype("bfloat16").astype("float16")
        same = t.astype("float32", copy=False)
    assert moved == {"upload": 0, "download": 0} and same is t and h.dtype == "float16"


def test_attention_into_matmul_on_opencl_never_goes_through_the_host(opencl_backend, rng):
    # an attention block's output projection: [B, H, S, D] -> [B, S, H * D] @ W, on the device
    B, H, S, D, E = 1, 2, 5, 16, 8
    q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
    w = rng.standard_normal((H * D, E)).astype(np.float32)
    tq, tk, tv, tw = (accel.asarray(a, backend=opencl_backend) for a in (q, k, v, w))

    def block():
        o = accel.attention(tq, tk, tv, causal=True)
        return accel.matmul(o.transpose(0, 2, 1, 3).reshape(B, S, H * D), tw)

    block()  # builds the kernels and uploads each plan's constants once
    with _transfers(opencl_backend) as moved:
        out = block()
    assert moved == {"upload": 0, "download": 0}
    assert isinstance(out, accel.Tensor) and out.shape == (B, S, E)
    att = oracle.attention(q, k, v, None, causal=True, scale=D ** -0.5, mask_kind=None)
    x = att["out"].transpose(0, 2, 1, 3).reshape(B, S, H * D)
    ref, magnitude = oracle.matmul(x, w.astype(np.float64))
    # the attention's own error, carried through W's rows, plus the matmul's
    carried = np.abs(tolerance.attention_bound(att, D, S, "float32", "float32")).max() * np.abs(w).sum(0)
    bound = tolerance.matmul_bound(ref, magnitude, H * D, "float32", "float32") + carried
    assert_within(out.numpy(), ref, bound, "float32")


# -- NumPy 2's __array__ ----------------------------------------------------------------------
def test_array_protocol_copy_semantics(opencl_backend):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    dev = accel.asarray(a, backend=opencl_backend)
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(dev, copy=False)
    for copy in (None, True):
        out = np.asarray(dev, copy=copy)
        np.testing.assert_array_equal(out, a)
    assert np.asarray(dev.T, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.asarray(dev[:, 1], dtype=np.int16), [1, 4])
    host = accel.asarray(a, backend="cpu")
    view = np.asarray(host.T, copy=False)  # host memory: a real view, strides and all
    assert np.shares_memory(view, host.buf) and np.array_equal(view, a.T)
    assert not np.shares_memory(np.asarray(host, copy=True), host.buf)
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(host, dtype=np.float64, copy=False)


# -- inputs ---------------------------------------------------------------------------------------
class DLPackOnly:
    """A producer that speaks only the DLPack protocol (as a JAX array does)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("backend", BACKENDS)
def test_any_dlpack_producer_is_an_operand(backend, opencl_backend, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 2)).astype(np.float32)
    be = _backend(backend, opencl_backend)
    want = accel.matmul(a, b, backend=be)
    got = accel.matmul(DLPackOnly(a), DLPackOnly(b), backend=be)
    assert type(got) is np.ndarray  # a host producer's result comes back as numpy
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(accel.asarray(DLPackOnly(a), backend=be).numpy(), a)
    # bfloat16, which numpy cannot read through DLPack, comes through torch's from_dlpack
    tb = torch.from_numpy(a).to(torch.bfloat16)
    t = accel.asarray(DLPackOnly(tb), backend=be)
    assert t.dtype == "bfloat16"
    np.testing.assert_array_equal(t.numpy().astype(np.float32), tb.float().numpy())


def test_an_object_without_an_array_protocol_is_refused():
    with pytest.raises(accel.ArgumentError, match="__dlpack__"):
        accel.matmul(object(), np.ones((2, 2), np.float32))


def test_tensors_export_through_dlpack(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = accel.asarray(a, backend="cpu")
    np.testing.assert_array_equal(torch.from_dlpack(t.T).numpy(), a.T)  # strides go along
    np.testing.assert_array_equal(np.from_dlpack(t[1:, ::2]), a[1:, ::2])
    assert not hasattr(t, "__cuda_array_interface__")


def test_pyopencl_arrays_are_zero_copy_operands(opencl_backend, rng):
    import pyopencl as cl
    import pyopencl.array as cla

    a = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal((8, 3)).astype(np.float32)
    xa = cla.to_device(opencl_backend.queue, a)
    xb = cla.to_device(opencl_backend.queue, b)
    want = accel.matmul(a, b, backend=opencl_backend), accel.matmul(a[1:4], b, backend=opencl_backend)
    with _transfers(opencl_backend) as moved:  # the plans' constants are uploaded: only data counts
        out = accel.matmul(xa, xb)
        sliced = accel.matmul(xa[1:4], xb)  # a pyopencl view with an offset
    assert moved == {"upload": 0, "download": 0}
    assert isinstance(out, cla.Array) and out.queue == opencl_backend.queue
    np.testing.assert_array_equal(out.get(), want[0])
    np.testing.assert_array_equal(sliced.get(), want[1])
    t = accel.asarray(xa, backend=opencl_backend)
    assert t.buf is xa.base_data  # the same memory
    half = accel.asarray(xa[::2], dtype="float16")  # converted on the device
    np.testing.assert_array_equal(half.numpy(), a[::2].astype(np.float16))
    with pytest.raises(accel.ArgumentError, match="DLPack"):  # OpenCL memory has no DLPack device
        torch.from_dlpack(t)
    other = cl.Context([opencl_backend.dev.device])
    with pytest.raises(accel.DeviceMismatchError, match="context"):
        accel.matmul(cla.to_device(cl.CommandQueue(other), a), b)


class _transfers:
    """Counts the backend's host <-> device copies inside a ``with`` block: the real methods
    run; only their calls are counted."""

    def __init__(self, backend):
        self.backend, self.moved = backend, {"upload": 0, "download": 0}

    def __enter__(self):
        for name in self.moved:
            real = getattr(self.backend, name)

            def counted(*args, _real=real, _name=name, **kwargs):
                self.moved[_name] += 1
                return _real(*args, **kwargs)

            setattr(self.backend, name, counted)
        return self.moved

    def __exit__(self, *exc):
        for name in self.moved:
            delattr(self.backend, name)  # back to the class's methods


def test_views_of_more_dims_than_the_copy_kernel_takes_go_through_the_host(opencl_backend):
    a = np.arange(2 ** 7, dtype=np.int8).reshape((2,) * 7)
    t = accel.asarray(a, backend=opencl_backend)
    # seven axes that no two merge into one: past kernels/copy.cl's six, the host copies
    np.testing.assert_array_equal(t.T.contiguous().numpy(), a.T)
    np.testing.assert_array_equal(t[:, :, :, :, :, :, ::-1].T.astype("int8").numpy(), a[..., ::-1].T)


class CUDAArrayOnly:
    """A producer with only the CUDA array interface (as a Numba device array)."""

    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False), "version": 3}


class DLPackOnGPU(DLPackOnly):
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


@pytest.mark.skipif(cuda_gpu_count() > 0, reason="a GPU is here: the no-GPU path does not apply")
@pytest.mark.parametrize("producer", [CUDAArrayOnly(), DLPackOnGPU(np.zeros(4, np.float32))])
def test_gpu_producers_go_to_cupy_which_says_why_it_cannot_take_them(producer):
    # no GPU on this machine: the array reaches CuPy, whose refusal becomes a typed error
    with pytest.raises(accel.BackendUnavailable, match=r"cupy\.(asarray|from_dlpack)"):
        accel.asarray(producer)


def test_an_out_that_is_a_view_is_refused(rng):
    from accel.dispatch import execute
    from accel.spec import matmul_spec

    be = accel.get_backend("cpu")
    a = accel.asarray(rng.standard_normal((2, 2)).astype(np.float32), backend=be)
    out = accel.Tensor.empty(be, (2, 2), "float32").T  # kernels would ignore its strides
    with pytest.raises(accel.ArgumentError, match="contiguous"):
        execute(be, matmul_spec((2, 2), "float32", (2, 2), "float32"), a, a, out=out)


def test_a_kernel_argument_is_a_contiguous_tensor_of_the_launching_device(opencl_backend):
    t = accel.asarray(np.zeros((4, 4), np.float32), backend=opencl_backend)
    assert opencl_backend.launch_buffer(0, t) is t.buf
    with pytest.raises(accel.ArgumentError, match=r"^args\[1\]: expected a contiguous tensor on opencl"):
        opencl_backend.launch_buffer(1, t.T)  # a kernel would read the untransposed bytes
    with pytest.raises(accel.ArgumentError, match=r"^args\[0\]: expected a contiguous tensor"):
        opencl_backend.launch_buffer(0, accel.asarray(np.zeros(4, np.float32), backend="cpu"))
