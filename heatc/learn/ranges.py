"""Value ranges: statistics of a cell's clean values, the ranges a rule could hold
(quantile cuts with a margin), how many clean values each rejects and how much of the
error it exists to catch (a value ten times too large or too small) it would notice.

Public surface: `inliers`, `value_stats`, `conflicts`, `rejected_values`, `rejected_share`,
`RangeOption`, `range_options`, `slip_power`, `count_outside`, `log_width`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from heatc.heatmap.format import DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, Stats
from heatc.heatmap.lower import margin_range
from heatc.learn.evidence import CellValues

OUTLIER_FENCE = 3.0  # interquartile ranges, in log10 space


def inliers(values: list[float]) -> np.ndarray:
    """The values without far outliers: outside Tukey fences of 3 IQR, in log space when
    nearly all values are positive (a stray 0 is then an outlier too). A rule pattern also
    captures what it was not meant for — a platelet count after "hematocrit", a typo — and a
    range read from such quantiles would describe nothing."""
    a = np.asarray(values, dtype=np.float64)
    if (a > 0).mean() >= 0.95:
        a = a[a > 0]
        x = np.log10(a)
        floor = 0.05
    else:
        x, floor = a, 1e-9
    q1, q3 = np.quantile(x, [0.25, 0.75])
    spread = max(q3 - q1, floor)
    return a[(x >= q1 - OUTLIER_FENCE * spread) & (x <= q3 + OUTLIER_FENCE * spread)]


def value_stats(values: list[float], fit: list[float] | None = None) -> dict:
    """n, min and max of every value; the quantiles of the inliers (of `fit`, if given: the
    values written without a unit, `CellValues.bare`)."""
    a = np.asarray(values, dtype=np.float64)
    q = np.quantile(inliers(values if fit is None else fit), [0.01, 0.05, 0.5, 0.95, 0.99])
    return {
        "n": len(a), "min": _round(a.min()), "q01": _round(q[0]), "q05": _round(q[1]), "q50": _round(q[2]),
        "q95": _round(q[3]), "q99": _round(q[4]), "max": _round(a.max()),
    }  # fmt: skip


def _round(x: float) -> float:
    """Six significant figures: the statistics are descriptive, the range is derived later."""
    return float(f"{float(x):.6g}")


def conflicts(cv: CellValues) -> tuple[int, int]:
    """(values that differ from their document's first value — the matches a `consistent`
    rule would reject in these clean documents —, documents with two values or more)."""
    rejected = sum(sum(v != vs[0] for v in vs[1:]) for vs in cv.per_document.values())
    return rejected, sum(len(vs) >= 2 for vs in cv.per_document.values())


def rejected_values(stats: dict, values: list[float]) -> int:
    """How many of `values` fall outside the range `heatc lower` derives from `stats`."""
    lo, hi = margin_range(Stats(**stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
    return sum(not lo <= v <= hi for v in values)


def count_outside(bounds: tuple[float, float], values) -> int:
    lo, hi = bounds
    a = np.asarray(values, dtype=np.float64)
    return int(((a < lo) | (a > hi)).sum())


def rejected_share(stats: dict, values: list[float]) -> float:
    """The share of `values` outside the range `heatc lower` derives from `stats`."""
    return rejected_values(stats, values) / max(len(values), 1)


RANGE_LEVELS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)  # quantile levels cut from each end of a tightened range
RANGE_FACTORS = (1.1, 1.25, 1.5, 2.0, 3.0)  # the margin a tightened range keeps, in log space
SLIP = 10.0  # the error a range exists to catch: a value written ten times too large or too small


@dataclass(frozen=True)
class RangeOption:
    bounds: tuple[float, float]
    rejected: int  # clean values outside, in the corpus
    expected: float  # clean values outside, estimated for unseen documents (cross-validated)
    power: float  # share of the values that the range accepts but rejects ten times larger or smaller
    kept_out: int  # of the values it was fitted to (`CellValues.bare`), those it rejects


def _fit(x: np.ndarray, low: float, high: float, factor: float) -> tuple[float, float] | None:
    """[quantile(low) / factor, quantile(1 − high) × factor], rounded outwards as `heatc lower`
    rounds; None unless the quantity is positive there."""
    lo, hi = np.quantile(x, [low, 1.0 - high])
    if lo <= 0:
        return None
    return margin_range(Stats(q01=float(lo), q99=float(hi)), DEFAULT_MARGIN_SPREAD, factor)


def slip_power(bounds: tuple[float, float], values) -> float:
    """The share of `values` a rule with these bounds accepts and would reject if it were
    written ten times larger or ten times smaller (a slipped decimal point, a wrong unit),
    the two directions weighted alike."""
    lo, hi = bounds
    a = np.asarray(values, dtype=np.float64)
    inside = (a >= lo) & (a <= hi)
    up = inside & ((a * SLIP < lo) | (a * SLIP > hi))
    down = inside & ((a / SLIP < lo) | (a / SLIP > hi))
    return float((up.mean() + down.mean()) / 2) if len(a) else 0.0


FOLDS = 5  # documents are split this many ways to estimate a range's false alarms out of sample


def range_options(cv: CellValues) -> list[RangeOption]:
    """Candidate ranges for a positive quantity: quantiles cut from either end, widened by
    a factor (those whose lower quantile is above 0). Each is costed by its rejections in the
    corpus and by a cross-validated estimate for unseen documents: fitted on the values of
    four fifths of the documents and counted on the other fifth's, for each fifth — the
    narrower a range, the more its in-corpus count flatters. A keyword cell without a unit is
    fitted to its values written without one (`CellValues.bare`) and costed on all of them."""
    fit = cv.bare()
    x = np.asarray(fit.values, dtype=np.float64)
    every = np.asarray(cv.values, dtype=np.float64)
    parts: list[list[float]] = [[] for _ in range(FOLDS)]
    for d, vs in fit.per_document.items():
        parts[d % FOLDS].extend(vs)
    counted: list[list[float]] = [[] for _ in range(FOLDS)]
    for d, vs in cv.per_document.items():
        counted[d % FOLDS].extend(vs)
    held = [np.asarray(p, dtype=np.float64) for p in counted]
    fitted = [np.asarray([v for j, p in enumerate(parts) if j != i for v in p], dtype=np.float64) for i in range(FOLDS)]
    if len(x) == 0 or min(len(f) for f in fitted) < 5:
        return []
    out = []
    for low in RANGE_LEVELS:
        for high in RANGE_LEVELS:
            for factor in RANGE_FACTORS:
                bounds = _fit(x, low, high, factor)
                if bounds is None:
                    continue
                folds = [_fit(f, low, high, factor) for f in fitted]
                if any(b is None for b in folds):
                    continue
                expected = sum(count_outside(b, h) for b, h in zip(folds, held, strict=True))
                out.append(
                    RangeOption(
                        bounds,
                        count_outside(bounds, every),
                        float(expected),
                        slip_power(bounds, x),
                        count_outside(bounds, x),
                    )
                )
    return out


def log_width(bounds: tuple[float, float]) -> float:
    """A range's width in decades; a range that reaches 0 counts as wider than any other."""
    lo, hi = bounds
    return math.log10(hi / lo) if lo > 0 else 1e9
