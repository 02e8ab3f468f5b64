"""The term a consistency mention names, read from the words around it (docs/conflicts.md).

A consistency channel is keyed by a class — `consistent d per kind` keeps one number of days
per keyword class — but one keyword names many terms in one document: "cure such breach
within thirty (30) days after receiving written notice" and "a payment default not cured
within ten (10) days" are two cure periods, not one stated twice. What tells them apart is
what the number is *of*: the words of the clause around it. So the conflicts layer splits
every channel by term, on top of the events every backend gives alike:

- a mention's **term words** are the content words (ASCII letters, lower-cased, common
  suffixes stripped; no stop words, number words, units, or the words of a captured class)
  of its match, of up to `TAIL_WORDS` words after it and up to `HEAD_WORDS` before it,
  neither side crossing the end of its clause (`.`, `;`, `:`, `!`, `?`, and `,` `(` `)`
  after the match — what follows a number up to a comma is what it is of: "days after
  receipt of invoice");
- a mention names the **same term** as the earlier mention of its channel whose term words
  overlap its own most — by at least `SAME_TERM` of the smaller set (overlap coefficient;
  ties: the earliest) — and a new term when none does. A mention with no term words, or an
  earlier one without, overlaps fully: text the words cannot tell apart (Chinese, say) is one
  term per channel, as the channel alone says.

- a mention's **bound** is what the last bound phrase before its number makes of it: a
  floor ("at least", "not less than"), a deadline ("within", "no later than") or a cap ("not
  more than", "up to"). "at least twenty (20) days' notice" and "notify us within five (5)
  days" are two terms however many words they share: two mentions whose bounds differ never
  name the same term (a mention without one is told apart by its words alone).

A term can be named after its number: "thirty (30) days' prior written notice", matched by a
rule that begins with the number. Such a mention's term words are the words on either side of
the number, each marked with its side — up to `HEAD_WORDS` before it, to the start of its
sentence, and the match's and its clause's after it — and the mark `NAMED_AFTER`: it names
the same term as an earlier mention only with the same words (overlap 1 or 0). "N days'
written notice" is how a contract gives every notice period it has, for terminating,
renewing, changing prices; the words around the number tell them apart only when they are
the same words, as a term restated repeats them. (A mention with no words around it — Chinese
text — is one term per channel, as above.)

A channel's mentions are kept in a `TermIndex`, which finds that earlier mention without
comparing every pair: a word set seen before joins the term it joined then (the earlier one
overlaps it fully), and a new one is compared only with the earlier word sets that share a
word with it — through an index of each word's word sets, the first `MAX_WORD_SETS` of them
per word — and with those that have no words. Up to that cap the index answers exactly what
`nearest_term` over every earlier mention answers; a mention with a word past the cap
(hundreds of different clauses of one channel sharing a word: no contract, text made to be
slow) is compared with the first `MAX_WORD_SETS` only, and counted (`TermIndex.capped`), so
the work per mention is bounded and the whole is O(n log n).

Restating a term restates its words ("within thirty (30) days after receipt of invoice");
two terms that share a keyword differ in them. Words, not lexemes: the same reading on every
backend, since it depends on the chunk's bytes and the match's span alone.

Public surface: `HEAD_WORDS`, `TAIL_WORDS`, `SAME_TERM`, `NAMED_AFTER`, `MAX_WORD_SETS`, `stem(word)`,
`term_words(text, start, end, values)`, `bound_of(words)`, `overlap(a, b)`, `nearest_term(words, earlier)`,
`TermIndex`.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

HEAD_WORDS = 4
TAIL_WORDS = 6
SAME_TERM = 0.5
#: The mark in the word set of a term named after its number (docstring).
NAMED_AFTER = "=named after"
#: The most word sets of one channel a word leads a new word set to (`TermIndex`).
MAX_WORD_SETS = 256
# beyond this many word sets to compare, `TermIndex` compares them as arrays
_MANY = 32

_WORD = re.compile(rb"[A-Za-z]+")
_HEAD_STOP = re.compile(rb"[.;:!?]")
_TAIL_STOP = re.compile(rb"[.;:!?,()]")
# words that say nothing about which term a value is: function words, modal verbs, number
# words and the units the shipped rules read (the rule's unit already says what is counted)
_STOP = frozenset(
    """a an the of to in on at by for from with within into upon as or and nor but not no any all each
    every such this that these those its it their his her our your which who whom whose than then
    there here hereof hereto hereunder herein thereof thereto thereunder therein shall will may must
    would should could can be is are was were been being has have had do does did if so also other
    least most more less than after before prior following until up per same said
    one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand
    million billion percent day days calendar business working month months year years""".split()
)


# a crude suffix stripper: "pay", "payment", "payable" and "payments" are one word here, as
# are "governed" and "governing" (irregular forms, "paid", stay apart)
_SUFFIXES = ("ments", "ment", "ations", "ation", "ings", "ing", "able", "ies", "ied", "ed", "es", "s")


def stem(word: str) -> str:
    w = word.lower()
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return w


def _words(text: bytes, exclude: frozenset[str]) -> list[str]:
    out = []
    for m in _WORD.finditer(text):
        w = m.group().decode("ascii").lower()
        if w not in _STOP and len(w) > 1 and w not in exclude:
            out.append(stem(w))
    return out


# the phrases that bound a number, longest first ("not more than" before "more than"); the
# mark a term word set carries for each kind of bound (no word: letters only, lower case)
_BOUNDS = (
    (
        rb"not\s+more\s+than|no\s+more\s+than|not\s+to\s+exceed|not\s+exceed(?:ing)?|up\s+to|at\s+most|"
        rb"maximum\s+of",
        "#cap",
    ),
    (
        rb"at\s+least|not\s+less\s+than|no\s+less\s+than|minimum\s+of|more\s+than|greater\s+than|"
        rb"in\s+excess\s+of",
        "#floor",
    ),
    (rb"within|no\s+later\s+than|not\s+later\s+than", "#deadline"),
)
_BOUND_CODES = {mark: code for code, (_, mark) in enumerate(_BOUNDS, 1)}
_BOUND = re.compile(rb"(?i)\b(?:" + rb"|".join(rb"(" + r + rb")" for r, _ in _BOUNDS) + rb")\b")
_DIGIT = re.compile(rb"\d")


def term_words(text: bytes, start: int, end: int, values: frozenset[str] = frozenset()) -> frozenset[str]:
    """The term words of the mention at byte span [start, end) of the chunk `text`, with the
    mark of its bound (`bound_of`); `values` are the words of the values it captured (a
    class capture "new_york": "new", "york"), which say what the term is set to, not which
    term it is."""
    head_text = text[max(0, start - 200) : start]
    cut = [m.end() for m in _HEAD_STOP.finditer(head_text)]
    head_text = head_text[cut[-1] :] if cut else head_text
    head = _words(head_text, values)[-HEAD_WORDS:]
    tail_text = text[end : end + 200]
    stop = _TAIL_STOP.search(tail_text)
    tail = _words(tail_text[: stop.start()] if stop else tail_text, values)[:TAIL_WORDS]
    # the bound: the last bound phrase before the match's first digit (in the match or its head)
    match = text[start:end]
    digit = _DIGIT.search(match)
    bounds = list(_BOUND.finditer(head_text + b" " + (match[: digit.start()] if digit else match)))
    mark = [_BOUNDS[bounds[-1].lastindex - 1][1]] if bounds else []
    if match[:1].isdigit():  # named after its number: the words on either side of it
        before = ["<" + w for w in _words(head_text, values)[-HEAD_WORDS:]]
        after = [">" + w for w in _words(match, values) + tail]
        if before or after:
            return frozenset([*before, *after, *mark, NAMED_AFTER])
    return frozenset(head + _words(match, values) + tail + mark)


def bound_of(words: frozenset[str]) -> str | None:
    """The bound mark of a term word set ("#floor", "#deadline", "#cap"), None for none."""
    return next((w for w in words if w.startswith("#")), None)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the smaller set of term words that the other has too; 1 when either is
    empty (nothing tells the two apart); 0 when the two have different bounds. A term named
    after its number overlaps only the same words: 1 or 0."""
    bound_a, bound_b = bound_of(a), bound_of(b)
    if bound_a and bound_b and bound_a != bound_b:
        return 0.0
    a, b = a - {bound_a}, b - {bound_b}
    if NAMED_AFTER in a or NAMED_AFTER in b:
        return 1.0 if a == b else 0.0
    return len(a & b) / min(len(a), len(b)) if a and b else 1.0


def nearest_term(words: frozenset[str], earlier: list[frozenset[str]]) -> int | None:
    """Which earlier mention of the channel names the same term as `words`: the one that
    overlaps most, if by at least `SAME_TERM` (ties: the earliest); None when none does."""
    best, at = SAME_TERM, None
    for i, other in enumerate(earlier):
        score = overlap(words, other)
        if score > best or (at is None and score >= best):
            best, at = score, i
    return at


class TermIndex:
    """The terms of one channel's mentions so far. `join(words)` is the term (0, 1, … in the
    order they start) of the earlier mention `nearest_term` picks among every mention joined
    so far, or a new term; the answer is exact unless `join` counted the mention in `capped`."""

    def __init__(self, cap: int = MAX_WORD_SETS):
        self.cap = cap
        self.capped = 0  # mentions compared with only the first `cap` word sets of one of their words
        self.terms = 0
        self._seen: dict[frozenset[str], int] = {}  # each distinct word set → its term
        # each distinct word set, in the order first seen: its number of words, bound and term
        # (the first two also as arrays, for a mention that shares words with many)
        self._sizes: list[int] = []
        self._bounds: list[str | None] = []
        self._terms: list[int] = []
        self._size_array = np.zeros(64, np.float64)
        self._bound_array = np.zeros(64, np.int8)  # 0: no bound, else _BOUND_CODES
        self._by_word: dict[str, list[int]] = {}  # word → the first `cap` word sets that have it
        self._full: set[str] = set()  # the words with more word sets than that
        self._first: dict[str | None, int] = {}  # per bound (None: none), its first word set
        self._first_bare: dict[str | None, int] = {}  # … and its first word set with no words
        # the word sets of terms named after their number, apart: they overlap only their own words
        self._named_after: dict[frozenset[str], list[tuple[int, str | None]]] = {}

    def join(self, words: frozenset[str]) -> int:
        term = self._seen.get(words)
        if term is not None:
            # a word set seen before overlaps its first mention fully: the most there is, so the
            # earliest mention that overlaps it fully is the one its first mention found too
            return term
        bound = bound_of(words)
        core = words - {bound} if bound else words
        if NAMED_AFTER in core:
            # named after its number: the same words, of a bound that fits — the earliest such
            same = self._named_after.setdefault(core, [])
            at = min((i for i, b in same if bound is None or b is None or b == bound), default=None)
            same.append((len(self._terms), bound))
            return self._record(words, core, bound, at)
        at = self._nearest(core, bound)
        index = len(self._terms)
        term = self._record(words, core, bound, at)
        self._first.setdefault(bound, index)
        if not core:
            self._first_bare.setdefault(bound, index)
        for w in core:
            sets = self._by_word.setdefault(w, [])
            if len(sets) < self.cap:
                sets.append(index)
            else:
                self._full.add(w)
        return term

    def _record(self, words: frozenset[str], core: frozenset[str], bound: str | None, at: int | None) -> int:
        """Keep a new distinct word set, of the term of word set `at` (None: a new term)."""
        term = self._terms[at] if at is not None else self._new_term()
        index = len(self._terms)
        self._seen[words] = term
        self._sizes.append(len(core))
        self._bounds.append(bound)
        self._terms.append(term)
        if index == len(self._size_array):
            self._size_array = np.concatenate([self._size_array, np.zeros(index, np.float64)])
            self._bound_array = np.concatenate([self._bound_array, np.zeros(index, np.int8)])
        self._size_array[index] = len(core)
        self._bound_array[index] = _BOUND_CODES.get(bound, 0)
        return term

    def _new_term(self) -> int:
        self.terms += 1
        return self.terms - 1

    def _nearest(self, core: frozenset[str], bound: str | None) -> int | None:
        """`nearest_term` over the distinct word sets (the first mention of each stands for all)."""
        # a word set with no words overlaps every other fully (of a bound that fits: two bounds
        # that differ overlap nothing)
        firsts = self._first_bare if core else self._first
        bare = [i for b, i in firsts.items() if bound is None or b is None or b == bound]
        if not core:
            return min(bare, default=None)
        shared: Counter[int] = Counter()
        for w in core:
            sets = self._by_word.get(w)
            if sets:
                shared.update(sets)
        if not self._full.isdisjoint(core):
            self.capped += 1
        best, at = (1.0, min(bare)) if bare else (SAME_TERM, None)
        if len(shared) > _MANY:
            return self._nearest_of_many(shared, len(core), bound, best, at)
        k, sizes, bounds = len(core), self._sizes, self._bounds
        for i, n in shared.items():
            other = bounds[i]
            if bound is not None and other is not None and other != bound:
                continue
            score = n / min(k, sizes[i])
            if score > best or (score == best and (at is None or i < at)):
                best, at = score, i
        return at

    def _nearest_of_many(self, shared: Counter[int], k: int, bound: str | None, best: float, at: int | None):
        """The loop of `_nearest` over arrays: the same scores (a count over a whole number, in
        float64), the same earliest of the best."""
        index = np.fromiter(shared.keys(), np.int64, len(shared))
        score = np.fromiter(shared.values(), np.float64, len(shared)) / np.minimum(k, self._size_array[index])
        if bound is not None:
            other = self._bound_array[index]
            score[(other != 0) & (other != _BOUND_CODES[bound])] = -1.0
        top = score.max()
        if top < best:
            return at
        first = int(index[score == top].min())
        return first if top > best or at is None or first < at else at
