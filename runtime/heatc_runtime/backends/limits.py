"""Resource limits for running a module.

Public surface: `Limits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_TIMEOUT_S = 1e6  # about 11 days: beyond it a deadline means nothing (use None for none)
MAX_FUEL = 1 << 62  # wasmtime counts fuel in a u64
MIN_MEMORY, MAX_MEMORY = 1 << 16, 1 << 32  # one wasm page; all that a 32-bit memory addresses


@dataclass(frozen=True)
class Limits:
    """Resource limits for running a module.

    `timeout_s` bounds the wall-clock time of one call (epoch interruption; checked every
    10 ms, so a deadline under 10 ms means "stopped at the next tick"). `fuel`, if set,
    bounds the instructions of one call instead (deterministic, but the module runs slower).
    `memory_bytes` caps the module's linear memory (64 KiB to 4 GiB).

    `Limits.trusted()` — no deadline and no fuel — is for modules you built yourself: the
    engine then inserts no interruption checks, which makes scanning faster.

    Parameters
    ----------
    timeout_s : float or None
        Seconds one call may run (None: no deadline).
    fuel : int or None
        Instructions one call may run, instead of a deadline (None: not counted).
    memory_bytes : int
        The module's memory cap.

    Raises
    ------
    TypeError
        A value of the wrong type (a bool, a float for a whole number).
    ValueError
        A value out of range (refused here, not at the first call).
    """

    timeout_s: float | None = 30.0
    fuel: int | None = None
    memory_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        t = self.timeout_s
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise TypeError(f"Limits.timeout_s must be a number of seconds or None, got {type(t).__name__}")
            if not (math.isfinite(t) and 0 < t <= MAX_TIMEOUT_S):
                raise ValueError(
                    f"Limits.timeout_s must be above 0 and at most {MAX_TIMEOUT_S:g} seconds, got {t!r} "
                    "(None: no deadline)"
                )
        _whole("fuel", self.fuel, 1, MAX_FUEL, none_ok=True)
        _whole("memory_bytes", self.memory_bytes, MIN_MEMORY, MAX_MEMORY)

    @classmethod
    def trusted(cls, memory_bytes: int = 1 << 30) -> Limits:
        return cls(timeout_s=None, fuel=None, memory_bytes=memory_bytes)

    @property
    def mode(self) -> str:
        return "fuel" if self.fuel is not None else "epoch" if self.timeout_s is not None else "none"


def _whole(name: str, value: object, lo: int, hi: int, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Limits.{name} must be a whole number{' or None' if none_ok else ''}, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"Limits.{name} must be between {lo} and {hi}, got {value}")
