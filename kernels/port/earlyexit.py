"""A kernel's early return taken by whole warps, before warp reductions (llm.c's
``int idx = blockIdx.x * warpsPerBlock + warpId; if (idx >= N) return;`` then ``cg::reduce``).

The local-memory emulation of warp operations (accel.kernels.port.warp) needs a barrier that
every work-item of the work-group reaches, and the threads that returned never get there. When
the return's condition is the same for every lane of a warp (accel.kernels.port.uniform.
WarpUniformity, with ``blockDim.x`` a multiple of 32), the translation keeps every thread
running instead and makes the rest of the kernel's effects conditional:

- ``if (C) return;`` becomes ``int accel_live = !(C);``, evaluated where CUDA evaluates it;
- each statement after it that holds no warp operation runs under ``if (accel_live) { ... }``:
  the threads that returned store, load and loop nothing more;
- a declaration is split so that its variable stays in scope for the statements after it:
  ``float m = sum / C;`` becomes ``float m = 0; if (accel_live) { m = sum / C; }`` (a
  ``const`` on the variable itself goes, since it is now assigned);
- each warp operation stays for every thread, as the statement ``x = op(args);`` or
  ``T x = op(args);`` whose arguments read no memory (accel.kernels.port.hoist's purity: for
  the threads that returned they are values of their own, never loaded or stored), or a bare
  ``__syncthreads();``.

Each warp is then either wholly live, and its lanes exchange exactly CUDA's values, or wholly
returned, and its lanes exchange values nobody uses. Anything else after the return (a warp
operation inside a loop or an ``if``, a second return) leaves the plan undone, and the warp
operations refused as before, with the reason.
"""
from __future__ import annotations

import re

from accel.kernels.port import warp as W
from accel.kernels.port.symbols import declarator_parts
from accel.kernels.port.syntax import line, text, walk
from accel.kernels.port.uniform import Uniformity, WarpUniformity, short

#: the scalar types a split declaration may zero-initialise (``= 0``)
_SCALARS = frozenset(("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float",
                      "double", "bool", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t"))
LIVE = "accel_live"
#: a cooperative group's declaration, which the translation deletes (no code to guard)
_GROUP_DECL = re.compile(r"^(?:const )?(?:\w+ ?:: ?)?(?:thread_block|thread_block_tile ?< ?\d+ ?>|auto) \w+ ?= ?"
                         r"(?:\w+ ?:: ?)?(?:this_thread_block ?\( ?\)|tiled_partition ?< ?\d+ ?> ?\( ?\w+ ?\)) ?;$")


class EarlyExit:
    """Mixed into WarpEmulation (which provides rw, functions, _impure, _pure_function)."""

    def _exit_init(self) -> None:
        #: kernel name -> why its early return cannot be kept for every thread (None: it is)
        self.exit_why: dict[str, str | None] = {}

    def exit_plan(self, fn, pure, groups, macros) -> frozenset:
        """The returns of kernel ``fn`` that every thread now passes (their byte offsets, for
        the uniformity analysis to skip), with the rewrites recorded; empty when there is no
        such return, or it cannot be kept (``self.exit_why[fn.name]`` says why)."""
        body = fn.node.child_by_field_name("body")
        items = [c for c in body.named_children if c.type != "comment"]
        k = next((i for i, s in enumerate(items) if _early_return(s) is not None), None)
        if not fn.kernel or k is None:
            return frozenset()
        exit_if, rest = items[k], items[k + 1:]
        ret = _early_return(exit_if)
        if not any(self._collective_use(s) for s in rest):
            return frozenset()  # nothing after it needs every thread: CUDA's return stays
        u = Uniformity(fn.node, True, pure, groups, macros)
        wu = WarpUniformity(fn.node, True, pure, groups, macros)
        cond = exit_if.child_by_field_name("condition")
        why = None if wu.expr(cond) else (f"its condition {short(cond)} can differ between the "
                                          "lanes of one warp")
        plan = []
        for s in rest:
            if why is not None:
                break
            kind, why = self._exit_step(s, u, wu)
            plan.append((s, kind))
        self.exit_why[fn.name] = why
        if why is not None:
            return frozenset()
        self._exit_rewrite(exit_if, cond, plan)
        self.rw.note("early return kept for every thread")
        self.rw.warn(ret, "early return kept for every thread", (
            f"the warp operations after it need every thread of the block, so the threads "
            f"that return under {short(cond)} keep running with their effects turned off "
            f"(int {LIVE}; each statement after it under if ({LIVE})); the same as CUDA's "
            "because each warp returns whole when blockDim.x is a multiple of 32"),
            "launch with blockDim.x a multiple of 32")
        return frozenset((ret.start_byte,))

    # -- deciding ---------------------------------------------------------------------------------
    def _warp_functions(self) -> set[str]:
        """The file's functions whose calls (transitively) hold a warp operation."""
        if getattr(self, "_warp_fns", None) is None:
            found = {f.name for f in self.functions.values() if any(
                _collective_call(n) for n in walk(f.node.child_by_field_name("body")))}
            changed = True
            while changed:
                changed = False
                for f in self.functions.values():
                    if f.name not in found and f.calls & found:
                        found.add(f.name)
                        changed = True
            self._warp_fns = found
        return self._warp_fns

    def _collective(self, n) -> bool:
        if n.type != "call_expression":
            return False
        return _collective_call(n) or _callee(n) in self._warp_functions()

    def _collective_use(self, stmt) -> bool:
        return any(self._collective(n) for n in walk(stmt))

    def _exit_step(self, s, u, wu) -> tuple[str, str | None]:
        """How statement ``s`` after the return runs: ("keep", None) for every thread,
        ("guard", None) for the live ones, ("split", None) a declaration; or why it cannot."""
        if _GROUP_DECL.match(" ".join(text(s).split())):
            return "keep", None  # a cooperative group's declaration: no code of its own
        if s.type == "declaration" and any(c.type in ("type_qualifier", "storage_class_specifier")
                                           and text(c) == "__shared__" for c in s.children):
            return "keep", None  # one array per block, declared at the kernel's scope: no code
        if not self._collective_use(s):
            if s.type != "declaration":
                return "guard", None
            return "split", self._splittable(s)
        call = _sole_value(s)
        if call is None or sum(self._collective(n) for n in walk(s)) != 1 or not self._collective(call):
            return "", (f"line {line(s)} holds a warp operation in another form than x = op(args); "
                        "or T x = op(args);")
        name = _callee(call)
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
        values = args[1:2] if name == "reduce" else args
        for v in values:
            if (effect := self._impure(v, u, wu)) is not None:
                return "", f"the argument {short(v)} on line {line(s)} {effect}"
        if name in self.functions and (effect := self._pure_function(self.functions[name], ())) is not None:
            return "", effect
        return "keep", None

    def _splittable(self, decl) -> str | None:
        """None when declaration ``decl`` can become a zero-initialised declaration and a
        guarded assignment; else why not."""
        spelled = " ".join(text(c) for c in decl.children if c.type in (
            "primitive_type", "sized_type_specifier", "type_identifier"))
        if any(c.type in ("storage_class_specifier",) for c in decl.children) or "__shared__" in text(decl).split("=")[0]:
            return f"the declaration on line {line(decl)} is not of a plain local variable"
        pointers = set()
        for d in decl.children_by_field_name("declarator"):
            _name, ptr, arr = declarator_parts(d)
            if ptr < 0 or arr:
                return f"the declaration on line {line(decl)} declares an array or a reference"
            if any(c.type == "type_qualifier" for n in walk(d) if n.type == "pointer_declarator"
                   for c in n.children):
                return f"the declaration on line {line(decl)} declares a const pointer"
            pointers.add(ptr > 0)
        if len(pointers) > 1:
            return f"the declaration on line {line(decl)} mixes pointers and values"
        if pointers != {True} and self._normal(spelled) not in _SCALARS:
            return f"the declaration on line {line(decl)} is of {spelled or 'a type'}, not a scalar"
        return None

    # -- rewriting --------------------------------------------------------------------------------
    def _exit_rewrite(self, exit_if, cond, plan) -> None:
        rw = self.rw
        rw.replace(exit_if, lambda _i: f"int {LIVE} = !({rw.render(cond)});")
        for s, kind in plan:
            if kind == "guard":
                rw.replace(s, lambda inner: f"if ({LIVE}) {{ {inner} }}")
            elif kind == "split":
                self._split(s)

    def _split(self, decl) -> None:
        rw, box = self.rw, []
        if not any(declarator_parts(d)[1] for d in decl.children_by_field_name("declarator")):
            for c in decl.children:  # the variable itself was const: it is assigned now
                if c.type == "type_qualifier" and text(c) == "const":
                    rw.delete(c)
        for d in decl.children_by_field_name("declarator"):
            if d.type == "init_declarator":
                name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                rw.replace(value, lambda inner, b=box, n=declarator_parts(name)[0]:
                           b.append(f"{text(n)} = {inner};") or "0")
            else:
                rw.replace(d, lambda inner: f"{inner} = 0")
        rw.replace(decl, lambda inner, b=box: inner + (f" if ({LIVE}) {{ {' '.join(b)} }}" if b else ""))


def _early_return(s):
    """The ``return;`` of ``if (C) return;`` / ``if (C) { return; }`` (no else), else None."""
    if s.type != "if_statement" or s.child_by_field_name("alternative") is not None:
        return None
    body = s.child_by_field_name("consequence")
    if body.type == "compound_statement":
        inner = [c for c in body.named_children if c.type != "comment"]
        body = inner[0] if len(inner) == 1 else None
    return body if body is not None and body.type == "return_statement" and not body.named_children else None


def _callee(call) -> str:
    f = call.child_by_field_name("function")
    if f.type == "qualified_identifier":
        f = f.child_by_field_name("name")
    if f.type in ("template_function", "template_type"):
        f = f.child_by_field_name("name")
    if f.type == "field_expression":
        return text(f.child_by_field_name("field"))
    return text(f)


def _collective_call(n) -> bool:
    """A call that needs every thread of the block in the emulation: a shuffle, a tile's
    shuffle or sync, cg::reduce or cg::sync, __syncwarp, __syncthreads."""
    if n.type != "call_expression":
        return False
    f = n.child_by_field_name("function")
    name = _callee(n)
    if f.type == "field_expression":
        return name in W.TILE_SHUFFLES or name in ("sync", "barrier_wait")
    if f.type == "qualified_identifier":
        return name in ("reduce", "sync")
    return name in W.SHUFFLES or name in ("__syncwarp", "__syncthreads")


def _sole_value(s):
    """The call that is the whole value of ``x = call(...);``, ``T x = call(...);`` or the
    statement ``call(...);`` (``__syncthreads();``), else None."""
    if s.type == "expression_statement" and s.named_children:
        e = s.named_children[0]
        if e.type == "call_expression":
            return e if _callee(e) in ("__syncthreads", "sync") else None
        if e.type == "assignment_expression" and text(e.child_by_field_name("operator")) == "=" \
                and e.child_by_field_name("left").type == "identifier":
            value = e.child_by_field_name("right")
        else:
            return None
    elif s.type == "declaration" and len(s.children_by_field_name("declarator")) == 1:
        d = s.children_by_field_name("declarator")[0]
        if d.type != "init_declarator" or declarator_parts(d)[1:] != (0, 0):
            return None
        value = d.child_by_field_name("value")
    else:
        return None
    while value.type == "parenthesized_expression":
        value = value.named_children[0]
    return value if value.type == "call_expression" else None
