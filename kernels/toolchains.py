"""Compiling kernel source for real GPU targets on a machine without a GPU.

NVIDIA targets (``sm_80``, ``sm_90``, any ``sm_XY``) go through NVRTC, AMD targets (``gfx90a``,
``gfx1100``, any ``gfx...``) through hiprtc. Neither needs a device or a driver: both are plain
libraries, loaded with ctypes, and their C APIs have the same shape (create, compile, log, code),
so one small wrapper drives both. Each result carries the compiler log, the binary (cubin or AMD
code object) and, per kernel, the resources the toolchain reports: ptxas's ``-v`` summary for
NVIDIA, the code object's metadata note (read with ``llvm-readelf --notes``) for AMD, both read
by accel.kernels.resources.

Successful builds are cached on disk under ``cache_root()/binaries`` (accel.host:
``$ACCEL_CACHE_DIR``, else the XDG cache folder) by a key over the toolchain and its version, the
target, the options, the source and the headers in the include directories the caller names.
Entries are written atomically and checked against their recorded key and digest on read, so an
interrupted writer or a misplaced file never leaves a usable wrong entry.

>>> from accel.kernels.toolchains import compile_source
>>> r = compile_source('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', "sm_90")
>>> r.ok, r.binary[:4], r.resources["k"].spills
(True, b'\\x7fELF', 0)
"""
from __future__ import annotations

import base64
import ctypes
import functools
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from accel.errors import ArgumentError, BackendUnavailable, expected
from accel.host import atomic_write, cache_root
from accel.kernels.resources import KernelResources, amd_code_object_resources, parse_ptxas_log, sass_counts

#: the targets ``accel kernels check`` compiles for when none are named
DEFAULT_TARGETS = ("sm_80", "sm_90", "gfx90a", "gfx1100")

_NVIDIA = re.compile(r"sm_(\d{2,3})a?")
_AMD = re.compile(r"gfx[0-9a-f]{3,5}(:[a-z0-9_]+[+-])*")


class ToolchainUnavailable(BackendUnavailable):
    """The compiler library a target needs is not installed here (the message says what to install)."""


@dataclass(frozen=True)
class Target:
    """A GPU code target: ``name`` as the compiler spells it, and which toolchain builds it."""

    name: str
    vendor: str  # "nvidia" or "amd"
    toolchain: str  # "nvrtc" or "hiprtc"

    @property
    def binary_suffix(self) -> str:
        return ".cubin" if self.vendor == "nvidia" else ".hsaco"


def parse_target(name: str) -> Target:
    """Validate a target name.

    >>> parse_target("sm_90"), parse_target("gfx90a:xnack-").toolchain
    (Target(name='sm_90', vendor='nvidia', toolchain='nvrtc'), 'hiprtc')
    """
    if isinstance(name, str) and _NVIDIA.fullmatch(name):
        return Target(name, "nvidia", "nvrtc")
    if isinstance(name, str) and _AMD.fullmatch(name):
        return Target(name, "amd", "hiprtc")
    raise ArgumentError(expected("target", "an NVIDIA arch 'sm_XY' (e.g. sm_90) or an AMD arch "
                                 "'gfx...' (e.g. gfx90a)", repr(name)))


def cuda_arch(major: int, minor: int) -> str:
    """The NVRTC target of a CUDA device's compute capability.

    >>> cuda_arch(9, 0), cuda_arch(8, 6)
    ('sm_90', 'sm_86')
    """
    return f"sm_{int(major)}{int(minor)}"


def hip_arch(gcn_arch_name: str) -> str:
    """The hiprtc target of an AMD device from its ``gcnArchName`` (feature flags kept: they
    decide code generation, e.g. xnack).

    >>> hip_arch("gfx90a:sramecc+:xnack-"), hip_arch(b"gfx1100")
    ('gfx90a:sramecc+:xnack-', 'gfx1100')
    """
    name = gcn_arch_name.decode() if isinstance(gcn_arch_name, bytes) else str(gcn_arch_name)
    name = name.strip("\x00 ")
    return parse_target(name).name


def default_warp_size(target: str) -> int:
    """The warp width code for ``target`` runs with: 32 on NVIDIA; 64 on AMD's GCN/CDNA
    (gfx9xx), 32 on RDNA (gfx10xx and later, HIP's default wave32). The backends read it from
    the device; checks without a device use this.

    >>> [default_warp_size(t) for t in ("sm_90", "gfx90a", "gfx942", "gfx1100")]
    [32, 64, 64, 32]
    """
    t = parse_target(target)
    if t.vendor == "nvidia":
        return 32
    major = t.name.split(":")[0].removeprefix("gfx")[:-2]
    return 64 if int(major) < 10 else 32


@dataclass(frozen=True)
class CompileResult:
    """The outcome of one compile: ``ok``, the full compiler ``log``, the ``binary`` and its
    cached ``path`` when ok, per-kernel ``resources`` where the toolchain tells."""

    target: str
    ok: bool
    log: str
    toolchain: str
    binary: bytes | None = None
    path: Path | None = None
    resources: dict[str, KernelResources] = field(default_factory=dict)
    resources_note: str = ""
    cached: bool = False


# -- the two runtime-compilation libraries --------------------------------------------------------
class _RTC:
    """NVRTC or hiprtc through ctypes: both export prefix+CreateProgram / CompileProgram /
    GetProgramLog(Size) / Get<Code>(Size) / DestroyProgram / Version with identical signatures."""

    def __init__(self, lib: ctypes.CDLL, prefix: str, code: str, path: str):
        self.lib, self.prefix, self.code, self.path = lib, prefix, code, path
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._fn("Version")(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        # ctypes calls drop the GIL; the libraries are thread-safe per program, but their global
        # initialisation is not documented as such, so builds run one at a time.
        self.lock = threading.Lock()

    @property
    def ident(self) -> str:
        return f"{self.prefix} {self.version[0]}.{self.version[1]} ({self.path})"

    def _fn(self, name: str):
        return getattr(self.lib, self.prefix + name)

    def compile(self, source: str, filename: str, options: list[str]) -> tuple[bool, str, bytes | None]:
        prog = ctypes.c_void_p()
        size = ctypes.c_size_t()
        with self.lock:
            rc = self._fn("CreateProgram")(ctypes.byref(prog), source.encode(), filename.encode(),
                                           0, None, None)
            if rc:
                return False, f"{self.prefix}CreateProgram failed with code {rc}", None
            try:
                argv = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
                rc = self._fn("CompileProgram")(prog, len(options), argv)
                self._fn("GetProgramLogSize")(prog, ctypes.byref(size))
                log_buf = ctypes.create_string_buffer(size.value + 1)
                self._fn("GetProgramLog")(prog, log_buf)
                log = log_buf.value.decode(errors="replace")
                if rc:
                    return False, log or f"{self.prefix}CompileProgram failed with code {rc}", None
                self._fn(f"Get{self.code}Size")(prog, ctypes.byref(size))
                code = ctypes.create_string_buffer(size.value)
                self._fn(f"Get{self.code}")(prog, code)
                return True, log, code.raw
            finally:
                self._fn("DestroyProgram")(ctypes.byref(prog))


def _nvrtc_path() -> str:
    """Where NVRTC is: found by cuda-pathfinder (pip wheels, conda, CUDA_PATH), else the library
    an older CuPy (without pathfinder) loaded itself, else the loader's search path."""
    try:
        from cuda import pathfinder

        return pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path
    except Exception as e:  # no pathfinder, or its not-found errors: try the other places
        why = f"{type(e).__name__}: {e}"
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()  # makes CuPy load its NVRTC into this process
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "/libnvrtc.so" in line:
                    return line.split()[-1]
    except Exception:  # no CuPy, or not Linux: the loader may still know a libnvrtc
        pass
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    raise ToolchainUnavailable(f"NVRTC not found ({why}); pip install nvidia-cuda-nvrtc "
                               "nvidia-cuda-runtime cuda-pathfinder")


@functools.cache
def _nvrtc() -> _RTC:
    path = _nvrtc_path()
    return _RTC(ctypes.CDLL(path), "nvrtc", "CUBIN", path)


#: hiprtc lives in libhiprtc.so from ROCm 6 on, inside libamdhip64 before (Debian ships ROCm 5.2)
_HIPRTC_LIBS = ("libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.5", "libamdhip64.so")


def _load_hiprtc() -> _RTC:
    """hiprtc loaded into this process: only ever called inside the worker (see _IsolatedRTC)."""
    tried = []
    for name in _HIPRTC_LIBS:
        for candidate in (name, f"/opt/rocm/lib/{name}"):
            try:
                lib = ctypes.CDLL(candidate)
                lib.hiprtcCreateProgram  # noqa: B018 - raises AttributeError if this lib lacks hiprtc
            except (OSError, AttributeError) as e:
                tried.append(f"{candidate}: {e}")
                continue
            return _RTC(lib, "hiprtc", "Code", candidate)
    raise ToolchainUnavailable("hiprtc not found (apt-get install hipcc libamdhip64-dev "
                               "rocm-device-libs, or a ROCm install); tried " + "; ".join(tried))


class _IsolatedRTC:
    """hiprtc driven in a worker process (``python -m accel.kernels.toolchains hiprtc-worker``), one JSON
    line per request. Why a process: ROCm's compiler (comgr) carries its own LLVM, and loading it
    where another LLVM already lives (PoCL's, for the OpenCL backend; or the other way round)
    aborts the process ("Option ... registered more than once"); hiprtc 5.2 also aborts on some
    inputs. In a worker either becomes a failed compile with the reason, and the caller lives."""

    prefix = "hiprtc"

    def __init__(self):
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        hello = self._start()
        self.version, self.path = tuple(hello["version"]), hello["path"]

    @property
    def ident(self) -> str:
        return f"hiprtc {self.version[0]}.{self.version[1]} ({self.path})"

    def _start(self) -> dict:
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "accel.kernels.toolchains", "hiprtc-worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        hello = self._reply()
        if hello is None:
            raise ToolchainUnavailable(f"the hiprtc worker died on start: {self._died()}")
        if "error" in hello:
            raise ToolchainUnavailable(hello["error"])
        return hello

    def _reply(self) -> dict | None:
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def _died(self) -> str:
        status = self.proc.wait()
        self.proc = None
        self.stderr.seek(0)
        tail = self.stderr.read().decode(errors="replace")[-2000:]
        return f"exit status {status}\n{tail}"

    def compile(self, source: str, filename: str, options: list[str]) -> tuple[bool, str, bytes | None]:
        with self.lock:
            if self.proc is None:
                self._start()
            try:
                self.proc.stdin.write(json.dumps({"source": source, "filename": filename,
                                                  "options": options}) + "\n")
                self.proc.stdin.flush()
                reply = self._reply()
            except OSError:  # the worker is gone (broken pipe)
                reply = None
            if reply is None:
                return False, f"hiprtc crashed compiling {filename}: {self._died()}", None
            # comgr names the source after its scratch file; say the caller's name instead
            log = re.sub(r"\S*/input/CompileSource", filename, reply["log"])
            return reply["ok"], log, base64.b64decode(reply["code"]) if reply["ok"] else None


def _hiprtc_worker() -> None:
    """The worker's loop: requests on stdin, replies on the original stdout; whatever the compiler
    itself prints goes to stderr so it cannot corrupt the protocol."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        rtc = _load_hiprtc()
    except ToolchainUnavailable as e:
        print(json.dumps({"error": str(e)}), file=out, flush=True)
        return
    print(json.dumps({"version": rtc.version, "path": rtc.path}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        ok, log, code = rtc.compile(req["source"], req["filename"], req["options"])
        print(json.dumps({"ok": ok, "log": log, "code": base64.b64encode(code).decode() if ok else ""}),
              file=out, flush=True)


@functools.cache
def _hiprtc() -> _IsolatedRTC:
    return _IsolatedRTC()


#: where ROCm keeps its device libraries (Debian's package, then ROCm installs before and after 6.2)
_AMD_BITCODE_DIRS = ("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/opt/rocm/amdgcn/bitcode",
                     "/opt/rocm/lib/llvm/lib/clang/*/lib/amdgcn/bitcode")


def _amd_device_library_missing(target: Target) -> str | None:
    """Why hiprtc cannot build ``target`` here, or None. Checked before compiling because
    hiprtc 5.2 aborts the whole process (heap corruption) instead of failing when the device
    library of the arch is absent, as for gfx1100 with Debian bookworm's rocm-device-libs 5.2."""
    arch = target.name.split(":")[0].removeprefix("gfx")
    dirs = [d for pattern in _AMD_BITCODE_DIRS for d in sorted(glob.glob(pattern))]
    if not dirs or any(Path(d, f"oclc_isa_version_{arch}.bc").exists() for d in dirs):
        return None
    return (f"the ROCm device library for gfx{arch} (oclc_isa_version_{arch}.bc) is not installed "
            f"in {', '.join(dirs)}: this ROCm predates the target (a newer ROCm builds it)")


_loading = threading.Lock()  # one library load / one worker, even when threads ask at once


def _rtc(target: Target) -> _RTC | _IsolatedRTC:
    if target.toolchain == "nvrtc":
        with _loading:
            return _nvrtc()
    with _loading:
        rtc = _hiprtc()
    if reason := _amd_device_library_missing(target):
        raise ToolchainUnavailable(f"hiprtc cannot target {target.name}: {reason}")
    return rtc


#: the AMD GPU processors LLVM's AMDGPU backend names (AMDGPUUsage, "Processors"), and the target
#: features a processor name may carry: hiprtc has no list to ask, and a misspelled arch must be
#: a usage error rather than "toolchain unavailable" (or a hiprtc crash on an unknown feature)
AMD_PROCESSORS = frozenset(
    [f"gfx{n}" for n in (600, 601, 602, 700, 701, 702, 703, 704, 705, 801, 802, 803, 805, 810,
                         900, 902, 904, 906, 908, 909, 940, 941, 942, 950, 1010, 1011, 1012, 1013,
                         1030, 1031, 1032, 1033, 1034, 1035, 1036, 1100, 1101, 1102, 1103, 1150,
                         1151, 1152, 1153, 1200, 1201)] + ["gfx90a", "gfx90c"])
AMD_FEATURES = ("sramecc", "xnack")


def check_target_supported(name: str) -> None:
    """An ArgumentError for an NVIDIA arch this NVRTC cannot build (``sm_999``: a typo is a usage
    error, not a kernel that failed to compile), or for an AMD processor or feature LLVM does not
    name; nothing where NVRTC is not installed (the check reports the target unavailable).

    >>> check_target_supported("gfx90a:xnack-")
    >>> check_target_supported("gfx9999")
    Traceback (most recent call last):
    ...
    accel.errors.ArgumentError: target: expected an AMD GPU processor LLVM names (e.g. gfx90a, gfx942, gfx1100), got 'gfx9999'
    """
    target = parse_target(name)
    if target.toolchain != "nvrtc":
        processor, *features = target.name.split(":")
        if processor not in AMD_PROCESSORS:
            raise ArgumentError(expected("target", "an AMD GPU processor LLVM names (e.g. gfx90a, "
                                         "gfx942, gfx1100)", repr(name)))
        if bad := [f for f in features if f[:-1] not in AMD_FEATURES]:
            raise ArgumentError(expected("target", "AMD target features sramecc or xnack, each "
                                         "followed by + or -", f"{bad[0]!r} in {name!r}"))
        return
    try:
        with _loading:
            lib = _nvrtc().lib
    except ToolchainUnavailable:
        return
    count = ctypes.c_int()
    if lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)) != 0:
        return
    archs = (ctypes.c_int * count.value)()
    if lib.nvrtcGetSupportedArchs(archs) != 0:
        return
    if int(_NVIDIA.fullmatch(target.name).group(1)) not in set(archs):
        raise ArgumentError(expected("target", "an NVIDIA arch this NVRTC builds (one of "
                                     f"{', '.join(f'sm_{a}' for a in archs)})", repr(name)))


def toolchain_version(target: str) -> str:
    """Which compiler library builds ``target``, with its version and path; raises
    ToolchainUnavailable (an accel.BackendUnavailable) if it is not installed.

    >>> toolchain_version("sm_90").startswith("nvrtc ")
    True
    """
    return _rtc(parse_target(target)).ident


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA header directories NVRTC sources are compiled with (cuda_fp16.h, cuda_bf16.h,
    mma.h with crt/mma.h): the nvidia-cuda-runtime wheel's (through cuda-pathfinder), then a CUDA
    toolkit's. Both where both exist: since CUDA 13 the runtime wheel lacks crt/mma.h (WMMA)
    unless the nvidia-cuda-crt wheel is installed, and a CUDA machine image often has the
    toolkit but not that wheel. Empty when neither is installed."""
    dirs = []
    try:
        from cuda import pathfinder

        if found := pathfinder.find_nvidia_header_directory("cudart"):
            dirs.append(str(found))
    except Exception:  # no pathfinder: the toolkit's headers alone
        pass
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda_fp16.h").exists():
            dirs.append(str(Path(root, "include")))
    return tuple(dict.fromkeys(dirs))


# -- options ------------------------------------------------------------------------------------
def build_options(target: Target, rtc_version: tuple[int, int], *, options: tuple[str, ...] = (),
                  defines: dict[str, object] | None = None,
                  include_dirs: tuple[str, ...] = ()) -> list[str]:
    """The full compiler command line for a target: arch, optimisation, includes, defines, then
    the caller's own options (last, so they can override).

    >>> build_options(parse_target("gfx90a"), (5, 2), defines={"WARP": 64})
    ['--offload-arch=gfx90a', '-O3', '-DWARP=64']
    """
    if target.toolchain == "nvrtc":
        opts = [f"--gpu-architecture={target.name}", "-std=c++17"]
        if rtc_version >= (12, 1):  # ptxas options reach NVRTC from 12.1 on
            opts.append("--ptxas-options=-v")
        opts += [f"-I{d}" for d in cuda_include_dirs()]
    else:
        opts = [f"--offload-arch={target.name}", "-O3"]
    opts += [f"-I{d}" for d in include_dirs]
    for key, value in (defines or {}).items():
        if not re.fullmatch(r"[A-Za-z_]\w*", str(key)):
            raise ArgumentError(expected("defines", "macro names that are C identifiers", repr(key)))
        opts.append(f"-D{key}" if value is None else f"-D{key}={value}")
    for o in options:
        if not isinstance(o, str):
            raise ArgumentError(expected("options", "a sequence of str", repr(o)))
    return opts + list(options)


# -- cache ----------------------------------------------------------------------------------------
#: part of every cache key: bump it when what an entry records changes
_CACHE_FORMAT = 2


def cache_dir() -> Path:
    """Where compiled binaries live: ``cache_root()/binaries`` (see accel.host)."""
    return cache_root() / "binaries"


def _header_digest(include_dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    """Digests of the headers in the caller's include dirs: editing a header must miss the cache."""
    out = []
    for d in include_dirs:
        for p in sorted(Path(d).glob("*")):
            if p.is_file() and p.suffix in (".h", ".cuh", ".hpp", ".inc"):
                out.append((str(p), hashlib.sha256(p.read_bytes()).hexdigest()))
    return out


def _load_cached(key: str, meta_path: Path, bin_path: Path) -> dict | None:
    try:
        meta = json.loads(meta_path.read_text())
        binary = bin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key \
            or hashlib.sha256(binary).hexdigest() != meta.get("sha256"):
        return None  # a torn, tampered or misplaced entry: rebuild rather than load it
    meta["binary"] = binary
    return meta


def compile_source(source: str, target: str, *, options: tuple[str, ...] = (),
                   defines: dict[str, object] | None = None, include_dirs: tuple[str, ...] = (),
                   filename: str = "kernel.cu", use_cache: bool = True,
                   sass: bool = False) -> CompileResult:
    """Compile CUDA C++ / HIP source for one GPU target (no GPU needed); never raises for a
    compile error (``ok`` is False and ``log`` says why). Raises ToolchainUnavailable when the
    target's compiler library is missing, ArgumentError for a bad target or option.

    ``sass=True`` also counts each NVIDIA kernel's machine-code opcodes (``detail["sass"]``,
    read with cuobjdump, stored with the cached entry); off by default because disassembling
    costs about as much as compiling, and running a kernel never needs it.

    Kernels meant to be looked up by name should be ``extern "C"``; otherwise their names in
    ``resources`` are the mangled ones.

    >>> r = compile_source('extern "C" __global__ void k(int* x) { x[0] = WIDTH; }', "gfx90a",
    ...                    defines={"WIDTH": 64})
    >>> r.ok, r.path.suffix
    (True, '.hsaco')
    """
    if not isinstance(source, str):
        raise ArgumentError(expected("source", "kernel source as str", type(source).__name__))
    tgt = parse_target(target)
    rtc = _rtc(tgt)
    if tgt.toolchain == "hiprtc" and rtc.path.endswith(".so.5"):
        # ROCm 5's hiprtc has hip_fp16.h's contents built in but not its include guard, so an
        # explicit #include <hip/hip_fp16.h> (right under hipcc) re-reads the system header and
        # redefines every half type; defining the guard makes that include the no-op it should be
        defines = {"HIP_INCLUDE_HIP_HIP_FP16_H": None, **(defines or {})}
    include_dirs = tuple(str(d) for d in include_dirs)
    argv = build_options(tgt, rtc.version, options=tuple(options), defines=defines,
                         include_dirs=include_dirs)
    key = hashlib.sha256(json.dumps([_CACHE_FORMAT, rtc.ident, tgt.name, argv, source,
                                     _header_digest(include_dirs)]).encode()).hexdigest()[:40]
    folder = cache_dir()
    bin_path, meta_path = folder / f"{key}{tgt.binary_suffix}", folder / f"{key}.json"
    if use_cache and (hit := _load_cached(key, meta_path, bin_path)):
        result = CompileResult(tgt.name, True, hit["log"], rtc.ident, hit["binary"], bin_path,
                               {k: KernelResources(**v) for k, v in hit["resources"].items()},
                               hit["resources_note"], cached=True)
        if not (sass and tgt.vendor == "nvidia" and not _has_sass(result)):
            return result
        result = _with_sass(result)
    else:
        ok, log, binary = rtc.compile(source, filename, argv)
        if not ok:
            return CompileResult(tgt.name, False, log, rtc.ident)
        try:
            atomic_write(bin_path, binary)
        except OSError:  # an unwritable cache must not stop compiling: keep this one in a temp dir
            folder = Path(tempfile.mkdtemp(prefix="accel-binaries-"))
            bin_path, meta_path = folder / bin_path.name, folder / meta_path.name
            atomic_write(bin_path, binary)
        if tgt.vendor == "nvidia":
            resources, note = parse_ptxas_log(log), ("" if "ptxas" in log else
                                                     "this NVRTC is older than 12.1: no ptxas report")
        else:
            resources, note = amd_code_object_resources(bin_path)
        result = CompileResult(tgt.name, True, log, rtc.ident, binary, bin_path, resources, note)
        if sass and tgt.vendor == "nvidia":
            result = _with_sass(result)
    meta = {"log": result.log, "resources": {k: asdict(v) for k, v in result.resources.items()},
            "resources_note": result.resources_note, "key": key, "toolchain": rtc.ident,
            "sha256": hashlib.sha256(result.binary or b"").hexdigest(), "target": tgt.name,
            "options": argv}
    try:
        atomic_write(meta_path, json.dumps(meta).encode())
    except OSError:  # a read-only cache that already held the binary: the SASS is not kept
        pass
    return result


def _has_sass(result: CompileResult) -> bool:
    return any("sass" in r.detail for r in result.resources.values())


def _with_sass(result: CompileResult) -> CompileResult:
    counts, sass_note = sass_counts(result.path)
    resources = {k: replace(v, detail={**v.detail, "sass": counts[k]}) if k in counts else v
                 for k, v in result.resources.items()}
    note = "; ".join(n for n in (result.resources_note, sass_note) if n)
    return replace(result, resources=resources, resources_note=note)


__all__ = ["DEFAULT_TARGETS", "Target", "parse_target", "cuda_arch", "hip_arch", "default_warp_size",
           "CompileResult", "compile_source", "toolchain_version", "cuda_include_dirs",
           "build_options", "cache_dir", "ToolchainUnavailable"]


if __name__ == "__main__" and sys.argv[1:] == ["hiprtc-worker"]:
    _hiprtc_worker()
