"""An audit report's JSON text, written straight from a scan's event records.

`audit_line(report, policy, extra)` is `json.dumps({**report.audit(policy).to_json(), **extra},
ensure_ascii=False)` — the same characters — without the objects in between: a large
document's report has an `Event`, a dict and a JSON encoder pass per event, and those cost
several times the scan itself (32 MB of clinical notes, 92,000 events: 0.2 s of scan, 0.8 s
of report). Here the records are read as one numpy array and the common event (a match
whose captures are finite numbers, no conflict, its span inside the text) is written by one
string template per rule and verdict — by the native extension where it is built
(cuda_bridge/src/heatc_audit_json.h, `events_json`), else here; every other record goes
through the general path (`RecordDecoder.event`, `audit._events_json`) one by one, and a
report whose records do not fit the fast path at all (a span past the text: no heatc module
writes one) is written the general way whole, so the output never depends on which path
wrote it. `scan_line` writes each run of records while the scan goes on (`overlap`).

Public surface: `audit_line(report, policy=None, extra=None, facts=None)`, `scan_line(checker, text, facts)`,
`TextFacts(data)`, `NATIVE` (False: the Python writer alone).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Callable
from json.encoder import encode_basestring

import numpy as np

from ..abi import EVENT, EVENT_MATCH, NO_INDEX, VERDICT_NAMES
from ..args import as_bytes
from .audit import (
    COUNTERS,
    AuditReport,
    ModuleInfo,
    Policy,
    RuleOutcome,
    _events_json,
    audit_report,
    confidence,
    continuation_bytes,
)
from .overlap import scan_overlapped
from .records import RecordDecoder
from .report import Event, Report, Verdict

_NUMPY = {"B": "u1", "H": "<u2", "I": "<u4", "i": "<i4", "Q": "<u8", "d": "<f8"}  # struct code → dtype


def audit_line(
    report: Report, policy: Policy | None = None, extra: dict | None = None, facts: TextFacts | None = None
) -> str:
    """The report's audit record (`Report.audit(policy).to_json()`) with `extra`'s keys added
    at the end, as `json.dumps(..., ensure_ascii=False)` writes it. `facts`: the scanned
    text's `TextFacts`, made before the scan (its hash then runs beside the scan)."""
    runs = getattr(report, "_runs", None)
    source = report._source
    if runs is None or source is None or not callable(report._events):  # (no records, or already decoded)
        return _dumps(report.audit(policy).to_json(), extra)
    module, data = source
    decoder, records = runs
    writer = _Writer(module, data, decoder, facts)
    for run in records:
        writer.add(run)
    return writer.line(records, report.verdicts, report.counters, policy, extra)


def scan_line(checker, text: bytes, facts: TextFacts | None = None) -> tuple[Report, float, Callable[..., str]]:
    """`checker.scan(text)`, its records written while the scan goes on (`overlap`): (the
    report, the scan's seconds, `line(policy=None, extra=None, encoded=False)` → the audit
    line as `audit_line` writes it, or its UTF-8)."""
    data = as_bytes(text, "text")
    writer = _Writer(checker.module_info, data, checker._decoder, facts)
    report, seconds = scan_overlapped(checker, data, writer.add)

    def line(policy: Policy | None = None, extra: dict | None = None, encoded: bool = False) -> str | bytes:
        return writer.line(report._runs[1], report.verdicts, report.counters, policy, extra, encoded)

    return report, seconds, line


def _dumps(record: dict, extra: dict | None) -> str:
    return json.dumps({**record, **(extra or {})}, ensure_ascii=False)


HASH_IN_THREAD_ABOVE = 1 << 20  # bytes of text: a smaller one is hashed faster than a thread starts


class TextFacts:
    """What a report needs of its text alone: its sha256 — computed in a thread from the
    start (hashlib releases the interpreter lock over a large buffer: made before the scan,
    it costs no wall time on a second core) — and its UTF-8 continuation bytes."""

    def __init__(self, data: bytes):
        self.data = data
        self._sha256 = ""
        self._thread: threading.Thread | None = None
        if len(data) >= HASH_IN_THREAD_ABOVE:
            self._thread = threading.Thread(target=self._hash, daemon=True)
            self._thread.start()
        self._continuation: np.ndarray | None = None

    def _hash(self) -> None:
        self._sha256 = hashlib.sha256(self.data).hexdigest()

    @property
    def sha256(self) -> str:
        if self._thread is not None:
            self._thread.join()
        elif not self._sha256:  # (a small text: hashed when asked, no thread)
            self._hash()
        return self._sha256

    @property
    def continuation(self) -> np.ndarray:
        if self._continuation is None:
            self._continuation = continuation_bytes(self.data)
        return self._continuation

    def chars(self, offsets: np.ndarray) -> np.ndarray:
        """The character offsets of byte offsets within the text (`audit.char_offsets`)."""
        if not len(self.continuation):
            return offsets
        return offsets - np.searchsorted(self.continuation, offsets, side="left")


class _Writer:
    """The events of one scan, written run by run as the scan drains its records (`add`),
    then the whole line (`line`)."""

    def __init__(self, module: ModuleInfo, data: bytes, decoder: RecordDecoder, facts: TextFacts | None):
        self.module, self.data, self.decoder = module, data, decoder
        self.facts = facts if facts is not None and facts.data is data else TextFacts(data)
        self.dtype = _dtype(decoder)
        self.parts: list = []  # each run's events, JSON, joined (str; bytes from the native writer)
        self.matches = np.zeros(len(decoder.rule_names), np.int64)  # by rule: fast matches, rejected ones
        self.rejected = np.zeros(len(decoder.rule_names), np.int64)
        self.general: list[Event] = []  # the events of the records the general path wrote
        self.whole = False  # a span past the text: the report is written the general way, whole

    def add(self, raw: bytes) -> None:
        """Write one run of event records (in stream order, after the runs before it)."""
        if self.whole or not raw:
            return
        data, decoder, facts = self.data, self.decoder, self.facts
        recs = np.frombuffer(raw, self.dtype)
        n = len(data)
        start, end = recs["start"], recs["end"]
        has_conflict = recs["conflict"] != NO_INDEX
        # a span past the text (or reversed) never comes out of a heatc module: the general
        # path, whole, writes what it always wrote (or its error)
        inside = (start <= end) & (end <= n)
        inside &= ~has_conflict | ((recs["conflict_start"] <= n) & (recs["conflict_end"] <= n))
        if not inside.all():
            self.whole = True
            return
        fast = self._fast(recs)
        events: list[str] = [""] * len(recs)
        # the general records: decoded one by one, in stream order (a malformed one raises
        # ModuleError here, as a scan's events do when read)
        size, unpack = decoder.event_size, decoder.event_record.unpack_from
        decoded = [(i, decoder.event(unpack(raw, i * size))) for i in np.flatnonzero(~fast).tolist()]
        if decoded:
            offsets = [0, n]
            for _, e in decoded:
                offsets += (e.start, e.end)
                if e.conflict is not None:
                    offsets += (e.conflict.start, e.conflict.end)
            at = np.array(offsets, np.int64)  # (every span is inside the text: checked above)
            chars = dict(zip(offsets, facts.chars(at).tolist(), strict=True))
            for (i, e), d in zip(decoded, _events_json(data, [e for _, e in decoded], chars), strict=True):
                events[i] = json.dumps(d, ensure_ascii=False)
                self.general.append(e)
        native = _native_events_json()
        if native is not None:
            self.parts.append(self._write_native(native, recs, fast, [events[i].encode() for i, _ in decoded]))
        else:
            self._write_fast(recs[fast], np.flatnonzero(fast), events)
            self.parts.append(", ".join(events))
        # the rules that matched, as `audit.triggered_rules` counts them
        rule = recs["index"][fast].astype(np.int64)
        self.matches += np.bincount(rule, minlength=len(self.matches))
        self.rejected += np.bincount(rule[recs["verdict"][fast] == Verdict.REJECTED], minlength=len(self.matches))

    def line(
        self, records: list[bytes], verdicts, counters, policy: Policy | None, extra: dict | None, encoded=False
    ) -> str | bytes:
        """The audit line: str, or with `encoded` its UTF-8 (what the native writer makes)."""
        if self.whole:
            events = self.decoder.scan_events(records)
            text = _dumps(audit_report(self.module, self.data, events, verdicts, counters, policy).to_json(), extra)
            return text.encode() if encoded else text
        counts: dict[str, list[int]] = {}
        for name, m, r in zip(self.decoder.rule_names, self.matches.tolist(), self.rejected.tolist(), strict=True):
            if m:
                c = counts.setdefault(name, [0, 0])
                c[0] += m
                c[1] += r
        for e in self.general:
            if e.kind == "match":
                c = counts.setdefault(e.name, [0, 0])
                c[0] += 1
                c[1] += e.verdict is Verdict.REJECTED
        head = _report(self.module, self.data, counts, verdicts, counters, policy, self.facts).to_json()
        out = _splice({**head, **(extra or {})}, [p for p in self.parts if p])
        if isinstance(out, bytes):
            return out if encoded else out.decode()
        return out.encode() if encoded else out

    def _fast(self, recs: np.ndarray) -> np.ndarray:
        """Which records the template writes: matches of a rule whose captures are all
        numbers (their names each once), finite, no conflict, a requirement in its table."""
        t = _templates(self.decoder)
        rule = recs["index"].astype(np.int64)
        known = rule < len(t.simple) - 1
        fast = (recs["kind"] == EVENT_MATCH) & (recs["conflict"] == NO_INDEX) & known & (recs["verdict"] < 3)
        r = np.where(known, rule, len(t.simple) - 1)
        fast &= t.simple[r]
        failed = recs["failed"]
        fast &= (failed == NO_INDEX) | ((failed >= 0) & (failed < t.n_requirements[r]))
        if t.n_captures:
            caps = recs["captures"].reshape(len(recs), -1)
            fast &= (np.isfinite(caps) | ~t.uses[r]).all(axis=1)
        return fast

    def _write_native(self, native, recs: np.ndarray, fast: np.ndarray, general: list[bytes]) -> bytes:
        """The run's events, UTF-8, by the native writer (cuda_bridge/src/heatc_audit_json.h):
        the fast records from these arrays, the others given (`general`, in record order)."""
        t = _templates(self.decoder)
        rule = np.where(fast, recs["index"], 0).astype(np.int64)
        start, end = recs["start"].astype(np.int64), recs["end"].astype(np.int64)
        failed = recs["failed"].astype(np.int64)
        failed = np.where(fast & (failed >= 0), t.failed_base[rule] + failed, -1)
        key = rule * 3 + np.where(fast, recs["verdict"], 0)
        caps = np.ascontiguousarray(recs["captures"], np.float64) if t.n_captures else np.zeros(0)
        cstart, cend = self.facts.chars(start), self.facts.chars(end)
        return native(self.data, len(recs), fast.view(np.uint8), start, end, cstart, cend, key, rule, caps,
                      t.n_captures, failed, t.prefix_bytes, t.capture_keys, t.failed_bytes, general)  # fmt: skip

    def _write_fast(self, sel: np.ndarray, at: np.ndarray, events: list[str]) -> None:
        """The records `sel` (at `at` in the run) by their rules' templates."""
        if not len(at):
            return
        t = _templates(self.decoder)
        data, facts = self.data, self.facts
        rule = sel["index"].astype(np.int64)
        start, end = sel["start"].astype(np.int64), sel["end"].astype(np.int64)
        starts, ends = start.tolist(), end.tolist()
        spans = list(map(data.__getitem__, map(slice, starts, ends)))
        try:  # (strict decoding is the C method alone; it gives what "replace" gives on valid UTF-8)
            texts = list(map(encode_basestring, map(bytes.decode, spans)))
        except UnicodeDecodeError:
            texts = list(map(encode_basestring, map(_decode, spans)))
        rules = rule.tolist()
        if t.n_captures:
            # one capture (most rules): its key, then the value's repr; others by their template
            caps = sel["captures"].reshape(len(sel), -1)
            keys = map(t.single.__getitem__, rules)
            captures = [f"{k}{v!r}}}" if k else "" for k, v in zip(keys, caps[:, 0].tolist())]  # noqa: B905
            for j in np.flatnonzero(~t.is_single[rule]).tolist():
                captures[j] = t.captures[rules[j]].format(*caps[j].tolist())
        else:
            captures = ["{}"] * len(sel)
        failed = [""] * len(sel)
        for j in np.flatnonzero(sel["failed"] != NO_INDEX).tolist():
            failed[j] = t.failed[int(rule[j])][int(sel["failed"][j])]
        prefixes = map(t.prefix.__getitem__, (rule * 3 + sel["verdict"]).tolist())
        cstarts, cends = facts.chars(start).tolist(), facts.chars(end).tolist()
        written = [
            f'{p}{a}, {b}], "chars": [{x}, {y}], "text": {text}, "captures": {c}{f}}}'
            for p, a, b, x, y, text, c, f in zip(prefixes, starts, ends, cstarts, cends, texts, captures, failed)  # noqa: B905
        ]
        for i, s in zip(at.tolist(), written, strict=True):
            events[i] = s


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _dtype(decoder: RecordDecoder) -> np.dtype:
    fields = [(name, _NUMPY[code]) for name, code in EVENT.fields]
    n_caps = (decoder.event_size - EVENT.size) // 8
    if n_caps:
        fields.append(("captures", "<f8", (n_caps,)))
    dtype = np.dtype(fields)
    assert dtype.itemsize == decoder.event_size
    return dtype


def _report(module, data, counts, verdicts, counters, policy, facts) -> AuditReport:
    verdicts = dict(verdicts)
    triggered = tuple(
        RuleOutcome(name, module.descriptions.get(name, ""), module.heat.get(name, 0.5), v, *counts.get(name, (0, 0)))
        for name, v in verdicts.items()
        if name in counts or v is not Verdict.CONFIRMED
    )
    n = len(data)
    text_chars = n - len(facts.continuation)
    return AuditReport(
        module=module,
        text_bytes=n,
        text_chars=text_chars,
        text_sha256=facts.sha256,
        verdict=max(verdicts.values(), default=Verdict.CONFIRMED),
        confidence=confidence(verdicts, module.heat),
        policy=policy or module.policy or Policy(),
        verdicts=verdicts,
        triggered=triggered,
        events=(),
        counters={k: int(counters[k]) for k in COUNTERS},
    )


def _splice(record: dict, events: list[str] | list[bytes]) -> str | bytes:
    """json.dumps(record) with its "events" list written from `events`, each run already JSON
    (bytes, UTF-8, from the native writer: then the line is bytes)."""
    keys = list(record)
    k = keys.index("events")
    head = json.dumps({key: record[key] for key in keys[:k]}, ensure_ascii=False)[:-1]
    tail = {key: record[key] for key in keys[k + 1 :]}
    after = ", " + json.dumps(tail, ensure_ascii=False)[1:] if tail else "}"
    if events and isinstance(events[0], bytes):
        return b"".join([head.encode(), b', "events": [', b", ".join(events), b"]", after.encode()])  # type: ignore[arg-type]
    return f'{head}, "events": [{", ".join(events)}]{after}'  # type: ignore[arg-type]


class _Templates:
    """Per rule of a module, what the fast path writes; one more row than rules, never
    fast, stands for an index out of the table."""

    def __init__(self, decoder: RecordDecoder):
        n_caps = (decoder.event_size - EVENT.size) // 8
        n = len(decoder.rule_names)
        self.n_captures = n_caps
        self.simple = np.zeros(n + 1, bool)
        self.uses = np.zeros((n + 1, max(n_caps, 1)), bool)
        self.n_requirements = np.array([len(q) for q in decoder._requirements] + [0], np.int64)
        self.prefix: list[str] = []  # by rule × 3 + verdict
        self.captures: list[str] = []  # str.format templates over the record's capture values
        self.failed: list[list[str]] = []
        self.capture_keys: list[tuple] = []  # per rule: (JSON key, capture index), for the native writer
        self.single: list[str] = []  # a rule with one capture: '{"name": ' (else "")
        self.is_single = np.zeros(n + 1, bool)
        for r, name in enumerate(decoder.rule_names):
            for v in VERDICT_NAMES:
                self.prefix.append(
                    f'{{"kind": "match", "rule": {encode_basestring(name)}, "verdict": "{v}", "bytes": ['
                )
            self.failed.append([f', "failed": {encode_basestring(str(q))}' for q in decoder._requirements[r]])
            names = decoder._number_names[r]
            one = names is not None and len(names) == 1 and n_caps >= 1
            self.single.append(f"{{{encode_basestring(names[0])}: " if one else "")
            self.is_single[r] = one
            if names is None or len(names) > n_caps:
                self.captures.append("")
                self.capture_keys.append(())
                continue
            # dict(captures): a name given twice keeps its first place and its last value
            last = {c: i for i, c in enumerate(names)}
            keys = (encode_basestring(c).replace("{", "{{").replace("}", "}}") for c in last)
            fields = ", ".join(f"{key}: {{{i}!r}}" for key, i in zip(keys, last.values(), strict=True))
            self.captures.append("{{" + fields + "}}")
            self.capture_keys.append(tuple((f"{encode_basestring(c)}".encode(), i) for c, i in last.items()))
            self.simple[r] = True
            self.uses[r, list(last.values())] = True

        # the same, as the native writer takes them
        self.prefix_bytes = tuple(p.encode() for p in self.prefix)
        self.capture_keys = tuple(self.capture_keys)
        self.failed_bytes = tuple(f.encode() for fs in self.failed for f in fs)
        self.failed_base = np.cumsum([0] + [len(fs) for fs in self.failed], dtype=np.int64)


_TEMPLATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
NATIVE = True  # the native writer, where the extension is built (False: the Python one; the tests run both)


def _native_events_json():
    if not NATIVE:
        return None
    try:
        from .._native import events_json
    except ImportError:
        return None
    return events_json


def _templates(decoder: RecordDecoder) -> _Templates:
    t = _TEMPLATES.get(decoder)
    if t is None:
        t = _TEMPLATES[decoder] = _Templates(decoder)
    return t
