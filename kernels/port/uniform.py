"""Block-uniform control flow: whether every thread of a CUDA block provably reaches a node.

A full-mask warp shuffle (``__shfl_xor_sync(0xffffffff, ...)``) already requires its whole warp
to arrive. Emulated on OpenCL 1.2 through local memory, it needs a ``barrier``, which every
work-item of the work-group must reach. So the translator emulates a shuffle only where it can
prove that every thread of the block gets there: each condition the call sits under (``if``,
loop, ``?:``, ``&&``/``||``) is the same for the whole block, and no return, break or continue
that only some threads take can skip it. Block-uniform values are constants, ``blockIdx``,
``blockDim``, ``gridDim``, kernel scalar parameters, and local variables only ever assigned
uniform values at uniform points (found by a fixpoint over the function). The analysis is
conservative: what it cannot prove (a value read from memory, a device function's parameter)
is taken to differ between threads, and the shuffle is refused with that reason.

The file's macros are text to the parser, so their bodies are read here as tokens: a macro is a
block-uniform value only when its body names nothing but literals, operators, the uniform
queries and other such macros; a macro whose body holds control flow (``return``, ``continue``,
a loop, an ``if``) may take threads out of the block's path wherever it is used, so a shuffle
after or inside one is refused naming it.
"""
from __future__ import annotations

import re

from accel.kernels.port.symbols import declarator_parts
from accel.kernels.port.syntax import line, text, walk

_UNIFORM_QUERIES = frozenset(("blockIdx", "blockDim", "gridDim"))
#: nodes that are uniform when all their children are
_COMPOSITE = frozenset((
    "binary_expression", "unary_expression", "parenthesized_expression", "conditional_expression",
    "cast_expression", "comma_expression", "condition_clause", "argument_list",
))
_TYPES = frozenset(("type_descriptor", "primitive_type", "sized_type_specifier", "type_identifier",
                    "abstract_pointer_declarator", "type_qualifier"))
_LEAVES = frozenset(("number_literal", "char_literal", "true", "false", "null", "sizeof_expression",
                     "string_literal", "comment"))
_LOOPS = frozenset(("for_statement", "while_statement", "do_statement"))
#: the group methods whose result is the same for every thread of the block
UNIFORM_GROUP_METHODS = frozenset(("size", "num_threads", "group_dim", "dim_threads",
                                   "meta_group_size", "group_index"))
_IDENT = re.compile(r"[A-Za-z_]\w*")
_CONTROL = frozenset(("return", "break", "continue", "goto", "if", "else", "for", "while", "do",
                      "switch", "case"))
#: names a uniform macro body may hold besides other uniform macros and its own parameters
_UNIFORM_WORDS = _UNIFORM_QUERIES | {"x", "y", "z", "int", "unsigned", "float", "long", "short",
                                     "char", "double", "sizeof", "const", "size_t"}


class Uniformity:
    """The block-uniformity facts of one function (``fn_node``, a function_definition).

    ``params_uniform``: a kernel's scalar parameters are the same for the whole block; a device
    function's are not known to be. ``pure(name)``: whether a call to ``name`` with uniform
    arguments gives a uniform result (math functions). ``groups``: the variables bound to
    cooperative groups, name -> 0 for the thread block or N for a ``thread_block_tile<N>``."""

    def __init__(self, fn_node, params_uniform: bool, pure, groups=None,
                 macros: dict[str, tuple[tuple[str, ...], str]] | None = None, skip=frozenset()):
        self.fn, self.pure, self.groups = fn_node, pure, dict(groups or {})
        #: the file's macros: name -> (parameters, body text)
        self.macros = macros or {}
        #: the returns every thread now passes (accel.kernels.port.earlyexit), by byte offset
        self.skip = skip
        self._macro_uniform: dict[str, bool] = {}
        body = fn_node.child_by_field_name("body")
        self.body = body
        params = []
        decl = fn_node.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        if decl is not None:
            for p in decl.child_by_field_name("parameters").named_children:
                d = p.child_by_field_name("declarator") if p.type in (
                    "parameter_declaration", "optional_parameter_declaration") else None
                if d is not None and (name := declarator_parts(d)[0]) is not None:
                    params.append(text(name))
        self.variables = set(params)
        self.uniform = set(params) if params_uniform else set()
        self.jumps = []
        self.macro_jumps = []  # uses of macros whose bodies hold control flow
        self.defs = defs = []  # (name, value node or None, node where it happens)
        for n in walk(body):
            if n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    name, ptr, arr = declarator_parts(d)
                    if name is None or ptr < 0:
                        continue
                    self.variables.add(self.key(name))
                    if arr:
                        defs.append((self.key(name), None, n, False))  # elements written anywhere
                    else:
                        value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                        defs.append((self.key(name), value, n, True))
            elif n.type == "assignment_expression":
                left = n.child_by_field_name("left")
                while left.type in ("field_expression", "subscript_expression", "parenthesized_expression"):
                    left = left.named_children[0]
                if left.type == "identifier":
                    defs.append((self.key(left), n.child_by_field_name("right"), n, True))
            elif n.type == "update_expression":
                arg = n.child_by_field_name("argument")
                if arg.type == "identifier":
                    defs.append((self.key(arg), arg, n, True))
            elif n.type == "pointer_expression" and text(n).startswith("&"):
                arg = n.child_by_field_name("argument")
                if arg.type == "identifier":  # its address escapes: anything may write it
                    defs.append((self.key(arg), None, n, False))
            elif n.type in ("return_statement", "break_statement", "continue_statement",
                            "goto_statement") and n.start_byte not in skip:
                self.jumps.append(n)
            elif n.type == "identifier" and text(n) in self.macros and self._controls(text(n)):
                self.macro_jumps.append(n)
        self.uniform |= self.variables - set(params)
        changed = True
        while changed:  # drop every variable with a thread-dependent definition, to a fixpoint
            changed = False
            for name, value, where, ok in defs:
                if name in self.uniform and not (ok and (value is None or self.expr(value))
                                                 and self.point(where) is None):
                    self.uniform.discard(name)
                    changed = True

    # -- values ------------------------------------------------------------------------------------
    def key(self, ident) -> str:
        """The variable identifier ``ident`` names, for the analysis: its name, except that a
        for loop's own counter (``for (int i = ...)``) is told apart from the function's other
        variables of that name (by the loop's offset), as C scopes it. (A name declared again
        inside the loop's body falls under the counter's key: both are judged together.)"""
        name = text(ident)
        p = ident.parent
        while p is not None and p != self.fn:
            if p.type == "for_statement" and (init := p.child_by_field_name("initializer")) is not None \
                    and init.type == "declaration" and any(
                        (v := declarator_parts(d)[0]) is not None and text(v) == name
                        for d in init.children_by_field_name("declarator")):
                return f"{name}@{p.start_byte}"
            p = p.parent
        return name

    def expr(self, n) -> bool:
        """Whether the value of expression ``n`` is the same for every thread of the block."""
        t = n.type
        if t in _LEAVES or t in _TYPES:
            return True
        if t == "identifier":
            name = text(n)
            if name in self.groups:
                return True  # the group object itself; its methods are judged in calls
            if self.key(n) in self.variables:
                return self.key(n) in self.uniform
            return self.macro_uniform(name) if name in self.macros else True  # enumerators
        if t == "field_expression":
            arg = n.child_by_field_name("argument")
            if arg.type == "identifier" and text(arg) in _UNIFORM_QUERIES:
                return True
            if arg.type == "identifier" and text(arg) == "threadIdx":
                return False
            return self.expr(arg)
        if t == "call_expression":
            callee = n.child_by_field_name("function")
            args = n.child_by_field_name("arguments")
            if callee.type == "field_expression":
                obj = callee.child_by_field_name("argument")
                return (obj.type == "identifier" and text(obj) in self.groups
                        and text(callee.child_by_field_name("field")) in UNIFORM_GROUP_METHODS)
            if callee.type in _TYPES or (callee.type == "identifier" and self.pure(text(callee))):
                return all(self.expr(a) for a in args.named_children)
            if callee.type == "identifier" and text(callee) in self.macros:
                return self.macro_uniform(text(callee)) and all(self.expr(a) for a in args.named_children)
            return False
        if t == "update_expression":
            return self.expr(n.child_by_field_name("argument"))
        if t in _COMPOSITE:
            return all(self.expr(c) for c in n.named_children)
        return False

    def macro_uniform(self, name: str) -> bool:
        """Whether macro ``name`` (with uniform arguments) stands for a block-uniform value."""
        if name not in self._macro_uniform:
            self._macro_uniform[name] = False  # a macro naming itself is not proven uniform
            params, body = self.macros[name]
            words = set(_IDENT.findall(body)) - set(params) - _UNIFORM_WORDS
            self._macro_uniform[name] = not self._controls(name) and all(
                w in self.macros and self.macro_uniform(w) for w in words)
        return self._macro_uniform[name]

    def _controls(self, name: str) -> bool:
        return bool(_CONTROL & set(_IDENT.findall(self.macros[name][1])))

    # -- control flow ------------------------------------------------------------------------------
    def _conditions(self, node):
        """The first condition ``node`` sits under that differs between threads, or None."""
        child, p = node, node.parent
        while p is not None and p != self.fn:
            cond = None
            if p.type in ("if_statement", "switch_statement", "conditional_expression"):
                c = p.child_by_field_name("condition")
                cond = c if c is not None and child != c else None
            elif p.type in ("while_statement", "do_statement"):
                cond = p.child_by_field_name("condition")
            elif p.type == "for_statement" and child != p.child_by_field_name("initializer"):
                cond = p.child_by_field_name("condition")
            elif p.type == "binary_expression" and text(p.child_by_field_name("operator")) in ("&&", "||") \
                    and child == p.child_by_field_name("right"):
                cond = p.child_by_field_name("left")
            if cond is not None and not self.expr(cond):
                return cond
            child, p = p, p.parent
        return None

    def point(self, node) -> str | None:
        """None when every thread of the block that runs this function reaches ``node``;
        otherwise why not, naming the line."""
        for m in self.macro_jumps:
            if m.start_byte < node.end_byte:
                return (f"the macro {text(m)} on line {line(m)} holds control flow (its body: "
                        f"{short_text(self.macros[text(m)][1])}) that accel port does not expand to "
                        "check: some threads may leave or skip the block's path")
        for j in self.jumps:  # first: a divergent exit also makes later loop counters differ
            if not self._skips(j, node):
                continue
            if j.type == "goto_statement":
                return f"the goto on line {line(j)} makes the control flow impossible to follow"
            cond = self._conditions(j)
            if cond is not None:
                what = j.type.removesuffix("_statement")
                return (f"the {what} on line {line(j)} is taken by only some threads "
                        f"(under {short(cond)}, line {line(cond)})")
        cond = self._conditions(node)
        if cond is not None:
            return f"the condition on line {line(cond)} ({short(cond)}) can differ between threads"
        return None

    def _skips(self, jump, node) -> bool:
        """Whether taking ``jump`` can keep a thread from reaching ``node``."""
        if jump.type in ("return_statement", "goto_statement"):
            if jump.start_byte < node.start_byte:
                return True
            return any(_inside(jump, loop) for loop in _ancestors(node, self.fn) if loop.type in _LOOPS)
        kinds = _LOOPS if jump.type == "continue_statement" else _LOOPS | {"switch_statement"}
        target = next((a for a in _ancestors(jump, self.fn) if a.type in kinds), None)
        if target is None or not _inside(node, target):
            return False
        return target.type != "switch_statement" or jump.start_byte < node.start_byte


class WarpUniformity(Uniformity):
    """The same facts for a warp instead of the block: a value or condition the same for every
    thread of each warp, assuming ``blockDim.x`` is a multiple of 32. Each warp is then 32
    consecutive ``threadIdx.x`` of one row, so ``threadIdx.y``/``.z``, ``threadIdx.x / 32`` and
    ``threadIdx.x < 64`` are warp-uniform; a lane (``threadIdx.x % 32``) is not. A 32-thread
    tile's ``meta_group_rank()`` is the linear thread index / 32, the warp's index itself."""

    def expr(self, n) -> bool:
        if n.type == "field_expression" and text(n.child_by_field_name("argument")) == "threadIdx":
            return text(n.child_by_field_name("field")) in ("y", "z")
        if n.type == "call_expression" and (f := n.child_by_field_name("function")).type == "field_expression":
            obj = f.child_by_field_name("argument")
            if text(f.child_by_field_name("field")) == "meta_group_rank" and obj.type == "identifier" \
                    and self.groups.get(text(obj)) == 32:  # the warp's own index, whatever the block
                return not n.child_by_field_name("arguments").named_children
        if n.type == "binary_expression" and self.thread_x(n.child_by_field_name("left")):
            op, k = text(n.child_by_field_name("operator")), self.constant(n.child_by_field_name("right"))
            if k is not None and k > 0 and (op == "/" and k % 32 == 0 or op == ">>" and k >= 5
                                             or op in ("<", ">=") and k % 32 == 0
                                             or op in ("<=", ">") and (k + 1) % 32 == 0):
                return True
        return super().expr(n)

    def thread_x(self, n) -> bool:
        """``threadIdx.x``, or a variable whose one definition is it (``int tid = threadIdx.x``)."""
        while n.type == "parenthesized_expression":
            n = n.named_children[0]
        if n.type == "identifier":
            values = [v for name, v, _w, _ok in self.defs if name == self.key(n)]
            return len(values) == 1 and values[0] is not None and self.thread_x(values[0])
        return text(n).replace(" ", "") == "threadIdx.x"

    def constant(self, n) -> int | None:
        """The value of an integer literal, ``warpSize`` or a macro defined as one, else None."""
        spelled = text(n).strip("() ")
        for _ in range(4):
            if spelled == "warpSize":
                return 32
            if spelled in self.macros and not self.macros[spelled][0]:
                spelled = self.macros[spelled][1].strip("() ")
        try:
            return int(spelled.rstrip("uUlL"), 0)
        except ValueError:
            return None


def _ancestors(node, stop):
    p = node.parent
    while p is not None and p != stop:
        yield p
        p = p.parent


def _inside(node, outer) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def short(node) -> str:
    """The text of ``node`` on one line, cut to 40 characters, for a diagnostic."""
    return short_text(text(node))


def short_text(s: str) -> str:
    """``s`` on one line, cut to 40 characters."""
    s = " ".join(s.split())
    return s if len(s) <= 40 else s[:37] + "..."
