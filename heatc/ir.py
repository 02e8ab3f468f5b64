"""The IR: one plain-data `Program` — the only contract between the front end (DSL,
heatmap lowering) and the backends (reference interpreter, WASM, native, CUDA).

Everything is tables: a byte-level lexer automaton, literal and class tables, per-rule
element/requirement/channel tables in heat order, an anchor hash table, trigger flags per
lexeme code, and the fixed per-sequence state layout. One generic kernel runs any Program.
See docs/ir.md.

Public surface: the dataclasses, `IR_VERSION`, the lexeme codes `LEX_*`, flags `FLAG_*` and
operators `OPS` (defined by the module ABI, heatc_runtime.abi, since kernels read them),
`starts_late()`, `state_layout()`, `to_json()` / `from_json()`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, fields, is_dataclass

from heatc_runtime import abi

# The codes a kernel reads from the tables are the ABI's: lexeme codes (the lexer automaton
# accepts them; a lexeme's symbol is its lexeme code), the flags of Program.code_flags, the
# lexeme kinds of Program.code_kinds, and the requirement operators in the order kernels
# number them.
from heatc_runtime.abi import FLAG_ANCHOR_END as FLAG_ANCHOR_END
from heatc_runtime.abi import FLAG_ANCHOR_MEMBER as FLAG_ANCHOR_MEMBER
from heatc_runtime.abi import FLAG_BARRIER as FLAG_BARRIER
from heatc_runtime.abi import FLAG_STARTS as FLAG_STARTS
from heatc_runtime.abi import FLAG_TRIGGER as FLAG_TRIGGER
from heatc_runtime.abi import (
    KIND_CONSTRAINT,
    KIND_KEYWORD,
    KIND_PUNCT,
    KIND_UNIT,
    LEX_DATE,
    LEX_NUMBER,
    LEX_OTHER,
    LEX_PERCENT,
    LEX_SPACE,
    LEX_WORD,
)
from heatc_runtime.abi import KIND_VALUE as KIND_VALUE
from heatc_runtime.abi import LEX_LITERAL0 as LEX_LITERAL0
from heatc_runtime.abi import LEX_NONE as LEX_NONE
from heatc_runtime.abi import OPS as OPS

# 8: quantities (Element.convert and units, Capture.dimension); 7: Rule.observe, Program.policy;
# 6: Element.places, `places(v)` in requirements
IR_VERSION = 8
MAX_LEXEME = abi.MAX_LEXEME  # bytes; the lexer's look-back buffer (docs/semantics.md §1)
MAX_ANCHOR_LEXEMES = 8
MAX_ELEMENTS = 16
MAX_GAP = 64
MAX_FACTOR = 1_000_000_000  # `within factor F`: a u32 in the channel use record
MAX_PLACES = 20  # `places: P` of a heatmap cell: no number is written more precisely

LEXEME_NAMES = {
    LEX_SPACE: "space",
    LEX_OTHER: "other",
    LEX_WORD: "word",
    LEX_NUMBER: "number",
    LEX_PERCENT: "percent",
    LEX_DATE: "date",
}

# class kind -> lexeme kind (a gap never skips a lexeme of the kind of the elements it joins,
# so a keyword binds its nearest value: docs/semantics.md §3); `other` classes (and inline
# literals) are recognised only so that they are not read differently, and never stop a gap
CLASS_KINDS = {
    "unit": KIND_UNIT,
    "keyword": KIND_KEYWORD,
    "constraint": KIND_CONSTRAINT,
    "punct": KIND_PUNCT,
    "other": 0,
}

# Tokens a lexer emits for open classes of text (most lexemes are one of these)
OPEN_CODES = frozenset({LEX_OTHER, LEX_WORD, LEX_NUMBER, LEX_PERCENT, LEX_DATE})
VALUE_CODES = (LEX_NUMBER, LEX_PERCENT, LEX_DATE)  # the codes whose lexemes have a value


def starts_late(rule: Rule) -> bool:
    """Whether a kernel may start `rule` at its second lexeme instead of its first.

    A thread waiting for an element with gap 0 lives exactly one lexeme, so a rule whose
    second element has gap 0 needs no thread after its first lexeme: it is enough to keep
    the last lexeme (the state's `look_*` fields) and start the thread when the next one is
    accepted by the second element. That pays when the first element accepts an open class
    (every number, say) and the second does not (a unit). Rules behind a `when` gate start
    where the gate was open, so they keep the ordinary path."""
    els = rule.elements
    return (
        len(els) >= 2
        and els[1].gap == 0
        and rule.gate < 0
        and not OPEN_CODES.isdisjoint(els[0].accepts)
        and OPEN_CODES.isdisjoint(els[1].accepts)
    )


@dataclass
class Lexer:
    """Maximal-munch DFA over bytes. State 0 is dead, state 1 the start."""

    byte_class: list[int]  # 256 entries
    n_classes: int
    n_states: int
    next: list[int]  # n_states * n_classes, row-major; 0 = no transition
    accept: list[int]  # lexeme code accepted in each state (LEX_NONE = none)
    # 1: the accept holds only if the next byte is not an ASCII letter (nor an ASCII digit,
    # when the accepted code is LEX_DATE)
    boundary: list[int]
    fallback: list[int]  # lexeme code accepted instead when the boundary fails
    max_lexeme: int = MAX_LEXEME


@dataclass
class LexClass:
    name: str  # anonymous one-literal classes are named by the quoted literal: '"within"'
    kind: str  # unit | keyword | constraint | punct | other
    literals: list[int]
    exact: bool = False


@dataclass
class Literal:
    text: str
    class_id: int
    exact: bool


@dataclass
class Element:
    gap: int  # lexemes that may lie between the previous element and this one
    accepts: list[int]  # sorted lexeme codes
    capture: int = -1  # capture slot, or -1
    # the lexeme kinds (KIND_*) that gap never skips: those of this element and the one before
    blocks: int = 0
    # capture slot of the digits the value writes after its decimal point (`places(v)`), or -1
    places: int = -1
    # the unit of a quantity (`v:quantity(DIM)`): the capture slot whose number this element's
    # lexeme converts to the dimension's base unit, or -1; and per accepted code, in the order
    # of `accepts`, [pre, mul, div]: the slot becomes ((v + pre) * mul) / div (heatc.units)
    convert: int = -1
    units: list[list[float]] = field(default_factory=list)


@dataclass
class Capture:
    name: str
    kind: str  # "number" (float64 value) | "class" (class id, stored as float64)
    # a quantity's dimension (its value is in the dimension's base unit), or ""; no backend reads it
    dimension: str = ""


@dataclass
class Operand:
    capture: int = -1  # capture slot, or -1 for a constant
    const: float = 0.0


@dataclass
class Requirement:
    op: str  # one of OPS
    left: Operand
    right: Operand  # unused for "in"
    low: float = 0.0  # "in" only
    high: float = 0.0
    low_closed: bool = True
    high_closed: bool = True
    text: str = ""  # canonical source form, for reports


@dataclass
class ChannelUse:
    """A `consistent` or `lock` statement: channel slot = `channel + index of key class`."""

    channel: int  # first slot of the channel
    capture: int
    key: int = -1  # capture slot of the key, or -1
    key_classes: list[int] = field(default_factory=list)
    text: str = ""
    # `within factor F` (a whole number ≥ 2; 0: the exact `consistent`/`lock`): the channel
    # keeps the smallest value at `channel + index` and the largest `max(1, len(key_classes))`
    # slots further (docs/semantics.md §4)
    factor: int = 0


@dataclass
class Channel:
    name: str  # lock name, "RULE.cap" or "RULE.cap[CLASS]"
    kind: str  # number | class


@dataclass
class Rule:
    name: str
    description: str
    heat: float
    freq: float
    source_order: int
    gate: int  # anchor group id, or -1
    elements: list[Element]
    captures: list[Capture]
    requirements: list[Requirement]
    channels: list[ChannelUse]
    # observe-only: the rule runs and reports like any other, but a confidence policy gives
    # it no weight (audit reports, docs/report.md), and its rejections leave the state's
    # `rejections` counter alone (the rule record's `observe`): the engines never act on it
    observe: bool = False


@dataclass
class AnchorGroup:
    name: str
    domain: str
    n_terms: int


@dataclass
class AnchorTable:
    """Open addressing, linear probing; slot = key & (size - 1); key 0 marks an empty slot.

    `filter` is a prefilter, never semantics: a Bloom filter over every term's normalised
    text, hashed with FNV-1a-64 over its bytes in *reverse* order (so a backend extends the
    hash as it walks a run backwards); a term sets bits `h % filter_bits` and
    `(h >> 32) % filter_bits`. A run whose bits are not both set cannot be a term, so a
    backend may skip its sha256. No false negatives by construction.
    """

    size: int
    keys: list[int]  # u64
    groups: list[int]
    max_lexemes: int  # longest term, in lexemes (0 = no anchors)
    filter_bits: int = 0  # a power of two (0 = no anchors)
    filter: list[int] = field(default_factory=list)  # u64 words
    # Filters over the pieces a run matching a term can be made of, whatever literals the
    # stream's lexing produced: every maximal ASCII-letter run and every non-ASCII character
    # of every normalised term (words and other-tokens; literals carry FLAG_ANCHOR_MEMBER /
    # FLAG_ANCHOR_END instead), hashed FNV-1a-64 forward. A word or character that fails
    # `member_filter` is in no term — no run through it can be one, so a kernel may treat
    # it as a break; one that fails `end_filter` ends no term.
    end_filter: list[int] = field(default_factory=list)
    member_filter: list[int] = field(default_factory=list)
    # The same pieces as text, sorted (IR version 2): a kernel that skips plain words
    # without hashing each one byte by byte builds its own prefilter from them.
    members: list[str] = field(default_factory=list)


@dataclass
class Expect:
    text: str
    outcome: str  # passes | rejects
    rules: list[str]
    line: int
    path: str = ""  # the file the example is written in


@dataclass
class Program:
    name: str
    title: str
    source: str  # file the program was compiled from
    chinese_numbers: bool
    lexer: Lexer
    classes: list[LexClass]
    literals: list[Literal]
    rules: list[Rule]  # in heat × freq order, highest first
    channels: list[Channel]
    anchor_groups: list[AnchorGroup]
    anchors: AnchorTable
    code_flags: list[int]  # per lexeme code: FLAG_TRIGGER | FLAG_BARRIER
    window: int  # snapshot every N tokens; 0 = off
    expects: list[Expect] = field(default_factory=list)
    code_kinds: list[int] = field(default_factory=list)  # per lexeme code: its KIND_* bit, or 0
    # the confidence policy's cut-offs, [pass, confirm] (`policy pass P confirm C`); [] for the
    # runtime's default. Audit reports read it (through the manifest); no backend does
    policy: list[float] = field(default_factory=list)
    ir_version: int = IR_VERSION

    def code_name(self, code: int) -> str:
        if code >= LEX_LITERAL0:
            lit = self.literals[code - LEX_LITERAL0]
            return json.dumps(lit.text, ensure_ascii=False)
        return LEXEME_NAMES.get(code, f"token{code}")

    def rule_index(self, name: str) -> int:
        for i, r in enumerate(self.rules):
            if r.name == name:
                return i
        raise KeyError(name)

    def band_slots(self) -> frozenset[int]:
        """The channel slots of magnitude bands (`consistent v within factor F`): a band keeps
        its smallest values, then its largest, `max(1, len(key_classes))` slots each. A band
        states a magnitude, not a term, so the conflicts layer compares no value on them."""
        return frozenset(
            slot
            for r in self.rules
            for use in r.channels
            if use.factor
            for slot in range(use.channel, use.channel + 2 * max(1, len(use.key_classes)))
        )


# --- fixed-size state ------------------------------------------------------------------


@dataclass
class StateField:
    name: str
    offset: int
    size: int


@dataclass
class StateLayout:
    fields: list[StateField]
    size: int

    def __post_init__(self) -> None:
        self._by_name = {f.name: f for f in self.fields}

    def field(self, name: str) -> StateField:
        return self._by_name[name]


def state_layout(p: Program) -> StateLayout:
    """Byte layout of one sequence's state (little-endian, 8-byte aligned records).

    Every backend stores a sequence in exactly this many bytes; the reference interpreter
    serialises to it (`heatc.semantics.state`) and the tests restore from it mid-stream.
    Computed once per Program (a compiled Program is not changed afterwards).
    """
    cached = p.__dict__.get("_state_layout")
    if cached is None:
        cached = p.__dict__["_state_layout"] = _compute_layout(p)
    return cached


def _compute_layout(p: Program) -> StateLayout:
    fields: list[StateField] = []
    offset = 0

    def add(name: str, size: int, align: int = 1) -> None:
        nonlocal offset
        offset = (offset + align - 1) // align * align
        fields.append(StateField(name, offset, size))
        offset += size

    def add_record(prefix: str, record: abi.Record, tail: int | None = None) -> None:
        """One of the ABI's records (8-aligned), its fields named `prefix + field`, then, if
        `tail` is given, that many bytes of what follows it, named `prefix + record.tail`."""
        nonlocal offset
        offset = (offset + 7) // 8 * 8
        start = offset
        for name, code in record.fields:
            if not name.startswith("_"):
                fields.append(StateField(prefix + name, start + record.offset(name), struct.calcsize("<" + code)))
        offset = start + record.size
        if tail is not None:
            add(prefix + record.tail, tail)

    # Lexer and counters: the ABI's fixed head (pos: absolute offset of the next byte;
    # tok_start: offset of buf[0] in the stream; last_end: end of the previous lexeme;
    # flags: bit 0 finished; pending_events: events since the last snapshot; n_active: rules
    # with a live thread, the number of bits set in active_rules), then the lexer's buffer
    add_record("", abi.STATE_HEAD, p.lexer.max_lexeme)
    # One bit per rule with a live thread: lets a kernel visit only the rules that can act.
    add("active_rules", 8 * ((len(p.rules) + 63) // 64), 8)
    # The last lexeme that may begin a late-starting rule (`starts_late`), for kernels that
    # start those at their second lexeme: lexeme index + 1 (0: none), span start, token
    # code, length and bytes. The reference interpreter starts every rule at its first
    # lexeme and writes zeros here.
    if any(starts_late(r) for r in p.rules):
        add("look_mark", 8, 8)
        add("look_start", 8, 8)
        add("look_code", 4, 4)
        add("look_len", 4, 4)
        add("look_buf", p.lexer.max_lexeme, 16)
    # Anchors: a ring of the last A anchor-text lexemes of the current run
    a = p.anchors.max_lexemes
    if a:
        add("anchor_count", 4, 4)
        add("anchor_head", 4, 4)  # ring index of the oldest entry
        for i in range(a):
            add_record(f"anchor[{i}].", abi.ANCHOR_ENTRY, p.lexer.max_lexeme)
    if p.anchor_groups:
        add("anchor_active", (len(p.anchor_groups) + 7) // 8, 8)
    # Channels: set flag, value, span of the match that set it
    for c in range(len(p.channels)):
        add_record(f"channel[{c}].", abi.CHANNEL_STATE)
    # Rules: verdict bit, match count, one thread slot per element after the first (each
    # THREAD.size + 8 x captures bytes)
    for r, rule in enumerate(p.rules):
        add_record(f"rule[{r}].", abi.RULE_STATE)
        for s in range(1, len(rule.elements)):
            add_record(f"rule[{r}].slot[{s}].", abi.THREAD, 8 * len(rule.captures))
    size = (offset + 7) // 8 * 8
    return StateLayout(fields, size)


# --- serialisation ---------------------------------------------------------------------


def to_plain(obj):
    """A Program (or any IR part) as plain dicts and lists. Unlike dataclasses.asdict it does
    not deep-copy every leaf, which matters for programs with thousands of rules."""
    if is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list):
        if obj and isinstance(obj[0], (int, float, str)):
            return list(obj)
        return [to_plain(x) for x in obj]
    return obj


def to_json(p: Program, indent: int | None = None) -> str:
    return json.dumps(to_plain(p), ensure_ascii=False, indent=indent, sort_keys=False)


class IRVersionError(ValueError):
    pass


def from_json(text: str) -> Program:
    d = json.loads(text)
    version = d.get("ir_version")
    if version != IR_VERSION:
        raise IRVersionError(
            f"IR version {version} is not supported (this heatc reads version {IR_VERSION}): "
            "compile the rules again with this heatc"
        )
    return Program(
        name=d["name"],
        title=d["title"],
        source=d["source"],
        chinese_numbers=d["chinese_numbers"],
        lexer=Lexer(**d["lexer"]),
        classes=[LexClass(**c) for c in d["classes"]],
        literals=[Literal(**x) for x in d["literals"]],
        rules=[_rule(r) for r in d["rules"]],
        channels=[Channel(**c) for c in d["channels"]],
        anchor_groups=[AnchorGroup(**g) for g in d["anchor_groups"]],
        anchors=AnchorTable(**d["anchors"]),
        code_flags=d["code_flags"],
        window=d["window"],
        expects=[Expect(**e) for e in d["expects"]],
        code_kinds=d["code_kinds"],
        policy=d["policy"],
        ir_version=version,
    )


def _rule(d: dict) -> Rule:
    return Rule(
        name=d["name"],
        description=d["description"],
        heat=d["heat"],
        freq=d["freq"],
        source_order=d["source_order"],
        gate=d["gate"],
        elements=[Element(**e) for e in d["elements"]],
        captures=[Capture(**c) for c in d["captures"]],
        requirements=[
            Requirement(**{**q, "left": Operand(**q["left"]), "right": Operand(**q["right"])})
            for q in d["requirements"]
        ],
        channels=[ChannelUse(**c) for c in d["channels"]],
        observe=d["observe"],
    )
