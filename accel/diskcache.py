"""Where accel keeps what it learns on disk (built kernels, tuned parameters, measured peaks), and
the one way it writes there: atomically, so a concurrent or killed process never leaves half a file.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """``$ACCEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/accel``, else ``~/.cache/accel``."""
    env = os.environ.get("ACCEL_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "accel"


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
