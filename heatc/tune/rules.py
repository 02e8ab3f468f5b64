"""False alarms → rules: what the reviewed rules become.

With labels, the labelled traffic's false alarms (responses the policy does not pass, at
today's cut-offs, per checked response; `traffic.Traffic`) are set against the budget. While
they are over it, the tuner changes the reviewed rule whose change loses the fewest labelled
errors caught per false alarm it removes — so that the changes keep the most labelled errors
within the budget. A rule is:

- **narrowed**: its range widened over the labelled clean values that fail it — a side at a
  time, up to a point just short of the nearest labelled error beyond them (the geometric mean
  of the two, rounded outwards to 3 significant figures where that stays short of the error;
  past the last value, the heatmap's margin factor), so that the labelled errors stay out;
- **observe-only**: it still runs and reports, but no confidence policy acts on it — where it
  caught labelled errors a reviewer should keep seeing;
- **dropped**: where it caught none.

A narrowing that keeps every labelled error of its rule out is made wherever it removes
labelled false alarms, whatever the budget: the reviewers said those were false, and nothing
they said was an error is let through. The changes that cost errors are made only while the
budget is not met, the cheapest first (at equal cost a narrowing, then observe-only, then a
drop). Rules whose rejections nobody reviewed, and every rule when there are no labels, are listed as **suspects** when they reject in more than the budget's
share of the checked responses, and left as they are.

Public surface: `Change`, `Decision`, `Alarms`, `decide(traffic, infos, budget, margin_factor,
heat, cut)`, `suspects(traffic, infos, budget)`, `admitted(change, event)`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from heatc.heatmap.lower import round_out
from heatc.tune.inputs import Event
from heatc.tune.traffic import Bounds, RuleInfo, Traffic

EPS = 1e-12


@dataclass(frozen=True)
class Change:
    """What becomes of one rule: `narrow` (with its new range), `observe` or `drop`."""

    action: str
    rule: RuleInfo
    bounds: Bounds | None = None  # narrow: the widened range


@dataclass
class Decision:
    rule: str
    cell: int | None
    action: str  # keep | narrow | observe | drop | suspect
    false_alarms: float  # per checked response, before
    after: float  # per checked response, after (for the policy: observe and drop count none)
    errors: int  # labelled errors among its rejections
    kept: int  # ... still rejected (and acted on) after
    rejections: int
    reviewed: int  # rejections labelled
    why: str
    change: Change | None = None
    values: list[tuple[float, int]] = field(default_factory=list)  # suspects: the values it rejected most


def admitted(change: Change | None, e: Event) -> bool:
    """Whether a rejected event passes after `change` (dropped and observe-only rules' events
    are not admitted: they are gone or weigh nothing, which the caller decides)."""
    if change is None or change.action != "narrow" or not _range_failure(change.rule, e):
        return False
    lo, hi = change.bounds  # type: ignore[misc]
    v = e.value
    inside = (lo is None or v >= lo) and (hi is None or v <= hi)
    return inside and (change.rule.places is None or e.places is None or e.places <= change.rule.places)


def _range_failure(info: RuleInfo, e: Event) -> bool:
    return bool(info.range_text) and e.failed == info.range_text and e.value is not None


def _false_alarms(traffic: Traffic, rule: str, change: Change | None) -> float:
    """Per checked response: the chance, summed over responses, that all of the rule's
    rejections left there are false alarms."""
    total = 0.0
    for i, js in traffic.rejections.get(rule, {}).items():
        left = [j for j in js if not admitted(change, traffic.event(i, j))]
        if left:
            total += math.prod(traffic.p_false(i, j) or 0.0 for j in left)
    return total / max(traffic.checked, 1)


def _kept(traffic: Traffic, rule: str, change: Change | None) -> int:
    return sum(
        1
        for i, js in traffic.rejections.get(rule, {}).items()
        for j in js
        if traffic.labels.get((i, j)) == "error" and not admitted(change, traffic.event(i, j))
    )


def _between(a: float, b: float | None, up: bool, factor: float) -> float:
    """A bound admitting `a` but not `b` (the next value out), read well: rounded outwards
    where that stays short of `b`."""
    if b is None:
        x = (a * factor if a > 0 else a / factor) if up else (a / factor if a > 0 else a * factor)
    else:
        x = math.sqrt(a * b) if a > 0 and b > 0 else (a + b) / 2
        x = max(x, a) if up else min(x, a)
    r = round_out(x, up)
    if b is None or (r < b if up else r > b):
        return r
    return x


def _runs(values: list[tuple[float, bool]]) -> list[int]:
    """Candidate cuts along one side's values (nearest the range first; each: is an error):
    admit none, or everything up to the end of a run of values with no error."""
    cuts = [0]
    for k, (_, error) in enumerate(values):
        if not error and (k + 1 == len(values) or values[k + 1][1]):
            cuts.append(k + 1)
    return cuts


def _narrowings(traffic: Traffic, info: RuleInfo, factor: float) -> list[Change]:
    lo, hi = info.bounds  # type: ignore[misc]
    sides: dict[str, dict[float, bool]] = {"low": {}, "high": {}}
    for i, js in traffic.rejections.get(info.name, {}).items():
        for j in js:
            e = traffic.event(i, j)
            if not _range_failure(info, e):
                continue
            side = "low" if lo is not None and e.value < lo else "high"
            error = traffic.labels.get((i, j)) == "error"
            sides[side][e.value] = sides[side].get(e.value, False) or error
    low = sorted(sides["low"].items(), reverse=True)  # nearest the range first
    high = sorted(sides["high"].items())
    out = []
    for kl in _runs(low):
        for kh in _runs(high):
            if kl == kh == 0:
                continue
            new_lo = lo if kl == 0 else _between(low[kl - 1][0], low[kl][0] if kl < len(low) else None, False, factor)
            new_hi = hi if kh == 0 else _between(high[kh - 1][0], high[kh][0] if kh < len(high) else None, True, factor)
            out.append(Change("narrow", info, (new_lo, new_hi)))
    return out


class Alarms:
    """Which labelled responses alarm (confidence below `cut`) with some rules changed: the
    false alarms (per checked response) and errors caught they add up to. Responses whose
    errors are unknown (`Traffic.p_error`) are left out."""

    def __init__(self, traffic: Traffic, heat: dict[str, float], cut: float):
        self.traffic, self.heat, self.cut = traffic, heat, cut
        self.p = {i: p for i, r in enumerate(traffic.reports) if r.events and (p := traffic.p_error(i)) is not None}
        self.start = self.end = (0.0, 0.0)  # (false alarms, errors caught) before and after `decide`

    def confidence(self, i: int, changes: dict[str, Change]) -> float:
        """Report i's confidence with the rules changed (docs/report.md: the product of 1 − heat
        over its rejected rules; an observe-only rule weighs 0, a dropped one is gone)."""
        score = 1.0
        for rule in sorted({e.rule for e in self.traffic.reports[i].events if e.rejected}):
            change = changes.get(rule)
            if change is not None and change.action == "drop":
                continue
            if change is not None and change.action == "narrow":
                left = [j for j in self.traffic.rejections[rule][i] if not admitted(change, self.traffic.event(i, j))]
                if not left:
                    continue
            w = 0.0 if change is not None and change.action == "observe" else self.heat.get(rule, 0.5)
            score *= 1.0 - w
        return score

    def _alarm(self, i: int, changes: dict[str, Change]) -> bool:
        return self.confidence(i, changes) < self.cut

    def count(self, changes: dict[str, Change], reports=None) -> tuple[float, float]:
        """(false alarms per checked response, errors caught) over `reports` (default: all)."""
        fa = caught = 0.0
        for i in self.p if reports is None else reports:
            if i in self.p and self._alarm(i, changes):
                fa += 1.0 - self.p[i]
                caught += self.p[i]
        return fa / max(self.traffic.checked, 1), caught


RANK = {"narrow": 0, "observe": 1, "drop": 2}  # at equal cost, the change that keeps the most of the rule


def decide(
    traffic: Traffic,
    infos: dict[str, RuleInfo],
    budget: float,
    margin_factor: float,
    heat: dict[str, float],
    cut: float,
) -> tuple[list[Decision], Alarms]:
    """Change reviewed rules, the cheapest first, until the labelled traffic's false alarms
    (responses alarming at today's cut-off `cut`) are within `budget`: each step takes the
    change that loses the fewest errors caught per false alarm it removes (at equal cost the
    narrowing, then the larger removal). A decision for every reviewed rule; rules of rule
    files are never changed (their source is not the heatmap's)."""
    alarms = Alarms(traffic, heat, cut)
    options: dict[str, list[Change]] = {}
    for name in sorted(traffic.rejections):
        info = infos.get(name)
        if info is None or info.cell is None or not traffic.reviewed(name):
            continue
        narrow = _narrowings(traffic, info, margin_factor) if info.bounds is not None else []
        off = Change("observe" if traffic.labelled(name, "error") else "drop", info)
        options[name] = [*narrow, off]
    state: dict[str, Change] = {}
    start = alarms.count(state)
    for name, opts in options.items():  # the changes that cost no labelled error: all of them
        errors = traffic.labelled(name, "error")
        free = [(k, o) for k, o in enumerate(opts) if o.action == "narrow" and _kept(traffic, name, o) == errors]
        scored = [(_false_alarms(traffic, name, o), k, o) for k, o in free]
        best_free = min(scored, default=None, key=lambda x: (x[0], x[1]))
        if best_free is not None and best_free[0] < _false_alarms(traffic, name, None) - EPS:
            state[name] = best_free[2]
    fa, caught = alarms.count(state)
    while fa > budget + EPS:
        best = None
        for name, opts in options.items():
            touched = list(traffic.rejections[name])
            now = alarms.count(state, touched)
            for k, option in enumerate(opts):
                if state.get(name) is option:
                    continue
                after = alarms.count({**state, name: option}, touched)
                removed, lost = now[0] - after[0], now[1] - after[1]
                if removed <= EPS:
                    continue
                key = (max(lost, 0.0) / removed, RANK[option.action], -removed, name, k)
                if best is None or key < best[0]:
                    best = (key, name, option, removed, lost)
        if best is None:
            break
        _, name, option, removed, lost = best
        state[name] = option
        fa, caught = fa - removed, caught - lost
    out = []
    for name in sorted(traffic.rejections):
        info = infos.get(name)
        if info is None or not traffic.reviewed(name):
            continue
        change = state.get(name)
        errors = traffic.labelled(name, "error")
        before = _false_alarms(traffic, name, None)
        d = Decision(
            name, info.cell, "keep" if change is None else change.action, before, before, errors, errors,
            sum(len(js) for js in traffic.rejections[name].values()), traffic.reviewed(name),
            "unchanged" if info.cell is not None else "a rule file's rule: never changed here", change,
        )  # fmt: skip
        if change is not None:
            d.after = 0.0 if change.action != "narrow" else _false_alarms(traffic, name, change)
            d.kept = 0 if change.action != "narrow" else _kept(traffic, name, change)
            d.why = _why(d, info)
        out.append(d)
    alarms.start, alarms.end = start, (fa, caught)
    return out, alarms


def _why(d: Decision, info: RuleInfo) -> str:
    if d.action == "narrow":
        kept = (
            "every labelled error stays out"
            if d.kept == d.errors
            else f"{d.kept} of {d.errors} labelled errors stay out"
        )
        return f"range {_fmt(info.bounds)} → {_fmt(d.change.bounds)}: admits labelled clean values it rejected; {kept}"  # type: ignore[union-attr]
    if d.action == "observe":
        return (
            f"caught {d.errors} labelled error{'s' * (d.errors != 1)}, but no range of its costs fewer errors per "
            "false alarm removed: it reports, no policy acts on it"
        )
    return "caught no labelled error, and no range of its removes its false alarms as well"


def suspects(traffic: Traffic, infos: dict[str, RuleInfo], budget: float) -> list[Decision]:
    """Rules rejecting in more than `budget` of the checked responses with none of their
    rejections reviewed: listed with the values they rejected most, nothing changed."""
    out = []
    for name in sorted(traffic.rejections):
        where = traffic.rejections[name]
        share = len(where) / max(traffic.checked, 1)
        if traffic.reviewed(name) or share <= budget + EPS:
            continue
        values = Counter(
            traffic.event(i, j).value for i, js in where.items() for j in js if traffic.event(i, j).value is not None
        )
        n = sum(len(js) for js in where.values())
        cell = infos[name].cell if name in infos else None
        top = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        out.append(
            Decision(
                name,
                cell,
                "suspect",
                share,
                share,
                0,
                0,
                n,
                0,
                "rejects in more of the traffic than the budget; review its rejections (label them) to tune it",
                values=top,
            )
        )
    out.sort(key=lambda d: (-d.false_alarms, d.rule))
    return out


def _fmt(bounds: Bounds | None) -> str:
    if bounds is None:
        return "none"
    lo = "-inf" if bounds[0] is None else f"{bounds[0]:g}"
    hi = "inf" if bounds[1] is None else f"{bounds[1]:g}"
    return f"[{lo}, {hi}]"
