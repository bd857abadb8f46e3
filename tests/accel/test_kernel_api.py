"""accel.kernel: CUDA launch semantics on the OpenCL backend (run on PoCL), typed errors for every
bad argument, and compiler logs that point at the user's own lines."""
from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.errors import (AccelError, ArgumentError, CompileError, DeviceMismatchError,
                          UnsupportedError)
from accel.kernel import kernel

# each work-item writes its flattened global id, computed from CUDA-style block/thread indices
IDS = """__kernel void ids(__global int* out, int width, int height) {
    int x = get_group_id(0) * get_local_size(0) + get_local_id(0);
    int y = get_group_id(1) * get_local_size(1) + get_local_id(1);
    int z = get_group_id(2) * get_local_size(2) + get_local_id(2);
    out[(z * height + y) * width + x] = (z * 100 + y) * 100 + x;
}"""

SCALE = """__kernel void scale(__global float* x, float a, int n) {
    int i = get_global_id(0);
    if (i < n) x[i] *= a;
}"""


@pytest.fixture(scope="module")
def backend(opencl_backend):
    return opencl_backend


@pytest.fixture(scope="module")
def scale(backend):
    return kernel(SCALE, "scale", backend=backend)


def _dev(backend, a):
    return accel.asarray(a, backend=backend)


@pytest.mark.parametrize("grid, block", [((2, 3, 2), (4, 2, 1)), ((3, 2), (2, 5)), (5, 3)])
def test_grid_counts_blocks_and_block_counts_threads(backend, grid, block):
    g = grid if isinstance(grid, tuple) else (grid,)
    b = block if isinstance(block, tuple) else (block,)
    g, b = g + (1,) * (3 - len(g)), b + (1,) * (3 - len(b))
    width, height, depth = (g[i] * b[i] for i in range(3))
    out = _dev(backend, np.full(width * height * depth, -1, np.int32))
    kernel(IDS, "ids", backend=backend)(grid, block, out, np.int32(width), np.int32(height))
    z, y, x = np.meshgrid(np.arange(depth), np.arange(height), np.arange(width), indexing="ij")
    np.testing.assert_array_equal(out.numpy(), ((z * 100 + y) * 100 + x).ravel())


def test_scalars_and_tensors_in_place(backend, scale):
    x = _dev(backend, np.arange(10, dtype=np.float32))
    scale(1, 16, x, np.float32(3), np.int32(10))
    np.testing.assert_array_equal(x.numpy(), np.arange(10, dtype=np.float32) * 3)


def test_defines_become_compiler_macros(backend):
    src = "__kernel void fill(__global int* x) { x[get_global_id(0)] = VALUE * FACTOR; }"
    x = _dev(backend, np.zeros(4, np.int32))
    kernel(src, "fill", backend=backend, defines={"VALUE": 6, "FACTOR": np.int64(7)})(1, 4, x)
    np.testing.assert_array_equal(x.numpy(), np.full(4, 42, np.int32))


def test_accel_dialect_is_detected_and_gets_the_portability_header(backend):
    src = "KERNEL void iota(GLOBAL i32* x) { x[LOCAL_ID(0)] = LOCAL_ID(0) + 1; }"
    k = kernel(src, "iota", backend=backend)
    assert k.dialect == "accel"
    x = _dev(backend, np.zeros(8, np.int32))
    k(1, 8, x)
    np.testing.assert_array_equal(x.numpy(), np.arange(1, 9, dtype=np.int32))


def test_compile_error_carries_the_log_with_the_users_line(backend):
    src = "__kernel void broken(__global float* x) {\n    x[0] = 1.0f;\n    x[1] = undefined_name;\n}"
    with pytest.raises(CompileError) as info:
        kernel(src, "broken", backend=backend)
    assert isinstance(info.value, AccelError)
    assert "undefined_name" in info.value.log and ":3:" in info.value.log


def test_cuda_source_on_opencl_points_to_accel_port(backend):
    with pytest.raises(ArgumentError, match="accel port FILE.cu --to opencl"):
        kernel("__global__ void k(float* x) { x[0] = 1; }", "k", backend=backend)


def test_a_backend_without_kernels_says_so():
    with pytest.raises(UnsupportedError, match="does not compile kernels"):
        kernel(SCALE, "scale", backend="cpu")


@pytest.mark.parametrize("arg, value", [
    ("grid", 0), ("grid", -2), ("grid", (1, 2, 3, 4)), ("grid", ()), ("grid", 1.5), ("grid", True),
    ("grid", "4"), ("grid", [2, 2]), ("grid", 2**31), ("block", 0), ("block", (8, 0)),
])
def test_bad_launch_dimensions(backend, scale, arg, value):
    x = _dev(backend, np.zeros(4, np.float32))
    dims = {"grid": 1, "block": 4, arg: value}
    with pytest.raises(ArgumentError, match=f"^{arg}: expected"):
        scale(dims["grid"], dims["block"], x, np.float32(1), np.int32(4))


@pytest.mark.parametrize("value", [-1, 1.0, True, "16"])
def test_bad_shared_mem(backend, scale, value):
    x = _dev(backend, np.zeros(4, np.float32))
    with pytest.raises(ArgumentError, match="^shared_mem: expected"):
        scale(1, 4, x, np.float32(1), np.int32(4), shared_mem=value)


@pytest.mark.parametrize("value, got", [
    (3, "Python int 3 (its C width is ambiguous)"), (0.5, "Python float 0.5"),
    (np.zeros(3, np.float32), "ndarray"), (np.complex64(1), "complex64"), ("x", "str"),
])
def test_arguments_must_be_tensors_or_sized_numpy_scalars(backend, scale, value, got):
    x = _dev(backend, np.zeros(4, np.float32))
    with pytest.raises(ArgumentError, match=r"^args\[1\]: expected an accel.Tensor") as info:
        scale(1, 4, x, value, np.int32(4))
    assert got in str(info.value)


def test_a_tensor_on_another_backend_is_refused(backend, scale):
    on_cpu = accel.asarray(np.zeros(4, np.float32), backend="cpu")
    with pytest.raises(DeviceMismatchError, match=r"^args\[0\]: expected a tensor on opencl"):
        scale(1, 4, on_cpu, np.float32(1), np.int32(4))


@pytest.mark.parametrize("kwargs, message", [
    (dict(source=""), "^source: expected non-empty kernel source"),
    (dict(source=b"__kernel void k() {}"), "^source: expected"),
    (dict(name="2fast"), "^name: expected the kernel function's identifier"),
    (dict(name=None), "^name: expected"),
    (dict(defines=["A=1"]), "^defines: expected a mapping"),
    (dict(defines={"not valid": 1}), "^defines: expected macro names that are C identifiers"),
    (dict(defines={"A": "1 2"}), r"^defines\['A'\]: expected a value without whitespace"),
    (dict(defines={"A": None}), r"^defines\['A'\]: expected an int, float or str"),
    (dict(options="-O3"), "^options: expected a sequence of non-empty str"),
    (dict(options=["-O3", 5]), "^options: expected a sequence of non-empty str"),
    (dict(dialect="metal"), "^dialect: expected one of"),
])
def test_bad_kernel_arguments(backend, kwargs, message):
    call = dict(source=SCALE, name="scale", backend=backend) | kwargs
    with pytest.raises(ArgumentError, match=message):
        kernel(call.pop("source"), call.pop("name"), **call)


@pytest.mark.parametrize("args, message", [
    # an 8-byte scalar has a pointer's size: the driver took it and the kernel dereferenced it
    ((np.int64(12345), np.float32(2), np.int32(4)), r"^args\[0\]: expected an accel.Tensor \(parameter float\* x, global memory\), got int64"),
    ((np.float64(0), np.float32(2), np.int32(4)), r"^args\[0\]: expected an accel.Tensor .*got float64"),
    (("x", "x", np.int32(4)), r"^args\[1\]: expected a numpy scalar \(parameter float a is passed by value\), got Tensor"),
    (("x", np.float32(2), np.int64(4)), r"^args\[2\]: expected an integer numpy scalar of 4 bytes \(parameter int n\), got int64 \(8 bytes\)"),
])
def test_arguments_are_checked_against_the_kernels_parameters(backend, scale, args, message):
    x = _dev(backend, np.ones(4, np.float32))
    with pytest.raises(ArgumentError, match=message):
        scale(1, 4, *(x if a == "x" else a for a in args))
    scale(1, 4, x, np.float32(2), np.int32(4))  # and the right ones still run
    assert x.numpy().tolist() == [2.0] * 4


def test_an_edited_included_header_is_rebuilt_not_served_stale(backend, tmp_path):
    src = '#include "v.h"\nKERNEL void f(GLOBAL float* y) { y[get_global_id(0)] = V; }'
    y = _dev(backend, np.zeros(2, np.float32))
    for value in (5.0, 7.0):
        (tmp_path / "v.h").write_text(f"#define V {value}f\n")
        kernel(src, "f", backend=backend, options=[f"-I{tmp_path}"])(1, 2, y)
        assert y.numpy().tolist() == [value, value]


def test_kernel_keywords_in_comments_do_not_decide_the_dialect(backend):
    src = ("// ported from CUDA: was a __global__ function\n"
           "KERNEL void f(GLOBAL float* y) { y[get_global_id(0)] = 1.0f; }")
    k = kernel(src, "f", backend=backend)
    assert k.dialect == "accel"
    y = _dev(backend, np.zeros(2, np.float32))
    k(1, 2, y)
    assert y.numpy().tolist() == [1.0, 1.0]


def test_every_corpus_kernel_declaration_parses():
    """CUDA/HIP have no driver arg info: the check rests on parse_params reading the declaration."""
    import re

    from accel.kernel import parse_params
    from repo_paths import ROOT as root

    sources = [*root.glob("tests/port_corpus/*.cu"), *root.glob("tests/cuda_corpus/*.cu"),
               *root.glob("kernels/*.cl")]
    names = [(p, m.group(1)) for p in sources
             for m in re.finditer(r"(?:__global__|KERNEL|__kernel)\s+void\s+(\w+)\s*\(", p.read_text())]
    assert len(names) > 50
    assert [(p.name, n) for p, n in names if not parse_params(p.read_text(), n)] == []


def test_parsed_cuda_parameters_check_arguments_without_a_gpu():
    from accel.kernel import check_args, parse_params

    params = parse_params("template <typename T, int N> __global__ void k(const T* __restrict__ x, "
                          "long long n, float a, unsigned int m) {}", "k")
    assert params == (("x", "global", "T"), ("n", "private", "long long"),
                      ("a", "private", "float"), ("m", "private", "unsigned int"))
    with pytest.raises(ArgumentError, match=r"^args\[0\]: expected an accel.Tensor"):
        check_args(params, [np.int64(1), np.int64(1), np.float32(1), np.uint32(1)])
    with pytest.raises(ArgumentError, match=r"^args\[1\]: expected an integer numpy scalar of 8 bytes"):
        check_args(params, [object(), np.int32(1), np.float32(1), np.uint32(1)])
    check_args(params, [object(), np.int64(1), np.float32(1), np.uint32(1)])  # a buffer stands in


def test_a_cuda_vector_value_has_cudas_size():
    # CUDA's float3 is 12 bytes; OpenCL gives a 3-vector a 4-vector's room (16)
    from accel.kernel import check_args, parse_params

    params = parse_params("__global__ void f(float3 v, float* out) {}", "f")
    cuda_float3 = np.zeros((), np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4")]))[()]
    check_args(params, [cuda_float3, object()])
    with pytest.raises(ArgumentError, match=r"^args\[0\]: expected a numpy value of 12 bytes, such "
                                            r"as a structured scalar"):
        check_args(params, [np.zeros((), np.dtype([("s", "<f4", 4)]))[()], object()])
    with pytest.raises(ArgumentError, match="16 bytes, such as pyopencl.cltypes.make_float3"):
        check_args(params, [cuda_float3, object()], opencl=True)


def test_argument_count_and_float_for_int_are_refused_before_launch():
    from accel.kernel import check_args, parse_params

    params = parse_params("__global__ void k(float* x, int n, float a) {}", "k")
    with pytest.raises(ArgumentError, match=r"^args: expected 3 arguments for the kernel's parameters \(x, n, a\), got 2"):
        check_args(params, [object(), np.int32(1)])
    with pytest.raises(ArgumentError, match=r"^args\[1\]: expected an integer numpy scalar of 4 bytes \(parameter int n\), got float32"):
        check_args(params, [object(), np.float32(1), np.float32(1)])
    # OpenCL's trailing __local pointer is shared_mem's buffer, added by the launch
    local = parse_params("__kernel void k(__global float* x, __local float* s) {}", "k")
    check_args(local, [object()], shared_mem=64)
    with pytest.raises(ArgumentError, match=r"^shared_mem: expected the bytes of the kernel's last "
                                            r"parameter, the local buffer float\* s"):
        check_args(local, [object()])  # forgotten: the kernel would index a 0-byte buffer
    with pytest.raises(ArgumentError, match=r"^args: expected 1 arguments.*the last, s, is the "
                                            "shared_mem buffer the launch adds"):
        check_args(local, [object(), object()], shared_mem=64)


def test_a_vector_parameter_takes_a_pyopencl_vector_value(backend):
    import pyopencl.cltypes as cltypes

    k = kernel("__kernel void k(__global float* y, float4 v) { y[0] = v.x + 2*v.y + 3*v.z + 4*v.w; }",
               "k", backend=backend)
    y = _dev(backend, np.zeros(1, np.float32))
    k(1, 1, y, cltypes.make_float4(1, 2, 3, 4))
    assert y.numpy()[0] == 30.0
    with pytest.raises(ArgumentError, match=r"^args\[1\]: expected a numpy value of 16 bytes, such "
                                            r"as pyopencl.cltypes.make_float4"):
        k(1, 1, y, np.float32(1))  # the driver's INVALID_ARG_SIZE, said in the user's terms


def test_a_tensor_of_another_element_type_is_refused_for_a_typed_pointer(backend, scale):
    ints = _dev(backend, np.arange(4, dtype=np.int32))
    with pytest.raises(ArgumentError, match=r"^args\[0\]: expected a tensor of float elements "
                                            r"\(parameter float\* x\), got a tensor of int32"):
        scale(1, 4, ints, np.float32(2), np.int32(4))  # would scale int bits as floats
    raw = kernel("__kernel void first(__global uchar* b, __global uchar* out) { out[0] = b[0]; }",
                 "first", backend=backend)
    out = _dev(backend, np.zeros(1, np.uint8))
    raw(1, 1, _dev(backend, np.array([1.0], np.float32)), out)  # bytes read through uchar*: fine
    assert out.numpy()[0] == np.array([1.0], np.float32).view(np.uint8)[0]


def test_a_grid_of_more_work_groups_than_pocl_counts_is_refused(backend, scale):
    x = _dev(backend, np.ones(1, np.float32))
    with pytest.raises(ArgumentError, match=r"^grid: expected at most 4,294,967,295 blocks in all"):
        scale((65536, 65536), 1, x, np.float32(2), np.int32(1))  # PoCL: SIGILL, the process gone
