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

from ..abi import ABI_MAJOR, CONTROL_FIELDS, QUIET, check_abi
from ..args import as_bytes
from ..batching.batch import Batch
from ..errors import CheckerClosed, ModuleError, ModuleTrap  # noqa: F401 (the Raises sections name CheckerClosed)
from ..reports.report import Report, Snapshot
from .limits import Limits
from .manifest import check_layout
from .memory import ModuleMemory
from .wasm_engine import EPOCH_TICK_S, RawCall, engine_for, ptr_value

_LIVE: weakref.WeakSet = weakref.WeakSet()
CLOSED = -2  # the generation of a closed checker: a batch's memory views are never current
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


class Checker(ModuleMemory):
    """A loaded module: `scan(text)` for documents, `batch(n)` for decoding.

    Made by `heatc_runtime.load` (or `from_bytes`), which checks the build first. Its public
    members below `scan` — `alloc`, `call`, `drain`, `lock`, `mem`, … — are the memory and
    call layer a `Batch` drives (`batching.protocol.CheckerProtocol`), shared with the native
    backend.

    Parameters
    ----------
    manifest : dict
        The build's manifest (checked by the loader).
    wasm : bytes
        The module's WebAssembly bytes.
    limits : Limits
        Each API call's budget and the memory cap.
    _module : wasmtime.Module, optional
        The module already compiled (a clone's); compiled from `wasm` otherwise.
    where : str
        What to call the module in errors (its file).

    Raises
    ------
    ModuleError
        The module does not compile or instantiate, lacks an export, or disagrees with its
        manifest or this runtime's ABI.
    ModuleTrap
        A call ran out of its budget or trapped (the checker stays usable).
    CheckerClosed
        A call came after `close()`.
    """

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
        self.closed = False
        self.generation = 0
        self.manifest = manifest
        self.limits = limits
        self.engine = engine_for(limits.mode)
        try:
            self._module = _module or wasmtime.Module(self.engine, wasm)
        except wasmtime.WasmtimeError as e:
            raise ModuleError(f"the module does not compile: {str(e).strip().splitlines()[0]}") from None
        self._wasm = wasm
        self.lock = threading.Lock()
        self.store = wasmtime.Store(self.engine)
        self.store.set_limits(memory_size=limits.memory_bytes)
        self.arm()
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

    # -- wasmtime's memory and budget (memory.ModuleMemory holds the layer above them) --------

    def _refresh_view(self) -> None:
        # Only the host grows memory (the kernel never does): views stay valid until _grow grows it.
        size = self._memory.data_len(self.store)
        ptr = self._memory.data_ptr(self.store)
        self.mem = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)), shape=(size,))
        self.ctl = self.mem[self.control : self.control + 4 * len(CONTROL_FIELDS)].view(np.uint32)
        # the same words as ctypes, cheaper to read one at a time in the per-step path
        self.ctl_words = (ctypes.c_uint32 * len(CONTROL_FIELDS)).from_address(ptr_value(ptr) + self.control)
        self.generation += 1  # views made before this are stale

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

    def arm(self) -> None:
        """Give the next call its budget."""
        if self.limits.fuel is not None:
            self.store.set_fuel(self.limits.fuel)
        elif self.limits.timeout_s is not None:
            self.store.set_epoch_deadline(max(1, int(self.limits.timeout_s / EPOCH_TICK_S)))
        self._armed_at = time.monotonic()
        # re-armed once half the deadline has passed (a batch step checks only this)
        self.rearm_at = self._armed_at + (self.limits.timeout_s or 1e9) / 2

    # -- documents ----------------------------------------------------------------------

    def scan(self, text: str | bytes, on_records: Callable[[bytes], None] | None = None) -> Report:
        """Check one whole document: one wasm call (more only if the buffers fill). The report's
        events are decoded when first read.

        Parameters
        ----------
        text : str or bytes-like
            The document: str (UTF-8), bytes, bytearray or memoryview.
        on_records : callable, optional
            Called with each run of event records as the scan drains it, from the scanning thread
            (`reports.audit_text.scan_line` writes them while the scan goes on).

        Returns
        -------
        Report
            Every rule's final verdict, the events, the counters.

        Raises
        ------
        TypeError
            `text` is neither a str nor bytes-like.
        ModuleTrap
            The scan ran out of its budget or trapped.
        ModuleError
            The module ended the scan without its final snapshot (not a heatc module).
        CheckerClosed
            The checker was closed.
        """
        data = as_bytes(text, "text")
        with self.lock:
            self.check_open()
            ptr = self.put_input(data)
            st = self._scan_state
            self.ctl[QUIET] = 1  # a whole-document scan needs only the final snapshot
            # the event records are copied out at each drain and decoded when the report's
            # events are first read (Report)
            records: list[bytes] = []
            snaps: list[tuple[int, int, Snapshot]] = []

            def drain() -> None:
                records.append(self._event_records())
                if on_records is not None:
                    on_records(records[-1])
                snaps.extend(self.drain(events=False)[1])

            try:
                self.begin()
                done = self.call("scan", st, 0, ptr, len(data))
                drain()
                while done < len(data):  # the buffers filled: drain, go on
                    more = self.call("feed", st, 0, ptr + done, len(data) - done, 1)
                    drain()
                    if not more:
                        raise self.stalled("scan")
                    done += more
                if not self.is_finished(st):
                    self.call("finish", st, 0)
                    drain()
                    if not self.is_finished(st):
                        raise self.stalled("finish")
            except ModuleTrap:
                self.trapped()  # (the scan state is reset by the next scan)
                raise
            finally:
                self.ctl[QUIET] = 0
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
            from ..reports.audit import ModuleInfo

            info = self._module_info = ModuleInfo.from_manifest(self.manifest)
        return info

    def conflicts(self, chunks):
        """Every pair of mentions in `chunks` whose values disagree under a consistency rule, each
        side with its chunk and span.

        Parameters
        ----------
        chunks : sequence of str or bytes
            Texts in retrieval order.

        Returns
        -------
        reports.conflicts.ConflictReport
            The conflicts found (docs/conflicts.md).
        """
        from ..reports.conflicts import scan_chunks

        return scan_chunks(self, chunks)

    # -- decoding sequences ----------------------------------------------------------------

    def set_token_table(self, tokens: list[bytes]) -> None:
        """The bytes of each token id, for `Batch.feed_ids` (a tokenizer's token table). It
        replaces the previous table (whose memory is reused).

        Parameters
        ----------
        tokens : list of bytes
            Entry i is token id i's bytes.

        Raises
        ------
        TypeError
            A token is not bytes-like.
        ValueError
            The table is too large (2**32 tokens, or 2 GiB of bytes).
        CheckerClosed
            The checker was closed.
        """
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
        with self.lock:
            self.check_open()
            size = 4 * len(offsets)
            ptr = self.alloc(size + len(blob))  # (the old table stays until the new one is in)
            mem = self.mem
            mem[ptr : ptr + size] = offsets.astype(np.uint32).view(np.uint8)
            mem[ptr + size : ptr + size + len(blob)] = np.frombuffer(blob, np.uint8)
            if self._tok_ptr:
                self.free(self._tok_ptr)
            self._tok_ptr, self.n_tokens = ptr, len(tokens)
            self._set_ctl(tok_offsets=ptr, n_tokens=len(tokens), tok_bytes=ptr + size)
            self._tokens, self._tokens_pending = tokens, None
            self.generation += 1  # batches look at the table again

    @property
    def token_table(self) -> list[bytes] | None:
        """The token table (None: none set). Not to be first read under `_lock`: a pending
        table is set then (Batch sets it before it takes the lock)."""
        self.ready_token_table()
        return self._tokens

    def _copy_token_table(self, other: Checker) -> None:
        """`other`'s token table, or the one it has yet to set (a clone's)."""
        pending = other._tokens_pending
        if pending is not None:
            self._tokens_pending = pending
        elif other._tokens is not None:
            self.set_token_table(other._tokens)

    def ready_token_table(self) -> None:
        """Put a build's token table in memory now if it is still pending (the loader defers it:
        a scan never reads it). A batch calls it before it takes the lock.
        """
        if self._tokens_pending is not None:
            with self._tokens_lock:
                pending = self._tokens_pending
                if pending is not None:
                    self.set_token_table(pending())

    def batch(self, n: int) -> Batch:
        """`n` sequences in one state array (see `Batch`); `close()` it, or use it as a context
        manager, to give its memory back at once (it is also given back when the batch is
        garbage-collected).

        Parameters
        ----------
        n : int
            The number of sequences.

        Returns
        -------
        Batch
            The batch.

        Raises
        ------
        ValueError
            `n` is not a whole number of at least 1.
        CheckerClosed
            The checker was closed.
        """
        return Batch(self, n)

    def close(self) -> None:
        """Release the instance and its memory now (also done at exit). Any later call on
        this checker or its batches raises `CheckerClosed`."""
        with self.lock:
            self.closed = True
            self.generation = CLOSED
            self._calls = {}
            for name in ("_memory", "instance", "mem", "ctl", "ctl_words"):
                self.__dict__.pop(name, None)
            store = self.__dict__.pop("store", None)
            if store is not None:
                store.close()

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def clone(self) -> Checker:
        """An independent instance of the same module (for another thread).

        Returns
        -------
        Checker
            A checker sharing the compiled module, not its state.

        Raises
        ------
        CheckerClosed
            This checker was closed.
        """
        self.check_open()
        twin = Checker(self.manifest, self._wasm, self.limits, self._module, self._where)
        twin._copy_token_table(self)
        return twin
