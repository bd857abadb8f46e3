"""The CPU-device quantized matmuls (``qmatmul`` and ``qmatmul_x8`` in kernels/quant.cl with CPU
parameter sets) walk K in runs of VW blocks whose float16 scales convert as one vector and whose
X8 block sums add up in one tree (VW 8 or 16), then the last K / 32 mod VW blocks one by one.
Run for real on an OpenCL device (PoCL here), against float64 math on the same bytes.

K = 32 * 19 is two runs of 8 and a tail of 3 (one run of 16 and a tail of 3); K = 32 * 7 is a tail
alone at VW = 8; VW = 4 takes qmatmul_x8's lane-by-lane path. Scales cover every float16 class
the vector conversion branches on: zero, -0, subnormals (smallest and largest), normals, the
largest finite, infinity and NaN. An infinite scale is left out with float x: there the op sums
x times the block's codes before scaling (inf times that sum), while x @ dequantize(w) meets
inf * 0 at every zero code, so the two definitions part ways."""
from __future__ import annotations

import numpy as np
import pytest

from markers import needs_opencl
from opencl_common import matmul_bound

import accel
from accel import spec as S
from accel.conformance import oracle, tolerance
from accel.tensor import Tensor

pytestmark = needs_opencl
BLOCK_BYTES = {"q4_0": 18, "q8_0": 34}
#: float16 bit patterns: 0, -0, smallest and largest subnormal, 1, -2.5, largest finite, inf, NaN
SCALES = np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x3C00, 0xC100, 0x7BFF, 0x7C00, 0x7E00], np.uint16)




def _weights(rng, fmt: str, N: int, Kd: int, scales: np.ndarray | None) -> np.ndarray:
    raw = np.asarray(accel.quantize(rng.standard_normal((N, Kd)).astype(np.float32), fmt,
                                    backend="cpu").raw).copy()
    if scales is not None:  # every block of row n gets scales[n mod len(scales)]: one class per
        # output, so that the bound of a row of tiny scales is not set by a row of huge ones
        blocks = raw.reshape(N, Kd // 32, BLOCK_BYTES[fmt])
        idx = np.broadcast_to((np.arange(N) % len(scales))[:, None], (N, Kd // 32))
        blocks[:, :, :2] = scales[idx].view(np.uint8).reshape(N, Kd // 32, 2)
    return raw


def _run(be, x, raw, fmt, N, x_fmt=None):
    spec = S.qmatmul_spec(x.shape, "float32", (N, x.shape[1]), accel.formats.get_format(fmt), x_fmt)
    got = accel.dispatch.execute(be, spec, Tensor(be, be.upload(x), x.shape, "float32"),
                                 Tensor(be, be.upload(raw), raw.shape, "uint8")).numpy()
    assert got.shape == (x.shape[0], N)
    return got.astype(np.float64)


def _agree(got, want, bound):
    finite = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all()
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
    with np.errstate(invalid="ignore"):
        bad = (np.abs(got - want) > bound) & finite
    assert not bad.any(), f"{bad.sum()} of {bad.size} out of bound, first {np.argwhere(bad)[0]}"


#: the shapes both paths run: (VW, RM, RN) and K, with normal or special scales
_SHAPES = pytest.mark.parametrize("vw,rm,rn,Kd,special", [
    (vw, rm, rn, kd, sp) for vw, rm, rn in [(8, 1, 1), (8, 4, 4), (16, 2, 3), (4, 1, 2)]
    for kd in (32 * 19, 32 * 7) for sp in (False, True)])


def _setup(opencl_with, rng, fmt, vw, rm, rn, Kd, scales):
    p = dict(RM=rm, RN=rn, VW=vw)
    be, M, N = opencl_with(gemv={**p, "RM": 1}, qmatmul=p), (1 if rm == 1 else 3), 2 * len(SCALES) + 1
    return be, M, N, _weights(rng, fmt, N, Kd, scales)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@_SHAPES
def test_float_x_within_bound_of_float64(opencl_with, rng, fmt, vw, rm, rn, Kd, special):
    be, M, N, raw = _setup(opencl_with, rng, fmt, vw, rm, rn, Kd, SCALES[SCALES != 0x7C00] if special else None)
    wd = np.asarray(accel.dequantize(accel.QTensor.from_raw(raw, fmt, (N, Kd))), np.float64)
    x = rng.standard_normal((M, Kd)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(np.float64) @ wd.T
        bound = matmul_bound(x.astype(np.float64), np.where(np.isfinite(wd), wd, 0).T, want, "float32")
    _agree(_run(be, x, raw, fmt, N), want, bound)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@_SHAPES
def test_x8_within_bound_of_the_oracle(opencl_with, rng, fmt, vw, rm, rn, Kd, special):
    be, M, N, raw = _setup(opencl_with, rng, fmt, vw, rm, rn, Kd, SCALES if special else None)
    # large x codes: products of +-127 with q8_0's extreme weight codes test the 16-bit lanes
    x = (rng.standard_normal((M, Kd)) * np.where(rng.random((M, Kd)) < 0.1, 50, 1)).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want, mag = oracle.qmatmul_quantized_x(x, raw, fmt, N, "q8_0")
        bound = tolerance.matmul_bound(want, np.where(np.isfinite(mag), mag, 0), Kd // 32,
                                       "float32", "float32")
    _agree(_run(be, x, raw, fmt, N, "q8_0"), want, bound)
