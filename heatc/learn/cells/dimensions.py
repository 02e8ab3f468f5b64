"""Cells keyed on a keyword and a dimension: one range for a keyword's values in every unit of
a quantity, so that a unit slipped on a keyword's value is a value out of its range.

Today's unit cells, `metformin … number mg` and `metformin … number grams`, are two cells
that know nothing of each other: a drug the corpus doses in mg has no cell in grams (or one
of its own, fitted to a few odd values), and "metformin 500 g" passes. A dimension cell
reads `metformin ..3 v:quantity(mass)`: the value with whatever unit of mass follows it,
converted to grams by the unit table (`heatc.units`), so that "500 mg" and "0.5 g" are one
value and "500 g" and "500 mcg" lie a thousand times outside the doses seen.

A unit category of the lexicon has a dimension when the unit table knows its literals, all
of one dimension (`unit_dimensions`): mg, mcg, grams, kg and pounds are mass; mL and L volume;
mg/dL, g/dL, g/L and mcg/dL mass concentration. Units the table does not know (IU, U/L, mg/kg,
months, years, million) and dimensions on an interval scale (temperature: a range fitted in
log space around 310 K is no range of body temperatures) keep their (keyword, unit) cells.

The keyword cells of a dimension replace their unit cells as range cells (`dimension_cells`);
the unit cells still say which units a keyword takes, so the unit guards and the swaps the
teacher's couplings and the corpus show (`guards.unit_swaps`) are learned from them as before,
and a dimension cell takes the best score of its unit cells. What a range is worth for
swapped units follows the dimension (`dimension_swaps`): a value the corpus writes in mg,
written in g, is the same number a thousand times larger in grams.

Public surface: `unit_dimensions`, `dimension_cells`, `dimension_scores`, `dimension_swaps`,
`LEARNED_DIMENSIONS`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from heatc import units
from heatc.learn.text.evidence import CellKey, CellValues
from heatc.learn.text.lexemes import Lexicon


def _interval_scale(dim: str) -> bool:
    """A dimension of which some unit carries an offset (temperature): ratios mean nothing."""
    return any(u.offset for u in units.units() if u.dimension == dim)


#: The dimensions the learner keys cells on: every dimension of the unit table on a ratio scale
#: (a range is fitted in log space), and not the percentage, which has a cell of its own.
LEARNED_DIMENSIONS = frozenset(d for d in units.dimensions() if not _interval_scale(d) and d != "percent")


def unit_dimensions(lexicon: Lexicon) -> dict[str, str]:
    """Per unit category of the lexicon whose first literal the unit table knows and whose
    literals it knows are all of one of the `LEARNED_DIMENSIONS`, that dimension ("mg_dl":
    mass_concentration). A category with a literal of another dimension or none is left out."""
    out = {}
    for cat in lexicon.categories:
        if cat.kind != "unit" or not cat.literals:
            continue
        found = [units.find(lit) for lit in cat.literals]
        dims = {u.dimension for u in found if u is not None}
        if found[0] is not None and len(dims) == 1 and found[0].dimension in LEARNED_DIMENSIONS:
            out[cat.name] = found[0].dimension
    return out


def unit_scales(lexicon: Lexicon, dims: dict[str, str]) -> dict[str, float]:
    """Per unit category with a dimension, the factor its first literal's values take to the
    dimension's base unit (mg: 0.001)."""
    out = {}
    for cat in lexicon.categories:
        if cat.name in dims:
            u = units.find(cat.literals[0])
            assert u is not None  # (`unit_dimensions` chose it for that)
            out[cat.name] = float(u.scale)
    return out


def dimension_cells(
    candidates: Iterable[CellKey], groups: dict[str, str], dims: dict[str, str], families: Iterable[str] = ()
) -> dict[CellKey, list[CellKey]]:
    """Per dimension cell `keyword ..3 v:quantity(DIM)`, the candidate unit cells it stands
    for: range cells of a domain keyword read before a number and a unit of that dimension.
    Cells read after the unit, consistency cells, number words', constraint words' and
    value-and-unit cells keep their units, and so do the `families` (`guards.keyword_families`):
    a family pools drugs by the units they take, so one range of its members' doses spans
    them all (0.2 mg to 6 g) and passes "Proscar 5 g", which its guard of grams rejects."""
    families = set(families)
    out: dict[CellKey, list[CellKey]] = defaultdict(list)
    for k in candidates:
        if (
            k.keyword
            and k.keyword not in families
            and groups.get(k.keyword) == "keyword"
            and k.check == "range"
            and not k.after
            and k.value == "number"
            and k.has_unit
            and k.unit in dims
        ):
            out[CellKey(k.keyword, "number", "", dimension=dims[k.unit])].append(k)
    return {d: sorted(ks) for d, ks in sorted(out.items())}


def dimension_scores(
    merged: dict[CellKey, list[CellKey]],
    scores: dict[CellKey, float],
    strengths: dict[CellKey, tuple[float, int]],
) -> tuple[dict[CellKey, float], dict[CellKey, tuple[float, int]]]:
    """A dimension cell's score and strength: those of its best scored unit cell (between
    equals, the first by name, so that runs agree), its probed occurrences theirs together.
    None for a dimension cell none of whose unit cells the teacher scored."""
    out_scores, out_strengths = {}, {}
    for d, ks in merged.items():
        scored = [k for k in ks if k in scores]
        if not scored:
            continue
        best = max(scored, key=lambda k: (scores[k], [-ord(c) for c in k.unit]))
        out_scores[d] = scores[best]
        out_strengths[d] = (strengths[best][0], sum(strengths[k][1] for k in ks if k in strengths))
    return out_scores, out_strengths


def dimension_swaps(
    merged: dict[CellKey, list[CellKey]],
    values: dict[CellKey, CellValues],
    swaps: dict[str, dict[str, float]],
    dims: dict[str, str],
    scales: dict[str, float],
) -> dict[CellKey, list[tuple[float, np.ndarray]]]:
    """Per dimension cell, the values a swapped unit would put in it, in its base unit (as
    `guards.swap_sources` gives a unit cell's): for each of its unit cells' unit U and each
    plausible swap U′ of the same dimension (`guards.unit_swaps`), the values written in U
    read in U′ — each base value times scale(U′) / scale(U) — with the share of U's swaps that go to U′."""
    out: dict[CellKey, list[tuple[float, np.ndarray]]] = {}
    for d, ks in merged.items():
        sources = []
        for k in ks:
            cv = values.get(k)
            if cv is None or not cv.values:
                continue
            written = np.asarray(cv.values, dtype=np.float64) * scales[k.unit]  # in the base unit
            for other, share in sorted(swaps.get(k.unit, {}).items()):
                if dims.get(other) == d.dimension and share > 0:
                    sources.append((share, written * (scales[other] / scales[k.unit])))
        if sources:
            out[d] = sources
    return out


def guards_outside(
    guarded: dict[CellKey, list[tuple[CellKey, float]]], replaced: set[CellKey], dims: dict[str, str]
) -> dict[CellKey, list[tuple[CellKey, float]]]:
    """The unit guards (`guards.unit_guards`) less what a dimension cell's range does: a guard
    of a unit of the same dimension as a unit cell it stands for that a dimension cell replaced
    ("metformin … g" for "metformin … mg"). The range rejects "metformin 500 g" as a value a
    thousand times too large, and passes "metformin 1 g" where the doses seen reach 1000 mg,
    which the guard rejected. A guard left standing for no cell goes."""
    out = {}
    for g, stands_for in guarded.items():
        kept = [(k, s) for k, s in stands_for if not (k in replaced and dims.get(g.unit, "") == dims.get(k.unit))]
        if kept:
            out[g] = kept
    return out
