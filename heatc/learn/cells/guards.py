"""Unit guards and keyword families: a keyword's rule that notices a unit swapped for
one of the same quantity that the keyword never takes (`glucose … 5.5 mg/dL` written
`… 5.5 g/dL`), and families that pool keywords too rare for cells of their own by the
units they take.

Public surface: `unit_swaps`, `swap_sources`, `unit_guards`, `keyword_families`, `pooled_units`, `units_by_keyword`,
`ladder_units`, `members_in_other_units`, `members_below_one`, `rung_below`,
`in_families`, `guard_expected`, `quantity_of`, `ladder_neighbours`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable

import numpy as np

from heatc.learn.text.evidence import AFTER_GROUPS, CellKey, CellValues
from heatc.learn.text.lexemes import UNIT_LADDERS

SWAP_KEYWORDS = 2  # keywords that must take both units before a swap between them is plausible
QUANTITY_EVIDENCE = 1.0  # the evidence two units of one quantity have before any keyword takes both
SHOWN_LADDER_EVIDENCE = 0.25  # ... where keywords show other swaps of the unit
GUARDS_PER_CELL = 3  # guards a hot unit cell may add: its unit's most plausible swaps


def units_by_keyword(candidates: Iterable[CellKey], *, after: bool = False) -> dict[str, set[str]]:
    """The units each keyword takes before a value, among the candidate range cells; with
    `after`, the units each keyword or follower word is read after (`CellKey.after`: "5 mg
    daily", "1 g daily")."""
    units_of: dict[str, set[str]] = defaultdict(set)
    for k in candidates:
        if k.keyword and k.has_unit and k.check == "range" and k.after == after:
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
    Where keywords do show such a swap, the neighbours still count, as `SHOWN_LADDER_EVIDENCE`:
    "Lasix 40 mg" written "Lasix 40 g" is a slip of scale whatever mcg the keywords show, and
    a small share keeps the swaps the keywords show in front. Only units some candidate cell
    uses take part."""
    candidates = list(candidates)
    units_of = units_by_keyword(candidates)
    evidence: dict[tuple[str, str], float] = defaultdict(float)
    keywords: Counter[tuple[str, str]] = Counter()
    for units in units_of.values():
        for a in units:
            for b in units - {a}:
                evidence[a, b] += 1.0 / (len(units) - 1)
                keywords[a, b] += 1
    used = {k.unit for k in candidates if k.has_unit}
    quantity = quantity_of(ladders)
    shown = {  # units with a swap of their own quantity that keywords show
        a for (a, b), n in keywords.items() if n >= SWAP_KEYWORDS and a in quantity and quantity.get(b) == quantity[a]
    }
    for a, b in ladder_neighbours(ladders):
        if a in used and b in used:
            evidence[a, b] += SHOWN_LADDER_EVIDENCE if a in shown else QUANTITY_EVIDENCE
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
        if key.check != "range" or not key.has_unit:
            continue
        sources = []
        for unit, alts in sorted(swaps.items()):
            share = alts.get(key.unit, 0.0)
            other = values.get(dataclasses.replace(key, unit=unit))
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

    A cell read after its unit (`CellKey.after`, "5 mg … daily") guards only the units a rung
    away on its unit's own ladder ("… 5 g … daily"), those the word is never read after.

    The teacher's evidence is the guarded cell's: its keyword, value and unit are coupled;
    the corpus's evidence is the absence. `select_cells` prices each guard by its false
    alarms (every value the corpus writes in that unit after the keyword) and the ones
    expected in unseen documents (Good–Turing, `guard_expected`)."""
    candidates = list(candidates)
    units_of = {after: units_by_keyword(candidates, after=after) for after in (False, True)}
    rung = {u: (q, r) for q, ladder in enumerate(ladders) for r, units in enumerate(ladder) for u in units}
    swaps = unit_swaps(candidates, ladders)
    quantity = quantity_of(ladders)
    out: dict[CellKey, list[tuple[CellKey, float]]] = defaultdict(list)
    for k in hot:
        if not (k.keyword and k.has_unit and k.check == "range"):
            continue
        if groups.get(k.keyword) not in (AFTER_GROUPS if k.after else ("keyword",)):
            continue
        alts = swaps.get(k.unit, {})
        # units of the same quantity first (a swap that keeps the value looking right), then
        # the most plausible; between equals, the unit's name, so that runs agree
        q = quantity.get(k.unit)
        ranked = sorted(alts, key=lambda u: (q is None or quantity.get(u) != q, -alts[u], u))[:GUARDS_PER_CELL]
        if k.after:
            # a word read after many quantities ("2 mm in diameter", "3 cm in diameter"): a slip
            # of its own unit's scale only, another rung of its ladder ("10 business days after
            # receipt" for "10 days" is no slip)
            ranked = [u for u in ranked if q is not None and quantity.get(u) == q and rung.get(u) != rung.get(k.unit)]
        for u in ranked:
            if u not in units_of[k.after].get(k.keyword, ()):
                out[dataclasses.replace(k, unit=u)].append((k, alts[u]))
    return dict(out)


FAMILY_MEMBERS = 2  # keywords a family needs
FAMILY_COUNT = 2  # occurrences of a word with its unit in the discovery sample that let it join a family


def keyword_families(
    candidates: Iterable[CellKey],
    support: dict[CellKey, int],
    groups: dict[str, str],
    min_support: int,
    taken: set[str],
    units_seen: Iterable[CellKey] = (),
    cellless: Iterable[str] = (),
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
    candidate range cell. A keyword's units are those of its candidate cells and of
    `units_seen` (cells seen on a family member's evidence, `FAMILY_COUNT`): a drug written in
    mg and, a few times, in mcg ("Synthroid 0.05 mg", "Synthroid 100 mcg") takes both, and a
    family of drugs dosed in mg alone, whose guard rejects mcg, is no place for it.
    `cellless`: words that may only join a family (`aggregate.rare_word_cells`: not among
    the plan's keywords, so the teacher never scored a cell of theirs), whatever their
    support — over all of MTSamples "Coumadin … mg" has 22 values, too many to count as
    rare, while no cell of its own could ever run."""
    candidates = list(candidates)
    cellless = set(cellless)
    units_of = pooled_units(candidates, support, units_seen)
    rare: dict[frozenset[str], list[str]] = defaultdict(list)
    for kw, units in units_of.items():
        if groups.get(kw) != "keyword":
            continue
        cells = [k for k in candidates if k.keyword == kw and k.check == "range"]
        if kw in cellless or all(support.get(k, 0) < min_support for k in cells):
            rare[units].append(kw)
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


def pooled_units(
    candidates: Iterable[CellKey],
    support: dict[CellKey, int],
    units_seen: Iterable[CellKey] = (),
    ladders: Ladders = UNIT_LADDERS,
) -> dict[str, frozenset[str]]:
    """The units each keyword is pooled into a family by (`keyword_families`): those it
    takes among the candidate cells and `units_seen`, less the units of another quantity
    than the one it is written with most (`support`: corpus values per candidate cell).
    "Plavix 75 mg" and "Lovenox 40 mg" are drugs dosed in mg however long they are taken
    ("Plavix for 3 months", "Lovenox for 10 days"); pooled by every unit they take, each
    was a family of its own, and so no family at all. Units on no ladder stay, and a
    keyword written most in such a unit keeps all of its units."""
    candidates = list(candidates)
    units_of = units_by_keyword(candidates)
    for kw, units in units_by_keyword(units_seen).items():
        if kw in units_of:  # (the keywords that take a unit among the candidates: no new ones)
            units_of[kw] |= units
    written: Counter[tuple[str, str]] = Counter()
    for k in candidates:
        if k.keyword and k.has_unit and k.check == "range":
            written[k.keyword, k.unit] += support.get(k, 0)
    quantity = quantity_of(ladders)
    out = {}
    for kw, units in units_of.items():
        # the unit written most; between equals, one on a ladder, then the name (runs agree)
        main = max(units, key=lambda u: (written[kw, u], u in quantity, u))
        q = quantity.get(main)
        out[kw] = frozenset(u for u in units if q is None or quantity.get(u) in (q, None))
    return out


def ladder_units(units: Iterable[str], ladders: Ladders = UNIT_LADDERS) -> set[str]:
    """The units on the same ladders as `units` (of the same quantities, `quantity_of`), not `units`."""
    units = set(units)
    quantity = quantity_of(ladders)
    of = {quantity[u] for u in units if u in quantity}
    return {u for u, q in quantity.items() if q in of} - units


def members_in_other_units(
    families: dict[str, list[str]], written: dict[CellKey, int], min_count: int = FAMILY_COUNT
) -> dict[str, list[str]]:
    """Per family, the members that `written` (corpus values per `member … number unit`
    cell, for the units on the family's ladders it does not take) shows `min_count` times in
    such a unit: a drug the family's guard would reject where it is dosed correctly
    ("Synthroid 100 mcg" in a family of drugs dosed in mg)."""
    out: dict[str, list[str]] = {}
    for name, members in families.items():
        odd = sorted({k.keyword for k, n in written.items() if k.keyword in members and n >= min_count})
        if odd:
            out[name] = odd
    return out


def rung_below(unit: str, ladders: Ladders = UNIT_LADDERS) -> str | None:
    """The first unit one rung below `unit` on its ladder (mg: mcg; L: mL); None at the foot."""
    for ladder in ladders:
        for i, rung in enumerate(ladder):
            if unit in rung and i > 0:
                return ladder[i - 1][0]
    return None


def members_below_one(families: dict[str, list[str]], values: dict[CellKey, CellValues]) -> dict[str, list[str]]:
    """Per family, the members whose values in a unit are mostly below 1 (`values`: per
    `member … number unit` cell, in the family's units whose rung below it does not take,
    `rung_below`): a dose of a fraction of a milligram is written in micrograms as readily
    ("digoxin 0.125 mg", "digoxin 125 mcg"), so a family guard rejecting mcg would reject it
    written correctly, although the corpus happens never to show it so."""
    low = {k.keyword for k, cv in values.items() if cv.values and float(np.mean(np.asarray(cv.values) < 1.0)) > 0.5}
    return {name: sorted(low & set(members)) for name, members in families.items() if low & set(members)}


def in_families(candidates: Iterable[CellKey], families: dict[str, list[str]]) -> list[CellKey]:
    """The candidate cells with each family member's keyword replaced by its family; a
    family's cells without a unit are left out."""
    family_of = {m: f for f, ms in families.items() for m in ms}
    return sorted(
        {
            dataclasses.replace(k, keyword=family_of.get(k.keyword, k.keyword))
            for k in candidates
            if k.keyword not in family_of or k.has_unit
        }
    )


def guard_expected(counts: Iterable[int]) -> float:
    """The false alarms a guard of a pair the corpus never wrote is expected to raise in a
    corpus as large again (Good–Turing): the pairs seen once say how much of what is unseen
    turns up, shared among the unseen pairs."""
    counts = list(counts)
    unseen = sum(c == 0 for c in counts)
    return sum(c == 1 for c in counts) / unseen if unseen else 0.0
