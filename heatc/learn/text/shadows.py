"""Shadow phrases: a keyword and a word beside it that make another quantity.

A keyword's rule binds the nearest value after it, and some words turn the keyword into
something else: "pulse width of 0.5 msec" is no heart rate, "hemoglobin A1c 6.5" no
hemoglobin (its rule even reads the "1" of "A1c"), "potassium chloride 20 mEq" a dose, not a
chloride level, "weight loss of 20 pounds" no weight. Those values sit in the keyword's
tails, where no bound can go without rejecting them, so the keyword's range stays open on
that side and a value ten times too small passes.

A phrase of the keyword and the word right after it (or right before it) is a *shadow*
when the values the keyword's rule reads where the phrase stands fall mostly outside the
range of the keyword's other values (`SHADOW_INSIDE`). Declared as a keyword literal, the
phrase is the longer literal and lexes in the pair's place, so the keyword's rule no longer
sees those values — and the phrase may earn cells of its own. A word that leaves the value
what it was ("glucose level 105", "radial pulse 72") is no shadow.

Public surface: `shadow_phrases`, `SHADOW_GROUP`, `SHADOW_MIN`, `SHADOW_INSIDE`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from heatc import ir
from heatc.learn.text.evidence import occurrences
from heatc.learn.text.lexemes import STOPWORDS, SentenceLexemes

SHADOW_GROUP = "shadow"  # the category group of shadow phrases (class kind: keyword)
SHADOW_MIN = 3  # occurrences of the phrase with a value, in the discovery sample
SHADOW_OWN = 20  # values the keyword reads without the phrase, for a range to compare with
SHADOW_INSIDE = 0.5  # of the phrase's values, at most this share inside the keyword's 5th–95th percentiles
_TOKEN = re.compile(rb"[A-Za-z][A-Za-z0-9]*|[0-9]+[A-Za-z][A-Za-z0-9]*")


def _word_at(s: SentenceLexemes, data: bytes, j: int) -> str | None:
    """The word (letters, maybe digits: "A1c") that starts at lexeme j, lower-cased, if it is
    no stop word; None otherwise."""
    x = s.lexemes[j]
    if x.code != ir.LEX_WORD:
        return None
    m = _TOKEN.match(data, x.start)
    if m is None:
        return None
    w = m.group().decode().lower()
    return None if len(w) < 2 or w in STOPWORDS else w


def shadow_phrases(lexed: Iterable[SentenceLexemes], groups: dict[str, str]) -> list[tuple[str, int]]:
    """The shadow phrases of the sentences' keywords (group `keyword`): (phrase, occurrences
    with a value), most frequent first."""
    own: dict[str, list[float]] = defaultdict(list)  # keyword category -> values read without a phrase after it
    phrases: dict[tuple[str, str], list[float]] = defaultdict(list)  # (keyword category, phrase) -> values
    for s in lexed:
        data = s.text.encode()
        for occ in occurrences(s, groups):
            k = occ.keyword
            if k is None or groups.get(s.categories[k] or "") != "keyword" or s.value_category(occ.value) != "number":
                continue
            cat, literal = s.categories[k] or "", s.lexemes[k].raw.decode(errors="replace").lower()
            value = s.lexemes[occ.value].value
            after = None
            if k + 1 < occ.value and s.lexemes[k + 1].start == s.lexemes[k].end + 1:
                after = _word_at(s, data, k + 1)
            if after is None:
                own[cat].append(value)
            else:
                phrases[cat, f"{literal} {after}"].append(value)
            if k > 0 and s.lexemes[k - 1].end + 1 == s.lexemes[k].start:
                before = _word_at(s, data, k - 1)
                if before is None and groups.get(s.categories[k - 1] or "") == "keyword":
                    before = s.lexemes[k - 1].raw.decode(errors="replace").lower()  # "potassium chloride"
                if before is not None and " " not in before:
                    phrases[cat, f"{before} {literal}"].append(value)
    out = []
    for (cat, phrase), values in phrases.items():
        mine = own.get(cat, [])
        if len(values) < SHADOW_MIN or len(mine) < SHADOW_OWN:
            continue
        lo, hi = np.quantile(np.asarray(mine), [0.05, 0.95])
        inside = np.mean([(lo <= v <= hi) for v in values])
        if inside <= SHADOW_INSIDE:
            out.append((phrase, len(values)))
    return sorted(out, key=lambda x: (-x[1], x[0]))
