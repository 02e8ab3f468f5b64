"""wasmtime plumbing: one engine per interruption mode (with the epoch ticker), and raw
calls into a module's exports.

Python→wasm calls cost microseconds, so the runtime calls through wasmtime's unchecked
entry point with pre-built argument buffers. That uses wasmtime-py's private API (its
ctypes `_bindings`, `Store._context()`, `Func._func`, `_from_ptr`), which may change with
any major release: `TESTED_WASMTIME` is the range this was tested with (the pin in
pyproject.toml), and importing this module with a wasmtime that lacks that API fails with
an error that says so rather than with a ctypes error on the first call.

Public surface: `TESTED_WASMTIME`, `missing_private_api`, `engine_for`, `RawCall`,
`ptr_value`, `trap_message`, `EPOCH_TICK_S`.
"""

from __future__ import annotations

import ctypes
import threading
import time
from importlib import metadata

import wasmtime

from ..errors import ModuleTrap

TESTED_WASMTIME = ">=50,<51"  # = the wasmtime requirement in pyproject.toml (a test checks)


def missing_private_api(wasmtime_module, ffi) -> list[str]:
    """The parts of wasmtime-py's private API that RawCall needs and `wasmtime_module` (with
    its `_bindings` module `ffi`, None if absent) lacks."""
    if ffi is None:
        return ["wasmtime._bindings"]
    missing = [
        f"_bindings.{n}" for n in ("wasmtime_val_raw_t", "wasmtime_error_t", "wasm_trap_t") if not hasattr(ffi, n)
    ]
    entry = getattr(ffi, "_wasmtime_func_call_unchecked", None)
    # the signature RawCall calls: (context, func, args_and_results, args_and_results_len, trap)
    if entry is None or len(getattr(entry, "argtypes", None) or ()) != 5:
        missing.append("_bindings._wasmtime_func_call_unchecked(context, func, args, n, trap)")
    if not callable(getattr(wasmtime_module.Store, "_context", None)):
        missing.append("Store._context()")
    if "_func" not in getattr(wasmtime_module.Func, "__annotations__", {}):
        missing.append("Func._func")
    missing += [
        f"{c}._from_ptr" for c in ("WasmtimeError", "Trap") if not hasattr(getattr(wasmtime_module, c), "_from_ptr")
    ]
    return missing


def _import_private_api():
    try:
        from wasmtime import _bindings
    except ImportError:
        _bindings = None
    missing = missing_private_api(wasmtime, _bindings)
    if missing:
        try:
            version = metadata.version("wasmtime")
        except metadata.PackageNotFoundError:
            version = "(version unknown)"
        raise ImportError(
            f"wasmtime {version} is not a version heatc_runtime was tested with (needs wasmtime{TESTED_WASMTIME}; "
            f"its private API lacks {', '.join(missing)}): pip install 'wasmtime{TESTED_WASMTIME}'"
        )
    return _bindings


ffi = _import_private_api()

EPOCH_TICK_S = 0.01


class _Ticker:
    """Advances an engine's epoch every 10 ms while any instance may need a deadline."""

    def __init__(self, engine: wasmtime.Engine):
        self.engine = engine
        self.thread = threading.Thread(target=self._run, name="heatc-epoch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(EPOCH_TICK_S)
            self.engine.increment_epoch()


_ENGINES: dict[str, tuple[wasmtime.Engine, _Ticker | None]] = {}
_ENGINE_LOCK = threading.Lock()


def engine_for(mode: str) -> wasmtime.Engine:
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


class RawCall:
    """A wasm export called through wasmtime_func_call_unchecked, with every ctypes argument
    converted once up front (argument conversion, not the call, dominates a ctypes call)."""

    _entry = None

    def __init__(self, store: wasmtime.Store, func: wasmtime.Func, n_params: int, n_results: int):
        if RawCall._entry is None:
            entry = type(ffi._wasmtime_func_call_unchecked)(
                ctypes.cast(ffi._wasmtime_func_call_unchecked, ctypes.c_void_p).value
            )
            entry.restype = ctypes.c_void_p
            entry.argtypes = None
            RawCall._entry = entry
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
            RawCall._entry(self._context, self._func_ptr, self._args_ptr, self._n, self._trap_ptr), slots
        )

    def bound(self, *params: int):
        """A zero-argument call with these parameters fixed (the fast path for a hot loop)."""
        args, args_ptr, slots = self._buffer()
        for i, p in enumerate(params):
            slots[i].value = p
        first, result = (params[0] if params else 0), slots[0]
        entry, context, func_ptr, n, trap_ptr, trap = (
            RawCall._entry,
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
            raise ModuleTrap(trap_message(str(trap)))
        return slots[0].value


def ptr_value(ptr) -> int:
    return ctypes.cast(ptr, ctypes.c_void_p).value or 0


def trap_message(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else "trap"
    if "interrupt" in text or "epoch" in text:
        return "the module ran past its time limit and was stopped (epoch deadline)"
    if "fuel" in text:
        return "the module ran out of fuel and was stopped"
    return f"the module trapped: {first}"
