"""Issue 28, items 5, 6, 7 and 10: accel's caches on disk, met as a user meets them: a read-only
home directory or cache, concurrent tuners, FIFOs and absurd files in an entry's place."""
from __future__ import annotations

import json
import os

import pytest

from accel.conformance.bench.tune import PROBLEMS

from faults_common import child, read_only
from markers import needs_opencl

pytestmark = needs_opencl

MATMUL = """
    import numpy as np, accel
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    print("result", accel.matmul(a, a.T, backend="opencl:0").tolist() == (a @ a.T).tolist())
"""


def test_a_read_only_home_directory_leaves_opencl_working(tmp_path):
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    prefix = read_only(home)
    env = {"HOME": str(home), "XDG_CACHE_HOME": None, "POCL_CACHE_DIR": None}
    # accel's own cache elsewhere, writable: PoCL's cache goes under it
    ran = child(MATMUL, env={**env, "ACCEL_CACHE_DIR": str(tmp_path / "accel")}, prefix=prefix)
    assert "result True" in ran.stdout, ran.stderr
    assert (tmp_path / "accel" / "pocl").is_dir()
    # nothing writable at all: still computes, and accel info says what is not kept
    env["ACCEL_CACHE_DIR"] = str(home / ".cache" / "accel")
    ran = child(MATMUL, env=env, prefix=prefix)
    assert "result True" in ran.stdout, ran.stderr
    info = child("from accel.__main__ import main; main(['info', '--width', '200'])", env=env, prefix=prefix)
    assert f"cache: {home}/.cache/accel (not writable" in info.stdout, info.stdout + info.stderr
    info = child("from accel.__main__ import main; main(['info', '--width', '200'])",
                 env={"ACCEL_CACHE_DIR": str(tmp_path / "accel")})
    assert f"cache: {tmp_path}/accel (pyopencl's build cache under it)" in info.stdout


CONCURRENT_TUNERS = """
    import multiprocessing as mp, sys
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import TUNABLE, save_tuned, tuned

    ROUNDS = 5

    def tuner(op, barrier):
        dev = enumerate_devices()[0]
        for r in range(ROUNDS):
            barrier.wait()
            save_tuned(dev, op, {"round": r})
            barrier.wait()

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(len(TUNABLE) + 1)
        procs = [ctx.Process(target=tuner, args=(op, barrier)) for op in TUNABLE]
        for p in procs:
            p.start()
        dev = enumerate_devices()[0]
        lost = 0
        for r in range(ROUNDS):
            barrier.wait()
            barrier.wait()
            stored = tuned(dev)
            lost += any(stored.get(op) != {"round": r} for op in TUNABLE)
        for p in procs:
            p.join()
        print("rounds with a lost op:", lost, "of", ROUNDS)
"""


def test_concurrent_tuners_of_different_ops_keep_every_result(tmp_path):
    script = tmp_path / "tuners.py"
    script.write_text(__import__("textwrap").dedent(CONCURRENT_TUNERS))
    ran = child(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                env={"ACCEL_CACHE_DIR": str(tmp_path / "cache")}, timeout=180)
    assert "rounds with a lost op: 0 of 5" in ran.stdout, ran.stdout + ran.stderr


def test_tune_on_a_read_only_cache_prints_its_result_and_one_line_naming_the_store(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    ran = child("import sys; from accel.__main__ import main; sys.exit(main(['tune', '--ops', 'gemv', "
                "'--repeat', '1']))", env={"ACCEL_CACHE_DIR": str(cache)}, prefix=read_only(cache),
                timeout=300)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert f"gemv ({PROBLEMS['gemv']}): best" in ran.stdout
    [line] = [ln for ln in ran.stdout.splitlines() if "not stored" in ln]
    assert str(cache) in line and line.endswith("params.json cannot be written: Read-only file system")


PATHS = """
    from accel.backends.opencl.devices import enumerate_devices
    from accel.backends.opencl.params import store_path
    print(store_path(enumerate_devices()[0]))
"""


def test_fifos_and_absurd_files_in_the_caches_are_ignored_not_waited_on(tmp_path):
    # accel keeps programs on disk where the driver does not: PoCL with its own cache off
    env = {"ACCEL_CACHE_DIR": str(tmp_path), "POCL_KERNEL_CACHE": "0"}
    ran = child(MATMUL + PATHS, env=env)  # fills the program cache
    assert "result True" in ran.stdout, ran.stderr
    store = tmp_path / ran.stdout.splitlines()[-1]
    entries = list(tmp_path.rglob("*.bin"))
    assert entries
    store.parent.mkdir(parents=True, exist_ok=True)
    for path in (*entries, store):
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    ran = child(MATMUL, env=env, timeout=60)
    assert "result True" in ran.stdout, ran.stderr
    # a store nested past the JSON parser's recursion limit reads as empty
    store.unlink()
    store.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RecursionError):
        json.loads(store.read_text())
    ran = child(MATMUL, env=env, timeout=60)
    assert "result True" in ran.stdout, ran.stderr
