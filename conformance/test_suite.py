"""The conformance cases as pytest tests (collected by ``pytest --pyargs accel.conformance``;
options and fixtures come from accel.conformance.pytest_plugin)."""
import pytest

from accel.conformance import properties
from accel.conformance.pytest_plugin import check
from accel.conformance.runner import run_case


def test_case(conformance_backend, conformance_case):
    check(run_case(conformance_backend, conformance_case))


def test_property_search(conformance_backend, conformance_property, request):
    op, dtype = conformance_property
    results = []
    properties.search(conformance_backend, op, dtype,
                      properties.EXAMPLES[request.config.getoption("--accel-profile")],
                      request.config.getoption("--accel-seed"), results.append)
    ran = [r for r in results if r.status != "unsupported"]
    if not ran:
        pytest.skip(f"every drawn case was declined by supports(): {results[0].reason}")
    for result in ran:
        check(result)
