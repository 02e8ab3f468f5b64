"""Model and part names ("PCF-160L", "Olympus CF 20L") declared as words of their own, so
that learning reads no value in their digits (`heatc.learn.text.model_names`)."""

from __future__ import annotations

from pathlib import Path

from heatc.learn.config import LearnConfig, TeachingConfig
from heatc.learn.heatmaps.emit import declared_categories
from heatc.learn.teaching.plan import Plan, plan, plan_lexicon
from heatc.learn.text.corpus import Document
from heatc.learn.text.evidence import CellKey, collect_values
from heatc.learn.text.lexemes import Lexicon
from heatc.learn.text.model_names import MODEL_NAME_CLASS, model_names

SCOPES = "The Olympus CF 20L video endoscope and the PCF-160L were used; lens SN60WF placed."
NOT_NAMES = "HR 80BPM, P 68BPM, NC 2L, FVC 2.17L, USD 500M and Vitals 98F today."


def test_a_model_name_is_capitals_then_digits_with_capitals_glued_on():
    found = model_names([SCOPES, NOT_NAMES], known=["HR", "usd"])
    # not a quantity's name written before its value ("HR" is known, "P" one letter), not a
    # one-digit or decimal value ("NC 2L", "FVC 2.17L"), not a word and a value ("Vitals 98F")
    assert found == ["CF 20L", "PCF-160L", "SN60WF"]
    assert model_names([SCOPES], known=["pcf-160l"]) == ["CF 20L", "SN60WF"]


def test_a_declared_model_name_holds_no_value():
    lexicon = Lexicon().with_keywords(["blood loss"])
    key = CellKey("blood_loss", "number", "liter_symbol")
    texts = ["Blood loss (PCF-160L) 1.2 L.", "Blood loss (CF 20L) 0.4 L."]
    assert sorted(collect_values(lexicon, [key], texts)[key].values) == [20.0, 160.0]
    declared = lexicon.with_model_names(model_names(texts))
    assert sorted(collect_values(declared, [key], texts)[key].values) == [0.4, 1.2]


def test_names_join_the_class_a_base_heatmap_declares():
    base = Lexicon().with_model_names(["PCF-160L"])
    more = base.with_model_names(["pcf-160l", "SN60WF", "SN60WF"])
    assert more.by_name()[MODEL_NAME_CLASS].literals == ("PCF-160L", "SN60WF")
    assert [c.name for c in more.categories].count(MODEL_NAME_CLASS) == 1
    assert Lexicon().with_model_names([]).categories == Lexicon().categories
    # a keyword "model name" takes another name than the class's
    assert MODEL_NAME_CLASS not in Lexicon().with_keywords(["model name"]).by_name()


def test_the_plan_declares_the_model_names_and_the_heatmap_keeps_them():
    notes = [f"Blood loss {v} L today with the PCF-160L. {SCOPES}" for v in (0.2, 0.5, 1.1, 0.8, 0.3, 1.4)]
    docs = [Document(f"d{i}", text) for i, text in enumerate(notes)]
    config = LearnConfig(
        corpus=[], output=Path("x.yaml"), teaching=TeachingConfig(label_sentences=0, candidate_count=3)
    )
    p = plan(config, docs)
    assert p.model_names == ["CF 20L", "PCF-160L", "SN60WF"]
    lexicon = plan_lexicon(Plan.from_json(p.to_json()))
    assert lexicon.by_name()[MODEL_NAME_CLASS].literals == ("CF 20L", "PCF-160L", "SN60WF")
    assert MODEL_NAME_CLASS in declared_categories(lexicon, [])


def test_fine_tuning_keeps_the_base_heatmaps_names_and_adds_the_domains():
    from heatc.heatmap.format import load_heatmap
    from heatc.learn.finetuning.merge import base_lexicon

    repo = Path(__file__).resolve().parent.parent
    start = base_lexicon(load_heatmap(repo / "heatmaps" / "medical.yaml"))
    held = start.by_name()[MODEL_NAME_CLASS].literals
    assert "PCF-160L" in held and "CF 20L" in held
    known = [lit for c in start.categories for lit in c.literals]
    found = model_names(["The PCF-160L again, and a Vitek QV-200S pump at 2 L per hour."], known)
    assert found == ["QV-200S"]
    merged = start.with_model_names(found).by_name()[MODEL_NAME_CLASS].literals
    assert merged == (*held, "QV-200S")
