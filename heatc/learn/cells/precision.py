"""A range cell's precision: how many digits its values write after the decimal point.

A quantity is written to a fixed precision — pulses and glucose in whole numbers, potassium
and hemoglobin to one decimal — and a decimal point slipped one place to the left adds a
digit after it: "pulse 7.2" for 72, "hemoglobin 1.34" for 13.4. Such a value often lies
inside any range wide enough for the real ones (a pulse of 7 is a bound's business only
where no real pulse comes near), but not inside the precision: `require places(v) <= P`
(docs/language.md) notices it wherever the range does not.

`places_cap` reads P from the values the corpus writes: the fewest places that all but
`CAP_SHARE` of them keep to, from `CAP_VALUES` values on (creatinine, written "0.85" one
time in eight, gets none that 2 places would not allow). Only a quantity whose values stay
within `CAP_DECADES` of each other (`ranges.log_spread`: the central 90 % of them, far
outliers aside) has a precision: one that spans
decades writes its small values with more places — "0.25 mcg" beside "100 mcg", "3.5 weeks"
beside "40 weeks" — and half of MTSamples that writes none such in 71 doses in mcg says
little of the other half, which writes 10 in 79. `capped_options` offers each of a cell's
candidate ranges once more with the cap, charged what the cap rejects in the corpus and out
of sample (cross-validated over the ranges' folds), and `FLAT_TAIL` more as a bound is (a
cap is one), and worth the slips it notices that the range does not: `budget.allocate`
takes the cap where it buys what it costs.

Public surface: `places_cap`, `capped_options`, `CAP_VALUES`, `CAP_SHARE`, `MAX_CAP`, `CAP_DECADES`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

import numpy as np

from heatc.learn.cells.ranges import (
    FLAT_TAIL,
    FOLDS,
    SLIP,
    RangeOption,
    fitted_values,
    log_spread,
    outside,
    slips,
    slips_noticed,
)
from heatc.learn.text.evidence import CellKey, CellValues

CAP_VALUES = 30  # values a cell needs before its precision says anything
CAP_SHARE = 0.02  # of its values, at most, that a cap may reject in the corpus
MAX_CAP = 3  # places: a quantity written more precisely than this is not capped
CAP_DECADES = 1.0  # the decades the values of a quantity with a precision span (`log_spread`), at most


def places_cap(places: Iterable[int], min_values: int = CAP_VALUES) -> int | None:
    """The fewest digits after the point that all but `CAP_SHARE` of these values keep to
    (None: too few values, or more than `MAX_CAP` places)."""
    counts = Counter(places)
    n = sum(counts.values())
    if n < min_values:
        return None
    for cap in range(MAX_CAP + 1):
        if sum(c for p, c in counts.items() if p > cap) <= CAP_SHARE * n:
            return cap
    return None


def _aligned(cv: CellValues) -> tuple[np.ndarray, np.ndarray] | None:
    """The values and their places, in one order; None where some value came without its places."""
    values, places = [], []
    for d, vs in cv.per_document.items():
        ps = cv.places.get(d, [])
        if len(ps) != len(vs):
            return None
        values += vs
        places += ps
    return np.asarray(values, dtype=np.float64), np.asarray(places, dtype=np.int64)


def _out_of_sample(cv: CellValues, cap: int) -> float:
    """The values a cap fitted to four fifths of the documents rejects on the other fifth, for
    each fifth (the ranges' folds: copies of a document fall in one); a fold whose other
    values give no cap is counted with `cap`."""
    parts: list[list[int]] = [[] for _ in range(FOLDS)]
    for d, ps in cv.places.items():
        parts[cv.group(d) % FOLDS].extend(ps)
    out = 0
    for i in range(FOLDS):
        fitted = places_cap((p for j, part in enumerate(parts) if j != i for p in part), min_values=1)
        held = np.asarray(parts[i], dtype=np.int64)
        out += int((held > (cap if fitted is None else fitted)).sum())
    return float(out)


def capped_options(key: CellKey, cv: CellValues, options: list[RangeOption]) -> list[RangeOption]:
    """`options` and, where the cell's values have a precision (`places_cap`), each once more
    with it (`RangeOption.places`): rejecting, besides what the range rejects, the values
    written with more places — in the corpus (`rejected`, `kept_out`) and out of sample
    (`expected`, `unseen`) — and noticing, besides the range's slips, each value the range
    accepts written ten times smaller with one more place."""
    if key.value == "date" or not options:
        return options
    every = _aligned(cv)
    fit = _aligned(fitted_values(key, cv))
    if every is None or fit is None or not len(fit[0]):
        return options
    cap = places_cap(every[1].tolist()) if log_spread(every[0].tolist()) <= CAP_DECADES else None
    if cap is None:
        return options
    expected = _out_of_sample(cv, cap)
    factors = slips(key)
    smaller = 2 * factors.index(SLIP) + 1  # the column of a value ten times smaller
    x, places = fit
    over_all, over, wider = every[1] > cap, places > cap, places + 1 > cap
    out = list(options)
    for o in options:
        rejected = int((outside(o.bounds, every[0]) | over_all).sum())
        rejects = outside(o.bounds, x)
        noticed = slips_noticed(o.bounds, x, factors)
        noticed[:, smaller] |= ~rejects & wider
        shares = noticed.mean(axis=0)
        pairs = len(shares) // 2
        power = sum(float((shares[2 * k] + shares[2 * k + 1]) / 2) for k in range(pairs)) / pairs
        out.append(
            dataclasses.replace(
                o,
                rejected=rejected,
                expected=o.expected + expected,
                power=power,
                kept_out=int((rejects | over).sum()),
                unseen=o.unseen + max(expected, FLAT_TAIL),
                places=cap,
            )
        )
    return out
