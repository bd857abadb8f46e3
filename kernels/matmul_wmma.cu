/* C[b] = A[ia[b]] @ B[ib[b]] on NVIDIA tensor cores (WMMA), for row-major float16 or bfloat16
 * A [M, K] and B [K, N], float32 accumulation, C [M, N] stored as OUT_DT (F32, F16 or BF16, round
 * to nearest even); any M, N, K. CUDA-only (sm_80 and later: bfloat16 WMMA and cp.async), built
 * with accel.h in front like every shipped source.
 *
 * Defines: IN_DT (F16 or BF16), OUT_DT (F32, F16 or BF16), the tiling BM, BN, BK, WARPS_M,
 * WARPS_N (accel.kernels.GPU_WMMA: 128 x 128 x 32, 2 x 2 warps). Arguments and grid are those of
 * matmul.cl's GPU variant: (A, B, C, boff, M, N, K); grid x over BN-column tiles, y over BM-row
 * tiles, z over the batch; boff holds, per output batch entry, the index of its A matrix and of
 * its B matrix (broadcasting). Block: WARPS_M * WARPS_N warps of 32 threads.
 *
 * Two kernels from one body:
 *   matmul_wmma         any shape and alignment: each tile element is loaded on its own, guarded;
 *   matmul_wmma_vec     K % 8 == 0, N % 8 == 0 and A, B 16-byte aligned (the host checks): rows
 *                       of a tile arrive as 16-byte cp.async copies that zero-fill past the edges,
 *                       overlapping the next tile's loads with this tile's multiplies.
 * Either way A and B tiles go through shared memory (two stages) with zeros past M, N and K, so
 * the fragments always multiply full 16 x 16 x 16 blocks and padding adds exact zeros.
 */
#include <mma.h>
#include <cuda_bf16.h>

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
using namespace nvcuda;

/* Tiling from the variant's defines: a BM x BN block tile, BK-deep slices of A and B per stage,
 * a WARPS_M x WARPS_N grid of warps, each owning a WM x WN piece of the block tile. */
#if BM % (16 * WARPS_M) || BN % (16 * WARPS_N) || BK % 16
#error "each warp's piece must be whole 16 x 16 fragments, and BK a multiple of 16"
#endif
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define FM (WM / 16) /* 16 x 16 accumulator fragments per warp */
#define FN (WN / 16)
#define THREADS (32 * WARPS_M * WARPS_N)
/* 8 extra elements per shared row: the 8 rows a fragment load reads at once then start at 8
 * different 16-byte offsets modulo 128 bytes (no bank conflicts), and rows stay 16-byte aligned
 * for cp.async and 32-byte aligned every 16 rows for the fragment loads */
#define LDA (BK + 8)
#define LDB (BN + 8)
#define STAGE_A (BM * LDA)
#define STAGE_B (BK * LDB)
#define VEC 8 /* 16-bit elements per 16-byte copy */

#define WMMA_T ACCEL_CAT(WMMA_, IN_DT)
#define WMMA_F16 __half
#define WMMA_BF16 __nv_bfloat16

/* Stage the BK-deep slice at k0 of the block's A rows [m0, m0+BM) and B columns [n0, n0+BN). */
template <bool ALIGNED>
DEVICE void load_tiles(u16* As, u16* Bs, const u16* A, const u16* B, int M, int N, int K,
                       int m0, int n0, int k0, int tid) {
    if (ALIGNED) {
        /* whole 8-element chunks: K % 8 == 0 and N % 8 == 0 make every chunk all in or all out */
        for (int c = tid; c < BM * BK / VEC; c += THREADS) {
            int r = c / (BK / VEC), kk = c % (BK / VEC) * VEC, gm = m0 + r, gk = k0 + kk;
            bool in = gm < M && gk < K;
            cp_async16(As + r * LDA + kk, in ? A + (i64)gm * K + gk : A, in ? 16 : 0);
        }
        for (int c = tid; c < BK * BN / VEC; c += THREADS) {
            int r = c / (BN / VEC), nn = c % (BN / VEC) * VEC, gk = k0 + r, gn = n0 + nn;
            bool in = gk < K && gn < N;
            cp_async16(Bs + r * LDB + nn, in ? B + (i64)gk * N + gn : B, in ? 16 : 0);
        }
    } else {
        for (int e = tid; e < BM * BK; e += THREADS) {
            int r = e / BK, kk = e % BK, gm = m0 + r, gk = k0 + kk;
            As[r * LDA + kk] = (gm < M && gk < K) ? A[(i64)gm * K + gk] : (u16)0;
        }
        for (int e = tid; e < BK * BN; e += THREADS) {
            int r = e / BN, nn = e % BN, gk = k0 + r, gn = n0 + nn;
            Bs[r * LDB + nn] = (gk < K && gn < N) ? B[(i64)gk * N + gn] : (u16)0;
        }
    }
}

template <bool ALIGNED>
DEVICE void matmul_body(const u16* RESTRICT A, const u16* RESTRICT B, OUT_T* RESTRICT C,
                        const i32* RESTRICT boff, int M, int N, int K) {
    /* two stages of A and B tiles; after the K loop the same bytes hold each warp's 16 x 16
     * float32 scratch for the epilogue */
    __shared__ __align__(128) u16 smem[2 * (STAGE_A + STAGE_B)];
    u16* As = smem;
    u16* Bs = smem + 2 * STAGE_A;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int bi = blockIdx.z, n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    A += (i64)boff[2 * bi] * M * K;
    B += (i64)boff[2 * bi + 1] * K * N;
    C += (i64)bi * M * N;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
    UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int tiles = (K + BK - 1) / BK;
    load_tiles<ALIGNED>(As, Bs, A, B, M, N, K, m0, n0, 0, tid);
    if (ALIGNED) cp_async_commit();
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < tiles)  /* the other stage was released by the barrier ending iteration t-1 */
            load_tiles<ALIGNED>(As + (cur ^ 1) * STAGE_A, Bs + (cur ^ 1) * STAGE_B, A, B, M, N, K,
                                m0, n0, (t + 1) * BK, tid);
        if (ALIGNED) {
            cp_async_commit();  /* possibly empty: then "all but the newest group" is everything */
            cp_async_wait<1>();
        }
        __syncthreads();
        const WMMA_T* a_tile = (const WMMA_T*)(As + cur * STAGE_A) + wm * WM * LDA;
        const WMMA_T* b_tile = (const WMMA_T*)(Bs + cur * STAGE_B) + wn * WN;
        UNROLL for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, WMMA_T, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, WMMA_T, wmma::row_major> b[FN];
            UNROLL for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], a_tile + i * 16 * LDA + kk, LDA);
            UNROLL for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], b_tile + kk * LDB + j * 16, LDB);
            UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j)
                wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    if (ALIGNED) cp_async_wait<0>();  /* no copy may land in the scratch below (K == 0 issues one) */
    __syncthreads();

    /* Epilogue: each fragment goes through the warp's scratch so every lane can store a row
     * piece with bounds checks and the output dtype's rounding (STORE_OUT, accel.h). */
    float* scratch = (float*)smem + warp * 16 * 16;
    const int r = lane / 2, c0 = lane % 2 * 8;
    UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j) {
        wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        const int gm = m0 + wm * WM + i * 16 + r, gn = n0 + wn * WN + j * 16 + c0;
        if (gm < M) {
            OUT_T* crow = C + (i64)gm * N;
            UNROLL for (int c = 0; c < 8; ++c)
                if (gn + c < N) STORE_OUT(crow, gn + c, scratch[r * 16 + c0 + c]);
        }
        __syncwarp();  /* the scratch is rewritten by the next fragment */
    }
}

KERNEL void __launch_bounds__(THREADS)
matmul_wmma(const IN_T* RESTRICT A, const IN_T* RESTRICT B, OUT_T* RESTRICT C,
            const i32* RESTRICT boff, int M, int N, int K) {
    matmul_body<false>(A, B, C, boff, M, N, K);
}

KERNEL void __launch_bounds__(THREADS)
matmul_wmma_vec(const IN_T* RESTRICT A, const IN_T* RESTRICT B, OUT_T* RESTRICT C,
                const i32* RESTRICT boff, int M, int N, int K) {
    matmul_body<true>(A, B, C, boff, M, N, K);
}
#else
#error "matmul_wmma.cu needs sm_80 or later (bfloat16 WMMA, cp.async)"
#endif
