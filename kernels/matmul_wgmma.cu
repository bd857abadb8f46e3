/* C[b] = A[ia[b]] @ B[ib[b]] on Hopper tensor cores (wgmma.mma_async), for row-major float16 or
 * bfloat16 A [M, K] and B [K, N], float32 accumulation, C [M, N] stored as OUT_DT (F32, F16 or
 * BF16, round to nearest even). sm_90a only (wgmma exists on the arch-specific Hopper target
 * alone), built with accel.h in front like every shipped source.
 *
 * Host contract: K % 8 == 0, N % 8 == 0, A and B 16-byte aligned (every 8-element chunk of a row
 * is one 16-byte cp.async copy, whole inside the matrix or whole outside it); any M, N, K beyond
 * that, partial edge tiles included. Other shapes go to matmul_wmma.cu. Arguments and grid are
 * matmul_wmma.cu's: (A, B, C, boff, M, N, K); grid x over BN-column tiles, y over BM-row tiles,
 * z over the batch; boff holds, per output batch entry, the index of its A and of its B matrix.
 * Block: BM / 64 warpgroups (2 * BM threads). Dynamic shared memory: SMEM_BYTES below,
 * STAGES * (BM + BN) * BK * 2 + 1024 bytes (above 48 KiB, so the launch must raise the
 * function's max dynamic shared memory attribute first).
 *
 * Defines: IN_DT (F16 or BF16), OUT_DT (F32, F16 or BF16), BM (64 or 128: one warpgroup per 64
 * rows), BN (256: one m64n256k16 instruction spans the block's columns), BK (64:
 * one 128-byte swizzle row of 16-bit elements), STAGES (>= 3 shared-memory stages).
 *
 * Every thread both copies and multiplies: cp.async lands tiles STAGES - 1 ahead in shared
 * memory, laid out as wgmma's 128-byte-swizzled canonical layouts so no thread reads or reshapes
 * operands; each warpgroup's wgmma batch for one K-tile runs while the next batch is issued.
 */
/* hiprtc defines no __CUDA_ARCH__, so HIP is named explicitly (accel.h sets ACCEL_HIP) */
#if defined(ACCEL_HIP) || (defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL))
#error "matmul_wgmma.cu needs sm_90a (wgmma.mma_async exists only on the arch-specific Hopper target)"
#else

/* BM = 192 would give 384 threads at most 168 registers each: the 128 accumulators then spill */
#if BN != 256 || BK != 64 || (BM != 64 && BM != 128) || STAGES < 3
#error "matmul_wgmma.cu supports BN = 256, BK = 64, BM = 64 or 128, and STAGES >= 3"
#endif
#define CONSUMERS (BM / 64)
#define THREADS (128 * CONSUMERS)
/* Shared memory of one stage, all in 128-byte rows of 8 16-byte chunks, grouped in 1024-byte
 * swizzle atoms of 8 rows whose chunk c of row r sits at chunk c ^ (r % 8):
 *   A tile, K-major: row m (m < BM) holds A[m0 + m, k0 .. k0 + 63];
 *   B tile, N-major: BN / 64 column blocks of BK rows, row k of block j holding
 *   B[k0 + k, n0 + 64j .. n0 + 64j + 63]. */
#define ROW 128
#define A_BYTES (BM * ROW)
#define B_BLOCK (BK * ROW)
#define B_BYTES (BN / 64 * B_BLOCK)
#define STAGE_BYTES (A_BYTES + B_BYTES)
/* +1024: the dynamic shared memory base is rounded up to the swizzle period in the kernel */
#define SMEM_BYTES (STAGES * STAGE_BYTES + 1024)
static_assert(SMEM_BYTES <= 227 * 1024, "more shared memory than an sm_90 block may opt in to");
#define A_COPIES (BM * BK / 8) /* 16-byte copies per stage: 4 and 2048 / THREADS per thread */
#define B_COPIES (BK * BN / 8)

#define WGMMA_TYPE ACCEL_CAT(WGMMA_, IN_DT)
#define WGMMA_F16 "f16"
#define WGMMA_BF16 "bf16"

/* Stage the BK-deep slice at k0 of the block's A rows [m0, m0 + BM) and B columns [n0, n0 + BN)
 * into the stage at shared address s, zero-filling past M, N and K. */
DEVICE void load_stage(u32 s, const u16* A, const u16* B, int M, int N, int K, int m0, int n0,
                       int k0, int tid) {
    UNROLL for (int i = 0; i < A_COPIES / THREADS; ++i) {
        const int c = tid + i * THREADS, r = c / 8, ch = c % 8, gm = m0 + r, gk = k0 + 8 * ch;
        const bool in = gm < M && gk < K;
        cp_async16(s + r * ROW + ((ch ^ (r & 7)) << 4), in ? A + (i64)gm * K + gk : A, in ? 16 : 0);
    }
    s += A_BYTES;
    UNROLL for (int i = 0; i < B_COPIES / THREADS; ++i) {
        /* a warp copies 512 contiguous bytes of one B row: chunk ch of row r */
        const int c = tid + i * THREADS, r = c / (BN / 8), ch = c % (BN / 8);
        const int gk = k0 + r, gn = n0 + 8 * ch;
        const bool in = gk < K && gn < N;
        cp_async16(s + ch / 8 * B_BLOCK + r * ROW + (((ch % 8) ^ (r & 7)) << 4),
               in ? B + (i64)gk * N + gn : B, in ? 16 : 0);
    }
}

/* A wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start address,
 * leading and stride byte offsets, each >> 4 in 14 bits; base offset 0 (every swizzle atom
 * starts on a 1024-byte boundary); swizzle mode 1 = 128 bytes in bits 62-63. */
DEVICE u64 smem_desc(u32 addr, u32 leading, u32 stride) {
    return (u64)((addr & 0x3FFFF) >> 4) | (u64)(leading >> 4) << 16 | (u64)(stride >> 4) << 32 |
           1ull << 62;
}

/* Keeps the compiler from moving accumulator accesses across the asynchronous wgmma window:
 * an empty asm that "rewrites" every accumulator, ordered with the other volatile asm. */
DEVICE void pin(float (&d)[128]) {
    UNROLL for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* d += A (64 x 16, K-major) @ B (16 x 256, N-major: imm-trans-b = 1), both from shared memory;
 * scale-d = 1 (accumulate), no negation, A not transposed. */
DEVICE void wgmma_64x256x16(float (&d)[128], u64 da, u64 db) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." WGMMA_TYPE "." WGMMA_TYPE "\n"
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
        " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
        " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"
        " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"
        " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n"
        " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110,\n"
        " %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124,\n"
        " %125, %126, %127},\n"
        "%128, %129, 1, 1, 1, 0, 1;\n"
        : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40), WGMMA_ACC8(48), WGMMA_ACC8(56), WGMMA_ACC8(64),
          WGMMA_ACC8(72), WGMMA_ACC8(80), WGMMA_ACC8(88), WGMMA_ACC8(96), WGMMA_ACC8(104), WGMMA_ACC8(112), WGMMA_ACC8(120)
        : "l"(da), "l"(db)
        : "memory");
}

KERNEL void __launch_bounds__(THREADS, 1)
matmul_wgmma(const IN_T* RESTRICT A, const IN_T* RESTRICT B, OUT_T* RESTRICT C,
             const i32* RESTRICT boff, int M, int N, int K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* the hardware swizzles on shared-address bits 4-9, so stages must start at multiples of
     * 1024 in the shared window, whatever the base of the dynamic allocation */
    const u32 smem = ((u32)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
    const int bi = blockIdx.z, n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    A += (i64)boff[2 * bi] * M * K;
    B += (i64)boff[2 * bi + 1] * K * N;
    C += (i64)bi * M * N;

    /* this thread's piece of its warpgroup's 64 x 256 float32 accumulator (PTX ISA, wgmma
     * .m64nNk16 D fragment): d[4j + 2h + e] is row 16 * warp + lane / 4 + 8h, column
     * 8j + 2 * (lane % 4) + e of the warpgroup's tile */
    float d[128];
    UNROLL for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    pin(d);  /* the zeros are written before the first wgmma.fence */

    const int tiles = (K + BK - 1) / BK;
    /* one commit group per tile, empty past the last: group g always holds tile g */
    UNROLL for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) load_stage(smem + s * STAGE_BYTES, A, B, M, N, K, m0, n0, s * BK, tid);
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();  /* tile 0 */
    proxy_fence();
    __syncthreads();

    /* A operand of this warpgroup: rows 64 wg .. 64 wg + 63, 8-row groups 1024 bytes apart
     * (stride byte offset); leading byte offset unused for swizzled K-major, encoded as 1.
     * B operand: 8-row (k) groups 1024 bytes apart (stride), 64-column blocks B_BLOCK apart
     * (leading). One 16-deep k step moves A's start 32 bytes along its swizzled rows and
     * B's start 16 rows (2048 bytes) down its column blocks. */
    int stage = 0;
    for (int t = 0; t < tiles; ++t) {
        const u32 s = smem + stage * STAGE_BYTES;
        const u64 da = smem_desc(s + wg * 64 * ROW, 16, 8 * ROW);
        const u64 db = smem_desc(s + A_BYTES, B_BLOCK, 8 * ROW);
        wgmma_fence();
        UNROLL for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_64x256x16(d, da + (u64)(kk * 32 >> 4), db + (u64)(kk * 16 * ROW >> 4));
        wgmma_commit();
        /* this warpgroup's batch for tile t - 1 is done; tile t's keeps the tensor cores busy
         * while the barrier below waits for the other warpgroups' and for tile t + 1's copies */
        wgmma_wait<1>();
        cp_async_wait<STAGES - 3>();  /* this thread's copies of tile t + 1 */
        proxy_fence();
        __syncthreads();
        /* every warpgroup is past tile t - 1, so its stage takes tile t + STAGES - 1 */
        const int next = t + STAGES - 1;
        if (next < tiles)
            load_stage(smem + (stage == 0 ? STAGES - 1 : stage - 1) * STAGE_BYTES, A, B, M, N, K,
                       m0, n0, next * BK, tid);
        cp_async_commit();
        stage = stage == STAGES - 1 ? 0 : stage + 1;
    }
    wgmma_wait<0>();
    pin(d);  /* the epilogue reads the accumulators only after the last batch completed */

    const int row = m0 + wg * 64 + warp * 16 + lane / 4, col = n0 + 2 * (lane % 4);
    UNROLL for (int h = 0; h < 2; ++h) {
        const int gm = row + 8 * h;
        if (gm < M) {
            OUT_T* crow = C + (i64)gm * N;
            UNROLL for (int j = 0; j < BN / 8; ++j) {
                const int gn = col + 8 * j;
                if (gn < N) {  /* gn is even and N % 8 == 0, so gn + 1 < N too */
                    STORE_OUT(crow, gn, d[4 * j + 2 * h]);
                    STORE_OUT(crow, gn + 1, d[4 * j + 2 * h + 1]);
                }
            }
        }
    }
}
#endif
