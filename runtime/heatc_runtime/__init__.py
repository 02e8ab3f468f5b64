"""heatc_runtime: load and run compiled heatc modules.

Stands alone: needs numpy and wasmtime, never the compiler.
The report types here are shared by every backend, including heatc's reference
interpreter.
"""

from .report import Conflict, Event, Report, Snapshot, Verdict, worst

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "Batch", "Checker", "CheckerClosed", "Conflict", "Event", "Limits", "ModuleError",
    "ModuleTrap", "Report", "SequenceInterrupted", "Snapshot", "Verdict", "from_bytes", "load", "worst",
]  # fmt: skip


_LAZY = {
    "ABI_MAJOR": "abi", "ABI_MINOR": "abi", "Batch": "batch", "Checker": "checker", "Limits": "limits",
    "ModuleError": "errors", "ModuleTrap": "errors", "CheckerClosed": "errors", "SequenceInterrupted": "errors",
    "from_bytes": "loader", "load": "loader",
}  # fmt: skip


def __getattr__(name: str):
    # The WASM loader needs numpy and wasmtime; report types alone need neither.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
