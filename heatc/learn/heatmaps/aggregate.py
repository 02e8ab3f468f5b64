"""The aggregate stage: couplings and corpus statistics → cells within the false-alarm
budget, unit guards and keyword families (the modules `evidence`, `couplings`,
`quantities`, `ranges`, `budget` and `guards` do the work).

Public surface: `aggregate`, `quantity_cells`, `rare_word_cells`, `counted_text`, `checked_sentences`.
"""

from __future__ import annotations

import numpy as np

from heatc.learn.cells.budget import CellContext, cell_table, select_cells
from heatc.learn.cells.couplings import Couplings
from heatc.learn.cells.dimensions import (
    dimension_cells,
    dimension_scores,
    dimension_swaps,
    guards_outside,
    unit_dimensions,
    unit_scales,
)
from heatc.learn.cells.guards import (
    FAMILY_COUNT,
    FAMILY_MEMBERS,
    guard_expected,
    in_families,
    keyword_families,
    ladder_units,
    members_below_one,
    members_in_other_units,
    pooled_units,
    rung_below,
    swap_sources,
    unit_guards,
    unit_swaps,
)
from heatc.learn.config import (
    LearnConfig,
)
from heatc.learn.heatmaps.emit import declared_categories
from heatc.learn.teaching.plan import Plan, discovery_sample, plan_lexicon
from heatc.learn.text.corpus import copy_groups, sentences
from heatc.learn.text.discovery import follower_words, rare_words
from heatc.learn.text.evidence import (
    CellKey,
    CellValues,
    LearnedCell,
    candidate_cells,
    collect_values,
    occurrences,
)
from heatc.learn.text.lexemes import FOLLOWER_GROUP, Lexicon, compound_numerals, lex_sentence, numeral_value
from heatc.learn.text.quantities import is_quantity, keyword_profiles, names_a_term

# follower words (`discovery.follower_words`) a heatmap may read values before, at most
MAX_FOLLOWERS = 60
# times `min_support`: the values a guard read after the unit needs its cells to have
AFTER_GUARD_SUPPORT = 2


def rare_word_cells(
    lexicon: Lexicon, sample: list[str], min_count: int
) -> tuple[Lexicon, set[str], list[CellKey], list[CellKey]]:
    """The single words before numbers that no category of `lexicon` holds, seen at least
    `min_count` times in `sample`, as keywords (the widened lexicon and their names), and
    their candidate cells with a unit seen `min_count` times: what they may join a family
    with (`keyword_families`). A word joins on less evidence than a cell of its own
    needs (`FAMILY_COUNT`, not the plan's `candidate_count`): the family, not the word,
    must have the support, and "Keflex 500 mg" seen twice has shown which unit Keflex takes.
    Last, every keyword's cells with a unit seen `min_count` times: the units a family member
    takes on the same evidence ("Synthroid 100 mcg" twice, beside "Synthroid 0.05 mg").
    """
    wide = lexicon.with_keywords(rare_words(lexicon, sample, min_count))
    rare_names = {c.name for c in wide.categories} - {c.name for c in lexicon.categories}
    groups = wide.groups()
    program = wide.program()
    with_unit = [
        k for k in candidate_cells((lex_sentence(program, s) for s in sample), groups, min_count)
        if k.keyword and k.has_unit and k.check == "range"
    ]  # fmt: skip
    return wide, rare_names, [k for k in with_unit if k.keyword in rare_names], with_unit


def _dosed_alike(
    families: dict[str, list[str]],
    seen: list[CellKey],
    lexicon: Lexicon,
    texts: list[str],
    support: dict[CellKey, int] | None = None,
) -> dict[str, list[str]]:
    """The families without the members the whole corpus writes in a unit of the family's
    ladders that the family does not take (`guards.members_in_other_units`; the discovery
    sample may show "Synthroid … mcg" less than twice), and those dosed below one of its
    unit where the family does not take the unit below (`guards.members_below_one`: digoxin
    0.125 mg is 125 mcg); a family left with fewer than
    `FAMILY_MEMBERS` is dropped. `seen`: the cells the families were pooled by, `support`
    their corpus values (the units a family takes are its members', `guards.pooled_units`)."""
    if not families:
        return families
    groups = lexicon.groups()
    units_of = pooled_units(seen, support or {})
    cells, own = [], []
    for members in families.values():
        units = units_of[members[0]]
        for u in sorted(ladder_units(units) & set(groups)):
            cells += [CellKey(m, "number", u) for m in members]
        # its units with a rung below that the family does not take (mg, where it takes no mcg)
        below = [u for u in sorted(units) if rung_below(u) not in (None, *units)]
        own += [CellKey(m, "number", u) for u in below for m in members]
    if not cells and not own:
        return families
    counted = collect_values(lexicon, cells + own, texts)
    written = {k: len(counted[k].values) for k in cells}
    odd = members_in_other_units(families, written, min_count=1)  # once: each such value costs the guard
    low = members_below_one(families, {k: counted[k] for k in own})
    out = {}
    for name, members in families.items():
        kept = [m for m in members if m not in odd.get(name, ()) and m not in low.get(name, ())]
        if len(kept) >= FAMILY_MEMBERS:
            out[name] = kept
    return out


def counted_text(text: str) -> str:
    """The text of a document in which its values, and the false alarms the budget is spent
    on, are counted: its sentences (`sentences`), joined, so the fragments that are not
    counted as sentences (under 12 or over 400 characters: tables, lists, long runs without a
    sentence end) do not spend the budget either."""
    return " ".join(sentences(text))


def checked_sentences(values: dict[CellKey, CellValues], keys, documents) -> int:
    """How many sentences of the documents (as `counted_text` joins them) hold a value that
    one of the cells `keys` captures: the sentences a false alarm can fall in, of which the
    budget is a share."""
    starts: list[list[int]] = []
    for d in documents:
        offsets, pos = [], 0
        for s in sentences(d.text):
            offsets.append(pos)
            pos += len(s.encode()) + 1
        starts.append(offsets)
    hit: set[tuple[int, int]] = set()
    for k in keys:
        for d, positions in values[k].starts.items():
            hit.update((d, int(np.searchsorted(starts[d], p, side="right")) - 1) for p in positions)
    return len(hit)


def aggregate(
    config: LearnConfig, plan_: Plan, records: list[dict], documents
) -> tuple[Lexicon, list[LearnedCell], dict]:
    """The heatmap's lexicon, its cells and a summary, from the plan, the teacher's (or the
    student's) probe records and the corpus; the cells' settings are `config.cells`, whole."""
    settings = config.cells
    # Number words join as keywords here, not in the plan: the teacher's couplings are per
    # lexeme, and a one-word keyword does not change where lexemes start and end.
    texts = [counted_text(d.text) for d in documents]
    copies = copy_groups([d.text for d in documents])  # copies share a cross-validation fold
    lexicon = plan_lexicon(plan_).with_numerals(compound_numerals(texts))
    numerals = [c.name for c in lexicon.categories if c.group == "numeral"]
    candidates = plan_.candidates + [CellKey(n, v, "") for n in numerals for v in ("number", "percent")]
    groups = lexicon.groups()
    # Keywords too rare for cells of their own are pooled by the units they take; so are the
    # single words before numbers too rare to be keywords at all (the plan keeps the most
    # frequent `max_keywords`), which may only join a family. Where lexemes start and end
    # does not change (single words, and literals move between categories), so the teacher's
    # couplings stay where they were.
    sample = [
        s for _, s in discovery_sample(config, [(i, s) for i, d in enumerate(documents) for s in sentences(d.text)])
    ]
    wide, rare_names, extra, units_seen = rare_word_cells(
        lexicon, sample, min(config.teaching.candidate_count, FAMILY_COUNT)
    )
    wide_groups = wide.groups()
    keyword_cells = [k for k in candidates + extra if wide_groups.get(k.keyword) == "keyword" and k.check == "range"]
    support = {k: len(v.values) for k, v in collect_values(wide, keyword_cells, texts).items()}
    families = keyword_families(
        candidates + extra, support, wide_groups, settings.min_support, {c.name for c in wide.categories}, units_seen,
        rare_names,
    )  # fmt: skip
    families = _dosed_alike(families, candidates + extra + units_seen, wide, texts, support)
    if families:
        joined = {m for ms in families.values() for m in ms}
        lexicon = Lexicon(
            [c for c in wide.categories if c.name not in rare_names or c.name in joined], wide.chinese_numbers
        ).with_families(families)
        candidates = in_families(candidates + [k for k in extra if k.keyword in joined], families)
    program = lexicon.program()
    groups = lexicon.groups()
    couplings = Couplings()
    labelled = plan_lexicon(plan_).program()  # the lexemes the teacher's couplings are indexed by
    # The top-up's probes (`topup`) are evidence for the cells the plan's probes left without
    # a score only: they were chosen for those cells, so they neither join the pooled
    # distribution that scores are percentiles of nor move the score of a cell already scored.
    unscored: set[CellKey] | None = None
    for rec in sorted(records, key=lambda r: bool(r.get("topup"))):
        if rec.get("topup") and unscored is None:
            unscored = {k for k in candidates if couplings.strength(k)[1] < settings.min_probes}
        _add_probes(couplings, rec, program, groups, labelled, unscored if rec.get("topup") else None)
    # The words a dose or a period is read before ("5 mg daily", "30 days written notice"),
    # and their cells. An abbreviation with dots ("p.o.") lexes as one lexeme where the teacher
    # saw four, which would move every coupling of its sentence (Lasix's, aspirin's): the cells
    # read after the unit take their evidence from the sentences lexed anew, as a top-up's
    # probes do, and the others keep theirs.
    theirs = {x.lower() for x in plan_.excluded}
    followers = [
        w for w in follower_words(lexicon, sample, min_count=config.teaching.candidate_count, max_words=MAX_FOLLOWERS)
        if w not in theirs
    ]  # fmt: skip
    lexicon = lexicon.with_keywords(followers, group=FOLLOWER_GROUP, kind="other")
    program = lexicon.program()
    groups = lexicon.groups()
    after = [
        k for k in candidate_cells((lex_sentence(program, s) for s in sample), groups, config.teaching.candidate_count, after=True)
        if k.after
    ]  # fmt: skip
    for rec in records:
        _add_probes(couplings, rec, program, groups, labelled, set(after), after=True)
    # Which keywords name a measured quantity, by what their values look like in the corpus
    # (`quantities`): a domain keyword that does not has no cells at all; another keyword-like
    # category (a number word, a constraint word) keeps only its cells with a unit.
    # The test is not for two kinds of cell, which have tests of their own: a number word whose
    # values restate it ("thirty (30) days": one number, which the test calls a label — the
    # cell's range is what notices "thirty (300) days"), and a consistency cell (a term must
    # recur in documents and be restated alike, `budget`; "notice" binds a value rarely, but
    # "notice … thirty (30) days" is a contract's term).
    profiles = keyword_profiles(lexicon, {k.keyword for k in candidates if k.keyword}, texts)
    verdicts = {k: is_quantity(p) for k, p in profiles.items()}
    not_quantity = {k: why for k, (ok, why) in verdicts.items() if not ok}
    terms = {k for k in not_quantity if names_a_term(profiles[k])}
    candidates = quantity_cells(candidates, groups, set(not_quantity), _restating_numerals(lexicon, profiles), terms)
    # a cell read after the unit is scored against the others, and is a quantity by its unit
    scores = couplings.scores(candidates + after, settings.min_probes, among=candidates)
    candidates = candidates + after
    strengths = {k: couplings.strength(k) for k in candidates}
    guarded = unit_guards(candidates, [k for k, x in scores.items() if x >= settings.sensitivity], groups)
    # A keyword's cells in units of one dimension become one cell of that dimension, its values
    # converted to the base unit (`dimensions`); the unit cells still say which units a keyword
    # takes (the guards and swaps above and below) and lend it their scores. Its range stands
    # for the guards of units of its own dimension.
    dims = unit_dimensions(lexicon) if settings.dimensions else {}
    merged = dimension_cells(candidates, groups, dims, families)
    replaced = {k for ks in merged.values() for k in ks}
    dim_scores, dim_strengths = dimension_scores(merged, scores, strengths)
    guarded = guards_outside(guarded, replaced, dims)
    everything = collect_values(lexicon, candidates + sorted(dim_scores) + sorted(guarded), texts, copies)
    values = {k: v for k, v in everything.items() if k not in guarded}
    guards = _guard_cells(guarded, everything, scores, strengths, settings.min_support)
    swaps = unit_swaps(candidates)
    dim_swapped = dimension_swaps(merged, values, swaps, dims, unit_scales(lexicon, dims))
    scores = {k: x for k, x in scores.items() if k not in replaced} | dim_scores
    strengths |= dim_strengths
    hot = [k for k, x in scores.items() if x >= settings.sensitivity] + sorted(guarded)
    candidates_checked = checked_sentences(everything, hot, documents)
    # a cell read after the unit stands behind guards only: "2 mm in diameter", "500 mg daily"
    # read values of whatever is measured or dosed, no quantity's range
    ranged = {k: x for k, x in scores.items() if not k.after}
    context = CellContext(
        candidates_checked, _numeral_substitutes(values, set(numerals)), tuple(guards),
        swap_sources(values, swaps) | dim_swapped,
    )  # fmt: skip
    cells = cell_table(everything, ranged, strengths, settings, context)
    # max_cells bounds the cells of the heatmap's own statistics; guards come with the hot
    # cells they stand for and are not counted (they would push those cells out)
    cells = [c for c in cells if not c.guards][: settings.max_cells] + [c for c in cells if c.guards]
    # The heatmap declares only the categories its cells use, and that changes how some
    # text lexes ("blood pressure" may no longer be one lexeme): recount with that lexicon,
    # so the statistics are what the lowered rules will see — again if a cell drops out.
    # With bands, the budget stays that of every hot candidate's sentences: a band's false
    # alarms sit in a few cells, and a budget recounted over the sentences of the cells kept
    # shrinks each round until it holds almost none (docs/learning.md, "Magnitude bands").
    while True:
        used = declared_categories(lexicon, (c.key for c in cells))
        final = Lexicon([c for c in lexicon.categories if c.name in used], lexicon.chinese_numbers)
        recount = collect_values(final, sorted({c.key for c in cells}), texts, copies)
        checked = checked_sentences(recount, [c.key for c in cells if c.score >= settings.sensitivity], documents)
        if settings.bands:
            checked = max(checked, candidates_checked)
        context = CellContext(
            checked, _numeral_substitutes(recount, set(numerals)), tuple(c for c in cells if c.guards),
            swap_sources({k: v for k, v in recount.items() if k not in guarded}, swaps) | dim_swapped,
        )  # fmt: skip
        kept = select_cells([c for c in cells if not c.guards], recount, settings, context)
        if len(kept) == len(cells):
            break
        cells = kept
    pooled = np.asarray(couplings.pooled)
    summary = {
        "probed_values": sum(len(r["probes"]) for r in records),
        "coupling_pairs": len(pooled),
        "candidate_cells": len(plan_.candidates),
        "cells": len(kept),
        "hot_cells": sum(c.score >= settings.sensitivity for c in kept),
        "checked_sentences": checked,
        "not_quantities": len(not_quantity),
        "unit_vs_keyword": _role_summary(couplings),
    }
    return final, kept, summary


def quantity_cells(
    candidates: list[CellKey],
    groups: dict[str, str],
    not_quantity: set[str],
    restating: set[str],
    terms: set[str] | None = None,
):
    """The candidate cells the quantity test leaves: none keyed on a reference (a section, an
    exhibit, a rule: it numbers a part of a document); of a keyword that names no quantity,
    only its consistency cells where it names a term (`terms`, `quantities.names_a_term`; all
    of them without `terms`), and for another keyword-like category (a constraint word, a
    number word) its range cells with a unit too; a number word that restates its digits
    keeps all of its cells."""
    return [
        k for k in candidates
        if groups.get(k.keyword) != "article"
        and (k.keyword not in not_quantity or k.keyword in restating
             or (k.check == "consistent" and (terms is None or k.keyword in terms))
             or (groups.get(k.keyword) != "keyword" and bool(k.unit) and k.check == "range"))
    ]  # fmt: skip


RESTATED_SHARE = 0.8  # a number word's values that are its own number, at least, for it to restate


def _restating_numerals(lexicon: Lexicon, profiles: dict) -> set[str]:
    """The number words whose values (`quantities.keyword_profiles`) are mostly their own
    number: "thirty (30) days", written out and restated in digits."""
    out = set()
    for c in lexicon.categories:
        p = profiles.get(c.name)
        number = numeral_value(c.literals[0]) if c.group == "numeral" and c.literals else None
        if p is not None and number is not None and p.values:
            if sum(v == number for v in p.values) >= RESTATED_SHARE * len(p.values):
                out.add(c.name)
    return out


def _guard_cells(
    guarded: dict[CellKey, list[tuple[CellKey, float]]],
    values: dict[CellKey, CellValues],
    scores: dict[CellKey, float],
    strengths: dict[CellKey, tuple[float, int]],
    min_support: int,
) -> list[LearnedCell]:
    """Unit guards (`unit_guards`) as cells: each takes the teacher's score of the best
    cell it stands for, and is worth the values of those cells at which it would notice a
    swapped unit — each cell's values times the share of its unit's swaps that go to the
    guard's unit (`unit_swaps`), halved, as a slip and a substitution share a range
    cell's worth."""
    # what an unseen pair turns up at, per kind of guard: a unit before a word after many doses
    # ("1 g daily") turns up otherwise than a unit after a drug's name
    expected = {
        after: guard_expected(int((np.asarray(values[g].values) > 0).sum()) for g in guarded if g.after == after)
        for after in (False, True)
    }
    out = []
    for g, stands_for in sorted(guarded.items()):
        # a word read after the doses of many drugs is read after an unseen unit sooner than a
        # drug's name is: its absence needs `AFTER_GUARD_SUPPORT` times the values
        need = min_support * (AFTER_GUARD_SUPPORT if g.after else 1)
        stands_for = [(k, share) for k, share in stands_for if len(values[k].values) >= need]
        if not stands_for or (g.after and values[g].values):
            # a word read after many doses ("1 g p.o." beside "500 mg p.o."): once the corpus
            # writes the unit before it, the unit is no slip there
            continue
        best = max(stands_for, key=lambda x: (scores[x[0]], x[0]))[0]
        strength, n = strengths[best]
        out.append(
            LearnedCell(
                g, round(scores[best], 4), round(strength, 4), n, sum(len(values[k].values) for k, _ in stands_for),
                {}, guards=", ".join(sorted(k.unit for k, _ in stands_for)),
                worth=sum(len(values[k].values) * share for k, share in stands_for) / 2, expected=expected[g.after],
            )
        )  # fmt: skip
    return out


def _add_probes(
    couplings: Couplings,
    rec: dict,
    program,
    groups: dict[str, str],
    labelled,
    only: set[CellKey] | None,
    *,
    after: bool = False,
) -> None:
    """A teacher's (or student's) record of probes as evidence (`Couplings.add`, of the cells
    `only` if given), its text lexed with `program`; `labelled`: the program whose lexemes the
    probes are indexed by; `after`: with the cells read after a value's unit."""
    if not rec["probes"]:
        return
    lx = lex_sentence(program, rec["text"])
    old = lex_sentence(labelled, rec["text"]).lexemes
    by_value = {o.value: o for o in occurrences(lx, groups, after=after)}
    for value, per_lexeme in rec["probes"]:
        if len(per_lexeme) != len(old):
            continue
        value, per_lexeme = _relexed(old, lx.lexemes, value, per_lexeme)
        if value in by_value:
            couplings.add(lx, by_value[value], per_lexeme, only=only)


def _relexed(old: list, new: list, value: int, coupling: list) -> tuple[int | None, list]:
    """A probe's couplings, indexed by the labelling lexicon's lexemes, for the lexemes of the
    aggregation lexicon: a compound number word ("forty-five") is one lexeme there and three
    ("forty", "-", "five") in the labels; it takes the largest coupling of what it covers."""
    if [(x.start, x.end) for x in old] == [(x.start, x.end) for x in new]:
        return value, coupling
    out: list[float | None] = []
    moved = None
    for k, lex in enumerate(new):
        covered = [j for j, o in enumerate(old) if o.start < lex.end and lex.start < o.end]
        if value in covered:
            moved = k if covered == [value] else None  # the probed value must stay one lexeme
            out.append(None)
            continue
        xs = [coupling[j] for j in covered if coupling[j] is not None]
        out.append(max(xs) if xs else None)
    return moved, out


def _numeral_substitutes(values: dict[CellKey, CellValues], numerals: set[str]) -> dict:
    """Per number-word cell, the values every number word's cell captured: what another number
    restated in its place would be ("thirty (45) days"). A number word's own values are nearly
    all one number, so a substitution among them would change nothing."""
    keys = [k for k in values if k.keyword in numerals and k.check == "range"]
    pool = np.asarray([v for k in keys for v in values[k].values], dtype=np.float64)
    return dict.fromkeys(keys, pool)


def _role_summary(couplings: Couplings) -> dict:
    """Median normalised coupling of values with their units, with their keywords, and with
    any lexeme — the check that the teacher finds numbers coupled to what they measure."""
    unit = [x for k, xs in couplings.by_cell.items() if not k.keyword for x in xs]
    keyword = [x for k, xs in couplings.by_cell.items() if k.keyword and not k.unit for x in xs]
    out = {"any_lexeme": round(float(np.median(couplings.pooled)), 3) if couplings.pooled else None}
    out["unit"] = round(float(np.median(unit)), 3) if unit else None
    out["keyword"] = round(float(np.median(keyword)), 3) if keyword else None
    return out
