"""``accel.kernel``: compile a user kernel once and launch it with CUDA's semantics on any backend.

The backend does the work (``Backend.compile`` builds and caches, ``Backend.launch`` enqueues);
this module only validates what a user passes, so every mistake becomes a typed error naming the
argument instead of a driver crash: a grid of 0 blocks, a Python float whose width the kernel
cannot know, a tensor on another device.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from accel.backend import Backend
from accel.errors import ArgumentError, DeviceMismatchError, expected
from accel.registry import get_backend
from accel.tensor import Tensor

#: how a kernel is declared in each dialect: accel's sources write ``KERNEL void f(...)`` (the
#: backend prepends the portability header that defines it), native ones their own keyword
_KERNEL_KEYWORD = {"cuda": re.compile(r"\b__global__\b"),
                   "opencl": re.compile(r"\b(__)?kernel\s+void\b")}
_NATIVE_DIALECT = {"cuda": "cuda", "hip": "cuda", "opencl": "opencl"}
_COMMENTS_AND_STRINGS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DIALECTS = ("accel", "cuda", "opencl")
#: CUDA's limit on gridDim.y/z is 65535, x 2**31-1; OpenCL's global size is size_t. Past 2**31-1
#: blocks in any dimension no backend launches correctly, so it is refused here for all.
_MAX_DIM = 2**31 - 1


#: a kernel parameter as the argument check reads it: (name, address space, type), the space
#: "global", "constant" or "local" for a pointer, "private" for a value
Param = tuple[str, str, str]
#: bytes of the scalar types a value parameter may have (OpenCL C and CUDA spellings)
_SCALAR_BYTES = {"char": 1, "uchar": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1,
                 "short": 2, "ushort": 2, "unsigned short": 2, "half": 2, "__half": 2,
                 "int16_t": 2, "uint16_t": 2, "int": 4, "uint": 4, "unsigned": 4,
                 "unsigned int": 4, "float": 4, "int32_t": 4, "uint32_t": 4, "long": 8,
                 "ulong": 8, "long long": 8, "unsigned long long": 8, "double": 8,
                 "size_t": 8, "int64_t": 8, "uint64_t": 8, "i64": 8}
#: the float types among them (the rest are integers: an np.float32 for an int is the right
#: width and the wrong bits)
_SCALAR_KIND = {t: "f" for t in ("half", "__half", "float", "double")}
#: vector types by value (float4 v): element type and count, passed as a numpy structured
#: scalar (pyopencl.cltypes.make_float4(...) on OpenCL); OpenCL gives a 3-vector a 4-vector's
#: room, CUDA's float3 is 12 bytes
_VECTORS = {f"{t}{n}": (t, n) for t in ("char", "uchar", "short", "ushort", "int", "uint", "long",
                                         "ulong", "half", "float", "double") for n in (2, 3, 4, 8, 16)}


def _vector_bytes(type_name: str, opencl: bool) -> int:
    element, n = _VECTORS[type_name]
    return _SCALAR_BYTES[element] * (4 if n == 3 and opencl else n)
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict__", "__restrict", "RESTRICT"}
_SPACES = {"__global": "global", "global": "global", "GLOBAL": "global", "__constant": "constant",
           "constant": "constant", "CONSTANT": "constant", "__local": "local", "local": "local",
           "LOCAL_PTR": "local"}


def parse_params(source: str, name: str) -> tuple[Param, ...]:
    """Kernel ``name``'s parameters read from its declaration in ``source`` (accel's dialect,
    OpenCL C or CUDA; comments ignored), or () where the declaration cannot be read plainly
    (a macro-built signature, say): then nothing is checked.

    >>> parse_params("__global__ void f(const float* __restrict__ x, int n, double a) {}", "f")
    (('x', 'global', 'float'), ('n', 'private', 'int'), ('a', 'private', 'double'))
    >>> parse_params("KERNEL void g(GLOBAL float* y, LOCAL_PTR int* t, unsigned int n) {}", "g")[1:]
    (('t', 'local', 'int'), ('n', 'private', 'unsigned int'))
    """
    code = _COMMENTS_AND_STRINGS.sub(" ", source)
    found = re.search(r"\b(?:__global__|KERNEL|__kernel|kernel)\s+void\s+" + re.escape(name) + r"\s*\(",
                      code)
    if found is None:
        return ()
    depth, params, start = 0, [], found.end()
    for i in range(start, len(code)):  # split at the top level's commas, up to its ")"
        c = code[i]
        if c in "(<[":
            depth += 1
        elif c in ")>]" and depth:
            depth -= 1
        elif c in ",)" and depth == 0:
            params.append(code[start:i])
            start = i + 1
            if c == ")":
                break
    out = []
    for text in params:
        words = re.findall(r"[A-Za-z_]\w*|\*|\[", text)
        if not text.strip() or words == ["void"]:
            continue
        if len(words) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", words[-1]):
            return ()
        pointer = "*" in words or "[" in words
        space = next((_SPACES[w] for w in words if w in _SPACES), "global" if pointer else "private")
        type_name = " ".join(w for w in words[:-1] if w not in _QUALIFIERS and w not in _SPACES
                             and w not in "*[")
        out.append((words[-1], space if pointer else "private", type_name))
    return tuple(out)


def includes_files(source: str) -> bool:
    """Whether ``source`` has an ``#include`` line (outside comments): the included files are
    part of no cache key."""
    return bool(re.search(r"^\s*#\s*include\b", _COMMENTS_AND_STRINGS.sub(" ", source), re.M))


def check_args(params: tuple[Param, ...], args: list, shared_mem: int = 0, *,
               opencl: bool = False) -> None:
    """Each argument against its parameter: a buffer (Tensor, or a backend's own buffer) for a
    pointer, of the pointed-to type's width and kind where that is a plain scalar type; a numpy
    scalar of the type's width for a value (a numpy structured scalar for a vector type). A numpy
    int64 passed for a pointer has a pointer's size, so a driver takes it and the kernel
    dereferences it (PoCL segfaults, a CUDA context dies); the check says so first. A trailing
    local pointer is ``shared_mem``'s buffer (OpenCL's form of extern __shared__), which the launch
    adds when ``shared_mem`` > 0. ``opencl``: the parameters are an OpenCL kernel's (its vector
    layout)."""
    if not params:
        return
    names = ", ".join(n for n, _, _ in params)
    dynamic = params[-1][1] == "local"
    if dynamic and len(args) == len(params) - 1 and not shared_mem:
        name, _, type_name = params[-1]
        raise ArgumentError(expected("shared_mem", f"the bytes of the kernel's last parameter, "
                                     f"the local buffer {type_name}* {name} (the launch passes it)",
                                     "0"))
    wanted = len(params) - 1 if dynamic and shared_mem else len(params)
    if len(args) != wanted:
        why = (f" (the last, {params[-1][0]}, is the shared_mem buffer the launch adds)"
               if dynamic and shared_mem else "")
        raise ArgumentError(expected("args", f"{wanted} arguments for the kernel's parameters "
                                     f"({names}){why}", len(args)))
    for index, (value, (name, space, type_name)) in enumerate(zip(args, params)):
        _check_arg(f"args[{index}]", value, name, space, type_name, opencl)


def _check_arg(arg: str, value: Any, name: str, space: str, type_name: str, opencl: bool) -> None:
    scalar = isinstance(value, np.generic)
    width = _SCALAR_BYTES.get(type_name) or (
        _vector_bytes(type_name, opencl) if type_name in _VECTORS else None)
    kind = _SCALAR_KIND.get(type_name)
    if space != "private":
        if scalar:
            raise ArgumentError(expected(arg, f"an accel.Tensor (parameter {type_name}* {name}, "
                                         f"{space} memory)", type(value).__name__))
        dtype = np.dtype(value.dtype) if isinstance(value, Tensor) else None
        # bytes may be read through any 1-byte type; bfloat16 and FP8 (no OpenCL C type) only by
        # width: otherwise a float* over int32 data reads every element as the wrong bits
        if dtype is not None and type_name in _SCALAR_BYTES and _SCALAR_BYTES[type_name] > 1 and (
                dtype.itemsize != _SCALAR_BYTES[type_name]
                or (dtype.kind in "iuf" and (kind == "f") != (dtype.kind == "f"))):
            raise ArgumentError(expected(arg, f"a tensor of {type_name} elements (parameter "
                                         f"{type_name}* {name})", f"a tensor of {dtype}"))
        return
    if isinstance(value, Tensor):
        raise ArgumentError(expected(arg, f"a numpy scalar (parameter {type_name} {name} is "
                                     "passed by value)", "Tensor"))
    if not scalar or width is None:
        return
    if type_name in _VECTORS:
        if value.dtype.kind != "V" or value.dtype.itemsize != width:
            example = f"pyopencl.cltypes.make_{type_name}(...)" if opencl else "a structured scalar"
            raise ArgumentError(expected(arg, f"a numpy value of {width} bytes, such as {example} "
                                         f"(parameter {type_name} {name})",
                                         f"{value.dtype} ({value.dtype.itemsize} bytes)"))
    elif value.dtype.itemsize != width or (kind == "f") != (value.dtype.kind == "f"):
        want = f"{'a float' if kind == 'f' else 'an integer'} numpy scalar of {width} bytes"
        raise ArgumentError(expected(arg, f"{want} (parameter {type_name} {name})",
                                     f"{value.dtype} ({value.dtype.itemsize} bytes)"))


def _dims(arg: str, value: Any) -> tuple[int, int, int]:
    """An int or a tuple of 1-3 positive ints, padded with 1s to three dimensions."""
    items = value if isinstance(value, tuple) else (value,)
    if not 1 <= len(items) <= 3 or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in items):
        raise ArgumentError(expected(arg, "a positive int or a tuple of 1 to 3 positive ints",
                                     repr(value)))
    if not all(1 <= int(v) <= _MAX_DIM for v in items):
        raise ArgumentError(expected(arg, f"every dimension in 1..{_MAX_DIM}", repr(value)))
    return tuple(int(v) for v in items) + (1,) * (3 - len(items))  # type: ignore[return-value]


def _options(defines: Mapping[str, Any] | None, options: Sequence[str] | None) -> tuple[str, ...]:
    """Compiler options: ``-DNAME=VALUE`` for each define (options, not prepended ``#define``
    lines, so the compiler log's line numbers stay those of the user's source), then ``options``."""
    out: list[str] = []
    if defines is not None:
        if not isinstance(defines, Mapping):
            raise ArgumentError(expected("defines", "a mapping of macro names to values",
                                         type(defines).__name__))
        for key, value in defines.items():
            if not isinstance(key, str) or not _IDENTIFIER.match(key):
                raise ArgumentError(expected("defines", "macro names that are C identifiers",
                                             repr(key)))
            if isinstance(value, bool) or not isinstance(value, (int, float, str, np.integer,
                                                                 np.floating)):
                raise ArgumentError(expected(f"defines[{key!r}]", "an int, float or str", repr(value)))
            text = str(value)
            if not text or any(c.isspace() for c in text):
                raise ArgumentError(expected(f"defines[{key!r}]", "a value without whitespace",
                                             repr(value)))
            out.append(f"-D{key}={text}")
    if options is not None:
        if isinstance(options, str) or not isinstance(options, Sequence) or not all(
                isinstance(o, str) and o for o in options):
            raise ArgumentError(expected("options", "a sequence of non-empty str compiler options",
                                         repr(options)))
        out.extend(options)
    return tuple(out)


class Kernel:
    """A compiled kernel bound to one backend; call it to launch (see ``accel.kernel``)."""

    def __init__(self, backend: Backend, name: str, compiled: Any, dialect: str,
                 params: tuple[Param, ...] = ()):
        self.backend, self.name, self.dialect, self._compiled = backend, name, dialect, compiled
        #: what the arguments are checked against here; () where the backend checks them itself
        #: (OpenCL, from the driver's arg info) or the declaration could not be read
        self.params = params

    def __call__(self, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any,
                 shared_mem: int = 0) -> None:
        grid3, block3 = _dims("grid", grid), _dims("block", block)
        if isinstance(shared_mem, (bool, np.bool_)) or not isinstance(shared_mem, (int, np.integer)) \
                or shared_mem < 0:
            raise ArgumentError(expected("shared_mem", "an int >= 0 (bytes)", repr(shared_mem)))
        values = [self._arg(i, a) for i, a in enumerate(args)]
        check_args(self.params, values, int(shared_mem))
        self.backend.launch(self._compiled, grid3, block3, values, int(shared_mem))

    def _arg(self, index: int, value: Any) -> Any:
        """A Tensor (on this kernel's backend) or a numpy scalar with an explicit width."""
        arg = f"args[{index}]"
        if isinstance(value, Tensor):
            if value.backend is not self.backend:
                raise DeviceMismatchError(expected(arg, f"a tensor on {self.backend.device_id}",
                                                   f"a tensor on {value.backend.device_id}"))
            return value
        if isinstance(value, np.generic) and value.dtype.kind in "iuf" and value.dtype.itemsize in (
                1, 2, 4, 8):
            return value
        if isinstance(value, (np.void, np.ndarray)) and value.ndim == 0 and value.dtype.names:
            return value[()]  # a vector by value: pyopencl.cltypes.make_float4(...) and the like
        raise ArgumentError(expected(arg, "an accel.Tensor, a numpy scalar with an explicit width "
                                     "(np.int32(n), np.float32(a)) or a vector value "
                                     "(pyopencl.cltypes.make_float4(...))", _describe_arg(value)))

    def __repr__(self) -> str:
        return f"<accel kernel {self.name!r} ({self.dialect}) on {self.backend.device_id}>"


def _describe_arg(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"Python {type(value).__name__} {value!r} (its C width is ambiguous)"
    return f"{type(value).__name__} {value!r}" if np.ndim(value) == 0 else type(value).__name__


def _detect_dialect(source: str, target: Backend) -> str:
    """The backend's native language when the source declares its kernel with the native
    keyword, else accel's dialect. CUDA source handed to the OpenCL backend is refused with the
    way across, rather than left to fail as a pile of OpenCL syntax errors."""
    native = _NATIVE_DIALECT.get(target.name)
    code = _COMMENTS_AND_STRINGS.sub(" ", source)  # "// was a __global__ function" says nothing
    if native and _KERNEL_KEYWORD[native].search(code):
        return native
    if native == "opencl" and _KERNEL_KEYWORD["cuda"].search(code):
        raise ArgumentError(expected("source", "OpenCL C or accel's dialect for the opencl backend",
                                     "CUDA C++ (translate it with: accel port FILE.cu --to opencl)"))
    return "accel"


def kernel(source: str, name: str, *, backend: str | Backend | None = None,
           defines: Mapping[str, Any] | None = None, options: Sequence[str] | None = None,
           dialect: str | None = None) -> Kernel:
    """Compile kernel ``name`` from ``source`` on a backend and return it as a callable
    ``k(grid, block, *args, shared_mem=0)`` with CUDA's launch semantics: ``grid`` counts blocks,
    ``block`` threads per block (ints or 1-3 tuples); ``shared_mem`` bytes back the dynamic
    ``extern __shared__`` array (on OpenCL: one extra ``__local`` pointer after the user's args).
    Tensor arguments are written in place; scalars must be numpy scalars (``np.int32(n)``).

    ``dialect`` is "accel" (kernels declared ``KERNEL void f(...)`` against accel's portability
    header, kernels/accel.h), "cuda" (CUDA C++, on the cuda and hip backends) or "opencl"
    (OpenCL C); by default it is the backend's own language when the source declares its kernel
    with that language's keyword (``__global__``, ``__kernel``), else "accel".

    >>> import accel, numpy as np
    >>> from accel.kernel import kernel
    >>> src = '''__kernel void scale(__global float* x, float a, int n) {
    ...     int i = get_global_id(0); if (i < n) x[i] *= a; }'''
    >>> k = kernel(src, "scale", backend="opencl")
    >>> x = accel.asarray(np.ones(100, np.float32), backend="opencl")
    >>> k(4, 32, x, np.float32(3), np.int32(100))
    >>> float(x.numpy().sum())
    300.0
    """
    if not isinstance(source, str) or not source.strip():
        raise ArgumentError(expected("source", "non-empty kernel source text", repr(source)[:80]))
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ArgumentError(expected("name", "the kernel function's identifier", repr(name)))
    target = get_backend(backend)
    if dialect is None:
        dialect = _detect_dialect(source, target)
    elif dialect not in _DIALECTS:
        raise ArgumentError(expected("dialect", f"one of {_DIALECTS}", repr(dialect)))
    compiled = target.compile(source, name, options=_options(defines, options), dialect=dialect)
    # the driver's own parameter info where the backend keeps it (and checks with it)
    params = () if getattr(compiled, "params", ()) else parse_params(source, name)
    return Kernel(target, name, compiled, dialect, params)
