"""Long ops on CPU-class OpenCL devices: the plan splits them into paced pieces (backends/plan.py
launch_flops), so Ctrl-C during one stops enqueueing and leaves at most two pieces behind."""
from __future__ import annotations

import dataclasses
import signal
import threading
import time

import numpy as np
import pytest
from markers import needs_opencl

import accel
from accel.backends.opencl import OpenCLBackend
from accel.backends.plan import plan_for
from accel.spec import attention_spec


def _budgeted(flops: int) -> OpenCLBackend:
    be = OpenCLBackend(0)
    be.facts = dataclasses.replace(be.facts, launch_flops=flops)
    be.settings_changed()
    return be


@needs_opencl
def test_a_split_launch_computes_what_the_whole_one_does():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 300, 64), dtype=np.float32) for _ in range(3))
    whole = accel.attention(q, k, v, causal=True, backend=OpenCLBackend(0))
    split = _budgeted(10**7)
    np.testing.assert_array_equal(accel.attention(q, k, v, causal=True, backend=split), whole)
    a, b = rng.standard_normal((2, 200, 200), dtype=np.float32)
    np.testing.assert_array_equal(accel.matmul(a, b, backend=split), accel.matmul(a, b, backend=OpenCLBackend(0)))


@needs_opencl
def test_an_interrupt_stops_a_split_op_and_leaves_the_device_usable(monkeypatch):
    be = _budgeted(10**9)
    rng = np.random.default_rng(1)
    q = accel.asarray(rng.standard_normal((1, 8, 4096, 64), dtype=np.float32), backend=be)
    accel.attention(q[:, :, :64], q[:, :, :64], q[:, :, :64])  # builds the variant first
    spec = attention_spec(q.shape, q.shape, q.shape, ("float32",) * 3)
    pieces = len(plan_for(spec, be.facts, be.tiles))
    assert pieces >= spec.flops / 10**9 > 30  # 8-25 ms each on 2 cores (AVX-512 Xeon, Zen 4)
    started = time.perf_counter()
    accel.attention(q, q, q)
    be.synchronize()
    whole = time.perf_counter() - started  # the signal comes a quarter of the way in, whatever
    enqueued, real = [], be._enqueue       # this machine's speed
    monkeypatch.setattr(be, "_enqueue", lambda *a, **kw: enqueued.append(a) or real(*a, **kw))
    timer = threading.Timer(whole / 4, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            accel.attention(q, q, q)  # paced: returns after its last piece is queued
            be.synchronize()
    finally:
        timer.cancel()
    assert 0 < len(enqueued) < pieces, (len(enqueued), pieces)  # it stopped enqueueing
    be.synchronize()  # what was queued finishes: at most two pieces
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert accel.matmul(x, x.T, backend=be).tolist() == [[5.0, 14.0], [14.0, 50.0]]
