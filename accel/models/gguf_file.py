"""Opening a GGUF file for a model: the checks a corrupted or truncated file must fail, with the
file and the tensor named, before any weight is read.

``gguf.GGUFReader`` (the ``gguf`` package, llama.cpp's own Python reader) parses the file; this
module turns what it refuses into typed errors, and checks what it does not: every tensor's data
inside the file, and every quantized tensor's rows a whole number of its type's blocks.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.errors import ArgumentError, ShapeError, expected

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFSource:
    """A parsed GGUF file: the reader, the name errors use, and the tensors by name."""

    reader: Any
    name: str
    tensors: dict[str, Any]

    def field(self, key: str) -> Any:
        """The value of metadata ``key`` (a Python scalar, str or list), or None when absent."""
        f = self.reader.fields.get(key)
        if f is None:
            return None
        return f.contents()


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as e:  # the `gguf` package is in the test and bench extras
        raise ArgumentError(expected("path_or_reader", "a GGUF file with the `gguf` package "
                                     "installed (pip install gguf)", f"no gguf package ({e})")) from None
    return gguf


def open_gguf(path_or_reader: Any) -> GGUFSource:
    """Parse ``path_or_reader`` (a path or a ``gguf.GGUFReader``) and check its tensors.

    >>> import numpy as np, gguf, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "bad.gguf")
    >>> _ = open(path, "wb").write(b"GGML" + bytes(60))
    >>> open_gguf(path)
    Traceback (most recent call last):
        ...
    accel.errors.ArgumentError: path_or_reader: expected a GGUF file (starting with b'GGUF'), got .../bad.gguf starting with b'GGML'
    """
    gguf = _gguf()
    if isinstance(path_or_reader, gguf.GGUFReader):
        reader = path_or_reader
        name = str(getattr(reader.data, "filename", None) or "the GGUFReader's file")
    elif isinstance(path_or_reader, (str, os.PathLike)):
        name = os.fspath(path_or_reader)
        if not os.path.isfile(name):
            raise ArgumentError(expected("path_or_reader", "an existing GGUF file", repr(name)))
        with open(name, "rb") as f:
            head = f.read(4)
        if head != GGUF_MAGIC:
            raise ArgumentError(expected("path_or_reader", f"a GGUF file (starting with {GGUF_MAGIC!r})",
                                         f"{name} starting with {head!r}"))
        try:
            reader = gguf.GGUFReader(name)
        except (ValueError, IndexError, KeyError, OverflowError, EOFError, UnicodeDecodeError,
                TypeError) as e:
            # gguf-py reads past the end as a short slice that fails to reshape, and a row that
            # is not whole blocks as a ValueError naming its type
            raise ArgumentError(expected("path_or_reader", "a well-formed GGUF file (a "
                                         "truncated file, or tensor data past its end?)",
                                         f"{name}: {type(e).__name__}: {e}")) from None
    else:
        raise ArgumentError(expected("path_or_reader", "a path to a GGUF file or a gguf.GGUFReader",
                                     type(path_or_reader).__name__))
    size = len(reader.data)
    tensors: dict[str, Any] = {}
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ArgumentError(expected(f"tensor {t.name!r} of {name}", f"data inside the file "
                                         f"({size} bytes)", f"data ending at byte {end}"))
        block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
        ne = [int(d) for d in t.shape]
        if not ne or ne[0] % block or int(t.n_bytes) != int(np.prod(ne)) // block * type_size:
            raise ShapeError(expected(f"tensor {t.name!r} of {name}",
                                      f"rows of whole {t.tensor_type.name} blocks of {block}",
                                      f"dims {ne} in {int(t.n_bytes)} bytes"))
        if t.name in tensors:
            raise ArgumentError(expected(f"tensor {t.name!r} of {name}", "one tensor of that name",
                                         "two"))
        tensors[t.name] = t
    return GGUFSource(reader, name, tensors)
