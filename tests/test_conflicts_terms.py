"""Conflicts are kept per term (runtime/heatc_runtime/reports/terms.py, docs/conflicts.md): one
keyword names several terms, and two terms with two values are no conflict; a term stated
twice with two values is, however far its keyword stands from the number."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.conflicts import LEGAL, reference_conflicts

from heatc.verify.backends import module_info, run_document, wasm_checker
from heatc_runtime.backends.manifest import check_manifest
from heatc_runtime.errors import ModuleError
from heatc_runtime.reports.conflicts import NoConsistencyRulesError, chunk_bytes, find_conflicts, join_chunks
from heatc_runtime.reports.report import Verdict
from heatc_runtime.reports.terms import NAMED_AFTER, nearest_term, overlap, stem, term_words


def test_term_words_are_what_the_number_is_of():
    text = b"The Licensee fails to cure such breach within thirty (30) days after receiving written notice, or"
    start = text.index(b"cure")
    end = text.index(b"days") + 4
    # the match, four words before it, the clause after it up to the comma; no stop or number words;
    # the mark of its bound ("within": a deadline)
    assert term_words(text, start, end) == {
        "licensee", "fail", "cure", "breach", "receiv", "written", "notice", "#deadline",
    }  # fmt: skip
    # the head stops at the clause before; the words of a captured class value are left out
    text = b"Section 9. This Agreement is governed by the laws of the State of New York."
    start = text.index(b"governed")
    assert term_words(text, start, len(text) - 1, frozenset({"new", "york"})) == {"agree", "govern", "law", "state"}
    assert term_words("通知期限为十五日。".encode(), 0, 9) == frozenset()  # no ASCII words: nothing to tell apart
    assert [stem(w) for w in ("payment", "payable", "Payments", "pay", "governed", "governing")] == [
        "pay", "pay", "pay", "pay", "govern", "govern",
    ]  # fmt: skip


@given(st.frozensets(st.sampled_from("abcdefg")), st.frozensets(st.sampled_from("abcdefg")))
def test_overlap_is_symmetric_and_empty_words_join_any_term(a, b):
    assert overlap(a, b) == overlap(b, a) and 0 <= overlap(a, b) <= 1
    assert overlap(a, a) == 1
    if not a or not b:
        assert overlap(a, b) == 1
    assert nearest_term(a, []) is None
    assert nearest_term(a, [b]) == (0 if overlap(a, b) >= 0.5 else None)


def test_nearest_term_takes_the_closest_earlier_mention():
    words = frozenset({"pay", "invoice", "receipt"})
    earlier = [frozenset({"royalty", "quarter"}), frozenset({"pay", "quarter"}), frozenset({"invoice", "receipt"})]
    assert nearest_term(words, earlier) == 2


def conflicts(chunks):
    return [(c.channel, c.earlier.value, c.later.value) for c in wasm_checker(LEGAL).conflicts(chunks)]


def test_one_keyword_two_terms_is_no_conflict():
    chunks = [
        "If Distributor fails to cure any payment default within ten (10) days of the due date, Supplier may terminate.",
        "Either party may terminate if the other fails to cure a material breach within sixty (60) days after "
        "receiving written notice of the breach.",
    ]
    assert conflicts(chunks) == []
    # the same term restated with another value is one
    chunks.append("A material breach not cured within thirty (30) days after written notice of the breach ends it.")
    assert conflicts(chunks) == [("term_days_consistent.d[cure]", 60.0, 30.0)]


def test_a_keyword_far_before_its_number():
    """More than 6 lexemes between the keyword and the number (the rules' gaps are 12)."""
    chunks = [
        "Licensee shall notify Licensor in writing of any such MFN Terms within fifteen (15) calendar days of receipt.",
        "Licensee shall notify Licensor in writing of any such MFN Terms within thirty (30) calendar days of receipt.",
    ]
    assert conflicts(chunks) == [("term_days_consistent.d[notice]", 15.0, 30.0)]


# the legal rules' Chinese vocabulary, numbers and punctuation: text with no ASCII word
CJK_PIECES = ["付款", "支付", "通知", "书面通知", "纠正", "补救", "日", "天", "工作日", "利息", "利率", "佣金", "折扣",
              "适用", "管辖", "中华人民共和国", "香港", "内", "为", "三十", "十五", "15", "30", "5%", "百分之八", "。", "；", "，"]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(CJK_PIECES), max_size=24).map("".join), min_size=1, max_size=4))
def test_text_without_words_keeps_one_term_per_channel(chunks):
    """Where no mention has a word to tell terms apart (Chinese, numbers, punctuation), every
    channel is one term and the conflicts are exactly the stream's matches REJECTED by a
    channel (docs/semantics.md §4) — the legal rules have one consistency statement each."""
    assert all(len(r.channels) <= 1 for r in LEGAL.rules)
    data = chunk_bytes(chunks)
    stream, starts = join_chunks(data)
    events = run_document("reference", LEGAL, stream)[0]
    want = [
        (e.conflict.channel, e.conflict.start, e.start)
        for e in events
        if e.kind == "match" and e.verdict is Verdict.REJECTED and e.conflict is not None
    ]
    got = [
        (c.channel, starts[c.earlier.chunk] + c.earlier.start, starts[c.later.chunk] + c.later.start)
        for c in reference_conflicts(LEGAL, chunks)
    ]
    assert got == want


def test_manifest_records_the_consistency_statements():
    from heatc.wasm.codegen import compile_wasm
    from heatc.wasm.pack import pack

    manifest = compile_wasm(LEGAL, pack(LEGAL)).manifest
    rules = {r["name"]: r for r in manifest["rules"]}
    assert rules["governing_law_single"]["consistency"] == [{"capture": "law", "channel": "governing_law"}]
    (days,) = rules["term_days_consistent"]["consistency"]
    assert days["capture"] == "d" and days["key"] == "kind"
    assert ["payment", "term_days_consistent.d[payment]"] in days["per"]
    assert rules["article_number"]["consistency"] == []
    bad = {**manifest, "rules": [{**rules["governing_law_single"], "consistency": [{"capture": "law"}]}]}
    bad.pop("manifest_sha256", None)
    with pytest.raises(ModuleError, match=r"rules\[0\]\.consistency\[0\]\.channel: expected a value"):
        check_manifest(bad, "m.json")


def test_a_module_without_consistency_records_is_refused():
    import dataclasses

    old = dataclasses.replace(module_info(LEGAL), consistency={})
    with pytest.raises(NoConsistencyRulesError, match="rebuild it"):
        find_conflicts(old, [b"pay 30 days"], [])


def test_a_term_named_after_its_number():
    """ "N days' prior written notice" names its term after the number: restated with another N in
    another chunk it is a conflict (before, no rule read it), in words and digits or in digits."""
    chunks = [
        "Either party may terminate this Agreement upon thirty (30) days' prior written notice to the other party.",
        "Either party may terminate this Agreement upon sixty (60) days' prior written notice to the other party.",
    ]
    assert conflicts(chunks) == [("term_days_named_after.d[notice]", 30.0, 60.0)]
    digits = [c.replace("thirty (30)", "30").replace("sixty (60)", "60") for c in chunks]
    assert conflicts(digits) == [("term_days_named_after.d[notice]", 30.0, 60.0)]
    business = [c.replace("days'", "business days'") for c in digits]
    assert conflicts(business) == [("term_business_days_named_after.d[notice]", 30.0, 60.0)]
    # its words on either side name it: a notice period for another purpose is another term
    other = ["Licensor may change its prices upon 60 days' prior written notice to Licensee.", digits[0]]
    assert conflicts(other) == []
    assert wasm_checker(LEGAL).conflicts(chunks) == reference_conflicts(LEGAL, chunks)


def test_words_on_either_side_of_a_number_named_after_it():
    text = (
        b"Either party may terminate this Agreement upon thirty (30) days' prior written notice to the other party, and"
    )
    start = text.index(b"30")
    words = term_words(text, start, text.index(b"notice") + len(b"notice"))
    # the words before the number to the start of its sentence (the last four), the match's
    # after it and its clause's after the match (to the comma), each marked with its side; no
    # stop words ("may", "this", "upon", "prior", "other")
    assert words == {NAMED_AFTER, "<either", "<party", "<terminate", "<agree", ">written", ">notice", ">party"}
    assert overlap(words, words) == 1.0 and overlap(words, words - {"<either"}) == 0.0
    assert overlap(words, frozenset()) == 0.0  # a term named after its number is named by its words
    assert nearest_term(words, [words - {"<either"}, frozenset(), words]) == 2
    # a match that does not begin with its number reads its words as before
    assert NAMED_AFTER not in term_words(text, text.index(b"terminate"), text.index(b"days") + 4)


def test_a_number_read_by_two_rules_disagrees_once():
    """ "pay within 30 days after written notice": a payment term named before its number and a notice
    term named after it read one number; restated as 45, the two numbers disagree once."""
    chunks = ["Licensee shall pay the fee within 30 days after written notice of the audit.",
              "Licensee shall pay the fee within 45 days after written notice of the audit."]  # fmt: skip
    checker = wasm_checker(LEGAL)
    stream = join_chunks(chunk_bytes(chunks))[0]
    rules = {e.name for e in checker.scan(stream).events if e.kind == "match"}
    assert {"term_days_consistent", "term_days_named_after"} <= rules  # both read the numbers
    assert [(c.earlier.value, c.later.value) for c in checker.conflicts(chunks)] == [(30.0, 45.0)]
