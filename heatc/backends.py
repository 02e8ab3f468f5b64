"""The backends a compiled Program can run on, behind one interface.

Public surface: `BACKENDS`, `run_document(name, program, data)`, `open_session(name, program)`,
`wasm_checker(program)`.
"""

from __future__ import annotations

from heatc import ir, reference
from heatc.cache import ProgramCache
from heatc_runtime import Event, Snapshot, Verdict

BACKENDS = ("reference", "wasm")


def _load_wasm(program: ir.Program):
    from heatc.wasm import compile_wasm
    from heatc_runtime import from_bytes

    module = compile_wasm(program)
    return from_bytes(module.manifest, module.wasm)


wasm_checker = ProgramCache(_load_wasm)
"""The program compiled to WASM and loaded by the runtime: `wasm_checker(program)`."""


_session_batch = ProgramCache(lambda program: wasm_checker(program).batch(1))
"""One reusable sequence per program's checker (sessions reset it rather than open batches)."""


class _WasmSession:
    """One sequence on a WASM checker, with the reference Machine's feed/finish interface."""

    def __init__(self, batch):
        batch.reset()
        self._batch = batch

    def feed(self, data: bytes) -> list[Snapshot]:
        return self._batch.feed_text(0, data)

    def finish(self) -> list[Snapshot]:
        return self._batch.finish().get(0, [])

    def snapshot(self) -> Snapshot:
        return self._batch.snapshot()[0][-1]


def open_session(name: str, program: ir.Program):
    """A fresh sequence with `feed(bytes)`, `snapshot()` and `finish()`."""
    if name == "reference":
        return reference.Machine(program)
    if name == "wasm":
        return _WasmSession(_session_batch(program))
    raise ValueError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")


def run_document(name: str, program: ir.Program, data: bytes) -> tuple[list[Event], dict[str, Verdict], dict[str, int]]:
    """Scan one complete document: (events, final verdicts, counters)."""
    if name == "wasm":
        report = wasm_checker(program).scan(data)
        return report.events, report.verdicts, report.counters
    session = open_session(name, program)
    snaps = session.feed(data) + session.finish()
    return [e for s in snaps for e in s.events], snaps[-1].verdicts, snaps[-1].counters
