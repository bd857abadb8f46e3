"""Third-party backends through the real `accel.backends` entry-point group (the test plugin
distribution in tests/plugins/basic is pip-installed by the test command)."""
import subprocess
import sys

import numpy as np
import pytest

import accel
from vendor_sites import vendor_site


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


# -- plugins as a vendor packages them: real distribution metadata on a path of their own ------
_BACKEND_MODULE = '''
import numpy as np
from accel.backend import Backend, DeviceInfo

class Good(Backend):
    name = "vx_good"
    host_compute = True
    @classmethod
    def devices(cls):
        return [DeviceInfo("vx device", "vx", "none", 0, 1)]
    def alloc(self, nbytes): return np.empty(nbytes, np.uint8)
    def upload(self, host): return np.frombuffer(host.tobytes(), np.uint8).copy()
    def download(self, buf, nbytes): return buf[:nbytes].copy()
    def view(self, buf, offset, nbytes): return buf[offset:offset + nbytes]

class Renamed(Good):
    name = "vx_other"

class NoMemory(Backend):
    name = "vx_nomemory"
    @classmethod
    def devices(cls):
        return [DeviceInfo("vx device", "vx", "none", 0, 1)]

class Nothing(Backend):
    name = "vx_nothing"
'''


_VENDOR_MODULES = {"vx_backend": _BACKEND_MODULE,
                   "vx_exits": "import sys\nsys.exit('vendor SDK not found')\n"}


def _vendor_site(tmp_path, entries: dict[str, str], dist: str = "vendorx") -> str:
    return str(vendor_site(tmp_path, dist, entries, _VENDOR_MODULES))


def _with_sites(code: str, *sites: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sites)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)


def test_a_plugin_class_breaking_the_contract_is_unavailable_with_the_reason(tmp_path):
    site = _vendor_site(tmp_path, {
        "vx_good": "vx_backend:Good", "vx_renamed": "vx_backend:Renamed",
        "vx_nomemory": "vx_backend:NoMemory", "vx_nothing": "vx_backend:Nothing",
        "vx_exits": "vx_exits:Missing",
        "vx_badvalue": "not a valid entry point"})
    code = ("import json, numpy as np, accel\n"
            "print(json.dumps({s.name: [s.available, s.reason] for s in accel.backends()}))\n"
            "print(accel.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)).sum())")
    proc = _with_sites(code, site)
    assert proc.returncode == 0, proc.stderr  # sys.exit() in a plugin ends neither
    import json
    found = json.loads(proc.stdout.splitlines()[0])
    assert found["vx_good"] == [True, ""]
    assert not found["vx_renamed"][0] and "has name 'vx_other', its entry point 'vx_renamed'" in found["vx_renamed"][1]
    assert not found["vx_nomemory"][0] and "does not define alloc, upload, download, view" in found["vx_nomemory"][1]
    assert "does not define devices, alloc" in found["vx_nothing"][1]  # a classmethod too
    assert not found["vx_exits"][0] and "SystemExit: vendor SDK not found" in found["vx_exits"][1]
    assert not found["vx_badvalue"][0] and "'not a valid entry point' is not 'module:Class'" in found["vx_badvalue"][1]
    assert proc.stdout.splitlines()[1] == "8.0"


def test_a_plugin_left_out_for_its_name_is_said_so(tmp_path):
    first = _vendor_site(tmp_path, {"vx_good": "vx_backend:Good"}, "vendorx")
    second = _vendor_site(tmp_path, {"vx_good": "vx_backend:Renamed", "opencl": "vx_backend:Good"},
                          "othervendor")
    proc = _with_sites("from accel.__main__ import main; main(['info', '--width', '250'])", first, second)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "ignored plugin vx_good (plugin othervendor, vx_backend:Renamed): the name of the plugin vendorx backend 'vx_good'" in out
    assert "ignored plugin opencl (plugin othervendor, vx_backend:Good): the name of the builtin backend 'opencl'" in out


def test_conformance_judges_the_path_numpy_callers_take_on_a_host_compute_backend():
    # the op method (accel.Tensor operands) is right; compute() (numpy operands) drops a K term
    from accel.backends.cpu import CPUBackend
    from accel.conformance import suite
    from accel.conformance.runner import run_case

    reference = CPUBackend()

    class HostBuggy(CPUBackend):
        name = "host_buggy"

        def run(self, spec, out, *inputs):  # the Tensor path: the reference's own answer
            reference.run(spec, out, *inputs)

        def compute(self, spec, *arrays):
            if spec.op == "matmul":
                a, b = arrays
                return np.matmul(a[..., :-1], b[..., :-1, :]).astype(spec.out_dtype)
            return super().compute(spec, *arrays)

    cases, _ = suite.planned("quick", 0, ["matmul"], ["float32"])
    case = next(c for c in cases if c.kind != "exact")
    bad = run_case(HostBuggy(), case)
    assert bad.status == "failed" and "compute(), the path numpy operands take" in bad.reason
    assert run_case(reference, case).status == "passed"


def test_an_op_supports_accepts_without_a_method_is_an_error_naming_it():
    from accel.backend import Support

    space: dict = {}
    exec(_BACKEND_MODULE, space)  # the vendor module above, loaded here

    class ComputeOnly(space["Good"]):  # compute() serves numpy operands; Tensors need matmul()
        name = "vx_compute_only"

        def supports(self, spec):
            return Support(True, "")

        def compute(self, spec, a, b):
            return (a @ b).astype(spec.out_dtype)

    be = ComputeOnly()
    a = np.ones((2, 3), np.float32)
    assert accel.matmul(a, a.T, backend=be).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    with pytest.raises(accel.DeviceError, match="supports\\(\\) accepts matmul, but the class defines "
                                                "no matmul\\(spec, out, ...\\) method"):
        accel.matmul(accel.asarray(a, backend=be), a.T)


def test_a_plugin_implements_a_decoder_op_by_its_op_method():
    """accel.nn's ops are specs: a plugin with an ``add(spec, out, a, b)`` method computes
    accel.add on its tensors (the spec in hand), and one without ``rms_norm`` still answers
    accel.rms_norm: the cpu reference's values, written back to the plugin's memory; without
    ``add_rms_norm``, ``rms_norm(residual=)`` is its add, then the norm."""
    from accel.spec import BinarySpec

    space: dict = {}
    exec(_BACKEND_MODULE, space)
    seen = []

    class Adds(space["Good"]):
        name = "vx_adds"
        host_compute = False

        def add(self, spec, out, a, b):
            seen.append(spec)
            view = lambda t: t.buf[:t.nbytes].view(np.float32).reshape(t.shape)  # noqa: E731
            view(out)[...] = np.add(view(a), view(b)) * np.float32(2)  # a recognisable answer

    be = Adds()
    a = accel.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), backend=be)
    b = accel.asarray(np.ones(3, np.float32), backend=be)
    got = accel.add(a, b)
    assert isinstance(got, accel.Tensor) and got.backend is be
    assert got.numpy().tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
    assert len(seen) == 1 and isinstance(seen[0], BinarySpec) and seen[0].out_shape == (2, 3)
    x = np.array([[3.0, 4.0]], np.float32)
    y = accel.rms_norm(accel.asarray(x, backend=be), eps=0.0)  # no rms_norm method: the reference
    assert y.backend is be and np.allclose(y.numpy() ** 2, [[0.72, 1.28]])
    # no add_rms_norm method: the fused residual form is the ops it fuses, its add the plugin's
    seen.clear()
    s, y = accel.rms_norm(accel.asarray(x, backend=be), eps=0.0, residual=accel.asarray(x, backend=be))
    assert s.numpy().tolist() == [[12.0, 16.0]] and [spec.op for spec in seen] == ["add"]
    assert np.allclose(y.numpy() ** 2, [[0.72, 1.28]])
