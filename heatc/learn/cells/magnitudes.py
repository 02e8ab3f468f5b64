"""Keywords too rare for cells of their own, pooled by the magnitude of the values written
bare after them.

A note's lab panel names a dozen quantities a few times each: "magnesium 2.1", "phosphorus
2.9", "albumin 3.4", "Hgb 11.4", "bicarbonate 26". None is written often enough for a cell
of its own (a range read from nine values is no range), and none takes a unit, so the unit
families (`guards.keyword_families`) do not pool them either: "magnesium 21" passes. What
such keywords share is where their values lie. Keywords whose values lie within one decade
of each other form a family `keywords_about_<typical value>`, one keyword category with all
their literals, whose cells (`keyword … number`, and the value ending an item) have the
support the members lacked: its range, from the pooled values, rejects any of them ten
times too large or too small where the family spans less than a decade.

A member must name a measured quantity more plainly than a keyword with a cell of its own
(`quantities.quantity_score` at least `FAMILY_QUANTITY`, its values read without a unit
`PLAIN_SHARE` of the time): a family's range is shared, so one member whose values are now
counts, now sizes, would widen it for all.

The plan forms the families (`discover_magnitudes`), before the teacher reads: a family's
cells are candidates like any keyword's, probed where a member's value is.

Public surface: `discover_magnitudes`, `with_magnitudes`, `magnitude_families`, `names_plainly`, `MAX_DECADES`,
`FAMILY_QUANTITY`, `PLAIN_SHARE`.
"""

from __future__ import annotations

import math

import numpy as np

from heatc.learn.cells.guards import FAMILY_MEMBERS
from heatc.learn.cells.ranges import inliers
from heatc.learn.text.discovery import rare_words
from heatc.learn.text.lexemes import Category, Lexicon
from heatc.learn.text.quantities import MIN_VALUES, KeywordProfile, keyword_profiles, quantity_score

MAX_DECADES = 1.0  # the central 90 % of every member's values lie within this many decades
FAMILY_QUANTITY = 0.75  # the quantity score a member needs
PLAIN_SHARE = 0.8  # of a member's values, at least, read without a unit and no part of a compound


def names_plainly(p: KeywordProfile) -> bool:
    """Whether a keyword's values say it names a quantity plainly: `FAMILY_QUANTITY`, and
    `PLAIN_SHARE` of them read without a unit and no part of a compound."""
    return len(p.plain) >= PLAIN_SHARE * max(p.n, 1) and quantity_score(p) >= FAMILY_QUANTITY


def _central(values: list[float]) -> tuple[float, float, float] | None:
    """(q05, median, q95) of the positive values without far outliers, in log10."""
    a = np.asarray([v for v in values if v > 0], dtype=np.float64)
    if len(a) < MIN_VALUES:
        return None
    a = inliers(a.tolist())
    q05, q50, q95 = np.quantile(np.log10(a), [0.05, 0.5, 0.95])
    return float(q05), float(q50), float(q95)


def _label(median: float, taken: set[str]) -> str:
    """`keywords_about_<the median to one significant figure>` ("0.3" as 0_3), unique."""
    x = float(f"{10**median:.1g}")
    base = "keywords_about_" + (f"{x:g}" if x >= 1 else f"{x:.10f}".rstrip("0")).replace(".", "_")
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def magnitude_families(profiles: dict[str, KeywordProfile], min_support: int, taken: set[str]) -> dict[str, list[str]]:
    """Families (name → member keyword categories) of the keywords in `profiles` (each
    keyword's values over the corpus, `quantities.keyword_profiles`) that have fewer than
    `min_support` values written bare, name a quantity plainly (`FAMILY_QUANTITY`,
    `PLAIN_SHARE`), and whose values lie within `MAX_DECADES` of each other's; taken in
    order of their median value, each joining the family before it while the family still
    spans at most `MAX_DECADES`. A family needs `FAMILY_MEMBERS` members and `min_support`
    values. `taken`: the category names in use."""
    members = []
    for kw, p in profiles.items():
        if not (MIN_VALUES <= len(p.plain) < min_support and names_plainly(p)):
            continue
        central = _central(p.plain)
        if central is None or central[2] - central[0] > MAX_DECADES:
            continue
        members.append((central[1], kw, central, len(p.plain)))
    members.sort()
    groups: list[list[tuple]] = []
    for m in members:
        if groups:
            g = groups[-1]
            lo = min(x[2][0] for x in [*g, m])
            hi = max(x[2][2] for x in [*g, m])
            if hi - lo <= MAX_DECADES:
                g.append(m)
                continue
        groups.append([m])
    out: dict[str, list[str]] = {}
    used = set(taken)
    for g in groups:
        if len(g) < FAMILY_MEMBERS or sum(x[3] for x in g) < min_support:
            continue
        values = [v for x in g for v in profiles[x[1]].plain]
        name = _label(math.log10(float(np.median([v for v in values if v > 0]))), used)
        used.add(name)
        out[name] = sorted(x[1] for x in g)
    return out


def discover_magnitudes(
    lexicon: Lexicon,
    sample: list[str],
    texts: list[str],
    min_support: int,
    exclude: set[str] = frozenset(),
    start: Lexicon | None = None,
) -> tuple[dict[str, list[str]], list[tuple[str, int]]]:
    """(the magnitude families, name → the members' literals; the words that become keywords
    of their own) of the keywords of `lexicon` and of every other single word that stands
    before a number twice or more in `sample` (not in `exclude`, lower case: what rule files
    declare), their values read over `texts` (the corpus's counted sentences). Such a word
    that names a quantity plainly (`names_plainly`) with `min_support` values or more is a
    keyword of its own, as (word, its values): the plan keeps the most frequent words before
    numbers, and a lab written 40 times in 2,000 notes is not among them. The categories of
    `start` (`heatc finetune`: the base heatmap's, whose cells it may keep) join no family."""
    wide = lexicon.with_keywords(w for w in rare_words(lexicon, sample) if w.lower() not in exclude)
    rare_names = {c.name for c in wide.categories} - {c.name for c in lexicon.categories}
    own = {c.name for c in (start.categories if start else ())}
    names = [c.name for c in wide.categories if c.group == "keyword" and len(c.literals) == 1 and c.name not in own]
    profiles = keyword_profiles(wide, names, texts)
    by_name = wide.by_name()
    promoted = sorted(
        (by_name[k].literals[0], len(p.plain))
        for k, p in profiles.items()
        if k in rare_names and len(p.plain) >= min_support and names_plainly(p)
    )
    families = magnitude_families(profiles, min_support, {c.name for c in wide.categories})
    return {f: sorted(lit for m in ms for lit in by_name[m].literals) for f, ms in families.items()}, promoted


def with_magnitudes(lexicon: Lexicon, families: dict[str, list[str]]) -> Lexicon:
    """The lexicon with each family a keyword category of its literals, in place of any
    category that held one of them."""
    if not families:
        return lexicon
    pooled = {lit.lower() for lits in families.values() for lit in lits}
    kept = [c for c in lexicon.categories if not any(lit.lower() in pooled for lit in c.literals)]
    added = [Category(f, "keyword", "keyword", tuple(lits)) for f, lits in families.items()]
    return Lexicon(kept + added, lexicon.chinese_numbers)
