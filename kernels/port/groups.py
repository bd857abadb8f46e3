"""Block-level cooperative groups in CUDA -> OpenCL C: ``cg::this_thread_block()`` is the
work-group, so its ``sync()`` is a barrier and its indices are OpenCL's queries; a
``thread_block_tile<N>`` (N a power of 2 up to 32) of it is emulated like warp shuffles
(accel.kernels.port.warp), where the call is block-uniform. Grid groups, multi-device groups and
cooperative launches stay refused: OpenCL 1.2 cannot synchronise work-groups.

The group variables themselves vanish from the output: their declarations are deleted and each
use becomes the OpenCL expression it stands for.
"""
from __future__ import annotations

import re

from accel.kernels.port import warp as W
from accel.kernels.port.symbols import Scope, Sym, declarator_parts
from accel.kernels.port.syntax import text, walk

NAMESPACE = "cooperative_groups"
#: a tile declaration the grammar reads as an expression (``cg::thread_block_tile<32> w = ...``)
_TILE_DECL = re.compile(r"^(?:const\s+)?(?:(\w+)::)?thread_block_tile\s*<\s*(\d+)\s*>\s+(\w+)\s*=\s*"
                        r"(?:(\w+)::)?tiled_partition\s*<\s*(\d+)\s*>\s*\(\s*(.*?)\s*\)\s*;$", re.S)
_TILE_SIZE = re.compile(r"\btiled_partition\s*<\s*(\d+)\s*>")
_BLOCK_INDEX = {"group_index": "blockIdx", "thread_index": "threadIdx", "group_dim": "blockDim",
                "dim_threads": "blockDim"}
#: the names cooperative_groups declares (functions, group types, reduction operators): with
#: ``using namespace cooperative_groups;`` these, and only these, unqualified names are its
_CG_NAMES = frozenset((
    "this_thread_block", "this_grid", "this_multi_grid", "this_cluster", "tiled_partition",
    "coalesced_threads", "binary_partition", "labeled_partition", "sync", "reduce",
    "inclusive_scan", "exclusive_scan", "memcpy_async", "wait", "wait_prior", "invoke_one",
    "invoke_one_broadcast", "thread_group", "thread_block", "thread_block_tile", "grid_group",
    "multi_grid_group", "coalesced_group", "cluster_group", "plus", "less", "greater",
    "bit_and", "bit_or", "bit_xor"))
_GRID = ("grid", "multi_grid", "cluster", "coalesced", "labeled", "binary_partition")
_GRID_WHY = ("OpenCL 1.2 cannot synchronise or group threads beyond one work-group (or below it "
             "without a proof every thread arrives)")


def group_variables(fn_node) -> dict[str, int]:
    """The cooperative-group variables function ``fn_node`` declares: name -> 0 for the thread
    block, N for a ``thread_block_tile<N>`` (read from the text, for the uniformity analysis,
    which runs before the declarations are translated)."""
    found = {}
    for n in walk(fn_node):
        if n.type == "init_declarator":
            value = text(n.child_by_field_name("value") or n)
            name = declarator_parts(n.child_by_field_name("declarator"))[0]
            size = _TILE_SIZE.search(value)
            if name is not None and (size or "this_thread_block" in value):
                found[text(name)] = int(size.group(1)) if size else 0
        elif n.type == "expression_statement" and (m := _TILE_DECL.match(text(n))):
            found[m.group(3)] = int(m.group(2))
        elif n.type == "parameter_declaration" and (t := n.child_by_field_name("type")) is not None \
                and (d := n.child_by_field_name("declarator")) is not None \
                and (name := declarator_parts(d.named_children[0] if d.type == "reference_declarator"
                                              and d.named_children else d)[0]) is not None:
            spelled = " ".join(text(t).split())  # cg::thread_block cta, thread_block_tile<32> w
            if re.search(r"(^|::)thread_block$", spelled):
                found[text(name)] = 0
            elif (size := re.search(r"(^|::)thread_block_tile\s*<\s*(\d+)\s*>$", spelled)):
                found[text(name)] = int(size.group(2))
    return found


class Groups:
    """Cooperative-groups handling for one translation (``tr``: the OpenCLTranslator)."""

    def __init__(self, tr):
        self.tr = tr
        self.aliases = {NAMESPACE}
        self.using = False  # ``using namespace cooperative_groups;``: unqualified names are its

    # -- names ---------------------------------------------------------------------------------
    def namespace(self, item, alias: str | None) -> None:
        """``namespace cg = cooperative_groups;`` (alias) or ``using namespace ...`` (None)."""
        if alias is None:
            self.using = True
        else:
            self.aliases.add(alias)
        self.tr.rw.note("cooperative groups namespace")
        self.tr.rw.delete(item)

    def _name(self, node) -> str | None:
        """The cooperative-groups name a callee or type spells (``cg::sync`` -> ``sync``,
        ``cg::tiled_partition<32>`` -> ``tiled_partition``), or None."""
        if node.type == "qualified_identifier":
            scope = node.child_by_field_name("scope")
            if scope is None or text(scope) not in self.aliases:
                return None
            node = node.child_by_field_name("name")
        elif not self.using:
            return None
        else:  # using namespace cooperative_groups: an unqualified name is its only if it has it
            inner = node.child_by_field_name("name") if node.type in ("template_function", "template_type") else node
            if text(inner) not in _CG_NAMES or text(inner) in self.tr.functions:
                return None
        if node.type in ("template_function", "template_type"):
            node = node.child_by_field_name("name")
        return text(node) if node.type in ("identifier", "type_identifier") else None

    def _tile_size(self, node) -> int | None:
        """N of ``tiled_partition<N>`` (a power of 2 up to 32), else None."""
        while node.type == "qualified_identifier":
            node = node.child_by_field_name("name")
        args = node.child_by_field_name("arguments") if node.type == "template_function" else None
        spelled = text(args).strip("<> ") if args is not None else ""
        n = int(spelled) if spelled.isdigit() else 0
        return n if n in (1, 2, 4, 8, 16, 32) else None

    def kind(self, value, scope: Scope) -> str | None:
        """``block`` or ``tile:N`` for an expression that makes a group, else None."""
        if value.type == "identifier":
            sym = scope.get(text(value))
            return sym.group if sym is not None else None
        if value.type != "call_expression":
            return None
        callee = value.child_by_field_name("function")
        name = self._name(callee)
        args = value.child_by_field_name("arguments").named_children
        if name == "this_thread_block" and not args:
            return "block"
        if name == "tiled_partition" and len(args) == 1 and self.kind(args[0], scope) == "block":
            n = self._tile_size(callee)
            return None if n is None else f"tile:{n}"
        return None

    def param_kind(self, p) -> str | None:
        """``block`` or ``tile:N`` for a device function's parameter of a group type
        (``cg::thread_block cta``, ``const cg::thread_block& b``, ``thread_block_tile<32> w``
        under ``using namespace``), else None."""
        t = p.child_by_field_name("type") if p.type == "parameter_declaration" else None
        d = p.child_by_field_name("declarator") if t is not None else None
        if d is not None and d.type == "reference_declarator":
            d = d.named_children[0] if d.named_children else None
        if t is None or d is None or d.type != "identifier":
            return None
        name = self._name(t)
        if name == "thread_block":
            return "block"
        if name == "thread_block_tile":
            node = t.child_by_field_name("name") if t.type == "qualified_identifier" else t
            args = node.child_by_field_name("arguments") if node is not None and node.type == "template_type" else None
            spelled = text(args).strip("<> ") if args is not None else ""
            return f"tile:{spelled}" if spelled in ("1", "2", "4", "8", "16", "32") else None
        return None

    # -- declarations ----------------------------------------------------------------------------
    def declaration(self, node, scope: Scope) -> bool:
        """A declaration of block or tile group variables: deleted, the names remembered.
        True when it was one (translated or refused)."""
        declarators = node.children_by_field_name("declarator")
        if not declarators or not all(d.type == "init_declarator" for d in declarators):
            return False
        kinds = [self.kind(d.child_by_field_name("value"), scope) for d in declarators]
        if not any(k is not None for k in kinds):
            return False
        for d, k in zip(declarators, kinds):
            if k is None:
                self.tr.rw.error(d, "cooperative groups", "a declaration mixes group variables "
                                 "with others", "one declaration per group")
                return True
            scope.names[text(declarator_parts(d)[0])] = Sym("cooperative group", group=k)
        self.tr.rw.note("cooperative groups (thread_block)" if "block" in kinds
                        else "cooperative groups (thread_block_tile)")
        self.tr.rw.delete(node)
        return True

    def tile_statement(self, node, scope: Scope) -> bool:
        """``cg::thread_block_tile<32> w = cg::tiled_partition<32>(block);``, which the grammar
        parses as a comparison: a tile declaration."""
        m = _TILE_DECL.match(text(node))
        if m is None or any(ns and ns not in self.aliases for ns in (m.group(1), m.group(4))) \
                or (not self.using and not (m.group(1) and m.group(4))):
            return False
        size, name, parent = int(m.group(2)), m.group(3), m.group(6)
        sym = scope.get(parent)
        block = (sym is not None and sym.group == "block") or \
            re.fullmatch(r"(?:\w+::)?this_thread_block\s*\(\s*\)", parent) is not None
        if int(m.group(5)) != size or size not in (1, 2, 4, 8, 16, 32) or not block:
            self.tr.rw.error(node, "cooperative groups (thread_block_tile)", "only a tile of the "
                             "thread block, of a power-of-2 size up to 32, has an OpenCL form",
                             "cg::tiled_partition<32>(cg::this_thread_block())")
            return True
        scope.names[name] = Sym("cooperative group", group=f"tile:{size}")
        self.tr.rw.note("cooperative groups (thread_block_tile)")
        self.tr.rw.delete(node)
        return True

    # -- uses ------------------------------------------------------------------------------------
    def _group(self, obj, scope: Scope) -> str | None:
        """The group kind of a method call's object: a group variable or a group-making call."""
        if obj.type == "identifier":
            sym = scope.get(text(obj))
            return sym.group if sym is not None else None
        return self.kind(obj, scope) if obj.type == "call_expression" else None

    def linear(self) -> str:
        sp = self.tr.sp
        q = [sp.index.format(query=sp.queries["threadIdx"], axis=a) for a in range(3)]
        d = [sp.index.format(query=sp.queries["blockDim"], axis=a) for a in range(2)]
        return f"({q[0]} + {d[0]} * ({q[1]} + {d[1]} * {q[2]}))"

    def _size(self) -> str:
        sp = self.tr.sp
        d = [sp.index.format(query=sp.queries["blockDim"], axis=a) for a in range(3)]
        return f"({d[0]} * {d[1]} * {d[2]})"

    def call(self, node, scope: Scope) -> bool:
        """A call involving cooperative groups: translated or refused (True), or not one."""
        callee = node.child_by_field_name("function")
        args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
        if callee.type == "field_expression":
            kind = self._group(callee.child_by_field_name("argument"), scope)
            if kind is None:
                return False
            self._method(node, kind, text(callee.child_by_field_name("field")), args, scope)
            return True
        name = self._name(callee)
        if name is None:
            return False
        if name == "sync" and len(args) == 1 and (kind := self._group(args[0], scope)) is not None:
            self._method(node, kind, "sync", [], scope)
        elif name == "reduce" and len(args) == 3 and (kind := self._group(args[0], scope)) is not None:
            self._reduce(node, kind, args, scope)
        else:
            self._refuse(node, text(callee))
        return True

    def _refuse(self, node, what: str) -> None:
        grid = any(g in what for g in _GRID)
        self.tr.rw.error(node, f"cooperative groups ({what})", _GRID_WHY if grid else
                         "accel port translates the thread block's sync, indices and sizes, and "
                         "block-uniform tile shuffles and reductions, only",
                         "split the kernel at this point into two launches" if grid else
                         "__syncthreads() and threadIdx arithmetic")

    def _method(self, node, kind: str, method: str, args, scope: Scope) -> None:
        tr, rw = self.tr, self.tr.rw
        if kind == "block":
            spelled = {"sync": tr.sp.barrier, "barrier_wait": tr.sp.barrier,
                       "thread_rank": self.linear(), "size": self._size(),
                       "num_threads": self._size()}.get(method)
            if spelled is None or args:
                self._refuse(node, f"thread_block.{method}")
                return
            rw.note(f"thread_block.{method}")
            rw.replace(node, spelled)
            return
        n = int(kind.split(":")[1])
        if method in W.TILE_SHUFFLES and len(args) == 2:
            tr.warp_shuffle(node, f"thread_block_tile.{method}", W.TILE_SHUFFLES[method], args[0],
                            args[1], str(n), scope)
            return
        spelled = {"thread_rank": f"({self.linear()} & {n - 1}u)",
                   "meta_group_rank": f"({self.linear()} / {n}u)",
                   "meta_group_size": f"(({self._size()} + {n - 1}u) / {n}u)",
                   "size": f"{n}u", "num_threads": f"{n}u"}.get(method)
        if method == "sync" and not args:
            if tr.block_uniform(node, "thread_block_tile.sync"):
                rw.note("thread_block_tile.sync")
                rw.replace(node, tr.sp.barrier)
            return
        if spelled is None or args:
            self._refuse(node, f"thread_block_tile.{method}")
            return
        rw.note(f"thread_block_tile.{method}")
        rw.replace(node, spelled)

    def _reduce(self, node, kind: str, args, scope: Scope) -> None:
        """``cg::reduce(tile, v, cg::plus<float>())``: a butterfly of xor shuffles."""
        op_node = args[2]
        op_callee = (op_node.child_by_field_name("function") if op_node.type == "call_expression"
                     else op_node.child_by_field_name("type")  # cg::plus<float>{}
                     if op_node.type == "compound_literal_expression" else None)
        op = self._name(op_callee) if op_callee is not None else None
        t = W.value_type(self.tr.typer.of(args[1], scope))
        if kind == "block" or op is None or t is None or not W.reduce_ok(op, t):
            why = ("a reduction over the whole block" if kind == "block" else
                   f"the operator {text(op_node)} is not one of cg::plus, cg::greater, cg::less, "
                   "cg::bit_and/or/xor" if op is None or op not in W.REDUCE_OPS else
                   "the value is not a 32-bit int, unsigned or float")
            self.tr.rw.error(node, "cg::reduce", f"accel port emulates cg::reduce over a tile of "
                             f"32 or fewer threads with a built-in operator on 32-bit values; here "
                             f"{why}", "a __shared__ tree reduction with __syncthreads() steps")
            return
        if not self.tr.block_uniform(node, "cg::reduce", args[1:2], t):
            return
        n = kind.split(":")[1]
        helper = W.reduce_helper(op, t)
        self.tr.use_warp(helper, node)
        self.tr.rw.note("cg::reduce")
        self.tr._expr(args[1], scope)
        self.tr.rw.replace(node, lambda _i: f"{helper}({W.SCRATCH}, {self.tr.rw.render(args[1])}, {n})")

    def field(self, node, scope: Scope) -> bool:
        """``block.group_index().x`` and the other dim3 members: OpenCL's index queries."""
        call = node.child_by_field_name("argument")
        axis = text(node.child_by_field_name("field"))
        if call.type != "call_expression" or axis not in ("x", "y", "z"):
            return False
        callee = call.child_by_field_name("function")
        if callee.type != "field_expression" or self._group(callee.child_by_field_name("argument"),
                                                            scope) != "block":
            return False
        method = text(callee.child_by_field_name("field"))
        if method not in _BLOCK_INDEX:
            self._refuse(node, f"thread_block.{method}")
            return True
        sp = self.tr.sp
        self.tr.rw.note(f"thread_block.{method}")
        self.tr.rw.replace(node, sp.index.format(query=sp.queries[_BLOCK_INDEX[method]],
                                                 axis="xyz".index(axis)))
        return True
