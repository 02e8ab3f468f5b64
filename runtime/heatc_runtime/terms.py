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

Restating a term restates its words ("within thirty (30) days after receipt of invoice");
two terms that share a keyword differ in them. Words, not lexemes: the same reading on every
backend, since it depends on the chunk's bytes and the match's span alone.

Public surface: `HEAD_WORDS`, `TAIL_WORDS`, `SAME_TERM`, `stem(word)`,
`term_words(text, start, end, values)`, `bound_of(words)`, `overlap(a, b)`, `nearest_term(words, earlier)`.
"""

from __future__ import annotations

import re

HEAD_WORDS = 4
TAIL_WORDS = 6
SAME_TERM = 0.5

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
    return frozenset(head + _words(match, values) + tail + mark)


def bound_of(words: frozenset[str]) -> str | None:
    """The bound mark of a term word set ("#floor", "#deadline", "#cap"), None for none."""
    return next((w for w in words if w.startswith("#")), None)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the smaller set of term words that the other has too; 1 when either is
    empty (nothing tells the two apart); 0 when the two have different bounds."""
    bound_a, bound_b = bound_of(a), bound_of(b)
    if bound_a and bound_b and bound_a != bound_b:
        return 0.0
    a, b = a - {bound_a}, b - {bound_b}
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
