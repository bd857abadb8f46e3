"""Third-party backends through the real `accel.backends` entry-point group (the test plugin
distribution in tests/plugins/basic is pip-installed by the test command)."""
import subprocess
import sys

import numpy as np
import pytest

import accel


def status(name):
    return next(s for s in accel.backends(refresh=True) if s.name == name)


def test_installed_plugin_is_discovered_and_runs():
    s = status("echo")
    assert s.available and s.origin == "plugin accel-test-plugins" and s.devices
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = accel.matmul(accel.asarray(a, backend="echo"), a.T)
    assert out.backend.name == "echo"
    assert np.array_equal(out.numpy(), a.astype(np.float64) @ a.T.astype(np.float64))


def test_plugin_that_fails_to_import_is_reported_not_raised():
    s = status("broken_import")
    assert not s.available
    assert "plugin failed to load" in s.reason and "accel_test_plugins_missing_dependency" in s.reason
    with pytest.raises(accel.BackendUnavailable, match="broken_import"):
        accel.get_backend("broken_import")


def test_entry_point_that_is_not_a_backend_is_reported():
    s = status("not_a_backend")
    assert not s.available and "not an accel.Backend subclass" in s.reason


def test_plugin_cannot_shadow_a_builtin_name():
    assert status("cpu").origin == "builtin"
    assert type(accel.get_backend("cpu")).__module__ == "accel.backends.cpu"


def test_broken_plugins_never_break_import_accel():
    code = "import accel; print(sorted(s.name for s in accel.backends() if not s.available))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "broken_import" in out.stdout and "not_a_backend" in out.stdout


def test_import_accel_imports_no_vendor_library():
    code = ("import sys, accel; accel.backends(); "
            "print(sorted(m for m in ('torch', 'cupy', 'pyopencl', 'matplotlib', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # listing backends may import the OpenCL/CuPy bindings to ask for devices, never torch
    assert "torch" not in out.stdout and "matplotlib" not in out.stdout
    bare = subprocess.run([sys.executable, "-c", "import sys, accel; print([m for m in sys.modules "
                           "if m.split('.')[0] in ('torch', 'cupy', 'pyopencl', 'matplotlib')])"],
                          capture_output=True, text=True, check=True)
    assert bare.stdout.strip() == "[]"


def test_info_command_lists_cpu_and_explains_the_rest():
    out = subprocess.run([sys.executable, "-m", "accel", "info", "--width", "200"],
                         capture_output=True, text=True, check=True).stdout
    assert "cpu:0" in out
    for s in accel.backends():
        if not s.available:
            assert f"unavailable {s.name} " in out


def _plugin(supports=None, compute=None):
    """A backend written as a plugin author would (not registered: used by instance)."""
    from accel.backend import Backend, DeviceInfo, Support

    class Plugin(Backend):
        name = "review_plugin"
        host_compute = True

        @classmethod
        def devices(cls):
            return [DeviceInfo("plugin device", "none", "none", 0, 1)]

        def supports(self, spec):
            return supports(spec) if supports else Support(True, "")

        def compute(self, spec, *inputs):
            return compute(spec, *inputs)

    return Plugin()


@pytest.mark.parametrize("plugin, message", [
    (lambda: _plugin(compute=lambda spec, a, b: np.zeros(1, np.float64)),
     "backend 'review_plugin:0' returned an array of shape (1,), dtype float64 for matmul; expected "
     "a numpy array of shape (2, 4), dtype float32"),
    (lambda: _plugin(compute=lambda spec, a, b: None), "returned a NoneType for matmul"),
    (lambda: _plugin(supports=lambda spec: True),
     "backend 'review_plugin': supports() returned True for matmul; the contract is an accel.Support"),
    (lambda: _plugin(supports=lambda spec: {}["x"]),
     "backend 'review_plugin': supports() raised KeyError: 'x' (for matmul)"),
])
def test_a_plugin_breaking_the_contract_is_an_error_naming_it(plugin, message):
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(accel.DeviceError) as info:
        accel.matmul(a, b, backend=plugin())
    assert message in str(info.value)
    right = _plugin(compute=lambda spec, a, b: (a @ b).astype(np.float32))
    assert accel.matmul(a, b, backend=right).tolist() == [[3.0] * 4] * 2
