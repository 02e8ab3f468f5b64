"""A loaded module: `Checker` (whole documents with `scan`, sequences with `batch`).

A Checker owns one wasmtime instance and its linear memory: the event and snapshot
buffers, the scan input, the token table and the batches' state arrays live there.

Threads: a Checker (and its batches) may be used from any thread — calls are serialised
by a lock — but one instance runs one call at a time. For parallel work give each thread
its own `checker.clone()`: clones share the compiled module, not state.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
import time
import weakref

import numpy as np
import wasmtime

from .abi import ABI_MAJOR, CONTROL_FIELDS, EV_COUNT, QUIET, SNAP_COUNT, check_abi
from .batch import Batch
from .errors import ModuleError, ModuleTrap
from .limits import Limits
from .records import RecordDecoder
from .report import Event, Report, Snapshot
from .wasm_engine import EPOCH_TICK_S, RawCall, engine_for, ptr_value

_LIVE: weakref.WeakSet = weakref.WeakSet()


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

    def __init__(self, manifest: dict, wasm: bytes, limits: Limits, _module: wasmtime.Module | None = None):
        _LIVE.add(self)
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
        try:
            self._memory: wasmtime.Memory = exports["memory"]
            major = exports["abi_major"].value(self.store)
            minor = exports["abi_minor"].value(self.store)
            consts = {k: exports[k].value(self.store) for k in ("state_size", "event_size", "snapshot_size", "n_rules", "control", "heap_base", "lexeme_events")}  # fmt: skip
        except KeyError as e:
            raise ModuleError(f"the module does not export {e.args[0]!r}: not a heatc module") from None
        check_abi("the module", major, minor)
        if (major, minor) != (manifest["abi"]["major"], manifest["abi"]["minor"]):
            raise ModuleError(f"the module says ABI {major}.{minor} but its manifest says {manifest['abi']}")
        layout = manifest["layout"]
        for key in ("state_size", "event_size", "snapshot_size"):
            if consts[key] != layout[key]:
                raise ModuleError(f"the module's {key} is {consts[key]}, its manifest says {layout[key]}")
        if consts["n_rules"] != len(manifest["rules"]):
            raise ModuleError("the module and its manifest disagree on the number of rules")
        self.state_size = consts["state_size"]
        self.event_size = consts["event_size"]
        self.snapshot_size = consts["snapshot_size"]
        self.control = consts["control"]
        self._top = consts["heap_base"]
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
        self._init_buffers(consts["lexeme_events"])

    # -- shared by every backend (native.NativeChecker sets up its memory, then calls it) --

    def _init_buffers(self, plm: int) -> None:
        self._decoder = RecordDecoder(self.manifest, self.event_size, self.snapshot_size)
        self.rule_names = self._decoder.rule_names
        # Buffers: room for what one input byte can produce (a 64-byte token flushed at once).
        self.ev_cap = max(4096, 4 * 65 * plm)
        self.snap_cap = 1024
        self._ev_ptr = self._alloc(self.ev_cap * self.event_size)
        self._snap_ptr = self._alloc(self.snap_cap * self.snapshot_size)
        self._ctl(ev_ptr=self._ev_ptr, ev_cap=self.ev_cap, snap_ptr=self._snap_ptr, snap_cap=self.snap_cap)
        self._scan_state = self._alloc(self.state_size)
        self._input_ptr, self._input_cap = 0, 0
        self._token_table: list[bytes] | None = None

    # -- memory -----------------------------------------------------------------------

    def _refresh_view(self) -> None:
        # Only the host grows memory (the kernel never does): views stay valid until _alloc grows it.
        size = self._memory.data_len(self.store)
        ptr = self._memory.data_ptr(self.store)
        self._mem = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(size,))
        self._ctlv = self._mem[self.control : self.control + 4 * len(CONTROL_FIELDS)].view(np.uint32)
        # the same words as ctypes, cheaper to read one at a time in the per-step path
        self._ctlc = (ctypes.c_uint32 * len(CONTROL_FIELDS)).from_address(ptr_value(ptr) + self.control)
        self._generation = getattr(self, "_generation", 0) + 1  # views made before this are stale

    def _view(self) -> np.ndarray:
        return self._mem

    def _check_state(self, at: int) -> str | None:
        """Why the state record at `at` cannot be run, or None (the sandbox contains any
        state a WASM kernel is given; the native backend checks its fields)."""
        return None

    def _alloc(self, size: int, align: int = 16) -> int:
        start = -(-self._top // align) * align
        end = start + size
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
        self._top = end
        return start

    def _ctl(self, **values: int) -> None:
        for name, value in values.items():
            self._ctlv[CONTROL_FIELDS.index(name)] = value

    def _ctl_get(self, name: str) -> int:
        return int(self._ctlv[CONTROL_FIELDS.index(name)])

    def _input(self, data: bytes) -> int:
        if len(data) > self._input_cap:
            self._input_cap = max(len(data), 2 * self._input_cap, 4096)
            self._input_ptr = self._alloc(self._input_cap)
        if data:
            self._view()[self._input_ptr : self._input_ptr + len(data)] = np.frombuffer(data, np.uint8)
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

    def _call(self, name: str, *params: int) -> int:
        # Re-arming costs a C call; do it only when the last budget is half spent, so a
        # call never runs longer than the timeout.
        if self.limits.fuel is not None or time.monotonic() > self._rearm_at:
            self._arm()
        return self._calls[name](*params)

    # -- records ----------------------------------------------------------------------

    def _drain(self, events: bool = True) -> tuple[list[tuple[int, Event]], list[tuple[int, int, Snapshot]]]:
        """Decode and clear the event and snapshot buffers: ([(seq, event)], [(seq, n_events, snapshot)]);
        with `events` false the events are cleared undecoded (the caller copied them)."""
        mem = self._mem
        ctl = self._ctlc  # (ctypes: cheaper to read than numpy scalars)
        n_ev, n_snap = ctl[EV_COUNT], ctl[SNAP_COUNT]
        decoded = (
            self._decoder.events(memoryview(mem)[self._ev_ptr : self._ev_ptr + n_ev * self.event_size])
            if events
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
        return bytes(memoryview(self._mem)[self._ev_ptr : self._ev_ptr + self._ctlc[EV_COUNT] * self.event_size])

    # -- documents ----------------------------------------------------------------------

    def scan(self, text: str | bytes) -> Report:
        """Check one whole document: one wasm call (more only if the buffers fill). The
        report's events are decoded when first read."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with self._lock:
            ptr = self._input(data)
            st = self._scan_state
            self._ctlv[QUIET] = 1  # a whole-document scan needs only the final snapshot
            # the event records are copied out at each drain and decoded when the report's
            # events are first read (Report)
            records: list[bytes] = []
            snaps: list[tuple[int, int, Snapshot]] = []

            def drain() -> None:
                records.append(self._event_records())
                snaps.extend(self._drain(events=False)[1])

            try:
                done = self._call("scan", st, 0, ptr, len(data))
                drain()
                while done < len(data):  # the buffers filled: drain, go on
                    done += self._call("feed", st, 0, ptr + done, len(data) - done, 1)
                    drain()
                while not self._finished(st):
                    self._call("finish", st, 0)
                    drain()
            finally:
                self._ctlv[QUIET] = 0
        final = snaps[-1][2]
        decoder = self._decoder  # (the report keeps the decoder, not the checker)
        return Report(final.verdicts, lambda: decoder.scan_events(records), final.counters, (self.module_info, data))

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
        return bool(self._mem[st + self._flags_offset()] & 1)

    def _flags_offset(self) -> int:
        return int(self.manifest["layout"]["flags_offset"])

    # -- decoding sequences ----------------------------------------------------------------

    def set_token_table(self, tokens: list[bytes]) -> None:
        """The bytes of each token id, for `Batch.feed_ids` (a tokenizer's token table)."""
        offsets = np.zeros(len(tokens) + 1, np.uint32)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        blob = b"".join(tokens)
        with self._lock:
            off_ptr = self._alloc(4 * len(offsets))
            bytes_ptr = self._alloc(max(len(blob), 1))
            mem = self._view()
            mem[off_ptr : off_ptr + 4 * len(offsets)] = offsets.view(np.uint8)
            mem[bytes_ptr : bytes_ptr + len(blob)] = np.frombuffer(blob, np.uint8)
            self._ctl(tok_offsets=off_ptr, n_tokens=len(tokens), tok_bytes=bytes_ptr)
            self._token_table = list(tokens)

    def batch(self, n: int) -> Batch:
        return Batch(self, n)

    def close(self) -> None:
        """Release the instance and its memory now (also done at exit)."""
        with self._lock:
            self._calls = {}
            for name in ("_memory", "instance"):
                self.__dict__.pop(name, None)
            store = self.__dict__.pop("store", None)
            if store is not None:
                store.close()

    def clone(self) -> Checker:
        """An independent instance of the same module (for another thread)."""
        twin = Checker(self.manifest, self._wasm, self.limits, self._module)
        if self._token_table is not None:
            twin.set_token_table(self._token_table)
        return twin
