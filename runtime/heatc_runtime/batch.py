"""`Batch`: many sequences in one state array of a checker's memory, one wasm call per step."""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

import numpy as np

from .abi import EV_COUNT, SNAP_COUNT, STATUS, STATUS_TEXT
from .report import Event, Snapshot

if TYPE_CHECKING:
    from .checker import Checker


class Batch:
    """`n` sequences in one state array; every method is one wasm call for the whole batch.

    Methods return the snapshots published, by sequence index — an empty dict when no
    trigger fired, which is the common case at each decoding step.
    """

    def __init__(self, checker: Checker, n: int):
        if n < 1:
            raise ValueError("a batch needs at least one sequence")
        self.checker = checker
        self.n = n
        with checker._lock:
            self.states = checker._alloc(n * checker.state_size)
            self._ids = checker._alloc(4 * n)
            checker._call("reset_batch", self.states, n)
            self._view_ids()
        self._step = checker._calls["step_batch"].bound(self.states, self._ids, n, 0)
        self._rearm_each_call = checker.limits.fuel is not None
        self._pending: dict[int, list[Event]] = {}

    def __len__(self) -> int:
        return self.n

    def _collect(self, out: dict[int, list[Snapshot]]) -> dict[int, list[Snapshot]]:
        events, snaps = self.checker._drain()
        for seq, e in events:
            self._pending.setdefault(seq, []).append(e)
        for seq, n_events, snap in snaps:
            if n_events:  # (most snapshots of a decoding step cover no events)
                pending = self._pending[seq]
                snap.events = pending[:n_events]
                self._pending[seq] = pending[n_events:]
            if seq in out:
                out[seq].append(snap)
            else:
                out[seq] = [snap]
        return out

    def _view_ids(self) -> None:
        c = self.checker
        self._ids_view = c._mem[self._ids : self._ids + 4 * self.n].view(np.uint32)
        self._id0 = ctypes.c_uint32.from_address(self._ids_view.ctypes.data)
        # (without a token table the views are never current: feed_ids checks for one)
        self._ids_generation = c._generation if c._token_table is not None else -1

    def feed_ids(self, ids) -> dict[int, list[Snapshot]]:
        """Advance every sequence by one token id (through the token table): one wasm call."""
        c = self.checker
        # (every attribute looked up and every call made here is a measurable share of a
        # decoding step at batch 1: the lock is taken with acquire/release, about half the
        # cost of a `with` block here; ids[0] goes to ctypes as it is; the deadline is
        # checked against one precomputed time)
        lock = c._lock
        lock.acquire()
        try:
            if self._ids_generation != c._generation:  # memory grew, a new token table, or none yet
                if c._token_table is None:
                    raise ValueError("no token table: call checker.set_token_table() first")
                self._view_ids()
            if self.n == 1 and len(ids) == 1:
                self._id0.value = ids[0]
            else:
                try:
                    self._ids_view[:] = ids
                except ValueError:
                    raise ValueError(f"expected {self.n} token ids, got shape {np.shape(ids)}") from None
            if self._rearm_each_call or time.monotonic() > c._rearm_at:
                c._arm()
            done = self._step()
            ctlc = c._ctlc
            if done == self.n and not (ctlc[EV_COUNT] or ctlc[SNAP_COUNT]):
                return {}  # the common decoding step: nothing worth a Python object happened
            ctl = c._ctlv
            out: dict[int, list[Snapshot]] = {}
            self._collect(out)
            while done < self.n:  # the buffers filled, or a bad token id
                if ctl[STATUS]:
                    status, ctl[STATUS] = int(ctl[STATUS]), 0
                    raise ValueError(f"sequence {done}: {STATUS_TEXT.get(status, status)}")
                done += c._call(
                    "step_batch", self.states + done * c.state_size, self._ids + 4 * done, self.n - done, done
                )
                self._collect(out)
            return out
        finally:
            lock.release()

    def feed_text(self, i: int, text: str | bytes) -> list[Snapshot]:
        """Feed one sequence some bytes (one token)."""
        c = self.checker
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        st = self.states + i * c.state_size
        out: dict[int, list[Snapshot]] = {}
        with c._lock:
            ptr = c._input(data)
            done = 0
            while True:
                done += c._call("feed", st, i, ptr + done, len(data) - done, 1)
                self._collect(out)
                if done == len(data):
                    break
                if c._ctl_get("status"):
                    c._ctl(status=0)
                    raise ValueError(f"sequence {i}: {STATUS_TEXT[2]}")
        return out.get(i, [])

    def _each(self, name: str) -> dict[int, list[Snapshot]]:
        c = self.checker
        out: dict[int, list[Snapshot]] = {}
        with c._lock:
            states, n, seq0 = self.states, self.n, 0
            while n:
                done = c._call(name, states, n, seq0)
                self._collect(out)
                states += done * c.state_size
                seq0 += done
                n -= done
        return out

    def snapshot(self) -> dict[int, list[Snapshot]]:
        """Publish a snapshot of every sequence now."""
        return self._each("snapshot_batch")

    def finish(self) -> dict[int, list[Snapshot]]:
        """End every sequence's stream; the last snapshot of each is final."""
        return self._each("finish_batch")

    def reset(self, i: int | None = None) -> None:
        c = self.checker
        with c._lock:
            if i is None:
                c._call("reset_batch", self.states, self.n)
                self._pending.clear()
            else:
                c._call("reset", self.states + i * c.state_size)
                self._pending.pop(i, None)

    def fork(self, dst: int, src: int) -> None:
        """Make sequence `dst` a copy of `src` (state and undelivered events)."""
        c = self.checker
        with c._lock:
            c._call("fork", self.states + dst * c.state_size, self.states + src * c.state_size)
            self._pending[dst] = list(self._pending.get(src, []))

    def state(self, i: int) -> bytes:
        """The raw fixed-size state record of sequence `i`."""
        c = self.checker
        at = self.states + i * c.state_size
        return bytes(c._view()[at : at + c.state_size])

    def finish_one(self, i: int) -> list[Snapshot]:
        """End sequence `i`'s stream alone, the others going on; its last snapshot is final.
        (A decoding loop ends sequences at different steps.)"""
        c = self.checker
        out: dict[int, list[Snapshot]] = {}
        with c._lock:
            st = self.states + i * c.state_size
            while not c._finished(st):  # (finish does nothing when the buffers lack room: drain, call again)
                c._call("finish", st, i)
                self._collect(out)
        return out.get(i, [])
