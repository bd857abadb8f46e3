"""Finding backends (built in, or plugins from the ``accel.backends`` entry-point group) and
choosing one (call argument > ``accel.use`` > ``set_backend`` > ``ACCEL_BACKEND`` > priority).
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import os
import re
import threading
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Iterator

from accel.backend import Backend, DeviceInfo
from accel.errors import AccelError, ArgumentError, BackendUnavailable, DeviceError, expected

ENTRY_POINT_GROUP = "accel.backends"

#: built-in backends: name -> "module:Class". Their modules import their vendor package.
BUILTIN = {
    "cpu": "accel.backends.cpu:CPUBackend",
    "opencl": "accel.backends.opencl:OpenCLBackend",
    "cuda": "accel.backends.cupy.cuda:CUDABackend",
    "hip": "accel.backends.cupy.hip:HIPBackend",
}

#: what to install for a built-in backend whose package is missing
INSTALL_HINT = {
    "opencl": "pip install 'accel-portable[opencl]'",
    "cuda": "pip install 'accel-portable[cuda12]' (or [cuda13])",
    "hip": "pip install 'accel-portable[rocm]'",
}


@dataclass
class BackendStatus:
    """One row of ``accel.backends()``."""

    name: str
    available: bool
    reason: str = ""
    priority: int = 0
    origin: str = "builtin"  # or the plugin's distribution
    devices: list[DeviceInfo] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # devices left out, each with why
    #: the quantization formats its quantize / dequantize / qmatmul take (Backend.formats)
    formats: tuple[str, ...] = ()


_lock = threading.RLock()
_classes: dict[str, type[Backend] | BackendStatus] = {}
_instances: dict[str, Backend] = {}
_status_cache: dict[str, BackendStatus] = {}


def _sources() -> dict[str, tuple[str, object]]:
    """name -> (origin, loader); plugins never shadow a built-in name, and of two plugins with
    one name the first found is kept (``ignored_plugins`` says which were left out)."""
    return _scan()[0]


def ignored_plugins() -> list[str]:
    """A line per plugin entry point left out because another backend has its name: a vendor
    whose backend does not show up is told why.

    >>> isinstance(ignored_plugins(), list)
    True
    """
    return _scan()[1]


def _scan() -> tuple[dict[str, tuple[str, object]], list[str]]:
    found: dict[str, tuple[str, object]] = {n: ("builtin", target) for n, target in BUILTIN.items()}
    ignored = []
    try:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken metadata directory must not break import accel
        eps = ()
    for ep in eps:
        dist = getattr(ep, "dist", None)
        origin = f"plugin {dist.name if dist else ep.value}"
        if ep.name in found:
            ignored.append(f"{ep.name} ({origin}, {ep.value}): the name of the "
                           f"{found[ep.name][0]} backend {ep.name!r}")
            continue
        found[ep.name] = (origin, ep)
    return found, ignored


#: an entry point's value as the metadata spec writes it, with the class the plugin needs
_ENTRY_VALUE = re.compile(r"\s*[\w.]+\s*:\s*[\w.]+\s*(\[[^\]]*\])?\s*")

#: what every backend class must define itself (the base class only raises for them)
REQUIRED = ("devices", "alloc", "upload", "download", "view")


def _contract_gaps(name: str, cls: type[Backend]) -> str:
    """Why a plugin's class cannot serve as backend ``name``, or "": caught when it loads rather
    than as an AttributeError or a bare NotImplementedError in the middle of a run."""
    if getattr(cls, "name", None) != name:
        return (f"its class {cls.__qualname__} has name {getattr(cls, 'name', None)!r}, its entry "
                f"point {name!r}: they must match (device strings, repro lines and accel.use "
                "read the class's)")
    missing = [m for m in REQUIRED  # static: a classmethod (devices) binds anew on each lookup
               if inspect.getattr_static(cls, m) is inspect.getattr_static(Backend, m)]
    if missing:
        return f"its class {cls.__qualname__} does not define {', '.join(missing)} (accel.Backend's contract)"
    return ""


def backend_names() -> list[str]:
    """The names of every backend accel knows here, built-in and plugin, loadable or not; cheap:
    nothing is imported or probed."""
    return sorted(_sources())


def _load_class(name: str) -> type[Backend]:
    """The backend class, or raise BackendUnavailable saying why it cannot load."""
    with _lock:
        cached = _classes.get(name)
        if isinstance(cached, BackendStatus):
            raise BackendUnavailable(f"backend {name!r}: {cached.reason}")
        if cached is not None:
            return cached
        sources = _sources()
        if name not in sources:
            raise BackendUnavailable(expected("backend", f"one of {sorted(sources)}", repr(name)))
        origin, target = sources[name]
        try:
            if isinstance(target, str):
                mod, _, attr = target.partition(":")
                cls = getattr(importlib.import_module(mod), attr)
            else:
                if not _ENTRY_VALUE.fullmatch(target.value or ""):
                    raise ValueError(f"entry point value {target.value!r} is not 'module:Class'")
                cls = target.load()
            if not (isinstance(cls, type) and issubclass(cls, Backend)):
                raise TypeError(f"{cls!r} is not an accel.Backend subclass")
            if origin != "builtin" and (gap := _contract_gaps(name, cls)):
                raise TypeError(gap)
        except ModuleNotFoundError as e:
            hint = INSTALL_HINT.get(name, "")
            reason = f"package missing: {e.name}" + (f" ({hint})" if hint else "")
            if origin != "builtin":
                reason = f"plugin failed to load: {e!r}"
            _classes[name] = BackendStatus(name, False, reason, origin=origin)
            raise BackendUnavailable(f"backend {name!r}: {reason}") from e
        except (Exception, SystemExit) as e:  # a plugin calling sys.exit() at import included
            reason = f"plugin failed to load: {type(e).__name__}: {e}"
            _classes[name] = BackendStatus(name, False, reason, origin=origin)
            raise BackendUnavailable(f"backend {name!r}: {reason}") from e
        _classes[name] = cls
        return cls


def backends(*, refresh: bool = False) -> list[BackendStatus]:
    """Every known backend, available or not, with the reason when not. Never raises.

    >>> import accel
    >>> [s.name for s in accel.backends() if s.available][:1]
    ['cpu']
    """
    out = []
    with _lock:
        if refresh:
            _classes.clear()
            _status_cache.clear()
        for name, (origin, _) in _sources().items():
            if name in _status_cache:
                out.append(_status_cache[name])
                continue
            try:
                cls = _load_class(name)
                devs = list(cls.devices())
                status = BackendStatus(name, True, "", cls.auto_priority(devs), origin, devs,
                                       list(cls.skipped_devices()), tuple(cls.formats))
            except AccelError as e:
                status = BackendStatus(name, False, str(e).removeprefix(f"backend {name!r}: "),
                                       origin=origin)
            except Exception as e:  # a plugin's devices() misbehaving is reported, not raised
                status = BackendStatus(name, False, f"device query failed: {type(e).__name__}: {e}",
                                       origin=origin)
            if status.available and not status.devices:
                status.available, status.reason = False, "no device"
            _status_cache[name] = status
            out.append(status)
    return sorted(out, key=lambda s: (not s.available, -s.priority, s.name))


def parse_device(device: str) -> tuple[str, int]:
    """``"opencl:1"`` -> ("opencl", 1); ``"cpu"`` -> ("cpu", 0)."""
    if not isinstance(device, str) or not device:
        raise ArgumentError(expected("backend", "a device string 'name' or 'name:index'", repr(device)))
    name, sep, idx = device.partition(":")
    if sep and not (idx.isascii() and idx.isdigit()):  # str.isdigit alone takes "²" and "٠"
        raise ArgumentError(expected("backend", "a device string 'name' or 'name:index'", repr(device)))
    return name, int(idx) if sep else 0


def get_backend(device: str | Backend | None = None) -> Backend:
    """The backend instance for a device string, or the current selection when None.

    >>> import accel
    >>> accel.get_backend("cpu").device_id
    'cpu:0'
    """
    if isinstance(device, Backend):
        return device
    if device is None:
        device = current_device()
        if device not in _instances and device == _environment and not (_context.get() or _process_default):
            try:  # the environment chose it: say so, the user never typed a backend argument
                return get_backend(device)
            except AccelError as e:  # the same error (its type and fields), its message prefixed
                e.args = (f"ACCEL_BACKEND={device!r}: {e}",)
                raise
    inst = _instances.get(device)  # keyed by every spelling seen ("cpu", "cpu:0")
    if inst is not None:
        return inst
    name, index = parse_device(device)
    key = f"{name}:{index}"
    with _lock:
        if key not in _instances:
            cls = _load_class(name)
            try:
                devs = cls.devices()
            except AccelError:
                raise
            except Exception as e:
                raise BackendUnavailable(f"backend {name!r}: device query failed: {e}") from e
            if index >= len(devs):
                raise BackendUnavailable(expected("backend", f"a device index below {len(devs)} for "
                                                  f"{name}", repr(device)))
            _instances[key] = cls(index)
        _instances[device] = _instances[key]
        return _instances[key]


class ForkGuard:
    """Refuses a device runtime in a process forked after the runtime started: the threads of
    PoCL, CUDA and HIP do not survive fork(), and the child's first copy or wait would block
    forever. Backends call :meth:`started` when their runtime starts and test ``forked_from``
    (None, or the parent's pid) where work enters the runtime, raising :meth:`error`."""

    def __init__(self, runtime: str):
        self.runtime = runtime
        self.forked_from: int | None = None
        self._started_in: int | None = None

    def started(self) -> None:
        """The runtime started in this process: children forked from now on cannot use it."""
        if self._started_in is None:
            self._started_in = os.getpid()
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        if self._started_in is not None and self.forked_from is None:
            self.forked_from = self._started_in

    def error(self) -> DeviceError:
        return DeviceError(
            f"{self.runtime} cannot be used in this process: it was forked from process "
            f"{self.forked_from} after {self.runtime} started there, and {self.runtime}'s threads "
            "do not survive fork(); start worker processes with the 'spawn' start method "
            "(multiprocessing.get_context('spawn'), or ProcessPoolExecutor(mp_context=...))")


# -- selection -------------------------------------------------------------------------------
_context: contextvars.ContextVar[str | None] = contextvars.ContextVar("accel_backend", default=None)
_process_default: str | None = None
# read once (reading os.environ costs ~1 us, a fifth of a tiny op's budget); set_backend(None)
# reads it again
_environment: str | None = os.environ.get("ACCEL_BACKEND") or None


def set_backend(device: str | None) -> None:
    """Set the process-wide default backend. ``None`` clears it and re-reads ``ACCEL_BACKEND``
    (which is otherwise read once, when accel is imported). An unknown or unavailable device is
    refused here, as by :func:`use`, not at the next op.

    >>> import accel
    >>> accel.set_backend("cpu"); accel.current_device()
    'cpu'
    >>> accel.set_backend(None)
    """
    global _process_default, _environment
    if device is not None:
        parse_device(device)  # a device string: the selection is kept as one
        get_backend(device)
    else:
        _environment = os.environ.get("ACCEL_BACKEND") or None
    _process_default = device


@contextlib.contextmanager
def use(device: str) -> Iterator[Backend]:
    """Select a backend for the enclosed block (context-local: per thread and per asyncio task).

    >>> import accel, numpy as np
    >>> with accel.use("cpu"):
    ...     accel.matmul(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32)).shape
    (2, 2)
    """
    backend = get_backend(device)
    token = _context.set(backend.device_id)
    try:
        yield backend
    finally:
        _context.reset(token)


def current_device() -> str:
    """The device string the next op without ``backend=`` will use.

    >>> import accel
    >>> with accel.use("cpu"):
    ...     accel.current_device()
    'cpu:0'
    """
    chosen = _context.get() or _process_default or _environment
    if chosen:
        return chosen
    return automatic_device()


_auto: str | None = None


def automatic_device() -> str:
    """Highest-priority available backend (documented in docs/api.md); cpu is always there."""
    global _auto
    if _auto is None:
        best = next((s for s in backends() if s.available), None)
        _auto = f"{best.name}:0" if best else "cpu:0"
    return _auto
