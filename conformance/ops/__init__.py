"""The op table of the conformance suite: one :class:`OpInfo` row per op, in one module per op
family (matmul, attention, the quantized formats' ops, scaled_matmul, the decoder-step ops).
The profiles, the property search, the runner, ``--case`` ids and the support matrix read it;
adding an op to the suite is a row here (docs/architecture.md, "Add an op").

>>> from accel.conformance.ops import OPS
>>> list(OPS)[:3], OPS["matmul"].dtypes
(['matmul', 'attention', 'quantize'], ('float32', 'float16', 'bfloat16', 'int8'))
"""
from __future__ import annotations

import numpy as np

from accel.errors import ArgumentError, expected

from accel.conformance.case import Case
from accel.conformance.ops import attention, decoder, matmul, quant, scaled_matmul
from accel.conformance.ops.common import OpInfo

#: every op of the suite, in the order runs take them
OPS: dict[str, OpInfo] = {row.name: row for module in (matmul, attention, quant, scaled_matmul, decoder)
                          for row in module.ROWS}


def row(op: str) -> OpInfo:
    """The row of ``op``; an ArgumentError naming the ops there are for any other name."""
    if op not in OPS:
        raise ArgumentError(expected("op", f"one of {sorted(OPS)}", repr(op)))
    return OPS[op]


def build(case: Case):
    """(spec, host inputs) for a case of an op with a spec; raises an AccelError for parameters
    the spec rejects."""
    r = row(case.op)
    if r.build is None:
        raise ArgumentError(expected("case", "a case of an op with a spec (matmul, attention, the "
                                     "quantized ops, scaled_matmul)", repr(case.id)))
    rng = np.random.default_rng(case.params.get("seed", 0))
    try:
        return r.build(case, rng)
    except (KeyError, TypeError, ValueError) as e:  # a hand-written --case id missing a parameter
        raise ArgumentError(expected("case", f"the parameters a {case.op} case needs (as in a "
                                     "printed repro id)", f"{case.id!r} ({type(e).__name__}: {e})")) from None
class _ReadKeys(dict):
    """A case's params that remember which keys the builder read."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.read: set = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def unread_params(case: Case) -> list[str]:
    """The parameters of ``case`` that its op never reads: in a hand-written ``--case`` id, a
    mistyped key (``causl=true``) would otherwise run another case and pass."""
    params = _ReadKeys(case.params)
    read = Case(case.op, case.dtype, case.kind, params)
    if row(case.op).run_public is not None:  # read by running it (on the reference)
        from accel.registry import get_backend

        row(case.op).run_public(get_backend("cpu"), read)
    else:
        build(read)
    return [k for k in case.params if k not in params.read]
