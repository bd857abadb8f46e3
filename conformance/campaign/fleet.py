"""The Ray side of a campaign: join or start a cluster, find each node's devices with a task on
that node, start one worker (an actor) per device on the node that has it, and feed every
platform's shards to its workers, writing each result as it arrives.

Placement: a node offers a backend's devices by advertising the custom resource
``accel_<backend>`` (``ray start --resources``; ``accel info --ray-resources`` prints the line).
A worker asks for one unit of it and is pinned to its node, so it lands where the device is.

Failures: a worker that dies (its process crashed, its node is gone) hands its in-flight shards
back to the queue, where any worker of the same platform takes them; the worker is pinged and
used again if Ray restarted it. A shard that lost its worker ``MAX_ATTEMPTS`` times, or whose
platform has no worker left, is lost with the reason; a shard whose code raised is lost at once
(running it again would raise again). Lost shards make the campaign exit non-zero, by name.
"""
from __future__ import annotations

import logging
import socket
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from accel.errors import AccelError, ArgumentError, expected

from accel.conformance.campaign import node, store
from accel.conformance.campaign.plan import Settings, Shard

INSTALL = "pip install 'accel-portable[fleet]'"
#: times a shard may lose its worker before it is lost (it may be what kills the worker)
MAX_ATTEMPTS = 3
#: shards queued on a worker at once: the next one is there when one finishes
IN_FLIGHT = 2
#: how long a node may take to list its devices (a first PoCL or CUDA start is slow)
DISCOVERY_TIMEOUT_S = 300.0


def import_ray() -> Any:
    """The ``ray`` module, or an AccelError saying which extra installs it."""
    try:
        import ray
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        raise AccelError(f"accel campaign runs on Ray, which is not installed here: {INSTALL}") from None
    return ray


def connect(ray: Any, cluster: str) -> None:
    """``local`` starts Ray on this machine, offering this machine's devices; ``auto`` or an
    address (``HOST:PORT``, ``ray://HOST:PORT``) joins a running cluster."""
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if cluster == "local":
        ray.init(resources=node.node_resources(), include_dashboard=False, **quiet)
        return
    what = "local, auto (a cluster this machine is part of) or the address of a running Ray cluster"
    if cluster != "auto":
        _check_reachable(cluster, what)
    try:
        ray.init(address=cluster, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as e:  # what ray.init raises for these
        raise ArgumentError(expected("--cluster", what, f"{cluster!r}: {_first_line(e)}")) from None


def _check_reachable(address: str, what: str, timeout_s: float = 10.0) -> None:
    """Refuse an address nothing answers at, at once: ray.init keeps retrying one for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ArgumentError(expected("--cluster", what, f"{address!r} (no HOST:PORT in it)"))
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ArgumentError(expected("--cluster", what, f"{address!r}, where nothing answers "
                                     f"({e.strerror or e})")) from None


def _pinned(node_id: str) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def discover(ray: Any) -> list[dict[str, Any]]:
    """Every live node, described by a task on it (``node.describe``), with the accel resources it
    advertises; a node where the task fails carries the ``error``."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    task = ray.remote(num_cpus=0)(node.describe)
    refs = [task.options(**_pinned(n["NodeID"])).remote() for n in nodes]
    out = []
    for n, ref in zip(nodes, refs):
        advertised = {k: int(v) for k, v in n.get("Resources", {}).items()
                      if k.startswith(node.RESOURCE_PREFIX)}
        try:
            found = ray.get(ref, timeout=DISCOVERY_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a node without accel, or stuck: said, not fatal
            found = {"hostname": n.get("NodeManagerHostname", "?"), "devices": [],
                     "error": f"{type(e).__name__}: {e}".splitlines()[0]}
        out.append({**found, "node_id": n["NodeID"], "address": n.get("NodeManagerAddress", ""),
                    "resources": advertised})
    return out


def offered(nodes: list[dict[str, Any]], backends: tuple[str, ...]) -> tuple[list[tuple[dict, dict]], list[str]]:
    """(node, device) pairs a campaign may use: devices of the asked backends on nodes that
    advertise them, as many per node as the resource says; and a warning per device left out."""
    use, warnings = [], []
    for n in nodes:
        budget = Counter(n["resources"])
        for dev in n["devices"]:
            if dev["backend"] not in backends:
                continue
            res = node.resource_name(dev["backend"])
            if budget[res] >= 1:
                budget[res] -= 1
                use.append((n, dev))
            else:
                warnings.append(f"{n['hostname']} has {dev['device']} ({dev['name']}) but does not "
                                f"advertise {res} for it: start the node with "
                                f"`ray start ... --resources='{{\"{res}\": N}}'`")
    return use, warnings


@dataclass
class Worker:
    handle: Any
    device: str
    hostname: str
    node_id: str
    platform: str
    in_flight: int = 0
    ready: bool = True  # False while a ping decides whether it came back from a crash


@dataclass
class Outcome:
    """What the driver loop learnt, for campaign.json and the exit status."""

    done: Counter = field(default_factory=Counter)  # platform -> shards finished this run
    lost: dict[str, dict[str, str]] = field(default_factory=dict)  # platform -> shard -> reason
    retries: list[dict[str, Any]] = field(default_factory=list)
    workers_lost: list[dict[str, str]] = field(default_factory=list)
    driver_s: float = 0.0  # the driver's own time per finished shard, summed
    run_s: float = 0.0


def start_workers(ray: Any, use: list[tuple[dict, dict]]) -> tuple[list[Worker], dict[str, dict], list[str]]:
    """One worker per (node, device), pinned to its node and holding one unit of the device's
    resource; returns the workers, each platform's device and machine records, and a warning
    per worker that did not start."""
    actor = ray.remote(num_cpus=0, max_restarts=MAX_ATTEMPTS)(node.DeviceWorker)
    started = []
    for n, dev in use:
        handle = actor.options(resources={node.resource_name(dev["backend"]): 1},
                               **_pinned(n["node_id"])).remote(dev["device"])
        started.append((Worker(handle, dev["device"], n["hostname"], n["node_id"], dev["platform"]),
                        handle.record.remote()))
    workers, records, warnings = [], {}, []
    for worker, ref in started:
        try:
            record = ray.get(ref, timeout=DISCOVERY_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - a device that cannot start is left out, said
            warnings.append(f"{worker.hostname}/{worker.device} did not start: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}")
            ray.kill(worker.handle)
            continue
        workers.append(worker)
        records.setdefault(worker.platform, record)
    return workers, records, warnings


def drive(ray: Any, workers: list[Worker], pending: dict[str, deque], settings: Settings,
          folder: Path, on_done: Callable[[str, dict], None]) -> Outcome:
    """Feed each platform's pending shards to its workers until none is left or no worker can
    take them; every finished shard is appended to its platform's file before anything else."""
    from ray.exceptions import RayTaskError

    out = Outcome()
    attempts: Counter = Counter()
    inflight: dict[Any, tuple[Worker, Shard | None]] = {}  # a None shard is a ping
    alive = list(workers)
    deaths: dict[str, list[str]] = {}  # platform -> why its workers died

    def feed() -> None:
        for w in alive:
            queue = pending.get(w.platform)
            while w.ready and queue and w.in_flight < IN_FLIGHT:
                shard = queue.popleft()
                attempts[w.platform, shard.id] += 1
                inflight[w.handle.run.remote(shard, settings.repeat)] = (w, shard)
                w.in_flight += 1

    def lose(platform: str, shard: Shard, reason: str) -> None:
        out.lost.setdefault(platform, {})[shard.id] = reason

    t0 = time.perf_counter()
    feed()
    while inflight:
        (ref,), _ = ray.wait(list(inflight), num_returns=1)
        t_event = time.perf_counter()
        w, shard = inflight.pop(ref)
        try:
            result = ray.get(ref)
        except RayTaskError as e:  # the shard's own code raised (a ping cannot): it would again
            w.in_flight -= 1
            lose(w.platform, shard, f"raised on {w.hostname}/{w.device}: {_first_line(e)}")
        except Exception as e:  # noqa: BLE001 - the worker died or its node is gone
            why = f"{w.hostname}/{w.device}: {type(e).__name__}: {_first_line(e)}"
            if shard is None:  # the ping failed: the worker is gone for good
                alive.remove(w)
                deaths.setdefault(w.platform, []).append(why)
                out.workers_lost.append({"worker": f"{w.hostname}/{w.device}", "node": w.node_id,
                                         "reason": why})
            else:
                w.in_flight -= 1
                if w.ready:  # the first failure of this worker: ask whether Ray restarts it
                    w.ready = False
                    inflight[w.handle.ping.remote()] = (w, None)
                if attempts[w.platform, shard.id] >= MAX_ATTEMPTS:
                    lose(w.platform, shard, f"its worker died {MAX_ATTEMPTS} times, last {why}")
                else:
                    pending[w.platform].appendleft(shard)
                    out.retries.append({"platform": w.platform, "shard": shard.id,
                                        "node": w.node_id, "reason": why})
        else:
            if shard is None:
                w.ready = True
            else:
                w.in_flight -= 1
                record = {"shard": shard.id, "platform": w.platform, "node": w.node_id,
                          "attempt": attempts[w.platform, shard.id], **result}
                store.append(folder, w.platform, record)
                out.done[w.platform] += 1
                on_done(w.platform, record)
        feed()
        out.driver_s += time.perf_counter() - t_event
    out.run_s = time.perf_counter() - t0
    for platform, queue in pending.items():  # shards no worker is left to take
        why = "; ".join(deaths.get(platform, [])) or "no worker offers this platform"
        for shard in queue:
            lose(platform, shard, f"no worker left for {platform} ({why})")
        queue.clear()
    return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__
