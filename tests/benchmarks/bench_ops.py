"""pytest-benchmark over the same cases as `accel bench` (FLOP and byte counts from accel.spec in
extra_info), so `--benchmark-compare` catches regressions between commits."""
import pytest

import accel
from accel.conformance.bench import suite as bench
from accel.dispatch import execute


@pytest.fixture(scope="module")
def backend(bench_device):
    try:
        return accel.get_backend(bench_device)
    except accel.BackendUnavailable as e:
        pytest.skip(f"{bench_device} unavailable here: {e}")


def test_op(benchmark, backend, bench_case):
    case = bench_case
    spec = case.spec()
    verdict = backend.supports(spec)
    if not verdict.ok:
        pytest.skip(f"{backend.device_id} declines {case.id}: {verdict.reason}")
    host = case.host_inputs()
    ins = [None if h is None else accel.Tensor.from_host(backend, h) for h in host]
    out = accel.Tensor.empty(backend, spec.out_shape, spec.out_dtype)

    def run():
        execute(backend, spec, *ins, out=out)
        backend.synchronize()  # pytest-benchmark's clock is the host's: wait for the device

    benchmark.extra_info.update(backend=backend.device_id, op=case.op, dtype=case.dtype,
                                params=case.p, flops=spec.flops, bytes=spec.bytes)
    benchmark(run)
    if benchmark.stats is not None:  # None under --benchmark-disable (a plain correctness run)
        median = benchmark.stats.stats.median
        benchmark.extra_info.update(gflops=spec.flops / median / 1e9, gbs=spec.bytes / median / 1e9)
    ok, err = bench.check_result(out.numpy(), bench.reference(case, host), spec.out_dtype)
    assert ok, f"{case.id} on {backend.device_id}: relative error {err:.3g} after benchmarking"
