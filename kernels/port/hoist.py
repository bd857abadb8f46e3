"""Hoisting a warp reduction out of a branch that only some warps take.

The classic block reduction ends with ``if (wid == 0) v = warpReduceSum(v);``: only warp 0
shuffles. The local-memory emulation (accel.kernels.port.warp) needs a barrier that every
work-item reaches, so the call moves before the ``if``, where every thread computes it, and the
branch keeps only the use: ``float t = warpReduceSum(v); if (wid == 0) v = t;``. That is the
same program when

- the call's value is all it does: its arguments read no memory and change nothing, and so
  does the callee (no pointer or reference parameters, no memory accesses, no calls but math,
  shuffles and other such functions), whose loops run a block-uniform number of times and which
  divides by no variable. The threads the condition excludes then only waste work: no access
  out of bounds, no division by zero, no endless loop;
- the call is the first thing its branch runs (through nested ``if``s), so its arguments hold
  the values they hold at the ``if``, where it moves, and the ``if`` is reached by every thread;
  or what the branch runs before it are declarations of new variables (names the function
  declares once) whose values read no memory but the lanes' own slots of a ``__shared__``
  array (``float v = lane < n ? part[lane] : 0.0f;``, an index below the array's constant
  size: a tile's ``thread_rank()``, ``threadIdx.x % 32`` or a variable holding one), which
  move before the ``if`` with it: every thread then computes them too, in bounds;
- each condition it leaves is the same for every lane of a warp (accel.kernels.port.uniform.
  WarpUniformity, with ``blockDim.x`` a multiple of 32): then each warp either takes the branch
  whole, and its lanes' shuffles read the same values as in CUDA, or discards the result. CUDA
  leaves a full-mask shuffle that only part of a warp reaches undefined, so such a condition is
  refused.

Everything else stays refused, with the reason.
"""
from __future__ import annotations

from accel.kernels.port import warp as W
from accel.kernels.port.symbols import declarator_parts, type_node
from accel.kernels.port.syntax import line, text, walk
from accel.kernels.port.uniform import WarpUniformity, short

#: the nodes between a call and its statement that use its value and nothing else's order
_VALUE_USES = frozenset(("assignment_expression", "init_declarator", "parenthesized_expression",
                         "cast_expression", "binary_expression", "unary_expression"))
#: the expression nodes that read no memory and change nothing (calls, fields and division are
#: checked apart)
_PURE_NODES = frozenset((
    "identifier", "number_literal", "char_literal", "true", "false", "comment", "sizeof_expression",
    "parenthesized_expression", "binary_expression", "unary_expression", "cast_expression",
    "conditional_expression", "comma_expression", "argument_list", "type_descriptor",
    "primitive_type", "sized_type_specifier", "type_identifier", "type_qualifier",
    "field_identifier"))
#: ... and the statements a pure device function may hold
_PURE_STATEMENTS = frozenset((
    "compound_statement", "declaration", "init_declarator", "expression_statement", "if_statement",
    "else_clause", "condition_clause", "for_statement", "while_statement", "do_statement",
    "return_statement", "break_statement", "continue_statement"))
_LOOPS = frozenset(("for_statement", "while_statement", "do_statement"))
_INDICES = frozenset(("threadIdx", "blockIdx", "blockDim", "gridDim"))
#: the methods of a cooperative group that only compute a value (sync and shuffles are not)
_GROUP_QUERIES = frozenset(("thread_rank", "meta_group_rank", "meta_group_size", "size",
                            "num_threads", "group_index", "thread_index", "group_dim", "dim_threads"))


class Hoisting:
    """Mixed into WarpEmulation: ``hoist`` decides and records, ``finish_hoists`` rewrites."""

    def _hoist_init(self) -> None:
        self._hoist_why: dict[tuple[int, int], str | None] = {}
        self._hoists: list = []  # (anchor if, call, temporary, its type: a function of nothing)
        self._warp_uniformities: dict[str, WarpUniformity] = {}

    def hoist(self, fn, call, values, ctype: str | None = None, callee=None) -> str | None:
        """None when ``call`` in function ``fn``, which only some threads reach, is hoisted
        before the branch that guards it; otherwise why it cannot be. ``values``: the argument
        nodes it computes from; ``ctype``: its OpenCL type, or ``callee``: the device function
        it calls."""
        key = (call.start_byte, call.end_byte)
        if key not in self._hoist_why:
            self._hoist_why[key] = self._plan(fn, call, values, ctype, callee)
        return self._hoist_why[key]

    def _plan(self, fn, call, values, ctype, callee) -> str | None:
        child, p = call, call.parent
        while p.type in _VALUE_USES and not (p.type == "assignment_expression" and child == p.child_by_field_name("left")) \
                and ((op := p.child_by_field_name("operator")) is None or text(op) not in ("&&", "||")):
            child, p = p, p.parent
        if p.type not in ("expression_statement", "declaration") or child == call:
            return "its value is not simply assigned or declared in a statement of its own"
        stmt = p
        u = self._uniformity(fn)
        anchor = next((a for a in _ancestors(stmt, fn.node)
                       if a.type == "if_statement" and u.point(a) is None), None)
        if anchor is None:
            return "no if that every thread reaches guards it, so it has nowhere to move to"
        for c in [anchor.child_by_field_name("condition")] + [
                a.child_by_field_name("condition") for a in _ancestors(stmt, anchor) if a.type == "if_statement"]:
            if (change := self._changes(c, u)) is not None:  # what moves before it must not see it
                return f"the condition on line {line(c)} {change}"
        conds, child, moved = [], stmt, []
        for p in _ancestors(stmt, anchor.parent):
            if p.type == "compound_statement":
                before = [c for c in p.named_children if c.type != "comment"
                          and c.start_byte < child.start_byte]
                top = p.parent == anchor or (p.parent.type == "else_clause" and p.parent.parent == anchor)
                if before and (not top or self._movable(fn, before) is not None):
                    why = self._movable(fn, before) if top else None
                    return (f"the statements before it in its branch (from line {line(before[0])}) "
                            "run first and could change what it reads" + (f" ({why})" if why else ""))
                moved = before
            elif p.type == "if_statement" and child != p.child_by_field_name("condition"):
                conds.append(p.child_by_field_name("condition"))
            elif p.type != "else_clause":
                what = p.type.removesuffix("_statement").replace("_", " ")
                return (f"it is inside a {what} (line {line(p)}) within the branch, which moving "
                        "it out of would change how often it runs")
            child = p
        wu = self._warp_uniformity(fn)
        for cond in conds:
            if not wu.expr(cond):
                return (f"the condition on line {line(cond)} ({short(cond)}) can differ between the "
                        "lanes of one warp, where CUDA leaves a full-mask shuffle undefined")
        inner = {text(declarator_parts(d)[0]) for n in walk(anchor) if n.type == "declaration"
                 for d in n.children_by_field_name("declarator") if declarator_parts(d)[0] is not None}
        inner -= {text(declarator_parts(d)[0]) for m in moved for d in m.children_by_field_name("declarator")}
        for v in values:
            why = self._impure(v, u, wu)
            if why is None and (names := inner & {text(n) for n in walk(v) if n.type == "identifier"}):
                why = f"it reads {min(names)}, declared inside the branch"
            if why is not None:
                return f"its argument {short(v)} {why}"
        if callee is not None:
            if text(type_node(callee.node)) == "void":
                return f"{callee.name} returns nothing"
            why = self._pure_function(callee, ())
            if why is not None:
                return why
            ctype = lambda: self.rw.render(type_node(callee.node))  # noqa: E731
        tmp = f"accel_hoisted_{len(self._hoists)}"
        self._hoists.append((anchor, call, tmp, ctype if callable(ctype) else lambda t=ctype: t, moved))
        self.rw.note("warp call hoisted out of a branch")
        lines = sorted({line(m) for m in moved})
        also = "" if not moved else (f" (with the declaration on line {lines[0]} before it)" if len(lines) == 1
                                     else f" (with the declarations on lines {lines[0]}-{lines[-1]} before it)")
        self.rw.warn(call, "warp call hoisted out of a branch", (
            f"the shuffles need every thread of the block, so every thread now computes "
            f"{short(call)}{also} before the if on line {line(anchor)}, and only the threads that "
            f"take the branch use it; the same as CUDA's because each warp takes the branch "
            "whole when blockDim.x is a multiple of 32"), "launch with blockDim.x a multiple of 32")
        return None

    def _changes(self, node, u) -> str | None:
        """What expression ``node`` changes (an assignment, ``++``, a call that is not math or
        a group's query), or None: code moved from after it to before it must read the same."""
        for n in walk(node):
            if n.type in ("assignment_expression", "update_expression"):
                return f"changes {short(n)}"
            if n.type == "call_expression":
                f = n.child_by_field_name("function")
                name = text(f)
                if not (u.pure(name) or f.type == "field_expression"
                        and text(f.child_by_field_name("field")) in _GROUP_QUERIES):
                    return f"calls {name}, which may change what the call reads"
        return None

    def _movable(self, fn, statements) -> str | None:
        """None when ``statements`` (what a branch runs before a hoisted call) can move before
        the branch's ``if``: declarations of names the function declares once, whose values
        read no memory but in-bounds lane slots of __shared__ arrays; else why not."""
        u, wu = self._uniformity(fn), self._warp_uniformity(fn)
        declared = [text(declarator_parts(d)[0]) for n in walk(fn.node) if n.type == "declaration"
                    for d in n.children_by_field_name("declarator") if declarator_parts(d)[0] is not None]
        for st in statements:
            if st.type != "declaration" or any(c.type in ("storage_class_specifier", "type_qualifier")
                                               and text(c) not in ("const",) for c in st.children):
                return f"line {line(st)} is not a plain declaration"
            for d in st.children_by_field_name("declarator"):
                name, ptr, arr = declarator_parts(d)
                if d.type != "init_declarator" or name is None or ptr or arr:
                    return f"line {line(st)} declares no plain initialised variable"
                if declared.count(text(name)) != 1:
                    return f"{text(name)} is declared more than once in {fn.name}"
                value = d.child_by_field_name("value")
                why = next(filter(None, (None if n.type == "subscript_expression" and self._lane_slot(fn, n)
                                         else self._effect(n, u, wu, ()) for n in _outside_lane_slots(self, fn, value))), None)
                if why is not None:
                    return f"the value of {text(name)} {why}"
        return None

    def _lane_slot(self, fn, n) -> bool:
        """``part[lane]``: a read of a __shared__ array of the function with a constant size
        D, at an index a thread's lane bounds below D."""
        base, idx = n.child_by_field_name("argument"), n.child_by_field_name("indices").named_children
        if base.type != "identifier" or len(idx) != 1:
            return False
        size = next((d for m in walk(fn.node) if m.type == "declaration" and "__shared__" in text(m).split("[")[0]
                     for d in m.children_by_field_name("declarator")
                     if d.type == "array_declarator" and text(declarator_parts(d)[0]) == text(base)), None)
        bound = self._warp_uniformity(fn).constant(size.child_by_field_name("size")) if size is not None else None
        return bound is not None and (top := self._lane_bound(fn, idx[0])) is not None and top < bound

    def _lane_bound(self, fn, n, depth: int = 0) -> int | None:
        """The largest value expression ``n`` takes, when a lane bounds it (a tile's
        thread_rank(), threadIdx.x % K or & M, a variable whose one definition is one)."""
        wu = self._warp_uniformity(fn)
        while n.type == "parenthesized_expression":
            n = n.named_children[0]
        if n.type == "call_expression" and (f := n.child_by_field_name("function")).type == "field_expression" \
                and text(f.child_by_field_name("field")) == "thread_rank" \
                and not n.child_by_field_name("arguments").named_children:
            size = wu.groups.get(text(f.child_by_field_name("argument")))
            return size - 1 if size else None
        if n.type == "binary_expression" and wu.thread_x(n.child_by_field_name("left")):
            op, k = text(n.child_by_field_name("operator")), wu.constant(n.child_by_field_name("right"))
            if k is not None and k > 0:
                return k - 1 if op == "%" else k if op == "&" else None
            return None
        if n.type == "identifier" and depth < 4:
            values = [v for name, v, _w, _ok in wu.defs if name == wu.key(n)]
            return self._lane_bound(fn, values[0], depth + 1) if len(values) == 1 and values[0] is not None else None
        return None

    def _warp_uniformity(self, fn) -> WarpUniformity:
        if fn.name not in self._warp_uniformities:
            u = self._uniformity(fn)
            self._warp_uniformities[fn.name] = WarpUniformity(fn.node, fn.kernel, u.pure, u.groups,
                                                              u.macros, u.skip)
        return self._warp_uniformities[fn.name]

    def _impure(self, node, u, wu, path=()) -> str | None:
        """None when expression ``node`` reads no memory, changes nothing and cannot trap;
        otherwise what it does (with its line)."""
        return next(filter(None, (self._effect(n, u, wu, path) for n in walk(node))), None)

    def _effect(self, n, u, wu, path) -> str | None:
        """What node ``n`` itself (not its children) does beyond computing a value, or None."""
        t = n.type
        if t == "binary_expression" and text(n.child_by_field_name("operator")) in ("/", "%") \
                and not wu.constant(n.child_by_field_name("right")):
            return (f"divides by {short(n.child_by_field_name('right'))} (line {line(n)}), which "
                    "may be 0 for the threads the condition excludes")
        if t in _PURE_NODES or t == "field_expression" and text(n.child_by_field_name("argument")) in _INDICES:
            return None
        if t == "field_expression" and text(n.child_by_field_name("field")) in _GROUP_QUERIES \
                and text(n.child_by_field_name("argument")) in wu.groups:
            return None  # warp.thread_rank: the method itself, judged with its call
        if t == "call_expression":
            name = text(n.child_by_field_name("function"))
            f = n.child_by_field_name("function")
            if f.type == "field_expression" and text(f.child_by_field_name("argument")) in wu.groups \
                    and text(f.child_by_field_name("field")) in _GROUP_QUERIES:
                return None  # an index or size of a cooperative group: a value
            if name in self.functions:
                return self._pure_function(self.functions[name], path)
            return None if u.pure(name) or name in W.SHUFFLES else \
                f"calls {name} (line {line(n)}), which may have effects"
        return f"{_what(n)} (line {line(n)})"

    def _pure_function(self, fn, path) -> str | None:
        """None when device function ``fn`` only computes its value (see the module's text)."""
        if fn.name in path:
            return f"{fn.name} is recursive"
        for p in fn.params:
            d = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else p
            if d is None or d.type != "identifier":
                return f"{fn.name}'s parameter {short(p)} is not a plain value (line {line(p)})"
        u, wu = self._uniformity(fn), self._warp_uniformity(fn)
        for n in walk(fn.node.child_by_field_name("body")):
            t, why = n.type, None
            if t in _LOOPS and ((c := n.child_by_field_name("condition")) is None or not u.expr(c)):
                why = (f"has a loop on line {line(n)} that may run a number of times that depends "
                       "on the thread, and would run for the threads the condition excludes too")
            elif t in ("assignment_expression", "update_expression"):
                target = n.child_by_field_name("left") or n.child_by_field_name("argument")
                why = None if target.type == "identifier" else f"writes memory (line {line(n)})"
            elif t == "call_expression" and (callee := text(n.child_by_field_name("function"))) in self.functions:
                if (inner := self._pure_function(self.functions[callee], path + (fn.name,))) is not None:
                    return inner  # names the callee
            elif t not in _PURE_STATEMENTS:
                why = self._effect(n, u, wu, path)
            if why is not None:
                return f"{fn.name} {why}"
        return None

    def finish_hoists(self) -> None:
        """Each hoisted call becomes its temporary, declared before its ``if`` (in braces where
        the ``if`` is no statement of a block: ``else if``, a loop's body)."""
        source = self.rw.source
        for anchor, call, tmp, ctype, moved in self._hoists:
            box = {"moved": []}
            for m in moved:  # the declarations before the call move with it, in order
                self.rw.replace(m, lambda inner, b=box: b["moved"].append(inner) or "")
            self.rw.replace(call, lambda inner, b=box, t=tmp: b.setdefault("call", inner) and t)
            start = source.rfind(b"\n", 0, anchor.start_byte) + 1
            indent = source[start:anchor.start_byte].decode()
            indent = indent if not indent.strip() else ""
            braces = anchor.parent.type != "compound_statement"
            self.rw.replace(anchor, lambda inner, b=box, t=tmp, c=ctype, i=indent, br=braces: (
                ("{ " if br else "") + "".join(f"{m}  /* accel port: moved with the call below */\n{i}"
                                               for m in b["moved"])
                + f"{c()} {t} = {b['call']};  /* accel port: hoisted out of "
                f"the branch, for every thread */\n{i}{inner}" + (" }" if br else "")))


def _outside_lane_slots(h, fn, node):
    """The nodes of expression ``node``, each lane-slot read (Hoisting._lane_slot) whole, its
    inside skipped (the index is judged by _lane_bound, not as an expression of effects)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if not (n.type == "subscript_expression" and h._lane_slot(fn, n)):
            stack.extend(reversed(n.named_children))


def _ancestors(node, stop):
    p = node.parent
    while p is not None and p != stop:
        yield p
        p = p.parent


def _what(n) -> str:
    return {"subscript_expression": "reads or writes memory", "pointer_expression": "reads memory "
            "or takes an address", "field_expression": "reads a member", "assignment_expression":
            "assigns", "update_expression": "changes a variable"}.get(n.type, f"holds a {n.type.replace('_', ' ')}")
