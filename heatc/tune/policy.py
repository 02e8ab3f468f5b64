"""The policy's cut-offs, chosen on the Pareto front of false alarms against errors caught.

A response alarms (its action is not `pass`) when its confidence (docs/report.md: the product
of 1 − heat over its acting rejected rules) is below `pass`; it escalates below `confirm`.
Over the labelled traffic, with the rule changes applied (narrowed ranges admit what they
admit, dropped rules are gone, observe-only rules weigh 0), every cut-off between two
neighbouring confidences gives one point: false alarms per checked response (each alarmed
response counted by its chance of being clean, `Traffic.p_error`) against errors caught. The
points no other beats on both are the front.

- `pass`: of the points within the budget, the one with the fewest false alarms that catches at
  least as many errors as today's rules at today's cut-off — a tuning does not make the
  deployment catch less, nor spend the budget on alarms today's traffic did not ask for —, or,
  where none does, the one that catches the most; ties go to the cut-off nearest today's;
- `confirm` (below it, escalate): the same within `escalate_share` of the budget, at or below
  `pass`, against the errors today's rules escalate at today's `confirm` — chosen among all
  the cut-offs, not the front's alone, so that of those that escalate as few false alarms the
  one nearest today's is kept.

A cut-off that would catch nothing is never chosen: where no point within the budget catches an
error (or nothing was labelled an error), today's cut-off stays and the report says why. A
cut-off is written as the shortest decimal between the two confidences it falls between.

Public surface: `Point`, `PolicyChoice`, `choose_policy(...)`, `draw_front(choice, path)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from heatc.tune.rules import Alarms, Change
from heatc.tune.traffic import Traffic
from heatc_runtime.reports.audit import Policy

EPS = 1e-12


@dataclass(frozen=True)
class Point:
    cut: float  # alarm where confidence < cut
    false_alarms: float  # per checked response
    caught: float  # errors


@dataclass
class PolicyChoice:
    today: Policy
    chosen: Policy
    front: list[Point]  # the tuned rules'
    base_front: list[Point]  # today's rules'
    today_point: Point  # today's rules at today's pass
    pass_point: Point | None
    confirm_point: Point | None
    errors: float  # errors in the labelled traffic (the front's ceiling)
    known: int  # responses whose errors are known (every rejection reviewed or estimated)
    unknown: int  # responses left out: a rejection of a rule nobody reviewed
    budget: float
    escalate_share: float
    why: list[str] = field(default_factory=list)


def _short_decimal(lo: float, hi: float) -> float:
    """The shortest decimal in (lo, hi]."""
    for d in range(0, 13):
        x = (math.floor(lo * 10**d) + 1) / 10**d
        if lo < x <= hi:
            return x
    return hi


def _points(confs: list[tuple[float, float]], checked: int) -> list[Point]:
    """(confidence, p_error) of each known response → a point per distinct cut."""
    alarmed = sorted(c for c in confs if c[0] < 1.0)
    levels = sorted({c for c, _ in alarmed})
    out = [Point(_short_decimal(0.0, levels[0]) if levels else 1.0, 0.0, 0.0)]
    fa = caught = 0.0
    k = 0
    for n, level in enumerate(levels):
        while k < len(alarmed) and alarmed[k][0] <= level:
            fa += 1.0 - alarmed[k][1]
            caught += alarmed[k][1]
            k += 1
        upper = levels[n + 1] if n + 1 < len(levels) else 1.0
        out.append(Point(_short_decimal(level, upper), fa / max(checked, 1), caught))
    return out


def _front(points: list[Point]) -> list[Point]:
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.false_alarms, -p.caught, p.cut)):
        if not out or p.caught > out[-1].caught + EPS:
            out.append(p)
    return out


def _at(confs: list[tuple[float, float]], cut: float, checked: int) -> Point:
    """The point of one cut (today's): the responses whose confidence is below it."""
    alarmed = [p for c, p in confs if c < cut]
    return Point(cut, sum(1.0 - p for p in alarmed) / max(checked, 1), sum(alarmed))


def _pick(
    front: list[Point], limit: float, near: float, at_most: float = 1.0, enough: float | None = None
) -> Point | None:
    """The point within `limit` false alarms (and at a cut of at most `at_most`) with the fewest
    false alarms that catches `enough`; without `enough`, or where none does, the one that
    catches the most. Never one that catches nothing."""
    fits = [p for p in front if p.false_alarms <= limit + EPS and p.caught > EPS and p.cut <= at_most + EPS]
    if enough is not None and (good := [p for p in fits if p.caught >= enough - 1e-9]):
        return min(good, key=lambda p: (p.false_alarms, abs(p.cut - near), p.cut))
    if not fits:
        return None
    return min(fits, key=lambda p: (-round(p.caught, 9), p.false_alarms, abs(p.cut - near), p.cut))


def choose_policy(
    traffic: Traffic,
    base_heat: dict[str, float],
    heat: dict[str, float],
    changes: dict[str, Change],
    today: Policy,
    budget: float,
    escalate_share: float,
) -> PolicyChoice:
    """`base_heat`: today's rules' weights (observe-only: 0); `heat`: the tuned rules' (dropped
    rules absent); `changes`: what became of each changed rule."""
    base, tuned = Alarms(traffic, base_heat, 1.0), Alarms(traffic, heat, 1.0)
    base_confs = [(base.confidence(i, {}), p) for i, p in base.p.items()]
    confs = [(tuned.confidence(i, changes), p) for i, p in tuned.p.items()]
    unknown = traffic.checked - len(base.p)
    points, base_points = _points(confs, traffic.checked), _points(base_confs, traffic.checked)
    front, base_front = _front(points), _front(base_points)
    errors = sum(p for _, p in confs)
    choice = PolicyChoice(
        today, today, front, base_front, _at(base_confs, today.pass_at, traffic.checked), None, None, errors, len(confs), unknown,
        budget, escalate_share,
    )  # fmt: skip
    if errors <= EPS:
        choice.why.append(
            "no labelled error in the traffic: nothing to trade false alarms against; today's cut-offs stay"
        )
        return choice
    pass_point = _pick(front, budget, today.pass_at, enough=choice.today_point.caught)
    if pass_point is None:
        choice.why.append(
            f"no cut-off catches an error with at most {budget:g} false alarms per checked response: today's pass stays"
        )
        pass_at = today.pass_at
    else:
        pass_at = pass_point.cut
        choice.pass_point = pass_point
    escalated = _at(base_confs, today.confirm_at, traffic.checked).caught
    # (from every point, not the front's alone: at equal false alarms, the cut-off nearest today's)
    confirm_point = _pick(points, budget * escalate_share, today.confirm_at, pass_at, enough=escalated)
    if confirm_point is None:
        choice.why.append(
            f"no cut-off at or below pass escalates an error with at most {budget * escalate_share:g} false alarms "
            "per checked response: today's confirm stays (at most pass)"
        )
        confirm_at = min(today.confirm_at, pass_at)
    else:
        confirm_at = confirm_point.cut
        choice.confirm_point = confirm_point
    choice.chosen = Policy(pass_at, confirm_at)
    return choice


def draw_front(choice: PolicyChoice, path: Path) -> None:
    """The fronts (today's rules, tuned rules), today's point and the chosen cut-offs, as a picture."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for front, style, label in ((choice.base_front, "--", "today's rules"), (choice.front, "-", "tuned rules")):
        xs = [p.false_alarms for p in front]
        ys = [p.caught for p in front]
        ax.step(xs, ys, style, where="post", marker="o", markersize=3, label=f"Pareto front, {label}")
    t = choice.today_point
    ax.plot([t.false_alarms], [t.caught], "rx", markersize=10, label=f"today: pass {choice.today.pass_at:g}")
    if choice.pass_point is not None:
        p = choice.pass_point
        ax.plot([p.false_alarms], [p.caught], "g*", markersize=14, label=f"chosen: pass {p.cut:g}")
    if choice.confirm_point is not None:
        c = choice.confirm_point
        ax.plot([c.false_alarms], [c.caught], "D", color="orange", label=f"chosen: confirm {c.cut:g} (escalate below)")
    ax.axvline(choice.budget, color="grey", linestyle=":", label=f"alarm budget {choice.budget:g}")
    right = max([p.false_alarms for p in (*choice.front, *choice.base_front, t)] + [choice.budget]) or 1.0
    ax.set_xlim(-0.03 * right, 1.05 * right)  # (a front at no false alarm stands off the axis)
    ax.set_xlabel("false alarms per checked response")
    ax.set_ylabel("labelled errors caught")
    ax.set_title(f"Confidence cut-offs over {choice.known:,} reviewed responses")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
