"""`ModuleMemory`: a loaded module's memory and calls as the runtime drives them — blocks of
its linear memory (`alloc`, `free`), the scan input buffer, the event and snapshot buffers
and their draining, the control block, each API call's budget (`begin`) and the calls
themselves. Every backend shares it: `Checker` (wasmtime) and `NativeChecker` (the C++
core) set up their memory, then call `_init_buffers`; a `Batch` drives it through these
public members (`batching.protocol.CheckerProtocol`).

A subclass provides `mem`, `ctl`, `ctl_words` and `generation` (its `_refresh_view`),
`_grow(end)`, `arm()`, `_calls` (name → the export), `manifest`, `limits`, `state_size`,
`event_size`, `snapshot_size`, `closed` and `rearm_at`.

Public surface: `ModuleMemory`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from ..abi import CONTROL_FIELDS, EV_COUNT, SNAP_COUNT, STATE_FINISHED
from ..errors import CheckerClosed, ModuleTrap
from ..reports.records import RecordDecoder
from ..reports.report import Event, Snapshot
from .heap import Heap

SHRINK_INPUT_ABOVE = 1 << 20  # a scan input buffer larger than this shrinks for small inputs


class ModuleMemory:
    """The memory and call layer of a loaded module (a base of every backend's checker)."""

    def _init_buffers(self, heap_base: int, plm: int) -> None:
        self._flags = int(self.manifest["layout"]["flags_offset"])
        self._heap = Heap(heap_base, self._grow)
        self._decoder = RecordDecoder(self.manifest, self.event_size, self.snapshot_size)
        self.rule_names = self._decoder.rule_names
        # Buffers: room for what one input byte can produce (a 64-byte token flushed at once).
        self._plm = plm
        self.ev_cap, self.snap_cap, self._ev_ptr, self._snap_ptr = 0, 0, 0, 0
        self._size_buffers(max(4096, 4 * 65 * self._plm), 1024)
        self._scan_state = self.alloc(self.state_size)
        self._input_ptr, self._input_cap = 0, 0
        self._tokens: list[bytes] | None = None
        # a build's table, set by the first batch (or `token_table`'s first reader): a scan
        # never reads it, and putting 30,000 tokens in memory was a tenth of a load
        self._tokens_pending: Callable[[], list[bytes]] | None = None
        self._tokens_lock = threading.Lock()
        self._tok_ptr, self.n_tokens = 0, 0

    def check_state(self, at: int) -> str | None:
        """Why the state record at `at` cannot be run, or None (the sandbox contains any
        state a WASM kernel is given; the native backend checks its fields).

        Parameters
        ----------
        at : int
            The record's address in the module's memory.

        Returns
        -------
        str or None
            The reason, or None when it can run.
        """
        return None

    def alloc(self, size: int) -> int:
        """A block of the module's memory (grown when needed: `ModuleTrap` when it would
        exceed its limit).

        Parameters
        ----------
        size : int
            Its bytes.

        Returns
        -------
        int
            Its address.
        """
        return self._heap.alloc(size)

    def free(self, ptr: int) -> None:
        """Give a block back.

        Parameters
        ----------
        ptr : int
            The address `alloc` returned.
        """
        self._heap.free(ptr)

    @property
    def free_later(self) -> Callable[[int], None]:
        return self._heap.free_later

    def _size_buffers(self, ev_cap: int, snap_cap: int) -> None:
        """Event and snapshot buffers of at least these capacities (they only grow)."""
        if ev_cap > self.ev_cap:
            ev_ptr = self.alloc(ev_cap * self.event_size)
            if self._ev_ptr:
                self.free(self._ev_ptr)
            self._ev_ptr, self.ev_cap = ev_ptr, ev_cap
        if snap_cap > self.snap_cap:
            snap_ptr = self.alloc(snap_cap * self.snapshot_size)
            if self._snap_ptr:
                self.free(self._snap_ptr)
            self._snap_ptr, self.snap_cap = snap_ptr, snap_cap
        self._set_ctl(ev_ptr=self._ev_ptr, ev_cap=self.ev_cap, snap_ptr=self._snap_ptr, snap_cap=self.snap_cap)

    def _set_ctl(self, **values: int) -> None:
        for name, value in values.items():
            self.ctl[CONTROL_FIELDS.index(name)] = value

    def put_input(self, data: bytes) -> int:
        """The scan input buffer with `data` in it: reused, grown, or shrunk back after a large
        document.

        Parameters
        ----------
        data : bytes
            The input.

        Returns
        -------
        int
            The buffer's address (memory may have grown: views made before are stale).
        """
        n, cap = len(data), self._input_cap
        if n > cap or (cap > SHRINK_INPUT_ABOVE and 4 * n < cap):
            if self._input_ptr:
                self.free(self._input_ptr)
                self._input_ptr, self._input_cap = 0, 0
            cap = max(n, 2 * cap, 4096) if n > cap else max(2 * n, 4096)
            self._input_ptr = self.alloc(cap)  # (freed first: a buffer at the top grows in place)
            self._input_cap = cap
        if data:
            self.mem[self._input_ptr : self._input_ptr + n] = np.frombuffer(data, np.uint8)
        return self._input_ptr

    def begin(self) -> None:
        """Budget the API call that starts now, for all the wasm calls it makes (a module that
        returns early gets no new budget): fuel afresh; a deadline armed again once half the
        last one has passed (re-arming costs a C call, and a decoding step is microseconds)."""
        if self.limits.fuel is not None or time.monotonic() > self.rearm_at:
            self.arm()

    def call(self, name: str, *params: int) -> int:
        """Call the module's export `name` (under the budget `begin` gave).

        Parameters
        ----------
        name : str
            The export (`feed`, `step_batch`, `finish`, …; docs/abi.md).
        params : int
            Its arguments.

        Returns
        -------
        int
            Its result (0 for an export without one).
        """
        return self._calls[name](*params)

    def bound(self, name: str, *params: int) -> Callable[[], int]:
        """The export `name` with its arguments bound: a call of it with none (a batch's step, made once).

        Parameters
        ----------
        name : str
            The export.
        params : int
            Its arguments.

        Returns
        -------
        callable
            Calls the export; returns its result.
        """
        return self._calls[name].bound(*params)

    def check_open(self) -> None:
        """Raise unless the checker is open.

        Raises
        ------
        CheckerClosed
            It was closed.
        """
        if self.closed:
            raise CheckerClosed("this checker was closed: load the module again (or use a clone made before)")

    def trapped(self) -> None:
        """After a call stopped mid-way: discard what it left in the control block (event and
        snapshot counts, status), so the next call starts clean."""
        self._set_ctl(ev_count=0, snap_count=0, status=0, bad_index=0, quiet=0)

    def stalled(self, what: str) -> ModuleTrap:
        # (a heatc kernel always progresses on empty buffers; a module that does not would
        # otherwise hold the host in a loop forever)
        """The error for a call that made no progress on empty buffers, after discarding what it
        left in the control block (a heatc kernel always progresses; a module that does not
        would otherwise hold the host in a loop forever).

        Parameters
        ----------
        what : str
            The call, for the message.

        Returns
        -------
        ModuleTrap
            The error to raise.
        """
        self.trapped()
        return ModuleTrap(f"the module made no progress in {what} with empty buffers: not a working heatc module")

    def drain(self, events: bool = True) -> tuple[list[tuple[int, Event]], list[tuple[int, int, Snapshot]]]:
        """Decode and clear the event and snapshot buffers.

        Parameters
        ----------
        events : bool
            False: clear the events undecoded (the caller copied them).

        Returns
        -------
        tuple of (list of (int, Event), list of (int, int, Snapshot))
            The events as (sequence, event) and the snapshots as (sequence, events it covers,
            snapshot).
        """
        mem = self.mem
        ctl = self.ctl_words  # (ctypes: cheaper to read than numpy scalars)
        n_ev, n_snap = ctl[EV_COUNT], ctl[SNAP_COUNT]
        if n_ev > self.ev_cap or n_snap > self.snap_cap:  # (only a module that is not heatc's)
            n_ev, n_snap = min(n_ev, self.ev_cap), min(n_snap, self.snap_cap)
        decoded = (
            self._decoder.events(memoryview(mem)[self._ev_ptr : self._ev_ptr + n_ev * self.event_size])
            if events and n_ev
            else []
        )
        snaps = (
            self._decoder.snapshots(memoryview(mem)[self._snap_ptr : self._snap_ptr + n_snap * self.snapshot_size])
            if n_snap
            else []
        )
        if n_ev or n_snap:
            ctl[EV_COUNT] = 0
            ctl[SNAP_COUNT] = 0
        return decoded, snaps

    def _event_records(self) -> bytes:
        """A copy of the event buffer's records (cleared by the next drain)."""
        n_ev = min(self.ctl_words[EV_COUNT], self.ev_cap)
        return bytes(memoryview(self.mem)[self._ev_ptr : self._ev_ptr + n_ev * self.event_size])

    def is_finished(self, st: int) -> bool:
        """Whether the state record at `st` has its stream finished.

        Parameters
        ----------
        st : int
            The record's address.

        Returns
        -------
        bool
            True once the stream was ended.
        """
        return bool(self.mem[st + self._flags] & STATE_FINISHED)
