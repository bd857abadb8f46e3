"""The runnable examples people copy: every docstring example in the accel package (backends,
conformance and kernels included) and the README's Python example."""
import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import accel

README = Path(__file__).resolve().parents[1] / "README.md"


def _modules() -> list[str]:
    # the subpackages live outside accel/ (backends/, conformance/, kernels/): walk each one
    names = []
    for pkg in ("accel", "accel.backends", "accel.conformance", "accel.kernels"):
        module = importlib.import_module(pkg)
        names.append(pkg)
        names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{pkg}.")]
    return sorted({n for n in names if n != "accel.__main__" and ".test_" not in n})


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_readme_example_runs():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)  # noqa: S102 - our own README
    assert scope["y"].shape == (8, 256) and scope["c"].shape == (4, 3)
