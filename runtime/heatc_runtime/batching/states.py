"""`StateRecords`: a batch's sequences as state records — started afresh (`reset`), copied
onto each other (`fork`, `fork_from`), saved and restored (`save`, `restore`, `copy_states`,
`pending`), read (`state`). A record is plain bytes of a size fixed at build time (docs/abi.md, "State
record"), the same on every backend, so a checkpoint is a copy. `Batch` takes these methods
from this mixin.

Public surface: `StateRecords`, `BLOCKED`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..args import index
from ..errors import CheckerClosed, ModuleTrap, SequenceInterrupted  # noqa: F401 (the Raises sections name them)

if TYPE_CHECKING:
    from ..reports.report import Event

BLOCKED = -3  # a batch's generation while feed_ids must take the checked path (see _ready)


class StateRecords:
    """The state-record methods of `Batch` (a mixin: they use the batch's own fields)."""

    def reset(self, i: int | None = None) -> None:
        """Start sequence `i` (every sequence, without `i`) afresh; this also clears a trap's
        interruption and a finish.

        Parameters
        ----------
        i : int, optional
            The sequence; None resets them all.

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        CheckerClosed
            The batch or its checker was closed.
        ModuleTrap
            The reset ran out of its budget or trapped.
        """
        c = self.checker
        if i is not None:
            i = index(i, self.n, "i")
        with c.lock:
            if self._closed:
                self._usable()
            c.check_open()
            try:
                c.begin()
                if i is None:
                    c.call("reset_batch", self.states, self.n)
                else:
                    c.call("reset", self.states + i * c.state_size)
            except ModuleTrap as e:
                raise self._interrupt(None if i is None else {i}, e) from None
            if i is None:
                self._pending.clear()
                self._interrupted.clear()
                self._finished.clear()
            else:
                self._pending.pop(i, None)
                self._interrupted.discard(i)
                self._finished.discard(i)

    def fork(self, dst: int, src: int) -> None:
        """Make sequence `dst` a copy of `src` (state and undelivered events).

        Parameters
        ----------
        dst : int
            The sequence overwritten.
        src : int
            The sequence copied.

        Raises
        ------
        IndexError
            `dst` or `src` is not a sequence of the batch.
        CheckerClosed
            The batch or its checker was closed.
        ModuleTrap
            The copy ran out of its budget or trapped (`dst` is interrupted).
        SequenceInterrupted
            `src` was interrupted by an earlier trap.
        """
        dst, src = index(dst, self.n, "dst"), index(src, self.n, "src")
        c = self.checker
        with c.lock:
            self._usable(src)
            try:
                c.begin()
                c.call("fork", self.states + dst * c.state_size, self.states + src * c.state_size)
            except ModuleTrap as e:
                raise self._interrupt({dst}, e) from None
            self._pending[dst] = list(self._pending.get(src, []))
            self._interrupted.discard(dst)
            if src in self._finished:
                self._finished.add(dst)
                self._ids_generation = BLOCKED
            else:
                self._finished.discard(dst)

    def fork_from(self, dst: int, other: StateRecords, src: int) -> None:
        """Make sequence `dst` a copy of sequence `src` of `other` — a batch of the same module on
        any backend (WASM or native: they share the state record) — with its undelivered events.

        Parameters
        ----------
        dst : int
            The sequence of this batch overwritten.
        other : Batch or StateRecords
            The batch copied from.
        src : int
            The sequence of `other` copied.

        Raises
        ------
        IndexError
            `dst` or `src` is not a sequence of its batch.
        ValueError
            The records differ in size or, on the native backend, the record's fields are out of
            range (then `dst` is reset).
        CheckerClosed
            Either batch or its checker was closed.
        """
        dst = index(dst, self.n, "dst")
        self._put(dst, other.state(src), other._pending.get(src, []))

    def copy_states(self, rows: np.ndarray) -> np.ndarray:
        """A copy of the state records of sequences `rows`: one copy for them all (a row of it,
        with `pending(i)`, is what `restore` takes).

        Parameters
        ----------
        rows : array_like of int
            The sequences.

        Returns
        -------
        numpy.ndarray of uint8, shape (len(rows), state_size)
            Their state records.

        Raises
        ------
        IndexError
            A row is not a sequence of the batch.
        CheckerClosed
            The batch or its checker was closed.
        """
        c = self.checker
        rows = np.asarray(rows, dtype=np.intp)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.n):
            raise IndexError(f"rows out of range: the batch has sequences 0 to {self.n - 1}")
        with c.lock:
            self._usable()
            size = c.state_size
            return c.mem[self.states : self.states + self.n * size].reshape(self.n, size)[rows]

    def pending(self, i: int) -> list[Event]:
        """The events of sequence `i` that no snapshot has published yet (a copy).

        Parameters
        ----------
        i : int
            The sequence whose events are wanted.

        Returns
        -------
        list of Event
            Its undelivered events, in stream order.
        """
        return list(self._pending.get(i, ()))

    def save(self, i: int) -> tuple[bytes, list[Event]]:
        """Sequence `i`'s state record and undelivered events, for `restore` (a checkpoint).

        Parameters
        ----------
        i : int
            The sequence to checkpoint.

        Returns
        -------
        tuple of (bytes, list of Event)
            Its state record and undelivered events.

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        """
        i = index(i, self.n, "i")
        return self.state(i), list(self._pending.get(i, []))

    def restore(self, i: int, saved: tuple[bytes | np.ndarray, list[Event]]) -> None:
        """Put sequence `i` back where `save` found it (what was fed since is forgotten); the
        record is checked as `fork_from` checks one.

        Parameters
        ----------
        i : int
            The sequence put back.
        saved : tuple of (bytes or numpy.ndarray, list of Event)
            What `save` (or a row of `copy_states` and `pending`) returned.

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        ValueError
            The record cannot run on this module (then sequence `i` is reset).
        """
        i = index(i, self.n, "i")
        self._put(i, *saved)

    def _put(self, dst: int, data: bytes | np.ndarray, pending: list[Event]) -> None:
        c = self.checker
        if len(data) != c.state_size:
            raise ValueError(
                f"a state record of {len(data)} bytes cannot run on this module, whose records are {c.state_size} bytes"
            )
        with c.lock:
            self._usable()
            at = self.states + dst * c.state_size
            c.mem[at : at + c.state_size] = np.frombuffer(data, np.uint8)
            problem = c.check_state(at)
            self._interrupted.discard(dst)
            self._ids_generation = BLOCKED  # (the finished flag may have changed)
            if problem is not None:
                c.call("reset", at)
                self._pending.pop(dst, None)
                self._finished.discard(dst)
                raise ValueError(f"the state record cannot run on this module: {problem}")
            self._pending[dst] = list(pending)
            if c.is_finished(at):
                self._finished.add(dst)
            else:
                self._finished.discard(dst)

    def state(self, i: int) -> bytes:
        """The raw fixed-size state record of sequence `i`.

        Parameters
        ----------
        i : int
            The sequence whose record is read.

        Returns
        -------
        bytes
            Its state record (`state_size` bytes).

        Raises
        ------
        IndexError
            `i` is not a sequence of the batch.
        """
        i = index(i, self.n, "i")
        c = self.checker
        with c.lock:
            self._usable(i)
            at = self.states + i * c.state_size
            return bytes(c.mem[at : at + c.state_size])
