"""Issue 28, item 9: concurrent first OpenCL builds leave the process's warning filters as they
were, and no compiler note escapes as a warning (an op used to swap the filters with
warnings.catch_warnings(), which is not thread-safe: an interleaving left its ignore filter
installed for good)."""
from __future__ import annotations

from faults_common import child
from markers import needs_opencl

pytestmark = needs_opencl

BUILDS = """
    import threading, warnings
    import numpy as np
    from accel.backends.opencl import OpenCLBackend
    from accel.ops import execute
    from accel.spec import matmul_spec, quantize_spec
    from accel.tensor import Tensor

    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    specs = [quantize_spec(x.shape, "float32", "q8_0"), quantize_spec(x.shape, "float32", "q4_0"),
             matmul_spec(x.shape, "float32", x.T.shape, "float32")]
    before = list(warnings.filters)
    for _ in range(6):  # fresh instances: every op builds (or loads) its program again
        be = OpenCLBackend(0)
        inputs = [Tensor.from_host(be, x), Tensor.from_host(be, np.ascontiguousarray(x.T))]
        barrier = threading.Barrier(len(specs))
        def op(spec):
            barrier.wait()
            execute(be, spec, *inputs[:len(spec.in_dtypes)])
        threads = [threading.Thread(target=op, args=(s,)) for s in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print("filters unchanged:", warnings.filters == before)
"""


def test_concurrent_first_builds_change_no_warning_filter_and_warn_nothing(tmp_path):
    ran = child(BUILDS, env={"ACCEL_CACHE_DIR": str(tmp_path), "PYTHONWARNINGS": "default"})
    assert "filters unchanged: True" in ran.stdout, ran.stdout + ran.stderr
    assert "Warning" not in ran.stderr, ran.stderr
