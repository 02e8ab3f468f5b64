"""Resource limits for running a module."""

from __future__ import annotations

from dataclasses import dataclass


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
