"""What every backend reports: verdicts, events and snapshots (docs/semantics.md §6–7)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from ..abi import VERDICT_CONFIRMED, VERDICT_PENDING, VERDICT_REJECTED


class Verdict(IntEnum):
    """Ordered by severity: the verdict of a group is the worst of its members. The values
    are the ABI's verdict codes."""

    CONFIRMED = VERDICT_CONFIRMED
    PENDING = VERDICT_PENDING
    REJECTED = VERDICT_REJECTED

    def __str__(self) -> str:
        return self.name


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, default=Verdict.CONFIRMED)


@dataclass(frozen=True)
class Conflict:
    """The channel value a rejected match disagreed with, and the span that set it."""

    channel: str
    value: float | str
    start: int
    end: int


@dataclass(frozen=True)
class Event:
    kind: str  # "match" | "anchor"
    name: str  # the rule (match) or anchor group (anchor)
    start: int  # byte span [start, end) in the stream
    end: int
    verdict: Verdict | None = None  # match events only
    captures: tuple[tuple[str, float | str], ...] = ()
    failed: str | None = None  # the requirement that failed, canonical text
    conflict: Conflict | None = None

    @classmethod
    def _match(cls, name, start, end, verdict, captures, failed, conflict) -> Event:
        """A match event, built as the generated __init__ would build it at half the cost (a
        frozen dataclass sets its fields one by one through object.__setattr__): decoding
        events is on the hot path of a scan."""
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", {
            "kind": "match", "name": name, "start": start, "end": end, "verdict": verdict,
            "captures": captures, "failed": failed, "conflict": conflict,
        })  # fmt: skip
        return event

    def to_json(self, stream: bytes | None = None, span: Callable[[int, int], dict] | None = None) -> dict:
        """The event as JSON; `span(start, end)` gives each span's fields (default: `start`,
        `end` and, with the `stream`, its `text`; audit reports add character offsets)."""
        if span is None:

            def span(start: int, end: int) -> dict:
                if stream is None:
                    return {"start": start, "end": end}
                return {"start": start, "end": end, "text": stream[start:end].decode("utf-8", errors="replace")}

        d: dict = {"kind": self.kind}
        d["rule" if self.kind == "match" else "anchor"] = self.name
        if self.verdict is not None:
            d["verdict"] = self.verdict.name
        d.update(span(self.start, self.end))
        if self.kind == "match":
            d["captures"] = dict(self.captures)
        if self.failed is not None:
            d["failed"] = self.failed
        if self.conflict is not None:
            c = self.conflict
            d["conflict"] = {"channel": c.channel, "value": c.value, **span(c.start, c.end)}
        return d


_BY_CODE = (Verdict.CONFIRMED, Verdict.PENDING, Verdict.REJECTED)


class VerdictMap(Mapping):
    """Rule name → verdict, decoded on access from a module's raw verdict bytes (building a
    dict for every snapshot of every sequence would dominate a decoding step)."""

    __slots__ = ("_codes", "_index")

    def __init__(self, index: dict[str, int], codes: bytes):
        self._index = index  # rule name → position, shared by every snapshot of a module
        self._codes = codes

    def __getitem__(self, name: str) -> Verdict:
        return _BY_CODE[self._codes[self._index[name]]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass(slots=True)  # one per trigger per sequence while decoding: keep it cheap
class Snapshot:
    verdicts: Mapping[str, Verdict]  # every rule, in program (heat) order
    events: list[Event]  # since the previous snapshot
    counters: dict[str, int] = field(default_factory=dict)
    final: bool = False

    @property
    def verdict(self) -> Verdict:
        return worst(self.verdicts.values())


class Verdicts:
    """`verdict` (the worst) and `rejected` (the rules REJECTED) of anything that holds
    `verdicts`, rule name → Verdict: a `Report`, a generation's report."""

    __slots__ = ()
    verdicts: Mapping[str, Verdict]

    @property
    def verdict(self) -> Verdict:
        return worst(self.verdicts.values())

    @property
    def rejected(self) -> list[str]:
        return [name for name, v in self.verdicts.items() if v is Verdict.REJECTED]


class Report(Verdicts):
    """The outcome of checking one whole document.

    `events` may be given as a function that returns them: a backend passes one to decode
    its event records when they are first read, so that a caller who reads only the
    verdicts does not pay for the Python objects (on a busy document, a sixth of a scan).

    `source` — the module's identity (`audit.ModuleInfo`) and the text's bytes — is what
    `audit()` needs besides; `Checker.scan()` gives it."""

    __slots__ = ("_events", "_runs", "_source", "counters", "verdicts")

    def __init__(
        self,
        verdicts: Mapping[str, Verdict],  # every rule's final verdict, in program (heat) order
        events: list[Event] | Callable[[], list[Event]],
        counters: dict[str, int],
        source: tuple | None = None,  # (audit.ModuleInfo, text bytes)
        runs: tuple | None = None,  # (records.RecordDecoder, [event records]): audit_text writes from them
    ):
        self.verdicts = verdicts
        self.counters = counters
        self._events = events
        self._source = source
        self._runs = runs

    @property
    def events(self) -> list[Event]:
        if callable(self._events):
            self._events = self._events()
        return self._events

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Report):
            return NotImplemented
        return (dict(self.verdicts), self.events, self.counters) == (dict(other.verdicts), other.events, other.counters)

    __hash__ = None  # type: ignore[assignment]  (mutable, as the dataclass it replaces)

    def __reduce__(self):
        # pickled and copied with its events decoded (the decoder belongs to a live module)
        return (Report, (dict(self.verdicts), self.events, self.counters, self._source))

    def __repr__(self) -> str:
        return f"Report(verdicts={dict(self.verdicts)!r}, events={self.events!r}, counters={self.counters!r})"

    def audit(self, policy=None):
        """The audit report (`audit.AuditReport`: module, triggered rules, events with byte and
        character spans, confidence and the `audit.Policy`'s action; docs/report.md)."""
        if self._source is None:
            raise ValueError(
                "this report does not know its module and text: audit it with "
                "heatc_runtime.reports.audit.audit_report(module, text, events, verdicts, counters)"
            )
        module, text = self._source  # (an audit.ModuleInfo: it audits, and this module never imports audit)
        return module.audit(text, self.events, self.verdicts, self.counters, policy)

    def to_json(self, stream: bytes | None = None) -> dict:
        return {
            "verdict": self.verdict.name,
            "rules": {k: v.name for k, v in self.verdicts.items()},
            "events": [e.to_json(stream) for e in self.events],
            "counters": self.counters,
        }
