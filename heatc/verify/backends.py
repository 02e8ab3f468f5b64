"""The backends a compiled Program can run on, behind one interface.

Public surface: `BACKENDS`, `DOCUMENT_BACKENDS`, `run_document(name, program, data)`,
`open_session(name, program)`, `wasm_checker(program)`, `native_checker(program)`,
`module_info(program)`.
"""

from __future__ import annotations

from heatc import ir
from heatc.cache import ProgramCache
from heatc.semantics import reference
from heatc_runtime import Event, Snapshot, Verdict

BACKENDS = ("reference", "wasm", "native")
DOCUMENT_BACKENDS = ("op",)
"""Backends that scan whole documents only: `op`, the torch ops' CPU kernel (heatc::text, the
path a GPU runs, through the CUDA bridge's own loader of the tables; needs torch)."""


def _compiled(program: ir.Program, tables: bool):
    """The program's WASM module (its manifest, its bytes) and, with `tables`, its rules.hct
    bytes (packed once for both) — what every backend here loads."""
    from heatc.wasm import compile_wasm
    from heatc.wasm.hct import hct_bytes
    from heatc.wasm.pack import pack

    packed = pack(program)
    return compile_wasm(program, packed), hct_bytes(program, packed, (0, 0)) if tables else None


def _load(program: ir.Program, backend: str):
    from heatc_runtime import from_bytes

    module, hct = _compiled(program, backend != "wasm")
    if backend == "wasm":
        return from_bytes(module.manifest, module.wasm)
    return from_bytes(module.manifest, hct, backend=backend)


wasm_checker = ProgramCache(lambda program: _load(program, "wasm"))
"""The program compiled to WASM and loaded by the runtime: `wasm_checker(program)`."""

native_checker = ProgramCache(lambda program: _load(program, "native"))
"""The program's tables (rules.hct) on the native core: `native_checker(program)`."""

_CHECKERS = {"wasm": wasm_checker, "native": native_checker}


def _module_info(program: ir.Program):
    from heatc_runtime.reports.audit import ModuleInfo

    return ModuleInfo.from_manifest(_compiled(program, False)[0].manifest)


def _op_program(program: ir.Program):
    from heatc_runtime.backends.hct import read_hct
    from heatc_runtime.cuda.program import OpProgram

    module, hct = _compiled(program, True)
    return OpProgram(module.manifest, read_hct(hct), None, "cpu")


op_program = ProgramCache(_op_program)
"""The program's tables split into tiers for the torch ops, on the CPU: `op_program(program)`."""
_OP_EVENTS = 4096  # events one document's scan keeps (more is an error, never a silent cut)


def _op_document(program: ir.Program, data: bytes):
    b = op_program(program).batch(1, ev_keep=_OP_EVENTS, snap_keep=2)
    b.feed_texts([data], scan=True)
    snaps = b.results().get(0, [])
    if b.dropped or not snaps or not snaps[-1].final:
        raise RuntimeError(f"the op's scan kept {len(snaps)} snapshots and dropped {b.dropped} records")
    return snaps[-1].events, snaps[-1].verdicts, snaps[-1].counters


module_info = ProgramCache(_module_info)
"""The identity audit reports give the program on every backend (its module's manifest: builds
are deterministic, so the reference interpreter's reports name the module a build would make)."""

_session_batch = {
    name: ProgramCache(lambda program, checker=checker: checker(program).batch(1))
    for name, checker in _CHECKERS.items()
}
"""One reusable sequence per program's checker (sessions reset it rather than open batches)."""


class _BatchSession:
    """One sequence of a runtime batch, with the reference Machine's feed/finish interface."""

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
    if name in _session_batch:
        return _BatchSession(_session_batch[name](program))
    raise ValueError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")


def run_document(name: str, program: ir.Program, data: bytes) -> tuple[list[Event], dict[str, Verdict], dict[str, int]]:
    """Scan one complete document: (events, final verdicts, counters)."""
    if name == "op":
        return _op_document(program, data)
    if name in _CHECKERS:
        report = _CHECKERS[name](program).scan(data)
        return report.events, report.verdicts, report.counters
    session = open_session(name, program)
    snaps = session.feed(data) + session.finish()
    return [e for s in snaps for e in s.events], snaps[-1].verdicts, snaps[-1].counters
