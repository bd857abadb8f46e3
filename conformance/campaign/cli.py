"""``accel campaign``: the conformance suite on every device of a Ray cluster (docs/fleet.md).
Heavy imports (Ray, the suite) stay inside the command function."""
from __future__ import annotations

import argparse
import datetime
import sys
from collections import deque
from pathlib import Path
from typing import Any

from accel.conformance.argtypes import dtype_names, int_at_least, names, output_folder, split_names

FAILURES_SHOWN = 25  # failing cases printed with their repro line; the files have all of them
#: options that decide the shards: with --resume they come from campaign.json
PLAN_OPTIONS = ("backends", "profile", "seed", "seeds", "examples", "ops", "dtypes", "repeat",
                "bitwise", "shard_size")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "campaign", help="run the conformance suite across the devices of a Ray cluster",
        description="Run the conformance suite on every device of a Ray cluster (or of this "
                    "machine, --cluster local): each node's devices are found there, cases are "
                    "sharded over every device of each platform, results are written as they "
                    "arrive (one JSON-lines file per platform) and, at the end, one accel."
                    "conformance/1 file per platform plus campaign.json, for `accel report "
                    "DIR/*.json`. Needs the fleet extra (Ray). Exit status 1 on a failing case "
                    "or a shard that could not be run (named); --resume runs what is missing.")
    p.add_argument("--out", required=True, type=output_folder, metavar="DIR",
                   help="campaign folder (created; with --resume, the campaign to continue)")
    p.add_argument("--resume", action="store_true",
                   help="continue the campaign in --out: run only its unfinished shards, with the "
                        "settings it was started with")
    p.add_argument("--cluster", default="local", metavar="local|auto|ADDRESS",
                   help="local starts Ray here with this machine's devices; auto or HOST:PORT or "
                        "ray://HOST:PORT joins a running cluster (default: %(default)s)")
    p.add_argument("--backends", action="extend", nargs="+", metavar="NAME", type=names,
                   help="backends to check, e.g. cpu,opencl,cuda (default: every built-in backend a "
                        "node offers)")
    p.add_argument("--profile", choices=("quick", "full", "fuzz"),
                   help="the suite's quick or full profile, or fuzz: seeded property searches "
                        "only (default: quick)")
    p.add_argument("--seed", type=int_at_least(0), help="data and search seed (default: 0)")
    p.add_argument("--seeds", type=int_at_least(1),
                   help="fuzz: property searches per op and dtype, each with its own seed (default: 1)")
    p.add_argument("--examples", type=int_at_least(1),
                   help="fuzz: cases drawn per search (default: 25)")
    p.add_argument("--ops", action="extend", nargs="+", metavar="OP", type=names,
                   help="only these ops (space or comma separated)")
    p.add_argument("--dtypes", action="extend", nargs="+", metavar="DTYPE", type=names,
                   help="only these dtypes (space or comma separated; dequantize by format)")
    p.add_argument("--repeat", type=int_at_least(1),
                   help="run every case N times; a case whose verdict changes fails as flaky "
                        "(default: 1)")
    p.add_argument("--bitwise", action="store_true", default=None,
                   help="record per op and dtype whether repeated outputs are bit-identical "
                        "(implies --repeat 2 unless given)")
    p.add_argument("--shard-size", type=int_at_least(1),
                   help="fixed cases per shard (default: 8)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--model", metavar="GGUF",
                   help="model conformance instead of the suite: this GGUF decoder (at the same "
                        "path on every node) on every device, against the float64 reference; "
                        "one accel.model-conformance/1 file per device in --out")
    p.add_argument("--tokens", metavar="IDS", help="with --model: the token ids to run")
    p.set_defaults(func=_run)


def settings_from(args: argparse.Namespace, previous: dict[str, Any] | None):
    """The campaign's Settings: from the options, or with --resume from campaign.json, where an
    option given again must agree with it."""
    from accel import registry
    from accel.errors import ArgumentError, expected

    from accel.conformance.campaign.plan import Settings

    given = {"backends": split_names(args.backends), "profile": args.profile, "seed": args.seed,
             "seeds": args.seeds, "examples": args.examples, "ops": split_names(args.ops),
             "dtypes": dtype_names(args.dtypes), "repeat": args.repeat, "bitwise": args.bitwise,
             "shard_size": args.shard_size}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if v is not None}
    if previous is None:
        fuzz_only = sorted(k for k in ("seeds", "examples") if k in given)
        if fuzz_only and given.get("profile") != "fuzz":
            raise ArgumentError(expected(f"--{fuzz_only[0]}", "--profile fuzz with it (the other "
                                         "profiles run the suite's own plan)",
                                         f"profile {given.get('profile', 'quick')}"))
        unknown = [b for b in given.get("backends", ()) if b not in registry.backend_names()]
        if unknown:  # a typo would start Ray and leave an incomplete campaign behind
            raise ArgumentError(expected("--backends", "names of backends known here "
                                         f"({', '.join(registry.backend_names())})",
                                         repr(unknown[0])))
        if given.get("bitwise"):
            given.setdefault("repeat", 2)
            if given["repeat"] < 2:
                raise ArgumentError(expected("--repeat", "2 or more with --bitwise (outputs of "
                                             "repeated runs are compared)", given["repeat"]))
        return Settings(**{"backends": (), **given})
    settings = Settings.from_json(previous["settings"])
    for key, value in given.items():
        if key == "backends" and not settings.backends:
            continue
        if getattr(settings, key) != value:
            flag = "--" + key.replace("_", "-")
            raise ArgumentError(expected(flag, f"what the campaign was started with "
                                         f"({getattr(settings, key)!r}) or nothing, with --resume",
                                         repr(value)))
    return settings


def _run(args: argparse.Namespace) -> int:
    import dataclasses
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from accel.errors import ArgumentError, expected

    from accel.conformance import results
    from accel.conformance.campaign import fleet, node, store
    from accel.conformance.campaign.plan import shards

    folder: Path = args.out
    if args.model:
        return _run_model(args)
    previous = store.read_campaign(folder) if args.resume else None
    if previous is None and (folder / store.CAMPAIGN_FILE).exists():
        raise ArgumentError(expected("--out", "a folder without a campaign, or --resume to "
                                     "continue the one there", str(folder)))
    settings = settings_from(args, previous)
    plan = shards(settings)  # the filters are checked before Ray starts
    console = Console(stderr=True)
    ray = fleet.import_ray()
    started = time.perf_counter()
    fleet.connect(ray, args.cluster)
    try:
        nodes = fleet.discover(ray)
        discovery_s = time.perf_counter() - started
        # plugins are third-party code: run when named, as accel portability does
        available = sorted({d["backend"] for n in nodes for d in n["devices"]
                            if d["origin"] == "builtin"
                            and n["resources"].get(node.resource_name(d["backend"]))})
        if not settings.backends:
            settings = dataclasses.replace(settings, backends=tuple(available))
        use, warnings = fleet.offered(nodes, settings.backends)
        workers, records, failed_starts = fleet.start_workers(ray, use)
        warnings += failed_starts + [f"{n['hostname']}: {n['error']}" for n in nodes if "error" in n]
        versions = sorted({n["accel"] for n in nodes if "accel" in n})
        if len(versions) > 1:  # results would mix versions under one platform name
            warnings.append(f"the nodes run different accel versions: {', '.join(versions)}")
        workers_s = time.perf_counter() - started - discovery_s
        platforms = dict((previous or {}).get("platforms", {}))
        for key, record in records.items():
            platforms[key] = {**platforms.get(key, {}), "key": key, **record}
        missing = [b for b in settings.backends
                   if not any(p["device"]["backend_name"] == b for p in platforms.values())]
        done_before = {key: store.finished(folder, key) for key in platforms}
        pending = {key: deque(s for s in plan if s.id not in done_before[key]) for key in platforms}
        doc = _campaign_doc(previous, settings, args, nodes, warnings, platforms, missing)
        store.write_campaign(folder, doc)
        for w in warnings:
            console.print(f"[yellow]warning[/] {w}", soft_wrap=True, markup=False)
        console.print(f"campaign: {len(nodes)} node(s), {len(workers)} device worker(s), "
                      f"{len(platforms)} platform(s), {len(plan)} shards each, profile "
                      f"{settings.profile}, in {folder}")
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, disable=args.no_progress,
                      transient=True) as progress:
            task = progress.add_task("shards", total=sum(len(q) for q in pending.values()))
            outcome = fleet.drive(ray, workers, pending, settings, folder,
                                  lambda platform, record: progress.update(task, advance=1))
    finally:
        ray.shutdown()
    command = args.command_line
    finished = {key: store.finished(folder, key) for key in platforms}
    written, missing_shards = {}, {}
    for key, platform in platforms.items():
        path = store.result_path(folder, key)
        absent = [s.id for s in plan if s.id not in finished[key]]
        if absent:
            missing_shards[key] = absent
            path.unlink(missing_ok=True)  # never a stale complete file beside a hole
            continue
        report = store.platform_document(platform, plan, finished[key], settings, command)
        report["machine"]["run_id"] = doc["run_id"]
        results.write(report, path)
        written[key] = report
    doc.update(_outcome_fields(doc, outcome, plan, platforms, finished, missing_shards, written,
                               discovery_s, workers_s, workers))
    store.write_campaign(folder, doc)
    return _print_summary(Console(width=None if sys.stdout.isatty() else 120), doc, written,
                          missing_shards, outcome, missing, folder)


def _run_model(args: argparse.Namespace) -> int:
    """``--model``: the model conformance on every device the cluster offers, one result file
    per device; a device whose worker dies (a crash in its driver) is recorded as crashed."""
    import json

    from rich.console import Console

    from accel.errors import ArgumentError, expected

    from accel.conformance import results
    from accel.conformance.campaign import fleet
    from accel.conformance.model_check import MEAN_KL_BOUND, SCHEMA, TOP1_BOUND

    others = [f"--{k.replace('_', '-')}" for k in PLAN_OPTIONS if k != "backends"
              and getattr(args, k, None) not in (None, False)] + (["--resume"] if args.resume else [])
    if others:
        raise ArgumentError(expected("--model", "no suite options beside it (--backends, "
                                     "--cluster, --tokens and --out only)", " ".join(others)))
    if not Path(args.model).is_file():
        raise ArgumentError(expected("--model", "a GGUF file", f"{args.model!r} (no such file)"))
    tokens = [int(t) for t in args.tokens.replace(",", " ").split()] if args.tokens else None
    model = str(Path(args.model).resolve())
    console = Console(stderr=True)
    ray = fleet.import_ray()
    fleet.connect(ray, args.cluster)
    try:
        nodes = fleet.discover(ray)
        backends = tuple(split_names(args.backends) or ()) or tuple(sorted(
            {d["backend"] for n in nodes for d in n["devices"] if d["origin"] == "builtin"}))
        use, warnings = fleet.offered(nodes, backends)
        workers, _, failed = fleet.start_workers(ray, use)
        for w in warnings + failed:
            console.print(f"[yellow]warning[/] {w}", soft_wrap=True, markup=False)
        console.print(f"campaign --model: {len(workers)} device(s) on {len(nodes)} node(s)")
        refs = [(w, w.handle.model.remote(model, tokens)) for w in workers]
        docs = []
        for w, ref in refs:
            try:
                rec = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the worker died or raised: a result, said
                rec = {"schema": SCHEMA, "model": model, "backend": w.device, "passed": False,
                       "crashed": str(e).splitlines()[0] if str(e) else type(e).__name__,
                       "where": f"{w.hostname}/{w.device}"}
            docs.append(rec)
    finally:
        ray.shutdown()
    args.out.mkdir(parents=True, exist_ok=True)
    for rec in docs:
        slug = rec["where"].replace("/", "-").replace(":", "")
        (args.out / f"model-conformance-{slug}.json").write_text(
            json.dumps(results.finite({**rec, "command": args.command_line}), indent=1))
        m = rec.get("logits")
        print(f"{rec['where']}: " + (f"CRASHED ({rec['crashed']})" if "crashed" in rec else
              f"mean KL {m['mean_kl']:.3e} (bound {MEAN_KL_BOUND:g}), top-1 "
              f"{m['top1_agreement']:.1%} (bound {TOP1_BOUND:.0%}): "
              f"{'PASS' if rec['passed'] else 'FAIL'}"))
    print(f"results: {args.out}/model-conformance-*.json")
    return 0 if docs and all(r["passed"] for r in docs) and not failed else 1


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _campaign_doc(previous, settings, args, nodes, warnings, platforms, missing) -> dict[str, Any]:
    from accel.conformance import results

    doc = dict(previous or {"started": _now(), "run_id": results.RUN_ID, "runs": []})
    doc.pop("schema", None)
    doc.update(settings=settings.to_json(), cluster=args.cluster, state="running", updated=_now(),
               nodes=nodes, warnings=warnings, platforms=platforms,
               missing_backends=missing)
    return doc


def _outcome_fields(doc, outcome, plan, platforms, finished, missing_shards, written,
                    discovery_s, workers_s, workers) -> dict[str, Any]:
    from accel.conformance.campaign import store

    ran = sum(outcome.done.values())
    this_run = {"started": doc["updated"], "resumed": bool(doc["runs"]), "workers": len(workers),
                "shards_finished": ran, "discovery_s": round(discovery_s, 3),
                "workers_s": round(workers_s, 3), "run_s": round(outcome.run_s, 3),
                "shards_per_s": round(ran / outcome.run_s, 3) if outcome.run_s else None,
                "driver_s_per_shard": round(outcome.driver_s / ran, 6) if ran else None,
                "retries": outcome.retries, "workers_lost": outcome.workers_lost}
    for key, platform in platforms.items():
        platform.update(shards=len(plan), finished=len(finished[key]),
                        workers=sorted({c["where"] for r in finished[key].values()
                                        for c in r["cases"]}),
                        lost=outcome.lost.get(key, {}),
                        file=store.result_path(Path("."), key).name if key in written else None)
    complete = not missing_shards and not doc["missing_backends"]
    return {"state": "complete" if complete else "incomplete", "updated": _now(),
            "runs": doc["runs"] + [this_run], "missing_shards": missing_shards,
            "shards": {"per_platform": len(plan), "platforms": len(platforms)}}


def _print_summary(console, doc, written, missing_shards, outcome, missing, folder) -> int:
    from rich.markup import escape
    from rich.table import Table

    from accel.conformance.campaign import store

    table = Table(title=f"accel campaign ({doc['settings']['profile']}): {folder}")
    for col in ("platform", "device", "workers", "shards", "passed", "failed", "error",
                "unsupported", "lost"):
        table.add_column(col, justify="left" if col in ("platform", "device", "workers") else "right")
    failures = []
    for key, platform in doc["platforms"].items():
        s = written[key]["summary"] if key in written else None
        bad = s and s["failed"] + s["error"]
        table.add_row(escape(key), escape(platform["device"]["device"]["name"]),
                      escape(", ".join(platform["workers"])),
                      f"{platform['finished']}/{platform['shards']}",
                      *([str(s["passed"]), f"[red]{s['failed']}[/]" if bad else "0", str(s["error"]),
                         str(s["unsupported"])] if s else ["-"] * 4),
                      f"[red]{len(missing_shards.get(key, []))}[/]" if key in missing_shards else "0")
        if key in written:  # two fuzz searches may shrink to the same case: printed once
            failures += list({c["id"]: (key, c) for c in written[key]["cases"]
                              if c["status"] in ("failed", "error")}.values())
    console.print(table)
    for key, case in failures[:FAILURES_SHOWN]:
        host = case.get("where", "?").split("/")[0]
        console.print(f"[red]{case['status'].upper()}[/] {escape(key)} {escape(case['id'])}\n"
                      f"  {escape(case['reason'])}\n  repro (on {escape(host)} or a machine with the "
                      f"same device): {escape(case['repro'])}", soft_wrap=True)
    if len(failures) > FAILURES_SHOWN:
        console.print(f"... and {len(failures) - FAILURES_SHOWN} more failing cases (see the files)")
    for key in written:
        rep = written[key].get("repeatability")
        if rep:
            varied = [k for k, row in rep["by_op_dtype"].items() if not row["bit_identical"]]
            console.print(f"{escape(key)}: outputs over {rep['runs']} runs "
                          + (f"[yellow]not bit-identical[/] for {escape(', '.join(varied))}" if varied
                             else "bit-identical for every op and dtype"))
    for b in missing:
        console.print(f"[red]MISSING[/] no node offers backend {escape(b)} (see warnings, and "
                      "`accel info --ray-resources` on the machine that has it)")
    for key, shard_ids in missing_shards.items():
        reasons = outcome.lost.get(key, {})
        for sid in shard_ids:
            why = reasons.get(sid, "not run in this campaign yet")
            console.print(f"[red]MISSING[/] {escape(key)} shard {escape(sid)}: {escape(why)}",
                          soft_wrap=True)
    if missing_shards:
        total = sum(len(v) for v in missing_shards.values())
        console.print(f"{total} shard(s) missing: no result file for "
                      f"{', '.join(escape(k) for k in missing_shards)}; run "
                      f"`accel campaign --out {escape(str(folder))} --resume` where the devices are")
    for key in written:
        console.print(f"results: {escape(str(store.result_path(folder, key)))}")
    bad_cases = any(s["summary"]["failed"] or s["summary"]["error"] for s in written.values())
    return 1 if bad_cases or missing_shards or missing else 0

