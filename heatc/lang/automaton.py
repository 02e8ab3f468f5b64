"""Byte-level NFA → DFA (subset construction over byte equivalence classes).

Small on purpose: the lexer (`heatc.lang.lexicon`) builds one NFA out of Thompson fragments
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


def _renumber(
    byte_class: list[int], n_classes: int, rows: list[list[int]], labels: list[list[object]], start: int, dead: int
) -> Dfa:
    """Breadth-first numbering: `dead` becomes 0, `start` 1; unreachable states are dropped."""
    order = [dead, start]
    index = {dead: 0, start: 1}
    i = 1
    while i < len(order):
        for t in rows[order[i]]:
            if t not in index:
                index[t] = len(order)
                order.append(t)
        i += 1
    return Dfa(byte_class, n_classes, [[index[t] for t in rows[s]] for s in order], [labels[s] for s in order])


def minimize(d: Dfa) -> Dfa:
    """Merge states with the same labels and the same future (Moore's partition refinement).

    States from which no labelled state can be reached join the dead state."""
    n = len(d.next)
    reverse: list[list[int]] = [[] for _ in range(n)]
    for s, row in enumerate(d.next):
        for t in row:
            reverse[t].append(s)
    alive = {s for s in range(n) if d.labels[s]}
    stack = list(alive)
    while stack:
        for s in reverse[stack.pop()]:
            if s not in alive:
                alive.add(s)
                stack.append(s)
    keys: dict[tuple, int] = {}
    block = [
        keys.setdefault(
            ("live", tuple(sorted(map(repr, d.labels[s])))) if s in alive and s != 0 else ("dead",), len(keys)
        )
        for s in range(n)
    ]
    count = len(keys)
    while True:
        signatures: dict[tuple, int] = {}
        block = [signatures.setdefault((block[s], *(block[t] for t in d.next[s])), len(signatures)) for s in range(n)]
        if len(signatures) == count:
            break
        count = len(signatures)
    rep: dict[int, int] = {}
    for s in range(n):
        rep.setdefault(block[s], s)
    rows = [[block[t] for t in d.next[rep[b]]] for b in range(count)]
    labels = [d.labels[rep[b]] if rep[b] in alive else [] for b in range(count)]
    return _renumber(d.byte_class, d.n_classes, rows, labels, block[1], block[0])


def product(a: Dfa, b: Dfa) -> Dfa:
    """The automaton running `a` and `b` side by side; a state's labels are both sides' labels.

    Only pairs reachable from (start, start) are built, so a small `a` (the literals of one
    rule set) costs little next to a large, precomputed `b` (numbers, words, other)."""
    pair_class: dict[tuple[int, int], int] = {}
    byte_class = [0] * 256
    for x in range(256):
        byte_class[x] = pair_class.setdefault((a.byte_class[x], b.byte_class[x]), len(pair_class))
    classes = sorted(pair_class.items(), key=lambda kv: kv[1])
    index: dict[tuple[int, int], int] = {(0, 0): 0, (1, 1): 1}
    order = [(0, 0), (1, 1)]
    rows: list[list[int]] = []
    i = 0
    while i < len(order):
        sa, sb = order[i]
        row = []
        for (ca, cb), _ in classes:
            nxt = (a.next[sa][ca], b.next[sb][cb])
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            row.append(index[nxt])
        rows.append(row)
        i += 1
    labels = [a.labels[sa] + b.labels[sb] for sa, sb in order]
    return Dfa(byte_class, len(classes), rows, labels)
