"""Where the OpenCL layers below accel keep their own build caches: under accel's cache root, so
that one writable directory (``$ACCEL_CACHE_DIR``) is all accel needs, and a read-only home
directory (common in containers) never breaks OpenCL.

- pyopencl caches builds in ``$XDG_CACHE_HOME/pyopencl`` (else the home directory's) on
  platforms without a cache of their own and raises PermissionError where it cannot write: accel
  passes it ``<cache root>/pyopencl``, or turns it off when that is not writable either.
- pyopencl also keeps generated argument-setting code in pytools' cache
  (``$XDG_CACHE_HOME/pytools``), created when its first kernel object is made; it cannot be
  pointed elsewhere, so where it cannot be written it is turned off instead.
- PoCL caches compiled kernels in ``$POCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pocl`` or
  ``~/.cache/pocl``, and lists no device at all when it cannot write there.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import platformdirs
import pyopencl as cl

from accel.host import cache_root, writable_dir


def pyopencl_cache_dir() -> str | bool:
    """The ``cache_dir`` to pass to pyopencl's ``Program.build``: a directory, or False (no
    cache) when accel's cache root is not writable."""
    path = cache_root() / "pyopencl"
    return str(path) if writable_dir(path) else False


def place_runtime_caches() -> None:
    """Before the process's first OpenCL call, once: the caches that pyopencl and PoCL would
    otherwise fail on (module docstring)."""
    _place_pocl_cache()
    if "pyopencl.invoker" not in sys.modules and not writable_dir(
            Path(platformdirs.user_cache_dir("pytools", "pytools"))):
        # what PYOPENCL_NO_CACHE=1 sets, which pyopencl reads only when it is imported
        cl._PYOPENCL_NO_CACHE = True


def _place_pocl_cache() -> None:
    """When the user has not chosen PoCL's cache and its default is not writable, point it
    under accel's cache root, else at a directory of this process's own: the one environment
    variable accel sets, and only where PoCL would otherwise list no device."""
    if os.environ.get("POCL_CACHE_DIR"):
        return
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pocl"
    if writable_dir(default):
        return
    ours = cache_root() / "pocl"
    os.environ["POCL_CACHE_DIR"] = str(ours) if writable_dir(ours) else tempfile.mkdtemp(prefix="accel-pocl-")
