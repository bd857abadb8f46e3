"""Backend selection precedence: call argument > accel.use > set_backend > ACCEL_BACKEND > the
automatic priority; accel.use is context-local across threads and asyncio tasks."""
import asyncio
import subprocess
import sys
import threading

import numpy as np
import pytest

import accel

A = accel.asarray  # an accel.Tensor tells which backend computed it


def which(**kw):
    return A(np.eye(2, dtype=np.float32), **kw).backend.name


@pytest.fixture(autouse=True)
def clean_selection(monkeypatch):
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    accel.set_backend(None)
    yield
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    accel.set_backend(None)


def test_precedence_order(monkeypatch):
    assert accel.current_device() == "cpu:0"  # automatic: echo ranks below cpu
    monkeypatch.setenv("ACCEL_BACKEND", "echo")
    accel.set_backend(None)  # the environment is read at import and when the default is cleared
    assert which() == "echo"
    accel.set_backend("cpu")
    assert which() == "cpu"  # set_backend beats the environment
    with accel.use("echo"):
        assert which() == "echo"  # use() beats set_backend
        assert which(backend="cpu") == "cpu"  # the call argument beats everything
    assert which() == "cpu"


def test_a_bad_environment_choice_names_the_variable(monkeypatch):
    monkeypatch.setenv("ACCEL_BACKEND", "cpu:7")
    accel.set_backend(None)
    with pytest.raises(accel.BackendUnavailable, match=r"^ACCEL_BACKEND='cpu:7': backend: .*below 1"):
        which()
    assert which(backend="cpu") == "cpu"  # a call that names its backend is not affected


def test_use_is_local_to_each_thread():
    seen = {}
    barrier = threading.Barrier(2)

    def worker(name, device):
        with accel.use(device):
            barrier.wait()  # both threads are inside their use() block at once
            seen[name] = which()

    threads = [threading.Thread(target=worker, args=(n, d)) for n, d in (("t1", "cpu"), ("t2", "echo"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"t1": "cpu", "t2": "echo"}
    assert which() == "cpu"


def test_use_is_local_to_each_asyncio_task():
    async def task(device):
        with accel.use(device):
            await asyncio.sleep(0.01)  # interleave with the other task
            return which()

    async def main():
        return await asyncio.gather(task("echo"), task("cpu"), task("echo"))

    assert asyncio.run(main()) == ["echo", "cpu", "echo"]


def test_environment_variable_selects_in_a_fresh_process():
    code = "import accel, numpy as np; print(accel.asarray(np.ones(1)).backend.device_id)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "ACCEL_BACKEND": "echo:0"})
    assert out.stdout.strip() == "echo:0"


def test_device_strings_with_and_without_index_name_the_same_instance():
    assert accel.get_backend("cpu") is accel.get_backend("cpu:0")


@pytest.mark.parametrize("device,error", [("nope", accel.BackendUnavailable), ("cpu:1", accel.BackendUnavailable),
                                          ("cpu:x", accel.ArgumentError)])
def test_set_backend_refuses_what_use_refuses_and_keeps_the_selection(device, error):
    accel.set_backend("echo")
    with pytest.raises(error, match="^backend: expected"):
        accel.set_backend(device)
    with pytest.raises(error, match="^backend: expected"):
        with accel.use(device):
            pass
    assert which() == "echo"


@pytest.mark.parametrize("device", ["cpu:²", "cpu:٠", "cpu: 0", "cpu:+0"])
def test_a_device_index_is_ascii_digits(device):
    with pytest.raises(accel.ArgumentError, match="'name:index'"):
        accel.get_backend(device)


def test_set_backend_takes_a_device_string_not_an_instance():
    with pytest.raises(accel.ArgumentError, match="^backend: expected a device string"):
        accel.set_backend(accel.get_backend("cpu"))
    assert accel.current_device() == "cpu:0"


def test_an_environment_choice_keeps_the_errors_type_and_fields(monkeypatch):
    """The ACCEL_BACKEND prefix is added to the error itself: an UnsupportedError or CompileError
    (whose constructors take more than a message) stays itself, with its fields."""
    from accel import registry
    from accel.errors import CompileError

    def failing(device):
        raise CompileError("k", "sm_90", "the log")

    monkeypatch.setenv("ACCEL_BACKEND", "echo")
    accel.set_backend(None)
    monkeypatch.setattr(registry, "_instances", {})
    monkeypatch.setattr(registry, "parse_device", failing)
    with pytest.raises(CompileError) as info:
        accel.get_backend()
    assert str(info.value).startswith("ACCEL_BACKEND='echo': building kernel 'k'")
    assert info.value.log == "the log"
