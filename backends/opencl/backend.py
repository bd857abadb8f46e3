"""OpenCLBackend: accel's op contract on one OpenCL device, through pyopencl.

Memory is ``pyopencl.Buffer``; views are sub-buffers. Every op runs one of the shared kernels in
``accel.kernels`` built for this device with parameters from ``params.py``; launch plans (kernel,
sizes, constant arguments) are cached per spec, so a repeated call sets its buffer arguments and
enqueues, nothing more. Work is enqueued asynchronously on an in-order, profiling-enabled queue;
only ``download`` and ``synchronize`` wait.
"""
from __future__ import annotations

import contextlib
import json
import math
import threading
import time as _time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pyopencl.tools as cl_tools

import accel.kernels as K
from accel.backend import DeviceInfo
from accel.backends.runtime import KernelRuntime
from accel.dtypes import to_numpy_dtype
from accel.errors import ArgumentError, CompileError, DeviceError, UnsupportedError, expected
from accel.host import host_bytes_free, host_memory_error
from accel.tensor import Tensor
from accel.kernel import Param, check_args, includes_files

from accel.backends.opencl.cache import ProgramCache
from accel.backends.opencl.devices import FORK_GUARD, CLDevice, enumerate_devices, skipped_devices
from accel.backends.plan import DeviceFacts, Launch, Operand, Placeholder, Scratch, Upload
from accel.backends.opencl.params import build_options, params_for, tuned_in_effect

# buffers from this size on are weighed against the memory left before they are made: a failed
# allocation aborts the process inside PoCL (an assertion) instead of returning an error
_CHECKED_BYTES = 1 << 26
_RESOURCE_CODES = {
    "OUT_OF_RESOURCES": "the device ran out of resources (registers, private or local memory)",
    "OUT_OF_HOST_MEMORY": "the host ran out of memory",
    "MEM_OBJECT_ALLOCATION_FAILURE": "the device could not allocate the buffer",
    "INVALID_WORK_GROUP_SIZE": "the work-group size is invalid for this kernel and device",
    "INVALID_WORK_ITEM_SIZE": "a work-group dimension exceeds the device's limit",
    "INVALID_GLOBAL_WORK_SIZE": "the global size is invalid for this device",
    "INVALID_BUFFER_SIZE": "the buffer size is invalid for this device",
    "INVALID_KERNEL_ARGS": "a kernel argument was not set or has the wrong size",
    "INVALID_ARG_SIZE": "a kernel argument has the wrong size for its parameter",
    "INVALID_MEM_OBJECT": "a kernel argument is not a buffer of this context",
}


@dataclass
class CompiledKernel:
    """A user kernel built by ``OpenCLBackend.compile``; ``params``: each parameter's (name,
    address space, type) where the driver reports them (empty where it does not)."""

    name: str
    kernel: cl.Kernel
    max_work_group: int
    params: tuple[Param, ...] = ()


#: work per launch and compute unit on a CPU device, where a running kernel holds every core
#: and cannot be stopped: about 0.25 s at the 40 GFLOP/s PoCL reached over 2 cores with
#: attention, so that Ctrl-C waits for at most two such pieces
CPU_LAUNCH_FLOPS = 5 * 10**9

#: work-groups one launch may have: PoCL 3.1 killed the process (SIGILL) at 2**32 blocks of one
#: work-item, and ran 2**32 - 1 (10 s on 2 cores)
MAX_WORK_GROUPS = 2**32 - 1


def _params(kernel: cl.Kernel) -> tuple[Param, ...]:
    """(name, address space, type) per parameter, from the arg info that ``-cl-kernel-arg-info``
    keeps; () where the driver keeps none."""
    info, space = cl.kernel_arg_info, cl.kernel_arg_address_qualifier
    try:
        return tuple((kernel.get_arg_info(i, info.NAME),
                      space.to_string(kernel.get_arg_info(i, info.ADDRESS_QUALIFIER)).lower(),
                      kernel.get_arg_info(i, info.TYPE_NAME).strip().rstrip("*"))
                     for i in range(kernel.num_args))
    except (cl.Error, ValueError):
        return ()


def _tuned_text(dev) -> str:
    """The tuned parameters the kernels of ``dev`` use, as compact JSON ("none" when nothing
    stored applies)."""
    used, _ = tuned_in_effect(dev)
    return json.dumps(used, sort_keys=True, separators=(",", ":")) if used else "none"


def _code_name(e: cl.Error) -> str:
    code = getattr(e, "code", None)
    try:
        return cl.status_code.to_string(code) if code is not None else ""
    except ValueError:
        return str(code)


_MAX_KERNELS = 512  # kernel objects kept per backend (a user kernel's scalar sets may not repeat)


class _SharedKernel:
    """A kernel object with its scalar arguments set, shared by every plan launch of one
    (program, kernel, scalars): pyopencl builds an object's argument setter when it
    is made (80-250 us, through its disk cache) and sets a scalar in ~7 us (a buffer in ~0.1),
    so neither is paid per call. A plan launch's constant buffers are set again when another
    plan set the object last; ``lock`` covers that, the per-call buffers and the enqueue."""

    __slots__ = ("kernel", "lock", "owner")

    def __init__(self, kernel: cl.Kernel):
        self.kernel, self.lock, self.owner = kernel, threading.Lock(), None

    def claim(self, owner: object, constants: list[tuple[int, Any]]) -> cl.Kernel:
        """The kernel with ``constants`` (argument index, buffer) set, once per change of
        ``owner``; call under ``lock``."""
        if self.owner is not owner:
            for i, value in constants:
                self.kernel.set_arg(i, value)
            self.owner = owner
        return self.kernel


class OpenCLBackend(KernelRuntime):
    """accel on one OpenCL device (``opencl:N``, in the order of docs/opencl.md).

    >>> import accel, numpy as np
    >>> be = accel.get_backend("opencl:0")
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> accel.matmul(a, a.T, backend=be).tolist()
    [[5.0, 14.0], [14.0, 50.0]]
    """
    name = "opencl"
    priority = 5

    def __init__(self, index: int = 0):
        super().__init__(index)
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        self.dev: CLDevice = enumerate_devices()[index]
        self.alignment = self.dev.mem_align_bytes
        self.facts = DeviceFacts("opencl", self.dev.compute_units, self.dev.local_mem,
                                 self.dev.mem_align_bytes, self.dev.correctly_rounded_divide,
                                 self.dev.denormals, self.dev.fp64,  # what the planner reads
                                 launch_flops=CPU_LAUNCH_FLOPS * self.dev.compute_units
                                 if self.dev.kind == "cpu" else 0)
        self._paced: cl.Event | None = None  # the last paced launch enqueued
        self.ctx = cl.Context([self.dev.device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self._pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        self.programs = ProgramCache(self.ctx, self.dev, f"{self.device_id} ({self.dev.name})")
        self._shared: dict[tuple, _SharedKernel] = {}  # by (program id, kernel name, scalars)
        self._variant_programs: dict[tuple, cl.Program] = {}  # by (variant id, kernel name)
        self.params = params_for(self.dev)
        self.build_options = build_options(self.dev)  # every program's, recorded in versions()
        self._launch_lock = threading.Lock()
        self._recording: list[cl.Event] | None = None
        self._placeholder = cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY, 16)
        self._abandoned: list[cl.Event] = []  # waits interrupted before their event completed
        self._copy: cl.Kernel | None = None  # gather()'s kernel, built on first use

    @property
    def params(self) -> dict[str, dict]:
        """Kernel tile parameters per op (DEFAULT_TILES, or what ``accel tune`` stored). Assign
        a new dict to change them: launch plans and supports() verdicts depend on them."""
        return self._params

    @params.setter
    def params(self, value: dict[str, dict]) -> None:
        self._params = value
        self.settings_changed()

    @property
    def tiles(self) -> dict[str, dict]:  # the planner's name for them
        return self._params

    # -- discovery -------------------------------------------------------------------------
    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [d.info() for d in enumerate_devices()]

    @classmethod
    def skipped_devices(cls) -> list[str]:
        return list(skipped_devices())

    @classmethod
    def auto_priority(cls, devices: list[DeviceInfo]) -> int:
        """Above the CPU reference (10) with a GPU, below it when every device is a CPU: numpy's
        BLAS beats an OpenCL CPU device on the same cores."""
        return 20 if any(d.extra.get("kind") == "gpu" for d in devices) else 5

    def versions(self) -> dict[str, str]:
        return {"pyopencl": cl.VERSION_TEXT, "opencl_platform": self.dev.platform_version,
                "opencl_driver": self.dev.driver_version, "opencl_device": self.dev.name,
                "opencl_build_options": " ".join(self.build_options),
                # what `accel tune` stored for this device and the kernels use: two machines'
                # files differ here when their tuning does
                "opencl_tuned": _tuned_text(self.dev)}

    # -- errors --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _device_errors(self, what: str) -> Iterator[None]:
        """OpenCL failures become DeviceError naming the call, the status and what it means."""
        try:
            yield
        except cl.Error as e:
            code = _code_name(e)
            meaning = _RESOURCE_CODES.get(code, "the OpenCL runtime refused the request")
            raise DeviceError(f"{what} on {self.device_id} ({self.dev.name}): {meaning} "
                              f"[{code or type(e).__name__}]: {e}") from None

    # -- memory ----------------------------------------------------------------------------------
    # every op allocates its output and every host copy enters here or at a wait: where a forked
    # child is stopped before it blocks (FORK_GUARD)
    def alloc(self, nbytes: int) -> cl.Buffer:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        if nbytes >= _CHECKED_BYTES:
            self._check_room(nbytes)
        try:  # the per-call path: no error message is built up front
            # pooled, so a result's buffer returns for reuse when its Tensor dies
            return self._pool.allocate(max(1, nbytes))
        except cl.Error:
            with self._device_errors(f"allocating {nbytes} bytes"):
                raise

    def upload(self, host: np.ndarray) -> cl.Buffer:
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        if host.nbytes == 0:
            return self.alloc(0)
        if host.nbytes >= _CHECKED_BYTES:  # before any host copy of a strided view
            self._check_room(host.nbytes)
        host = np.ascontiguousarray(host)
        with self._device_errors(f"uploading {host.nbytes} bytes"):
            return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                             hostbuf=host)

    def _check_room(self, nbytes: int) -> None:
        """Refuse a buffer the device cannot hold, up front: larger than its largest allocation,
        than its memory less the pool's live and held blocks (uploads are not counted: buffers
        cannot be watched for their end), or, on a CPU device, than the host memory left."""
        if nbytes > self.dev.max_alloc:
            raise DeviceError(expected("nbytes", f"at most {self.dev.max_alloc} bytes (the device's "
                                       "CL_DEVICE_MAX_MEM_ALLOC_SIZE)", nbytes))
        if self._pool.managed_bytes + nbytes > self.dev.global_mem:
            self._pool.free_held()  # blocks kept for reuse give way first
            left = self.dev.global_mem - self._pool.active_bytes
            if nbytes > left:
                raise DeviceError(expected("nbytes", f"at most the {left} bytes {self.device_id} has "
                                           "left (CL_DEVICE_GLOBAL_MEM_SIZE less live buffers)", nbytes))
        if self.dev.kind == "cpu" and nbytes + _CHECKED_BYTES > host_bytes_free():
            self._pool.free_held()
            if nbytes + _CHECKED_BYTES > host_bytes_free():
                raise host_memory_error("nbytes", nbytes, f"a buffer on {self.device_id}, a CPU "
                                        "device, with room for the runtime")

    def download(self, buf: cl.Buffer, nbytes: int) -> np.ndarray:
        host = np.empty(nbytes, np.uint8)
        if nbytes:
            with self._device_errors(f"downloading {nbytes} bytes"):
                copied = cl.enqueue_copy(self.queue, host, buf, is_blocking=False)
            self._wait(copied, f"downloading {nbytes} bytes")
        return host

    def view(self, buf: cl.Buffer, offset: int, nbytes: int) -> cl.Buffer:
        if not isinstance(buf, cl.Buffer):
            raise ArgumentError(expected("buf", "a buffer made by upload() (pooled alloc() buffers "
                                         "cannot be sub-viewed)", type(buf).__name__))
        if offset % self.alignment:
            raise ArgumentError(expected("offset", f"a multiple of {self.alignment} bytes "
                                         "(CL_DEVICE_MEM_BASE_ADDR_ALIGN)", offset))
        with self._device_errors(f"viewing bytes [{offset}, {offset + nbytes})"):
            return buf.get_sub_region(offset, max(1, nbytes))

    def write(self, dst, src) -> None:
        """``Tensor.__setitem__``'s device write: contiguous ``src`` into view ``dst`` with
        rectangular buffer copies (clEnqueueCopyBufferRect), three merged dims per copy,
        enqueued and not waited for: both are device buffers, ordered by the in-order queue
        (a decode step writes its KV cache once per layer: a wait each time would stall the
        host until the device caught up)."""
        item = to_numpy_dtype(dst.dtype).itemsize
        dims = [(n, st) for n, st in zip(dst.shape, dst.strides) if n != 1]
        merged: list[list[int]] = []
        for n, st in dims:  # fold an axis into the one before it where memory runs on
            if merged and merged[-1][1] == st * n:
                merged[-1] = [merged[-1][0] * n, st]
            else:
                merged.append([n, st])
        if not merged:
            merged = [[1, 1]]
        if merged[-1][1] != 1 or any(st < 0 for _, st in merged):
            raise UnsupportedError(self.name, "Tensor.__setitem__", dst.dtype, "the indexed view "
                                   "must have unit, non-negative strides along its last axis "
                                   "(no reversed or stepped last axis)")
        inner, outer = merged[-3:], merged[:-3]
        inner = [[1, 0]] * (3 - len(inner)) + inner  # [z, y, x], x contiguous
        region = (inner[2][0] * item, inner[1][0], inner[0][0])
        dst_pitches = (inner[1][1] * item, inner[0][1] * item)
        src_pitches = (region[0], region[0] * region[1])
        per = region[0] * region[1] * region[2]
        with self._device_errors("writing a tensor view (Tensor.__setitem__)"):
            for k, index in enumerate(np.ndindex(*[n for n, _ in outer])):
                origin = dst.offset * item + sum(i * st * item for i, (_, st) in zip(index, outer))
                cl.enqueue_copy(self.queue, dst.buf, src.buf, src_origin=(k * per, 0, 0),
                                dst_origin=(origin, 0, 0), region=region,
                                src_pitches=src_pitches, dst_pitches=dst_pitches)

    def gather(self, src, dtype: str) -> Any:
        """The view's elements in C order as ``dtype``, copied by kernels/copy.cl on the device
        (bit for bit, or converted between float formats); other conversions, and views of more
        than ``COPY_DIMS`` dims after merging, through the host."""
        # a few groups per compute unit; on a CPU device each group more costs its scheduling,
        # and a work-item copying along whole rows beats neighbours taking one element each
        cpu = self.dev.kind == "cpu"
        plan = K.copy_plan(src.shape, src.strides, src.offset, src.dtype, dtype,
                           groups=8 * max(1, self.info.compute_units), lanes=1 if cpu else 256)
        if plan is None:
            return super().gather(src, dtype)
        grid, block, scalars = plan
        out = self.alloc(math.prod(src.shape) * to_numpy_dtype(dtype).itemsize)
        if not math.prod(src.shape):
            return out
        if self._copy is None:
            self._copy = self.kernel(K.COPY, "strided_copy")
        kernel = self._copy
        with self._launch_lock:
            kernel.set_args(src.buf, out, *scalars)
            self._enqueue(kernel, (grid[0] * block[0], grid[1] * block[1]), block[:2],
                          "strided copy")
        return out

    def import_array(self, x: Any) -> Any | None:
        """The buffer of a ``pyopencl.array.Array`` made in this backend's context (zero-copy;
        its strides and offset travel with the tensor); None for any other array. Work queued
        on the array's own queue is finished first, so that accel's queue reads its data."""
        if not isinstance(x, cl_array.Array) or x.context != self.ctx:
            return None
        if x.queue is not None and x.queue != self.queue:
            x.queue.finish()
        return x.base_data

    def export_array(self, tensor) -> cl_array.Array:
        """A ``pyopencl.array.Array`` on this backend's queue viewing ``tensor`` (zero-copy,
        strides and offset included): what an op returns for pyopencl inputs. It has no
        ``__dlpack__``: OpenCL memory has no DLPack device."""
        item = to_numpy_dtype(tensor.dtype).itemsize
        return cl_array.Array(self.queue, tensor.shape, to_numpy_dtype(tensor.dtype),
                              data=tensor.buf, offset=tensor.offset * item,
                              strides=tuple(s * item for s in tensor.strides))

    def synchronize(self) -> None:
        with self._device_errors("synchronizing"):
            marker = cl.enqueue_marker(self.queue)  # completes when all work before it has
        self._wait(marker, "synchronizing")

    def _wait(self, event: cl.Event, what: str) -> None:
        """Wait for ``event`` in short sleeps, not in one blocking call that never returns to
        the interpreter: Ctrl-C (KeyboardInterrupt) then arrives within a millisecond however
        long the device works. The sleeps double from 50 us up to 1 ms, so the wait ends at most
        a millisecond after the device (a decode step waits once for its logits: with 20 ms
        sleeps it overslept by up to 20 ms a token). An interrupted wait keeps the event, and
        with it the host buffer a copy writes into, until the device is done with them
        (pyopencl's copy events would otherwise block in their destructor, and the device would
        write into freed memory)."""
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        if self._abandoned:
            self._abandoned = [e for e in self._abandoned if e.command_execution_status > 0]
        with self._device_errors(what):
            self.queue.flush()  # polling alone does not submit queued work
        delay = 0.0
        try:
            # COMPLETE is 0, RUNNING, SUBMITTED and QUEUED above it, failures below
            while event.command_execution_status > 0:
                _time.sleep(delay)
                delay = min(2 * delay + 5e-5, 1e-3)
        except BaseException:
            self._abandoned.append(event)
            raise
        with self._device_errors(what):
            event.wait()  # returns at once; raises the failure of a failed command

    # -- timing ----------------------------------------------------------------------------------
    def time(self, fn: Callable[[], Any]) -> float:
        """Device seconds from the first kernel ``fn`` enqueues starting to the last one ending,
        read from profiling events (host clock when ``fn`` enqueues no kernel)."""
        self.synchronize()
        self._recording = events = []
        t0 = _time.perf_counter()
        try:
            fn()
        finally:
            self._recording = None
        self.synchronize()
        host = _time.perf_counter() - t0
        if not events:
            return host
        start = min(e.profile.start for e in events)
        end = max(e.profile.end for e in events)
        return (end - start) * 1e-9

    def _enqueue(self, kernel: cl.Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                 what: str, offset: tuple[int, ...] | None = None) -> cl.Event:
        try:  # not _device_errors: this is the per-call path, so no message is built up front
            ev = cl.enqueue_nd_range_kernel(self.queue, kernel, gsize, lsize, offset)
        except cl.Error:
            with self._device_errors(f"launching {what} (global {gsize}, local {lsize})"):
                raise
        if self._recording is not None:
            self._recording.append(ev)
        return ev

    # -- user kernels ------------------------------------------------------------------------------
    def compile(self, source: str, name: str, *, options: tuple[str, ...] = (),
                dialect: str = "accel") -> CompiledKernel:
        """Build kernel ``name`` from ``source`` (cached in memory and on disk).

        ``dialect`` "accel" prepends the portability header (kernels/accel.h); "opencl" builds
        the text as it is. Build failures raise CompileError carrying the log and the name.
        """
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        if dialect not in ("accel", "opencl"):
            raise UnsupportedError(self.device_id, "user kernels", "", f"dialect {dialect!r}: the OpenCL "
                                   "backend builds 'accel' and 'opencl' sources (translate CUDA first)")
        if not isinstance(source, str) or not isinstance(name, str) or not name:
            raise ArgumentError(expected("source, name", "kernel source text and a kernel name",
                                         f"{type(source).__name__}, {name!r}"))
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise ArgumentError(expected("options", "a tuple of compiler option strings",
                                         repr(options)))
        text = K.program_text(source, name) if dialect == "accel" else source
        # the parameters' names, address spaces and types, for launch to check the arguments
        prg = self.programs.program(text, self.build_options + ("-cl-kernel-arg-info", *options),
                                    name, keep=not includes_files(source))
        try:
            kernel = cl.Kernel(prg, name)
        except cl.Error:
            found = sorted(k.function_name for k in prg.all_kernels())
            raise CompileError(name, self.programs.target,
                               f"the program built but has no kernel named {name!r}; it has {found}") from None
        wg = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.dev.device)
        return CompiledKernel(name, kernel, wg, _params(kernel))

    def launch(self, kernel: CompiledKernel, grid: tuple[int, ...], block: tuple[int, ...],
               args: list, shared_mem: int = 0) -> None:
        """Enqueue with CUDA semantics: global size = grid x block, local size = block; a
        ``shared_mem`` > 0 adds one trailing ``__local`` buffer of that many bytes."""
        if FORK_GUARD.forked_from is not None:
            raise FORK_GUARD.error()
        if not isinstance(kernel, CompiledKernel):
            raise ArgumentError(expected("kernel", "a kernel from OpenCLBackend.compile",
                                         type(kernel).__name__))
        grid, block = self._dims("grid", grid), self._dims("block", block)
        if math.prod(block) > kernel.max_work_group:
            raise ArgumentError(expected("block", f"at most {kernel.max_work_group} work-items for "
                                         f"kernel {kernel.name!r} on this device", block))
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, (int, np.integer)) \
                or not 0 <= shared_mem <= self.dev.local_mem:
            raise ArgumentError(expected("shared_mem", f"0..{self.dev.local_mem} bytes (the "
                                         "device's local memory)", repr(shared_mem)))
        if math.prod(grid) > MAX_WORK_GROUPS:
            raise ArgumentError(expected("grid", f"at most {MAX_WORK_GROUPS:,} blocks in all on "
                                         "OpenCL (PoCL counts work-groups in 32 bits, and aborts "
                                         "the process past that)", grid))
        check_args(kernel.params, args, shared_mem, opencl=True)
        values = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                values.append(self.launch_buffer(i, a))
            elif isinstance(a, (np.generic, cl.MemoryObjectHolder, cl.LocalMemory)):  # np.void: float4
                values.append(a)
            else:
                raise ArgumentError(expected(f"args[{i}]", "an accel.Tensor or a numpy scalar "
                                             "(e.g. np.int32(3), np.float32(0.5))", type(a).__name__))
        if shared_mem:
            values.append(cl.LocalMemory(shared_mem))
        if len(values) != kernel.kernel.num_args:
            raise ArgumentError(expected("args", f"{kernel.kernel.num_args - bool(shared_mem)} "
                                         f"arguments for kernel {kernel.name!r}"
                                         + (" (plus the shared_mem buffer)" if shared_mem else ""),
                                         len(args)))
        gsize = tuple(g * b for g, b in zip(grid, block))
        with self._launch_lock:  # set_args + enqueue on one shared cl.Kernel must not interleave
            with self._device_errors(f"setting the arguments of {kernel.name!r}"):
                kernel.kernel.set_args(*values)
            self._enqueue(kernel.kernel, gsize, block, f"kernel {kernel.name!r}")

    def _shared_kernel(self, program: cl.Program, name: str, scalars: tuple, first: int) -> _SharedKernel:
        """The kernel object of (program, name) with ``scalars`` set from argument ``first``
        on; objects past _MAX_KERNELS are dropped (users still holding one keep it)."""
        key = (program.int_ptr, name, scalars)
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= _MAX_KERNELS:
                self._shared.clear()
            kernel = cl.Kernel(program, name)
            for i, value in enumerate(scalars, first):
                kernel.set_arg(i, value)
            shared = self._shared.setdefault(key, _SharedKernel(kernel))
        return shared

    @staticmethod
    def _dims(arg: str, dims: Any) -> tuple[int, ...]:
        try:
            t = tuple(int(d) for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
        except (TypeError, ValueError):
            t = ()
        if not 1 <= len(t) <= 3 or min(t) < 1:
            raise ArgumentError(expected(arg, "1 to 3 positive sizes", repr(dims)))
        return t

    # -- kernels of the ops -------------------------------------------------------------------------
    def _program(self, text: str, options: tuple[str, ...], what: str) -> cl.Program:
        return self.programs.program(text, self.build_options + options, what)

    def kernel(self, variant: K.Variant, name: str) -> cl.Kernel:
        """A fresh kernel object of a shipped variant (its own argument slots)."""
        prg = self._program(K.program_text(variant.source), tuple(variant.options()),
                            f"{name} ({variant.id})")
        return cl.Kernel(prg, name)

    # -- plans (backends/plan.py): a launch bound to a kernel object of its own -------------------
    def bind(self, launch: Launch, index: dict[str, int]) -> Callable[..., None]:
        """The launch on a kernel object of its own, so its constant arguments are set once here;
        a call sets only the per-call buffers (pyopencl's scalar set_arg costs ~7 us each, a
        buffer's ~0.1 us)."""
        key = (launch.variant.id, launch.kernel)
        program = self._variant_programs.get(key)
        if program is None:  # through kernel(): what a subclass builds for a variant, plans run
            program = self._variant_programs[key] = self.kernel(launch.variant, launch.kernel).program
        shared = self._shared_kernel(program, launch.kernel, tuple(launch.scalars), len(launch.buffers))
        picks, constants = [], []  # (argument, index into the call's buffers); (argument, buffer)
        for i, slot in enumerate(launch.buffers):
            if isinstance(slot, (Operand, Scratch)):
                picks.append((i, index[slot.name]))
            else:
                constants.append((i, self._constant(slot)))
        lsize = launch.block
        gsize, what = tuple(g * b for g, b in zip(launch.grid, lsize)), launch.what
        offset = tuple(o * b for o, b in zip(launch.offset, lsize)) if any(launch.offset) else None
        owner = object()  # this binding: its constants are set again after another's

        def run(*bufs) -> None:
            if FORK_GUARD.forked_from is not None:  # a caller's own output tensor skips alloc()
                raise FORK_GUARD.error()
            with shared.lock:
                kernel = shared.claim(owner, constants)
                for i, j in picks:
                    kernel.set_arg(i, bufs[j])
                ev = self._enqueue(kernel, gsize, lsize, what, offset)
            if launch.paced:  # one piece running, one queued behind it: no more
                before, self._paced = self._paced, ev
                if before is not None:
                    self._wait(before, what)

        run.constants = constants  # OpenCL does not retain buffers set as arguments: the plan must
        return run

    def scratch_buffers(self, sizes: tuple[int, ...]) -> tuple:
        """Pooled buffers: each returns for reuse only behind the work already queued on the
        in-order queue."""
        return tuple(map(self.alloc, sizes))

    def _constant(self, slot: Upload | Placeholder) -> cl.Buffer:
        return self.upload(slot.host) if isinstance(slot, Upload) else self._placeholder
