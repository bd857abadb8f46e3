"""The OpenCL translator's side of warp emulation (accel.kernels.port.warp): deciding, per call, whether
a shuffle can be emulated (full mask, 32-bit value, block-uniform), and threading the local
scratch array from each kernel to the device functions that shuffle.

OpenCL 1.2 allows ``__local`` variables only at a kernel's outermost scope, so a kernel whose
call tree shuffles declares ``__local uint accel_warp[1024]`` and every device function on the
way gets it as an extra last parameter. The functions that need it are known only once every
function is translated, so those edits are recorded as functions of that final set.
"""
from __future__ import annotations

from accel.kernels.port import tables as T
from accel.kernels.port import warp as W
from accel.kernels.port.earlyexit import EarlyExit
from accel.kernels.port.groups import group_variables
from accel.kernels.port.hoist import Hoisting
from accel.kernels.port.syntax import line, text, walk
from accel.kernels.port.uniform import Uniformity

_PURE = frozenset(("min", "max", "abs"))
#: the warp primitives whose OpenCL form is the emulation (others stay refused)
SHUFFLE_NAMES = frozenset(W.SHUFFLES)
_UNHOISTED = "it cannot be hoisted out of that branch"


def callee_name(call) -> str | None:
    """The function a call names: ``f(...)``, or ``ns::f(...)`` (a namespace of the file's,
    which the translation drops), else None."""
    f = call.child_by_field_name("function")
    if f is not None and f.type == "qualified_identifier":
        f = f.child_by_field_name("name")
    return text(f) if f is not None and f.type == "identifier" else None


class WarpEmulation(Hoisting, EarlyExit):
    """Mixed into OpenCLTranslator (which provides rw, sp, functions, current, typer, _expr)."""

    def _warp_init(self) -> None:
        self._hoist_init()
        self._exit_init()
        self.warp_helpers: set[str] = set()
        self.warp_direct: set[str] = set()   # functions that shuffle themselves
        self.warp_users: set[str] = set()    # ... and those that call them (after run)
        self.macro_values: dict[str, str] = {}
        self._uniformities: dict[str, Uniformity] = {}
        self._reached: dict[str, str | None] = {}
        self._warned_warp = False
        self._main_rw = self.rw

    # -- the verdict ------------------------------------------------------------------------------
    def _uniformity(self, fn) -> Uniformity:
        if fn.name not in self._uniformities:
            pure = lambda n: n in T.OPENCL_MATH or n in T.OPENCL_SAME or n in _PURE  # noqa: E731
            groups = group_variables(fn.node)
            skip = self.exit_plan(fn, pure, groups, self.macro_bodies)
            self._uniformities[fn.name] = Uniformity(fn.node, fn.kernel, pure, groups,
                                                     self.macro_bodies, skip)
        return self._uniformities[fn.name]

    def _reach(self, fn, path=()) -> str | None:
        """None when every thread of a block reaches each call of device function ``fn``."""
        if fn.kernel:
            return None
        if fn.name not in self._reached:
            why = None
            for caller in self.functions.values():
                if caller.name in path or fn.name not in caller.calls:
                    continue
                for c in walk(caller.node):
                    if c.type != "call_expression" or callee_name(c) != fn.name:
                        continue
                    inner = self._uniformity(caller).point(c)
                    if inner is not None and (kept := self.exit_why.get(caller.name)) is not None:
                        inner += f"; the early return cannot be kept for every thread: {kept}"
                    if inner is not None and caller.name not in path:
                        hoisted = self.hoist(caller, c, c.child_by_field_name("arguments").named_children,
                                             callee=fn)
                        inner = None if hoisted is None else f"{inner}, and {_UNHOISTED}: {hoisted}"
                    inner = inner or self._reach(caller, path + (fn.name,))
                    if inner is not None:
                        why = f"{fn.name} is called on line {line(c)}, where {inner}"
                        break
                if why:
                    break
            self._reached[fn.name] = why
        return self._reached[fn.name]

    def block_uniform(self, node, construct: str, values=(), ctype: str | None = None) -> bool:
        """Whether every thread of the block provably reaches ``node``, or a value computation
        (``ctype``: its type, from ``values``) is hoisted to where they all do; refused (False)
        if not."""
        why = None
        if self.sp.name != "OpenCL C":
            why = f"{self.sp.name} has no warp emulation yet"
        elif self.rw is not self._main_rw or getattr(self, "current", None) is None:
            why = "it is in a macro body, where accel port cannot follow the control flow"
        else:
            why = self._uniformity(self.current).point(node)
            if why is not None and ctype is not None:
                hoisted = self.hoist(self.current, node, values, ctype)
                why = None if hoisted is None else f"{why}, and {_UNHOISTED}: {hoisted}"
            why = why or self._reach(self.current)
            if why is not None and (kept := self.exit_why.get(self.current.name)) is not None:
                why += f"; the early return cannot be kept for every thread: {kept}"
            if why is not None:
                why = (f"accel port emulates it through local memory and a barrier, which needs "
                       f"every thread of the block to reach the call, and cannot prove that: {why}")
        if why is None:
            return True
        self.rw.error(node, construct, why, "translate with --to opencl, which emulates it, or "
                      "write a __shared__ tree reduction with __syncthreads() steps"
                      if self.sp.name != "OpenCL C" else "keep the call out of thread-dependent "
                      "branches and early returns (compute, then guard the store), or a "
                      "__shared__ tree reduction with __syncthreads() steps")
        return False

    def use_warp(self, helper: str, node) -> None:
        self.warp_helpers.add(helper)
        self.warp_direct.add(self.current.name)
        if not self._warned_warp:  # once per file: the assumption is the same at every call
            self._warned_warp = True
            self.rw.note("warp emulation")
            self.rw.warn(node, "warp emulation", "warp shuffles are emulated through local memory "
                         "with CUDA's 32-lane warps numbered by the linear thread index; like the "
                         "full mask, this needs a block size that is a multiple of 32 (at most 1024)",
                         "launch with such a block size")

    # -- the calls --------------------------------------------------------------------------------
    def shuffle_call(self, node, name: str, args, scope) -> None:
        """``__shfl_*_sync(mask, v, lane_or_delta[, width])``."""
        if len(args) not in (3, 4):
            self.rw.error(node, name, f"CUDA's {name} takes 3 or 4 arguments", "fix the call")
            return
        if not W.full_mask(text(args[0]), self.macro_values) and not self._full_mask_variable(args[0]):
            self.rw.error(node, name, f"its mask {text(args[0])} names only some lanes, which "
                          "the block-wide emulation cannot honour", "a full mask (0xffffffff) "
                          "reached by every thread, or a __shared__ reduction")
            return
        width = args[3] if len(args) == 4 else None
        self.warp_shuffle(node, name, W.SHUFFLES[name], args[1], args[2], width or "32", scope)

    def _full_mask_variable(self, node) -> bool:
        """``unsigned mask = 0xffffffff;`` then ``__shfl_up_sync(mask, ...)``: a local variable
        initialised with a full mask, and never assigned again."""
        if node.type != "identifier" or self.current is None or self.rw is not self._main_rw:
            return False
        name, inits = text(node), []
        for n in walk(self.current.node):
            block = n.parent.parent if n.parent is not None else None  # the declaration's scope
            if n.type == "init_declarator" and text(n.child_by_field_name("declarator")) == name \
                    and block is not None and block.start_byte <= node.start_byte < block.end_byte:
                inits.append((block.start_byte, n.child_by_field_name("value")))
            elif n.type in ("assignment_expression", "update_expression", "pointer_expression"):
                target = n.child_by_field_name("left") or n.child_by_field_name("argument")
                if target is not None and text(target) == name:
                    return False
        # the declaration in scope at the call: the one in the innermost enclosing block
        return bool(inits) and W.full_mask(text(max(inits, key=lambda i: i[0])[1]), self.macro_values)

    def warp_shuffle(self, node, construct: str, mode: int, value, lane, width, scope) -> None:
        """One shuffle of ``value`` (mode: PTX idx/up/down/bfly) by ``lane`` within ``width``."""
        t = W.value_type(self.typer.of(value, scope))
        if t is None:
            self.rw.error(node, construct, "the emulation shuffles 32-bit int, unsigned and float "
                          "values, and the type of this one is another or unknown",
                          "shuffle the value as float or int (a 64-bit value as two halves)")
            return
        values = (value, lane) + ((width,) if not isinstance(width, str) else ())
        if not self.block_uniform(node, construct, values, t):
            return
        helper = W.shuffle_helper(t)
        self.use_warp(helper, node)
        self.rw.note(construct)
        for a in values:
            self._expr(a, scope)
        render = self.rw.render
        self.rw.replace(node, lambda _i: f"{helper}({W.SCRATCH}, {render(value)}, {mode}, "
                                         f"{render(lane)}, {width if isinstance(width, str) else render(width)})")

    def syncwarp(self, node, args) -> None:
        """``__syncwarp()`` at a block-uniform point: a barrier orders at least as much."""
        if args and not W.full_mask(text(args[0]), self.macro_values):
            self.rw.error(node, "__syncwarp", f"its mask {text(args[0])} names only some lanes",
                          "__syncthreads() reached by every thread")
            return
        if self.block_uniform(node, "__syncwarp"):
            self.rw.note("__syncwarp")
            self.rw.replace(node, self.sp.barrier)

    # -- threading the scratch array --------------------------------------------------------------
    def scratch_body(self, fn, body) -> None:
        """The kernel declares the scratch array when its call tree shuffles."""
        def add(inner: str, name=fn.name) -> str:
            if name not in self.warp_users:
                return inner
            return (inner[:1] + f"\n    __local uint {W.SCRATCH}[{W.SLOTS}];  /* accel port: "
                    "warp shuffle emulation */" + inner[1:])
        self.rw.replace(body, add)

    def scratch_param(self, fn, plist) -> None:
        def add(inner: str, name=fn.name) -> str:
            if name not in self.warp_users:
                return inner
            sep = ", " if inner.strip("() \n") else ""
            return inner[:-1].rstrip() + f"{sep}__local uint* {W.SCRATCH})"
        self.rw.replace(plist, add)

    def scratch_arg(self, callee: str, args_node) -> None:
        def add(inner: str) -> str:
            if callee not in self.warp_users:
                return inner
            sep = ", " if inner.strip("() \n") else ""
            return inner[:-1].rstrip() + f"{sep}{W.SCRATCH})"
        self.rw.replace(args_node, add)

    def finish_warp(self) -> None:
        """The functions whose call tree shuffles (before rendering)."""
        users, changed = set(self.warp_direct), True
        while changed:
            changed = False
            for fn in self.functions.values():
                if fn.name not in users and fn.calls & users:
                    users.add(fn.name)
                    changed = True
        self.warp_users = users
        self.finish_hoists()
