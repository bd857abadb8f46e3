"""CUDA C++ -> OpenCL C 1.2, for kernels in the common subset (see docs/porting.md).

The translator walks the tree-sitter syntax tree of each function with a symbol table, because
OpenCL needs facts CUDA leaves implicit: every pointer names an address space (``__global``,
``__local``, ``__constant``, ``__private``), inferred here from where the pointer comes from;
dynamic shared memory becomes an extra ``__local`` kernel argument; atomics must be on 32-bit
integers. Named syntax it does not know is refused, so unknown constructs fail loudly instead of
passing through to compute something else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from accel.kernels.port import tables as T
from accel.kernels.port import warp as W
from accel.kernels.port.emulation import SHUFFLE_NAMES, WarpEmulation, callee_name
from accel.kernels.port.exprtype import FLOATS, ExprTyper, arithmetic, promote
from accel.kernels.port.groups import NAMESPACE as CG_NAMESPACE
from accel.kernels.port.groups import Groups
from accel.kernels.port.syntax import Diagnostic, Rewriter, line, parse, text, walk
from accel.kernels.port.templates import Expansion, apply_edits, function_template
from accel.kernels.port.uniform import short_text
from accel.kernels.port.symbols import (Scope, Sym, cxx_cast, declarator_parts, functional_cast,
                                member_info, pointer_info, qualifiers, storage_info, type_node)

#: node types passed through as they are (their children are still visited)
_PLAIN = frozenset((
    "compound_statement", "expression_statement", "if_statement", "else_clause", "for_statement",
    "while_statement", "do_statement", "break_statement", "continue_statement", "return_statement",
    "switch_statement", "case_statement", "condition_clause", "binary_expression",
    "unary_expression", "update_expression", "conditional_expression", "argument_list",
    "subscript_argument_list", "parenthesized_expression", "comma_expression", "sizeof_expression",
    "true", "false", "char_literal", "comment", "initializer_list",
    "type_descriptor", "abstract_pointer_declarator", "abstract_array_declarator", "type_qualifier",
    "storage_class_specifier", "labeled_statement", "statement_identifier", "preproc_call",
    "preproc_directive", "preproc_arg", "escape_sequence", "field_identifier", "init_declarator",
    "pointer_declarator", "array_declarator", "goto_statement",
))

#: a macro body is parsed as this declaration's initializer, to read it as an expression
_MACRO_PREFIX = b"int accel_macro_value = ("
#: ... and a body of statements as this function's, on the lines after the first
_MACRO_STATEMENTS = b"void accel_macro_body(void) {\n"

#: conditional compilation: passed to the OpenCL preprocessor, every branch translated
_PREPROC_IF = frozenset(("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif",
                         "preproc_elifdef"))

#: C++ constructs named in diagnostics (the rest of the unknown node types get a generic one)
_CPP = {
    "template_declaration": ("template", "OpenCL C has no templates, and this file names no "
                             "instantiation of this one (an explicit instantiation, or a call "
                             "naming its arguments) for accel port to expand; launches from host "
                             "code do not count", "an explicit instantiation per launch, e.g. "
                             "template __global__ void k<float>(float*, int);, or instantiate by "
                             "hand with #define T float"),
    "template_instantiation": ("template", "OpenCL C has no templates",
                               "instantiate by hand for each type, e.g. with #define T float"),
    "template_function": ("template call", "OpenCL C has no templates",
                          "call a hand-instantiated function"),
    "gnu_asm_expression": ("inline PTX", "PTX assembly runs on NVIDIA GPUs only",
                           "the C expression the assembly computes"),
    "lambda_expression": ("lambda", "OpenCL C has no lambdas", "a separate __device__ function"),
    "reference_declarator": ("C++ reference", "OpenCL C has no references",
                             "a pointer, or a copy of the value"),
    "new_expression": ("new", "OpenCL C has no device heap", "a buffer allocated by the host"),
    "delete_expression": ("delete", "OpenCL C has no device heap", "a buffer allocated by the host"),
    "kernel_call_syntax": ("dynamic parallelism", "an OpenCL 1.2 kernel cannot launch kernels",
                           "launch the child kernel from the host after this one"),
    "string_literal": ("string literal", "OpenCL C 1.2 kernels have no use for strings besides "
                       "printf", "remove it"),
}

#: the conversions that read and write the memory-only 16-bit floats (half, bfloat16), all types
_STORAGE_LOADS = frozenset().union(*T.STORAGE_LOADS.values())
_STORAGE_STORES = frozenset().union(*T.STORAGE_STORES.values())
#: the CUDA spelling of a translator's type name, for template arguments it writes out
_CUDA_SPELLING = {"uint": "unsigned int", "long": "long long", "ulong": "unsigned long long",
                  "uchar": "unsigned char", "ushort": "unsigned short", "bfloat16": "__nv_bfloat16"}
#: OpenCL forbids these as kernel argument types
_BAD_KERNEL_SCALARS = {"bool": "int (pass np.int32)"}
#: ... and these are CUDA's 64-bit integers there, as OpenCL's own spell them
_KERNEL_WIDTHS = {"size_t": "ulong", "ptrdiff_t": "long"}
#: what OpenCL needs to divide and take square roots like CUDA (correctly rounded)
BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)


def _opencl_builtin(name: str) -> bool:
    """Whether OpenCL C 1.2 has a built-in function of this name (all are overloadable, so a
    function of the file with the name would clash with it)."""
    return name in T.OPENCL_BUILTINS or re.fullmatch(T.OPENCL_CONVERSION, name) is not None


def _std_function(name: str) -> bool:
    """Whether ``std::name`` is C++'s overload set of CUDA's device function ``name`` (the
    float overload for a float argument, as unqualified calls in device code resolve)."""
    return name in ("min", "max", "abs") or name in T.OPENCL_SAME or name in T.OPENCL_MATH


def _const(param) -> bool:
    return any(c.type == "type_qualifier" and text(c) == "const" for c in param.named_children)


def _function_pointer_type(t) -> bool:
    """``float (*)(float)``: a type descriptor of a pointer to a function."""
    d = t.child_by_field_name("declarator") if t is not None else None
    return d is not None and d.type == "abstract_function_declarator" and any(
        n.type == "abstract_pointer_declarator" for n in walk(d.child_by_field_name("declarator") or d))


def _literal(node) -> bool:
    """A default argument that means the same wherever it is written: a number, ``true`` /
    ``false``, ``NULL`` / ``nullptr``, or one negated."""
    while node.type in ("unary_expression", "parenthesized_expression") and node.named_children:
        node = node.named_children[-1]
    return node.type in ("number_literal", "true", "false", "null")


def _append(parenthesized: str, items: list[str]) -> str:
    """``(a, b)`` with ``items`` added at the end (a parameter or argument list)."""
    if not items:
        return parenthesized
    sep = ", " if parenthesized.strip("() \n") else ""
    return parenthesized[:-1].rstrip() + sep + ", ".join(items) + ")"


def _cuda_builtin(name: str) -> bool:
    """Whether the translator maps calls to ``name`` as one of CUDA's own functions."""
    return (name in T.OPENCL_MATH or name in T.OPENCL_TYPED or name in T.OPENCL_ATOMICS
            or name in T.OPENCL_SAME or name in T.OPENCL_UNSUPPORTED or name in T.OPENCL_LOADS
            or name in _STORAGE_LOADS or name in _STORAGE_STORES
            or name in ("min", "max", "abs", "atomicInc", "atomicDec", "__syncthreads",
                        "__threadfence_block"))


@dataclass(frozen=True)
class Spelling:
    """How the output writes what the translator decided: plain OpenCL C, or accel's dialect
    (kernels/accel.h macros, one source for OpenCL, CUDA and HIP). The analysis is the same;
    OpenCL's rules bind both, since OpenCL is one of the dialect's targets."""

    kernel: str = "__kernel"
    device: str = ""  # what ``__device__`` becomes
    forceinline: str = "inline"
    #: what every device function is declared as (accel.h's DEVICE spells it in the dialect):
    #: OpenCL C's inline is C99's, an inline function without static has no external definition
    #: (a call left uninlined fails to link), and PoCL computed wrong results on some first
    #: launches where a function with barriers (__syncthreads, the warp emulation's) was left
    #: uninlined (1 in 7 runs of a block reduction); recursion is refused, so all can be inlined
    inlined: str = "static inline __attribute__((always_inline))"
    restrict: str = "restrict"
    spaces: dict = field(default_factory=lambda: {"global": "__global", "local": "__local",
                                                  "constant": "__constant"})
    shared: str = "__local"  # what ``__shared__`` on an array becomes
    index: str = "(uint){query}({axis})"  # threadIdx.x and friends
    queries: dict = field(default_factory=lambda: dict(T.OPENCL_INDEX))
    barrier: str = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)"
    fence: str = "mem_fence(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)"
    types: dict = field(default_factory=lambda: {**T.OPENCL_TYPES, "__nv_bfloat16": "ushort",
                                                  "nv_bfloat16": "ushort", "half2": "ushort2",
                                                  "__half2": "ushort2"})
    #: element i of a memory-only 16-bit float array p read as float, and v written to it, by
    #: the type's normalised name (T.STORAGE_FLOATS); helpers they call come from T.OPENCL_HELPERS
    loads: dict = field(default_factory=lambda: {"half": "vload_half({i}, {p})",
                                                 "bfloat16": "accel_bf16_to_float({p}[{i}])",
                                                 "half2": "accel_half2_to_float2({p}[{i}])"})
    stores: dict = field(default_factory=lambda: {
        "half": "vstore_half_rte({v}, {i}, {p})", "bfloat16": "{p}[{i}] = accel_float_to_bf16({v})",
        "half2": "{p}[{i}] = accel_float2_to_half2({v})"})
    #: a struct member of a memory-only 16-bit float type: its type (OpenCL C allows half only
    #: behind a pointer, so the member holds the bits: the same size and alignment as CUDA's),
    #: and the read as float of, and the write of v to, member lvalue e
    member_types: dict = field(default_factory=lambda: {"half": "ushort", "bfloat16": "ushort",
                                                        "half2": "ushort2"})
    member_loads: dict = field(default_factory=lambda: {"half": "accel_half_to_float({e})",
                                                        "bfloat16": "accel_bf16_to_float({e})",
                                                        "half2": "accel_half2_to_float2({e})"})
    member_stores: dict = field(default_factory=lambda: {
        "half": "{e} = accel_float_to_half({v})", "bfloat16": "{e} = accel_float_to_bf16({v})",
        "half2": "{e} = accel_float2_to_half2({v})"})
    constants: dict = field(default_factory=lambda: {"CUDART_INF_F": "INFINITY",
                                                     "CUDART_NAN_F": "NAN", "CUDART_PI_F": "M_PI_F"})
    #: True: calls are renamed in place (expf -> exp); False: CUDA's names stay and the
    #: translation's prologue defines them for OpenCL (see accel.kernels.port.dialect)
    rename_calls: bool = True
    #: how a cast the translation inserts spells an OpenCL scalar type
    cast_types: dict = field(default_factory=dict)
    dynamic_shared: bool = True  # extern __shared__ as a trailing __local argument
    name: str = "OpenCL C"


OPENCL = Spelling()


@dataclass(frozen=True)
class _Element:
    """A memory-only 16-bit float element (OpenCLTranslator._storage_element): the templates of
    its read as float and of the write of a float {v}, the rendered fields they take, and the
    nodes inside it still to translate (an index, a struct expression)."""

    load: str
    store: str
    fields: object  # () -> {"p": ..., "i": ...} or {"e": ...}
    inner: list

    def read(self) -> str:
        return self.load.format(**self.fields())

    def write(self, value: str) -> str:
        return self.store.format(v=value, **self.fields())


@dataclass
class _Function:
    node: object
    name: str
    kernel: bool
    params: list  # parameter_declaration nodes
    calls: set[str] = field(default_factory=set)
    returns: str | None = None  # the return type, for the expression typer
    #: for device functions: the address spaces callers pass for each pointer parameter
    arg_spaces: dict[int, set[str]] = field(default_factory=dict)
    #: each call: the callee's name node, and the address space of each pointer argument
    #: (None where it cannot be inferred)
    sites: list = field(default_factory=list)
    #: the indexes of its parameters that are (non-const) references, T& x
    references: set[int] = field(default_factory=set)
    #: the indexes of its cooperative-group parameters (``cg::thread_block cta``) -> their kind
    groups: dict[int, str] = field(default_factory=dict)
    #: a device function's literal default arguments (``bool final_sync = false``), by index
    defaults: dict[int, str] = field(default_factory=dict)


class OpenCLTranslator(WarpEmulation):
    def __init__(self, rw: Rewriter, root, spelling: Spelling = OPENCL):
        self.rw, self.root, self.sp = rw, root, spelling
        #: CUDA names kept as they are (spelling.rename_calls False), for the prologue
        self.kept_calls: set[str] = set()
        self.functions: dict[str, _Function] = {}
        self.typedefs: dict[str, str] = {}
        #: typedef name -> the line that defined it (a second, different definition is refused)
        self.typedef_lines: dict[str, int] = {}
        #: conditional compilation around the item being collected: how many enclosing #if
        #: branches are certainly dropped, and the #if nesting depth; the macros the file
        #: defines outside any #if (which every build has, whatever -D it is given)
        self.pp_dead = self.pp_depth = 0
        self.defined_always: set[str] = set()
        #: typedefs of types OpenCL lacks (typedef half2 half2_t;), with their errors: reported
        #: where device code uses the name, else the typedef is left out with a warning
        self.typedef_pending: dict[str, tuple[object, list]] = {}
        self.typedefs_used: set[str] = set()
        self.globals = Scope()
        self.uses_double = False
        #: the file's macros: function-like names, and the type of each named constant (an
        #: object-like macro's value, an enumerator)
        self.function_macros: set[str] = set()
        #: every macro's parameters and body, read by the block-uniformity analysis
        self.macro_bodies: dict[str, tuple[tuple[str, ...], str]] = {}
        self.macro_types: dict[str, str | None] = {}
        #: macros refused on their #define: (construct, why, rewrite), reported at each use
        self.refused_macros: dict[str, tuple[str, str, str]] = {}
        #: their errors at the #define, reported only when device code uses the macro (a macro
        #: only host code uses is left out, with a warning); and the macros device code uses
        self.macro_pending: dict[str, tuple[object, list]] = {}
        self.macros_used: set[str] = set()
        #: OpenCL helper functions (T.OPENCL_HELPERS) the translation calls, and those called
        #: by name in the code with the CUDA function each stands for (the dialect's CUDA side)
        self.helpers: set[str] = set()
        self.native_helpers: dict[str, str] = {}
        self.typer = ExprTyper(self._normal, self._result, self.macro_types, self.typedefs)
        self.groups = Groups(self)
        self.user_namespaces: set[str] = set()
        #: the file's scoped enums (enum class E), whose E::A are translated as E_A
        self.enum_classes: set[str] = set()
        #: __shared__ arrays declared in device functions (function -> declarations), and the
        #: ones each function holds or passes on: (declaring function, declaration)
        self.shared_owned: dict[str, list] = {}
        self.shared_users: dict[str, list] = {}
        #: enums of a type narrower than int (enum class E : uint8_t), which C's enums are not
        self.narrow_enums: set[str] = set()
        #: device functions called with pointers into several address spaces, and those
        #: parameters (index, name): see rewrites
        self.splits: dict[str, tuple[_Function, list[tuple[int, str]]]] = {}
        #: the file's function templates (name -> (parameters, function node)), calls of them
        #: whose template arguments the argument types give: (name node, name, arguments), and
        #: the templates a call of which gives none (all their calls stay refused)
        self.templates: dict[str, tuple[list, object]] = {}
        self.deduced: list[tuple[object, str, tuple[str, ...]]] = []
        self.undeduced: set[str] = set()
        #: the file's prototypes of device functions: name -> [(declaration, its name node)]
        self.prototypes: dict[str, list] = {}
        self.current = None
        self._warp_init()

    # -- driver -------------------------------------------------------------------------------------
    def run(self) -> str:
        """The translated text (check ``rw.failed`` before using it)."""
        self._rename_reserved()
        self._collect(self.root.named_children)
        for fn in self._callers_first():
            self._function(fn)
        self.finish_warp()
        self._finish_shared()
        self._host_only("macro", "its body", self.macro_pending, self.macros_used)
        self._host_only("typedef", "its type", self.typedef_pending, self.typedefs_used)
        return self.rw.render()

    def rewrites(self) -> Expansion | None:
        """The source with one copy of each function in ``splits`` per combination of address
        spaces its calls pass (``block_sum`` called with a __global and a __local pointer:
        ``block_sum_global`` and ``block_sum_local``), each call naming its copy, and with the
        template arguments of the ``deduced`` calls spelled out; None when there is nothing to
        do. OpenCL 1.2 has no generic address space, and the copies' bodies may differ (their
        local pointers and casts take the parameter's space)."""
        deduced = [(n, args) for n, name, args in self.deduced if name not in self.undeduced]
        if not self.splits and not deduced:
            return None
        source, notes = self.rw.source, []
        edits = {(n.end_byte, n.end_byte): [(f"<{', '.join(args)}>".encode(), line(n))]
                 for n, args in deduced}
        taken = {text(n) for n in walk(self.root) if n.type in ("identifier", "type_identifier")}
        for name, (fn, params) in sorted(self.splits.items()):
            combos = sorted({tuple(spaces[i] for i, _p in params) for _n, spaces in fn.sites})
            names = {}
            for combo in combos:
                new = base = "_".join((name, *combo))
                k = 2
                while new in taken:
                    new, k = f"{base}_{k}", k + 1
                taken.add(new)
                names[combo] = new
            for node, spaces in fn.sites:
                edits[(node.start_byte, node.end_byte)] = [
                    (names[tuple(spaces[i] for i, _p in params)].encode(), line(node))]
            decl = fn.node.child_by_field_name("declarator")
            while decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            own = decl.child_by_field_name("declarator")
            head, tail = source[fn.node.start_byte:own.start_byte], source[own.end_byte:fn.node.end_byte]
            edits[(fn.node.start_byte, fn.node.end_byte)] = [
                ((b"\n" if k else b"") + head + names[c].encode() + tail, line(fn.node) - (k > 0))
                for k, c in enumerate(combos)]
            for proto, own in self.prototypes.get(name, []):  # one per copy, on its line
                edits[(proto.start_byte, proto.end_byte)] = [(b" ".join(
                    source[proto.start_byte:own.start_byte] + names[c].encode()
                    + source[own.end_byte:proto.end_byte] for c in combos), line(proto))]
            what = ", ".join(f"{p} ({' / '.join('__' + c[k] for c in combos)})"
                             for k, (_i, p) in enumerate(params))
            notes.append(Diagnostic(self.rw.filename, line(fn.node), f"device function {name}",
                                    f"called with pointers into different address spaces for {what}, "
                                    "and OpenCL 1.2 has no generic address space: translated once "
                                    "per address space", f"call it as {' or '.join(names.values())}",
                                    "warning"))
        return Expansion(*apply_edits(source, edits), [], tuple(notes))

    def _host_only(self, kind: str, part: str, pending: dict, used: set) -> None:
        """A refused macro or typedef (``pending``: name -> (its item, its errors)) is an error
        where device code uses one of its names; one only host code uses (or none) has nothing
        to translate, and is left out with a warning."""
        items: dict[int, tuple[object, list, list[str]]] = {}
        for name, (item, found) in pending.items():  # a typedef may declare several names
            items.setdefault(id(item), (item, found, []))[2].append(name)
        for item, found, names in items.values():
            if any(n in used for n in names):
                self.rw.diagnostics.extend(found)
                continue
            self.rw.note(kind)
            self.rw.warn(item, f"{kind} {names[0]}", f"{part} has no OpenCL C form, and no device "
                         "code uses it (host code only, or unused), so it is left out",
                         f"keep host-only {kind}s with the host code")
            self.rw.delete(item)

    def opencl_text(self) -> str:
        body = self.run()
        head = ("// Translated from CUDA by accel port. Build with "
                + " ".join(BUILD_OPTIONS) + ": CUDA divides and takes square roots correctly "
                "rounded by default.\n")
        if self.uses_double:
            head += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        return head + self.helper_text() + W.helper_text(self.warp_helpers) + body

    def helper_text(self) -> str:
        """Definitions of the helpers the translation calls, callees first."""
        needed = set(self.helpers)
        for h in list(needed):
            needed.update(T.OPENCL_HELPER_NEEDS.get(h, ()))
        return "".join(T.OPENCL_HELPERS[h] + "\n" for h in T.OPENCL_HELPERS if h in needed)

    def _rename_reserved(self) -> None:
        """CUDA names that are OpenCL C keywords (``local``, ``global``, ``kernel``...) get a
        trailing underscore, everywhere, so every use still refers to the same variable; C++'s
        ``constexpr`` on a variable becomes C's ``const`` (the value is the same constant), and
        ``alignas(n)``/``__align__(n)`` the attribute they stand for. The file's own functions
        named like an OpenCL builtin (``clamp``, ``dot`` from helper_math.h) are renamed too:
        OpenCL's builtins are overloadable, and a plain function of the same name clashes."""
        functions = {text(n.child_by_field_name("declarator")) for n in walk(self.root)
                     if n.type == "function_declarator"}
        renamed = T.OPENCL_RESERVED | {f for f in functions
                                       if _opencl_builtin(f) and not _cuda_builtin(f)}
        for n in walk(self.root):
            if n.type == "identifier" and text(n) in renamed:
                self._rename(n)
            elif n.type == "type_qualifier" and text(n) == "constexpr":
                self.rw.replace(n, "const")
            elif n.type == "type_qualifier" and text(n) == "__grid_constant__":
                self.rw.delete(n)  # lets CUDA take a const parameter's address; OpenCL always can
            elif n.type == "alignas_qualifier":
                self._alignas(n)

    def _rename(self, node) -> None:
        """``name`` -> ``name_``, except the vector type in ``sizeof(float4)`` (which the parser
        reads as a variable): a type, kept; a 3-component one is refused, being 12 bytes in
        CUDA and 16 in OpenCL."""
        name, paren = text(node), node.parent
        if paren.type == "parenthesized_expression" and paren.parent.type == "sizeof_expression" \
                and name in T.VECTOR_TYPES | T.VECTOR3_TYPES:
            if name in T.VECTOR3_TYPES:
                self.rw.error(node, f"sizeof({name})", f"{name} is 12 bytes in CUDA but 16 in "
                              "OpenCL", f"3 * sizeof({name[:-1]})")
            return
        self.rw.replace(node, name + "_")

    def _alignas(self, node) -> None:
        value = node.named_children[0] if node.named_children else None
        if value is None or value.type == "type_descriptor":
            self.rw.error(node, "alignas(type)", "OpenCL C has no alignof for the translator to "
                          "spell it with", "the alignment in bytes, alignas(16)")
            return
        # the parser read __align__(n) as alignas(n) (syntax.parse); count what the user wrote
        written = "__align__" if self.rw.source.startswith(b"__align__", node.start_byte) else "alignas"
        self.rw.note(written)
        self.rw.replace(node, lambda _i: f"__attribute__((aligned({self.rw.render(value)})))")

    def _collect(self, items) -> None:
        """File-scope items: record functions, translate includes, macros and globals."""
        for item in items:
            kind = item.type
            if kind == "function_definition":
                self._register(item)
            elif kind == "linkage_specification":  # extern "C" { ... } or extern "C" f
                body = item.child_by_field_name("body")
                if body.type != "declaration_list":
                    # the prefix goes, and the item stays in place: an edit of the item that
                    # reaches past it (a host function's deletion, with its newline) still applies
                    for c in item.children:
                        if c.end_byte <= body.start_byte:
                            self.rw.delete(c)
                else:
                    self.rw.replace(item, lambda _i, b=body: self.rw.render(b))
                if body.type == "declaration_list":
                    self.rw.replace(body, lambda inner: inner.strip().removeprefix("{").removesuffix("}"))
                    self._collect(body.named_children)
                else:
                    self._collect_one(body)
            elif kind in _PREPROC_IF:
                self._conditional(item)
            elif kind == "namespace_definition" and (body := item.child_by_field_name("body")) is not None:
                self._namespace(item, body)
            else:
                self._collect_one(item)

    def _namespace(self, item, body) -> None:
        """``namespace ops { ... }`` around device code: OpenCL C has no namespaces, so the
        body is kept without it and ``ops::f`` becomes ``f`` (two functions of one name in
        different namespaces are refused like overloads)."""
        name = item.child_by_field_name("name")
        if name is not None:
            self.user_namespaces.add(text(name))
        self.rw.note("namespace")
        self.rw.replace(item, lambda _i, b=body: self.rw.render(b))
        self.rw.replace(body, lambda inner: inner.strip().removeprefix("{").removesuffix("}"))
        self._collect(body.named_children)

    def _conditional(self, item) -> None:
        """An #if/#ifdef/#elif/#else block: every branch is translated (the OpenCL preprocessor
        chooses), and a branch is known to be dropped when an earlier one's condition is
        certainly true (``#if defined(X)`` after an unconditional ``#define X``) or its own
        certainly false, so that its typedefs do not type the code."""
        truth = self._pp_truth(item)
        alt = item.child_by_field_name("alternative")
        self.pp_depth += 1
        dead = self.pp_dead
        self.pp_dead += truth is False
        self._collect([c for c in self._branches(item) if c != alt])
        self.pp_dead = dead + (truth is True)
        if alt is not None:
            self._collect([alt])
        self.pp_dead = dead
        self.pp_depth -= 1

    def _pp_truth(self, item) -> bool | None:
        """Whether a branch's condition certainly holds (True), certainly fails (False), or
        may go either way (None: a macro the file does not define unconditionally could
        come from the build's -D options)."""
        if item.type == "preproc_else":
            return True
        if item.type == "preproc_ifdef":
            name = item.child_by_field_name("name")
            negated = text(item).startswith("#ifndef")
            if name is None or text(name) not in self.defined_always:
                return None
            return not negated
        cond = item.child_by_field_name("condition")
        negated = cond is not None and cond.type == "unary_expression" and text(cond).startswith("!")
        if negated:
            cond = cond.child_by_field_name("argument")
            while cond is not None and cond.type == "parenthesized_expression":
                cond = cond.named_children[0]
        if cond is None or cond.type != "preproc_defined":
            return None
        names = [n for n in cond.named_children if n.type == "identifier"]
        if len(names) != 1 or text(names[0]) not in self.defined_always:
            return None
        return not negated

    def _branches(self, node) -> list:
        """The items of an #if/#ifdef/#elif/#else block. The OpenCL preprocessor evaluates its
        condition as CUDA's does, unless the condition names a macro only CUDA's compilers
        define: then it would take another branch, so that is refused."""
        cond = node.child_by_field_name("condition")
        if cond is None:
            cond = node.child_by_field_name("name")  # #ifdef NAME
        if cond is not None:
            for n in walk(cond):
                if n.type == "identifier":
                    self._compiler_macro(n)
        return [c for c in node.named_children if c != cond]

    def _compiler_macro(self, node) -> bool:
        """Refuse ``__CUDA_ARCH__``, ``__CUDACC__``... (True when ``node`` names one)."""
        name = text(node)
        if name not in T.CUDA_COMPILER_MACROS:
            return False
        self.rw.error(node, name, f"OpenCL C compilers do not define it, so code that tests it "
                      "takes another branch than CUDA's device compilation (silently)",
                      "keep the device code's branch only, without the test")
        return True

    def _collect_one(self, item) -> None:
        kind = item.type
        if kind == "function_definition":
            self._register(item)
        elif kind == "preproc_include":
            self._include(item)
        elif kind in ("preproc_def", "preproc_function_def"):
            if self.pp_depth == 0:
                self.defined_always.add(text(item.child_by_field_name("name")))
            self._macro(item)
        elif kind == "declaration":
            self._file_declaration(item)
        elif kind == "type_definition":
            self._typedef(item)
        elif kind == "alias_declaration" and _function_pointer_type(item.child_by_field_name("type")):
            # using reduction_func_t = float (*)(float);: a template's function parameter type,
            # as its typedef form is (expanding the template leaves it unused)
            name = text(item.child_by_field_name("name"))
            self.typedef_pending[name] = (item, [Diagnostic(
                self.rw.filename, line(item), f"using {name}", "OpenCL C has no function pointers",
                "call the function directly, or make it a template parameter with explicit "
                "instantiations")])
        elif kind in ("comment", "preproc_call", "identifier", "preproc_arg", "string_literal",
                      "ERROR"):  # syntax errors: translate() reports them for every target
            pass
        elif kind == "enum_specifier" and item.child_by_field_name("body") is not None:
            self._enum(item)
        elif kind in ("struct_specifier", "union_specifier") and item.child_by_field_name("body") is not None:
            # C++'s struct S { }; names the type S, C's only struct S: typedef it for C
            tag = self._struct(item)
            if item.child_by_field_name("name") is not None:
                self.rw.replace(item, lambda inner, t=tag: f"typedef {inner} {t}")
        elif kind == "static_assert_declaration":  # a compile-time check: results do not change
            self.rw.note("static_assert")
            self.rw.warn(item, "static_assert", "OpenCL C 1.2 has no static assertions, so it is "
                         "left out", "check the condition on the host")
            self.rw.delete(item)
        elif kind == "using_declaration" and item.named_children:  # using namespace nvcuda;
            if text(item.named_children[-1]) == CG_NAMESPACE:
                self.groups.namespace(item, None)
            else:
                self._namespace_use(item, " ".join(text(item).rstrip(";").split()))
        elif kind == "namespace_alias_definition":  # namespace cg = cooperative_groups;
            if text(item.named_children[-1]) == CG_NAMESPACE:
                self.groups.namespace(item, text(item.named_children[0]))
            else:
                self._namespace_use(item, f"namespace {text(item.named_children[0])}")
        elif kind in _CPP:
            if kind == "template_declaration" and (t := function_template(item)) is not None:
                self.templates[t[0]] = (t[1], t[2], t[3])  # for calls that deduce its arguments
            self.rw.error(item, *_CPP[kind])
        else:
            self.rw.error(item, kind.replace("_", " "), "outside the CUDA subset accel port "
                          "translates to OpenCL C", "plain C functions, arrays and scalars")

    def _namespace_use(self, item, label: str) -> None:
        """A using directive or namespace alias: refused as the feature its namespace is."""
        target = text(item.named_children[-1]).split("::")[0]
        construct, why, rewrite = T.NAMESPACE_FEATURES.get(
            target, ("C++ namespace", "OpenCL C has no namespaces", "unqualified names"))
        self.rw.error(item, f"{construct} ({label})", why, rewrite)

    def _register(self, node) -> None:
        q = qualifiers(node)
        decl = fdecl = node.child_by_field_name("declarator")
        while fdecl is not None and fdecl.type != "function_declarator":
            fdecl = fdecl.child_by_field_name("declarator")
        name_node = fdecl.child_by_field_name("declarator") if fdecl is not None else None
        if name_node is not None and name_node.type == "operator_name":
            self.rw.error(node, f"operator overloading ({text(name_node)})", "OpenCL C has no "
                          "operator overloading", "a named __device__ function, e.g. add4(a, b)")
            return
        if name_node is None or name_node.type != "identifier":
            self.rw.error(node, "function", "the parser could not read its name and parameters",
                          "fix the syntax (check it compiles with nvcc)")
            return
        name = text(name_node)
        if "__global__" in q and (name in T.OPENCL_RESERVED or _opencl_builtin(name)):
            self.rw.error(name_node, f"kernel name {name}", "it is an OpenCL C keyword or built-in "
                          "function, and a kernel is looked up by its name",
                          f"rename the kernel, e.g. {name}_")
        if "__global__" not in q and "__device__" not in q:
            self.rw.note("host function")  # left out: handled, with the warning
            self.rw.warn(node, f"host function {name}", "OpenCL C programs hold device code only, "
                         "so it is left out of the output", "launch the kernel with "
                         "accel.kernel(source, name)(grid, block, *args)")
            self.rw.delete(node)
            return
        if name in self.functions or _cuda_builtin(name):
            also = (f"also defined on line {line(self.functions[name].node)}"
                    if name in self.functions else f"CUDA has its own {name}")
            # the first definition would otherwise be left in the output untranslated
            self.rw.error(name_node, f"overloaded function {name}", f"{also}, and OpenCL C has no "
                          "overloading", "give each definition its own name")
            return
        inlined = "__global__" not in q and self.sp.inlined
        for c in node.children:
            if c.type == "storage_class_specifier" and text(c) == "static" and "__global__" in q:
                self.rw.delete(c)  # OpenCL forbids static kernels; the linkage changes nothing
            elif inlined and (c.type == "__forceinline__" or c.type == "storage_class_specifier"
                              and text(c) in ("static", "inline", "__inline__", "__inline")):
                self.rw.delete(c)  # in Spelling.inlined
            elif c.type == "__global__":
                self.rw.replace(c, self.sp.kernel)
            elif c.type == "__device__" and self.sp.device:
                self.rw.replace(c, self.sp.device)
            elif c.type in ("__device__", "__host__", "__noinline__"):
                self.rw.delete(c)
            elif c.type == "__forceinline__" and self.sp.forceinline:
                self.rw.replace(c, self.sp.forceinline)
            elif c.type == "__forceinline__":
                self.rw.delete(c)
            elif c.type == "launch_bounds":  # a scheduling hint: dropping it keeps the results
                self.rw.delete(c)
        if inlined:
            self.rw.replace(node, lambda inner: f"{self.sp.inlined} {inner}")
        if decl.type != "function_declarator":
            self.rw.error(node, "pointer return type", "an OpenCL 1.2 function cannot return a "
                          "pointer without naming its address space", "return an index into the "
                          "array instead")
        params = [p for p in fdecl.child_by_field_name("parameters").named_children
                  if p.type != "comment"]
        fn = _Function(node, name, "__global__" in q, params,
                       returns=self._normal(" ".join(text(type_node(node)).split())),
                       references={i for i, p in enumerate(params) if p.type == "parameter_declaration"
                                   and (d := p.child_by_field_name("declarator")) is not None
                                   and d.type == "reference_declarator" and not _const(p)})
        fn.calls = {callee_name(c) for c in walk(node) if c.type == "call_expression"} - {None}
        if not fn.kernel:
            fn.groups = {i: k for i, p in enumerate(params) if (k := self.groups.param_kind(p)) is not None}
            fn.defaults = {i: text(v) for i, p in enumerate(params) if p.type == "optional_parameter_declaration"
                           and (v := p.child_by_field_name("default_value")) is not None and _literal(v)}
        self.functions[name] = fn

    def _callers_first(self) -> list[_Function]:
        """Functions ordered so every caller precedes its callees (their pointer parameters'
        address spaces come from the call sites)."""
        order, state = [], {}

        def visit(fn: _Function, path: tuple[str, ...]) -> None:
            if state.get(fn.name) == "done":
                return
            if fn.name in path:
                self.rw.error(fn.node, f"recursion through {fn.name}",
                              "OpenCL C forbids recursive functions", "an explicit loop with a stack array")
                return
            for callee in sorted(fn.calls):
                if callee in self.functions:
                    visit(self.functions[callee], path + (fn.name,))
            state[fn.name] = "done"
            order.append(fn)

        for fn in self.functions.values():
            visit(fn, ())
        return order[::-1]

    # -- file scope ---------------------------------------------------------------------------------
    def _include(self, item) -> None:
        path = item.child_by_field_name("path")
        header = text(path).strip('<>"')
        if header in T.OPENCL_DROP_INCLUDES:
            self.rw.delete(item)
        elif header in ("cooperative_groups.h", "cooperative_groups/reduce.h"):
            self.rw.note(f"#include {text(path)}")  # each use is translated or refused on its own
            self.rw.delete(item)
        elif header in T.HOST_INCLUDES or header.startswith(T.HOST_INCLUDE_DIRS):
            self.rw.note(f"#include {text(path)}")
            self.rw.warn(item, f"#include {text(path)}", "a host library header; OpenCL C "
                         "programs hold device code only, so it is left out", "keep host code "
                         "in a separate file")
            self.rw.delete(item)
        else:
            why, rewrite = next((v for k, v in T.OPENCL_INCLUDE_WHY.items() if header.startswith(k)),
                                ("the header has no OpenCL C counterpart the translator knows",
                                 "copy the definitions you need into this file"))
            self.rw.error(item, f"#include {text(path)}", why, rewrite)

    def _macro(self, item) -> None:
        """Macro bodies are text to the parser: a body that is one expression is parsed as such
        and translated like code (``#define TID (blockIdx.x * blockDim.x + threadIdx.x)``);
        any other body that uses a CUDA name is refused, with every use of the macro."""
        value = item.child_by_field_name("value")
        name = text(item.child_by_field_name("name"))
        params = item.child_by_field_name("parameters")
        self.macro_bodies[name] = (tuple(text(q) for q in params.named_children) if params else (),
                                   text(value) if value is not None else "")
        if item.type == "preproc_function_def":
            self.function_macros.add(name)
        elif value is not None:  # FULL_MASK 0xffffffff: read by the warp emulation's mask check
            self.macro_values[name] = text(value)
        if value is None:
            return
        wrapped = _MACRO_PREFIX + value.text + b");"
        tree = parse(wrapped)
        decl = tree.root_node.named_children[0] if tree.root_node.named_children else None
        init = (decl.child_by_field_name("declarator")
                if decl is not None and decl.type == "declaration" else None)
        body = (init.child_by_field_name("value")
                if init is not None and init.type == "init_declarator" and not tree.root_node.has_error
                else None)
        if item.type == "preproc_def":  # typed, so min/max/abs around it cast like CUDA
            self.macro_types[name] = None if body is None else self.typer.of(body, Scope())
        cuda = next((text(n) for n in walk(tree.root_node) if n.type == "identifier" and (
            text(n) in T.OPENCL_INDEX or text(n) in T.OPENCL_MATH or text(n) in T.OPENCL_TYPED
            or text(n) in T.OPENCL_UNSUPPORTED or text(n) in T.OPENCL_ATOMICS
            or text(n) in T.OPENCL_LIMITS or text(n) in T.CUDA_COMPILER_MACROS
            or text(n).startswith("__"))), None)
        keyword = re.search(rb"\b__(shared|global|device|constant|host|forceinline)__\b", value.text)
        cuda = cuda or (keyword.group().decode() if keyword else None)
        if cuda is None:
            return
        if body is not None:
            self._macro_body(item, name, wrapped, [body], len(_MACRO_PREFIX), 0)
            return
        # a statement macro (``for (int i = ...threadIdx.x...; ...)``): parsed as a function body
        wrapped = _MACRO_STATEMENTS + value.text + b"\n;}"
        tree = parse(wrapped)
        block = tree.root_node.named_children[0].child_by_field_name("body") \
            if tree.root_node.named_children else None
        if tree.root_node.has_error or block is None or b"__shared__" in value.text:
            refusal = (f"macro {name}", f"its body uses the CUDA name {cuda} and is neither an "
                       "expression nor plain statements, so accel port cannot rewrite it",
                       "write the code out where the macro is used")
            self.macro_pending[name] = (item, [Diagnostic(self.rw.filename, line(item), *refusal)])
            self.refused_macros[name] = refusal
            return
        self._macro_body(item, name, wrapped, block.named_children, len(_MACRO_STATEMENTS), 1)

    def _macro_body(self, item, name: str, wrapped: bytes, nodes, start: int, extra_lines: int) -> None:
        """Translate a macro body parsed inside ``wrapped`` (``nodes``, from byte ``start``) into
        the #define, or refuse the macro (at its definition and at each use)."""
        value = item.child_by_field_name("value")
        sub, main = Rewriter(wrapped, self.rw.filename), self.rw
        self.rw = sub
        try:
            for n in nodes:
                self._stmt(n, self.globals.child(), depth=2)
        finally:
            self.rw = main
        row = value.start_point.row - extra_lines
        found = [replace(d, line=d.line + row) for d in sub.diagnostics]
        if sub.failed:
            self.macro_pending[name] = (item, found)
        else:
            main.diagnostics.extend(found)
        if sub.failed:
            self.refused_macros[name] = (f"macro {name}", "its body cannot be translated (see "
                                         f"line {value.start_point.row + 1})", "fix the macro's body")
        else:
            main.note("#define with CUDA names")
            self.rw.replace(value, lambda _i: self._render_macro(sub, start, start + len(value.text)))

    def _render_macro(self, sub: Rewriter, start: int, end: int) -> str:
        """A macro body's translation, rendered with ``self.rw`` its own rewriter again: the
        replacements recorded in it render their arguments through ``self.rw`` (lazily), and
        the main rewriter's offsets are not the body's."""
        main, self.rw = self.rw, sub
        try:
            return sub.render_range(start, end)
        finally:
            self.rw = main

    def _enum(self, item) -> None:
        """``enum { BLOCK = 256 };``: OpenCL C has C's enums; their constants are int. C++ names
        the type of ``enum E { ... };`` E, C only ``enum E``: it is typedef'd. C++'s scoped
        ``enum class E : int { A }`` becomes C's ``enum E { E_A }`` (its enumerators in the
        file's scope, so prefixed), and ``E::A`` becomes ``E_A``."""
        tag = item.child_by_field_name("name")
        scoped = tag is not None and any(c.type in ("class", "struct") for c in item.children)
        base = item.child_by_field_name("base")
        if tag is not None and base is not None and self._normal(" ".join(text(base).split())) not in ("int", "uint"):
            self.narrow_enums.add(text(tag))  # values fit an int, but it takes fewer bytes in memory
        for c in item.children:
            if c.type in ("class", "struct") or (base is not None and (c.type == ":" or c == base)):
                self.rw.delete(c)
        for e in item.child_by_field_name("body").named_children:
            if e.type == "enumerator":
                name = e.child_by_field_name("name")
                self.macro_types[text(name)] = "int"
                if scoped:
                    self.enum_classes.add(text(tag))
                    self.rw.replace(name, f"{text(tag)}_{text(name)}")
                if (value := e.child_by_field_name("value")) is not None:
                    self._expr(value, self.globals)
        if tag is not None:
            self.rw.replace(item, lambda inner, t=text(tag): f"typedef {inner} {t}")

    def _typedef(self, item) -> None:
        before = len(self.rw.diagnostics)
        base = self._type(type_node(item))
        refused = [d for d in self.rw.diagnostics[before:] if d.severity == "error"]
        if refused:  # an error where device code uses the name; left out where none does
            del self.rw.diagnostics[before:]
            for d in item.children_by_field_name("declarator"):
                name = declarator_parts(d)[0]
                if name is not None:
                    self.typedef_pending[text(name)] = (item, refused)
                    self.typedefs[text(name)] = base
            return
        for d in item.children_by_field_name("declarator"):
            name, ptr, arr = declarator_parts(d)
            if d.type == "function_declarator" and name is not None:
                # typedef void (*kernel_t)(...): the type of a template's function parameter,
                # which expanding the template leaves unused; an error only where code uses it
                self.typedef_pending[text(name)] = (item, [Diagnostic(
                    self.rw.filename, line(item), f"typedef {text(name)}", "OpenCL C has no "
                    "function pointers", "call the function directly, or make it a template "
                    "parameter with explicit instantiations")])
            elif ptr or arr:
                self.rw.error(item, "pointer typedef", "a pointer typedef hides the address "
                              "space OpenCL needs", "spell the pointer type out")
            elif text(name) == base and len(item.children_by_field_name("declarator")) == 1 \
                    and self.sp.rename_calls and base not in self.globals.structs:
                # (the dialect's CUDA side needs the typedef; typedef struct S {...} S; defines S)
                # typedef unsigned int uint;: OpenCL C has the type built in, and redefining
                # it (typedef uint uint;) is an error for strict compilers
                self.rw.note("typedef of an OpenCL type")
                self.rw.delete(item)
            elif not self.pp_dead:  # a branch the preprocessor certainly drops types nothing
                first = self.typedef_lines.get(text(name))
                if first is not None and self.typedefs.get(text(name)) != base:
                    self.rw.error(item, f"typedef {text(name)}", f"defined as {self.typedefs[text(name)]} "
                                  f"on line {first} and as {base} here, in branches of an #if whose "
                                  "choice accel port cannot tell (a macro the file does not define "
                                  "outside any #if may come from the build's -D options); it "
                                  "would type the code with one of them", "keep the definition "
                                  "you build with, or #define the macro the #if tests at the top")
                self.typedefs[text(name)] = base
                self.typedef_lines.setdefault(text(name), line(item))

    def _file_declaration(self, item) -> None:
        q = qualifiers(item)
        declarators = item.children_by_field_name("declarator")
        if declarators and declarators[0].type == "function_declarator":
            if "__device__" in q:  # a prototype
                for c in item.children:
                    if c.type == "__device__" and self.sp.device:
                        self.rw.replace(c, self.sp.device)
                    elif c.type in ("__device__", "__host__"):
                        self.rw.delete(c)
                    elif c.type == "__forceinline__" and self.sp.forceinline:
                        self.rw.replace(c, self.sp.forceinline)
                    elif c.type == "__forceinline__":
                        self.rw.delete(c)
                for p in declarators[0].child_by_field_name("parameters").named_children:
                    self._const_reference(p)
                # a function of the file is declared as its translation is defined: the address
                # spaces and extra parameters (shuffle scratch) its calls take are decided there
                name = declarators[0].child_by_field_name("declarator")
                self.prototypes.setdefault(text(name), []).append((item, name))
                self.rw.replace(item, lambda inner, n=text(name): self._prototype(n) or inner)
            else:
                self.rw.delete(item)
            return
        constant = self.sp.spaces.get("constant")
        if constant is None:
            self.rw.error(item, "program-scope variable", f"{self.sp.name} has no spelling for "
                          "program-scope constants", "a #define, or a kernel argument")
            return
        if "__constant__" in q and all(d.type == "init_declarator" for d in declarators):
            for c in item.children:
                if c.type == "type_qualifier" and text(c) == "__constant__":
                    self.rw.replace(c, constant)
            base = self._type(type_node(item))
            for d in declarators:
                name, ptr, arr = declarator_parts(d)
                self.globals.names[text(name)] = Sym(base, array=arr > 0, space="constant")
            return
        # a const value (not a pointer to const data: ``const char *name = "..."`` is a host
        # variable, which device code cannot read) is a constant device code may use
        if q & {"const", "constexpr"} and "__device__" not in q and all(
                d.type == "init_declarator" and declarator_parts(d)[1] == 0 for d in declarators):
            self.rw.replace(item, lambda inner: f"{constant} {inner}")
            base = self._type(type_node(item))
            for d in declarators:
                name, ptr, arr = declarator_parts(d)
                self.globals.names[text(name)] = Sym(base, array=arr > 0, space="constant")
            return
        if not q & {"__device__", "__constant__", "__shared__", "__managed__"}:
            self.rw.note("host variable")
            self.rw.warn(item, "host variable", "CUDA device code cannot use it, and OpenCL C "
                         "programs hold device code only, so it is left out", "keep host code "
                         "in a separate file")
            self.rw.delete(item)
            return
        if "__shared__" in q:
            self.rw.error(item, "__shared__ at file scope", "OpenCL C allows __local memory only "
                          "at the outermost scope of a kernel", "declare it at the top of each "
                          "kernel that uses it" + (" (extern __shared__ float s[]; there)"
                                                   if "extern" in q else ""))
            return
        why = ("its value is set by the host (cudaMemcpyToSymbol), which OpenCL does not do"
               if "__constant__" in q else "OpenCL 1.2 has no mutable program-scope variables")
        self.rw.error(item, "program-scope variable", why, "pass the data as a kernel argument")

    # -- types ----------------------------------------------------------------------------------------
    def _type(self, node) -> str:
        """Normalised OpenCL name of a type node, recording a rewrite if the spelling differs."""
        if node is None:
            return "int"
        spelled = " ".join(text(node).split())
        if node.type == "qualified_identifier":
            self._qualified(node)
            return spelled
        name = self._normal(spelled)
        if spelled in self.sp.types:
            self.rw.replace(node, self.sp.types[spelled])
        elif spelled in T.OPENCL_TYPES:
            self.rw.error(node, spelled, f"{self.sp.name} has no spelling for this type",
                          "a 32-bit or narrower integer type")
        if name == "double":
            self.uses_double = True
        if spelled in T.OPENCL_UNSUPPORTED:
            self.rw.error(node, spelled, *T.OPENCL_UNSUPPORTED[spelled])
        elif name in T.STORAGE_MATH and name not in self.sp.loads:
            self.rw.error(node, spelled, f"{self.sp.name} has no spelling for {name} memory "
                          "(kernels/accel.h has no such type)", "translate with --to opencl")
        elif spelled == "dim3":
            self.rw.error(node, "dim3", "OpenCL C has no dim3", "three uint variables")
        elif node.type == "placeholder_type_specifier":
            self.rw.error(node, "auto", "OpenCL C has no type deduction", "spell the type out")
        elif node.type in ("struct_specifier", "union_specifier"):
            return self._struct(node)
        elif node.type in ("class_specifier", "enum_specifier"):
            self.rw.error(node, node.type.removesuffix("_specifier"), "aggregate types are "
                          "outside the subset accel port translates", "separate arrays per field")
        return name

    def _struct(self, node) -> str:
        """A struct or union type; with a body, its definition: the members' types are
        translated (a 16-bit float member holds its bits, see Spelling.member_types) and
        recorded for the expressions that use them. A member whose size or alignment differs in
        OpenCL C (a pointer, bool, size_t, a 3-component vector) is refused: the layout must stay
        CUDA's, byte for byte, for the buffers the host fills and for a union's members, which
        read each other's bytes (C's unions, which OpenCL C has, do what CUDA's do)."""
        tag, body = node.child_by_field_name("name"), node.child_by_field_name("body")
        word = "union" if node.type == "union_specifier" else "struct"
        if body is None:
            return self._normal(text(tag)) if tag is not None else "int"
        if tag is None and node.parent.type == "type_definition":  # typedef struct { } name;
            tag = declarator_parts(node.parent.child_by_field_name("declarator"))[0]
        if tag is None and word == "union" and node.parent.type == "declaration":
            # union { uint u; half2 h; } p;: the members are known by a name no code can spell
            key = f"anonymous union on line {line(node)}"
        elif tag is None:
            self.rw.error(node, f"anonymous {word}", "accel port needs a name to follow its "
                          f"members", f"typedef {word} {{ ... }} name;")
            return "int"
        else:
            key = text(tag)
        members = self.globals.structs.setdefault(key, {})
        for f in body.named_children:
            if f.type == "comment":
                continue
            if f.type != "field_declaration" or f.child_by_field_name("type") is None:
                self.rw.error(f, f"{word} member ({f.type.replace('_', ' ')})", f"OpenCL C {word}s "
                              "hold data members only", "plain data members; functions outside")
                continue
            base = self._type(type_node(f))
            for d in f.children_by_field_name("declarator"):
                name, ptr, arr = declarator_parts(d)
                if ptr or base in ("bool", "size_t", "ptrdiff_t") or base in T.VECTOR3_TYPES \
                        or base in self.narrow_enums \
                        or any(c.type == "bitfield_clause" for c in f.named_children):
                    self.rw.error(f, f"{word} member {text(name) if name is not None else ''}",
                                  "its size or alignment differs between CUDA and OpenCL C "
                                  f"(or is the implementation's there), so the {word}'s layout "
                                  "would differ", "a fixed-width integer or float member (an "
                                  "index instead of a pointer)")
                    continue
                members[text(name)] = Sym(base, array=arr > 0)
            if base in self.sp.member_types:
                self.rw.replace(type_node(f), self.sp.member_types[base])
        return key

    # -- functions ------------------------------------------------------------------------------------
    def _function(self, fn: _Function) -> None:
        scope = self.globals.child()
        self.dynamic_shared: list = []
        self.current = fn
        for i, p in enumerate(fn.params):
            self._param(fn, i, p, scope)
        body = fn.node.child_by_field_name("body")
        if fn.kernel:
            self.scratch_body(fn, body)
            self.rw.replace(body, lambda inner, f=fn.name: inner[:1] + "".join(
                f"\n    {self._shared_text(a, owner, f)};  /* accel port: __shared__ of {owner} */"
                for owner, a in self.shared_users.get(f, ())) + inner[1:])
        else:
            plist = fn.node.child_by_field_name("declarator")
            while plist.type != "function_declarator":
                plist = plist.child_by_field_name("declarator")
            self.scratch_param(fn, plist.child_by_field_name("parameters"))
            self.rw.replace(plist.child_by_field_name("parameters"), lambda inner, f=fn.name: _append(
                inner, [self._shared_text(a, o, f, True) for o, a in self.shared_users.get(f, ())]))
        self._block(body, scope, depth=1)
        if self.dynamic_shared:
            decl = self.dynamic_shared[0]
            name, base = text(declarator_parts(decl.child_by_field_name("declarator"))[0]), \
                self._type(type_node(decl))
            extra = f"{self.sp.spaces['local']} {base}* {name}"
            plist = fn.node.child_by_field_name("declarator")
            while plist.type != "function_declarator":
                plist = plist.child_by_field_name("declarator")
            plist = plist.child_by_field_name("parameters")
            self.rw.replace(plist, lambda inner: (inner[:-1].rstrip() + f", {extra})")
                            if fn.params else f"({extra})")

    def _prototype(self, name: str) -> str | None:
        """The declaration of the file's function ``name`` as translated (None: no such one)."""
        fn = self.functions.get(name)
        if fn is None:
            return None
        head = self.rw.render_range(fn.node.start_byte, fn.node.child_by_field_name("body").start_byte)
        return (f"{self.sp.inlined} " if self.sp.inlined and not fn.kernel else "") + head.rstrip() + ";"

    def _const_reference(self, p) -> bool:
        """A reference parameter ``const T& x`` of a device function becomes ``const T x``: the
        callee only reads it, so a copy of the value is the same thing. ``T& x`` is left to
        _param (True), a reference it cannot read refused (False); a parameter that is no
        reference is left alone (True)."""
        decl = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else None
        if decl is None or decl.type != "reference_declarator":
            return True
        name = decl.named_children[0] if decl.named_children else None
        if name is None or name.type != "identifier":
            self.rw.error(p, f"reference parameter {text(name) if name is not None else text(p)}",
                          "OpenCL C has no references", "a pointer parameter (T* p, used as "
                          "*p; callers pass &x)")
            return False
        if _const(p):
            self.rw.replace(decl, lambda _inner, n=text(name): " " + n)
        return True

    def _param(self, fn: _Function, index: int, p, scope: Scope) -> None:
        if index in fn.groups:  # cg::thread_block cta: the block (or tile) itself, no value
            d = p.child_by_field_name("declarator")
            name = declarator_parts(d.named_children[0] if d.type == "reference_declarator" else d)[0]
            scope.names[text(name)] = Sym("cooperative group", group=fn.groups[index])
            self.rw.note("cooperative group parameter")
            _delete_listed(self.rw, p)
            return
        if p.type == "optional_parameter_declaration" and index in fn.defaults:
            # a device function's literal default: each call that leaves it out passes it
            self.rw.note("default argument")
            self.rw.replace(p, lambda inner: inner[:inner.index("=")].rstrip())
        elif p.type == "optional_parameter_declaration" and fn.kernel and p.child_by_field_name("default_value"):
            # a kernel's default argument (shfl_scan's int *partial_sums = NULL): accel.kernel
            # passes every argument, so the default is never used; the parameter stays
            default = p.child_by_field_name("default_value")
            self.rw.note("kernel default argument")
            self.rw.warn(p, "kernel default argument", "OpenCL C has no default arguments, and "
                         "a launch through accel.kernel passes every argument: the default "
                         f"({short_text(text(default))}) is dropped", "pass the value at the launch")
            self.rw.replace(p, lambda inner: inner[:inner.index("=")].rstrip())  # the first "="
        elif p.type != "parameter_declaration":
            self.rw.error(p, p.type.replace("_", " "), "OpenCL C has no default arguments or "
                          "variadic functions", "pass every argument explicitly")
            return
        base = self._type(type_node(p))
        for c in p.named_children:
            if c.type == "type_qualifier" and text(c) in ("__restrict__", "__restrict"):
                self.rw.replace(c, self.sp.restrict)
        decl = p.child_by_field_name("declarator")
        if decl is None:
            return
        reference = None
        if decl.type == "reference_declarator" and not fn.kernel:
            if not self._const_reference(p):
                return
            if index in fn.references:  # T& x: a pointer to the caller's variable, below
                reference = decl
            decl = decl.named_children[0]
        name, ptr, arr = declarator_parts(decl)
        self._restrict(decl)
        if ptr < 0 or ptr + arr > 1:
            self.rw.error(p, "parameter type", "OpenCL kernels take one level of pointer "
                          "(no references, no pointers to pointers)", "flatten to one buffer and index it")
            return
        if ptr + arr == 0 and reference is None:
            if fn.kernel and base in _BAD_KERNEL_SCALARS:
                self.rw.error(p, f"{base} kernel argument", "OpenCL forbids this type as a "
                              "kernel argument", _BAD_KERNEL_SCALARS[base])
            elif fn.kernel and base in _KERNEL_WIDTHS:  # OpenCL forbids size_t arguments
                self.rw.note(f"{base} kernel argument")
                self.rw.replace(type_node(p), self._spell(_KERNEL_WIDTHS[base]))
                base = _KERNEL_WIDTHS[base]
            if base in T.STORAGE_MATH:
                self.rw.error(p, f"{base} argument", *T.STORAGE_MATH[base])
            if fn.kernel and base in self.globals.structs:
                self.rw.error(p, f"struct kernel argument {text(name)}", "accel.kernel passes "
                              "tensors and numpy scalars, not structs", "a pointer to the struct "
                              "in a buffer, or its members as separate arguments")
            scope.names[text(name)] = Sym(base)
            return
        if base in T.VECTOR3_TYPES:
            self.rw.error(p, f"{base} pointer", f"{base} is 12 bytes in CUDA but 16 in OpenCL, so "
                          "arrays of it are laid out differently", f"a plain {base[:-1]} array "
                          "with 3 elements per item")
        if fn.kernel:
            space = "global"
        else:
            spaces = fn.arg_spaces.get(index, set())
            if len(spaces) > 1:
                # an error for this translation; where every call's space is known, translate()
                # translates again with one copy of the function per address space
                self.rw.error(p, f"pointer parameter {text(name)}", f"{fn.name} is called with "
                              f"pointers to {' and '.join(sorted('__' + s for s in spaces))} "
                              "memory; OpenCL 1.2 has no generic address space",
                              "one copy of the function per address space")
                unknown = [n for n, site in fn.sites if site.get(index) is None]
                for n in unknown:
                    self.rw.error(n or p, f"call of {fn.name}", (
                        f"its argument for {text(name)} points into memory whose address space "
                        "accel port cannot infer" if n else "a call of it in a macro's body, "
                        "which accel port translates as a text of its own") + ", so no copy of "
                        "the function per address space can be picked for it", "pass a "
                        "parameter or an array (or a pointer into one) directly, outside macros")
                if not unknown:
                    self.splits.setdefault(fn.name, (fn, []))[1].append((index, text(name)))
            space = next(iter(spaces), "global")
        if reference is not None:
            # OpenCL C has no references: T& x is a pointer to the caller's variable (in its
            # address space), each use of x reads or writes *x, and callers pass &v
            self.rw.replace(reference, lambda _i, n=text(name): "* " + n)
            scope.names[text(name)] = Sym(base, space=space, reference=True)
        else:
            scope.names[text(name)] = Sym(base, pointer=True, space=space)
        if space != "private":
            self.rw.replace(p, lambda inner, s=space: f"{self.sp.spaces[s]} {inner}")

    def _restrict(self, decl) -> None:
        for n in walk(decl):  # __restrict (MSVC's spelling, which nvcc takes) parses apart
            if n.type in ("type_qualifier", "ms_pointer_modifier") and text(n) in ("__restrict__", "__restrict"):
                self.rw.replace(n, self.sp.restrict)

    def _block(self, node, scope: Scope, depth: int) -> None:
        for c in node.named_children:
            self._stmt(c, scope, depth)

    def _stmt(self, node, scope: Scope, depth: int) -> None:
        kind = node.type
        if kind == "function_definition" and (use := self._macro_block(node)) is not None:
            name, block = use  # LOOP(i, n) { ... }: a statement macro and the block it heads
            if name in self.refused_macros:
                self.macros_used.add(name)
                self.rw.error(node, *self.refused_macros[name])
            else:
                self._stmt(block, scope, depth)
            return
        if kind == "compound_statement":
            self._block(node, scope.child(), depth + 1)
        elif kind == "expression_statement" and self.groups.tile_statement(node, scope):
            pass
        elif kind in _PREPROC_IF:  # no scope of its own: a __shared__ array in it stays outermost
            for c in self._branches(node):
                self._stmt(c, scope, depth)
        elif kind in ("preproc_def", "preproc_function_def"):
            self._macro(node)
        elif kind == "namespace_alias_definition" and text(node.named_children[-1]) == CG_NAMESPACE:
            self.groups.namespace(node, text(node.named_children[0]))  # inside a function
        elif kind == "declaration":
            self._declaration(node, scope, depth)
        elif kind == "static_assert_declaration":  # checked by CUDA's compiler: nothing to run
            self.rw.note("static_assert")
            self.rw.delete(node)
        elif kind in ("for_statement", "while_statement", "do_statement", "if_statement",
                      "else_clause", "switch_statement", "case_statement", "labeled_statement"):
            for c in node.children:  # if constexpr (a constant CUDA's compiler evaluated): a plain
                if c.type == "constexpr":  # if on the same constant takes the same branch
                    self.rw.note("if constexpr")
                    self.rw.delete(c)
            inner = scope.child()
            for c in node.named_children:
                self._stmt(c, inner, depth + 1)
        else:
            self._expr(node, scope)

    def _macro_block(self, node):
        """(macro name, block) when a "function definition" inside a function is really a use
        of the file's function-like macro followed by a block: ``LOOP(i, n) { ... }``."""
        decl = node.child_by_field_name("declarator")
        if decl is None or decl.type != "function_declarator" or node.child_by_field_name("type"):
            return None
        name = text(decl.child_by_field_name("declarator"))
        return (name, node.child_by_field_name("body")) if name in self.function_macros else None

    def _declaration(self, node, scope: Scope, depth: int) -> None:
        if self.groups.declaration(node, scope):
            return
        q = qualifiers(node)
        base = self._type(type_node(node))
        declarators = node.children_by_field_name("declarator")
        if "__shared__" in q:
            self._shared(node, q, base, declarators, scope, depth)
            return
        if base in T.STORAGE_MATH and any(declarator_parts(d)[1:] != (1, 0) for d in declarators):
            # pointers into half / bfloat16 memory are fine; values and arrays of them are not
            self.rw.error(node, f"{base} variable", *T.STORAGE_MATH[base])
            return
        if (feature := self._namespace_feature(node)) is not None:
            for d in declarators:  # already refused; every later use is reported too
                scope.names[text(declarator_parts(d)[0])] = Sym(base, refused=feature)
            for d in declarators:
                if d.type == "init_declarator":
                    self._expr(d.child_by_field_name("value"), scope)
            return
        spaces = set()
        for d in declarators:
            name, ptr, arr = declarator_parts(d)
            self._restrict(d)
            if (space := self._reference_variable(node, d, base, scope)) is not None:
                spaces.add(space)
                continue
            if ptr < 0 or ptr > 1 or (ptr and arr):
                self.rw.error(d, "declarator", "OpenCL C has no references and accel port "
                              "handles one level of pointer", "a plain pointer or value")
                continue
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if value is not None and not (ptr or arr) and self._widen(
                    value, value, base, scope, "{target} initialized from {kind}"):
                pass  # float d = x[ib].d; (ggml's blocks): CUDA's implicit, exact widening
            elif value is not None:
                self._expr(value, scope)
            if ptr:
                info = self._pointer(value, scope) if value is not None else None
                if info is None:
                    self.rw.error(d, f"pointer {text(name)}", "its address space cannot be "
                                  "inferred (no initializer, or one the translator cannot follow)",
                                  "initialize the pointer where it is declared, from a parameter "
                                  "or an array")
                    continue
                spaces.add(info.space)
                scope.names[text(name)] = Sym(base, pointer=True, space=info.space)
            else:
                scope.names[text(name)] = Sym(base, array=arr > 0)
        if len(spaces) > 1:
            self.rw.error(node, "declaration", "its pointers point into different address spaces",
                          "one declaration per pointer")
        elif spaces and (space := spaces.pop()) != "private":
            if any(declarator_parts(d)[1] == 0 for d in declarators):
                self.rw.error(node, "declaration", "it mixes pointers and values, and OpenCL's "
                              "address space qualifier would apply to both",
                              "one declaration per pointer")
            else:
                self.rw.replace(type_node(node), lambda inner, s=space: f"{self.sp.spaces[s]} {inner}")

    def _reference_variable(self, node, d, base: str, scope: Scope) -> str | None:
        """``T& r = x[i];``: OpenCL C has no references, so r is a pointer to what it names,
        each use ``(*r)`` (the address space of r's pointee is returned). ``const T& m = f(x);``
        of a value (no lvalue to point to) is a copy of it, which nothing else can change.
        None for other declarators."""
        ref = d.child_by_field_name("declarator") if d.type == "init_declarator" else None
        own = ref.named_children[0] if ref is not None and ref.type == "reference_declarator" \
            and ref.named_children else None
        if own is None or own.type != "identifier":
            return None
        value = d.child_by_field_name("value")
        self._expr(value, scope)
        held = storage_info(value, scope, self._normal)
        if held is None and not _const(node):
            return None  # refused by the caller, as a reference it cannot follow
        self.rw.note("reference variable")
        if held is None:
            self.rw.replace(ref, lambda _i, n=text(own): " " + n)
            scope.names[text(own)] = Sym(base)
            return "private"
        self.rw.replace(ref, lambda _i, n=text(own): "* " + n)
        self.rw.replace(value, lambda inner: f"&({inner})")
        scope.names[text(own)] = Sym(base, space=held.space, reference=True)
        return held.space

    def _namespace_feature(self, node) -> tuple[str, str, str] | None:
        """(construct, why, rewrite) for a declaration whose type or initializer comes from an
        untranslatable namespace (``cg::grid_group g = cg::this_grid();``), for its uses."""
        for n in walk(node):
            if n.type == "qualified_identifier":
                ns = text(n).split("::")[0]
                if ns in self.groups.aliases and n != type_node(node):
                    continue  # a call in the initializer: translated or refused on its own
                if ns in self.groups.aliases:  # a grid group and the like: every use refused
                    return ("cooperative groups", "OpenCL 1.2 cannot synchronise or group "
                            "threads beyond one work-group", "split the kernel at this point "
                            "into two launches")
                if ns in T.NAMESPACE_FEATURES:
                    construct, why, rewrite = T.NAMESPACE_FEATURES[ns]
                    decl = text(node)
                    if "grid" in decl:
                        rewrite = "split the kernel at this point into two launches"
                    elif "thread_block" in decl and "tile" not in decl:
                        rewrite = "__syncthreads() for the block's sync()"
                    return construct, why, rewrite
        return None

    def _shared(self, node, q, base, declarators, scope: Scope, depth: int) -> None:
        fn = self.current
        self.rw.note("extern __shared__" if "extern" in q else "__shared__")
        for c in node.named_children:
            if c.type == "type_qualifier" and text(c) == "__shared__":
                self.rw.replace(c, self.sp.shared)
            elif c.type == "storage_class_specifier" and text(c) == "static":
                self.rw.delete(c)  # a __shared__ array is one per block either way; OpenCL forbids it
        for d in declarators:
            name, ptr, arr = declarator_parts(d)
            scope.names[text(name)] = Sym(base, array=True, space="local")
        if "extern" in q:
            if not fn.kernel:
                self.rw.error(node, "extern __shared__ in a device function", "OpenCL passes "
                              "dynamic local memory to kernels only", "declare it in the kernel "
                              "and pass the pointer to this function")
            elif not self.sp.dynamic_shared:
                self.rw.error(node, "extern __shared__", f"{self.sp.name} has no spelling for "
                              "dynamic shared memory", "a static __shared__ array sized by a "
                              "-D define")
            elif self.dynamic_shared:
                self.rw.error(node, "second extern __shared__ array", "CUDA aliases every "
                              "extern __shared__ array to one buffer; OpenCL gives one argument",
                              "one extern __shared__ char array, cast to the types you need")
            self.dynamic_shared.append(node)
            self.rw.replace(node, lambda _i: "/* extern __shared__: passed as the last kernel "
                            "argument */")
            return
        if fn.kernel and depth != 1 and self._hoistable(node, fn):
            # a __shared__ array is one per block wherever it is declared (static storage):
            # declared at the kernel's outermost scope, it is the same array
            body = fn.node.child_by_field_name("body")
            self.rw.replace(body, lambda inner, d=node: inner[:1] + "\n    " + self.rw.render(d)
                            + "  /* accel port: hoisted from line " + str(line(d)) + " */" + inner[1:])
            self.rw.delete(node)
            self.rw.note("__shared__ hoisted")
            self.rw.warn(node, "__shared__ hoisted", "OpenCL allows __local arrays only at a "
                         "kernel's outermost scope, so it is declared there (CUDA's is one per "
                         "block wherever it is declared, so nothing changes)", "none needed")
            return
        if not fn.kernel and len(declarators) == 1 and self._hoistable(node, fn):
            # one array per block, wherever declared: each kernel that calls the function
            # declares it, and passes it down the calls as a parameter
            self.shared_owned.setdefault(fn.name, []).append(node)
            self.rw.delete(node)
            self.rw.note("__shared__ in a device function")
            self.rw.warn(node, "__shared__ in a device function", "OpenCL allows __local arrays "
                         "only at a kernel's outermost scope, so each kernel calling the function "
                         "declares it and passes it down as a parameter (CUDA's is one per block "
                         "too, shared by every call)", "none needed")
            return
        if not fn.kernel or depth != 1:
            self.rw.error(node, "__shared__ array", "OpenCL 1.2 allows __local variables only "
                          "at the outermost scope of a kernel", "declare it at the top of the kernel "
                          "(and pass a pointer to device functions)")

    def _shared_name(self, decl, owner: str, holder: str | None = None) -> str:
        """The name a device function's __shared__ array ``decl`` has in function ``holder``:
        its own in the function that declares it, ``accel_<owner>_<name>`` elsewhere (arrays of
        two functions may share a name)."""
        name = text(declarator_parts(decl.children_by_field_name("declarator")[0])[0])
        return name if holder == owner else f"accel_{owner}_{name}"

    def _shared_text(self, decl, owner: str, holder: str, param: bool = False) -> str:
        """The declaration of ``decl`` in ``holder``: a kernel's __local array, or a parameter."""
        name = declarator_parts(decl.children_by_field_name("declarator")[0])[0]
        head = self.rw.render_range(decl.start_byte, name.start_byte)
        if param:  # LOCAL is the dialect's __shared__ on CUDA, no parameter qualifier
            head = head.replace(self.sp.shared, self.sp.spaces["local"], 1)
        return (head + self._shared_name(decl, owner, holder)
                + self.rw.render_range(name.end_byte, decl.end_byte).rstrip().rstrip(";"))

    def _finish_shared(self) -> None:
        """Each function's device-function __shared__ arrays, its own and its callees'."""
        need = {f: {(f, a) for a in self.shared_owned.get(f, ())} for f in self.functions}
        changed = True
        while changed:
            changed = False
            for fn in self.functions.values():
                more = set().union(*(need[c] for c in fn.calls if c in need)) - need[fn.name]
                if more:
                    need[fn.name] |= more
                    changed = True
        self.shared_users = {f: sorted(v, key=lambda oa: (oa[0], oa[1].start_byte))
                             for f, v in need.items() if v}

    def _hoistable(self, node, fn) -> bool:
        """Whether a nested __shared__ declaration means the same at the kernel's top: no
        initializer, its names declared once in the kernel, its sizes no local variables."""
        declarators = node.children_by_field_name("declarator")
        if any(d.type == "init_declarator" for d in declarators):
            return False
        names = {text(declarator_parts(d)[0]) for d in declarators}
        local = [text(declarator_parts(d)[0]) for n in walk(fn.node) if n.type in
                 ("declaration", "parameter_declaration") for d in n.children_by_field_name("declarator")
                 if declarator_parts(d)[0] is not None]
        sizes = {text(n) for d in declarators for n in walk(d) if n.type == "identifier"} - names
        return all(local.count(n) == 1 for n in names) and not sizes & set(local)

    # -- expressions ----------------------------------------------------------------------------------
    def _expr(self, node, scope: Scope) -> None:
        kind = node.type
        if kind == "field_expression" and self.groups.field(node, scope):
            return
        if kind == "field_expression":
            arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
            if arg.type == "identifier" and text(arg) in T.OPENCL_INDEX and text(fld) in T.AXES:
                self.rw.note(text(arg))
                self.rw.replace(node, self.sp.index.format(query=self.sp.queries[text(arg)],
                                                           axis=T.AXES[text(fld)]))
                return
            sym = scope.get(text(arg)) if arg.type == "identifier" else None
            if sym is not None and sym.refused is not None:
                construct, why, rewrite = sym.refused
                self.rw.error(node, f"{construct} ({text(node)})", why, rewrite)
                return
            member = member_info(node, scope, self._normal)
            if member is not None and member.type in T.STORAGE_MATH and not member.array:
                self.rw.error(node, f"{member.type} member {text(fld)}", *T.STORAGE_MATH[member.type])
                return
            self._expr(arg, scope)
        elif kind == "identifier":
            name = text(node)
            sym = scope.get(name)
            if sym is not None and sym.refused is not None:
                construct, why, rewrite = sym.refused
                self.rw.error(node, f"{construct} ({name})", why, rewrite)
            elif sym is not None and sym.group is not None:
                self.rw.error(node, f"cooperative groups ({name})", "a group passed as a value has "
                              "no OpenCL form (only its methods are translated)", "call its "
                              "methods where it is declared, or pass what they return")
            elif sym is not None and sym.reference:
                self.rw.replace(node, lambda inner: f"(*{inner})")
            elif sym is None and name == "warpSize":
                self.rw.note(name)  # the 32 lanes of the warp emulation (and of CUDA)
                self.rw.replace(node, "32")
            elif sym is None and name in self.refused_macros:
                self.macros_used.add(name)
                self.rw.error(node, *self.refused_macros[name])
            elif name in T.OPENCL_UNSUPPORTED:
                self.rw.error(node, name, *T.OPENCL_UNSUPPORTED[name])
            elif name in T.OPENCL_INDEX:
                self.rw.error(node, name, "only its .x, .y and .z components map to OpenCL "
                              "queries", f"use {name}.x (and .y, .z) separately")
            elif sym is None and self._compiler_macro(node):
                pass
            elif name in self.sp.constants:
                self.rw.replace(node, self.sp.constants[name])
            elif sym is None and name in T.OPENCL_LIMITS:
                self.rw.note(name)
                if self.sp.rename_calls:
                    self.rw.replace(node, T.OPENCL_LIMITS[name])
                else:
                    self.kept_calls.add(name)
        elif kind == "null":
            self.rw.replace(node, "0")
        elif kind == "initializer_list" and not [c for c in node.named_children if c.type != "comment"]:
            self.rw.note("empty initializer")  # C++'s = {}; C99 (and OpenCL C) needs {0}
            self.rw.replace(node, "{0}")
        elif kind == "conditional_expression" and self.typer.of(
                cond := node.child_by_field_name("condition"), scope) in FLOATS:
            # OpenCL C forbids a floating-point condition for ?: (C and CUDA test it against 0)
            self.rw.replace(cond, lambda inner: f"(({inner}) != 0)")
            for c in node.named_children:
                self._expr(c, scope)
        elif kind == "number_literal":
            self._literal(node)
        elif kind == "call_expression":
            self._call(node, scope)
        elif kind == "assignment_expression":
            if not self._storage_store(node, scope):
                for c in node.named_children:
                    self._expr(c, scope)
        elif kind == "subscript_expression" or (kind == "pointer_expression"
                                                and text(node).startswith("*")):
            base = node.named_children[0]
            sym = scope.get(text(base)) if base.type == "identifier" else None
            if sym is not None and sym.type in T.STORAGE_MATH:
                self.rw.error(node, f"{sym.type} element access", *T.STORAGE_MATH[sym.type])
                return
            # an element of a memory-only array member (s.d[i] of half d[2]), which no
            # conversion took: its bits, which must not be read as a number
            member = member_info(base, scope, self._normal) if base.type == "field_expression" else None
            if member is not None and member.type in T.STORAGE_MATH and member.array:
                self.rw.error(node, f"{member.type} member element access", *T.STORAGE_MATH[member.type])
                return
            for c in node.named_children:
                self._expr(c, scope)
        elif kind == "cast_expression":
            self._cast(node, scope)
        elif kind == "qualified_identifier":
            self._qualified(node)
        elif kind in ("primitive_type", "sized_type_specifier", "type_identifier"):
            self._type(node)
        elif kind in _CPP:
            self.rw.error(node, *_CPP[kind])
        elif kind in ("compound_statement", "declaration"):
            self._stmt(node, scope, depth=2)
        elif kind in _PLAIN or kind == "pointer_expression":
            for c in node.named_children:
                self._expr(c, scope)
        elif kind == "ERROR":
            pass  # translate() reports syntax errors, for every target
        else:
            self.rw.error(node, kind.replace("_", " "), "outside the CUDA subset accel port "
                          "translates to OpenCL C", "plain C expressions on scalars and arrays")

    def _literal(self, node) -> None:
        """An unsuffixed floating literal is a double in CUDA, so the expression around it is
        computed in double: keep it so (cl_khr_fp64), and say so, since it is often a slip."""
        spelled = text(node).lower()
        if spelled.startswith("0x") or spelled.endswith("f") or not any(c in spelled for c in ".e"):
            return
        self.uses_double = True
        self.rw.note("double literal")
        self.rw.warn(node, f"double literal {text(node)}", "CUDA computes the expression around "
                     "it in double precision; the OpenCL translation does too, which needs "
                     "cl_khr_fp64 on the device", f"{text(node)}f if float was meant")

    def _qualified(self, node) -> None:
        ns = text(node).split("::")[0]
        if ns in self.enum_classes and node.child_by_field_name("name").type == "identifier":
            self.rw.replace(node, f"{ns}_{text(node.child_by_field_name('name'))}")  # Act::Gelu
            return
        if ns in self.groups.aliases:
            self.groups._refuse(node, text(node))
            return
        construct, why, rewrite = T.NAMESPACE_FEATURES.get(
            ns, ("C++ namespace", "OpenCL C has no namespaces", "an unqualified name"))
        self.rw.error(node, f"{construct} ({text(node)})", why, rewrite)

    def _cast(self, node, scope: Scope) -> None:
        self._cast_parts(node, node.child_by_field_name("type"), node.child_by_field_name("value"),
                         scope)

    def _cast_parts(self, node, tdesc, value, scope: Scope) -> None:
        """A C cast, or a C++ one (static_cast<T>(v) and friends, rewritten by the caller as a
        C cast): the pointee's address space is inferred from the value. ``(float)p[i]`` of a
        half or bfloat16 pointer p is CUDA's exact widening: the type's load."""
        if self._widen(node, value, " ".join(text(tdesc).split()), scope, "({target}) on {kind}"):
            return
        self._expr(value, scope)
        self._type(type_node(tdesc))
        if not any(n.type == "abstract_pointer_declarator" for n in walk(tdesc)):
            return
        info = self._pointer(value, scope)
        if info is None:
            self.rw.error(node, "pointer cast", "the address space of the pointer being cast "
                          "cannot be inferred", "cast a parameter or an array directly")
        elif info.space != "private":
            self.rw.replace(tdesc, lambda inner, s=info.space: f"{self.sp.spaces[s]} {inner}")

    def _widen(self, node, value, target: str, scope: Scope, construct: str) -> bool:
        """``node`` converting ``value`` to ``target``: where that is a half or bfloat16 element
        in memory made float (``(float)p[i]``, ``float d = x[ib].d;``), CUDA's exact widening,
        translated as the type's load (True); anything else is left to the caller (False)."""
        while value is not None and value.type == "parenthesized_expression" and value.named_children:
            value = value.named_children[0]
        kind = self._storage_kind(value, scope) if target in ("float", "double") else None
        if kind is None:
            return False
        element = self._storage_element(value, scope, kind)
        self._helpers_of(element.load)
        self.rw.note(construct.format(target=target, kind=kind))
        self.rw.replace(node, lambda _i: "(" + ("(double)" if target == "double" else "")
                        + element.read() + ")")
        for n in element.inner:
            self._expr(n, scope)
        return True

    def _call(self, node, scope: Scope) -> None:
        callee, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        arg_nodes = [a for a in args.named_children if a.type != "comment"]
        for c in node.named_children:
            if c.type == "kernel_call_syntax":
                self.rw.error(c, *_CPP["kernel_call_syntax"])
                return
        if self.groups.call(node, scope):
            return
        if callee.type == "qualified_identifier" and callee.child_by_field_name("name").type == "identifier" \
                and ((ns := callee.child_by_field_name("scope")) is None and text(callee).startswith("::")
                     or ns is not None and text(ns) in self.user_namespaces
                     or ns is not None and text(ns) == "std" and _std_function(text(callee.child_by_field_name("name")))):
            # ops::sq(v) -> sq(v); ::tanhf(x) -> tanhf(x); std::max(a, b) -> max(a, b), which
            # CUDA's device code overloads alike
            inner = callee.child_by_field_name("name")
            self.rw.replace(callee, lambda _i, n=inner: self.rw.render(n))
            callee = inner
        if callee.type == "template_function" and text(callee.child_by_field_name("name")) in T.OPENCL_UNSUPPORTED:
            name = text(callee.child_by_field_name("name"))
            self.rw.error(node, name, *T.OPENCL_UNSUPPORTED[name])
            return
        if (cast := cxx_cast(node)) is not None:
            tdesc, value = cast
            self.rw.note(text(callee.child_by_field_name("name")))
            self._cast_parts(node, tdesc, value, scope)
            self.rw.replace(node, lambda _i: f"(({self.rw.render(tdesc)})({self.rw.render(value)}))")
            return
        if functional_cast(node, self.typedefs):  # float(x), unsigned(x): C++'s other spelling of a C cast
            refusals = len(self.rw.diagnostics)
            self._type(callee)  # refuses the types OpenCL lacks (dim3...)
            if len(arg_nodes) != 1:
                if len(self.rw.diagnostics) == refusals:
                    self.rw.error(node, f"constructor {text(callee)}(...)", "OpenCL C has no "
                                  "constructors", "one variable per value")
                return
            self.rw.note("functional cast")
            self._expr(arg_nodes[0], scope)
            self.rw.replace(node, lambda _i: f"(({self.rw.render(callee)})"
                                             f"({self.rw.render(arg_nodes[0])}))")
            return
        if callee.type != "identifier":
            self._expr(callee, scope)
            for a in arg_nodes:
                self._expr(a, scope)
            return
        name = text(callee)
        if name in SHUFFLE_NAMES and scope.get(name) is None:
            self.shuffle_call(node, name, arg_nodes, scope)
            return
        if name == "__syncwarp" and scope.get(name) is None:
            self.syncwarp(node, arg_nodes)
            return
        if name in T.OPENCL_STORES and len(arg_nodes) == 2 and scope.get(name) is None \
                and self._storage_store(node, scope, *arg_nodes):
            self.rw.note(name)  # __stcs(&h[i], __float2half(v)): a plain store, the type's
            return
        if name == "__syncthreads":
            self.rw.replace(node, self.sp.barrier)
        elif name == "__threadfence_block":
            self.rw.replace(node, self.sp.fence)
        elif name in T.OPENCL_UNSUPPORTED:
            self.rw.error(node, name, *T.OPENCL_UNSUPPORTED[name])
            return
        elif name in T.OPENCL_TYPED:
            if not self._typed_call(node, name, arg_nodes):
                return
        elif name in ("min", "max"):
            self._min_max(node, name, arg_nodes, scope)
        elif name == "abs":
            if not self._abs(node, arg_nodes, scope):
                return
        elif name in T.OPENCL_MATH or name in T.OPENCL_LOADS or (
                name.startswith("make_") and name[5:] in T.VECTOR_TYPES | T.VECTOR3_TYPES):
            self._rename_call(node, name, arg_nodes)
            if name in T.OPENCL_MATH:
                self._cast_args(arg_nodes, "float", scope)
                self._precision(node, name, T.OPENCL_MATH[name])
        elif name in self.refused_macros:
            self.macros_used.add(name)
            self.rw.error(callee, *self.refused_macros[name])
        elif name in self.function_macros:
            pass  # the #define is copied; its arguments are translated where they stand
        elif name in T.OPENCL_ATOMICS or name in ("atomicInc", "atomicDec"):
            if not self._atomic(node, name, arg_nodes, scope):
                return
        elif name in _STORAGE_LOADS:
            if not self._storage_load(node, name, arg_nodes, scope):
                return
        elif name in _STORAGE_STORES:
            kind = next(t for t, names in T.STORAGE_STORES.items() if name in names)
            self.rw.error(node, name, f"a {kind} value exists only in memory in OpenCL C 1.2 (no "
                          "cl_khr_fp16, no bfloat16 type): it must be stored straight to memory",
                          f"p[i] = {name}(v); as a statement of its own")
            return
        elif name in self.functions:
            for i, kind in self.functions[name].groups.items():
                a = arg_nodes[i] if i < len(arg_nodes) else None
                if a is None or self.groups._group(a, scope) != kind:
                    self.rw.error(a if a is not None else node, f"cooperative groups ({name})",
                                  f"its parameter {i + 1} is a {kind.replace('tile:', 'thread_block_tile<')}"
                                  f"{'>' if 'tile' in kind else ''} group, and this argument is not one "
                                  "(accel port drops such a parameter: the group is the caller's own)",
                                  "pass the group the function takes")
                    return
                _delete_listed(self.rw, a)
            missing = [v for i, v in sorted(self.functions[name].defaults.items()) if i >= len(arg_nodes)]
            if missing:  # blockReduce(v) of blockReduce(float val, bool final_sync = false)
                self.rw.replace(args, lambda inner, m=missing: _append(inner, m))
            self._record_call(self.functions[name], arg_nodes, scope, callee)
            # the group arguments are gone; the others keep their parameters' indexes above
            arg_nodes = [a for i, a in enumerate(arg_nodes) if i not in self.functions[name].groups]
            self.scratch_arg(name, args)
            self.rw.replace(args, lambda inner, f=name: _append(
                inner, [self._shared_name(a, o) for o, a in self.shared_users.get(f, ())]))
        elif name in T.OPENCL_SAME:
            self._precision(node, name, name)
        elif name in self.templates and scope.get(name) is None:
            self._deduce(callee, name, arg_nodes, scope)
            return
        else:
            self.rw.error(callee, name, "not a function accel port knows to exist in OpenCL C "
                          "with the same meaning", "define it as a __device__ function in this file")
            return
        if name not in self.functions and name not in self.function_macros:
            self.rw.note(name)
        for a in arg_nodes:
            self._expr(a, scope)

    def _rename_call(self, node, name: str, arg_nodes) -> None:
        """Math, cache-hinted loads, fast division and vector constructors: renamed in place,
        or kept for the prologue to define."""
        if not self.sp.rename_calls:
            self.kept_calls.add(name)
            return
        callee = node.child_by_field_name("function")
        if name in T.OPENCL_MATH:
            self.rw.replace(callee, T.OPENCL_MATH[name])
        elif name in T.OPENCL_LOADS:
            self.rw.replace(callee, "*")
        else:
            self.rw.replace(callee, f"({name[5:]})")

    def _precision(self, node, name: str, opencl: str) -> None:
        """Say so where OpenCL 1.2 allows a larger error than CUDA documents for the function
        (not for CUDA's fast intrinsics, whose own bounds are looser than OpenCL's)."""
        if name.startswith("__") or opencl not in T.ULP_BOUNDS:
            return
        cuda, ocl = T.ULP_BOUNDS[opencl]
        bound = "no bound" if ocl is None else f"{ocl} ulp"
        self.rw.warn(node, f"{name} precision", f"OpenCL 1.2 allows {bound} for {opencl} where "
                     f"CUDA documents {cuda} ulp for {name} (single precision)",
                     "accept the looser bound, or check the results against a tolerance of "
                     f"{ocl or 'several'} ulp")

    def _typed_call(self, node, name: str, arg_nodes) -> bool:
        """An intrinsic whose OpenCL form needs CUDA's types spelled out (T.OPENCL_TYPED)."""
        template = T.OPENCL_TYPED[name][0]
        wanted = len(set(re.findall(r"\{(\d)\}", template)))
        if len(arg_nodes) != wanted:
            self.rw.error(node, name, f"CUDA's {name} takes {wanted} argument"
                          f"{'s' * (wanted != 1)}, not {len(arg_nodes)}", "fix the call")
            return False
        self.helpers.update(re.findall(r"\baccel_\w+", template))
        for called in re.findall(r"\b(\w+)\(", template):  # sincosf -> sincos
            self._precision(node, name, called)
        if not self.sp.rename_calls:
            self.kept_calls.add(name)
        else:
            self.rw.replace(node, lambda _i: template.format(*(self.rw.render(a) for a in arg_nodes)))
        return True

    def _spell(self, t: str) -> str:
        return self.sp.cast_types.get(t, t)

    def _cast_args(self, arg_nodes, to: str, scope: Scope) -> None:
        """Convert arguments to the parameter type CUDA's overload takes, where they differ:
        OpenCL C's overloaded builtins refuse mixed or ambiguous argument types."""
        for a in arg_nodes:
            if self.typer.of(a, scope) != to:
                self.rw.replace(a, lambda inner, t=self._spell(to): f"({t})({inner})")

    def _min_max(self, node, name: str, arg_nodes, scope: Scope) -> None:
        """CUDA's min/max overloads compute in the usual arithmetic conversion of the two
        arguments (``min(uint, int)`` is unsigned), floats like fminf/fmaxf; OpenCL's
        integer min/max refuse mixed types and its float min/max leave NaN undefined."""
        types = [self.typer.of(a, scope) for a in arg_nodes]
        common = arithmetic(*types) if len(types) == 2 else None
        if common is None:  # vectors or unknown: OpenCL resolves alike, or refuses to build
            return
        if common in FLOATS:  # fmin/fmax: OpenCL builtins, and CUDA's float overloads
            self.rw.replace(node.child_by_field_name("function"), "f" + name)
        if any(t != common for t in types):
            self._cast_args(arg_nodes, common, scope)

    def _abs(self, node, arg_nodes, scope: Scope) -> bool:
        """CUDA's integer abs returns the argument's signed type, OpenCL's the unsigned one;
        CUDA's float abs is OpenCL's fabs."""
        t = promote(self.typer.of(arg_nodes[0], scope)) if len(arg_nodes) == 1 else None
        if t in ("int", "long"):
            self.rw.replace(node, lambda inner, s=self._spell(t): f"(({s}){inner})")
        elif t in FLOATS:
            self.rw.replace(node.child_by_field_name("function"), "fabs")
        else:
            self.rw.error(node, "abs", "the type of its argument cannot be inferred, and OpenCL's "
                          "abs differs by type (unsigned result for integers, none for floating "
                          "point)", "(int)abs(x) for integers, fabsf(x) for float")
            return False
        return True

    def _result(self, name: str, types: list) -> str | None:
        """The type CUDA gives a call to ``name`` with arguments of ``types`` (None: unknown)."""
        if name in T.OPENCL_TYPED:
            return T.OPENCL_TYPED[name][1]
        if name in T.OPENCL_MATH or name in _STORAGE_LOADS:
            return "float"
        if name in ("min", "max") and len(types) == 2:
            return arithmetic(*types)
        if name == "abs" and len(types) == 1:
            return promote(types[0])
        if name in ("isnan", "isinf", "isfinite", "signbit"):
            return "int"
        if name in T.OPENCL_SAME and types and types[0] in FLOATS:
            return types[0]
        if name in self.functions:
            return self.functions[name].returns
        if name.startswith("make_") and name[5:] in T.VECTOR_TYPES:
            return name[5:]
        return None

    def _deduce(self, callee, name: str, arg_nodes, scope: Scope) -> None:
        """A call of a function template that names no template arguments (``sq(x[i])``):
        where every template parameter is a type that the arguments' types give, as C++
        deduces it (``T v`` from a value, ``T* p`` from a pointer's element type), the call is
        recorded (translate() names the arguments, ``sq<float>(x[i])``, and expands the
        template); anything else is refused on the call."""
        params, fn, defaults = self.templates[name]
        types = dict.fromkeys(p for p, kind in params if kind == "type")
        decl = fn.child_by_field_name("declarator")
        fparams = [p for p in decl.child_by_field_name("parameters").named_children if p.type != "comment"]
        # a value parameter takes its default (template <int width = WARP_SIZE>), as in C++
        ok = all(kind == "type" or p in defaults for p, kind in params) and len(fparams) == len(arg_nodes)
        for p, a in zip(fparams if ok else (), arg_nodes):
            spelled = " ".join(text(type_node(p)).split()) if p.type == "parameter_declaration" else ""
            if spelled not in types:
                continue
            d = p.child_by_field_name("declarator")
            ptr = 0 if d is None or d.type == "reference_declarator" else declarator_parts(d)[1]
            info = self._pointer(a, scope) if ptr == 1 else None
            got = info.type if info is not None else self.typer.of(a, scope) if ptr == 0 else None
            ok = got is not None and types[spelled] in (None, got)
            if not ok:
                break
            types[spelled] = got
        for p in types:  # a type no argument gives: its default, if it has one
            if ok and types[p] is None and p in defaults:
                types[p] = defaults[p]
        if ok and None not in types.values() and self.rw is self._main_rw:  # not in a macro body
            self.deduced.append((callee, name, tuple(
                _CUDA_SPELLING.get(types[p], types[p]) if kind == "type" else defaults[p] for p, kind in params)))
            return
        self.undeduced.add(name)
        self.rw.error(callee, f"template call {name}", "OpenCL C has no templates, and accel port "
                      "cannot tell every template argument from the arguments' types",
                      f"name them: {name}<float>(...)")

    def _record_call(self, callee: _Function, arg_nodes, scope: Scope, name_node) -> None:
        spaces = {}
        for i, a in enumerate(arg_nodes):
            if i in callee.groups:  # dropped with its parameter
                continue
            if i in callee.references:  # T& x: the caller passes its variable's address
                self.rw.replace(a, lambda inner: f"&({inner})")
            info = (storage_info(a, scope, self._normal) if i in callee.references
                    else self._pointer(a, scope))
            spaces[i] = None if info is None else info.space
            if info is not None:
                callee.arg_spaces.setdefault(i, set()).add(info.space)
        # a call in a macro's body is in another text than the file's: no copy is picked for it
        callee.sites.append((name_node, spaces) if self.rw is self._main_rw else (None, {}))

    def _atomic(self, node, name: str, arg_nodes, scope: Scope) -> bool:
        info = self._pointer(arg_nodes[0], scope) if arg_nodes else None
        if info is None:
            self.rw.error(node, name, "the element type and address space of its target cannot "
                          "be inferred", f"{name}(&array[i], v) on a parameter or __shared__ array")
            return False
        if (name, info.type) in T.OPENCL_CAS_ATOMICS:
            return self._cas_atomic(node, name, arg_nodes, info)
        if name in ("atomicInc", "atomicDec"):
            self.rw.error(node, f"{name} on {info.type}", "CUDA defines it on a 32-bit unsigned "
                          "counter", "an unsigned int counter")
            return False
        if info.type in T.ATOMIC_INT_TYPES or (name == "atomicExch" and info.type == "float"):
            if self.sp.rename_calls:
                self.rw.replace(node.child_by_field_name("function"), T.OPENCL_ATOMICS[name])
            else:
                self.kept_calls.add(name)
            return True
        if info.type in ("float", "double", "half"):
            why = f"OpenCL 1.2 has no {info.type} {name}: its atomics act on 32-bit words"
            rewrite = ("accumulate per block in __shared__ memory and write one partial per block, "
                       "or an atomic_cmpxchg loop on the value's bits")
        else:
            why = f"OpenCL 1.2 atomics act on 32-bit int and uint only, not {info.type}"
            rewrite = "use a 32-bit counter"
        self.rw.error(node, f"{name} on {info.type}", why, rewrite)
        return False

    def _cas_atomic(self, node, name: str, arg_nodes, info: Sym) -> bool:
        """An atomic OpenCL 1.2 lacks (T.OPENCL_CAS_ATOMICS): a compare-and-swap helper."""
        if len(arg_nodes) != 2 or info.space not in ("global", "local"):
            self.rw.error(node, f"{name} on {info.type}", "CUDA's atomics act on global or shared "
                          "memory", f"{name}(&array[i], v) on a parameter or __shared__ array")
            return False
        helper = f"accel_{name}_{info.type}_{info.space}"
        self.helpers.add(helper)
        self.native_helpers[helper] = name
        self.rw.replace(node.child_by_field_name("function"), helper)
        return True

    def _storage_load(self, node, name: str, arg_nodes, scope: Scope) -> bool:
        """``__half2float(p[i])`` -> ``vload_half(i, p)``, ``__bfloat162float(p[i])`` -> the
        widening of p[i]'s bits: the one way to read a memory-only 16-bit float."""
        kind = next(t for t, names in T.STORAGE_LOADS.items() if name in names)
        arg = arg_nodes[0] if len(arg_nodes) == 1 else None
        element = self._storage_element(arg, scope, kind)
        if element is None:
            self.rw.error(node, name, f"OpenCL C 1.2 has {kind} values only in memory (no "
                          f"cl_khr_fp16, no bfloat16 type): only {kind} read straight from "
                          "memory can be converted", f"{name}(p[i]) on a {kind} pointer p")
            return False
        self.rw.note(name)
        self._helpers_of(element.load)
        part = T.STORAGE_LOAD_PARTS.get(name, "{}")  # __low2float: one half of the float2
        self.rw.replace(node, lambda _i: part.format(element.read()))
        for n in element.inner:
            self._expr(n, scope)
        return False  # arguments handled

    def _storage_store(self, node, scope: Scope, address=None, right=None) -> bool:
        """``p[i] = __float2half(v);`` -> ``vstore_half_rte(v, i, p);``, and bfloat16's
        ``p[i] = __float2bfloat16(v);`` -> the rounding of v to p[i]'s bits; also as the
        cache-hinted store ``__stcs(&p[i], __float2half(v));`` (``address``, ``right``)."""
        if address is None:
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            plain = text(node.child_by_field_name("operator")) == "="
        else:
            left, plain = address, True
        kind = self._storage_kind(left, scope, address is not None)
        target = self._storage_element(left, scope, kind, address is not None) if kind else None
        if target is None:
            return False
        statement = node.parent.type == "expression_statement" and plain
        conversion = text(right.child_by_field_name("function")) if right.type == "call_expression" else ""
        spelled = T.STORAGE_STORE_VALUES.get(conversion, "{}")  # its float value from its arguments
        converted = (conversion in T.STORAGE_STORES[kind] and len(
            right.child_by_field_name("arguments").named_children) == spelled.count("{}"))
        copied = self._storage_element(right, scope, kind)  # q[j] of the same type: its bits
        # p[i] = v with v a float: C++'s conversion (__half(float), __nv_bfloat16(float)) rounds
        # to nearest even as __float2half / __float2bfloat16 do; a double or an integer would be
        # rounded once, straight to 16 bits, which the float store would not do
        implicit = (not converted and not copied and kind in ("half", "bfloat16")
                    and self.typer.of(right, scope) == "float")
        if not statement or not (converted or copied or implicit):
            if right.type == "call_expression" and callee_name(right) in T.OPENCL_UNSUPPORTED:
                self._expr(right, scope)  # c[i] = __hadd2(a[i], b[i]): the call's own refusal
            else:
                self.rw.error(node, f"{kind} store", *T.STORAGE_MATH[kind])
            return True
        if copied:  # widening then narrowing gives back the same bits (NaN payloads included)
            self._helpers_of(copied.load)
            value, loaded, inner = None, copied.read, copied.inner
        elif implicit:
            self.rw.note(f"float stored to {kind}")
            loaded, inner = (lambda: self.rw.render(right)), [right]
        else:
            values = right.child_by_field_name("arguments").named_children
            self.rw.note(conversion)
            loaded, inner = (lambda: spelled.format(*(self.rw.render(v) for v in values))), list(values)
        self._helpers_of(target.store)
        self.rw.replace(node, lambda _i: target.write(loaded()))
        for n in inner + target.inner:
            self._expr(n, scope)
        return True

    def _helpers_of(self, template: str) -> None:
        """The OpenCL helpers a load or store template calls (none in accel's dialect)."""
        self.helpers.update(h for h in T.OPENCL_HELPERS if h + "(" in template)

    def _storage_kind(self, node, scope: Scope, address: bool = False) -> str | None:
        """"half" or "bfloat16" when ``node`` is an element of one (see _storage_element)."""
        for kind in T.STORAGE_MATH:
            if self._storage_element(node, scope, kind, address) is not None:
                return kind
        return None

    def _storage_element(self, node, scope: Scope, kind: str, address: bool = False) -> "_Element | None":
        """How to read and write ``node`` when it is one ``kind`` ("half", "bfloat16") value in
        memory: ``p[i]`` or ``*p`` with p a pointer to kind, or a struct member of kind
        (``s.f``, ``p->f``, ``s.f[i]``), whose bits the translation keeps, or a cache-hinted
        load of one (``__ldg(&p[i])``, ``__ldcs(p + i)``); else None. With ``address``, the
        element ``node`` points at (``&p[i]``, ``p + i``, ``p``)."""
        while node is not None and node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        if node is None or kind not in self.sp.loads:  # refused where its type is spelled
            return None
        if address and node.type == "pointer_expression" and text(node).startswith("&"):
            return self._storage_element(node.child_by_field_name("argument"), scope, kind)
        if address and node.type == "binary_expression" and text(node.child_by_field_name("operator")) == "+":
            base, index = node.child_by_field_name("left"), node.child_by_field_name("right")
        elif address:
            base, index = node, None
        elif node.type == "call_expression" and (name := callee_name(node)) in T.OPENCL_LOADS \
                and scope.get(name) is None:
            # a cache hint on the load: a plain load reads the same value
            args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
            return self._storage_element(args[0], scope, kind, True) if len(args) == 1 else None
        elif node.type == "subscript_expression":
            base = node.child_by_field_name("argument")
            idx = node.child_by_field_name("indices").named_children
            index = idx[0] if len(idx) == 1 else None
        elif node.type == "pointer_expression" and text(node).startswith("*"):
            base, index = node.child_by_field_name("argument"), None
        elif node.type == "field_expression":
            base, index = node, None
        else:
            return None
        if base.type == "field_expression":  # s.f, or s.f[i] of an array member: the bits
            member = member_info(base, scope, self._normal)
            if member is None or member.type != kind or member.array != (base != node):
                return None
            return _Element(self.sp.member_loads[kind], self.sp.member_stores[kind],
                            lambda: {"e": self.rw.render_inside(node)}, node.named_children)
        sym = scope.get(text(base)) if base.type == "identifier" else None
        if sym is None or sym.type != kind or not sym.pointer:
            return None
        return _Element(self.sp.loads[kind], self.sp.stores[kind], lambda: {
            "p": self.rw.render(base), "i": self.rw.render(index) if index is not None else "0"},
            [index] if index is not None else [])

    # -- address spaces -------------------------------------------------------------------------------
    def _pointer(self, node, scope: Scope) -> Sym | None:
        return pointer_info(node, scope, self._normal)

    def _normal(self, spelled: str) -> str:
        if spelled in self.typedef_pending:
            self.typedefs_used.add(spelled)
        return self.typedefs.get(spelled, T.STORAGE_FLOATS.get(spelled,
                                                               T.OPENCL_TYPES.get(spelled, spelled)))


def _delete_listed(rw, node) -> None:
    """Delete ``node`` from its parameter or argument list, with the comma that separates it."""
    siblings = node.parent.children
    k = siblings.index(next(c for c in siblings if c.start_byte == node.start_byte and c.type == node.type))
    if k + 1 < len(siblings) and siblings[k + 1].type == ",":
        rw.replace(node, "")
        rw.delete(siblings[k + 1])
    elif k > 0 and siblings[k - 1].type == ",":
        rw.replace(siblings[k - 1], "")
        rw.replace(node, "")
    else:
        rw.replace(node, "")
