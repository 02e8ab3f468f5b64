"""A runtime backend (WASM unless told) against the reference interpreter on one stream, as the
differential tests compare them: a quiet whole-document scan, then the stream fed in pieces
with every snapshot published (so trigger literals are not plain there)."""

from heatc.semantics.reference import Machine
from heatc.verify.backends import wasm_checker


def snapshot_fields(s) -> tuple:
    return (s.events, s.verdicts, s.counters, s.final)


def stream_agrees(program, stream: bytes, pieces: list[bytes], checker=None) -> None:
    """Events, verdicts and counters of a scan, and every snapshot of the stream fed as
    `pieces` (which join to it), are the reference's (`checker`: the program's, on WASM
    unless given)."""
    checker = checker if checker is not None else wasm_checker(program)
    m = Machine(program)
    snaps = m.feed(stream) + m.finish()
    report = checker.scan(stream)
    assert report.events == [e for s in snaps for e in s.events]
    assert (report.verdicts, report.counters) == (snaps[-1].verdicts, snaps[-1].counters)
    assert b"".join(pieces) == stream
    batch = checker.batch(1)
    m = Machine(program)
    for piece in pieces:
        got = batch.feed_text(0, piece)
        assert [snapshot_fields(s) for s in got] == [snapshot_fields(s) for s in m.feed(piece)]
    assert [snapshot_fields(s) for s in batch.finish().get(0, [])] == [snapshot_fields(s) for s in m.finish()]
