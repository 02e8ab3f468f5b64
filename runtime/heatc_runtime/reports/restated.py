"""A number written out and restated in digits: "thirty (30) days", "one hundred eighty
(180) days", "ten percent (10%)", "One Million Dollars ($1,000,000)" — the way contracts
state their terms.

Such a mention states its term twice, in words and in digits, and the two can disagree
("thirty (60) days": a term edited in one place, a drafting slip). The conflicts layer
(conflicts.py) reads every match of a rule set that finds conflicts for this: where a
number the match captured is restated from number words right before it, and the words
name another number, the words and the digits are a conflict of their own, in one chunk.
Bytes only, the same on every backend.

English number words: units and teens, tens (hyphenated or not: "forty-five", "forty
five"), "hundred", and the scales thousand, million and billion, with an optional "and"
("one hundred and twenty"); case does not matter. Between the words and the parenthesis
may stand a half or quarters ("one and one-half percent (1.5%)", "eight and three quarters"),
the cents of an amount ("One Hundred and No/100 Dollars", "and 50/100"), and what they
count — percent, dollars —, and inside it a "$" or a "%"; the digits may end in halves,
quarters or eighths ("one and one-half percent (1-1/2%)").

Public surface: `written_number(words)`, `restatements(text)`.
"""

from __future__ import annotations

import re

_UNITS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if w != "_"
}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_FRACTIONS = {b"half": 0.5, b"quarter": 0.25, b"quarters": 0.75}  # after the whole: "one and one-half"
_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred", *_SCALES, "and"], key=len, reverse=True))
# number words (and the "and" between them), what they count (percent, dollars), then the
# digits in parentheses, maybe with "$" before or "%" after: "thirty (30)", "forty-five ( 45 )",
# "ten percent (10%)", "One Million Dollars ($1,000,000)"
_RESTATED = re.compile(
    rb"(?i)\b((?:(?:" + _WORD.encode() + rb"),?[\s-]+)*(?:" + _WORD.encode() + rb"))"
    rb"(?:\s+and\s+(?:a|one)[\s-]+(half|quarter)|\s+and\s+three[\s-]+(quarters))?"  # "one and one-half"
    rb"(?:\s+and\s+((?:no|\d\d)/100))?"  # the cents of an amount: "One Hundred and No/100 Dollars"
    rb"(?:\s+(?:percent|per\s+cent|dollars?|U\.?S\.?\s+dollars?))?"
    rb"\s*\(\s*\$?\s*((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[\s-]+[1-9]/(?:2|4|8))?)\s*%?\s*\)"  # "(1-1/2%)"
    rb"(?:\s*(thousand|million|billion)\b)?"  # "Six (6) Million", "Six (6,000,000) Million"
)
_PAREN_DIGITS = re.compile(rb"\(\s*\$?\s*\d")  # what every restatement has: a cheap first look
_MIXED = re.compile(rb"([\d,.]+)[\s-]+(\d)/(\d)$")  # a whole and a fraction in digits: "1-1/2"


def _digits_value(digits: bytes) -> float:
    mixed = _MIXED.match(digits)
    if mixed:
        return float(mixed.group(1).replace(b",", b"")) + int(mixed.group(2)) / int(mixed.group(3))
    return float(digits.replace(b",", b""))


def written_number(words: str) -> int | None:
    """The number English number words name ("one hundred and eighty" 180, "two million five
    hundred thousand" 2,500,000), None when they are no well-formed number."""
    parts = [p for p in re.split(r"[\s,-]+", words.lower()) if p]
    total, current = 0, 0
    last = None  # the kind of the previous word: refuses "thirty forty", "five six", "million thousand"
    scale_before = None  # the last scale taken: scales come largest first
    for p in parts:
        if p == "and":
            if last not in ("hundred", "scale"):
                return None
            continue
        if p in _UNITS:
            if last in ("unit", "teen") or (last == "tens" and _UNITS[p] >= 10):
                return None
            current += _UNITS[p]
            last = "teen" if _UNITS[p] >= 10 else "unit"
        elif p in _TENS:
            if last in ("unit", "teen", "tens"):
                return None
            current += _TENS[p]
            last = "tens"
        elif p == "hundred":
            if not 1 <= current <= 9:
                return None
            current *= 100
            last = "hundred"
        elif p in _SCALES:
            scale = _SCALES[p]
            if not 1 <= current <= 999 or (scale_before is not None and scale >= scale_before):
                return None
            total, current, scale_before = total + current * scale, 0, scale
            last = "scale"
        else:
            return None
    if last is None:
        return None
    return total + current


def restatements(text: bytes) -> list[tuple[int, int, int, int, float, float]]:
    """Every number written out and restated in digits in `text`: (words start, words end,
    digits start, digits end, the words' number, the digits' number), byte offsets. Words
    that are no well-formed number are passed over ("hundred and eighty (180)", where "one"
    stood before); a leading "and" is dropped ("terms and thirty (30)")."""
    out = []
    if not _PAREN_DIGITS.search(text):
        return out
    for m in _RESTATED.finditer(text):
        words = m.group(1).decode("ascii")
        start = m.start(1)
        lead = re.match(r"(?i)and[\s,-]+", words)
        if lead:
            words, start = words[lead.end() :], start + lead.end()
        whole = written_number(words)
        if whole is not None:
            fraction = _FRACTIONS.get((m.group(2) or m.group(3) or b"").lower(), 0.0)
            cents = m.group(4)
            value = whole + fraction + (int(cents[:2]) / 100 if cents and cents[:2].isdigit() else 0.0)
            digits = _digits_value(m.group(5))
            if not digits.is_integer() and not fraction and not cents:
                continue  # words this reader does not take whole: "one-half of one percent (0.5%)"
            if m.group(6) and digits == value * _SCALES[m.group(6).decode().lower()]:
                value = digits  # the scale after the parenthesis is the words': "Six (6,000,000) Million"
            end = next(m.end(g) for g in (4, 3, 2, 1) if m.group(g))
            out.append((start, end, m.start(5), m.end(5), value, digits))
    return out
