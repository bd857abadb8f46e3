"""Running one case on one backend: inputs, guarded output, the op through
``accel.dispatch.execute``, guard and input checks, the oracle, the tolerance, the verdict.

A case the backend declines through ``supports()`` is not run through the backend's method: it is
run through the public op, which must raise ``UnsupportedError`` (capability honesty).
"""
from __future__ import annotations

import hashlib
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

import accel
from accel import dispatch
from accel import spec as S
from accel.backend import Backend
from accel.dtypes import UNIT_ROUNDOFF, to_numpy_dtype
from accel.errors import AccelError, UnsupportedError
from accel.tensor import QTensor
from accel.tensor import Tensor

from accel.conformance import decoder_ops, oracle, tolerance
from accel.conformance.case import Case
from accel.conformance.compare import Verdict, compare_bytes, compare_values
from accel.conformance.guard import GuardedOutput
from accel.conformance.inputs import build
from accel.conformance.isolation import Journal


@dataclass
class CaseResult:
    case: Case
    status: str
    evidence: str
    stats: dict = field(default_factory=dict)
    time_s: float = 0.0
    reason: str = ""
    repro: str = ""
    #: BLAKE2b of the output's bytes ("" when nothing was computed): repeated runs compare it
    digest: str = ""

    @property
    def ok(self) -> bool:
        return self.status not in ("failed", "error")

    @classmethod
    def from_json(cls, case: Case, record: dict) -> "CaseResult":
        """A result read back from a record ``to_json`` made (the digest is not kept)."""
        return cls(case, record["status"], record["evidence"], record.get("stats") or {},
                   record.get("time_s", 0.0), record.get("reason", ""), record.get("repro", ""))

    def to_json(self) -> dict:
        return {"id": self.case.id, "op": self.case.op, "dtype": self.case.dtype,
                "kind": self.case.kind, "params": _jsonable(self.case.params),
                "status": self.status, "evidence": self.evidence, "stats": self.stats,
                "time_s": round(self.time_s, 6), "reason": self.reason, "repro": self.repro}


def _jsonable(params: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def repro_command(backend: Backend, case: Case) -> str:
    return f"accel conformance --backend {backend.device_id} --case '{case.id}'"


#: the case being run and when it started (time.monotonic()), for a watchdog on another thread:
#: a backend that hangs never returns to say which case it hung in
_in_flight: tuple[Case, float] | None = None
#: set in a crash-isolated child of ``accel conformance`` (isolation.py): finished cases replay
_journal: Journal | None = None


def use_journal(journal: Journal | None) -> None:
    global _journal
    _journal = journal


def in_flight() -> tuple[Case, float] | None:
    """The case ``run_case`` is running now and its start (``time.monotonic()``), or None."""
    return _in_flight


def run_case(backend: Backend, case: Case) -> CaseResult:
    """Run ``case`` on ``backend`` and judge it. Never raises for backend misbehaviour."""
    global _in_flight
    if _journal is not None:
        if (record := _journal.done.get(case.id)) is not None:
            return CaseResult.from_json(case, record)
        _journal.started(case.id)
    _in_flight = (case, time.monotonic())
    try:
        result = _run_case(backend, case)
    finally:
        _in_flight = None
    if _journal is not None:
        _journal.finished(result.to_json())
    return result


def _run_case(backend: Backend, case: Case) -> CaseResult:
    repro = repro_command(backend, case)
    if case.op in decoder_ops.OPS:
        return _run_decoder_case(backend, case, repro)
    spec, inputs = build(case)
    try:
        support = backend.verdict(spec)
    except Exception as e:  # noqa: BLE001 - a crashing supports() is a verdict, not a crash
        return CaseResult(case, "error", backend.evidence, reason=f"supports() raised {e!r}",
                          repro=repro)
    if not support.ok:
        status, reason = _check_declined(backend, case, inputs)
        return CaseResult(case, status, "untested", reason=reason or support.reason, repro=repro)
    if backend.evidence != "ran":
        return CaseResult(case, "compiled_only", backend.evidence, repro=repro)
    if why := _no_oracle(backend, spec):  # not judged, so neither passed nor a backend failure
        return CaseResult(case, "unsupported", "untested", reason=why, repro=repro)
    t0 = time.perf_counter()
    try:
        # cases feed NaN, infinities and overflow on purpose: numpy's floating-point warnings
        # about them (from the CPU reference, the oracle) are not findings
        with np.errstate(all="ignore"):
            verdict, elapsed, digest = _execute_and_judge(backend, case, spec, inputs)
    except UnsupportedError as e:
        verdict, elapsed, digest = Verdict(False, {}, f"supports() accepted the case, then the op "
                                           f"raised UnsupportedError: {e.reason}"), time.perf_counter() - t0, ""
    except Exception as e:  # noqa: BLE001 - any crash of the backend is recorded as an error
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return CaseResult(case, "error", backend.evidence, time_s=time.perf_counter() - t0,
                          reason=f"raised {tb}", repro=repro)
    return CaseResult(case, "passed" if verdict.ok else "failed", backend.evidence, verdict.stats,
                      elapsed, verdict.reason, repro, digest)


def _run_decoder_case(backend: Backend, case: Case, repro: str) -> CaseResult:
    """A decoder-step op's case (decoder_ops): the public op on the backend's Tensors, against
    its float64 oracle; an UnsupportedError is the backend's declining."""
    if backend.evidence != "ran":
        return CaseResult(case, "compiled_only", backend.evidence, repro=repro)
    t0 = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            ok, stats, reason = decoder_ops.run(backend, case)
    except UnsupportedError as e:
        return CaseResult(case, "unsupported", "untested", reason=e.reason, repro=repro)
    except Exception as e:  # noqa: BLE001 - any crash of the backend is recorded as an error
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return CaseResult(case, "error", backend.evidence, time_s=time.perf_counter() - t0,
                          reason=f"raised {tb}", repro=repro)
    return CaseResult(case, "passed" if ok else "failed", backend.evidence, stats,
                      time.perf_counter() - t0, reason, repro)


def _execute_and_judge(backend: Backend, case: Case, spec, inputs: list[np.ndarray | None]):
    kept = [None if x is None else np.array(x, copy=True) for x in inputs]
    tensors = [None if x is None else Tensor.from_host(backend, x) for x in inputs]
    tensors = _padded(tensors, spec.op)
    out = GuardedOutput.alloc(backend, spec.out_shape, spec.out_dtype)
    backend.synchronize()
    t0 = time.perf_counter()
    dispatch.execute(backend, spec, *tensors, out=out.tensor)
    backend.synchronize()
    elapsed = time.perf_counter() - t0
    got = out.values()
    digest = hashlib.blake2b(got.tobytes(), digest_size=16).hexdigest()
    stray = out.check()
    if stray:
        return Verdict(False, {}, f"guard region overwritten: {stray}"), elapsed, digest
    for i, (t, before) in enumerate(zip(tensors, kept)):
        if t is not None and not _same_bytes(t.numpy(), before):
            return Verdict(False, {}, f"the op modified its input #{i}"), elapsed, digest
    verdict = judge(backend, case, spec, kept, got)
    if verdict.ok and backend.host_compute:
        verdict = _judge_host_path(backend, case, spec, kept, got, verdict)
    return verdict, elapsed, digest


def _padded(operands: list, op: str) -> list:
    """An absent optional operand (attention's mask, scaled_matmul's bias) passed as None;
    attention's sinks, when a case has them, follow the mask's slot (as accel.attention passes
    them: backends written before sinks never see a fifth operand)."""
    return operands + [None] * ({"attention": 4, "scaled_matmul": 5}.get(op, len(operands)) - len(operands))


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))  # 0-d too


def _judge_host_path(backend: Backend, case: Case, spec, kept: list[np.ndarray],
                     got: np.ndarray, op_verdict: Verdict) -> Verdict:
    """A host_compute backend answers numpy callers from ``compute()``, not from the op method
    that ``op_verdict`` judged (its output ``got``): that path is judged too."""
    hosts = _padded([None if x is None else np.array(x, copy=True) for x in kept], spec.op)
    result = backend.compute(spec, *hosts)
    try:
        dispatch.check_host_result(backend, spec, result)
    except AccelError as e:
        return Verdict(False, {}, f"compute(), the path numpy operands take: {e}")
    for i, (h, before) in enumerate(zip(hosts, kept)):
        if h is not None and not _same_bytes(h, before):
            return Verdict(False, {}, f"compute() modified its input #{i}")
    if _same_bytes(result, got):  # the CPU reference: one implementation behind both paths
        return op_verdict
    verdict = judge(backend, case, spec, kept, result)
    if verdict.ok:
        return verdict
    return Verdict(False, verdict.stats, f"compute(), the path numpy operands take: {verdict.reason}")


def _no_oracle(backend: Backend, spec) -> str | None:
    """Why ``spec`` cannot be judged on ``backend`` here, or None: the K-quants' quantize oracle
    is ggml's own quantizer, and without ggml-python it is the CPU reference's, which cannot
    judge the CPU reference itself."""
    if spec.op == "quantize" and spec.fmt.name in oracle.SUPER and backend.name == "cpu" \
            and oracle.super_quantizer() == "cpu":
        return (f"not judged here: {spec.fmt.name}'s quantize oracle is ggml's own quantizer "
                "(pip install 'accel-portable[ggml]'); without it the CPU reference would be "
                "judged by itself")
    return None


def judge(backend: Backend, case: Case, spec, inputs: list[np.ndarray], got: np.ndarray) -> Verdict:
    """Compare an output with the oracle under the tolerance model."""
    exact = case.kind == "exact"
    if why := _no_oracle(backend, spec):
        return Verdict(False, {}, why)
    if spec.op == "quantize":
        ref = oracle.quantize(inputs[0], spec.fmt.name)
        blocks = ref.size // spec.fmt.block_bytes
        with np.errstate(invalid="ignore", over="ignore"):  # a non-finite scale reads back so
            values = oracle.dequantize(ref, spec.fmt.name, (blocks, spec.fmt.block))
        return compare_bytes(got, ref, spec.fmt.block_bytes, ~np.isfinite(values).all(axis=1))
    if spec.op == "dequantize":
        return compare_values(got, oracle.dequantize(inputs[0], spec.fmt.name, spec.shape), None,
                              "float32", signed_zero=True)
    acc = backend.accumulator(spec)
    if spec.op == "matmul" and spec.dtype == "int8":
        ref, _ = oracle.matmul(*inputs)
        return compare_values(got, ref, None, "int32")
    if acc not in UNIT_ROUNDOFF:
        return Verdict(False, {}, f"accumulator({spec.op}) declared {acc!r}, not a float format "
                       f"the tolerance model knows ({sorted(UNIT_ROUNDOFF)})")
    if spec.op == "matmul":
        ref, mag = oracle.matmul(*inputs)
        bound = None if exact else tolerance.matmul_bound(ref, mag, spec.K, spec.out_dtype, acc)
    elif spec.op == "qmatmul" and spec.x_fmt is not None:  # float32 sums of K / 32 exact terms
        ref, mag = oracle.qmatmul_quantized_x(inputs[0], inputs[1], spec.fmt.name, spec.N,
                                              spec.x_fmt.name)
        bound = None if exact else tolerance.matmul_bound(ref, mag, spec.K // oracle.BLOCK,
                                                          spec.out_dtype, acc)
    elif spec.op == "scaled_matmul":  # exact products of scaled FP8 values, float32 sums; the
        # float32 products by the scales after each (slab) sum add two roundings of the result
        bias = inputs[4] if len(inputs) > 4 else None
        ref, mag = oracle.scaled_matmul(*inputs[:4], bias, S.FP8_BLOCK if spec.scaling == "block" else None)
        bound = tolerance.matmul_bound(ref, mag, spec.K, spec.out_dtype, acc) + \
            2 * UNIT_ROUNDOFF[acc] * (np.abs(ref) if spec.scaling != "block" else mag)
    elif spec.op == "qmatmul":
        ref, mag = oracle.qmatmul(inputs[0], inputs[1], spec.fmt.name, spec.N)
        bound = None if exact else tolerance.matmul_bound(ref, mag, spec.K, spec.out_dtype, acc)
    else:
        mask, sinks = (inputs[i] if len(inputs) > i else None for i in (3, 4))
        res = oracle.attention(*inputs[:3], mask, causal=spec.causal, scale=spec.scale,
                               mask_kind=spec.mask_kind, window=spec.window,
                               softcap=spec.softcap, sinks=sinks)
        ref = res["out"]
        bound = None if exact else tolerance.attention_bound(res, spec.D, spec.Sk, spec.dtype, acc)
    if exact:  # exact sums (float32 accumulation), then the one rounding of the output
        # conversion, to nearest with ties to even: exact-answer data may need it
        ref = ref.astype(to_numpy_dtype(spec.out_dtype)).astype(np.float64)
    verdict = compare_values(got, ref, bound, spec.out_dtype)
    verdict.stats["accumulator"] = acc
    return verdict


def _check_declined(backend: Backend, case: Case, inputs: list[np.ndarray]) -> tuple[str, str]:
    """A declined case must raise UnsupportedError from the public op, not compute anything."""
    p = case.params
    try:
        if case.op == "matmul":
            accel.matmul(*inputs, out_dtype=p.get("out"), backend=backend)
        elif case.op == "attention":
            accel.attention(*inputs[:3], causal=p.get("causal", False), scale=p.get("scale"),
                            mask=inputs[3] if len(inputs) > 3 else None, window=p.get("window"),
                            softcap=p.get("softcap"), sinks=inputs[4] if len(inputs) > 4 else None,
                            backend=backend)
        elif case.op == "quantize":
            accel.quantize(inputs[0], p["fmt"], backend=backend)
        elif case.op == "dequantize":
            accel.dequantize(QTensor.from_raw(inputs[0], case.dtype, p["shape"], backend=backend))
        elif case.op == "scaled_matmul":
            accel.scaled_matmul(*inputs[:4], out_dtype=p.get("out", "bfloat16"),
                                bias=inputs[4] if len(inputs) > 4 else None, backend=backend)
        else:
            w = QTensor.from_raw(inputs[1], p["fmt"], (p["N"], p["x"][-1]), backend=backend)
            accel.qmatmul(inputs[0], w, x_format=p.get("x_fmt"), backend=backend)
    except UnsupportedError:
        return "unsupported", ""
    except AccelError as e:
        return "failed", f"declined through supports(), but the public op raised {e!r} instead " \
                         "of UnsupportedError"
    except Exception as e:  # noqa: BLE001
        return "error", f"declined through supports(), and the public op crashed: {e!r}"
    return "failed", "declined through supports(), but the public op computed a result"
