"""The backends a compiled Program can run on, behind one interface.

Public surface: `BACKENDS`, `run_document(name, program, data)`, `open_session(name, program)`,
`wasm_checker(program)`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from heatc_runtime import Event, Snapshot, Verdict

from . import ir, reference

BACKENDS = ("reference", "wasm")

_CHECKERS: OrderedDict[int, tuple[ir.Program, object]] = OrderedDict()
_LOCK = threading.Lock()


def wasm_checker(program: ir.Program):
    """The program compiled to WASM and loaded by the runtime (cached per Program object)."""
    from heatc_runtime import from_bytes

    from .wasm import compile_wasm

    with _LOCK:
        hit = _CHECKERS.get(id(program))
        if hit is not None and hit[0] is program:
            _CHECKERS.move_to_end(id(program))
            return hit[1]
    module = compile_wasm(program)
    checker = from_bytes(module.manifest, module.wasm)
    with _LOCK:
        _CHECKERS[id(program)] = (program, checker)
        while len(_CHECKERS) > 32:
            _CHECKERS.popitem(last=False)
    return checker


class _WasmSession:
    """One sequence on a WASM checker, with the reference Machine's feed/finish interface."""

    def __init__(self, checker):
        # one reusable sequence per checker: a Batch's memory is never given back
        batch = getattr(checker, "_session_batch", None)
        if batch is None:
            batch = checker._session_batch = checker.batch(1)
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
        return _WasmSession(wasm_checker(program))
    raise ValueError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")


def run_document(name: str, program: ir.Program, data: bytes) -> tuple[list[Event], dict[str, Verdict], dict[str, int]]:
    """Scan one complete document: (events, final verdicts, counters)."""
    if name == "wasm":
        report = wasm_checker(program).scan(data)
        return report.events, report.verdicts, report.counters
    session = open_session(name, program)
    snaps = session.feed(data) + session.finish()
    return [e for s in snaps for e in s.events], snaps[-1].verdicts, snaps[-1].counters
