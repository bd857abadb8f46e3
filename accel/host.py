"""What accel asks of the host machine: how much memory this process can still get, and where
and how accel keeps what it learns on disk.

Memory: the bytes left (``host_bytes_free``) and the error for a copy that needs more, shared by
the tensor bridge and the backends whose device memory is the host's.

Disk (built kernels, tuned parameters, measured peaks): writes are atomic, so a concurrent or
killed process never leaves half a file; reads take only regular files, so a FIFO or device in an
entry's place never blocks accel; read-modify-write cycles hold a file lock, so concurrent writers
never lose each other's updates.
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from accel.errors import DeviceError, expected


# -- memory ---------------------------------------------------------------------------------
def host_bytes_free() -> int:
    """Bytes the host can still give this process: the kernel's MemAvailable, or less where an
    address-space limit (``ulimit -v``, RLIMIT_AS) leaves less room."""
    free = sys.maxsize
    try:
        with open("/proc/meminfo", "rb") as f:
            free = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith(b"MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            free = min(free, limit - used)
    except (ImportError, OSError, ValueError):
        pass
    return max(0, free)


def host_memory_error(arg: str, nbytes: int, what: str) -> DeviceError:
    """The error for host memory ``arg`` needs (``nbytes``, for ``what``) and cannot get."""
    return DeviceError(expected(arg, f"at most the {host_bytes_free()} bytes of host memory left "
                                f"for {what}", f"{nbytes} bytes"))


# -- disk -----------------------------------------------------------------------------------
#: how long a writer waits for another process's lock before giving up (a hung holder)
LOCK_TIMEOUT_S = 60.0


def cache_root() -> Path:
    """``$ACCEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/accel``, else ``~/.cache/accel``."""
    env = os.environ.get("ACCEL_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "accel"


def writable_dir(path: Path, *, create: bool = True) -> bool:
    """Whether ``path`` exists or can be made, and a file can be created in it: tried for real
    (permission bits say nothing to root), or with ``create=False`` asked of the nearest existing
    folder without writing anything (access() also knows read-only mounts)."""
    if not create:
        near = next(p for p in (path, *path.parents) if p.exists())
        return near.is_dir() and os.access(near, os.W_OK | os.X_OK)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file; None when it is missing, unreadable or
    anything else (a FIFO would block a plain read forever, a device never end)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return f.read()
        except OSError:
            return None


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` so readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock (``path.lock`` beside it) against every other process and thread, for a
    read-modify-write of ``path``. Raises OSError when the directory is not writable, and
    ``filelock.Timeout`` (an OSError too) after LOCK_TIMEOUT_S."""
    import filelock  # here, not at the top: ``import accel`` (which reads host memory) never needs it

    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S):
        yield
