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
            UNROLL for (int j = 0; j < TNV; ++j) b[j] = VGATHER(vacc_t, bs, j * VW);
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
#define NT (WG_M * WG_N)
/* Work-item (tx, ty) owns TM x TN outputs in chunks of CM rows x CN columns: rows
 * p*WG_M*CM + ty*CM + [0, CM) for p < TM/CM, columns likewise. A chunk is contiguous in the
 * local tiles, so the compiler reads it with one vector load (LDS.128 for 4 floats: 16 FMAs per
 * load at TM = TN = 8), and a warp's work-items read adjacent chunks (no bank conflicts). */
#define CHUNK(t) ((t) % 4 == 0 ? 4 : (t) % 2 == 0 ? 2 : 1)
#define CM CHUNK(TM)
#define CN CHUNK(TN)
#define OWN_ROW(i) (((i) / CM) * (WG_M * CM) + (i) % CM)
#define OWN_COL(j) (((j) / CN) * (WG_N * CN) + (j) % CN)
/* Each step, a work-item copies A_LD consecutive k of one row of the BM x TK slice of A and B_LD
 * consecutive columns of one row of the TK x BN slice of B: one base offset each (moved TK
 * columns of A, TK rows of B per step), so the loads need no per-element address arithmetic. */
#define A_LD (BM * TK / NT)
#define B_LD (BN * TK / NT)
#if (BM * TK) % NT || (BN * TK) % NT || TK % A_LD || BN % B_LD
#error "LOCAL_TILE 1 needs WG_M*WG_N to divide BM*TK and BN*TK into pieces that divide TK and BN"
#endif
/* As holds the A slice k-major (the work-items' row chunks contiguous); 4 words of padding per
 * k spread a warp's transposing stores over distinct banks (for A_LD = 4, TK = 8) while every
 * row stays 16-byte aligned for the vector reads. */
#define AS_LD (BM + 4)

/* Registers sa, sb <- one step's pieces: A at offset ao (k index ak), B at bo (row bk, column
 * bn). k past K and columns past N read as zeros; rows of A past M were clamped by the caller
 * (edge blocks run the same loop; their extra outputs are never stored). */
DEVICE void mm_fetch(GLOBAL const IN_T* RESTRICT A, GLOBAL const IN_T* RESTRICT B, i64 ao, i64 bo,
                     int ak, int bk, int bn, int N, int K, acc_t* sa, acc_t* sb) {
    UNROLL for (int l = 0; l < A_LD; ++l) sa[l] = ak + l < K ? (acc_t)LOAD_IN(A, ao + l) : (acc_t)0;
    UNROLL for (int l = 0; l < B_LD; ++l)
        sb[l] = bk < K && bn + l < N ? (acc_t)LOAD_IN(B, bo + l) : (acc_t)0;
}

/* Two local buffers: step s's slices are stored while the others still read step s-1's, so one
 * barrier per step suffices; the next step's global loads are issued before this step's FMAs
 * and land in registers while they run. */
/* two groups per multiprocessor: one group's loads overlap the other's FMAs */
KERNEL LAUNCH_BOUNDS(WG_N, WG_M, 2) void matmul(GLOBAL const IN_T* RESTRICT A,
                                                 GLOBAL const IN_T* RESTRICT B,
                                                 GLOBAL OUT_T* RESTRICT C, GLOBAL const i32* RESTRICT boff,
                                                 int M, int N, int K) {
    LOCAL acc_t As[2][TK][AS_LD];
    LOCAL acc_t Bs[2][TK][BN];
    int tx = LOCAL_ID(0), ty = LOCAL_ID(1), tid = ty * WG_N + tx;
    int bi = GROUP_ID(2);
    int n0 = GROUP_ID(0) * BN, m0 = GROUP_ID(1) * BM;
    A += (i64)boff[2 * bi] * M * K;
    B += (i64)boff[2 * bi + 1] * K * N;
    C += (i64)bi * M * N;
    int ar = tid / (TK / A_LD), ac = tid % (TK / A_LD) * A_LD;
    int br = tid / (BN / B_LD), bc = tid % (BN / B_LD) * B_LD;
    i64 ao = (i64)imin(m0 + ar, M - 1) * K + ac, bo = (i64)br * N + n0 + bc;
    int r0 = ty * CM, c0 = tx * CN;
    acc_t acc[TM][TN], sa[A_LD], sb[B_LD];
    UNROLL for (int i = 0; i < TM; ++i) UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = 0;
    mm_fetch(A, B, ao, bo, ac, br, n0 + bc, N, K, sa, sb);
    for (int k0 = 0, s = 0; k0 < K; k0 += TK, s ^= 1) {
        UNROLL for (int l = 0; l < A_LD; ++l) As[s][ac + l][ar] = sa[l];
        UNROLL for (int l = 0; l < B_LD; ++l) Bs[s][br][bc + l] = sb[l];
        BARRIER();
        ao += TK;
        bo += (i64)TK * N;
        /* unconditional (past K it loads nothing): behind a branch, NVRTC sank the loads below
         * the FMAs, leaving their latency exposed */
        mm_fetch(A, B, ao, bo, k0 + TK + ac, k0 + TK + br, n0 + bc, N, K, sa, sb);
        UNROLL for (int kk = 0; kk < TK; ++kk) {
            acc_t a[TM], b[TN];
            UNROLL for (int i = 0; i < TM; ++i) a[i] = As[s][kk][r0 + OWN_ROW(i)];
            UNROLL for (int j = 0; j < TN; ++j) b[j] = Bs[s][kk][c0 + OWN_COL(j)];
            UNROLL for (int i = 0; i < TM; ++i)
                UNROLL for (int j = 0; j < TN; ++j) acc[i][j] = MAC(a[i], b[j], acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < TM; ++i) {
        int gm = m0 + r0 + OWN_ROW(i);
        UNROLL for (int j = 0; j < TN; ++j) {
            int gn = n0 + c0 + OWN_COL(j);
            if (gm < M && gn < N) STORE_OUT(C, (i64)gm * N + gn, acc[i][j]);
        }
    }
}
#endif
