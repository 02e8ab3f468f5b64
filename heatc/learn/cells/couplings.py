"""The teacher's evidence for cells: pair couplings of probed values with the lexemes of
their sentences, and the score each candidate cell gets from them.

For each probed occurrence of a value, its coupling with every other lexeme of the sentence
is divided by its mean coupling with all of them. A keyword stands right before its value
more often than not, and neighbours are coupled more than distant lexemes whatever they say
("a pleasant 42-year-old"), so the evidence of a cell is that coupling divided by the
*baseline at its distance*: the median normalised coupling of every lexeme that stands as
far from a probed value (`Couplings.baseline`). A cell's strength is the median of that
ratio over its probed occurrences (the geometric mean of keyword and unit ratios when it
has both; for the cell of every date, which has neither, the lexeme right before the date:
"in 2019", "fiscal 2019"), and its score is the percentile of its strength among the candidate cells —
so the score ranks candidates against each other, not against every pair of lexemes (where
nearly any candidate came out above 0.9). The cell of every date scores at least as the
hottest keyword's date cell: it reads their values too, and "in" before a year couples little.

Public surface: `Couplings`, `MAX_DISTANCE`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from heatc.learn.text.evidence import LONE_DATE, CellKey, Occurrence, evidence_of
from heatc.learn.text.lexemes import SentenceLexemes

MAX_DISTANCE = 9  # lexemes farther from the value share the baseline of this distance


class Couplings:
    """Normalised couplings per cell and per distance from the value."""

    def __init__(self) -> None:
        self.pooled: list[float] = []  # every (value, lexeme) normalised coupling
        self.by_distance: dict[int, list[float]] = defaultdict(list)  # lexeme − value index → couplings
        # per cell, per probed occurrence: the (normalised coupling, distance) of its keyword
        # and/or unit
        self.evidence: dict[CellKey, list[tuple[tuple[float, int], ...]]] = defaultdict(list)
        self._base: dict[int, float] | None = None

    def add(
        self, s: SentenceLexemes, occ: Occurrence, coupling: list[float | None], *, only: set[CellKey] | None = None
    ) -> None:
        """`only` given: evidence of those of the occurrence's cells alone, left out of the
        pooled and per-distance distributions (a top-up's probes, chosen for the cells they
        stand for, are no sample of all values)."""
        others = [c for k, c in enumerate(coupling) if k != occ.value and c is not None]
        mean = sum(others) / len(others) if len(others) >= 2 else 0.0
        if mean <= 0:
            return
        if only is None:
            self._base = None
            for k, c in enumerate(coupling):
                if k != occ.value and c is not None:
                    self.pooled.append(c / mean)
                    self.by_distance[_clip(k - occ.value)].append(c / mean)

        def rel(k: int | None) -> tuple[float, int] | None:
            return None if k is None or coupling[k] is None else (coupling[k] / mean, k - occ.value)

        for key in occ.keys:
            if (only is not None and key not in only) or not evidence_of(occ, key):
                continue
            if key.check == "consistent":
                pairs = (rel(occ.term_keyword), rel(occ.term_unit))
            elif key.keyword and key.has_unit:
                pairs = (rel(occ.keyword_of(key, s)), rel(occ.unit))
            elif key.keyword:
                pairs = (rel(occ.keyword_of(key, s)),)
            elif key.unit:
                pairs = (rel(occ.unit_of(key, s)),)
            else:  # a value alone (every date): its coupling with the lexeme written right before it
                pairs = (rel(occ.value - 1 if occ.value else None),)
            if all(p is not None for p in pairs):
                self.evidence[key].append(pairs)  # type: ignore[arg-type]

    @property
    def by_cell(self) -> dict[CellKey, list[float]]:
        """Per cell, the normalised couplings of its probed occurrences (without the distance
        baseline; the geometric mean of keyword and unit)."""
        return {k: [math.prod(c for c, _ in ps) ** (1 / len(ps)) for ps in xs] for k, xs in self.evidence.items()}

    def baseline(self, distance: int) -> float:
        """The median normalised coupling of the lexemes `distance` lexemes from a probed value."""
        if self._base is None:
            self._base = {d: float(np.median(xs)) for d, xs in self.by_distance.items() if xs}
        return self._base.get(_clip(distance)) or 1.0

    def strength(self, key: CellKey) -> tuple[float, int]:
        """(the median over the cell's probed occurrences of its coupling over the baseline at
        its distance, the number of those occurrences)."""
        xs = [math.prod(c / self.baseline(d) for c, d in ps) ** (1 / len(ps)) for ps in self.evidence.get(key, [])]
        return (float(np.median(xs)) if xs else 0.0), len(xs)

    def scores(
        self, keys: Iterable[CellKey], min_probes: int, among: Iterable[CellKey] | None = None
    ) -> dict[CellKey, float]:
        """The score of each cell with `min_probes` probed occurrences: the share of those
        cells whose strength is at most its own (the strongest scores 1); with `among` (some of
        `keys`), the share of those cells among them — a new kind of cell is scored against the
        others without moving their scores."""
        strengths = {k: s for k in keys for s, n in [self.strength(k)] if n >= min_probes}
        reference = strengths if among is None else {k: strengths[k] for k in among if k in strengths}
        ordered = np.sort(np.asarray(list(reference.values())))
        out = {k: float(np.searchsorted(ordered, s, side="right")) / max(len(ordered), 1) for k, s in strengths.items()}
        dated = [x for k, x in out.items() if k.value == "date" and k.keyword and k.check == "range"]
        if LONE_DATE in out and dated:
            # the lexeme before a year ("in 2019") says little of how much the year matters;
            # the cell of every date reads every keyword's dates, and is as hot as the hottest
            out[LONE_DATE] = max(out[LONE_DATE], max(dated))
        return out


def _clip(d: int) -> int:
    return max(-MAX_DISTANCE, min(MAX_DISTANCE, d))
