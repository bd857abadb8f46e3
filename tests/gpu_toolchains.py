"""Tests that compile for GPU targets need NVRTC / hiprtc (and, to read NVIDIA machine code,
cuobjdump): without them they skip, saying what to install - except where
ACCEL_REQUIRE_TOOLCHAINS=1 (CI), where anything missing fails them."""
import os

import pytest

from accel import toolchains


def missing(why: str) -> None:
    """Skip the test for ``why``, or fail it where CI requires every toolchain."""
    if os.environ.get("ACCEL_REQUIRE_TOOLCHAINS") == "1":
        pytest.fail(f"ACCEL_REQUIRE_TOOLCHAINS=1 but {why}")
    pytest.skip(why)


def need(*targets: str) -> None:
    for target in targets:
        try:
            toolchains.toolchain_version(target)
        except toolchains.ToolchainUnavailable as e:
            missing(f"the {target} toolchain is missing: {e}")


def sass_of(result: toolchains.CompileResult, kernel: str) -> dict:
    """The SASS opcode counts of ``kernel`` in an NVIDIA compile result."""
    sass = result.resources[kernel].detail.get("sass")
    if sass is None:
        missing(result.resources_note)
    return sass
