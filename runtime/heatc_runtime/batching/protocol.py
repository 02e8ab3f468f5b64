"""`CheckerProtocol`: what a `Batch`, a `Lookahead` and a draft check need of the checker
whose memory their sequences live in — the memory and call layer every backend provides
(the WASM `Checker`, the native `NativeChecker`). The batch API reaches a checker through
these public members only, so it depends on this protocol, not on a backend.

Public surface: `CheckerProtocol`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class CheckerProtocol(Protocol):
    """A loaded module's memory and calls, as the batch API drives them.

    Attributes
    ----------
    lock : threading.Lock
        Serialises the calls on this module (every batch call holds it).
    closed : bool
        True once `close()` ran: every later call raises `CheckerClosed`.
    generation : int
        Bumped whenever memory views go stale (memory grew, a new token table, a close).
    state_size : int
        Bytes of one sequence's state record.
    manifest : dict
        The module's manifest (its `layout` says where a state keeps its fields).
    limits : Limits
        The budget of each API call (`fuel`, `timeout_s`, `memory_bytes`).
    mem : numpy.ndarray
        The module's linear memory as uint8 (current for this `generation`).
    ctl : numpy.ndarray
        The control block's words (uint32, indexed by `abi.CONTROL_FIELDS`).
    ctl_words : ctypes array
        The same words through ctypes (cheaper to read one at a time in a decoding step).
    rearm_at : float
        The `time.monotonic()` past which the next call must be budgeted afresh (`arm`).
    n_tokens : int
        Entries of the token table in memory (0: none).
    token_table : list of bytes or None
        The token table (None: none set).
    free_later : callable
        Gives a block back at the next allocation (for finalizers: holds the heap, not the checker).
    """

    lock: threading.Lock
    closed: bool
    generation: int
    state_size: int
    manifest: dict
    limits: Any
    mem: np.ndarray
    ctl: np.ndarray
    ctl_words: Any
    rearm_at: float
    n_tokens: int

    @property
    def token_table(self) -> list[bytes] | None: ...

    @property
    def free_later(self) -> Callable[[int], None]: ...

    def ready_token_table(self) -> None: ...

    def check_open(self) -> None: ...

    def alloc(self, size: int) -> int: ...

    def free(self, ptr: int) -> None: ...

    def arm(self) -> None: ...

    def begin(self) -> None: ...

    def call(self, name: str, *params: int) -> int: ...

    def bound(self, name: str, *params: int) -> Callable[[], int]: ...

    def trapped(self) -> None: ...

    def stalled(self, what: str) -> Exception: ...

    def drain(self, events: bool = True) -> tuple[list, list]: ...

    def put_input(self, data: bytes) -> int: ...

    def check_state(self, at: int) -> str | None: ...

    def is_finished(self, at: int) -> bool: ...
