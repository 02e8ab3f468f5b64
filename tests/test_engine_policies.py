"""Guard's policies and what the decode loop keeps beside the states, with no model: withhold,
stop and steer on a small vocabulary (what the rules read, what is delivered, each
intervention with the rule and value it refused), greedy judging the best candidate first,
the native tails and value checkpoints against the numpy ones, draft positions judged like
fed ones, and `Batch.verify` against the reference interpreter."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO

from heatc.lang.compiler import compile_file
from heatc.semantics.reference import Machine
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import Verdict, from_bytes
from heatc_runtime.engines.core import FORCE_EOS, Driver
from heatc_runtime.engines.options import MARKER, RowOptions, marker_ids
from heatc_runtime.engines.tokens import TokenTable

PROGRAM = compile_file(REPO / "examples" / "medical.heat")
MODULE = compile_wasm(PROGRAM)
HCT = hct_bytes(PROGRAM, pack(PROGRAM), (0, 0))
BACKENDS = ("wasm", "native")
# id 0 is an end-of-sequence token; the marker is written with "[un", "verified", "]"
VOCAB = [
    b"", b" glucose", b" ", b"5", b"0", b"00", b"000", b" mg/dL", b".", b" heart rate", b"1", b"2", b"9", b"8",
    b" was", b" temperature", b"[un", b"verified", b"]", b" bpm", b",", b" and", b"Glucose", b"3",
]  # fmt: skip
ID = {t: i for i, t in enumerate(VOCAB)}
TABLE = TokenTable("test", VOCAB, "test", "")


def ids(*pieces: bytes) -> list[int]:
    return [ID[p] for p in pieces]


def checker(backend: str):
    if backend == "native":
        return from_bytes(MODULE.manifest, HCT, backend="native")
    return from_bytes(MODULE.manifest, MODULE.wasm)


def driver(backend: str, rows: int = 2) -> Driver:
    return Driver(checker(backend), TABLE, rows)


def feed(d: Driver, row: int, *pieces: bytes) -> None:
    for p in pieces:
        d.feed(np.array([row]), np.array([ID[p]]))


def judge(d: Driver, row: int, *pieces: bytes, greedy: bool = False):
    cands = np.array([ids(*pieces)], np.int64)
    return d.guard(np.array([row]), cands, np.ones_like(cands, bool), greedy)


def test_the_marker_is_written_with_the_model_tokens():
    assert marker_ids(MARKER, VOCAB) == tuple(ids(b"[un", b"verified", b"]"))
    with pytest.raises(ValueError, match="cannot be written with this model's tokens"):
        marker_ids("[withheld]", VOCAB)


@pytest.mark.parametrize("backend", BACKENDS)
def test_withhold_takes_the_value_back_and_writes_the_marker(backend):
    """ "glucose was 500" and the model's first choice "0" (5000, out of 0.5–2000 for any
    glucose): withhold forces the marker; the rules read "glucose was [unverified] mg/dL.", the
    application is given the same; the report says which token was refused, why, and which
    value was taken back."""
    d = driver(backend)
    d.start(0, RowOptions("guard"), marker=marker_ids(MARKER, VOCAB))
    feed(d, 0, b" glucose", b" was", b" ", b"5", b"00")
    step = judge(d, 0, b"0", b" mg/dL", b".")
    assert step.force.tolist() == [ID[b"[un"]] and step.ok.tolist() == [[False, True, True]]
    for piece in (b"[un", b"verified", b"]"):
        assert judge(d, 0, b" and", b".").force.tolist() == [ID[piece]]  # (the marker goes on)
        feed(d, 0, piece)
    assert judge(d, 0, b" mg/dL", b".").force.tolist() == [-1]
    feed(d, 0, b" mg/dL", b".")
    report = d.end(0)
    assert report.text == " glucose was 500[unverified] mg/dL."
    assert report.delivered == " glucose was [unverified] mg/dL." and report.stream == report.delivered.encode()
    assert report.verdict is Verdict.CONFIRMED  # the rules never read 500
    [iv] = report.interventions
    assert (iv.action, iv.step, iv.top, iv.written, iv.value) == ("withheld", 5, True, MARKER, "500")
    assert report.text.encode()[slice(*iv.value_span)] == b"500" and iv.at == len(b" glucose was 500")
    refused = [(r.text, [(e.name, dict(e.captures)) for e in r.rejects]) for r in iv.refused]
    assert refused == [("0", [("glucose_value", {"v": 5000.0})])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_ends_before_the_value_and_steer_writes_another(backend):
    d = driver(backend, 2)
    d.start(0, RowOptions("guard", policy="stop"))
    d.start(1, RowOptions("guard", policy="steer"))
    for p in (b" heart rate", b" ", b"9"):
        d.feed(np.array([0, 1]), np.array([ID[p], ID[p]]))
    cands = np.array([ids(b"00", b"0", b".")] * 2)  # 900 is above 300, 9.x below 20; 90 is fine
    step = d.guard(np.array([0, 1]), cands, np.ones_like(cands, bool))
    assert step.force.tolist() == [FORCE_EOS, -1] and step.ok.tolist() == [[False, True, False]] * 2
    d.feed(np.array([0, 1]), np.array([ID[b""], ID[b"0"]]))  # row 0 writes EOS, row 1 the best that passed
    stopped, steered = d.end(0), d.end(1)
    assert stopped.text == " heart rate 9" and stopped.delivered == f" heart rate {MARKER}"
    assert stopped.interventions[0].action == "stopped" and stopped.interventions[0].value == "9"
    assert steered.text == steered.delivered == " heart rate 90"
    iv = steered.interventions[0]
    assert (iv.action, iv.written, iv.refused[0].text) == ("steered", "0", "00")
    assert iv.refused[0].rejects and iv.refused[0].rejects[0].name == "heart_rate_value"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_unit_left_out_to_escape_a_rule_is_marked(backend):
    """steer: "glucose 5000" + " mg/dL" refused (5000 mg/dL), the model writes "." instead —
    the number stands without what made it fail; the report marks the escape."""
    d = driver(backend, 1)
    d.start(0, RowOptions("guard", policy="steer"))
    feed(d, 0, b" glucose", b" ", b"3")
    step = judge(d, 0, b" mg/dL", b",")  # 3 mg/dL is below 10
    assert step.ok.tolist() == [[False, True]]
    feed(d, 0, b",")
    [iv] = d.end(0).interventions
    assert iv.action == "steered" and iv.escape and iv.value == "3"


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None)
@given(prefix=st.lists(st.sampled_from(range(1, 16)), max_size=8), seed=st.integers(0, 1000))
def test_greedy_judges_the_best_candidate_first(backend, prefix, seed):
    """With greedy, a row's candidates are judged best first until one passes: the mask is the
    full one up to it, MASK_UNTRIED below it — on either backend."""
    d = driver(backend, 1)
    d.start(0, RowOptions("guard", k=8, policy="steer"))
    for t in prefix:
        d.feed(np.array([0]), np.array([t]))
    cands = np.array([random.Random(seed).sample(range(len(VOCAB)), 8)], np.int64)
    full = d.guard(np.array([0]), cands, np.ones_like(cands, bool)).ok[0]
    step = d.guard(np.array([0]), cands, np.ones_like(cands, bool), greedy=True)
    first = int(np.argmax(full)) if full.any() else len(full)
    assert step.ok[0].tolist() == [bool(full[j]) and j == first for j in range(len(full))]
    assert step.untried[0].tolist() == [j > first for j in range(len(full))]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(VOCAB))), min_size=1, max_size=24))
def test_native_tails_and_checkpoints_are_the_numpy_ones(tokens):
    """The native core keeps the rows' tails and the value checkpoints as the numpy code does
    (the WASM backend's); a checkpoint holds the state from just before the value's token."""
    ds = [driver(b, 1) for b in BACKENDS]
    for d in ds:
        d.start(0, RowOptions("guard"))
    for n, t in enumerate(tokens):
        before = [d.batch.state(0) for d in ds]
        for d in ds:
            d.feed(np.array([0]), np.array([t]))
        wasm, native = ds
        assert wasm._tails.tobytes() == native._tails.tobytes()
        assert wasm._ck_step[0] == native._ck_step[0]
        if wasm._ck_step[0] >= 0:
            for name in ("_ck_token", "_ck_tail", "_ck_snaps"):
                assert getattr(wasm, name)[0].tolist() == getattr(native, name)[0].tolist(), name
        for d, state in zip(ds, before, strict=True):
            if d._ck_step[0] == n:  # (a value began at this token)
                assert d._ck_state[0].tobytes() == state


@pytest.mark.parametrize("backend", BACKENDS)
def test_draft_positions_are_judged_like_fed_ones(backend):
    """Driver.guard_drafts at "heart rate" + drafts equals guard after feeding them; the
    decisions it made apply when the engine takes exactly those drafts."""
    a, b = driver(backend, 1), driver(backend, 1)
    for d in (a, b):
        d.start(0, RowOptions("guard", policy="steer"))
        feed(d, 0, b" heart rate")
    drafts = ids(b" ", b"9")
    cands = np.array([ids(b"00", b"0", b".", b"9")], np.int64)
    usable = np.ones_like(cands, bool)
    at_drafts = a.guard_drafts(np.array([0]), [drafts], cands, usable)
    feed(b, 0, b" ", b"9")
    fed = b.guard(np.array([0]), cands, usable)
    assert at_drafts.ok.tolist() == fed.ok.tolist() == [[False, True, False, True]]  # 900; 90; 9.x; 99
    assert a.end(0).interventions == []  # (the engine took no draft: nothing applies)
    c = driver(backend, 1)
    c.start(0, RowOptions("guard", policy="steer"))
    feed(c, 0, b" heart rate")
    c.guard_drafts(np.array([0]), [drafts], cands, usable)
    feed(c, 0, b" ", b"9", b"0")  # the engine took the drafts, then the best that passed
    assert c.end(0).interventions[0].step == 3 == b.end(0).interventions[0].step


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_verify_keeps_the_longest_prefix_that_adds_no_rejection(backend, data):
    """Batch.verify against the reference: each sequence keeps the drafts up to the first that
    adds a rejection (as fed), and is left where feeding just those leaves it."""
    c = checker(backend)
    c.set_token_table(VOCAB)
    n, width = 3, data.draw(st.integers(1, 6))
    batch = c.batch(n)
    prefixes = [data.draw(st.lists(st.sampled_from(range(1, len(VOCAB))), max_size=6)) for _ in range(n)]
    drafts = np.array([data.draw(st.lists(st.sampled_from(range(1, len(VOCAB))), min_size=width, max_size=width))
                       for _ in range(n)])  # fmt: skip
    for step in range(max(map(len, prefixes), default=0)):
        batch.feed_ids(np.array([p[step] if step < len(p) else 0 for p in prefixes], np.uint32))
    kept, _ = batch.verify(drafts)
    for i in range(n):
        m = Machine(PROGRAM)
        m.feed(b"".join(VOCAB[t] for t in prefixes[i]))
        base, want = m.counters()["rejections"], 0
        for t in drafts[i].tolist():
            m.feed(VOCAB[t])
            if m.counters()["rejections"] > base:
                break
            want += 1
        assert kept[i] == want, (i, prefixes[i], drafts[i])
        m = Machine(PROGRAM)
        m.feed(b"".join(VOCAB[t] for t in [*prefixes[i], *drafts[i][:want].tolist()]))
        got, want_final = batch.finish_one(i)[-1], m.finish()[-1]
        counters = ({k: v for k, v in c.items() if k != "tokens"} for c in (got.counters, want_final.counters))
        assert next(counters) == next(counters) and dict(got.verdicts) == dict(want_final.verdicts)
