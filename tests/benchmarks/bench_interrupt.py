"""Ctrl-C during a long OpenCL op on a CPU device (issue 40's goal: the process is usable again,
or has exited, within 5 s of the interrupt). A child process starts one attention of about 30 s
on opencl:0 and is sent SIGINT after 3 s; printed: seconds from the signal to its next op's
result, and to its exit. Plans split such an op into paced pieces (backends/plan.py
launch_flops); before, the next call and the exit waited for the whole kernel."""
import signal
import subprocess
import sys
import time

import pytest

CHILD = r"""
import sys, time, numpy as np, accel
be = accel.get_backend("opencl:0")
q = accel.asarray(np.random.default_rng(0).standard_normal((1, 32, 8192, 128), dtype=np.float32), backend=be)
accel.attention(q[:, :1, :64], q[:, :1, :64], q[:, :1, :64]).numpy()  # the variant is built first
print("started", flush=True)
try:
    accel.attention(q, q, q).numpy()
    print("finished before the interrupt", flush=True)
except KeyboardInterrupt:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert accel.matmul(x, x.T, backend=be).tolist() == [[5.0, 14.0], [14.0, 50.0]]
    print("usable", time.time(), flush=True)
"""


def test_interrupting_a_long_attention(opencl, ratio_lines):
    if opencl.dev.kind != "cpu":
        pytest.skip("the goal is about CPU devices, whose kernels hold every core")
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    time.sleep(3)
    sent = time.time()
    child.send_signal(signal.SIGINT)
    line = child.stdout.readline().split()
    child.wait(timeout=600)
    exited = time.time() - sent
    assert line and line[0] == "usable", line
    usable = float(line[1]) - sent
    ratio_lines.append(f"Ctrl-C during a ~30 s OpenCL attention: next op after {usable:.2f} s, "
                       f"exit after {exited:.2f} s (goal: both at most 5 s; ratio {5 / max(usable, exited):.2f})")
