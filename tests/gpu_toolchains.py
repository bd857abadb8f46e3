"""Tests that compile for GPU targets need NVRTC / hiprtc: without them they skip, saying what to
install - except where ACCEL_REQUIRE_TOOLCHAINS=1 (CI), where a missing compiler fails them."""
import os

import pytest

from accel import toolchains


def need(*targets: str) -> None:
    for target in targets:
        try:
            toolchains.toolchain_version(target)
        except toolchains.ToolchainUnavailable as e:
            if os.environ.get("ACCEL_REQUIRE_TOOLCHAINS") == "1":
                pytest.fail(f"ACCEL_REQUIRE_TOOLCHAINS=1 but the {target} toolchain is missing: {e}")
            pytest.skip(f"the {target} toolchain is missing: {e}")
