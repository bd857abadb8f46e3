"""codebook.cl's qmatmul_cbx: the codebook formats' product with x quantized to q8_k (ggml's
vec_dot partner) runs on the OpenCL device (x quantized there first), within the float32 bound
of the oracle's float64 answer over K / 32 terms, on every row tile of x (CODEBOOK_ROWS rows a
work-item, a ragged last tile) and with a NaN row of x."""
from __future__ import annotations

import numpy as np
import pytest

import accel
import accel.kernels as K
from accel.conformance import oracle, tolerance

from markers import OPENCL_DEVICES, needs_opencl


def _weight(fmt: str, n: int, k: int, rng) -> accel.QTensor:
    w = rng.standard_normal((n, k)).astype(np.float32)
    return accel.quantize(w, fmt, imatrix=np.ones(k, np.float32), backend="cpu")


@needs_opencl
@pytest.mark.parametrize("fmt", K.CODEBOOK_FORMATS)
def test_codebook_x_format_runs_on_the_device_within_the_float32_bound(fmt, monkeypatch):
    # the first device (the quick conformance profile runs these cases on every other one)
    from opencl_common import recorded_launches  # pyopencl: only where an OpenCL test runs

    device = OPENCL_DEVICES[0]
    be = accel.get_backend(device)
    rng = np.random.default_rng([7, len(fmt)])
    M, N, K_ = K.CODEBOOK_ROWS + 3, 70, 512  # two row tiles, the second ragged
    qw = _weight(fmt, N, K_, rng)
    x = rng.standard_normal((M, K_)).astype(np.float32)
    x[4] = np.nan  # a NaN row: its outputs are NaN, the others unharmed
    seen = recorded_launches(be, monkeypatch)
    got = np.asarray(accel.qmatmul(x, qw.to(device), x_format="q8_k"))
    whats = [w for w, _, _ in seen]
    assert len(whats) == 2 and whats[0].startswith("quantize_k (x to q8_k)"), whats
    assert whats[1].startswith("qmatmul (qmatmul_cbx"), whats
    ref, mag = oracle.qmatmul_quantized_x(x, qw.raw, fmt, N, "q8_k")
    assert np.isnan(got[4]).all() and not np.isnan(np.delete(got, 4, 0)).any()
    ok = np.delete(np.arange(M), 4)
    bound = tolerance.matmul_bound(ref[ok], mag[ok], K_ // 32, "float32", "float32")
    err = np.abs(got[ok].astype(np.float64) - ref[ok])
    assert (err <= bound).all(), f"max error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"
    # the cpu reference adds the same terms in float64: the two differ by float32 roundings only
    cpu = accel.qmatmul(x, qw, x_format="q8_k", backend="cpu")
    np.testing.assert_allclose(got[ok], cpu[ok], rtol=1e-5, atol=1e-6 * float(mag[ok].max()))
