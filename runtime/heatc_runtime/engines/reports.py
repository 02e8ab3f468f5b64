"""What the checks saw of one generated sequence: `GenerationReport`, and each time guard acted
on it, an `Intervention`.

A report is built when its sequence ends, from what the driver kept while it ran: the token
ids, the snapshots the rules published, and for each guard step that refused a candidate the
step, the candidates refused (best first) and what guard did. What a step does not need is
worked out here, once, at the end: the text each intervention happened at, which rule each
refused candidate would have failed and with which value (the text up to that step with the
candidate, ended there, scanned again — `explain`), what the model wrote instead, and the
text the application should show (`delivered`: each withheld value replaced by the marker).

Public surface: `GenerationReport`, `Intervention`, `Refusal`, `ACTIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..reports.report import Event, Snapshot, Verdict, Verdicts

ACTIONS = ("masked", "steered", "withheld", "stopped", "exhausted")
"""What guard did at a step: masked lower-ranked candidates only (the model's first choice
passed); steered the model to its best candidate that passed; withheld the value being
written (the marker was written instead); stopped the sequence; found no candidate that
passed (the sequence was then ended, or left as the model wrote it: `on_exhausted`)."""

# the value a refusal is about: a number at the end of the text (digits with "." or "," inside
# them), and the spaces after it
_OPEN_VALUE = re.compile(rb"[0-9](?:[0-9.,]*[0-9])?[.,]?[ \t]*\Z")


@dataclass(frozen=True)
class Refusal:
    """One candidate guard refused: its token, its text, and what it would have done — the
    rules it would have made REJECTED, with their captured values (`explain`)."""

    token: int
    text: str
    rejects: tuple[Event, ...] = ()

    def to_json(self, raw: bytes | None = None) -> dict:
        return {"token": self.token, "text": self.text, "rejects": [e.to_json() for e in self.rejects]}


@dataclass
class Intervention:
    """One step at which guard refused at least one candidate.

    `step` is the index of the generated token that was chosen there; `at` the byte offset in
    the generated text (as the model wrote it, `GenerationReport.text`) where it goes.
    `refused` are the candidates masked, best first (the model's own first choice first when
    `top` is true). `written` is what went into the text instead: the chosen token's text
    (masked, steered, exhausted and passed), the marker (withheld, stopped). `value` is the
    number the refusal is about when there is one — the digits the model had written of it
    (`value_span` in the generated text) —, which "withheld" and "stopped" take back out of
    what the rules read and the application is given (`delivered`). `escape` marks a refused
    unit (or other continuation of a complete number) that the model then left out
    ("Metoprolol 2500" + " mg" refused, " (" written): the number stands in the text without
    what made it fail."""

    step: int
    action: str
    top: bool
    refused: list[Refusal]
    exhausted: bool = False  # no candidate passed at this step
    at: int = 0
    written: str | None = None
    value: str | None = None
    value_span: tuple[int, int] | None = None
    escape: bool = False
    value_from: int | None = None  # the token the value taken back began in
    keep: bytes = b""  # that token's bytes before the value, which the rules read again

    def to_json(self, raw: bytes) -> dict:
        return {
            "step": self.step, "action": self.action, "top": self.top, "exhausted": self.exhausted, "at": self.at,
            "refused": [r.to_json(raw) for r in self.refused], "written": self.written, "value": self.value,
            "value_span": list(self.value_span) if self.value_span else None, "escape": self.escape,
        }  # fmt: skip


@dataclass
class GenerationReport(Verdicts):
    """What the rules saw of one generated sequence.

    `text` is the generation as the model wrote it (`raw`, its bytes); `stream` what the
    rules read — the prompt's bytes when they saw it, then the generation with every value
    guard took back replaced by what stood in its place (the marker). `delivered` is that
    generation: what an application should show. Without such interventions the two agree.
    `verdicts`, `events` and their spans are the rules' over `stream`."""

    mode: str
    stream: bytes
    prompt_bytes: int  # where the generation starts in `stream`
    tokens: list[int]  # the generated token ids, as fed
    snapshots: list[Snapshot]  # published while generating, the final one last
    verdicts: dict[str, Verdict]  # at the end
    prompt_snapshots: list[Snapshot] = field(default_factory=list)
    stopped_at: int | None = None  # stop mode: the generated token whose snapshot held the first new rejection
    exhausted_at: int | None = None  # guard: the first step no top-k candidate passed
    error: str | None = None
    policy: str | None = None  # guard: withhold, stop or steer
    marker: str | None = None  # guard's withhold: what replaces a withheld value
    interventions: list[Intervention] = field(default_factory=list)
    backend: str | None = None  # native, wasm or cuda
    raw: bytes | None = None  # the generated bytes as the model wrote them (None: as in `stream`)

    @property
    def events(self) -> list[Event]:
        """Every event of the generation, spans in `stream`."""
        return [e for s in self.snapshots for e in s.events]

    @property
    def text(self) -> str:
        """The generated text as the model wrote it."""
        raw = self.stream[self.prompt_bytes :] if self.raw is None else self.raw
        return raw.decode("utf-8", errors="replace")

    @property
    def delivered(self) -> str:
        """The generated text with each value guard took back replaced by the marker: what the
        rules read of the generation, and what to show."""
        return self.stream[self.prompt_bytes :].decode("utf-8", errors="replace")

    @property
    def masked(self) -> list[tuple[int, int, bool]]:
        """guard: (step, candidates masked, the top one among them) of every intervention."""
        return [(iv.step, len(iv.refused), iv.top) for iv in self.interventions]

    @property
    def first_change(self) -> int | None:
        """guard: the first step at which the model's first choice was refused (before it, the
        sequence is what it would have been unguarded, under greedy decoding)."""
        return next((iv.step for iv in self.interventions if iv.top), None)

    @property
    def withheld(self) -> list[Intervention]:
        """The interventions that withheld a value."""
        return [iv for iv in self.interventions if iv.action == "withheld"]

    def audit(self, module, policy=None):
        """The audit report of the checked stream (prompt, when the rules read it, then the
        generation): `heatc_runtime.reports.audit.audit_snapshots` of every snapshot it published —
        the report `Checker.scan()` gives for `stream`. `module`: the checker's `module_info`."""
        from ..reports.audit import audit_snapshots

        return audit_snapshots(module, self.stream, [*self.prompt_snapshots, *self.snapshots], policy)

    def to_json(self) -> dict:
        raw = self.stream[self.prompt_bytes :] if self.raw is None else self.raw
        return {
            "mode": self.mode,
            "backend": self.backend,
            "text": self.text,
            "delivered": self.delivered,
            "verdict": self.verdict.name,
            "rules": {k: v.name for k, v in self.verdicts.items()},
            "events": [e.to_json(self.stream) for e in self.events],
            "prompt_bytes": self.prompt_bytes,
            "tokens": len(self.tokens),
            "stopped_at": self.stopped_at,
            "policy": self.policy,
            "marker": self.marker,
            "interventions": [iv.to_json(raw) for iv in self.interventions],
            "masked_steps": [{"step": s, "masked": n, "top": top} for s, n, top in self.masked],
            "first_change": self.first_change,
            "exhausted_at": self.exhausted_at,
            "error": self.error,
        }


def rules_text(raw: bytes, tokens: list[int], token_bytes: Callable[[int], bytes], interventions: list[Intervention],
               marker: str | None, upto: int | None = None) -> bytes:  # fmt: skip
    """What the rules read of a generation (of its first `upto` tokens): the tokens' bytes,
    each value taken back replaced by the bytes kept of its first token (and, for a stopped
    sequence, the marker)."""
    if not any(iv.value_from is not None or iv.action == "stopped" for iv in interventions):
        return raw if upto is None else b"".join(token_bytes(t) for t in tokens[:upto])
    end = len(tokens) if upto is None else upto
    out, t = [], 0
    for iv in interventions:
        if iv.step >= end or iv.action not in ("withheld", "stopped"):
            continue
        if iv.value_from is not None:
            out += [token_bytes(x) for x in tokens[t : iv.value_from]]
            out.append(iv.keep)
            t = iv.step
        if iv.action == "stopped":
            out += [token_bytes(x) for x in tokens[t : iv.step]]
            out.append((marker or "").encode())
            t = iv.step
    out += [token_bytes(x) for x in tokens[t:end]]
    return b"".join(out)


def finish_interventions(
    interventions: list[Intervention],
    prompt: bytes,
    tokens: list[int],
    token_bytes: Callable[[int], bytes],
    scan: Callable[[bytes], list[Event]] | None,
    marker: str | None,
) -> None:
    """Fill in what each intervention's step did not work out (in place): where it happened in
    the generated text, what was written instead, the value it was about, whether a refused
    unit was escaped, and — with `scan` (the events of a text scanned whole) — what each
    refused candidate would have made REJECTED, read as the rules read the text then."""
    offsets = [0]
    for t in tokens:
        offsets.append(offsets[-1] + len(token_bytes(t)))
    raw = b"".join(token_bytes(t) for t in tokens)
    for k, iv in enumerate(interventions):
        iv.at = offsets[min(iv.step, len(tokens))]
        chosen = tokens[iv.step] if iv.step < len(tokens) else None
        if iv.action in ("withheld", "stopped"):
            iv.written = marker
        elif chosen is None:
            iv.written = ""
        else:
            iv.written = token_bytes(chosen).decode("utf-8", errors="replace")
        if iv.value_from is not None:
            start = offsets[iv.value_from] + len(iv.keep)
        else:
            m = _OPEN_VALUE.search(raw[: iv.at])
            start = m.start() if m is not None else None
        if start is not None and start < iv.at:
            iv.value_span = (start, iv.at)
            iv.value = raw[start : iv.at].decode("utf-8", errors="replace")
        if iv.action == "steered" and iv.value is not None and chosen is not None and iv.refused:
            # the model's choice was a continuation of a complete number that failed it, and
            # it wrote something that neither continues the number nor is the refused piece
            first = token_bytes(iv.refused[0].token)
            wrote = token_bytes(chosen)
            continues = wrote[:1].isdigit() or (wrote[:1] in (b".", b",") and wrote[1:2].isdigit())
            iv.escape = bool(first) and not first[:1].isdigit() and not continues
        if scan is not None and iv.refused:
            # what each refused candidate would make REJECTED, the text ended after it: the
            # rejections the text up to here does not have, and any that read the number left
            # open here (which guard judged by its continuations, not as it stands)
            before = prompt + rules_text(raw, tokens, token_bytes, interventions[:k], marker, iv.step)
            seen = {_key(e) for e in scan(before) if e.verdict is Verdict.REJECTED}
            m = _OPEN_VALUE.search(before[len(prompt) :])
            open_at = len(prompt) + m.start() if m is not None else len(before)
            iv.refused = [
                Refusal(r.token, r.text, tuple(
                    e for e in scan(before + token_bytes(r.token))
                    if e.verdict is Verdict.REJECTED and (_key(e) not in seen or e.end > open_at)
                ))
                for r in iv.refused
            ]  # fmt: skip


def _key(e: Event) -> tuple:
    return (e.name, e.start, e.end, e.captures)
