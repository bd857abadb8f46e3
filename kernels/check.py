"""``accel kernels check``: compile every shipped kernel variant (or the given files) for real GPU
targets without a GPU, and report per kernel and target: ok or the compiler log, and registers /
spills / shared memory where the toolchain tells.

Targets: NVIDIA ``sm_XY`` (NVRTC), AMD ``gfx...`` (hiprtc), and ``opencl`` (every OpenCL device
present, through pyopencl). Exit status: 0 when everything compiled; 1 when anything failed to
compile; 2 when nothing failed but a target's toolchain is missing here (``--allow-unavailable``
accepts that, still listing it), and when no source is meant for any of the targets (nothing was
built).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from accel.conformance.argtypes import comma_list, int_at_least, names, output_file, split_names
from accel.errors import ArgumentError
from accel.kernels import KERNELS_CHECK_SCHEMA, toolchains

SCHEMA = KERNELS_CHECK_SCHEMA
DEFAULT_TARGETS = ",".join(toolchains.DEFAULT_TARGETS)

#: which compilers a source of each dialect is meant for ("cuda" = NVRTC, "hip" = hiprtc)
_DIALECT_TARGETS = {"accel": ("opencl", "cuda", "hip"), "cuda": ("cuda", "hip"), "hip": ("hip",),
                    "opencl": ("opencl",)}


@dataclass(frozen=True)
class Job:
    """One source to compile: its id, self-contained text (or text including accel.h), the
    compilers it is meant for ("opencl", "cuda", "hip") and its defines."""

    id: str
    file: str
    source: str
    meant_for: tuple[str, ...]
    defines: tuple[tuple[str, object], ...] = ()
    sm_range: tuple[int, int] | None = None  # NVIDIA archs it runs on (Variant.sm_range)
    arch_suffix: str = ""  # sm_90 -> sm_90a for arch-specific instructions (wgmma)

    def outcome(self, target: str, status: str, log: str = "", **found: Any) -> Outcome:
        """This job's row for ``target``; ``found``: the rest of Outcome's fields."""
        return Outcome(self.id, self.file, target, status, log, defines=dict(self.defines), **found)


@dataclass
class Outcome:
    """The result of one job on one target."""

    job: str
    file: str
    target: str
    status: str  # "ok", "failed", "unavailable" (no toolchain here) or "n/a" (dialect not built there)
    log: str = ""
    toolchain: str = ""
    cached: bool = False
    kernels: dict[str, dict] = field(default_factory=dict)
    # the variant's defines ({} for FILE jobs): readers such as the report's compiled table take
    # the input dtype (IN_DT) from here rather than parse it out of the job id
    defines: dict[str, object] = field(default_factory=dict)


def _kernels_dir() -> Path:
    from accel import kernels

    return kernels.HEADER.parent


def shipped_jobs() -> list[Job]:
    """Every shipped kernel variant from ``accel.kernels.variants()`` (header inlined)."""
    from accel import kernels

    return [Job(v.id, v.source, kernels.program_text(v.source), tuple(v.dialects),
                tuple(sorted(v.defines.items())), v.sm_range, v.arch_suffix)
            for v in kernels.variants()]


def file_jobs(paths: list[str]) -> list[Job]:
    """User files: accel dialect when the source has ``#include "accel.h"``; OpenCL C for ``.cl`` files, HIP
    C++ (AMD targets only: it includes HIP's headers) for ``.hip`` files; CUDA C++ otherwise."""
    from accel import kernels
    from accel.errors import ArgumentError, expected

    jobs = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ArgumentError(expected("FILE", "a readable kernel source file", repr(p)))
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:  # no permission, or not UTF-8 text
            why = getattr(e, "strerror", None) or e
            raise ArgumentError(expected("FILE", "a readable kernel source file", f"{p!r} ({why})")) from e
        if kernels.uses_header(text):
            dialect = "accel"
        else:
            dialect = {".cl": "opencl", ".hip": "hip"}.get(path.suffix, "cuda")
        jobs.append(Job(path.name, str(path), text, _DIALECT_TARGETS[dialect]))
    return jobs


# -- compiling ----------------------------------------------------------------------------------
def _gpu_compile(job: Job, target: str, use_cache: bool, sass: bool) -> Outcome:
    from accel import kernels
    from accel.kernels import toolchains

    compiler = "cuda" if toolchains.parse_target(target).vendor == "nvidia" else "hip"
    if compiler not in job.meant_for:
        return job.outcome(target, "n/a", f"meant for {', '.join(job.meant_for)} only")
    build_for = target
    if compiler == "cuda" and (job.sm_range or job.arch_suffix):
        build_for = kernels.nvidia_target(target, job.sm_range, job.arch_suffix)
        if build_for is None:
            lo, hi = job.sm_range
            span = " only" if lo == hi else " and later" if hi >= kernels.SM_ANY_LATER else f" to sm_{hi}"
            return job.outcome(target, "n/a", f"runs on sm_{lo}{span}")
    # the warp width a device of this arch reports, as the cuda/hip backends pass it
    defines = {"ACCEL_WARP": toolchains.default_warp_size(target), **dict(job.defines)}
    try:
        r = toolchains.compile_source(job.source, build_for, defines=defines,
                                      include_dirs=(str(_kernels_dir()),),
                                      filename=Path(job.file).name,
                                      use_cache=use_cache, sass=sass)
    except toolchains.ToolchainUnavailable as e:
        return job.outcome(target, "unavailable", str(e))
    note = r.resources_note if build_for == target else f"built as {build_for}. {r.resources_note}"
    return job.outcome(target, "ok" if r.ok else "failed", r.log if not r.ok else note.strip(),
                       toolchain=r.toolchain, cached=r.cached,
                       kernels={k: asdict(v) for k, v in r.resources.items()})


def opencl_devices() -> tuple[list, str]:
    """(devices, "") or ([], why there are none): the OpenCL backend's devices, in its order, so
    target ``opencl:N`` here is ``opencl:N`` everywhere (devices that cannot build are left out)."""
    try:
        from accel.backends.opencl.devices import enumerate_devices
    except ImportError:
        return [], "pyopencl is not installed (pip install 'accel-portable[opencl]')"
    from accel.errors import BackendUnavailable

    try:
        return list(enumerate_devices()), ""
    except BackendUnavailable as e:
        return [], str(e)


def _opencl_compile(job: Job, index: int, dev) -> Outcome:
    """Build ``job`` for the backend's device ``opencl:index`` (a CLDevice) as the backend would."""
    import pyopencl as cl

    from accel.backends.opencl.params import build_options

    target = f"opencl:{index} ({dev.name})"
    if "opencl" not in job.meant_for:
        return job.outcome(target, "n/a", "CUDA C++ is built for GPU targets only "
                                           "(translate it with `accel port --to opencl`)")
    options = [*build_options(dev), f"-I{_kernels_dir()}", *(f"-D{k}={v}" for k, v in job.defines)]
    device = dev.device
    ctx = cl.Context([device])
    try:
        with warnings.catch_warnings():  # the build log is reported below, not as a warning
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prog = cl.Program(ctx, job.source).build(options=options)
    except cl.Error as e:  # BUILD_PROGRAM_FAILURE carries the build log in its message
        return job.outcome(target, "failed", str(e), toolchain=dev.platform_version)
    kernels = {}
    for k in prog.all_kernels():
        info = k.get_work_group_info
        kernels[k.function_name] = {
            "registers": None, "spills": None,
            "shared_bytes": int(info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, device)),
            "stack_bytes": int(info(cl.kernel_work_group_info.PRIVATE_MEM_SIZE, device)),
            "detail": {"max_work_group_size": int(info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device))}}
    log = prog.get_build_info(device, cl.program_build_info.LOG).strip()
    return job.outcome(target, "ok", log, toolchain=dev.platform_version, kernels=kernels)


def check(jobs: list[Job], targets: list[str], *, use_cache: bool = True, sass: bool = True,
          on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Compile every job for every target (GPU targets in parallel across toolchains);
    ``on_done`` is called with each outcome as it is known (the progress bar). ``sass=False``
    skips counting NVIDIA machine-code opcodes (the table's MMA and local-memory columns), which
    costs about as much as compiling."""
    from accel.kernels import toolchains

    done = on_done or (lambda outcome: None)
    gpu_targets = [t for t in targets if t != "opencl"]
    for t in gpu_targets:  # a typo in --targets is an error, not an "unavailable" row
        try:
            toolchains.check_target_supported(t)
        except ArgumentError as e:
            raise ArgumentError(f"{e} (or opencl: every OpenCL device present)") from None
    with ThreadPoolExecutor(max_workers=2) as pool:  # one NVRTC and one hiprtc build at a time
        futures = [pool.submit(_gpu_compile, j, t, use_cache, sass) for j in jobs for t in gpu_targets]
        for f in futures:
            f.add_done_callback(lambda f: done(f.result()))
        outcomes = [f.result() for f in futures]
    if "opencl" in targets:
        devices, why = opencl_devices()
        if not devices:
            outcomes += [j.outcome("opencl", "unavailable", why) for j in jobs]
        for i, dev in enumerate(devices):
            for j in jobs:
                outcomes.append(_opencl_compile(j, i, dev))
                done(outcomes[-1])
    return outcomes


def total_builds(jobs: list[Job], targets: list[str]) -> int | None:
    """How many outcomes check() will report (None while the OpenCL device count is unknown)."""
    return None if "opencl" in targets else len(jobs) * len(targets)


def exit_status(outcomes: list[Outcome], allow_unavailable: bool) -> int:
    if any(o.status == "failed" for o in outcomes):
        return 1
    if not allow_unavailable and any(o.status == "unavailable" for o in outcomes):
        return 2
    return 0


# -- reporting ----------------------------------------------------------------------------------
def _fmt(value) -> str:
    return "" if value is None else str(value)


def _sass_cells(sass: dict | None) -> tuple[str, str]:
    """The tensor-core instructions and local-memory accesses a kernel's SASS holds ("" unread)."""
    if not sass:
        return "", ""
    mma = " ".join(f"{op} {sass[op]}" for op in ("HGMMA", "HMMA", "IMMA") if sass.get(op))
    local = sass.get("LDL", 0) + sass.get("STL", 0)
    return mma or "-", f"[red]{local}[/]" if local else "0"


def render(outcomes: list[Outcome], console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="accel kernels check")
    table.add_column("kernel variant", overflow="fold")
    for col in ("target", "status", "kernel"):
        table.add_column(col)
    for col in ("regs", "spills", "shared B", "stack B", "MMA (SASS)", "LDL/STL"):
        table.add_column(col, justify="right")
    colour = {"ok": "green", "failed": "red", "unavailable": "yellow", "n/a": "dim"}
    for o in outcomes:
        if o.status == "n/a":  # counted below; a row per CPU-only variant x GPU target is noise
            continue
        status = f"[{colour[o.status]}]{o.status}[/]" + (" (cached)" if o.cached else "")
        if not o.kernels:
            table.add_row(escape(o.job), escape(o.target), status, *[""] * 7)
        for name, r in o.kernels.items():
            spill = r.get("spills")
            mma, local = _sass_cells(r.get("detail", {}).get("sass"))
            table.add_row(escape(o.job), escape(o.target), status, escape(name), _fmt(r.get("registers")),
                          f"[red]{spill}[/]" if spill else _fmt(spill), _fmt(r.get("shared_bytes")),
                          _fmt(r.get("stack_bytes")), mma, local)
    console.print(table)
    unavailable = {o.target: o.log for o in outcomes if o.status == "unavailable"}
    for target, why in unavailable.items():
        console.print(f"[yellow]{escape(target)} unavailable[/]: {escape(why)}")
    for o in outcomes:
        if o.status == "failed":
            console.print(f"[red]FAILED[/] {escape(o.job)} on {escape(o.target)}:\n{escape(o.log)}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ok", "failed", "unavailable", "n/a")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))


#: table width when stdout is not a terminal: the widest row (variant id, target, kernel name,
#: six numbers) on one line
PIPED_WIDTH = 200


def _check_with_progress(jobs: list[Job], targets: list[str], *, use_cache: bool,
                         sass: bool) -> list[Outcome]:
    """check() with a progress bar on stderr: compiling every variant takes a minute or more."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("compiling {task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(", ".join(targets), total=total_builds(jobs, targets))
        return check(jobs, targets, use_cache=use_cache, sass=sass,
                     on_done=lambda outcome: progress.advance(task))


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    targets = split_names(args.targets) or comma_list(DEFAULT_TARGETS)
    # `--targets opencl k.cu`: argparse's nargs="+" takes the FILE as a target; a name that is a
    # file here is one (no target is spelled like a file)
    files = [*args.files, *(t for t in targets if Path(t).is_file())]
    targets = [t for t in targets if not Path(t).is_file()] or comma_list(DEFAULT_TARGETS)
    jobs = file_jobs(files) if files else shipped_jobs()
    outcomes = _check_with_progress(jobs, targets, use_cache=not args.no_cache,
                                    sass=not args.no_sass)
    if all(o.status == "n/a" for o in outcomes):  # nothing was compiled: not a pass
        from accel.errors import ArgumentError, expected

        why = "; ".join(sorted({o.log for o in outcomes}))
        raise ArgumentError(expected("--targets", "a target at least one source is built for",
                                     f"{','.join(targets)} ({why})"))
    # piped to a file or a CI log, rich would fold the table into 80 columns (3,500 lines)
    width = args.width or (None if sys.stdout.isatty() else PIPED_WIDTH)
    render(outcomes, Console(width=width))
    if args.json:
        doc = {"schema": SCHEMA, **_provenance(args.command_line), "targets": targets,
               "results": [asdict(o) for o in outcomes]}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return exit_status(outcomes, args.allow_unavailable)


def _provenance(command: str) -> dict[str, Any]:
    """Which accel, commit, machine and run a kernels check file comes from (its "compiled only"
    evidence is about that source tree)."""
    import datetime

    import accel
    from accel.conformance.results import accel_environment, commit, machine

    return {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "accel": accel.__version__, "commit": commit(), "machine": machine(),
            "command": command, "environment": accel_environment()}


def register(subparsers) -> None:
    p = subparsers.add_parser("kernels", help="compile-check kernels for real GPU targets",
                              description="Compile kernels for real GPU targets on any machine, "
                                          "no GPU needed: see accel kernels check --help.")
    sub = p.add_subparsers(dest="kernels_command", required=True)
    c = sub.add_parser("check", help="compile every shipped kernel variant (or FILEs) for each "
                                     "target and report registers / spills / shared memory",
                       description=__doc__.replace("``", ""),  # plain text, not reST
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("files", nargs="*", metavar="FILE",
                   help="kernel sources (accel dialect, CUDA/HIP C++ or OpenCL C); default: "
                        "every shipped variant")
    c.add_argument("--targets", action="extend", nargs="+", metavar="TARGET", type=names,
                   help=f"sm_XY, gfx... and opencl (every OpenCL device present), space or comma "
                        f"separated; default {DEFAULT_TARGETS}")
    c.add_argument("--json", metavar="OUT", type=output_file,
                   help="write the results as JSON (accel.kernels_check/1)")
    c.add_argument("--no-cache", action="store_true", help="recompile even when cached")
    c.add_argument("--no-sass", action="store_true",
                   help="skip disassembling NVIDIA binaries (the MMA and local-memory columns); "
                        "halves the time of an uncached check")
    c.add_argument("--allow-unavailable", action="store_true",
                   help="exit 0 when a target's toolchain is missing here (still reported)")
    c.add_argument("--width", type=int_at_least(1), default=None,
                   help=f"table width in columns (default: the terminal's; {PIPED_WIDTH} when "
                        "the output is not a terminal)")
    c.set_defaults(func=_run)
