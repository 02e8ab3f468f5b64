"""The false-alarm budget: which scored cells become rules, and which range each holds,
so that all of them together reject at most `CellsConfig.alarm_budget` of the corpus's sentences
that hold a value some cell checks. The settings come whole, as the stage's `CellsConfig`.

A *consistency* cell joins a range cell only where the same term truly must repeat: it
recurs in `MIN_DOCUMENTS` documents, and where a document states it again it states the
same value (`MAX_CONFLICTS`) — a term of a contract, not a dose that changes.

Public surface: `cell_table`, `select_cells`, `CellContext`, `allocate`, `range_charge`, `MAX_CONFLICTS`, `MIN_DOCUMENTS`,
`CUT_NOISE`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from heatc.learn.cells.bands import band_options
from heatc.learn.cells.overlaps import enclosing_cells, joint_choices, marginal_choices
from heatc.learn.cells.precision import capped_options
from heatc.learn.cells.ranges import (
    FLAT_TAIL,
    RangeOption,
    conflicts,
    count_outside,
    fitted_values,
    log_width,
    n_bounds,
    range_options,
    rejected_values,
    restated_option,
    tail_margin,
    value_stats,
)
from heatc.learn.config import CellsConfig
from heatc.learn.text.evidence import MAX_REJECTED, CellKey, CellValues, LearnedCell

# a consistency cell's restated values may differ from the first at most this often, and its term
# must be restated in this many documents at least
MAX_CONFLICTS = 0.02
MIN_DOCUMENTS = 5
# times the budget is shared again with keyword cells worth what their enclosing cells leave
# them (`allocate`), at most
MARGINAL_ROUNDS = 4
# values a number word restated in digits needs for a cell, where any other cell needs the
# corpus's `min_support`: its range is the number it restates ("fourteen (14)": [14, 14]), no
# tail to learn, and a dozen "fourteen (14) days" in half of CUAD show which number that is
NUMERAL_SUPPORT = 5
# standard deviations of its own count that a range cutting into its clean values is charged
# besides the count (`range_charge`)
CUT_NOISE = 1.0


def range_charge(option: RangeOption) -> float:
    """The false alarms the budget charges a range: the largest of its rejections in the
    corpus, their cross-validated estimate and its unseen tail (`RangeOption`), plus
    `CUT_NOISE` standard deviations of the first two (a count's, √k). The solver picks the
    options that look cheapest among thousands, and a cut past k clean values looks cheapest
    where k came out low by chance: charged k alone, heatmaps learned with a budget of 1 %
    rejected 1.15 % of the held-out value-bearing sentences (three splits of MTSamples), and
    the cuts — an estimated blood loss bound at 898 mL past two of 236 values, months at
    21.5 past three of 145 — raised many of them."""
    seen = max(option.rejected, option.expected)
    return float(max(seen, option.unseen) + CUT_NOISE * math.sqrt(seen))


def _support(key: CellKey, min_support: int, substitutes: dict | None) -> int:
    """The values `key` needs for a cell: `min_support`, at most `NUMERAL_SUPPORT` for a number
    word restated in digits (a key of `substitutes`)."""
    return min(min_support, NUMERAL_SUPPORT) if substitutes is not None and key in substitutes else min_support


@dataclass(frozen=True)
class CellContext:
    """What the budget reads besides the cells' values and the settings."""

    sentences: int  # the sentences that hold a value some cell checks: the budget is a share of them
    # per cell, the values a substitution draws from where they are not its own (`allocate`)
    substitutes: dict[CellKey, np.ndarray] | None = None
    guards: tuple[LearnedCell, ...] = ()  # unit guards (`guards.unit_guards`), with the hot cells
    # per range cell with a unit, the values a swapped unit brings (`allocate`)
    swapped: dict[CellKey, list[tuple[float, np.ndarray]]] | None = None


def cell_table(
    values: dict[CellKey, CellValues],
    scores: dict[CellKey, float],
    strengths: dict[CellKey, tuple[float, int]],
    settings: CellsConfig,
    context: CellContext,
) -> list[LearnedCell]:
    """Every cell with enough corpus support and a teacher's score (`scores`, from
    `Couplings.scores`; `strengths` their (strength, probed occurrences)), highest score first,
    within the false-alarm budget (`select_cells`)."""
    ranked = []
    guard_keys = {g.key for g in context.guards}  # their values are counted in `values`; they are not ranked
    for key, cv in values.items():
        support = _support(key, settings.min_support, context.substitutes)
        if len(cv.values) < support or key in guard_keys or key not in scores:
            continue
        strength, n = strengths[key]
        if n < settings.min_probes:
            continue
        ranked.append(LearnedCell(key, round(scores[key], 4), round(strength, 4), n, 0, {}))
    ranked.sort(key=lambda c: (-c.score, c.key))
    return select_cells(ranked, values, settings, context)


def select_cells(
    ranked: list[LearnedCell],
    values: dict[CellKey, CellValues],
    settings: CellsConfig,
    context: CellContext,
) -> list[LearnedCell]:
    """The cells, in the given (score) order, whose rules the clean corpus says are worth
    running; statistics and false alarms are recomputed from `values`.

    Every rejection a rule makes in a clean corpus is a false alarm. Cells are taken in
    score order while their false alarms together stay within `settings.alarm_budget` per corpus
    sentence. Besides, a `range` cell must accept all but `MAX_REJECTED` of its own values —
    a keyword followed now by a year, now by an amount ("revenues in 2019 … revenues of 4.2
    million") has no range worth checking — and a `consistent` cell (which rejects a value
    that differs from its document's first one) needs `MIN_DOCUMENTS` documents that state
    its term twice.

    With `settings.sensitivity` given, the cells at or above it — those `heatc lower` turns into
    rules — share the budget first (`allocate`: which of them run, with which range; a range
    cell whose margin-policy range rejects too many of its values may still run with a
    candidate range that does not), and what they leave goes to the cells below it, in score
    order. Unit guards (`context.guards`) share the budget with the hot cells; their false
    alarms are recounted from `values`. With `settings.bands`, the hot range cells may also take a
    magnitude band (`bands.band_options`). With `settings.places`, each hot range cell's candidate
    ranges are offered once more with its precision (`precision.capped_options`). `settings.min_worth`:
    what each false alarm a narrower range adds must buy (`allocate`)."""
    substitutes, swapped = context.substitutes, context.swapped
    budget = settings.alarm_budget * max(context.sentences, 1)
    out: list[LearnedCell] = []
    alarms = 0.0
    options: dict[CellKey, list] = {}  # each hot range cell's candidate ranges, for `allocate`
    hot = settings.sensitivity
    hot_ranges = [c.key for c in ranked if c.key.check == "range" and hot is not None and c.score >= hot]
    margin = tail_margin((k, values[k]) for k in hot_ranges if len(values[k].values) >= settings.min_support)

    def take(cells: list[LearnedCell], hot: bool = False) -> None:
        nonlocal alarms
        for c in cells:
            cv = values[c.key]
            if len(cv.values) < _support(c.key, settings.min_support, substitutes):
                continue
            fit = fitted_values(c.key, cv)
            if not fit.values:
                continue
            stats = value_stats(cv.values, fit.values)
            if c.key.check == "range":
                rejected = rejected_values(stats, cv.values)
                if hot:  # runs with a candidate range that accepts all but MAX_REJECTED of its values
                    offered = (
                        [o for o in [restated_option(cv, c.key)] if o is not None]
                        if substitutes is not None and c.key in substitutes  # a number word restated
                        else range_options(cv, c.key, margin.factor(fit.values), settings.min_fold_values, margin)
                    )
                    if settings.places:  # each range once more with its precision
                        offered = capped_options(c.key, cv, offered)
                    options[c.key] = [o for o in offered if o.kept_out <= MAX_REJECTED * len(fit.values)]
                    if not options[c.key]:
                        continue
                elif rejected_values(stats, fit.values) > MAX_REJECTED * len(fit.values):
                    continue
            else:
                rejected, documents = conflicts(cv)
                restated = sum(len(vs) - 1 for vs in cv.per_document.values() if len(vs) >= 2)
                if documents < MIN_DOCUMENTS or rejected > MAX_CONFLICTS * restated:
                    continue
            if alarms + rejected > budget:
                continue
            alarms += rejected
            out.append(
                dataclasses.replace(
                    c, support=len(cv.values), stats=stats, rejected=rejected, range=None, charged=float(rejected)
                )
            )

    if settings.sensitivity is None:
        take(ranked)
        return out
    total, budget = budget, math.inf  # every hot cell that could run, then the budget is shared among them
    take([c for c in ranked if c.score >= settings.sensitivity], hot=True)
    for g in context.guards:
        rejected = int((np.asarray(values[g.key].values) > 0).sum())  # range [0, 0]: every value is a false alarm
        out.append(dataclasses.replace(g, rejected=rejected, range=(0.0, 0.0)))
    offered = (
        {c.key: band_options(c.key, values[c.key]) for c in out if c.key.check == "range" and not c.guards}
        if settings.bands
        else None
    )
    out, alarms = allocate(
        out, values, budget=total, options=options, substitutes=substitutes, swapped=swapped, bands=offered,
        min_worth=settings.min_worth,
    )  # fmt: skip
    budget = total
    take([c for c in ranked if c.score < settings.sensitivity])
    return out


def allocate(
    cells: list[LearnedCell],
    values: dict[CellKey, CellValues],
    *,
    budget: float,
    options: dict[CellKey, list],
    substitutes: dict[CellKey, np.ndarray] | None = None,
    swapped: dict[CellKey, list[tuple[float, np.ndarray]]] | None = None,
    bands: dict[CellKey, list[tuple[int, int, int]]] | None = None,
    min_worth: float = 0.0,
) -> tuple[list[LearnedCell], float]:
    """Share the false-alarm budget among cells: which run, with which range, and with which
    magnitude band.

    A cell is worth the clean values at which it would notice an error, of two kinds alike:
    a slip (the value written ten times larger or smaller: `slip_power`) and a substitution
    (another value of the same cell in its place, drawn from the cell's values). A range notices
    a slip of the values it accepts that would fall outside, and a substitution when the
    value it accepts is replaced by one it rejects; a consistency cell notices both at every
    value of a document that states its term at least twice, a substitution unless the new
    value happens to be the same. It costs its false alarms, for a range the largest of its
    rejections in the corpus, its cross-validated estimate for unseen documents and its
    unseen tail (`RangeOption.unseen`: every cell's folds, pooled, at the distance of its
    bounds from its values — `TailMargin.unseen`), plus the noise of the count it cuts
    (`range_charge`). Each range cell is left out or runs with
    one of its candidate `options` (`range_options`: bounds beyond the clean tails, or a
    side left open); the choice maximises the total worth within
    the budget (a Lagrangian relaxation: every cell takes the choice with the largest worth −
    λ × cost, for the smallest λ ≥ 0 that fits; between choices alike in both, the one with
    fewer bounds — a bound no error needs is left out — then the narrower range, which
    notices smaller changes too; what that leaves of the budget goes to each cell's choice
    just below λ, most worth per false alarm first, and what still remains to the upgrades
    that fit, one at a time, `_fill`). A value's cell and its cell of the value
    written bare are chosen together (`overlaps.joint_choices`), and a keyword cell beside the
    cell of every value of its kind and unit is worth what that one does not notice
    (`overlaps.marginal_choices`). Returns the cells that run, each with its measured
    false-alarm rate (`LearnedCell.false_alarms`), and the false alarms charged for them.

    `substitutes` gives, per cell, the values a substitution draws from where they are not
    the cell's own: a number word restated in digits ("thirty (30) days") has one value, so
    another of its own values changes nothing, while another number written in its place —
    drawn from what all number words restate — is what a narrow range would notice.

    `swapped` gives, per range cell with a unit, the values a swapped unit brings (`swap_sources`):
    "within 30 days" written "within 30 months" puts a days value in the cell "within … months".
    A third kind of error, weighted as a unit guard's: each source's values times the share of
    its unit's swaps that go to this cell's unit, halved; the range notices those it rejects.

    `bands` gives, per range cell, the magnitude bands it may take (`bands.band_options`:
    factor, false alarms, slips noticed). Each choice that runs such a cell is offered again with
    each band, worth the thousandfold slips the band notices more, halved as a range's slips
    are, and costing its false alarms plus `FLAT_TAIL` more (a band counts as a bound).

    `min_worth` is a floor under the λ that picks a running cell's range: whether a cell runs
    is the budget's λ, but a range narrower than another is taken only where each false alarm
    it adds buys `min_worth` of worth. Without it, a budget larger than the cells need (λ = 0)
    runs every cell with the range that notices most, whatever its rejections cost:
    fine-tuned on one half of the 10-K's pages, `$ … million` took a lower bound of 1.44 past
    three of its clean values and the heatmap rejected "$1 million" on the other half. (A
    floor on running at all priced out the drug labels' eGFR and warfarin tablet cells, of 9 to
    19 values each.)"""
    # (worth, cost, bounds, rejections in the corpus, bounds held, width, false-alarm rate,
    #  (band factor, the band's rejections in the corpus))
    choices: list[list[tuple]] = []

    for c in cells:
        cv = values[c.key]
        n_all = max(len(cv.values), 1)
        ch: list[tuple] = [(0.0, 0.0, None, 0, 0, math.inf, 0.0, None)]  # left out
        if c.guards:
            # its rejections in the corpus, and as many again in as much unseen text: a guard
            # rejects what its keywords write in its unit, and each of those the corpus shows
            # (a family's member written once in mcg) says such values turn up (Good–Turing); a
            # pair never written costs the share of the unseen pairs that turn up (`expected`)
            cost = float(c.rejected) + (float(c.rejected) if c.rejected else c.expected)
            ch.append((c.worth, cost, (0.0, 0.0), c.rejected, 2, 0.0, cost / max(c.support, 1), None))
        elif c.key.check == "consistent":
            # a restated value is noticed however it changes: a slip, or another value
            counts = np.unique(np.asarray(cv.values), return_counts=True)[1] / n_all
            stated = sum(len(vs) for vs in cv.per_document.values() if len(vs) >= 2) - c.rejected
            worth = stated * (1.0 + (1.0 - float((counts**2).sum()))) / 2
            ch.append((worth, float(c.rejected), None, c.rejected, 0, 0.0, c.rejected / n_all, None))
        else:
            n = len(fitted_values(c.key, cv).values)  # the values it was fitted to; worth what it notices there
            pool = None if substitutes is None else substitutes.get(c.key)
            sources = () if swapped is None else swapped.get(c.key, ())

            def worth(o, n: int = n, pool=pool, sources=sources) -> float:
                inside = 1.0 - o.kept_out / n  # the share of the cell's values it accepts
                # another value in its place: noticed if the range accepts the first and not the second
                outside = 1.0 - inside if pool is None or not len(pool) else count_outside(o.bounds, pool) / len(pool)
                # a value of another unit written in this cell's unit: noticed if the range rejects it
                swap = sum(share * count_outside(o.bounds, src) for share, src in sources)
                return (n * (o.power + inside * outside) + swap) / 2

            # (a precision counts as a bound: between choices alike, the one without it)
            ch.extend(
                (worth(o), range_charge(o), o.bounds, o.rejected, n_bounds(o.bounds) + (o.places is not None),
                 log_width(o.bounds), o.expected / n_all, o.places)
                for o in options.get(c.key, ())
            )  # fmt: skip
        offered = (bands or {}).get(c.key, [])
        # with a band: every choice that runs the cell, once more with each band (the band last)
        # (a choice's last item: (band factor, its rejections, places))
        ch = [(*x[:7], (0, 0, x[7])) for x in ch] + [
            (
                x[0] + noticed / 2,
                x[1] + rejected + FLAT_TAIL,
                x[2],
                x[3],
                x[4] + 1,
                x[5],
                x[6],
                (factor, rejected, x[7]),
            )
            for x in ch[1:]
            for factor, rejected, noticed in offered
        ]
        choices.append(ch)

    # the solver's choices are per group of cells: a cell alone, or a value's cell and its cell of
    # the value written bare, chosen together (`overlaps.joint_choices`). A keyword cell whose
    # values a cell of every value of its kind and unit reads too is worth what that cell's choice
    # leaves it (`overlaps.marginal_choices`): solved again until those choices stay put.
    standalone, enclosing = choices, enclosing_cells(cells)
    tried: set[tuple] = set()
    while True:
        groups = joint_choices(cells, choices, values, bands)
        picked = _solve(groups, budget, min_worth)
        per_cell = {i: k for ch, g in zip(groups, picked, strict=True) for i, k in ch[g][6]}
        outer = tuple(sorted((j, per_cell[j]) for j in set(enclosing.values())))
        if not enclosing or outer in tried or len(tried) >= MARGINAL_ROUNDS:
            break
        tried.add(outer)
        choices = [
            marginal_choices(c, values[c.key], standalone[i], values[cells[enclosing[i]].key],
                             standalone[enclosing[i]][per_cell[enclosing[i]]])
            if i in enclosing and per_cell[enclosing[i]] else standalone[i]
            for i, c in enumerate(cells)
        ]  # fmt: skip
    out, spent = [], 0.0
    for i, k in sorted((i, k) for ch, g in zip(groups, picked, strict=True) for i, k in ch[g][6] if k):
        _, charged, bounds, rejected, _, _, rate, (factor, band_rejected, places) = choices[i][k]
        spent += charged
        out.append(
            dataclasses.replace(
                cells[i], range=bounds, rejected=rejected, false_alarms=round(rate, 5), band=factor,
                band_rejected=band_rejected, charged=round(charged, 4), places=places,
            )
        )  # fmt: skip
    return out, spent


def _solve(groups: list[list[tuple]], budget: float, min_worth: float) -> list[int]:
    """Each group's choice (index) for the largest worth within the budget (`allocate`)."""

    def best(ch: list[tuple], lam: float, first: int = 0) -> int:
        # ties: the cheaper choice, then fewer bounds, then the narrower range
        return max(range(first, len(ch)), key=lambda k: (ch[k][0] - lam * ch[k][1], -ch[k][1], -ch[k][4], -ch[k][5]))

    def pick(lam: float) -> list[int]:
        # whether a cell runs is λ's; which range it runs with, at least min_worth's
        picked = [best(ch, lam) for ch in groups]
        if min_worth <= lam:
            return picked
        return [best(ch, min_worth, first=1) if k else 0 for ch, k in zip(groups, picked, strict=True)]

    def cost(picked: list[int]) -> float:
        return sum(ch[k][1] for ch, k in zip(groups, picked, strict=True))

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
    picked = pick(lam)
    if lam > 0:
        # What the relaxation leaves: cells alike get the same choice at any λ, so four cells of
        # half a false alarm each within a budget of one run all or none. Each cell's choice just
        # below λ replaces its own, most worth per false alarm first, while the budget holds.
        left = budget - cost(picked)
        below = pick(lo)
        steps = sorted(
            (i for i, (a, b) in enumerate(zip(picked, below, strict=True)) if a != b),
            key=lambda i: (
                -(groups[i][below[i]][0] - groups[i][picked[i]][0])
                / max(groups[i][below[i]][1] - groups[i][picked[i]][1], 1e-12)
            ),
        )
        for i in steps:
            extra = groups[i][below[i]][1] - groups[i][picked[i]][1]
            if extra <= left:
                left -= extra
                picked[i] = below[i]
        _fill(groups, picked, left, min_worth)
    return picked


def _fill(groups: list[list[tuple]], picked: list[int], left: float, min_worth: float) -> None:
    """Spend what the budget still leaves after `_solve`'s steps: one group at a time, the
    choice with more worth than its current one that fits in what is left, most worth per added
    false alarm first (at least `min_worth`), until none fits. The steps just below λ only
    offer each group its next choice down; where one costly choice sets λ (on half of CUAD, a
    bound on the cell of every date that costs 34 false alarms against a budget of 74), every
    other group stays at λ's choice, and 30 of the 74 went unspent."""
    while True:
        found = None  # (worth per false alarm, group, choice)
        for i, ch in enumerate(groups):
            worth, cost = ch[picked[i]][0], ch[picked[i]][1]
            for k, x in enumerate(ch):
                gain, extra = x[0] - worth, x[1] - cost
                if gain <= 0 or extra > left:
                    continue
                rate = math.inf if extra <= 0 else gain / extra
                if rate < min_worth:
                    continue
                if found is None or rate > found[0]:
                    found = (rate, i, k)
        if found is None:
            return
        _, i, k = found
        left -= groups[i][k][1] - groups[i][picked[i]][1]
        picked[i] = k
