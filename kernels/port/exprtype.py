"""The C type of a CUDA expression, as far as ``accel port`` needs it: OpenCL's builtins resolve
overloads and result types differently from CUDA's (``popcount`` returns the argument's unsigned
type where ``__popc`` returns int; ``min(uint, int)`` is ambiguous in OpenCL C where CUDA picks
unsigned), so the translator casts to the type CUDA would compute in, and must know it.

Types are OpenCL scalar names ("int", "uint", "long", "float", ...) or vector names
("float4"); None means "not known", and callers then keep CUDA's spelling or refuse, never
guess.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from accel.kernels.port.symbols import (Scope, cxx_cast, functional_cast, member_info, pointer_info,
                                       type_node)
from accel.kernels.port.syntax import text

INTEGERS = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong")
FLOATS = ("half", "float", "double")
_RANK = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8}
_COMPARISONS = frozenset(("==", "!=", "<", ">", "<=", ">=", "&&", "||"))


#: CUDA's size_t and ptrdiff_t are 64-bit on every platform it supports
_WIDTHS = {"size_t": "ulong", "ptrdiff_t": "long"}


def promote(t: str | None) -> str | None:
    """C's integer promotion: everything narrower than int computes as int (bool too)."""
    if t in ("bool", "char", "uchar", "short", "ushort"):
        return "int"
    return _WIDTHS.get(t, t)


def arithmetic(a: str | None, b: str | None) -> str | None:
    """C's usual arithmetic conversions on two scalar types (None when either is unknown or a
    vector)."""
    a, b = promote(a), promote(b)
    if a is None or b is None or a not in (*INTEGERS, *FLOATS) or b not in (*INTEGERS, *FLOATS):
        return None
    for f in ("double", "float", "half"):
        if f in (a, b):
            return f
    if a == b:
        return a
    ua, ub = a.startswith("u"), b.startswith("u")
    if ua == ub:
        return a if _RANK[a] >= _RANK[b] else b
    u, s = (a, b) if ua else (b, a)
    if _RANK[u] >= _RANK[s]:
        return u
    return s  # the signed type is wider and holds every value of the unsigned one


def literal_type(spelled: str) -> str:
    """The type of a C number literal: C picks the first of a list of types that holds the
    value, the list depending on the suffix and on decimal vs hex/octal spelling."""
    s = spelled.lower().replace("'", "")
    based = s.startswith(("0x", "0b")) or (len(s) > 1 and s[0] == "0" and s[1].isdigit())
    if not s.startswith("0x") and (any(c in s for c in ".e") or s.endswith("f")):
        return "float" if s.endswith("f") else "double"
    digits = s.rstrip("ul")
    suffix = s[len(digits):]
    value = int(digits, 8) if based and digits[1].isdigit() else int(digits, 0)
    if "u" in suffix:
        candidates = ("ulong",) if "l" in suffix else ("uint", "ulong")
    elif "l" in suffix:
        candidates = ("long", "ulong") if based else ("long",)
    else:
        candidates = ("int", "uint", "long", "ulong") if based else ("int", "long")
    limits = {"int": 2**31, "uint": 2**32, "long": 2**63, "ulong": 2**64}
    return next((t for t in candidates if value < limits[t]), "ulong")


class ExprTyper:
    """Types expressions against a scope, the file's functions and its object-like macros.
    ``normal`` normalises a spelled type name; ``results`` gives a called name's result type;
    ``typedefs`` are the file's type names."""

    def __init__(self, normal: Callable[[str], str], results: Callable[[str, list], str | None],
                 macros: Mapping[str, str | None], typedefs: Mapping[str, str] | None = None):
        self.normal, self.results, self.macros = normal, results, macros
        self.typedefs = {} if typedefs is None else typedefs  # the caller's, filled as it reads

    def of(self, node, scope: Scope) -> str | None:
        kind = node.type
        if kind == "number_literal":
            return literal_type(text(node))
        if kind in ("char_literal", "true", "false"):
            return "int"
        if kind == "identifier":
            sym = scope.get(text(node))
            if sym is not None:
                return None if sym.pointer or sym.array else sym.type
            return self.macros.get(text(node))
        if kind == "parenthesized_expression":
            return self.of(node.named_children[0], scope)
        if kind == "field_expression":
            arg, fld = node.child_by_field_name("argument"), text(node.child_by_field_name("field"))
            if arg.type == "identifier" and text(arg) in ("threadIdx", "blockIdx", "blockDim",
                                                          "gridDim"):
                return "uint"
            base = self.of(arg, scope)
            if base and base[-1].isdigit() and fld in ("x", "y", "z", "w"):
                return base.rstrip("0123456789")
            member = member_info(node, scope, self.normal)
            return None if member is None or member.array else member.type
        if kind == "subscript_expression" or (kind == "pointer_expression"
                                              and text(node).startswith("*")):
            info = pointer_info(node.named_children[0], scope, self.normal)
            return None if info is None else info.type
        if kind == "cast_expression":
            tdesc = node.child_by_field_name("type")
            if any(n.type == "abstract_pointer_declarator" for n in tdesc.named_children):
                return None
            return self.normal(" ".join(text(type_node(tdesc)).split()))
        if kind == "call_expression":
            return self._call(node, scope)
        if kind == "binary_expression":
            op = text(node.child_by_field_name("operator"))
            if op in _COMPARISONS:
                return "int"
            left = self.of(node.child_by_field_name("left"), scope)
            if op in ("<<", ">>"):
                return promote(left)
            return arithmetic(left, self.of(node.child_by_field_name("right"), scope))
        if kind == "unary_expression":
            op = text(node.child_by_field_name("operator"))
            return "int" if op == "!" else promote(self.of(node.child_by_field_name("argument"), scope))
        if kind == "update_expression":
            return self.of(node.child_by_field_name("argument"), scope)
        if kind == "assignment_expression":
            return self.of(node.child_by_field_name("left"), scope)
        if kind == "conditional_expression":
            a = self.of(node.child_by_field_name("consequence"), scope)
            b = self.of(node.child_by_field_name("alternative"), scope)
            return a if a == b else arithmetic(a, b)
        if kind == "comma_expression":
            return self.of(node.child_by_field_name("right"), scope)
        if kind == "sizeof_expression":
            return "ulong"
        return None

    def _call(self, node, scope: Scope) -> str | None:
        fn = node.child_by_field_name("function")
        args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
        if (cast := cxx_cast(node)) is not None:
            tdesc = cast[0]
            if any(n.type == "abstract_pointer_declarator" for n in tdesc.named_children):
                return None
            return self.normal(" ".join(text(type_node(tdesc)).split()))
        if functional_cast(node, self.typedefs):
            return self.normal(" ".join(text(fn).split()))
        if fn.type != "identifier":
            return None
        return self.results(text(fn), [self.of(a, scope) for a in args])
