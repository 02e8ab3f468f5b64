"""Aggregation: lexeme pairs and pair couplings → heatmap cells → `heatmap.yaml`.

A *cell* is a keyword category, a value (number or percent) and optionally the unit right
after it — `glucose … 162 mg/dL` — or a value and its unit alone (`500 mg`). Per cell:

- **support and value statistics** come from the whole corpus, by compiling every
  candidate cell into a rule without requirements and scanning every document with the WASM
  backend: the values are exactly those the lowered rule will capture;
- **score** comes from the teacher: for each probed occurrence, the pair coupling of the
  value with the cell's keyword (and unit), divided by the value's mean coupling with all
  lexemes of the sentence; the cell's strength is the median over its probed occurrences
  (geometric mean of keyword and unit coupling when it has both), and its score is the
  percentile of that strength among all (value, lexeme) couplings seen — 0.5 is an ordinary
  neighbour, 0.9 is coupled more strongly than 90 % of them;
- **consistency**: when the cell recurs within documents and its value nearly always
  repeats there, a `consistent` cell joins the `range` cell.

Public surface: `CellKey`, `occurrences`, `evidence_of`, `candidate_cells`, `stats_rules`,
`collect_values`, `ProbeRecord`, `Couplings`, `cell_table`, `select_cells`,
`rejected_share`, `heatmap_document`, `write_heatmap`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends import wasm_checker
from ..heatmap import DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, HEATMAP_VERSION, Stats
from ..lower import margin_range
from ..printer import format_number
from .lexemes import UNIT_LADDERS, Lexicon, SentenceLexemes

MAX_REJECTED = 0.10  # a range cell may reject at most this share of the clean values it was learned from
# All cells together may reject at most this many values per corpus sentence: the share of clean
# sentences that may be flagged (issue 5: at most 2 %); cross-validation prices it for unseen text.
ALARM_BUDGET = 0.02
KEY_GROUPS = frozenset({"keyword", "numeral", "constraint", "date", "article", "currency"})
DEFAULT_GAP = 3


@dataclass(frozen=True, order=True)
class CellKey:
    keyword: str  # a category; "" for a value-and-unit cell
    value: str  # number | percent
    unit: str  # a unit category; "" when none
    check: str = "range"  # range | consistent

    @property
    def name(self) -> str:
        """`glucose_value`, `glucose_mg_dl`, `hba1c_percent`, `mg_amount`, `payment_days_consistent`."""
        if not self.keyword:
            return f"{self.unit}_amount" if self.value == "number" else f"percent_{self.unit}"
        tail = self.unit or ("percent" if self.value == "percent" else "value")
        return f"{self.keyword}_{tail}" + ("_consistent" if self.check == "consistent" else "")

    @property
    def gap(self) -> int:
        return WIDE_GAP if self.check == "consistent" else DEFAULT_GAP

    def pattern(self) -> str:
        """The rule pattern `heatc lower` writes for this cell (docs/heatmap.md)."""
        if not self.keyword:
            return f"v:{self.value} {self.unit}"
        if self.check == "consistent":
            return f"k:{self.keyword} ..{self.gap} v:{self.value} ..1 {self.unit}"
        return f"{self.keyword} ..{self.gap} v:{self.value}" + (f" {self.unit}" if self.unit else "")


WIDE_GAP = 8  # how far a term's keyword may stand from its value: "payment is due within thirty (30) days"


@dataclass(frozen=True)
class Occurrence:
    value: int  # lexeme index of the number or percent
    keyword: int | None  # lexeme index of the keyword before it, within the gap
    unit: int | None  # lexeme index of the unit right after it
    term_keyword: int | None  # the keyword of a term (value + unit, maybe in parentheses) within WIDE_GAP
    term_unit: int | None
    keys: tuple[CellKey, ...]


def _unit(s: SentenceLexemes, groups: dict[str, str], j: int) -> bool:
    return 0 <= j < len(s.lexemes) and groups.get(s.categories[j] or "") == "unit"


def occurrences(s: SentenceLexemes, groups: dict[str, str]) -> list[Occurrence]:
    """Every value lexeme of the sentence with what the rules would pair it with: the
    nearest keyword-like category at most 3 lexemes before it (the search stops at other
    values and at units, sentence ends and other structure) and the unit right after it;
    and, for terms — a value with a unit at most one lexeme later, as in "thirty (30) days" —
    the nearest keyword at most 8 lexemes before it, looking past constraint words."""
    out = []
    for i in range(len(s.lexemes)):
        if not s.is_value(i):
            continue
        value = s.value_category(i)
        keyword = term_keyword = None
        for j in range(i - 1, max(-1, i - DEFAULT_GAP - 2), -1):
            if s.is_value(j):
                break
            cat = s.categories[j]
            if cat is not None:
                if groups.get(cat) in KEY_GROUPS:
                    keyword = j
                break
        unit = i + 1 if _unit(s, groups, i + 1) else None
        term_unit = unit if unit is not None else (i + 2 if _unit(s, groups, i + 2) and not s.is_value(i + 1) else None)
        if term_unit is not None:
            for j in range(i - 1, max(-1, i - WIDE_GAP - 2), -1):
                if s.is_value(j):
                    break
                cat = s.categories[j]
                group = groups.get(cat, "") if cat else ""
                if group in ("", "constraint", "numeral"):  # "within thirty (30) days"
                    continue
                if group == "keyword":
                    term_keyword = j
                break
        keys = []
        kw = s.categories[keyword] if keyword is not None else ""
        un = s.categories[unit] if unit is not None else ""
        if kw:
            keys.append(CellKey(kw, value, ""))
            if un:
                keys.append(CellKey(kw, value, un))
        if un:
            keys.append(CellKey("", value, un))
        if term_keyword is not None:
            keys.append(CellKey(s.categories[term_keyword], value, s.categories[term_unit], "consistent"))
        out.append(Occurrence(i, keyword, unit, term_keyword, term_unit, tuple(keys)))
    return out


def evidence_of(occ: Occurrence, key: CellKey) -> bool:
    """Whether a probe of this occurrence is evidence of the cell (`Couplings.add` scores it
    from such probes; the top-up counts them): one of the occurrence's cells, and a keyword
    cell without a unit only where no unit follows the value — it is meant for values written
    without one ("heart rate 88"); where a unit follows ("heart rate 88 bpm") the value couples
    with it, and that occurrence is the evidence of the cell with the unit."""
    return key in occ.keys and (key.check != "range" or bool(key.unit) or not key.keyword or occ.unit is None)


def candidate_cells(lexed: Iterable[SentenceLexemes], groups: dict[str, str], min_count: int) -> list[CellKey]:
    counts: Counter[CellKey] = Counter()
    for s in lexed:
        for occ in occurrences(s, groups):
            counts.update(occ.keys)
    return sorted(k for k, n in counts.items() if n >= min_count)


def stats_rules(cells: list[CellKey]) -> str:
    """One requirement-free rule per cell, `c0`, `c1`, …: its matches are the cell's values."""
    return "".join(f'rule c{i} "" heat 0.5 {{\n  match {k.pattern()}\n}}\n' for i, k in enumerate(cells))


@dataclass
class CellValues:
    values: list[float] = field(default_factory=list)
    per_document: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    # per document, the values a unit follows, for a keyword cell without a unit (`collect_values`)
    with_unit: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))

    def bare(self) -> CellValues:
        """The values written without a unit: a cell `keyword … value` is meant for "potassium
        4.9", but its rule also captures "calcium 500 mg" (a supplement dose; the rule language
        cannot say "no unit after"). Its range is fitted to these; every value is still a false
        alarm where the range rejects it."""
        if not self.with_unit:
            return self
        out = CellValues()
        for d, vs in self.per_document.items():
            drop = Counter(self.with_unit.get(d, ()))
            for v in vs:
                if drop[v] > 0:
                    drop[v] -= 1
                    continue
                out.values.append(v)
                out.per_document[d].append(v)
        return out if len(out.values) else self


def _unit_followed_rules(cells: list[CellKey], units: list[str]) -> str:
    """`u<i>`: cell i's pattern with any unit after the value, for keyword cells without one."""
    if not units:
        return ""
    any_unit = "(" + " | ".join(units) + ")"
    return "".join(
        f'rule u{i} "" heat 0.5 {{\n  match {k.pattern()} {any_unit}\n}}\n'
        for i, k in enumerate(cells)
        if k.keyword and not k.unit and k.check == "range"
    )


def collect_values(lexicon: Lexicon, cells: list[CellKey], documents: Iterable[str]) -> dict[CellKey, CellValues]:
    """Scan every document with the cells compiled into rules (WASM backend); for a keyword
    cell without a unit, also which of its values a unit follows (`CellValues.bare`)."""
    units = [c.name for c in lexicon.categories if c.group == "unit"]
    program = lexicon.program(stats_rules(cells) + _unit_followed_rules(cells, units))
    checker = wasm_checker(program)
    out = {k: CellValues() for k in cells}
    for d, text in enumerate(documents):
        for e in checker.scan(text).events:
            if e.kind == "match":
                v = float(dict(e.captures)["v"])
                cell = out[cells[int(e.name[1:])]]
                if e.name[0] == "u":
                    cell.with_unit[d].append(v)
                    continue
                cell.values.append(v)
                cell.per_document[d].append(v)
    return out


@dataclass
class ProbeRecord:
    """The teacher's pair couplings of one value lexeme with every lexeme of its sentence."""

    sentence: str
    value: int  # lexeme index
    coupling: list[float | None]  # per lexeme; None: no teacher token (truncated) or itself


class Couplings:
    """Normalised couplings per cell and the pooled distribution their scores are read from."""

    def __init__(self) -> None:
        self.pooled: list[float] = []
        self.by_cell: dict[CellKey, list[float]] = defaultdict(list)

    def add(
        self, s: SentenceLexemes, occ: Occurrence, coupling: list[float | None], *, only: set[CellKey] | None = None
    ) -> None:
        """`only` given: evidence of those of the occurrence's cells alone, left out of the
        pooled distribution that scores are percentiles of (a top-up's probes, chosen for the
        cells they stand for, are no sample of all values)."""
        others = [c for k, c in enumerate(coupling) if k != occ.value and c is not None]
        mean = sum(others) / len(others) if len(others) >= 2 else 0.0
        if mean <= 0:
            return
        if only is None:
            self.pooled.extend(c / mean for c in others)

        def rel(k: int | None) -> float | None:
            return None if k is None or coupling[k] is None else coupling[k] / mean

        ck, cu = rel(occ.keyword), rel(occ.unit)
        for key in occ.keys:
            if (only is not None and key not in only) or not evidence_of(occ, key):
                continue
            if key.check == "consistent":
                tk, tu = rel(occ.term_keyword), rel(occ.term_unit)
                if tk is not None and tu is not None:
                    self.by_cell[key].append(math.sqrt(tk * tu))
            elif key.keyword and key.unit:
                if ck is not None and cu is not None:
                    self.by_cell[key].append(math.sqrt(ck * cu))
            elif key.keyword:
                if ck is not None:
                    self.by_cell[key].append(ck)
            elif cu is not None:
                self.by_cell[key].append(cu)

    def strength(self, key: CellKey) -> tuple[float, int]:
        xs = self.by_cell.get(key, [])
        return (float(np.median(xs)) if xs else 0.0), len(xs)

    def percentile(self, strength: float) -> float:
        pooled = np.sort(np.asarray(self.pooled))
        if not len(pooled):
            return 0.0
        return float(np.searchsorted(pooled, strength, side="right")) / len(pooled)


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


def _stats(values: list[float], fit: list[float] | None = None) -> dict:
    """n, min and max of every value; the quantiles of the inliers (of `fit`, if given: the
    values written without a unit, `CellValues.bare`)."""
    a = np.asarray(values, dtype=np.float64)
    q = np.quantile(inliers(values if fit is None else fit), [0.01, 0.05, 0.5, 0.95, 0.99])
    return {
        "n": len(a), "min": _round(a.min()), "q01": _round(q[0]), "q05": _round(q[1]), "q50": _round(q[2]),
        "q95": _round(q[3]), "q99": _round(q[4]), "max": _round(a.max()),
    }  # fmt: skip


def _decimal(x: float) -> str:
    """Plain decimal text, as heatc's lexer reads numbers (no exponent)."""
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _yaml_float(x: float) -> str:
    """A float YAML 1.1 reads back as a float (it needs a dot before an exponent)."""
    text = format_number(x)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _round(x: float) -> float:
    """Six significant figures: the statistics are descriptive, the range is derived later."""
    return float(f"{float(x):.6g}")


def conflicts(cv: CellValues) -> tuple[int, int]:
    """(values that differ from their document's first value — the matches a `consistent`
    rule would reject in these clean documents —, documents with two values or more)."""
    rejected = sum(sum(v != vs[0] for v in vs[1:]) for vs in cv.per_document.values())
    return rejected, sum(len(vs) >= 2 for vs in cv.per_document.values())


@dataclass
class LearnedCell:
    key: CellKey
    score: float
    strength: float
    probes: int
    support: int
    stats: dict
    rejected: int = 0  # clean corpus values (range) or matches (consistent) the cell's rule rejects
    range: tuple[float, float] | None = None  # a range chosen by `allocate`; None: the margin policy's
    guards: str = ""  # a unit guard (`unit_guards`): the units its keyword takes instead of this cell's
    worth: float = 0.0  # a unit guard's worth: the values at which it would notice a swapped unit
    expected: float = 0.0  # a unit guard's false alarms expected in unseen documents


def rejected_values(stats: dict, values: list[float]) -> int:
    """How many of `values` fall outside the range `heatc lower` derives from `stats`."""
    lo, hi = margin_range(Stats(**stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
    return sum(not lo <= v <= hi for v in values)


def _outside(bounds: tuple[float, float], values) -> int:
    lo, hi = bounds
    a = np.asarray(values, dtype=np.float64)
    return int(((a < lo) | (a > hi)).sum())


def rejected_share(stats: dict, values: list[float]) -> float:
    """The share of `values` outside the range `heatc lower` derives from `stats`."""
    return rejected_values(stats, values) / max(len(values), 1)


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
            stats = _stats(cv.values, fit.values)
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
                expected = sum(_outside(b, h) for b, h in zip(folds, held, strict=True))
                out.append(
                    RangeOption(
                        bounds, _outside(bounds, every), float(expected), slip_power(bounds, x), _outside(bounds, x)
                    )
                )
    return out


def _width(bounds: tuple[float, float]) -> float:
    """A range's width in decades; a range that reaches 0 counts as wider than any other."""
    lo, hi = bounds
    return math.log10(hi / lo) if lo > 0 else 1e9


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
                outside = 1.0 - inside if pool is None or not len(pool) else _outside(bounds, pool) / len(pool)
                # a value of another unit written in this cell's unit: noticed if the range rejects it
                swap = sum(share * _outside(bounds, src) for share, src in sources)
                return (n * (power + inside * outside) + swap) / 2

            default = margin_range(Stats(**c.stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
            if c.key not in narrow:
                ch.append(
                    (worth(slip_power(default, fit.values), _outside(default, fit.values), default), float(c.rejected),
                     None, c.rejected, _width(default))
                )  # fmt: skip
            ch.extend(
                (worth(o.power, o.kept_out, o.bounds), float(max(o.rejected, o.expected)), o.bounds, o.rejected,
                 _width(o.bounds))
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


SWAP_KEYWORDS = 2  # keywords that must take both units before a swap between them is plausible
QUANTITY_EVIDENCE = 1.0  # the evidence two units of one quantity have before any keyword takes both
GUARDS_PER_CELL = 2  # guards a hot unit cell may add: its unit's most plausible swaps


def _units_by_keyword(candidates: Iterable[CellKey]) -> dict[str, set[str]]:
    """The units each keyword takes before a value, among the candidate range cells."""
    units_of: dict[str, set[str]] = defaultdict(set)
    for k in candidates:
        if k.keyword and k.unit and k.check == "range":
            units_of[k.keyword].add(k.unit)
    return units_of


Ladders = tuple[tuple[tuple[str, ...], ...], ...]


def quantity_of(ladders: Ladders) -> dict[str, int]:
    """Each unit's quantity (the index of its ladder)."""
    return {u: q for q, ladder in enumerate(ladders) for rung in ladder for u in rung}


def ladder_neighbours(ladders: Ladders) -> set[tuple[str, str]]:
    """The pairs of units on one rung of a ladder or on two next to each other."""
    out = set()
    for ladder in ladders:
        for i, rung in enumerate(ladder):
            near = rung + (ladder[i + 1] if i + 1 < len(ladder) else ())
            out |= {(a, b) for a in rung for b in near if a != b}
    return out | {(b, a) for a, b in out}


def unit_swaps(candidates: Iterable[CellKey], ladders: Ladders = UNIT_LADDERS) -> dict[str, dict[str, float]]:
    """Which units a unit is plausibly swapped with, and the share of its swaps each takes,
    learned from the candidate cells: a keyword that takes both units ("versed … mg",
    "versed … mcg") is evidence that one may stand for the other.

    One keyword is one observation, and a broad one proves little: "patient" is followed by
    mg, grams, days and degrees, "at most" by mg, cm and minutes, which would make every unit
    an alternative of every other. So each keyword spreads one unit of evidence over the
    other units it takes (a keyword with units U gives 1 / (|U| − 1) to each pair, so
    "weight" with pounds, kg and grams says more about pounds ↔ kg than "patient" with seven
    units), a swap needs `SWAP_KEYWORDS` keywords that take both units, and a unit's swaps
    are shared among its plausible alternatives in proportion to that evidence.

    Where keywords show no swap of a unit within its quantity, its neighbours on the
    quantity's ladder (`ladders`, the seed lexicon's: mcg, mg, g, kg; mL, L; thousand,
    million, billion) are plausible swaps — a wrong prefix or scale is the error that keeps a
    value looking right — and the lexicon's word counts as `QUANTITY_EVIDENCE` of each: no
    two keywords of half of MTSamples take both mL and L, one of TAT-QA million and billion.
    The lexicon fills a gap in the evidence and never dilutes it: days, whose swaps keywords
    show (months, years, hours), get no weeks. Only units some candidate cell uses take part."""
    candidates = list(candidates)
    units_of = _units_by_keyword(candidates)
    evidence: dict[tuple[str, str], float] = defaultdict(float)
    keywords: Counter[tuple[str, str]] = Counter()
    for units in units_of.values():
        for a in units:
            for b in units - {a}:
                evidence[a, b] += 1.0 / (len(units) - 1)
                keywords[a, b] += 1
    used = {k.unit for k in candidates if k.unit}
    quantity = quantity_of(ladders)
    shown = {  # units with a swap of their own quantity that keywords show
        a for (a, b), n in keywords.items() if n >= SWAP_KEYWORDS and a in quantity and quantity.get(b) == quantity[a]
    }
    for a, b in ladder_neighbours(ladders):
        if a in used and b in used and a not in shown:
            evidence[a, b] += QUANTITY_EVIDENCE
            keywords[a, b] += SWAP_KEYWORDS
    plausible: dict[str, dict[str, float]] = defaultdict(dict)
    for (a, b), e in evidence.items():
        if keywords[a, b] >= SWAP_KEYWORDS:
            plausible[a][b] = e
    return {a: {b: e / sum(alts.values()) for b, e in alts.items()} for a, alts in plausible.items()}


def swap_sources(
    values: dict[CellKey, CellValues], swaps: dict[str, dict[str, float]]
) -> dict[CellKey, list[tuple[float, np.ndarray]]]:
    """Per range cell `keyword … value unit` (or `value unit`), the values a swapped unit would
    put in it: for every unit U′ that its unit U is a plausible swap of (`unit_swaps`), the
    values of the same keyword's cell in U′ and the share of U′'s swaps that go to U. "within
    30 days" written "within 30 months" is a months value of 30 after "within"; a range of
    "within … months" that accepts 2–27 notices it, one that accepts 2–72 does not."""
    out: dict[CellKey, list[tuple[float, np.ndarray]]] = {}
    for key in values:
        if key.check != "range" or not key.unit:
            continue
        sources = []
        for unit, alts in sorted(swaps.items()):
            share = alts.get(key.unit, 0.0)
            other = values.get(CellKey(key.keyword, key.value, unit))
            if share > 0 and other is not None and other.values:
                sources.append((share, np.asarray(other.values, dtype=np.float64)))
        if sources:
            out[key] = sources
    return out


def unit_guards(
    candidates: Iterable[CellKey],
    hot: Iterable[CellKey],
    groups: dict[str, str],
    ladders: Ladders = UNIT_LADDERS,
) -> dict[CellKey, list[tuple[CellKey, float]]]:
    """Unit guards: cells that reject a value in a unit its keyword never takes.

    "Zocor 20 mg" written "Zocor 20 g" stays plausible for grams alone ("Ancef 1 g",
    "specimen 350 g"); what is wrong is the unit after this keyword. Which units stand in
    for one another, and how often, is learned from the candidate cells (`unit_swaps`).
    For every hot cell `keyword … number unit` (a domain keyword), the `GUARDS_PER_CELL`
    most plausible swaps of its unit — those of the same quantity first — that the keyword
    never takes in the sample each get a guard `keyword … number unit'` whose range is [0, 0]
    ("aspirin … mg" guards grams, not centimetres: no two keywords take both mg and cm). A
    guard maps to the cells it stands for, each with the share of that unit's swaps it would
    notice.

    The teacher's evidence is the guarded cell's: its keyword, value and unit are coupled;
    the corpus's evidence is the absence. `select_cells` prices each guard by its false
    alarms (every value the corpus writes in that unit after the keyword) and the ones
    expected in unseen documents (Good–Turing, `guard_expected`)."""
    candidates = list(candidates)
    units_of = _units_by_keyword(candidates)
    swaps = unit_swaps(candidates, ladders)
    quantity = quantity_of(ladders)
    out: dict[CellKey, list[tuple[CellKey, float]]] = defaultdict(list)
    for k in hot:
        if not (k.keyword and k.unit and k.check == "range") or groups.get(k.keyword) != "keyword":
            continue
        alts = swaps.get(k.unit, {})
        # units of the same quantity first (a swap that keeps the value looking right), then
        # the most plausible; between equals, the unit's name, so that runs agree
        q = quantity.get(k.unit)
        ranked = sorted(alts, key=lambda u: (q is None or quantity.get(u) != q, -alts[u], u))[:GUARDS_PER_CELL]
        for u in ranked:
            if u not in units_of.get(k.keyword, ()):
                out[CellKey(k.keyword, k.value, u)].append((k, alts[u]))
    return dict(out)


FAMILY_MEMBERS = 2  # keywords a family needs
FAMILY_COUNT = 2  # occurrences of a word with its unit in the discovery sample that let it join a family


def keyword_families(
    candidates: Iterable[CellKey],
    support: dict[CellKey, int],
    groups: dict[str, str],
    min_support: int,
    taken: set[str],
) -> dict[str, list[str]]:
    """Keywords too rare for a cell of their own, pooled by the units they take.

    A medication list names many drugs a few times each ("Coreg 6.25 mg", "Nexium 40 mg"):
    each drug is a keyword with a candidate cell `drug … number mg`, but none reaches the
    support a cell needs, so none gets a range or a unit guard, and "Nexium 40 g" passes.
    Keywords (of the group `keyword`) whose every range cell (with a unit or without) has
    less than `min_support` values, and which take the same units among the candidate cells,
    form a family
    `keywords_<units>` — one category with all their literals — when at least
    `FAMILY_MEMBERS` share those units. The family's cells then have the support, the
    teacher's couplings (of each member with its value) and the unit guards that the members
    lacked — cells with a unit only (`in_families`): what the members share is the units they
    take, not what their bare numbers measure. `support` gives the corpus values of each
    candidate range cell."""
    candidates = list(candidates)
    units_of = _units_by_keyword(candidates)
    rare: dict[frozenset[str], list[str]] = defaultdict(list)
    for kw, units in units_of.items():
        if groups.get(kw) != "keyword":
            continue
        cells = [k for k in candidates if k.keyword == kw and k.check == "range"]
        if all(support.get(k, 0) < min_support for k in cells):
            rare[frozenset(units)].append(kw)
    out = {}
    for units, members in sorted(rare.items(), key=lambda x: sorted(x[0])):
        if len(members) < FAMILY_MEMBERS:
            continue
        base = "keywords_" + "_".join(sorted(units))
        name, k = base, 2
        while name in taken or name in out:
            name, k = f"{base}_{k}", k + 1
        out[name] = sorted(members)
    return out


def in_families(candidates: Iterable[CellKey], families: dict[str, list[str]]) -> list[CellKey]:
    """The candidate cells with each family member's keyword replaced by its family; a
    family's cells without a unit are left out."""
    family_of = {m: f for f, ms in families.items() for m in ms}
    return sorted(
        {
            dataclasses.replace(k, keyword=family_of.get(k.keyword, k.keyword))
            for k in candidates
            if k.keyword not in family_of or k.unit
        }
    )


def guard_expected(counts: Iterable[int]) -> float:
    """The false alarms a guard of a pair the corpus never wrote is expected to raise in a
    corpus as large again (Good–Turing): the pairs seen once say how much of what is unseen
    turns up, shared among the unseen pairs."""
    counts = list(counts)
    unseen = sum(c == 0 for c in counts)
    return sum(c == 1 for c in counts) / unseen if unseen else 0.0


def heatmap_document(
    *,
    name: str,
    title: str,
    lexicon: Lexicon,
    cells: list[LearnedCell],
    provenance: dict,
    sensitivity: float,
    rule_files: list[str],
    tokenizer: dict,
) -> dict:
    """The heatmap (format 1) as a plain document, categories limited to those it uses."""
    used = {"sentence_end", "abbreviation"}
    for c in cells:
        used.update(x for x in (c.key.keyword, c.key.unit) if x)
    categories = {}
    for cat in lexicon.categories:
        if cat.name in used:
            entry: dict = {"kind": cat.kind, "literals": list(cat.literals)}
            if cat.exact:
                entry["exact"] = True
            categories[cat.name] = entry
    taken: set[str] = set()
    cell_docs = []
    literal = {c.name: c.literals[0] for c in lexicon.categories}
    expects: list[dict] = []
    rules: dict[CellKey, tuple[str, LearnedCell]] = {}
    for c in cells:
        base = c.key.name
        rule, k = base, 2
        while rule in taken:
            rule, k = f"{base}_{k}", k + 1
        taken.add(rule)
        if c.key.keyword:
            doc: dict = {"name": rule, "pair": [c.key.keyword, c.key.value]}
            if c.key.unit:
                doc["unit"] = c.key.unit
            doc["gap"] = c.key.gap
        else:
            doc = {"name": rule, "pair": [c.key.value, c.key.unit]}
        doc.update(score=c.score, support=c.support, stats=c.stats)
        if c.range is not None:
            doc["range"] = [c.range[0], c.range[1]]
        if c.key.check != "range":
            doc["check"] = c.key.check
        if c.guards:
            del doc["stats"]
            doc["description"] = (
                f"learned: a unit guard; the corpus writes {c.support} values in {c.guards} after "
                f"{c.key.keyword} and {c.rejected} in {c.key.unit}, so any value in {c.key.unit} is rejected"
            )
            cell_docs.append(doc)
            continue
        doc["description"] = (
            f"learned: coupling {c.strength:g}× the mean over {c.probes} probed occurrences; "
            f"values {_decimal(c.stats['q01'])}–{_decimal(c.stats['q99'])} (1st–99th percentile)"
        )
        if c.key.check == "range" and c.rejected:
            doc["description"] += f"; {c.rejected / c.support * 100:.2g} % of the values seen fall outside its range"
        if c.key.check == "consistent":
            doc["description"] += (
                f"; {c.rejected} of the corpus's values disagree with an earlier one in their document"
            )
        cell_docs.append(doc)
        rules[c.key] = (rule, c)
    for rule, c in rules.values():
        if c.key.check == "range" and not c.guards and c.score >= sensitivity and len(expects) < 12:
            expects.extend(_expects_for(c, rule, literal, rules, sensitivity))
    return {
        "heatmap": HEATMAP_VERSION,
        "name": name,
        "title": title,
        "provenance": provenance,
        "options": {"chinese_numbers": lexicon.chinese_numbers},
        "tokenizer": tokenizer,
        "thresholds": {"sensitivity": sensitivity},
        "targets": ["wasm", "cuda"],
        "categories": categories,
        "triggers": {"at": ["sentence_end"], "barrier": ["sentence_end"]},
        "cells": cell_docs,
        "rules": rule_files,
        "expects": expects,
    }


def _expects_for(
    c: LearnedCell,
    rule: str,
    literal: dict[str, str],
    rules: dict[CellKey, tuple[str, LearnedCell]],
    sensitivity: float,
) -> list[dict]:
    """A typical value passes and one a thousand times the largest seen is rejected — by this
    rule and by every other lowered range rule that reads the same text: "aldactone 750000 mg"
    is also a value of `keywords_mg … number` and of `number mg` (an expect's `rejects` lists
    exactly the rules that reject). If another rule rejects the typical value, no expect."""
    typical = c.stats["q50"]
    wild = float(f"{max(abs(c.stats['max']), 1.0) * 1000:.3g}")

    def text(v: float) -> str:
        kw = f"{literal[c.key.keyword]} " if c.key.keyword else ""
        number = _decimal(v) + ("%" if c.key.value == "percent" else "")
        unit = f" {literal[c.key.unit]}" if c.key.unit else ""
        return f"{kw}{number}{unit}."

    readers = {c.key} | {  # the cells whose rules also capture this text's value
        CellKey(k, c.key.value, u) for k, u in ((c.key.keyword, ""), ("", c.key.unit)) if (k or u) and c.key.unit
    }

    def rejecting(v: float) -> list[str]:
        out = []
        for key in sorted(readers):
            if key not in rules:
                continue
            name, cell = rules[key]
            if cell.score < sensitivity or cell.guards:
                continue
            lo, hi = cell.range if cell.range is not None else _margin(cell.stats)
            if not lo <= v <= hi:
                out.append(name)
        return out

    if rejecting(typical):
        return []
    return [
        {"text": text(typical), "passes": [rule]},
        {"text": text(wild), "rejects": sorted(set(rejecting(wild)) | {rule})},
    ]


def _margin(stats: dict) -> tuple[float, float]:
    return margin_range(Stats(**stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)


# --- YAML ------------------------------------------------------------------------------


def _flow(value) -> str:
    """A YAML flow value; JSON scalars are valid YAML and keep Chinese text readable."""
    import json

    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return _yaml_float(value)
    return json.dumps(value, ensure_ascii=False)


def dump_heatmap(doc: dict, header: str = "") -> str:
    lines = [f"# {x}" if x else "#" for x in header.splitlines()]
    for key, value in doc.items():
        if isinstance(value, dict) and value and key in ("provenance", "categories"):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {_flow(v)}" for k, v in value.items())
        elif isinstance(value, list) and value and key in ("cells", "expects"):
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(v)}" for v in value)
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def write_heatmap(path: str | Path, doc: dict, header: str = "") -> None:
    """Write atomically: a killed run never leaves half a heatmap."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_heatmap(doc, header))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; a heatmap is not
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
