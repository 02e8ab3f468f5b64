"""The backends: what loads a compiled module and runs its calls (docs/layout.md).

Modules: `loader` (`load`, `from_bytes`: a build folder or its bytes → a checker), `checker`
(`Checker`: the WASM module under wasmtime — scans, batches), `memory` (`ModuleMemory`, the
memory and call layer every backend's checker is built on: blocks, buffers, budgets, calls),
`native` (`NativeChecker`: the C++ core's extension stepping rules.hct),
`wasm_engine` (wasmtime engines, the fast call path), `hct` (rules.hct, the native and CUDA
backends' tables), `tables` (tokens.bin), `manifest` and `files` (a build's files, read
checked), `heap` (blocks of a module's memory), `limits` (`Limits`: each call's budget),
`extension` (the native extension, or why it is missing).

Public surface: the modules above.
"""
