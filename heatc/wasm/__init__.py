"""The WASM backend: IR → packed tables (`pack`, `skipper`) → the generic kernel template
(`templates/kernel.wat.j2`) → a `.wasm` module with its manifest (`codegen`); and the same
packed tables as rules.hct, with the header and parameters the native and CUDA cores read
(`hct`).

Public surface: `compile_wasm(program, packed=None) -> WasmModule`, `write_module(module,
directory)`, `WasmModule`, `ABI_MAJOR`, `ABI_MINOR`.
"""

from heatc.wasm.codegen import ABI_MAJOR, ABI_MINOR, WasmModule, compile_wasm, write_module

__all__ = ["ABI_MAJOR", "ABI_MINOR", "WasmModule", "compile_wasm", "write_module"]
