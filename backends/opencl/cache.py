"""Program cache: in memory per device, and on disk across processes.

Disk entries are keyed by a hash of (source, options) in a directory per compiler identity
(platform, driver and device versions, pyopencl version), so a driver upgrade never loads a stale
binary. Entries are written to a temporary file and renamed into place, so concurrent builders
never see half an entry; each entry carries a checksum of its key and payload, so a truncated or
corrupt one, or one copied under another program's name, is deleted and rebuilt instead of being
loaded.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path

import pyopencl as cl

from accel.errors import CompileError
from accel.host import atomic_write, cache_root, read_regular

from accel.backends.opencl.compiler_caches import pyopencl_cache_dir
from accel.backends.opencl.devices import CLDevice

_MAGIC = b"ACCELCL2"


def device_dir(dev: CLDevice, kind: str) -> Path:
    return cache_root() / "opencl" / kind / hashlib.sha256(dev.cache_key.encode()).hexdigest()[:24]


def _pack(key: str, payload: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(key.encode() + payload).digest() + payload


def _unpack(key: str, blob: bytes) -> bytes | None:
    """The payload of an entry written under ``key``; None for anything else."""
    head = len(_MAGIC) + 32
    if len(blob) <= head or not blob.startswith(_MAGIC):
        return None
    payload = blob[head:]
    return payload if hashlib.sha256(key.encode() + payload).digest() == blob[len(_MAGIC):head] else None


#: built programs kept in memory per device, least recently used dropped first (one is rebuilt, from
#: the driver's or accel's disk cache: about 0.05 s on PoCL); the full conformance profile builds 195
PROGRAMS_KEPT = 512


class ProgramCache:
    """Built programs for one device and context: in memory, and on disk unless the driver keeps
    its builds itself. Asking PoCL for a program's binary compiles every kernel in it, about 2 s
    for one of quant.cl's 7-kernel programs against 0.8 s for the build, while a build that hits
    PoCL's own cache takes 0.05 s: a copy of ours would only cost time."""

    def __init__(self, ctx: cl.Context, dev: CLDevice, target: str):
        self.ctx, self.dev, self.target = ctx, dev, target
        self.on_disk = not dev.driver_caches_builds
        self._mem: OrderedDict[tuple[str, tuple[str, ...]], cl.Program] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"memory": 0, "disk": 0, "built": 0, "corrupt": 0}

    def program(self, text: str, options: tuple[str, ...], what: str, *,
                keep: bool = True) -> cl.Program:
        """The built program for ``text`` and ``options``; ``what`` names it in errors.
        ``keep=False``: built every time, kept nowhere (a source that includes files: they are
        not in the key, and an edited header would run stale; pyopencl's and PoCL's own caches,
        which hash what was included, still apply)."""
        if not keep:
            return self._build(text, options, what)
        key = (text, options)
        with self._lock:  # threads share the backend; builds run outside the lock
            prg = self._mem.get(key)
            if prg is not None:
                self.stats["memory"] += 1
                self._mem.move_to_end(key)  # the least recently used is dropped first
                return prg
            while len(self._mem) >= PROGRAMS_KEPT:  # bounded: a user kernel specialized per
                self._mem.popitem(last=False)  # step by its defines is a new program each time
        if not self.on_disk:
            prg = self._mem[key] = self._build(text, options, what)
            return prg
        # the entry format is part of the name: another accel version sharing the cache keeps
        # its own entries instead of rebuilding over these (and they over its) on every run
        digest = hashlib.sha256(repr((_MAGIC, key)).encode()).hexdigest()
        path = device_dir(self.dev, "programs") / f"{digest}.bin"
        prg = self._load(path, digest, options)
        if prg is None:
            prg = self._build(text, options, what)
            try:
                atomic_write(path, _pack(digest, prg.binaries[0]))
            except OSError:
                pass  # a read-only or full cache directory costs a rebuild next time, nothing more
        self._mem[key] = prg
        return prg

    def _load(self, path: Path, digest: str, options: tuple[str, ...]) -> cl.Program | None:
        blob = read_regular(path)
        if blob is None:
            return None
        binary = _unpack(digest, blob)
        if binary is not None:
            try:
                prg = cl.Program(self.ctx, [self.dev.device], [binary]).build(list(options))
                self.stats["disk"] += 1
                return prg
            except cl.Error:
                pass
        self.stats["corrupt"] += 1
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only cache: the rebuilt program is used without being stored
        return None

    def _build(self, text: str, options: tuple[str, ...], what: str) -> cl.Program:
        try:
            prg = cl.Program(self.ctx, text).build(list(options), cache_dir=pyopencl_cache_dir())
        except cl.Error as e:
            raise CompileError(what, self.target, f"{e}\n(options: {' '.join(options)})") from None
        self.stats["built"] += 1
        return prg
