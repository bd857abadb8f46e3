"""Issue 28, items 3 and 4: memory exhaustion, met for real under an address-space limit
(RLIMIT_AS, what ``ulimit -v`` sets) in a child process: typed errors naming the argument and
the bytes, before any huge host copy, and never a PoCL abort."""
from __future__ import annotations

from faults_common import child
from markers import needs_opencl

LIMIT = """
    import resource
    def limit_to(extra):  # the address space in use now, plus ``extra`` bytes
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + extra, resource.RLIM_INFINITY))
    def attempt(what, fn):
        try:
            fn()
            print(what, "ran")
        except Exception as e:
            print(what, type(e).__name__, e)
"""


def test_a_cpu_result_larger_than_the_host_is_a_typed_error():
    ran = child(LIMIT + """
    import numpy as np, accel
    limit_to(2 << 30)
    a, b = np.ones((100_000, 1), np.float32), np.ones((1, 250_000), np.float32)
    attempt("float32", lambda: accel.matmul(a, b, backend="cpu"))
    attempt("float16", lambda: accel.matmul(a.astype(np.float16), b.astype(np.float16), backend="cpu"))
    """)
    for dtype in ("float32", "float16"):
        assert (f"{dtype} DeviceError out: expected at most the " in ran.stdout
                and "got 100000000000 bytes" in ran.stdout), ran.stdout + ran.stderr


@needs_opencl
def test_opencl_refuses_huge_host_copies_and_buffers_before_making_them():
    ran = child(LIMIT + """
    import numpy as np, accel
    be = accel.get_backend("opencl:0")
    a = np.ones((4, 4), np.float32)
    accel.matmul(a, a, backend=be)  # the runtime is up before the limit
    limit_to(1536 << 20)
    q = np.ones((1, 1, 100_000, 16), np.float32)
    mask = np.broadcast_to(np.ones((1, 1, 1, 1), bool), (1, 1, 100_000, 100_000))  # 10 GB view
    attempt("mask", lambda: accel.attention(q, q, q, mask=mask, backend=be))
    # twice the largest buffer (PoCL sizes it from the machine's memory: 4 or 8 GiB here)
    view = np.broadcast_to(np.ones((1, 4096), np.float32), (be.dev.max_alloc // 8192, 4096))
    print(f"max_alloc={be.dev.max_alloc}")
    attempt("view", lambda: accel.matmul(view, np.ones((4096, 1), np.float32), backend=be))
    # over the largest buffer (PoCL: 4 GiB here), under the device's memory: refused before the
    # host copy, for the device's reason, not the host's
    wide = np.broadcast_to(np.ones((1, 4096), np.float32), (be.dev.max_alloc // 16384 + 1, 4096))
    attempt("wide", lambda: accel.matmul(wide, np.ones((4096, 1), np.float32), backend=be))
    # under the device's largest allocation, over what the address-space limit leaves
    attempt("buffer", lambda: accel.Tensor.empty(be, (2 << 30,), "int8"))
    attempt("after", lambda: accel.matmul(a, a, backend=be))
    """)
    out = ran.stdout
    assert ran.returncode == 0, out + ran.stderr  # PoCL used to abort (SIGABRT) at the buffer
    # views over PoCL's largest buffer (4 GiB) are refused for that, before any host copy
    assert "mask DeviceError mask: expected at most" in out and "got a view of 10000000000 bytes" in out
    largest = int(out.split("max_alloc=")[1].split()[0])
    assert f"view DeviceError a: expected at most the {largest} bytes of the largest buffer" in out
    assert f"got a view of {2 * largest} bytes" in out
    assert ("wide DeviceError a: expected at most the" in out
            and "bytes of the largest buffer opencl:0 can hold" in out), out
    assert "buffer DeviceError nbytes: expected at most the" in out and "got 2147483648 bytes" in out
    assert "after ran" in out
