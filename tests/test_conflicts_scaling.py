"""Conflicts scale as O(n log n) (docs/conflicts.md): the work grows about twice when the
mentions double — for many chunks, for clauses that share most of their words (the term
index at its cap) and for one large chunk — and the term index answers what comparing every
earlier mention answers, up to its cap. Work is counted (function calls, bytes read), never
timed."""

import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO
from support.cli import heatc
from support.conflicts import LEGAL

from heatc.verify.backends import module_info, wasm_checker
from heatc_runtime.reports.audit import char_offsets
from heatc_runtime.reports.conflicts import chunk_bytes, find_conflicts, join_chunks
from heatc_runtime.reports.terms import MAX_WORD_SETS, NAMED_AFTER, TermIndex, nearest_term

sys.path.insert(0, str(REPO / "bench"))
from conflicts import distinct_word as word  # (the benchmark's own words: its inputs' shapes)

CHECKER = wasm_checker(LEGAL)
MODULE = module_info(LEGAL)


def two_terms_a_chunk(n: int) -> list[str]:
    return [
        f"Payment shall be made within {30 * (1 + i % 2)} days after receipt of invoice. "
        f"Licensee shall give notice within {10 * (1 + i % 3 // 2)} days of any change."
        for i in range(n // 2)
    ]


def a_clause_each(n: int) -> list[str]:
    """n clauses of one channel that share most of their words, each with two of its own."""
    return [
        f"Payment of the {word(i)} invoice and {word(i + 7)} fee shall be made within {30 * (1 + i % 2)} days "
        "after receipt of the invoice."
        for i in range(n)
    ]


def one_chunk(n: int) -> list[str]:
    """One chunk of n mentions, numbers written out and restated among them."""
    return [
        " ".join(f"Payment is due within {30 * (1 + i % 2)} days; notice within thirty (60) days." for i in range(n))
    ]


def calls(fn) -> int:
    """The Python and C function calls `fn()` makes: a count of its steps that no load changes."""
    n = 0

    def count(frame, event, arg):
        nonlocal n
        n += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def prepared(chunks: list[str]):
    data = chunk_bytes(chunks)
    return data, CHECKER.scan(join_chunks(data)[0]).events


def test_the_work_doubles_when_the_mentions_double():
    """Comparing each mention with every earlier one of its channel made the steps grow x3.7 per
    doubling here (x4 in the limit); 400 mentions are past the term index's cap."""
    assert MAX_WORD_SETS < 400
    for shape in (two_terms_a_chunk, a_clause_each, one_chunk):
        steps = []
        for n in (200, 400):
            data, events = prepared(shape(n))
            report = find_conflicts(MODULE, data, events)
            assert len(report) > n // 4  # the shape has conflicts: the work is not skipped
            steps.append(calls(lambda: find_conflicts(MODULE, data, events)))  # noqa: B023
        assert steps[1] / steps[0] < 2.3, (shape.__name__, steps)


class Counted(bytes):
    """A chunk that counts the bytes read of it by slicing (and, below, by numpy)."""

    read = 0

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(key, slice):
            Counted.read += len(out)
        return out


def test_a_large_chunk_is_read_about_once(monkeypatch):
    """Character offsets and the look before number words that open a chunk were computed from
    the chunk's start for every mention: a 21 MB chunk ran for minutes (the bytes read grew x4
    per doubling here). Now they grow as the chunk does."""
    frombuffer = np.frombuffer

    def counted_frombuffer(buffer, *args, **kwargs):
        Counted.read += len(buffer)
        return frombuffer(buffer, *args, **kwargs)

    monkeypatch.setattr(np, "frombuffer", counted_frombuffer)
    read = []
    for n in (400, 800):
        (data,), events = prepared(one_chunk(n))
        Counted.read = 0
        report = find_conflicts(MODULE, [Counted(data)], events)
        assert len(report) > n // 2
        read.append(Counted.read)
    assert read[1] / read[0] < 2.3, read


def test_the_conflicts_are_those_of_every_pair_compared():
    """The report beside the comparison of every earlier mention (terms.nearest_term), on shapes
    past the cap where the first word sets still decide."""
    for chunks in (two_terms_a_chunk(300), a_clause_each(300), [" ".join(two_terms_a_chunk(200))]):
        data, events = prepared(chunks)
        report = find_conflicts(MODULE, data, events)
        got = [(c.channel, c.earlier.chunk, c.earlier.start, c.later.chunk, c.later.start) for c in report]
        assert got == every_pair_compared(chunks), chunks[0][:40]


def every_pair_compared(chunks):
    """The days conflicts as docs/conflicts.md defines them, each mention compared with every
    earlier one of its channel (no restatements, no schedules: the shapes have neither)."""
    from heatc_runtime.reports.conflicts import _mentions
    from heatc_runtime.reports.terms import term_words

    data, events = prepared(chunks)
    _, starts = join_chunks(data)
    seen: dict[str, list] = {}  # channel → [(words, first mention, value)]
    out = []
    for e in events:
        for channel, value in _mentions(MODULE, e):
            i = max(k for k, s in enumerate(starts) if s <= e.start)
            words = term_words(data[i], e.start - starts[i], e.end - starts[i])
            known = seen.setdefault(channel, [])
            at = nearest_term(words, [w for w, _, _ in known])
            first = (i, e.start - starts[i], value) if at is None else known[at][1]
            known.append((words, first, value))
            if first[2] != value:
                out.append((channel, first[0], first[1], i, e.start - starts[i]))
    return out


WORDS = st.frozensets(st.sampled_from(["pay", "invoice", "receipt", "notice", "cure", "breach", "fee"]), max_size=5)
BOUND = st.sampled_from([None, "#cap", "#floor", "#deadline"])
# some named after their number (terms.NAMED_AFTER): the same words or none
MARK = st.sampled_from([None, None, None, NAMED_AFTER])
WORD_SETS = st.lists(
    st.tuples(WORDS, BOUND, MARK).map(lambda t: t[0] | {m for m in t[1:] if m}),
    max_size=40,
)


@settings(max_examples=300)
@given(WORD_SETS)
def test_the_term_index_answers_what_comparing_every_mention_answers(word_sets):
    index = TermIndex()
    terms: list[int] = []  # each mention's term, as comparing every earlier mention finds it
    for i, words in enumerate(word_sets):
        at = nearest_term(words, word_sets[:i])
        terms.append(max(terms, default=-1) + 1 if at is None else terms[at])
        assert index.join(words) == terms[-1], (i, word_sets[: i + 1])
    assert index.capped == 0 and index.terms == max(terms, default=-1) + 1


@settings(max_examples=100)
@given(WORD_SETS, st.integers(1, 3))
def test_past_its_cap_the_index_counts_what_it_left_out(word_sets, cap):
    """With a cap of 1 to 3 word sets per word: where the index first answers otherwise than the
    full comparison, it counted the mention."""
    index, exact = TermIndex(cap), TermIndex(10**9)
    for words in word_sets:
        before = index.capped
        if index.join(words) != exact.join(words):
            # the first answer that differs (after it the two number their terms apart)
            assert index.capped == before + 1, words
            break
    assert exact.capped == 0


def test_a_capped_mention_is_reported():
    index = TermIndex(cap=2)
    for words in ({"pay", "a"}, {"pay", "b"}, {"pay", "c"}):
        index.join(frozenset(words))
    assert index.capped == 0  # the third is compared with the first two: all there is
    index.join(frozenset({"pay", "d"}))
    assert index.capped == 1  # "pay" leads to its first two word sets only
    data, events = prepared(a_clause_each(MAX_WORD_SETS + 10))
    report = find_conflicts(MODULE, data, events)
    assert report.capped == 10 - 1 and report.to_json()["capped"] == 9
    r = heatc(
        "scan",
        REPO / "examples" / "legal.heat",
        "--chunk-separator",
        "|",
        input="|".join(a_clause_each(MAX_WORD_SETS + 10)),
    )
    assert "9 mentions compared with part of their channel" in r.stdout, r.stdout[-2000:]


@settings(max_examples=300)
@given(st.text(alphabet="ab é中😀\n", max_size=60), st.lists(st.integers(0, 200), max_size=12))
def test_character_offsets_counted_from_the_last(text, offsets):
    from heatc_runtime.reports.conflicts import _Chars

    data = text.encode()
    at = _Chars(data)
    starts = [b for b in range(len(data) + 1) if b == len(data) or (data[b] & 0xC0) != 0x80]
    for b in offsets:
        b = starts[b % len(starts)]
        assert at(b) == char_offsets(data, [b])[b]


@settings(max_examples=300)
@given(st.text(alphabet=" \t\r\n\x0b\x0c,-andx", max_size=12))
def test_the_look_before_opening_words_is_the_strip_it_replaces(before):
    from heatc_runtime.reports.conflicts import _opens

    data = before.encode() + b"thirty"
    assert _opens(data, len(before)) == (not data[: len(before)].strip(b" \t\r\n,-").removesuffix(b"and").strip())
