"""heatc_runtime: load and run compiled heatc modules.

Stands alone: needs numpy and wasmtime (and torch for the CUDA op), never the compiler.
The report types here are shared by every backend, including heatc's reference
interpreter.
"""

from .report import Conflict, Event, Report, Snapshot, Verdict, worst

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "Batch", "Checker", "Conflict", "Event", "Limits", "ModuleError", "ModuleTrap",
    "Report", "Snapshot", "Verdict", "from_bytes", "load", "worst",
]  # fmt: skip


def __getattr__(name: str):
    # The WASM loader needs numpy and wasmtime; report types alone need neither.
    if name in (
        "ABI_MAJOR",
        "ABI_MINOR",
        "Batch",
        "Checker",
        "Limits",
        "ModuleError",
        "ModuleTrap",
        "from_bytes",
        "load",
    ):
        from . import module

        return getattr(module, name)
    raise AttributeError(name)
