"""Function templates whose every use is an explicit instantiation
(``template __global__ void scale<float>(float*, float, int);``): OpenCL C has no templates,
but such a file names each type it needs, so the template is expanded into one copy per
instantiation before translation: ``scale<float>`` becomes the function ``scale_float``, with
the template's type parameters replaced by the types, token by token (syntax nodes, not text).

Templates without explicit instantiations are left to the translator, which refuses them.
"""
from __future__ import annotations

from dataclasses import dataclass

from accel.port.syntax import text, walk


@dataclass(frozen=True)
class Expansion:
    """The expanded source and, for each of its lines, the line of the original it comes from."""

    source: bytes
    lines: list[int]
    #: (template name, its arguments, name of the copy, line of the template) per copy made
    copies: list[tuple[str, tuple[str, ...], str, int]]


def _template(item):
    """(name, type parameter names, function node) of a function template over types only."""
    params = item.child_by_field_name("parameters")
    names = []
    for p in params.named_children:
        ids = [c for c in p.named_children if c.type == "type_identifier"]
        if p.type != "type_parameter_declaration" or len(ids) != 1:
            return None
        names.append(text(ids[0]))
    fn = next((c for c in item.named_children if c.type == "function_definition"), None)
    decl = fn.child_by_field_name("declarator") if fn is not None else None
    if decl is None or decl.type != "function_declarator":
        return None
    name = decl.child_by_field_name("declarator")
    return (text(name), names, fn) if name.type == "identifier" else None


def _instantiation(item):
    """(template name, type argument spellings) of ``template void f<A, B>(...);``."""
    decl = item.child_by_field_name("declarator")
    tf = decl.child_by_field_name("declarator") if decl is not None and decl.type == "function_declarator" else None
    if tf is None or tf.type != "template_function":
        return None
    args = tf.child_by_field_name("arguments").named_children
    if not all(a.type == "type_descriptor" for a in args):
        return None
    return text(tf.child_by_field_name("name")), tuple(" ".join(text(a).split()) for a in args)


def copy_name(name: str, args: tuple[str, ...]) -> str:
    """The OpenCL name of ``name<args...>``: ``scale<unsigned int>`` -> ``scale_unsigned_int``."""
    return "_".join([name, *("".join(c if c.isalnum() else "_" for c in a).strip("_") for a in args)])


def expand(source: bytes, root) -> Expansion | None:
    """The source with every explicitly instantiated function template expanded (and calls
    that name the template's arguments, ``sq<float>(v)``, pointed at the copy), or None when
    there is nothing to expand."""
    templates, wanted = {}, []
    for item in root.named_children:
        if item.type == "template_declaration" and (t := _template(item)) is not None:
            templates[t[0]] = (item, t[1], t[2])
    #: byte range -> replacement chunks, each (text, original line of its first byte)
    edits: dict[tuple[int, int], list[tuple[bytes, int]]] = {}
    for item in root.named_children:
        if item.type == "template_instantiation" and (i := _instantiation(item)) is not None \
                and i[0] in templates and len(i[1]) == len(templates[i[0]][1]):
            wanted.append(i)
            edits[(item.start_byte, item.end_byte)] = []
    inside = [(it.start_byte, it.end_byte) for it, _p, _f in templates.values()]
    for n in walk(root):  # calls naming their template arguments
        if n.type == "call_expression" and n.child_by_field_name("function").type == "template_function" \
                and not any(a <= n.start_byte < b for a, b in inside):
            tf = n.child_by_field_name("function")
            args = tf.child_by_field_name("arguments").named_children
            name = text(tf.child_by_field_name("name"))
            if name in templates and len(args) == len(templates[name][1]) and all(
                    a.type == "type_descriptor" for a in args):
                call = (name, tuple(" ".join(text(a).split()) for a in args))
                wanted.append(call)
                edits[(tf.start_byte, tf.end_byte)] = [(copy_name(*call).encode(), tf.start_point.row + 1)]
    if not wanted:
        return None
    copies = []
    for name, (item, params, fn) in templates.items():
        args_list = list(dict.fromkeys(a for n, a in wanted if n == name))
        if not args_list:
            continue
        row = fn.start_point.row + 1
        # the first copy keeps the template header's lines (as blank lines); a later one starts
        # with the newline that separates it, one line before the function
        header_lines = source[item.start_byte:fn.start_byte].count(b"\n")
        parts = []
        for k, args in enumerate(args_list):
            new_name = copy_name(name, args)
            text_k = _substitute(source, fn, new_name, dict(zip(params, args)))
            parts.append((b"\n" + text_k, row - 1) if k else
                         (b"\n" * header_lines + text_k, item.start_point.row + 1))
            copies.append((name, args, new_name, item.start_point.row + 1))
        edits[(item.start_byte, item.end_byte)] = parts
    # a line that begins after a newline of a chunk comes from the chunk's origin plus the
    # newlines up to it
    chunks, pos = [], 0
    for (start, end) in sorted(edits):
        chunks.append((source[pos:start], source[:pos].count(b"\n") + 1))
        chunks.extend(edits[(start, end)])
        pos = end
    chunks.append((source[pos:], source[:pos].count(b"\n") + 1))
    lines = [1]
    for data, origin in chunks:
        lines.extend(origin + k + 1 for k in range(data.count(b"\n")))
    return Expansion(b"".join(c[0] for c in chunks), lines, copies)


def _substitute(source: bytes, fn, new_name: str, types: dict[str, str]) -> bytes:
    """The function's text with its name and each type parameter token replaced."""
    edits = []
    decl = fn.child_by_field_name("declarator").child_by_field_name("declarator")
    edits.append((decl.start_byte, decl.end_byte, new_name))
    for n in walk(fn):
        if n.type == "type_identifier" and text(n) in types:
            edits.append((n.start_byte, n.end_byte, types[text(n)]))
    out, pos = [], fn.start_byte
    for start, end, new in sorted(edits):
        out.append(source[pos:start])
        out.append(new.encode())
        pos = end
    out.append(source[pos:fn.end_byte])
    return b"".join(out)
