"""The default tile parameters of the shipped kernels (importable as ``accel.kernels.tiles``; every
name is also ``accel.kernels.X``): one set for GPUs and one for CPU OpenCL devices per kernel
family, and the few sizes the planners read beside them. The measurements behind the defaults are
in docs/benchmarks.md, "Why the tile defaults are what they are".

A parameter set is a dict of ``-D`` defines (:class:`accel.kernels.Variant` builds with it), less
the :data:`PLANNER_KEYS`, which only the OpenCL planner reads.
"""
from __future__ import annotations

#: tile parameters that suit GPUs (one work-item per SIMD lane, local-memory tiles) and those
#: that suit CPU OpenCL devices (one work-item per group, explicit 16-lane vectors). VW > 1 is
#: OpenCL-only, so only the GPU parameters are compiled for CUDA and HIP.
GPU_MATMUL = dict(LOCAL_TILE=1, WG_M=16, WG_N=16, TM=8, TN=8, TK=8, VW=1)
CPU_MATMUL = dict(LOCAL_TILE=0, TM=12, TN=32, VW=16)
#: attention: TEAM work-items per group, a compile-time size so that compilers budget registers
#: for TEAM rather than for their largest group (HIP would keep 128 VGPRs and spill); QSPLIT of
#: them share each row, each holding a quarter of its query and output (fewer where 4 does not
#: divide the head dims)
GPU_ATTENTION = dict(LOCAL_TILE=1, BQ=1, BKV=16, VW=1, TEAM=64, QSPLIT=4)
CPU_ATTENTION = dict(LOCAL_TILE=0, BQ=32, BKV=32, VW=16)
GPU_QMATMUL = dict(RM=1, RN=1, VW=1)
#: the GPU GEMVs (quant.cl): qgemv's teams of GEMV_WG work-items over RN weight rows;
#: qgemv_stream's groups of STREAM_WARPS teams over STREAM_ROWS rows, STREAM_STAGES - 1 rows in
#: flight per team, STREAM_MIN_GROUPS groups per multiprocessor asked of the compiler (CUDA);
#: qgemv_runs' RUNS_TEAMS teams of RUNS_WG work-items over RUNS_RN rows (16 rows per group of 128
#: work-items: N = 8192 launches 512 groups for an H200's 528 slots, at 128 registers)
GPU_GEMV = dict(RM=1, RN=4, VW=1, GEMV_WG=32, GEMV_TEAMS=4,
                STREAM_WARPS=4, STREAM_ROWS=16, STREAM_STAGES=4, STREAM_MIN_GROUPS=4,
                RUNS_WG=16, RUNS_TEAMS=8, RUNS_RN=2)
#: rows of x up to which a quantized matmul runs as a GEMV kernel on GPUs (decode batches):
#: rereading the weight per row from cache beats qmatmul's one output per work-item there
GEMV_MAX_M = 8
#: the software prefetch of the CPU GEMVs and qmatmul (accel.h's PREFETCH_ROWS, defines PF and
#: PFN): each work-item asks, step by step, for the lines of the next work-item's weight rows
#: where it reads its own. Faster than no prefetch at every size measured on PoCL; PF = 2048
#: alone was best in one case, so tune searches both (docs/benchmarks.md, "PREFETCH_NEXT")
PREFETCH_NEXT = dict(PF=0, PFN=1)
#: X8RN: the weight rows per work-item of qmatmul_x8 (x as q8_0, M > 1), a planner parameter:
#: its integer sums hold more registers than the float kernel's, so it is fastest at fewer rows
#: than the float kernel's RN (docs/benchmarks.md, "CPU_QMATMUL's X8RN")
CPU_QMATMUL = dict(RM=4, RN=4, VW=16, X8RN=2, **PREFETCH_NEXT)
#: kquant.cl's qgemv_k: on GPUs a team of KWG work-items (a warp) per RN weight rows, one
#: sub-block of 32 values each (USUB); on CPU devices one work-item per group over whole blocks
#: with 16-lane vectors, RN rows sharing each load of x at M = 1, up to RM rows of x sharing each
#: decoded weight (the OpenCL planner trades RN for RM as M grows); XRN: the RN of qgemv_kx (x as
#: q8_k) at M = 1, a planner parameter, not a define.
GPU_KGEMV = dict(KWG=32, USUB=1, RN=1, RM=1, VW=1)
CPU_KGEMV = dict(KWG=1, USUB=8, RN=2, RM=8, VW=16, XRN=1, **PREFETCH_NEXT)
#: CPU GEMVs (M = 1) run qmatmul with one weight row per work-item: on PoCL that took half the
#: time of 2 or 4 rows (docs/benchmarks.md, "CPU_GEMV"); `accel tune --ops gemv` searches RN
#: per device
CPU_GEMV = dict(RM=1, RN=1, VW=16, **PREFETCH_NEXT)
#: what changes in the CPU sets where the device takes 16-lane vectors (PoCL names an AVX-512
#: target; 32 vector registers): more weight rows per work-item in the GEMVs, which those
#: registers hold (docs/benchmarks.md, "CPU_WIDE")
CPU_WIDE = {"gemv": dict(RN=4), "kgemv": dict(RN=4, TILE=8, XRN=4)}
#: the tensor-core matmul's tiling (kernels/matmul_wmma.cu): 128 x 128 outputs per block of
#: 2 x 2 warps, each 64 x 64 (4 x 4 WMMA fragments: 8 fragment loads from shared memory feed 16
#: MMAs, where 32 x 64 warp pieces would need 6 for 8), 32-deep double-buffered shared tiles
GPU_WMMA = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=2)
#: the Hopper tensor-core matmul's tiling (kernels/matmul_wgmma.cu, sm_90a only): 128 x 256
#: outputs per block of 2 warpgroups (one m64n256k16 accumulator each), 64-deep K tiles in 4
#: cp.async stages of dynamic shared memory (4 beat 3 on an H200: docs/benchmarks.md, "GPU_WGMMA")
GPU_WGMMA = dict(BM=128, BN=256, BK=64, STAGES=4)
#: the tensor-core attention's tiling (kernels/attention_mma.cu): 8 warps of 16 queries per
#: block (8 beat 4 on an H200: docs/benchmarks.md, "GPU_ATTENTION_MMA"); the keys per shared
#: tile (BKV) follow from the head dims (accel.kernels.attention_mma)
GPU_ATTENTION_MMA = dict(WARPS=8)
#: the FP8 scaled matmul (kernels/scaled_matmul.cl): TM x TN outputs per work-item, on GPUs in
#: work-groups of SCALED_MATMUL_WG x SCALED_MATMUL_WG (a warp reads 128 adjacent bytes of a row
#: of b), on CPU devices one work-item per group with 16-lane vectors over 6 x 64 outputs (each
#: row's byte of a is decoded once per k for all its columns, so wide tiles pay off:
#: docs/benchmarks.md, "CPU_SCALED_MATMUL")
GPU_SCALED_MATMUL = dict(TM=4, TN=4, VW=1)
CPU_SCALED_MATMUL = dict(TM=6, TN=64, VW=16)
SCALED_MATMUL_WG = 16
#: the FP8 tensor-core scaled matmul's tiling (kernels/scaled_matmul_mma.cu, sm_89 and later):
#: 128 x 128 outputs per block of 2 x 4 warps (64 x 32 each), K tiles of 128 (the FP8 scale
#: block), two stages of A and B plus B's transpose in dynamic shared memory (80 KiB: sm_89
#: allows a block 99 KiB)
GPU_SCALED_MATMUL_MMA = dict(BM=128, BN=128, BK=128)
#: its sm_90a wgmma kernel: the same block tile over 2 warpgroups, 4 cp.async stages of A and B
#: and two of B's transpose (161 KiB)
GPU_SCALED_MATMUL_WGMMA = dict(BM=128, BN=128, BK=128, STAGES=4)
#: rows of x per qmatmul_cb work-item: each decoded weight serves them all (one row per
#: work-item was far too slow on PoCL: docs/benchmarks.md, "CODEBOOK_ROWS")
CODEBOOK_ROWS = 8

#: keys of a parameter set the OpenCL planner reads and no kernel does: XRN (qgemv_kx's rows at
#: M = 1), TILE (qgemv_k's RN x RM bound at M > 1), X8RN (qmatmul_x8's rows)
PLANNER_KEYS = ("XRN", "TILE", "X8RN")
