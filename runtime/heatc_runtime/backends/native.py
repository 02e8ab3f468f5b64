"""The native backend: the C++ core (cuda_bridge/include/heatc_core.h) compiled into the
extension `heatc_runtime._native` at install time, stepping rules.hct's tables.

`NativeChecker` is a `Checker` whose memory and calls are the extension's: a linear memory
laid out like the WASM module's (control block, buffers, token table, state arrays) and
entry points with the WASM exports' arguments. Everything above that layer — scans,
batches, draining and decoding records — is the Checker's and Batch's own, so both
backends give the same results through the same API, and a state record moves between
them unchanged (docs/abi.md, "State record").

Limits: the native core runs the host's own compiled code, not a sandbox: `timeout_s` does
not apply, `memory_bytes` caps its memory, and each call has a step budget proportional to its
input (`Limits.fuel`, when set, lowers it to that many steps; past it a call raises
ModuleTrap). Its inputs are checked instead: the tables once at load (docs/abi.md, "Checked
at load"), every offset at each call, a state record when it is brought in
(`Batch.fork_from`). `close()` releases the memory at once.

Public surface: `NativeChecker(manifest, hct, limits, where)`, `native_extension()`.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..abi import CONTROL, CONTROL_FIELDS, PAGE
from ..errors import ModuleError, ModuleTrap
from .checker import CLOSED, Checker
from .extension import native_extension
from .hct import Hct, check_against_manifest
from .limits import Limits

HEAP_BASE = 512


class NativeChecker(Checker):
    """A Checker on the native core (same API and results as the WASM one)."""

    backend = "native"

    def __init__(self, manifest: dict, hct: Hct, limits: Limits, where: str = "rules.hct"):
        native = native_extension()
        self.manifest = manifest
        self.closed = False
        self.generation = 0
        self.limits = limits
        self._hct = hct
        self._where = where
        self.lock = threading.Lock()
        check_against_manifest(hct, manifest, where)
        if limits.memory_bytes < 4 * PAGE:
            raise ModuleError(f"the native backend needs at least {4 * PAGE} bytes of memory (Limits.memory_bytes)")
        self.state_size = hct.param("state_size")
        self.event_size = hct.param("event_size")
        self.snapshot_size = hct.param("snapshot_size")
        self.control = CONTROL
        try:
            self._native = native.Module(
                hct.blob, hct.params, limits.memory_bytes, CONTROL, ModuleTrap, limits.fuel or 0
            )
        except ValueError as e:
            raise ModuleError(f"{where}: {e}") from None
        except MemoryError as e:
            raise ModuleError(f"{where}: {e}") from None
        names = ("reset", "fork", "feed", "finish", "scan", "snapshot", "step_batch", "reset_batch",
                 "snapshot_batch", "finish_batch", "verdicts")  # fmt: skip
        self._calls = {name: self._native.function(name) for name in names}
        self._native.grow(HEAP_BASE)
        self._refresh_view()
        try:
            self._init_buffers(HEAP_BASE, hct.param("plm"))
        except ModuleTrap as e:  # (buffers for its lexeme_events do not fit its memory)
            self.close()
            raise ModuleError(f"{where}: {e}") from None
        self.rearm_at = float("inf")  # no deadline to re-arm (Batch checks this)

    # -- the memory and call layer --------------------------------------------------------

    def _refresh_view(self) -> None:
        # The memory never moves (one reservation): a view made before growing still points
        # at it, but covers only the old size, so views are made again
        native = self._native
        self.mem = np.frombuffer(native, np.uint8, count=native.size)
        self.ctl = self.mem[self.control : self.control + 4 * len(CONTROL_FIELDS)].view(np.uint32)
        self.ctl_words = (ctypes.c_uint32 * len(CONTROL_FIELDS)).from_buffer(native, self.control)
        self.generation = getattr(self, "_generation", 0) + 1

    def _grow(self, end: int) -> None:
        if end > self._native.size:
            if end > self.limits.memory_bytes:
                raise ModuleTrap(f"the module's memory would exceed its limit ({self.limits.memory_bytes} bytes)")
            try:
                self._native.grow(min(-(-end // PAGE) * PAGE, self.limits.memory_bytes))
            except MemoryError as e:  # (the process's own limit: RLIMIT_DATA)
                raise ModuleTrap(f"the module's memory cannot grow to {end:,} bytes: {e}") from None
            self._refresh_view()

    def arm(self) -> None:
        """(no deadline; the step budget is the core's, per call: see the module docstring)"""

    def call(self, name: str, *params: int) -> int:
        return self._calls[name](*params)

    def check_state(self, at: int) -> str | None:
        return self._native.check_state(at)

    def close(self) -> None:
        """Release the module's memory now (its whole address-space reservation: an open
        batch still holding a view of it keeps it until that batch is gone). Any later call
        on this checker or its batches raises `CheckerClosed`."""
        with self.lock:
            self.closed = True
            self.generation = CLOSED
            self._calls = {}
            # (the views first: the memory is unmapped when the last one is released; the
            # heap goes too, its `grow` being a method of this checker — a cycle that kept the
            # whole reservation until the garbage collector ran)
            for name in ("mem", "ctl", "ctl_words", "_heap"):
                self.__dict__.pop(name, None)
            native = self.__dict__.pop("_native", None)
            if native is not None:
                native.close()

    def clone(self) -> NativeChecker:
        """An independent module on the same tables (for another thread)."""
        self.check_open()
        twin = NativeChecker(self.manifest, self._hct, self.limits, self._where)
        twin._copy_token_table(self)
        return twin
