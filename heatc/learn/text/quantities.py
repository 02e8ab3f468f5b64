"""Which keywords name a measured quantity, read from the corpus.

A word stands before a number for many reasons: "glucose 162" measures something; "a
pleasant 42-year-old", "the patient received 2 mg", "last 48 hours", "closed with 3-0
Vicryl", "fusion at L4-5", "DIAGNOSES: 1. …" do not — the number belongs to another word
("year-old", "mg", "hours"), is part of a name (a suture size, a spinal level, a tooth
number) or counts a list. What tells a quantity word is what its values look like:

- it binds a value often when it is written: "patient", "hospital", "findings", "well"
  are written far more often than they are followed by a number;
- its values are read one way: the same quantity of the unit ladder (mg and g are one
  reading), the same unit off the ladders, no unit, a percentage, a year, a date — not now
  an age, now a dose, now a date;
- they are values, not parts of names: a number glued to a letter before it ("L4", "x3",
  "CO2"), to letters and digits after it (an identifier: "UNII: 70097M6I30"), after a "#"
  ("#10 blade"), joined by a hyphen to what follows ("4-0",
  "42-year-old"), or a section number cited in parentheses ("Warnings and Precautions
  (5.1)", "(2.3, 5.4)") is part of a compound;
- they vary: a label that always takes the same number ("oriented x3", "IMPRESSION: 1.")
  measures nothing;
- they are no codes: whole numbers of four digits or more written without separators, not
  years (`code` reading).

`quantity_score` multiplies the four shares into one number in [0, 1] — the share of its
occurrences that bind a value (full marks from `VALUE_RATE` on, from `UNIT_VALUE_RATE` on
for a word whose values are mostly read in one unit's quantity: a drug named in every
paragraph of its label and dosed in a few), the dominant reading's
share, the share of values that are no compounds, and how far its most common value stays
below `TOP_VALUE` — and a keyword names a quantity from `QUANTITY_MIN` on. So one weakness
does not exclude a word that is strong otherwise (a drug family is followed by a dose one
time in five, but its doses are read one way), while a word middling in everything
("morning": a value one time in five, half of them without a unit) is out.

Each keyword is scanned over the corpus (its nearest value, binding as the lowered rules
bind, and the unit right after it) and `is_quantity` decides from that `KeywordProfile`.
The teacher's couplings decide the rest (`heatc.learn.cells.couplings`).

Public surface: `KeywordProfile`, `keyword_profiles`, `quantity_score`, `is_quantity`, `names_a_term`,
`unit_read`, `VALUE_RATE`, `UNIT_VALUE_RATE`, `TOP_VALUE`, `QUANTITY_MIN`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from heatc.learn.text.lexemes import UNIT_LADDERS, Lexicon
from heatc.verify.backends import wasm_checker

VALUE_RATE = 0.5  # a keyword whose occurrences bind a value at least this often is fully a value's name
# ... and one whose values are read in one quantity other than time (doses in mg, volumes in
# mL) at least this often: most of its values carry a unit, and two thirds or more of those
# (`UNIT_READ_SHARE`) are read in that quantity (`unit_read`). A drug label names its drug in
# every paragraph and states its dose in a few ("metformin hydrochloride" binds a value one
# time in nine, 12 of its 14 values with a unit a dose in mg; the other 7 are a pKa, a
# patient's age, a trial's length). Time is not such a quantity: durations follow words that
# name none ("past 3 days", "next 2 weeks", "last 48 hours").
UNIT_VALUE_RATE = 0.1
UNIT_READ_SHARE = 2 / 3
_TIME_QUANTITY = next(f"quantity{q}" for q, ladder in enumerate(UNIT_LADDERS) if any("days" in r for r in ladder))
TOP_VALUE = 0.6  # a most common value up to this share of the values is no label
QUANTITY_MIN = 0.2  # the quantity score a keyword needs
MIN_VALUES = 5  # fewer values than this: no profile to judge (the cells lack support anyway)
NOT_QUANTITIES = ("code",)  # readings no measured quantity has


@dataclass
class KeywordProfile:
    occurrences: int = 0  # times the keyword is written
    readings: Counter = field(default_factory=Counter)  # reading -> values read so
    values: list[float] = field(default_factory=list)
    compounds: int = 0  # values that are parts of compounds
    plain: list[float] = field(default_factory=list)  # the values read without a unit, no compounds

    @property
    def n(self) -> int:
        return sum(self.readings.values())

    def dominant(self) -> tuple[str, float]:
        """(the most common reading, its share of the values)."""
        if not self.readings:
            return "", 0.0
        reading, count = self.readings.most_common(1)[0]
        return reading, count / self.n

    def top_value(self) -> float:
        """The share of the values that are its most common value."""
        return Counter(self.values).most_common(1)[0][1] / len(self.values) if self.values else 0.0


def _reading(unit: str, raw: bytes, value: float, quantity: dict[str, int]) -> str:
    """A number's reading: the quantity of its unit's ladder (mg and g are one reading), the
    unit itself off the ladders; without a unit, a year (a whole number 1900–2099), a code
    (a whole number of four digits or more written without separators) or none ("")."""
    if unit:
        return f"quantity{quantity[unit]}" if unit in quantity else unit
    if raw.isdigit() and len(raw) == 4 and 1900 <= value <= 2099:
        return "year"
    if raw.isdigit() and len(raw) >= 4:
        return "code"
    return ""


_NUMBER_BYTES = frozenset(b"0123456789.,")


# letters glued after the number with a digit among them: an identifier ("UNII: 70097M6I30",
# "3SY5LH9PMK"), not a unit written without a space ("500mg")
_CODE_TAIL = re.compile(rb"[A-Za-z]+\d")
_SECTION = re.compile(rb"\d{1,2}\.\d{1,2}")  # the number of a section: "5.1", "12.3"
_CITATION = re.compile(rb"[(\[][\d., ]*$")  # an open parenthesis or bracket, then only numbers of a list


def _compound(data: bytes, end: int) -> tuple[bytes, bool]:
    """(the bytes of the number that ends at `end`, whether it is part of a compound: glued
    to a letter or a "#" before it or to letters and digits after it ("70097M6I30"), joined
    by a hyphen to a digit or letter after it, or a
    section number cited in parentheses or brackets, "(5.1)", "[see (2.3, 5.4)]")."""
    start = end
    while start > 0 and data[start - 1] in _NUMBER_BYTES:
        start -= 1
    before = data[start - 1 : start]
    after = data[end : end + 2]
    glued = before.isalpha() or before == b"#" or _CODE_TAIL.match(data, end) is not None
    hyphen = len(after) == 2 and after[:1] == b"-" and after[1:].isalnum()
    cited = (
        _SECTION.fullmatch(data[start:end]) is not None
        and data[end : end + 1] in (b")", b"]", b",")
        and _CITATION.search(data[max(0, start - 24) : start]) is not None
    )
    return data[start:end], glued or hyphen or cited


def keyword_profiles(lexicon: Lexicon, keywords: Iterable[str], texts: Iterable[str]) -> dict[str, KeywordProfile]:
    """Scan `texts` once with, per keyword, a rule for its occurrences and one per kind of
    value after it (the lowered rules' gap of 3, binding)."""
    keywords = sorted(set(keywords))
    units = [c.name for c in lexicon.categories if c.group == "unit"]
    any_unit = "(" + " | ".join(units) + ")" if units else ""
    rules = []
    for i, k in enumerate(keywords):
        rules.append(f"rule o{i} {{\n  match {k}\n}}\n")
        for kind in ("number", "percent", "date"):
            rules.append(f"rule {kind[0]}{i} {{\n  match {k} ..3 v:{kind}\n}}\n")
        if any_unit:
            rules.append(f"rule u{i} {{\n  match {k} ..3 v:number u:{any_unit}\n}}\n")
    checker = wasm_checker(lexicon.program("".join(rules)))
    quantity = {u: q for q, ladder in enumerate(UNIT_LADDERS) for rung in ladder for u in rung}
    out = {k: KeywordProfile() for k in keywords}
    for text in texts:
        data = text.encode()
        # a keyword binds one value; a number with a unit after it is reported by rule n and
        # rule u, both from the keyword's start
        bare: dict[tuple[int, int], tuple[float, int]] = {}
        unit_of: dict[tuple[int, int], tuple[float, str]] = {}
        dates: dict[tuple[int, int], tuple[float, int]] = {}
        for e in checker.scan(data).events:
            if e.kind != "match":
                continue
            kind, i = e.name[0], int(e.name[1:])
            profile = out[keywords[i]]
            caps = dict(e.captures)
            if kind == "o":
                profile.occurrences += 1
            elif kind == "n":
                bare[i, e.start] = (float(caps["v"]), e.end)
            elif kind == "u":
                unit_of[i, e.start] = (float(caps["v"]), str(caps["u"]))
            elif kind == "d":
                dates[i, e.start] = (float(caps["v"]), e.end)
            else:
                profile.readings["percent"] += 1
                profile.values.append(float(caps["v"]))
        for (i, start), (v, end) in dates.items():
            if unit_of.get((i, start), (None,))[0] == v and (i, start) not in bare:
                bare[i, start] = (v, end)  # a year's digits with a unit after them ("1000 mg"): a quantity
            else:
                out[keywords[i]].readings["date"] += 1
                out[keywords[i]].values.append(v)
        for (i, start), (v, end) in bare.items():
            value, unit = unit_of.get((i, start), (None, ""))
            raw, compound = _compound(data, end)
            profile = out[keywords[i]]
            reading = _reading(unit if value == v else "", raw, v, quantity)
            profile.readings[reading] += 1
            profile.values.append(v)
            profile.compounds += compound
            if reading == "" and not compound:
                profile.plain.append(v)
    return out


_UNITLESS = ("", "year", "code", "date")  # readings of a value written without a unit


def unit_read(p: KeywordProfile) -> bool:
    """Whether a keyword's values are read in one quantity other than time: at least half of
    them carry a unit (a percentage counts), and `UNIT_READ_SHARE` of those are that quantity's."""
    with_unit = {r: n for r, n in p.readings.items() if r not in _UNITLESS}
    total = sum(with_unit.values())
    if not total or 2 * total < p.n:
        return False
    reading, count = max(with_unit.items(), key=lambda x: (x[1], x[0]))
    return reading.startswith("quantity") and reading != _TIME_QUANTITY and count >= UNIT_READ_SHARE * total


def quantity_score(p: KeywordProfile, rate_counts: bool = True) -> float:
    """The product of: the share of the keyword's occurrences that bind a value, over
    `VALUE_RATE` (`UNIT_VALUE_RATE` when its values are read in one quantity other than time,
    `unit_read`; at most 1); its dominant reading's share of the values; the share of them
    that are no parts of compounds; and 1 − how far its most common value's share exceeds
    `TOP_VALUE`, over 1 − `TOP_VALUE` (0 for a label that always takes one number)."""
    if not p.n:
        return 0.0
    share = p.dominant()[1]
    rate = (
        min(1.0, p.n / max(p.occurrences, 1) / (UNIT_VALUE_RATE if unit_read(p) else VALUE_RATE))
        if rate_counts
        else 1.0
    )
    variety = 1.0 - max(0.0, p.top_value() - TOP_VALUE) / (1.0 - TOP_VALUE)
    return rate * share * (1.0 - p.compounds / p.n) * variety


def names_a_term(p: KeywordProfile) -> bool:
    """Whether a keyword that binds values rarely still names one thing where it does: its
    values are read one way, no parts of compounds, and vary — the quantity test passed but
    for how often it binds ("notice" of a contract: "thirty (30) days' notice" now and then,
    always a period). A consistency cell needs such a keyword: "a pleasant 42-year-old" and
    "the patient, 6 weeks postpartum" restate an age and a week, but pleasant and patient
    name neither."""
    if p.n < MIN_VALUES:
        return True
    return p.dominant()[0] not in NOT_QUANTITIES and quantity_score(p, rate_counts=False) >= QUANTITY_MIN


def is_quantity(p: KeywordProfile) -> tuple[bool, str]:
    """Whether a keyword's values say it names a measured quantity, and why not if they do
    not. Keywords with fewer than `MIN_VALUES` values are not judged (True)."""
    if p.n < MIN_VALUES:
        return True, ""
    reading, share = p.dominant()
    if reading in NOT_QUANTITIES:
        return False, f"its values are {reading}s"
    q = quantity_score(p)
    if q >= QUANTITY_MIN:
        return True, ""
    rate = p.n / max(p.occurrences, 1)
    return False, (
        f"quantity score {q:.2f}: {rate:.0%} of its occurrences bind a value, {share:.0%} read "
        f"{reading or 'without a unit'}, {p.compounds / p.n:.0%} in compounds, {p.top_value():.0%} one number"
    )
