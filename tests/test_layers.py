"""The layer rules of docs/architecture.md, checked on the import statements of every module
(top-level, in-function and TYPE_CHECKING imports all count; a package's implicit import of its
parents does not), and the size of the interface package accel/."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> folder, as pyproject.toml maps them
PACKAGE_DIRS = {"accel": "accel", "accel.backends": "backends", "accel.conformance": "conformance",
                "accel.kernels": "kernels"}

BASE = {"accel.errors", "accel.dtypes", "accel.spec", "accel.host"}
RUNTIME = {"accel", "accel.backend", "accel.registry", "accel.tensor", "accel.dispatch", "accel.ops",
           "accel.torch_ops", "accel.kernel", "accel.backends", "accel.nn"}  # accel.backends itself is the listing function accel.backends()
KERNELS = {"accel.kernels", "accel.kernels.toolchains", "accel.kernels.resources",
           "accel.kernels.tiles", "accel.kernels.coverage", "accel.kernels.variant",
           "accel.kernels.catalog", "accel.kernels.launch", "accel.kernels.arguments",
           "accel.kernels.strided_copy"}
TOOLS = ("accel.__main__", "accel.kernels.port", "accel.conformance.bench",
         "accel.conformance.report", "accel.conformance.campaign", "accel.kernels.check")
#: what each layer may import (tools may import anything)
ALLOWED = {"base": {"base"}, "runtime": {"base", "runtime"}, "kernels": {"base", "kernels"},
           "backends": {"base", "runtime", "kernels", "backends"},
           "conformance": {"base", "runtime", "kernels", "conformance"}}
#: what every kernel runtime shares (no vendor package): any backend family may import them
PLANNER = "accel.backends.plan"  # the one device-free planner
SHARED = {"accel.backends.runtime", PLANNER}
#: the backend families' vendor packages, which the planner must not import
VENDOR = {"opencl": "pyopencl", "cupy": "cupy"}
#: the most top-level modules the interface package accel/ may hold (issue 40)
MAX_INTERFACE_MODULES = 16


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> str:
    """The layer of an accel module."""
    if any(_within(module, t) for t in TOOLS):
        return "tool"
    for name, members in (("base", BASE), ("runtime", RUNTIME), ("kernels", KERNELS)):
        if module in members:
            return name
    if _within(module, "accel.formats"):  # the format table and every codec: base
        return "base"
    if _within(module, "accel.models"):  # a user of the public ops, at the runtime's level
        return "runtime"
    if _within(module, "accel.backends"):
        return "backends"
    if _within(module, "accel.conformance"):
        return "conformance"
    raise AssertionError(f"{module} has no layer: add it to docs/architecture.md and this test")


def discover() -> dict[str, Path]:
    """Every module of the accel namespace -> its file."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def top_level_modules(folder: Path) -> list[str]:
    """The top-level modules of a package folder, as its ``ls`` shows them: every ``.py`` file
    directly in it (``__init__.py`` and ``__main__.py`` included) and every folder directly under
    it that holds Python code (a subpackage, each counted once, whatever it holds)."""
    files = [p.name for p in folder.glob("*.py")]
    packages = [f"{p.name}/" for p in folder.iterdir()
                if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))]
    return sorted(files + packages)


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported name, line) of every import statement in a module's file; ``from P import X``
    names P.X when that is a module, else P."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - (node.level - (1 if is_package else 0))]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                found.append((full if full in known else source, node.lineno))
    return found


def graph(modules: dict[str, Path]) -> dict[str, list[tuple[str, int]]]:
    """Module -> the accel modules it imports, with the line."""
    known = set(modules)
    edges = {}
    for module, path in modules.items():
        names = imports_of(module, path, known)
        edges[module] = [(n, line) for n, line in names if n in known and n != module]
        # vendor imports matter to the planners' rule
        edges[module] += [(n, line) for n, line in names if n.split(".")[0] in VENDOR.values()]
    return edges


def violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Every import that breaks a layer rule, as 'module:line imports name (why)'."""
    found = []
    for module, targets in edges.items():
        src = layer(module)
        family = module.split(".")[2] if src == "backends" and module.count(".") >= 2 else None
        for name, line in targets:
            where = f"{module}:{line} imports {name}"
            vendor = name.split(".")[0]
            if vendor in VENDOR.values():
                if module == PLANNER:
                    found.append(f"{where} (the planner stays device-free: no vendor package)")
                continue
            dst = layer(name)
            if src != "tool" and dst == "tool":
                found.append(f"{where} (nothing below the tools imports a tool)")
            elif src != "tool" and dst not in ALLOWED[src]:
                found.append(f"{where} ({src} may import only {sorted(ALLOWED[src])})")
            elif module == PLANNER and dst == "backends" and name != "accel.backends":
                found.append(f"{where} (the planner never imports a runtime or backend class)")
            elif src == "backends" and dst == "backends" and name not in ("accel.backends", *SHARED):
                if name.split(".")[2] != family:
                    found.append(f"{where} (one backend family never imports another)")
    return found


def cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module, or a module
    importing itself), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in edges:
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges():
    return graph(discover())


def test_every_module_has_a_layer(edges):
    assert len(edges) > 50, "module discovery found too little: check PACKAGE_DIRS"
    for module in edges:
        layer(module)


def test_no_import_breaks_a_layer_rule(edges):
    assert violations(edges) == []


def test_no_import_cycle(edges):
    assert cycles(edges) == []


def test_the_interface_package_stays_small():
    """accel/ is the interface; tools and helpers live elsewhere (kernels/port, conformance/argtypes)
    or in the module whose job they share, so its ``ls`` stays readable."""
    found = top_level_modules(ROOT / "accel")
    assert len(found) <= MAX_INTERFACE_MODULES, (
        f"accel/ has {len(found)} top-level modules, at most {MAX_INTERFACE_MODULES}: "
        f"{', '.join(found)}; move a tool out of the interface package or merge a helper into "
        "the module whose job it shares (docs/architecture.md)")


def test_the_module_count_sees_every_kind_of_module(tmp_path):
    """The counter itself: dunder files and subpackages count, caches and data files do not."""
    for name in ("__init__.py", "__main__.py", "ops.py", "py.typed", "pkg/__init__.py",
                 "pkg/deep/x.py", "__pycache__/ops.cpython-312.pyc", "data/table.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert top_level_modules(tmp_path) == ["__init__.py", "__main__.py", "ops.py", "pkg/"]


@pytest.mark.parametrize("module, name, why", [
    ("accel.spec", "accel.tensor", "base may import only"),
    ("accel.ops", "accel.conformance.bench.suite", "nothing below the tools imports a tool"),
    ("accel.kernels.toolchains", "accel.backend", "kernels may import only"),
    ("accel.backends.cpu", "accel.backends.opencl.params", "one backend family never imports another"),
    ("accel.backends.plan", "accel.backends.opencl.backend", "never imports a runtime or backend class"),
    ("accel.backends.plan", "accel.backends.runtime", "never imports a runtime or backend class"),
    ("accel.backends.plan", "pyopencl", "no vendor package"),
    ("accel.backends.plan", "cupy.cuda", "no vendor package"),
    ("accel.conformance.runner", "accel.backends.cpu", "conformance may import only"),
    ("accel.conformance.results", "accel.__main__", "nothing below the tools imports a tool"),
])
def test_each_rule_catches_its_violation(edges, module, name, why):
    """The checker itself: one planted import per rule is reported with its reason."""
    planted = {**edges, module: [*edges[module], (name, 1)]}
    reported = [v for v in violations(planted) if v.startswith(f"{module}:1 imports {name} ")]
    assert len(reported) == 1 and why in reported[0], reported


def test_a_planted_cycle_is_found(edges):
    planted = {**edges, "accel.errors": [*edges["accel.errors"], ("accel.spec", 1)]}
    assert any({"accel.errors", "accel.spec"} <= set(c) for c in cycles(planted))


def test_the_allowed_tool_imports_pass(edges):
    """Tools may import anything: a tool importing a backend's internals is no violation."""
    planted = {**edges, "accel.conformance.bench.tune": [("accel.backends.opencl.params", 1)]}
    assert violations(planted) == []


def test_selecting_a_device_loads_no_tool():
    """``get_backend`` for cpu and opencl (where OpenCL runs) leaves no tool in sys.modules: the
    runtime never pulls in the benchmark harness, the translator or the CLI."""
    code = (
        "import json, sys, accel\n"
        "accel.get_backend('cpu')\n"
        "ok = next(s for s in accel.backends() if s.name == 'opencl').available\n"
        "if ok: accel.get_backend('opencl')\n"
        "print(json.dumps([ok, sorted(m for m in sys.modules if m == 'accel' or m.startswith('accel.'))]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    opencl_ran, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "accel.backends.cpu" in loaded
    assert ("accel.backends.opencl.backend" in loaded) == opencl_ran
    assert [m for m in loaded if layer(m) == "tool"] == []


# -- cost of change (issue 40): an op or a format added since is named in few files -----------------
#: a decoder-step op names itself in at most this many .py files outside tests/, a format added
#: by the types issue in at most FORMAT_FILES (issue 40's "Done when")
OP_FILES, FORMAT_FILES = 7, 4
#: the formats that predate the house issue: benchmarks, tuners and GEMV paths choose them by name
PREDATING = {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "mxfp4", "q8_k", "q8_1"}
#: code that only calls ops (model runners) and the CUDA-porting tool, whose names are CUDA's
CALLERS = ("accel/models/", "conformance/model_ref.py", "kernels/port/")


def _names(path: Path) -> set[str]:
    """The identifiers a module defines or calls bare, and its string literals; an attribute
    (``seen.add``) and words in comments and docstrings do not name an op."""
    import io
    import tokenize

    out, prev = set(), None
    for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if t.type == tokenize.NAME and not (prev is not None and prev.string == "."):
            out.add(t.string)
        elif t.type == tokenize.STRING and prev is not None and prev.type != tokenize.INDENT:
            try:
                value = ast.literal_eval(t.string)
            except (ValueError, SyntaxError):  # f-strings
                continue
            if isinstance(value, str):
                out.add(value)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            prev = t
    return out


@pytest.fixture(scope="module")
def module_names() -> dict[str, set[str]]:
    return {str(p.relative_to(ROOT)): _names(p) for folder in PACKAGE_DIRS.values()
            for p in (ROOT / folder).rglob("*.py") if not str(p.relative_to(ROOT)).startswith(CALLERS)}


def test_an_op_or_a_format_added_since_the_house_issue_is_named_in_few_files(module_names):
    from accel.formats import FORMATS
    from accel.spec import DECODER_OPS

    def files(name: str) -> list[str]:
        return sorted(path for path, names in module_names.items() if name in names)

    wide = {op: files(op) for op in DECODER_OPS if len(files(op)) > OP_FILES}
    wide |= {f: files(f) for f in FORMATS if f not in PREDATING and len(files(f)) > FORMAT_FILES}
    assert not wide, wide
    assert len(files("rms_norm")) >= 4  # the counter sees the spec, the op, its plan, its row


def test_the_name_counter_skips_attributes_and_comments(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""glu in a docstring"""\nseen.add(1)  # rope\nx = "mul"\ndef silu(): pass\n')
    assert {"add", "glu", "rope"}.isdisjoint(_names(path)) and {"mul", "silu"} <= _names(path)
