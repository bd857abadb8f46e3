"""CUDA's full-mask warp shuffles and cooperative-groups tile reductions, emulated in OpenCL C 1.2.

OpenCL 1.2 has no subgroups (PoCL has no ``cl_khr_subgroup_shuffle``). A full-mask shuffle
requires every lane of its warp to arrive; where the translator proves the call block-uniform
(accel.kernels.port.uniform), every work-item of the work-group arrives, so the shuffle can go through
local memory: each work-item writes its value to its slot, a barrier, each reads the slot of
the lane it asked for. Lanes are CUDA's: 32 per warp, numbered by the linear thread index
(``x + y * dimx + z * dimx * dimy``), and the source lane follows PTX's ``shfl.sync``
definition (``width`` segments, out-of-range lanes keep their own value). The scratch array has
1024 slots, CUDA's largest block.

The helpers are emitted into the translation, so its text is self-contained.
"""
from __future__ import annotations

import re

#: CUDA's shuffles -> PTX mode (idx, up, down, bfly)
SHUFFLES = {"__shfl_sync": 0, "__shfl_up_sync": 1, "__shfl_down_sync": 2, "__shfl_xor_sync": 3}
#: cooperative-groups tile methods -> PTX mode
TILE_SHUFFLES = {"shfl": 0, "shfl_up": 1, "shfl_down": 2, "shfl_xor": 3}
#: the scratch array's name and size (CUDA blocks hold at most 1024 threads)
SCRATCH, SLOTS = "accel_warp", 1024
#: a shuffled value's type -> (its bits as uint, the value back from the bits)
_BITS = {"float": ("as_uint({})", "as_float({})"), "int": ("(uint)({})", "(int)({})"),
         "uint": ("({})", "({})")}
#: the value types shuffles are emulated for (32-bit: one scratch slot each)
VALUE_TYPES = {"float": "float", "int": "int", "short": "int", "char": "int", "bool": "int",
               "uint": "uint", "ushort": "uint", "uchar": "uint"}
#: cg::reduce's operators -> how two values combine (CUDA's own definitions of cg::greater and
#: cg::less compare with <, so a NaN is kept or dropped as CUDA does)
REDUCE_OPS = {"plus": "a + b", "greater": "(a < b) ? b : a", "less": "(b < a) ? b : a",
              "bit_and": "a & b", "bit_or": "a | b", "bit_xor": "a ^ b"}
_INT_ONLY = frozenset(("bit_and", "bit_or", "bit_xor"))

_FULL = re.compile(r"^\(?\s*(0x[fF]{8}[uU]?[lL]{0,2}|~0[uU]?|-1|4294967295[uU]?[lL]{0,2}|"
                   r"~\(?0[uU]?\)?|0x[fF]{8}[uU]?)\s*\)?$")

#: the helpers hold barriers: inlined always, as the translated device functions are (see
#: accel.kernels.port.opencl.Spelling.inlined)
INLINED = "static inline __attribute__((always_inline))"
LINEAR = ("(uint)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + get_local_size(1) "
          "* get_local_id(2)))")


def full_mask(spelled: str, macros: dict[str, str]) -> bool:
    """Whether a mask argument names all 32 lanes (a literal, or a macro defined as one)."""
    s = " ".join(spelled.split())
    for _ in range(4):  # FULL_MASK -> 0xffffffff, through a few macro levels
        if s in macros:
            s = " ".join(macros[s].split())
    return _FULL.match(s) is not None


def value_type(t: str | None) -> str | None:
    return VALUE_TYPES.get(t) if t is not None else None


def shuffle_helper(t: str) -> str:
    return f"accel_shfl_{t}"


def reduce_helper(op: str, t: str) -> str:
    return f"accel_warp_reduce_{op}_{t}"


def reduce_ok(op: str, t: str) -> bool:
    return op in REDUCE_OPS and (op not in _INT_ONLY or t != "float")


def helper_text(needed: set[str]) -> str:
    """OpenCL C definitions of the warp helpers in ``needed``, callees first."""
    if not needed:
        return ""
    shuffles = {n.rsplit("_", 1)[1] for n in needed if n.startswith("accel_shfl_")}
    reduces = [n for n in sorted(needed) if n.startswith("accel_warp_reduce_")]
    shuffles |= {n.rsplit("_", 1)[1] for n in reduces}
    out = ["/* CUDA's 32-lane warp shuffles, through local memory: every work-item of the block "
           "reaches each call (accel port checked the calls are block-uniform). The source lane "
           "is PTX shfl.sync's: mode 0 idx, 1 up, 2 down, 3 xor; a lane outside the width "
           "segment keeps its own value. */\n"
           "static inline uint accel_warp_lane(uint t, int mode, int b, int width) {\n"
           "  int lane = (int)(t & 31u), seg = 32 - width, bv = b & 31;\n"
           "  int lo = lane & seg, hi = mode == 1 ? lo : (lo | (31 & ~seg));\n"
           "  int j = mode == 0 ? (lo | (bv & ~seg)) : mode == 1 ? lane - bv : mode == 2 ? lane + bv : lane ^ bv;\n"
           "  int ok = mode == 1 ? j >= hi : j <= hi;\n"
           "  return (t & ~31u) + (uint)(ok ? j : lane);\n"
           "}\n"]
    for t in sorted(shuffles):
        to_bits, from_bits = _BITS[t]
        out.append(
            f"{INLINED} {t} {shuffle_helper(t)}(__local uint* s, {t} v, int mode, int b, int width) {{\n"
            f"  uint t = {LINEAR};\n"
            "  barrier(CLK_LOCAL_MEM_FENCE);  /* the previous shuffle's reads are done */\n"
            f"  s[t] = {to_bits.format('v')};\n"
            "  barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"  return {from_bits.format('s[accel_warp_lane(t, mode, b, width)]')};\n"
            "}\n")
    for name in reduces:
        op, t = name[len("accel_warp_reduce_"):].rsplit("_", 1)
        out.append(
            f"{INLINED} {t} {name}(__local uint* s, {t} a, int width) {{\n"
            "  /* a butterfly: every lane of the tile ends with the whole tile's result */\n"
            "  for (int o = width / 2; o > 0; o /= 2) {\n"
            f"    {t} b = {shuffle_helper(t)}(s, a, 3, o, width);\n"
            f"    a = {REDUCE_OPS[op]};\n"
            "  }\n"
            "  return a;\n"
            "}\n")
    return "".join(out)
