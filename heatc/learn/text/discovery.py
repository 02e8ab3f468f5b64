"""Keyword discovery: the domain's own keywords, the words and two-word phrases that most
often stand just before a number (or before a term's value and unit), found by heatc's own
lexer over a sample of the corpus.

Public surface: `discover_keywords`, `keyword_contexts`, `rare_words`, `follower_words`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from heatc import ir
from heatc.learn.text.evidence import FOLLOW_GAP
from heatc.learn.text.lexemes import END_GROUP, SHARE_GROUP, STOPWORDS, Lexicon, SentenceLexemes, lex_sentence
from heatc.semantics.lexing import Lexeme


def _word(x: Lexeme) -> str | None:
    if x.code != ir.LEX_WORD:
        return None
    w = x.raw.decode("utf-8", errors="replace")
    return w if w.isascii() and w.isalpha() and len(w) > 1 and w.lower() not in STOPWORDS else None


def _phrases_ending_at(s: SentenceLexemes, j: int, w: str) -> list[str]:
    out = [w.lower()]
    if j > 0 and s.categories[j - 1] is None and s.lexemes[j - 1].end + 1 == s.lexemes[j].start:
        prev = _word(s.lexemes[j - 1])
        if prev is not None:
            out.append(f"{prev.lower()} {w.lower()}")
    return out


def _qualified(s: SentenceLexemes, j: int, groups: dict[str, str]) -> list[str]:
    """The two-word phrase of a word and the one-word keyword at j right after it, when the
    word qualifies the keyword into another quantity: "warfarin sodium 5 mg" is a dose of
    warfarin, not a sodium level. The word may be a plain one or itself a one-word literal
    of a keyword category ("warfarin", one of a drug family). As the longer literal, the
    phrase lexes in the pair's place once it is a keyword."""
    if j == 0 or s.lexemes[j - 1].end + 1 != s.lexemes[j].start:
        return []
    words = []
    for k in (j - 1, j):
        w = s.lexemes[k].raw.decode("utf-8", errors="replace")
        plain = s.categories[k] is None and _word(s.lexemes[k]) is not None
        keyword = s.categories[k] is not None and groups.get(s.categories[k] or "") == "keyword"
        if not (w.isascii() and w.isalpha() and len(w) > 1 and (plain or keyword) and w.lower() not in STOPWORDS):
            return []
        words.append(w.lower())
    return [" ".join(words)]


def keyword_contexts(
    s: SentenceLexemes, i: int, groups: dict[str, str], gap: int = 3, term_gap: int = 8
) -> tuple[list[str], list[str]]:
    """The plain word (and the two-word phrase ending in it) nearest before value lexeme i,
    within `gap` lexemes, stopping at sentence ends, other values and categorised lexemes (a
    keyword of the lexicon there gives the phrase of the word before it, `_qualified`);
    and, when the value is a term — a unit follows it, maybe after a parenthesis, as in
    "thirty (30) days" — the nearest one within `term_gap` lexemes, looking past constraint
    words ("payment is due within thirty (30) days"). Returns (near, term)."""
    out: list[str] = []
    terms: list[str] = []

    def group(j: int) -> str | None:
        cat = s.categories[j] if 0 <= j < len(s.lexemes) else None
        return groups.get(cat) if cat else None

    for j in range(i - 1, max(-1, i - gap - 2), -1):
        if group(j) == "keyword":
            out.extend(_qualified(s, j, groups))
            break
        if group(j) == SHARE_GROUP:  # "of": a stop word here ("potassium of 3.2")
            continue
        if (s.categories[j] is not None and group(j) != END_GROUP) or s.is_value(j):
            break
        w = _word(s.lexemes[j])
        if w is not None:
            out.extend(_phrases_ending_at(s, j, w))
            break
    term = group(i + 1) == "unit" or (group(i + 2) == "unit" and not s.is_value(i + 1))
    if term:
        for j in range(i - 1, max(-1, i - term_gap - 2), -1):
            if s.is_value(j) or (
                s.categories[j] is not None and group(j) not in ("constraint", SHARE_GROUP, END_GROUP)
            ):
                break
            w = _word(s.lexemes[j])
            if w is not None:
                terms.extend(_phrases_ending_at(s, j, w))
                break
    return out, terms


def discover_keywords(
    lexicon: Lexicon, texts: Iterable[str], *, min_support: int = 10, max_keywords: int = 200
) -> list[tuple[str, int]]:
    """The phrases that stand before numbers most often: (phrase, count), most frequent first
    — `max_keywords` of them, and up to a quarter as many more that name terms. A two-word
    phrase is kept when it accounts for at least a quarter of its last word's count: "heart
    rate" and "respiratory rate" both, besides "rate" (the lexer prefers the longer literal)."""
    program = lexicon.program()
    groups = lexicon.groups()
    near: Counter[str] = Counter()
    term: Counter[str] = Counter()
    for text in texts:
        s = lex_sentence(program, text)
        for i in range(len(s.lexemes)):
            if s.is_value(i):
                a, b = keyword_contexts(s, i, groups)
                near.update(a)
                term.update(b)

    def ranked(counts: Counter[str], limit: int, skip: set[str]) -> list[tuple[str, int]]:
        out = []
        for phrase, n in counts.most_common():
            if n < min_support or len(out) >= limit:
                break
            if phrase in skip or (" " in phrase and n * 4 < counts[phrase.split()[-1]]):
                continue
            out.append((phrase, n))
        return out

    first = ranked(near, max_keywords, set())
    return first + ranked(term, max_keywords // 4, {p for p, _ in first})


def rare_words(lexicon: Lexicon, texts: Iterable[str], min_count: int = 2) -> list[str]:
    """The single words before numbers that no category of `lexicon` holds, seen at least
    `min_count` times (2 at least) in `texts`, most frequent first: what the keywords the plan
    keeps leave out, for keyword families (`aggregate.rare_word_cells`, `magnitudes`)."""
    known = lexicon.literal_set()
    return [
        w
        for w, _ in discover_keywords(lexicon, texts, min_support=max(2, min_count), max_keywords=10**9)
        if " " not in w and w.lower() not in known
    ]


_DOTTED = re.compile(r"(?:[A-Za-z]\.){2,4}(?![A-Za-z])")


def _dotted(s: SentenceLexemes, j: int) -> str | None:
    """The abbreviation written with dots that starts at lexeme j ("p.o.", "b.i.d."), as one
    word: a literal of it lexes as one lexeme, and its dots end no sentence."""
    x = s.lexemes[j]
    if x.code != ir.LEX_WORD or x.end - x.start != 1:
        return None
    m = _DOTTED.match(s.text.encode()[x.start : x.start + 12].decode("ascii", errors="replace"))
    return m.group(0) if m else None


def follower_words(lexicon: Lexicon, texts: Iterable[str], *, min_count: int, max_words: int) -> list[str]:
    """The words that most often stand right after a value and its unit — the first word
    within `FOLLOW_GAP` lexemes past the unit, skipping stop words ("5 mg daily", "1 tablet by
    mouth", "30 days written notice") — that no category of `lexicon` holds, seen at least
    `min_count` times, most frequent first: what a dose or a period is read before
    (`evidence.CellKey.after`)."""
    program = lexicon.program()
    groups = lexicon.groups()
    known = lexicon.literal_set()
    counts: Counter[str] = Counter()
    for text in texts:
        s = lex_sentence(program, text)
        for i in range(len(s.lexemes) - 2):
            if not s.is_value(i) or groups.get(s.categories[i + 1] or "") != "unit":
                continue
            for j in range(i + 2, min(len(s.lexemes), i + FOLLOW_GAP + 3)):
                if s.is_value(j) or (s.categories[j] is not None and groups.get(s.categories[j] or "") != SHARE_GROUP):
                    break
                w = _word(s.lexemes[j]) or _dotted(s, j)
                if w is not None:
                    if w.lower() not in known:
                        counts[w.lower()] += 1
                    break
    return [w for w, n in counts.most_common(max_words) if n >= min_count]
