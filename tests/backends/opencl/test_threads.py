"""Threads sharing one OpenCL backend (accel.use is per-thread, so this is a supported pattern):
the launch plans share cl.Kernel objects, whose set-arg + enqueue must not interleave."""
import sys
import threading

import numpy as np

import accel


def test_concurrent_ops_on_one_backend_give_each_thread_its_own_answer(opencl_backend):
    opencl = opencl_backend
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((2, 16, 16)).astype(np.float32) for _ in range(4)]
    wrong, errors = [], []

    def worker(i):
        a = accel.asarray(inputs[i][0], backend=opencl)
        b = accel.asarray(inputs[i][1], backend=opencl)
        want = inputs[i][0].astype(np.float64) @ inputs[i][1].astype(np.float64)
        try:
            for _ in range(300):
                got = accel.matmul(a, b).numpy()
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                    wrong.append(i)
        except Exception as e:  # noqa: BLE001 - reported below, with the thread it came from
            errors.append(f"thread {i}: {e!r}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible to expose interleaving
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors and not wrong, (errors, len(wrong))
