"""The engine-independent part of checking in a decode loop (heatc_runtime.engines.core,
.lookahead, .tokens): rows fed one token per step, finished at different steps, the modes,
guard's candidate evaluation against the reference interpreter, token tables of tokenizer
objects, and the refusals. No model here (tests/test_engine_*.py run real ones)."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO

from heatc import ir, reference
from heatc.backends import run_document
from heatc.hct import hct_bytes
from heatc.lang.compiler import compile_file, compile_source
from heatc.wasm import compile_wasm, write_module
from heatc.wasm.pack import pack
from heatc_runtime import Verdict, from_bytes, load
from heatc_runtime.engines.core import PROBES, Driver, TokenIdError, TokenTableError, open_module, year_shaped
from heatc_runtime.engines.options import RowOptions
from heatc_runtime.engines.tokens import TokenTable, table_for_tokenizer, table_from_tokenizer_json
from heatc_runtime.lookahead import Lookahead

MEDICAL = compile_file(REPO / "examples" / "medical.heat")
MODULE = compile_wasm(MEDICAL)
HCT = hct_bytes(MEDICAL, pack(MEDICAL), (0, 0))
BACKENDS = ("wasm", "native")

# A small vocabulary of the pieces a model writes clinical values with (a token per digit, as
# SmolLM2 and Llama do, and some longer ones); id 0 is an end-of-sequence token.
VOCAB = [
    b"", b"Glucose", b" glucose", b" ", b"5", b"0", b"00", b"000", b"9", b"8", b"1", b"2", b"3", b".", b",", b"6",
    b" mg/dL", b" mmol/L", b" temperature", b" Temperature", b"Temp", b" was", b" is", b" F", b" C", b"\n",
    b" heart rate", b" bpm", b" and", b" the", b"/", b" BP", b" 120", b"80", b" mmHg", b"%", b" SpO2", b";",
]  # fmt: skip
TABLE = TokenTable("test", VOCAB, "test", "")
ID = {t: i for i, t in enumerate(VOCAB)}


def ids(*pieces: bytes) -> list[int]:
    return [ID[p] for p in pieces]


def checker(backend: str = "wasm"):
    if backend == "native":
        return from_bytes(MODULE.manifest, HCT, backend="native")
    return from_bytes(MODULE.manifest, MODULE.wasm)


def driver(rows: int = 4, backend: str = "wasm") -> Driver:
    return Driver(checker(backend), TABLE, rows, vocab_size=len(VOCAB) + 3)


def guard(k: int = 8, policy: str = "steer", **kw) -> RowOptions:
    return RowOptions("guard", k, policy, **kw)


def test_rows_of_different_lengths_report_what_scan_reports():
    """Rows fed one token a step, ending at different steps (the others go on), each get the
    events and final verdicts of scanning their text; a free row is fed nothing."""
    texts = [
        ids(b"Glucose", b" ", b"5", b"0", b"0", b"0", b" mg/dL", b".", b" heart rate", b" ", b"8", b"0", b"."),
        ids(b" temperature", b" ", b"9", b"8", b".", b"6", b" F", b"."),
        ids(b" heart rate", b" ", b"3", b"0", b"0", b"0", b" bpm"),
    ]
    d = driver(4)
    for row in range(3):
        d.start(row)
    reports = {}
    for step in range(max(map(len, texts))):
        rows = [r for r in range(3) if step < len(texts[r])]
        d.feed(np.array(rows), np.array([texts[r][step] for r in rows]))
        for r in rows:
            if step == len(texts[r]) - 1:
                reports[r] = d.end(r)
    checker = from_bytes(MODULE.manifest, MODULE.wasm)
    for r, tokens in enumerate(texts):
        text = b"".join(VOCAB[i] for i in tokens)
        want = checker.scan(text)
        got = reports[r]
        assert got.stream == text and got.tokens == tokens
        assert (got.events, got.verdicts) == (want.events, dict(want.verdicts))
    assert reports[0].rejected == ["glucose_quantity", "glucose_value"] and reports[1].verdict is Verdict.CONFIRMED
    assert not d.live(3)


def test_stop_ends_a_row_at_its_first_rejected_snapshot_and_not_before():
    d = driver(2)
    d.start(0, "stop")
    d.start(1, "observe")
    text = ids(b"Glucose", b" ", b"5", b"0", b"0", b"0", b" mg/dL", b".", b" heart rate", b" ", b"8", b"0", b".")
    stopped_at = []
    for step, token in enumerate(text):
        if d.feed(np.array([0, 1]), np.array([token, token])):
            stopped_at.append(step)
    assert stopped_at == [8]  # " heart rate" ends the "." lexeme after mg/dL: the trigger snapshot
    stop, observe = d.end(0), d.end(1)
    assert stop.stopped_at == 8 and observe.stopped_at is None
    # not before: no snapshot before it holds a rejection
    snaps = stop.snapshots
    first = next(i for i, s in enumerate(snaps) if s.verdict is Verdict.REJECTED)
    assert all(s.counters["rejections"] == 0 for s in snaps[:first])


def test_stop_with_the_prompt_seen_counts_only_new_rejections():
    d = driver(1)
    prompt = ids(b"Glucose", b" ", b"5", b"0", b"0", b"0", b" mg/dL", b".", b" ")  # rejected already
    d.start(0, RowOptions("stop", see_prompt=True), prompt)
    assert d.feed(np.array([0]), np.array(ids(b" heart rate"))) == []  # the prompt's snapshot: no new rejection
    for token in ids(b" ", b"8", b"0", b".", b" and", b" heart rate", b" ", b"9", b"9", b"9", b".", b" and"):
        if d.feed(np.array([0]), np.array([token])):
            break
    report = d.end(0)
    assert report.prompt_bytes == len(b"Glucose 5000 mg/dL. ")
    assert report.stream.endswith(b"999. and") and report.stopped_at == len(report.tokens) - 1


def _oracle(prefix: bytes, candidate: bytes) -> bool:
    """guard's rule, from the reference interpreter: the candidate passes when the text with it,
    ended there, has no more rejections than the text before it has so far — or, when it
    leaves a number open, when one of PROBES continuing the number has none; a text that ends
    in four digits 1900–2199 (not after a digit, point or comma) must pass with ".0"
    after it as well."""
    m = reference.Machine(MEDICAL)
    m.feed(prefix)
    before = m.snapshot().counters["rejections"]

    def ended(text: bytes) -> int:
        return run_document("reference", MEDICAL, text)[2]["rejections"]

    def passes(text: bytes) -> bool:
        year = re.search(rb"(?<![0-9.,])(19|20|21)[0-9][0-9]\Z", text) is not None
        return ended(text) == before and (not year or ended(text + b".0") == before)

    text = prefix + candidate
    if passes(text):
        return True
    opens = bool(candidate) and re.search(rb"[0-9][.,]?\Z", text) is not None
    return opens and any(passes(text + p) for p in PROBES)


def test_guard_knows_the_years_the_lexer_reads():
    """`year_shaped` says of a text's last four digits what the lexer says: a date."""
    from heatc.lang.compiler import _bare_program
    from heatc.lexing import lex

    bare = _bare_program(False)
    for n in range(10_000):
        for before in (b"in ", b"x", b"1.", b"7,", b"1/", b"(", b""):
            text = before + b"%04d" % n
            lexemes = lex(bare, text)
            assert year_shaped(text) == (lexemes[-1].code == ir.LEX_DATE and lexemes[-1].raw == text[-4:]), text


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(prefix=st.lists(st.sampled_from(range(1, len(VOCAB))), max_size=10))
def test_guard_passes_exactly_the_candidates_the_reference_accepts(backend, prefix):
    """Every token of the vocabulary tried after a random prefix: the mask equals the
    reference interpreter's verdicts on the texts it stands for, on the WASM backend (the
    decision in Python over copies) and the native one (the decision in C++)."""
    d = driver(2, backend)
    for row in (0, 1):
        d.start(row, guard(len(VOCAB)))
    for token in prefix:
        d.feed(np.array([0, 1]), np.array([token, token]))
    candidates = np.tile(np.arange(len(VOCAB)), (2, 1))
    ok = d.guard(np.array([0, 1]), candidates, np.ones_like(candidates, bool)).ok
    text = b"".join(VOCAB[i] for i in prefix)
    want = [_oracle(text, piece) for piece in VOCAB]
    assert ok[0].tolist() == want and ok[1].tolist() == want


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=25, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(range(1, len(VOCAB))), max_size=8), min_size=3, max_size=3))
def test_guard_judges_each_row_on_its_own_text(backend, texts):
    """Rows with different texts judged in one call, every candidate of each: each row's mask
    is the reference's for its own text (the native core tries them one after another on one
    scratch slot, copying only what a try can read: nothing of one row's try may reach the
    next row's)."""
    d = driver(3, backend)
    for row in range(3):
        d.start(row, guard(len(VOCAB)))
    for row, tokens in enumerate(texts):
        for token in tokens:
            d.feed(np.array([row]), np.array([token]))
    candidates = np.tile(np.arange(len(VOCAB)), (3, 1))
    ok = d.guard(np.arange(3), candidates, np.ones_like(candidates, bool)).ok
    for row, tokens in enumerate(texts):
        text = b"".join(VOCAB[i] for i in tokens)
        assert ok[row].tolist() == [_oracle(text, piece) for piece in VOCAB], text


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_try_leaves_nothing_behind_for_the_next_row(backend):
    """A try that leaves a thread waiting on its last element (row 0: "dose 500" + " mg" waits
    for "daily") must not lend it to the next row's try, which starts the rule afresh and then
    writes that last element (row 1: " dose daily" is no dose at all): the native core copies a
    try only the rules live in its own row and clears what a try left live."""
    program = compile_source(
        'ruleset t "t"\nclass dose keyword = "dose"\nclass mg unit = "mg"\n'
        'rule dose_mg "dose" heat 0.9 {\n  match dose ..4 v:number ..2 mg ..2 "daily"\n  require v in [1, 100]\n}\n'
    )
    module = compile_wasm(program)
    vocab = [b"", b"dose", b" 500", b" mg", b" dose daily", b" daily"]
    ck = (
        from_bytes(module.manifest, hct_bytes(program, pack(program), (0, 0)), backend="native")
        if backend == "native"
        else from_bytes(module.manifest, module.wasm)
    )
    d = Driver(ck, TokenTable("t", vocab, "test", ""), 2, vocab_size=len(vocab))
    for row in (0, 1):
        d.start(row, guard(2))
    for token in (1, 2):
        d.feed(np.array([0]), np.array([token]))
    cand = np.array([[3, 3], [4, 5]])
    assert d.guard(np.array([0, 1]), cand, np.ones_like(cand, bool)).ok.tolist() == [[True, True], [True, True]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_guard_on_numbers_split_over_tokens(backend):
    d = driver(3, backend)
    for row in range(3):
        d.start(row, guard(8))
    rows = np.array([0, 1, 2])
    for tokens in (ids(b"Glucose", b" temperature", b" heart rate"), ids(b" ", b" ", b" "), ids(b"5", b"9", b"5")):
        d.feed(rows, np.array(tokens))
    cand = np.array([ids(b"000", b"0", b".", b"", b" mg/dL", b" mmol/L", b"00", b"9")] * 3)
    ok = d.guard(rows, cand, np.ones_like(cand, bool)).ok
    # glucose 5: 5000 is out of range and so is every continuation of it; 50, "5.", 5 at the
    # end, 5 mmol/L, 500 and 59 are fine; 5 mg/dL is below 10 mg/dL
    assert ok[0].tolist() == [False, True, True, True, False, True, True, True]
    # temperature 9 (20–113 without a unit): 9 alone, "9." (9.9 at most) and 9 with a unit are
    # too low, 9000 and 900 too high; 90 and 99 pass
    assert ok[1].tolist() == [False, True, False, False, False, False, False, True]
    # heart rate 5 (20–300): the same, with 500 above 300
    assert ok[2].tolist() == [False, True, False, False, False, False, False, True]
    report = d.end(0)
    assert report.masked == [(3, 2, True)] and report.first_change == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_guard_lets_a_number_grow_through_values_out_of_range(backend):
    """Models write numbers a digit at a time: the first digit of "temperature 98.6" is 9, out
    of 20–113 by itself; guard lets it through because 90 and 99 would be fine, and refuses a
    number no continuation can save."""
    d = driver(1, backend)
    d.start(0, guard(8))
    for token in ids(b" temperature", b" "):
        d.feed(np.array([0]), np.array([token]))
    cand = np.array([ids(b"9", b"1", b"3", b"", b".")])
    assert d.guard(np.array([0]), cand, np.ones_like(cand, bool)).ok.tolist() == [[True] * 5]
    d.feed(np.array([0]), np.array(ids(b"1")))
    # "temperature 1": ended here it is 1; with 0 it can still become 100 to 109; with 5 or 9
    # only 15 or 19, 150 and more, or 15.x and 19.x: out of range whatever follows
    cand = np.array([ids(b"", b"0", b"5", b"9")])
    assert d.guard(np.array([0]), cand, np.ones_like(cand, bool)).ok.tolist() == [[False, True, False, False]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_guard_records_exhausted_rows(backend):
    d = driver(1, backend)
    d.start(0, guard(2))
    d.feed(np.array([0]), np.array(ids(b" heart rate")))
    d.feed(np.array([0]), np.array(ids(b" ")))
    d.feed(np.array([0]), np.array(ids(b"5")))
    cand = np.array([ids(b"000", b"")])
    ok = d.guard(np.array([0]), cand, np.ones_like(cand, bool)).ok
    assert not ok.any()
    assert d.end(0).exhausted_at == 3


def test_lookahead_leaves_the_sequences_as_they_were():
    checker = from_bytes(MODULE.manifest, MODULE.wasm)
    checker.set_token_table(VOCAB)
    batch = checker.batch(3)
    for token in ids(b"Glucose", b" ", b"5"):
        batch.feed_ids(np.array([token] * 3, np.uint32))
    before = [batch.state(i) for i in range(3)]
    look = Lookahead(batch)
    counts = look.try_tokens([0, 1, 2, 0], ids(b"000", b"0", b" mg/dL", b""), ids(b".", b".", b".", b""))
    assert counts.tolist() == [1, 0, 1, 0]
    assert [batch.state(i) for i in range(3)] == before
    assert look.rejections([0, 1, 2]).tolist() == [0, 0, 0]
    # many more copies than the buffers hold snapshots: early returns are resumed
    many = look.try_tokens([1] * 3000, ids(b"0") * 3000, ids(b".") * 3000)
    assert (many == 0).all()


def test_finish_one_ends_one_row_alone():
    checker = from_bytes(MODULE.manifest, MODULE.wasm)
    checker.set_token_table(VOCAB)
    batch = checker.batch(2)
    for token in ids(b"Glucose", b" ", b"5", b"0", b"0", b"0"):
        batch.feed_ids(np.array([token, token], np.uint32))
    final = batch.finish_one(0)
    assert final[-1].final and final[-1].verdict is Verdict.REJECTED
    batch.reset(0)
    batch.feed_ids(np.array(ids(b".", b" mg/dL"), np.uint32))  # row 1 goes on
    assert batch.finish()[1][-1].verdicts["glucose_quantity"] is Verdict.REJECTED


def test_token_ids_outside_the_table_are_refused():
    d = driver(2)
    d.start(0)
    d.start(1)
    with pytest.raises(TokenIdError, match=r"token id 99 is outside the token table \(41 entries\)"):
        d.feed(np.array([0, 1]), np.array([1, 99]))
    with pytest.raises(TokenIdError, match="the prompt of sequence 1: token id -1"):
        d.start(1, RowOptions(see_prompt=True), [1, -1])


def test_bad_modes_and_options_are_refused():
    d = driver(1)
    with pytest.raises(ValueError, match="unknown mode 'guardd'"):
        d.start(0, "guardd")
    with pytest.raises(ValueError, match="k must be a whole number from 1 to 64"):
        RowOptions("guard", k=0)
    with pytest.raises(ValueError, match="on_exhausted must be one of stop, pass"):
        RowOptions("guard", on_exhausted="later")
    with pytest.raises(ValueError, match="unknown guard policy 'invent'"):
        RowOptions("guard", policy="invent")
    for marker in ("", "  ", "[value 1]", "x" * 65):
        with pytest.raises(ValueError, match="the marker must be 1 to 64 characters of text with no digits"):
            RowOptions("guard", marker=marker)


def test_a_module_built_for_another_tokenizer_is_refused(tmp_path):
    from heatc.heatmap.build import build

    result = build(REPO / "heatmaps" / "medical.yaml", tmp_path)  # the embedded MiniLM tokenizer
    other = TokenTable("bytelevel", VOCAB, "a model's tokenizer", "")
    with pytest.raises(
        TokenTableError, match=r"built for another tokenizer \(30522 tokens, sha256 .*\) than the model's"
    ):
        open_module(result.directory, other, tokens="check")
    checker = open_module(result.directory, other)  # by default the model's table replaces it
    d = Driver(checker, other, 1)
    d.start(0)
    d.feed(np.array([0]), np.array(ids(b"Glucose")))
    assert d.end(0).stream == b"Glucose"
    same = TokenTable("wordpiece", load(result.directory)._token_table, "the same", "")
    assert open_module(result.directory, same, tokens="check") is not None


def test_a_module_without_the_rejections_offset_cannot_guard(tmp_path):
    manifest = {**MODULE.manifest, "layout": dict(MODULE.manifest["layout"])}
    del manifest["layout"]["rejections_offset"]
    d = Driver(from_bytes(manifest, MODULE.wasm), TABLE, 1)
    d.start(0, guard())
    with pytest.raises(Exception, match="built by an older heatc"):
        d.guard(np.array([0]), np.array([[1]]), np.array([[True]]))


@pytest.mark.needs("tokenizers")
def test_token_table_of_a_tokenizer_object_is_the_file_table_cached_by_hash(tmp_path, monkeypatch):
    import tokenizers

    from heatc.heatmap.tokenizers import minilm_tokenizer_json

    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))
    path = minilm_tokenizer_json()
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.add_tokens(["<plain added>"])  # an added token that is not special: its text, as written
    first = table_for_tokenizer(tok)
    assert first.tokens[: len(first.tokens) - 1] == table_from_tokenizer_json(path).tokens
    assert first.tokens[-1] == b"<plain added>"
    assert table_for_tokenizer(tok) is first  # the same hash: the same table
    assert list((tmp_path / "cache" / "tokens").glob("*.bin"))  # and on disk
    import heatc_runtime.engines.tokens as tokens_module

    tokens_module._CACHE.clear()
    again = table_for_tokenizer(tok)  # read back from the disk cache
    assert again.tokens == first.tokens and again.kind == first.kind and again.sha256 == first.sha256
    with pytest.raises(ValueError, match="needs a fast"):
        table_for_tokenizer(object())


def test_modules_from_a_build_and_from_bytes_drive_alike(tmp_path):
    write_module(MODULE, tmp_path / "m")
    a, b = Driver(load(tmp_path / "m"), TABLE, 1), driver(1)
    for d in (a, b):
        d.start(0, "observe")
        for token in ids(b"Glucose", b" ", b"5", b"0", b"0", b"0"):
            d.feed(np.array([0]), np.array([token]))
    assert a.end(0).verdicts == b.end(0).verdicts


def test_a_rule_file_of_ones_own(tmp_path):
    """Guard with a rule set that is not the shipped one: a percentage cap."""
    program = compile_source(
        'ruleset t "t"\nclass rate keyword = "rate"\nrule cap "rate at most 25" { match rate ..2 v:number\n require v <= 25 }\n'
    )
    m = compile_wasm(program)
    vocab = [b"", b"rate", b" ", b"2", b"5", b"0", b"3"]
    d = Driver(from_bytes(m.manifest, m.wasm), TokenTable("t", vocab, "t", ""), 1)
    d.start(0, guard(len(vocab)))
    for token in (1, 2, 3):
        d.feed(np.array([0]), np.array([token]))
    ok = d.guard(np.array([0]), np.array([list(range(len(vocab)))]), np.ones((1, len(vocab)), bool)).ok
    # after "rate 2" every candidate keeps the rate at most 25: 2, 22, 25, 20, 23
    assert ok[0].tolist() == [True] * 7
    d.feed(np.array([0]), np.array([6]))  # rate 23: one more digit makes it 230 or more
    ok = d.guard(np.array([0]), np.array([list(range(len(vocab)))]), np.ones((1, len(vocab)), bool)).ok
    assert ok[0].tolist() == [True, True, True, False, False, False, False]


def test_serving_needs_neither_the_compiler_nor_other_engines(tmp_path):
    """The driver and the token tables import without the compiler, torch or any engine; the
    transformers adapter without the compiler and vLLM."""
    import subprocess
    import sys
    import textwrap

    write_module(MODULE, tmp_path / "m")
    compiler = {"heatc", "lark", "jinja2", "yaml", "typer", "rich", "hypothesis"}
    cases = [(compiler | {"torch", "transformers", "vllm"}, "heatc_runtime.engines.core")]
    if importlib.util.find_spec("transformers") is not None:
        # (transformers itself uses jinja2 and yaml: only heatc's compiler and vLLM are kept out)
        cases.append(({"heatc", "lark", "hypothesis", "vllm"}, "heatc_runtime.engines.transformers"))
    for blocked, module in cases:
        code = textwrap.dedent(
            f"""
            import sys
            class Block:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in {sorted(blocked)!r}:
                        raise ImportError("blocked: " + name)
            sys.meta_path.insert(0, Block())
            import importlib
            import numpy as np
            importlib.import_module({module!r})
            from heatc_runtime import load
            from heatc_runtime.engines.core import Driver
            from heatc_runtime.engines.tokens import TokenTable
            from heatc_runtime.engines.options import RowOptions
            d = Driver(load({str(tmp_path / "m")!r}), TokenTable("t", [b"", b"glucose 5000", b"."], "t", ""), 1)
            d.start(0, RowOptions("guard"))
            ok = d.guard(np.array([0]), np.array([[1, 2]]), np.ones((1, 2), bool)).ok
            print(ok.tolist())
            """
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[[False, True]]"
