"""Function templates whose every use is an explicit instantiation
(``template __global__ void scale<float>(float*, float, int);``) or a call naming the arguments
(``reduce<256>(...)``): OpenCL C has no templates, but such a file names each instantiation it
needs, so the template is expanded into one copy per instantiation before translation:
``scale<float>`` becomes the function ``scale_float``, ``reduce<256, int>`` ``reduce_256_int``,
with type parameters replaced by the types and value parameters (``int N``) by the constants,
token by token (syntax nodes, not text).

Templates without explicit instantiations are left to the translator, which refuses them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from accel.kernels.port.symbols import declarator_parts
from accel.kernels.port.syntax import text, walk


@dataclass(frozen=True)
class Expansion:
    """The expanded source and, for each of its lines, the line of the original it comes from."""

    source: bytes
    lines: list[int]
    #: (template name, its arguments, name of the copy, line of the template) per copy made
    copies: list[tuple[str, tuple[str, ...], str, int]]
    #: warnings about the expansion, on lines of the source it expanded
    notes: tuple = ()


def _items(root):
    """The file's top-level items, and those inside namespaces (which the translation drops)."""
    for item in root.named_children:
        if item.type == "namespace_definition" and (body := item.child_by_field_name("body")) is not None:
            yield from _items(body)
        else:
            yield item


def _function_pointer(decl):
    """The name ``F`` of a function-pointer declarator ``(*F)(args)``, else None."""
    if decl is None or decl.type != "function_declarator":  # (an unnamed parameter: none)
        return None
    inner = decl.child_by_field_name("declarator")
    while inner is not None and inner.type in ("parenthesized_declarator", "pointer_declarator"):
        inner = inner.child_by_field_name("declarator") if inner.type == "pointer_declarator" \
            else (inner.named_children[0] if inner.named_children else None)
    return inner if inner is not None and inner.type == "identifier" else None


def function_types(root) -> frozenset[str]:
    """The file's typedefs of function pointer types (``typedef void (*kernel_t)(float);``, or
    ``using kernel_t = void (*)(float);``)."""
    typedefs = {text(declarator_parts(d)[0]) for n in walk(root) if n.type == "type_definition"
                for d in n.children_by_field_name("declarator") if d.type == "function_declarator"}
    aliases = {text(n.child_by_field_name("name")) for n in walk(root) if n.type == "alias_declaration"
               and "(*" in "".join(text(n.child_by_field_name("type")).split())}  # using f_t = float (*)(float);
    return frozenset(typedefs | aliases)


def function_template(item, fn_types: frozenset[str] = frozenset()):
    """(name, parameters, function node, defaults) of a function template, each parameter
    (name, "type") for ``typename T``, (name, "function") for ``float (*F)(float)`` or
    ``kernel_t F`` with kernel_t one of ``fn_types``, or (name, its type) for ``unsigned int
    N``; ``defaults``: parameter name -> its default as spelled (``template <int width =
    WARP_SIZE>``, ``typename T = float``); None for any other kind."""
    params, defaults = [], {}
    for p in item.child_by_field_name("parameters").named_children:
        if p.type == "optional_type_parameter_declaration" and p.child_by_field_name("name") is not None:
            ids, kind = [p.child_by_field_name("name")], "type"
            defaults[text(ids[0])] = " ".join(text(p.child_by_field_name("default_type")).split())
        elif p.type == "optional_parameter_declaration" and p.child_by_field_name("declarator") is not None:
            ids = [p.child_by_field_name("declarator")]
            kind = " ".join(text(p.child_by_field_name("type")).split())
            defaults[text(ids[0])] = " ".join(text(p.child_by_field_name("default_value")).split())
        elif p.type == "type_parameter_declaration":
            ids = [c for c in p.named_children if c.type == "type_identifier"]
            kind = "type"
        elif p.type == "parameter_declaration" and (fp := _function_pointer(
                p.child_by_field_name("declarator"))) is not None:
            ids, kind = [fp], "function"  # instantiated with a function's name
        elif p.type == "parameter_declaration" and text(p.child_by_field_name("type")) in fn_types:
            ids, kind = [p.child_by_field_name("declarator")], "function"
        elif p.type == "parameter_declaration" and p.child_by_field_name("declarator") is not None:
            ids = [p.child_by_field_name("declarator")]
            # the constant keeps the parameter's type (unsigned stays unsigned)
            kind = " ".join(text(p.child_by_field_name("type")).split())
        else:
            return None
        if len(ids) != 1 or ids[0].type not in ("type_identifier", "identifier"):
            return None
        params.append((text(ids[0]), kind))
    fn = next((c for c in item.named_children if c.type == "function_definition"), None)
    decl = fn.child_by_field_name("declarator") if fn is not None else None
    if decl is None or decl.type != "function_declarator":
        return None
    name = decl.child_by_field_name("declarator")
    # C++ deduces a type parameter the function's parameters name before its default applies:
    # such a default is not one a call can be expanded with
    named = {text(n) for n in walk(decl.child_by_field_name("parameters")) if n.type == "type_identifier"}
    defaults = {p: d for p, d in defaults.items() if p not in named or dict(params)[p] != "type"}
    return (text(name), params, fn, defaults) if name.type == "identifier" else None


def _arguments(tf, params, defaults=None) -> tuple[str, ...] | None:
    """The spelled arguments of ``name<...>`` when they fit the template's parameters: a type
    for each type parameter, a constant for each value parameter; trailing parameters left out
    take their defaults (see function_template)."""
    args = tf.child_by_field_name("arguments").named_children
    rest = [(defaults or {}).get(p) for p, _kind in params[len(args):]]
    if len(args) > len(params) or None in rest:
        return None
    params, tail = params[:len(args)], tuple(rest)
    for a, (_name, kind) in zip(args, params):
        if kind == "type" and a.type != "type_descriptor":
            return None
        if kind == "function":  # a function's name, or an instantiation of a template's
            if a.type not in ("identifier", "type_descriptor", "template_function"):
                return None
            continue
        if kind != "type" and a.type == "type_descriptor" and a.named_children[0].type not in (
                "type_identifier", "qualified_identifier"):  # a constant, or E::A of a scoped enum
            return None
    # a function argument's namespace goes, as the translation drops the file's namespaces
    return tuple(re.sub(r"\b\w+\s*::\s*", "", " ".join(text(a).split())) if kind == "function"
                 else " ".join(text(a).split()) for a, (_name, kind) in zip(args, params)) + tail


def _instantiation(item, templates):
    """(template name, argument spellings) of ``template void f<A, 4>(...);``."""
    decl = item.child_by_field_name("declarator")
    if decl is None or decl.type != "function_declarator":
        return None
    tf = decl.child_by_field_name("declarator")
    while tf is not None and tf.type == "qualified_identifier":  # ns::f<A>: the namespace drops
        tf = tf.child_by_field_name("name")
    if tf is None or tf.type != "template_function":
        return None
    name = text(tf.child_by_field_name("name"))
    args = _arguments(tf, templates[name][1], templates[name][3]) if name in templates else None
    return None if args is None else (name, args)


def copy_name(name: str, args: tuple[str, ...]) -> str:
    """The OpenCL name of ``name<args...>``: ``scale<unsigned int>`` -> ``scale_unsigned_int``,
    ``shift<-1>`` -> ``shift_m1`` (a minus sign would otherwise vanish: shift<1> is shift_1)."""
    return "_".join([name, *("".join(c if c.isalnum() else "m" if c == "-" else "_" for c in a)
                             .strip("_") for a in args)])


def expand(source: bytes, root) -> Expansion | None:
    """The source with every explicitly instantiated function template expanded (and calls
    that name the template's arguments, ``sq<float>(v)``, pointed at the copy), or None when
    there is nothing to expand."""
    templates, wanted, calls, fn_types = {}, [], [], function_types(root)
    for item in _items(root):
        if item.type == "template_declaration" and (t := function_template(item, fn_types)) is not None:
            templates[t[0]] = (item, t[1], t[2], t[3])
    #: byte range -> replacement chunks, each (text, original line of its first byte)
    edits: dict[tuple[int, int], list[tuple[bytes, int]]] = {}
    # a template that a call also uses without naming its arguments (sq<float>(a) and sq(b)) waits
    # for the translator to spell those out (OpenCLTranslator.rewrites), then expands in one go
    waiting = {text(f) for n in walk(root) if n.type == "call_expression"
               and (f := n.child_by_field_name("function")).type == "identifier" and text(f) in templates}
    for item in _items(root):
        if item.type == "template_instantiation" and (i := _instantiation(item, templates)) is not None \
                and i[0] not in waiting:
            wanted.append(i)
            edits[(item.start_byte, item.end_byte)] = []
    inside = [(it.start_byte, it.end_byte) for it, _p, _f, _d in templates.values()]
    taken = set()  # every name the file spells: a copy must not take one of them
    for n in walk(root):  # calls naming their template arguments
        if n.type in ("identifier", "type_identifier", "field_identifier"):
            taken.add(text(n))
        if n.type == "call_expression" and n.child_by_field_name("function").type == "template_function" \
                and not any(a <= n.start_byte < b for a, b in inside):
            tf = n.child_by_field_name("function")
            name = text(tf.child_by_field_name("name"))
            args = _arguments(tf, templates[name][1], templates[name][3]) if name in templates else None
            if args is not None and name not in waiting:
                wanted.append((name, args))
                calls.append((tf, (name, args)))
    if not wanted:
        return None
    names = {}
    for call in dict.fromkeys(wanted):  # distinct names, even where spellings collide
        base = new_name = copy_name(*call)
        k = 2
        while new_name in taken:
            new_name, k = f"{base}_{k}", k + 1
        taken.add(new_name)
        names[call] = new_name
    for tf, call in calls:
        edits[(tf.start_byte, tf.end_byte)] = [(names[call].encode(), tf.start_point.row + 1)]
    copies, prototypes = [], []
    for name, (item, params, fn, _defaults) in templates.items():
        args_list = list(dict.fromkeys(a for n, a in wanted if n == name))
        if not args_list:
            continue
        row = fn.start_point.row + 1
        # the first copy keeps the template header's lines (as blank lines); a later one starts
        # with the newline that separates it, one line before the function
        header_lines = source[item.start_byte:fn.start_byte].count(b"\n")
        parts = []
        for k, args in enumerate(args_list):
            new_name = names[(name, args)]
            text_k, head_len = _substitute(source, fn, new_name, params, args)
            head = text_k[:head_len]
            if b"__global__" not in head:  # kernels are called by the host only
                head = re.sub(rb"//[^\n]*|/\*.*?\*/", b" ", head, flags=re.S)
                prototypes.append(b" ".join(head.split()) + b";")
            parts.append((b"\n" + text_k, row - 1) if k else
                         (b"\n" * header_lines + text_k, item.start_point.row + 1))
            copies.append((name, args, new_name, item.start_point.row + 1))
        edits[(item.start_byte, item.end_byte)] = parts
    # CUDA looks a template's callees up where it is instantiated, OpenCL C wants each function
    # declared before its first call: every copy's prototype goes before the file's first
    # function, on one line (the lines below keep their numbers' origins)
    first = next((it for it in _items(root) if it.type in ("function_definition", "template_declaration")), None)
    if first is not None and prototypes:
        spot = (first.start_byte, first.start_byte)
        edits[spot] = [(b" ".join(prototypes) + b" ", first.start_point.row + 1)] + edits.get(spot, [])
    return Expansion(*apply_edits(source, edits), copies)


def apply_edits(source: bytes, edits: dict) -> tuple[bytes, list[int]]:
    """``source`` with each byte range (start, end) of ``edits`` replaced by its chunks, each
    (text, original line of its first byte); and, for each line of the result, its original
    line."""
    # a line that begins after a newline of a chunk comes from the chunk's origin plus the
    # newlines up to it (counted as the chunks go: a file of many calls stays linear)
    chunks, pos, row = [], 0, 1
    for (start, end) in sorted(edits):
        chunks.append((source[pos:start], row))
        chunks.extend(edits[(start, end)])
        row += source[pos:end].count(b"\n")
        pos = end
    chunks.append((source[pos:], row))
    lines = [1]
    for data, origin in chunks:
        lines.extend(origin + k + 1 for k in range(data.count(b"\n")))
    return b"".join(c[0] for c in chunks), lines


def _substitute(source: bytes, fn, new_name: str, params, args) -> tuple[bytes, int]:
    """The function's text with its name replaced, each type parameter's tokens by the type and
    each value parameter's by the constant cast to the parameter's type; and the length of the
    copy's head (up to its body)."""
    types = {p: a for (p, kind), a in zip(params, args) if kind == "type"}
    values = {p: a if kind == "function" else f"(({kind})({a}))"
              for (p, kind), a in zip(params, args) if kind != "type"}
    raw = {p: a for (p, kind), a in zip(params, args) if kind != "type"}
    covered: set[int] = set()  # the T of T(0), rewritten with its call
    edits = []
    decl = fn.child_by_field_name("declarator").child_by_field_name("declarator")
    edits.append((decl.start_byte, decl.end_byte, new_name))
    for n in walk(fn):
        if n.type == "type_identifier" and text(n) in types:
            edits.append((n.start_byte, n.end_byte, types[text(n)]))
        elif n.type == "type_identifier" and text(n) in raw:
            # a value parameter passed on as a template argument (g<T, ACT, flag>), which the
            # parser reads as a type: the argument as spelled, for the next round to expand
            edits.append((n.start_byte, n.end_byte, raw[text(n)]))
        elif n.type == "call_expression" and text(callee := n.child_by_field_name("function")) in types \
                and callee.type == "identifier":
            # T(0), which the parser reads as a call: the C cast it means, ((unsigned int)(0))
            edits.append((n.start_byte, callee.end_byte, f"(({types[text(callee)]})"))
            edits.append((n.end_byte, n.end_byte, ")"))
            covered.add(callee.start_byte)
        elif n.type == "identifier" and text(n) in types and n.start_byte not in covered:
            # (T)(x), which the parser reads as a call of the parenthesized name T
            edits.append((n.start_byte, n.end_byte, types[text(n)]))
        elif n.type == "identifier" and text(n) in values:
            edits.append((n.start_byte, n.end_byte, values[text(n)]))
    out, pos = [], fn.start_byte
    body = fn.child_by_field_name("body").start_byte
    head = body - fn.start_byte  # where the body starts in the copy
    for start, end, new in sorted(edits):
        out.append(source[pos:start])
        out.append(new.encode())
        if end <= body:
            head += len(new.encode()) - (end - start)
        pos = end
    out.append(source[pos:fn.end_byte])
    return b"".join(out), head
