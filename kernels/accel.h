/* accel portability header: one kernel source compiles as OpenCL C 1.2, CUDA C++ (NVRTC/nvcc)
 * and HIP C++ (hiprtc/hipcc). Kernels use only the names defined here for anything that differs
 * between the three dialects; variants come from -D defines (dtypes, tile sizes), never copies.
 *
 * Dtype tokens for the *_DT defines: F32, F16, BF16, I8, I32, U8 (e.g. -DIN_DT=BF16).
 * float16 and bfloat16 live in memory as 16-bit patterns and are computed in float32.
 */
#ifndef ACCEL_H
#define ACCEL_H

#define ACCEL_CAT_(a, b) a##b
#define ACCEL_CAT(a, b) ACCEL_CAT_(a, b)

#if defined(__OPENCL_VERSION__)
/* ---------------------------------------------------------------- OpenCL C 1.2 */
#define ACCEL_OPENCL 1
/* Contraction changes bits; kernels ask for FMA explicitly (FMA below) where they want it. */
#pragma OPENCL FP_CONTRACT OFF
#define KERNEL __kernel
#define GLOBAL __global
#define LOCAL __local
#define LOCAL_PTR __local /* qualifies a pointer parameter into local memory */
#define RESTRICT restrict
/* always inlined, as CUDA's __forceinline__: PoCL 3.0 kept matmul's mm_block a call for some
 * dtypes, so its compile-time `full` branches stayed in the inner loop */
#define DEVICE static inline __attribute__((always_inline))
#define DEVICE_NOINLINE static __attribute__((noinline))
#define LOCAL_ID(d) ((int)get_local_id(d))
/* counted from the launch's global offset: a plan may split a long launch into pieces */
#define GROUP_ID(d) ((int)(get_group_id(d) + get_global_offset(d) / get_local_size(d)))
#define LOCAL_SIZE(d) ((int)get_local_size(d))
#define NUM_GROUPS(d) ((int)get_num_groups(d))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
typedef uchar u8;
typedef char i8;
typedef ushort u16;
typedef short i16;
typedef uint u32;
typedef int i32;
typedef long i64;
typedef ulong u64;
#define AS_FLOAT(u) as_float(u)
#define AS_UINT(f) as_uint(f)
/* PyPI's PoCL 3.0 (the OpenCL device a fresh machine gets) links the OpenCL library into kernels
 * without inlining it: each fma, fmax, fabs or round is a function call (a float16 fma loop ran at
 * 31 GFLOP/s through fma(), 253 with the builtin). For such a compiler the host defines
 * ACCEL_CLANG_BUILTINS and these become clang builtins, the same operations inline:
 * __builtin_fmaf is one rounding, __builtin_elementwise_max is fmax's maxNum. Compilers that
 * inline the library keep it: there fma on a 16-lane vector is one AVX-512 instruction, where
 * the lanes' builtins came out partly as 8-lane ones. */
#ifndef ACCEL_CLANG_BUILTINS
#define ACCEL_CLANG_BUILTINS 0
#endif
#if ACCEL_CLANG_BUILTINS /* float and float vectors only, as accel's kernels use them */
#define ACCEL_OVERLOAD static inline __attribute__((overloadable))
#define ACCEL_FMA_LANE(k) __builtin_fmaf(a.s##k, b.s##k, c.s##k)
ACCEL_OVERLOAD float accel_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
ACCEL_OVERLOAD float2 accel_fma(float2 a, float2 b, float2 c) {
    return (float2)(ACCEL_FMA_LANE(0), ACCEL_FMA_LANE(1));
}
ACCEL_OVERLOAD float4 accel_fma(float4 a, float4 b, float4 c) {
    return (float4)(ACCEL_FMA_LANE(0), ACCEL_FMA_LANE(1), ACCEL_FMA_LANE(2), ACCEL_FMA_LANE(3));
}
ACCEL_OVERLOAD float8 accel_fma(float8 a, float8 b, float8 c) {
    return (float8)(ACCEL_FMA_LANE(0), ACCEL_FMA_LANE(1), ACCEL_FMA_LANE(2), ACCEL_FMA_LANE(3),
                    ACCEL_FMA_LANE(4), ACCEL_FMA_LANE(5), ACCEL_FMA_LANE(6), ACCEL_FMA_LANE(7));
}
ACCEL_OVERLOAD float16 accel_fma(float16 a, float16 b, float16 c) {
    return (float16)(ACCEL_FMA_LANE(0), ACCEL_FMA_LANE(1), ACCEL_FMA_LANE(2), ACCEL_FMA_LANE(3),
                     ACCEL_FMA_LANE(4), ACCEL_FMA_LANE(5), ACCEL_FMA_LANE(6), ACCEL_FMA_LANE(7),
                     ACCEL_FMA_LANE(8), ACCEL_FMA_LANE(9), ACCEL_FMA_LANE(a), ACCEL_FMA_LANE(b),
                     ACCEL_FMA_LANE(c), ACCEL_FMA_LANE(d), ACCEL_FMA_LANE(e), ACCEL_FMA_LANE(f));
}
#define FMA(a, b, c) accel_fma((a), (b), (c))
#define FMAX(a, b) __builtin_elementwise_max((a), (b))
#define FABS(x) __builtin_elementwise_abs(x)
#define ROUND_HALF_AWAY(x) __builtin_roundf(x)
#define IS_NAN(x) ((x) != (x))
#define IS_INF(x) __builtin_isinf(x)
#else
#define FMA(a, b, c) fma((a), (b), (c))
#define FMAX(a, b) fmax((a), (b))
#define FABS(x) fabs(x)
#define ROUND_HALF_AWAY(x) round(x)
#define IS_NAN(x) isnan(x)
#define IS_INF(x) isinf(x)
#endif
#define EXP(x) exp(x)
#define TANH(x) tanh(x)
#define ERF(x) erf(x)
#define INF_F (INFINITY)
#define NAN_F (NAN)
/* Exact float ops: contraction is off above; division and SQRT_RN are correctly rounded only
 * when the program is built with -cl-fp32-correctly-rounded-divide-sqrt (the backend passes it).
 * The same names on CUDA and HIP round every operation on its own too (see there). */
#define FMUL_RN(a, b) ((a) * (b))
#define FADD_RN(a, b) ((a) + (b))
#define FDIV_RN(a, b) ((a) / (b))
#define SQRT_RN(x) sqrt(x)
/* float16 without cl_khr_fp16 lives in memory as its 16 bits, as on CUDA and HIP, and converts
 * in integer code (f16_to_f32 / f32_to_f16, below): vload_half and vstore_half_rte are library
 * calls on PyPI's PoCL 3.0 (see FMA), and these vectorize. */
typedef u16 T_F16;
#define LOAD_F16(p, i) f16_to_f32((p)[i])
#define STORE_F16(p, i, v) ((p)[i] = f32_to_f16(v))
/* No subgroups on OpenCL 1.2 devices such as PoCL: reductions go through local memory. */
#ifndef ACCEL_WARP
#define ACCEL_WARP 0
#endif
#define UNROLL _Pragma("unroll")

#else
/* ---------------------------------------------------------------- CUDA and HIP C++ */
#if defined(__HIPCC__) || defined(__HIP__) || defined(__HIPCC_RTC__)
#define ACCEL_HIP 1
#ifndef __HIPCC_RTC__ /* hiprtc has the runtime and fp16 headers built in */
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif
/* hip-clang contracts a*b+c by default; the exact-rounding kernels need every op rounded. */
#pragma clang fp contract(off)
#ifndef ACCEL_WARP
#define ACCEL_WARP 64 /* CDNA wavefront; RDNA builds pass -DACCEL_WARP=32 */
#endif
#else
#define ACCEL_CUDA 1
#include <cuda_fp16.h>
#ifndef ACCEL_WARP
#define ACCEL_WARP 32
#endif
#endif
#if defined(ACCEL_HIP)
#define SHFL_DOWN(v, o) __shfl_down((v), (o))
#define SHFL_XOR(v, o) __shfl_xor((v), (o))
#else
#define SHFL_DOWN(v, o) __shfl_down_sync(0xffffffffu, (v), (o))
#define SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#endif
#define KERNEL extern "C" __global__
#define GLOBAL
#define LOCAL __shared__
#define LOCAL_PTR
#define RESTRICT __restrict__
#define DEVICE __device__ __forceinline__
#define DEVICE_NOINLINE __device__ __noinline__
#define LOCAL_ID(d) ((int)((d) == 0 ? threadIdx.x : (d) == 1 ? threadIdx.y : threadIdx.z))
#define GROUP_ID(d) ((int)((d) == 0 ? blockIdx.x : (d) == 1 ? blockIdx.y : blockIdx.z))
#define LOCAL_SIZE(d) ((int)((d) == 0 ? blockDim.x : (d) == 1 ? blockDim.y : blockDim.z))
#define NUM_GROUPS(d) ((int)((d) == 0 ? gridDim.x : (d) == 1 ? gridDim.y : gridDim.z))
#define BARRIER() __syncthreads()
typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
/* OpenCL C's integer limits, which accel port maps <limits.h>/<stdint.h> names to: NVRTC and
 * hiprtc have no <limits.h>; long is 64-bit, as in OpenCL */
#ifndef INT_MAX
#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#define SHRT_MIN (-32768)
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define INT_MIN (-2147483647 - 1)
#define INT_MAX 2147483647
#define UINT_MAX 0xffffffffu
#define LONG_MIN (-9223372036854775807LL - 1)
#define LONG_MAX 9223372036854775807LL
#define ULONG_MAX 0xffffffffffffffffull
#endif
#define AS_FLOAT(u) __uint_as_float(u)
#define AS_UINT(f) __float_as_uint(f)
#define FMA(a, b, c) fmaf((a), (b), (c))
#define FABS(x) fabsf(x)
#define FMAX(a, b) fmaxf((a), (b))
#define EXP(x) expf(x)
#define TANH(x) tanhf(x)
#define ERF(x) erff(x)
#define ROUND_HALF_AWAY(x) roundf(x)
#define IS_NAN(x) isnan(x)
#define IS_INF(x) isinf(x)
#define INF_F (__int_as_float(0x7f800000))
#define NAN_F (__int_as_float(0x7fc00000))
/* Operations never contracted into an FMA, and division with correct rounding. HIP's
 * __fmul_rn/__fadd_rn are plain a*b / a+b defined in its headers before the pragma above, so
 * hip-clang contracts across them; written here, after the pragma, the operators stay rounded. */
#if defined(ACCEL_HIP)
#define FMUL_RN(a, b) ((a) * (b))
#define FADD_RN(a, b) ((a) + (b))
#else
#define FMUL_RN(a, b) __fmul_rn((a), (b))
#define FADD_RN(a, b) __fadd_rn((a), (b))
#endif
#define FDIV_RN(a, b) __fdiv_rn((a), (b))
/* Correctly rounded square root. CUDA's __fsqrt_rn is; ROCm's __fsqrt_rn is the native
 * (approximate) one and its sqrtf is exact only where the device library says so, so HIP takes
 * the float32 rounding of the float64 root: the root of a float32 is never within 2^-49 (relative)
 * of a float32 rounding midpoint, and float64's root is far closer than that, so the double
 * rounding lands where the exact root's rounding does. */
#if defined(ACCEL_HIP)
#define SQRT_RN(x) ((float)sqrt((double)(x)))
#else
#define SQRT_RN(x) __fsqrt_rn(x)
#endif
typedef unsigned short T_F16;
#define LOAD_F16(p, i) __half2float(__ushort_as_half((p)[i]))
#define STORE_F16(p, i, v) ((p)[i] = __half_as_ushort(__float2half_rn(v)))
#define UNROLL _Pragma("unroll")
#if defined(ACCEL_CUDA)
/* Asynchronous 16-byte global -> shared copies (cp.async, sm_80 and later), for the CUDA-only
 * tensor-core kernels and STREAM_COPY16 below: each reads `bytes` (0 or 16) and zero-fills the
 * rest of its 16 bytes; the "memory" clobbers keep the compiler from moving shared-memory
 * accesses across them. */
DEVICE void cp_async16(u32 shared_addr, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 ::"r"(shared_addr), "l"(src), "r"(bytes) : "memory");
}
DEVICE void cp_async16(void* dst, const void* src, int bytes) {
    cp_async16((u32)__cvta_generic_to_shared(dst), src, bytes);
}
DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* wait until at most PENDING of this thread's committed groups are still in flight */
template <int PENDING> DEVICE void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}
/* Four 8 x 8 16-bit matrices from shared address `a` (this lane's row; sm_75 and later), plain or
 * transposed. asm volatile with a memory clobber: they read shared memory that cp.async and other
 * warps wrote, so they must stay between the barriers that order those writes. */
DEVICE void ldsm_x4(u32* r, u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
DEVICE void ldsm_x4_trans(u32* r, u32 a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
/* sm_90a's warpgroup MMA (the wgmma kernels): cp.async and st.shared write shared memory through
 * the generic proxy and wgmma reads it through the async proxy, so each thread fences its writes
 * (proxy_fence) before the barrier that publishes them; fence / commit / wait bracket the
 * asynchronous MMAs; WGMMA_ACC8(i) is eight accumulator operands d[i..i+7] of the asm. */
DEVICE void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING> DEVICE void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
#define WGMMA_ACC8(i)                                                                        \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#endif
#endif

/* ---------------------------------------------------------------- shared by every dialect */
/* Streaming global -> local copies for a team of 32 work-items that each wait only for their
 * own copies: STREAM_COPY16(dst, src) copies 16 aligned bytes; STREAM_COMMIT() closes this
 * work-item's batch of copies; STREAM_WAIT(n) waits until at most n of its batches are still in
 * flight; TEAM_SYNC() then makes every work-item's copies visible to the whole team (and orders
 * the team's reads before the next copies into the same local memory). On sm_80 and later the
 * copies are cp.async (no registers held while they are in flight), elsewhere plain loads and
 * stores; on CUDA the team is a warp (TEAM_SYNC() is __syncwarp), on HIP and OpenCL TEAM_SYNC()
 * is a work-group barrier, so every work-item of the group must reach it. */
#if defined(ACCEL_CUDA) && __CUDA_ARCH__ >= 800
#define STREAM_COPY16(dst, src) cp_async16((dst), (src), 16)
#define STREAM_COMMIT() cp_async_commit()
#define STREAM_WAIT(n) cp_async_wait<(n)>()
#else
#define STREAM_COPY16(dst, src) (*(dst) = *(src))
#define STREAM_COMMIT() ((void)0)
#define STREAM_WAIT(n) ((void)0)
#endif
#if defined(ACCEL_CUDA)
#define TEAM_SYNC() __syncwarp()
#else
#define TEAM_SYNC() BARRIER()
#endif

/* bfloat16 as a uint16 bit pattern: widening is exact; narrowing rounds to nearest even and
 * keeps NaN a (quiet) NaN instead of letting the rounding carry turn it into infinity. */
DEVICE float bf16_to_f32(u16 b) { return AS_FLOAT(((u32)b) << 16); }
DEVICE u16 f32_to_bf16(float f) {
    u32 u = AS_UINT(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float16 bits <-> float32 in integer code, the same bits on every dialect (CUDA's
 * __float2half_rn turns every NaN into 0x7FFF; here a NaN keeps its top payload bits, so the
 * quiet NaN 0x7FC00000 becomes 0x7E00 as numpy writes it). Both are IEEE conversions (narrowing
 * rounds to nearest even); OpenCL's LOAD_F16 / STORE_F16 are these. */
DEVICE float f16_to_f32(u32 h) {
    const u32 em = h & 0x7FFFu;                /* exponent and mantissa */
    const float tiny = (float)em * 0x1p-24f;   /* zero and subnormals: em units of 2^-24 */
    const u32 big = em >= 0x7C00u ? (em << 13) | 0x7F800000u /* infinities and NaNs */
                                  : (em << 13) + (112u << 23); /* normals, exponent rebiased */
    return AS_FLOAT((em < 0x0400u ? AS_UINT(tiny) : big) | ((h & 0x8000u) << 16));
}
#if defined(ACCEL_OPENCL)
/* Float16 bits to float32 several at a time, the values f16_to_f32 gives: F16C's vcvtph2ps where
 * the target has it (ACCEL_F16C; a signaling NaN comes back quiet, as any float op on it would
 * make it), else the integer code lane by lane. f16x2_to_f32: the two halves of h, low first
 * (a block's two scales); f16x8_to_f32 (F16C only): eight. */
#if defined(__F16C__)
#define ACCEL_F16C 1
DEVICE float8 f16x8_to_f32(ushort8 h) { return __builtin_ia32_vcvtph2ps256(as_short8(h)); }
DEVICE float2 f16x2_to_f32(u32 h) {
    const float4 f = __builtin_ia32_vcvtph2ps(as_short8((uint4)(h, 0u, 0u, 0u)));
    return f.lo;
}
#else
DEVICE float2 f16x2_to_f32(u32 h) {
    const uint2 v = (uint2)(h & 0xFFFFu, h >> 16), em = v & 0x7FFFu;
    const uint2 tiny = as_uint2(convert_float2(em) * 0x1p-24f);
    const uint2 big = select((em << 13) + (112u << 23), (em << 13) | 0x7F800000u, em >= 0x7C00u);
    return as_float2(select(big, tiny, em < 0x0400u) | ((v & 0x8000u) << 16));
}
#endif
#endif
DEVICE u16 f32_to_f16(float v) {
    const u32 x = AS_UINT(v), ax = x & 0x7FFFFFFFu;
    u32 h;
    if (ax > 0x7F800000u) h = 0x7E00u | (ax >> 13 & 0x1FFu);       /* NaN stays a quiet NaN */
    else if (ax >= 0x477FF000u) h = 0x7C00u;   /* 65520 and above round to infinity */
    else if (ax >= 0x38800000u)                /* normal halves: round the 13 dropped bits */
        h = (ax + 0xFFFu + (ax >> 13 & 1u) - 0x38000000u) >> 13;
    else                                       /* subnormals: adding 0.5 rounds to 2^-24 units */
        h = AS_UINT(AS_FLOAT(ax) + 0.5f) - 0x3F000000u;
    return (u16)(h | (x >> 16 & 0x8000u));
}

typedef float T_F32;
typedef u16 T_BF16;
typedef i8 T_I8;
typedef i32 T_I32;
typedef u8 T_U8;
#define LOAD_F32(p, i) ((p)[i])
#define STORE_F32(p, i, v) ((p)[i] = (v))
#define LOAD_BF16(p, i) bf16_to_f32((p)[i])
#define STORE_BF16(p, i, v) ((p)[i] = f32_to_bf16(v))
#define LOAD_I8(p, i) ((i32)(p)[i])
#define STORE_I32(p, i, v) ((p)[i] = (v))
#define LOAD_U8(p, i) ((p)[i])

/* Role macros: a kernel compiled with -DIN_DT=F16 reads its inputs through IN_T / LOAD_IN. */
#define IN_T ACCEL_CAT(T_, IN_DT)
#define LOAD_IN(p, i) ACCEL_CAT(LOAD_, IN_DT)(p, i)
#define OUT_T ACCEL_CAT(T_, OUT_DT)
#define STORE_OUT(p, i, v) ACCEL_CAT(STORE_, OUT_DT)(p, i, v)
#define MASK_T ACCEL_CAT(T_, MASK_DT)
#define LOAD_MASK(p, i) ACCEL_CAT(LOAD_, MASK_DT)(p, i)

/* Short float/int vectors of VW lanes: explicit SIMD for CPU OpenCL devices, whose compilers
 * vectorize explicit vector types far better than unrolled scalar arrays. VW is 1 (plain scalars)
 * on CUDA and HIP, where every work-item is already one SIMD lane. */
#ifndef VW
#define VW 1
#endif
#if VW == 1
typedef float vf_t;
typedef i32 vi_t;
#define VLOAD_F32(p, i) ((p)[i])
#define VLOAD_F16(p, i) LOAD_F16(p, i)
#define VLOAD_BF16(p, i) LOAD_BF16(p, i)
#define VLOAD_I8(p, i) LOAD_I8(p, i)
#define VLOAD_U8(p, i) ((i32)(p)[i])
#define VCVT_F(v) ((float)(v))
#define VGET(T, v, j) (v)
#define VLOAD_ARR(p, i) ((p)[i])
#define VGATHER(T, p, i) ((T)(p)[i])
#define VSUM(v) (v)
#define VSTORE_ARR(v, p, i) ((p)[i] = (v))
#define VSELECT(a, b, cond) ((cond) ? (b) : (a))
#define VIOTA 0
#define VMAX(a, b) FMAX((a), (b))
#elif defined(ACCEL_OPENCL)
typedef ACCEL_CAT(float, VW) vf_t;
typedef ACCEL_CAT(int, VW) vi_t;
/* Vector loads and stores lane by lane, which compilers merge into vector moves: vloadN and
 * vstoreN are library calls on PyPI's PoCL 3.0 (see FMA), and a cast to a vector pointer would
 * demand the vector's alignment. ACCEL_LANES(X, p, i) is X(p, i + 0), ..., X(p, i + VW - 1). */
#if VW == 2
#define ACCEL_LANES(X, p, i) X(p, (i) + 0), X(p, (i) + 1)
#define ACCEL_EACH_LANE(X, v, p, i) X(v, p, i, 0); X(v, p, i, 1)
#define VIOTA ((vi_t)(0, 1))
#elif VW == 4
#define ACCEL_LANES(X, p, i) X(p, (i) + 0), X(p, (i) + 1), X(p, (i) + 2), X(p, (i) + 3)
#define ACCEL_EACH_LANE(X, v, p, i) X(v, p, i, 0); X(v, p, i, 1); X(v, p, i, 2); X(v, p, i, 3)
#define VIOTA ((vi_t)(0, 1, 2, 3))
#elif VW == 8
#define ACCEL_LANES(X, p, i) X(p, (i) + 0), X(p, (i) + 1), X(p, (i) + 2), X(p, (i) + 3), \
                             X(p, (i) + 4), X(p, (i) + 5), X(p, (i) + 6), X(p, (i) + 7)
#define ACCEL_EACH_LANE(X, v, p, i) X(v, p, i, 0); X(v, p, i, 1); X(v, p, i, 2); X(v, p, i, 3); \
                                    X(v, p, i, 4); X(v, p, i, 5); X(v, p, i, 6); X(v, p, i, 7)
#define VIOTA ((vi_t)(0, 1, 2, 3, 4, 5, 6, 7))
#elif VW == 16
#define ACCEL_LANES(X, p, i) X(p, (i) + 0), X(p, (i) + 1), X(p, (i) + 2), X(p, (i) + 3), \
                             X(p, (i) + 4), X(p, (i) + 5), X(p, (i) + 6), X(p, (i) + 7), \
                             X(p, (i) + 8), X(p, (i) + 9), X(p, (i) + 10), X(p, (i) + 11), \
                             X(p, (i) + 12), X(p, (i) + 13), X(p, (i) + 14), X(p, (i) + 15)
#define ACCEL_EACH_LANE(X, v, p, i) X(v, p, i, 0); X(v, p, i, 1); X(v, p, i, 2); X(v, p, i, 3); \
                                    X(v, p, i, 4); X(v, p, i, 5); X(v, p, i, 6); X(v, p, i, 7); \
                                    X(v, p, i, 8); X(v, p, i, 9); X(v, p, i, a); X(v, p, i, b); \
                                    X(v, p, i, c); X(v, p, i, d); X(v, p, i, e); X(v, p, i, f)
#define VIOTA ((vi_t)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#else
#error "VW must be 1, 2, 4, 8 or 16"
#endif
#define ACCEL_LANE(p, i) ((p)[i])
#define ACCEL_LANE_I(p, i) ((i32)(p)[i])
#define ACCEL_LANE_BF16(p, i) LOAD_BF16(p, i)
#define ACCEL_LANE_F16(p, i) LOAD_F16(p, i)
#define ACCEL_STORE_LANE(v, p, i, k) (p)[(i) + 0x##k] = (v).s##k
#define VGATHER(T, p, i) ((T)(ACCEL_LANES(ACCEL_LANE, p, i)))
#define VLOAD_F32(p, i) VGATHER(vf_t, p, i)
#define VLOAD_F16(p, i) ((vf_t)(ACCEL_LANES(ACCEL_LANE_F16, p, i)))
#define VLOAD_BF16(p, i) ((vf_t)(ACCEL_LANES(ACCEL_LANE_BF16, p, i)))
#define VLOAD_I8(p, i) ((vi_t)(ACCEL_LANES(ACCEL_LANE_I, p, i)))
#define VLOAD_U8(p, i) ((vi_t)(ACCEL_LANES(ACCEL_LANE_I, p, i)))
#define VCVT_F(v) ACCEL_CAT(convert_float, VW)(v)
#define VGET(T, v, j) (((__private T*)&(v))[j])
/* The sum of a vector's lanes as a tree of halves, in registers (a loop over VGET would move the
 * vector to memory). v is named once per lane: pass a variable, not an expression. */
#define ACCEL_SUM2(v) ((v).s0 + (v).s1)
#define ACCEL_SUM4(v) ACCEL_SUM2((v).lo + (v).hi)
#define ACCEL_SUM8(v) ACCEL_SUM4((v).lo + (v).hi)
#define ACCEL_SUM16(v) ACCEL_SUM8((v).lo + (v).hi)
#define VSUM(v) ACCEL_CAT(ACCEL_SUM, VW)(v)
#define VLOAD_ARR(p, i) VGATHER(vf_t, p, i)
#define VSTORE_ARR(v, p, i) do { const vf_t accel_v_ = (v); \
                                 ACCEL_EACH_LANE(ACCEL_STORE_LANE, accel_v_, p, i); } while (0)
#define VSELECT(a, b, cond) ((cond) ? (b) : (a)) /* per lane, as select() but inline */
#define VMAX(a, b) FMAX((a), (b))
#else
#error "VW > 1 is for OpenCL; CUDA and HIP kernels use VW=1"
#endif
#define VLOAD_IN(p, i) ACCEL_CAT(VLOAD_, IN_DT)(p, i)

/* 16-byte vectors, for the widest global loads and local-memory accesses: the type names and the
 * .x .y .z .w members are the same in all three dialects (their constructors differ: build them
 * member by member). */
typedef uint4 u32x4;
typedef float4 f32x4;

/* KERNEL LAUNCH_BOUNDS(x, y, g) void f(...): f always runs x-by-y work-groups (local size
 * (x, y, 1)), so compilers budget registers for x * y work-items rather than for their largest
 * group (HIP assumes 1024 otherwise); on CUDA also for at least g resident groups per
 * multiprocessor (0: no such constraint, which leaves ptxas's own register choice; HIP's second
 * launch-bounds argument means something else and is not passed). */
#if defined(ACCEL_OPENCL)
#define LAUNCH_BOUNDS(x, y, g) __attribute__((reqd_work_group_size(x, y, 1)))
#elif defined(ACCEL_HIP)
#define LAUNCH_BOUNDS(x, y, g) __launch_bounds__((x) * (y))
#else
#define LAUNCH_BOUNDS(x, y, g) __launch_bounds__((x) * (y), g)
#endif

/* The low 32 bits of an address, to find a pointer's alignment. BYTE_F23(w, k): byte k (a
 * constant) of word w in the low mantissa bits of 0x4B000000, i.e. the float 2^23 + byte exactly
 * (a small integer becomes a float without a conversion instruction); BYTE_F16(w, k): byte k
 * of w (below 0x80: bit 23 is the exponent's lowest) as bits 16..23 under the top byte 0x41, the
 * float 8 + byte / 16 exactly. One byte permute each on CUDA and HIP. */
#if defined(ACCEL_OPENCL)
#define ADDR_BITS(p) ((u32)(uintptr_t)(p))
#define BYTE_F23(w, k) AS_FLOAT(0x4B000000u | (((w) >> (8 * (k))) & 0xFFu))
#define BYTE_F16(w, k) AS_FLOAT(0x41000000u | ((((w) >> (8 * (k))) & 0xFFu) << 16))
#else
#define ADDR_BITS(p) ((u32)(size_t)(p))
#define BYTE_F23(w, k) AS_FLOAT(__byte_perm((w), 0x4B000000u, 0x7440u | (k)))
#define BYTE_F16(w, k) AS_FLOAT(__byte_perm((w), 0x41000000u, 0x7044u | ((k) << 8)))
#endif

/* KEEP(v): v (a float variable) is computed here, once: the optimizer may not sink its
 * computation into a loop that uses it (NVVM does, recomputing loop-invariant sums per
 * iteration); free on OpenCL, where no compiler was seen doing that. */
#if defined(ACCEL_OPENCL)
#define KEEP(v) ((void)0)
#elif defined(ACCEL_HIP)
#define KEEP(v) asm volatile("" : "+v"(v)) /* a vector register */
#else
#define KEEP(v) asm volatile("" : "+f"(v))
#endif

/* DOT4_I8(a, b, c): c plus the dot product of the four signed bytes of the 32-bit words a and b,
 * exact in int32: one dp4a on NVIDIA GPUs (sm_61 and later), one v_dot4 on the AMD GPUs that have
 * it (sdot4: gfx906/908/90a/94x, gfx1011/1012 and RDNA2 gfx1030-1036; sudot4 with both operands
 * signed: gfx11/gfx12), four multiply-adds elsewhere. */
#if defined(ACCEL_CUDA) && __CUDA_ARCH__ >= 610
#define DOT4_I8(a, b, c) __dp4a((int)(a), (int)(b), (c))
#elif defined(ACCEL_HIP) && (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || \
    defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1011__) || \
    defined(__gfx1012__) || defined(__gfx1030__) || defined(__gfx1031__) || defined(__gfx1032__) || \
    defined(__gfx1033__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__))
#define DOT4_I8(a, b, c) __builtin_amdgcn_sdot4((int)(a), (int)(b), (c), false)
#elif defined(ACCEL_HIP) && (defined(__GFX11__) || defined(__GFX12__))
#define DOT4_I8(a, b, c) __builtin_amdgcn_sudot4(true, (int)(a), true, (int)(b), (c), false)
#else
#define DOT4_I8(a, b, c) ((c) + (int)(i8)(a) * (int)(i8)(b) + (int)(i8)((a) >> 8) * (int)(i8)((b) >> 8) \
    + (int)(i8)((a) >> 16) * (int)(i8)((b) >> 16) + (int)(i8)((a) >> 24) * (int)(i8)((b) >> 24))
#endif

/* Byte dot products on CPU devices (OpenCL only: their 16-byte vectors), exact where every
 * product of two bytes is below 2^14 in magnitude, with the lane sums of the helper's own choice:
 * - ACCEL_PAIRS_U8(ulo, uhi, slo, shi): the 32 products of the unsigned bytes ulo, uhi (uchar16)
 *   and the signed bytes slo, shi (char16) in adjacent pairs: lane k < 8 is ulo's and slo's
 *   bytes 2k and 2k + 1, lane 8 + k uhi's and shi's (so a group of 16 bytes stays in its lanes);
 * - ACCEL_PAIRS_U4(lo, hi, high, slo, shi): ACCEL_PAIRS_U8 of the low nibbles of the 32 bytes lo,
 *   hi (high = 0) or of their high nibbles (high = 1): a 4-bit format's codes, unpacked in place;
 * - ACCEL_MADD16(a, b): lanes 2k and 2k + 1 of the short16s a and b multiplied and added in 32
 *   bits (int8);
 * - ACCEL_LOOKUP16(table, i): lane k is table[i[k]], each i[k] below 16 (vpshufb on AVX2);
 * - ACCEL_HADD16(a, b), ACCEL_HADD8(a, b): the adjacent lanes of the short16s (int8s) a and b
 *   added, per 128-bit half: (pairs of a.lo, of b.lo, of a.hi, of b.hi);
 * - ACCEL_LOOKUP16F(table, i) (AVX-512 only, where ACCEL_LOOKUP16F is defined): lane k is
 *   table[i[k] mod 16] of the float16 table (vpermps, which reads the low 4 bits of each index,
 *   as OpenCL's shuffle does); ACCEL_LOOKUP32F(lo, hi, i): the same in the 32 values lo then
 *   hi, by the low 5 bits (vpermi2ps);
 * - DOT32_U8(ulo, uhi, slo, shi) and DOT32_S8(alo, ahi, slo, shi): the dot product as an int8,
 *   for unsigned bytes ulo, uhi or signed ones alo, ahi (char16), with none of slo, shi -128.
 * On x86 with AVX2 ACCEL_PAIRS_U8 is vpmaddubsw (byte pairs, 16-bit sums) and ACCEL_MADD16 is
 * vpmaddwd, ACCEL_HADD16 / ACCEL_HADD8 are vphaddw / vphaddd (spelled as shuffles, LLVM 15 adds
 * cross-lane shuffles around them: a q4_k GEMV took a fifth longer); the signed dot takes vpabsb and vpsignb first (|a|, and s with a's signs), as
 * ggml's kernels do. LLVM 15 (PoCL 3.1) does not find vpmaddubsw in equivalent OpenCL C; elsewhere
 * they are 16-bit products and pairs of them. ACCEL_BYTES16(p, o): the 16 bytes p[o], ...,
 * p[o + 15] as a vector literal's lanes (compilers merge them into one load; vload16 is a library
 * call on PyPI's PoCL 3.0, and a vector pointer would demand alignment). */
#if defined(ACCEL_OPENCL)
#define ACCEL_BYTES16(p, o) (p)[(o) + 0], (p)[(o) + 1], (p)[(o) + 2], (p)[(o) + 3], (p)[(o) + 4], \
    (p)[(o) + 5], (p)[(o) + 6], (p)[(o) + 7], (p)[(o) + 8], (p)[(o) + 9], (p)[(o) + 10],            \
    (p)[(o) + 11], (p)[(o) + 12], (p)[(o) + 13], (p)[(o) + 14], (p)[(o) + 15]
#if defined(__AVX512F__)
#define ACCEL_LOOKUP16F ACCEL_LOOKUP16F
DEVICE float16 ACCEL_LOOKUP16F(float16 table, int16 i) { return __builtin_ia32_permvarsf512(table, i); }
DEVICE float16 ACCEL_LOOKUP32F(float16 lo, float16 hi, int16 i) {
    return __builtin_ia32_vpermi2varps512(lo, i, hi);
}
/* HIDE_WIDENING(v): v (an int16) as a value the compiler cannot trace to its source, so that
 * v >> 4 on zero-extended bytes stays one vpsrld of the widened lanes: LLVM 15 narrows it to a
 * byte shift, a mask and a second vpmovzxbd, the widening (like the lookups) on port 5, the
 * busiest (q4_k GEMV in cache, AVX-512: 0.53 -> 0.49 ms with both nibbles from one widening). */
#define HIDE_WIDENING(v) __asm__("" : "+v"(v))
#endif
#if defined(__AVX2__)
typedef char accel_i8x32 __attribute__((ext_vector_type(32)));
#define ACCEL_CAT32(a, b) __builtin_shufflevector((a), (b), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, \
    13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31)
DEVICE short16 ACCEL_PAIRS_U8(uchar16 ulo, uchar16 uhi, char16 slo, char16 shi) {
    return __builtin_ia32_pmaddubsw256(ACCEL_CAT32(as_char16(ulo), as_char16(uhi)), ACCEL_CAT32(slo, shi));
}
DEVICE int8 ACCEL_MADD16(short16 a, short16 b) { return as_int8(__builtin_ia32_pmaddwd256(a, b)); }
DEVICE char16 ACCEL_LOOKUP16(char16 table, uchar16 i) { return __builtin_ia32_pshufb128(table, as_char16(i)); }
DEVICE short16 ACCEL_HADD16(short16 a, short16 b) { return __builtin_ia32_phaddw256(a, b); }
DEVICE int8 ACCEL_HADD8(int8 a, int8 b) { return __builtin_ia32_phaddd256(a, b); }
/* the nibble codes as one 32-byte vector: one load, one mask (and shift) for both halves */
DEVICE short16 ACCEL_PAIRS_U4(uchar16 lo, uchar16 hi, int high, char16 slo, char16 shi) {
    const accel_i8x32 b = ACCEL_CAT32(as_char16(lo), as_char16(hi));
    const accel_i8x32 q = (high ? b >> (char)4 : b) & (char)15;  /* bits 4-7 whatever the sign fill */
    return __builtin_ia32_pmaddubsw256(q, ACCEL_CAT32(slo, shi));
}
DEVICE int8 DOT32_S8(char16 alo, char16 ahi, char16 slo, char16 shi) {
    const accel_i8x32 a = ACCEL_CAT32(alo, ahi);
    const accel_i8x32 u = __builtin_ia32_psignb256(a, a), s = __builtin_ia32_psignb256(ACCEL_CAT32(slo, shi), a);
    return ACCEL_MADD16(__builtin_ia32_pmaddubsw256(u, s), (short16)1);
}
#else
DEVICE short16 ACCEL_PAIRS_U8(uchar16 ulo, uchar16 uhi, char16 slo, char16 shi) {
    return (short16)(convert_short8(ulo.even) * convert_short8(slo.even) +
                         convert_short8(ulo.odd) * convert_short8(slo.odd),
                     convert_short8(uhi.even) * convert_short8(shi.even) +
                         convert_short8(uhi.odd) * convert_short8(shi.odd));
}
DEVICE short16 ACCEL_PAIRS_U4(uchar16 lo, uchar16 hi, int high, char16 slo, char16 shi) {
    const uchar s = high ? 4 : 0;
    return ACCEL_PAIRS_U8((lo >> s) & (uchar)15, (hi >> s) & (uchar)15, slo, shi);
}
DEVICE int8 ACCEL_MADD16(short16 a, short16 b) {
    return convert_int8(a.even) * convert_int8(b.even) + convert_int8(a.odd) * convert_int8(b.odd);
}
DEVICE char16 ACCEL_LOOKUP16(char16 table, uchar16 i) { return shuffle(table, i); }
DEVICE short16 ACCEL_HADD16(short16 a, short16 b) {
    return (short16)(a.lo.even + a.lo.odd, b.lo.even + b.lo.odd, a.hi.even + a.hi.odd,
                     b.hi.even + b.hi.odd);
}
DEVICE int8 ACCEL_HADD8(int8 a, int8 b) {
    return (int8)(a.lo.even + a.lo.odd, b.lo.even + b.lo.odd, a.hi.even + a.hi.odd,
                  b.hi.even + b.hi.odd);
}
DEVICE int8 DOT32_S8(char16 alo, char16 ahi, char16 slo, char16 shi) {
    const short16 t = convert_short16(alo) * convert_short16(slo) + convert_short16(ahi) * convert_short16(shi);
    return convert_int8(t.even) + convert_int8(t.odd);
}
#endif
DEVICE int8 DOT32_U8(uchar16 ulo, uchar16 uhi, char16 slo, char16 shi) {
    return ACCEL_MADD16(ACCEL_PAIRS_U8(ulo, uhi, slo, shi), (short16)1);
}
#endif

/* PREFETCH_ROWS(rows, n, at, bytes, span): where a CPU parameter set asks for it, the cache
 * lines of rows[r] + at .. + bytes for each of the n weight rows a work-item walks together, moved
 * ahead by PF bytes along the row and by PFN work-items (span: the bytes of one work-item's rows,
 * the next item's rows start span bytes on), so that they are on their way from memory while
 * this part is computed on: the hardware prefetcher alone, which stops at 4 KB pages, left the
 * GEMVs waiting on memory. Kernels ask as they go, for the part each step reads (a block or a
 * sub-block), not for a whole run of blocks at once: q4_0 4096 x 4096 GEMV, M = 1, 0.59 ->
 * 0.55 ms, q8_0 0.84 -> 0.75, q4_k 0.60 -> 0.57, q6_k 0.84 -> 0.78 (rotated over 2 GB, kernel
 * time, interleaved). Where a work-item walks one row, a short distance along it did best;
 * where it walks several at once, the next work-item's rows: prefetching along each of 4 rows
 * slowed qgemv_k (4096 x 14336 q4_k, M = 1: 2.40 -> 2.62 ms, none against PF = 2048; PFN = 1
 * 2.23). clang's builtin becomes prefetcht0 on x86-64 and prfm on AArch64, neither of which
 * faults past the buffer's end; OpenCL's own prefetch() is a no-op in PoCL. */
#ifndef PF
#define PF 0
#endif
#ifndef PFN
#define PFN 0
#endif
#if defined(ACCEL_OPENCL) && (PF > 0 || PFN > 0) && (defined(__x86_64__) || defined(__aarch64__))
#define PREFETCH_ROWS(rows, n, at, bytes, span) \
    UNROLL for (int pfr_ = 0; pfr_ < (n); ++pfr_) \
        UNROLL for (int pf_ = 0; pf_ < (bytes); pf_ += 64) \
            __builtin_prefetch((rows)[pfr_] + (at) + PF + PFN * (span) + pf_)
#else
#define PREFETCH_ROWS(rows, n, at, bytes, span) ((void)0)
#endif

/* KEEP_IN_MEMORY(a): the private array a is stored here and its elements read from memory after
 * (an empty asm that may read and write through a's address), where x86 takes a float as a
 * broadcast operand with a load alone: kept in a register, each splat of a lane of a vector was
 * one or two shuffles on port 5, on AVX-512 the port the nibble lookups and widenings also need
 * (q4_k GEMV, 16 splats per 256 weights and row: 0.64 -> 0.53 ms in cache, 0.68 -> 0.60 from
 * memory). Elsewhere nothing. */
#if defined(ACCEL_OPENCL) && defined(__x86_64__)
#define KEEP_IN_MEMORY(a) __asm__ volatile("" : : "r"(a) : "memory")
#else
#define KEEP_IN_MEMORY(a) ((void)0)
#endif

DEVICE int imin(int a, int b) { return a < b ? a : b; }
DEVICE int imax(int a, int b) { return a > b ? a : b; }

#endif /* ACCEL_H */
