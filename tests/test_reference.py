"""Properties of the reference interpreter on generated rule sets and streams: chunking
invariance, stepping only the rules that can change, fork independence, reset, and a
complete fixed-size state."""

from hypothesis import given, settings
from hypothesis import strategies as st
from support import compile_cached
from support.strategies import chunkings, rule_sets, texts

from heatc import ir
from heatc.semantics.reference import Batch, Machine
from heatc.semantics.state import from_state, state_bytes
from heatc_runtime import Verdict


def run_pieces(machine: Machine, pieces: list[bytes]):
    snaps = []
    for p in pieces:
        snaps += machine.feed(p)
    snaps += machine.finish()
    return [e for s in snaps for e in s.events], snaps[-1].verdicts


@st.composite
def program_and_stream(draw):
    g = draw(rule_sets())
    program = compile_cached(g.source)
    return program, draw(texts(g.pieces))


@settings(max_examples=150)
@given(program_and_stream(), st.data())
def test_events_and_verdicts_do_not_depend_on_chunking(ps, data):
    program, stream = ps
    whole = run_pieces(Machine(program), [stream])
    for _ in range(3):
        pieces = data.draw(chunkings(stream))
        assert run_pieces(Machine(program), pieces) == whole
    bytewise = [stream[i : i + 1] for i in range(len(stream))]
    assert run_pieces(Machine(program), bytewise) == whole


class _EveryRule(Machine):
    """The semantics as docs/semantics.md words them: every rule steps on every lexeme, and a
    rule is pending while a thread sits in one of its slots (the Machine steps only the rules
    with a live thread or that the lexeme starts, and keeps the set of live rules)."""

    def __init__(self, program: ir.Program):
        super().__init__(program)
        everyone = tuple(range(len(program.rules)))
        self._starting = {code: everyone for code in range(ir.LEX_LITERAL0 + len(program.literals))}

    def verdicts(self) -> dict[str, Verdict]:
        out = {}
        for rule, rs in zip(self.program.rules, self._rules, strict=True):
            pending = any(t is not None for t in rs.slots)
            out[rule.name] = Verdict.REJECTED if rs.rejected else Verdict.PENDING if pending else Verdict.CONFIRMED
        return out


@settings(max_examples=150)
@given(program_and_stream(), st.data())
def test_stepping_only_live_and_started_rules_is_exact(ps, data):
    program, stream = ps
    pieces = data.draw(chunkings(stream))
    every = _EveryRule(program)
    got = []
    for piece in pieces:
        got.append(every.feed(piece))
    got.append(every.finish())
    m = Machine(program)
    assert got == [m.feed(piece) for piece in pieces] + [m.finish()]


@settings(max_examples=100)
@given(program_and_stream(), st.data())
def test_fork_is_independent(ps, data):
    program, stream = ps
    other_suffix = data.draw(st.binary(max_size=20))
    cut = data.draw(st.integers(0, len(stream)))
    prefix, suffix_a = stream[:cut], stream[cut:]
    parent = Machine(program)
    parent.feed(prefix)
    child = parent.fork()
    got_a = run_pieces(parent, [suffix_a])
    got_b = run_pieces(child, [other_suffix])
    fresh_a = Machine(program)
    fresh_a.feed(prefix)
    fresh_b = Machine(program)
    fresh_b.feed(prefix)
    assert got_a == run_pieces(fresh_a, [suffix_a])
    assert got_b == run_pieces(fresh_b, [other_suffix])


@settings(max_examples=100)
@given(program_and_stream(), st.binary(max_size=30))
def test_reset_forgets_everything(ps, junk):
    program, stream = ps
    m = Machine(program)
    m.feed(junk + stream)
    m.finish()
    m.reset()
    assert run_pieces(m, [stream]) == run_pieces(Machine(program), [stream])


@settings(max_examples=100)
@given(program_and_stream(), st.data())
def test_state_bytes_hold_the_whole_state(ps, data):
    """Restoring from the fixed-size byte record mid-stream continues identically."""
    program, stream = ps
    cut = data.draw(st.integers(0, len(stream)))
    m = Machine(program)
    m.feed(stream[:cut])
    m.snapshot()  # deliver pending events: the byte record holds state, not output
    state = state_bytes(m)
    assert len(state) == ir.state_layout(program).size
    restored = from_state(program, state)
    assert state_bytes(restored) == state
    assert run_pieces(restored, [stream[cut:]]) == run_pieces(m, [stream[cut:]])


@settings(max_examples=50)
@given(program_and_stream(), st.integers(1, 5))
def test_batch_sequences_are_independent(ps, n):
    program, stream = ps
    batch = Batch(program, n)
    pieces = [stream[i::n] for i in range(n)]  # a different stream per sequence
    snaps: list[list] = [[] for _ in range(n)]
    for step in range(max(len(p) for p in pieces)):
        for i, published in enumerate(batch.step([p[step : step + 1] for p in pieces])):
            snaps[i] += published
    for i, published in enumerate(batch.finish()):
        snaps[i] += published
    for i in range(n):
        events = [e for s in snaps[i] for e in s.events]
        assert (events, snaps[i][-1].verdicts) == run_pieces(Machine(program), [pieces[i]])


def test_feed_after_finish_is_an_error():
    program = compile_cached('class k keyword = "glucose"\nrule r { match k }\n')
    m = Machine(program)
    m.finish()
    try:
        m.feed(b"x")
    except RuntimeError as e:
        assert "reset" in str(e)
    else:
        raise AssertionError("feeding a finished stream must fail")
