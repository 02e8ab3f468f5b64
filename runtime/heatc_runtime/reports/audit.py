"""The audit report of one response: what the rules found, where, and how far to trust it
(docs/report.md; the JSON Schema is `audit.schema.json` beside this module).

One function builds it, `audit_report(module, text, events, verdicts, counters)`, from what
every path that checks text has: `Checker.scan()` (its `Report.audit()`), `heatc scan
--json`, and a streamed generation (`audit_snapshots`, from the snapshots a `Batch`
published while a model wrote). Events and final verdicts do not depend on how the text was
cut into tokens (docs/semantics.md), and nothing else goes in — not the `tokens` counter, not
timings — so a streamed generation and a scan of its text give the same report.

**Confidence** (how far to trust the response, in [0, 1]): the product over the rules of
`1 − w(verdict) · heat`, with w(REJECTED) = 1, w(PENDING) = 0.25, w(CONFIRMED) = 0. A rule's
heat is the sensitivity of the pair it checks (how much meaning drifts when its value does);
each rule that found something against the text removes that share of the trust that is
left, so independent findings compound and a CONFIRMED rule costs nothing. A REJECTED rule
of heat h leaves at most 1 − h; a PENDING one (a partial match: undecided, only mid-stream)
a quarter of that doubt, so REJECTED on a hot rule always weighs more than PENDING on a
cold one. `Policy` maps the score to an action: pass (≥ 0.9), confirm (≥ 0.7) or escalate —
or at the rule set's own cut-offs (`policy pass P confirm C`, in its manifest). An
observe-only rule (`observe`) weighs 0: it is reported, and no policy acts on it.

Public surface: `REPORT_FORMAT`, `REPORT_VERSION`, `ACTIONS`, `VERDICT_WEIGHT`,
`ModuleInfo`, `Policy`, `AuditReport`, `confidence(verdicts, heat)`, `audit_report(...)`,
`triggered_rules(verdicts, events)`,
`audit_snapshots(module, text, snapshots)`, `char_offsets(text, offsets)`, `continuation_bytes(text)`,
`schema()`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .report import Event, Snapshot, Verdict

REPORT_FORMAT = "heatc-audit"
REPORT_VERSION = 1
ACTIONS = ("pass", "confirm", "escalate")
VERDICT_WEIGHT = {Verdict.CONFIRMED: 0.0, Verdict.PENDING: 0.25, Verdict.REJECTED: 1.0}
#: The counters a report carries: those that depend on the text alone (`tokens` counts feed calls).
COUNTERS = ("bytes", "lexemes", "matches", "rejections")
SCHEMA_PATH = Path(__file__).with_name("audit.schema.json")


@dataclass(frozen=True)
class ModuleInfo:
    """Which compiled rule set made a report: from the module's manifest."""

    name: str
    sha256: str  # of module.wasm (the native backend's tables come from the same build)
    heatc_version: str
    # rule → the heat confidence weighs it by: its heat, 0 for an observe-only rule
    heat: Mapping[str, float] = field(default_factory=dict, compare=False, repr=False)
    descriptions: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # what conflicts.py reads: the channels (name, kind) and each rule's captures (name, kind)
    channels: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    captures: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict, compare=False, repr=False)
    # each rule's `consistent`/`lock` statements: (capture, key capture or None, {key class or "": channel})
    consistency: Mapping[str, tuple[tuple[str, str | None, Mapping[str, str]], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # the channels of magnitude bands (`within factor`): a magnitude, not a term
    bands: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    observe: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # observe-only rules
    policy: Policy | None = field(default=None, compare=False, repr=False)  # the rule set's, if it has one

    @classmethod
    def from_manifest(cls, manifest: dict) -> ModuleInfo:
        rules = manifest["rules"]
        observe = frozenset(str(r["name"]) for r in rules if r.get("observe") is True)
        return cls(
            str(manifest.get("name", "")),
            str(manifest["wasm"]["sha256"]),
            str(manifest.get("heatc_version", "")),
            {r["name"]: 0.0 if r["name"] in observe else min(1.0, max(0.0, float(r.get("heat", 0.5)))) for r in rules},
            {r["name"]: str(r.get("description", "")) for r in rules},
            tuple((str(c["name"]), str(c["kind"])) for c in manifest.get("channels", ())),
            {r["name"]: tuple((c["name"], c["kind"]) for c in r.get("captures", ())) for r in rules},
            {r["name"]: tuple(_statement(u) for u in r["consistency"]) for r in rules if r.get("consistency")},
            frozenset(str(c["name"]) for c in manifest.get("channels", ()) if c.get("band")),
            observe,
            _manifest_policy(manifest.get("policy")),
        )

    def to_json(self) -> dict:
        return {"name": self.name, "sha256": self.sha256, "heatc_version": self.heatc_version}

    def audit(self, text, events, verdicts, counters, policy=None) -> AuditReport:
        """`audit_report(self, …)`: a `Report` holds its module's info and audits through it,
        so the report types never import this module (which imports them).

        Parameters
        ----------
        text, events, verdicts, counters, policy
            As `audit_report` takes them.

        Returns
        -------
        AuditReport
            The report of `text`.
        """
        return audit_report(self, text, events, verdicts, counters, policy)


def _manifest_policy(value: object) -> Policy | None:
    if value is None:
        return None
    from ..errors import ModuleError

    if not isinstance(value, dict) or set(value) != {"pass", "confirm"}:
        raise ModuleError(f"manifest policy: expected {{pass: NUMBER, confirm: NUMBER}}, got {str(value)[:80]}")
    try:
        return Policy(value["pass"], value["confirm"])
    except ValueError as e:
        raise ModuleError(f"manifest {e}") from None


def _statement(use: dict) -> tuple[str, str | None, dict[str, str]]:
    if "key" in use:
        return str(use["capture"]), str(use["key"]), {str(k): str(c) for k, c in use["per"]}
    return str(use["capture"]), None, {"": str(use["channel"])}


@dataclass(frozen=True)
class Policy:
    """Confidence → action: `pass` at or above `pass_at`, `confirm` at or above `confirm_at`,
    `escalate` below it."""

    pass_at: float = 0.9
    confirm_at: float = 0.7

    def __post_init__(self) -> None:
        for name in ("pass_at", "confirm_at"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= 1:
                raise ValueError(f"policy: {name} must be a number from 0 to 1, not {v!r}")
        if self.confirm_at > self.pass_at:
            raise ValueError(f"policy: confirm_at ({self.confirm_at}) is above pass_at ({self.pass_at})")

    @classmethod
    def parse(cls, text: str) -> Policy:
        """From `pass=0.9,confirm=0.7` (either may be left out)."""
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq or key.strip() not in ("pass", "confirm"):
                raise ValueError(f"policy: expected pass=NUMBER or confirm=NUMBER, found {part!r}")
            try:
                values[f"{key.strip()}_at"] = float(value)
            except ValueError:
                raise ValueError(f"policy: {key.strip()} must be a number, found {value.strip()!r}") from None
        return cls(**values)

    def action(self, confidence: float) -> str:
        if confidence >= self.pass_at:
            return "pass"
        if confidence >= self.confirm_at:
            return "confirm"
        return "escalate"

    def to_json(self) -> dict:
        return {"pass": self.pass_at, "confirm": self.confirm_at}


def confidence(verdicts: Mapping[str, Verdict], heat: Mapping[str, float]) -> float:
    """The product over rules of 1 − VERDICT_WEIGHT[verdict] · heat (module docstring)."""
    score = 1.0
    for name, verdict in verdicts.items():  # program order: every path multiplies in the same order
        w = VERDICT_WEIGHT[verdict]
        if w:
            score *= 1.0 - w * heat.get(name, 0.5)
    return score


def char_offsets(text: bytes, offsets: Iterable[int]) -> dict[int, int]:
    """Byte offset → character offset in `text`: the number of bytes before it that are not
    UTF-8 continuation bytes — for valid UTF-8, the index in the decoded str."""
    wanted = sorted(set(offsets))
    if not wanted:
        return {}
    n = len(text)
    continuation = continuation_bytes(text)
    if not len(continuation):  # (one byte per character: most text)
        return {b: min(b, n) for b in wanted}
    # b minus the continuation bytes before b: found by bisection among the continuation
    # bytes' positions, rather than a running count over every byte of the text (a 32 MB
    # scan's report spent more time there than in the scan)
    at = np.minimum(np.asarray(wanted, np.int64), n)
    chars = at - np.searchsorted(continuation, at, side="left")
    return dict(zip(wanted, chars.tolist(), strict=True))


_BLOCK = 1 << 16


def continuation_bytes(text: bytes) -> np.ndarray:
    """The positions of the UTF-8 continuation bytes (0x80–0xBF) in `text`, ascending. Block
    by block: `bytes.isascii` passes over an ASCII block at memory speed, and only the
    others are compared byte by byte (a pass of numpy over the whole of a large text that
    has a few accented words cost ten times more)."""
    if text.isascii():
        return np.zeros(0, np.int64)
    found = []
    for at in range(0, len(text), _BLOCK):
        block = text[at : at + _BLOCK]
        if not block.isascii():
            found.append(np.flatnonzero(np.frombuffer(block, np.int8) < -0x40) + at)
    return np.concatenate(found)


@dataclass(frozen=True)
class RuleOutcome:
    """A rule that found something: its final verdict, heat and what it matched."""

    name: str
    description: str
    heat: float
    verdict: Verdict
    matches: int
    rejections: int

    def to_json(self) -> dict:
        return {
            "rule": self.name, "description": self.description, "heat": self.heat, "verdict": self.verdict.name,
            "matches": self.matches, "rejections": self.rejections,
        }  # fmt: skip


@dataclass(frozen=True)
class AuditReport:
    """One response's audit record; `to_json()` is the documented object."""

    module: ModuleInfo
    text_bytes: int
    text_chars: int
    text_sha256: str
    verdict: Verdict
    confidence: float
    policy: Policy
    verdicts: dict[str, Verdict]
    triggered: tuple[RuleOutcome, ...]
    events: tuple[dict, ...]  # already in their JSON form (spans in bytes and characters)
    counters: dict[str, int]

    @property
    def action(self) -> str:
        return self.policy.action(self.confidence)

    def to_json(self) -> dict:
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "module": self.module.to_json(),
            "text": {"bytes": self.text_bytes, "chars": self.text_chars, "sha256": self.text_sha256},
            "verdict": self.verdict.name,
            "confidence": self.confidence,
            "action": self.action,
            "policy": self.policy.to_json(),
            "rules": {k: v.name for k, v in self.verdicts.items()},
            "triggered": [r.to_json() for r in self.triggered],
            "events": [dict(e) for e in self.events],
            "counters": dict(self.counters),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)


def _span(text: bytes, start: int, end: int, chars: dict[int, int]) -> dict:
    return {
        "bytes": [start, end],
        "chars": [chars[start], chars[end]],
        "text": text[start:end].decode("utf-8", errors="replace"),
    }


_NAMES = {v: v.name for v in Verdict}  # (an enum's .name is a descriptor call: measurable per event)


def _events_json(data: bytes, events: Sequence[Event], chars: dict[int, int]) -> tuple[dict, ...]:
    """Every event's JSON form, as `Event.to_json` gives it with `_span`'s fields. The common
    event (a match with no conflict) is built here in one dict display: a large document's
    report spent more time in the general path than its scan took."""
    out = []
    add = out.append
    names = _NAMES
    for e in events:
        if e.conflict is not None or e.kind != "match":
            add(e.to_json(span=lambda start, end: _span(data, start, end, chars)))
            continue
        start, end = e.start, e.end
        d = {
            "kind": "match", "rule": e.name, "verdict": names[e.verdict], "bytes": [start, end],
            "chars": [chars[start], chars[end]], "text": data[start:end].decode("utf-8", errors="replace"),
            "captures": dict(e.captures),
        }  # fmt: skip
        if e.failed is not None:
            d["failed"] = e.failed
        add(d)
    return tuple(out)


def triggered_rules(verdicts: Mapping[str, Verdict], events: Iterable[Event]) -> list[tuple[str, Verdict, int, int]]:
    """The rules that matched or are not CONFIRMED, in program order: (rule, final verdict,
    matches, rejected matches)."""
    matches: dict[str, list[int]] = {}
    for e in events:
        if e.kind == "match":
            m = matches.setdefault(e.name, [0, 0])
            m[0] += 1
            m[1] += e.verdict is Verdict.REJECTED
    return [
        (name, v, *matches.get(name, (0, 0)))
        for name, v in verdicts.items()
        if name in matches or v is not Verdict.CONFIRMED
    ]


def audit_report(
    module: ModuleInfo,
    text: str | bytes,
    events: Sequence[Event],
    verdicts: Mapping[str, Verdict],
    counters: Mapping[str, int],
    policy: Policy | None = None,
) -> AuditReport:
    """The report of `text` (the stream the rules read) from its events (every one, in stream
    order), its final verdicts (every rule, in program order) and its counters; `policy`
    defaults to the rule set's own (`module.policy`), else `Policy()`."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    offsets = [0, len(data)]
    for e in events:
        offsets += (e.start, e.end)
        if e.conflict is not None:
            offsets += (e.conflict.start, e.conflict.end)
    chars = char_offsets(data, offsets)
    verdicts = dict(verdicts)
    triggered = tuple(
        RuleOutcome(name, module.descriptions.get(name, ""), module.heat.get(name, 0.5), v, n, rejected)
        for name, v, n, rejected in triggered_rules(verdicts, events)
    )
    return AuditReport(
        module=module,
        text_bytes=len(data),
        text_chars=chars[len(data)],
        text_sha256=hashlib.sha256(data).hexdigest(),
        verdict=max(verdicts.values(), default=Verdict.CONFIRMED),
        confidence=confidence(verdicts, module.heat),
        policy=policy or module.policy or Policy(),
        verdicts=verdicts,
        triggered=triggered,
        events=_events_json(data, events, chars),
        counters={k: int(counters[k]) for k in COUNTERS},
    )


def audit_snapshots(
    module: ModuleInfo, text: str | bytes, snapshots: Sequence[Snapshot], policy: Policy | None = None
) -> AuditReport:
    """The report of a streamed sequence from every snapshot it published, in order (a
    `Batch`'s `feed_ids`/`feed_text`/`finish` returns, the final one last): its events are
    the snapshots' events, its verdicts and counters the last snapshot's."""
    if not snapshots:
        raise ValueError("no snapshots: a streamed sequence's report needs at least its final snapshot (finish())")
    last = snapshots[-1]
    events = [e for s in snapshots for e in s.events]
    return audit_report(module, text, events, last.verdicts, last.counters, policy)


def schema() -> dict:
    """The JSON Schema of `AuditReport.to_json()` (and of heatc scan --json's objects)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
