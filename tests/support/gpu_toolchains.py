"""Tests that compile for GPU targets need NVRTC / hiprtc (and, to read NVIDIA machine code,
cuobjdump): without them they skip, saying what to install - except where
ACCEL_REQUIRE_TOOLCHAINS=1 (CI), where anything missing fails them."""
import os
import re
import shutil
import subprocess
from collections import Counter

import pytest

from accel.kernels import resources as kernel_resources
from accel.kernels import toolchains


def missing(why: str) -> None:
    """Skip the test for ``why``, or fail it where CI requires every toolchain."""
    if os.environ.get("ACCEL_REQUIRE_TOOLCHAINS") == "1":
        pytest.fail(f"ACCEL_REQUIRE_TOOLCHAINS=1 but {why}")
    pytest.skip(why)


def need(*targets: str) -> None:
    for target in targets:
        try:
            toolchains.toolchain_version(target)
        except toolchains.ToolchainUnavailable as e:
            missing(f"the {target} toolchain is missing: {e}")


def need_tool(name: str, install: str) -> str:
    """The path of command-line tool ``name`` (hipcc, nvcc), or skip/fail saying how to get it."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({install})")
    return path


HIPCC = "apt-get install hipcc libamdhip64-dev rocm-device-libs"


def nvrtc_binding():
    """CuPy's NVRTC binding, for tests that read PTX (accel.kernels.toolchains builds machine code only);
    with the include directories accel uses, so both compile the same headers."""
    need("sm_90")
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as e:
        missing(f"CuPy's NVRTC binding is not importable ({e}; pip install 'accel-portable[cuda13]')")
    return nvrtc


def ptx_entries(variant, arch: str) -> dict[str, str]:
    """PTX per kernel entry of shipped ``variant`` for ``arch`` (``sm_90a`` too), from NVRTC with
    the include path accel.kernels.toolchains uses (the machine-code builds keep no PTX)."""
    from accel import kernels

    nvrtc = nvrtc_binding()
    prog = nvrtc.createProgram(kernels.program_text(variant.source), variant.source, [], [])
    opts = [f"--gpu-architecture=compute_{arch[3:]}", "-std=c++17", "-DACCEL_WARP=32",
            *(f"-I{d}" for d in toolchains.cuda_include_dirs()), *variant.options()]
    try:
        nvrtc.compileProgram(prog, opts)
    except nvrtc.NVRTCError:
        pytest.fail(nvrtc.getProgramLog(prog))
    ptx = nvrtc.getPTX(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    return {e.split("(")[0]: e for e in ptx.split(".entry ")[1:]}


def distinct(builds: list[tuple]) -> list[tuple]:
    """``builds`` (tuples whose last item is a dict of parameters) without repeats, in order:
    parameter lists shared by several GPU-run surveys name some sets twice."""
    seen: set = set()
    kept = []
    for b in builds:
        key = b[:-1] + (tuple(sorted(b[-1].items())),)
        if key not in seen:
            seen.add(key)
            kept.append(b)
    return kept


def build_shipped(variant, kernel: str, arch: str) -> toolchains.CompileResult:
    """``kernel`` of the shipped ``variant`` compiled for ``arch`` along the cuda/hip backend's
    own path (the portability header, the variant's defines, ACCEL_WARP as a device of ``arch``
    reports it)."""
    from accel.backends.cupy import build as cupy_build

    return cupy_build.build_variant(variant, kernel, arch, toolchains.default_warp_size(arch))


def built_without_spills(variant, kernel: str, arch: str, threads: int | None = None,
                         blocks_per_sm: int = 1) -> toolchains.CompileResult:
    """:func:`build_shipped`, checked: no entry of the result spills or uses a stack, and, given
    the ``threads`` of a block, ``blocks_per_sm`` such blocks fit one multiprocessor's 64K
    registers (the occupancy the kernel's design counts on)."""
    r = build_shipped(variant, kernel, arch)
    for name, res in r.resources.items():
        assert res.spills == 0 and res.stack_bytes == 0, (variant.id, name, res)
        if threads is not None:
            assert blocks_per_sm * res.registers * threads <= 65536, (variant.id, name, res)
    return r


def sass_of(result: toolchains.CompileResult, kernel: str) -> dict:
    """The SASS opcode counts of ``kernel`` in an NVIDIA compile result, read from its binary
    when the build did not disassemble (the backend's own path never does)."""
    counts = result.resources[kernel].detail.get("sass")
    if counts is None:
        found, note = kernel_resources.sass_counts(result.path)
        if note:
            missing(note)
        counts = found[kernel]
    return counts


_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", re.M)
_BACK = re.compile(r"\bBRA (?:\S+, )?0x([0-9a-f]+)")


def hot_loop(result: toolchains.CompileResult, kernel: str, opcode: str = "FFMA") -> Counter:
    """Opcode counts of ``kernel``'s hot loop: the shortest loop (a backward branch and what it
    jumps over) holding at least 3/4 of the kernel's ``opcode`` instructions."""
    text, note = kernel_resources.sass_text(result.path)
    if note:
        missing(note)
    body = kernel_resources.sass_functions(text)[kernel]
    code = [(int(a, 16), re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0], t)
            for a, t in _INSTR.findall(body)]
    total = sum(op == opcode for _, op, _ in code)
    loops = []
    for addr, _, text_ in code:
        if (m := _BACK.search(text_)) and int(m.group(1), 16) < addr:
            ops = Counter(op for a, op, _ in code if int(m.group(1), 16) <= a <= addr)
            if ops[opcode] * 4 >= total * 3:
                loops.append((sum(ops.values()), ops))
    assert loops, f"no loop of {kernel} holds 3/4 of its {opcode}"
    return min(loops, key=lambda x: x[0])[1]


def amd_disassembly(result: toolchains.CompileResult, arch: str, kernel: str) -> str:
    """``kernel``'s machine code in an AMD code object, as ``llvm-objdump -d`` prints it."""
    tool = shutil.which("llvm-objdump") or next(
        (t for v in range(20, 13, -1) if (t := shutil.which(f"llvm-objdump-{v}"))), None)
    if tool is None:
        missing("llvm-objdump not found (apt-get install llvm-15), AMD machine code not read")
    proc = subprocess.run([tool, "-d", f"--mcpu={arch}", str(result.path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    body = proc.stdout[proc.stdout.index(f"<{kernel}>:"):]
    end = re.search(r"^\S+ <\w+>:", body[1:], re.M)
    return body[: end.start() + 1] if end else body
