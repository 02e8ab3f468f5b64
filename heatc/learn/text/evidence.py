"""Cells and their evidence: which lexeme pairs are candidate cells, the values each
cell's rule captures in the corpus, and the teacher's pair couplings that score it.

A *cell* is a keyword category, a value (number or percent) and optionally the unit right
after it — `glucose … 162 mg/dL` — or a value and its unit alone (`500 mg`); in the unit's
place, `item_end` makes it a cell of the values written bare ("sodium 138, …", `ITEM_END`).

- **support and value statistics** come from the whole corpus, by compiling every
  candidate cell into a rule without requirements and scanning every document with the WASM
  backend: the values are exactly those the lowered rule will capture;
- **score** comes from the teacher's pair couplings (`heatc.learn.cells.couplings`).

A cell may also read its keyword after the value and its unit — `5 mg … daily`,
`CellKey.after` — as a unit guard's evidence (`guards.unit_guards`).

Public surface: `CellKey`, `Occurrence`, `occurrences`, `evidence_of`, `candidate_cells`, `FOLLOW_GAP`, `AFTER_GROUPS`,
`stats_rules`, `CellValues`, `collect_values`, `LearnedCell`, `MAX_REJECTED`,
`BARRIER`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from heatc.lang.ast import places_capture_name
from heatc.learn.text.lexemes import END_GROUP, FOLLOWER_GROUP, SHARE_GROUP, Lexicon, SentenceLexemes, is_numeral_name
from heatc.verify.backends import wasm_checker

MAX_REJECTED = 0.05  # a range cell may reject at most this share of the clean values it was learned from
KEY_GROUPS = frozenset({"keyword", "shadow", "numeral", "constraint", "date", "article", "currency"})
DEFAULT_GAP = 3
# A number word restates the number in parentheses right after it — "thirty (30) days" — so
# its cells reach one lexeme (the parenthesis), not three: "ten business days before the
# 2020 Annual Meeting" is no ten restated.
NUMERAL_GAP = 1
# the category a learned heatmap's patterns never reach across (its `triggers: barrier`)
BARRIER = "sentence_end"
# What follows a value that ends an item of a list or a sentence ("sodium 138, potassium
# 4.0."): a keyword cell with this in its unit's place reads only values written bare —
# `keyword ..3 v:number (item_end | sentence_end)` —, never "sodium bicarbonate 650 mg": the
# rule language's way to say "no unit after" (a `punct` unit, docs/heatmap.md).
ITEM_END = "item_end"
VALUE_ENDS = (ITEM_END, BARRIER)
# How far after a value's unit the word a dose is read before may stand: "5 mg daily",
# "0.5 mg of Versed", "30 days' prior written notice" (`CellKey.after`)
FOLLOW_GAP = 3
# the categories a cell's keyword after the unit may be of
AFTER_GROUPS = frozenset({"keyword", FOLLOWER_GROUP})


@dataclass(frozen=True, order=True)
class CellKey:
    keyword: str  # a category; "" for a value-and-unit cell, or a value alone
    value: str  # number | percent | date
    unit: str  # a unit category; "" when none (with no keyword either: every date, `LONE_DATE`)
    check: str = "range"  # range | consistent
    # the keyword stands after the value and its unit, not before: `v:number mg ..3 daily`
    # ("Proscar 5 mg daily": no one takes 5 g daily), `v:number months ..3 notice`
    after: bool = False
    # a quantity cell: the keyword's values in any unit of this dimension, converted to its base
    # unit (`keyword ..3 v:quantity(mass)`, `heatc.learn.cells.dimensions`); `unit` is then ""
    dimension: str = ""

    @property
    def ends_value(self) -> bool:
        """A keyword cell of values written bare: its "unit" is the punctuation that ends them."""
        return self.unit == ITEM_END

    @property
    def has_unit(self) -> bool:
        """A unit in the unit's place (not the punctuation of a bare value)."""
        return bool(self.unit) and not self.ends_value

    @property
    def name(self) -> str:
        """`glucose_value`, `glucose_mg_dl`, `hba1c_percent`, `mg_amount`, `payment_days_consistent`,
        `sodium_value_bare`."""
        if self.dimension:  # `metformin_mass`
            return f"{self.keyword}_{self.dimension}"
        if not self.keyword and not self.unit:
            return f"any_{self.value}"
        if self.after:  # `mg_then_daily`, `months_then_notice`
            return f"{self.unit if self.value == 'number' else self.value + '_' + self.unit}_then_{self.keyword}"
        if not self.keyword:
            return f"{self.unit}_amount" if self.value == "number" else f"percent_{self.unit}"
        tail = self.value if self.value in ("percent", "date") else "value"
        if self.ends_value:
            tail += "_bare"
        elif self.unit:
            tail = self.unit
        return f"{self.keyword}_{tail}" + ("_consistent" if self.check == "consistent" else "")

    @property
    def gap(self) -> int:
        if self.check == "consistent":
            return WIDE_GAP
        if self.after:
            return FOLLOW_GAP
        return NUMERAL_GAP if is_numeral_name(self.keyword) else DEFAULT_GAP

    def pattern(self) -> str:
        """The rule pattern `heatc lower` writes for this cell (docs/heatmap.md)."""
        if not self.keyword:
            return f"v:{self.value} {self.unit}".rstrip()
        if self.dimension:
            return f"{self.keyword} ..{self.gap} v:quantity({self.dimension})"
        if self.after:
            return f"v:{self.value} {self.unit} ..{self.gap} {self.keyword}"
        if self.check == "consistent":
            return f"k:{self.keyword} ..{self.gap} v:{self.value} ..1 {self.unit}"
        if self.ends_value:
            return f"{self.keyword} ..{self.gap} v:{self.value} ({' | '.join(VALUE_ENDS)})"
        return f"{self.keyword} ..{self.gap} v:{self.value}" + (f" {self.unit}" if self.unit else "")


# The cell of every date: what it bounds is a year past the documents' own ("fiscal 2119"),
# wherever it is written — "in 2019", "between 2017 and 2019" have no keyword before them.
LONE_DATE = CellKey("", "date", "")
# The cell of every percentage: what it bounds is a share past the whole ("a tax rate of
# 210%", "210% of revenue"), whatever word stands before it.
LONE_PERCENT = CellKey("", "percent", "")
# the value kinds with a cell of their own, keyed by the value alone (`v:date`, `v:percent`)
LONE_CELLS = {"date": LONE_DATE, "percent": LONE_PERCENT}

WIDE_GAP = 8  # how far a term's keyword may stand from its value: "payment is due within thirty (30) days"


@dataclass(frozen=True)
class Occurrence:
    value: int  # lexeme index of the number or percent
    keyword: int | None  # lexeme index of the keyword before it, within the gap
    unit: int | None  # lexeme index of the unit right after it
    term_keyword: int | None  # the keyword of a term (value + unit, maybe in parentheses) within WIDE_GAP
    term_unit: int | None
    keys: tuple[CellKey, ...]
    # the keyword past a constraint word that stands nearest ("eGFR below 30 mL"): the rules
    # bind across it (a gap holds no lexeme of a kind either element accepts, and a keyword
    # and a number accept no constraint word), so the keyword's cells have this value too
    beyond: int | None = None
    # the word right after a percentage that makes it a share of something ("45% of"), whose
    # cell is `percent share_of` (`SHARE_GROUP`)
    share: int | None = None
    # the keyword or follower word nearest after the value's unit, within `FOLLOW_GAP`
    # (`occurrences(..., after=True)`): "5 mg daily", "0.5 mg of Versed"
    trailing: int | None = None

    def keyword_of(self, key: CellKey, s: SentenceLexemes) -> int | None:
        """The lexeme index of `key`'s keyword in this occurrence (nearest, `beyond` or after)."""
        if key.after:
            return self.trailing
        if self.beyond is not None and s.categories[self.beyond] == key.keyword:
            return self.beyond
        return self.keyword

    def unit_of(self, key: CellKey, s: SentenceLexemes) -> int | None:
        """The lexeme index of `key`'s unit in this occurrence (its unit, or the share word)."""
        if self.share is not None and s.categories[self.share] == key.unit:
            return self.share
        return self.unit


def _unit(s: SentenceLexemes, groups: dict[str, str], j: int, group: str = "unit") -> bool:
    return 0 <= j < len(s.lexemes) and groups.get(s.categories[j] or "") == group


def _trailing(s: SentenceLexemes, groups: dict[str, str], unit: int) -> int | None:
    """The nearest lexeme of a keyword or follower category at most `FOLLOW_GAP` lexemes after
    the unit at `unit`, past plain words and "of" ("0.5 mg of Versed"), stopping at values,
    units and punctuation: the word a dose is read before."""
    for j in range(unit + 1, min(len(s.lexemes), unit + FOLLOW_GAP + 2)):
        cat = s.categories[j]
        if s.is_value(j):
            return None
        if cat is None or groups.get(cat) == SHARE_GROUP:
            continue
        return j if groups.get(cat) in AFTER_GROUPS else None
    return None


def occurrences(s: SentenceLexemes, groups: dict[str, str], *, after: bool = False) -> list[Occurrence]:
    """Every value lexeme of the sentence with what the rules would pair it with: the
    nearest keyword-like category at most 3 lexemes before it (the search stops at other
    values and at units, sentence ends and other structure; past a constraint word it also
    takes the keyword before that, `Occurrence.beyond`: "eGFR below 30") and the unit right
    after it;
    and, for terms — a value with a unit at most one lexeme later, as in "thirty (30) days" —
    the nearest keyword at most 8 lexemes before it, looking past constraint words. With
    `after`, also the keyword or follower word after a value's unit (`Occurrence.trailing`)
    and its cell `v:number unit ..3 keyword` (`CellKey.after`)."""
    out = []
    for i in range(len(s.lexemes)):
        if not s.is_value(i):
            continue
        value = s.value_category(i)
        if value == "date" and _unit(s, groups, i + 1):
            value = "number"  # a year's digits with a unit right after them: a quantity, as `number unit` reads it
        keyword = term_keyword = beyond = None
        for j in range(i - 1, max(-1, i - DEFAULT_GAP - 2), -1):
            if s.is_value(j):
                break
            cat = s.categories[j]
            if cat is None or groups.get(cat) in (SHARE_GROUP, END_GROUP, FOLLOWER_GROUP):  # "of", "," are plain there
                continue
            if keyword is not None:  # past the constraint word: a keyword, or nothing
                beyond = j if groups.get(cat) == "keyword" else None
                break
            if groups.get(cat) == "numeral" and i - j - 1 > NUMERAL_GAP:
                continue  # too far for the number word's cells; a keyword's gap passes over it
            if groups.get(cat) in KEY_GROUPS:
                keyword = j
            if groups.get(cat) != "constraint":
                break
        unit = i + 1 if _unit(s, groups, i + 1) else None
        term_unit = unit if unit is not None else (i + 2 if _unit(s, groups, i + 2) and not s.is_value(i + 1) else None)
        if term_unit is not None:
            for j in range(i - 1, max(-1, i - WIDE_GAP - 2), -1):
                if s.is_value(j):
                    break
                cat = s.categories[j]
                group = groups.get(cat, "") if cat else ""
                if group in ("", "constraint", "numeral", SHARE_GROUP):  # "within thirty (30) days"
                    continue
                if group == "keyword":
                    term_keyword = j
                break
        keys = []
        kw = s.categories[keyword] if keyword is not None else ""
        un = s.categories[unit] if unit is not None else ""
        next_cat = s.categories[i + 1] if i + 1 < len(s.lexemes) else None
        if kw:
            keys.append(CellKey(kw, value, ""))
            if un:
                keys.append(CellKey(kw, value, un))
            elif next_cat in VALUE_ENDS and value != "date" and ITEM_END in groups:  # (rule files may take ",")
                keys.append(CellKey(kw, value, ITEM_END))
        if un:
            keys.append(CellKey("", value, un))
        if beyond is not None:
            keys.append(CellKey(s.categories[beyond], value, ""))
            if un:
                keys.append(CellKey(s.categories[beyond], value, un))
        if term_keyword is not None:
            keys.append(CellKey(s.categories[term_keyword], value, s.categories[term_unit], "consistent"))
        if value in LONE_CELLS:
            keys.append(LONE_CELLS[value])
        share = i + 1 if value == "percent" and _unit(s, groups, i + 1, SHARE_GROUP) else None
        if share is not None:
            keys.append(CellKey("", value, s.categories[share]))
        trailing = _trailing(s, groups, unit) if after and un and value != "date" else None
        if trailing is not None:
            keys.append(CellKey(s.categories[trailing] or "", value, un, after=True))
        out.append(Occurrence(i, keyword, unit, term_keyword, term_unit, tuple(keys), beyond, share, trailing))
    return out


def evidence_of(occ: Occurrence, key: CellKey) -> bool:
    """Whether a probe of this occurrence is evidence of the cell (`Couplings.add` scores it
    from such probes; the top-up counts them): one of the occurrence's cells, and a keyword
    cell without a unit only where no unit follows the value — it is meant for values written
    without one ("heart rate 88"); where a unit follows ("heart rate 88 bpm") the value couples
    with it, and that occurrence is the evidence of the cell with the unit."""
    return key in occ.keys and (key.check != "range" or bool(key.unit) or not key.keyword or occ.unit is None)


def candidate_cells(
    lexed: Iterable[SentenceLexemes], groups: dict[str, str], min_count: int, *, after: bool = False
) -> list[CellKey]:
    counts: Counter[CellKey] = Counter()
    for s in lexed:
        for occ in occurrences(s, groups, after=after):
            counts.update(occ.keys)
    return sorted(k for k, n in counts.items() if n >= min_count)


def stats_rules(cells: list[CellKey]) -> str:
    """One rule per cell, `c0`, `c1`, …, whose requirement always holds: its matches are the
    cell's values, each with its places (`places(v)`: the digits after its point)."""
    return "".join(
        f'rule c{i} "" heat 0.5 {{\n  match {k.pattern()}\n  require places(v) >= 0\n}}\n' for i, k in enumerate(cells)
    )


@dataclass
class CellValues:
    values: list[float] = field(default_factory=list)
    per_document: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    # per document, the values a unit follows, for a keyword cell without a unit (`collect_values`)
    with_unit: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    # per document, where each value's match starts (bytes), in the order of per_document
    starts: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    # per document that is a copy of an earlier one, that one's index (`corpus.copy_groups`)
    copy_of: dict[int, int] = field(default_factory=dict)
    # per document, the digits each value writes after its point, in the order of per_document
    # (`precision`); empty where the values came without (a domain plan's merged cells)
    places: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))

    def group(self, d: int) -> int:
        """The document's copy group: copies fall in one cross-validation fold (`ranges`)."""
        return self.copy_of.get(d, d)

    def bare(self) -> CellValues:
        """The values written without a unit: a cell `keyword … value` is meant for "potassium
        4.9", but its rule also captures "calcium 500 mg" (a supplement dose; the rule language
        cannot say "no unit after"). Its range is fitted to these; every value is still a false
        alarm where the range rejects it."""
        if not self.with_unit:
            return self
        out = CellValues(copy_of=self.copy_of)
        for d, vs in self.per_document.items():
            drop = Counter(self.with_unit.get(d, ()))
            places = self.places.get(d, ())
            for j, v in enumerate(vs):
                if drop[v] > 0:
                    drop[v] -= 1
                    continue
                out.values.append(v)
                out.per_document[d].append(v)
                if j < len(places):
                    out.places[d].append(places[j])
        return out if len(out.values) else self


def _unit_followed_rules(cells: list[CellKey], units: list[str]) -> str:
    """`u<i>`: cell i's pattern with any unit after the value, for keyword cells without one."""
    if not units:
        return ""
    any_unit = "(" + " | ".join(units) + ")"
    return "".join(
        f'rule u{i} "" heat 0.5 {{\n  match {k.pattern()} {any_unit}\n}}\n'
        for i, k in enumerate(cells)
        if k.keyword and not k.unit and not k.dimension and k.check == "range"
    )


def collect_values(
    lexicon: Lexicon, cells: list[CellKey], documents: Iterable[str], copies: list[int] | None = None
) -> dict[CellKey, CellValues]:
    """Scan every document with the cells compiled into rules (WASM backend); for a keyword
    cell without a unit, also which of its values a unit follows (`CellValues.bare`). The
    rules stop at sentence ends as the heatmap's do (`BARRIER`): "fetal heart rate.,2."
    gives heart rate no value 2. `copies`: per document, the one it is a copy of
    (`corpus.copy_groups`)."""
    units = [c.name for c in lexicon.categories if c.group == "unit"]
    barrier = f"triggers {{\n  barrier {BARRIER}\n}}\n" if any(c.name == BARRIER for c in lexicon.categories) else ""
    program = lexicon.program(barrier + stats_rules(cells) + _unit_followed_rules(cells, units))
    checker = wasm_checker(program)
    copy_of = {d: g for d, g in enumerate(copies or ()) if g != d}
    out = {k: CellValues(copy_of=copy_of) for k in cells}
    for d, text in enumerate(documents):
        for e in checker.scan(text).events:
            if e.kind == "match":
                captures = dict(e.captures)
                v = float(captures["v"])
                cell = out[cells[int(e.name[1:])]]
                if e.name[0] == "u":
                    cell.with_unit[d].append(v)
                    continue
                cell.values.append(v)
                cell.per_document[d].append(v)
                cell.starts[d].append(e.start)
                cell.places[d].append(int(captures[places_capture_name("v")]))
    return out


@dataclass
class LearnedCell:
    key: CellKey
    score: float
    strength: float
    probes: int
    support: int
    stats: dict
    rejected: int = 0  # clean corpus values (range) or matches (consistent) the cell's rule rejects
    # a range chosen by `allocate` (None for an open side); None: the margin policy's
    range: tuple[float | None, float | None] | None = None
    guards: str = ""  # a unit guard (`unit_guards`): the units its keyword takes instead of this cell's
    worth: float = 0.0  # a unit guard's worth: the values at which it would notice a swapped unit
    expected: float = 0.0  # a unit guard's false alarms expected in unseen documents
    false_alarms: float | None = None  # the rule's share of held-out clean values it rejects (`allocate`)
    band: int = 0  # a magnitude band's factor (`bands.band_options`, chosen by `allocate`); 0: none
    band_rejected: int = 0  # the clean corpus values the band rejects
    places: int | None = None  # the digits its values write after the point at most (`precision`); None: any
    charged: float = 0.0  # the false alarms the budget paid for it (`budget.allocate`; a cold cell: its rejections)
