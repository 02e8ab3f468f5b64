"""The runtime API as a state machine (hypothesis `RuleBasedStateMachine`): random sequences
of scan, batch, feed_ids, feed_text, fork, reset, snapshot, finish, state, traps under a
tight fuel budget, clone, close and bad calls, each checked at once against the reference
interpreter (one `Machine` per sequence) — no wrong result, no crash, the documented
exception for every bad call, and memory bounded: under a 64 MB cap at every step, and at
the end of each sequence of calls, with its batches closed, back where it started.

It runs on every backend in `RUNTIME_BACKENDS` (WASM and the native core). The native core
has no fuel or deadline (it runs the host's own code; every call's work is bounded by its
input), so its checkers are never opened with the tight budget and the trap rules are off.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support import REPO

import heatc_runtime as rt
from heatc import ir
from heatc.cache import ProgramCache
from heatc.lang.compiler import compile_file, compile_source
from heatc.semantics.reference import Machine
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack


@dataclass(frozen=True)
class RuntimeBackend:
    """How the state machine opens a checker of a backend and reads its memory footprint."""

    load: Callable[[ir.Program, rt.Limits], object]  # → an object with the Checker API
    size: Callable[[object], int]  # the memory the checker's module has (it may only grow)
    held: Callable[[object], int]  # the memory its token table and batches hold now
    traps: bool = True  # a fuel budget stops its calls (the trap rules apply)


_wasm_module = ProgramCache(compile_wasm)


def _wasm_load(program: ir.Program, limits: rt.Limits):
    module = _wasm_module(program)
    return rt.from_bytes(module.manifest, module.wasm, limits)


def _native_load(program: ir.Program, limits: rt.Limits):
    module = _wasm_module(program)
    return rt.from_bytes(module.manifest, _native_tables(program), limits, backend="native")


_native_tables = ProgramCache(lambda program: hct_bytes(program, pack(program), (0, 0)))


def _held(checker) -> int:
    return checker._heap.in_use - checker._input_cap


RUNTIME_BACKENDS: dict[str, RuntimeBackend] = {
    "wasm": RuntimeBackend(_wasm_load, lambda c: c._memory.data_len(c.store), _held),
    "native": RuntimeBackend(_native_load, lambda c: c._native.size, _held, traps=False),
}

WINDOWED = """
class g keyword = "glucose"
class u unit = "mg/dL"
class p punct = "."
class days unit = "days"
class notice keyword = "notice"
class q keyword = "quarterly"
class period other = "Q1", "Q2", "Q3", "Q4"
triggers { at p barrier p every 4 }
rule glucose { match g ..3 v:number u
  require v in [1, 2000] }
rule notice_days { match notice ..2 v:number days
  consistent v }
rule quarter { match q ..3 v:period
  lock time = v }
"""


@functools.cache
def _programs() -> dict[str, ir.Program]:
    out = {name: compile_file(REPO / "examples" / f"{name}.heat") for name in ("medical", "legal")}
    out["windowed"] = compile_source(WINDOWED, "windowed.heat")
    return out


PIECE = re.compile(r"\s+|\d+(?:[.,]\d+)*%?|\w+|[^\w\s]")
DENSE = b"glucose 5000 mg/dL. notice 30 days. quarterly Q3. "
MEDIUM = DENSE * 12  # a token longer than one step call takes (fed in pieces)
HUGE = DENSE * 800  # more than the tight fuel budget covers


@functools.cache
def _vocabulary() -> list[bytes]:
    counts: dict[bytes, int] = {}
    for path in sorted((REPO / "examples" / "texts").glob("*.txt")):
        for piece in PIECE.findall(path.read_text(encoding="utf-8")):
            counts[piece.encode()] = counts.get(piece.encode(), 0) + 1
    common = sorted(counts, key=lambda p: (-counts[p], p))[:300]
    extra = [b"", b"glucose", b"notice", b"days", b"quarterly", b"Q3", b"Q4", b"mg/dL", b"5000", b"30", b"60", b"."]
    return [*sorted(set(common) | set(extra)), MEDIUM, HUGE]


TIGHT = rt.Limits(fuel=2_000_000, memory_bytes=64 << 20)  # short inputs never run out; HUGE always does
ROOMY = rt.Limits(timeout_s=60, memory_bytes=64 << 20)
N_PLAIN = len(_vocabulary()) - 2  # ids below this are short tokens
MAX_BATCHES = 4


def _snaps(snaps) -> list:
    return [(s.events, dict(s.verdicts), s.counters, s.final) for s in snaps]


texts = st.lists(st.integers(0, N_PLAIN - 1), max_size=30).map(lambda ids: b"".join(_vocabulary()[i] for i in ids))
ids = st.integers(0, N_PLAIN - 1)


class _Batch:
    """A runtime batch and its model: a reference Machine per sequence, the interrupted ones."""

    def __init__(self, batch, program: ir.Program, n: int):
        self.batch, self.n = batch, n
        self.machines = [Machine(program) for _ in range(n)]
        self.interrupted: set[int] = set()
        self.closed = False


class RuntimeAPI(RuleBasedStateMachine):
    backend_name = "wasm"

    @initialize(program=st.sampled_from(["medical", "legal", "windowed"]), tight=st.booleans())
    def open_checker(self, program, tight):
        self.backend = RUNTIME_BACKENDS[self.backend_name]
        self.program, self.tight = _programs()[program], tight and self.backend.traps
        self.checker = self._fresh()
        self.closed = False
        self.batches: list[_Batch] = []

    def _fresh(self):
        checker = self.backend.load(self.program, TIGHT if self.tight else ROOMY)
        checker.set_token_table(_vocabulary())
        self.held = self.backend.held(checker)
        return checker

    def teardown(self):
        if not hasattr(self, "checker"):
            return
        for b in self.batches:
            b.batch.close()
        if not self.closed:
            assert self.backend.held(self.checker) == self.held, "memory not given back"
            self.checker.close()

    # -- helpers --------------------------------------------------------------------------

    def _expect_closed(self, call) -> bool:
        """True when the checker is closed (and the call raised as it must)."""
        if self.closed:
            with pytest.raises(rt.CheckerClosed):
                call()
            return True
        return False

    def _usable(self, b: _Batch, call, seqs) -> bool:
        """True when the call may proceed; otherwise checks that it raises as documented."""
        if self.closed or b.closed:
            with pytest.raises(rt.CheckerClosed):
                call()
            return False
        if b.interrupted & set(seqs):
            with pytest.raises(rt.SequenceInterrupted):
                call()
            return False
        return True

    batch_index = st.integers(0, MAX_BATCHES - 1)

    def _batch(self, k: int) -> _Batch | None:
        return self.batches[k % len(self.batches)] if self.batches else None

    # -- documents ----------------------------------------------------------------------------

    @rule(text=texts)
    def scan(self, text):
        if self._expect_closed(lambda: self.checker.scan(text)):
            return
        report = self.checker.scan(text)
        m = Machine(self.program)
        snaps = m.feed(text) + m.finish()
        assert report.events == [e for s in snaps for e in s.events]
        assert (dict(report.verdicts), report.counters) == (dict(snaps[-1].verdicts), snaps[-1].counters)

    @precondition(lambda self: self.tight and not self.closed)
    @rule()
    def scan_out_of_fuel(self):
        with pytest.raises(rt.ModuleTrap, match="out of fuel"):
            self.checker.scan(HUGE)

    # -- batches ------------------------------------------------------------------------

    @precondition(lambda self: len([b for b in self.batches if not b.closed]) < MAX_BATCHES)
    @rule(n=st.integers(1, 4))
    def open_batch(self, n):
        if self._expect_closed(lambda: self.checker.batch(n)):
            return
        self.batches.append(_Batch(self.checker.batch(n), self.program, n))

    @precondition(lambda self: self.batches)
    @rule(k=batch_index)
    def close_batch(self, k):
        b = self._batch(k)
        b.batch.close()  # (idempotent, and allowed on a closed checker)
        b.closed = True

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, data=st.data())
    def feed_ids(self, k, data):
        b = self._batch(k)
        step = [data.draw(ids) for _ in range(b.n)]
        call = functools.partial(b.batch.feed_ids, step)
        if not self._usable(b, call, range(b.n)):
            return
        if any(m.finished for m in b.machines):
            with pytest.raises(ValueError, match="finished"):
                call()
            return
        got = call()
        for i, (m, t) in enumerate(zip(b.machines, step, strict=True)):
            assert _snaps(got.get(i, [])) == _snaps(m.feed(_vocabulary()[t])), f"sequence {i}"

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, i=st.integers(0, 3), text=texts | st.just(MEDIUM))
    def feed_text(self, k, i, text):
        b = self._batch(k)
        i %= b.n
        call = functools.partial(b.batch.feed_text, i, text)
        if not self._usable(b, call, [i]):
            return
        if b.machines[i].finished:
            with pytest.raises(ValueError, match="finished"):
                call()
            return
        assert _snaps(call()) == _snaps(b.machines[i].feed(text))

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, dst=st.integers(0, 3), src=st.integers(0, 3))
    def fork(self, k, dst, src):
        b = self._batch(k)
        dst, src = dst % b.n, src % b.n
        if not self._usable(b, lambda: b.batch.fork(dst, src), [src]):
            return
        b.batch.fork(dst, src)
        b.machines[dst] = b.machines[src].fork()
        b.interrupted.discard(dst)

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, i=st.none() | st.integers(0, 3))
    def reset(self, k, i):
        b = self._batch(k)
        i = None if i is None else i % b.n
        if self.closed or b.closed:
            with pytest.raises(rt.CheckerClosed):
                b.batch.reset(i)
            return
        b.batch.reset(i)
        for j in range(b.n) if i is None else [i]:
            b.machines[j].reset()
            b.interrupted.discard(j)

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, final=st.booleans())
    def publish(self, k, final):
        """snapshot(), or finish() with `final`."""
        b = self._batch(k)
        call = b.batch.finish if final else b.batch.snapshot
        if not self._usable(b, call, range(b.n)):
            return
        if final and any(m.finished for m in b.machines):
            with pytest.raises(ValueError, match="finished"):
                call()
            return
        got = call()
        for i, m in enumerate(b.machines):
            assert _snaps(got[i]) == _snaps(m.finish() if final else [m.snapshot()])

    @precondition(lambda self: self.batches)
    @rule(k=batch_index, i=st.integers(0, 3))
    def state(self, k, i):
        b = self._batch(k)
        i %= b.n
        if self._usable(b, lambda: b.batch.state(i), [i]):
            assert len(b.batch.state(i)) == self.checker.state_size

    # -- traps ------------------------------------------------------------------------------

    @precondition(lambda self: self.tight and self.batches)
    @rule(k=batch_index, i=st.integers(0, 3))
    def trap_one(self, k, i):
        b = self._batch(k)
        i %= b.n
        call = functools.partial(b.batch.feed_text, i, HUGE)
        if not self._usable(b, call, [i]) or b.machines[i].finished:
            return
        with pytest.raises(rt.ModuleTrap, match="must be reset"):
            call()
        b.interrupted.add(i)

    @precondition(lambda self: self.tight and self.batches)
    @rule(k=batch_index)
    def trap_all(self, k):
        b = self._batch(k)
        huge = len(_vocabulary()) - 1
        call = functools.partial(b.batch.feed_ids, [huge] * b.n)
        if not self._usable(b, call, range(b.n)) or any(m.finished for m in b.machines):
            return
        with pytest.raises(rt.ModuleTrap, match="must be reset"):
            call()
        b.interrupted.update(range(b.n))

    # -- bad calls ----------------------------------------------------------------------------

    @precondition(lambda self: self.batches)
    @rule(
        k=batch_index,
        bad=st.sampled_from(
            [
                ("reset", (-1,), IndexError),
                ("reset", (4,), IndexError),
                ("fork", (0, 7), IndexError),
                ("fork", (-2, 0), IndexError),
                ("feed_text", (9, b"x"), IndexError),
                ("feed_text", (0, 123), TypeError),
                ("state", (5,), IndexError),
                ("state", (0.0,), TypeError),
                ("feed_ids", ([2**32 + 3] * 4,), ValueError),
                ("feed_ids", ([-1] * 4,), ValueError),
                ("feed_ids", ([1.5] * 4,), TypeError),
                ("feed_ids", ([10**6] * 4,), ValueError),
            ]
        ),
    )
    def bad_batch_call(self, k, bad):
        b = self._batch(k)
        name, args, error = bad
        if name == "feed_ids":
            args = (args[0][: b.n],)
        # (feed_ids looks at the batch's state before the ids; the others at their arguments first)
        if self.closed or b.closed:
            error = (error, rt.CheckerClosed)
        elif b.interrupted:
            error = (error, rt.SequenceInterrupted)
        elif name == "feed_ids" and any(m.finished for m in b.machines):
            error = (error, ValueError)
        with pytest.raises(error):
            getattr(b.batch, name)(*args)

    @rule(bad=st.sampled_from([123, None, 4.5, ["x"]]))
    def bad_scan(self, bad):
        with pytest.raises(TypeError):
            self.checker.scan(bad)

    # -- clone and close ----------------------------------------------------------------------

    @precondition(lambda self: not self.closed)
    @rule()
    def clone(self):
        twin = self.checker.clone()
        text = b"glucose 5000 mg/dL. notice 30 days."
        assert twin.scan(text) == self.checker.scan(text)
        twin.close()

    @rule()
    def close_checker(self):
        self.checker.close()
        self.closed = True
        for b in self.batches:  # (a closed checker's batches are closed)
            b.closed = True

    @precondition(lambda self: self.closed)
    @rule()
    def reopen(self):
        self.checker = self._fresh()
        self.closed = False

    @invariant()
    def memory_is_bounded(self):
        if not getattr(self, "closed", True):
            assert self.backend.size(self.checker) <= 64 << 20


EXAMPLES = int(os.environ.get("HEATC_STATEFUL_EXAMPLES", "60"))


@pytest.mark.parametrize("backend", sorted(RUNTIME_BACKENDS))
def test_the_runtime_api_against_the_reference(backend):
    machine = type(f"RuntimeAPI_{backend}", (RuntimeAPI,), {"backend_name": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
