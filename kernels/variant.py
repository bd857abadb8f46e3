"""What a kernel variant is (importable as ``accel.kernels.variant``; every name is also
``accel.kernels.X``): one source specialised by ``-D`` defines, the local memory it needs and the
NVIDIA targets it builds for. Which variants ship is :mod:`accel.kernels.catalog`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from accel.kernels.launch import gemv_local_bytes, runs_local_bytes, stream_local_bytes

#: dialects a variant can target
DIALECTS = ("opencl", "cuda", "hip")
#: the upper end of a variant's sm_range when it runs on every later NVIDIA arch too
SM_ANY_LATER = 999


@dataclass(frozen=True)
class Variant:
    """One specialisation of one kernel source.

    ``defines`` are passed as ``-DNAME=VALUE``; ``dialects`` are the compilers it is meant for.
    """

    source: str
    kernels: tuple[str, ...]
    defines: dict = field(hash=False, compare=False)
    dialects: tuple[str, ...] = DIALECTS
    #: NVIDIA compute capabilities (major * 10 + minor, inclusive) the variant runs on; None: any
    sm_range: tuple[int, int] | None = None
    #: appended to the device's arch to name the compile target ("a": sm_90a, for wgmma)
    arch_suffix: str = ""
    key: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.source, tuple(sorted(self.defines.items()))))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variant) and self.key == other.key

    @property
    def static_local_bytes(self) -> int:
        """Static local/shared memory the variant declares (what a device must have room for,
        checked by the backends' ``supports()``). Only the attention tiles are sized by a
        problem's head dims, and the GEMVs' by their parameters (every kernel of quant.cl is
        built together, so a variant needs room for the largest); the other kernels' tiles are
        fixed and small."""
        d = self.defines
        if self.source == "attention.cl" and d.get("LOCAL_TILE"):  # float Kt[BKV*D], Vt[BKV*Dv]
            partials = d["TEAM"] * (d["BKV"] * d["BQ"] + 1) if d.get("QSPLIT", 1) > 1 else 0
            return 4 * (d["BKV"] * (d["HEAD_D"] + d["HEAD_DV"]) + partials)
        if self.source == "attention_mma.cu":  # two stages of 16-bit K and V rows, 8 pad each
            return 4 * d["BKV"] * (d["HEAD_D"] + d["HEAD_DV"] + 16)
        if self.source == "quant.cl":  # as CUDA and HIP build it: every kernel in one program
            fmt = "q8_0" if d.get("FMT_Q8_0") else "q4_0"
            return max(gemv_local_bytes(d, fmt),
                       stream_local_bytes(d, fmt) if "STREAM_ROWS" in d else 0,
                       runs_local_bytes(d, fmt) if "RUNS_WG" in d else 0)
        return 0

    @property
    def dynamic_local_bytes(self) -> int:
        """Dynamic shared memory a launch must pass (and allow above 48 KiB): the wgmma matmul's
        STAGES 16-bit tiles of A and B, plus 1 KiB to align them to its 1024-byte swizzle."""
        d = self.defines
        if self.source == "matmul_wgmma.cu":
            return d["STAGES"] * (d["BM"] + d["BN"]) * d["BK"] * 2 + 1024
        if self.source == "scaled_matmul_mma.cu" and "WGMMA" in d:  # + 1 KiB to align the stages
            return d["STAGES"] * (d["BM"] + d["BK"]) * d["BK"] + 2 * d["BN"] * d["BK"] + 1024
        if self.source == "scaled_matmul_mma.cu":  # 2 stages of A and B, and B transposed
            return 2 * (d["BM"] + d["BK"]) * d["BK"] + d["BN"] * d["BK"]
        return 0

    @property
    def id(self) -> str:
        """Short readable id, e.g. ``matmul.cl[IN_DT=F16,OUT_DT=F32,...]``."""
        return f"{self.source}[{','.join(f'{k}={v}' for k, v in sorted(self.defines.items()))}]"

    def nvidia_target(self, arch: str) -> str | None:
        """The compile target for an NVIDIA device of ``arch``, or None where the variant cannot
        run there (see :func:`nvidia_target`)."""
        return nvidia_target(arch, self.sm_range, self.arch_suffix)

    def options(self) -> list[str]:
        """The defines as compiler options, identical for OpenCL, NVRTC, hiprtc and hipcc."""
        return [f"-D{k}={v}" for k, v in sorted(self.defines.items())]


def nvidia_target(arch: str, sm_range: tuple[int, int] | None, suffix: str = "") -> str | None:
    """The compile target for code that runs on compute capabilities ``sm_range`` (inclusive),
    built for a device of ``arch``; None when the device is outside the range. Arch-specific
    features (``sm_90a``: wgmma) run only on that exact arch, hence an upper bound.

    >>> nvidia_target("sm_90", (90, 90), "a"), nvidia_target("sm_100", (90, 90), "a")
    ('sm_90a', None)
    >>> nvidia_target("sm_86", (80, 999)), nvidia_target("sm_75", (80, 999))
    ('sm_86', None)
    """
    base = arch.removesuffix("a")
    if not base.startswith("sm_"):
        return None
    if sm_range is not None:
        sm = int(base.removeprefix("sm_"))
        if not sm_range[0] <= sm <= sm_range[1]:
            return None
    return base + suffix if suffix else arch
