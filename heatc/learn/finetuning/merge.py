"""What `heatc finetune` keeps of the base heatmap: its lexicon as the categories the domain's
keywords are discovered over, and its cells beside the ones the domain re-learns.

**Lexicon.** The base heatmap's categories (their groups restored from the seed lexicon and
their kind; a keyword category no cell uses is a shadow phrase, `heatc.learn.text.shadows`), then
the seed categories it does not declare. A literal of a base keyword
category with several literals (a keyword family, "keywords_mg": 153 drugs) that the domain
writes before values often enough to be a keyword of its own (`split_literals`) leaves the
category: "metformin 500 mg" in drug labels is the domain's own cell, not one of a family
pooled for being rare in the base corpus.

**Cells** (`merge_cells`). A cell is identified by its pair, unit and check. A cell the domain
learns replaces the base's: its score comes from the student's couplings on the domain's
sentences and its statistics and range from the domain's values — the domain's values are
what its rules will read — except that a range fitted to fewer values than the base's and
fewer than `TRUSTED_SUPPORT` is widened to the hull of both (`widen_to_base`): a few dozen
values do not show where the tail ends. A base cell the domain does not learn is kept as the
base has it (score, statistics, range) unless `keep_unused` is off, and a re-learned cell
keeps the base's magnitude band (`inherit_band`; the domain learns none of its own). The
false alarms these inherited rules raise on the domain's clean text are paid from what the
domain's own cells leave of its budget (`affordable`); `drop_rejecting` and `drop_bands`
take out those it does not pay for.

Public surface: `base_lexicon`, `split_literals`, `cell_key`, `merge_cells`, `base_range`, `widen_to_base`,
`inherit_band`, `without_bands`, `affordable`, `drop_bands`, `drop_rejecting`, `TRUSTED_SUPPORT`.
"""

from __future__ import annotations

from collections import Counter

from heatc.heatmap.format import BUILTIN_CATEGORIES, DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, Heatmap, Stats
from heatc.heatmap.lower import margin_range
from heatc.learn.cells.dimensions import unit_dimensions, unit_scales
from heatc.learn.text.lexemes import (
    NUMERAL_KIND,
    SEED_CATEGORIES,
    Category,
    Lexicon,
    is_numeral_name,
)
from heatc.learn.text.shadows import SHADOW_GROUP

# a re-learned cell with at least this many domain values keeps the range the domain's values
# give it, even if narrower than the base's (`widen_to_base`)
TRUSTED_SUPPORT = 100
_GROUP_OF_KIND = {"unit": "unit", "constraint": "constraint", "keyword": "keyword", "punct": "structure"}
_STAT_FIELDS = set(Stats.__dataclass_fields__)


def base_lexicon(hm: Heatmap) -> Lexicon:
    """The base heatmap's categories with the seed categories it does not declare."""
    seed = {c.name: c for c in SEED_CATEGORIES}
    # a cell read after its unit ([number, daily], unit mg): its word is plain text to the
    # domain, which finds its own (`discovery.follower_words`); as a category it would stop
    # the keyword discovery of the domain's plan
    celled = {x for cell in hm.cells if not cell.reads_after for x in (*cell.pair, cell.unit) if x}
    read_after = {cell.pair[1] for cell in hm.cells if cell.reads_after} - celled
    cats = []
    for c in hm.categories.values():
        if c.name in read_after and c.name not in seed:
            continue
        if c.name in seed:
            group = seed[c.name].group
        elif c.kind in ("keyword", NUMERAL_KIND) and is_numeral_name(c.name):  # earlier heatmaps: keyword
            group = "numeral"
        elif c.kind == "keyword" and c.name not in celled:  # declared for the values it keeps apart
            group = SHADOW_GROUP
        else:
            group = _GROUP_OF_KIND.get(c.kind, "structure")
        cats.append(Category(c.name, c.kind, group, tuple(c.literals), c.exact))
    taken = {lit.lower() for c in cats for lit in c.literals}
    extra = [c for c in SEED_CATEGORIES if c.name not in hm.categories]
    extra = [Category(c.name, c.kind, c.group, t, c.exact) for c in extra if (t := _free(c.literals, taken))]
    return Lexicon(extra + cats, hm.chinese_numbers)


def _free(literals: tuple[str, ...], taken: set[str]) -> tuple[str, ...]:
    return tuple(x for x in literals if x.lower() not in taken)


def split_literals(lexicon: Lexicon, phrases: set[str]) -> Lexicon:
    """`lexicon` without the `phrases` that its keyword categories of several literals hold
    (they become keywords of their own when the plan discovers them again)."""
    drop = {p.lower() for p in phrases}
    out = []
    for c in lexicon.categories:
        if c.group == "keyword" and len(c.literals) > 1:
            kept = tuple(x for x in c.literals if x.lower() not in drop)
            if not kept:
                continue
            c = Category(c.name, c.kind, c.group, kept, c.exact)
        out.append(c)
    return Lexicon(out, lexicon.chinese_numbers)


def without_groups(lexicon: Lexicon, *, several: bool) -> Lexicon:
    """The lexicon without its keyword categories of several literals (`several`): what the
    domain's words are discovered over, so that a family's members can be found."""
    return Lexicon(
        [c for c in lexicon.categories if not (several and c.group == "keyword" and len(c.literals) > 1)],
        lexicon.chinese_numbers,
    )


def cell_key(doc: dict) -> tuple[str, str, str, str]:
    """A heatmap cell entry's identity: its pair, unit (or a quantity's dimension, whose
    values are in its base unit: never the same cell as the bare numbers) and check."""
    a, b = (*doc["pair"], "")[:2]  # (a value alone: `[date]`)
    unit = doc.get("unit") or (f"quantity({doc['dimension']})" if doc.get("dimension") else "")
    return a, b, unit, doc.get("check") or "range"


def merge_cells(
    domain: dict,
    base_doc: dict,
    lexicon: Lexicon,
    *,
    keep_unused: bool,
    margin: tuple[float, float] = (DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR),
) -> tuple[dict, list[str], list[str], Counter]:
    """The domain's heatmap document with the base cells it does not re-learn added (when
    `keep_unused`), and the categories they need (`margin`: the base's margin policy, for the
    ranges of its cells that state none). A re-learned cell takes the base cell's magnitude
    band (`inherit_band`). Returns (document, names of the base cells kept, names of the
    re-learned cells given a band, counts: relearned, kept, dropped)."""
    domain_cells = [dict(c) for c in domain["cells"]]
    learned = {cell_key(c): c for c in domain_cells}
    names = {c["name"] for c in domain_cells}
    counts: Counter = Counter()
    categories = dict(domain["categories"])
    declared = {lit.lower() for c in categories.values() for lit in c["literals"]}
    by_name = lexicon.by_name()
    kept: list[dict] = []
    banded: list[str] = []
    dims = unit_dimensions(lexicon)
    scales = unit_scales(lexicon, dims)
    for c in base_doc.get("cells") or []:
        quantity = _in_base_unit(c, dims, scales)
        if quantity is not None and cell_key(quantity) in learned:
            # a base cell of a unit whose dimension the domain learned for its keyword: the
            # domain's cell reads its values too, in the dimension's base unit
            counts["relearned"] += 1
            if quantity.get("range") != [0, 0]:  # (a unit guard's [0, 0] holds no values to widen to)
                counts["widened"] += widen_to_base(learned[cell_key(quantity)], quantity, margin)
            continue
        if cell_key(c) in learned:
            counts["relearned"] += 1
            counts["widened"] += widen_to_base(learned[cell_key(c)], c, margin)
            if inherit_band(learned[cell_key(c)], c):
                banded.append(learned[cell_key(c)]["name"])
            continue
        if not keep_unused:
            counts["dropped"] += 1
            continue
        needed = [x for x in (*c["pair"], c.get("unit")) if x and x not in BUILTIN_CATEGORIES]
        ok = True
        for name in needed:
            if name in categories:
                continue
            cat = by_name.get(name)
            # (a word a base guard reads after the unit is no category of the domain's lexicon,
            # `base_lexicon`: the base declares it)
            declared_by_base = (base_doc.get("categories") or {}).get(name) or {}
            kind = cat.kind if cat else declared_by_base.get("kind", "")
            exact = cat.exact if cat else bool(declared_by_base.get("exact"))
            known = cat.literals if cat else declared_by_base.get("literals", ())
            literals = [x for x in known if x.lower() not in declared]
            if not literals:
                ok = False  # its category is gone or all its literals now belong to the domain's
                break
            entry: dict = {"kind": kind, "literals": literals}
            if exact:
                entry["exact"] = True
            categories[name] = entry
            declared.update(x.lower() for x in literals)
        if not ok:
            counts["dropped"] += 1
            continue
        entry = dict(c)
        name, k = entry["name"], 2
        while entry["name"] in names:
            entry["name"], k = f"{name}_{k}", k + 1
        names.add(entry["name"])
        kept.append(entry)
        counts["kept"] += 1
    merged = {**domain, "categories": categories, "cells": domain_cells + kept}
    return merged, [c["name"] for c in kept], banded, counts


def _in_base_unit(cell: dict, dims: dict[str, str], scales: dict[str, float]) -> dict | None:
    """A base range cell `[kw, number]` with a unit of a learned dimension (`dimensions`), as
    the quantity cell of that dimension would hold it: range and statistics in the base unit.
    None for any other cell."""
    unit = cell.get("unit")
    if unit not in dims or cell.get("dimension") or (cell.get("check") or "range") != "range":
        return None
    if len(cell["pair"]) != 2 or cell["pair"][1] != "number" or cell["pair"][0] in BUILTIN_CATEGORIES:
        return None  # (`[number, mg]`, `[number, daily]` read after the unit: no keyword's quantity)
    scale = scales[unit]

    def scaled(x):
        return None if x is None else x * scale

    out = {k: v for k, v in cell.items() if k != "unit"} | {"dimension": dims[unit]}
    if cell.get("range"):
        out["range"] = [scaled(x) for x in cell["range"]]
    if cell.get("stats"):
        out["stats"] = {k: v if k == "n" else scaled(v) for k, v in cell["stats"].items()}
    return out


def base_range(base: dict, margin: tuple[float, float]) -> list | None:
    """The range a base cell entry's rule checks: its explicit `range`, or — a cell below the
    base's threshold has none — the margin policy's range from its statistics, as `heatc
    lower` would give it (`margin`: the base heatmap's spread and factor)."""
    if base.get("range"):
        return list(base["range"])
    stats = base.get("stats") or {}
    if (base.get("check") or "range") != "range" or not stats:
        return None
    try:
        lo, hi = margin_range(Stats(**{k: v for k, v in stats.items() if k in _STAT_FIELDS}), *margin)
    except ValueError:  # statistics without quantiles or bounds
        return None
    return [lo, hi]


def widen_to_base(
    cell: dict, base: dict, margin: tuple[float, float] = (DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
) -> bool:
    """Widen a re-learned cell's range to the hull of its own and the base cell's when the
    domain saw fewer of its values than the base did and fewer than `TRUSTED_SUPPORT` (ten mL
    values of a drug label do not say that 3,000 mL, which the base's notes write, is wrong).
    A side the base leaves open opens the domain's: the base accepts every value there (on
    the drug labels, mg's lower bound of 1.25 fitted to the labels' doses rejected "warfarin
    1 mg"; the base, which saw 0.1 mg doses in clinical notes, leaves that side open).
    The base's range is the one its rule checks (`base_range`), explicit or from its statistics;
    where the hull would open both sides (the domain bounds one side, the base the other), the
    base's range, which saw more values, is the cell's. Returns whether it widened. The recorded false-alarm rate, measured on the narrower range,
    stays an upper bound."""
    ours, theirs = cell.get("range"), base_range(base, margin)
    support, base_support = cell.get("support", 0), base.get("support", 0)
    if not ours or not theirs or support >= min(base_support, TRUSTED_SUPPORT):
        return False
    lo = None if ours[0] is None or theirs[0] is None else min(ours[0], theirs[0])
    hi = None if ours[1] is None or theirs[1] is None else max(ours[1], theirs[1])
    if lo is None and hi is None:  # each bounds the side the other leaves open: the base's, which saw more
        lo, hi = theirs
    if [lo, hi] == list(ours):
        return False
    cell["range"] = [lo, hi]
    cell["description"] = (
        f"{cell.get('description', '')}; range widened to the base's "
        f"({_bound(ours[0])}–{_bound(ours[1])} → {_bound(lo)}–{_bound(hi)}): {support} domain values, {base_support} in the base"
    ).lstrip("; ")
    return True


BAND_NOTE = "; magnitude band {} from the base"  # appended to a cell's description by `inherit_band`


def inherit_band(cell: dict, base: dict) -> bool:
    """Give a re-learned cell the base cell's magnitude band. A band bounds what one document
    says against itself, and its factor was chosen over the base corpus's whole documents;
    a domain's few PDF pages, each a document of a handful of values, do not show how far a
    document's values spread (bands fitted to the 10-K's pages took factors of 10 where the
    base's 200 held). Returns whether it gave one; `drop_bands` takes it back where it makes
    the rule reject a clean value of the domain."""
    if not base.get("band") or cell.get("band"):
        return False
    cell["band"] = base["band"]
    cell["description"] = cell.get("description", "") + BAND_NOTE.format(base["band"])
    return True


def _unbanded(cell: dict) -> dict:
    return {k: v for k, v in cell.items() if k != "band"}


def without_bands(doc: dict, banded: list[str]) -> dict:
    """The document with the cells `banded` stripped of their bands."""
    return {**doc, "cells": [_unbanded(c) if c["name"] in banded else c for c in doc["cells"]]}


def drop_bands(doc: dict, banded: list[str], rejections: Counter, unbanded: Counter) -> tuple[dict, int]:
    """The document without the bands the cells `banded` inherited (`inherit_band`) where
    their rules reject more clean values of the domain with the band (`rejections`) than
    without it (`unbanded`, the rejections of `without_bands`): the band's false alarms were
    not budgeted (the domain's own range was)."""
    out, n = [], 0
    for c in doc["cells"]:
        if c["name"] in banded and rejections.get(c["name"], 0) > unbanded.get(c["name"], 0):
            note = BAND_NOTE.format(c["band"])
            c = _unbanded(c)
            c["description"] = c.get("description", "").replace(note, "")
            n += 1
        out.append(c)
    return {**doc, "cells": out}, n


def _bound(x: float | None) -> str:
    return "open" if x is None else f"{x:g}"


def affordable(inherited: list[tuple[str, float, float]], left: float) -> set[str]:
    """Which inherited rules — a kept base cell, or the band a re-learned cell took from the
    base, each `(name, score, false alarms it raises in the domain's clean text)` — the budget
    the domain's own cells `left` pays for: those that raise none, then the hottest first
    while their false alarms fit. What they raise is counted, not estimated: the base did not
    fit them to the domain's text, so its clean text is an unbiased sample of theirs (on the
    10-K, the shipped "… million" band rejects one clean value, "0.2 million shares" on a page
    of amounts in the thousands of millions, and notices 47 of the held-out half's 116 scale
    slips)."""
    out = set()
    for name, _, cost in sorted(inherited, key=lambda x: (x[2] > 0, -x[1], x[2], x[0])):
        if cost <= left + 1e-9:
            left -= cost
            out.add(name)
    return out


def drop_rejecting(doc: dict, base_names: list[str], rejections: Counter) -> tuple[dict, int]:
    """The document without the kept base cells whose rules reject a clean domain value, and
    without the categories only those cells used (shadow phrases, which no cell uses, stay)."""
    bad = {n for n in base_names if rejections.get(n, 0) > 0}
    cells = [c for c in doc["cells"] if c["name"] not in bad]
    used = {x for c in cells for x in (*c["pair"], c.get("unit")) if x}
    # (number words stay: each keeps another from reading its tail, "twenty-five (25)")
    gone = {x for c in doc["cells"] if c["name"] in bad for x in (*c["pair"], c.get("unit")) if x} - used
    gone = {x for x in gone if not is_numeral_name(x)}
    categories = {k: v for k, v in doc["categories"].items() if k not in gone}
    return {**doc, "cells": cells, "categories": categories}, len(bad)
