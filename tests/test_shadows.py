"""Shadow phrases (`heatc.learn.text.shadows`): a keyword and the word beside it that make another
quantity are declared, so that the keyword's rule no longer reads their values."""

from __future__ import annotations

from support import REPO

from heatc.learn.teaching.plan import Plan, plan_lexicon
from heatc.learn.text.lexemes import Lexicon, lex_sentence
from heatc.learn.text.shadows import SHADOW_GROUP, shadow_phrases

KEYWORDS = ["pulse", "glucose", "hemoglobin", "chloride", "potassium"]


def _lexed(sentences: list[str], extra: list[str] = ()) -> tuple[list, dict]:
    lexicon = Lexicon().with_keywords(KEYWORDS).with_keywords(extra, group=SHADOW_GROUP)
    program = lexicon.program()
    return [lex_sentence(program, s) for s in sentences], lexicon.groups()


CLINIC = (
    [f"Pulse {60 + i} and regular." for i in range(30)]
    + [f"Glucose {90 + i} mg/dL." for i in range(30)]
    + [f"Hemoglobin {11 + i / 10:.1f} today." for i in range(30)]
    + [f"Chloride {98 + i % 8} mmol/L." for i in range(30)]
)


def test_a_word_that_makes_another_quantity_is_a_shadow():
    sentences = [
        *CLINIC,
        "The pulse width of 0.5 msec.",
        "Pulse width of 0.4 msec.",
        "A pulse width 0.45 msec.",
        "Hemoglobin A1c 6.5 last month.",
        "hemoglobin A1c 7.2.",
        "Hemoglobin A1c was 8.",
        "Given potassium chloride 20 mEq.",
        "Potassium chloride 40 mEq orally.",
        "potassium chloride 10 mEq.",
    ]
    lexed, groups = _lexed(sentences)
    found = dict(shadow_phrases(lexed, groups))
    assert found.keys() == {"pulse width", "hemoglobin a1c", "potassium chloride"}
    # "Hemoglobin A1c" lexes as "hemoglobin", "A", "1", "c": the rule read the 1
    assert found["hemoglobin a1c"] == 3


def test_a_word_that_leaves_the_value_what_it_was_is_none():
    sentences = [*CLINIC, "Glucose level 105 today.", "glucose level 98.", "Glucose level of 120.", "Radial pulse 72."]
    lexed, groups = _lexed(sentences * 2)
    assert shadow_phrases(lexed, groups) == []


def test_too_few_values_make_no_shadow():
    lexed, groups = _lexed([*CLINIC, "The pulse width of 0.5 msec.", "Pulse width of 0.4 msec."])
    assert shadow_phrases(lexed, groups) == []
    # nor a keyword with too few values of its own to compare with
    lexed, groups = _lexed([f"Pulse {60 + i}." for i in range(10)] + ["Pulse width of 0.5 msec."] * 5)
    assert shadow_phrases(lexed, groups) == []


def test_declared_the_phrase_lexes_in_the_keywords_place():
    plan = Plan.from_json(
        {"corpus_sha256": "", "documents": 1, "sentences": 1, "keywords": [["pulse", 30]], "candidates": [],
         "teacher_sentences": [], "heldout": [], "probe_cells": {}, "excluded": [],
         "shadows": [["pulse width", 3]]}
    )  # fmt: skip
    lexicon = plan_lexicon(plan)
    s = lex_sentence(lexicon.program(), "Pulse width of 0.5 msec, pulse 72.")
    # ("of" after a value is the seed lexicon's share word)
    assert [c for c in s.categories if c] == ["pulse_width", "share_of", "item_end", "pulse", "sentence_end"]
    assert lexicon.groups()["pulse_width"] == SHADOW_GROUP
    # a plan of an earlier heatc (no shadows) still reads
    old = plan.to_json()
    del old["shadows"]
    assert Plan.from_json(old).shadows == []


def test_fine_tuning_keeps_the_base_heatmaps_shadow_phrases():
    from collections import Counter

    from heatc.heatmap.format import load_heatmap
    from heatc.learn.finetuning.merge import base_lexicon, drop_rejecting

    base = load_heatmap(REPO / "heatmaps" / "medical.yaml")
    groups = base_lexicon(base).groups()
    assert groups["hemoglobin_a1c"] == SHADOW_GROUP and groups["hemoglobin"] == "keyword"
    doc = {
        "categories": {
            "pulse": {"kind": "keyword", "literals": ["pulse"]},
            "pulse_width": {"kind": "keyword", "literals": ["pulse width"]},
            "versed": {"kind": "keyword", "literals": ["versed"]},
            "five": {"kind": "other", "literals": ["five ("]},
        },
        "cells": [
            {"name": "pulse_value", "pair": ["pulse", "number"]},
            {"name": "versed_value", "pair": ["versed", "number"]},
        ],
    }
    kept, dropped = drop_rejecting(doc, ["versed_value"], Counter(versed_value=2))
    # the dropped cell's keyword goes; the shadow phrase and the number word stay
    assert dropped == 1 and sorted(kept["categories"]) == ["five", "pulse", "pulse_width"]


def test_a_phrase_a_rule_file_declares_is_left_to_it(tmp_path):
    from heatc.learn.config import LearnConfig, TeachingConfig
    from heatc.learn.teaching.plan import plan
    from heatc.learn.text.corpus import Document

    def learned(p) -> set[str]:  # keywords and shadow phrases
        return {k.lower() for k, _ in p.keywords} | {k for k, _ in p.shadows}

    text = " ".join([*CLINIC, "The pulse width of 0.5 msec.", "Pulse width of 0.4 msec.", "A pulse width 0.45 msec."])
    docs = [Document("a", text), Document("b", text)]
    config = LearnConfig(
        corpus=[tmp_path / "notes.txt"], output=tmp_path / "x.yaml", teaching=TeachingConfig(candidate_count=2)
    )
    assert {"pulse width", "glucose", "pulse"} <= learned(plan(config, docs))
    rules = tmp_path / "mine.heat"
    rules.write_text('class device other = "pulse width"\nclass sugar keyword = "glucose"\n')
    p = plan(
        LearnConfig(
            corpus=config.corpus, output=config.output, rules=[rules], teaching=TeachingConfig(candidate_count=2)
        ),
        docs,
    )
    assert "pulse" in learned(p) and not {"pulse width", "glucose"} & learned(p)
