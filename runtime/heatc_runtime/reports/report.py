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
    """The worst of some verdicts (REJECTED > PENDING > CONFIRMED).

    Parameters
    ----------
    verdicts : iterable of Verdict
        The verdicts; none is CONFIRMED.

    Returns
    -------
    Verdict
        The worst of them.
    """
    return max(verdicts, default=Verdict.CONFIRMED)


@dataclass(frozen=True)
class Conflict:
    """The channel value a rejected match disagreed with, and the span that set it.

    Parameters
    ----------
    channel : str
        The channel (a consistency key or a `lock`'s channel).
    value : float or str
        The value the channel held.
    start : int
        Where the span that set it begins (a byte offset in the stream).
    end : int
        Where it ends (exclusive).
    """

    channel: str
    value: float | str
    start: int
    end: int


@dataclass(frozen=True)
class Event:
    """Something the rules found: a rule's match, or an anchor term.

    Parameters
    ----------
    kind : str
        "match" or "anchor".
    name : str
        The rule (a match) or the anchor group (an anchor).
    start : int
        The byte span's start in the stream.
    end : int
        Its end (exclusive).
    verdict : Verdict, optional
        The match's verdict (matches only).
    captures : tuple of (str, float or str)
        The match's captured values, by capture name.
    failed : str, optional
        The requirement that failed, as canonical text.
    conflict : Conflict, optional
        The value a rejected match disagreed with.
    """

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
        """The event as JSON.

        Parameters
        ----------
        stream : bytes, optional
            The stream: each span then carries its `text`.
        span : callable, optional
            `span(start, end)` gives each span's fields (default: `start`, `end` and, with the
            `stream`, its `text`; audit reports add character offsets).

        Returns
        -------
        dict
            kind, rule or anchor, verdict, the span's fields, captures, failed, conflict.
        """
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
    """What a sequence published at a trigger (or at its end: `final`).

    Parameters
    ----------
    verdicts : mapping of str to Verdict
        Every rule's verdict, in program (heat) order.
    events : list of Event
        The events since the previous snapshot.
    counters : dict of str to int
        bytes, lexemes, tokens, matches, rejections so far.
    final : bool
        True for the snapshot that ended the stream.
    """

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
    """A whole document's result (`Checker.scan`): every rule's final verdict, the events and
    the counters; `verdict` is the worst verdict, `rejected` the rules REJECTED.

    Parameters
    ----------
    verdicts : mapping of str to Verdict
        Every rule's final verdict, in program (heat) order.
    events : list of Event or callable
        The events, or what decodes them when first read.
    counters : dict of str to int
        bytes, lexemes, tokens, matches, rejections.
    source : tuple, optional
        (`reports.audit.ModuleInfo`, the text's bytes): what `audit()` needs.
    runs : tuple, optional
        (`reports.records.RecordDecoder`, the event records): what `reports.audit_text` writes from.

    Raises
    ------
    ValueError
        `audit()` on a report that does not know its module and text.
    """

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
        """The audit report: module, triggered rules, events with byte and character spans,
        confidence and the policy's action (docs/report.md).

        Parameters
        ----------
        policy : reports.audit.Policy, optional
            The cut-offs; default the rule set's own, else `Policy()`.

        Returns
        -------
        reports.audit.AuditReport
            The report.

        Raises
        ------
        ValueError
            This report does not know its module and text (made by hand, not by a scan).
        """
        if self._source is None:
            raise ValueError(
                "this report does not know its module and text: audit it with "
                "heatc_runtime.reports.audit.audit_report(module, text, events, verdicts, counters)"
            )
        module, text = self._source  # (an audit.ModuleInfo: it audits, and this module never imports audit)
        return module.audit(text, self.events, self.verdicts, self.counters, policy)

    def to_json(self, stream: bytes | None = None) -> dict:
        """The report as JSON.

        Parameters
        ----------
        stream : bytes, optional
            The scanned text: each event then carries its `text`.

        Returns
        -------
        dict
            verdict, rules (name → verdict), events, counters.
        """
        return {
            "verdict": self.verdict.name,
            "rules": {k: v.name for k, v in self.verdicts.items()},
            "events": [e.to_json(stream) for e in self.events],
            "counters": self.counters,
        }
