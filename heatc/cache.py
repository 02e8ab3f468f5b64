"""What is derived from a Program, cached per Program object in memory.

Programs are immutable and few, and hashing one by value would cost more than most of what
is derived from it, so entries are keyed by the object itself (its id, checked by identity;
the cache holds the Program, so the id cannot be reused while the entry lives).

Public surface: `ProgramCache`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from heatc import ir

T = TypeVar("T")


class ProgramCache(Generic[T]):
    """The `size` most recently used values, each built once per Program by `build`."""

    def __init__(self, build: Callable[[ir.Program], T], size: int = 32):
        self._build = build
        self._size = size
        self._items: OrderedDict[int, tuple[ir.Program, T]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, program: ir.Program) -> T:
        with self._lock:
            hit = self._items.get(id(program))
            if hit is not None and hit[0] is program:
                self._items.move_to_end(id(program))
                return hit[1]
        value = self._build(program)  # (outside the lock: a build may take seconds)
        with self._lock:
            self._items[id(program)] = (program, value)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value
