"""The OpenCL backend's machinery on real devices: enumeration order, capabilities, the program
cache (memory, disk, corrupt entries, driver identity), user kernels with CUDA launch semantics,
errors, profiling-event timing and supports()."""
from __future__ import annotations

import time

import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import DEVICES, FIRST

import accel
import accel.kernels as K
from accel import spec as S
from accel.backends.opencl import OpenCLBackend
from accel.backends.opencl import cache as C
from accel.backends.opencl.devices import (CLDevice, build_failure, enumerate_devices, skipped_devices,
                                          sort_key)
from accel.backends.opencl.params import build_options
from accel.errors import AccelError, ArgumentError, CompileError, DeviceError, UnsupportedError
from accel.tensor import Tensor

pytestmark = needs_opencl

ADD = """
KERNEL void add_one(GLOBAL float* x, int n) {
    int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (i < n) x[i] += 1.0f;
}
"""


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A new backend instance on opencl:0 with an empty, private disk cache, which accel keeps
    where the driver keeps none: here PoCL with its own cache off (POCL_KERNEL_CACHE=0)."""
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POCL_KERNEL_CACHE", "0")
    be = OpenCLBackend(0)
    if not be.programs.on_disk:
        pytest.skip(f"{be.dev.platform_name} keeps its builds itself: accel keeps no copy on disk")
    return be


def test_no_copy_on_disk_where_pocl_keeps_its_own_builds(tmp_path, monkeypatch):
    # asking PoCL for a binary compiles every kernel of the program (docs/opencl.md)
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POCL_KERNEL_CACHE", raising=False)
    be = OpenCLBackend(0)
    if be.dev.platform_name != "Portable Computing Language":
        pytest.skip(f"opencl:0 is {be.dev.platform_name}, not PoCL")
    k = be.compile(ADD, "add_one")
    assert not be.programs.on_disk and not list(tmp_path.rglob("*.bin"))
    assert be.programs.stats["built"] == 1 and k.name == "add_one"


def test_the_device_order_is_the_documented_one():
    # docs/opencl.md: GPUs, accelerators, CPUs; newest driver first; platform name, platform
    # version, device name; then the loader's order. Records listed here in that order, by hand.
    def dev(kind, driver, platform="P", version="1", name="d"):
        return CLDevice(None, platform, version, name, driver, kind, 1, 1, 1, 1, 1, 128,
                        False, False, False, False)
    expected = [dev("gpu", "2.0"), dev("gpu", "1.10"), dev("gpu", "1.9"), dev("accelerator", "9"),
                dev("cpu", "3.1", "A"), dev("cpu", "3.1", "B", "1"), dev("cpu", "3.1", "B", "2"),
                dev("cpu", "3.1", "B", "2", "e"), dev("cpu", "3.0"), dev("other", "1")]
    found = [expected[i] for i in (8, 3, 9, 0, 6, 4, 2, 7, 1, 5)]  # the loader's order
    ordered = sorted(range(len(found)), key=lambda i: sort_key(found[i], i))
    assert [found[i] for i in ordered] == expected


def test_devices_here_are_listed_in_that_order_once_per_process():
    devs = enumerate_devices()
    keys = [sort_key(d, 0)[:-1] for d in devs]  # all but the loader's position
    assert keys == sorted(keys)
    kinds = [d.kind for d in devs]
    assert kinds == sorted(kinds, key=["gpu", "accelerator", "cpu", "other"].index)
    assert enumerate_devices() is devs  # cached: accel.backends() calls it on every listing


def test_a_build_failure_names_the_device_and_the_compiler_error():
    dev = enumerate_devices()[0]
    assert build_failure(dev) is None  # every listed device passed this probe
    why = build_failure(dev, "__kernel void k(__global int* out) { out[0] = not_declared; }")
    assert why.startswith(dev.name) and "not_declared" in why


def test_info_prints_each_device_left_out(capsys):
    skipped = skipped_devices()
    if not skipped:
        pytest.skip("every OpenCL device here builds kernels: none left out to print")
    status = next(s for s in accel.backends() if s.name == "opencl")
    assert status.skipped == list(skipped)
    from accel.__main__ import main

    assert main(["info", "--width", "400"]) == 0
    out = capsys.readouterr().out
    for why in skipped:
        assert f"skipped opencl device: {why}" in out


def test_with_only_pypis_pocl_opencl_is_listed_or_unavailable_with_the_fix(tmp_path):
    """What a pip-only machine sees: PyPI's PoCL as the sole ICD, in a fresh process. On CPUs its
    LLVM 14 knows, its device is listed; on newer ones (AMD Zen 5) OpenCL is unavailable, saying
    why and what to install."""
    import glob
    import json
    import os
    import subprocess
    import sys

    import pyopencl

    libs = glob.glob(os.path.join(os.path.dirname(pyopencl.__file__), ".libs", "libpocl*.so*"))
    if not libs:
        pytest.skip("pyopencl here has no bundled PoCL (not the PyPI wheel)")
    (tmp_path / "pypi-pocl.icd").write_text(libs[0] + "\n")
    probe = ("import accel, json; s = next(s for s in accel.backends() if s.name == 'opencl'); "
             "print(json.dumps([s.available, s.reason, [d.driver for d in s.devices]]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OCL_ICD_VENDORS": str(tmp_path)}, check=True).stdout
    available, reason, drivers = json.loads(out.strip().splitlines()[-1])
    if available:
        assert drivers and all("PoCL 3.0" in d for d in drivers)
    else:
        assert "cannot build a one-line kernel" in reason and "apt-get install pocl-opencl-icd" in reason


def test_build_options_spell_the_math_for_the_compiler(monkeypatch):
    import dataclasses

    dev = enumerate_devices()[0]
    pocl30 = dataclasses.replace(dev, platform_version="OpenCL 3.0 PoCL 3.0-rc2  Linux, LLVM 14.0.6")
    pocl31 = dataclasses.replace(dev, platform_version="OpenCL 3.0 PoCL 3.1+debian  Linux, LLVM 15.0.6")
    builtins = "-DACCEL_CLANG_BUILTINS=1"
    monkeypatch.delenv("ACCEL_OPENCL_BUILTINS", raising=False)
    assert builtins in build_options(pocl30) and builtins not in build_options(pocl31)
    monkeypatch.setenv("ACCEL_OPENCL_BUILTINS", "0")
    assert builtins not in build_options(pocl30)
    monkeypatch.setenv("ACCEL_OPENCL_BUILTINS", "1")
    assert builtins in build_options(pocl31)


def test_newer_driver_of_the_same_kind_comes_first():
    devs = enumerate_devices()
    cpus = [d for d in devs if d.kind == "cpu"]
    if len(cpus) < 2:
        pytest.skip("one CPU OpenCL device here: nothing to order")
    versions = [tuple(int(p) for p in d.driver_version.split("+")[0].split("-")[0].split(".")) for d in cpus]
    assert versions == sorted(versions, reverse=True)


def test_device_info_reports_capabilities():
    info = accel.get_backend(FIRST[0]).info
    for key in ("fp16", "fp64", "local_mem_bytes", "max_work_group_size", "correctly_rounded_divide"):
        assert key in info.extra
    assert info.compute_units >= 1 and info.memory_bytes > 0


def test_auto_priority_ranks_cpu_devices_below_the_reference():
    infos = OpenCLBackend.devices()
    expect = 20 if any(i.extra["kind"] == "gpu" for i in infos) else 5
    assert OpenCLBackend.auto_priority(infos) == expect
    status = next(s for s in accel.backends() if s.name == "opencl")
    assert status.available and status.priority == expect


def test_alignment_comes_from_the_device_and_views_honour_it():
    be = accel.get_backend(FIRST[0])
    assert be.alignment == enumerate_devices()[0].device.mem_base_addr_align // 8
    buf = be.upload(np.arange(1024, dtype=np.uint8))
    np.testing.assert_array_equal(be.download(be.view(buf, be.alignment, 16), 16),
                                  np.arange(be.alignment, be.alignment + 16, dtype=np.uint8))
    with pytest.raises(ArgumentError, match="offset"):
        be.view(buf, 1, 16)


def test_program_cache_memory_then_disk_then_rebuild_after_corruption(fresh, tmp_path, monkeypatch):
    k1 = fresh.compile(ADD, "add_one")
    fresh.compile(ADD, "add_one")
    assert fresh.programs.stats["built"] == 1 and fresh.programs.stats["memory"] == 1
    entries = list(tmp_path.rglob("*.bin"))
    assert len(entries) == 1
    second = OpenCLBackend(0)  # a new process would see the same: the entry on disk
    second.compile(ADD, "add_one")
    assert second.programs.stats == {"memory": 0, "disk": 1, "built": 0, "corrupt": 0}
    entries[0].write_bytes(entries[0].read_bytes()[:50])  # truncated by a crash mid-write
    rebuilds_add_one()
    assert k1.name == "add_one"


def rebuilds_add_one() -> None:
    """A new instance finds ADD's cache entry unusable, rebuilds it, and the rebuild adds one."""
    be = OpenCLBackend(0)
    k = be.compile(ADD, "add_one")
    assert be.programs.stats["corrupt"] == 1 and be.programs.stats["built"] == 1
    x = Tensor(be, be.upload(np.zeros(5, np.float32)), (5,), "float32")
    be.launch(k, (1,), (8,), [x, np.int32(5)])
    np.testing.assert_array_equal(x.numpy(), np.ones(5, np.float32))


def test_an_entry_under_another_programs_name_is_rebuilt_not_loaded(fresh, tmp_path):
    # a whole, valid binary of another program copied over an entry (a swapped or restored
    # file) must not run in its place: entries are bound to their (source, options) key
    fresh.compile(ADD, "add_one")
    [add] = tmp_path.rglob("*.bin")
    fresh.compile(ADD.replace("1.0f", "2.0f"), "add_one")
    [other] = set(tmp_path.rglob("*.bin")) - {add}
    add.write_bytes(other.read_bytes())
    rebuilds_add_one()


def test_disk_cache_key_changes_with_the_driver_identity(fresh):
    dev = fresh.dev
    import dataclasses

    upgraded = dataclasses.replace(dev, driver_version=dev.driver_version + ".1")
    assert C.device_dir(dev, "programs") != C.device_dir(upgraded, "programs")


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "entry.bin"
    C.atomic_write(target, b"x" * 1000)
    C.atomic_write(target, b"y" * 10)
    assert target.read_bytes() == b"y" * 10
    assert [p.name for p in tmp_path.iterdir()] == ["entry.bin"]


def test_build_error_carries_log_and_kernel_name(fresh):
    with pytest.raises(CompileError) as err:
        fresh.compile("KERNEL void broken(GLOBAL float* x) { x[0] = undefined_name; }", "broken")
    assert err.value.kernel == "broken"
    assert "undefined_name" in err.value.log
    with pytest.raises(CompileError, match="no kernel named 'nope'"):
        fresh.compile(ADD, "nope")


def test_opencl_dialect_builds_plain_opencl(fresh):
    k = fresh.compile("__kernel void twice(__global int* x) { x[get_global_id(0)] *= 2; }", "twice",
                      dialect="opencl")
    x = Tensor(fresh, fresh.upload(np.arange(6, dtype=np.int32)), (6,), "int32")
    fresh.launch(k, (3,), (2,), [x])
    np.testing.assert_array_equal(x.numpy(), np.arange(6) * 2)
    with pytest.raises(UnsupportedError, match="dialect"):
        fresh.compile(ADD, "add_one", dialect="cuda")


def test_launch_uses_cuda_grid_semantics_and_shared_memory():
    be = accel.get_backend(FIRST[0])
    src = """
    KERNEL void block_sums(GLOBAL const float* x, GLOBAL float* out, LOCAL float* scratch) {
        int t = LOCAL_ID(0), g = GROUP_ID(0), n = LOCAL_SIZE(0);
        scratch[t] = x[g * n + t];
        BARRIER();
        if (t == 0) { float s = 0; for (int i = 0; i < n; ++i) s += scratch[i]; out[g] = s; }
    }"""
    k = be.compile(src, "block_sums")
    x = np.arange(4 * 16, dtype=np.float32)
    tx = Tensor(be, be.upload(x), x.shape, "float32")
    out = Tensor.empty(be, (4,), "float32")
    be.launch(k, (4, 1, 1), (16, 1, 1), [tx, out], shared_mem=16 * 4)
    np.testing.assert_array_equal(out.numpy(), x.reshape(4, 16).sum(axis=1))


def test_launch_rejects_bad_arguments_with_typed_errors():
    be = accel.get_backend(FIRST[0])
    k = be.compile(ADD, "add_one")
    x = Tensor(be, be.upload(np.zeros(4, np.float32)), (4,), "float32")
    with pytest.raises(ArgumentError, match=r"args\[1\]"):
        be.launch(k, (1,), (4,), [x, 4])  # a Python int has no defined C type
    with pytest.raises(ArgumentError, match="block"):
        be.launch(k, (1,), (k.max_work_group + 1,), [x, np.int32(4)])
    with pytest.raises(ArgumentError, match="grid"):
        be.launch(k, (0,), (4,), [x, np.int32(4)])
    # 8 bytes for an int parameter: named from the parameters' arg info, before the driver
    with pytest.raises(ArgumentError, match=r"^args\[1\]: expected an integer numpy scalar of 4 bytes"):
        be.launch(k, (1,), (4,), [x, np.int64(4)])


def test_allocation_beyond_the_device_limit_is_a_device_error():
    be = accel.get_backend(FIRST[0])
    with pytest.raises(DeviceError, match="MAX_MEM_ALLOC_SIZE"):
        be.alloc(be.dev.max_alloc + 1)


def test_time_reads_profiling_events():
    be = accel.get_backend(FIRST[0])
    a = np.ones((256, 256), np.float32)
    ta, tb = (Tensor(be, be.upload(a), a.shape, "float32") for _ in range(2))
    spec = S.matmul_spec(a.shape, "float32", a.shape, "float32")
    out = accel.dispatch.execute(be, spec, ta, tb)
    t0 = time.perf_counter()
    seconds = be.time(lambda: [accel.dispatch.execute(be, spec, ta, tb, out=out) for _ in range(3)])
    wall = time.perf_counter() - t0
    assert 0 < seconds <= wall  # device time from the events lies within the host's wall time
    assert be._recording is None
    np.testing.assert_array_equal(out.numpy(), np.full((256, 256), 256, np.float32))


def test_supports_declines_with_reasons():
    be = accel.get_backend(FIRST[0])
    assert be.supports(S.attention_spec((1, 1, 4, 512), (1, 1, 4, 512), (1, 1, 4, 512),
                                        ("float32",) * 3))  # D = 512 (issue 42)
    big_head = S.attention_spec((1, 1, 4, 576), (1, 1, 4, 576), (1, 1, 4, 576), ("float32",) * 3)
    verdict = be.supports(big_head)
    assert not verdict and "head dims" in verdict.reason
    assert be.supports(S.matmul_spec((4, 8), "int8", (8, 4), "int8"))
    with pytest.raises(UnsupportedError, match="head dims"):
        accel.attention(np.ones((1, 1, 4, 576), np.float32), np.ones((1, 1, 4, 576), np.float32),
                        np.ones((1, 1, 4, 576), np.float32), backend=be)


@pytest.mark.parametrize("device", DEVICES)
def test_public_api_runs_on_every_device(device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(accel.matmul(a, a.T, backend=device), a @ a.T)
    assert isinstance(accel.get_backend(device).versions()["pyopencl"], str)
    assert issubclass(DeviceError, AccelError)


def test_invalid_work_group_size_from_the_runtime_is_a_device_error():
    be = accel.get_backend(FIRST[0])
    k = be.compile("KERNEL void f(GLOBAL float* x) { x[0] = 1.0f; }", "f")
    x = Tensor(be, be.upload(np.zeros(4, np.float32)), (4,), "float32")
    k.kernel.set_args(x.buf)
    # a global size that is not a multiple of the local size is invalid for OpenCL C 1.2 programs
    with pytest.raises(DeviceError, match="INVALID_WORK_GROUP_SIZE"):
        be._enqueue(k.kernel, (3,), (2,), "kernel f")


def test_concurrent_processes_share_the_disk_cache_safely(tmp_path):
    import os
    import subprocess
    import sys

    # three processes build the same new program at once into one cache directory
    script = (
        "import numpy as np, accel\n"
        "from accel.tensor import Tensor\n"
        f"be = accel.get_backend({FIRST[0]!r})\n"
        f"k = be.compile({ADD!r} + '/* concurrent */', 'add_one')\n"
        "x = Tensor(be, be.upload(np.zeros(3, np.float32)), (3,), 'float32')\n"
        "be.launch(k, (1,), (4,), [x, np.int32(3)])\n"
        "assert (x.numpy() == 1).all()\n"
        "print(be.programs.stats)\n"
    )
    env = dict(os.environ, ACCEL_CACHE_DIR=str(tmp_path), POCL_KERNEL_CACHE="0")  # see fresh()
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    entries = list(tmp_path.rglob("*.bin"))
    assert len(entries) == 1 and not list(tmp_path.rglob("*.tmp"))
    assert C._unpack(entries[0].stem, entries[0].read_bytes()) is not None  # whole and valid


def test_supports_declines_sizes_past_int32_without_allocating():
    be = accel.get_backend(FIRST[0])
    huge = S.matmul_spec((2, 2**31), "float32", (2**31, 2), "float32")
    verdict = be.supports(huge)
    assert not verdict and "32-bit" in verdict.reason and "K" in verdict.reason
    q = S.qmatmul_spec((1, 2**31 + 32), "float32", (4, 2**31 + 32), accel.formats.get_format("q8_0"))
    assert not be.supports(q)


def test_new_parameters_drop_the_plans_and_verdicts_made_with_the_old(fresh):
    # supports() reads the parameters (local memory the GEMV tiles need): a verdict cached by
    # accel.ops before a change (accel tune assigns new ones) must not outlive it
    spec = S.qmatmul_spec((1, 64), "float32", (8, 64), accel.formats.get_format("q4_0"))
    fresh.params = {**fresh.params, "gemv": dict(K.GPU_GEMV)}
    accel.dispatch.check_supported(fresh, spec)
    too_big = dict(K.GPU_GEMV, GEMV_WG=2**20)  # asks for far more local memory than PoCL has
    fresh.params = {**fresh.params, "gemv": too_big}
    with pytest.raises(UnsupportedError, match="local memory"):
        accel.dispatch.check_supported(fresh, spec)


def test_an_unusable_entry_in_a_read_only_cache_costs_a_rebuild_not_an_error(fresh, tmp_path, monkeypatch):
    # the entry cannot be deleted (a read-only cache, simulated: root ignores permissions)
    import pathlib

    fresh.compile(ADD, "add_one")
    [entry] = tmp_path.rglob("*.bin")
    entry.write_bytes(b"not an entry")

    def refuse(path, *args, **kw):
        raise PermissionError(30, "Read-only file system", str(path))
    monkeypatch.setattr(pathlib.Path, "unlink", refuse)
    monkeypatch.setattr(C, "atomic_write", refuse)
    rebuilds_add_one()
    rebuilds_add_one()  # nothing could be stored: the next instance rebuilds again
