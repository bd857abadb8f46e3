"""accel's conformance suite (``accel.conformance``): every backend against an independent float64
oracle under a derived tolerance model, with exact-answer, special-value and property-based cases,
guard regions around outputs, and a versioned JSON result file. See docs/conformance.md.

>>> import accel
>>> from accel.conformance import run
>>> results = run(accel.get_backend("cpu"), ops=["matmul"], dtypes=["int8"])
>>> all(r.status == "passed" for r in results)
True
"""


def __getattr__(name: str):
    # ``run`` is imported on first use: ``accel`` imports accel.conformance.cli for every command,
    # and the suite pulls in hypothesis, which only the conformance commands need
    if name == "run":
        from accel.conformance.suite import run

        return run
    raise AttributeError(f"module 'accel.conformance' has no attribute {name!r}")


__all__ = ["run"]
