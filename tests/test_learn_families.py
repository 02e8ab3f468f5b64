"""Keyword families: which drugs pool into one (`guards.keyword_families`, `guards.pooled_units`)
and which leave it again (`aggregate._dosed_alike`)."""

from __future__ import annotations

from heatc.learn.cells.guards import keyword_families, pooled_units
from heatc.learn.heatmaps.aggregate import _dosed_alike
from heatc.learn.text.evidence import CellKey
from heatc.learn.text.lexemes import Lexicon

DRUGS = ("coreg", "nexium", "plavix", "lovenox")


def _mg_drugs_and_durations() -> tuple[list[CellKey], dict[CellKey, int]]:
    """Four drugs dosed in mg, two of them also taken "for 3 months" / "for 10 days"."""
    cells = [CellKey(d, "number", "mg") for d in DRUGS]
    cells += [CellKey("plavix", "number", "months"), CellKey("lovenox", "number", "days")]
    support = dict.fromkeys(cells, 2) | {CellKey("plavix", "number", "mg"): 9, CellKey("lovenox", "number", "mg"): 5}
    return cells, support


def test_a_drug_pools_by_its_dose_units_not_by_how_long_it_is_taken():
    """ "Plavix 75 mg" and "Plavix for 3 months": the months are how long, not how much. Pooled
    by every unit it takes, Plavix was a family of its own ({mg, months}) and Lovenox another
    ({mg, days}) — no family at all, so no guard noticed "Plavix 75 g". Pooled by the units of
    the quantity it is written in most, both join the drugs dosed in mg."""
    cells, support = _mg_drugs_and_durations()
    units = pooled_units(cells, support)
    assert units["plavix"] == units["lovenox"] == units["coreg"] == frozenset({"mg"})
    groups = Lexicon().with_keywords(DRUGS).groups()
    assert keyword_families(cells, support, groups, 20, set()) == {"keywords_mg": sorted(DRUGS)}
    # a keyword written most in a duration keeps its dose unit too: days and mg are two quantities,
    # and the one it is written in most decides
    lasting = support | {CellKey("lovenox", "number", "days"): 30}
    assert pooled_units(cells, lasting)["lovenox"] == frozenset({"days"})
    # units on no ladder stay with the quantity written most ("insulin 10 units", "2 mg")
    insulin = [CellKey("insulin", "number", "units"), CellKey("insulin", "number", "mg")]
    assert pooled_units(insulin, {insulin[0]: 2, insulin[1]: 9})["insulin"] == frozenset({"units", "mg"})
    assert pooled_units(insulin, {insulin[0]: 9, insulin[1]: 2})["insulin"] == frozenset({"units", "mg"})


def test_a_word_that_can_have_no_cell_of_its_own_joins_a_family_whatever_its_support():
    """Words before numbers too rare to be the plan's keywords have no teacher's score, so no
    cell of their own ever runs; over all of MTSamples "Coumadin … mg" still has 22 values,
    more than a cell's support, and the rarity test kept Coumadin out of the mg family. Such
    words (`cellless`) join whatever their support; a plan keyword with that support does not."""
    cells = [CellKey(d, "number", "mg") for d in ("coumadin", "coreg", "nexium")]
    support = dict.fromkeys(cells, 3) | {cells[0]: 22}
    groups = Lexicon().with_keywords(["coumadin", "coreg", "nexium"]).groups()
    assert keyword_families(cells, support, groups, 20, set()) == {"keywords_mg": ["coreg", "nexium"]}
    assert keyword_families(cells, support, groups, 20, set(), cellless=["coumadin"]) == {
        "keywords_mg": ["coreg", "coumadin", "nexium"]
    }


def test_a_member_written_once_in_a_unit_its_familys_guard_rejects_leaves_the_family():
    """The guard `keywords_mg … grams` rejects every member's value in grams: a member the corpus
    writes in grams even once ("Tylenol 1 g") is a drug dosed in grams too, and it would charge
    the guard a false alarm for each such value, the whole family's guard priced out for one
    member. It leaves; the others stay."""
    lexicon = Lexicon().with_keywords(["celebrex", "keflex", "tylenol"])
    families = {"keywords_mg": ["celebrex", "keflex", "tylenol"]}
    seen = [CellKey(w, "number", "mg") for w in families["keywords_mg"]]
    texts = ["Keflex 500 mg daily. Celebrex 200 mg. Tylenol 650 mg.", "Tylenol 1 g at night."]
    assert _dosed_alike(families, seen, lexicon, texts) == {"keywords_mg": ["celebrex", "keflex"]}
    assert _dosed_alike(families, seen, lexicon, texts[:1]) == families
