"""Load a compiled heatc module and run it: `load(path) -> Checker`.

Needs numpy and wasmtime only. A module is refused at load — with the reason — when its
manifest is missing or malformed, its sha256 does not match, its ABI version is not one
this runtime speaks, or wasmtime cannot compile it. Untrusted modules run under a wall-
clock deadline (epoch interruption) or a fuel budget, and a memory limit.

One wasm call per scanned text and per batch step: Python→wasm calls cost microseconds,
so the runtime calls through wasmtime's unchecked entry point with pre-built argument
buffers, and reads results straight out of linear memory with numpy.

Threads: a Checker (and its batches) may be used from any thread — calls are serialised
by a lock — but one instance runs one call at a time. For parallel work give each thread
its own `checker.clone()`: clones share the compiled module, not state.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import wasmtime
from wasmtime import _bindings as ffi

from .report import Conflict, Event, Report, Snapshot, Verdict, VerdictMap
from .tables import read_token_table

_VERDICTS = tuple(Verdict)  # by value: indexing is cheaper than calling the enum

#: The ABI this runtime speaks: same major, minor up to this one (docs/abi.md).
ABI_MAJOR = 1
ABI_MINOR = 1

_CONTROL_FIELDS = ("ev_ptr", "ev_cap", "ev_count", "snap_ptr", "snap_cap", "snap_count",
                   "tok_offsets", "n_tokens", "tok_bytes", "status", "bad_index", "scratch", "quiet")  # fmt: skip
_EV_COUNT, _SNAP_COUNT, _STATUS, _QUIET = 2, 5, 9, 12
_STATUS_TEXT = {1: "a token id is out of range for the token table", 2: "the stream is finished; reset it first"}
_EPOCH_TICK_S = 0.01
_SNAP_HEAD = struct.Struct("<4I5Q")  # seq, events, final, pad, counters; the verdicts follow


class ModuleError(Exception):
    """A module refused at load time: the message says why."""


class ModuleTrap(Exception):  # noqa: N818 (a trap, as wasm calls it)
    """A module stopped while running: deadline, fuel, memory limit or a trap."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for running a module.

    `timeout_s` bounds the wall-clock time of one call (epoch interruption; checked every
    10 ms). `fuel`, if set, bounds the instructions of one call instead (deterministic, but
    the module runs slower). `memory_bytes` caps the module's linear memory.
    `Limits.trusted()` — no deadline and no fuel — is for modules you built yourself: the
    engine then inserts no interruption checks, which makes scanning faster.
    """

    timeout_s: float | None = 30.0
    fuel: int | None = None
    memory_bytes: int = 1 << 30

    @classmethod
    def trusted(cls, memory_bytes: int = 1 << 30) -> Limits:
        return cls(timeout_s=None, fuel=None, memory_bytes=memory_bytes)

    @property
    def mode(self) -> str:
        return "fuel" if self.fuel is not None else "epoch" if self.timeout_s is not None else "none"


class _Ticker:
    """Advances an engine's epoch every 10 ms while any instance may need a deadline."""

    def __init__(self, engine: wasmtime.Engine):
        self.engine = engine
        self.thread = threading.Thread(target=self._run, name="heatc-epoch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_EPOCH_TICK_S)
            self.engine.increment_epoch()


_ENGINES: dict[str, tuple[wasmtime.Engine, _Ticker | None]] = {}
_ENGINE_LOCK = threading.Lock()


def _engine(mode: str) -> wasmtime.Engine:
    """One engine per interruption mode: "epoch", "fuel" or "none" (trusted modules)."""
    with _ENGINE_LOCK:
        if mode not in _ENGINES:
            config = wasmtime.Config()
            config.wasm_simd = True
            config.wasm_relaxed_simd = True  # i8x16.relaxed_swizzle (ABI 1.1)
            config.wasm_bulk_memory = True
            config.consume_fuel = mode == "fuel"
            config.epoch_interruption = mode == "epoch"
            engine = wasmtime.Engine(config)
            _ENGINES[mode] = (engine, _Ticker(engine) if mode == "epoch" else None)
        return _ENGINES[mode][0]


class _RawCall:
    """A wasm export called through wasmtime_func_call_unchecked, with every ctypes argument
    converted once up front (argument conversion, not the call, dominates a ctypes call)."""

    _entry = None

    def __init__(self, store: wasmtime.Store, func: wasmtime.Func, n_params: int, n_results: int):
        if _RawCall._entry is None:
            entry = type(ffi._wasmtime_func_call_unchecked)(
                ctypes.cast(ffi._wasmtime_func_call_unchecked, ctypes.c_void_p).value
            )
            entry.restype = ctypes.c_void_p
            entry.argtypes = None
            _RawCall._entry = entry
        self.n = max(n_params, n_results, 1)
        self._func = func  # keeps the wasmtime_func_t alive
        self._context = ctypes.c_void_p(ctypes.cast(store._context(), ctypes.c_void_p).value)
        self._func_ptr = ctypes.c_void_p(ctypes.addressof(func._func))
        self._n = ctypes.c_size_t(self.n)
        self._trap = ctypes.c_void_p(0)
        self._trap_ptr = ctypes.c_void_p(ctypes.addressof(self._trap))
        self._args, self._args_ptr, self._slots = self._buffer()

    def _buffer(self):
        args = (ffi.wasmtime_val_raw_t * self.n)()
        base = ctypes.addressof(args)
        slots = [ctypes.c_int32.from_address(base + i * ctypes.sizeof(ffi.wasmtime_val_raw_t)) for i in range(self.n)]
        return args, ctypes.c_void_p(base), slots

    def __call__(self, *params: int) -> int:
        slots = self._slots
        for i, p in enumerate(params):
            slots[i].value = p
        return self._finish(
            _RawCall._entry(self._context, self._func_ptr, self._args_ptr, self._n, self._trap_ptr), slots
        )

    def bound(self, *params: int):
        """A zero-argument call with these parameters fixed (the fast path for a hot loop)."""
        args, args_ptr, slots = self._buffer()
        for i, p in enumerate(params):
            slots[i].value = p
        first, result = (params[0] if params else 0), slots[0]
        entry, context, func_ptr, n, trap_ptr, trap = (
            _RawCall._entry,
            self._context,
            self._func_ptr,
            self._n,
            self._trap_ptr,
            self._trap,
        )
        finish = self._finish

        def run() -> int:
            result.value = first  # the previous result overwrote it
            error = entry(context, func_ptr, args_ptr, n, trap_ptr)
            if error or trap.value:
                return finish(error, slots)
            return result.value

        run.keepalive = args  # the buffer lives as long as the closure
        return run

    def _finish(self, error, slots) -> int:
        if error:
            raise ModuleTrap(
                str(wasmtime.WasmtimeError._from_ptr(ctypes.cast(error, ctypes.POINTER(ffi.wasmtime_error_t))))
            )
        if self._trap.value:
            trap = wasmtime.Trap._from_ptr(ctypes.cast(self._trap.value, ctypes.POINTER(ffi.wasm_trap_t)))
            self._trap.value = 0
            raise ModuleTrap(_trap_message(str(trap)))
        return slots[0].value


def ptr_value(ptr) -> int:
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


def _trap_message(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else "trap"
    if "interrupt" in text or "epoch" in text:
        return "the module ran past its time limit and was stopped (epoch deadline)"
    if "fuel" in text:
        return "the module ran out of fuel and was stopped"
    return f"the module trapped: {first}"


def _read_manifest(path: Path) -> tuple[dict, Path]:
    manifest_path = path / "manifest.json" if path.is_dir() else path
    if not manifest_path.exists():
        raise ModuleError(f"{path}: no manifest.json (is this a heatc build directory?)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModuleError(f"{manifest_path}: the manifest is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "heatc-module":
        raise ModuleError(f"{manifest_path}: not a heatc module manifest")
    for key in ("abi", "wasm", "layout", "rules", "classes", "channels", "anchor_groups"):
        if key not in manifest:
            raise ModuleError(f"{manifest_path}: the manifest has no {key!r}")
    return manifest, manifest_path.parent


def _check_abi(where: str, major: int, minor: int) -> None:
    if major != ABI_MAJOR or minor > ABI_MINOR:
        raise ModuleError(
            f"{where}: module ABI {major}.{minor} is not supported by this runtime "
            f"(it runs ABI {ABI_MAJOR}.0 to {ABI_MAJOR}.{ABI_MINOR}); rebuild the module with a matching heatc"
        )


def load(path: str | Path, limits: Limits | None = None) -> Checker:
    """Load a module or build directory (manifest.json, module.wasm, and for a build
    tokens.bin and the other artifacts), verifying every file's sha256 first."""
    path = Path(path)
    manifest, directory = _read_manifest(path)
    wasm_path = directory / str(manifest["wasm"].get("file", "module.wasm"))
    artifacts = manifest.get("build", {}).get("artifacts", {})
    for name, info in artifacts.items():
        file = directory / name
        try:
            data = file.read_bytes()
        except OSError as e:
            raise ModuleError(f"{file}: cannot read a build artifact: {e.strerror}") from None
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise ModuleError(f"{file}: checksum mismatch: the build is corrupt or was changed after it was made")
    try:
        wasm = wasm_path.read_bytes()
    except OSError as e:
        raise ModuleError(f"{wasm_path}: cannot read the module: {e.strerror}") from None
    checker = from_bytes(manifest, wasm, limits, where=str(wasm_path))
    if "tokens.bin" in artifacts:
        try:
            checker.set_token_table(read_token_table((directory / "tokens.bin").read_bytes()))
        except ValueError as e:
            raise ModuleError(f"{directory / 'tokens.bin'}: {e}") from None
    return checker


def from_bytes(manifest: dict, wasm: bytes, limits: Limits | None = None, where: str = "module") -> Checker:
    """A Checker from a manifest and module bytes already in memory, verified like `load`."""
    abi = manifest["abi"]
    _check_abi(where, int(abi.get("major", -1)), int(abi.get("minor", -1)))
    digest = hashlib.sha256(wasm).hexdigest()
    if digest != manifest["wasm"]["sha256"]:
        raise ModuleError(
            f"{where}: checksum mismatch (sha256 {digest[:16]}…, manifest says "
            f"{str(manifest['wasm']['sha256'])[:16]}…): the module is corrupt or was changed after the build"
        )
    return Checker(manifest, wasm, limits or Limits())


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
        self.engine = _engine(limits.mode)
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
        _check_abi("the module", major, minor)
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
        self._calls: dict[str, _RawCall] = {}
        for name, (n_params, n_results) in signatures.items():
            func = exports.get(name)
            if not isinstance(func, wasmtime.Func):
                raise ModuleError(f"the module does not export the function {name!r}")
            ty = func.type(self.store)
            if len(ty.params) != n_params or len(ty.results) != n_results:
                raise ModuleError(f"the module's {name!r} has the wrong signature for ABI {ABI_MAJOR}")
            self._calls[name] = _RawCall(self.store, func, n_params, n_results)
        self._refresh_view()
        self._decode_tables()
        # Buffers: room for what one input byte can produce (a 64-byte token flushed at once).
        plm = consts["lexeme_events"]
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
        self._ctlv = self._mem[self.control : self.control + 4 * len(_CONTROL_FIELDS)].view(np.uint32)
        # the same words as ctypes, cheaper to read one at a time in the per-step path
        self._ctlc = (ctypes.c_uint32 * len(_CONTROL_FIELDS)).from_address(ptr_value(ptr) + self.control)
        self._generation = getattr(self, "_generation", 0) + 1  # views made before this are stale

    def _view(self) -> np.ndarray:
        return self._mem

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
            self._ctlv[_CONTROL_FIELDS.index(name)] = value

    def _ctl_get(self, name: str) -> int:
        return int(self._ctlv[_CONTROL_FIELDS.index(name)])

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
            self.store.set_epoch_deadline(max(1, int(self.limits.timeout_s / _EPOCH_TICK_S)))
        self._armed_at = time.monotonic()
        # re-armed once half the deadline has passed (a batch step checks only this)
        self._rearm_at = self._armed_at + (self.limits.timeout_s or 1e9) / 2

    def _call(self, name: str, *params: int) -> int:
        # Re-arming costs a C call; do it only when the last budget is half spent, so a
        # call never runs longer than the timeout.
        if self.limits.fuel is not None or time.monotonic() > self._rearm_at:
            self._arm()
        return self._calls[name](*params)

    # -- decoding -----------------------------------------------------------------------

    def _decode_tables(self) -> None:
        m = self.manifest
        self.rule_names = [r["name"] for r in m["rules"]]
        self._rule_index = {name: i for i, name in enumerate(self.rule_names)}
        self._captures = [[(c["name"], c["kind"]) for c in r["captures"]] for r in m["rules"]]
        # the capture names of rules that capture numbers only: their values need no decoding
        # (the event record's fields unpack as floats), the common case on the hot path of a scan
        self._number_names = [
            tuple(name for name, _ in caps) if all(kind == "number" for _, kind in caps) else None
            for caps in self._captures
        ]
        self._requirements = [r["requirements"] for r in m["rules"]]
        self._classes = m["classes"]
        # per rule and capture: its name, and the class names its value indexes (None: a number)
        self._capture_decoders = [
            tuple((name, self._classes if kind == "class" else None) for name, kind in caps) for caps in self._captures
        ]
        self._channels = [(c["name"], c["kind"]) for c in m["channels"]]
        self._groups = m["anchor_groups"]
        # seq, kind, verdict, pad, rule or group, failed, start, end, conflict, pad, its value,
        # start and end, then one float per capture (docs/abi.md, "Records")
        self._event_record = struct.Struct("<IBBHIiQQiIdQQ" + "d" * ((self.event_size - 64) // 8))
        # a snapshot record: its head, then the verdict bytes (padded) as one bytes field
        self._snap_record = struct.Struct(_SNAP_HEAD.format + f"{self.snapshot_size - _SNAP_HEAD.size}s")
        assert self._event_record.size == self.event_size
        self._n_rules = len(self.rule_names)

    def _value(self, kind: str, x: float) -> float | str:
        return self._classes[int(x)] if kind == "class" else float(x)

    def _drain(self, events: bool = True) -> tuple[list[tuple[int, Event]], list[tuple[int, int, Snapshot]]]:
        """Decode and clear the event and snapshot buffers: ([(seq, event)], [(seq, n_events, snapshot)]);
        with `events` false the events are cleared undecoded (the caller copied them)."""
        mem = self._mem
        ctl = self._ctlc  # (ctypes: cheaper to read than numpy scalars)
        n_ev, n_snap = ctl[_EV_COUNT], ctl[_SNAP_COUNT]
        decoded = (
            self._decode_events(memoryview(mem)[self._ev_ptr : self._ev_ptr + n_ev * self.event_size]) if events else []
        )
        snaps: list[tuple[int, int, Snapshot]] = []
        if n_snap:
            # struct over the whole buffer: a decoding step drains a few snapshots, and numpy's
            # per-field views cost more than the records themselves
            index = self._rule_index
            raw = memoryview(mem)[self._snap_ptr : self._snap_ptr + n_snap * self.snapshot_size]
            for (
                seq,
                n_events,
                final,
                _,
                n_bytes,
                lexemes,
                tokens,
                matches,
                rejections,
                codes,
            ) in self._snap_record.iter_unpack(raw):
                counters = {
                    "bytes": n_bytes,
                    "lexemes": lexemes,
                    "tokens": tokens,
                    "matches": matches,
                    "rejections": rejections,
                }  # fmt: skip  (a literal: dict(zip(...)) costs more than the rest of the record)
                # (the codes are padded past the last rule: VerdictMap reads them by rule index)
                snaps.append((seq, n_events, Snapshot(VerdictMap(index, codes), [], counters, bool(final))))
        if n_ev or n_snap:
            ctl[_EV_COUNT] = 0
            ctl[_SNAP_COUNT] = 0
        return decoded, snaps

    def _event_records(self) -> bytes:
        """A copy of the event buffer's records (cleared by the next drain)."""
        return bytes(memoryview(self._mem)[self._ev_ptr : self._ev_ptr + self._ctlc[_EV_COUNT] * self.event_size])

    def _decode_events(self, raw) -> list[tuple[int, Event]]:
        """[(seq, event)] of a run of event records. Reads only the module's fixed tables, not
        its memory: safe without the lock."""
        # struct over the whole run: numpy's tolist() costs twice as much, and reading record
        # fields one by one microseconds per event
        return [(rec[0], self._event(rec)) for rec in self._event_record.iter_unpack(raw)]

    def _decode_scan_events(self, runs: list[bytes]) -> list[Event]:
        """The events of a scan's runs of records. The common event (a match whose captures
        are all numbers, no failed requirement, no conflict) is built here inline: a method
        call per event was a quarter of the decoding."""
        new, set_dict, event_type = object.__new__, object.__setattr__, Event
        rules, number_names, verdicts, general = self.rule_names, self._number_names, _VERDICTS, self._event
        out: list[Event] = []
        add = out.append
        for raw in runs:
            for rec in self._event_record.iter_unpack(raw):
                r = rec[4]
                names = number_names[r]
                if rec[1] or rec[5] >= 0 or rec[8] >= 0 or names is None:
                    add(general(rec))
                    continue
                event = new(event_type)
                set_dict(event, "__dict__", {
                    "kind": "match", "name": rules[r], "start": rec[6], "end": rec[7], "verdict": verdicts[rec[2]],
                    "captures": ((names[0], rec[13]),) if len(names) == 1 else tuple(zip(names, rec[13:])),  # noqa: B905
                    "failed": None, "conflict": None,
                })  # fmt: skip
                add(event)
        return out

    def _event(self, rec: tuple) -> Event:
        """One event record, as a tuple in the order of `_event_record`'s fields."""
        _seq, kind, verdict, _pad, r, failed, start, end, conflict, _pad2, cvalue, cstart, cend = rec[:13]
        caps = rec[13:]  # room for the most captures of any rule
        if kind == 1:
            return Event("anchor", self._groups[r], start, end)
        names = self._number_names[r]
        if names is not None:
            # (zip's strict= keyword alone doubles the cost of this line)
            captures = ((names[0], caps[0]),) if len(names) == 1 else tuple(zip(names, caps))  # noqa: B905
        else:
            decoders = zip(self._capture_decoders[r], caps)  # noqa: B905  (caps has room for the most of any rule)
            captures = tuple([(name, x if classes is None else classes[int(x)]) for (name, classes), x in decoders])
        failed_text = self._requirements[r][failed] if failed >= 0 else None
        clash = None
        if conflict >= 0:
            name, k = self._channels[conflict]
            clash = Conflict(name, self._value(k, cvalue), cstart, cend)
        return Event._match(self.rule_names[r], start, end, _VERDICTS[verdict], captures, failed_text, clash)

    # -- documents ----------------------------------------------------------------------

    def scan(self, text: str | bytes) -> Report:
        """Check one whole document: one wasm call (more only if the buffers fill). The
        report's events are decoded when first read."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with self._lock:
            ptr = self._input(data)
            st = self._scan_state
            self._ctlv[_QUIET] = 1  # a whole-document scan needs only the final snapshot
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
                self._ctlv[_QUIET] = 0
        final = snaps[-1][2]
        return Report(final.verdicts, lambda: self._decode_scan_events(records), final.counters)

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
            if done == self.n and not (ctlc[_EV_COUNT] or ctlc[_SNAP_COUNT]):
                return {}  # the common decoding step: nothing worth a Python object happened
            ctl = c._ctlv
            out: dict[int, list[Snapshot]] = {}
            self._collect(out)
            while done < self.n:  # the buffers filled, or a bad token id
                if ctl[_STATUS]:
                    status, ctl[_STATUS] = int(ctl[_STATUS]), 0
                    raise ValueError(f"sequence {done}: {_STATUS_TEXT.get(status, status)}")
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
                    raise ValueError(f"sequence {i}: {_STATUS_TEXT[2]}")
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
