"""The host's allocator for a module's linear memory (the kernel never allocates).

Everything the host places in a checker's memory — event and snapshot buffers, the scan
input, the token table, each batch's state array — is a block of this heap: first fit over
a free list kept in address order, neighbours coalesced on free, the top lowered when the
highest block goes. WebAssembly memory only grows, so what bounds a long-lived checker is
reuse: a server that opens and closes a batch per request stays at its high-water mark.

Public surface: `Heap(base, grow)`, its `alloc`, `free`, `free_later` and `in_use`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

ALIGN = 16  # every block starts and ends on this (v128 loads, the records' u64 fields)


class Heap:
    """Blocks at or above `base`; `grow(end)` is called, before a block is handed out, when
    it would end past the memory there is (it raises to refuse; nothing changes then)."""

    def __init__(self, base: int, grow: Callable[[int], None]):
        self._base = -(-base // ALIGN) * ALIGN
        self._top = self._base  # the end of the highest block in use
        self._grow = grow
        self._free: list[tuple[int, int]] = []  # (start, size), in address order, never adjacent
        self._used: dict[int, int] = {}  # start → size of each block in use
        # Blocks freed by finalizers: they may run in any thread at any moment (even inside
        # a call that holds the checker's lock), so they only append here (atomic), and the
        # next alloc, under the lock, takes them back.
        self._later: list[int] = []

    @property
    def in_use(self) -> int:
        """Bytes in blocks handed out and not yet freed."""
        return sum(self._used.values())

    def alloc(self, size: int) -> int:
        """The start of a free block of at least `size` bytes (`ALIGN`-aligned)."""
        while self._later:
            self.free(self._later.pop())
        size = max(ALIGN, -(-size // ALIGN) * ALIGN)
        for k, (start, have) in enumerate(self._free):
            if have >= size:
                if have == size:
                    del self._free[k]
                else:
                    self._free[k] = (start + size, have - size)
                self._used[start] = size
                return start
        start = self._top
        self._grow(start + size)  # may raise: the memory limit
        self._top = start + size
        self._used[start] = size
        return start

    def free(self, start: int) -> None:
        size = self._used.pop(start)
        k = bisect.bisect_left(self._free, (start, 0))
        if k < len(self._free) and self._free[k][0] == start + size:  # the next block is free
            size += self._free.pop(k)[1]
        if k and sum(self._free[k - 1]) == start:  # so is the previous one
            k -= 1
            start, size = self._free[k][0], self._free[k][1] + size
            del self._free[k]
        if start + size == self._top:
            self._top = start
        else:
            self._free.insert(k, (start, size))

    def free_later(self, start: int) -> None:
        """Free from a finalizer: taken back at the next `alloc`."""
        self._later.append(start)
