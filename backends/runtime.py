"""What every kernel runtime (OpenCL, CUDA, HIP) shares beyond ``accel.backend.Backend``:
running any plan of backends/plan.py (:class:`KernelRuntime`), accel.nn's decoder-step ops
included."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import accel.kernels as K
from accel.backend import Backend, Support
from accel.backends.plan import OPERANDS, DeviceFacts, Launch, Plan, Scratch, accumulator, plan_for, support
from accel.spec import Spec

_MAX_PLANS = 512  # bound plans kept per backend (a decode loop makes a new spec per step)


def _buffers(op: str, out: Any, inputs: tuple) -> tuple:
    """A call's buffers in plan.OPERANDS order: the inputs (None for absent optional ones, also
    trailing ones left out), then the output (the outputs, for a tuple of them)."""
    outs = out if isinstance(out, tuple) else (out,)
    missing = len(OPERANDS[op]) - len(outs) - len(inputs)
    return (*(None if t is None else t.buf for t in inputs), *(None,) * missing, *(o.buf for o in outs))


class KernelRuntime(Backend):
    """A backend that computes every op by running the plan backends/plan.py gives for its
    device facts and tiles: a runtime supplies building and enqueueing (:meth:`bind`), scratch
    memory (:meth:`scratch_buffers`) and, where adopted arrays may be less aligned than its own
    buffers, :meth:`operand_alignment`; it has no per-op methods.

    A new runtime (Vulkan, Level Zero) is such a class with its device facts and a registry row.
    """

    #: the formats and x_formats the shared kernels compute (the rest: kernels.kernel_declines)
    formats = K.KERNEL_FORMATS + K.KQUANT_FORMATS + K.CODEBOOK_FORMATS
    x_formats = K.KERNEL_X_FORMATS + ("q8_1", "q8_k")
    attention_options = True  # attention.cl's window, softcap and sinks
    facts: DeviceFacts
    tiles: dict[str, dict]
    _runners: dict | None = None

    @classmethod
    def implements(cls, op: str) -> bool:
        return op in OPERANDS

    def supports(self, spec: Spec) -> Support:
        """What this device computes correctly, with the reason when not."""
        return support(spec, self.facts, self.tiles)

    def accumulator(self, spec: Spec) -> str:
        return accumulator(spec, self.facts)

    def settings_changed(self) -> None:
        super().settings_changed()
        self._runners = None

    def run(self, spec: Spec, out: Any, *inputs: Any) -> None:
        """Enqueue ``spec``'s plan on these operands (``Backend.run``'s order: inputs, absent
        optional ones None, then ``out``): bound once per spec and operand alignment, then a
        call only passes its buffers."""
        with self.calling(inputs):
            align = self.operand_alignment(inputs)
            try:
                runner = self._runners[spec, align]  # type: ignore[index]
            except (KeyError, TypeError):
                if self._runners is None or len(self._runners) >= _MAX_PLANS:
                    self._runners = {}
                runner = self._runners[spec, align] = self._bound(
                    plan_for(spec, self.facts, self.tiles, align), spec.op)
            runner(*_buffers(spec.op, out, inputs))

    def run_plan(self, plan: Plan, op: str, out: Any, *inputs: Any) -> None:
        """Enqueue ``plan`` (a :func:`~accel.backends.plan.plan_for` answer, e.g. under other
        tiles or facts than this backend's) for op ``op`` on these operands, bound anew: what a
        benchmark of alternatives runs.

        >>> import accel, numpy as np
        >>> from dataclasses import replace
        >>> from accel.backends.plan import DEFAULT_TILES, plan_for
        >>> from accel.spec import matmul_spec
        >>> be = accel.get_backend("opencl:0")
        >>> a = accel.asarray(np.ones((2, 3), np.float32), backend=be)
        >>> out = accel.Tensor.empty(be, (2, 2), "float32")
        >>> spec = matmul_spec((2, 3), "float32", (3, 2), "float32")
        >>> tiles = {**be.tiles, "matmul": {**be.tiles["matmul"], "TM": 1}}
        >>> be.run_plan(plan_for(spec, be.facts, tiles), "matmul", out, a, a.T.contiguous())
        >>> out.numpy().tolist()
        [[3.0, 3.0], [3.0, 3.0]]
        """
        with self.calling(inputs):
            self._bound(plan, op)(*_buffers(op, out, inputs))

    def calling(self, inputs: tuple) -> ContextManager:
        """Where a call on ``inputs`` is enqueued (a runtime's device and stream), entered
        around binding and enqueueing."""
        return contextlib.nullcontext()

    def _bound(self, plan: Plan, op: str) -> Callable[..., None]:
        """A callable taking a call's buffers (plan.OPERANDS order) and enqueueing ``plan``;
        its scratch buffers follow them, allocated per call."""
        sizes = {s.name: s.nbytes for launch in plan for s in launch.buffers if isinstance(s, Scratch)}
        index = {name: i for i, name in enumerate((*OPERANDS[op], *sizes))}
        steps = [self.bind(launch, index) for launch in plan]
        if len(steps) == 1 and not sizes:
            return steps[0]
        nbytes = tuple(sizes.values())

        def run(*bufs: Any) -> None:
            bufs += self.scratch_buffers(nbytes)
            for step in steps:
                step(*bufs)

        return run

    def bind(self, launch: Launch, index: dict[str, int]) -> Callable[..., None]:
        """A callable enqueueing ``launch`` on a call's buffers (``index``: slot name -> position
        among them); constants (uploads, placeholders, scalars) are bound here, once."""
        raise NotImplementedError

    def scratch_buffers(self, sizes: tuple[int, ...]) -> tuple:
        """Device buffers of ``sizes`` bytes for one call's scratch slots, used in queue order."""
        raise NotImplementedError

    def operand_alignment(self, inputs: tuple) -> int:
        """The alignment in bytes every input buffer of a call has (the planner's vector
        copies need 16): the device's buffer alignment, unless the runtime adopts foreign
        arrays at any address."""
        return self.facts.mem_align_bytes
