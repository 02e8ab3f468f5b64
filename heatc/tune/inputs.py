"""What `heatc tune` reads back from a deployment: audit reports (JSON lines, as `heatc scan
--json` and the engines write them, docs/report.md) and reviewers' labels of their events.

Every report must name the build being tuned: its `module.sha256` is the sha256 of the
build's module.wasm, and a report of another build is an error (its rule names may mean other
rules). A line that is not a report is an error naming its file, line and column, unless the
caller asks to skip such lines (`skip_malformed`): then it is listed as skipped. A label names
one event of one report — the text's sha256, the rule and the event's byte span — and one that
names no event the reports hold is listed as skipped, never guessed at.

Public surface: `Event`, `Report`, `Skip`, `FileInfo`, `Labels`, `read_reports(paths, module_sha256,
module_name, skip_malformed)`, `read_labels(path, reports, skip_malformed)`, `LABELS`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from heatc.errors import Diagnostic, HeatError

LABELS = ("error", "false_alarm")
MAX_LINE_BYTES = 64 << 20  # one report holds the events of one response
_SHA = re.compile(r"^[0-9a-f]{64}$")
_SHOWN = 60  # characters of a bad value an error quotes


@dataclass(frozen=True, slots=True)
class Event:
    """A match event of a report (anchor events are not rules' and are left out)."""

    rule: str
    rejected: bool
    start: int  # byte span in the text
    end: int
    value: float | None  # the capture `v`, where the rule captured a number under that name
    places: float | None  # the capture `places(v)`
    failed: str  # the requirement that failed, canonical text ("" if none, or a conflict)


@dataclass(slots=True)
class Report:
    where: str  # file:line
    text_sha256: str
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Skip:
    where: str  # file:line
    why: str


@dataclass
class FileInfo:
    path: Path
    sha256: str
    lines: int
    reports: int
    skipped: list[Skip] = field(default_factory=list)


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


class _MalformedError(Exception):
    def __init__(self, field_path: str, expected: str, got: object = None, *, column: int = 1, plain: str = ""):
        self.column = column
        self.message = plain or f"{field_path}: expected {expected}, got {_short(got)}"
        super().__init__(self.message)


class _Lines:
    """The JSON lines of a regular file, read once: each non-blank line's object through
    `parse`, with the file's sha256 and line count as they go by. A line `parse` refuses is an
    error naming its line and column, or, with `skip_malformed`, a listed skip."""

    def __init__(self, path: Path, skip_malformed: bool):
        self.path, self.skip_malformed = Path(path), skip_malformed
        self.digest = hashlib.sha256()
        self.lines = 0
        self.skipped: list[Skip] = []

    def records(self, parse) -> Iterator[tuple[str, object]]:
        path = self.path
        if not path.is_file():
            what = "does not exist" if not path.exists() else "is not a regular file"
            raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read: {what}"))
        try:
            with open(path, "rb") as f:
                for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
                    self.digest.update(line)
                    self.lines = number
                    if len(line) > MAX_LINE_BYTES:
                        raise HeatError(
                            Diagnostic(str(path), number, 1, f"a line longer than {MAX_LINE_BYTES:,} bytes")
                        )
                    if not line.strip():
                        continue
                    try:
                        value = parse(_json(line))
                    except _MalformedError as bad:
                        if not self.skip_malformed:
                            raise HeatError(Diagnostic(str(path), number, bad.column, bad.message)) from None
                        self.skipped.append(Skip(f"{path}:{number}", bad.message))
                        continue
                    yield f"{path}:{number}", value
        except OSError as e:
            raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read: {e.strerror}")) from None


def _json(line: bytes) -> object:
    try:
        return json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise _MalformedError("", "", column=e.start + 1, plain=f"not valid UTF-8 (byte {e.start + 1})") from None
    except json.JSONDecodeError as e:
        raise _MalformedError("", "", column=e.colno, plain=f"not a JSON object: {e.msg}") from None
    except RecursionError:
        raise _MalformedError("", "", plain="not a JSON object: nested too deeply") from None


def _object(value: object, field_path: str, keys: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise _MalformedError(field_path, "an object", value)
    for k in keys:
        if k not in value:
            raise _MalformedError("", "", plain=f"{field_path + '.' if field_path else ''}{k}: missing")
    return value


def _span(value: object, field_path: str) -> tuple[int, int]:
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
        and value[0] <= value[1]
    )
    if not ok:
        raise _MalformedError(field_path, "[start, end], byte offsets with start <= end", value)
    return value[0], value[1]


def _sha(value: object, field_path: str) -> str:
    if not isinstance(value, str) or not _SHA.match(value):
        raise _MalformedError(field_path, "a sha256 (64 lower-case hex digits)", value)
    return value


def _number(captures: dict, name: str) -> float | None:
    v = captures.get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _report(data: object) -> tuple[dict, Report]:
    """(module, report) of one line's object; _MalformedError names the field that is wrong."""
    d = _object(data, "", ("format", "version"))
    if d["format"] != "heatc-audit":
        raise _MalformedError("format", '"heatc-audit" (an audit report, docs/report.md)', d["format"])
    if d["version"] != 1:
        raise _MalformedError("version", "1 (this heatc reads audit reports of version 1)", d["version"])
    _object(d, "", ("module", "text", "events"))
    module = _object(d["module"], "module", ("name", "sha256"))
    _sha(module["sha256"], "module.sha256")
    text = _object(d["text"], "text", ("sha256",))
    if not isinstance(d["events"], list):
        raise _MalformedError("events", "a list", d["events"])
    events = []
    for i, e in enumerate(d["events"]):
        fp = f"events[{i}]"
        _object(e, fp, ("kind",))
        if e["kind"] != "match":
            continue
        _object(e, fp, ("rule", "verdict", "bytes", "captures"))
        if not isinstance(e["rule"], str):
            raise _MalformedError(f"{fp}.rule", "a rule name", e["rule"])
        if e["verdict"] not in ("CONFIRMED", "REJECTED"):
            raise _MalformedError(f"{fp}.verdict", "CONFIRMED or REJECTED", e["verdict"])
        start, end = _span(e["bytes"], f"{fp}.bytes")
        caps = e["captures"]
        if not isinstance(caps, dict):
            raise _MalformedError(f"{fp}.captures", "an object", caps)
        failed = e.get("failed", "")
        if not isinstance(failed, str):
            raise _MalformedError(f"{fp}.failed", "the requirement's text", failed)
        events.append(
            Event(
                e["rule"],
                e["verdict"] == "REJECTED",
                start,
                end,
                _number(caps, "v"),
                _number(caps, "places(v)"),
                failed,
            )
        )
    return module, Report("", _sha(text["sha256"], "text.sha256"), tuple(events))


def read_reports(
    paths: list[Path], module_sha256: str, module_name: str, skip_malformed: bool = False
) -> tuple[list[Report], list[FileInfo]]:
    """Every report of `paths`, in file and line order, with what each file held. A report of
    another build is an error (all of them counted, the first named); so is a file given twice."""
    reports: list[Report] = []
    infos: list[FileInfo] = []
    seen: dict[Path, Path] = {}
    foreign: list[tuple[str, dict]] = []
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            raise HeatError(Diagnostic(str(path), 0, 0, f"given twice (as {seen[key]}): its reports would count twice"))
        seen[key] = Path(path)
        lines = _Lines(Path(path), skip_malformed)
        n = len(reports)
        for where, (module, report) in lines.records(_report):
            if module["sha256"] != module_sha256:
                foreign.append((where, module))
                continue
            report.where = where
            reports.append(report)
        infos.append(FileInfo(Path(path), lines.digest.hexdigest(), lines.lines, len(reports) - n, lines.skipped))
    if foreign:
        where, module = foreign[0]
        n = len(foreign)
        raise HeatError(
            Diagnostic(
                where.rsplit(":", 1)[0], int(where.rsplit(":", 1)[1]), 1,
                f"module.sha256: {'this report is' if n == 1 else f'{n:,} reports are'} of another build "
                f"(module {_short(module.get('name'))}, sha256 {str(module['sha256'])[:16]}…), not of "
                f"{module_name}'s ({module_sha256[:16]}…)",
                notes=["tune from the reports of the build that is deployed; if it was built by another heatc, "
                       "pass that build with --build DIR"],
            )
        )  # fmt: skip
    return reports, infos


@dataclass
class Labels:
    """Reviewers' verdicts joined to events: (report index, event index) → "error" | "false_alarm"."""

    path: Path
    sha256: str
    lines: int
    verdicts: dict[tuple[int, int], str] = field(default_factory=dict)
    used: int = 0  # label lines that named an event (a text checked twice: one line, two events)
    duplicates: int = 0  # lines repeating another line's verdict on the same event
    skipped: list[Skip] = field(default_factory=list)


def _label(data: object) -> tuple[str, str, tuple[int, int], str]:
    d = _object(data, "", ("text_sha256", "rule", "bytes", "label"))
    if not isinstance(d["rule"], str) or not d["rule"]:
        raise _MalformedError("rule", "a rule name", d["rule"])
    if d["label"] not in LABELS:
        raise _MalformedError("label", '"error" or "false_alarm"', d["label"])
    return _sha(d["text_sha256"], "text_sha256"), d["rule"], _span(d["bytes"], "bytes"), d["label"]


def read_labels(path: Path, reports: list[Report], skip_malformed: bool = False) -> Labels:
    """Join each label line to the events it names. Unknown texts, rules or spans, a false alarm
    called on an event that passed, and two lines that disagree on one event are listed as
    skipped; a line that is not a label is an error (or, with `skip_malformed`, skipped too)."""
    by_text: dict[str, list[int]] = {}
    for i, r in enumerate(reports):
        by_text.setdefault(r.text_sha256, []).append(i)
    wanted: dict[tuple[int, int], tuple[str, str]] = {}  # event → (label, where)
    disagree: dict[tuple[int, int], list[str]] = {}
    out = Labels(Path(path), "", 0)
    lines = _Lines(Path(path), skip_malformed)
    for where, (text_sha, rule, (start, end), label) in lines.records(_label):
        if text_sha not in by_text:
            out.skipped.append(Skip(where, f"no report checked a text of sha256 {text_sha[:16]}…"))
            continue
        hits = [
            (i, j)
            for i in by_text[text_sha]
            for j, e in enumerate(reports[i].events)
            if e.rule == rule and (e.start, e.end) == (start, end)
        ]
        if not hits:
            rules = sorted({e.rule for i in by_text[text_sha] for e in reports[i].events})
            known = (
                f"its events are of {', '.join(rules[:5])}{' …' if len(rules) > 5 else ''}"
                if rules
                else "it has no events"
            )
            out.skipped.append(
                Skip(where, f"no event of rule {rule!r} at bytes [{start}, {end}] in that text ({known})")
            )
            continue
        if label == "false_alarm" and not any(reports[i].events[j].rejected for i, j in hits):
            out.skipped.append(Skip(where, "a false alarm on an event that passed (CONFIRMED): nothing was raised"))
            continue
        out.used += 1
        for key in hits:
            if key in wanted and wanted[key][0] != label:
                disagree.setdefault(key, [wanted[key][1]]).append(where)
            elif key in wanted:
                out.duplicates += 1
            else:
                wanted[key] = (label, where)
    said = set()
    for key, places in sorted(disagree.items()):
        wanted.pop(key, None)
        skip = Skip(places[-1], f"labelled both error and false_alarm (also at {', '.join(places[:-1])})")
        if skip not in said:  # (a text checked twice: one line, two events)
            said.add(skip)
            out.skipped.append(skip)
    out.verdicts = {k: v[0] for k, v in sorted(wanted.items())}
    out.sha256, out.lines = lines.digest.hexdigest(), lines.lines
    out.skipped = lines.skipped + out.skipped
    return out
