"""accel on torch's current CUDA stream (issue 23): needs a GPU, so it runs in
conformance/gpu_check.sh wherever one is lent, and skips here saying so."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'accel-portable[torch]')")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (conformance/gpu_check.sh runs it on one)", allow_module_level=True)

import accel  # noqa: E402


def test_accel_waits_for_torch_work_queued_before_it_on_a_side_stream():
    side = torch.cuda.Stream()
    a = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before b exists on this stream
        b = a * 2
        got = accel.matmul(b, b)  # ordered after b only if it runs on `side`
        want = b @ b
    torch.cuda.synchronize()
    err = (got.double() - want.double()).abs().max().item()
    assert err <= 1e-2 * want.abs().max().item(), err


def test_torch_work_after_accel_on_the_stream_reads_its_result():
    side = torch.cuda.Stream()
    x = torch.randn(512, 256, device="cuda")
    w = torch.randn(256, 128, device="cuda")
    with torch.cuda.stream(side):
        out = accel.matmul(x, w)
        total = (out * 1).sum()  # queued on `side` after accel's kernel
    torch.cuda.synchronize()
    want = (x.double() @ w.double()).sum().item()
    assert np.isclose(total.item(), want, rtol=1e-3, atol=1e-1)
