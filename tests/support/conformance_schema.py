"""Reading the conformance corpus strictly (format: tests/conformance/README.md).

Every mapping in a corpus file has a fixed set of keys. An unknown key, a missing one, a
key written twice, a value of the wrong type, a stray file, or a case name used twice
anywhere in the corpus is an error that names the file, line, case, key and what is
allowed, so that a typo cannot quietly make a case test less. All problems are reported
together.

Public surface: `CORPUS`, `CorpusError`, `Case`, `ErrorCase`, `EventWant`, `ConflictWant`,
`SnapshotWant`, `DiagnosticWant`, `RUNNERS`, `load_corpus`, `load_cases`, `load_error_cases`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CORPUS = Path(__file__).resolve().parents[1] / "conformance"
ERRORS_DIR = "errors"  # compile-error files live in tests/conformance/errors/
UNREVIEWED = "UNREVIEWED"  # how tests/corpus_case.py marks a description a human must rewrite
#: Who runs the corpus, as a case's `skip` names them: the reference interpreter, the runtime's
#: backends, the torch ops' kernel (CPU here, the GPU in the device check), the Node.js host.
RUNNERS = ("reference", "wasm", "native", "op", "js")
VERDICTS = ("CONFIRMED", "PENDING", "REJECTED")


class CorpusError(ValueError):
    """The corpus breaks its own format; the message lists every problem found."""


# -- expectations, as the harness reads them -----------------------------------------------


@dataclass(frozen=True)
class ConflictWant:
    channel: str
    value: float | int | str
    span: bytes  # the bytes of the span that set the channel
    start: int | None
    end: int | None


@dataclass(frozen=True)
class EventWant:
    kind: str  # "match" | "anchor"
    name: str  # the rule or the anchor group
    verdict: str | None  # match events only
    span: bytes
    start: int | None  # checked when given
    end: int | None
    captures: dict[str, float | int | str]  # {} for an anchor event
    failed: str | None  # absent in the file = the event has none
    conflict: ConflictWant | None  # likewise


@dataclass(frozen=True)
class SnapshotWant:
    events: int
    verdicts: dict[str, str]  # unlisted rules CONFIRMED
    bytes: int | None = None  # its `bytes` counter, when given
    rejections: int | None = None  # its `rejections` counter, when given


@dataclass
class Case:
    file: str
    name: str
    rules: str
    input: bytes
    events: list[EventWant]
    verdicts: dict[str, str]  # final verdicts; unlisted rules CONFIRMED
    snapshots: list[SnapshotWant] | None = None
    chunks: list[bytes] | None = None
    # a binding case: with every `..N` written `...N` (a gap that skips values and keywords)
    # the reference does not reproduce it (tests/test_conformance.py)
    reaching_differs: bool = False
    # the final `rejections` counter, when the case states it (else: its REJECTED match events
    # of rules that are not observe-only)
    rejections: int | None = None
    # runners that leave the case out, each with the reason the corpus states (RUNNERS)
    skip: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    def skipped_by(self, runner: str) -> str | None:
        """Why `runner` leaves this case out, as the corpus says; None when it runs it."""
        reason = self.skip.get(runner)
        return None if reason is None else f"{self.id} is not run on {runner}: {reason}"


@dataclass(frozen=True)
class DiagnosticWant:
    line: int
    column: int
    message: str
    notes: tuple[str, ...]  # absent in the file = no notes


@dataclass
class ErrorCase:
    file: str
    name: str
    source: str
    errors: list[DiagnosticWant]  # every diagnostic, in order

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"


# -- the schema ----------------------------------------------------------------------------

Check = Callable[[Any], str | None]  # a problem with a scalar value, or None


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else "must be a string"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _count(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
    return None if ok else "must be a whole number >= 0"


def _position(v: Any) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1
    return None if ok else "must be a whole number >= 1"


def _verdict(v: Any) -> str | None:
    return None if v in VERDICTS else f"must be one of {', '.join(VERDICTS)}"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _outcome(v: Any) -> str | None:
    # a completed match, and every rule after finish(), is CONFIRMED or REJECTED (semantics §4, §6)
    return None if v in ("CONFIRMED", "REJECTED") else "must be CONFIRMED or REJECTED"


def _value(v: Any) -> str | None:
    ok = isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))
    return None if ok else "must be a number or a class name (a string; quote yes/no/on/off)"


def _hex(v: Any) -> str | None:
    if not isinstance(v, str):
        return "must be a string of hex digits"
    try:
        bytes.fromhex(v)
    except ValueError:
        return "is not valid hex"
    return None


@dataclass(frozen=True)
class ListOf:
    item: Shape | dict[str, Shape] | Check  # a dict: the shape named by each item's "kind"
    non_empty: bool = False


@dataclass(frozen=True)
class MapOf:
    value: Check  # keys are names (strings)


@dataclass(frozen=True)
class Shape:
    what: str  # how a message names such a mapping
    keys: dict[str, Shape | ListOf | MapOf | Check]  # every key allowed, and what its value must be
    required: tuple[str, ...] = ()
    exactly_one: tuple[tuple[str, ...], ...] = ()
    at_most_one: tuple[tuple[str, ...], ...] = ()
    rule: Callable[[dict], str | None] | None = None  # a check across keys


def _why_rejected(event: dict) -> str | None:
    # a rejected match says why (semantics §4): the failed requirement or the conflict
    why = "failed" in event or "conflict" in event
    if event.get("verdict") == "REJECTED" and not why:
        return "a REJECTED match event needs failed or conflict"
    if event.get("verdict") == "CONFIRMED" and why:
        return "a CONFIRMED match event has no failed or conflict"
    return None


def _known_runners(case: dict) -> str | None:
    # (a misspelt runner would leave the case running where it was meant to be skipped, or the reverse)
    unknown = sorted(set(case.get("skip") or {}) - set(RUNNERS))
    if unknown:
        return f"skip names no runner: {', '.join(unknown)} (the runners: {', '.join(RUNNERS)})"
    return None


_SPAN = {"text": _str, "text_hex": _hex, "start": _count, "end": _count}
CONFLICT = Shape(
    "conflict",
    {"channel": _text, "value": _value, **_SPAN},
    required=("channel", "value"),
    exactly_one=(("text", "text_hex"),),
)
MATCH_EVENT = Shape(
    "match event",
    {
        "kind": _str,
        "rule": _text,
        "verdict": _outcome,
        **_SPAN,
        "captures": MapOf(_value),
        "failed": _text,
        "conflict": CONFLICT,
    },
    required=("kind", "rule", "verdict", "captures"),
    exactly_one=(("text", "text_hex"),),
    at_most_one=(("failed", "conflict"),),
    rule=_why_rejected,
)
ANCHOR_EVENT = Shape(
    "anchor event",
    {"kind": _str, "anchor": _text, **_SPAN},
    required=("kind", "anchor"),
    exactly_one=(("text", "text_hex"),),
)
EVENT_KINDS = {"match": MATCH_EVENT, "anchor": ANCHOR_EVENT}
SNAPSHOT = Shape(
    "snapshot",
    {"events": _count, "verdicts": MapOf(_verdict), "bytes": _count, "rejections": _count},
    required=("events",),
)
RUN_CASE = Shape(
    "case",
    {
        "name": _text,
        "input": _str,
        "input_hex": _hex,
        "chunks": ListOf(_str),
        "chunks_hex": ListOf(_hex),
        "events": ListOf(EVENT_KINDS),
        "verdicts": MapOf(_outcome),
        "snapshots": ListOf(SNAPSHOT, non_empty=True),
        "reaching_differs": _bool,
        "rejections": _count,
        "skip": MapOf(_text),
    },
    required=("name", "events"),
    exactly_one=(("input", "input_hex"),),
    at_most_one=(("chunks", "chunks_hex"),),
    rule=_known_runners,
)
RUN_FILE = Shape(
    "file",
    {"description": _text, "rules": _text, "cases": ListOf(RUN_CASE, non_empty=True)},
    required=("description", "rules", "cases"),
)
DIAGNOSTIC = Shape(
    "diagnostic",
    {"line": _position, "column": _position, "message": _text, "notes": ListOf(_text)},
    required=("line", "column", "message"),
)
ERROR_CASE = Shape(
    "case",
    {"name": _text, "source": _str, "errors": ListOf(DIAGNOSTIC, non_empty=True)},
    required=("name", "source", "errors"),
)
ERROR_FILE = Shape(
    "file", {"description": _text, "cases": ListOf(ERROR_CASE, non_empty=True)}, required=("description", "cases")
)


class _Map(dict):
    """A YAML mapping that remembers its line (for messages)."""

    line = 0


class _DuplicateKeyError(Exception):
    def __init__(self, line: int, key: Any):
        self.line, self.key = line, key


class _Loader(yaml.SafeLoader):
    pass


def _construct_map(loader: _Loader, node: yaml.MappingNode):
    out = _Map()
    out.line = node.start_mark.line + 1
    yield out
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:  # PyYAML would keep the last one silently
            raise _DuplicateKeyError(key_node.start_mark.line + 1, key)
        out[key] = loader.construct_object(value_node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


class _Problems:
    def __init__(self, path: str):
        self.path = path
        self.found: list[str] = []

    def add(self, line: int, where: str, message: str) -> None:
        self.found.append(f"{self.path}:{line}: {where}: {message}" if where else f"{self.path}:{line}: {message}")


def _a(what: str) -> str:
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _names(keys) -> str:
    return ", ".join(keys)


def _validate(value: Any, shape: Shape, where: str, line: int, out: _Problems) -> bool:
    """Report every problem of one mapping and its contents; True when there was none."""
    before = len(out.found)
    if not isinstance(value, dict):
        out.add(line, where, f"{_a(shape.what)} must be a mapping of keys ({_names(shape.keys)}), not {value!r}")
        return False
    line = getattr(value, "line", line)
    for key in value:
        if key not in shape.keys:
            close = difflib.get_close_matches(str(key), list(shape.keys), n=1, cutoff=0.6)
            hint = f' (did you mean "{close[0]}"?)' if close else ""
            out.add(line, where, f'unknown key "{key}" in {_a(shape.what)}{hint}; allowed: {_names(shape.keys)}')
    for key in shape.required:
        if key not in value:
            out.add(line, where, f'{_a(shape.what)} needs "{key}" (keys: {_names(shape.keys)})')
    for group in shape.exactly_one:
        if sum(k in value for k in group) != 1:
            out.add(line, where, f"{_a(shape.what)} needs exactly one of {_names(group)}")
    for group in shape.at_most_one:
        if sum(k in value for k in group) > 1:
            out.add(line, where, f"{_a(shape.what)} takes at most one of {_names(group)}")
    for key, kind in shape.keys.items():
        if key in value:
            _validate_value(value[key], kind, f"{where}, {key}" if where else key, line, out)
    problem = shape.rule(value) if shape.rule and len(out.found) == before else None
    if problem:
        out.add(line, where, problem)
    return len(out.found) == before


def _validate_value(value: Any, kind: Any, where: str, line: int, out: _Problems) -> None:
    if isinstance(kind, Shape):
        _validate(value, kind, where, line, out)
    elif isinstance(kind, dict):  # a shape chosen by the mapping's "kind"
        chosen = kind.get(value.get("kind")) if isinstance(value, dict) else None
        if chosen is None:
            got = value.get("kind") if isinstance(value, dict) else value
            line = getattr(value, "line", line)
            out.add(line, where, f'needs "kind: {" or kind: ".join(kind)}", not {got!r}')
        else:
            _validate(value, chosen, where, line, out)
    elif isinstance(kind, ListOf):
        if not isinstance(value, list):
            out.add(line, where, f"must be a list, not {value!r}")
        elif kind.non_empty and not value:
            out.add(line, where, "must not be empty (leave the key out instead)")
        else:
            for i, item in enumerate(value):
                named = isinstance(item, dict) and isinstance(item.get("name"), str)
                label = f'case "{item["name"]}"' if named else f"{where}[{i}]"
                _validate_value(item, kind.item, label, getattr(item, "line", line), out)
    elif isinstance(kind, MapOf):
        if not isinstance(value, dict):
            out.add(line, where, f"must be a mapping, not {value!r}")
            return
        for k, v in value.items():
            if not isinstance(k, str):
                out.add(line, where, f"the key {k!r} must be a name (quote it: YAML read it as {type(k).__name__})")
            problem = kind.value(v)
            if problem:
                out.add(line, f"{where}, {k}", f"{v!r} {problem}")
    else:
        problem = kind(value)
        if problem:
            out.add(line, where, f"{value!r} {problem}")


# -- reading files -------------------------------------------------------------------------


def _span(d: dict) -> bytes:
    return bytes.fromhex(d["text_hex"]) if "text_hex" in d else d["text"].encode("utf-8")


def _event(d: dict) -> EventWant:
    c = d.get("conflict")
    conflict = ConflictWant(c["channel"], c["value"], _span(c), c.get("start"), c.get("end")) if c else None
    return EventWant(
        d["kind"], d.get("rule", d.get("anchor")), d.get("verdict"), _span(d), d.get("start"), d.get("end"),
        dict(d.get("captures") or {}), d.get("failed"), conflict,
    )  # fmt: skip


def _run_case(file: str, rules: str, c: dict, out: _Problems) -> Case | None:
    data = bytes.fromhex(c["input_hex"]) if "input_hex" in c else c["input"].encode("utf-8")
    chunks = None
    if "chunks" in c:
        chunks = [x.encode("utf-8") for x in c["chunks"]]
    elif "chunks_hex" in c:
        chunks = [bytes.fromhex(x) for x in c["chunks_hex"]]
    if chunks is not None and b"".join(chunks) != data:
        out.add(c.line, f'case "{c["name"]}"', "the chunks do not join to the input")
        return None
    snapshots = None
    if "snapshots" in c:
        snapshots = [
            SnapshotWant(s["events"], dict(s.get("verdicts") or {}), s.get("bytes"), s.get("rejections"))
            for s in c["snapshots"]
        ]
    events = [_event(e) for e in c["events"]]
    return Case(
        file, c["name"], rules, data, events, dict(c.get("verdicts") or {}), snapshots, chunks,
        bool(c.get("reaching_differs")), c.get("rejections"), dict(c.get("skip") or {}),
    )  # fmt: skip


def _error_case(file: str, c: dict) -> ErrorCase:
    errors = [DiagnosticWant(e["line"], e["column"], e["message"], tuple(e.get("notes") or ())) for e in c["errors"]]
    return ErrorCase(file, c["name"], c["source"], errors)


def _read(path: Path, out: _Problems) -> dict | None:
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # a SafeLoader
    except _DuplicateKeyError as e:
        out.add(e.line, "", f'the key "{e.key}" appears twice in one mapping (YAML would keep only the last)')
        return None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        out.add(mark.line + 1 if mark else 0, "", f"not valid YAML: {getattr(e, 'problem', e)}")
        return None
    return doc


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _corpus_files(directory: Path, problems: list[str]) -> list[tuple[Path, Shape]]:
    def stray(path: Path, allowed: str) -> None:
        problems.append(f"{_shown(path)}: not part of the corpus format ({allowed})")

    for path in sorted(directory.iterdir()):
        if not (path.name == "README.md" or path.suffix == ".yaml" or (path.name == ERRORS_DIR and path.is_dir())):
            stray(path, f"*.yaml, {ERRORS_DIR}/*.yaml, README.md")
    files = [(p, RUN_FILE) for p in sorted(directory.glob("*.yaml"))]
    errors_dir = directory / ERRORS_DIR
    if errors_dir.is_dir():
        for path in sorted(errors_dir.iterdir()):
            if path.suffix != ".yaml":
                stray(path, f"{ERRORS_DIR}/*.yaml")
        files += [(p, ERROR_FILE) for p in sorted(errors_dir.glob("*.yaml"))]
    return files


def _check_names(doc: Any, seen: dict[str, str], out: _Problems) -> None:
    """Names unique across the corpus, checked even in a file with other problems."""
    cases = doc.get("cases") if isinstance(doc, dict) else None
    for c in cases if isinstance(cases, list) else []:
        if isinstance(c, _Map) and isinstance(c.get("name"), str):
            if c["name"] in seen:
                out.add(c.line, f'case "{c["name"]}"', f"the name is already used at {seen[c['name']]}")
            seen.setdefault(c["name"], f"{out.path}:{c.line}")


def load_corpus(directory: Path = CORPUS, allow_unreviewed: bool = False) -> tuple[list[Case], list[ErrorCase]]:
    """Every case of the corpus, or a CorpusError listing every problem in it.
    `allow_unreviewed` is for tests/corpus_case.py checking what it has just written."""
    problems: list[str] = []
    cases: list[Case] = []
    error_cases: list[ErrorCase] = []
    seen: dict[str, str] = {}
    for path, shape in _corpus_files(directory, problems):
        shown = path.relative_to(directory).as_posix()
        out = _Problems(_shown(path))
        doc = _read(path, out)
        _check_names(doc, seen, out)
        if doc is not None and _validate(doc, shape, "", 1, out) and not out.found:
            if str(doc["description"]).startswith(UNREVIEWED) and not allow_unreviewed:
                out.add(doc.line, "", f"the description starts with {UNREVIEWED}: review every expectation against "
                        "docs/semantics.md, then say in the description what the cases exercise")  # fmt: skip
            for c in doc["cases"]:
                if shape is ERROR_FILE:
                    error_cases.append(_error_case(shown, c))
                elif (case := _run_case(shown, doc["rules"], c, out)) is not None:
                    cases.append(case)
        problems += out.found
    if problems:
        raise CorpusError(f"the conformance corpus in {directory} breaks its format:\n  " + "\n  ".join(problems))
    return cases, error_cases


def load_cases(directory: Path = CORPUS) -> list[Case]:
    return load_corpus(directory)[0]


def load_error_cases(directory: Path = CORPUS) -> list[ErrorCase]:
    return load_corpus(directory)[1]
