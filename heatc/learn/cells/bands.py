"""Magnitude bands: which range cells also ask that a document's values stay within a factor
of each other (`consistent v within factor F`, docs/language.md), and which factor.

A range bounds what any document may say; a band bounds what one document says against
itself. Amounts of one scale word in an annual report run from 0.2 to 20,000 million over
the corpus, so no range notices "$328.8 million" written "$0.3288 million" — but within
one report they rarely span more than a few hundredfold, and a thousandfold slip (thousand
for million, million for billion) lands outside. A band is worth its place only if it
notices such a slip, so its factor stays below 1000 (`BAND_FACTORS`); the smallest factor
whose false alarms in the corpus stay within `BAND_MAX_ALARMS` of the values it compares is
allowed, and the allocator (`budget.allocate`) weighs each allowed factor against the range
cells by what it notices — the values whose thousandfold slip it rejects — and what it
costs; a cell whose documents span wider gets none.

Only cells whose rule reads a scale word after the value get a band ("$4.2 million", "… 1.3
billion": `ranges.SCALE_UNITS`, the units whose slip is a thousandfold one; a keyword alone
takes values of many units, "revenues of 4.2 million … revenues in 2019", and a value of
another unit slips tenfold, which its range notices: a band on "… years" only read a
10-K's "1.75 years" against its directors' "76 years"). A document's values are read
in order, as the rule reads them (docs/semantics.md §4): a value ≤ 0 is skipped, a value out
of the band is a false alarm and is not kept.

Public surface: `BAND_FACTORS`, `BAND_MAX_ALARMS`, `BAND_MIN_DOCUMENTS`, `SLIP`, `band_alarms`,
`slips_noticed`, `band_notices`, `band_options`.
"""

from __future__ import annotations

from collections.abc import Iterable

from heatc.learn.cells.ranges import SCALE_UNITS
from heatc.learn.text.evidence import CellKey, CellValues

#: The factors tried, smallest first; 999: the widest band that still notices a thousandfold slip.
BAND_FACTORS = (10, 20, 50, 100, 200, 500, 999)
#: A band's false alarms in the corpus, at most this share of the values it compares.
BAND_MAX_ALARMS = 0.02
#: Documents that state the cell twice or more, at least (fewer say nothing about a document's spread).
BAND_MIN_DOCUMENTS = 5
#: The slip a band is for: a scale word or a metric prefix off by one step (thousand for
#: million, mg for mcg).
SLIP = 1000.0


def band_alarms(documents: Iterable[list[float]], factor: int) -> tuple[int, int]:
    """(values the band rejects, values it compares) over documents, each read in order."""
    rejected = compared = 0
    f = float(factor)
    for values in documents:
        low = high = None
        for v in values:
            if v <= 0:
                continue
            if low is None:
                low = high = v
                continue
            compared += 1
            if v > low * f or v * f < high:
                rejected += 1
            else:
                low, high = min(low, v), max(high, v)
    return rejected, compared


def slips_noticed(documents: Iterable[list[float]], factor: int, slip: float = SLIP) -> int:
    """How many of the documents' values, each written `slip` times larger and, apart, `slip`
    times smaller, a band of `factor` notices against the document's other values: the
    worth of a band, in the allocator's unit (values at which it notices an error)."""
    noticed = 0
    for values in documents:
        vs = [v for v in values if v > 0]
        for i, v in enumerate(vs):
            others = vs[:i] + vs[i + 1 :]
            if others:
                noticed += sum(band_notices(v, others, factor, slip))
    return noticed


def band_notices(value: float, others: list[float], factor: int, slip: float = SLIP) -> tuple[bool, bool]:
    """Whether a band of `factor` notices `value` written `slip` times larger, and `slip` times
    smaller, against the document's other (positive) values."""
    f = float(factor)
    return value * slip > min(others) * f, value / slip * f < max(others)


def band_options(key: CellKey, cv: CellValues) -> list[tuple[int, int, int]]:
    """(factor, false alarms in the corpus, slips noticed) of every band this range cell
    may take, smallest factor first (none for a cell without a scale word, or too few documents
    that state it twice, or factors whose false alarms exceed `BAND_MAX_ALARMS`)."""
    if key.check != "range" or key.unit not in SCALE_UNITS or key.value == "date":
        return []
    documents = [vs for vs in cv.per_document.values() if sum(v > 0 for v in vs) >= 2]
    if len(documents) < BAND_MIN_DOCUMENTS:
        return []
    out = []
    for factor in BAND_FACTORS:
        rejected, compared = band_alarms(documents, factor)
        if rejected <= BAND_MAX_ALARMS * compared:
            out.append((factor, rejected, slips_noticed(documents, factor)))
    return out
