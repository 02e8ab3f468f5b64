"""The skipper's tables: what lets the kernel pass over text that no rule can use without
running its lexer automaton, 32 bytes at a time (docs/abi.md, "The skipper").

While no rule has a live thread, a block of plain words, spaces, punctuation and numbers
changes nothing but the lexeme count: SIMD byte classes find the word and number runs,
Teddy-style fingerprints of each word's first bytes and an exact hash table of the rule
set's own words tell a plain word from a literal, and CJK runs go through a table of
their own. Weak starts and digit runs let it pass keywords and numbers that begin nothing.

Public surface: `skip_tables(program, flags) -> SkipTables | None`, `SkipTables`, the
table-layout constants the kernel template reads and `word_table_layout(log2)`,
`skip_word_key`, `skip_slot`, `cjk_slot` (digit runs: `heatc.wasm.digits`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from heatc import ir
from heatc.lang.lexicon import MONTH_ABBREVIATIONS, MONTH_FOLLOWERS, MONTH_NAMES
from heatc.wasm.digits import ASCII_WHITESPACE, digit_runs, years_pass_as_numbers
from heatc_runtime.abi import (  # (the tables' layout is the module ABI's: kernels read it)
    CJK_CONTINUATIONS,
    CJK_KEY_MUL,
    FLAG_LOOK,
    SKIP_CJK_FINGERPRINTS,
    SKIP_CJK_TABLE,
    SKIP_KEY_MUL,
    SKIP_NIBBLE_BITS,
    SKIP_PLAIN_QUIET,
    SKIP_WORD_FINGERPRINTS,
    SKIP_WORDS_PER_SLOT,
    WEAK_HORIZON_MAX,
    WORD_FINGERPRINT_BUCKETS,
)


def skip_word_key(word: bytes, next_byte: int = 0) -> int:
    """A word's key in a kernel's word-skipper table: its first 8 bytes lower-cased
    (little-endian u64, zero-padded), xor (length | next_byte << 8) << 40. `next_byte` is the
    byte after the word (any ASCII whitespace written as a space), or 0 for "whatever follows"."""
    key = int.from_bytes(word[:8].lower().ljust(8, b"\0"), "little")
    return key ^ ((len(word) | next_byte << 8) << 40)


def skip_slot(key: int, log2: int) -> int:
    return ((key * SKIP_KEY_MUL) & 0xFFFFFFFFFFFFFFFF) >> (64 - log2)


@dataclass(frozen=True)
class SkipTables:
    plain: bytes  # the `skip_plain` section
    words: bytes  # the `skip_words` section
    log2: int  # the word table has 2^log2 slots
    cjk_log2: int  # the CJK table's, 0 if there is none
    digits: tuple[tuple[int, ...], bool, bool, bool] | None  # `digits.digit_runs`
    weak: bool  # some word is a weak start (`_weak_starts`)


def skip_tables(p: ir.Program, flags: list[int]) -> SkipTables | None:
    """Tables for a kernel's idle-stretch skipper (docs/abi.md, "The skipper"): while no rule
    has a live thread, a kernel may count plain words, plain one-byte ASCII tokens and plain
    CJK characters 32 bytes at a time instead of running the lexer automaton over them.
    Returns the tables, or None when the rule set leaves the skipper nothing safe to do.

    A token *matters* to an idle stream when its code (in the kernel's `flags`) starts a rule,
    may begin a late-starting one, triggers a snapshot or is an anchor member; a trigger does
    not matter to a quiet stream (no snapshots but the last).

    - `plain_bytes`: two tables of 16 bytes indexed by a byte's low nibble, each a bit set of
      the high nibbles 0–7 for which that ASCII byte is *plain* — the automaton reads it as a
      one-byte token that nothing extends (no literal starts with it unless it is the whole
      literal) and that does not matter — first for any stream, then for a quiet one; then 16
      bytes 1, 2, 4 … 128, 0 … 0 (a high nibble's bit); then, at SKIP_WORD_FINGERPRINTS, 64
      bytes of word fingerprints (`_teddy`, first two bytes, 8 buckets from
      `_fingerprint_buckets`); then, if cjk_table_log2 is not 0, at SKIP_CJK_FINGERPRINTS the
      192 bytes of CJK character fingerprints and at SKIP_CJK_TABLE the table of `_cjk_tables`.
    - `word_table`: a bit filter of 2^(table_log2 + 5) bits (bit `skip_slot(skip_word_key(word),
      table_log2 + 5)` set for the word of every key, whatever its next byte), then 2^table_log2 u64 slots (open addressing from `skip_slot`,
      linear probing, 0 = empty) holding `skip_word_key`s: for every letter-initial literal
      that is more than its leading ASCII-letter run (`mg/dL`, `blood sugar`: one lexeme where
      the skipper would count several), that run with the byte after it; for every one-word
      literal that matters, and every ASCII word of an anchor term, the word with next byte 0.
      A word of up to 31 letters whose two keys (with the byte after it, and with 0) are both
      absent is one lexeme that does not matter: a plain word, or a literal that only spells
      one. Then, per slot, a u64: for a key with next byte whitespace (the first word of
      `shall not exceed`), the first two bytes (| 0x20) of the words that may come next in
      its literals, as up to four u16 (`no`); 0 when it cannot tell. A head whose next word
      starts with none of them is a plain word. Then, per slot, a byte: for the key of a
      *weak start* (`_weak_starts`), its horizon; else 0.
    """
    lx = p.lexer
    matters = ir.FLAG_STARTS | ir.FLAG_TRIGGER | ir.FLAG_ANCHOR_MEMBER | FLAG_LOOK
    if flags[ir.LEX_WORD] & matters or lx.max_lexeme < 32:  # a word in a 32-byte block is one token
        return None

    def step(state: int, byte: int) -> int:
        return lx.next[state * lx.n_classes + lx.byte_class[byte]]

    # whitespace runs must be space tokens that nothing else continues
    seen, todo = set(), [step(1, b) for b in ASCII_WHITESPACE]
    while todo:
        s = todo.pop()
        if s in seen:
            continue
        if s == 0 or lx.accept[s] != ir.LEX_SPACE:
            return None
        seen.add(s)
        for b in range(256):
            t = step(s, b)
            if b in ASCII_WHITESPACE:
                todo.append(t)
            elif t:
                return None
    plain = [bytearray(16), bytearray(16)]
    for b in range(128):
        if chr(b).isalnum() or b in ASCII_WHITESPACE:
            continue
        s = step(1, b)
        if not s or lx.boundary[s] or any(step(s, c) for c in range(256)):
            continue
        for table, mask in zip(plain, (matters, matters & ~ir.FLAG_TRIGGER), strict=True):
            if not flags[lx.accept[s]] & mask:
                table[b & 15] |= 1 << (b >> 4)
    plain_ascii = [b for b in range(128) if any(t[b & 15] >> (b >> 4) & 1 for t in plain)]  # in either stream
    weak = _weak_starts(p, flags, {lx.accept[step(1, b)] for b in plain_ascii})
    # per "any next byte" key, the longest horizon of its literals, 0 if any is no weak start
    horizons: dict[int, int] = {}
    keys = set()
    filter_words: set[bytes] = set()  # the words the keys are for, whatever follows them: the filter's
    patterns: set[bytes] = set()  # what may begin where a key is: for the fingerprints
    # what follows a multi-word literal's first word: the first two bytes of its next word
    # (| 0x20 each, as the kernel folds them), None for "anything" (a one-byte next word)
    goes_on: dict[int, set[int] | None] = {}
    for i, lit in enumerate(p.literals):
        text = lit.text.encode("utf-8")
        run = re.match(rb"[A-Za-z]+", text)
        if run and run.end() < len(text):
            nxt = text[run.end()]
            key = skip_word_key(run.group(), 0x20 if nxt in ASCII_WHITESPACE else nxt)
            keys.add(key)
            filter_words.add(run.group().lower())
            patterns.add(text)
            if nxt in ASCII_WHITESPACE:
                rest = text[run.end() :].lstrip(ASCII_WHITESPACE)
                seen = goes_on.setdefault(key, set())
                if len(rest) < 2 or seen is None:
                    goes_on[key] = None
                else:
                    seen.add((rest[0] | 0x20) | (rest[1] | 0x20) << 8)
        elif run and flags[ir.LEX_LITERAL0 + i] & matters:
            key = skip_word_key(run.group())
            keys.add(key)
            filter_words.add(run.group().lower())
            patterns.add(text)
            h = weak.get(ir.LEX_LITERAL0 + i, 0)
            seen_h = horizons.get(key, h)  # (two literals may share a key)
            horizons[key] = max(h, seen_h) if h and seen_h else 0
    # a month name may begin a date (`November 2003`, `Nov. 5`): a word the automaton may
    # continue past a space, a dot or a comma, which the skipper cannot tell from here
    for month in MONTH_NAMES + MONTH_ABBREVIATIONS:
        word = month.lower().encode()
        for nxt in MONTH_FOLLOWERS:
            key = skip_word_key(word, nxt)
            keys.add(key)
            goes_on[key] = None
        filter_words.add(word)
        patterns.add(month.encode() + b" ")
    for m in p.anchors.members:
        if re.fullmatch(r"[a-z]+", m):
            keys.add(skip_word_key(m.encode()))
            horizons[skip_word_key(m.encode())] = 0  # an anchor word is never weak
            filter_words.add(m.encode())
            patterns.add(m.encode())
    table, log2 = _open_table({key: key for key in keys}, skip_slot)
    # beside each slot: a multi-word head's next-word prefixes, four u16 (0 = none), or 0 when
    # the next word cannot tell (more than four prefixes, or a one-byte word)
    nexts = [0] * len(table)
    for slot, key in enumerate(table):
        prefixes = goes_on.get(key)
        if prefixes is not None and len(prefixes) <= 4:
            nexts[slot] = sum(prefix << 16 * j for j, prefix in enumerate(sorted(prefixes)))
    # a one-bit-per-word filter in front of the table (bit = the top bits of the hash of the
    # word's key with next byte 0), so that nearly every plain word is cleared by one byte
    # load, without computing its key with the byte after it or probing
    bits = bytearray(1 << (log2 + 5 - 3))
    for word in filter_words:
        bit = skip_slot(skip_word_key(word), log2 + 5)
        bits[bit >> 3] |= 1 << (bit & 7)
    plain_bytes = bytes(plain[0] + plain[1]) + bytes([1 << i for i in range(8)] + [0] * 8)
    assert (SKIP_PLAIN_QUIET, SKIP_NIBBLE_BITS, SKIP_WORD_FINGERPRINTS) == (16, 32, len(plain_bytes))
    bucket = _fingerprint_buckets(patterns)
    plain_bytes += _teddy(patterns, lambda t: bucket[t[0] | 0x20], offsets=2, buckets=WORD_FINGERPRINT_BUCKETS)
    cjk = _cjk_tables(p, flags, step, matters)
    if cjk:
        assert len(plain_bytes) == SKIP_CJK_FINGERPRINTS and len(plain_bytes + cjk[0]) == SKIP_CJK_TABLE
        plain_bytes += cjk[0] + cjk[1]
    digits = digit_runs(lx, flags, plain_ascii, step, years_pass_as_numbers(p, flags))
    weak_bytes = bytes(horizons.get(key, 0) if key else 0 for key in table)
    words = bytes(bits) + struct.pack(f"<{len(table)}Q", *table) + struct.pack(f"<{len(nexts)}Q", *nexts) + weak_bytes
    layout = word_table_layout(log2)
    assert len(bits) == layout["slots"] and len(words) == layout["size"], "word_table_layout is stale"
    return SkipTables(plain_bytes, words, log2, cjk[2] if cjk else 0, digits, any(weak_bytes))


# where the skipper's tables lie in its `skip_plain` section: heatc_runtime.abi (SKIP_*)


def word_table_layout(log2: int) -> dict[str, int]:
    """Where the parts of the `skip_words` section lie (from its start) for a word table of
    2^log2 slots: the filter bits, the u64 keys, the u64 next-word prefixes, the horizons."""
    return {part: (1 << log2) * per_slot for part, per_slot in SKIP_WORDS_PER_SLOT.items()}


# (WEAK_HORIZON_MAX: the longest gap a weak start's horizon may cover; horizons are a byte)


def _weak_starts(p: ir.Program, flags: list[int], plain_codes: set[int]) -> dict[int, int]:
    """The *weak starts* of a rule set: one-word literals (ASCII letters only) that matter to
    an idle stream only because they start rules, and whose threads nothing a skipper counts
    can advance — so a skipper may count one as a word and go on, and come back to it only if
    it stops before the thread would have died. Maps each literal's lexeme code to its
    *horizon*: the lexemes after it that kill every thread it starts when none of them is in
    the next element's accept list (the largest second-element gap + 1).

    A literal qualifies when it only starts rules (no trigger, anchor or look-behind flag),
    every rule it starts begins early and has a second element, and no second element of
    those rules accepts a code the skipper may count while it looks for such a thread's
    death: words, letter-only literals (weak starts included), plain one-byte tokens. (It
    stops before digits and non-ASCII bytes then.) None in a rule set with anchors, whose
    state a skipper does not rewind.

    Late-starting rules (`ir.starts_late`) leave the others weak: a literal that starts one
    (its second element's) is no weak start, one that may be a look-behind is flagged
    FLAG_LOOK, and going back to a weak start needs no look-behind — the skipper counts no
    number after a weak start, so the look-behind it left is that of the lexemes before it,
    and the weak start itself, the next lexeme the automaton reads, starts no late rule."""
    if p.anchors.max_lexemes:
        return {}
    letter_codes = {ir.LEX_LITERAL0 + i for i, lit in enumerate(p.literals) if re.fullmatch(r"[A-Za-z]+", lit.text)}
    countable = {ir.LEX_WORD} | plain_codes | letter_codes
    started: dict[int, list[ir.Rule]] = {}
    starts_late: set[int] = set()
    for rule in p.rules:
        if ir.starts_late(rule):
            starts_late.update(rule.elements[1].accepts)
            continue
        for code in rule.elements[0].accepts:
            started.setdefault(code, []).append(rule)
    weak = {}
    for code in sorted(letter_codes - starts_late):
        if flags[code] & (ir.FLAG_TRIGGER | ir.FLAG_ANCHOR_MEMBER | FLAG_LOOK):
            continue
        rules = started.get(code, [])
        if not rules or any(len(rule.elements) < 2 for rule in rules):
            continue
        if any(countable.intersection(rule.elements[1].accepts) for rule in rules):
            continue
        horizon = max(rule.elements[1].gap + 1 for rule in rules)
        if horizon <= WEAK_HORIZON_MAX:
            weak[code] = horizon
    return weak


def _open_table(entries: dict[int, int], slot_of) -> tuple[list[int], int]:
    """An open-addressing table for a kernel: at least 8 slots per entry (so that a miss is
    nearly always one probe), entry `value` at `slot_of(key, log2)` or the next free slot
    after it (linear probing; 0 = empty). Returns (slots, log2)."""
    log2 = 4
    while (1 << log2) < 8 * len(entries):
        log2 += 1
    table = [0] * (1 << log2)
    for key, value in sorted(entries.items()):
        slot = slot_of(key, log2)
        while table[slot]:
            slot = (slot + 1) & ((1 << log2) - 1)
        table[slot] = value
    return table, log2


CJK_LEADS = [*range(0xE1, 0xED), 0xEE, 0xEF]  # three-byte leads with no invalid second bytes
# at most CJK_CONTINUATIONS characters may extend a plain-unless character (a Chinese
# numeral: the 32 other numerals, multipliers and 点); a kernel compares them four at a time


def cjk_slot(key: int, log2: int) -> int:
    return ((key * CJK_KEY_MUL) & 0xFFFFFFFF) >> (32 - log2)


def _cjk_tables(p: ir.Program, flags: list[int], step, matters: int) -> tuple[bytes, bytes, int] | None:
    """The skipper's view of three-byte characters with a lead byte E1–EC, EE or EF (CJK,
    CJK punctuation, full-width forms). A *plain* one is read by the automaton as a
    one-character lexeme that nothing extends and that does not matter, and is in no anchor
    term; a skipper may count it as one lexeme. Returns (fingerprints, table, table_log2):
    Teddy fingerprints (as `_teddy`'s, bucket = the second byte's low nibble) of every
    character that is not plain, and an exact table of them: 2^table_log2 u32 slots (open
    addressing from `cjk_slot` of the low 24 bits, linear probing, 0 = empty) holding the
    three bytes (little-endian) | kind << 24, kind 1 = never plain, 2 = plain only in a quiet
    stream (a trigger that starts nothing), kind k >= 3 = plain unless the next character is
    one of those in continuation list k - 3 (the first characters of longer tokens it begins:
    `人` is plain unless `民` follows, for a literal `人民币元`); then those lists,
    CJK_CONTINUATIONS u32 each (three bytes, 0 = none). None when other-tokens matter."""
    lx = p.lexer
    if flags[ir.LEX_OTHER] & matters:
        return None

    def ends_token(s: int, mask: int) -> bool:
        """State `s` accepts a lexeme whose flags miss `mask` and that needs no boundary byte."""
        return bool(
            s
            and lx.accept[s] not in (ir.LEX_NONE, ir.LEX_SPACE)
            and not lx.boundary[s]
            and not flags[lx.accept[s]] & mask
        )

    ends: dict[tuple[int, int], bool] = {}

    def plain_end(s: int, mask: int) -> bool:
        if (s, mask) not in ends:
            ends[s, mask] = ends_token(s, mask) and not any(step(s, c) for c in range(256))
        return ends[s, mask]

    # walk the automaton once per class of continuation byte, not per byte
    classes: dict[int, list[int]] = {}
    for b in range(0x80, 0xC0):
        classes.setdefault(lx.byte_class[b], []).append(b)

    extended: dict[int, frozenset[bytes] | None] = {}

    def extensions(s: int) -> frozenset[bytes] | None:
        """The characters that may extend the lexeme that state `s` ends (one that does not
        matter): at most CJK_CONTINUATIONS three-byte ones; None if there are more, if a byte
        of another kind may extend it, or if `s` ends no such lexeme."""
        if s not in extended:
            extended[s] = _extensions(s) if ends_token(s, matters) else None
        return extended[s]

    def _extensions(s: int) -> frozenset[bytes] | None:
        out: set[bytes] = set()
        for c in range(256):
            t = step(s, c)
            if not t:
                continue
            if c not in CJK_LEADS:
                return None
            for bytes1 in classes.values():
                t1 = step(t, bytes1[0])
                for bytes2 in classes.values() if t1 else ():
                    if step(t1, bytes2[0]):
                        out.update(bytes((c, b1, b2)) for b1 in bytes1 for b2 in bytes2)
            if len(out) > CJK_CONTINUATIONS:
                return None
        return frozenset(out)

    kinds: dict[bytes, int] = {}
    lists: dict[frozenset[bytes], int] = {}  # continuation sets, numbered from 3 in the kind byte
    for b0 in CJK_LEADS:
        s0 = step(1, b0)
        for bytes1 in classes.values():
            s1 = step(s0, bytes1[0])
            for bytes2 in classes.values():
                s2 = step(s1, bytes2[0])
                if plain_end(s2, matters):
                    continue
                kind = 2 if plain_end(s2, matters & ~ir.FLAG_TRIGGER) else 1
                follow = extensions(s2) if kind == 1 else None
                if follow is not None and (follow in lists or len(lists) < 253):
                    kind = lists.setdefault(follow, 3 + len(lists))
                kinds.update((bytes((b0, b1, b2)), kind) for b1 in bytes1 for b2 in bytes2)
    for m in p.anchors.members:
        char = m.encode("utf-8")
        if len(char) == 3 and char[0] in CJK_LEADS:
            kinds[char] = 1
    entries = {int.from_bytes(char, "little"): kind for char, kind in kinds.items()}
    table, log2 = _open_table({key: key | kind << 24 for key, kind in entries.items()}, cjk_slot)
    follows = b""
    for follow in lists:  # (in kind order: dicts keep insertion order)
        chars = sorted(int.from_bytes(c, "little") for c in follow)
        follows += struct.pack(f"<{CJK_CONTINUATIONS}I", *chars, *[0] * (CJK_CONTINUATIONS - len(chars)))
    return _teddy(set(kinds), lambda t: t[1] & 15), struct.pack(f"<{len(table)}I", *table) + follows, log2


# how often English words begin with each letter (%, rounded; a fixed table, so that builds
# stay deterministic): the word fingerprints' buckets are chosen for English text
_INITIAL_LETTER_PERCENT = {
    c: float(x)
    for c, x in zip(
        b"abcdefghijklmnopqrstuvwxyz",
        "11.7 4.4 5.2 3.2 2.8 4.0 1.6 4.2 7.3 0.5 0.9 2.4 3.8 2.3 7.6 4.3 0.2 2.8 6.7 16 1.2 0.8 5.5 0.1 0.8 0.1".split(),
        strict=True,
    )
}

# the share of the English words beginning with a letter that are that letter alone ("a", "I")
_ONE_LETTER_SHARE = {ord("a"): 0.2, ord("i"): 0.15}


def _fingerprint_buckets(patterns: set[bytes], n: int = WORD_FINGERPRINT_BUCKETS) -> dict[int, int]:
    """The fingerprint bucket (0 … n - 1) of each first byte (| 0x20) of the patterns. A text
    word passes when its first byte is one of a bucket's and its second byte fits that
    bucket's nibble tables, which hold the union of its patterns' second bytes (and so pass
    more than those: every low nibble with every high nibble). Letters are placed one by one,
    the costliest first, where they add least to the share of English words that would pass:
    (how often words begin with each of the bucket's letters) × (the share of those words
    whose second byte fits: a space for "a" and "I", else the letters that fit). 8 buckets
    let a few more words through to the exact lookup than 16 keyed by first letter alone,
    but need half the swizzles per block: the better trade on English text
    (docs/experiments.md, "Word fingerprints")."""
    seconds: dict[int, set[int]] = {}
    for text in patterns:
        s = seconds.setdefault(text[0] | 0x20, set())
        if len(text) < 2:
            s.update(range(256))
        elif text[1] in ASCII_WHITESPACE:
            s.update(b | 0x20 for b in ASCII_WHITESPACE)
        else:
            s.add(text[1] | 0x20)

    def passing(first: int, second: set[int]) -> float:
        """The share of English words beginning with `first` whose second byte fits the nibble
        tables of `second`: a space for a one-letter word, else any of the letters that fit."""
        lo, hi = {b & 15 for b in second}, {b >> 4 for b in second}
        letters = sum(1 for c in b"abcdefghijklmnopqrstuvwxyz" if c & 15 in lo and c >> 4 in hi) / 26
        one = _ONE_LETTER_SHARE.get(first, 0.01)
        return one * ((0x20 & 15) in lo and 0x20 >> 4 in hi) + (1 - one) * letters

    def cost(letters: set[int], second: set[int]) -> float:
        return sum(_INITIAL_LETTER_PERCENT.get(c, 0.5) * passing(c, second) for c in sorted(letters))

    buckets: list[tuple[set[int], set[int]]] = [(set(), set()) for _ in range(n)]
    out = {}
    for c in sorted(seconds, key=lambda c: (-cost({c}, seconds[c]), c)):

        def added(i: int, c: int = c) -> float:
            letters, second = buckets[i]
            return cost(letters | {c}, second | seconds[c]) - cost(letters, second)

        best = min(range(n), key=lambda i: (added(i), i))
        letters, second = buckets[best]
        buckets[best] = (letters | {c}, second | seconds[c])
        out[c] = best
    return out


def _teddy(patterns: set[bytes], bucket_of, offsets: int = 3, buckets: int = 16) -> bytes:
    """Fingerprints of the texts that can begin where the skip table has an entry, Teddy-style:
    for byte offsets 0 … `offsets` - 1, tables by low and by high nibble whose bytes are sets of
    `buckets` (8 or 16) buckets (per offset lo A, hi A, and with 16 lo B, hi B: two halves of 8).
    Bytes are compared with bit 5 set (`b | 0x20`, which lower-cases letters); the high-nibble
    tables also answer for the raw byte's nibble, so a kernel may skip the `| 0x20`.
    `bucket_of` picks a pattern's bucket (words: `_fingerprint_buckets`, by first letter, so a
    bucket's offset-0 set holds only its letters). A word start whose bytes i, i+1, i+2 fail
    every bucket begins no pattern: no false negatives, because a literal that matches at i
    has its own first bytes there (a space in it stands for any whitespace run, so
    offsets after one allow everything), and so does a word that is a whole pattern."""
    tables = [[bytearray(16) for _ in range(buckets // 4)] for _ in range(offsets)]
    whitespace = {b | 0x20 for b in ASCII_WHITESPACE}
    for text in sorted(patterns):
        bucket = bucket_of(text)
        assert 0 <= bucket < buckets
        half, bit = 2 * (bucket // 8), 1 << (bucket % 8)
        free = False
        for j in range(offsets):
            if free or j >= len(text):
                allowed = set(range(256))
            elif text[j] in ASCII_WHITESPACE:
                allowed, free = whitespace, True
            else:
                allowed = {text[j]}
            for b in {b | 0x20 for b in allowed}:
                tables[j][half][b & 15] |= bit
                # and under the high nibble without bit 5, so that a kernel may look up a raw
                # byte's high nibble: (b >> 4) | 2 == (b | 0x20) >> 4
                tables[j][half + 1][b >> 4] |= bit
                tables[j][half + 1][(b >> 4) & ~2] |= bit
    return b"".join(bytes(t) for offset in tables for t in offset)
