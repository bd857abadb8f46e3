"""The versioned result file (schema ``accel.conformance/1``, documented in docs/conformance.md):
writing one from a run, reading one back, and the summary counts.
"""
from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

from accel.backend import Backend
from accel.registry import get_backend
from accel.errors import ArgumentError, expected

SCHEMA = "accel.conformance/1"
STATUSES = ("passed", "failed", "unsupported", "compiled_only", "error")


def commit() -> str:
    """The accel source tree's git commit ("" outside a checkout); "+dirty" with local edits.
    ``ACCEL_COMMIT`` overrides it, for copies of a checkout whose git metadata is not their own
    (a remote machine given the working tree with an older .git: docs/gpu.md)."""
    if given := os.environ.get("ACCEL_COMMIT"):
        return given
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if dirty else "")


#: the prefixes of the variables that change what runs (docs/environment.md: which GEMV kernel,
#: which CUDA implementation, PoCL's threads and caches, tf32), recorded in every result file
_RECORDED_PREFIXES = ("ACCEL_", "POCL_", "CUPY_")


def accel_environment() -> dict[str, str]:
    """The variables that change what runs, as set in this process."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_RECORDED_PREFIXES)}


def finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: non-finite statistics are written as the strings "inf"/"nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def summarize(cases: list[dict]) -> dict:
    """Counts per status overall and per "op/dtype"."""
    total = Counter(c["status"] for c in cases)
    per: dict[str, Counter] = {}
    for c in cases:
        per.setdefault(f"{c['op']}/{c['dtype']}", Counter())[c["status"]] += 1
    return {"total": len(cases), **{s: total.get(s, 0) for s in STATUSES},
            "by_op_dtype": {k: {s: v.get(s, 0) for s in STATUSES} for k, v in sorted(per.items())}}


#: this process's run: every result file it writes carries it, so a report tells two machines
#: (or two runs) with the same host name apart; ``ACCEL_RUN_ID`` lets several commands share one
RUN_ID = os.environ.get("ACCEL_RUN_ID") or uuid.uuid4().hex[:12]


def machine(label: str | None = None) -> dict[str, Any]:
    """The machine a result file comes from; ``label`` names it in merged reports."""
    host = socket.gethostname()
    return {"label": label or host, "hostname": host, "platform": platform.platform(),
            "cpu": get_backend("cpu").info.name, "cores": os.cpu_count(),
            "python": platform.python_version(), "run_id": RUN_ID}


def make_report(backend: Backend, results: list, *, profile: str, seed: int, command: str,
                elapsed_s: float, label: str | None = None) -> dict:
    return report_document(device_record(backend), [r.to_json() for r in results],
                           profile=profile, seed=seed, command=command,
                           elapsed_s=elapsed_s, machine_record=machine(label))


def device_record(backend: Backend) -> dict[str, Any]:
    """What a result file says about the device: id, backend name, evidence, device facts and
    versions, as plain data (a campaign's workers send it from other machines)."""
    import accel

    return {"backend": backend.device_id, "backend_name": backend.name,
            "evidence": backend.evidence, "device": asdict(backend.info),
            "versions": {"accel": accel.__version__, "python": platform.python_version(),
                         **backend.versions()}}


def report_document(device: dict[str, Any], cases: list[dict], *, profile: str, seed: int,
                    command: str, elapsed_s: float, machine_record: dict[str, Any],
                    **extra: Any) -> dict:
    """The ``accel.conformance/1`` document of ``cases`` (``CaseResult.to_json()`` records) run on
    ``device`` (a ``device_record``); ``extra`` adds top-level fields."""
    return finite({
        "schema": SCHEMA,
        **device,
        "host": {"machine": platform.machine(), "system": platform.system(),
                 "node": platform.node()},
        "machine": machine_record,  # the same record bench files carry: reports pair files by it
        "commit": commit(),
        "environment": accel_environment(),
        "profile": profile,
        "seed": seed,
        "command": command,
        "elapsed_s": round(elapsed_s, 3),
        "summary": summarize(cases),
        "cases": cases,
        **extra,
    })


def write(report: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report, indent=1) + "\n")


def load(path: str | Path, also: tuple[str, ...] = ()) -> dict:
    """Read a result file, checking its schema version (``SCHEMA``, or one of ``also``: the
    model conformance's records, which the support matrix reads too)."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArgumentError(expected(str(path), "a readable accel conformance JSON file", repr(e)))
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema != SCHEMA and schema not in also:
        want = " or ".join(repr(s) for s in (SCHEMA, *also))
        raise ArgumentError(expected(f"{path}: schema", want, repr(schema)))
    return report

