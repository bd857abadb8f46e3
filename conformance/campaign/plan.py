"""A campaign's settings and its shards.

A shard is the unit of work one device runs and the driver records: a slice of the profile's fixed
cases (as ``suite.planned`` lists them), or one seeded property search of an (op, dtype) pair (as
``suite.run`` runs it). Every platform runs every shard, so a platform's results are the same
cases as a single-machine ``accel conformance`` run of the profile. The fuzz profile is property
searches only: ``seeds`` searches per (op, dtype), each of ``examples`` drawn cases with its own
seed, every drawn case rebuilt from its id alone.

>>> settings = Settings(backends=("cpu",), profile="quick", ops=("dequantize",), dtypes=("q8_0",))
>>> [s.id for s in shards(settings)]
['fixed-0000', 'search-dequantize-q8_0-s0']
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from accel.errors import ArgumentError, expected

from accel.conformance import properties, suite
from accel.conformance.profiles import PROFILES as SUITE_PROFILES

PROFILES = SUITE_PROFILES + ("fuzz",)


@dataclass(frozen=True)
class Settings:
    """What a campaign runs; ``campaign.json`` keeps it so that ``--resume`` plans the same shards."""

    backends: tuple[str, ...]
    profile: str = "quick"
    seed: int = 0
    seeds: int = 1  # fuzz: property searches per (op, dtype)
    examples: int = 25  # fuzz: drawn cases per search
    ops: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    repeat: int = 1
    bitwise: bool = False
    shard_size: int = 8  # fixed cases per shard

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Settings":
        tuples = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        try:
            return cls(**tuples)
        except TypeError as e:
            raise ArgumentError(expected("campaign.json: settings", "the settings an accel "
                                         "campaign wrote", repr(e))) from None


@dataclass(frozen=True)
class Shard:
    """Fixed cases (``cases``, their ids) or one property search (``op``, ``dtype``,
    ``examples``, ``seed``)."""

    id: str
    cases: tuple[str, ...] = field(default=())
    op: str = ""
    dtype: str = ""
    examples: int = 0
    seed: int = 0

    @property
    def size(self) -> int:
        """Cases it runs (a search may stop at its first failure and run fewer)."""
        return len(self.cases) or self.examples


def shards(settings: Settings) -> list[Shard]:
    """Every shard of a campaign, in the order a single-machine run would meet its cases."""
    if settings.profile not in PROFILES:
        raise ArgumentError(expected("--profile", f"one of {PROFILES}", repr(settings.profile)))
    if settings.profile == "fuzz":
        # planned as quick to check the filters; a fuzz campaign runs none of its fixed cases
        _, targets = suite.planned("quick", settings.seed, settings.ops, settings.dtypes)
        return [Shard(f"fuzz-{op}-{dtype}-s{s}", op=op, dtype=dtype, examples=settings.examples,
                      seed=s)
                for op, dtype in targets for s in range(settings.seed, settings.seed + settings.seeds)]
    cases, targets = suite.planned(settings.profile, settings.seed, settings.ops, settings.dtypes)
    size = settings.shard_size
    out = [Shard(f"fixed-{i // size:04d}", cases=tuple(c.id for c in cases[i:i + size]))
           for i in range(0, len(cases), size)]
    return out + [Shard(f"search-{op}-{dtype}-s{settings.seed}", op=op, dtype=dtype,
                        examples=properties.EXAMPLES[settings.profile], seed=settings.seed)
                  for op, dtype in targets]
