"""pytest plugin: the conformance cases as pytest tests.

``pytest --pyargs accel.conformance --accel-backend opencl`` runs the same cases as
``accel conformance --backend opencl`` (registered under the ``pytest11`` entry-point group;
before that, add ``-p accel.conformance.pytest_plugin``). Declined cases are skipped with the
backend's reason, after checking that the public op raises UnsupportedError for them.
"""
from __future__ import annotations

import pytest

# the filters parse as `accel conformance --ops/--dtypes` do: ',' is an error naming the option
from accel.conformance.argtypes import dtype_names, int_at_least, names, split_names


def pytest_addoption(parser) -> None:
    group = parser.getgroup("accel", "accel conformance suite")
    group.addoption("--accel-backend", default=None,
                    help="backend/device for the conformance cases (default: automatic choice)")
    group.addoption("--accel-profile", default="quick", help="conformance profile: quick or full")
    group.addoption("--accel-seed", type=int_at_least(0), default=0, help="conformance data/search seed")
    # append, not `accel conformance`'s nargs="+", which would take the test paths after it as ops
    group.addoption("--accel-ops", type=names, action="append",
                    help="comma-separated ops to run (default: all)")
    group.addoption("--accel-dtypes", type=names, action="append",
                    help="comma-separated dtypes, aliases as `accel conformance --dtypes` "
                         "(fp32, fp16, half, bf16; default: all)")


def pytest_generate_tests(metafunc) -> None:
    fixtures = metafunc.fixturenames
    if "conformance_case" not in fixtures and "conformance_property" not in fixtures:
        return
    from accel.conformance import suite
    from accel.errors import AccelError

    config = metafunc.config
    try:
        cases, targets = suite.planned(config.getoption("--accel-profile"), config.getoption("--accel-seed"),
                                       split_names(config.getoption("--accel-ops")),
                                       dtype_names(config.getoption("--accel-dtypes")), flag="--accel-")
    except AccelError as e:  # e.g. a selection of nothing, which would pass as "no tests"
        raise pytest.UsageError(str(e)) from None
    if "conformance_case" in fixtures:
        metafunc.parametrize("conformance_case", cases, ids=[c.id for c in cases])
    if "conformance_property" in fixtures:
        metafunc.parametrize("conformance_property", targets, ids=[f"{o}/{d}" for o, d in targets])


@pytest.fixture(scope="session")
def conformance_backend(request):
    """The backend instance the conformance cases run on."""
    import accel

    return accel.get_backend(request.config.getoption("--accel-backend"))


def check(result) -> None:
    """Turn a CaseResult into a pytest outcome."""
    if result.status == "unsupported":
        pytest.skip(f"declined by supports(): {result.reason}")
    if result.status == "compiled_only":
        pytest.skip(f"backend evidence is '{result.evidence}': kernels are only compiled here")
    assert result.ok, f"{result.status}: {result.reason}\nrepro: {result.repro}"
