"""accel's built-in backends (importable as ``accel.backends``): ``cpu`` (numpy reference),
``opencl`` (pyopencl), ``cuda`` and ``hip`` (CuPy). Each module imports its own vendor package.

``accel.backends`` is both this package and the listing function ``accel.backends()``: the public
API names them the same, and an attribute set by importing a submodule would otherwise shadow the
function. The module therefore answers calls by delegating to ``accel.registry.backends``.
"""
import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *, refresh: bool = False):
        from accel.registry import backends

        return backends(refresh=refresh)


sys.modules[__name__].__class__ = _CallablePackage
