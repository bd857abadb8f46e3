"""The Python examples in docs/porting.md run as written (from the repository root)."""
from __future__ import annotations

import re

import pytest
from repo_paths import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "porting.md").read_text(), re.S)


def test_the_guide_has_examples():
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_porting_guide_example_runs(index, monkeypatch, capsys):
    pytest.importorskip("tree_sitter_cuda", reason="accel port needs tree-sitter-cuda ([port] extra)")
    pytest.importorskip("pyopencl", reason="the examples run on the opencl backend")
    import accel

    try:
        accel.get_backend("opencl")
    except accel.BackendUnavailable as e:
        pytest.skip(f"no OpenCL device: {e}")
    monkeypatch.chdir(ROOT)
    exec(compile(BLOCKS[index], f"docs/porting.md[{index}]", "exec"), {"__name__": "porting_md"})
    if index == 1:
        ratio = float(capsys.readouterr().out.split(":")[1])
        assert 0 < ratio <= 1
