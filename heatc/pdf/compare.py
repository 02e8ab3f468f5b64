"""Extracted text against a reference text: character error rate, the Levenshtein distance
(insertions, deletions and substitutions of one character each) over the reference's
length, after folding what references and PDFs legitimately spell differently — curly
quotes, and whitespace (a reference's line breaks are rarely the PDF's).

Whole documents are first aligned on the words they share (difflib), and the distance is
summed over the stretches between: exact within each stretch, and as a whole an upper bound
on the documents' Levenshtein distance (equal to it unless the best alignment would pair a
shared word with a different one), found in a fraction of a second instead of seconds.

Public surface: fold, levenshtein, aligned_distance, character_error_rate.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

_QUOTES = str.maketrans({"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"'})
_SPACE = re.compile(r"\s+")


def fold(text: str) -> str:
    """Straight quotes, every run of whitespace one space, none at the ends."""
    return _SPACE.sub(" ", text.translate(_QUOTES)).strip()


def levenshtein(a: str, b: str) -> int:
    """Edit distance, by Myers' bit-parallel algorithm (one Python integer holds a column of
    the dynamic-programming matrix: a 60,000-character page pair takes about a second)."""
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[str, int] = {}
    for i, c in enumerate(b):
        peq[c] = peq.get(c, 0) | (1 << i)
    full = (1 << m) - 1
    top = 1 << (m - 1)
    pv, mv, score = full, 0, m
    for c in a:
        eq = peq.get(c, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & full)
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = ((ph << 1) | 1) & full  # the top row of the matrix grows by one per column
        mh = (mh << 1) & full
        pv = mh | (~(xv | ph) & full)
        mv = ph & xv
    return score


def aligned_distance(a: str, b: str) -> int:
    """Levenshtein distance summed over the stretches between the words a and b share
    (a and b: words separated by single spaces, as fold leaves them)."""
    wa, wb = a.split(" ") if a else [], b.split(" ") if b else []
    blocks = SequenceMatcher(None, wa, wb, autojunk=False).get_matching_blocks()
    shared = any(block.size for block in blocks)
    total, i, j = 0, 0, 0
    for block in blocks:
        gap_a, gap_b = " ".join(wa[i : block.a]), " ".join(wb[j : block.b])
        total += levenshtein(gap_a, gap_b)
        if shared and (not gap_a) != (not gap_b):
            total += 1  # the words missing on one side took a space with them
        i, j = block.a + block.size, block.b + block.size
    return total


def character_error_rate(text: str, reference: str) -> float:
    """aligned_distance(fold(text), fold(reference)) / len(fold(reference))."""
    hyp, ref = fold(text), fold(reference)
    return aligned_distance(hyp, ref) / max(len(ref), 1)
