"""Cells read after a value's unit: "5 mg daily", "0.5 mg of Versed". A unit its word is
never read after is a slip of the unit's scale ("Proscar 5 g daily"), which a guard
`v:number grams ..3 daily` rejects."""

from pathlib import Path

from heatc.heatmap.build import compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.heatmap.lower import lower
from heatc.lang.unparse import format_file
from heatc.learn.cells.guards import unit_guards
from heatc.learn.text.discovery import follower_words
from heatc.learn.text.evidence import CellKey, candidate_cells, occurrences
from heatc.learn.text.lexemes import FOLLOWER_GROUP, Lexicon, lex_sentence
from heatc.verify.backends import run_document

GOOD = (Path(__file__).parent / "heatmaps" / "good.yaml").read_text()


def _after(keyword: str, unit: str) -> CellKey:
    return CellKey(keyword, "number", unit, after=True)


def test_follower_words_are_the_words_after_a_value_and_its_unit():
    """The first word past the unit, stop words skipped, an abbreviation with dots one word;
    a word that stands before the number or past punctuation is none."""
    texts = [
        "Lasix 40 mg daily for edema.",
        "Zocor 20 mg at bedtime.",
        "Celebrex 200 mg p.o. b.i.d. with food.",
        "Aspirin 81 mg daily.",
        "Daily 5 mg, then rest.",
    ]
    got = follower_words(Lexicon(), texts, min_count=1, max_words=10)
    assert got[0] == "daily" and set(got) == {"daily", "bedtime", "p.o."}
    assert follower_words(Lexicon(), texts, min_count=2, max_words=10) == ["daily"]


def test_a_value_read_before_a_word_is_a_cell_of_its_unit_and_the_word():
    lexicon = Lexicon().with_keywords(["p.o.", "daily"], group=FOLLOWER_GROUP, kind="other")
    groups = lexicon.groups()
    s = lex_sentence(lexicon.program(), "Proscar 5 mg p.o. daily.")
    keys = {k for occ in occurrences(s, groups, after=True) for k in occ.keys}
    po = _after("p_o", "mg")
    assert po in keys and po.name == "mg_then_p_o" and po.pattern() == "v:number mg ..3 p_o"
    assert not any(k.after for occ in occurrences(s, groups) for k in occ.keys)  # only when asked
    # past "of" too, not past another value or unit
    s = lex_sentence(lexicon.program(), "She took 40 mg of it daily, 5 mg 10 cm daily.")
    got = [k for occ in occurrences(s, groups, after=True) for k in occ.keys if k.after]
    assert got == [_after("daily", "mg"), _after("daily", "cm")]  # not 5 mg: a value stands between
    lexed = [lex_sentence(lexicon.program(), t) for t in ["Lasix 40 mg daily."] * 3]
    assert _after("daily", "mg") in candidate_cells(lexed, groups, 3, after=True)
    assert _after("daily", "mg") not in candidate_cells(lexed, groups, 3)


def test_a_guard_after_the_unit_takes_only_its_own_scale():
    """`… mg … daily` guards grams (a rung of mg's ladder) but not a unit of another quantity
    a keyword shows as a swap, nor one the word is read after; a word read after days guards
    no business days (the same rung)."""
    groups = {"daily": FOLLOWER_GROUP, "aspirin": "keyword", "lasix": "keyword", "receipt": FOLLOWER_GROUP}
    candidates = [_after("daily", "mg"), CellKey("aspirin", "number", "mg"), CellKey("aspirin", "number", "grams"),
                  CellKey("lasix", "number", "mg"), CellKey("lasix", "number", "grams"),
                  CellKey("aspirin", "number", "cm"), CellKey("lasix", "number", "cm"),
                  _after("receipt", "days"), CellKey("aspirin", "number", "days"), CellKey("lasix", "number", "days"),
                  CellKey("aspirin", "number", "business_days"), CellKey("lasix", "number", "business_days")]  # fmt: skip
    guards = unit_guards(candidates, [_after("daily", "mg"), _after("receipt", "days")], groups)
    assert _after("daily", "grams") in guards and _after("daily", "grams").name == "grams_then_daily"
    assert _after("daily", "cm") not in guards  # another quantity
    assert not any(g.keyword == "receipt" for g in guards)  # days and business days: one rung
    taken = unit_guards([*candidates, _after("daily", "grams")], [_after("daily", "mg")], groups)
    assert _after("daily", "grams") not in taken


def test_a_cell_after_the_unit_lowers_to_value_unit_gap_word(tmp_path):
    text = GOOD.replace(
        "  period:",
        "  daily: {kind: other, literals: [daily]}\n  mg: {kind: unit, literals: [mg]}\n"
        "  grams: {kind: unit, literals: [g]}\n  period:",
    ).replace(
        "cells:\n", "cells:\n  - {pair: [number, daily], unit: grams, gap: 3, score: 0.9, support: 40, range: [0, 0]}\n"
    )
    path = tmp_path / "after.yaml"
    path.write_text(text)
    assert "match v:number grams ..3 daily\n" in format_file(lower(load_heatmap(path)).tree)
    program, _lowered, _hm = compile_heatmap(path)
    doc = b"Proscar 5 g daily. Lasix 40 mg daily. Ancef 1 g, then 2 tablets daily."
    for backend in ("reference", "wasm"):
        events = run_document(backend, program, doc)[0]
        got = [(doc[e.start : e.end].decode(), e.verdict.name) for e in events if e.kind == "match"]
        assert ("5 g daily", "REJECTED") in got
        assert not any("40 mg" in t for t, _ in got)


def test_a_guard_after_the_unit_needs_twice_the_support_and_no_value_in_the_corpus():
    """`_guard_cells`: a guard read after the unit stands for cells of 2 × min_support values
    at least, and none where the corpus writes its unit before its word even once."""
    from heatc.learn.heatmaps.aggregate import _guard_cells
    from heatc.learn.text.evidence import CellValues

    def values(n: int) -> CellValues:
        return CellValues(values=[5.0] * n)

    cell, guard = _after("daily", "mg"), _after("daily", "grams")
    scores, strengths = {cell: 0.5}, {cell: (2.0, 9)}
    kept = _guard_cells({guard: [(cell, 0.4)]}, {cell: values(40), guard: values(0)}, scores, strengths, 20)
    assert [g.key for g in kept] == [guard] and kept[0].worth == 40 * 0.4 / 2
    assert _guard_cells({guard: [(cell, 0.4)]}, {cell: values(39), guard: values(0)}, scores, strengths, 20) == []
    assert _guard_cells({guard: [(cell, 0.4)]}, {cell: values(80), guard: values(1)}, scores, strengths, 20) == []
    # a keyword's guard needs the support a cell needs, and is priced when the corpus writes its unit
    before, guarded = CellKey("zocor", "number", "mg"), CellKey("zocor", "number", "grams")
    kept = _guard_cells(
        {guarded: [(before, 0.4)]}, {before: values(20), guarded: values(1)}, {before: 0.5}, {before: (2.0, 9)}, 20
    )
    assert [g.key for g in kept] == [guarded]


def test_the_words_read_after_the_unit_leave_the_other_cells_couplings_alone():
    """`_add_probes`: a probe's couplings, indexed by the teacher's lexemes, are read for the
    cells after the unit from the text lexed with the new words ("p.o." one lexeme where the
    teacher saw four) and added to their evidence alone — the pooled distributions that score
    every other cell, and those cells' evidence, stay as they were."""
    from heatc.learn.cells.couplings import Couplings
    from heatc.learn.heatmaps.aggregate import _add_probes

    base = Lexicon().with_keywords(["lasix"])
    full = base.with_keywords(["p.o."], group=FOLLOWER_GROUP, kind="other")
    text = "Lasix 40 mg p.o. daily."
    labelled = base.program()
    n = len(lex_sentence(labelled, text).lexemes)  # lasix 40 mg p . o . daily .
    value = 1
    rec = {"text": text, "probes": [[value, [None if k == value else 1.0 + k / 10 for k in range(n)]]]}
    couplings = Couplings()
    _add_probes(couplings, rec, labelled, base.groups(), labelled, None)
    before = (list(couplings.pooled), {k: list(v) for k, v in couplings.evidence.items()})
    assert CellKey("lasix", "number", "mg") in couplings.evidence
    po = _after("p_o", "mg")
    _add_probes(couplings, rec, full.program(), full.groups(), labelled, {po}, after=True)
    assert couplings.pooled == before[0]
    assert {k: v for k, v in couplings.evidence.items() if k != po} == before[1]
    assert len(couplings.evidence[po]) == 1


def test_a_base_guards_word_is_plain_text_to_fine_tuning_and_its_guard_is_kept(tmp_path):
    """`merge.base_lexicon`: a word the base reads only after a unit ("twice") is no category of
    the domain's plan (it would stop the domain's keyword discovery); `merge_cells` declares it
    again, from the base, for the guard it keeps."""
    from heatc.learn.finetuning.merge import base_lexicon, merge_cells

    text = GOOD.replace(
        "  period:",
        "  twice: {kind: other, literals: [twice]}\n  mg: {kind: unit, literals: [mg]}\n"
        "  grams: {kind: unit, literals: [g]}\n  period:",
    ).replace(
        "cells:\n",
        "cells:\n  - {name: grams_then_twice, pair: [number, twice], unit: grams, gap: 3, score: 0.9, support: 40,"
        " range: [0, 0]}\n",
    )
    path = tmp_path / "base.yaml"
    path.write_text(text)
    start = base_lexicon(load_heatmap(path))
    assert "twice" not in start.groups() and "grams" in start.groups()
    import yaml

    base_doc = yaml.safe_load(text)
    base_doc["cells"] = [c for c in base_doc["cells"] if c.get("name") == "grams_then_twice"]
    domain = {"categories": {}, "cells": []}
    merged, kept, _, _ = merge_cells(domain, base_doc, start, keep_unused=True)
    assert kept == ["grams_then_twice"]
    assert merged["categories"]["twice"] == {"kind": "other", "literals": ["twice"]}
