"""The backends a compiled Program can run on, behind one document-level interface.

Public surface: `BACKENDS`, `run_document(name, program, data)`.
"""

from __future__ import annotations

from heatc_runtime import Event, Verdict

from . import ir, reference

BACKENDS = ("reference",)


def run_document(name: str, program: ir.Program, data: bytes) -> tuple[list[Event], dict[str, Verdict], dict[str, int]]:
    """Scan one complete document: (events, final verdicts, counters)."""
    if name == "reference":
        m = reference.Machine(program)
        snaps = m.feed(data) + m.finish()
        return [e for s in snaps for e in s.events], snaps[-1].verdicts, snaps[-1].counters
    raise ValueError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
