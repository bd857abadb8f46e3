"""What a campaign runs on each node: the node's devices as accel finds them there, the Ray
resources that advertise them, and one shard on one device (no Ray import: the Ray workers of
``fleet`` call these, and ``accel info --ray-resources`` prints ``ray_start_lines``).

A device's platform is what makes two devices equivalent for a campaign (a shard lost with one
may be retried on the other): the backend, the device's name, vendor and driver.

>>> resources = node_resources()
>>> resources["accel_cpu"]
1
>>> platform_key("cpu", {"name": "AMD EPYC 7B13", "vendor": "AMD", "driver": "numpy 2.1"})[:17]
'cpu-amd-epyc-7b13'
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import socket
import time
from typing import Any

import accel
from accel.backend import Backend

from accel.conformance import properties, results
from accel.conformance.campaign.plan import Shard
from accel.conformance.case import Case
from accel.conformance.runner import CaseResult, run_case

#: custom Ray resource of a backend's devices: ``accel_<backend>``, one unit per device
RESOURCE_PREFIX = "accel_"


def resource_name(backend: str) -> str:
    return RESOURCE_PREFIX + backend


def node_resources() -> dict[str, int]:
    """The custom resources this machine offers a campaign: one unit per device of each
    available backend, as ``accel.backends()`` finds them here."""
    return {resource_name(s.name): len(s.devices) for s in accel.backends() if s.available}


def ray_start_lines(resources: dict[str, int]) -> list[str]:
    """The ``ray start`` lines that make this machine a campaign's head node or a worker node."""
    flag = f"--resources='{json.dumps(resources, sort_keys=True)}'"
    return [f"ray start --head {flag}", f"ray start --address=HEAD:6379 {flag}"]


def platform_key(backend: str, device: dict[str, Any]) -> str:
    """A file-name-safe name of a platform: backend, device name, and a hash of vendor, name and
    driver, so two driver versions of one device are two platforms."""
    slug = re.sub(r"[^a-z0-9]+", "-", str(device.get("name", "")).lower()).strip("-")[:40]
    ident = "\0".join(str(device.get(k, "")) for k in ("vendor", "name", "driver"))
    return f"{backend}-{slug}-{hashlib.blake2b(ident.encode(), digest_size=4).hexdigest()}"


def describe() -> dict[str, Any]:
    """This node as a campaign sees it: its machine record, accel's version, and every device of
    every available backend with its platform."""
    devices = []
    for s in accel.backends():
        if not s.available:
            continue
        for i, info in enumerate(s.devices):
            record = dataclasses.asdict(info)
            devices.append({"backend": s.name, "device": f"{s.name}:{i}", "name": info.name,
                            "origin": s.origin, "platform": platform_key(s.name, record)})
    return {"hostname": socket.gethostname(), "machine": results.machine(),
            "accel": accel.__version__, "devices": devices}


def run_shard(backend: Backend, shard: Shard, repeat: int = 1) -> dict[str, Any]:
    """Run one shard on ``backend``: its fixed cases, or its property search; with ``repeat`` > 1
    every case runs that many times (``repeated``). Returns the case records and the time."""
    t0 = time.perf_counter()
    got: list[CaseResult] = []
    if shard.cases:
        got = [run_case(backend, Case.parse(case_id)) for case_id in shard.cases]
    else:
        properties.search(backend, shard.op, shard.dtype, shard.examples, shard.seed, got.append)
    where = f"{socket.gethostname()}/{backend.device_id}"
    cases = [{**repeated(backend, r, repeat), "where": where} for r in got]
    return {"cases": cases, "time_s": round(time.perf_counter() - t0, 6), "where": where}


def repeated(backend: Backend, first: CaseResult, repeat: int) -> dict[str, Any]:
    """``first``'s record; with ``repeat`` > 1 the case runs ``repeat - 1`` more times, the record
    says whether every run's output was bit-identical, and a verdict that changes between runs
    makes the case fail as flaky (a race or an uninitialised read passes only sometimes)."""
    record = first.to_json()
    if repeat < 2:
        return record
    runs = [first] + [run_case(backend, first.case) for _ in range(repeat - 1)]
    statuses = [r.status for r in runs]
    computed = all(r.digest for r in runs)
    record["repeat"] = {"runs": repeat, "statuses": statuses,
                        "bit_identical": len({r.digest for r in runs}) == 1 if computed else None}
    if len(set(statuses)) > 1:
        bad = next(r for r in runs if not r.ok)
        record.update(status="failed", reason=f"flaky: {', '.join(statuses)} over {repeat} runs; "
                                              f"a failing run: {bad.reason}")
    return record


class DeviceWorker:
    """One device of one node for a whole campaign (``fleet`` makes it a Ray actor): built
    kernels and the backend's caches stay warm from one shard to the next."""

    def __init__(self, device: str) -> None:
        from accel.host import cache_root

        # as accel conformance does: hypothesis' files under the cache root, not the cwd
        os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache_root() / "hypothesis"))
        self.backend = accel.get_backend(device)

    def record(self) -> dict[str, Any]:
        """The device and machine records of the platform's result file."""
        return {"device": results.device_record(self.backend), "machine": results.machine()}

    def run(self, shard: Shard, repeat: int) -> dict[str, Any]:
        return run_shard(self.backend, shard, repeat)

    def model(self, path: str, tokens: list[int] | None) -> dict[str, Any]:
        """Model conformance (``accel conformance --model``) of the GGUF at ``path`` on this
        node (the file must be at that path there) on this worker's device."""
        from accel.conformance.model_check import check_model

        rec = check_model(path, self.backend, tokens)
        return {**rec, "machine": results.machine(), "where": f"{socket.gethostname()}/{self.backend.device_id}"}

    def ping(self) -> bool:
        """Answers once the worker is up again after a crash (Ray restarts it)."""
        return True
