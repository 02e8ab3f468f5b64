"""The traffic a deployed heatmap saw, as the tuner reasons about it: which rules matched and
rejected where, what the reviewers called each rejection, and — for a rejection nobody
labelled — how likely it is a false alarm, from the labelled share of its rule's.

A **checked** response is a report holding at least one match event (a rule read a value
there): false-alarm rates are per checked response, as the benchmarks count them per checked
sentence. A labelled event counts as what the label says; an unlabelled rejection of a rule
whose rejections were reviewed counts as that rule's labelled false-alarm share of one; one of
a rule nobody reviewed is unknown, and a response holding one is left out of the estimates
that need it (`p_error`).

Public surface: `RuleInfo`, `rule_infos(heatmap, lowered, program)`, `Traffic`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from heatc import ir
from heatc.heatmap.format import Heatmap
from heatc.heatmap.lower import Lowered, cell_range
from heatc.tune.inputs import Event, Report

Bounds = tuple[float | None, float | None]


@dataclass(frozen=True)
class RuleInfo:
    """A rule of the base build and the cell it was lowered from (None: a rule file's rule)."""

    name: str
    cell: int | None
    heat: float
    check: str  # the cell's check (range, consistent, lock); "" for a rule file's rule
    bounds: Bounds | None  # a range cell's range as lowered
    range_text: str  # the canonical text of that range's requirement (what an event's `failed` says)
    places: int | None


def rule_infos(hm: Heatmap, lowered: Lowered, program: ir.Program) -> dict[str, RuleInfo]:
    out = {}
    for r in program.rules:
        index = lowered.cell_index.get(r.name)
        if index is None:
            out[r.name] = RuleInfo(r.name, None, r.heat, "", None, "", None)
            continue
        cell = hm.cells[index]
        bounds, text = None, ""
        if cell.check == "range":
            bounds = cell_range(cell, hm)
            text = r.requirements[0].text  # (lowering writes the range first)
        out[r.name] = RuleInfo(r.name, index, r.heat, cell.check, bounds, text, cell.places)
    return out


@dataclass
class Traffic:
    reports: list[Report]
    labels: dict[tuple[int, int], str] = field(default_factory=dict)  # (report, event) → label

    def __post_init__(self) -> None:
        self.checked = sum(1 for r in self.reports if r.events)
        self.events: Counter = Counter(e.rule for r in self.reports for e in r.events)
        # per rule, its rejections: report index → event indices
        self.rejections: dict[str, dict[int, list[int]]] = {}
        for i, r in enumerate(self.reports):
            for j, e in enumerate(r.events):
                if e.rejected:
                    self.rejections.setdefault(e.rule, {}).setdefault(i, []).append(j)
        self._share: dict[str, float | None] = {}
        for rule, where in self.rejections.items():
            said = [self.labels[(i, j)] for i, js in where.items() for j in js if (i, j) in self.labels]
            self._share[rule] = said.count("false_alarm") / len(said) if said else None
        self.error_reports = {i for (i, _), label in self.labels.items() if label == "error"}
        self._labelled = Counter((self.event(i, j).rule, label) for (i, j), label in self.labels.items())

    def event(self, i: int, j: int) -> Event:
        return self.reports[i].events[j]

    def share(self, rule: str) -> float | None:
        """The labelled false-alarm share of the rule's rejections (None: none labelled)."""
        return self._share.get(rule)

    def reviewed(self, rule: str) -> int:
        return sum(1 for i, js in self.rejections.get(rule, {}).items() for j in js if (i, j) in self.labels)

    def p_false(self, i: int, j: int) -> float | None:
        """How likely rejection j of report i is a false alarm."""
        label = self.labels.get((i, j))
        if label is not None:
            return 1.0 if label == "false_alarm" else 0.0
        return self.share(self.event(i, j).rule)

    def p_error(self, i: int) -> float | None:
        """How likely report i's text holds an error the rules can see: 1 where a reviewer
        said so, else one minus the chance that every rejection in it is false; None where a
        rejection of an unreviewed rule leaves it unknown."""
        if i in self.error_reports:
            return 1.0
        p = 1.0
        for j, e in enumerate(self.reports[i].events):
            if e.rejected:
                q = self.p_false(i, j)
                if q is None:
                    return None
                p *= q
        return 1.0 - p

    def labelled(self, rule: str, label: str) -> int:
        """The rule's events the reviewers gave `label`."""
        return self._labelled[(rule, label)]
