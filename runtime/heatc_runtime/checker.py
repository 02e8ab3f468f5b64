"""A loaded module: `Checker` (whole documents with `scan`, sequences with `batch`).

A Checker owns one wasmtime instance and its linear memory: the event and snapshot
buffers, the scan input, the token table and the batches' state arrays live there, each a
block of the checker's `Heap` — given back when a batch is closed or collected, when a new
token table replaces the old one, when the scan input buffer is resized.

Limits: each API call (a scan, a batch step, …) runs under one budget (`Limits`) for all
the wasm calls it makes.

Traps: a call stopped by its deadline, its fuel or a trap raises `ModuleTrap`, and the
checker stays usable: what the call left in the module's buffers is discarded (a scan
never returns an aborted scan's events), and a batch marks the sequences the call was
stepping as interrupted (`SequenceInterrupted` until they are reset). After `close()` every
call raises `CheckerClosed` — the checker's batches' calls too.

Threads: a Checker (and its batches) may be used from any thread — calls are serialised
by a lock — but one instance runs one call at a time. For parallel work give each thread
its own `checker.clone()`: clones share the compiled module, not state.

Public surface: `Checker` (`scan`, `set_token_table`, `batch`, `clone`, `close`; a context
manager).
"""

from __future__ import annotations

import atexit
import ctypes
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np
import wasmtime

from .abi import ABI_MAJOR, CONTROL_FIELDS, EV_COUNT, QUIET, SNAP_COUNT, STATE_FINISHED, check_abi
from .args import as_bytes
from .batch import Batch
from .errors import CheckerClosed, ModuleError, ModuleTrap
from .heap import Heap
from .limits import Limits
from .manifest import check_layout
from .records import RecordDecoder
from .report import Event, Report, Snapshot
from .wasm_engine import EPOCH_TICK_S, RawCall, engine_for, ptr_value

_LIVE: weakref.WeakSet = weakref.WeakSet()
CLOSED = -2  # the generation of a closed checker: a batch's memory views are never current
SHRINK_INPUT_ABOVE = 1 << 20  # a scan input buffer larger than this shrinks for small inputs
MAX_TOKEN_TABLE_BYTES = 1 << 31


@atexit.register
def _close_all() -> None:
    # wasmtime-py's finalizers fail if they run during interpreter teardown; close first.
    modules = {}
    for checker in list(_LIVE):
        checker.close()
        module = checker.__dict__.pop("_module", None)
        if module is not None:
            modules[id(module)] = module
    for module in modules.values():
        module.close()


class Checker:
    """A loaded module: `scan(text)` for documents, `batch(n)` for decoding."""

    def __init__(
        self,
        manifest: dict,
        wasm: bytes,
        limits: Limits,
        _module: wasmtime.Module | None = None,
        where: str = "the module",  # the file, for errors about what the module does
    ):
        _LIVE.add(self)
        self._where = where
        self._closed = False
        self._generation = 0
        self.manifest = manifest
        self.limits = limits
        self.engine = engine_for(limits.mode)
        try:
            self._module = _module or wasmtime.Module(self.engine, wasm)
        except wasmtime.WasmtimeError as e:
            raise ModuleError(f"the module does not compile: {str(e).strip().splitlines()[0]}") from None
        self._wasm = wasm
        self._lock = threading.Lock()
        self.store = wasmtime.Store(self.engine)
        self.store.set_limits(memory_size=limits.memory_bytes)
        self._arm()
        try:
            self.instance = wasmtime.Instance(self.store, self._module, [])
        except (wasmtime.WasmtimeError, wasmtime.Trap) as e:
            raise ModuleError(f"the module cannot be instantiated: {str(e).strip().splitlines()[0]}") from None
        exports = self.instance.exports(self.store)
        names = ("state_size", "event_size", "snapshot_size", "n_rules", "control", "heap_base", "lexeme_events")
        try:
            self._memory: wasmtime.Memory = exports["memory"]
            major = exports["abi_major"].value(self.store)
            minor = exports["abi_minor"].value(self.store)
            consts = {k: exports[k].value(self.store) for k in names}
        except (KeyError, AttributeError) as e:
            name = e.args[0] if isinstance(e, KeyError) else "a global"
            raise ModuleError(f"the module does not export {name!r}: not a heatc module") from None
        check_abi("the module", major, minor)
        if (major, minor) != (manifest["abi"]["major"], manifest["abi"]["minor"]):
            raise ModuleError(f"the module says ABI {major}.{minor} but its manifest says {manifest['abi']}")
        check_layout(consts, manifest, "the module")
        self.state_size = consts["state_size"]
        self.event_size = consts["event_size"]
        self.snapshot_size = consts["snapshot_size"]
        self.control = consts["control"]
        signatures = {
            "reset": (1, 0), "fork": (2, 0), "feed": (5, 1), "finish": (2, 1), "scan": (4, 1),
            "snapshot": (2, 1), "step_batch": (4, 1), "reset_batch": (2, 0), "snapshot_batch": (3, 1),
            "finish_batch": (3, 1), "verdicts": (2, 0),
        }  # fmt: skip
        self._calls: dict[str, RawCall] = {}
        for name, (n_params, n_results) in signatures.items():
            func = exports.get(name)
            if not isinstance(func, wasmtime.Func):
                raise ModuleError(f"the module does not export the function {name!r}")
            ty = func.type(self.store)
            if len(ty.params) != n_params or len(ty.results) != n_results:
                raise ModuleError(f"the module's {name!r} has the wrong signature for ABI {ABI_MAJOR}")
            self._calls[name] = RawCall(self.store, func, n_params, n_results)
        self._refresh_view()
        self._init_buffers(consts["heap_base"], consts["lexeme_events"])

    # -- shared by every backend (native.NativeChecker sets up its memory, then calls it) --

    def _init_buffers(self, heap_base: int, plm: int) -> None:
        self._flags = int(self.manifest["layout"]["flags_offset"])
        self._heap = Heap(heap_base, self._grow)
        self._decoder = RecordDecoder(self.manifest, self.event_size, self.snapshot_size)
        self.rule_names = self._decoder.rule_names
        # Buffers: room for what one input byte can produce (a 64-byte token flushed at once).
        self._plm = plm
        self.ev_cap, self.snap_cap, self._ev_ptr, self._snap_ptr = 0, 0, 0, 0
        self._size_buffers(max(4096, 4 * 65 * self._plm), 1024)
        self._scan_state = self._alloc(self.state_size)
        self._input_ptr, self._input_cap = 0, 0
        self._tokens: list[bytes] | None = None
        # a build's table, set by the first batch (or `_token_table`'s first reader): a scan
        # never reads it, and putting 30,000 tokens in memory was a tenth of a load
        self._tokens_pending: Callable[[], list[bytes]] | None = None
        self._tokens_lock = threading.Lock()
        self._tok_ptr, self._n_tokens = 0, 0

    # -- memory -----------------------------------------------------------------------

    def _refresh_view(self) -> None:
        # Only the host grows memory (the kernel never does): views stay valid until _grow grows it.
        size = self._memory.data_len(self.store)
        ptr = self._memory.data_ptr(self.store)
        self._mem = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(size,))
        self._ctlv = self._mem[self.control : self.control + 4 * len(CONTROL_FIELDS)].view(np.uint32)
        # the same words as ctypes, cheaper to read one at a time in the per-step path
        self._ctlc = (ctypes.c_uint32 * len(CONTROL_FIELDS)).from_address(ptr_value(ptr) + self.control)
        self._generation += 1  # views made before this are stale

    def _view(self) -> np.ndarray:
        return self._mem

    def _check_state(self, at: int) -> str | None:
        """Why the state record at `at` cannot be run, or None (the sandbox contains any
        state a WASM kernel is given; the native backend checks its fields)."""
        return None

    def _grow(self, end: int) -> None:
        have = self._memory.data_len(self.store)
        if end > have:
            pages = -(-(end - have) // 65536)
            try:
                self._memory.grow(self.store, pages)
            except wasmtime.WasmtimeError:
                raise ModuleTrap(
                    f"the module's memory would exceed its limit ({self.limits.memory_bytes} bytes)"
                ) from None
            self._refresh_view()

    def _alloc(self, size: int) -> int:
        return self._heap.alloc(size)

    def _free(self, ptr: int) -> None:
        self._heap.free(ptr)

    def _size_buffers(self, ev_cap: int, snap_cap: int) -> None:
        """Event and snapshot buffers of at least these capacities (they only grow)."""
        if ev_cap > self.ev_cap:
            ev_ptr = self._alloc(ev_cap * self.event_size)
            if self._ev_ptr:
                self._free(self._ev_ptr)
            self._ev_ptr, self.ev_cap = ev_ptr, ev_cap
        if snap_cap > self.snap_cap:
            snap_ptr = self._alloc(snap_cap * self.snapshot_size)
            if self._snap_ptr:
                self._free(self._snap_ptr)
            self._snap_ptr, self.snap_cap = snap_ptr, snap_cap
        self._ctl(ev_ptr=self._ev_ptr, ev_cap=self.ev_cap, snap_ptr=self._snap_ptr, snap_cap=self.snap_cap)

    def _ctl(self, **values: int) -> None:
        for name, value in values.items():
            self._ctlv[CONTROL_FIELDS.index(name)] = value

    def _ctl_get(self, name: str) -> int:
        return int(self._ctlv[CONTROL_FIELDS.index(name)])

    def _input(self, data: bytes) -> int:
        """The scan input buffer with `data` in it: reused, grown, or shrunk back after a
        large document."""
        n, cap = len(data), self._input_cap
        if n > cap or (cap > SHRINK_INPUT_ABOVE and 4 * n < cap):
            if self._input_ptr:
                self._free(self._input_ptr)
                self._input_ptr, self._input_cap = 0, 0
            cap = max(n, 2 * cap, 4096) if n > cap else max(2 * n, 4096)
            self._input_ptr = self._alloc(cap)  # (freed first: a buffer at the top grows in place)
            self._input_cap = cap
        if data:
            self._view()[self._input_ptr : self._input_ptr + n] = np.frombuffer(data, np.uint8)
        return self._input_ptr

    # -- calls ------------------------------------------------------------------------

    def _arm(self) -> None:
        """Give the next call its budget."""
        if self.limits.fuel is not None:
            self.store.set_fuel(self.limits.fuel)
        elif self.limits.timeout_s is not None:
            self.store.set_epoch_deadline(max(1, int(self.limits.timeout_s / EPOCH_TICK_S)))
        self._armed_at = time.monotonic()
        # re-armed once half the deadline has passed (a batch step checks only this)
        self._rearm_at = self._armed_at + (self.limits.timeout_s or 1e9) / 2

    def _begin(self) -> None:
        """Budget the API call that starts now, for all the wasm calls it makes (a module that
        returns early gets no new budget): fuel afresh; a deadline armed again once half the
        last one has passed (re-arming costs a C call, and a decoding step is microseconds)."""
        if self.limits.fuel is not None or time.monotonic() > self._rearm_at:
            self._arm()

    def _call(self, name: str, *params: int) -> int:
        return self._calls[name](*params)

    def _check_open(self) -> None:
        if self._closed:
            raise CheckerClosed("this checker was closed: load the module again (or use a clone made before)")

    def _trapped(self) -> None:
        """After a call stopped mid-way: discard what it left in the control block (event and
        snapshot counts, status), so the next call starts clean."""
        self._ctl(ev_count=0, snap_count=0, status=0, bad_index=0, quiet=0)

    def _stalled(self, what: str) -> ModuleTrap:
        # (a heatc kernel always progresses on empty buffers; a module that does not would
        # otherwise hold the host in a loop forever)
        self._trapped()
        return ModuleTrap(f"the module made no progress in {what} with empty buffers: not a working heatc module")

    # -- records ----------------------------------------------------------------------

    def _drain(self, events: bool = True) -> tuple[list[tuple[int, Event]], list[tuple[int, int, Snapshot]]]:
        """Decode and clear the event and snapshot buffers: ([(seq, event)], [(seq, n_events, snapshot)]);
        with `events` false the events are cleared undecoded (the caller copied them)."""
        mem = self._mem
        ctl = self._ctlc  # (ctypes: cheaper to read than numpy scalars)
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
        n_ev = min(self._ctlc[EV_COUNT], self.ev_cap)
        return bytes(memoryview(self._mem)[self._ev_ptr : self._ev_ptr + n_ev * self.event_size])

    # -- documents ----------------------------------------------------------------------

    def scan(self, text: str | bytes, on_records: Callable[[bytes], None] | None = None) -> Report:
        """Check one whole document (str, bytes, bytearray or memoryview): one wasm call (more
        only if the buffers fill). The report's events are decoded when first read.
        `on_records`, if given, is called with each run of event records as the scan drains
        it, from the scanning thread (`audit_text.scan_line` writes them while the scan goes on)."""
        data = as_bytes(text, "text")
        with self._lock:
            self._check_open()
            ptr = self._input(data)
            st = self._scan_state
            self._ctlv[QUIET] = 1  # a whole-document scan needs only the final snapshot
            # the event records are copied out at each drain and decoded when the report's
            # events are first read (Report)
            records: list[bytes] = []
            snaps: list[tuple[int, int, Snapshot]] = []

            def drain() -> None:
                records.append(self._event_records())
                if on_records is not None:
                    on_records(records[-1])
                snaps.extend(self._drain(events=False)[1])

            try:
                self._begin()
                done = self._call("scan", st, 0, ptr, len(data))
                drain()
                while done < len(data):  # the buffers filled: drain, go on
                    more = self._call("feed", st, 0, ptr + done, len(data) - done, 1)
                    drain()
                    if not more:
                        raise self._stalled("scan")
                    done += more
                if not self._finished(st):
                    self._call("finish", st, 0)
                    drain()
                    if not self._finished(st):
                        raise self._stalled("finish")
            except ModuleTrap:
                self._trapped()  # (the scan state is reset by the next scan)
                raise
            finally:
                self._ctlv[QUIET] = 0
        if not snaps:  # (a heatc module ends every scan with its final snapshot)
            raise ModuleError(f"{self._where}: the module ended a scan without its final snapshot: not a heatc module")
        final = snaps[-1][2]
        decoder = self._decoder  # (the report keeps the decoder, not the checker)
        return Report(
            final.verdicts,
            lambda: decoder.scan_events(records),
            final.counters,
            (self.module_info, data),
            (decoder, records),
        )

    # -- operating: audit reports, conflicts across chunks (audit.py, conflicts.py) ----------

    @property
    def module_info(self):
        """The module's identity and rule heats, as audit reports carry them (`audit.ModuleInfo`)."""
        info = self.__dict__.get("_module_info")
        if info is None:
            from .audit import ModuleInfo

            info = self._module_info = ModuleInfo.from_manifest(self.manifest)
        return info

    def conflicts(self, chunks):
        """Every pair of mentions in `chunks` (texts in retrieval order) whose values disagree
        under a consistency rule, each side with its chunk and span (`conflicts.ConflictReport`)."""
        from .conflicts import scan_chunks

        return scan_chunks(self, chunks)

    def _finished(self, st: int) -> bool:
        return bool(self._mem[st + self._flags] & STATE_FINISHED)

    # -- decoding sequences ----------------------------------------------------------------

    def set_token_table(self, tokens: list[bytes]) -> None:
        """The bytes of each token id, for `Batch.feed_ids` (a tokenizer's token table). It
        replaces the previous table (whose memory is reused)."""
        tokens = list(tokens)
        try:
            tokens = [t if type(t) is bytes else bytes(memoryview(t)) for t in tokens]
        except TypeError:
            bad = next(i for i, t in enumerate(tokens) if not isinstance(t, (bytes, bytearray, memoryview)))
            raise TypeError(f"token {bad} is {type(tokens[bad]).__name__}: a token table holds bytes") from None
        offsets = np.zeros(len(tokens) + 1, np.int64)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        if len(tokens) >= 1 << 32 or offsets[-1] > MAX_TOKEN_TABLE_BYTES:
            raise ValueError(f"the token table is too large ({len(tokens):,} tokens, {offsets[-1]:,} bytes)")
        blob = b"".join(tokens)
        with self._lock:
            self._check_open()
            size = 4 * len(offsets)
            ptr = self._alloc(size + len(blob))  # (the old table stays until the new one is in)
            mem = self._view()
            mem[ptr : ptr + size] = offsets.astype(np.uint32).view(np.uint8)
            mem[ptr + size : ptr + size + len(blob)] = np.frombuffer(blob, np.uint8)
            if self._tok_ptr:
                self._free(self._tok_ptr)
            self._tok_ptr, self._n_tokens = ptr, len(tokens)
            self._ctl(tok_offsets=ptr, n_tokens=len(tokens), tok_bytes=ptr + size)
            self._tokens, self._tokens_pending = tokens, None
            self._generation += 1  # batches look at the table again

    @property
    def _token_table(self) -> list[bytes] | None:
        """The token table (None: none set). Not to be first read under `_lock`: a pending
        table is set then (Batch sets it before it takes the lock)."""
        self._set_pending_tokens()
        return self._tokens

    def _copy_token_table(self, other: Checker) -> None:
        """`other`'s token table, or the one it has yet to set (a clone's)."""
        pending = other._tokens_pending
        if pending is not None:
            self._tokens_pending = pending
        elif other._tokens is not None:
            self.set_token_table(other._tokens)

    def _set_pending_tokens(self) -> None:
        if self._tokens_pending is not None:
            with self._tokens_lock:
                pending = self._tokens_pending
                if pending is not None:
                    self.set_token_table(pending())

    def batch(self, n: int) -> Batch:
        """`n` sequences in one state array (see `Batch`); `close()` it, or use it as a
        context manager, to give its memory back at once (it is also given back when the
        batch is garbage-collected)."""
        return Batch(self, n)

    def close(self) -> None:
        """Release the instance and its memory now (also done at exit). Any later call on
        this checker or its batches raises `CheckerClosed`."""
        with self._lock:
            self._closed = True
            self._generation = CLOSED
            self._calls = {}
            for name in ("_memory", "instance", "_mem", "_ctlv", "_ctlc"):
                self.__dict__.pop(name, None)
            store = self.__dict__.pop("store", None)
            if store is not None:
                store.close()

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def clone(self) -> Checker:
        """An independent instance of the same module (for another thread)."""
        self._check_open()
        twin = Checker(self.manifest, self._wasm, self.limits, self._module, self._where)
        twin._copy_token_table(self)
        return twin
