"""Hot rules → tiers: the tier plan re-made from what the traffic showed.

A build orders rule records by heat × freq and fills the L2-persisting window first
(docs/heatmap.md, "Tiers"). The tuner sets each cell's `freq` to its rule's observed rate —
events per response in the reports, or responses in which it triggered per response checked
in a metrics scrape. A rule never seen gets a rate low enough to put it after every rule that
was seen, whatever their heats (`unseen_freq`), so the unseen keep their order by heat among
themselves. The L2 tier is sized to end just after the last of the rules that produced
`COVERAGE` (95 %) of the observed events, within `l2_max` bytes: the window then holds what
the traffic needs and leaves the rest of the L2 cache to the model. The device tier keeps the
bytes the L2 tier gave up (or gives what it took). Rules of hand-written rule files keep the
`freq` their source gives them.

Public surface: `COVERAGE`, `TierPlan`, `observed_freq(count, responses, unseen)`,
`unseen_freq(heats, responses)`, `plan_tiers(...)`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from heatc import ir
from heatc.heatmap.build import rule_tiers
from heatc.heatmap.lower import round_out

COVERAGE = 0.95
MIN_FREQ, MAX_FREQ = 1e-9, 1e9  # what a heatmap's `freq` may be


def unseen_freq(heats: list[float], responses: int) -> float:
    """The rate of a rule never seen: half an event, scaled by the smallest heat over the
    largest, so that heat × freq puts it after any rule seen once."""
    positive = [h for h in heats if h > 0]
    scale = min(positive) / max(positive) if positive else 1.0
    return max(round_out(0.5 * scale / max(responses, 1), up=False), MIN_FREQ)


def observed_freq(count: int, responses: int, unseen: float) -> float:
    """A rule's expected frequency from its count over the responses checked (3 significant
    figures, rounded down so that no rate passes a larger one's)."""
    if not count:
        return unseen
    return min(max(round_out(count / max(responses, 1), up=False), MIN_FREQ), MAX_FREQ)


@dataclass
class TierPlan:
    source: str  # what the counts are: "events in the reports" or "responses in the metrics scrape"
    counts: Counter  # rule → observed count
    total: int  # of the rules in the tuned build
    hot: list[str]  # the rules producing COVERAGE of the observed events, most first
    l2_bytes: int
    device_bytes: int
    needed: int  # L2 bytes that end after the last hot rule
    l2_rules: list[str]  # the tuned build's L2 tier, in program order
    coverage: float  # of the observed events, by the L2 tier's rules
    base_l2: list[str] = field(default_factory=list)
    base_coverage: float = 0.0
    l2_max: int = 0

    @property
    def fits(self) -> bool:
        return self.needed <= self.l2_max

    @property
    def entered(self) -> list[str]:
        base = set(self.base_l2)
        return [r for r in self.l2_rules if r not in base]

    @property
    def left(self) -> list[str]:
        now = set(self.l2_rules)
        return [r for r in self.base_l2 if r not in now]


def _coverage(rules: list[str], counts: Counter, total: int) -> float:
    return sum(counts[r] for r in rules) / total if total else 0.0


def plan_tiers(
    program: ir.Program,
    base: ir.Program,
    base_tiers: dict[str, int],
    counts: Counter,
    source: str,
    l2_max: int,
) -> TierPlan:
    """The L2 tier for `program` (the tuned build, its cells' freq already observed): bytes
    through the last hot rule in its order, within `l2_max`."""
    sizes, _ = rule_tiers(program, {"l2_bytes": 0, "device_bytes": 0})
    names = [r.name for r in program.rules]
    total = sum(counts[n] for n in names)
    ranked = sorted(range(len(names)), key=lambda k: (-counts[names[k]], k))
    hot, covered = [], 0
    for k in ranked:
        if total and covered >= COVERAGE * total:
            break
        if not counts[names[k]]:
            break
        hot.append(k)
        covered += counts[names[k]]
    last = max(hot, default=-1)
    needed = sum(sizes[: last + 1])
    l2, n_l2 = 0, 0
    for size in sizes:
        if l2 + size > min(needed, l2_max):
            break
        l2 += size
        n_l2 += 1
    device = max(base_tiers.get("l2_bytes", 0) + base_tiers.get("device_bytes", 0) - l2, 0)
    _, base_plan = rule_tiers(base, base_tiers)
    base_l2 = [r.name for r, t in zip(base.rules, base_plan, strict=True) if t == "l2"]
    base_total = sum(counts[r.name] for r in base.rules)
    return TierPlan(
        source, counts, total, [names[k] for k in hot], l2, device, needed, names[:n_l2],
        _coverage(names[:n_l2], counts, total), base_l2, _coverage(base_l2, counts, base_total), l2_max,
    )  # fmt: skip
