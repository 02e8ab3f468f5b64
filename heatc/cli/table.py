"""The result table `heatc scan` prints: one row per value read, the verdict it gets and the
rule that read it best, the other rules that read the same value folded into a count — so a
value never shows as CONFIRMED on one line and REJECTED on the next. Plain text that never
wraps (a pipe gets whole lines), in colour on a terminal; a long document's confirmed values
are counted rather than listed.

Two matches read the same value when their spans overlap and they captured a number in
common (a rule set's `temperature 389` and `389 °F`; a learned heatmap's `potassium 34` and
`potassium 34,`). The group's verdict is the worst of its matches; the match shown is one
with that verdict, the one that read the most text (its unit too), then the hottest.

Public surface: `Checked`, `fold(matches)`, `print_document(...)`, `render_document(...)`, `plural`,
`fmt_value(v)`, `LISTED`.
"""

from __future__ import annotations

import os
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from heatc_runtime import Event, Verdict

LISTED = 100  # a document with more matches than this lists only the values not CONFIRMED
_SEVERITY = {v: int(v) for v in Verdict}  # (an IntEnum's int() is a call; a dict look-up is not)
_COLOUR = {Verdict.CONFIRMED: "32", Verdict.PENDING: "33", Verdict.REJECTED: "1;31"}
# control characters of the scanned text would move the cursor or recolour the terminal:
# each is shown as its escape (\x1b), as Python writes it
_VISIBLE = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7F, 0xA0)]}
_VISIBLE.update({ord("\n"): " ", ord("\r"): " ", ord("\t"): " "})


@dataclass
class Checked:
    """One rule set's outcome on one document."""

    label: str  # the rule set's name where several are shown side by side, else ""
    verdict: Verdict
    confidence: float
    action: str
    verdicts: dict[str, Verdict]
    counters: dict[str, int]
    events: Sequence[Event]
    heat: dict[str, float] = field(default_factory=dict)


def fmt_value(v) -> str:
    """A value as the tables and messages show it: a whole float without its ".0"."""
    if isinstance(v, float) and v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return str(v)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def fold(matches: Sequence[tuple[str, Event, float]]) -> list[list[tuple[str, Event, float]]]:
    """Group (label, match event, heat) by the value they read (module docstring), in text
    order; each group's best match first."""
    order = sorted(range(len(matches)), key=lambda i: (matches[i][1].start, matches[i][1].end))
    parent = list(range(len(matches)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    values = [{v for _, v in m[1].captures if isinstance(v, float)} for m in matches]
    open_: list[int] = []  # matches whose span may still overlap the next one's
    for i in order:
        e = matches[i][1]
        open_ = [j for j in open_ if matches[j][1].end > e.start]
        for j in open_:
            f = matches[j][1]
            # (a quantity reports its value in its base unit, "glucose 3120" and "glucose 3120
            # mg/dL" two numbers: matches that start together read one value too)
            if (
                values[i] & values[j]
                or (values[i] and values[j] and f.start == e.start)
                or (not values[i] and not values[j] and (f.start, f.end) == (e.start, e.end))
            ):
                parent[root(i)] = root(j)
        open_.append(i)
    groups: dict[int, list[int]] = {}
    for i in order:
        groups.setdefault(root(i), []).append(i)

    def best(i: int):
        _, e, heat = matches[i]
        return (-_SEVERITY[e.verdict], e.start - e.end, -heat, e.start)

    out = [[matches[i] for i in sorted(members, key=best)] for members in groups.values()]
    out.sort(key=lambda g: min(m[1].start for m in g))
    return out


def _near_findings(matches: Sequence[tuple[str, Event, float]]) -> list[tuple[str, Event, float]]:
    """The matches not CONFIRMED and every match whose span overlaps one of theirs: all that
    folding the findings needs, found without folding a long document's every value."""
    import numpy as np

    bad = [i for i, m in enumerate(matches) if m[1].verdict is not Verdict.CONFIRMED]
    if not bad:
        return []
    starts = np.fromiter((m[1].start for m in matches), np.int64, len(matches))
    ends = np.fromiter((m[1].end for m in matches), np.int64, len(matches))
    order = np.argsort(starts, kind="stable")
    by_start = starts[order]
    longest = int((ends - starts).max())
    near: set[int] = set()
    for i in bad:
        s, e = int(starts[i]), int(ends[i])
        lo, hi = np.searchsorted(by_start, [s - longest, e], side="left")
        candidates = order[lo:hi]
        near.update(candidates[ends[candidates] > s].tolist())
    return [matches[i] for i in sorted(near)]


def _width(text: str) -> int:
    if text.isascii():
        return len(text)
    return sum(
        2 if unicodedata.east_asian_width(c) in ("W", "F") else 0 if unicodedata.combining(c) else 1 for c in text
    )


def _colour_on() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def _row(doc: bytes, label: str, e: Event, others: Counter | None) -> list[str]:
    text = doc[e.start : e.end].decode("utf-8", errors="replace")
    why = e.failed or ""
    # a value's places (`places(v)`) say something only where a requirement on them failed
    caps = ", ".join(f"{k}={_shown(v, text)}" for k, v in e.captures if not k.startswith("places(") or k in why)
    if e.conflict is not None:
        prior = doc[e.conflict.start : e.conflict.end].decode("utf-8", errors="replace")
        why = f"{e.conflict.channel} was {fmt_value(e.conflict.value)} at {prior!r}"
    rule = f"{label}:{e.name}" if label else e.name
    folded = ""
    if others:
        folded = ", ".join(f"+{others[v]} {v.name}" for v in sorted(others, reverse=True))
    cells = [e.verdict.name, rule, text, caps, why, folded]
    return [c.translate(_VISIBLE) for c in cells]


def _shown(v, text: str) -> str:
    """A captured value as a reader wrote it: a quantity's, held in its dimension's base unit
    (471.48 K), in the unit the matched text writes it in (389 °F), `units.written`."""
    if isinstance(v, float):
        from heatc import units

        as_written = units.written(v, text)
        if as_written is not None:
            return as_written
    return fmt_value(v)


def _table(rows: list[list[str]], header: list[str], colour: bool) -> list[str]:
    # (a column every row leaves empty is left out: "others" where nothing was folded)
    keep = [j for j in range(len(header)) if j < 2 or any(r[j] for r in rows)]
    rows = [[r[j] for j in keep] for r in rows]
    header = [header[j] for j in keep]
    widths = [max(_width(r[j]) for r in [header, *rows]) for j in range(len(header))]
    lines = []
    for n, r in enumerate([header, *rows]):
        cells = []
        for j, c in enumerate(r):
            pad = "" if j == len(r) - 1 else " " * (widths[j] - _width(c))
            if n == 0:
                code = "1"
            elif j == 0:
                code = _COLOUR[Verdict[c]]
            else:
                code = ""
            cells.append(_paint(c, code, colour) + pad)
        lines.append("  ".join(cells).rstrip())
    return lines


def render_document(title: str, doc: bytes, checked: Sequence[Checked], every: bool = False) -> str:
    """The lines `heatc scan` prints for one document, checked by one rule set or several."""
    colour = _colour_on()
    verdict = max((c.verdict for c in checked), default=Verdict.CONFIRMED)
    head = f"{_paint(title, '1', colour)}: {_paint(verdict.name, _COLOUR[verdict], colour)}"
    lines = []
    if len(checked) == 1:
        (c,) = checked
        counters = c.counters
        lines.append(
            f"{head}  ({plural(counters['bytes'], 'byte')}, {plural(counters['lexemes'], 'lexeme')}, "
            f"{plural(counters['matches'], 'match', 'matches')}; confidence {c.confidence:.2f}: {c.action})"
        )
    else:
        lines.append(f"{head}  ({plural(checked[0].counters['bytes'], 'byte')})")
        width = max(len(c.label) for c in checked)
        for c in checked:
            lines.append(
                f"  {c.label:{width}}  {_paint(c.verdict.name, _COLOUR[c.verdict], colour)}  "
                f"{plural(c.counters['matches'], 'match', 'matches')}; confidence {c.confidence:.2f}: {c.action}"
            )
    matches = [(c.label, e, c.heat.get(e.name, 0.5)) for c in checked for e in c.events if e.kind == "match"]
    header = ["verdict", "rule", "text", "captures", "why", "others"]
    if every:
        rows = [_row(doc, label, e, None) for label, e, _ in sorted(matches, key=lambda m: (m[1].end, m[1].start))]
        unlisted = 0
    elif len(matches) <= LISTED:
        rows = [_row(doc, g[0][0], g[0][1], Counter(m[1].verdict for m in g[1:])) for g in fold(matches)]
        unlisted = 0
    else:
        shown = [g for g in fold(_near_findings(matches)) if g[0][1].verdict is not Verdict.CONFIRMED]
        rows = [_row(doc, g[0][0], g[0][1], Counter(m[1].verdict for m in g[1:])) for g in shown]
        unlisted = len(matches) - sum(map(len, shown))
    if rows:
        lines += _table(rows, header, colour)
    if unlisted:
        lines.append(
            f"… and {plural(unlisted, 'CONFIRMED match', 'CONFIRMED matches')} not listed (--all lists every match)"
        )
    rejected = []
    for c in checked:
        names = [k for k, v in c.verdicts.items() if v is Verdict.REJECTED]
        if names:
            rejected.append((f"{c.label}: " if c.label else "") + ", ".join(names))
    if rejected:
        lines.append("rejected rules: " + "; ".join(rejected).translate(_VISIBLE))
    return "\n".join(lines) + "\n"


def print_document(i, doc, audit, events, lines) -> None:
    """One document's table from its audit report (`heatc generate` prints its text so)."""
    checked = Checked(
        "", audit.verdict, audit.confidence, audit.action, dict(audit.verdicts), dict(audit.counters), events,
        dict(audit.module.heat),
    )  # fmt: skip
    sys.stdout.flush()
    sys.stdout.write(render_document(f"document {i + 1}" if lines else "document", doc, [checked]))
    sys.stdout.flush()
