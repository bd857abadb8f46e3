"""accel's ops as PyTorch operators: opcheck for each, gradients against torch's own in float64
under float32 error bounds (CPU reference and OpenCL), torch.compile of docs/torch.md's model,
and a clear error wherever a gradient cannot exist."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import accel  # noqa: E402
from accel import torch_ops  # noqa: E402
from accel.conformance import oracle, tolerance  # noqa: E402
from accel.dtypes import UNIT_ROUNDOFF  # noqa: E402
from accel.errors import ArgumentError  # noqa: E402
from markers import needs_opencl  # noqa: E402
from repo_paths import ROOT  # noqa: E402
from tolerance_checks import assert_within  # noqa: E402


BACKENDS = ["cpu", pytest.param("opencl:0", marks=needs_opencl)]


def _raw(fmt: str, n: int, k: int) -> torch.Tensor:
    w = accel.quantize(np.random.default_rng(1).standard_normal((n, k), np.float32), fmt)
    return torch.from_numpy(w.raw.copy())


@pytest.mark.parametrize("op, args, kwargs", [
    ("matmul", lambda: (torch.randn(2, 3, 5, requires_grad=True), torch.randn(5, 4, requires_grad=True)), {}),
    ("matmul", lambda: (torch.randn(3, 5).half(), torch.randn(5, 2).half()), {"out_dtype": torch.float32}),
    ("attention", lambda: (torch.randn(1, 4, 3, 8, requires_grad=True), torch.randn(1, 2, 5, 8, requires_grad=True),
                           torch.randn(1, 2, 5, 8, requires_grad=True)), {"causal": True}),
    ("attention", lambda: (torch.randn(1, 2, 3, 8, requires_grad=True), torch.randn(1, 2, 4, 8),
                           torch.randn(1, 2, 4, 8, requires_grad=True),
                           torch.randn(3, 4, requires_grad=True)), {"scale": 0.5}),
    ("qmatmul", lambda: (torch.randn(2, 64, requires_grad=True), _raw("q4_0", 3, 64), "q4_0", 3), {}),
    ("quantize", lambda: (torch.randn(2, 64), "q8_0"), {}),
    ("dequantize", lambda: (_raw("q8_0", 3, 64), "q8_0", [3, 64]), {}),
    ("rms_norm", lambda: (torch.randn(3, 16, requires_grad=True), torch.randn(16, requires_grad=True)), {}),
    ("add", lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)), {}),
    ("mul", lambda: (torch.randn(2, 3, requires_grad=True), torch.randn(2, 1, requires_grad=True)), {}),
    ("softmax", lambda: (torch.randn(2, 7, requires_grad=True), 0.5), {}),
    ("softmax", lambda: (torch.randn(2, 3, 7, requires_grad=True), 0.5), {"mask": torch.rand(3, 7) < 0.7}),
    ("softmax", lambda: (torch.randn(2, 3, 7, requires_grad=True), 1.0), {"mask": torch.randn(2, 3, 7)}),
    ("glu", lambda: (torch.randn(2, 6, requires_grad=True), torch.randn(2, 6, requires_grad=True)), {}),
    ("glu", lambda: (torch.randn(2, 6, requires_grad=True), torch.randn(2, 6, requires_grad=True), "gelu"), {}),
    ("rope", lambda: (torch.randn(1, 2, 3, 8, requires_grad=True), torch.tensor([0, 4, 9])), {"rotary_dim": 4}),
    ("layer_norm", lambda: (torch.randn(3, 16, requires_grad=True), torch.randn(16, requires_grad=True),
                            torch.randn(16, requires_grad=True)), {}),
    ("get_rows", lambda: (torch.randn(6, 4, requires_grad=True), torch.tensor([[5, 0], [2, 2]])), {}),
])
def test_opcheck(op, args, kwargs):
    """Schema, fake tensor, autograd registration and AOT dispatch (torch.library.opcheck)."""
    torch.library.opcheck(getattr(torch.ops.accel, op).default, args(), kwargs)


def test_every_operator_is_registered_and_checked():
    checked = {m.group(1) for m in re.finditer(r'\("(\w+)", lambda', Path(__file__).read_text())}
    assert {repr(op) for op in torch_ops.OPERATORS} == {f"<CustomOpDef(accel::{n})>" for n in checked}


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_gradients_within_the_tolerance_model(backend):
    rng = np.random.default_rng(0)
    a64, b64 = rng.standard_normal((2, 7, 33)), rng.standard_normal((33, 5))
    a = torch.tensor(a64, dtype=torch.float32, requires_grad=True)
    b = torch.tensor(b64, dtype=torch.float32, requires_grad=True)
    g = rng.standard_normal((2, 7, 5))
    accel.matmul(a, b, backend=backend).backward(torch.tensor(g, dtype=torch.float32))
    # dA = G @ B^T (K = 5), dB = sum over the batch of A^T @ G (K = 2 x 7): products of the
    # float32-rounded inputs, judged as the conformance suite judges a matmul
    a32, b32, g32 = (x.astype(np.float32).astype(np.float64) for x in (a64, b64, g))
    for got, x, y, k in ((a.grad, g32, np.swapaxes(b32, -1, -2), 5),
                         (b.grad, np.swapaxes(a32, -1, -2).reshape(33, -1)[:, :], None, 14)):
        if y is None:  # dB: the batch folds into the reduction
            x, y = np.swapaxes(a32, -1, -2).transpose(1, 0, 2).reshape(33, 14), g32.reshape(14, 5)
        ref, mag = oracle.matmul(x, y)
        assert_within(got.numpy(), ref, tolerance.matmul_bound(ref, mag, k, "float32", "float32"),
                      "float32")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal, mask", [(False, None), (True, None), (False, "additive"), (True, "bool")])
def test_attention_gradients_match_torch_in_float64(backend, causal, mask):
    """Gradients of q, k, v (and an additive mask) against torch's own SDPA backward in float64.
    Bound per element: gamma_n u32 times the magnitude of the products that form it (|dS||K|,
    |dS^T||Q|, |P^T||dO|, n = Sk + D), widened 8x for the two float32 roundings of the softmax
    Jacobian in between."""
    B, Hq, Hkv, Sq, Sk, D = 1, 4, 2, 5, 9, 16
    gen = torch.Generator().manual_seed(3)
    q64, k64, v64 = (torch.randn(s, generator=gen, dtype=torch.float64)
                     for s in ((B, Hq, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, D)))
    m64 = None
    if mask == "additive":
        m64 = torch.randn(Sq, Sk, generator=gen, dtype=torch.float64)
    elif mask == "bool":
        m64 = torch.rand(Sq, Sk, generator=gen) < 0.8
    q, k, v = (t.float().requires_grad_() for t in (q64, k64, v64))
    m = None if m64 is None else (m64 if m64.dtype == torch.bool else m64.float().requires_grad_())
    out = accel.attention(q, k, v, causal=causal, mask=m, backend=backend)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad(out, [t for t in (q, k, v, m) if t is not None and t.requires_grad],
                                g.float())

    # float64 reference on the float32-rounded inputs
    r = [t.float().double().requires_grad_() for t in (q64, k64, v64)]
    rm = None if m64 is None else (m64 if m64.dtype == torch.bool else m64.float().double().requires_grad_())
    keep = torch.ones(Sq, Sk, dtype=torch.bool).tril(Sk - Sq) if causal else torch.ones(Sq, Sk, dtype=torch.bool)
    bias = torch.zeros(Sq, Sk, dtype=torch.float64).masked_fill(~keep, -math.inf)
    if rm is not None:
        bias = bias.masked_fill(~rm, -math.inf) if rm.dtype == torch.bool else bias + rm
    kx, vx = (t.repeat_interleave(Hq // Hkv, dim=1) for t in r[1:])
    logits = r[0] @ kx.mT / math.sqrt(D) + bias
    p = torch.softmax(logits, dim=-1)
    ref_out = p @ vx
    refs = torch.autograd.grad(ref_out, [t for t in (*r, rm) if t is not None and t.requires_grad], g)

    ds = (p * ((g @ vx.mT) - ((g @ vx.mT) * p).sum(-1, keepdim=True))).abs().detach()
    pa, ga = p.abs().detach(), g.abs()
    mags = [ds @ kx.abs().detach() / math.sqrt(D),
            (ds.mT @ r[0].abs().detach() / math.sqrt(D)).view(B, Hkv, -1, Sk, D).sum(2),
            (pa.mT @ ga).view(B, Hkv, -1, Sk, D).sum(2)]
    if len(refs) == 4:
        mags.append(ds.sum_to_size(Sq, Sk))
    u = UNIT_ROUNDOFF["float32"]
    for got, ref, mag in zip(grads, refs, mags):
        bound = 8 * (Sk + D) * u * mag.numpy() + 1e-30
        assert_within(got.detach().numpy(), ref.detach().numpy(), bound, "float32")


def test_qmatmul_gradient_in_x_is_dy_times_the_dequantized_weight():
    w = accel.quantize(np.random.default_rng(2).standard_normal((6, 64), np.float32), "q8_0")
    x = torch.randn(3, 64, requires_grad=True)
    y = accel.qmatmul(x, w)
    assert y.grad_fn is not None
    g = torch.randn(3, 6)
    y.backward(g)
    weight = accel.dequantize(w).astype(np.float64)
    ref, mag = oracle.matmul(g.double().numpy(), weight)
    assert_within(x.grad.numpy(), ref, tolerance.matmul_bound(ref, mag, 6, "float32", "float32"),
                  "float32")


@pytest.mark.parametrize("shape", [(64,), (2, 3, 64)], ids=["one vector", "batched"])
def test_qmatmul_gradient_keeps_the_shape_of_x(shape):
    w = accel.quantize(np.random.default_rng(3).standard_normal((5, 64), np.float32), "q4_0")
    x = torch.randn(*shape, requires_grad=True)
    g = torch.randn(*shape[:-1], 5)
    accel.qmatmul(x, w).backward(g)  # a decode step's single vector failed: matmul needs 2-d
    weight = accel.dequantize(w).astype(np.float64)
    ref, mag = oracle.matmul(g.double().reshape(-1, 5).numpy(), weight)
    assert x.grad.shape == x.shape
    assert_within(x.grad.reshape(-1, 64).numpy(), ref,
                  tolerance.matmul_bound(ref, mag, 5, "float32", "float32"), "float32")


def test_qmatmul_gradient_of_a_weight_of_no_rows_is_zero():
    w = accel.quantize(np.zeros((0, 32), np.float32), "q4_0")
    x = torch.randn(2, 32, requires_grad=True)
    accel.qmatmul(x, w).sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros(2, 32))


@pytest.mark.parametrize("a_shape,b_shape", [((0, 8), (8, 4)), ((3, 8), (8, 0)), ((2, 0, 8), (8, 4))],
                         ids=["M=0", "N=0", "empty batch"])
def test_matmul_gradients_of_an_empty_product_are_zero(a_shape, b_shape):
    # an MoE expert that got no tokens: torch gives zero gradients, and so must accel
    a = torch.randn(*a_shape, requires_grad=True)
    b = torch.randn(*b_shape, requires_grad=True)
    accel.matmul(a, b).sum().backward()
    torch.testing.assert_close(a.grad, torch.zeros(a_shape))
    torch.testing.assert_close(b.grad, torch.zeros(b_shape))


def test_paths_without_a_derivative_refuse_a_gradient_at_the_call():
    x = torch.randn(2, 64, requires_grad=True)
    with pytest.raises(ArgumentError, match="x: expected a tensor that does not require grad"):
        torch.ops.accel.quantize(x, "q4_0")
    w = accel.quantize(np.ones((3, 64), np.float32), "q4_0")
    with pytest.raises(ArgumentError, match="x_format: expected None when x requires a gradient"):
        accel.qmatmul(x, w, x_format="q8_0")
    with torch.no_grad():  # no gradient asked for: both compute
        assert torch.ops.accel.quantize(x, "q4_0").dtype == torch.uint8
        assert accel.qmatmul(x, w, x_format="q8_0").shape == (2, 3)


def test_bad_shapes_fail_while_tracing_with_the_typed_error():
    f = torch.compile(lambda a, b: accel.matmul(a, b), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"b\.shape\[-2\]|K"):
        f(torch.randn(2, 3), torch.randn(4, 5))


def test_the_docs_model_runs_eager_with_gradients_and_compiled():
    """docs/torch.md's example, as written (its own assert compares compiled with eager)."""
    text = (ROOT / "docs" / "torch.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/torch.md", "exec"), scope)
    assert scope["x"].grad is not None and torch.isfinite(scope["x"].grad).all()


@pytest.mark.parametrize("flags,name", [({"scale": "x"}, "scale"), ({"causal": None}, "causal"),
                                        ({"scale": float("inf")}, "scale")])
def test_attention_on_torch_tensors_names_a_bad_scale_or_causal(flags, name):
    """Found by tests/accel/test_fuzz.py: torch's operator schema turned scale='x' into its own
    RuntimeError; accel's typed error names the argument first."""
    q = torch.ones(1, 1, 1, 4)
    with pytest.raises(ArgumentError, match=f"^{name}: expected"):
        accel.attention(q, q, q, **flags)


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_operands_beside_a_tensor_that_requires_grad_keep_the_gradient(backend):
    """A numpy mask (or b) with torch q (or a) that requires grad: the op runs as the operator,
    and the gradient equals that of the all-torch call."""
    a = torch.randn(3, 4, requires_grad=True)
    b = np.random.default_rng(3).standard_normal((4, 2)).astype(np.float32)
    accel.matmul(a, b, backend=backend).sum().backward()
    expected_grad = torch.from_numpy(b).sum(dim=1).expand(3, 4)
    assert torch.allclose(a.grad, expected_grad, rtol=1e-6, atol=1e-6)
    q = torch.randn(1, 2, 3, 8, requires_grad=True)
    k = torch.randn(1, 1, 4, 8)
    keep = np.tril(np.ones((3, 4), bool), 1)
    y = accel.attention(q, k, k, mask=keep, backend=backend)
    y.sum().backward()
    q2 = q.detach().clone().requires_grad_(True)
    accel.attention(q2, k, k, mask=torch.from_numpy(keep), backend=backend).sum().backward()
    assert q.grad is not None and torch.equal(q.grad, q2.grad)


def test_a_device_array_beside_a_tensor_that_requires_grad_is_refused():
    a = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(ArgumentError, match="^b: expected a torch tensor on cpu"):
        accel.matmul(a, accel.asarray(np.ones((4, 2), np.float32)))


def test_scaled_matmul_refuses_operands_that_require_grad():
    a8, sa = accel.quantize_fp8(np.ones((2, 128), np.float32), "float8_e4m3fn")
    b8, sb = accel.quantize_fp8(np.ones((128, 3), np.float32), "float8_e4m3fn", operand_of="b")
    bias = torch.zeros(3, requires_grad=True)
    with pytest.raises(ArgumentError, match="^bias: expected a tensor that does not require grad"):
        accel.scaled_matmul(a8, b8, sa, sb, bias=bias)
    with torch.no_grad():
        assert accel.scaled_matmul(a8, b8, sa, sb, bias=bias, out_dtype="float32").shape == (2, 3)


@pytest.mark.parametrize("call,error,words", [
    # K = 40 would round down to the bytes of K = 32: the kernels would read the next row's bytes
    (lambda: torch.ops.accel.qmatmul(torch.ones(2, 40), _raw("q4_0", 5, 32), "q4_0", 5),
     accel.ShapeError, ["x.shape[-1]", "multiple of 32", "40"]),
    (lambda: accel.qmatmul(torch.ones(2, 40, requires_grad=True), accel.quantize(np.ones((5, 32), np.float32), "q4_0")),
     accel.ShapeError, ["x.shape[-1]", "K = w.shape[1] = 32", "40"]),
    (lambda: torch.ops.accel.dequantize(_raw("q4_0", 5, 32), "q4_0", [5, 40]),
     accel.ShapeError, ["shape[-1]", "multiple of 32", "40"]),
    (lambda: torch.ops.accel.dequantize(_raw("q4_0", 5, 32), "q4_0", []), accel.ShapeError, ["shape", "at least 1 dimension"]),
    (lambda: torch.ops.accel.qmatmul(torch.ones(2, 32), torch.zeros(5, 18), "q4_0", 5),
     accel.DTypeError, ["w.dtype", "torch.uint8", "torch.float32"]),
    (lambda: torch.ops.accel.qmatmul(torch.ones(2, 32), _raw("q4_0", 5, 32), "q4_0", -5),
     accel.ArgumentError, ["N", "int >= 0", "-5"]),
    (lambda: torch.ops.accel.dequantize(torch.zeros(5, 18, dtype=torch.int8), "q4_0", [5, 32]),
     accel.DTypeError, ["raw.dtype", "torch.uint8", "torch.int8"]),
])
def test_quantized_operators_check_the_bytes_they_are_given(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(word in str(info.value) for word in words), str(info.value)


def test_operators_exist_once_accel_is_imported_after_torch():
    import subprocess
    import sys

    code = ("import torch, accel; print(torch.ops.accel.matmul(torch.ones(2, 3), torch.ones(3, 2)).sum().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "12.0"


def _masked_softmax64(x: torch.Tensor, scale: float, mask: torch.Tensor) -> torch.Tensor:
    """torch's float64 softmax of x * scale with the mask applied (bool: False -> -inf; float:
    added); a row with no finite logit left gives zeros (and a zero gradient), as accel's does."""
    z = x * scale
    z = z.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else z + mask.double()
    alive = torch.isfinite(z).any(-1, keepdim=True)
    return torch.softmax(torch.where(alive, z, torch.zeros_like(z)), dim=-1) * alive


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masked_softmax_operator_values_and_gradient_against_float64(backend, kind):
    """accel.softmax(x, mask=m) on torch tensors runs torch.ops.accel.softmax with the mask:
    values and the gradient in x against torch's float64 softmax of the masked logits (a mask
    [Sq, Sk] repeated over [B, H, Sq, Sk], one fully masked row: zeros and a zero gradient)."""
    gen = torch.Generator().manual_seed(5)
    x64 = torch.randn(2, 3, 4, 9, generator=gen, dtype=torch.float64)
    if kind == "bool":
        mask = torch.rand(4, 9, generator=gen) < 0.6
        mask[0, 0] = True  # a kept logit in every row but the last
        mask[3] = False  # row 3 of every head sees nothing
    else:
        mask = torch.randn(4, 9, generator=gen, dtype=torch.float64).float()
        mask[3] = -math.inf
    x = x64.float().requires_grad_()
    y = accel.softmax(x, scale=0.7, mask=mask, backend=backend)
    assert y.grad_fn is not None and y.dtype == torch.float32
    g = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (gx,) = torch.autograd.grad(y, [x], g.float())

    r = x64.float().double().requires_grad_()
    want = _masked_softmax64(r, 0.7, mask)
    (gw,) = torch.autograd.grad(want, [r], g)
    assert torch.equal(y.detach()[..., 3, :], torch.zeros(2, 3, 9))
    assert torch.equal(gx[..., 3, :], torch.zeros(2, 3, 9))
    # float32: a few roundings of exp, the row sum (n = 9 terms) and the division
    assert torch.allclose(y.detach().double(), want.detach(), rtol=1e-5, atol=1e-7)
    assert torch.allclose(gx.double(), gw, rtol=1e-4, atol=1e-6)


def test_masked_softmax_compiles_to_one_graph_and_checks_the_mask_while_tracing():
    x = torch.randn(2, 5, 8)
    keep = torch.ones(5, 8, dtype=torch.bool).tril()
    f = torch.compile(lambda x, m: accel.softmax(x, scale=0.5, mask=m), fullgraph=True,
                      backend="aot_eager")
    want = _masked_softmax64(x.double(), 0.5, keep).float()
    assert torch.allclose(f(x, keep), want, rtol=1e-5, atol=1e-7)
    with pytest.raises(Exception, match=r"mask\.shape: expected broadcastable to x's shape"):
        torch.compile(lambda x, m: accel.softmax(x, mask=m), fullgraph=True,
                      backend="aot_eager")(x, torch.ones(3, 8, dtype=torch.bool))


def test_masked_softmax_refuses_a_mask_that_requires_grad():
    x = torch.randn(2, 4, requires_grad=True)
    mask = torch.zeros(2, 4, requires_grad=True)
    with pytest.raises(ArgumentError, match="^mask: expected a tensor that does not require grad"):
        accel.softmax(x, mask=mask)
    with torch.no_grad():  # no gradient asked for: the additive mask is just an operand
        assert torch.allclose(accel.softmax(x, mask=mask), torch.softmax(x, -1))
