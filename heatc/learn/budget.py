"""The false-alarm budget: which scored cells become rules, and which range each holds,
so that all of them together reject at most `ALARM_BUDGET` of the corpus's sentences.

A *consistency* cell joins a range cell when the cell recurs within documents and its
value nearly always repeats there.

Public surface: `cell_table`, `select_cells`, `allocate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from heatc.heatmap.format import DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, Stats
from heatc.heatmap.lower import margin_range
from heatc.learn.evidence import ALARM_BUDGET, MAX_REJECTED, CellKey, CellValues, Couplings, LearnedCell
from heatc.learn.ranges import (
    conflicts,
    count_outside,
    log_width,
    range_options,
    rejected_values,
    slip_power,
    value_stats,
)


def cell_table(
    values: dict[CellKey, CellValues],
    couplings: Couplings,
    *,
    min_support: int,
    min_probes: int,
    sentences: int,
    alarm_budget: float = ALARM_BUDGET,
    min_documents: int = 5,
    max_rejected: float = MAX_REJECTED,
    sensitivity: float | None = None,
    substitutes: dict[CellKey, np.ndarray] | None = None,
    guards: Iterable[LearnedCell] = (),
    swapped: dict[CellKey, list[tuple[float, np.ndarray]]] | None = None,
) -> list[LearnedCell]:
    """Every cell with enough corpus support and teacher evidence, highest score first,
    within the false-alarm budget (`select_cells`)."""
    ranked = []
    guards = list(guards)
    guard_keys = {g.key for g in guards}  # their values are counted in `values`; they are not ranked
    for key, cv in values.items():
        if len(cv.values) < min_support or key in guard_keys:
            continue
        strength, n = couplings.strength(key)
        if n < min_probes:
            continue
        ranked.append(LearnedCell(key, round(couplings.percentile(strength), 4), round(strength, 4), n, 0, {}))
    ranked.sort(key=lambda c: (-c.score, c.key))
    return select_cells(
        ranked, values, min_support=min_support, sentences=sentences, alarm_budget=alarm_budget,
        min_documents=min_documents, max_rejected=max_rejected, sensitivity=sensitivity, substitutes=substitutes,
        guards=guards, swapped=swapped,
    )  # fmt: skip


def select_cells(
    ranked: list[LearnedCell],
    values: dict[CellKey, CellValues],
    *,
    min_support: int,
    sentences: int,
    alarm_budget: float = ALARM_BUDGET,
    min_documents: int = 5,
    max_rejected: float = MAX_REJECTED,
    sensitivity: float | None = None,
    substitutes: dict[CellKey, np.ndarray] | None = None,
    guards: Iterable[LearnedCell] = (),
    swapped: dict[CellKey, list[tuple[float, np.ndarray]]] | None = None,
) -> list[LearnedCell]:
    """The cells, in the given (score) order, whose rules the clean corpus says are worth
    running; statistics and false alarms are recomputed from `values`.

    Every rejection a rule makes in a clean corpus is a false alarm. Cells are taken in
    score order while their false alarms together stay within `alarm_budget` per corpus
    sentence. Besides, a `range` cell must accept all but `max_rejected` of its own values —
    a keyword followed now by a year, now by an amount ("revenues in 2019 … revenues of 4.2
    million") has no range worth checking — and a `consistent` cell (which rejects a value
    that differs from its document's first one) needs `min_documents` documents that state
    its term twice.

    With `sensitivity` given, the cells at or above it — those `heatc lower` turns into
    rules — share the budget first (`allocate`: which of them run, with which range; a range
    cell whose margin-policy range rejects too many of its values may still run with a
    candidate range that does not), and what they leave goes to the cells below it, in score
    order. Unit `guards` (`unit_guards`) share the budget with the hot cells; their false
    alarms are recounted from `values`."""
    budget = alarm_budget * max(sentences, 1)
    out: list[LearnedCell] = []
    alarms = 0.0
    narrow: set[CellKey] = set()

    def take(cells: list[LearnedCell], hot: bool = False) -> None:
        nonlocal alarms
        for c in cells:
            cv = values[c.key]
            if len(cv.values) < min_support:
                continue
            fit = cv.bare()
            stats = value_stats(cv.values, fit.values)
            if c.key.check == "range":
                rejected = rejected_values(stats, cv.values)
                if rejected_values(stats, fit.values) > max_rejected * len(fit.values):
                    if not hot or not any(o.kept_out <= max_rejected * len(fit.values) for o in range_options(cv)):
                        continue
                    narrow.add(c.key)  # only a candidate range accepts enough of its values
            else:
                rejected, documents = conflicts(cv)
                if documents < min_documents:
                    continue
            if alarms + rejected > budget:
                continue
            alarms += rejected
            out.append(dataclasses.replace(c, support=len(cv.values), stats=stats, rejected=rejected, range=None))

    if sensitivity is None:
        take(ranked)
        return out
    total, budget = budget, math.inf  # every hot cell that could run, then the budget is shared among them
    take([c for c in ranked if c.score >= sensitivity], hot=True)
    for g in guards:
        rejected = int((np.asarray(values[g.key].values) > 0).sum())  # range [0, 0]: every value is a false alarm
        out.append(dataclasses.replace(g, rejected=rejected, range=(0.0, 0.0)))
    out, alarms = allocate(
        out, values, budget=total, max_rejected=max_rejected, narrow=narrow, substitutes=substitutes, swapped=swapped
    )
    budget = total
    take([c for c in ranked if c.score < sensitivity])
    return out


def allocate(
    cells: list[LearnedCell],
    values: dict[CellKey, CellValues],
    *,
    budget: float,
    max_rejected: float = MAX_REJECTED,
    narrow: set[CellKey] | frozenset[CellKey] = frozenset(),
    substitutes: dict[CellKey, np.ndarray] | None = None,
    swapped: dict[CellKey, list[tuple[float, np.ndarray]]] | None = None,
) -> tuple[list[LearnedCell], float]:
    """Share the false-alarm budget among cells: which run, and with which range.

    A cell is worth the clean values at which it would notice an error, of two kinds alike:
    a slip (the value written ten times larger or smaller: `slip_power`) and a substitution
    (another value of the same cell in its place, drawn from the cell's values). A range notices
    a slip of the values it accepts that would fall outside, and a substitution when the
    value it accepts is replaced by one it rejects; a consistency cell notices both at every
    value of a document that states its term at least twice, a substitution unless the new
    value happens to be the same. It costs its false alarms, for a range the larger of its rejections
    in the corpus and the cross-validated estimate for unseen documents (`range_options`). Each
    cell is left out, or runs with the margin policy's range or a candidate range (which
    must still accept all but `max_rejected` of its values; for the cells in `narrow` the
    margin policy's range does not, and only candidate ranges are offered); the choice maximises the total
    worth within the budget (a Lagrangian relaxation: every cell takes the choice with the
    largest worth − λ × cost, for the smallest λ ≥ 0 that fits; between choices alike in
    both, the narrower range, which notices smaller changes too). Returns the cells that run
    and the false alarms charged for them.

    `substitutes` gives, per cell, the values a substitution draws from where they are not
    the cell's own: a number word restated in digits ("thirty (30) days") has one value, so
    another of its own values changes nothing, while another number written in its place —
    drawn from what all number words restate — is what a narrow range would notice.

    `swapped` gives, per range cell with a unit, the values a swapped unit brings (`swap_sources`):
    "within 30 days" written "within 30 months" puts a days value in the cell "within … months".
    A third kind of error, weighted as a unit guard's: each source's values times the share of
    its unit's swaps that go to this cell's unit, halved; the range notices those it rejects."""
    # (worth, cost, bounds or None for the margin policy's, rejections in the corpus, width)
    choices: list[list[tuple[float, float, tuple[float, float] | None, int, float]]] = []
    for c in cells:
        cv = values[c.key]
        ch = [(0.0, 0.0, None, 0, math.inf)]  # left out
        if c.guards:
            ch.append((c.worth, max(float(c.rejected), c.expected), (0.0, 0.0), c.rejected, 0.0))
        elif c.key.check == "consistent":
            # a restated value is noticed however it changes: a slip, or another value
            counts = np.unique(np.asarray(cv.values), return_counts=True)[1] / max(len(cv.values), 1)
            stated = sum(len(vs) for vs in cv.per_document.values() if len(vs) >= 2) - c.rejected
            worth = stated * (1.0 + (1.0 - float((counts**2).sum()))) / 2
            ch.append((worth, float(c.rejected), None, c.rejected, 0.0))
        else:
            fit = cv.bare()  # the values it was fitted to; it is worth what it would notice there
            n = len(fit.values)
            pool = None if substitutes is None else substitutes.get(c.key)
            sources = () if swapped is None else swapped.get(c.key, ())

            def worth(
                power: float, rejected: int, bounds: tuple[float, float], n: int = n, pool=pool, sources=sources
            ) -> float:
                inside = 1.0 - rejected / n  # the share of the cell's values it accepts
                # another value in its place: noticed if the range accepts the first and not the second
                outside = 1.0 - inside if pool is None or not len(pool) else count_outside(bounds, pool) / len(pool)
                # a value of another unit written in this cell's unit: noticed if the range rejects it
                swap = sum(share * count_outside(bounds, src) for share, src in sources)
                return (n * (power + inside * outside) + swap) / 2

            default = margin_range(Stats(**c.stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
            if c.key not in narrow:
                ch.append(
                    (worth(slip_power(default, fit.values), count_outside(default, fit.values), default), float(c.rejected),
                     None, c.rejected, log_width(default))
                )  # fmt: skip
            ch.extend(
                (worth(o.power, o.kept_out, o.bounds), float(max(o.rejected, o.expected)), o.bounds, o.rejected,
                 log_width(o.bounds))
                for o in range_options(cv)
                if o.kept_out <= max_rejected * n
            )  # fmt: skip
        choices.append(ch)

    def pick(lam: float) -> list[int]:
        # ties: the cheaper choice, then the narrower range (it notices smaller changes too)
        return [
            max(range(len(ch)), key=lambda k, ch=ch: (ch[k][0] - lam * ch[k][1], -ch[k][1], -ch[k][4]))
            for ch in choices
        ]

    def cost(picked: list[int]) -> float:
        return sum(ch[k][1] for ch, k in zip(choices, picked, strict=True))

    lo, hi = 0.0, 1.0
    if cost(pick(0.0)) > budget:
        while cost(pick(hi)) > budget and hi < 1e12:
            hi *= 4
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cost(pick(mid)) > budget else (lo, mid)
        lam = hi
    else:
        lam = 0.0
    out, spent = [], 0.0
    for c, ch, k in zip(cells, choices, pick(lam), strict=True):
        if k == 0:
            continue
        _, charged, bounds, rejected, _ = ch[k]
        spent += charged
        out.append(dataclasses.replace(c, range=bounds, rejected=rejected))
    return out, spent
