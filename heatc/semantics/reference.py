"""The reference interpreter: THE specification of what a compiled Program does.

It runs a `Program` over a byte stream, for one sequence (`Machine`) or a batch
(`Batch`), exactly as docs/semantics.md describes; every other backend must produce the
same events and verdicts, bit for bit. Clarity beats speed here: each step below is the
definition, written so it can be read next to the document.

Public surface: `Machine`, `Batch`, `scan()`; lexing and the anchor helpers it shares with
the compiler are in `heatc.semantics.lexing`; a machine's fixed-size state record in
`heatc.semantics.state`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from heatc import ir
from heatc.cache import ProgramCache
from heatc.semantics.lexing import (
    NUMERIC_CODES,
    Lexeme,
    LexerState,
    anchor_key,
    finish_lexer,
    is_anchor_text,
    join_anchor_run,
    normalise_anchor_text,
    run_lexer,
)
from heatc_runtime import Conflict, Event, Snapshot, Verdict

# --- matching ---------------------------------------------------------------------------


class _Thread:
    __slots__ = ("caps", "gaps", "start")

    def __init__(self, start: int, gaps: int, caps: list[float]):
        self.start, self.gaps, self.caps = start, gaps, caps


class _RuleState:
    __slots__ = ("matches", "rejected", "slots")

    def __init__(self, n_elements: int):
        self.rejected = False
        self.matches = 0
        self.slots: list[_Thread | None] = [None] * n_elements  # slot 0 unused


class _Channel:
    __slots__ = ("end", "set", "start", "value")

    def __init__(self) -> None:
        self.set, self.value, self.start, self.end = False, 0.0, 0, 0


class _AnchorEntry:
    __slots__ = ("space_before", "start", "text")

    def __init__(self, start: int, space_before: bool, text: bytes):
        self.start, self.space_before, self.text = start, space_before, text


def _compare(op: str, a: float, b: float) -> bool:
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "==":
        return a == b
    return a != b


@dataclass(frozen=True)
class _Tables:
    """What a Machine reads from its program, derived once per program."""

    accepts: list[list[frozenset[int]]]  # per rule and element, the lexeme codes it accepts
    starts: list[frozenset[int]]  # per rule, its first element's
    starting: dict[int, tuple[int, ...]]  # lexeme code -> the rules it starts (see _on_token)
    class_names: list[str]
    literal_class: list[int]
    domains: list[str]
    # per rule and element, a quantity unit's conversion per accepted code ({} for others)
    units: list[list[dict[int, tuple[float, float, float]]]]


def _derive_tables(program: ir.Program) -> _Tables:
    accepts = [[frozenset(e.accepts) for e in r.elements] for r in program.rules]
    starting: dict[int, list[int]] = {}
    for r, rule in enumerate(accepts):
        for code in rule[0]:
            starting.setdefault(code, []).append(r)
    return _Tables(
        accepts,
        [rule[0] for rule in accepts],
        {code: tuple(rs) for code, rs in starting.items()},
        [c.name for c in program.classes],
        [lit.class_id for lit in program.literals],
        list(dict.fromkeys(g.domain for g in program.anchor_groups)),
        [[dict(zip(e.accepts, map(tuple, e.units), strict=False)) for e in r.elements] for r in program.rules],
    )


_tables = ProgramCache(_derive_tables)


class Machine:
    """One sequence: `feed(bytes)`, `snapshot()`, `finish()`, `fork()`, `reset()`."""

    def __init__(self, program: ir.Program):
        self.program = program
        t = _tables(program)
        self._accepts, self._starts, self._starting = t.accepts, t.starts, t.starting
        self._class_names, self._literal_class, self._domains = t.class_names, t.literal_class, t.domains
        self._units = t.units
        self.reset()

    # -- life cycle --------------------------------------------------------------------

    def reset(self) -> None:
        p = self.program
        self._lexer = LexerState()
        self.lexemes = 0
        self.tokens = 0
        self.matches = 0
        self.rejections = 0
        self.finished = False
        self._last_end = 0  # end of the previous lexeme
        self._anchors: list[_AnchorEntry] = []
        self._active = [False] * len(p.anchor_groups)
        self._channels = [_Channel() for _ in p.channels]
        self._rules = [_RuleState(len(r.elements)) for r in p.rules]
        self._live: set[int] = set()  # the rules with a thread in some slot
        self._events: list[Event] = []
        self._published: list[Snapshot] = []

    def fork(self) -> Machine:
        twin = copy.copy(self)
        twin._lexer = copy.deepcopy(self._lexer)
        twin._anchors = list(self._anchors)
        twin._active = list(self._active)
        twin._channels = copy.deepcopy(self._channels)
        twin._rules = copy.deepcopy(self._rules)
        twin._live = set(self._live)
        twin._events = list(self._events)
        twin._published = []
        return twin

    # -- input -------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Snapshot]:
        """Feed one token's bytes; return the snapshots published meanwhile."""
        if self.finished:
            raise RuntimeError("the stream is finished; reset() before feeding more")
        run_lexer(self.program.lexer, self._lexer, data, self._on_token)
        self.tokens += 1
        if self.program.window and self.tokens % self.program.window == 0:
            self._publish()
        return self._take_published()

    def snapshot(self) -> Snapshot:
        """Publish a snapshot now (events since the previous one, current verdicts)."""
        self._publish()
        return self._take_published()[-1]

    def finish(self) -> list[Snapshot]:
        """End of stream: flush the lexer, end every partial match, publish the final snapshot."""
        if self.finished:
            raise RuntimeError("finish() was already called")
        finish_lexer(self.program.lexer, self._lexer, self._on_token)
        for rs in self._rules:
            rs.slots = [None] * len(rs.slots)
        self._live = set()
        self.finished = True
        self._publish(final=True)
        return self._take_published()

    # -- observation -------------------------------------------------------------------

    def verdicts(self) -> dict[str, Verdict]:
        out = {}
        for r, (rule, rs) in enumerate(zip(self.program.rules, self._rules, strict=True)):
            if rs.rejected:
                out[rule.name] = Verdict.REJECTED
            elif r in self._live:  # a thread in some slot
                out[rule.name] = Verdict.PENDING
            else:
                out[rule.name] = Verdict.CONFIRMED
        return out

    def counters(self) -> dict[str, int]:
        return {
            "bytes": self._lexer.pos,
            "lexemes": self.lexemes,
            "tokens": self.tokens,
            "matches": self.matches,
            "rejections": self.rejections,
        }

    def rule_matches(self) -> dict[str, int]:
        return {r.name: rs.matches for r, rs in zip(self.program.rules, self._rules, strict=True)}

    def _publish(self, final: bool = False) -> None:
        events, self._events = self._events, []
        self._published.append(Snapshot(self.verdicts(), events, self.counters(), final))

    def _take_published(self) -> list[Snapshot]:
        out, self._published = self._published, []
        return out

    # -- one lexeme --------------------------------------------------------------------

    def _on_token(self, code: int, start: int, raw: bytes) -> None:
        if code == ir.LEX_SPACE:
            return
        x = Lexeme.of(code, start, raw)
        end = x.end
        space_before = start > self._last_end
        self._last_end = end
        self.lexemes += 1
        if self.program.anchors.max_lexemes:
            self._step_anchors(x, space_before)
        flags = self.program.code_flags[code]
        barrier = bool(flags & ir.FLAG_BARRIER)
        kind = self.program.code_kinds[code]  # it ends the gaps that block its kind
        # Every rule steps on every lexeme; but a rule with no thread, which this lexeme does
        # not start, finds nothing to advance or end and starts nothing: only the others are
        # stepped, in rule order (the order of their events)
        for r in sorted(self._live.union(self._starting.get(code, ()))):
            self._step_rule(r, x, barrier, kind)
        if flags & ir.FLAG_TRIGGER:
            self._publish()

    def _step_anchors(self, x: Lexeme, space_before: bool) -> None:
        if not is_anchor_text(x.code, x.raw):
            self._anchors.clear()
            return
        p = self.program
        self._anchors.append(_AnchorEntry(x.start, space_before, normalise_anchor_text(x.raw)))
        del self._anchors[: -p.anchors.max_lexemes]
        for n in range(1, len(self._anchors) + 1):
            run = self._anchors[-n:]
            text = join_anchor_run([(e.space_before, e.text) for e in run])
            for domain in self._domains:
                g = self._lookup(anchor_key(domain, text))
                if g >= 0 and not self._active[g]:
                    self._active[g] = True
                    self._events.append(Event("anchor", p.anchor_groups[g].name, run[0].start, x.end))

    def _lookup(self, key: int) -> int:
        table = self.program.anchors
        mask = table.size - 1
        slot = key & mask
        while table.keys[slot] != 0:
            if table.keys[slot] == key:
                return table.groups[slot]
            slot = (slot + 1) & mask
        return -1

    def _capture(self, t: _Thread, element: ir.Element, x: Lexeme, units: dict) -> None:
        if element.convert >= 0:
            # a quantity's unit: the number captured before it, in the dimension's base unit,
            # by exactly these three float64 operations (heatc.units; docs/semantics.md §3)
            pre, mul, div = units[x.code]
            t.caps[element.convert] = ((t.caps[element.convert] + pre) * mul) / div
        if element.capture >= 0:
            if x.code in NUMERIC_CODES:
                t.caps[element.capture] = x.value
            else:
                t.caps[element.capture] = float(self._literal_class[x.code - ir.LEX_LITERAL0])
        if element.places >= 0:
            t.caps[element.places] = float(x.places)

    def _step_rule(self, r: int, x: Lexeme, barrier: bool, kind: int) -> None:
        rule = self.program.rules[r]
        if rule.gate >= 0 and not self._active[rule.gate]:
            return
        rs = self._rules[r]
        accepts = self._accepts[r]
        k = len(rule.elements)
        slots = rs.slots
        for i in range(k - 1, 0, -1):
            t = slots[i]
            if t is None:
                continue
            element = rule.elements[i]
            if x.code in accepts[i]:
                if i == k - 1:
                    slots[i] = None
                    done = _Thread(t.start, 0, list(t.caps))
                    self._capture(done, element, x, self._units[r][i])
                    self._complete(r, done, x.end)
                    continue
                moved = _Thread(t.start, 0, list(t.caps))
                self._capture(moved, element, x, self._units[r][i])
                slots[i + 1] = moved  # the newer thread wins
            if t.gaps < element.gap and not barrier and not kind & element.blocks:
                t.gaps += 1
            else:
                slots[i] = None
        if x.code in self._starts[r]:
            t = _Thread(x.start, 0, [0.0] * len(rule.captures))
            self._capture(t, rule.elements[0], x, self._units[r][0])
            if k == 1:
                self._complete(r, t, x.end)
            else:
                slots[1] = t
        if slots.count(None) < k:
            self._live.add(r)
        else:
            self._live.discard(r)

    def _complete(self, r: int, t: _Thread, end: int) -> None:
        rule = self.program.rules[r]
        rs = self._rules[r]
        failed: str | None = None
        conflict: Conflict | None = None
        for q in rule.requirements:
            if not self._holds(q, t.caps):
                failed = q.text
                break
        if failed is None:
            for use in rule.channels:
                c = self._conflicting_slot(use, t.caps)
                if c is not None:
                    ch = self._channels[c]
                    conflict = Conflict(
                        self.program.channels[c].name,
                        self._capture_value(rule, use.capture, ch.value),
                        ch.start,
                        ch.end,
                    )
                    break
        verdict = Verdict.REJECTED if (failed is not None or conflict is not None) else Verdict.CONFIRMED
        if verdict is Verdict.CONFIRMED:
            for use in rule.channels:
                v = t.caps[use.capture]
                low = self._channel_slot(use, t.caps)
                if not use.factor:
                    ch = self._channels[low]
                    if not ch.set:
                        ch.set, ch.value, ch.start, ch.end = True, v, t.start, end
                elif v > 0:  # a band: the smallest and the largest value so far
                    for slot, better in ((low, v.__lt__), (self._band_high(use, low), v.__gt__)):
                        ch = self._channels[slot]
                        if not ch.set or better(ch.value):
                            ch.set, ch.value, ch.start, ch.end = True, v, t.start, end
        else:
            rs.rejected = True
            if not rule.observe:  # (the count the engines act on: an observe-only rule only reports)
                self.rejections += 1
        rs.matches += 1
        self.matches += 1
        captures = tuple((c.name, self._capture_value(rule, i, t.caps[i])) for i, c in enumerate(rule.captures))
        self._events.append(Event("match", rule.name, t.start, end, verdict, captures, failed, conflict))

    def _capture_value(self, rule: ir.Rule, i: int, value: float) -> float | str:
        return self._class_names[int(value)] if rule.captures[i].kind == "class" else value

    def _conflicting_slot(self, use: ir.ChannelUse, caps: list[float]) -> int | None:
        """The channel slot a match's value disagrees with, or None (docs/semantics.md §4):
        a set exact channel with another value; for a band (`within factor F`), a value
        above F times the smallest so far, or F times below the largest. A band neither
        checks nor keeps values ≤ 0: they have no magnitude."""
        v = caps[use.capture]
        low = self._channel_slot(use, caps)
        if not use.factor:
            ch = self._channels[low]
            return low if ch.set and ch.value != v else None
        if v <= 0:
            return None
        f = float(use.factor)
        high = self._band_high(use, low)
        smallest, largest = self._channels[low], self._channels[high]
        if smallest.set and v > smallest.value * f:
            return low
        if largest.set and v * f < largest.value:
            return high
        return None

    @staticmethod
    def _band_high(use: ir.ChannelUse, low: int) -> int:
        """The slot of a band's largest value: one per key class after its smallest (docs/ir.md)."""
        return low + max(1, len(use.key_classes))

    @staticmethod
    def _channel_slot(use: ir.ChannelUse, caps: list[float]) -> int:
        if use.key < 0:
            return use.channel
        return use.channel + use.key_classes.index(int(caps[use.key]))

    @staticmethod
    def _holds(q: ir.Requirement, caps: list[float]) -> bool:
        def value(o: ir.Operand) -> float:
            return caps[o.capture] if o.capture >= 0 else o.const

        v = value(q.left)
        if q.op == "in":
            low_ok = q.low <= v if q.low_closed else q.low < v
            high_ok = v <= q.high if q.high_closed else v < q.high
            return low_ok and high_ok
        return _compare(q.op, v, value(q.right))


class Batch:
    """`n` independent sequences stepped together, one token each per step."""

    def __init__(self, program: ir.Program, n: int):
        self.program = program
        self.machines = [Machine(program) for _ in range(n)]

    def __len__(self) -> int:
        return len(self.machines)

    def step(self, pieces: list[bytes]) -> list[list[Snapshot]]:
        if len(pieces) != len(self.machines):
            raise ValueError(f"expected {len(self.machines)} pieces, got {len(pieces)}")
        return [m.feed(b) for m, b in zip(self.machines, pieces, strict=True)]

    def feed_text(self, i: int, text: str | bytes) -> list[Snapshot]:
        return self.machines[i].feed(text.encode("utf-8") if isinstance(text, str) else text)

    def snapshot(self) -> list[Snapshot]:
        return [m.snapshot() for m in self.machines]

    def finish(self) -> list[list[Snapshot]]:
        return [m.finish() for m in self.machines]

    def fork(self, dst: int, src: int) -> None:
        self.machines[dst] = self.machines[src].fork()

    def reset(self, i: int | None = None) -> None:
        for j, m in enumerate(self.machines):
            if i is None or i == j:
                m.reset()


def scan(program: ir.Program, data: bytes) -> tuple[list[Event], dict[str, Verdict], dict[str, int]]:
    """Run one complete document: (all events, final verdicts, per-rule match counts)."""
    m = Machine(program)
    snaps = m.feed(data) + m.finish()
    events = [e for s in snaps for e in s.events]
    return events, snaps[-1].verdicts, m.rule_matches()
