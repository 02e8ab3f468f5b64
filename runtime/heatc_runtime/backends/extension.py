"""The compiled C++ core, `heatc_runtime._native`, found or explained.

Its own module so that the CUDA ops (which check tables and run their CPU kernel with it)
reach it without importing the WASM checker: a GPU machine needs no wasmtime.

Public surface: `native_extension()`.
"""

from __future__ import annotations

from ..errors import ModuleError


def native_extension():
    """The compiled extension, or a ModuleError that says how to get it."""
    try:
        from .. import _native
    except ImportError as e:
        raise ModuleError(
            "the native backend is not available: the extension heatc_runtime._native was not built "
            f"({e}). It is compiled when heatc is installed: install a C++ compiler (g++ or clang++) and "
            "Python's headers, then reinstall (pip install --force-reinstall --no-deps heatc, or "
            "`pip install -e .` in a checkout); or use backend='wasm'"
        ) from None
    return _native
