"""The runtime's backends (WASM and native) against the reference interpreter on generated
rule sets and streams: whole-document scans, random chunkings, batches stepped through a
token table, and forks. Events, verdicts, counters and every published snapshot must be
identical."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import compile_cached
from support.differential import snapshot_fields as _snap
from support.differential import stream_agrees
from support.strategies import (
    chunkings,
    dense_texts,
    long_texts,
    percent_trigger_rule_sets,
    reported,
    rule_sets,
    texts,
    weak_start_rule_sets,
)

from heatc.semantics.reference import Machine
from heatc.verify.backends import native_checker, wasm_checker
from heatc.wasm.pack import pack

# every test below runs on each backend of the runtime
BACKENDS = pytest.mark.parametrize("checker_for", [wasm_checker, native_checker], ids=["wasm", "native"])


@st.composite
def cases(draw):
    g = draw(rule_sets())
    return g.source, draw(st.lists(texts(g.pieces), min_size=1, max_size=4))  # (a Program's repr is pages long)


@BACKENDS
@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")))
@given(cases(), st.data())
def test_scan_matches_reference(checker_for, case, data):
    source, streams = case
    program = compile_cached(source)
    checker = checker_for(program)
    for stream in streams:
        with reported(source, [stream]):
            m = Machine(program)
            snaps = m.feed(stream) + m.finish()
            report = checker.scan(stream)
            assert report.events == [e for s in snaps for e in s.events]
            assert report.verdicts == snaps[-1].verdicts
            assert report.counters == snaps[-1].counters


@BACKENDS
@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 2)
@given(rule_sets(), st.data())
def test_long_plain_stretches_match_reference(checker_for, g, data):
    """Long mostly-plain text, where the kernel skips idle stretches 16 bytes at a time: a
    quiet whole-document scan, and the same text fed in random pieces (every trigger
    published, so trigger literals are not plain there)."""
    program = compile_cached(g.source)
    _long_stream_agrees(g.source, checker_for(program), data.draw(long_texts(g.pieces)), data)


def _long_stream_agrees(source: str, checker, stream: bytes, data) -> None:
    pieces = data.draw(chunkings(stream))
    with reported(source, pieces):
        stream_agrees(compile_cached(source), stream, pieces, checker)


@BACKENDS
@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 2)
@given(weak_start_rule_sets(), st.data())
def test_weak_starts_match_reference(checker_for, g, data):
    """Keywords a kernel counts as plain words while their threads cannot yet have advanced
    (skipper._weak_starts), in long mostly-plain text: it must come back to each one whenever
    something that matters follows within its gap."""
    assert pack(compile_cached(g.source)).consts["skip_weak"], "the generated rule set has no weak start"
    stream = data.draw(st.one_of(long_texts(g.pieces), dense_texts(g.pieces)))
    _long_stream_agrees(g.source, checker_for(compile_cached(g.source)), stream, data)


@BACKENDS
@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 4)
@given(percent_trigger_rule_sets(), st.data())
def test_percentages_before_trigger_percent_signs_match_reference(checker_for, g, data):
    """Percentages in long idle stretches where `%` is also a trigger literal: fed in pieces
    (every trigger published), `36%` is still one percentage wherever the kernel's skipper
    meets it, and only a `%` that no digit comes before triggers a snapshot."""
    assert pack(compile_cached(g.source)).consts["digit_percent"], "the skipper counts no percentages here"
    stream = data.draw(st.one_of(long_texts(g.pieces), dense_texts(g.pieces)))
    _long_stream_agrees(g.source, checker_for(compile_cached(g.source)), stream, data)


@BACKENDS
@pytest.mark.parametrize(
    ("literal", "text", "want"),
    [("mg/dL", b"mg/dLb", [6]), ("km/h/s", b"km/h/x", [6, 6]), ("km/h/s", b"a km/h/x", [8, 8])],
    ids=["word-boundary", "inside", "inside-later"],
)
def test_a_trigger_emitted_after_reading_past_it_counts_every_byte_read(checker_for, literal, text, want):
    """`mg/dLb`: the literal `mg/dL` fails its word boundary at `b`, so the arrival of `b`
    emits the word `mg` and the trigger `/`; `km/h/x`: `km/h/s` fails at `x`, whose arrival
    emits `km`, `/`, `h` and `/` (docs/semantics.md §7: `bytes` includes the byte whose
    arrival emitted the trigger lexeme)."""
    source = f'ruleset t\nclass u unit = "{literal}"\nclass slash punct = "/"\ntriggers {{\n  at slash\n}}\nrule r {{ match u }}\n'
    batch = checker_for(compile_cached(source)).batch(1)
    assert [s.counters["bytes"] for s in batch.feed_text(0, text)] == want


@BACKENDS
@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")))
@given(cases(), st.data())
def test_batches_forks_and_chunkings_match_reference(checker_for, case, data):
    source, streams = case
    program = compile_cached(source)
    checker = checker_for(program)
    n = len(streams)
    pieces = [data.draw(chunkings(s)) for s in streams]
    vocabulary = sorted({p for ps in pieces for p in ps} | {b""})
    token_id = {tok: i for i, tok in enumerate(vocabulary)}
    checker.set_token_table(vocabulary)
    batch = checker.batch(n)
    machines = [Machine(program) for _ in range(n)]
    fed: list[list[bytes]] = [[] for _ in range(n)]  # each sequence's stream as fed, forks included
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    steps = max(len(p) for p in pieces)
    with reported(source, *fed):
        for step in range(steps):
            tokens = [p[step] if step < len(p) else b"" for p in pieces]
            got = batch.feed_ids([token_id[t] for t in tokens])
            for i, (m, t) in enumerate(zip(machines, tokens, strict=True)):
                fed[i].append(t)
                assert [_snap(s) for s in got.get(i, [])] == [_snap(s) for s in m.feed(t)], f"seq {i} step {step}"
            if n > 1 and rng.random() < 0.2:
                src, dst = rng.sample(range(n), 2)
                batch.fork(dst, src)
                machines[dst] = machines[src].fork()
                fed[dst][:] = fed[src]
            if rng.random() < 0.1:
                got = batch.snapshot()
                for i, m in enumerate(machines):
                    assert [_snap(s) for s in got[i]] == [_snap(m.snapshot())]
        got = batch.finish()
        for i, m in enumerate(machines):
            assert [_snap(s) for s in got[i]] == [_snap(s) for s in m.finish()]


@BACKENDS
@settings(max_examples=200)
@given(
    st.lists(
        st.sampled_from(["a" * 15, "B" * 16, "c" * 17, "glucose", "x" * 40, "y" * 70, " ", ".", "1", "é", "mg"]),
        max_size=20,
    ),
    st.sampled_from(
        ['class a unit = "mg"\nrule r { match a }\n', 'class g keyword = "glucose"\nrule r { match g ..2 v:number }\n']
    ),
)
def test_long_letter_runs(checker_for, words, source):
    """Letter runs of every length around the 16-byte skip and the 64-byte cap."""
    program = compile_cached(source)
    stream = "".join(words).encode()
    with reported(source, [stream]):
        m = Machine(program)
        snaps = m.feed(stream) + m.finish()
        report = checker_for(program).scan(stream)
        assert report.events == [e for s in snaps for e in s.events]
        assert report.counters == snaps[-1].counters


@BACKENDS
def test_weak_starts_sharing_a_table_key(checker_for):
    """Two keywords with one word-table key (the same first 8 letters and length) keep the
    longer horizon: the rule with the long gap still finds its number."""
    source = (
        "ruleset t\n"
        'class short keyword = "agreementa"\nclass long keyword = "agreementb"\n'
        "rule r { match short v:number }\nrule s { match long ..5 v:number }\n"
    )
    program = compile_cached(source)
    assert pack(program).consts["skip_weak"]
    filler = "the parties to this contract have agreed on all of the terms set out below "
    for stream in [filler + "agreementb a b c d 5 " + filler, filler + "agreementa x 5 agreementb a b c 7 " + filler]:
        m = Machine(program)
        snaps = m.feed(stream.encode()) + m.finish()
        report = checker_for(program).scan(stream.encode())
        assert report.events == [e for s in snaps for e in s.events]
        assert [e.name for e in report.events] == ["s"]
