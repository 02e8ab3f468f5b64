"""Byte-level NFA → DFA (subset construction over byte equivalence classes).

Small on purpose: the lexer (`heatc.lexicon`) builds one NFA out of Thompson fragments
and asks for a deterministic, reproducible DFA: states are numbered in breadth-first order
from the start state, classes in order of their smallest byte, so the same input always
gives the same tables.

Public surface: `Nfa`, `Fragment`, `Dfa`, `determinize()`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

ByteSet = frozenset[int]


@dataclass(frozen=True)
class Fragment:
    start: int
    end: int


class Nfa:
    def __init__(self) -> None:
        self.edges: list[list[tuple[ByteSet, int]]] = []
        self.eps: list[list[int]] = []
        self.accepts: dict[int, object] = {}  # state → token label (opaque to this module)

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def edge(self, src: int, bytes_: ByteSet, dst: int) -> None:
        self.edges[src].append((bytes_, dst))

    def epsilon(self, src: int, dst: int) -> None:
        self.eps[src].append(dst)

    # Thompson combinators -------------------------------------------------------------

    def byteset(self, bytes_: ByteSet) -> Fragment:
        a, b = self.state(), self.state()
        self.edge(a, frozenset(bytes_), b)
        return Fragment(a, b)

    def seq(self, *parts: Fragment) -> Fragment:
        if not parts:
            a = self.state()
            return Fragment(a, a)
        for x, y in itertools.pairwise(parts):
            self.epsilon(x.end, y.start)
        return Fragment(parts[0].start, parts[-1].end)

    def literal(self, data: bytes) -> Fragment:
        return self.seq(*(self.byteset(frozenset([b])) for b in data))

    def alt(self, *parts: Fragment) -> Fragment:
        a, b = self.state(), self.state()
        for p in parts:
            self.epsilon(a, p.start)
            self.epsilon(p.end, b)
        return Fragment(a, b)

    def star(self, part: Fragment) -> Fragment:
        a, b = self.state(), self.state()
        self.epsilon(a, part.start)
        self.epsilon(a, b)
        self.epsilon(part.end, part.start)
        self.epsilon(part.end, b)
        return Fragment(a, b)

    def plus(self, make) -> Fragment:
        """One or more; `make` builds a fresh copy of the fragment."""
        return self.seq(make(), self.star(make()))

    def opt(self, part: Fragment) -> Fragment:
        return self.alt(part, self.seq())


@dataclass
class Dfa:
    byte_class: list[int]
    n_classes: int
    next: list[list[int]]  # per state, per class; 0 = dead
    labels: list[list[object]]  # per state: accept labels of the NFA states it contains


def _byte_classes(nfa: Nfa) -> tuple[list[int], int]:
    """Partition 0..255 so that bytes in a class are indistinguishable to every edge."""
    signature: list[list[int]] = [[] for _ in range(256)]
    seen: dict[ByteSet, int] = {}
    for edges in nfa.edges:
        for bytes_, _ in edges:
            if bytes_ not in seen:
                seen[bytes_] = len(seen)
                idx = seen[bytes_]
                for b in bytes_:
                    signature[b].append(idx)
    class_of: dict[tuple[int, ...], int] = {}
    byte_class = [0] * 256
    for b in range(256):
        byte_class[b] = class_of.setdefault(tuple(signature[b]), len(class_of))
    return byte_class, len(class_of)


def determinize(nfa: Nfa, start: int) -> Dfa:
    byte_class, n_classes = _byte_classes(nfa)

    closure_cache: dict[int, frozenset[int]] = {}

    def closure_of(s: int) -> frozenset[int]:
        if s in closure_cache:
            return closure_cache[s]
        stack, seen = [s], {s}
        while stack:
            x = stack.pop()
            for y in nfa.eps[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        closure_cache[s] = frozenset(seen)
        return closure_cache[s]

    # Per NFA state: byte class → targets (only states with edges matter).
    moves: list[dict[int, list[int]]] = []
    for edges in nfa.edges:
        m: dict[int, list[int]] = {}
        for bytes_, dst in edges:
            for c in {byte_class[b] for b in bytes_}:
                m.setdefault(c, []).append(dst)
        moves.append(m)

    start_set = closure_of(start)
    index: dict[frozenset[int], int] = {frozenset(): 0, start_set: 1}
    order: list[frozenset[int]] = [frozenset(), start_set]
    table: list[list[int]] = [[0] * n_classes]
    i = 1
    while i < len(order):
        current = order[i]
        row = [0] * n_classes
        by_class: dict[int, set[int]] = {}
        for s in current:
            for c, dsts in moves[s].items():
                targets = by_class.setdefault(c, set())
                for d in dsts:
                    targets |= closure_of(d)
        for c in sorted(by_class):
            key = frozenset(by_class[c])
            if key not in index:
                index[key] = len(order)
                order.append(key)
            row[c] = index[key]
        table.append(row)
        i += 1
    labels = [[nfa.accepts[s] for s in sorted(st) if s in nfa.accepts] for st in order]
    return Dfa(byte_class, n_classes, table, labels)
