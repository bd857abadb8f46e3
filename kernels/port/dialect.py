"""CUDA C++ -> accel's dialect: one source that builds as OpenCL C, CUDA and HIP against the
portability header kernels/accel.h (which the backends prepend).

The analysis is the OpenCL translator's (OpenCL's rules bind, being one of the targets); only
the spelling differs: address spaces, kernel and index queries become the header's macros, and
CUDA's own names for math, atomics and loads stay, defined for OpenCL by a prologue the
translation carries, so the CUDA and HIP builds see exactly the code they were given.
"""
from __future__ import annotations

import re

from accel.kernels.port import tables as T
from accel.kernels.port.opencl import OpenCLTranslator, Spelling

DIALECT = Spelling(
    kernel="KERNEL", device="DEVICE", forceinline="", inlined="", restrict="RESTRICT",
    # LOCAL is __shared__ on CUDA: right for arrays, wrong on a pointer, whose CUDA spelling is
    # plain; the prologue defines the pointer qualifier per dialect
    spaces={"global": "GLOBAL", "local": "ACCEL_PORT_LOCAL_PTR"}, shared="LOCAL",
    # the header's queries return int; CUDA's built-ins are unsigned int, and unsigned they stay
    index="((u32){query}({axis}))",
    queries={"threadIdx": "LOCAL_ID", "blockIdx": "GROUP_ID", "blockDim": "LOCAL_SIZE",
             "gridDim": "NUM_GROUPS"},
    # the header's BARRIER() fences local memory only; __syncthreads orders global memory too
    barrier="ACCEL_PORT_SYNC()", fence="ACCEL_PORT_FENCE()",
    types={"unsigned int": "u32", "unsigned": "u32", "uint32_t": "u32", "int32_t": "i32",
           "int64_t": "i64", "long long": "i64", "long long int": "i64", "uint64_t": "u64",
           "unsigned long long": "u64", "unsigned long long int": "u64", "uint8_t": "u8",
           "unsigned char": "u8", "int8_t": "i8", "signed char": "i8", "uint16_t": "u16",
           "unsigned short": "u16", "int16_t": "i16", "__half": "T_F16", "half": "T_F16",
           "__nv_bfloat16": "T_BF16", "nv_bfloat16": "T_BF16"},
    loads={"half": "LOAD_F16({p}, {i})", "bfloat16": "LOAD_BF16({p}, {i})"},
    stores={"half": "STORE_F16({p}, {i}, {v})", "bfloat16": "STORE_BF16({p}, {i}, {v})"},
    # a struct member holds the bits, as the header's T_F16 / T_BF16 do on every backend
    member_types={"half": "T_F16", "bfloat16": "T_BF16"},
    member_loads={"half": "LOAD_F16(&({e}), 0)", "bfloat16": "LOAD_BF16(&({e}), 0)"},
    member_stores={"half": "STORE_F16(&({e}), 0, {v})", "bfloat16": "STORE_BF16(&({e}), 0, {v})"},
    constants={"INFINITY": "INF_F", "NAN": "NAN_F", "CUDART_INF_F": "INF_F", "CUDART_NAN_F": "NAN_F"},
    rename_calls=False, dynamic_shared=False, name="accel's dialect",
    cast_types={"uint": "u32", "long": "i64", "ulong": "u64", "ushort": "u16", "short": "i16",
                "uchar": "u8", "char": "i8"},
)

_PROLOGUE_HEAD = """#if defined(ACCEL_OPENCL)
#define ACCEL_PORT_SYNC() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define ACCEL_PORT_FENCE() mem_fence(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define ACCEL_PORT_LOCAL_PTR __local
"""
_PROLOGUE_TAIL = """#else
#define ACCEL_PORT_SYNC() __syncthreads()
#define ACCEL_PORT_FENCE() __threadfence_block()
#define ACCEL_PORT_LOCAL_PTR
{native}#endif
"""


def _opencl_definition(name: str) -> str:
    if name in T.OPENCL_MATH:
        return f"#define {name} {T.OPENCL_MATH[name]}"
    if name in T.OPENCL_ATOMICS:
        return f"#define {name} {T.OPENCL_ATOMICS[name]}"
    if name in T.OPENCL_LIMITS:
        return f"#define {name} {T.OPENCL_LIMITS[name]}"
    if name in T.OPENCL_LOADS:
        return f"#define {name}(p) (*(p))"
    if name in T.OPENCL_TYPED:
        template = T.OPENCL_TYPED[name][0]
        params = [f"a{i}" for i in range(len(set(re.findall(r"\{(\d)\}", template))))]
        return f"#define {name}({', '.join(params)}) {template.format(*params)}"
    return f"#define {name}(...) (({name[5:]})(__VA_ARGS__))"  # make_float4 and friends


def translate_dialect(tr: OpenCLTranslator) -> str:
    """The translation in accel's dialect, by ``tr`` (an OpenCLTranslator spelling DIALECT)."""
    body = tr.run()
    # helpers the code calls by name (compare-and-swap atomics, one per address space) are
    # CUDA's own function on the CUDA and HIP side
    native = "".join(f"#define {h} {cuda}\n" for h, cuda in sorted(tr.native_helpers.items()))
    # <limits.h> names: NVRTC has no such header (accel.h gives CUDA and HIP OpenCL's names)
    native += "".join(f"#ifndef {n}\n{_opencl_definition(n)}\n#endif\n"
                      for n in sorted(tr.kept_calls) if n in T.OPENCL_LIMITS)
    defs = tr.helper_text() + "".join(_opencl_definition(n) + "\n" for n in sorted(tr.kept_calls))
    fp64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if tr.uses_double else ""
    return ("// Translated from CUDA by accel port: accel's dialect (kernels/accel.h), for\n"
            "// accel.kernel(source, name) on the opencl, cuda and hip backends.\n"
            + _PROLOGUE_HEAD + fp64 + defs + _PROLOGUE_TAIL.format(native=native) + body)
