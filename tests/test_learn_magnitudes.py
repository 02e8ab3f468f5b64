"""Keywords too rare for cells of their own, pooled by the magnitude of their values
(`heatc.learn.cells.magnitudes`), and the value cell and its bare-value cell chosen together
(`heatc.learn.cells.budget.allocate`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.learn_values import spread_values as _spread

from heatc.learn.cells.budget import allocate
from heatc.learn.cells.magnitudes import discover_magnitudes, magnitude_families, with_magnitudes
from heatc.learn.cells.ranges import FLAT_TAIL, count_outside, range_options
from heatc.learn.text.evidence import ITEM_END, CellKey, LearnedCell, collect_values
from heatc.learn.text.lexemes import Lexicon
from heatc.learn.text.quantities import KeywordProfile

MAGNESIUM = [1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.0]
PHOSPHORUS = [2.6, 2.8, 3.0, 3.2, 3.4, 3.6, 3.8, 3.0]
ALBUMIN = [3.1, 3.3, 3.5, 3.7, 3.9, 4.1, 4.3, 3.5]


def _panel_notes() -> list[str]:
    """One sentence per note: three rare labs of one decade, two of another (134–145, 96–107),
    and words that must not join: a dose, a word whose values span decades, a lab written
    often enough for a cell of its own, a suture size."""
    notes = [f"Magnesium {v} this morning." for v in MAGNESIUM]
    notes += [f"Phosphorus {v} this morning." for v in PHOSPHORUS]
    notes += [f"Albumin {v} this morning." for v in ALBUMIN]
    notes += [f"Sodium {134 + i} on arrival." for i in range(12)]
    notes += [f"Chloride {96 + i} on arrival." for i in range(12)]
    notes += [f"Keflex {v} mg twice daily." for v in (250, 500) * 4]
    notes += [f"Volume {v} noted." for v in (3, 30, 300, 3000, 5) * 2]
    notes += [f"Glucose {80 + 2 * i} fasting." for i in range(25)]
    notes += ["Closed with 3-0 Vicryl."] * 8
    return notes


def test_rare_lab_words_of_one_magnitude_form_a_family():
    """Magnesium, phosphorus and albumin (eight values each, 1.8–4.3) pool into one family,
    sodium and chloride (twelve each, 96–145) into another, each family named by its median
    (3.0; 120.5 to one figure). A dose, values spanning decades and a suture size stay out;
    a lab written often enough for a cell of its own (25 values ≥ min_support) becomes a
    keyword of its own."""
    notes = _panel_notes()
    families, promoted = discover_magnitudes(Lexicon(), notes, notes, min_support=20)
    assert families == {
        "keywords_about_3": ["albumin", "magnesium", "phosphorus"],
        "keywords_about_100": ["chloride", "sodium"],
    }
    assert promoted == [("glucose", 25)]


def test_a_family_needs_two_members_and_the_support_of_a_cell():
    notes = _panel_notes()
    # at a higher min_support the labs of 96–145 (24 values) no longer make one, and glucose's 25
    # values are too few for a cell of its own, but it spans its own decade with sodium's
    families, promoted = discover_magnitudes(Lexicon(), notes, notes, min_support=30)
    assert families == {"keywords_about_100": ["chloride", "glucose", "sodium"]} and promoted == []
    # a member alone is no family
    alone = {"magnesium": KeywordProfile(occurrences=30, values=MAGNESIUM * 3, plain=MAGNESIUM * 3)}
    alone["magnesium"].readings[""] = 24
    assert magnitude_families(alone, 20, set()) == {}


def test_a_family_range_rejects_every_member_ten_times_off():
    """The family's category holds every member's literal; its cell reads all their values,
    and a range beyond their tails rejects each of them ten times larger or smaller:
    "magnesium 21" and "albumin 0.35" are noticed, which no member's own nine values could
    afford a rule for."""
    notes = _panel_notes()
    families, _ = discover_magnitudes(Lexicon(), notes, notes, min_support=20)
    lexicon = with_magnitudes(Lexicon().with_keywords(["sodium"]), families)
    names = {c.name for c in lexicon.categories}
    assert "sodium" not in names and {"keywords_about_3", "keywords_about_100"} <= names
    key = CellKey("keywords_about_3", "number", "")
    cv = collect_values(lexicon, [key], notes)[key]
    members = MAGNESIUM + PHOSPHORUS + ALBUMIN
    assert sorted(cv.values) == sorted(members)
    tightest = min((o for o in range_options(cv, key) if None not in o.bounds), key=lambda o: o.bounds[1] / o.bounds[0])
    assert tightest.rejected == 0
    slipped = [v * 10 for v in members] + [v / 10 for v in members]
    assert count_outside(tightest.bounds, slipped) == len(slipped)


def test_the_plan_declares_the_families_before_the_teacher_reads():
    from heatc.learn.config import LearnConfig, TeachingConfig
    from heatc.learn.teaching.plan import Plan, plan, plan_lexicon
    from heatc.learn.text.corpus import Document

    docs = [Document(f"d{i}", text) for i, text in enumerate(_panel_notes())]
    config = LearnConfig(
        corpus=[], output=Path("x.yaml"), teaching=TeachingConfig(label_sentences=0, candidate_count=3)
    )
    p = plan(config, docs)
    assert p.magnitudes["keywords_about_3"] == ["albumin", "magnesium", "phosphorus"]
    assert not {k.lower() for k, _ in p.keywords} & {"albumin", "magnesium", "phosphorus", "sodium", "chloride"}
    assert CellKey("keywords_about_3", "number", "") in p.candidates
    again = Plan.from_json(p.to_json())
    lexicon = plan_lexicon(again)
    assert lexicon.by_name()["keywords_about_3"].literals == ("albumin", "magnesium", "phosphorus")


# --- a value's cell and its bare-value cell, chosen together -------------------------------


def _cell(key: CellKey, n: int) -> LearnedCell:
    return LearnedCell(key, 0.9, 2.0, 10, n, {})


def test_a_bare_cell_that_notices_nothing_more_is_not_paid_for():
    """Chloride's values are all written bare: its value cell and its bare-value cell read the
    same values, and either range notices the same slips. Alone, each is worth what it
    notices; together they are worth it once, so a budget for one rule's bounds runs one — and
    the budget that a second would have taken goes to another lab."""
    rng = np.random.default_rng(1)
    chloride = [float(x) for x in rng.integers(95, 110, 60)]
    calcium = [float(x) for x in np.round(rng.uniform(8.0, 10.5, 60), 1)]
    plain, bare = CellKey("chloride", "number", ""), CellKey("chloride", "number", ITEM_END)
    other = CellKey("calcium", "number", "")
    values = {plain: _spread(chloride), bare: _spread(chloride), other: _spread(calcium)}
    cells = [_cell(k, 60) for k in (plain, bare, other)]
    options = {k: range_options(values[k], k, 1.5) for k in values}
    budget = 2 * 2 * FLAT_TAIL  # two rules of two bounds
    kept, spent = allocate(cells, values, budget=budget, options=options)
    assert spent <= budget
    assert {c.key for c in kept} == {other, plain} or {c.key for c in kept} == {other, bare}
    assert all(None not in c.range for c in kept)


def test_a_bare_cell_runs_where_its_value_cell_also_reads_doses():
    """Sodium's value cell also reads "sodium bicarbonate 650 mg" (a dose: 650, 1300, with a
    unit after them), which any upper bound near the lab values rejects: the value cell
    leaves its upper side open, and the bare-value cell (the lab values ending an item) is
    worth its own range."""
    rng = np.random.default_rng(2)
    labs = [float(x) for x in rng.integers(130, 146, 60)]
    plain, bare = CellKey("sodium", "number", ""), CellKey("sodium", "number", ITEM_END)
    with_doses = _spread(labs + [650.0, 1300.0] * 10)
    for d in range(20):
        with_doses.with_unit[d % 40].append(650.0 if d % 2 == 0 else 1300.0)
    values = {plain: with_doses, bare: _spread(labs)}
    cells = [_cell(plain, 80), _cell(bare, 60)]
    options = {k: range_options(values[k], k, 1.5) for k in values}
    kept, _ = allocate(cells, values, budget=4 * FLAT_TAIL, options=options)
    ranges = {c.key: c.range for c in kept}
    assert bare in ranges and None not in ranges[bare] and ranges[bare][1] < 650
    assert plain not in ranges or ranges[plain][1] is None or ranges[plain][1] >= 1300
