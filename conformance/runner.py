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

from accel import dispatch
from accel.backend import Backend
from accel.errors import AccelError, UnsupportedError
from accel.tensor import Tensor

from accel.conformance.case import Case
from accel.conformance.compare import Verdict
from accel.conformance.guard import GuardedOutput
from accel.conformance.isolation import Journal
from accel.conformance.ops import OPS, build


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
    if OPS[case.op].run_public is not None:
        return _run_public_case(backend, case, repro)
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


def _run_public_case(backend: Backend, case: Case, repro: str) -> CaseResult:
    """A case of an op without a spec (accel.nn's decoder-step ops): its row's ``run_public``,
    the public op on the backend's Tensors against its float64 oracle; an UnsupportedError is
    the backend's declining."""
    if backend.evidence != "ran":
        return CaseResult(case, "compiled_only", backend.evidence, repro=repro)
    t0 = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            ok, stats, reason = OPS[case.op].run_public(backend, case)
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
    """The operands with an absent optional one (attention's mask, scaled_matmul's bias) passed
    as None, up to the row's ``slots``."""
    return operands + [None] * (OPS[op].slots - len(operands))


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
    """Why ``spec`` cannot be judged on ``backend`` here (its row's ``unjudged``), or None."""
    unjudged = OPS[spec.op].unjudged
    return unjudged(backend, spec) if unjudged else None


def judge(backend: Backend, case: Case, spec, inputs: list[np.ndarray], got: np.ndarray) -> Verdict:
    """Compare an output with the oracle under the tolerance model (the op row's ``judge``)."""
    if why := _no_oracle(backend, spec):
        return Verdict(False, {}, why)
    return OPS[spec.op].judge(backend, case, spec, inputs, got)


def _check_declined(backend: Backend, case: Case, inputs: list[np.ndarray]) -> tuple[str, str]:
    """A declined case must raise UnsupportedError from the public op, not compute anything."""
    try:
        OPS[case.op].call(backend, case, inputs)
    except UnsupportedError:
        return "unsupported", ""
    except AccelError as e:
        return "failed", f"declined through supports(), but the public op raised {e!r} instead " \
                         "of UnsupportedError"
    except Exception as e:  # noqa: BLE001
        return "error", f"declined through supports(), and the public op crashed: {e!r}"
    return "failed", "declined through supports(), but the public op computed a result"
