"""heatc_runtime: load and run compiled heatc modules.

Stands alone: needs numpy and wasmtime (and torch for the CUDA op), never the compiler.
The report types here are shared by every backend, including heatc's reference
interpreter.
"""

from .report import Conflict, Event, Snapshot, Verdict, worst

__all__ = ["Conflict", "Event", "Snapshot", "Verdict", "worst"]
