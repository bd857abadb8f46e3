"""Launch arithmetic of the shipped kernels (importable as ``accel.kernels.launch``; every name
is also ``accel.kernels.X``): grid sizes, the local memory a tiling needs, which GEMV kernel
applies, as the sources' launch contracts say, in numbers every backend turns into its own grid
terms.
"""
from __future__ import annotations

import os

import numpy as np

from accel.errors import ArgumentError, expected
from accel.formats import BLOCK
from accel.kernels.tiles import GEMV_MAX_M

#: the GEMV kernels of quant.cl: qgemv (any K, any even weight address), qgemv_stream (K a
#: multiple of 64, a 4-byte aligned weight) and qgemv_runs (K a multiple of 256, a 16-byte aligned
#: weight), which the environment variable ACCEL_GEMV_KERNEL selects where they apply; on an H200
#: qgemv is as fast as qgemv_stream or faster, qgemv_runs has not run there yet (docs/gpu.md)
GEMV_KERNELS = ("qgemv", "qgemv_stream", "qgemv_runs")


def ceil_div(n: int, d: int) -> int:
    """Groups of ``d`` that cover ``n`` items (launch grids are built from it).

    >>> ceil_div(301, 16), ceil_div(0, 16)
    (19, 0)
    """
    return -(-n // d)


def stream_local_bytes(params: dict, fmt: str, shuffles: bool = True) -> int:
    """Local memory of ``qgemv_stream``: each team's ring of STREAM_STAGES row slices (32 pairs
    of blocks and one 16-byte word), its 2 KiB for moving x, and the row sums: one float per
    team and row where teams reduce by shuffles (CUDA, HIP), else one per work-item and row.

    >>> from accel.kernels import GPU_GEMV
    >>> stream_local_bytes(GPU_GEMV, "q4_0"), stream_local_bytes(GPU_GEMV, "q8_0", False)
    (27136, 51456)
    """
    block = {"q4_0": 18, "q8_0": 34}[fmt]
    warps, rows = params["STREAM_WARPS"], params["STREAM_ROWS"]
    ring = warps * params["STREAM_STAGES"] * (32 * 2 * block + 16)
    return ring + 2048 * warps + 4 * rows * warps * (1 if shuffles else 32)


def gemv_local_bytes(params: dict, fmt: str, shuffles: bool = True) -> int:
    """Local memory of ``qgemv`` (the largest of the GEMV kernels of a variant without
    STREAM_ROWS and RUNS_WG) under tiling ``params`` (quant.cl's defaults where they set none: teams of 32,
    4 teams): x staged for two steps of GEMV_SPAN blocks per row of x (9 float4s per block, 3
    more of sums for Q4_0), and the reduction's floats where teams are wider than the shuffles
    reach (every team without shuffles) or split K.

    >>> from accel.kernels import GPU_GEMV
    >>> gemv_local_bytes(GPU_GEMV, "q4_0"), gemv_local_bytes({**GPU_GEMV, "GEMV_KSPLIT": 4}, "q4_0")
    (12288, 49216)
    """
    wg, teams, ksplit = params.get("GEMV_WG", 32), params.get("GEMV_TEAMS", 4), params.get("GEMV_KSPLIT", 1)
    rm, rn = params.get("RM", 1), params.get("RN", 1)
    staged = 16 * 2 * rm * wg * ksplit * (9 + (3 if fmt == "q4_0" else 0))
    shfl = min(wg, 32) if shuffles else 1  # 32: the narrowest warp the CUDA and HIP builds see
    return staged + (4 * rm * rn * wg * teams // shfl if wg > shfl or ksplit > 1 else 0)


def runs_local_bytes(params: dict, fmt: str) -> int:
    """Local memory of ``qgemv_runs``: x for a step of RUNS_WG runs of 8 blocks per row of x (73
    float4s per run, 17 more of sums for Q4_0), and one float per work-item, row of x and weight
    row for the teams' sums.

    >>> from accel.kernels import GPU_GEMV
    >>> runs_local_bytes(GPU_GEMV, "q4_0"), runs_local_bytes(GPU_GEMV, "q8_0")
    (24064, 19712)
    """
    rm, wg = params.get("RM", 1), params["RUNS_WG"]
    staged = 16 * rm * wg * (73 + (17 if fmt == "q4_0" else 0))
    return staged + 4 * rm * params["RUNS_RN"] * wg * params["RUNS_TEAMS"]


def preferred_gemv() -> str:
    """The GEMV kernel asked for by the environment variable ``ACCEL_GEMV_KERNEL`` (one of
    :data:`GEMV_KERNELS`), else ``qgemv``: as fast as ``qgemv_stream`` or faster on an H200
    (``qgemv_runs`` has not run on a GPU yet)."""
    name = os.environ.get("ACCEL_GEMV_KERNEL", "qgemv")
    if name not in GEMV_KERNELS:
        raise ArgumentError(expected("ACCEL_GEMV_KERNEL", f"one of {GEMV_KERNELS}", repr(name)))
    return name


def gemv_kernel(fmt: str, K: int, params: dict, *, x_addr: int, w_addr: int, local_mem: int,
                shuffles: bool = True, prefer: str | None = None) -> str:
    """Which GEMV kernel of quant.cl computes rows of x against a ``fmt`` weight of K columns,
    x and the weight at device addresses (or alignments) ``x_addr``, ``w_addr``: the preferred
    one where ``params`` build it, its local memory fits ``local_mem`` bytes and it applies:
    ``qgemv_stream`` where K is a multiple of 64 (whole pairs of blocks), the weight 4-byte and x
    16-byte aligned; ``qgemv_runs`` where K is a multiple of 256 (whole runs of 8 blocks) and
    the weight 16-byte aligned; ``qgemv`` (any K, any even weight address) otherwise.
    ``prefer`` defaults to :func:`preferred_gemv` (the environment's choice).

    >>> from accel.kernels import GPU_GEMV
    >>> [gemv_kernel("q4_0", k, GPU_GEMV, x_addr=x, w_addr=w, local_mem=48 * 1024, prefer="qgemv_stream")
    ...  for k, x, w in ((8192, 256, 256), (8224, 256, 256), (8192, 256, 2), (8192, 260, 256))]
    ['qgemv_stream', 'qgemv', 'qgemv', 'qgemv']
    >>> [gemv_kernel("q4_0", k, GPU_GEMV, x_addr=4, w_addr=w, local_mem=48 * 1024, prefer="qgemv_runs")
    ...  for k, w in ((8192, 256), (8192 + 64, 256), (8192, 8))]
    ['qgemv_runs', 'qgemv', 'qgemv']
    """
    prefer = preferred_gemv() if prefer is None else prefer
    if prefer == "qgemv_stream" and "STREAM_ROWS" in params and K % 64 == 0 and w_addr % 4 == 0 \
            and x_addr % 16 == 0 and stream_local_bytes(params, fmt, shuffles) <= local_mem:
        return prefer
    if prefer == "qgemv_runs" and "RUNS_WG" in params and K % 256 == 0 and w_addr % 16 == 0 \
            and runs_local_bytes(params, fmt) <= local_mem:
        return prefer
    return "qgemv"


def attention_rows(spec) -> int:
    """Rows of attention.cl's run per kv head: the Hq / Hkv query heads sharing it, Sq queries each.

    >>> from accel.spec import attention_spec
    >>> attention_rows(attention_spec((1, 32, 1, 128), (1, 8, 9, 128), (1, 8, 9, 128), ("float32",) * 3))
    4
    """
    return spec.Hq // spec.Hkv * spec.Sq


def attention_grid(spec, defines: dict, chunks: int = 1) -> tuple[tuple[int, int, int], int]:
    """attention.cl's launch for the variant ``defines``: ((tiles of :func:`attention_rows`
    times key ``chunks``, kv heads, batch) groups, work-items per group). A GPU group
    (LOCAL_TILE) of TEAM work-items takes TEAM / QSPLIT * BQ rows, a CPU one a single
    work-item's BQ.

    >>> from accel.kernels import attention
    >>> from accel.spec import attention_spec
    >>> spec = attention_spec((2, 32, 1, 128), (2, 8, 9, 128), (2, 8, 9, 128), ("float32",) * 3)
    >>> attention_grid(spec, attention("float32", 128, 128).defines)  # 4 rows: one group's 16
    ((1, 8, 2), 64)
    """
    items = defines["TEAM"] if defines.get("LOCAL_TILE") else 1
    rows = items // defines.get("QSPLIT", 1) * defines["BQ"]
    return (ceil_div(attention_rows(spec), rows) * chunks, spec.Hkv, spec.B), items


def attention_chunks(spec, defines: dict, compute_units: int) -> int:
    """Key chunks for attention.cl (flash-decoding): 1 where the launch already has twice as
    many groups as the device has ``compute_units``, else about enough to reach that, each
    chunk at least 2 key tiles and none empty (the kernel gives each ceil(tiles / chunks)).

    >>> from accel.kernels import attention
    >>> from accel.spec import attention_spec
    >>> decode = attention_spec((1, 32, 1, 128), (1, 8, 4096, 128), (1, 8, 4096, 128), ("float32",) * 3)
    >>> gpu = attention("float32", 128, 128).defines
    >>> attention_chunks(decode, gpu, 132), attention_chunks(decode, gpu, 4)  # 256 tiles: 8 each
    (32, 1)
    """
    (groups, heads, batch), _ = attention_grid(spec, defines)
    have, wanted = groups * heads * batch, 2 * compute_units
    tiles = ceil_div(spec.Sk, defines["BKV"])
    if have >= wanted or tiles < 4:
        return 1
    per_chunk = ceil_div(tiles, min(ceil_div(wanted, have), tiles // 2))
    return ceil_div(tiles, per_chunk)


def attention_splits_bytes(spec, chunks: int) -> int:
    """Bytes of attention.cl's ``splits`` records for ``chunks`` key chunks."""
    return 4 * spec.B * spec.Hkv * chunks * attention_rows(spec) * (spec.Dv + 2)


def attention_combine_args(spec, chunks: int) -> tuple:
    """The scalar arguments of attention.cl's ``attention_combine`` (rows per kv head, chunks,
    queries, kv heads, output values: one work-item each, last), as :func:`scalar_args` gives
    the others'."""
    rows = attention_rows(spec)
    return (np.int32(rows), np.int32(chunks), np.int32(spec.Sq), np.int32(spec.Hkv),
            np.int64(spec.B * spec.Hkv * rows * spec.Dv))


def gemv_launch(name: str, params: dict, N: int, M: int) -> tuple[tuple[int, int], int]:
    """The launch of GEMV kernel ``name`` (one of :data:`GEMV_KERNELS`) with tiling ``params``
    for N weight rows and M rows of x, as quant.cl's launch contracts say: ((groups along N,
    groups along M), work-items per group). The backends turn it into their own grid terms.

    >>> from accel.kernels import GPU_GEMV
    >>> [gemv_launch(name, GPU_GEMV, 301, 3) for name in ("qgemv", "qgemv_stream", "qgemv_runs")]
    [((19, 3), 128), ((19, 3), 128), ((19, 3), 128)]
    """
    known = GEMV_KERNELS + ("qgemv_x8",)
    if name not in known:
        raise ArgumentError(expected("name", f"one of {known}", repr(name)))
    if name == "qgemv_stream":  # STREAM_WARPS teams of 32 over STREAM_ROWS rows, one row of x
        return (ceil_div(N, params["STREAM_ROWS"]), M), 32 * params["STREAM_WARPS"]
    if name == "qgemv_runs":  # RUNS_TEAMS teams of RUNS_WG over RUNS_RN rows, RM rows of x
        return ((ceil_div(N, params["RUNS_TEAMS"] * params["RUNS_RN"]), ceil_div(M, params["RM"])),
                params["RUNS_WG"] * params["RUNS_TEAMS"])
    # qgemv and qgemv_x8: GEMV_TEAMS teams of GEMV_WG work-items, each GEMV_KSPLIT of them over
    # the same RN weight rows, RM rows of x per group
    row_teams = params["GEMV_TEAMS"] // params.get("GEMV_KSPLIT", 1)
    return ((ceil_div(N, row_teams * params["RN"]), ceil_div(M, params["RM"])),
            params["GEMV_WG"] * params["GEMV_TEAMS"])


def gemv_applies(spec, params: dict) -> bool:
    """Whether a GPU parameter set's GEMV kernels (``params`` with GEMV_WG, e.g. GPU_GEMV)
    compute quantized-matmul ``spec``: up to GEMV_MAX_M rows of x (CPU parameter sets have none).

    >>> from accel.kernels import CPU_GEMV, GPU_GEMV
    >>> from accel.spec import qmatmul_spec
    >>> from accel.formats import get_format
    >>> [gemv_applies(qmatmul_spec((m, 64), "float32", (8, 64), get_format("q4_0")), p)
    ...  for m, p in ((8, GPU_GEMV), (9, GPU_GEMV), (1, CPU_GEMV))]
    [True, False, False]
    """
    return spec.op == "qmatmul" and "GEMV_WG" in params and spec.M <= GEMV_MAX_M


def x8_kernel(params: dict) -> str:
    """The kernel of quant.cl that multiplies X8 words (x quantized by ``quantize_x8``) with a
    weight under tiling ``params``: the GEMV where ``params`` are a GPU GEMV set (see
    :func:`gemv_applies`), else the any-M ``qmatmul_x8``.

    >>> from accel.kernels import CPU_QMATMUL, GPU_GEMV
    >>> x8_kernel(GPU_GEMV), x8_kernel(CPU_QMATMUL)
    ('qgemv_x8', 'qmatmul_x8')
    """
    return "qgemv_x8" if "GEMV_WG" in params else "qmatmul_x8"


def x8_words(spec) -> tuple[int, tuple]:
    """(bytes, scalar arguments of ``quantize_x8``) of the X8 words quant.cl's ``quantize_x8``
    writes for quantized-matmul ``spec`` with an ``x_fmt``: per block of x, 32 code bytes, then
    (after all codes) a float pair.

    >>> from accel.spec import qmatmul_spec
    >>> from accel.formats import get_format
    >>> x8_words(qmatmul_spec((2, 64), "float32", (8, 64), get_format("q4_0"), "q8_0"))
    (160, (np.int64(4),))
    """
    nblocks = spec.M * spec.K // BLOCK
    return nblocks * (BLOCK + 8), (np.int64(nblocks),)



def scaled_matmul_groups(spec, defines: dict, wg: int) -> tuple[int, int]:
    """scaled_matmul.cl's launch for ``spec`` with tiling ``defines`` in work-groups of
    ``wg`` x ``wg``: (groups over column tiles, groups over row tiles).

    >>> from accel.kernels import CPU_SCALED_MATMUL, GPU_SCALED_MATMUL, SCALED_MATMUL_WG
    >>> from accel.spec import scaled_matmul_spec
    >>> s = scaled_matmul_spec((70, 256), "float8_e4m3fn", (256, 130), "float8_e4m3fn", (), "float32", (), "float32")
    >>> scaled_matmul_groups(s, GPU_SCALED_MATMUL, SCALED_MATMUL_WG), scaled_matmul_groups(s, CPU_SCALED_MATMUL, 1)
    ((3, 2), (3, 12))
    """
    return ceil_div(ceil_div(spec.N, defines["TN"]), wg), ceil_div(ceil_div(spec.M, defines["TM"]), wg)

