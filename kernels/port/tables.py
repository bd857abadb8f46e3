"""What ``accel port`` knows about CUDA names: the faithful equivalents on OpenCL C and HIP, and
why the rest has none. Data only; the translators in opencl.py and hip.py apply it.

A name appears in a "map" table only when the target computes the same thing: the same function,
with CUDA's argument and result types (OPENCL_TYPED spells them out where OpenCL's overloads
differ), within an error bound the translator states where OpenCL's is looser than CUDA's
(ULP_BOUNDS); everything else a CUDA program can call either appears in a "why not" table or is
refused as unknown.
"""
from __future__ import annotations

# -- OpenCL C ---------------------------------------------------------------------------------------
#: CUDA float-suffixed math -> OpenCL's overloaded builtin: the same function, but not always the
#: same error bound: see ULP_BOUNDS, which the translator reports where OpenCL's is looser
OPENCL_MATH = {
    "expf": "exp", "exp2f": "exp2", "exp10f": "exp10", "expm1f": "expm1", "logf": "log",
    "log2f": "log2", "log10f": "log10", "log1pf": "log1p", "powf": "pow", "sqrtf": "sqrt",
    "rsqrtf": "rsqrt", "cbrtf": "cbrt", "sinf": "sin", "cosf": "cos", "tanf": "tan",
    "asinf": "asin", "acosf": "acos", "atanf": "atan", "atan2f": "atan2", "sinhf": "sinh",
    "coshf": "cosh", "tanhf": "tanh", "fabsf": "fabs", "fmaxf": "fmax", "fminf": "fmin",
    "floorf": "floor", "ceilf": "ceil", "roundf": "round", "truncf": "trunc", "rintf": "rint",
    "fmodf": "fmod", "erff": "erf", "erfcf": "erfc", "fmaf": "fma", "copysignf": "copysign",
    "hypotf": "hypot", "lgammaf": "lgamma", "tgammaf": "tgamma",
    # CUDA's fast intrinsics are approximations with a documented error bound (in absolute
    # terms or growing with |x|); OpenCL's full builtins are within it, so mapping to them
    # never loses precision
    "__expf": "exp", "__exp10f": "exp10", "__logf": "log", "__log2f": "log2", "__log10f": "log10",
    "__powf": "pow", "__sinf": "sin", "__cosf": "cos", "__tanf": "tan", "__fmaf_rn": "fma",
}

#: the 64-bit value hi:lo of the funnel shifts (arguments lo, hi)
_HI_LO = "(((ulong)(uint)({1})) << 32 | (uint)({0}))"

#: CUDA cache-hinted loads: a plain load computes the same value
OPENCL_LOADS = frozenset(("__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"))
#: ... and stores (streaming, write-back...): a plain store writes the same value
OPENCL_STORES = frozenset(("__stcs", "__stcg", "__stwb", "__stwt"))

#: CUDA integer, bit and reinterpretation intrinsics -> an OpenCL C expression with CUDA's
#: parameter and result types spelled out: OpenCL's builtins are overloaded on their argument
#: and return its (often unsigned) type, where CUDA's convert the argument and return int, so a
#: bare rename (``__popc`` -> ``popcount``) changes the arithmetic around the call. Each
#: argument ({0}, {1}, ...) appears exactly once, so the template is also a function-like macro
#: (the dialect's prologue) without evaluating an argument twice. Value: (template, result type).
OPENCL_TYPED = {
    "__popc": ("((int)popcount((uint)({0})))", "int"),
    "__popcll": ("((int)popcount((ulong)({0})))", "int"),
    "__clz": ("((int)clz((int)({0})))", "int"),
    "__clzll": ("((int)clz((long)({0})))", "int"),
    "__ffs": ("accel_ffs((int)({0}))", "int"),
    "__ffsll": ("accel_ffsll((long)({0}))", "int"),
    "__brev": ("accel_brev((uint)({0}))", "uint"),
    "__brevll": ("accel_brevll((ulong)({0}))", "ulong"),
    "__mulhi": ("mul_hi((int)({0}), (int)({1}))", "int"),
    "__umulhi": ("mul_hi((uint)({0}), (uint)({1}))", "uint"),
    "__mul64hi": ("mul_hi((long)({0}), (long)({1}))", "long"),
    "__umul64hi": ("mul_hi((ulong)({0}), (ulong)({1}))", "ulong"),
    # CUDA multiplies the low 24 bits of any value; OpenCL's mul24 is defined only for values
    # that fit in 24 bits, so the translation keeps just those bits (sign-extended for __mul24)
    "__mul24": ("mul24(((int)({0}) << 8) >> 8, ((int)({1}) << 8) >> 8)", "int"),
    "__umul24": ("mul24((uint)({0}) & 0xffffffu, (uint)({1}) & 0xffffffu)", "uint"),
    "__rhadd": ("rhadd((int)({0}), (int)({1}))", "int"),
    "__urhadd": ("rhadd((uint)({0}), (uint)({1}))", "uint"),
    "__uhadd": ("hadd((uint)({0}), (uint)({1}))", "uint"),
    "__sad": ("(abs_diff((int)({0}), (int)({1})) + (uint)({2}))", "uint"),
    "__usad": ("(abs_diff((uint)({0}), (uint)({1})) + (uint)({2}))", "uint"),
    "labs": ("((long)abs((long)({0})))", "long"),
    "llabs": ("((long)abs((long)({0})))", "long"),
    "__int_as_float": ("as_float((int)({0}))", "float"),
    "__uint_as_float": ("as_float((uint)({0}))", "float"),
    "__float_as_int": ("as_int((float)({0}))", "int"),
    "__float_as_uint": ("as_uint((float)({0}))", "uint"),
    "__longlong_as_double": ("as_double((long)({0}))", "double"),
    "__double_as_longlong": ("as_long((double)({0}))", "long"),
    # OpenCL's sincos returns the sine and stores the cosine through its pointer argument
    "sincosf": ("(*({1}) = sincos((float)({0}), {2}))", "void"),
    "__sincosf": ("(*({1}) = sincos((float)({0}), {2}))", "void"),
    "__fdividef": ("((float)({0}) / (float)({1}))", "float"),
    # the translation is built with -cl-fp32-correctly-rounded-divide-sqrt (BUILD_OPTIONS)
    "__fdiv_rn": ("((float)({0}) / (float)({1}))", "float"),
    "__frcp_rn": ("(1.0f / (float)({0}))", "float"),
    "__fsqrt_rn": ("sqrt((float)({0}))", "float"),
    # the _rn arithmetic intrinsics are never contracted into an fma: helpers with contraction off
    "__fadd_rn": ("accel_fadd_rn((float)({0}), (float)({1}))", "float"),
    "__fsub_rn": ("accel_fsub_rn((float)({0}), (float)({1}))", "float"),
    "__fmul_rn": ("accel_fmul_rn((float)({0}), (float)({1}))", "float"),
    "__saturatef": ("accel_saturatef((float)({0}))", "float"),
    # CUDA's conversions saturate out-of-range values and map NaN to 0, as OpenCL's _sat ones do
    "__float2int_rn": ("convert_int_sat_rte((float)({0}))", "int"),
    "__float2int_rz": ("convert_int_sat_rtz((float)({0}))", "int"),
    "__float2int_rd": ("convert_int_sat_rtn((float)({0}))", "int"),
    "__float2int_ru": ("convert_int_sat_rtp((float)({0}))", "int"),
    "__float2uint_rn": ("convert_uint_sat_rte((float)({0}))", "uint"),
    "__float2uint_rz": ("convert_uint_sat_rtz((float)({0}))", "uint"),
    "__float2ll_rn": ("convert_long_sat_rte((float)({0}))", "long"),
    "__float2ll_rz": ("convert_long_sat_rtz((float)({0}))", "long"),
    "__int2float_rn": ("convert_float_rte((int)({0}))", "float"),
    "__int2float_rz": ("convert_float_rtz((int)({0}))", "float"),
    "__uint2float_rn": ("convert_float_rte((uint)({0}))", "float"),
    "__ll2float_rn": ("convert_float_rte((long)({0}))", "float"),
    # (hi:lo) shifted as one 64-bit value; the plain forms take the shift mod 32, the c forms
    # clamp it to 32
    **{name: (f"((uint)(({_HI_LO} {op} {shift}){tail}))", "uint") for name, op, shift, tail in (
        ("__funnelshift_l", "<<", "((uint)({2}) & 31u)", " >> 32"),
        ("__funnelshift_r", ">>", "((uint)({2}) & 31u)", ""),
        ("__funnelshift_lc", "<<", "min((uint)({2}), 32u)", " >> 32"),
        ("__funnelshift_rc", ">>", "min((uint)({2}), 32u)", ""))},
    "__byte_perm": ("accel_byte_perm((uint)({0}), (uint)({1}), (uint)({2}))", "uint"),
    # cache-hinted stores (streaming, write-back...): a plain store computes the same
    **{n: ("(*({0}) = ({1}))", None) for n in OPENCL_STORES},
}

#: OpenCL C definitions of the helpers OPENCL_TYPED calls (OpenCL 1.2 has no find-first-set
#: or bit reverse); emitted once each into a translation that uses them
OPENCL_HELPERS = {
    "accel_ffs": "int accel_ffs(int x) { uint u = (uint)x; "
                 "return 32 - (int)clz(u & (0u - u)); }",
    "accel_ffsll": "int accel_ffsll(long x) { ulong u = (ulong)x; "
                   "return 64 - (int)clz(u & (0ul - u)); }",
    "accel_brev": "uint accel_brev(uint x) { "
                  "x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1); "
                  "x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2); "
                  "x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4); "
                  "x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8); "
                  "return (x >> 16) | (x << 16); }",
    "accel_brevll": "ulong accel_brevll(ulong x) { "
                    "return ((ulong)accel_brev((uint)x) << 32) | accel_brev((uint)(x >> 32)); }",
    **{f"accel_f{op}_rn": f"float accel_f{op}_rn(float a, float b) {{\n#pragma OPENCL FP_CONTRACT "
                          f"OFF\n  return a {sym} b;\n}}" for op, sym in (("add", "+"), ("sub", "-"),
                                                                        ("mul", "*"))},
    # CUDA's __saturatef maps NaN to 0, where OpenCL's clamp keeps it
    "accel_saturatef": "float accel_saturatef(float x) { return x != x ? 0.0f : clamp(x, 0.0f, 1.0f); }",
    # result byte n = byte (s >> 4n) & 7 of the 8 bytes y:x (CUDA's default mode)
    "accel_byte_perm": "uint accel_byte_perm(uint x, uint y, uint s) { ulong v = ((ulong)y << 32) | x; "
                       "uint r = 0u; for (uint n = 0u; n < 4u; ++n) { "
                       "r |= (uint)((v >> (8u * ((s >> (4u * n)) & 7u))) & 0xffu) << (8u * n); } "
                       "return r; }",
}
#: helpers a helper calls
OPENCL_HELPER_NEEDS = {"accel_brevll": ("accel_brev",)}
#: bfloat16 in memory as its bits: widening is exact; narrowing rounds to nearest even as CUDA's
#: __float2bfloat16 does, a NaN staying a quiet NaN (the rounding carry would make it inf)
OPENCL_HELPERS.update({
    "accel_bf16_to_float": "float accel_bf16_to_float(ushort b) { return as_float((uint)b << 16); }",
    # a half struct member holds its bits (OpenCL C allows half only behind a pointer): the
    # core conversions, through the address of a private copy
    "accel_half_to_float": "float accel_half_to_float(ushort h) { return vload_half(0, (const half*)&h); }",
    "accel_float_to_half": "ushort accel_float_to_half(float f) { ushort h; "
                           "vstore_half_rte(f, 0, (half*)&h); return h; }",
    # half2 likewise, as ushort2 (4 bytes, 4-aligned, as CUDA's half2)
    "accel_half2_to_float2": "float2 accel_half2_to_float2(ushort2 h) { return vload_half2(0, (const half*)&h); }",
    "accel_float2_to_half2": "ushort2 accel_float2_to_half2(float2 f) { ushort2 h; "
                             "vstore_half2_rte(f, 0, (half*)&h); return h; }",
    "accel_float_to_bf16": "ushort accel_float_to_bf16(float f) { uint u = as_uint(f); "
                           "if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u); "
                           "return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }",
})

#: maximum error in ulp of single-precision math, (CUDA, OpenCL 1.2), for the functions whose
#: OpenCL bound is looser. CUDA: CUDA C++ Programming Guide, appendix "Mathematical Functions",
#: table "Single-Precision Mathematical Standard Library Functions with Maximum ULP Error" (full
#: range). OpenCL: OpenCL 1.2 specification, section 7.4, table 7.1 "ULP values for single
#: precision built-in math functions" (full profile); None where it specifies no bound.
#: Keyed by OpenCL name; docs/porting.md carries the same table.
ULP_BOUNDS = {
    "exp": (2, 3), "exp2": (2, 3), "exp10": (2, 3), "expm1": (1, 3), "log": (1, 3),
    "log2": (1, 3), "log10": (2, 3), "log1p": (1, 2), "pow": (4, 16), "cbrt": (1, 2),
    "sin": (2, 4), "cos": (2, 4), "tan": (4, 5), "asin": (2, 4), "acos": (2, 4), "atan": (2, 5),
    "atan2": (3, 6), "sinh": (3, 4), "cosh": (2, 4), "tanh": (2, 5), "erf": (2, 16),
    "erfc": (4, 16), "hypot": (3, 4), "tgamma": (5, 16), "lgamma": (6, None), "sincos": (2, 4),
}

#: builtins with the same name and meaning in CUDA device code and OpenCL C
OPENCL_SAME = frozenset((
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow", "sqrt", "rsqrt",
    "cbrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "fabs",
    "fmax", "fmin", "floor", "ceil", "round", "trunc", "rint", "fmod", "erf", "erfc", "fma",
    "copysign", "hypot", "isnan", "isinf", "isfinite", "signbit", "lgamma", "tgamma",
))


#: CUDA atomics OpenCL 1.2 lacks, as an atomic_cmpxchg loop on the 32-bit word computing CUDA's
#: new value from the word seen and the operand v (a helper per address space: OpenCL 1.2 has no
#: generic pointers): CUDA's wrapping counters (OpenCL's atomic_inc/atomic_dec do not wrap at a
#: limit) and float atomicAdd. (name, element type) -> the new word.
OPENCL_CAS_ATOMICS = {
    ("atomicInc", "uint"): "seen >= v ? 0u : seen + 1u",
    ("atomicDec", "uint"): "(seen == 0u || seen > v) ? v : seen - 1u",
    ("atomicAdd", "float"): "as_uint(as_float(seen) + v)",
}
OPENCL_HELPERS.update({
    f"accel_{name}_{t}_{space}": (
        f"{t} accel_{name}_{t}_{space}(volatile __{space} {t}* p, {t} v) {{ "
        f"volatile __{space} uint* q = (volatile __{space} uint*)p; uint old = *q, seen; "
        f"do {{ seen = old; old = atomic_cmpxchg(q, seen, {new}); }} while (old != seen); "
        f"return {'as_float(old)' if t == 'float' else 'old'}; }}")
    for (name, t), new in OPENCL_CAS_ATOMICS.items() for space in ("global", "local")})

#: integer atomics on 32-bit int / unsigned int: OpenCL 1.2 core (global and local memory),
#: returning the old value like CUDA's
OPENCL_ATOMICS = {
    "atomicAdd": "atomic_add", "atomicSub": "atomic_sub", "atomicExch": "atomic_xchg",
    "atomicMin": "atomic_min", "atomicMax": "atomic_max", "atomicAnd": "atomic_and",
    "atomicOr": "atomic_or", "atomicXor": "atomic_xor", "atomicCAS": "atomic_cmpxchg",
}
ATOMIC_INT_TYPES = frozenset(("int", "uint"))

#: identifiers CUDA code may use freely that OpenCL C reserves (address spaces, access
#: qualifiers, its scalar and vector type names, built-in types)
OPENCL_RESERVED = frozenset((
    "global", "local", "constant", "private", "kernel", "read_only", "write_only", "read_write",
    "uchar", "ushort", "uint", "ulong", "half", "quad", "image1d_t", "image2d_t", "image3d_t",
    "sampler_t", "event_t", "vec_type_hint", "work_group_size_hint",
    *(f"{b}{n}" for b in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                          "float", "double", "half") for n in (2, 3, 4, 8, 16)),
))

#: OpenCL C 1.2's built-in functions (section 6.12): overloadable, so a function of the file
#: with one of these names would redeclare the builtin. Conversions and reinterpretations
#: (``convert_int_sat_rte``, ``as_float4``) are matched by OPENCL_CONVERSION.
OPENCL_BUILTINS = frozenset((
    # work-items, synchronisation, async copies
    "get_work_dim", "get_global_size", "get_global_id", "get_local_size", "get_local_id",
    "get_num_groups", "get_group_id", "get_global_offset", "barrier", "mem_fence",
    "read_mem_fence", "write_mem_fence", "async_work_group_copy",
    "async_work_group_strided_copy", "wait_group_events", "prefetch",
    # math
    "acos", "acosh", "acospi", "asin", "asinh", "asinpi", "atan", "atan2", "atanh", "atanpi",
    "atan2pi", "cbrt", "ceil", "copysign", "cos", "cosh", "cospi", "erfc", "erf", "exp", "exp2",
    "exp10", "expm1", "fabs", "fdim", "floor", "fma", "fmax", "fmin", "fmod", "fract", "frexp",
    "hypot", "ilogb", "ldexp", "lgamma", "lgamma_r", "log", "log2", "log10", "log1p", "logb",
    "mad", "maxmag", "minmag", "modf", "nan", "nextafter", "pow", "pown", "powr", "remainder",
    "remquo", "rint", "rootn", "round", "rsqrt", "sin", "sincos", "sinh", "sinpi", "sqrt", "tan",
    "tanh", "tanpi", "tgamma", "trunc",
    *(f"{p}_{f}" for p in ("half", "native") for f in (
        "cos", "divide", "exp", "exp2", "exp10", "log", "log2", "log10", "powr", "recip", "rsqrt",
        "sin", "sqrt", "tan")),
    # integer, common, geometric, relational
    "abs", "abs_diff", "add_sat", "hadd", "rhadd", "clamp", "clz", "mad_hi", "mad_sat", "max",
    "min", "mul_hi", "rotate", "sub_sat", "upsample", "popcount", "mad24", "mul24", "degrees",
    "mix", "radians", "step", "smoothstep", "sign", "cross", "dot", "distance", "length",
    "normalize", "fast_distance", "fast_length", "fast_normalize", "isequal", "isnotequal",
    "isgreater", "isgreaterequal", "isless", "islessequal", "islessgreater", "isfinite", "isinf",
    "isnan", "isnormal", "isordered", "isunordered", "signbit", "any", "all", "bitselect",
    "select", "shuffle", "shuffle2", "vec_step", "printf",
    # vector data, atomics, images
    *(f"{op}{n}" for op in ("vload", "vstore", "vload_half", "vloada_half") for n in ("", 2, 3, 4, 8, 16)),
    *(f"{op}{n}{r}" for op in ("vstore_half", "vstorea_half") for n in ("", 2, 3, 4, 8, 16)
      for r in ("", "_rte", "_rtz", "_rtp", "_rtn")),
    *(f"{p}_{op}" for p in ("atomic", "atom") for op in (
        "add", "sub", "xchg", "inc", "dec", "cmpxchg", "min", "max", "and", "or", "xor")),
    "read_imagef", "read_imagei", "read_imageui", "write_imagef", "write_imagei",
    "write_imageui", "get_image_width", "get_image_height", "get_image_depth", "get_image_dim",
    "get_image_channel_data_type", "get_image_channel_order", "get_image_array_size",
))
OPENCL_CONVERSION = (r"(convert|as)_(char|uchar|short|ushort|int|uint|long|ulong|float|double|half)"
                     r"(2|3|4|8|16)?(_sat)?(_rte|_rtz|_rtp|_rtn)?")

#: <limits.h>/<stdint.h> limits OpenCL C lacks -> the OpenCL C limit with the same value (long
#: long and int64_t are 64-bit in CUDA, like OpenCL's long; size_t is 64-bit in CUDA)
OPENCL_LIMITS = {
    "LLONG_MAX": "LONG_MAX", "LLONG_MIN": "LONG_MIN", "ULLONG_MAX": "ULONG_MAX",
    "INT8_MIN": "SCHAR_MIN", "INT8_MAX": "SCHAR_MAX", "UINT8_MAX": "UCHAR_MAX",
    "INT16_MIN": "SHRT_MIN", "INT16_MAX": "SHRT_MAX", "UINT16_MAX": "USHRT_MAX",
    "INT32_MIN": "INT_MIN", "INT32_MAX": "INT_MAX", "UINT32_MAX": "UINT_MAX",
    "INT64_MIN": "LONG_MIN", "INT64_MAX": "LONG_MAX", "UINT64_MAX": "ULONG_MAX",
    "SIZE_MAX": "ULONG_MAX",
}

#: macros CUDA's compilers define and other compilers do not: a preprocessor condition on one
#: takes another branch off nvcc -> the HIP spelling to check, for a warning
CUDA_COMPILER_MACROS = {
    "__CUDA_ARCH__": "__HIP_DEVICE_COMPILE__ (device code) and the __HIP_ARCH_HAS_*__ / __gfx*__ "
                     "feature macros (there are no compute capabilities on AMD GPUs)",
    "__CUDACC__": "__HIPCC__", "__NVCC__": "__HIPCC__", "__CUDACC_RTC__": "__HIPCC_RTC__",
    "__CUDA_ARCH_LIST__": "__HIP_ARCH_HAS_*__ feature macros",
    "__CUDACC_VER_MAJOR__": "HIP_VERSION_MAJOR", "__CUDACC_VER_MINOR__": "HIP_VERSION_MINOR",
    "CUDART_VERSION": "HIP_VERSION", "__CUDA_API_VERSION": "HIP_VERSION",
}

#: CUDA scalar type spellings -> OpenCL C (OpenCL fixes the widths: long is 64-bit everywhere)
OPENCL_TYPES = {
    "int32_t": "int", "uint32_t": "uint", "int64_t": "long", "uint64_t": "ulong",
    "int16_t": "short", "uint16_t": "ushort", "int8_t": "char", "uint8_t": "uchar",
    "unsigned int": "uint", "unsigned": "uint", "signed int": "int", "long long": "long",
    "long long int": "long", "unsigned long long": "ulong", "unsigned long long int": "ulong",
    "unsigned long": "ulong", "long int": "long", "unsigned short": "ushort", "unsigned char": "uchar",
    "signed char": "char", "__half": "half",
}

#: vector types both languages name alike (CUDA's are structs with .x .y .z .w; so are OpenCL's
#: component selectors). 3-component types are excluded: 12 bytes in CUDA, 16 in OpenCL.
VECTOR_BASES = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float", "double")
VECTOR_TYPES = frozenset(f"{b}{n}" for b in VECTOR_BASES for n in (2, 4))
VECTOR3_TYPES = frozenset(f"{b}3" for b in VECTOR_BASES)

#: threadIdx.x etc. -> the OpenCL query; CUDA's are unsigned int, OpenCL's size_t, so the
#: translation casts to uint to keep CUDA's 32-bit unsigned arithmetic
OPENCL_INDEX = {"threadIdx": "get_local_id", "blockIdx": "get_group_id",
                "blockDim": "get_local_size", "gridDim": "get_num_groups"}
AXES = {"x": 0, "y": 1, "z": 2}

#: headers whose declarations OpenCL C has built in
OPENCL_DROP_INCLUDES = frozenset(("cuda_runtime.h", "cuda.h", "math.h", "cmath", "stdint.h",
                                  "cstdint", "cuda_fp16.h", "cuda_bf16.h", "float.h", "cfloat",
                                  "math_constants.h",
                                  "device_launch_parameters.h", "limits.h", "climits"))

#: host-side library headers: in an OpenCL C program they have nothing to declare
HOST_INCLUDES = frozenset(("stdio.h", "cstdio", "stdlib.h", "cstdlib", "string.h", "cstring",
                           "assert.h", "cassert", "iostream", "vector", "string", "algorithm",
                           "memory", "chrono", "numeric", "random", "time.h", "ctime",
                           "sys/time.h", "unistd.h", "iomanip", "sstream", "fstream", "functional",
                           "map", "unordered_map", "tuple", "utility", "limits", "cuda_runtime_api.h",
                           "helper_cuda.h", "helper_functions.h", "helper_string.h", "helper_image.h",
                           "helper_timer.h", "omp.h", "cuda_profiler_api.h", "nvToolsExt.h",
                           "stdexcept", "typeinfo", "exception", "iterator", "set", "list",
                           "deque", "queue", "stack", "thread", "mutex", "ostream", "istream",
                           "unordered_set", "errno.h", "cerrno", "getopt.h", "sys/stat.h",
                           "nvtx3/nvToolsExt.h",
                           # the CUDA libraries whose API is the host's only (no device calls)
                           "cublas_v2.h", "cublas.h", "cublasLt.h", "cufft.h", "cusparse.h",
                           "cusolverDn.h", "nccl.h"))
#: host-side library header folders (PyTorch extensions, pybind11): device code never sees them
HOST_INCLUDE_DIRS = ("torch/", "ATen/", "c10/", "pybind11/")

_NO_WARPS = "warp-level primitives have no OpenCL 1.2 equivalent (no subgroups on the target)"
#: the rewrite depends on what the warp primitive is used for
_SHUFFLE = (_NO_WARPS, "a __shared__ array reduced with a tree of __syncthreads() steps")
_BALLOT = (_NO_WARPS, "for stream compaction, an exclusive prefix scan of the predicate flags in "
           "a __shared__ array (each item's output slot), __syncthreads() between steps; where "
           "order does not matter, atomicAdd on a counter")
_VOTE = (_NO_WARPS, "a __shared__ int flag set with atomicOr (any) or atomicAnd (all), then "
         "__syncthreads()")
_SYNCWARP = (_NO_WARPS, "__syncthreads() (every work-item of the block must reach it)")
HALF_MATH = ("half arithmetic needs cl_khr_fp16, which the OpenCL devices here lack",
              "load with __half2float(p[i]), compute in float, store with p[i] = __float2half(v)")
BF16_MATH = ("OpenCL C 1.2 has no bfloat16 type: accel port keeps bfloat16 in memory as its 16 "
             "bits and converts at the loads and stores",
             "load with __bfloat162float(p[i]), compute in float, store with "
             "p[i] = __float2bfloat16(v)")

#: CUDA names with no faithful OpenCL C 1.2 translation: name -> (why, suggested rewrite)
OPENCL_UNSUPPORTED = {
    **{n: _SHUFFLE for n in (
        "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__shfl",
        "__shfl_up", "__shfl_down", "__shfl_xor", "__reduce_add_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync")},
    **{n: _BALLOT for n in ("__ballot_sync", "__ballot", "__activemask", "__lanemask_lt",
                            "__match_any_sync", "__match_all_sync")},
    **{n: _VOTE for n in ("__any_sync", "__all_sync", "__any", "__all")},
    "__syncwarp": _SYNCWARP,
    **{n: HALF_MATH for n in (
        "__hadd", "__hsub", "__hmul", "__hdiv", "__hfma", "__hmax", "__hmin", "__hneg", "__habs",
        "__hadd2", "__hmul2", "__hfma2", "__float2half2_rn", "__halves2half2", "hexp", "hsqrt")},
    "printf": ("OpenCL's printf differs in format rules and buffering, and is not "
               "guaranteed to reach the caller", "write debug values to an output buffer"),
    "assert": ("OpenCL C has no device-side assert", "record the failure in an output flag buffer"),
    "malloc": ("OpenCL C has no device heap", "allocate the buffer on the host and pass it in"),
    "free": ("OpenCL C has no device heap", "allocate the buffer on the host and pass it in"),
    "clock": ("OpenCL C has no cycle counter", "time the launch from the host"),
    "clock64": ("OpenCL C has no cycle counter", "time the launch from the host"),
    "__nanosleep": ("OpenCL C cannot sleep a work-item", "remove the back-off"),
    "__threadfence": ("OpenCL 1.2 gives no memory ordering between work-groups",
                      "split the kernel at this point into two launches"),
    "__threadfence_system": ("OpenCL 1.2 gives no ordering with the host during a launch",
                             "split the kernel at this point into two launches"),
    "__syncthreads_count": ("OpenCL 1.2 barriers do not reduce a predicate",
                            "count with atomic_add on a __shared__ int, then __syncthreads()"),
    "__syncthreads_and": ("OpenCL 1.2 barriers do not reduce a predicate",
                          "combine with atomic_and on a __shared__ int, then __syncthreads()"),
    "__syncthreads_or": ("OpenCL 1.2 barriers do not reduce a predicate",
                         "combine with atomic_or on a __shared__ int, then __syncthreads()"),
    **{n: ("texture and surface objects have no OpenCL C 1.2 counterpart through accel's buffers",
           "read the array directly with an index (p[y * width + x])") for n in (
        "tex1Dfetch", "tex1D", "tex2D", "tex3D", "tex1DLayered", "tex2DLayered", "texCubemap",
        "surf1Dread", "surf2Dread", "surf1Dwrite", "surf2Dwrite", "cudaTextureObject_t",
        "cudaSurfaceObject_t", "texture")},
    **{n: BF16_MATH for n in (
        "__nv_bfloat162", "nv_bfloat162", "__hadd_rn", "__floats2bfloat162_rn",
        "__bfloat162bfloat162", "__low2bfloat16", "__high2bfloat16")},
}

#: the 16-bit float types OpenCL C 1.2 (no cl_khr_fp16) keeps in memory only, by CUDA spelling:
#: their normalised name (the translator's, never an integer type, so arithmetic on them is
#: refused rather than done in integers), the conversions that read them from memory and
#: those that write them, and the refusal for anything else
STORAGE_FLOATS = {"__half": "half", "half": "half", "__nv_bfloat16": "bfloat16",
                  "nv_bfloat16": "bfloat16", "__half2": "half2", "half2": "half2"}
STORAGE_LOADS = {"half": frozenset(("__half2float",)), "bfloat16": frozenset(("__bfloat162float",)),
                 "half2": frozenset(("__half22float2", "__low2float", "__high2float"))}
STORAGE_STORES = {"half": frozenset(("__float2half", "__float2half_rn")),
                  "bfloat16": frozenset(("__float2bfloat16", "__float2bfloat16_rn")),
                  "half2": frozenset(("__float22half2_rn", "__floats2half2_rn"))}
#: the loads that read part of the element's float value (a half2 read as float2), and the
#: stores whose value is built from several floats: the OpenCL of their value
STORAGE_LOAD_PARTS = {"__low2float": "({}).x", "__high2float": "({}).y"}
STORAGE_STORE_VALUES = {"__floats2half2_rn": "(float2)((float)({}), (float)({}))",
                        "__float22half2_rn": "({})"}
HALF2_MATH = ("half2 arithmetic needs cl_khr_fp16, which the OpenCL devices here lack; accel port "
              "keeps half2 in memory (pointers, struct and union members) as its bits",
              "load with __half22float2(p[i]) (or __low2float/__high2float), compute in float2, "
              "store with p[i] = __floats2half2_rn(a, b)")
STORAGE_MATH = {"half": HALF_MATH, "bfloat16": BF16_MATH, "half2": HALF2_MATH}

#: headers with no OpenCL C counterpart, and what to do instead of each
OPENCL_INCLUDE_WHY = {
    "cooperative_groups.h": ("cooperative groups have no OpenCL 1.2 form", "__syncthreads() for "
                             "block groups; split grid-wide syncs into separate launches"),
    "mma.h": ("wmma fragments map to NVIDIA tensor cores only", "a tiled __shared__ matmul (or "
              "accel.matmul)"),
    "cub/": ("CUB's block and warp primitives are C++ templates with no OpenCL C form",
             "write the __shared__ reduction or scan out with __syncthreads() steps"),
    "thrust/": ("Thrust is a host-side C++ template library", "accel ops, or a kernel written out"),
    "curand_kernel.h": ("cuRAND's device generators have no OpenCL C counterpart",
                        "a counter-based hash (e.g. of the global index) written in the file"),
}

#: C++ namespaces whose use means an untranslatable feature
NAMESPACE_FEATURES = {
    "cooperative_groups": ("cooperative groups",
                           "grid/warp groups have no OpenCL 1.2 form", "__syncthreads() for "
                           "block groups; split grid-wide syncs into separate launches"),
    "cg": ("cooperative groups", "grid/warp groups have no OpenCL 1.2 form",
           "__syncthreads() for block groups; split grid-wide syncs into separate launches"),
    "wmma": ("tensor-core intrinsics", "wmma fragments map to NVIDIA tensor cores only",
             "a tiled __shared__ matmul (or accel.matmul)"),
    "nvcuda": ("tensor-core intrinsics", "wmma fragments map to NVIDIA tensor cores only",
               "a tiled __shared__ matmul (or accel.matmul)"),
}

# -- HIP --------------------------------------------------------------------------------------------
#: CUDA runtime API names -> the HIP name with the same signature and meaning, as ROCm's
#: hip_runtime_api.h and driver_types.h spell them: mostly the prefix swapped, but not always
#: (cudaDeviceProp is hipDeviceProp_t, cudaDevAttr* are hipDeviceAttribute*)
HIP_RUNTIME = {
    # ROCm's bfloat16 (hip/hip_bf16.h) has CUDA's conversions under the same names
    "__nv_bfloat16": "__hip_bfloat16", "nv_bfloat16": "__hip_bfloat16",
    "__nv_bfloat162": "__hip_bfloat162", "nv_bfloat162": "__hip_bfloat162",
    **{name: "hip" + name[4:] for name in (
        "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
        "cudaMallocHost", "cudaFreeHost", "cudaMallocManaged", "cudaHostAlloc",
        "cudaDeviceSynchronize", "cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString",
        "cudaGetErrorName", "cudaSetDevice", "cudaGetDevice", "cudaGetDeviceCount",
        "cudaGetDeviceProperties", "cudaDeviceReset", "cudaError_t", "cudaSuccess",
        "cudaStream_t", "cudaStreamCreate", "cudaStreamDestroy", "cudaStreamSynchronize",
        "cudaEvent_t", "cudaEventCreate", "cudaEventDestroy", "cudaEventRecord",
        "cudaEventSynchronize", "cudaEventElapsedTime", "cudaMemcpyHostToDevice",
        "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice", "cudaMemcpyHostToHost",
        "cudaMemcpyDefault", "cudaMemcpyKind", "cudaFuncSetAttribute",
        "cudaFuncAttributeMaxDynamicSharedMemorySize", "cudaDeviceGetAttribute",
        "cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaMemGetInfo", "cudaErrorInvalidValue", "cudaStreamDefault",
        "cudaStreamNonBlocking", "cudaStreamCreateWithFlags", "cudaHostAllocDefault",
        "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbolAsync", "cudaMemcpy2D",
        "cudaMemcpy2DAsync", "cudaMallocPitch", "cudaMemcpyPeer", "cudaMemcpyPeerAsync",
        "cudaStreamWaitEvent", "cudaStreamQuery", "cudaEventQuery", "cudaEventCreateWithFlags",
        "cudaEventDisableTiming", "cudaEventBlockingSync", "cudaErrorNotReady",
        "cudaErrorMemoryAllocation", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
        "cudaOccupancyMaxPotentialBlockSize", "cudaFuncGetAttributes", "cudaFuncAttributes",
        "cudaPointerGetAttributes", "cudaSetDeviceFlags", "cudaDeviceScheduleBlockingSync",
        "cudaHostRegister", "cudaHostUnregister", "cudaHostRegisterDefault",
        "cudaHostGetDevicePointer", "cudaMallocAsync", "cudaFreeAsync", "cudaMemPrefetchAsync",
        "cudaDeviceCanAccessPeer", "cudaDeviceEnablePeerAccess", "cudaGetSymbolAddress",
        "cudaLaunchHostFunc", "cudaStreamCreateWithPriority", "cudaDeviceGetStreamPriorityRange")},
    "cudaDeviceProp": "hipDeviceProp_t", "cudaDeviceAttr": "hipDeviceAttribute_t",
    "cudaPointerAttributes": "hipPointerAttribute_t",
    # device attributes (cudaDeviceGetAttribute): the ones whose meaning carries over to AMD GPUs
    # (not the compute capability, which HIP reports as the gfx version)
    **{f"cudaDevAttr{cuda}": f"hipDeviceAttribute{hip}" for cuda, hip in (
        ("MaxThreadsPerBlock", "MaxThreadsPerBlock"), ("MaxBlockDimX", "MaxBlockDimX"),
        ("MaxBlockDimY", "MaxBlockDimY"), ("MaxBlockDimZ", "MaxBlockDimZ"),
        ("MaxGridDimX", "MaxGridDimX"), ("MaxGridDimY", "MaxGridDimY"),
        ("MaxGridDimZ", "MaxGridDimZ"), ("MaxSharedMemoryPerBlock", "MaxSharedMemoryPerBlock"),
        ("MaxSharedMemoryPerBlockOptin", "SharedMemPerBlockOptin"),
        ("MaxSharedMemoryPerMultiprocessor", "MaxSharedMemoryPerMultiprocessor"),
        ("TotalConstantMemory", "TotalConstantMemory"), ("WarpSize", "WarpSize"),
        ("MaxRegistersPerBlock", "MaxRegistersPerBlock"), ("ClockRate", "ClockRate"),
        ("MultiProcessorCount", "MultiprocessorCount"), ("MemoryClockRate", "MemoryClockRate"),
        ("GlobalMemoryBusWidth", "MemoryBusWidth"), ("L2CacheSize", "L2CacheSize"),
        ("MaxThreadsPerMultiProcessor", "MaxThreadsPerMultiProcessor"),
        ("ManagedMemory", "ManagedMemory"), ("ConcurrentManagedAccess", "ConcurrentManagedAccess"))},
}
#: runtime names translated whose value differs on AMD GPUs
HIP_RUNTIME_WARNINGS = {
    "cudaDevAttrWarpSize": "HIP reports 64 on CDNA GPUs, where the translated device code keeps "
                           "CUDA's 32-lane warps (shuffles of width 32, warpSize 32)",
}

#: CUDA libraries whose ROCm counterpart mirrors the API name for name, only the prefix swapped:
#: CUDA prefix -> (HIP prefix, library, ROCm library, the names verified to take the same
#: arguments and mean the same). A name with the prefix outside the set is refused, never passed
#: through. (hipRAND's generators give the same distributions as cuRAND's, not the same bits.)
HIP_LIBRARIES = {
    "cublas": ("hipblas", "cuBLAS", "hipBLAS", frozenset((
        "cublasHandle_t", "cublasStatus_t", "cublasOperation_t", "cublasCreate", "cublasDestroy",
        "cublasSetStream", "cublasGetStream", "cublasSetPointerMode", "cublasPointerMode_t",
        "cublasSgemm", "cublasDgemm", "cublasSgemv", "cublasDgemv", "cublasSaxpy", "cublasDaxpy",
        "cublasSdot", "cublasDdot", "cublasSscal", "cublasDscal", "cublasSnrm2", "cublasDnrm2",
        "cublasScopy", "cublasDcopy", "cublasIsamax", "cublasSgemmBatched", "cublasDgemmBatched",
        "cublasSgemmStridedBatched", "cublasDgemmStridedBatched", "cublasSgeam", "cublasDgeam",
        "cublasStrsm", "cublasDtrsm", "cublasSger", "cublasDger", "cublasSsyrk", "cublasDsyrk"))),
    "CUBLAS_": ("HIPBLAS_", "cuBLAS", "hipBLAS", frozenset((
        "CUBLAS_STATUS_SUCCESS", "CUBLAS_STATUS_NOT_INITIALIZED", "CUBLAS_STATUS_ALLOC_FAILED",
        "CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_EXECUTION_FAILED", "CUBLAS_OP_N",
        "CUBLAS_OP_T", "CUBLAS_OP_C", "CUBLAS_POINTER_MODE_HOST", "CUBLAS_POINTER_MODE_DEVICE",
        "CUBLAS_FILL_MODE_UPPER", "CUBLAS_FILL_MODE_LOWER", "CUBLAS_SIDE_LEFT", "CUBLAS_SIDE_RIGHT",
        "CUBLAS_DIAG_UNIT", "CUBLAS_DIAG_NON_UNIT"))),
    "curand": ("hiprand", "cuRAND", "hipRAND", frozenset((
        "curandGenerator_t", "curandStatus_t", "curandRngType_t", "curandCreateGenerator",
        "curandDestroyGenerator", "curandSetPseudoRandomGeneratorSeed", "curandSetStream",
        "curandGenerateUniform", "curandGenerateUniformDouble", "curandGenerateNormal",
        "curandGenerateNormalDouble", "curandGenerate", "curandState", "curandState_t",
        "curandStateXORWOW_t", "curandStatePhilox4_32_10_t", "curand_init", "curand",
        "curand_uniform", "curand_normal", "curand_uniform_double", "curand_normal_double",
        "curand_uniform4", "curand_normal4", "curand_poisson"))),
    "CURAND_": ("HIPRAND_", "cuRAND", "hipRAND", frozenset((
        "CURAND_STATUS_SUCCESS", "CURAND_RNG_PSEUDO_DEFAULT", "CURAND_RNG_PSEUDO_XORWOW",
        "CURAND_RNG_PSEUDO_PHILOX4_32_10", "CURAND_RNG_PSEUDO_MRG32K3A", "CURAND_RNG_QUASI_SOBOL32",
        "CURAND_RNG_QUASI_DEFAULT"))),
}

#: prefixes of CUDA libraries with no table here (their ROCm counterparts differ in API): any
#: name with one is refused, never passed through
HIP_UNMAPPED_LIBRARIES = {"cufft": "cuFFT", "CUFFT_": "cuFFT", "cusparse": "cuSPARSE",
                          "CUSPARSE_": "cuSPARSE", "cusolver": "cuSOLVER", "CUSOLVER_": "cuSOLVER",
                          "cudnn": "cuDNN", "CUDNN_": "cuDNN", "nccl": "NCCL", "cutensor": "cuTENSOR"}

#: headers: CUDA -> HIP (None: has no HIP counterpart)
HIP_INCLUDES = {
    "cuda_runtime.h": "hip/hip_runtime.h", "cuda.h": "hip/hip_runtime.h",
    "cuda_runtime_api.h": "hip/hip_runtime_api.h", "cuda_fp16.h": "hip/hip_fp16.h",
    "cuda_bf16.h": "hip/hip_bf16.h", "cooperative_groups.h": "hip/hip_cooperative_groups.h",
    "device_launch_parameters.h": "hip/hip_runtime.h",
    "cublas_v2.h": "hipblas/hipblas.h", "curand.h": "hiprand/hiprand.h",
    "curand_kernel.h": "hiprand/hiprand_kernel.h",
}

#: warp shuffles: HIP (ROCm 5) spells them without _sync and without the mask
HIP_SHUFFLES = {"__shfl_sync": "__shfl", "__shfl_up_sync": "__shfl_up",
                "__shfl_down_sync": "__shfl_down", "__shfl_xor_sync": "__shfl_xor"}

#: warp votes: CUDA's return a 32-bit mask over a 32-lane warp, HIP's a 64-bit one over the
#: wavefront (64 lanes on CDNA)
HIP_WARP_VOTES = frozenset(("__ballot_sync", "__any_sync", "__all_sync", "__activemask",
                            "__match_any_sync", "__match_all_sync", "__reduce_add_sync",
                            "__lanemask_lt"))

HIP_UNSUPPORTED = {
    "wmma": ("tensor-core intrinsics", "nvcuda::wmma has no HIP spelling; AMD's matrix cores use "
             "rocWMMA with different fragment shapes", "rocWMMA fragments, or accel.matmul"),
    "nvcuda": ("tensor-core intrinsics", "nvcuda::wmma has no HIP spelling; AMD's matrix cores "
               "use rocWMMA with different fragment shapes", "rocWMMA fragments, or accel.matmul"),
}
