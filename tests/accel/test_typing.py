"""The public API as a type checker sees it from an installed package (mypy reads files, not the
editable-install import hook, so the test lays the tree out as ``pip install .`` does)."""
import shutil
import subprocess
import sys
import textwrap

import pytest
from repo_paths import ROOT

pytest.importorskip("mypy", reason="mypy is in the test extra; without it typing is unchecked")

PACKAGE_DIRS = {"accel": "accel", "backends": "accel/backends", "conformance": "accel/conformance",
                "kernels": "accel/kernels"}


def test_public_api_type_checks_as_users_call_it(tmp_path):
    site = tmp_path / "site"
    for source, target in PACKAGE_DIRS.items():
        shutil.copytree(ROOT / source, site / target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    user = tmp_path / "user.py"
    user.write_text(textwrap.dedent("""
        import numpy as np
        import accel
        import accel.backends.cpu

        statuses = accel.backends(refresh=True)
        names: list[str] = [s.name for s in statuses]
        out: accel.Tensor | np.ndarray = accel.matmul(np.ones((2, 2), np.float32), np.ones((2, 2)))
        reveal_type(accel.backends)
    """))
    run = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent",
                          "--cache-dir", str(tmp_path / "cache"), str(user)],
                         cwd=tmp_path, env={"MYPYPATH": str(site), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    revealed = [line for line in run.stdout.splitlines() if "Revealed type" in line]
    assert revealed and "refresh" in revealed[0] and "BackendStatus]" in revealed[0], run.stdout
