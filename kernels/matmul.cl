/* C[b] = A[ia[b]] @ B[ib[b]] for row-major A [M, K], B [K, N], C [M, N]; any M, N, K.
 *
 * Defines: IN_DT (F32, F16, BF16 or I8), OUT_DT (F32, F16, BF16 or I32), ACC_INT (1 for exact
 * int8 GEMM in int32), TM x TN outputs per work-item (register block), and LOCAL_TILE: 0 reads
 * A and B straight from global memory (CPU devices, where caches do the tiling), 1 stages TK-deep
 * tiles of a WG_M*TM x WG_N*TN block through local memory (GPUs).
 * Grid: LOCAL_TILE 1: dim 0 over column blocks, dim 1 over row blocks; LOCAL_TILE 0: dim 0 over
 * row blocks, dim 1 over column blocks (see below); dim 2 over the batch. boff holds, per
 * output batch entry, the index of its A matrix and of its B matrix (broadcasting).
 */
#if ACC_INT
typedef i32 acc_t;
typedef vi_t vacc_t;
#define MAC(a, b, c) ((a) * (b) + (c))
#else
typedef float acc_t;
typedef vf_t vacc_t;
#define MAC(a, b, c) FMA((a), (b), (c))
#endif
#define TNV (TN / VW)

#if !LOCAL_TILE
/* One TM x TN block; `full` is a compile-time constant after inlining, so interior blocks get
 * contiguous vector loads and only edge blocks clamp their indices (clamped lanes compute values
 * that are never stored, which keeps the inner loop free of branches). */
DEVICE void mm_block(GLOBAL const IN_T* RESTRICT A, GLOBAL const IN_T* RESTRICT B,
                     GLOBAL OUT_T* RESTRICT C, int M, int N, int K, int m0, int n0, const int full) {
    vacc_t acc[TM][TNV];
    UNROLL for (int i = 0; i < TM; ++i) UNROLL for (int j = 0; j < TNV; ++j) acc[i][j] = (vacc_t)0;
    GLOBAL const IN_T* arow[TM];
    UNROLL for (int i = 0; i < TM; ++i) arow[i] = A + (i64)(full ? m0 + i : imin(m0 + i, M - 1)) * K;
    for (int k = 0; k < K; ++k) {
        vacc_t b[TNV];
        GLOBAL const IN_T* brow = B + (i64)k * N;
        if (full) {
            UNROLL for (int j = 0; j < TNV; ++j) b[j] = VLOAD_IN(brow, n0 + j * VW);
        } else {
            acc_t bs[TN];
            UNROLL for (int j = 0; j < TN; ++j) bs[j] = (acc_t)LOAD_IN(brow, imin(n0 + j, N - 1));
            UNROLL for (int j = 0; j < TNV; ++j) b[j] = VLOAD_ARR(bs, j * VW);
        }
        UNROLL for (int i = 0; i < TM; ++i) {
            vacc_t a = (vacc_t)((acc_t)LOAD_IN(arow[i], k));
            UNROLL for (int j = 0; j < TNV; ++j) acc[i][j] = MAC(a, b[j], acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < TM; ++i) {
        if (!full && m0 + i >= M) break;
        GLOBAL OUT_T* crow = C + (i64)(m0 + i) * N;
        UNROLL for (int j = 0; j < TN; ++j)
            if (full || n0 + j < N) STORE_OUT(crow, n0 + j, VGET(acc_t, acc[i][j / VW], j % VW));
    }
}

KERNEL void matmul(GLOBAL const IN_T* RESTRICT A, GLOBAL const IN_T* RESTRICT B,
                   GLOBAL OUT_T* RESTRICT C, GLOBAL const i32* RESTRICT boff,
                   int M, int N, int K) {
    int bi = GROUP_ID(2);
    /* rows vary fastest: consecutive work-groups share one K x TN panel of B, which then stays
     * in cache, while each TM-row strip of A is read once per panel */
    int m0 = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * TM;
    int n0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * TN;
    if (m0 >= M || n0 >= N) return;
    A += (i64)boff[2 * bi] * M * K;
    B += (i64)boff[2 * bi + 1] * K * N;
    C += (i64)bi * M * N;
    if (m0 + TM <= M && n0 + TN <= N) mm_block(A, B, C, M, N, K, m0, n0, 1);
    else mm_block(A, B, C, M, N, K, m0, n0, 0);
}

#else
#define BM (WG_M * TM)
#define BN (WG_N * TN)
/* Work-item (tx, ty) owns rows ty + i*WG_M and columns tx + j*WG_N of the block, so neighbouring
 * work-items read neighbouring local-memory words. Out-of-range tile entries are zero-filled. */
KERNEL void matmul(GLOBAL const IN_T* RESTRICT A, GLOBAL const IN_T* RESTRICT B,
                   GLOBAL OUT_T* RESTRICT C, GLOBAL const i32* RESTRICT boff,
                   int M, int N, int K) {
    LOCAL acc_t As[TK][BM];
    LOCAL acc_t Bs[TK][BN];
    int tx = LOCAL_ID(0), ty = LOCAL_ID(1), tid = ty * WG_N + tx;
    int bi = GROUP_ID(2);
    int n0 = GROUP_ID(0) * BN, m0 = GROUP_ID(1) * BM;
    A += (i64)boff[2 * bi] * M * K;
    B += (i64)boff[2 * bi + 1] * K * N;
    C += (i64)bi * M * N;
    acc_t acc[TM][TN];
    UNROLL for (int i = 0; i < TM; ++i) UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = 0;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = tid; e < TK * BM; e += WG_M * WG_N) {
            int r = e / TK, kk = e % TK, gm = m0 + r, gk = k0 + kk;
            As[kk][r] = (gm < M && gk < K) ? (acc_t)LOAD_IN(A, (i64)gm * K + gk) : (acc_t)0;
        }
        for (int e = tid; e < TK * BN; e += WG_M * WG_N) {
            int kk = e / BN, c = e % BN, gn = n0 + c, gk = k0 + kk;
            Bs[kk][c] = (gn < N && gk < K) ? (acc_t)LOAD_IN(B, (i64)gk * N + gn) : (acc_t)0;
        }
        BARRIER();
        for (int kk = 0; kk < TK; ++kk) {
            acc_t b[TN];
            UNROLL for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + j * WG_N];
            UNROLL for (int i = 0; i < TM; ++i) {
                acc_t a = As[kk][ty + i * WG_M];
                UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = MAC(a, b[j], acc[i][j]);
            }
        }
        BARRIER();
    }
    UNROLL for (int i = 0; i < TM; ++i) {
        int gm = m0 + ty + i * WG_M;
        UNROLL for (int j = 0; j < TN; ++j) {
            int gn = n0 + tx + j * WG_N;
            if (gm < M && gn < N) STORE_OUT(C, (i64)gm * N + gn, acc[i][j]);
        }
    }
}
#endif
