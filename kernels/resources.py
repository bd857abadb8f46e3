"""Reading what a GPU toolchain reports about a kernel it compiled: registers, spills, shared
and stack memory per kernel (:class:`KernelResources`), from ptxas's ``-v`` log for NVIDIA and
from an AMD code object's metadata note (``llvm-readelf --notes``), and the SASS machine code of
an NVIDIA binary (``cuobjdump -sass``) with its per-kernel opcode counts. It compiles nothing:
accel.kernels.toolchains compiles and caches, then asks this module what the binary holds.

>>> r = parse_ptxas_log("ptxas info    : Compiling entry function 'k' for 'sm_90'\\n"
...                     "ptxas info    : Function properties for k\\n"
...                     "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\\n"
...                     "ptxas info    : Used 32 registers, 1024 bytes smem, 360 bytes cmem[0]\\n")
>>> r["k"].registers, r["k"].spills, r["k"].shared_bytes, r["k"].stack_bytes
(32, 4, 1024, 8)
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel uses, as its toolchain reports it.

    ``registers``: registers per thread (NVIDIA) or VGPRs per lane (AMD; SGPRs in ``detail``).
    ``spills``: 0 when nothing spilled; bytes of spill stores (ptxas) or spilled registers (AMD).
    ``shared_bytes``: static shared / LDS memory per block. ``stack_bytes``: private memory per
    thread (stack frame, scratch).
    """

    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    detail: dict = field(default_factory=dict)


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas_log(log: str) -> dict[str, KernelResources]:
    """Per-kernel resources from ptxas's ``-v`` report (as NVRTC or nvcc print it)."""
    found: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = found.setdefault(m.group(1), {})
        elif current is None:
            continue
        elif m := _PTXAS_FRAME.search(line):
            current.update(stack_bytes=int(m.group(1)), spills=int(m.group(2)),
                           detail={"spill_loads_bytes": int(m.group(3))})
        elif m := _PTXAS_USED.search(line):
            current.update(registers=int(m.group(1)), shared_bytes=int(m.group(2) or 0))
    return {name: KernelResources(**fields) for name, fields in found.items()}


#: SASS opcodes worth counting per kernel: tensor-core math (HMMA on sm_80+, HGMMA = Hopper
#: wgmma, IMMA integer), the loads that feed it (LDSM = ldmatrix, LDGSTS = cp.async, LDG/LDS),
#: float math (FFMA, MUFU = exp and friends) and local memory (LDL/STL: spills or indexed arrays)
SASS_OPCODES = ("HMMA", "HGMMA", "IMMA", "LDSM", "LDGSTS", "LDG", "LDS", "STS", "FFMA", "MUFU",
                "LDL", "STL")
_SASS_FUNCTION = re.compile(r"^\s*Function : (\S+)", re.M)
_SASS_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9]*)")


def _cuda_tool(name: str) -> str | None:
    try:
        from cuda import pathfinder

        if found := pathfinder.find_nvidia_binary_utility(name):
            return found
    except Exception:  # no pathfinder, or one without binary lookup: try PATH
        pass
    return shutil.which(name)


def sass_text(path: Path) -> tuple[str, str]:
    """The NVIDIA binary's machine code as ``cuobjdump -sass`` prints it, and a note (empty when
    it was read) saying why not."""
    tool, disasm = _cuda_tool("cuobjdump"), _cuda_tool("nvdisasm")  # cuobjdump runs nvdisasm
    if tool is None or disasm is None:
        return "", ("cuobjdump or nvdisasm not found (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): SASS not read")
    proc = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NVDISASM_PATH": str(Path(disasm).parent)})
    if proc.returncode:
        return "", f"cuobjdump -sass failed, SASS not read: {proc.stderr.strip()[:200]}"
    return proc.stdout, ""


def sass_counts(path: Path) -> tuple[dict[str, dict[str, int]], str]:
    """Per kernel of an NVIDIA binary, how many of each :data:`SASS_OPCODES` its machine code
    holds (read with ``cuobjdump -sass``), and a note when that could not be read. This is what
    proves, without a GPU, that a tensor-core kernel really issues HMMA/HGMMA and keeps its
    arrays out of local memory."""
    text, note = sass_text(path)
    if note:
        return {}, note
    out = {}
    for name, body in sass_functions(text).items():
        ops = _SASS_OPCODE.findall(body)
        out[name] = {op: ops.count(op) for op in SASS_OPCODES}
    return out, ""


def sass_functions(text: str) -> dict[str, str]:
    """Each kernel's part of ``cuobjdump -sass`` output, by kernel name."""
    starts = [(m.start(), m.group(1)) for m in _SASS_FUNCTION.finditer(text)]
    return {name: text[begin:end]
            for (begin, name), (end, _) in zip(starts, starts[1:] + [(len(text), "")])}


def _readelf() -> str | None:
    for name in ("llvm-readelf", *(f"llvm-readelf-{v}" for v in range(20, 13, -1))):
        if path := shutil.which(name):
            return path
    rocm = Path("/opt/rocm/llvm/bin/llvm-readelf")
    return str(rocm) if rocm.exists() else None


def amd_code_object_resources(path: Path) -> tuple[dict[str, KernelResources], str]:
    """Per-kernel resources from an AMD code object's metadata note, and a note when unreadable."""
    try:
        import yaml
    except ImportError:
        return {}, "PyYAML is not installed (pip install pyyaml), AMD resources not read"
    tool = _readelf()
    if tool is None:
        return {}, "llvm-readelf not found (apt-get install llvm-15), AMD resources not read"
    proc = subprocess.run([tool, "--notes", str(path)], capture_output=True, text=True, timeout=60)
    m = re.search(r"^\s*---\s*$(.*?)^\s*\.\.\.\s*$", proc.stdout, re.S | re.M)
    if proc.returncode or not m:
        return {}, f"llvm-readelf --notes gave no AMDGPU metadata: {proc.stderr.strip()[:200]}"
    meta = yaml.safe_load(m.group(1))
    out = {}
    for k in meta.get("amdhsa.kernels", []):
        out[k[".name"]] = KernelResources(
            registers=k.get(".vgpr_count"),
            spills=k.get(".vgpr_spill_count", 0) + k.get(".sgpr_spill_count", 0),
            shared_bytes=k.get(".group_segment_fixed_size"),
            stack_bytes=k.get(".private_segment_fixed_size"),
            detail={"sgprs": k.get(".sgpr_count"), "agprs": k.get(".agpr_count", 0),
                    "wavefront_size": k.get(".wavefront_size")})
    return out, ""


__all__ = ["KernelResources", "parse_ptxas_log", "SASS_OPCODES", "sass_text", "sass_functions",
           "sass_counts", "amd_code_object_resources"]
