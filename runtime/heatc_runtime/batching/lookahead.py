"""`Lookahead`: try tokens on copies of a batch's sequences, all of them in a constant number
of wasm calls, without touching the sequences themselves.

Guard mode asks, at every decoding step, "would this candidate token add a rejection?" for
k candidates of every sequence. One call per candidate would cost k × batch crossings into
wasm per step; here the sequences are copied into a scratch state array with one numpy
assignment (states are plain bytes, docs/abi.md), the candidates are fed in one
`step_batch` call (a second one for an optional follow-up token each), the copies are ended
with one `finish_batch` call, and each copy's count of rejections is read from its state
record. Whatever the copies publish (events, snapshots) is discarded: only the counts matter.

Its scratch memory is given back to the checker when it grows, on `close()`, or when the
Lookahead is garbage-collected. A call stopped by the checker's budget raises `ModuleTrap`
and leaves the batch's sequences as they were (only copies were stepped).

Public surface: `Lookahead(batch)`, `.rejections(rows)`, `.try_tokens(rows, first, then=None)`,
`.close()`.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..abi import EV_COUNT, QUIET, SNAP_COUNT, STATUS, STATUS_TEXT
from ..errors import ModuleError, ModuleTrap
from .batch import Batch


class Lookahead:
    """Scratch copies of a batch's sequences for trying tokens (grows to the largest request)."""

    def __init__(self, batch: Batch):
        c = batch.checker
        layout = c.manifest["layout"]
        if "rejections_offset" not in layout:
            raise ModuleError(
                "this module's manifest does not say where a state keeps its rejections "
                "(built by an older heatc): rebuild it to use lookahead (guard mode)"
            )
        self.batch = batch
        self.checker = c
        self._rej = int(layout["rejections_offset"])
        self._cap = 0
        self._block = self._states = self._ids = 0
        self._generation = -1
        self._finalizer: weakref.finalize | None = None

    def close(self) -> None:
        """Give the scratch memory back to the checker now."""
        c = self.checker
        with c.lock:
            self._release()

    def _release(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
            if not self.checker.closed:
                self.checker.free(self._block)
        self._cap, self._block, self._generation = 0, 0, -1

    def _ensure(self, m: int) -> None:
        c = self.checker
        self.batch._usable()
        if m > self._cap:
            cap = max(m, 2 * self._cap, 64)  # (doubling: few reallocations as batches grow)
            self._release()
            ids_at = -(-cap * c.state_size // 16) * 16
            self._block = c.alloc(ids_at + 4 * cap)  # the copies' states, then their token ids
            self._states, self._ids = self._block, self._block + ids_at
            self._finalizer = weakref.finalize(self, c.free_later, self._block)
            self._finalizer.atexit = False  # (the checkers are closed at exit)
            self._cap = cap
        if self._generation != c.generation:  # memory grew: every view is stale
            size, n = c.state_size, self.batch.n
            mem = c.mem
            self._main = mem[self.batch.states : self.batch.states + n * size].reshape(n, size)
            self._scratch = mem[self._states : self._states + self._cap * size].reshape(self._cap, size)
            self._ids_view = mem[self._ids : self._ids + 4 * self._cap].view(np.uint32)
            self._generation = c.generation

    def _counts(self, states: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(states[:, self._rej : self._rej + 8]).view("<u8").ravel()

    def rejections(self, rows) -> np.ndarray:
        """The rejections so far of the batch's sequences `rows` (uint64)."""
        with self.checker.lock:
            self._ensure(0)
            return self._counts(self._main[np.asarray(rows, dtype=np.intp)])

    def try_tokens(self, rows, first, then=None) -> np.ndarray:
        """For each i: a copy of sequence `rows[i]` is fed token `first[i]` (then `then[i]`),
        and its text is ended there. Returns each copy's rejections at the end (uint64):
        compared with `rejections(rows)`, what the tokens — and ending the text there, which
        completes a number still being read — would add."""
        rows = np.asarray(rows, dtype=np.intp)
        m = len(rows)
        if m == 0:
            return np.zeros(0, np.uint64)
        c = self.checker
        with c.lock:
            self._ensure(m)
            self._scratch[:m] = self._main[rows]
            c.ctl[QUIET] = 1  # only the final snapshots, which are discarded too
            try:
                c.begin()
                self._step(first, m)
                if then is not None:
                    self._step(then, m)
                self._run("finish_batch", m)
            except ModuleTrap:
                c.trapped()
                raise
            finally:
                c.ctl[QUIET] = 0
                c.ctl[EV_COUNT] = c.ctl[SNAP_COUNT] = 0
            return self._counts(self._scratch[:m])

    def _step(self, ids, m: int) -> None:
        self._ids_view[:m] = ids
        c, size, done = self.checker, self.checker.state_size, 0
        ctl = c.ctl
        while done < m:
            more = c.call("step_batch", self._states + done * size, self._ids + 4 * done, m - done, 0)
            done += more
            if ctl[STATUS]:
                status, ctl[STATUS] = int(ctl[STATUS]), 0
                bad = int(self._ids_view[done])
                raise ValueError(f"lookahead token {bad}: {STATUS_TEXT.get(status, status)}")
            ctl[EV_COUNT] = ctl[SNAP_COUNT] = 0  # (full buffers return early: discard, go on)
            if not more and done < m:
                raise c.stalled("a lookahead step")

    def _run(self, name: str, m: int) -> None:
        c, size, done = self.checker, self.checker.state_size, 0
        while done < m:
            more = c.call(name, self._states + done * size, m - done, 0)
            done += more
            c.ctl[EV_COUNT] = c.ctl[SNAP_COUNT] = 0
            if not more and done < m:
                raise c.stalled(f"a lookahead {name}")
