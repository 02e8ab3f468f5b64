"""`Batch`: many sequences in one state array of a checker's memory, one wasm call per step.

Each batch counts what it did in its `counts` (`counts.StepCounts`), the only work a decoding
step does for metrics (docs/metrics.md). A batch reaches its checker through the public
members of `protocol.CheckerProtocol`, whichever backend it is.

Public surface: `Batch` (made by `Checker.batch(n)`).
"""

from __future__ import annotations

import ctypes
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from ..abi import EV_COUNT, SNAP_COUNT, STATUS, STATUS_FINISHED, STATUS_TEXT
from ..args import U32, as_bytes, bad_id, count, index, token_ids
from ..errors import CheckerClosed, ModuleTrap, SequenceInterrupted
from ..reports.report import Event, Snapshot
from .counts import StepCounts, clock
from .drafts import DraftChecks
from .states import BLOCKED, StateRecords

if TYPE_CHECKING:
    from .protocol import CheckerProtocol

# The events a batch holds for its sequences until a snapshot delivers them (docs/abi.md,
# "Limits"): past it a step traps rather than let host memory grow with the text (about half
# a kilobyte each).
MAX_PENDING_EVENTS = 1 << 20


class Batch(StateRecords, DraftChecks):
    """`n` sequences in one state array; every method is one wasm call for the whole batch.

    Methods return the snapshots published, by sequence index — an empty dict when no
    trigger fired, which is the common case at each decoding step. Every sequence index is
    checked (IndexError; negative indices are refused), and every token id (no id wraps
    round or is truncated: a float, a negative or a too-large id is refused before any
    sequence advances).

    After a trap (`ModuleTrap`: deadline, fuel, memory) the sequences the call was stepping
    are *interrupted* — their step's output is lost and their state half-updated — and
    every call that needs them raises `SequenceInterrupted` until they are reset
    (`reset(i)`, `reset()`) or a clean sequence is forked onto them. A finished sequence
    (after `finish()`) must be reset before it is fed or finished again.

    `close()` (or leaving a `with` block) gives the state array back to the checker at once;
    a batch that is garbage-collected gives it back too. Made by `Checker.batch(n)`.

    Parameters
    ----------
    checker : CheckerProtocol
        The checker whose memory holds the states (any backend's).
    n : int
        The number of sequences, at least 1.

    Raises
    ------
    ValueError
        `n` is not a whole number of at least 1.
    CheckerClosed
        The checker, or later this batch, was closed.
    ModuleTrap
        A call ran out of its budget or trapped (the sequences it stepped are interrupted).
    SequenceInterrupted
        A call needs a sequence that an earlier trap interrupted.
    """

    def __init__(self, checker: CheckerProtocol, n: int):
        n = count(n, "n")
        self.checker = checker
        self.n = n
        self._one = n == 1
        self._closed = False
        self._pending: dict[int, list[Event]] = {}
        self._interrupted: set[int] = set()
        self._finished: set[int] = set()
        checker.ready_token_table()  # (a build's token table, in memory from the first batch on)
        with checker.lock:
            checker.check_open()
            ids_at = -(-n * checker.state_size // 16) * 16
            self._block = checker.alloc(ids_at + 4 * n)  # the states, then the step's token ids
            self.states, self._ids = self._block, self._block + ids_at
            try:
                checker.begin()
                checker.call("reset_batch", self.states, n)
            except ModuleTrap:
                checker.trapped()
                checker.free(self._block)
                raise
            self._view_ids()
            self._step = checker.bound("step_batch", self.states, self._ids, n, 0)
            self._finalizer = weakref.finalize(self, checker.free_later, self._block)
            self._finalizer.atexit = False  # (the checkers are closed at exit)
        self._rearm_each_call = checker.limits.fuel is not None
        self.counts = StepCounts()

    def __len__(self) -> int:
        return self.n

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Give the batch's memory back to its checker now; later calls raise `CheckerClosed`."""
        c = self.checker
        with c.lock:
            if self._closed:
                return
            self._closed = True
            self._ids_generation = BLOCKED
            self._finalizer.detach()
            if not c.closed:
                c.free(self._block)

    # -- state of the sequences ---------------------------------------------------------

    def _usable(self, *seqs: int) -> None:
        """Raise unless the batch and its checker are open and none of `seqs` (no seqs: none
        of the batch) is interrupted."""
        if self._closed:
            raise CheckerClosed("this batch was closed: open another with checker.batch(n)")
        self.checker.check_open()
        hit = self._interrupted.intersection(seqs) if seqs else self._interrupted
        if hit:
            raise SequenceInterrupted(
                f"{_seqs(hit)} of this batch {'was' if len(hit) == 1 else 'were'} interrupted by a trap "
                "mid-step: reset (batch.reset(i), or batch.reset() for all) before using it again"
            )

    def _not_finished(self, *seqs: int) -> None:
        hit = self._finished.intersection(seqs) if seqs else self._finished
        if hit:
            raise ValueError(f"sequence {min(hit)}: {STATUS_TEXT[STATUS_FINISHED]}")

    def _interrupt(self, seqs: set[int] | None, trap: ModuleTrap) -> ModuleTrap:
        """Mark the sequences a trapped call was stepping; the error to raise."""
        self.checker.trapped()
        hit = set(range(self.n)) if seqs is None else seqs
        self._interrupted |= hit
        for i in hit:
            self._pending.pop(i, None)
        self._ids_generation = BLOCKED
        return ModuleTrap(f"{trap}; {_seqs(hit)} of the batch must be reset before use (its step was lost)")

    def _ready(self) -> None:
        """feed_ids' checked path: after memory grew, a new token table, a trap, a finish, or
        on the first step. Raises what makes the batch unable to step."""
        c = self.checker
        self._usable()
        self._not_finished()
        if c.token_table is None:
            raise ValueError("no token table: call checker.set_token_table() first")
        self._view_ids()
        self._ids_generation = c.generation

    def _view_ids(self) -> None:
        c = self.checker
        self._ids_view = c.mem[self._ids : self._ids + 4 * self.n].view(np.uint32)
        self._id0 = ctypes.c_uint32.from_address(self._ids_view.ctypes.data)
        self._ids_generation = BLOCKED  # (set current by _ready, which checks the rest)

    @contextmanager
    def _stepping(self, i: int) -> Iterator[int]:
        """Sequence `i`'s state record (its address), under the checker's lock, the sequence
        usable and not finished and the call budgeted; a trap in the block interrupts it."""
        c = self.checker
        with c.lock:
            self._usable(i)
            self._not_finished(i)
            try:
                c.begin()
                yield self.states + i * c.state_size
            except ModuleTrap as e:
                raise self._interrupt({i}, e) from None

    # -- records ----------------------------------------------------------------------

    def _collect(self, out: dict[int, list[Snapshot]]) -> dict[int, list[Snapshot]]:
        events, snaps = self.checker.drain()
        for seq, e in events:
            self._pending.setdefault(seq, []).append(e)
        if snaps:
            self.counts.snapshots += sum(1 for *_, snap in snaps if not snap.final)
        for seq, n_events, snap in snaps:
            if n_events:  # (most snapshots of a decoding step cover no events)
                pending = self._pending.get(seq, [])
                snap.events = pending[:n_events]
                self._pending[seq] = pending[n_events:]
            if seq in out:
                out[seq].append(snap)
            else:
                out[seq] = [snap]
        if events and sum(map(len, self._pending.values())) > MAX_PENDING_EVENTS:
            seq = max(self._pending, key=lambda i: len(self._pending[i]))
            raise ModuleTrap(
                f"sequence {seq} holds {len(self._pending[seq]):,} events no snapshot has delivered, and the batch "
                f"more than {MAX_PENDING_EVENTS:,} (a trigger in the text, or batch.snapshot(), delivers them)"
            )
        return out

    # -- stepping ---------------------------------------------------------------------

    def feed_ids(self, ids) -> dict[int, list[Snapshot]]:
        """Advance every sequence by one token id (through the token table): one wasm call.

        Parameters
        ----------
        ids : sequence of int
            One token id per sequence (a list, or a numpy array of unsigned ints).

        Returns
        -------
        dict of int to list of Snapshot
            The snapshots the step published, by sequence (empty when no trigger fired).

        Raises
        ------
        TypeError
            `ids` is not a sequence of `n` ids, or an id is not a whole number.
        ValueError
            An id is negative or past the token table, no token table is set, or a sequence is finished.
        CheckerClosed
            The batch or its checker was closed.
        ModuleTrap
            The step ran out of its budget or trapped (every sequence is interrupted).
        SequenceInterrupted
            A sequence was interrupted by an earlier trap.
        """
        c = self.checker
        # (every attribute looked up and every call made here is a measurable share of a
        # decoding step at batch 1: the lock is taken with acquire/release, about half the
        # cost of a `with` block here; ids[0] goes to ctypes as it is, and only an id that
        # is not a numpy uint32 is checked for wrapping round (the kernel refuses ids past
        # the table); the deadline is checked against one precomputed time; the step is
        # counted with one increment and timed only when its number is a sampled one)
        lock = c.lock
        lock.acquire()
        try:
            counts = self.counts
            steps, mask = counts.steps, counts.mask
            t0 = clock() if steps & mask == mask else None  # (mask -1: never)
            if self._ids_generation != c.generation:  # see _ready
                self._ready()
            try:
                one = self._one and len(ids) == 1
            except TypeError:
                raise TypeError(f"token ids: expected a sequence of {self.n}, got {type(ids).__name__}") from None
            if one:
                v = ids[0]
                try:
                    self._id0.value = v
                except TypeError:
                    raise bad_id(v, c.n_tokens) from None
                # (ctypes keeps the low 32 bits, and takes a bool as 0 or 1)
                if v.__class__ is not U32 and (v >> 32 or v.__class__ is bool):
                    raise bad_id(v, c.n_tokens)
            else:
                self._ids_view[:] = token_ids(ids, self.n, c.n_tokens)
            if self._rearm_each_call or time.monotonic() > c.rearm_at:  # (c.begin(), inlined)
                c.arm()
            try:
                done = self._step()
            except ModuleTrap as e:
                raise self._interrupt(None, e) from None
            counts.steps = steps + 1  # (a step refused before it ran is not counted)
            ctlc = c.ctl_words
            if done == self.n and not (ctlc[EV_COUNT] or ctlc[SNAP_COUNT]):
                return {}  # the common decoding step: nothing worth a Python object happened
            return self._step_rest(done)
        finally:
            lock.release()
            if t0 is not None and counts.steps != steps:
                counts.timed(counts.step_seconds, t0)

    def _step_rest(self, done: int) -> dict[int, list[Snapshot]]:
        """The rest of a step whose first call published something or stopped early."""
        c = self.checker
        ctl = c.ctl
        out: dict[int, list[Snapshot]] = {}
        try:
            self._collect(out)
            while done < self.n:  # the buffers filled, or a bad token id
                if ctl[STATUS]:
                    status, ctl[STATUS] = int(ctl[STATUS]), 0
                    if done:  # (ids are checked before the step: only a batch of one gets here)
                        self._interrupt(None, ModuleTrap("a token id the host did not check"))
                    if status == 1:
                        raise bad_id(int(self._ids_view[done]), c.n_tokens)
                    raise ValueError(f"sequence {done}: {STATUS_TEXT.get(status, status)}")
                more = c.call(
                    "step_batch", self.states + done * c.state_size, self._ids + 4 * done, self.n - done, done
                )
                self._collect(out)
                if not more and not ctl[STATUS]:
                    more = self._feed_long(done, out)
                done += more
        except ModuleTrap as e:
            raise self._interrupt(None, e) from None
        return out

    def _feed_long(self, i: int, out: dict[int, list[Snapshot]]) -> int:
        """Step sequence `i` by a token too long for one call even with empty buffers: its
        bytes in as many calls as they need (what `feed_text` does)."""
        c = self.checker
        token = c.token_table[int(self._ids_view[i])]
        ptr = c.put_input(token)
        self._view_ids()  # (_input may have grown memory, moving it: the rest of the step reads the ids)
        st, fed = self.states + i * c.state_size, 0
        while fed < len(token):
            more = c.call("feed", st, i, ptr + fed, len(token) - fed, 1)
            self._collect(out)
            if not more:
                raise c.stalled("a batch step")
            fed += more
        return 1

    def feed_text(self, i: int, text: str | bytes) -> list[Snapshot]:
        """Feed one sequence some bytes (one token).

        Parameters
        ----------
        i : int
            The sequence fed.
        text : str or bytes-like
            Its bytes: str (UTF-8), bytes, bytearray or memoryview.

        Returns
        -------
        list of Snapshot
            The snapshots sequence `i` published.

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        TypeError
            `text` is neither a str nor bytes-like.
        ValueError
            Sequence `i` is finished.
        CheckerClosed
            The batch or its checker was closed.
        ModuleTrap
            The call ran out of its budget or trapped (sequence `i` is interrupted).
        SequenceInterrupted
            Sequence `i` was interrupted by an earlier trap.
        """
        i = index(i, self.n, "i")
        data = as_bytes(text, "text")
        c = self.checker
        out: dict[int, list[Snapshot]] = {}
        counts = self.counts
        t0 = clock() if counts.mask >= 0 else None
        with self._stepping(i) as st:
            ptr = c.put_input(data)
            done = 0
            while True:
                more = c.call("feed", st, i, ptr + done, len(data) - done, 1)
                self._collect(out)
                done += more
                if done == len(data):
                    break
                if c.ctl[STATUS]:
                    c.ctl[STATUS] = 0
                    raise ValueError(f"sequence {i}: {STATUS_TEXT[STATUS_FINISHED]}")
                if not more:
                    raise c.stalled("feed_text")
            counts.text_feeds += 1
        if t0 is not None:
            counts.timed(counts.text_seconds, t0)
        return out.get(i, [])

    def _each(self, name: str) -> dict[int, list[Snapshot]]:
        c = self.checker
        out: dict[int, list[Snapshot]] = {}
        with c.lock:
            self._usable()
            if name == "finish_batch":
                self._not_finished()
            states, n, seq0 = self.states, self.n, 0
            try:
                c.begin()
                while n:
                    done = c.call(name, states, n, seq0)
                    self._collect(out)
                    if not done:
                        raise c.stalled(name)
                    states += done * c.state_size
                    seq0 += done
                    n -= done
            except ModuleTrap as e:
                raise self._interrupt(None, e) from None
            if name == "finish_batch":
                self._finished.update(range(self.n))
                self._ids_generation = BLOCKED
        return out

    def snapshot(self) -> dict[int, list[Snapshot]]:
        """Publish a snapshot of every sequence now.

        Returns
        -------
        dict of int to list of Snapshot
            Every sequence's snapshot (with the events since its last one).
        """
        return self._each("snapshot_batch")

    def finish(self) -> dict[int, list[Snapshot]]:
        """End every sequence's stream; the last snapshot of each is final.

        Returns
        -------
        dict of int to list of Snapshot
            The snapshots published, each sequence's final one last.
        """
        return self._each("finish_batch")

    def finish_one(self, i: int) -> list[Snapshot]:
        """End sequence `i`'s stream alone, the others going on; its last snapshot is final. (A
        decoding loop ends sequences at different steps.)

        Parameters
        ----------
        i : int
            The sequence ended.

        Returns
        -------
        list of Snapshot
            The snapshots it published, the final one last.

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        ValueError
            Sequence `i` is already finished.
        CheckerClosed
            The batch or its checker was closed.
        ModuleTrap
            Its finish ran out of budget or trapped (sequence `i` is then interrupted).
        SequenceInterrupted
            An earlier trap interrupted sequence `i`.
        """
        i = index(i, self.n, "i")
        c = self.checker
        out: dict[int, list[Snapshot]] = {}
        with self._stepping(i) as st:
            while not c.is_finished(st):  # (finish does nothing when the buffers lack room: drain, call again)
                c.call("finish", st, i)
                published = c.ctl_words[EV_COUNT] or c.ctl_words[SNAP_COUNT]
                self._collect(out)
                if not published and not c.is_finished(st):
                    raise c.stalled("finish_one")
            self._finished.add(i)
            self._ids_generation = BLOCKED
        return out.get(i, [])


def _seqs(seqs: set[int]) -> str:
    """'sequence 3', 'sequences 0 to 63', 'sequences 1, 4, 9'."""
    s = sorted(seqs)
    if len(s) == 1:
        return f"sequence {s[0]}"
    if s[-1] - s[0] == len(s) - 1:
        return f"sequences {s[0]} to {s[-1]}"
    return "sequences " + ", ".join(map(str, s[:8])) + (", …" if len(s) > 8 else "")
