"""A conformance case: op, dtype, category and parameters, named by an id that parses back.

The id is the whole recipe (shapes, data generator, data seed), so ``accel conformance --case ID``
rebuilds exactly the same inputs on any machine: that is the one-line reproduction of a failure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from accel.errors import ArgumentError, expected

KINDS = ("grid", "exact", "special", "property")
_TUPLE = re.compile(r"^(\d+x)+\d*$|^x$")
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^-?\d+(\.\d*)?(e[-+]?\d+)?$")


def _encode(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "x".join(str(int(v)) for v in value) + ("x" if len(value) < 2 else "")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _decode(text: str) -> Any:
    if text == "none":
        return None
    if text in ("true", "false"):
        return text == "true"
    if _TUPLE.match(text):
        return tuple(int(v) for v in text.split("x") if v)
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


@dataclass
class Case:
    """One conformance case. ``params`` holds only ints, floats, bools, None, short strings and
    tuples of ints (shapes); ``params["seed"]`` seeds the data generator."""

    op: str
    dtype: str
    kind: str
    params: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        body = ",".join(f"{k}={_encode(v)}" for k, v in self.params.items())
        return f"{self.op}/{self.dtype}/{self.kind}/{body}"

    @classmethod
    def parse(cls, case_id: str) -> "Case":
        """The case named by ``case_id`` (as printed in reports and repro commands)."""
        parts = case_id.split("/")
        if len(parts) != 4 or parts[2] not in KINDS:
            raise ArgumentError(expected("--case", "an id op/dtype/kind/key=value,... as printed "
                                         "by a conformance run", repr(case_id)))
        op, dtype, kind, body = parts
        params = {}
        for item in filter(None, body.split(",")):
            key, sep, value = item.partition("=")
            if not sep:
                raise ArgumentError(expected("--case", "key=value parameters", repr(item)))
            if key in params:  # the later one would silently win
                raise ArgumentError(expected("--case", "each parameter once", f"{key!r} twice"))
            params[key] = _decode(value)
        return cls(op, dtype, kind, params)

    def __str__(self) -> str:
        return self.id
