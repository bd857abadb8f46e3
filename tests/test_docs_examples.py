"""The runnable examples people copy: every docstring example in the accel package (backends,
conformance and kernels included) and the README's Python example."""
import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if "\n>>> " in p.read_text())


FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    # the subpackages live outside accel/ (backends/, conformance/, kernels/): walk each one
    names = []
    for pkg in ("accel", "accel.backends", "accel.conformance", "accel.kernels"):
        module = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{pkg}.")]
    return sorted({n for n in names if ".test_" not in n})


def _has_examples(name: str) -> bool:
    module = importlib.import_module(name)
    return any(t.examples for t in doctest.DocTestFinder().find(module))


MODULES = _modules()
WITH_EXAMPLES = [n for n in MODULES if _has_examples(n)]


def test_every_module_imports_and_the_public_api_has_examples():
    public = {"accel", "accel.ops", "accel.kernel", "accel.conformance", "accel.conformance.suite"}
    assert public <= set(WITH_EXAMPLES), sorted(public - set(WITH_EXAMPLES))


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0, \
        f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.name)
def test_doc_page_examples_run(page):
    result = doctest.testfile(str(page), module_relative=False, optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} failed"


def test_readme_example_runs():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)  # noqa: S102 - our own README
    assert scope["y"].shape == (8, 256) and scope["c"].shape == (4, 3)
    assert scope["y8"].shape == (16, 32) and scope["y8"].dtype == "bfloat16"
