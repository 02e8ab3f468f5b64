"""Run the conformance corpus (tests/conformance/*.yaml, format in its README) against a
backend. A backend is a function `open_session(program) -> session` whose sessions have
`feed(bytes) -> list[Snapshot]` and `finish() -> list[Snapshot]`; every backend (reference,
WASM, native, CUDA) plugs in here unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from heatc_runtime import Snapshot, Verdict

CORPUS = Path(__file__).parent / "conformance"


@dataclass
class Case:
    file: str
    name: str
    rules: str
    input: bytes
    verdicts: dict[str, str]
    events: list[dict]
    snapshots: list[dict] | None = None
    chunks: list[bytes] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"


def load_cases(directory: Path = CORPUS) -> list[Case]:
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for c in doc["cases"]:
            data = bytes.fromhex(c["input_hex"]) if "input_hex" in c else c["input"].encode("utf-8")
            chunks = [x.encode("utf-8") for x in c["chunks"]] if "chunks" in c else None
            if chunks is not None and b"".join(chunks) != data:
                raise ValueError(f"{path.name}::{c['name']}: chunks do not join to the input")
            cases.append(
                Case(
                    path.name, c["name"], doc["rules"], data, c.get("verdicts") or {}, c.get("events") or [],
                    c.get("snapshots"), chunks, {k: v for k, v in c.items() if k == "reaching_differs"},
                )
            )  # fmt: skip
    return cases


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


def run(open_session: Callable, program, pieces: list[bytes]) -> list[Snapshot]:
    session = open_session(program)
    snaps: list[Snapshot] = []
    for p in pieces:
        snaps += session.feed(p)
    snaps += session.finish()
    return snaps


def _same_number(expected, actual) -> bool:
    return isinstance(actual, float) and float(expected) == actual


def _check_event(case: Case, i: int, want: dict, got, where: str) -> list[str]:
    errs = []
    prefix = f"{where}: event {i}"
    name_key = "rule" if want.get("kind", "match") == "match" else "anchor"
    if got.kind != want.get("kind", "match"):
        return [f"{prefix}: kind {got.kind} != {want.get('kind')}"]
    if got.name != want[name_key]:
        errs.append(f"{prefix}: {name_key} {got.name} != {want[name_key]}")
    if "verdict" in want and (got.verdict is None or got.verdict.name != want["verdict"]):
        errs.append(f"{prefix}: verdict {got.verdict} != {want['verdict']}")
    text = case.input[got.start : got.end]
    if "text" in want and text != want["text"].encode("utf-8"):
        errs.append(f"{prefix}: span {text!r} != {want['text']!r}")
    for key in ("start", "end"):
        if key in want and getattr(got, key) != want[key]:
            errs.append(f"{prefix}: {key} {getattr(got, key)} != {want[key]}")
    if "captures" in want:
        caps = dict(got.captures)
        expected = want["captures"] or {}
        if set(caps) != set(expected):
            errs.append(f"{prefix}: captures {caps} != {expected}")
        else:
            for k, v in expected.items():
                ok = _same_number(v, caps[k]) if isinstance(v, (int, float)) else caps[k] == v
                if not ok:
                    errs.append(f"{prefix}: capture {k} = {caps[k]!r}, expected {v!r}")
    if "failed" in want and got.failed != want["failed"]:
        errs.append(f"{prefix}: failed {got.failed!r} != {want['failed']!r}")
    if "conflict" in want:
        c, w = got.conflict, want["conflict"]
        if c is None:
            errs.append(f"{prefix}: no conflict reported, expected {w}")
        else:
            if "channel" in w and c.channel != w["channel"]:
                errs.append(f"{prefix}: conflict channel {c.channel} != {w['channel']}")
            if "value" in w:
                ok = (
                    _same_number(w["value"], c.value) if isinstance(w["value"], (int, float)) else c.value == w["value"]
                )
                if not ok:
                    errs.append(f"{prefix}: conflict value {c.value!r} != {w['value']!r}")
            if "text" in w and case.input[c.start : c.end] != w["text"].encode("utf-8"):
                errs.append(f"{prefix}: conflict span {case.input[c.start : c.end]!r} != {w['text']!r}")
    return errs


def _check_verdicts(expected: dict[str, str], got: dict[str, Verdict], where: str) -> list[str]:
    unknown = set(expected) - set(got)
    if unknown:
        return [f"{where}: expectation names unknown rules {sorted(unknown)}"]
    errs = []
    for rule, v in got.items():
        want = expected.get(rule, "CONFIRMED")
        if v.name != want:
            errs.append(f"{where}: rule {rule} is {v.name}, expected {want}")
    return errs


def check_case(case: Case, program, open_session: Callable) -> list[str]:
    """All differences between what the backend does and what the case says."""
    errors: list[str] = []
    for label, pieces in chunkings(case):
        snaps = run(open_session, program, pieces)
        events = [e for s in snaps for e in s.events]
        where = f"{case.id} [{label}]"
        if len(events) != len(case.events):
            shown = [(e.kind, e.name, e.verdict and e.verdict.name, case.input[e.start : e.end]) for e in events]
            errors.append(f"{where}: {len(events)} events, expected {len(case.events)}: {shown}")
        else:
            for i, (want, got) in enumerate(zip(case.events, events, strict=True)):
                errors += _check_event(case, i, want, got, where)
        errors += _check_verdicts(case.verdicts, snaps[-1].verdicts, where + " final")
        check_snapshots = case.snapshots is not None and (
            label == "chunks" if case.chunks is not None else label == "whole"
        )
        if check_snapshots:
            if len(snaps) != len(case.snapshots):
                got = [
                    (len(s.events), {k: v.name for k, v in s.verdicts.items() if v.name != "CONFIRMED"}) for s in snaps
                ]
                errors.append(f"{where}: {len(snaps)} snapshots, expected {len(case.snapshots)}: {got}")
            else:
                for j, (want, got) in enumerate(zip(case.snapshots, snaps, strict=True)):
                    if "events" in want and len(got.events) != want["events"]:
                        errors.append(f"{where}: snapshot {j} has {len(got.events)} events, expected {want['events']}")
                    errors += _check_verdicts(want.get("verdicts") or {}, got.verdicts, f"{where} snapshot {j}")
        if errors:
            break  # one chunking's report is enough
    return errors
