"""CUDA C++ -> HIP: hipify-style renames of the runtime API and headers, plus the one semantic
difference that matters for device code: the warp width.

CUDA warps have 32 lanes; AMD wavefronts have 64 on CDNA (gfx9: MI100-MI300) and 32 on RDNA.
The translation keeps CUDA's 32-lane model on both: shuffles get an explicit width of 32 (HIP
shuffles then act within each 32-lane half of a wavefront) and ``warpSize`` becomes 32, so lane
arithmetic (``& 31``, ``/ 32``) stays consistent with them. Warp votes return a mask over the
whole wavefront, which no rename makes 32 bits wide, so they are refused.
"""
from __future__ import annotations

from dataclasses import replace

from accel.kernels.port import tables as T
from accel.kernels.port.symbols import declarator_parts
from accel.kernels.port.syntax import Rewriter, parse, text, walk

#: hiprtc (runtime compilation) builds in these declarations and fails on the headers
#: themselves, hipcc needs the headers: the translation guards them so both compile it
_RTC_BUILTIN = ("hip/hip_runtime.h", "hip/hip_fp16.h", "math.h", "cmath", "stdint.h", "cstdint", "stdio.h", "float.h",
                "cfloat", "limits.h", "climits", "stddef.h", "cstddef")
_RTC_GUARD = "#ifndef __HIPCC_RTC__\n{}\n#endif"
#: <stdint.h> types ROCm 5's hiprtc does not declare (it has the 32- and 64-bit ones): defined
#: for hiprtc only, as the compiler's own macros spell them (a later hiprtc declaring the same
#: type again is no error in C++)
_RTC_INTS = {"int8_t": "__INT8_TYPE__", "uint8_t": "__UINT8_TYPE__", "int16_t": "__INT16_TYPE__",
             "uint16_t": "__UINT16_TYPE__"}
#: math.h macros hiprtc lacks (it has no math.h): the compiler builtins they expand to
_MATH_MACROS = {"INFINITY": "__builtin_huge_valf()", "NAN": "__builtin_nanf(\"\")",
                "HUGE_VALF": "__builtin_huge_valf()"}
_CUDA_LIBS = ("cublas", "cufft", "curand", "cusparse", "cusolver", "cudnn", "nccl", "cub/", "thrust/",
              "mma.h", "cuda/")
_WARP_INTS = {"&": "31", "%": "32", "/": "32"}
_FULL_MASKS = ("0xffffffff", "0xffffffffu", "0xFFFFFFFF", "0xFFFFFFFFu", "0xffffffffU", "0xFFFFFFFFU")


def translate_hip(rw: Rewriter, root) -> str:
    # the file's own macros (CUBLAS_CHECK) are its names, not CUDA's: never renamed
    own = frozenset(text(n.child_by_field_name("name")) for n in walk(root)
                    if n.type in ("preproc_def", "preproc_function_def"))
    cg = {"cooperative_groups"} | {text(n.named_children[0]) for n in walk(root)
                                   if n.type == "namespace_alias_definition"
                                   and text(n.named_children[-1]) == "cooperative_groups"}
    for n in walk(root):  # cg::reduce: absent from the ROCm this is checked against
        if n.type == "qualified_identifier" and (sc := n.child_by_field_name("scope")) is not None \
                and text(sc) in cg and text(n.child_by_field_name("name")).split("<")[0] in _CG_MISSING:
            rw.error(n, f"cooperative groups ({text(n)})", _CG_WHY, "a __shared__ tree reduction, "
                     "or a loop of __shfl_xor steps")
    has_runtime_include, has_device_code = _visit(rw, root, own)
    head = ("" if has_runtime_include or not has_device_code
            else _RTC_GUARD.format("#include <hip/hip_runtime.h>") + "\n")
    ints = sorted({text(n) for n in walk(root) if n.type in ("primitive_type", "type_identifier")
                   and text(n) in _RTC_INTS})
    if ints:
        head += "#ifdef __HIPCC_RTC__\n" + "".join(f"typedef {_RTC_INTS[t]} {t};\n" for t in ints) + "#endif\n"
    if any(n.type == "null" and text(n) == "NULL" for n in walk(root)):
        # hiprtc has no <stddef.h>: NULL as clang's C++ headers define it
        head += "#if defined(__HIPCC_RTC__) && !defined(NULL)\n#define NULL __null\n#endif\n"
    return head + rw.render()


def _visit(rw: Rewriter, root, own: frozenset = frozenset()) -> tuple[bool, bool]:
    """Record the rewrites of every node under ``root``; (has a hip_runtime include, has device
    code). Syntax errors are translate()'s to report (a macro body need not be complete
    syntax, so its own are not)."""
    has_runtime_include = has_device_code = False
    for node in walk(root):
        kind = node.type
        if kind == "preproc_include":
            has_runtime_include |= _include(rw, node)
        elif kind == "function_definition":
            has_device_code |= any(c.type in ("__global__", "__device__") for c in node.children)
        elif kind in ("identifier", "type_identifier"):
            if text(node) not in own:
                _name(rw, node)
        elif kind == "kernel_call_syntax" and _in_device_code(node):
            rw.error(node, "dynamic parallelism", "HIP has no device-side kernel launch",
                     "launch the child kernel from the host after this one")
        elif kind == "call_expression":
            _call(rw, node)
        elif kind == "binary_expression":
            _lane_arithmetic(rw, node)
        elif kind == "gnu_asm_expression":
            rw.error(node, "inline PTX", "PTX assembly runs on NVIDIA GPUs only",
                     "the C expression the assembly computes (or AMDGCN builtins)")
        elif kind in ("qualified_identifier", "namespace_identifier"):
            ns = text(node).split("::")[0]
            if ns in T.HIP_UNSUPPORTED and (kind == "namespace_identifier" or node.parent.type
                                            != "qualified_identifier"):
                construct, why, rewrite = T.HIP_UNSUPPORTED[ns]
                rw.error(node, construct, why, rewrite)
        elif kind in ("preproc_def", "preproc_function_def"):
            _warp_macro(rw, node)
            _macro_body(rw, node, own)
    return has_runtime_include, has_device_code


#: cooperative-groups names HIP lacks: ROCm's cooperative groups documentation lists no reduce
#: (nor its operators), and ROCm 5.2's headers, which accel's hiprtc checks use, have none
_CG_MISSING = frozenset(("reduce", "plus", "greater", "less", "bit_and", "bit_or", "bit_xor"))
_CG_WHY = ("HIP's cooperative groups have no reduce and no operator objects (not in ROCm 5.x, "
           "whose headers accel port is checked against)")


def _in_device_code(node) -> bool:
    """Whether ``node`` is inside a __global__ or __device__ function."""
    p = node.parent
    while p is not None and p.type != "function_definition":
        p = p.parent
    return p is not None and any(c.type in ("__global__", "__device__") for c in p.children)


def _macro_body(rw: Rewriter, node, own: frozenset = frozenset()) -> None:
    """Macro bodies are text to the parser: parse the body on its own and apply the same
    renames to it (``#define CHECK(x) cudaMalloc(x)`` becomes ``hipMalloc``)."""
    value = node.child_by_field_name("value")
    if value is None:
        return
    sub = Rewriter(value.text, rw.filename)
    _visit(sub, parse(value.text).root_node, own)
    offset = value.start_point.row
    rw.diagnostics.extend(replace(d, line=d.line + offset) for d in sub.diagnostics)
    rendered = sub.render()
    if rendered != text(value):
        rw.replace(value, rendered)


def _include(rw: Rewriter, node) -> bool:
    path = node.child_by_field_name("path")
    header = text(path).strip('<>"')
    target = T.HIP_INCLUDES.get(header, header)
    if header in T.HIP_INCLUDES:
        rw.note(f"#include <{header}>")
    if target in _RTC_BUILTIN:
        rw.replace(node, lambda _i: _RTC_GUARD.format(f"#include <{target}>") + "\n")
        return target == "hip/hip_runtime.h"
    if header in T.HIP_INCLUDES:
        rw.replace(path, f"<{target}>")
        if header == "cuda_bf16.h":
            rw.warn(node, f"#include <{header}>", "ROCm's bfloat16 header and __hip_bfloat16 "
                    "(with __float2bfloat16 and __bfloat162float) arrive with ROCm 6.0; ROCm 5 "
                    "has neither", "build with ROCm 6.0 or later")
        elif header == "cooperative_groups.h":
            rw.warn(node, f"#include <{header}>", "ROCm 5's hiprtc (runtime compilation, what "
                    "accel kernels check uses) fails inside hip_cooperative_groups.h (tested with "
                    "5.2: a redefinition in its vector types); hipcc builds it",
                    "build with hipcc --genco, or check with a later ROCm")
        return False
    if header == "cooperative_groups/reduce.h":
        rw.error(node, f"#include {text(path)}", _CG_WHY, "a __shared__ tree reduction, or a "
                 "loop of __shfl_xor steps")
        return False
    if header.startswith(_CUDA_LIBS):
        rw.error(node, f"#include {text(path)}", "a CUDA library header: the library has a ROCm "
                 "counterpart with its own API (hipBLAS, hipFFT, hipRAND, hipCUB, rocThrust)",
                 "port the library calls to the ROCm library by hand")
    return header == "hip/hip_runtime.h"


def _name(rw: Rewriter, node) -> None:
    name = text(node)
    if name in _MATH_MACROS and node.type == "identifier":
        rw.replace(node, _MATH_MACROS[name])
    elif name in T.HIP_RUNTIME:
        rw.note(name)
        rw.replace(node, T.HIP_RUNTIME[name])
        if name in T.HIP_RUNTIME_WARNINGS:
            rw.warn(node, name, T.HIP_RUNTIME_WARNINGS[name], "check the code that uses the value")
    elif (lib := next((p for p in T.HIP_LIBRARIES if name.startswith(p)), None)) is not None:
        _library_name(rw, node, name, lib)
    elif (lib := next((v for p, v in T.HIP_UNMAPPED_LIBRARIES.items() if name.startswith(p)),
                      None)) is not None:
        rw.error(node, name, f"a {lib} name: accel port maps no {lib} API to ROCm (its ROCm "
                 "counterpart differs in API)", "port the library calls by hand")
    elif name.startswith("cuda") and name[4:5].isupper():
        usual = ("hipDeviceAttribute" + name[len("cudaDevAttr"):] if name.startswith("cudaDevAttr")
                 else "hip" + name[4:])
        rw.error(node, name, "a CUDA runtime name accel port has no verified HIP equivalent for",
                 f"look it up in the HIP runtime API (usually {usual}) and check its semantics")
    elif name in T.CUDA_COMPILER_MACROS and node.type == "identifier":
        rw.note(name)  # kept as it is, with the warning
        rw.warn(node, name, "HIP's compilers (hipcc, hiprtc) do not define it, so code that tests "
                "it takes another branch than under nvcc", f"test {T.CUDA_COMPILER_MACROS[name]}")
    elif name == "warpSize" and node.type == "identifier" and not _declared(node, name):
        rw.note(name)
        rw.replace(node, "32")
        rw.warn(node, "warpSize", "warpSize is 64 on CDNA GPUs; the translation keeps CUDA's "
                "32-lane warps (shuffles use width 32), so warpSize becomes 32",
                "keep it, or rewrite the kernel for 64-lane wavefronts for speed")


#: nodes whose direct children declare names visible to the code nested in them
_SCOPES = frozenset(("translation_unit", "compound_statement", "for_statement", "declaration_list",
                     "linkage_specification", "preproc_if", "preproc_ifdef", "preproc_else",
                     "preproc_elif"))


def _declared(node, name: str) -> bool:
    """Whether ``name`` at ``node`` is the user's own (a parameter, or a variable declared
    before it in an enclosing scope), which shadows CUDA's builtin of that name."""
    scope = node.parent
    while scope is not None:
        if scope.type == "function_definition":
            fdecl = scope.child_by_field_name("declarator")
            while fdecl is not None and fdecl.type != "function_declarator":
                fdecl = fdecl.child_by_field_name("declarator")
            items = fdecl.child_by_field_name("parameters").named_children if fdecl else []
        else:
            items = scope.named_children if scope.type in _SCOPES else []
        for item in items:
            if item.start_byte > node.start_byte:
                break
            if item.type in ("declaration", "parameter_declaration") and any(
                    (n := declarator_parts(d)[0]) is not None and text(n) == name
                    for d in item.children_by_field_name("declarator")):
                return True
        scope = scope.parent
    return False


def _library_name(rw: Rewriter, node, name: str, prefix: str) -> None:
    """A cuBLAS/cuRAND name: the hipBLAS/hipRAND one where the table vouches for it."""
    hip_prefix, lib, rocm, verified = T.HIP_LIBRARIES[prefix]
    if name in verified:
        rw.note(name)
        rw.replace(node, hip_prefix + name[len(prefix):])
        if prefix.lower() == "curand" and node.parent is not None and node.parent.type == "call_expression" \
                and name.startswith(("curandGenerate", "curand_")) and name != "curand_init":
            rw.warn(node, name, f"{rocm}'s generators draw from the same distribution as "
                    f"{lib}'s but not the same sequence", "compare statistics, not values, "
                    "against CUDA runs")
    else:
        rw.error(node, name, f"a {lib} name accel port has no verified {rocm} equivalent for",
                 f"look it up in {rocm} (usually {hip_prefix}{name[len(prefix):]}) and check "
                 "its arguments and semantics")


_HIP_PLAIN_LOADS = frozenset(("__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"))
_HIP_PLAIN_STORES = frozenset(("__stcs", "__stcg", "__stwb", "__stwt"))


def _call(rw: Rewriter, node) -> None:
    callee = node.child_by_field_name("function")
    name = text(callee)
    args = [a for a in node.child_by_field_name("arguments").named_children if a.type != "comment"]
    if name in T.HIP_SHUFFLES and len(args) in (3, 4):
        rw.note(name)
        mask, rest = args[0], args[1:]
        width = rest[2] if len(rest) == 3 else None
        rw.replace(node, lambda _i: f"{T.HIP_SHUFFLES[name]}({rw.render(rest[0])}, "
                                    f"{rw.render(rest[1])}, {rw.render(width) if width else '32'})")
        what = "a 32-wide mask" if text(mask) in _FULL_MASKS else f"the mask {text(mask)}"
        rw.warn(node, f"{name} ({what})", "HIP shuffles take no mask and act across the "
                "wavefront (64 lanes on CDNA); translated with width 32 so each 32-lane half "
                "shuffles like a CUDA warp", "keep it; lanes named by the mask must all reach the call")
    elif name in T.HIP_WARP_VOTES:
        rw.error(node, name, "HIP's warp votes return a 64-bit mask over the whole wavefront "
                 "(64 lanes on CDNA), where CUDA code expects 32 bits over 32 lanes",
                 "__ballot(pred) with 64-bit masks and lane arithmetic by warpSize, or a "
                 "__shared__ reduction")
    elif name == "__syncwarp":
        rw.error(node, name, "HIP (ROCm 5) has no __syncwarp", "__syncthreads(), or rely on "
                 "wavefront lockstep only where the HIP docs guarantee it")
    elif name in _HIP_PLAIN_LOADS and len(args) == 1:
        # ROCm declares these cache hints for a few vector types only; a plain access
        # computes the same value for every type
        rw.note(name)
        rw.replace(node, lambda _i: f"(*({rw.render(args[0])}))")
    elif name in _HIP_PLAIN_STORES and len(args) == 2:
        rw.note(name)
        rw.replace(node, lambda _i: f"(*({rw.render(args[0])}) = ({rw.render(args[1])}))")
    elif name.startswith("__nv_") or name.startswith("__cvta"):
        rw.error(node, name, "an NVIDIA-only intrinsic", "the plain C expression it computes")


def _lane_arithmetic(rw: Rewriter, node) -> None:
    """``threadIdx.x & 31``, ``% 32``, ``/ 32``: lane/warp arithmetic sized for 32 lanes."""
    op = text(node.child_by_field_name("operator"))
    right = node.child_by_field_name("right")
    if _WARP_INTS.get(op) != text(right):
        return
    left = node.child_by_field_name("left")
    if any(n.type == "identifier" and text(n) == "threadIdx" for n in walk(left)):
        rw.note(f"{op} {text(right)}")
        rw.warn(node, f"{op} {text(right)}", "lane arithmetic sized for 32-lane warps; consistent "
                "with the 32-lane translation, but a CDNA wavefront holds two such warps",
                "keep it with the 32-wide translation; use warpSize throughout for native wavefronts")


def _warp_macro(rw: Rewriter, node) -> None:
    name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
    if value is not None and "WARP" in text(name).upper() and text(value).strip() == "32":
        rw.note(f"#define {text(name)} 32")
        rw.warn(node, f"#define {text(name)} 32", "a warp-size constant: CDNA wavefronts have 64 "
                "lanes", "keep 32 with the 32-lane translation (shuffles use width 32)")
