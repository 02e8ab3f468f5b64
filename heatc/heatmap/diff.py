"""What changed between two heatmaps (`heatc diff A.yaml B.yaml`): cells added and removed,
score changes and range changes (a range's magnitude band, `band: F`, and precision, `places: P`,
are part of it), cells set to or from observe-only, expected frequencies (the tier order), and
the settings a tuning changes (the policy's cut-offs, the tier sizes), with what `heatc tune`
says the heatmap was tuned from.

A cell is identified by what its rule reads — its pair, unit and check — not by its name
(names get a suffix when two cells would share one). Its range is the one `heatc lower`
gives it: the explicit `range`, or the margin policy's range from its statistics; a cell
with neither (a consistency cell) has none.

Public surface: `CellChange`, `HeatmapDiff`, `diff_heatmaps`, `render_diff`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from heatc.heatmap.format import Cell, Heatmap
from heatc.heatmap.lower import cell_range

Range = tuple[float | None, float | None]  # None: a side the range leaves open
SCORE_STEP = 0.005  # smaller score changes are rounding, not news


@dataclass
class CellChange:
    key: str  # "keyword … value unit (check)"
    a: Cell | None
    b: Cell | None
    range_a: Range | None = None
    range_b: Range | None = None
    band_a: int | None = None  # the cell's magnitude band (`within factor F`), None without
    band_b: int | None = None


@dataclass
class HeatmapDiff:
    added: list[CellChange] = field(default_factory=list)
    removed: list[CellChange] = field(default_factory=list)
    scores: list[CellChange] = field(default_factory=list)  # in both, score moved by SCORE_STEP or more
    ranges: list[CellChange] = field(default_factory=list)  # in both, another range, band or precision
    observe: list[CellChange] = field(default_factory=list)  # in both, set to or from observe-only
    freqs: list[CellChange] = field(default_factory=list)  # in both, another expected frequency
    settings: list[tuple[str, str, str]] = field(default_factory=list)  # (what, before, after)
    tuned: dict | None = None  # the last `provenance.tuned` entry of B that A has not
    same: int = 0  # in both, nothing moved

    def to_json(self) -> dict:
        def row(c: CellChange) -> dict:
            return {
                "cell": c.key,
                "score": [None if c.a is None else c.a.score, None if c.b is None else c.b.score],
                "range": [c.range_a and list(c.range_a), c.range_b and list(c.range_b)],
                "band": [c.band_a, c.band_b],
                "places": [None if c.a is None else c.a.places, None if c.b is None else c.b.places],
                "support": [None if c.a is None else c.a.support, None if c.b is None else c.b.support],
            }

        return {
            "added": [row(c) for c in self.added],
            "removed": [row(c) for c in self.removed],
            "score_changed": [row(c) for c in self.scores],
            "range_changed": [row(c) for c in self.ranges],
            "observe_changed": [{"cell": c.key, "observe": [c.a.observe, c.b.observe]} for c in self.observe],  # type: ignore[union-attr]
            "freq_changed": [{"cell": c.key, "freq": [c.a.freq, c.b.freq]} for c in self.freqs],  # type: ignore[union-attr]
            "settings": [{"setting": k, "before": a, "after": b} for k, a, b in self.settings],
            "tuned": self.tuned,
            "unchanged": self.same,
        }


def _key(cell: Cell) -> str:
    text = " … ".join(p for p in cell.pair if p) + (f" {cell.unit}" if cell.unit else "")
    text += f" quantity({cell.dimension})" if cell.dimension else ""  # (not the keyword's bare numbers)
    return text + (f" ({cell.check})" if cell.check != "range" else "")


def _range(cell: Cell, hm: Heatmap) -> Range | None:
    if cell.check != "range":
        return None
    if cell.range is not None:
        return cell.range
    if cell.stats is None:
        return None
    try:
        return cell_range(cell, hm)
    except ValueError:  # statistics without quantiles or bounds
        return None


def diff_heatmaps(a: Heatmap, b: Heatmap) -> HeatmapDiff:
    cells_a = {_key(c): c for c in a.cells}
    cells_b = {_key(c): c for c in b.cells}
    out = HeatmapDiff()
    for key, cb in cells_b.items():
        if key not in cells_a:
            out.added.append(CellChange(key, None, cb, None, _range(cb, b), None, cb.band))
    for key, ca in cells_a.items():
        cb = cells_b.get(key)
        change = CellChange(
            key, ca, cb, _range(ca, a), None if cb is None else _range(cb, b), ca.band, None if cb is None else cb.band
        )
        if cb is None:
            out.removed.append(change)
            continue
        moved = False
        if abs(ca.score - cb.score) >= SCORE_STEP:
            out.scores.append(change)
            moved = True
        if (change.range_a, change.band_a, ca.places) != (change.range_b, change.band_b, cb.places):
            out.ranges.append(change)
            moved = True
        if ca.observe != cb.observe:
            out.observe.append(change)
            moved = True
        if ca.freq != cb.freq:
            out.freqs.append(change)
            moved = True
        out.same += not moved
    out.added.sort(key=lambda c: (-c.b.score, c.key))  # type: ignore[union-attr]
    out.removed.sort(key=lambda c: (-c.a.score, c.key))  # type: ignore[union-attr]
    out.scores.sort(key=lambda c: (-abs(c.b.score - c.a.score), c.key))  # type: ignore[union-attr]
    out.ranges.sort(key=lambda c: c.key)
    out.observe.sort(key=lambda c: c.key)
    out.freqs.sort(key=lambda c: (-abs(math.log(c.b.freq / c.a.freq)), c.key))  # type: ignore[union-attr]
    out.settings = _settings(a, b)
    tuned_a, tuned_b = a.provenance.get("tuned"), b.provenance.get("tuned")
    if isinstance(tuned_b, list) and tuned_b and tuned_b != tuned_a and isinstance(tuned_b[-1], dict):
        out.tuned = tuned_b[-1]
    return out


def _policy_text(hm: Heatmap) -> str:
    return "the runtime's default" if hm.policy is None else f"pass {hm.policy[0]:g}, confirm {hm.policy[1]:g}"


def _settings(a: Heatmap, b: Heatmap) -> list[tuple[str, str, str]]:
    out = []
    if a.policy != b.policy:
        out.append(("policy", _policy_text(a), _policy_text(b)))
    for key in ("l2_bytes", "device_bytes"):
        if a.tiers.get(key) != b.tiers.get(key):
            out.append((f"tiers.{key}", f"{a.tiers.get(key, 0):,}", f"{b.tiers.get(key, 0):,}"))
    if a.sensitivity != b.sensitivity:
        out.append(("thresholds.sensitivity", f"{a.sensitivity:g}", f"{b.sensitivity:g}"))
    return out


def _fmt_range(r: Range | None, band: int | None = None, places: int | None = None) -> str:
    """`[1.5, 1000]`; a side the range leaves open is written `-inf` or `inf` (`[-inf, 309]`);
    a magnitude band after it (`[-inf, 86000] within factor 999`), a precision after that
    (`[-inf, 195], places <= 0`)."""
    within = (f" within factor {band}" if band else "") + (f", places <= {places}" if places is not None else "")
    if r is None:
        return "no range" + within
    lo = "-inf" if r[0] is None else f"{r[0]:g}"
    hi = "inf" if r[1] is None else f"{r[1]:g}"
    return f"[{lo}, {hi}]{within}"


def render_diff(d: HeatmapDiff, a: Heatmap, b: Heatmap, limit: int | None = None) -> str:
    """The diff as text: a summary line, then one section per kind of change (each cut at
    `limit` lines, the largest changes first, saying how many were left out)."""
    lines = [
        f"{a.path} → {b.path}: {len(a.cells)} → {len(b.cells)} cells; {len(d.added)} added, {len(d.removed)} "
        f"removed, {len(d.scores)} scores and {len(d.ranges)} ranges changed, {d.same} unchanged"
    ]
    if d.tuned is not None:
        t = d.tuned
        lines.append(
            f"tuned by heatc tune from {t.get('reports', {}).get('count', '?')} reports"
            + (f", {t['labels']['used']} labels" if isinstance(t.get("labels"), dict) else ", no labels")
            + f", alarm budget {t.get('alarm_budget', '?')}: {t.get('summary', '')}".rstrip(": ")
        )
    lines += [f"{what}: {before} → {after}" for what, before, after in d.settings]

    def section(title: str, rows: list[CellChange], line) -> None:
        if not rows:
            return
        lines.append(f"{title} ({len(rows)}):")
        shown = rows if limit is None else rows[:limit]
        lines.extend(f"  {line(c)}" for c in shown)
        if len(shown) < len(rows):
            lines.append(f"  … {len(rows) - len(shown)} more")

    hot_b, hot_a = b.sensitivity, a.sensitivity

    def hot(score: float, threshold: float) -> str:
        return " (hot)" if score >= threshold else ""

    section(
        "added",
        d.added,
        lambda c: (
            f"+ {c.key}: score {c.b.score:.3f}{hot(c.b.score, hot_b)}, support {c.b.support}, {_fmt_range(c.range_b, c.band_b, c.b.places)}"
        ),
    )
    section(
        "removed",
        d.removed,
        lambda c: (
            f"- {c.key}: score {c.a.score:.3f}{hot(c.a.score, hot_a)}, support {c.a.support}, {_fmt_range(c.range_a, c.band_a, c.a.places)}"
        ),
    )
    section(
        "score changed",
        d.scores,
        lambda c: (
            f"~ {c.key}: {c.a.score:.3f} → {c.b.score:.3f} ({c.b.score - c.a.score:+.3f})"
            + (" crosses the threshold" if (c.a.score >= hot_a) != (c.b.score >= hot_b) else "")
        ),
    )
    section(
        "range changed",
        d.ranges,
        lambda c: (
            f"~ {c.key}: {_fmt_range(c.range_a, c.band_a, c.a.places)} → {_fmt_range(c.range_b, c.band_b, c.b.places)} "
            f"(support {c.a.support} → {c.b.support})"
        ),
    )
    section(
        "observe-only",
        d.observe,
        lambda c: (
            f"~ {c.key}: " + ("now observe-only (a policy no longer acts on it)" if c.b.observe else "acts again")
        ),
    )
    section(
        "expected frequency changed (the tier order)",
        d.freqs,
        lambda c: f"~ {c.key}: freq {c.a.freq:g} → {c.b.freq:g}",
    )
    return "\n".join(lines) + "\n"
