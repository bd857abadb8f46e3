/* FP8 scaled matmul on NVIDIA tensor cores (mma.sync m16n8k32 with .e4m3 / .e5m2 operands,
 * sm_89 and later; wgmma on sm_90a, below): C = (A * scale_a) @ (B * scale_b) + bias for row-major FP8
 * A [M, K] and B [K, N], the semantics of kernels/scaled_matmul.cl (docs/api.md), built with
 * accel.h in front like every shipped source. The OCP formats only: AMD's e4m3fnuz has no NVIDIA
 * tensor-core type, and keeps scaled_matmul.cl.
 *
 * Arguments and grid follow scaled_matmul.cl's, so the backend passes both the same arguments:
 * (A, B, SA, SB, bias, C, M, N, K, scaling, out_dt, bias_dt), scaling 0 tensor / 1 row / 2 block,
 * dtype codes 0 float32 / 1 float16 / 2 bfloat16, bias_dt -1 for none. Grid: x over BN-column
 * tiles, y over BM-row tiles; block: 256 threads; dynamic shared memory SMEM_BYTES (above 48 KiB:
 * the launch raises the function's limit first).
 *
 * Defines: A_FP8, B_FP8 (e4m3fn or e5m2), BM, BN, BK (128 each); WGMMA and STAGES build the
 * sm_90a kernel scaled_matmul_wgmma instead (its comment below). Without WGMMA, two kernels from
 * one body:
 *   scaled_matmul_mma       any M, N, K and alignment: tile bytes are loaded one by one, guarded;
 *   scaled_matmul_mma_vec   K % 16 == 0, N % 16 == 0, A and B 16-byte aligned (the host checks):
 *                           16-byte cp.async copies, each wholly inside or outside the matrix,
 *                           zero-filled outside, the next tile's copies overlapping this tile's
 *                           multiplies (two stages: double buffering).
 * Past M, N and K the shared tiles hold zeros, so edge tiles and any K multiply whole 16 x 8 x 32
 * blocks and the padding adds exact zeros.
 *
 * Numerics. The tensor cores multiply the FP8 values exactly, but DeepSeek-V3 (section 3.3.2)
 * measured FP8 MMA accumulation on Hopper keeping only about 14 bits; so, as DeepGEMM does, each
 * 128-deep K tile is summed on the tensor cores (4 chained mma) from zero and then added into
 * float32 totals with CUDA-core adds: block scaling applies its scales right there,
 * tot += (acc * sa) * sb (a's 1 x 128 block of the row, b's 128 x 128 block: BN = 128 keeps one
 * b block per tile), tensor and row scaling add acc and multiply ((tot * sa) * sb) at the end, as
 * scaled_matmul.cl does; then the bias, then one rounding to out_dt. The backend declares this
 * path's accumulator at tf32 precision (backends/plan.py accumulator).
 *
 * Fragments (PTX ISA "Matrix Fragments for mma.m16n8k32", 8-bit types), g = lane / 4,
 * t = lane % 4, four bytes per 32-bit register, the lowest k in the low byte:
 *   A (16 x 32, row)  a0 = (row g, k 4t..4t+3)     a1 = (row g+8, k 4t..4t+3)
 *                     a2 = (row g, k 16+4t..19+4t) a3 = (row g+8, k 16+4t..19+4t)
 *   B (32 x 8, col)   b0 = (k 4t..4t+3, col g)     b1 = (k 16+4t..19+4t, col g)
 *   C (16 x 8, f32)   c0, c1 = (row g, cols 2t, 2t+1)   c2, c3 = (row g+8, cols 2t, 2t+1)
 * (Only the rows and columns must be right: A's and B's k slots pair up inside the instruction,
 * so any k order the two share gives the same sum.) ldmatrix .b16 (no .trans) hands lane (g, t)
 * the 16-bit elements 2t, 2t+1 of row g of each 8 x 8 matrix, i.e. bytes 4t..4t+3 of a 16-byte
 * row: exactly an A register when the rows are rows of A, and a B register when the rows are
 * columns of B with their k bytes contiguous. B arrives as [K, N] (N contiguous), so each tile
 * of B is transposed once in shared memory, 4 x 4 bytes per step with byte permutes (prmt),
 * into Bt [BN][BK]. Transposing in the fragment loads instead would redo it in each of the
 * WARPS_M warps that read a column, and ldmatrix's .trans moves 16-bit elements, not bytes.
 *
 * Shared memory, rows of 128 bytes (8 16-byte chunks), swizzled so that the 8 rows an ldmatrix
 * phase reads, the cp.async chunks and the transpose's 32-bit reads and writes meet every bank
 * once: As [BM][BK] and Bt [BN][BK] chunk c of row r at c ^ (r % 8) (wgmma's 128-byte swizzle);
 * Bs [BK][BN] (B as it arrives) chunk c of row k at c ^ (2 * (k / 4 % 4)).
 */
#if defined(ACCEL_HIP) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890)
#error "scaled_matmul_mma.cu needs sm_89 or later (mma.sync with FP8 operands)"
#elif defined(WGMMA) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "scaled_matmul_wgmma needs sm_90a (wgmma.mma_async exists only on the arch-specific Hopper target)"
#else

/* BK = the FP8 scale block (accel.spec.FP8_BLOCK): one block-scale step per K tile; BN = 128
 * likewise gives a block tile one column block of b's scales */
#if BM != 128 || BN != 128 || BK != 128
#error "scaled_matmul_mma.cu supports BM = BN = BK = 128 (accel.kernels.GPU_SCALED_MATMUL_MMA)"
#endif
#define WARPS_M 2
#define WARPS_N 4
#define THREADS (32 * WARPS_M * WARPS_N)
#define WM (BM / WARPS_M) /* 64 rows per warp: 4 m16 tiles */
#define WN (BN / WARPS_N) /* 32 columns per warp: 4 n8 tiles */
#define FM (WM / 16)
#define FN (WN / 8)
#define ROW 128
#define A_BYTES (BM * ROW)
#define BS_BYTES (BK * ROW)
#define STAGE_BYTES (A_BYTES + BS_BYTES)
#define BT_BYTES (BN * ROW)
#define SMEM_BYTES (2 * STAGE_BYTES + BT_BYTES) /* 81920: fits sm_89's 99 KiB per block */
/* the epilogue's float tile: rows 8 floats apart, so a half-warp's float2 stores (4 rows of 8
 * columns) meet each bank once */
#define OUT_LD (BN + 8)
static_assert(BM * OUT_LD * 4 <= SMEM_BYTES, "the epilogue's tile must fit the shared memory");
#define SCALE_TENSOR 0
#define SCALE_ROW 1
#define SCALE_BLOCK 2

#define MMA_e4m3fn "e4m3"
#define MMA_e5m2 "e5m2"
#define MMA_A ACCEL_CAT(MMA_, A_FP8)
#define MMA_B ACCEL_CAT(MMA_, B_FP8)

/* As and Bt: wgmma's canonical K-major layout with the 128-byte swizzle, which ldmatrix reads
 * conflict-free too */
DEVICE u32 swz_a(int m, int c) { return m * ROW + ((c ^ (m & 7)) << 4); }
DEVICE u32 swz_bs(int k, int c) { return k * ROW + ((c ^ ((k >> 1) & 6)) << 4); }

/* D += A B for one 16 x 8 x 32 block, float32 accumulators */
DEVICE void mma16832(float* d, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." MMA_A "." MMA_B ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

DEVICE u32 lds32(u32 addr) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
DEVICE void sts32(u32 addr, u32 v) { asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory"); }
DEVICE void sts128(u32 addr, u32 x, u32 y, u32 z, u32 w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x), "r"(y), "r"(z),
                 "r"(w) : "memory");
}

/* The 16 bytes at p[0..15] with zeros from byte `valid` on (the any-shape loader). */
DEVICE void bytes16(const u8* p, int valid, u32* w) {
    UNROLL for (int i = 0; i < 4; ++i) {
        u32 v = 0;
        UNROLL for (int j = 0; j < 4; ++j)
            if (4 * i + j < valid) v |= (u32)p[4 * i + j] << (8 * j);
        w[i] = v;
    }
}

/* One 16-byte chunk of a tile row into shared address dst: the `valid` bytes from src, then
 * zeros */
template <bool VEC>
DEVICE void copy_chunk(u32 dst, const u8* src, const u8* base, int valid) {
    if (VEC) {  /* valid is 16 or <= 0 (K and N are multiples of 16); nothing is read for 0 */
        cp_async16(dst, valid > 0 ? src : base, valid > 0 ? 16 : 0);
    } else {
        u32 w[4] = {0, 0, 0, 0};
        if (valid > 0) bytes16(src, valid, w);
        sts128(dst, w[0], w[1], w[2], w[3]);
    }
}

constexpr int A_COPIES = BM * 8 / THREADS, B_COPIES = BK * 8 / THREADS; /* per thread, stage */

/* Stage the BK-deep slice at k0 of the block's A rows [m0, m0 + BM) and B columns [n0, n0 + BN)
 * at shared address s, zeros past M, N and K; 8 consecutive threads copy one 128-byte row piece. */
template <bool VEC>
DEVICE void load_stage(u32 s, const u8* A, const u8* B, int M, int N, int K, int m0, int n0, int k0,
                       int tid) {
    /* the any-shape loader stays a loop: unrolled, its byte loads cost ~30 registers and spill */
#pragma unroll(VEC ? A_COPIES : 1)
    for (int i = 0; i < A_COPIES; ++i) {
        const int c = tid + i * THREADS, r = c / 8, ch = c % 8, gm = m0 + r, gk = k0 + 16 * ch;
        copy_chunk<VEC>(s + swz_a(r, ch), A + (i64)gm * K + gk, A, gm < M ? imin(K - gk, 16) : 0);
    }
    s += A_BYTES;
#pragma unroll(VEC ? B_COPIES : 1)
    for (int i = 0; i < B_COPIES; ++i) {
        const int c = tid + i * THREADS, r = c / 8, ch = c % 8, gk = k0 + r, gn = n0 + 16 * ch;
        copy_chunk<VEC>(s + swz_bs(r, ch), B + (i64)gk * N + gn, B, gk < K ? imin(N - gn, 16) : 0);
    }
}

/* Bs (k rows of n bytes) -> Bt (n rows of k bytes). Each step moves a 4 x 4 byte block: rows
 * 4kb..4kb+3, bytes 4nb..4nb+3 of Bs become rows 4nb..4nb+3, bytes 4kb..4kb+3 of Bt. A warp's
 * 32 lanes take 8 nb by 4 kb; the Bs swizzle makes the reads conflict-free, and each lane
 * writing its 4 rows in a rotated order (starting at row (lane % 8) / 2) gives the 8 lanes of a
 * kb 8 different rows modulo 8, so the writes are too. */
DEVICE void transpose_b(u32 bs, u32 bt, int tid) {
    const int lane = tid % 32, rot = lane % 8 / 2;
    /* rolled: unrolled, the four steps' temporaries pushed the mma.sync kernel into spills */
#pragma unroll 1
    for (int i = 0; i < (BK / 4) * (BN / 4) / THREADS; ++i) {
        const int wq = tid / 32 + i * (THREADS / 32);
        const int nb = (wq % 4) * 8 + lane % 8, kb = (wq / 4) * 4 + lane / 8;
        u32 w[4];
        UNROLL for (int r = 0; r < 4; ++r)
            w[r] = lds32(bs + swz_bs(4 * kb + r, nb >> 2) + (nb & 3) * 4);
        /* __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of y:x (x low);
         * x0 = bytes 0, 1 of rows 0, 1 interleaved, x1 = bytes 2, 3; y0, y1 the same of rows
         * 2, 3; column c of the block is then (x0, y0) or (x1, y1) low or high halves */
        const u32 x0 = __byte_perm(w[0], w[1], 0x5140), x1 = __byte_perm(w[0], w[1], 0x7362);
        const u32 y0 = __byte_perm(w[2], w[3], 0x5140), y1 = __byte_perm(w[2], w[3], 0x7362);
        UNROLL for (int c = 0; c < 4; ++c) {
            const int cc = (c + rot) & 3;
            const u32 v = __byte_perm(cc < 2 ? x0 : x1, cc < 2 ? y0 : y1, cc & 1 ? 0x7632 : 0x5410);
            sts32(bt + swz_a(4 * nb + cc, kb >> 2) + (kb & 3) * 4, v);
        }
    }
}

/* Element i of an output or bias of dtype code dt (0 float32, 1 float16, 2 bfloat16). */
DEVICE void smm_store(u8* RESTRICT C, i64 i, int dt, float v) {
    if (dt == 0) ((float*)C)[i] = v;
    else if (dt == 1) STORE_F16((u16*)C, i, v);
    else STORE_BF16((u16*)C, i, v);
}
DEVICE float smm_load(const u8* RESTRICT p, int i, int dt) {
    return dt == 0 ? ((const float*)p)[i] : dt == 1 ? LOAD_F16((const u16*)p, i) : LOAD_BF16((const u16*)p, i);
}

/* The rolled epilogue of both kernels over the block's float totals at out_tile (rows OUT_LD
 * apart): the scales (tensor, row), the bias and one rounding to out_dt, each warp storing whole
 * row pieces. The totals go through shared memory so that this runs once per output in a loop
 * that is not unrolled: unrolled over a thread's 64 outputs with three dtypes each, ptxas took
 * over a minute per build. */
DEVICE void store_tile(const float* out_tile, const float* RESTRICT SA, const float* RESTRICT SB,
                       const u8* RESTRICT bias, u8* RESTRICT C, int M, int N, int scaling,
                       int out_dt, int bias_dt, int m0, int n0, int tid) {
#pragma unroll 1
    for (int q = tid; q < BM * BN; q += THREADS) {
        const int r = q / BN, c = q % BN, gm = m0 + r, gn = n0 + c;
        if (gm >= M || gn >= N) continue;
        float v = out_tile[r * OUT_LD + c];
        if (scaling == SCALE_TENSOR) v = FMUL_RN(FMUL_RN(v, SA[0]), SB[0]);
        else if (scaling == SCALE_ROW) v = FMUL_RN(FMUL_RN(v, SA[gm]), SB[gn]);
        if (bias_dt >= 0) v = FADD_RN(v, smm_load(bias, gn, bias_dt));
        smm_store(C, (i64)gm * N + gn, out_dt, v);
    }
}

#if !defined(WGMMA)
template <bool VEC>
DEVICE void smm_body(const u8* RESTRICT A, const u8* RESTRICT B, const float* RESTRICT SA,
                     const float* RESTRICT SB, const u8* RESTRICT bias, u8* RESTRICT C, int M,
                     int N, int K, int scaling, int out_dt, int bias_dt) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 smem = (u32)__cvta_generic_to_shared(smem_raw);
    const u32 bt = smem + 2 * STAGE_BYTES;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;

    float acc[FM][FN][4], tot[FM][FN][4];
    UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j)
        UNROLL for (int e = 0; e < 4; ++e) tot[i][j][e] = 0.0f;

    const int tiles = (K + BK - 1) / BK;
    if (tiles > 0) load_stage<VEC>(smem, A, B, M, N, K, m0, n0, 0, tid);
    if (VEC) cp_async_commit();
    for (int kt = 0; kt < tiles; ++kt) {
        const u32 s = smem + (kt & 1) * STAGE_BYTES;
        if (VEC) cp_async_wait<0>();
        /* tile kt has landed everywhere, and every warp is past tile kt - 1's multiplies: Bt and
         * the other stage are free */
        __syncthreads();
        transpose_b(s + A_BYTES, bt, tid);
        if (kt + 1 < tiles)
            load_stage<VEC>(smem + ((kt + 1) & 1) * STAGE_BYTES, A, B, M, N, K, m0, n0, (kt + 1) * BK, tid);
        if (VEC) cp_async_commit();
        __syncthreads();  /* Bt holds tile kt */

        UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j)
            UNROLL for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll 1
        for (int kk = 0; kk < BK / 32; ++kk) {
            u32 a[FM][4], b[FN][2];
            UNROLL for (int i = 0; i < FM; ++i) {  /* matrices: rows +0 / +8, k chunk 2kk / 2kk+1 */
                const int r = wm * WM + i * 16 + lane % 8 + 8 * (lane / 8 % 2);
                ldsm_x4(a[i], s + swz_a(r, 2 * kk + lane / 16));
            }
            UNROLL for (int p = 0; p < FN / 2; ++p) {  /* n-tiles 2p, 2p+1; k chunk 2kk / 2kk+1 */
                const int n = wn * WN + p * 16 + lane % 8 + 8 * (lane / 16);
                u32 r[4];
                ldsm_x4(r, bt + swz_a(n, 2 * kk + lane / 8 % 2));
                b[2 * p][0] = r[0];
                b[2 * p][1] = r[1];
                b[2 * p + 1][0] = r[2];
                b[2 * p + 1][1] = r[3];
            }
            UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j)
                mma16832(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        /* promote this 128-deep tile into the float32 totals on the CUDA cores */
        if (scaling == SCALE_BLOCK) {
            const float sb = SB[(i64)kt * ((N - 1) / BN + 1) + blockIdx.x];
            UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int h = 0; h < 2; ++h) {
                const int gm = imin(m0 + wm * WM + i * 16 + g + 8 * h, M - 1);
                const float sa = SA[(i64)gm * (K / BK) + kt];
                UNROLL for (int j = 0; j < FN; ++j) UNROLL for (int e = 0; e < 2; ++e)
                    tot[i][j][2 * h + e] = FADD_RN(tot[i][j][2 * h + e],
                                                   FMUL_RN(FMUL_RN(acc[i][j][2 * h + e], sa), sb));
            }
        } else {
            UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int j = 0; j < FN; ++j)
                UNROLL for (int e = 0; e < 4; ++e) tot[i][j][e] = FADD_RN(tot[i][j][e], acc[i][j][e]);
        }
    }

    /* the totals into shared memory for store_tile; c0..c3 = (row g, g + 8) x (cols 2t, 2t + 1) */
    if (VEC) cp_async_wait<0>();  /* K == 0 committed an empty group; nothing may land later */
    __syncthreads();  /* every warp is past its last reads of the stages and Bt */
    float* out_tile = (float*)smem_raw;
    UNROLL for (int i = 0; i < FM; ++i) UNROLL for (int h = 0; h < 2; ++h)
        UNROLL for (int j = 0; j < FN; ++j) {
            const int r = wm * WM + i * 16 + g + 8 * h, c = wn * WN + j * 8 + 2 * t4;
            *(float2*)(out_tile + r * OUT_LD + c) = make_float2(tot[i][j][2 * h], tot[i][j][2 * h + 1]);
        }
    __syncthreads();
    store_tile(out_tile, SA, SB, bias, C, M, N, scaling, out_dt, bias_dt, m0, n0, tid);
}

KERNEL void __launch_bounds__(THREADS, 1)
scaled_matmul_mma(const u8* RESTRICT A, const u8* RESTRICT B, const float* RESTRICT SA,
                  const float* RESTRICT SB, const u8* RESTRICT bias, u8* RESTRICT C, int M, int N,
                  int K, int scaling, int out_dt, int bias_dt) {
    smm_body<false>(A, B, SA, SB, bias, C, M, N, K, scaling, out_dt, bias_dt);
}

KERNEL void __launch_bounds__(THREADS, 1)
scaled_matmul_mma_vec(const u8* RESTRICT A, const u8* RESTRICT B, const float* RESTRICT SA,
                      const float* RESTRICT SB, const u8* RESTRICT bias, u8* RESTRICT C, int M,
                      int N, int K, int scaling, int out_dt, int bias_dt) {
    smm_body<true>(A, B, SA, SB, bias, C, M, N, K, scaling, out_dt, bias_dt);
}
#else /* WGMMA: the sm_90a kernel */
/* scaled_matmul_wgmma: the same block tile on Hopper's asynchronous warpgroup MMA
 * (wgmma.mma_async m64n128k32 with .e4m3 / .e5m2 operands, sm_90a only), K % 16 == 0,
 * N % 16 == 0, A and B 16-byte aligned (its loads are the cp.async copies above). Two warpgroups
 * of 64 rows; STAGES cp.async stages of A and Bs, and two of Bt, all in the swizzled layouts
 * above (wgmma's K-major canonical layout with the 128-byte swizzle: FP8 wgmma reads both
 * operands K-major only, hence the transpose of B). In each K tile the warpgroups issue their 4
 * wgmma on tile kt, then, while the tensor cores run, copy tile kt + STAGES - 1 and transpose
 * tile kt + 1 into the other Bt; then wait, and promote the tile's sums into the float32 totals
 * as the mma.sync kernel does. Dynamic shared memory: SMEM_BYTES + 1024 (aligned to 1024 in the
 * kernel). */
#if STAGES < 3
#error "scaled_matmul_wgmma needs STAGES >= 3"
#endif
#undef SMEM_BYTES
#define SMEM_BYTES (STAGES * STAGE_BYTES + 2 * BT_BYTES)
static_assert(SMEM_BYTES + 1024 <= 227 * 1024, "more shared memory than an sm_90 block may opt in to");

/* a shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): K-major, 128-byte
 * swizzle (mode 1, bits 62-63), 8-row groups 1024 bytes apart (stride byte offset), leading byte
 * offset unused (1), base offset 0 (atoms start at multiples of 1024) */
DEVICE u64 smem_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | (u64)1 << 16 | (u64)(1024 >> 4) << 32 | 1ull << 62;
}
/* keeps the compiler from moving accumulator accesses across the asynchronous window */
DEVICE void pin(float (&d)[64]) {
    UNROLL for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/* d = A (64 x 32) @ B (32 x 128) + (accumulate ? d : 0), both K-major in shared memory */
DEVICE void wgmma_64x128x32(float (&d)[64], u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32." MMA_A "." MMA_B "\n"
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, \n"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, \n"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, \n"
        " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
        "%64, %65, p, 1, 1;\n}\n"
        : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40), WGMMA_ACC8(48), WGMMA_ACC8(56)
        : "l"(da), "l"(db), "r"(accumulate)
        : "memory");
}

KERNEL void __launch_bounds__(THREADS, 1)
scaled_matmul_wgmma(const u8* RESTRICT A, const u8* RESTRICT B, const float* RESTRICT SA,
                    const float* RESTRICT SB, const u8* RESTRICT bias, u8* RESTRICT C, int M,
                    int N, int K, int scaling, int out_dt, int bias_dt) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* the swizzle repeats every 1024 bytes of the shared window: align the stages to it */
    const u32 raw = (u32)__cvta_generic_to_shared(smem_raw), smem = (raw + 1023u) & ~1023u;
    const u32 bt0 = smem + STAGES * STAGE_BYTES;
    const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;

    /* this thread's piece of its warpgroup's 64 x 128 tile (PTX ISA, wgmma D fragment):
     * d[4j + 2h + e] is row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + e */
    float d[64], tot[64];
    UNROLL for (int i = 0; i < 64; ++i) d[i] = tot[i] = 0.0f;
    pin(d);

    const int tiles = (K + BK - 1) / BK;
    /* one commit group per tile, empty past the last: group g holds tile g */
    UNROLL for (int st = 0; st < STAGES - 1; ++st) {
        if (st < tiles) load_stage<true>(smem + st * STAGE_BYTES, A, B, M, N, K, m0, n0, st * BK, tid);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();  /* tile 0 */
    proxy_fence();
    __syncthreads();
    if (tiles > 0) transpose_b(smem + A_BYTES, bt0, tid);
    proxy_fence();
    __syncthreads();

    for (int kt = 0; kt < tiles; ++kt) {
        const u32 s = smem + kt % STAGES * STAGE_BYTES, bt = bt0 + (kt & 1) * BT_BYTES;
        const u64 da = smem_desc(s + wg * 64 * ROW), db = smem_desc(bt);
        wgmma_fence();
        UNROLL for (int kk = 0; kk < BK / 32; ++kk)  /* 32 bytes of K further along the rows */
            wgmma_64x128x32(d, da + (u64)(kk * 32 >> 4), db + (u64)(kk * 32 >> 4), kk > 0);
        wgmma_commit();
        /* while the tensor cores run: tile kt + STAGES - 1 into the stage of tile kt - 1 (every
         * warpgroup's wgmma on it completed before the last barrier), and tile kt + 1's B
         * transposed into the Bt that tile kt - 1 used */
        const int next = kt + STAGES - 1;
        if (next < tiles)
            load_stage<true>(smem + next % STAGES * STAGE_BYTES, A, B, M, N, K, m0, n0, next * BK, tid);
        cp_async_commit();
        cp_async_wait<STAGES - 2>();  /* this thread's copies of tile kt + 1 */
        proxy_fence();
        __syncthreads();
        if (kt + 1 < tiles)
            transpose_b(smem + (kt + 1) % STAGES * STAGE_BYTES + A_BYTES, bt0 + ((kt + 1) & 1) * BT_BYTES, tid);
        proxy_fence();
        wgmma_wait<0>();
        pin(d);  /* the sums are read only after the tile's wgmma completed */
        if (scaling == SCALE_BLOCK) {
            const float sb = SB[(i64)kt * ((N - 1) / BN + 1) + blockIdx.x];
            UNROLL for (int h = 0; h < 2; ++h) {
                const int gm = imin(m0 + wg * 64 + warp * 16 + lane / 4 + 8 * h, M - 1);
                const float sa = SA[(i64)gm * (K / BK) + kt];
                UNROLL for (int j = 0; j < BN / 8; ++j) UNROLL for (int e = 0; e < 2; ++e)
                    tot[4 * j + 2 * h + e] = FADD_RN(tot[4 * j + 2 * h + e],
                                                     FMUL_RN(FMUL_RN(d[4 * j + 2 * h + e], sa), sb));
            }
        } else {
            UNROLL for (int i = 0; i < 64; ++i) tot[i] = FADD_RN(tot[i], d[i]);
        }
        __syncthreads();  /* Bt of tile kt + 1 is whole; every warpgroup is done with tile kt */
    }

    cp_async_wait<0>();  /* nothing may land in the epilogue's tile (the empty groups included) */
    __syncthreads();
    float* out_tile = (float*)(smem_raw + (smem - raw));
    UNROLL for (int h = 0; h < 2; ++h) UNROLL for (int j = 0; j < BN / 8; ++j) {
        const int r = wg * 64 + warp * 16 + lane / 4 + 8 * h, c = 8 * j + 2 * (lane % 4);
        *(float2*)(out_tile + r * OUT_LD + c) = make_float2(tot[4 * j + 2 * h], tot[4 * j + 2 * h + 1]);
    }
    __syncthreads();
    store_tile(out_tile, SA, SB, bias, C, M, N, scaling, out_dt, bias_dt, m0, n0, tid);
}
#endif
#endif
