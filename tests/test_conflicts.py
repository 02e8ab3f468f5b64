"""Conflicts across retrieved chunks (docs/conflicts.md): one stream with boundaries no match
crosses, the same conflicts from the reference interpreter and both backends, each side
mapped to its chunk and span, and bad input refused with the reason."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.cli import heatc
from support.conflicts import LEGAL, reference_conflicts
from support.strategies import rule_sets, texts

import heatc_runtime as rt
from heatc import ir
from heatc.heatmap.build import compile_heatmap
from heatc.lang.compiler import compile_file
from heatc.verify.backends import native_checker, wasm_checker
from heatc_runtime.reports.conflicts import (
    BOUNDARY,
    BOUNDARY_LEXEMES,
    NoConsistencyRulesError,
)

EXAMPLES = REPO / "examples"


@settings(max_examples=200)
@given(rule_sets(), st.data())
def test_backends_find_the_reference_conflicts(g, data):
    """The conflict list is a function of the joined stream's events: the reference
    interpreter's, the WASM kernel's and the native core's are the same, and every side of
    every conflict lies inside its chunk and reads what the chunk says there."""
    program = compile_cached(g.source)
    if len(program.band_slots()) == len(program.channels):  # none, or magnitude bands alone
        with pytest.raises(NoConsistencyRulesError, match="no consistency rules"):
            wasm_checker(program).conflicts(["x"])
        return
    pool = texts(g.pieces).map(lambda b: b.decode("utf-8", errors="replace"))
    chunks = data.draw(st.lists(pool, min_size=1, max_size=4))
    want = reference_conflicts(program, chunks)
    assert wasm_checker(program).conflicts(chunks) == want
    assert native_checker(program).conflicts(chunks) == want
    encoded = [c.encode() for c in chunks]
    for c in want:
        for side in (c.earlier, c.later):
            assert 0 <= side.start <= side.end <= len(encoded[side.chunk])
            assert encoded[side.chunk][side.start : side.end].decode() == side.text
            assert chunks[side.chunk][side.char_start : side.char_end] == side.text
        # the side that set the channel completed first; overlapping matches may start in the
        # other order (a long match from offset 12 conflicting with a number at 17 it spans)
        assert (c.earlier.chunk, c.earlier.end) <= (c.later.chunk, c.later.end)
        assert 0 <= c.score <= 1


def test_a_match_is_no_conflict_with_itself():
    """Two statements of one rule on one channel: the first states it, as the first sets it
    in the stream (semantics §4), so "pay 7 12" conflicts with nothing and sets 7."""
    source = 'class k keyword = "pay"\nrule r { match k a:number ..3 b:number\n  lock c = a\n  lock c = b }\n'
    program = compile_cached(source)
    checker = wasm_checker(program)
    assert not checker.conflicts(["pay 7 12"])
    report = checker.conflicts(["pay 7 12", "pay 12 7"])
    assert [(c.earlier.chunk, c.earlier.value, c.later.chunk, c.later.value) for c in report] == [(0, 7.0, 1, 12.0)]
    assert report == reference_conflicts(program, ["pay 7 12", "pay 12 7"])
    verdicts = [e.verdict for e in checker.scan("pay 7 12. pay 12 7").events]
    assert verdicts == [rt.Verdict.CONFIRMED, rt.Verdict.REJECTED]  # the stream agrees


def test_the_boundary_outlasts_the_longest_gap():
    assert BOUNDARY_LEXEMES == ir.MAX_GAP + 1 and BOUNDARY == b"\x1e" * BOUNDARY_LEXEMES
    source = 'class k keyword = "pay"\nclass d unit = "days"\nrule r { match k ..64 v:number ..64 d\n  consistent v }\n'
    checker = wasm_checker(compile_cached(source))
    assert len(checker.conflicts(["pay 30 days", "pay 60 days"])) == 1
    # the longest gap may not bridge two chunks: "pay" ending one chunk, "45 days" starting the next
    report = checker.conflicts(["pay 30 days. pay", "45 days", "pay 60 days"])
    assert [(c.earlier.chunk, c.later.chunk, c.later.value) for c in report] == [(0, 2, 60.0)]
    one_stream = checker.scan(b"pay 30 days. pay 45 days").events
    assert [e.verdict for e in one_stream] == [rt.Verdict.CONFIRMED, rt.Verdict.REJECTED]


def test_contract_conflicts_across_and_within_chunks():
    checker = wasm_checker(LEGAL)
    chunks = [
        "1. Customer shall pay each invoice within thirty (30) days.",
        "7. Either party may terminate on sixty (60) days written notice. This Agreement is governed by the "
        "laws of the State of New York.",
        "9. Payments are due within 45 days. Notice: 60 days. Royalties of 5%; the royalty is 8% after 2025.",
        "12. Governing law: Delaware.",
    ]
    report = checker.conflicts(chunks)
    got = [(c.channel, c.earlier.chunk, c.earlier.value, c.later.chunk, c.later.value) for c in report]
    assert got == [
        ("term_days_consistent.d[payment]", 0, 30.0, 2, 45.0),
        ("rate_consistent.r[royalty]", 2, 5.0, 2, 8.0),  # within one chunk
        ("governing_law", 1, "new_york", 3, "delaware"),
    ]
    payment, royalty, law = report.conflicts
    assert payment.earlier.text == "invoice within thirty (30) days"  # the newer thread wins (semantics §3)
    assert payment.later.text == "Payments are due within 45 days" and not payment.same_chunk and royalty.same_chunk
    # score: heat × (1 + relative difference) / 2, classes differ fully
    assert payment.score == pytest.approx(0.9 * (1 + 15 / 45) / 2) and law.score == pytest.approx(0.85)
    assert report == native_checker(LEGAL).conflicts(chunks) == reference_conflicts(LEGAL, chunks)
    assert not checker.conflicts(chunks[:2])  # no disagreement: an empty list means none
    doc = report.to_json()
    assert doc["format"] == "heatc-conflicts" and doc["chunks"] == 4 and "governing_law" in doc["channels"]
    assert doc["conflicts"][2]["later"] == {
        "chunk": 3, "bytes": [4, 27], "chars": [4, 27], "text": "Governing law: Delaware", "value": "delaware",
        "captures": {"law": "delaware"},
    }  # fmt: skip


def test_character_spans_of_chinese_chunks():
    checker = wasm_checker(LEGAL)
    chunks = ["前言。书面通知应于十五日内送达。", "附件：通知期限为三十日。"]
    (c,) = checker.conflicts(chunks)
    assert chunks[c.later.chunk][c.later.char_start : c.later.char_end] == c.later.text == "通知期限为三十日"
    assert (c.later.start, c.later.char_start) == (len("附件：".encode()), len("附件："))


def test_bad_chunks_are_refused_with_the_reason():
    checker = wasm_checker(LEGAL)
    with pytest.raises(ValueError, match=r"chunk 1 is not UTF-8 text: byte 0xff at offset 3"):
        checker.conflicts(["fine", b"abc\xffdef"])
    with pytest.raises(ValueError, match="no chunks"):
        checker.conflicts([])
    with pytest.raises(TypeError, match=r"a list of texts .* not one text"):
        checker.conflicts("pay within 30 days")
    with pytest.raises(TypeError, match="chunk 0 is a int, not text"):
        checker.conflicts([3])
    with pytest.raises(ValueError, match="chunk 0 cannot be written as UTF-8"):
        checker.conflicts(["\ud800"])
    medical = wasm_checker(compile_file(EXAMPLES / "medical.heat"))
    with pytest.raises(NoConsistencyRulesError, match="'medical' has no consistency rules"):
        medical.conflicts(["Glucose 5000 mg/dL."])
    bands = wasm_checker(
        compile_cached(
            'ruleset bands\nclass m unit = "million"\nrule r { match v:number m consistent v within factor 10 }'
        )
    )
    with pytest.raises(NoConsistencyRulesError, match="other than magnitude bands"):
        bands.conflicts(["2 million", "900 million"])
    assert checker.conflicts([b"", "", "pay 30 days"]).chunks == 3  # empty chunks are chunks


def test_shipped_rules_and_heatmaps_carry_consistency_rules():
    """The legal and finance rules and heatmaps find the conflicts their users meet."""
    finance = compile_file(EXAMPLES / "finance.heat")
    cases = [
        (LEGAL, ["governed by the laws of Delaware.", "Governing law: New York."], "governing_law"),
        (finance, ["借款年利率为18%。", "合同另载年化利率为24%。"], "annual_rate_consistent.r[annual_rate]"),
        (compile_heatmap(REPO / "heatmaps" / "legal.yaml")[0],
         ["This Agreement is governed by the laws of Delaware.", "Governing law: New York."], "governing_law"),
        (compile_heatmap(REPO / "heatmaps" / "legal.yaml")[0],
         ["Royalties of 5% of Net Sales.", "The royalty is 8%."], "rate_consistent.r[rate_royalty]"),
        (compile_heatmap(REPO / "heatmaps" / "finance.yaml")[0],
         ["借款年利率为18%。", "合同另载年化利率为24%。"], "zh_stated_annual_rate"),
    ]  # fmt: skip
    for program, chunks, channel in cases:
        assert [c.channel for c in wasm_checker(program).conflicts(chunks)] == [channel]


def test_cli_chunks(tmp_path):
    a, b, bad = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "bad.txt"
    a.write_text("Customer shall pay within 30 days.")
    b.write_text("Payment is due within 60 days.")
    bad.write_bytes(b"pay \xc3( days")
    outputs = []
    for backend in ("reference", "wasm", "native"):
        r = heatc("scan", EXAMPLES / "legal.heat", "--chunks", a, b, "--json", "--backend", backend)
        assert r.exit_code == 3, r.output
        doc = json.loads(r.output)
        assert doc.pop("run")["chunk_names"] == [str(a), str(b)]
        outputs.append(doc)
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0] == wasm_checker(LEGAL).conflicts([a.read_text(), b.read_text()]).to_json()
    r = heatc(
        "scan", EXAMPLES / "legal.heat", "--chunk-separator", "\\n---\\n", input="pay within 30 days\n---\npay 60 days"
    )
    assert r.exit_code == 3 and "2 chunks: 1 conflict" in r.output and "chunk 1 [0:11] 'pay 60 days' = 60" in r.output
    r = heatc("scan", EXAMPLES / "legal.heat", "--chunks", a, a)
    assert r.exit_code == 0 and "2 chunks: 0 conflicts" in r.output
    r = heatc("scan", EXAMPLES / "legal.heat", "--chunk-separator", "|", input="pay within 30 days|pay within 60 days|"
              "pay within 90 days")  # fmt: skip
    assert r.exit_code == 0 and "3 chunks: 0 conflicts" in r.output, r.output  # a schedule is no conflict
    assert (
        "1 term stated with three values or more" in r.output and "d[payment]: 30, 60, 90 (chunks 0, 1, 2)" in r.output
    )
    r = heatc("scan", EXAMPLES / "legal.heat", "--chunks", a, bad)
    assert r.exit_code == 1 and f"{bad}: error: not UTF-8 text: byte 0xc3 at offset 4" in r.output
    r = heatc("scan", EXAMPLES / "medical.heat", "--chunks", a, b)
    assert r.exit_code == 1 and "has no consistency rules" in r.output and "Traceback" not in r.output
    r = heatc("scan", EXAMPLES / "legal.heat", a, b)
    assert r.exit_code == 1 and "give one text FILE" in r.output
    r = heatc("scan", EXAMPLES / "legal.heat", "--chunks", a, "--chunk-separator", "x")
    assert r.exit_code == 1 and "not both" in r.output


def test_a_number_written_out_and_restated_otherwise_is_a_conflict():
    """A number written out and restated otherwise ("thirty (60) days") disagrees with itself — a conflict of
    its own, words the earlier side, digits the later, in one chunk, on every backend."""
    chunks = [
        "Payment is due within thirty (60) days of invoice.",
        "Insurance of not less than One Million Dollars ($2,000,000) per occurrence, and notice of "
        "one hundred and eighty (180) days; a rate of ten percent (12%).",
        "Delivery within forty-five (45) days and sixty (60) days; a limit of Two Million Dollars ($2,000,000).",
        "five (45) days after notice.",  # "forty-" may have ended the chunk before: not read
        "Year One (1998) ends with a payment of Six (6,000,000) Million Dollars.",  # a period's year; the scale's
        "thirty (90) days of each run.",  # opens the chunk, but no longer number ends in "thirty" and is 90
        "a fee of One Hundred and No/100 Dollars ($200) per day; Five Thousand and 00/100 Dollars ($5,000.00).",
        "interest of one and one-half percent (1-1/4%) per month, or one and one-half percent (1-1/2%) per year.",
    ]
    report = wasm_checker(LEGAL).conflicts(chunks)
    got = [(c.earlier.chunk, c.earlier.text, c.earlier.value, c.later.text, c.later.value) for c in report]
    assert got == [
        (0, "thirty", 30.0, "60", 60.0),
        (1, "One Million", 1e6, "2,000,000", 2e6),
        (1, "ten", 10.0, "12", 12.0),
        (5, "thirty", 30.0, "90", 90.0),
        (6, "One Hundred and No/100", 100.0, "200", 200.0),
        (7, "one and one-half", 1.5, "1-1/4", 1.25),  # the whole a rule reads, the fraction restated
    ]
    thirty = report.conflicts[0]
    # the first match that reads it names it: the payment term's channel here; a match that
    # states no consistency (the ten percent) names its rule
    assert thirty.same_chunk and thirty.channel == "term_days_consistent.d[payment]"
    assert report.conflicts[2].channel == "percent_written_out.restated"
    assert chunks[0].encode()[thirty.later.start : thirty.later.end] == b"60"
    assert thirty.score == pytest.approx(0.9 * (1 + 30 / 60) / 2)
    assert report == native_checker(LEGAL).conflicts(chunks) == reference_conflicts(LEGAL, chunks)


def test_a_term_stated_with_three_values_is_a_schedule_not_a_term():
    """Two values of one term are a conflict; where its mentions carry three or more, the words name
    no one term (a schedule of cure periods), and no conflict of that term is reported."""
    two = ["Licensee shall cure such failure within ten (10) days.", "Licensee shall cure such failure within 30 days."]
    three = [*two, "Licensee shall cure such failure within ninety (90) days."]
    checker = wasm_checker(LEGAL)
    assert [(c.earlier.value, c.later.value) for c in checker.conflicts(two)] == [(10.0, 30.0)]
    assert not checker.conflicts(two).schedules
    report = checker.conflicts(three)
    assert not report  # no conflict; the term is reported apart, as a schedule
    (schedule,) = report.schedules
    assert schedule.channel == "term_days_consistent.d[cure]" and schedule.values == (10.0, 30.0, 90.0)
    assert [m.chunk for m in schedule.mentions] == [0, 1, 2] and schedule.mentions[2].text.endswith("(90) days")
    doc = report.to_json()
    assert doc["version"] == 2 and doc["conflicts"] == [] and doc["schedules"][0]["values"] == [10.0, 30.0, 90.0]
    # a restatement in words and digits stands on its own
    assert [c.later.value for c in checker.conflicts([*three, "cure within thirty (60) days"])] == [60.0]
    assert checker.conflicts(three) == native_checker(LEGAL).conflicts(three) == reference_conflicts(LEGAL, three)


def test_a_floor_a_deadline_and_a_cap_are_three_terms():
    """A floor ("at least twenty (20) days") and a deadline ("within five (5) days") are two terms
    however many words they share; two deadlines of the same words are one."""
    checker = wasm_checker(LEGAL)
    floor_and_deadline = ["Franchisee shall notify us at least twenty (20) days before opening.",
                          "Franchisee shall notify us in writing within five (5) days."]  # fmt: skip
    assert not checker.conflicts(floor_and_deadline)
    two_deadlines = ["Franchisee shall notify us within twenty (20) days.", "Franchisee shall notify us within 5 days."]
    assert [(c.earlier.value, c.later.value) for c in checker.conflicts(two_deadlines)] == [(20.0, 5.0)]
    from heatc_runtime.reports.terms import bound_of, term_words

    text = b"Licensee shall pay no later than sixty (60) days; fees not to exceed 30 days; at least 10 days"
    marks = [bound_of(term_words(text, text.index(k), text.index(k) + len(k))) for k in
             (b"pay no later than sixty (60) days", b"fees not to exceed 30 days", b"at least 10 days")]  # fmt: skip
    assert marks == ["#deadline", "#cap", "#floor"]


def test_number_words_that_open_a_chunk_are_read_where_no_longer_number_ends_in_them():
    from heatc_runtime.reports.conflicts import _tail_of

    assert _tail_of(5, 45) and _tail_of(30, 130) and _tail_of(200_000, 1_200_000) and _tail_of(5, 105)
    assert not _tail_of(30, 90) and not _tail_of(45, 45) and not _tail_of(60, 30) and not _tail_of(1.5, 11.5)


def test_number_words_are_read_as_the_number_they_name():
    from heatc_runtime.reports.restated import restatements, written_number

    named = {"thirty": 30, "forty-five": 45, "forty five": 45, "one hundred and eighty": 180, "ONE MILLION": 10**6,
             "fourteen million, eight hundred sixty two thousand": 14_862_000, "twelve": 12, "ninety-nine": 99}  # fmt: skip
    assert {w: written_number(w) for w in named} == named
    for bad in ("thirty forty", "five six", "hundred", "and", "million thousand", "thousand million", "ten five"):
        assert written_number(bad) is None, bad
    text = b"within thirty (30) days, terms and sixty ( 60 ) days, ten percent (10%), hundred and eighty (180) days"
    text += b"; one and one-half percent (1.5%), eight and three quarters percent (17.5%)"
    got = [(text[a:b], said, digits) for a, b, _, _, said, digits in restatements(text)]
    # "hundred and eighty" is no number (its "one" is missing): passed over, not read as eighty
    assert got == [
        (b"thirty", 30, 30.0), (b"sixty", 60, 60.0), (b"ten", 10, 10.0), (b"one and one-half", 1.5, 1.5),
        (b"eight and three quarters", 8.75, 17.5),
    ]  # fmt: skip
