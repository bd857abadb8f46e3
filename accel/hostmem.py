"""How much host memory this process can still get, and the error for a copy that needs more
(shared by the tensor bridge and the backends whose device memory is the host's)."""
from __future__ import annotations

import os
import sys

from accel.errors import DeviceError, expected


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
