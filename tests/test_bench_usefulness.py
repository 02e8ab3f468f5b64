"""bench/learn_usefulness.py's summary of where recall goes: the word each missed value
follows, and those words counted over splits (the benchmark itself learns for minutes)."""

from __future__ import annotations

import sys
from collections import Counter

from support import REPO

sys.path.insert(0, str(REPO / "bench"))
import usefulness_rows  # bench/, on the path above
import usefulness_text


def test_a_changed_value_is_put_under_the_word_before_it():
    assert usefulness_text.changed_word("Lasix 40 mg daily.", "Lasix 400 mg daily.") == "lasix"
    # linking words say nothing of which value it is
    assert (
        usefulness_text.changed_word("BUN 9, creatinine of 1.1, sodium", "BUN 9, creatinine of 0.11, sodium")
        == "creatinine"
    )
    assert usefulness_text.changed_word("The pulse was 72 and", "The pulse was 7.2 and") == "pulse"


def test_a_changed_unit_is_put_under_the_word_before_its_number():
    assert usefulness_text.changed_word("Proscar 5 mg a day", "Proscar 5 g a day") == "proscar"
    assert usefulness_text.changed_word("Fentanyl 50 mcg and", "Fentanyl 50 mg and") == "fentanyl"
    assert usefulness_text.changed_word("balloon inflated to 30 mL.", "balloon inflated to 30 L.") == "to"
    assert usefulness_text.changed_word("net 30 days after", "net 30 months after") == "net"


def test_a_value_with_no_word_before_it():
    assert usefulness_text.changed_word("40 mg daily", "40 g daily") == "(none)"


def _result(after: dict[str, Counter]) -> dict:
    impossible = {k: (0, sum(c.values())) for k, c in after.items()}
    return {
        "sentences": 1, "checked": 1, "flagged": 0, "valued": 1, "valued_flagged": 0, "rules": 1,
        "recall": impossible, "impossible": impossible, "missed": {k: [] for k in after},
        "missed_after": after, "alarms": [], "by_rule": {},
    }  # fmt: skip


def test_the_words_of_several_splits_are_counted_together_most_missed_first():
    one = _result({"unit swapped": Counter({"fentanyl": 9, "to": 4}), "value /10": Counter({"pulse": 2})})
    two = _result({"unit swapped": Counter({"fentanyl": 3, "loss": 8})})
    lines = usefulness_rows.missed_after_lines(usefulness_rows.pooled([one, two]), 2)
    assert lines == [
        "      missed unit swapped after: fentanyl 12, loss 8",
        "      missed value /10 after: pulse 2",
    ]
    assert usefulness_rows.missed_after_lines(one, 0) == []


def test_the_rules_are_listed_by_their_false_alarms_with_what_they_caught():
    one, two = _result({}), _result({})
    one["by_rule"] = {"minutes_amount": Counter({"false alarms": 3}), "pulse_value": Counter({"value x10": 2.5})}
    two["by_rule"] = {"minutes_amount": Counter({"false alarms": 1}), "days_amount": Counter({"false alarms": 2})}
    assert usefulness_rows.per_rule_lines(usefulness_rows.pooled([one, two]), 2) == [
        "      rule minutes_amount: 4 false alarms, caught nothing",
        "      rule days_amount: 2 false alarms, caught nothing",
    ]
    assert usefulness_rows.per_rule_lines(one, 3)[-1] == "      rule pulse_value: 0 false alarms, caught value x10 2.5"


def test_each_catch_and_flagged_sentence_is_put_under_the_rules_that_made_it():
    """Scanned with the hand-written rules: the catches of every kind, shared among the rules
    that made them, add up to the rule set's; every flagged sentence is some rule's."""
    import learn_usefulness

    from heatc.learn.text.corpus import Document

    text = (
        "Labs: potassium 4.1, sodium 138, glucose 95. The pulse was 72 and temperature 98.6. "
        "Potassium of 3.9 on repeat. Glucose 4500 on the meter, rechecked."
    )
    scanner = learn_usefulness.Scanner(REPO / "examples" / "medical.heat")
    r = learn_usefulness.evaluate("medical", scanner, [Document("a", text)], 100)
    assert r["flagged"] >= 1 and sum(c["false alarms"] for c in r["by_rule"].values()) >= r["flagged"]
    for kind, (caught, _) in r["impossible"].items():
        assert caught > 0 and round(sum(c[kind] for c in r["by_rule"].values()), 6) == caught


def test_the_word_after_a_unit_stays_in_its_clause():
    assert usefulness_text.word_after("30 days' written notice", len("30 days")) == "written"
    assert usefulness_text.word_after("net 30 days. The term", len("net 30 days")) == ""
    assert usefulness_text.word_after("within 30 days, and", len("within 30 days")) == ""
    assert usefulness_text.word_after("30 days (thirty)", len("30 days")) == "thirty"


class _Doc:
    def __init__(self, text: str):
        self.text = text


def test_a_contract_unit_swap_counts_where_neither_side_ever_takes_months():
    """In contracts the word before a number is mostly a preposition: a days → months swap
    makes a value impossible only where the corpus writes months neither after that word nor
    before the word after the unit; clinical notes keep the word before (a drug's name)."""
    import learn_usefulness  # bench/, on the path above

    corpus = [_Doc("terminate upon 90 months' notice. Payment is due net 30 days."), _Doc("within 6 months after")]
    context = learn_usefulness.unit_contexts("legal", corpus)

    def impossible(text: str) -> list[bool]:
        return [n for kind, _, n in learn_usefulness.corruptions("legal", text, context) if kind == "unit swapped"]

    assert impossible("shall pay within 30 days of invoice") == [False]  # "within … months" is written
    assert impossible("given 60 days' notice") == [False]  # "months' notice" is written
    assert impossible("due net 30 days.") == [True]  # neither "net … months" nor a word after
    medical = learn_usefulness.unit_contexts("medical", [_Doc("Tylenol 1 g daily")])
    swaps = [n for kind, _, n in learn_usefulness.corruptions("medical", "aspirin 81 mg daily", medical)
             if kind == "unit swapped"]  # fmt: skip
    assert swaps == [True]  # "g daily" is written, but aspirin never takes g


def test_the_plausibility_limits_as_rules_read_what_a_hand_writer_means():
    """`--ceiling`'s rules: the benchmark's own limits keyed on lab names, every value after the
    name or only the bare ones; a name of another quantity ("hemoglobin A1c") is no lab's."""
    import learn_usefulness
    import usefulness_ceiling

    from heatc.lang.compiler import compile_source
    from heatc.semantics.reference import scan

    def rejected(text: str, bare: bool) -> list[str]:
        program = compile_source(usefulness_ceiling.ceiling_rules(learn_usefulness.PLAUSIBLE, bare))
        events, _, _ = scan(program, text.encode())
        return sorted(e.name for e in events if e.kind == "match" and e.verdict.name == "REJECTED")

    for bare in (False, True):
        assert rejected("Pulse 7.2, BP 120/80.", bare) == ["pulse"]  # a pulse lives at 20 to 300
        assert rejected("Pulse 72, platelets 3,100,000.", bare) == ["platelets"]
        assert rejected("Hemoglobin A1c 0.9.", bare) == []  # another quantity, not hemoglobin
        assert rejected("Glucose 5.5.", bare) == []  # without its unit, mmol/L could be meant
    assert rejected("Calcium 600 mg daily.", bare=False) == ["calcium"]  # a supplement read as a lab
    assert rejected("Calcium 600 mg daily.", bare=True) == []
    assert rejected("Calcium 600.", bare=True) == ["calcium"]


def test_a_value_is_scaled_as_it_was_written():
    from decimal import Decimal

    assert usefulness_text.scaled("7.2", Decimal(10)) == "72"
    assert usefulness_text.scaled("0.05", Decimal(10)) == "0.5"
    assert usefulness_text.scaled("231,000", Decimal(10)) == "2,310,000"
    assert usefulness_text.scaled("4.2", Decimal("0.001")) == "0.0042"
    assert usefulness_text.replaced("pulse 72.", (6, 8), "7.2") == "pulse 7.2."


def test_restated_payment_terms_are_counted_against_the_first():
    import learn_usefulness
    import usefulness_ceiling

    texts = [
        "Payment is due within 30 days. Invoices are payable within 45 days. Fees paid within 30 days.",
        "Customer shall pay within thirty (30) days.",
    ]
    assert usefulness_ceiling.restated_terms(texts, learn_usefulness.TERM) == (2, 1)
