"""Crash isolation for ``accel conformance``: the run happens in a child process that journals
each case as it starts and ends. When the child dies (a segfault or an abort inside a driver),
the parent records the case in flight as a crashed error with its repro and starts a new child,
which replays the journal (finished cases are not run again) and goes on from there. The result
file therefore always appears, with every case that finished.

The journal is JSON lines: ``{"device": ID}`` once the backend is up, ``{"start": ID}`` before
a case, the case's record after it.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

#: set in the child: the journal's path (its presence also says "do not supervise again")
JOURNAL_ENV = "ACCEL_CONFORMANCE_JOURNAL"


class Journal:
    """The child's side: replay what earlier children finished, append what this one does."""

    def __init__(self, path: str) -> None:
        self.done: dict[str, dict] = {}
        for record in _records(Path(path)):
            if "id" in record:
                self.done[record["id"]] = record
        self._file = open(path, "a")  # noqa: SIM115 - held for the child's lifetime

    def device(self, device_id: str) -> None:
        self._write({"device": device_id})

    def started(self, case_id: str) -> None:
        self._write({"start": case_id})

    def finished(self, record: dict) -> None:
        self._write(record)

    def _write(self, record: dict) -> None:
        from accel.conformance.results import finite

        # flushed line by line: the OS keeps what was written when the process dies
        self._file.write(json.dumps(finite(record)) + "\n")
        self._file.flush()


def child_journal() -> Journal | None:
    """The journal of this process when a supervising ``accel conformance`` started it."""
    path = os.environ.get(JOURNAL_ENV)
    return Journal(path) if path else None


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_state(path: Path) -> tuple[str, str | None]:
    """(the device the children ran on, or "?"; the id of the case the dead child had started
    and not finished, or None)."""
    device, started = "?", None
    for record in _records(path):
        device = record.get("device", device)
        started = record.get("start") if "start" in record else (None if "id" in record else started)
    return device, started


def signal_name(returncode: int) -> str:
    """'SIGSEGV (signal 11)' for a child killed by a signal, 'exit status N' otherwise."""
    if returncode < 0:
        try:
            return f"{signal.Signals(-returncode).name} (signal {-returncode})"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def isolated(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a spawned child process, so that a third-party library that dies takes
    only the child: a llama.cpp built for the CPU it was built on runs AMX tile instructions
    where a VM's CPU advertises AMX but the kernel does not grant it, and dies of SIGILL. A
    death or an exception there is a RuntimeError here, saying what happened."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run_and_send, args=(send, fn, args), daemon=True)
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:  # it died before answering
        child.join()
        name = getattr(fn, "__name__", repr(fn))
        raise RuntimeError(f"{name}'s process died ({signal_name(child.exitcode or 0)})") from None
    child.join()
    if not ok:
        raise RuntimeError(value)
    return value


def _run_and_send(send: Any, fn: Callable[..., Any], args: tuple) -> None:
    try:
        send.send((True, fn(*args)))
    except Exception as e:  # noqa: BLE001 - the parent reports it
        send.send((False, f"{type(e).__name__}: {e}"))


def crash_record(case_id: str, returncode: int, device: str) -> dict:
    """The result record of a case whose process died while running it."""
    from accel.conformance.case import Case

    case = Case.parse(case_id)
    return {"id": case_id, "op": case.op, "dtype": case.dtype, "kind": case.kind,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in case.params.items()},
            "status": "error", "evidence": "ran", "stats": {"crashed": signal_name(returncode)},
            "time_s": 0.0, "repro": f"accel conformance --backend {device} --case '{case_id}'",
            "reason": f"crashed: the process died of {signal_name(returncode)} while running "
                      "this case; the run went on in a new process"}


def supervise(argv: Sequence[str], on_bare_crash: Callable[[str], None] | None = None) -> int:
    """Run ``accel conformance *argv`` in children until one ends normally and return its exit
    status. A child that dies inside a case is recorded and followed by a new one; one that dies
    outside any case (or a model run, which has no cases) ends the run with status 1, after
    ``on_bare_crash(what killed it)``."""
    fd, name = tempfile.mkstemp(prefix="accel-conformance-", suffix=".jsonl")
    os.close(fd)
    journal = Path(name)
    try:
        while True:
            proc = subprocess.run([sys.executable, "-m", "accel", *argv],
                                  env={**os.environ, JOURNAL_ENV: str(journal)})
            if proc.returncode >= 0:  # a verdict (0/1), a usage error (2) or the watchdog
                return proc.returncode
            device, case_id = last_state(journal)
            what = signal_name(proc.returncode)
            if case_id is None:
                print(f"accel conformance: CRASHED: the process died of {what} outside any case",
                      file=sys.stderr)
                if on_bare_crash is not None:
                    on_bare_crash(what)
                return 1
            with journal.open("a") as f:
                f.write(json.dumps(crash_record(case_id, proc.returncode, device)) + "\n")
            print(f"accel conformance: CRASHED ({what}) in {case_id}; going on in a new process",
                  file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    finally:
        journal.unlink(missing_ok=True)
