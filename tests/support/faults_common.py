"""What the fault tests share: faults are met for real, each in a child Python with a deadline
(a hang fails the test naming it, and the whole process group is killed, pool workers included),
and a read-only directory made for real (a read-only bind mount in a private mount namespace
where the tests run as root, whom permission bits do not stop)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from repo_paths import ROOT


def child(code: str, *, env: dict | None = None, timeout: float = 120, prefix: tuple = (),
          **popen) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``env`` over this one's (None unsets a
    variable); a child still running after ``timeout`` seconds fails the test as a hang."""
    full = {**os.environ, **(env or {})}
    full = {k: v for k, v in full.items() if v is not None}
    proc = subprocess.Popen([*prefix, sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                            env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hang: the child was still running after {timeout} s\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def read_only(path: Path) -> tuple[str, ...]:
    """A command prefix under which ``path`` (an existing folder) is read-only for real."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return ()
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, timeout=30) if unshare else None
    if probe is None or probe.returncode:
        pytest.skip("running as root, whom permission bits do not stop, without unshare(1) "
                    "and the right to make a read-only bind mount")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return (unshare, "-m", "sh", "-c", script, str(path))
