"""Run the conformance corpus (tests/conformance/, format in its README, read strictly by
conformance_schema) against a backend, on every path a backend offers:

- streaming: `open_session(program) -> session` whose sessions have `feed(bytes) ->
  list[Snapshot]` and `finish() -> list[Snapshot]` (the reference Machine, a WASM batch
  sequence, ...), fed under several chunkings of the input;
- whole documents: `scan(program, data) -> (events, verdicts, counters)` (`Checker.scan`,
  where a kernel's idle-stretch skipper runs).

Every expectation a case states is compared exactly; what it leaves out has a stated
default (no failed requirement, no conflict, rule CONFIRMED). Counters are checked on
every path: bytes, tokens, matches and rejections follow from the case (rejections: its
REJECTED match events of rules that are not observe-only, or the count it states), lexemes
from the reference interpreter on the whole input (the caller passes that count).

Public surface: `CORPUS`, `load_cases`, `load_error_cases`, `chunkings`, `check_case`,
`check_document`, `check_error_case`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from heatc_runtime import Event, Snapshot, Verdict

from .conformance_schema import CORPUS, Case, ErrorCase, EventWant, load_cases, load_error_cases

__all__ = ["CORPUS", "check_case", "check_document", "check_error_case", "chunkings", "load_cases", "load_error_cases"]


def chunkings(case: Case) -> list[tuple[str, list[bytes]]]:
    data = case.input
    rng = random.Random(case.id)
    out = [("whole", [data]), ("bytes", [data[i : i + 1] for i in range(len(data))] or [b""])]
    for k in range(3):
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(1, 6)))
        pieces, prev = [], 0
        for c in [*cuts, len(data)]:
            pieces.append(data[prev:c])
            prev = c
        out.append((f"random{k}", pieces))
    if case.chunks is not None:
        out.append(("chunks", case.chunks))
    return out


def _run(open_session: Callable, program, pieces: list[bytes]) -> list[Snapshot]:
    session = open_session(program)
    snaps: list[Snapshot] = []
    for p in pieces:
        snaps += session.feed(p)
    snaps += session.finish()
    return snaps


def _same_value(expected, actual) -> bool:
    """Numbers compare as float64; class names as strings."""
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    return isinstance(actual, float) and float(expected) == actual


def _span_errors(data: bytes, start: int, end: int, want, prefix: str) -> list[str]:
    errs = []
    if data[start:end] != want.span:
        errs.append(f"{prefix} span {data[start:end]!r} [{start}, {end}), expected {want.span!r}")
    if want.start is not None and start != want.start:
        errs.append(f"{prefix} start {start}, expected {want.start}")
    if want.end is not None and end != want.end:
        errs.append(f"{prefix} end {end}, expected {want.end}")
    return errs


def _event_errors(data: bytes, want: EventWant, got: Event, prefix: str) -> list[str]:
    if got.kind != want.kind:
        return [f"{prefix}: a {got.kind} event ({got.name}), expected a {want.kind} event ({want.name})"]
    errs = []
    if got.name != want.name:
        errs.append(f"{prefix}: {'rule' if want.kind == 'match' else 'anchor'} {got.name}, expected {want.name}")
    verdict = got.verdict.name if got.verdict is not None else None
    if verdict != want.verdict:
        errs.append(f"{prefix}: verdict {verdict}, expected {want.verdict}")
    errs += _span_errors(data, got.start, got.end, want, f"{prefix}:")
    caps = dict(got.captures)
    if set(caps) != set(want.captures) or not all(_same_value(v, caps[k]) for k, v in want.captures.items()):
        errs.append(f"{prefix}: captures {caps}, expected {want.captures}")
    if got.failed != want.failed:
        errs.append(f"{prefix}: failed {got.failed!r}, expected {want.failed!r}")
    c, w = got.conflict, want.conflict
    if (c is None) != (w is None):
        errs.append(f"{prefix}: conflict {c}, expected {w}")
    elif c is not None and w is not None:
        if c.channel != w.channel:
            errs.append(f"{prefix}: conflict channel {c.channel}, expected {w.channel}")
        if not _same_value(w.value, c.value):
            errs.append(f"{prefix}: conflict value {c.value!r}, expected {w.value!r}")
        errs += _span_errors(data, c.start, c.end, w, f"{prefix}: conflict")
    return errs


def _events_errors(case: Case, events: Sequence[Event], where: str) -> list[str]:
    if len(events) != len(case.events):
        shown = [(e.kind, e.name, e.verdict and e.verdict.name, case.input[e.start : e.end]) for e in events]
        return [f"{where}: {len(events)} events, expected {len(case.events)}: {shown}"]
    errs = []
    for i, (want, got) in enumerate(zip(case.events, events, strict=True)):
        errs += _event_errors(case.input, want, got, f"{where}: event {i}")
    return errs


def _verdict_errors(expected: Mapping[str, str], got: Mapping[str, Verdict], where: str) -> list[str]:
    unknown = set(expected) - set(got)
    if unknown:
        return [f"{where}: the expectation names rules the program does not have: {sorted(unknown)}"]
    return [
        f"{where}: rule {rule} is {v.name}, expected {expected.get(rule, 'CONFIRMED')}"
        for rule, v in got.items()
        if v.name != expected.get(rule, "CONFIRMED")
    ]


def _observe_only(program) -> frozenset[str]:
    return frozenset(r.name for r in program.rules if r.observe)


def _counter_errors(
    case: Case, counters: Mapping[str, int], tokens: int, lexemes: int, where: str, observe: frozenset[str]
) -> list[str]:
    matches = [e for e in case.events if e.kind == "match"]
    # the rejections a policy acts on: an observe-only rule's REJECTED events do not count (§7)
    acted = sum(e.verdict == "REJECTED" and e.name not in observe for e in matches)
    want = {
        "bytes": len(case.input),
        "lexemes": lexemes,
        "tokens": tokens,  # feed calls (semantics §7); a whole-document scan is one
        "matches": len(matches),  # each completed match is one event (§4)
        "rejections": acted if case.rejections is None else case.rejections,
    }
    return [] if dict(counters) == want else [f"{where}: counters {dict(counters)}, expected {want}"]


def _snapshot_errors(case: Case, snaps: list[Snapshot], where: str) -> list[str]:
    if len(snaps) != len(case.snapshots):
        got = [(len(s.events), {k: v.name for k, v in s.verdicts.items() if v.name != "CONFIRMED"}) for s in snaps]
        return [f"{where}: {len(snaps)} snapshots, expected {len(case.snapshots)}: {got}"]
    errs = []
    for j, (want, got) in enumerate(zip(case.snapshots, snaps, strict=True)):
        if len(got.events) != want.events:
            errs.append(f"{where}: snapshot {j} has {len(got.events)} events, expected {want.events}")
        errs += _verdict_errors(want.verdicts, got.verdicts, f"{where} snapshot {j}")
        for counter in ("bytes", "rejections"):
            expected = getattr(want, counter)
            if expected is not None and got.counters[counter] != expected:
                errs.append(f"{where}: snapshot {j} counts {got.counters[counter]} {counter}, expected {expected}")
    return errs


def check_case(case: Case, program, open_session: Callable, lexemes: int) -> list[str]:
    """All differences between what a streaming backend does and what the case says, under
    every chunking (the first chunking that differs is reported)."""
    observe = _observe_only(program)
    for label, pieces in chunkings(case):
        snaps = _run(open_session, program, pieces)
        where = f"{case.id} [{label}]"
        errors = _events_errors(case, [e for s in snaps for e in s.events], where)
        errors += _verdict_errors(case.verdicts, snaps[-1].verdicts, where + " final")
        errors += _counter_errors(case, snaps[-1].counters, len(pieces), lexemes, where + " final", observe)
        finals = [j for j, s in enumerate(snaps) if s.final]
        if finals != [len(snaps) - 1]:
            errors.append(f"{where}: snapshots {finals} of {len(snaps)} are marked final, expected only the last")
        if case.snapshots is not None and label == ("chunks" if case.chunks is not None else "whole"):
            errors += _snapshot_errors(case, snaps, where)
        if errors:
            return errors
    return []


def check_document(case: Case, program, scan: Callable, lexemes: int) -> list[str]:
    """All differences between a whole-document scan and what the case says (a scan reports
    the final verdicts and counters only, so the case's snapshots are not checked here)."""
    events, verdicts, counters = scan(program, case.input)
    where = f"{case.id} [scan]"
    errors = _events_errors(case, events, where)
    errors += _verdict_errors(case.verdicts, verdicts, where + " final")
    return errors + _counter_errors(case, counters, 1, lexemes, where + " final", _observe_only(program))


def check_error_case(case: ErrorCase, compile_source: Callable, error_type: type[Exception]) -> list[str]:
    """All differences between the diagnostics `compile_source(text, path)` raises (as
    `error_type` with `.diagnostics`) and the ones the case lists, in order; each must also
    render as `path:line:column: error: message`, the source line, and a caret."""
    path = f"{case.name}.heat"
    try:
        compile_source(case.source, path)
    except error_type as e:
        diagnostics = e.diagnostics
    else:
        return [f"{case.id}: compiled without an error, expected {len(case.errors)}"]
    got = [(d.line, d.column, d.message, tuple(d.notes)) for d in diagnostics]
    want = [(w.line, w.column, w.message, w.notes) for w in case.errors]
    if got != want:
        return [f"{case.id}: diagnostics\n    {got}\n  expected\n    {want}"]
    errors = []
    lines = case.source.splitlines()
    for d in diagnostics:
        rendered = d.render().splitlines()
        head = f"{path}:{d.line}:{d.column}: error: {d.message}"
        source_line = lines[d.line - 1] if d.line <= len(lines) else None
        if rendered[0] != head:
            errors.append(f"{case.id}: renders {rendered[0]!r}, expected {head!r}")
        elif source_line is not None and not _shows_caret(rendered, source_line, d.column):
            errors.append(f"{case.id}: the rendering does not show line {d.line} with a caret:\n{d.render()}")
    return errors


def _shows_caret(rendered: list[str], source_line: str, column: int) -> bool:
    """The source line, then a caret under `column` (checked exactly where every character
    takes one terminal cell: ASCII without tabs)."""
    if len(rendered) < 3 or not rendered[1].endswith(source_line) or not rendered[2].endswith("^"):
        return False
    if source_line.isascii() and "\t" not in source_line:
        return len(rendered[2]) - 1 == len(rendered[1]) - len(source_line) + column - 1
    return True
