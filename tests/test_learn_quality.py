"""What makes a learned rule one a user can leave switched on: keywords that name a measured
quantity (`heatc.learn.text.quantities`), ranges that reject the impossible with a side left open
where no error needs it (`heatc.learn.cells.ranges`), consistency only where a term must repeat,
the budget counted in the sentences that hold a value some cell checks, and each rule's
measured false-alarm rate written into the heatmap."""

from __future__ import annotations

import numpy as np
import pytest
from support.learn_scores import scored as _scored

from heatc.heatmap.format import load_heatmap
from heatc.heatmap.lower import lower
from heatc.learn.cells.budget import CellContext, cell_table
from heatc.learn.cells.ranges import count_outside, range_options
from heatc.learn.config import CellsConfig
from heatc.learn.heatmaps.aggregate import checked_sentences, counted_text
from heatc.learn.heatmaps.emit import heatmap_document, write_heatmap
from heatc.learn.text.corpus import Document
from heatc.learn.text.evidence import CellKey, CellValues, collect_values, occurrences
from heatc.learn.text.lexemes import Category, Lexicon, lex_sentence
from heatc.learn.text.quantities import is_quantity, keyword_profiles, unit_read
from heatc.semantics.reference import scan
from heatc_runtime import Verdict


def _spread(values, documents: int = 40) -> CellValues:
    cv = CellValues()
    for i, v in enumerate(values):
        cv.values.append(float(v))
        cv.per_document[i % documents].append(float(v))
    return cv


def _profiles(words: list[str], texts: list[str]):
    lexicon = Lexicon().with_keywords(words)
    return keyword_profiles(lexicon, [c.name for c in lexicon.categories if c.group == "keyword"], texts)


def test_a_quantity_word_binds_a_value_read_one_way():
    texts = [f"Sodium was {v}. The patient is well." for v in (135, 139, 141, 144, 137, 140)] * 4
    texts += ["The patient received 2 mg.", "The patient is 42 years old.", "Patient seen 09/05.", "Patient 3 today."]
    texts += ["The patient walked 2 miles.", "The patient had 4 children.", "The patient took 5 mL."]
    texts += ["The patient rested."] * 30
    profiles = _profiles(["sodium", "patient"], texts)
    assert is_quantity(profiles["sodium"]) == (True, "")
    ok, why = is_quantity(profiles["patient"])
    assert not ok and "bind a value" in why


def test_numbers_that_are_parts_of_names_or_labels_are_no_quantity():
    sutures = [f"Closed with {n}-0 Vicryl." for n in (2, 3, 4, 3, 4, 5)] * 3
    levels = [f"Fusion at L{n}-{n + 1} today." for n in (3, 4, 5, 4)] * 3
    ages = [f"A pleasant {n}-year-old woman." for n in (42, 55, 61, 70, 38)] * 3
    labels = ["IMPRESSION: 1. Pneumonia."] * 12
    profiles = _profiles(["closed", "fusion", "pleasant", "impression"], sutures + levels + ages + labels)
    for word in ("closed", "fusion", "pleasant"):
        ok, why = is_quantity(profiles[word])
        assert not ok and "compounds" in why, word
    ok, why = is_quantity(profiles["impression"])
    assert not ok and "one number" in why


def test_a_section_cited_in_parentheses_is_no_value_of_the_word_before_it():
    """Drug labels cite their sections: "Warnings and Precautions (5.1)" names no quantity,
    whereas a dose written beside the word does."""
    cited = [f"[see Warnings and Precautions ({s})]." for s in ("5.1", "5.2", "5.4", "5.1", "5.3", "5.1")] * 3
    cited += [f"as in Warnings and Precautions (2.{n}, 5.{n})." for n in (1, 2, 3)]
    doses = [f"Glucose {v} mg/dL today." for v in (92, 101, 140, 88, 162, 97)] * 3
    doses += [f"Glucose ({v}) was rechecked." for v in (92, 140)]  # a value in parentheses, not a section number
    profiles = _profiles(["precautions", "glucose"], cited + doses)
    ok, why = is_quantity(profiles["precautions"])
    assert not ok and "compounds" in why
    assert is_quantity(profiles["glucose"]) == (True, "")


def test_a_word_followed_by_codes_or_by_years_and_amounts_alike_is_no_quantity():
    codes = [f"CPT code {n} billed." for n in (99213, 99214, 99215, 99203, 99204, 99212)] * 2
    mixed = [f"Surgery in {y}." for y in (1998, 2001, 2005)] * 2 + [f"Surgery for {n} hours." for n in (2, 3)] * 2
    mixed += [f"Surgery {n} times." for n in (2, 3)] * 2 + [f"Surgery blood loss {n} mL." for n in (50, 200)] * 2
    mixed += ["No surgery was planned."] * 60
    profiles = _profiles(["code", "surgery"], codes + mixed)
    ok, why = is_quantity(profiles["code"])
    assert not ok and "codes" in why
    assert not is_quantity(profiles["surgery"])[0]
    # years alone are a reading of their own: a fiscal year is a quantity of time
    texts = [f"In fiscal {y}, revenue rose." for y in (2017, 2018, 2019, 2016, 2015, 2019, 2014)]
    years = keyword_profiles(Lexicon(), ["fiscal_year"], texts)  # the seed lexicon's "fiscal"
    assert is_quantity(years["fiscal_year"]) == (True, "")


def test_a_drug_named_in_every_paragraph_and_dosed_in_a_few_is_a_quantity():
    """A drug label names its drug far more often than it states a dose, but the doses are
    read one way (mass): the drug names a quantity. A word followed by durations as rarely
    ("past 3 days") does not: time is no quantity a word is named for."""
    doses = [f"Metformin hydrochloride {v} mg twice daily." for v in (500, 850, 1000, 500, 2000, 2550)]
    names = ["Metformin hydrochloride may cause lactic acidosis."] * 80
    durations = [f"Seen in the past {n} days." for n in (2, 3, 5, 7, 3, 4)] + ["As in the past year."] * 80
    profiles = _profiles(["metformin hydrochloride", "past"], doses + names + durations)
    assert is_quantity(profiles["metformin_hydrochloride"]) == (True, "")
    ok, why = is_quantity(profiles["past"])
    assert not ok and "bind a value" in why


def test_a_number_glued_to_letters_and_digits_is_an_identifier():
    """Drug labels list ingredients by UNII ("UNII: 70097M6I30"): a number glued to letters
    and digits after it is part of a code; a unit written without a space is not."""
    codes = [f"Magnesium stearate (UNII: {c})." for c in ("3SY5LH9PMK", "4AQJ3LG584", "5Q7ZVV76EI", "9G2MP84A8W")] * 3
    doses = [f"Aspirin {v}mg daily." for v in (81, 325, 81, 162, 500, 325)] * 2
    profiles = _profiles(["unii", "aspirin"], codes + doses)
    ok, why = is_quantity(profiles["unii"])
    assert not ok and "compounds" in why
    assert is_quantity(profiles["aspirin"]) == (True, "")


def test_dates_are_values_for_the_learner_and_date_cells_capture_years():
    lexicon = Lexicon().with_keywords(["ended"])
    s = lex_sentence(lexicon.program(), "For the year ended December 31, 2019, revenue rose.")
    [occ] = occurrences(s, lexicon.groups())
    assert CellKey("ended", "date", "") in occ.keys
    key = CellKey("ended", "date", "")
    texts = ["The year ended December 31, 2019.", "The quarter ended March 31, 2018.", "The year ended 12/31/2017."]
    assert collect_values(lexicon, [key], texts)[key].values == [2019.0, 2018.0, 2017.0]
    assert key.pattern() == "ended ..3 v:date" and key.name == "ended_date"


def test_range_bounds_sit_beyond_the_clean_tails_and_a_side_may_be_left_open():
    """Doses of 0.1 mg are rare but real: every candidate lower bound lies below the smallest
    value the bound is read from (a tail level of at most 1 %), and some candidates leave the
    lower side open."""
    doses = [0.1] * 3 + [0.25] * 5 + list(np.geomspace(1, 1000, 292))
    options = range_options(_spread(doses))
    lows = sorted({o.bounds[0] for o in options if o.bounds[0] is not None})
    assert lows and max(lows) < 1.0  # never a bound inside the bulk (1 % cut at most)
    assert any(o.bounds[0] is None for o in options) and any(o.bounds[1] is None for o in options)


def test_a_bound_no_error_needs_is_left_out():
    """Years cluster far from 0: a ×10 slip lands far above any year, and ÷10 far below, but
    no clean value is rejected by an upper bound 4 decades up either; a lower bound costs a
    false alarm for every 0 (a date that names no year)."""
    key = CellKey("ended", "date", "")
    years = [0.0] * 30 + [float(y) for y in np.random.default_rng(0).integers(2010, 2021, 370)]
    cells = cell_table(
        {key: _spread(years)},
        *_scored({key: 3.0}),
        CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
        CellContext(sentences=400),
    )
    [cell] = cells
    lo, hi = cell.range
    assert lo is None and 2020 <= hi < 2119  # a year written a century late is rejected
    assert cell.rejected == 0 and cell.false_alarms == 0


def test_consistency_only_where_a_restated_term_repeats():
    """A contract restates its payment term; a note's doses change ("prednisone 20 mg, up
    from 5 mg"): a consistency cell whose restatements disagree more than rarely does not run,
    however few false alarms it would cost within the budget."""
    term, dose = CellKey("payment", "number", "days", "consistent"), CellKey("prednisone", "number", "mg", "consistent")
    values = {term: CellValues(), dose: CellValues()}
    for d in range(40):
        for k, vs in ((term, [30, 30, 30]), (dose, [20, 20, 20, 20, 20, 5] if d < 4 else [20, 20])):
            values[k].values.extend(vs)
            values[k].per_document[d].extend(vs)
    cells = cell_table(
        values,
        *_scored({term: 3.0, dose: 3.0}),
        CellsConfig(min_support=5, min_probes=3, sensitivity=None),
        CellContext(sentences=10**6),
    )
    assert [c.key for c in cells] == [term]


def test_the_budget_is_a_share_of_the_sentences_that_hold_a_checked_value():
    lexicon = Lexicon().with_keywords(["glucose"])
    key = CellKey("glucose", "number", "")
    docs = [
        Document("a", "Glucose 95 today. No values here at all. Glucose 110 later."),
        Document("b", "Nothing here."),
    ]
    values = collect_values(lexicon, [key], [counted_text(d.text) for d in docs])
    assert checked_sentences(values, [key], docs) == 2


def test_a_rule_with_an_open_side_is_written_lowered_and_rejects_above_its_bound(tmp_path):
    lexicon = Lexicon().with_keywords(["ended"])
    key = CellKey("ended", "date", "")
    years = [0.0] * 30 + [float(y) for y in np.random.default_rng(1).integers(2010, 2021, 370)]
    [cell] = cell_table(
        {key: _spread(years)},
        *_scored({key: 3.0}),
        CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
        CellContext(sentences=400),
    )
    doc = heatmap_document(
        name="years", title="t", lexicon=lexicon, cells=[cell], provenance={}, sensitivity=0.75, rule_files=[],
        tokenizer={"bytes": True},
    )  # fmt: skip
    path = tmp_path / "years.yaml"
    write_heatmap(path, doc)
    hm = load_heatmap(path)
    assert hm.cells[0].range == (None, cell.range[1]) and hm.cells[0].false_alarms == 0
    tree = lower(hm).tree
    from heatc.lang.compiler import compile_tree

    program = compile_tree(tree)
    assert program.rules[0].requirements[0].text == f"v <= {cell.range[1]:g}"
    for text, bad in (("The year ended December 31, 2019.", False), ("The year ended December 31, 2119.", True),
                      ("The year ended December 31.", False)):  # fmt: skip
        _, verdicts, _ = scan(program, text.encode())
        assert (verdicts[program.rules[0].name] is Verdict.REJECTED) == bad, text


def test_a_heatmap_range_needs_one_bound(tmp_path):
    from heatc.errors import HeatError

    path = tmp_path / "open.yaml"
    path.write_text(
        "heatmap: 1\nname: t\ncategories:\n  kw: {kind: keyword, literals: [glucose]}\n"
        "cells:\n  - {pair: [kw, number], score: 0.9, range: [null, null]}\n"
    )
    with pytest.raises(HeatError, match="both sides are open"):
        load_heatmap(path)


def test_count_outside_treats_an_open_side_as_unbounded():
    assert count_outside((None, 10.0), [0.0, 5.0, 11.0]) == 1
    assert count_outside((1.0, None), [0.0, 5.0, 1e9]) == 1


def test_a_word_before_a_keyword_of_the_base_makes_a_keyword_of_its_own():
    """Fine-tuning discovers keywords over the base heatmap's lexicon: "WARFARIN SODIUM 5 mg"
    is a dose of warfarin (a member of a drug family there), not a sodium level; "the sodium"
    qualifies nothing."""
    from heatc.learn.text.discovery import discover_keywords

    lexicon = Lexicon().with_keywords(["sodium", "warfarin", "aspirin"])
    lexicon = lexicon.with_families({"keywords_mg": ["warfarin", "aspirin"]})
    texts = [f"WARFARIN SODIUM {v} mg tablets are round." for v in (1, 2, 3, 4, 5, 6)]
    texts += [f"Then the sodium {v} was noted today." for v in (135, 140, 138, 141, 139, 137)]
    assert discover_keywords(lexicon, texts, min_support=5) == [("warfarin sodium", 6)]


def test_a_keyword_binds_its_value_past_a_constraint_word():
    """`egfr ..3 v:number ml` matches "eGFR below 30 mL" (a gap may hold a constraint word), so
    the learner's candidates count that value for eGFR as well as for the constraint word, and
    the couplings read eGFR's lexeme for eGFR's cells."""
    lexicon = Lexicon().with_keywords(["egfr"])
    program, groups = lexicon.program(), lexicon.groups()
    s = lex_sentence(program, "Stop if eGFR falls below 30 mL/minute.")
    (occ,) = occurrences(s, groups)
    names = {k.name for k in occ.keys}
    assert {"egfr_value", "egfr_ml", "at_most_value", "at_most_ml"} <= names, names
    egfr = next(k for k in occ.keys if k.name == "egfr_ml")
    assert s.categories[occ.keyword_of(egfr, s)] == "egfr"
    assert groups[s.categories[occ.keyword]] == "constraint"


def test_a_range_fitted_to_few_domain_values_is_widened_to_the_base():
    from heatc.learn.finetuning.merge import TRUSTED_SUPPORT, widen_to_base

    base = {"range": [0.125, 3200], "support": 1972}
    few = {"range": [12.7, 402], "support": 10, "description": "learned"}
    assert widen_to_base(few, base) and few["range"] == [0.125, 3200] and "widened" in few["description"]
    open_side = {"range": [None, 240], "support": 10, "description": ""}
    assert widen_to_base(open_side, base) and open_side["range"] == [None, 3200]
    # the base accepts every value on a side it leaves open: so does the widened range
    doses = {"range": [1.25, 4510], "support": 58, "description": ""}
    assert widen_to_base(doses, {"range": [None, 1710], "support": 2791}) and doses["range"] == [None, 4510]
    # each bounds the side the other leaves open: the hull would check nothing; the base's range
    crossed = {"range": [None, 240], "support": 10, "description": ""}
    assert widen_to_base(crossed, {"range": [0.5, None], "support": 300}) and crossed["range"] == [0.5, None]
    many = {"range": [12.7, 402], "support": TRUSTED_SUPPORT, "description": ""}
    assert not widen_to_base(many, base) and many["range"] == [12.7, 402]
    assert not widen_to_base({"range": [1, 2], "support": 5}, {"range": None, "support": 50})
    # a base cell below its threshold states no range: its rule would check the margin
    # policy's range from its statistics (q01/2, q99×2 for positive values), and that is the hull's
    cold = {"stats": {"n": 87, "min": 0.89, "q01": 0.9155, "q50": 1.63, "q99": 7.6, "max": 13.4}, "support": 87}
    inr = {"range": [None, 9.63], "support": 10, "description": ""}
    assert widen_to_base(inr, cold) and inr["range"] == [None, 15.2]
    assert not widen_to_base({"range": [1, 2], "support": 5}, {"stats": {"n": 9}, "support": 9})  # no bounds


def test_a_relearned_cell_keeps_the_bases_band_unless_it_rejects_the_domains_text():
    """A band's factor was chosen over the base's whole documents; a domain's pages do not
    show how far one document's values spread. A re-learned cell takes the base's band, and
    gives it back where its rule rejects a clean value of the domain."""
    from collections import Counter

    from heatc.learn.finetuning.merge import drop_bands, inherit_band, merge_cells, without_bands

    base_cell = {"name": "currency_scale_million", "pair": ["currency", "number"], "unit": "scale_million",
                 "range": [None, 267000], "support": 1330, "band": 999, "score": 0.6}  # fmt: skip
    relearned = {**base_cell, "range": [None, 5000], "support": 67, "description": "learned"}
    del relearned["band"]
    assert inherit_band(relearned, base_cell) and relearned["band"] == 999
    assert relearned["description"] == "learned; magnitude band 999 from the base"
    assert not inherit_band(dict(relearned), base_cell)  # it has one already
    assert not inherit_band({"description": ""}, {"range": [None, 5]})  # the base has none

    lexicon = Lexicon()
    domain = {"categories": {}, "cells": [relearned, {**relearned, "name": "other", "pair": ["x", "number"]}]}
    merged, kept, banded, counts = merge_cells(domain, {"cells": []}, lexicon, keep_unused=True)
    assert banded == [] and kept == []
    domain = {"categories": {}, "cells": [{k: v for k, v in relearned.items() if k != "band"}]}
    domain["cells"][0]["description"] = "learned"
    merged, kept, banded, counts = merge_cells(domain, {"cells": [base_cell]}, lexicon, keep_unused=True)
    assert banded == ["currency_scale_million"] and merged["cells"][0]["band"] == 999 and counts["relearned"] == 1
    same, n = drop_bands(merged, banded, Counter(), Counter())
    assert n == 0 and same["cells"][0]["band"] == 999
    # its own range rejects a value (budgeted by the domain); the band adds none: kept
    same, n = drop_bands(merged, banded, Counter(currency_scale_million=1), Counter(currency_scale_million=1))
    assert n == 0 and same["cells"][0]["band"] == 999
    assert "band" not in without_bands(merged, banded)["cells"][0] and merged["cells"][0]["band"] == 999
    unbanded, n = drop_bands(merged, banded, Counter(currency_scale_million=2), Counter(currency_scale_million=1))
    assert n == 1 and "band" not in unbanded["cells"][0]
    assert (
        unbanded["cells"][0]["description"].startswith("learned") and "band" not in unbanded["cells"][0]["description"]
    )


def test_a_base_cell_of_dates_is_kept_beside_the_domains_cells():
    """`date` is a value of the language, as `number` and `percent` are, not a category the
    merged heatmap must declare: a base cell `fiscal_year … date` the domain does not
    re-learn is kept (it was dropped when only numbers and percentages were known values)."""
    from heatc.learn.finetuning.merge import merge_cells

    fiscal = {"name": "fiscal_year_date", "pair": ["fiscal_year", "date"], "range": [None, 2030], "score": 0.98}
    lone = {"name": "any_date", "pair": ["date"], "range": [None, 2050], "score": 0.06}
    lexicon = Lexicon([Category("fiscal_year", "keyword", "keyword", ("fiscal year", "FY"))])
    domain = {"categories": {}, "cells": []}
    merged, kept, _, counts = merge_cells(domain, {"cells": [fiscal, lone]}, lexicon, keep_unused=True)
    assert kept == ["fiscal_year_date", "any_date"] and counts["kept"] == 2 and "dropped" not in counts
    assert merged["categories"] == {"fiscal_year": {"kind": "keyword", "literals": ["fiscal year", "FY"]}}


def test_the_rules_a_domain_inherits_are_paid_from_what_its_own_cells_leave():
    """A kept base cell or an inherited band that rejects clean values of the domain is not
    dropped at its first false alarm: what it raises there is paid from the budget the
    domain's cells leave, those that raise none first, then the hottest."""
    from heatc.learn.finetuning.merge import affordable

    inherited = [("free", 0.1, 0), ("hot", 0.9, 2), ("warm", 0.5, 1), ("band x", 0.7, 3)]
    assert affordable(inherited, 0.0) == {"free"}
    assert affordable(inherited, 2.5) == {"free", "hot"}
    assert affordable(inherited, 3.0) == {"free", "hot", "warm"}  # the band's 3 do not fit after hot's 2
    assert affordable(inherited, 6.0) == {"free", "hot", "warm", "band x"}
    assert affordable([], 5.0) == set()


def test_a_small_corpus_may_fit_fold_ranges_to_fewer_values():
    """Doses on a handful of pages: with 5 values per fold there is no range to fit, with 3
    (what `heatc finetune` allows) there is."""
    cv = CellValues()
    for d, vs in {
        15: [500],
        20: [850],
        21: [1000],
        24: [2000],
        25: [500, 500, 2000, 2500, 2550, 2550],
        32: [2500],
    }.items():
        cv.values.extend(vs)
        cv.per_document[d].extend(vs)
    key = CellKey("metformin", "number", "mg")
    assert range_options(cv, key) == []
    assert range_options(cv, key, min_fold_values=3)


def test_a_share_is_bounded_by_the_whole():
    """A percentage cell may take 100 % as its upper bound, whatever the tail of its values:
    free where none of its clean values exceeds it; where one does ("increased 150%") the
    bound costs it, in the corpus and as much again in unseen documents. Numbers never get
    the bound."""
    from heatc.learn.cells.ranges import FLAT_TAIL, PERCENT_WHOLE

    shares = _spread([20 + (i * 7) % 41 for i in range(60)], documents=30)
    options = range_options(shares, CellKey("margin", "percent", ""))
    capped = [o for o in options if o.bounds[1] == PERCENT_WHOLE]
    assert capped and all(o.rejected == 0 and o.expected == 0 for o in capped if (o.bounds[0] or 0) <= 20)
    growth = _spread([20 + (i * 7) % 41 for i in range(59)] + [150], documents=30)
    grown = [o for o in range_options(growth, CellKey("increased", "percent", "")) if o.bounds[1] == PERCENT_WHOLE]
    assert grown and all(o.rejected == 1 and o.expected == 1 for o in grown if (o.bounds[0] or 0) <= 20)
    assert all(o.unseen >= 1 + FLAT_TAIL for o in grown)
    assert not [o for o in range_options(shares, CellKey("margin", "number", "")) if o.bounds[1] == PERCENT_WHOLE]


def test_a_drug_whose_unitless_numbers_are_other_things_is_still_a_dose_word():
    """The share read in one quantity counts the values that carry a unit: a label's pKa, a
    trial's length and a patient's age after the drug's name do not make it no dose word."""
    doses = [f"Metformin hydrochloride {v} mg twice daily." for v in (500, 850, 1000, 500, 850, 2000)]
    other = ["The pKa of metformin hydrochloride 6.68 is basic.", "Metformin hydrochloride 29 weeks on."]
    other += ["Metformin hydrochloride 10 years old patients.", "Metformin hydrochloride 3 trials."]
    named = ["Metformin hydrochloride is a biguanide."] * 60
    profile = _profiles(["metformin hydrochloride"], doses + other + named)["metformin_hydrochloride"]
    assert profile.n == 10 and profile.dominant() == ("quantity0", 0.6)  # 6 of 10 doses: under two thirds
    assert unit_read(profile) and is_quantity(profile) == (True, "")
    # most of its values bare: no unit reading to trust, the one-in-two rate applies
    bare = _profiles(["metformin hydrochloride"], doses[:2] + other * 2 + named)["metformin_hydrochloride"]
    assert not unit_read(bare) and not is_quantity(bare)[0]


def test_number_words_that_restate_their_digits_keep_their_cells():
    from heatc.learn.heatmaps.aggregate import _restating_numerals

    texts = ["Payment is due within thirty (30) days of invoice."] * 8 + ["Notice of thirty (30) days."] * 4
    texts += ["Within thirty (45) days."] + ["Take two 5 mg tablets daily.", "Two 10 mg doses."] * 3
    lexicon = Lexicon().with_numerals()
    profiles = keyword_profiles(lexicon, ["thirty", "two"], texts)
    assert not is_quantity(profiles["thirty"])[0]  # one number: the quantity test calls it a label
    assert _restating_numerals(lexicon, profiles) == {"thirty"}  # 12 of 13 are 30; "two" binds 5 and 10


def test_the_quantity_test_leaves_references_out_and_terms_and_restatements_in():
    from heatc.learn.heatmaps.aggregate import quantity_cells
    from heatc.learn.text.evidence import CellKey

    groups = {
        "article_ref": "article",
        "notice": "keyword",
        "thirty": "numeral",
        "two": "numeral",
        "within": "constraint",
    }
    groups["glucose"] = "keyword"
    keys = [
        CellKey("article_ref", "number", ""),  # "Section 12": a reference, whatever its values
        CellKey("glucose", "number", ""),
        CellKey("notice", "number", "days", "consistent"),  # a term of a word that names no quantity
        CellKey("notice", "number", "days"),
        CellKey("thirty", "number", ""),  # restates its digits
        CellKey("two", "number", ""),  # "two 5 mg tablets"
        CellKey("two", "number", "mg"),
        CellKey("within", "number", "days"),
    ]
    kept = quantity_cells(keys, groups, {"notice", "thirty", "two", "within"}, {"thirty"})
    assert [(k.keyword, k.unit, k.check) for k in kept] == [
        ("glucose", "", "range"), ("notice", "days", "consistent"), ("thirty", "", "range"), ("two", "mg", "range"),
        ("within", "days", "range"),
    ]  # fmt: skip
    from heatc.learn.text.lexemes import Lexicon

    seed = Lexicon()
    refs = {lit.lower() for c in seed.categories if c.group == "article" for lit in c.literals}
    assert {"subsection", "annex", "attachment", "schedules", "rule"} <= refs
    # a consistency cell needs a keyword that names a term where it binds: "a pleasant
    # 42-year-old" restates an age, but pleasant names none
    groups["pleasant"] = "keyword"
    pleasant = CellKey("pleasant", "number", "years", "consistent")
    kept = quantity_cells([*keys, pleasant], groups, {"notice", "thirty", "two", "within", "pleasant"}, {"thirty"},
                          terms={"notice"})  # fmt: skip
    assert pleasant not in kept and CellKey("notice", "number", "days", "consistent") in kept


def test_a_term_is_a_keyword_that_fails_the_quantity_test_only_by_binding_rarely():
    from collections import Counter

    from heatc.learn.text.quantities import KeywordProfile, is_quantity, names_a_term

    days = "quantity9"  # (a reading of values with a unit: one quantity)
    notice = KeywordProfile(
        occurrences=2000, readings=Counter({days: 30}), values=[30.0] * 12 + [60.0] * 10 + [90.0] * 8
    )
    assert not is_quantity(notice)[0] and names_a_term(notice)  # binds one time in 67, always a period
    ages = KeywordProfile(occurrences=40, readings=Counter({"": 30}), values=[float(40 + i) for i in range(30)],
                          compounds=30)  # fmt: skip
    assert not is_quantity(ages)[0] and not names_a_term(ages)  # "a pleasant 42-year-old": parts of compounds
