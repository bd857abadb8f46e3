"""A campaign's folder: ``campaign.json`` (settings, nodes, platforms, shards, timings, retries),
one ``<platform>.jsonl`` per platform with a line per finished shard, appended as it arrives (a
killed driver or node loses nothing already finished; ``--resume`` reads them back), and at the
end one ``conformance-<platform>.json`` per complete platform in the ``accel.conformance/1``
schema, for ``accel report DIR/*.json``.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> append(folder, "cpu-x-1234", {"shard": "fixed-0000", "cases": []})
>>> sorted(finished(folder, "cpu-x-1234"))
['fixed-0000']
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accel.errors import ArgumentError, expected

from accel.conformance import results
from accel.conformance.campaign.plan import Settings, Shard

SCHEMA = "accel.campaign/1"
CAMPAIGN_FILE = "campaign.json"


def lines_path(folder: Path, platform: str) -> Path:
    return folder / f"{platform}.jsonl"


def result_path(folder: Path, platform: str) -> Path:
    return folder / f"conformance-{platform}.json"


def append(folder: Path, platform: str, record: dict[str, Any]) -> None:
    """Add one finished shard's record to its platform's file, flushed before returning."""
    with lines_path(folder, platform).open("a") as f:
        f.write(json.dumps(results.finite(record)) + "\n")
        f.flush()


def finished(folder: Path, platform: str) -> dict[str, dict[str, Any]]:
    """Shard id -> its record, from a platform's file (the last record of a shard wins). A line
    cut short by a killed driver is the shard not finished: it is run again."""
    path = lines_path(folder, platform)
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[record["shard"]] = record
    return out


def read_campaign(folder: Path) -> dict[str, Any]:
    """The campaign.json of a folder, for ``--resume``."""
    path = folder / CAMPAIGN_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArgumentError(expected("--resume", f"a campaign folder with a readable {CAMPAIGN_FILE}",
                                     f"{path}: {e}")) from None
    if doc.get("schema") != SCHEMA:
        raise ArgumentError(expected(f"{path}: schema", repr(SCHEMA), repr(doc.get("schema"))))
    Settings.from_json(doc["settings"])  # refused here, not halfway through the campaign
    return doc


def write_campaign(folder: Path, doc: dict[str, Any]) -> None:
    """Write campaign.json whole (to a temporary name first: a killed driver leaves the old one)."""
    tmp = folder / (CAMPAIGN_FILE + ".tmp")
    tmp.write_text(json.dumps(results.finite({"schema": SCHEMA, **doc}), indent=1) + "\n")
    tmp.replace(folder / CAMPAIGN_FILE)


_BAD = ("failed", "error")


def platform_document(platform: dict[str, Any], plan: list[Shard], done: dict[str, dict],
                      settings: Settings, command: str) -> dict[str, Any]:
    """The ``accel.conformance/1`` file of a platform whose every shard is done: its cases in plan
    order, the first worker's device record, a machine record naming every node it ran on."""
    # each case once: fuzz searches with different seeds can draw the same case (hypothesis'
    # first, simplest example; the same shrunk failure), which would count it twice; where its
    # runs disagree (a nondeterministic device) the failing one is kept
    by_id: dict[str, dict] = {}
    for case in (c for shard in plan for c in done[shard.id]["cases"]):
        kept = by_id.get(case["id"])
        if kept is None or (kept["status"] not in _BAD and case["status"] in _BAD):
            by_id[case["id"]] = case
    cases = list(by_id.values())
    hosts = sorted({c["where"].split("/")[0] for c in cases if "where" in c})
    machine = {**platform["machine"], "label": "+".join(hosts) or platform["machine"]["label"]}
    extra = {"campaign": {"platform": platform["key"], "repeat": settings.repeat}}
    if settings.bitwise:
        extra["repeatability"] = repeatability(cases, settings.repeat)
    return results.report_document(
        platform["device"], cases, profile=settings.profile, seed=settings.seed, command=command,
        elapsed_s=sum(done[s.id]["time_s"] for s in plan), machine_record=machine, **extra)


def repeatability(cases: list[dict], runs: int) -> dict[str, Any]:
    """Per "op/dtype": cases run ``runs`` times with an output, how many gave bit-identical
    outputs every time, how many changed verdict (flaky); ``bit_identical`` is whether all did."""
    per: dict[str, dict[str, Any]] = {}
    for c in cases:
        rep = c.get("repeat") or {}
        if rep.get("bit_identical") is None:
            continue
        row = per.setdefault(f"{c['op']}/{c['dtype']}", {"cases": 0, "identical": 0, "flaky": 0})
        row["cases"] += 1
        row["identical"] += bool(rep["bit_identical"])
        row["flaky"] += len(set(rep["statuses"])) > 1
    for row in per.values():
        row["bit_identical"] = row["identical"] == row["cases"]
    return {"runs": runs, "by_op_dtype": dict(sorted(per.items()))}
