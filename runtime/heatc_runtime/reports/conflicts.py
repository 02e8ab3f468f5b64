"""Conflicts across retrieved chunks: every pair of mentions whose values disagree under a
consistency rule (`consistent` or `lock`; docs/conflicts.md).

The chunks are read as one stream, in retrieval order, with a boundary between two chunks
that no match can cross: `BOUNDARY_LEXEMES` U+001E characters, each an `other` lexeme that
no pattern element accepts, one more than the longest gap a pattern may skip
(docs/language.md) — so every partial match dies at the boundary, on every backend, by the
rules of docs/semantics.md alone. Consistency channels, and anchors, carry over.

A conflict is read off the stream's match events, on top of what every backend gives alike:
each match that passed its requirements states, per `consistent`/`lock` statement of its
rule (the manifest records them), a value for a channel. One keyword names many terms ("cure
within 10 days" for a payment default, "within 60 days" for other breaches), so each channel
is split by **term** (terms.py: the words of the clause around the number): a mention joins
the term of the earlier mention of its channel whose words it shares most (found through an
index of the words, `terms.TermIndex`: O(n log n) in the mentions, each chunk read about once,
whatever the text; `ConflictReport.capped` counts the mentions past its cap), and the term's
value is its first mention's — in retrieval order, the most relevant chunk first. Every
later mention of a term that disagrees with that value is one conflict, both sides mapped
back to their chunk — same-chunk conflicts included —, unless the term's mentions carry
three values or more (`MAX_TERM_VALUES`): such a term is a schedule, not one term restated,
and the report lists it apart (`TermSchedule`). Text with no words to tell terms apart
keeps one term per channel: the stream's REJECTED-by-channel matches (semantics §4). Where
two rules read one number, two numbers disagree once (the first conflict found). A
mention whose number is written out and restated in digits that disagree ("thirty (60)
days", restated.py) is a conflict of its own, the words against the digits. So a
conflict list is a function of the chunks and the stream's events: the reference
interpreter's, the WASM kernel's and the native core's are identical.

**Conflict score**, in [0, 1]: `heat · (1 + d) / 2`, with `d` the relative difference of
the two values, |a − b| / max(|a|, |b|) (numbers carry no sign), and d = 1 for two classes
(two governing laws). The rule's heat says how much the term matters; a far-apart pair
(30 vs 90 days) is less likely a rounding or formatting artefact than 4.20 vs 4.21.

Public surface: `BOUNDARY`, `BOUNDARY_LEXEMES`, `MAX_TERM_VALUES`, `NoConsistencyRulesError`, `Mention`,
`ChunkConflict`, `TermSchedule`, `ConflictReport`, `chunk_bytes(chunks)`, `join_chunks(chunks)`,
`find_conflicts(module, chunks, events)`, `scan_chunks(checker, chunks)`.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .audit import ModuleInfo
from .report import Event
from .restated import restatements
from .terms import TermIndex, term_words

#: The most values the mentions of one term may carry and still be one term restated.
MAX_TERM_VALUES = 2
#: One more than the longest gap a pattern may skip (the language's `..64`).
BOUNDARY_LEXEMES = 65
BOUNDARY = b"\x1e" * BOUNDARY_LEXEMES
CONFLICTS_FORMAT = "heatc-conflicts"
CONFLICTS_VERSION = 2  # 2: terms with three values or more are schedules, not conflicts


class NoConsistencyRulesError(ValueError):
    """The rule set has no `consistent` or `lock` statement: it cannot find conflicts."""


@dataclass(frozen=True)
class Mention:
    """One side of a conflict: where the value was written, and the value."""

    chunk: int
    start: int  # byte span in the chunk's UTF-8
    end: int
    char_start: int  # character span in the chunk
    char_end: int
    text: str
    value: float | str | None  # None only while a mention is being built

    def to_json(self) -> dict:
        return {
            "chunk": self.chunk, "bytes": [self.start, self.end], "chars": [self.char_start, self.char_end],
            "text": self.text, "value": self.value,
        }  # fmt: skip


@dataclass(frozen=True)
class ChunkConflict:
    rule: str  # the rule whose later match disagreed
    channel: str
    earlier: Mention  # the mention that set the channel
    later: Mention
    captures: tuple[tuple[str, float | str], ...]  # the later match's
    score: float

    @property
    def same_chunk(self) -> bool:
        return self.earlier.chunk == self.later.chunk

    def to_json(self) -> dict:
        return {
            "rule": self.rule, "channel": self.channel, "score": self.score, "earlier": self.earlier.to_json(),
            "later": {**self.later.to_json(), "captures": dict(self.captures)},
        }  # fmt: skip


@dataclass(frozen=True)
class TermSchedule:
    """A term whose mentions carry three values or more: a schedule ("cure such failure within
    ten … thirty … sixty … ninety days"), reported apart, not as conflicts."""

    channel: str
    mentions: tuple[Mention, ...]  # in stream order

    @property
    def values(self) -> tuple[float | str, ...]:
        """Its distinct values, in the order first stated."""
        return tuple(dict.fromkeys(m.value for m in self.mentions))

    def to_json(self) -> dict:
        return {"channel": self.channel, "values": list(self.values), "mentions": [m.to_json() for m in self.mentions]}


@dataclass(frozen=True)
class ConflictReport:
    module: ModuleInfo
    chunks: int
    conflicts: tuple[ChunkConflict, ...]  # in stream order of the later mention
    schedules: tuple[TermSchedule, ...] = ()  # terms with too many values to be one term restated
    # mentions whose term was looked for among only the first `terms.MAX_WORD_SETS` word sets
    # of one of their words (docs/conflicts.md): 0 unless the text repeats a word in hundreds
    # of different clauses of one channel; where it is not 0, a conflict may be missing
    capped: int = 0

    def __len__(self) -> int:
        return len(self.conflicts)

    def __iter__(self):
        return iter(self.conflicts)

    def to_json(self) -> dict:
        return {
            "format": CONFLICTS_FORMAT,
            "version": CONFLICTS_VERSION,
            "module": self.module.to_json(),
            "chunks": self.chunks,
            "channels": [name for name, _ in self.module.channels],
            "conflicts": [c.to_json() for c in self.conflicts],
            "schedules": [t.to_json() for t in self.schedules],
            "capped": self.capped,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)


def chunk_bytes(chunks: Sequence[str | bytes]) -> list[bytes]:
    """The chunks as UTF-8, or a TypeError/ValueError that says which chunk is not text."""
    if isinstance(chunks, str | bytes | bytearray | memoryview):
        raise TypeError("chunks must be a list of texts (each a str, or UTF-8 bytes), not one text")
    try:
        items = list(chunks)
    except TypeError:
        raise TypeError(f"chunks must be a list of texts, not {type(chunks).__name__}") from None
    if not items:
        raise ValueError("no chunks: give at least one text (the retrieved passages, in retrieval order)")
    out = []
    for i, chunk in enumerate(items):
        if isinstance(chunk, str):
            try:
                out.append(chunk.encode("utf-8"))
            except UnicodeEncodeError as e:
                raise ValueError(f"chunk {i} cannot be written as UTF-8: {e.reason} at character {e.start}") from None
        elif isinstance(chunk, bytes | bytearray | memoryview):
            data = bytes(chunk)
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"chunk {i} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} ({e.reason})"
                ) from None
            out.append(data)
        else:
            raise TypeError(f"chunk {i} is a {type(chunk).__name__}, not text (str or UTF-8 bytes)")
    return out


def join_chunks(chunks: list[bytes]) -> tuple[bytes, list[int]]:
    """The stream the rules read, and where each chunk starts in it."""
    starts, at = [], 0
    for chunk in chunks:
        starts.append(at)
        at += len(chunk) + len(BOUNDARY)
    return BOUNDARY.join(chunks), starts


def _require_channels(module: ModuleInfo) -> None:
    # a band (`within factor`, docs/language.md) says a value is out of scale with the others,
    # not that one term was restated
    if not [name for name, _ in module.channels if name not in module.bands]:
        raise NoConsistencyRulesError(
            f"the rule set {module.name!r} has no consistency rules (no `consistent` or `lock` statement "
            "other than magnitude bands), "
            "so it cannot find conflicts between chunks; add one (docs/language.md) or use rules that have "
            "them (examples/legal.heat, examples/finance.heat)"
        )
    if not module.consistency:
        raise NoConsistencyRulesError(
            f"the module {module.name!r} was built by a heatc that does not record its consistency statements "
            "in the manifest; rebuild it (heatc build) to find conflicts between chunks"
        )


def _mentions(module: ModuleInfo, e: Event) -> list[tuple[str, float | str]]:
    """The (channel, value) pairs a match event states: one per channel its rule's
    `consistent`/`lock` statements name. A match whose requirements failed states nothing.
    Where two statements of one rule name the same channel (`lock c = a` and `lock c = b`),
    the first states it, as the first sets it in the stream (semantics §4): a match is no
    conflict with itself."""
    if e.kind != "match" or e.failed is not None:
        return []
    captures = dict(e.captures)
    out: dict[str, float | str] = {}
    for capture, key, channels in module.consistency.get(e.name, ()):
        channel = channels.get("" if key is None else str(captures.get(key)))
        if channel is not None and capture in captures:
            out.setdefault(channel, captures[capture])
    return list(out.items())


def _number_at(m: Mention) -> tuple[int, int]:
    """Where a mention's number is: (chunk, character of its first digit, or of the mention)."""
    digit = _DIGIT.search(m.text)
    return m.chunk, m.char_start + (digit.start() if digit else 0)


_DIGIT = re.compile(r"\d")


def _score(heat: float, a: float | str, b: float | str | None) -> float:
    if isinstance(a, float) and isinstance(b, float):
        top = max(abs(a), abs(b))
        d = abs(a - b) / top if top else 0.0
    else:
        d = 1.0
    return heat * (1.0 + d) / 2.0


class _Chars:
    """Byte offset → character offset in one chunk, counted from the last offset asked for:
    mentions come in stream order, so a chunk is read about once however many it holds
    (counting from its start for each would make a large chunk quadratic)."""

    _CONTINUATION = bytes(range(0x80, 0xC0))

    def __init__(self, text: bytes):
        self.text, self.byte, self.char = text, 0, 0

    def __call__(self, offset: int) -> int:
        a, b = sorted((self.byte, offset))
        n = len(self.text[a:b].translate(None, self._CONTINUATION))
        self.char += n if offset >= self.byte else -n
        self.byte = offset
        return self.char


@dataclass
class _Term:
    """One term of a channel: its first mention (which sets its value), every mention, the
    values they carry."""

    first: Mention
    mentions: list[Mention]
    values: set[float | str]

    @property
    def schedule(self) -> bool:
        return len(self.values) > MAX_TERM_VALUES


def find_conflicts(module: ModuleInfo, chunks: list[bytes], events: Sequence[Event]) -> ConflictReport:
    """The conflicts among the events of the joined stream (`join_chunks(chunks)`)."""
    _require_channels(module)
    _, starts = join_chunks(chunks)
    chars: dict[int, _Chars] = {}

    def locate(start: int, end: int) -> tuple[int, int, int]:
        """(chunk, start, end in it) of a stream span."""
        i = bisect.bisect_right(starts, start) - 1
        s, e = start - starts[i], end - starts[i]
        if e > len(chunks[i]):
            raise RuntimeError(
                f"a match spans the boundary after chunk {i}: this rule set reads U+001E as part of a "
                "literal, so it cannot keep chunks apart"
            )
        return i, s, e

    def mention(i: int, s: int, e: int, value: float | str | None = None) -> Mention:
        at = chars.get(i) or chars.setdefault(i, _Chars(chunks[i]))
        return Mention(i, s, e, at(s), at(e), chunks[i][s:e].decode("utf-8", errors="replace"), value)

    # per channel, its terms so far, and the index that finds the term of a mention's words
    indexes: dict[str, TermIndex] = {}
    terms: dict[str, list[_Term]] = {}
    every: list[tuple[str, _Term]] = []  # every term, in the order they start
    found: list[tuple[ChunkConflict, _Term | None]] = []  # each with its term (None: a restatement)
    misstated: dict[tuple[int, int], int] = {}  # (chunk, digits start) of a restatement → its index in found
    for e in events:
        if e.kind != "match":
            continue
        stated = _mentions(module, e)  # (none for a match whose requirements failed)
        i, s, end = locate(e.start, e.end)
        for c in _misstated(e, stated, i, s, end, chunks[i], mention, module.heat.get(e.name, 0.5)):
            at = misstated.get((c.later.chunk, c.later.start))
            if at is None:
                misstated[c.later.chunk, c.later.start] = len(found)
                found.append((c, None))
            elif found[at][0].channel.endswith(".restated") and not c.channel.endswith(".restated"):
                found[at] = (c, None)  # reported once, under the term's channel where a match states one
        if not stated:
            continue
        later = mention(i, s, end)
        values = frozenset(w for _, v in stated if isinstance(v, str) for w in v.split("_"))
        words = term_words(chunks[later.chunk], later.start, later.end, values)
        for channel, value in stated:
            here = replace(later, value=value)
            index = indexes.get(channel) or indexes.setdefault(channel, TermIndex())
            known = terms.setdefault(channel, [])
            t = index.join(words)
            if t == len(known):  # a new term
                known.append(_Term(here, [here], {value}))
                every.append((channel, known[-1]))
                continue
            term = known[t]
            term.mentions.append(here)
            term.values.add(value)
            if term.first.value != value:
                found.append((ChunkConflict(
                    e.name, channel, term.first, here, tuple(e.captures),
                    _score(module.heat.get(e.name, 0.5), term.first.value, value),
                ), term))  # fmt: skip

    # A term is stated with one value, and a conflict is a restatement with another; where the
    # mentions of one term carry three values or more, its words name no one term (a schedule:
    # "cure such failure within ten … thirty … sixty … ninety days"), and a conflict there
    # would be a guess: the term is reported as a schedule instead. (A restatement in words and
    # digits stands on its own.)
    # Two rules may read one number ("Invoices are due 30 days after receipt": a payment term
    # named before its number and one named after it): two numbers disagree once.
    kept: list[ChunkConflict] = []
    said: set[tuple[tuple[int, int], tuple[int, int]]] = set()
    for c, term in found:
        if term is not None:
            pair = (_number_at(c.earlier), _number_at(c.later))
            if term.schedule or pair in said:
                continue
            said.add(pair)
        kept.append(c)
    schedules = tuple(TermSchedule(channel, tuple(t.mentions)) for channel, t in every if t.schedule)
    capped = sum(index.capped for index in indexes.values())
    return ConflictReport(module, len(chunks), tuple(kept), schedules, capped)


# bytes before a match where the words of its number may begin: a match starts at the last
# number word before the digits ("five" of "forty-five (45)"; contracts space and break lines
# widely: "FOURTEEN MILLION EIGHT HUNDRED … ($14,862,000)")
RESTATED_REACH = 240


def _misstated(
    e: Event, stated, i: int, start: int, end: int, chunk: bytes, mention, heat: float
) -> list[ChunkConflict]:
    """The conflict of a match with itself: a number it captured is restated from number
    words right before it ("thirty (60) days", restated.py), and the words name another
    number. The words are the earlier side, the digits the later. Any rule's match is read
    (a rule that matches "thirty (30) days" alone is how a rule set asks for it); the
    conflict's channel is the match's first numeric consistency channel, or `RULE.restated`.
    The match is chunk `i`'s bytes [start, end); `mention(i, start, end, value)` builds a side."""
    values = {float(v) for _, v in e.captures if isinstance(v, float)}
    if not values:
        return []
    channel = next((c for c, v in stated if isinstance(v, float)), f"{e.name}.restated")
    base = max(0, start - RESTATED_REACH)
    text = chunk[base : end + 24]  # (what may follow a match that ends at the digits: "%)", ") Million")
    for w0, w1, d0, d1, said, digits in restatements(text):
        if (
            not start <= base + d0 < end
            or (digits not in values and math.floor(digits) not in values)
            or said == digits
        ):
            continue  # digits outside the match, no value it captured (nor its whole: "1-1/2"), or the two agree
        if said < 100 and digits.is_integer() and 1900 <= digits <= 2099 and d1 - d0 == 4:
            continue  # "Year One (1998)": a period and its year, not a number restated
        if _opens(chunk, base + w0) and _tail_of(said, digits):
            continue  # the words open the chunk: "forty | five (45)" may have begun in the one before
        words, shown = mention(i, base + w0, base + w1, said), mention(i, base + d0, base + d1, digits)
        return [ChunkConflict(e.name, channel, words, shown, tuple(e.captures), _score(heat, said, digits))]
    return []


# a byte that cannot stand before number words that open a chunk (blanks, commas, hyphens, an "and")
_NOT_OPENING = re.compile(rb"[^ \t\r\n\x0b\x0c,and-]")


def _opens(chunk: bytes, at: int) -> bool:
    """Whether only blanks, commas, hyphens and an "and" stand before byte `at` of `chunk`. (The
    first byte that cannot is found without copying what stands before: most often the first.)"""
    if _NOT_OPENING.search(chunk, 0, at):
        return False
    return not chunk[:at].strip(b" \t\r\n,-").removesuffix(b"and").strip()


def _tail_of(said: float, digits: float) -> bool:
    """Whether words naming `said` may be the end of a longer number written as `digits`:
    "five" of "forty-five (45)", "thirty" of "one hundred thirty (130)" — not "thirty (90)"."""
    if not (float(said).is_integer() and float(digits).is_integer() and digits > said):
        return False
    place = 10
    while place <= said:
        place *= 10
    while place <= digits:
        if digits % place == said:
            return True
        place *= 10
    return False


def scan_chunks(checker, chunks: Sequence[str | bytes]) -> ConflictReport:
    """`Checker.conflicts(chunks)`: one scan of the joined stream."""
    module = checker.module_info
    _require_channels(module)
    data = chunk_bytes(chunks)
    stream, _ = join_chunks(data)
    # (the class's scan: with metrics attached, a conflict check counts as one, not as a report)
    return find_conflicts(module, data, type(checker).scan(checker, stream).events)
