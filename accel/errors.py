"""The typed error hierarchy. Every accel failure a user can cause is an AccelError.

Messages name the argument, what was expected and what was received, so a caller can fix the
call without reading accel's source.
"""
from __future__ import annotations


class AccelError(Exception):
    """Base class of every error accel raises on purpose."""


class ArgumentError(AccelError, ValueError):
    """An argument has the wrong value (a bad format name, a negative size, an unknown option)."""


class ShapeError(ArgumentError):
    """Operand shapes do not fit the op (rank, mismatched K, non-broadcastable batches)."""


class OutOfBoundsError(ArgumentError, IndexError):
    """An index falls outside its axis (an IndexError, as numpy's)."""


class DTypeError(AccelError, TypeError):
    """An operand has a dtype the op does not define, or operands' dtypes do not combine."""


class BackendUnavailable(AccelError, RuntimeError):
    """A backend was requested that is unknown, not installed, or has no such device."""


class UnsupportedError(AccelError, NotImplementedError):
    """A backend declined a case through ``supports()``: the op is defined but not there."""

    def __init__(self, backend: str, op: str, dtype: str, reason: str):
        self.backend, self.op, self.dtype, self.reason = backend, op, dtype, reason
        for_dtype = f" for dtype {dtype}" if dtype else ""  # "": a case without one (a kernel)
        super().__init__(f"backend {backend!r} does not support {op}{for_dtype}: {reason}")


class DeviceMismatchError(AccelError, ValueError):
    """Operands live on different backends/devices; accel never transfers silently."""


class CompileError(AccelError, RuntimeError):
    """A kernel failed to build; carries the compiler log."""

    def __init__(self, kernel: str, target: str, log: str):
        self.kernel, self.target, self.log = kernel, target, log
        super().__init__(f"building kernel {kernel!r} for {target} failed:\n{log}")


class DeviceError(AccelError, RuntimeError):
    """The device or its runtime failed a request (out of resources, bad launch configuration)."""


def expected(arg: str, what: str, got: object) -> str:
    """Format the one message shape every argument error uses."""
    return f"{arg}: expected {what}, got {got}"
