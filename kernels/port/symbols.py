"""What ``accel port`` knows about names while it translates: a scoped symbol table (type,
pointer or array, address space) and the address-space inference OpenCL needs, which follows a
pointer-valued expression back to the parameter, array or variable it comes from.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from accel.kernels.port.syntax import text


@dataclass(frozen=True)
class Sym:
    """What the translator knows of a name: element type, pointer/array, address space."""

    type: str
    pointer: bool = False
    array: bool = False
    space: str = "private"  # of the pointee for pointers, of the storage otherwise
    #: (construct, why, rewrite) when the declaration was refused: each use is reported too
    refused: tuple[str, str, str] | None = None
    #: a cooperative group variable: "block", or "tile:N" for a thread_block_tile<N>
    group: str | None = None
    #: a reference parameter T& x, translated as a pointer: each use is *x
    reference: bool = False


@dataclass
class Scope:
    names: dict[str, Sym] = field(default_factory=dict)
    parent: "Scope | None" = None
    #: struct type -> member name -> Sym (space unset): kept on the file's scope
    structs: dict[str, dict[str, Sym]] = field(default_factory=dict)

    def get(self, name: str) -> Sym | None:
        s: Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def child(self) -> "Scope":
        return Scope(parent=self)

    def member(self, struct: str, name: str) -> Sym | None:
        root = self
        while root.parent is not None:
            root = root.parent
        return root.structs.get(struct, {}).get(name)


def qualifiers(node) -> set[str]:
    """CUDA keywords on a declaration (``__global__``, ``__shared__``, ``extern``...)."""
    out = set()
    for c in node.children:
        if c.type in ("type_qualifier", "storage_class_specifier"):
            out.add(text(c).strip())
        elif not c.is_named:
            out.add(c.type)
    return out


def type_node(decl):
    return decl.child_by_field_name("type")


def declarator_parts(d):
    """(name node, pointer depth, array depth) of a declarator."""
    ptr = arr = 0
    while d is not None and d.type not in ("identifier", "field_identifier", "type_identifier"):
        if d.type == "pointer_declarator":
            ptr += 1
        elif d.type in ("array_declarator",):
            arr += 1
        elif d.type in ("init_declarator", "function_declarator"):
            pass
        elif d.type != "parenthesized_declarator":
            return d, -1, -1  # a declarator kind the subset lacks (reference, function...)
        d = d.child_by_field_name("declarator") or (d.named_children[0] if d.named_children else None)
    return d, ptr, arr


def pointer_info(node, scope: Scope, normal: Callable[[str], str]) -> Sym | None:
    """The pointee type and address space of a pointer-valued expression, or None when the
    expression is not one the inference follows. ``normal`` normalises a spelled type name."""
    kind = node.type
    if kind == "identifier":
        sym = scope.get(text(node))
        return sym if sym is not None and (sym.pointer or sym.array) else None
    if kind == "parenthesized_expression":
        return pointer_info(node.named_children[0], scope, normal)
    if kind == "field_expression":  # an array member decays to a pointer into its holder's space
        info = member_info(node, scope, normal)
        return replace(info, pointer=True, array=False) if info is not None and info.array else None
    if kind == "binary_expression" and text(node.child_by_field_name("operator")) in ("+", "-"):
        return (pointer_info(node.child_by_field_name("left"), scope, normal)
                or pointer_info(node.child_by_field_name("right"), scope, normal))
    if kind == "pointer_expression" and text(node).startswith("&"):
        return storage_info(node.child_by_field_name("argument"), scope, normal)
    if kind == "cast_expression":
        inner = pointer_info(node.child_by_field_name("value"), scope, normal)
        spelled = " ".join(text(type_node(node.child_by_field_name("type"))).split())
        return None if inner is None else replace(inner, type=normal(spelled))
    if kind == "call_expression" and (cast := cxx_cast(node)) is not None:
        tdesc, value = cast
        inner = pointer_info(value, scope, normal)
        spelled = " ".join(text(type_node(tdesc)).split())
        return None if inner is None else replace(inner, type=normal(spelled))
    if kind == "assignment_expression":
        return pointer_info(node.child_by_field_name("left"), scope, normal)
    if kind == "update_expression":
        return pointer_info(node.child_by_field_name("argument"), scope, normal)
    if kind == "conditional_expression":
        a = pointer_info(node.child_by_field_name("consequence"), scope, normal)
        b = pointer_info(node.child_by_field_name("alternative"), scope, normal)
        return a if a is not None and b is not None and a.space == b.space else None
    return None


CXX_CASTS = frozenset(("static_cast", "reinterpret_cast", "const_cast"))


def cxx_cast(node):
    """(type_descriptor, value) of ``static_cast<T>(v)`` and its kin, or None for other calls."""
    fn = node.child_by_field_name("function")
    if fn is None or fn.type != "template_function" or text(fn.child_by_field_name("name")) not in CXX_CASTS:
        return None
    targs = fn.child_by_field_name("arguments").named_children
    args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
    return (targs[0], args[0]) if len(targs) == 1 and len(args) == 1 else None


def functional_cast(node, typedefs=()) -> bool:
    """Whether a call is C++'s functional cast, ``float(x)``, ``unsigned(x)``, ``u32(x)``: its
    callee is a type (``unsigned`` alone, and a typedef name, the parser reads as a name)."""
    fn = node.child_by_field_name("function")
    return fn is not None and (fn.type in ("primitive_type", "sized_type_specifier", "type_identifier")
                               or (fn.type == "identifier" and (text(fn) in ("unsigned", "signed")
                                                                or text(fn) in typedefs)))


def storage_info(node, scope: Scope, normal: Callable[[str], str]) -> Sym | None:
    """Where an lvalue lives (for ``&lvalue``), as a pointer to it: element type and space."""
    kind = node.type
    if kind == "identifier":
        sym = scope.get(text(node))
        return None if sym is None else Sym(sym.type, pointer=True, space=sym.space)
    if kind == "subscript_expression":
        base = node.child_by_field_name("argument")
        while base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        info = pointer_info(base, scope, normal)
        return None if info is None else Sym(info.type, pointer=True, space=info.space)
    if kind == "pointer_expression" and text(node).startswith("*"):
        return pointer_info(node.child_by_field_name("argument"), scope, normal)
    if kind == "parenthesized_expression":
        return storage_info(node.named_children[0], scope, normal)
    if kind == "field_expression":
        info = member_info(node, scope, normal)
        return None if info is None else replace(info, pointer=True, array=False)
    return None


def member_info(node, scope: Scope, normal: Callable[[str], str]) -> Sym | None:
    """The struct member ``s.f`` or ``p->f`` names, in the address space its holder lives in."""
    arg = node.child_by_field_name("argument")
    arrow = text(node.child_by_field_name("operator")) == "->"
    holder = pointer_info(arg, scope, normal) if arrow else storage_info(arg, scope, normal)
    member = None if holder is None else scope.member(holder.type, text(node.child_by_field_name("field")))
    return None if member is None else replace(member, space=holder.space)
