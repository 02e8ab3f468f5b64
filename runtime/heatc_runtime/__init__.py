"""heatc_runtime: load and run compiled heatc modules.

Stands alone: needs numpy and wasmtime, never the compiler. The report types are shared
by every backend, including heatc's reference interpreter.

Packages (docs/layout.md): `backends` (loading a module, the WASM and native checkers),
`batching` (the batch API: `Batch`, lookahead, drafts), `reports` (report types, records,
audit, conflicts), `cuda` (the torch ops), `engines` (the decoding-loop adapters). Beside
them: `abi` (the module ABI as data) and `abi_export` (its C and JavaScript readers),
`args` (argument checks), `errors`, `metrics` (Prometheus).
"""

from .reports.report import Conflict, Event, Report, Snapshot, Verdict, worst

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "Batch", "Checker", "CheckerClosed", "Conflict", "Event", "Limits", "ModuleError",
    "ModuleTrap", "Report", "SequenceInterrupted", "Snapshot", "Verdict", "from_bytes", "load", "worst",
]  # fmt: skip


_LAZY = {
    "ABI_MAJOR": "abi", "ABI_MINOR": "abi", "Batch": "batching.batch", "Checker": "backends.checker",
    "Limits": "backends.limits", "ModuleError": "errors", "ModuleTrap": "errors", "CheckerClosed": "errors",
    "SequenceInterrupted": "errors", "from_bytes": "backends.loader", "load": "backends.loader",
}  # fmt: skip


def __getattr__(name: str):
    # The WASM loader needs numpy and wasmtime; report types alone need neither.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
