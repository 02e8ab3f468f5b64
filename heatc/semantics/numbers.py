"""The value of a number lexeme: one exactly specified float64 algorithm
(docs/semantics.md §2). Every backend must reproduce these steps operation by operation:
each `*`, `/` and `+` below is one IEEE-754 binary64 operation, round-to-nearest-even, never
fused. Python floats are binary64 and never fuse, so this module is the reference. The value
of a date lexeme is its year (`date_value`).

Public surface: `number_value(token_bytes)`, `number_places(token_bytes)`, `date_value(token_bytes)`, `YEAR_PIVOT`, `POW10`,
the numeral tables `CN_DIGITS`, `CN_SMALL`, `CN_BIG`, `ARABIC_MULT_SMALL`, `ARABIC_MULT_BIG`.
"""

from __future__ import annotations

import math

from heatc_runtime.abi import YEAR_PIVOT

# The Chinese numerals and multipliers the lexer accepts (lang.lexicon builds them into the
# automaton) and their values.
CN_DIGITS = {
    "零": 0, "〇": 0, "一": 1, "壹": 1, "二": 2, "两": 2, "兩": 2, "贰": 2, "三": 3, "叁": 3,
    "四": 4, "肆": 4, "五": 5, "伍": 5, "六": 6, "陆": 6, "七": 7, "柒": 7, "八": 8, "捌": 8,
    "九": 9, "玖": 9,
}  # fmt: skip
CN_SMALL = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
CN_BIG = {"万": 10_000, "萬": 10_000, "亿": 100_000_000, "億": 100_000_000}
ARABIC_MULT_SMALL = {"十": 1, "百": 2, "千": 3}  # exponents
ARABIC_MULT_BIG = {"万": 4, "萬": 4, "亿": 8, "億": 8}

#: POW10[i] is the float64 nearest to 10**i (inf beyond 10**308).
POW10: list[float] = [float(10**i) if i <= 308 else math.inf for i in range(400)]

_PERCENT_PREFIX = "百分之"
_FRACTION_POINTS = (".", "．")
_POINT_CN = "点"


def _arabic_digit(ch: str) -> int | None:
    if "0" <= ch <= "9":
        return ord(ch) - 48
    if "\uff10" <= ch <= "\uff19":
        return ord(ch) - 0xFF10
    return None


def _scale(m: float, e: int) -> float:
    if e >= 0:
        return m * POW10[e]
    return m / POW10[-e]


def _arabic(text: str) -> float:
    """DEC [MULT] ['%' | '％'] — digits, commas, one decimal point, multipliers."""
    m = 0.0
    k = 0
    exponent = 0
    in_fraction = False
    for ch in text:
        d = _arabic_digit(ch)
        if d is not None:
            m = m * 10.0 + d
            if in_fraction:
                k += 1
        elif ch in _FRACTION_POINTS:
            in_fraction = True
        elif ch in ARABIC_MULT_SMALL:
            exponent += ARABIC_MULT_SMALL[ch]
        elif ch in ARABIC_MULT_BIG:
            exponent += ARABIC_MULT_BIG[ch]
        # ',' separators and the percent sign carry no value
    return _scale(m, exponent - k)


def _chinese(text: str) -> float:
    total = section = digits = 0.0
    seen = False
    fraction: str | None = None
    if _POINT_CN in text:
        text, fraction = text.split(_POINT_CN, 1)
    for ch in text:
        if ch in CN_DIGITS:
            digits = digits * 10.0 + CN_DIGITS[ch]
            seen = True
        elif ch in CN_SMALL:
            section = section + (digits if seen else 1.0) * CN_SMALL[ch]
            digits = 0.0
            seen = False
        elif ch in CN_BIG:
            if CN_BIG[ch] == 10_000:
                total = total + (section + digits) * 10000.0
            else:
                total = (total + section + digits) * 100000000.0
            section = digits = 0.0
            seen = False
    integer = total + section + digits
    if fraction is None:
        return integer
    f = 0.0
    for ch in fraction:
        f = f * 10.0 + CN_DIGITS[ch]
    k = len(fraction)
    return (integer * POW10[k] + f) / POW10[k]


def number_value(token: bytes) -> float:
    """Value of a number or percent lexeme's bytes (as produced by the lexer)."""
    text = token.decode("utf-8")
    if text.startswith(_PERCENT_PREFIX):
        text = text[len(_PERCENT_PREFIX) :]
    if _arabic_digit(text[0]) is not None:
        return _arabic(text)
    return _chinese(text)


def number_places(token: bytes) -> int:
    """How many digits a number or percent lexeme writes after its decimal point ("." "．"
    or 点): 0 for "72", 1 for "7.2", 2 for "0.10" and "3.25%", 1 for "三点五" — the
    precision it is written with, which a value slipped by a power of ten changes
    (docs/semantics.md §2)."""
    text = token.decode("utf-8")
    for point in (*_FRACTION_POINTS, _POINT_CN):
        if point in text:
            fraction = text.split(point, 1)[1]
            return sum(1 for ch in fraction if _arabic_digit(ch) is not None or ch in CN_DIGITS)
    return 0


# A two-digit year below YEAR_PIVOT is in the 2000s, else in the 1900s (POSIX `strptime` %y);
# the ABI's, since every kernel reads it.


def date_value(token: bytes) -> float:
    """The year a date lexeme writes, 0 when it writes none (docs/semantics.md §2).

    The digit groups of the date are its maximal runs of digits (ASCII or full-width). A group
    of four digits is the year; otherwise a date with three groups (`M/D/YY`) has a two-digit
    year in the third, and one with two (`M/NN`) in the second if it is 32 or more (no day is),
    read with `YEAR_PIVOT`; any other date (`09/05`, `November 5`, `11月`) names no year."""
    groups: list[list[int]] = [[]]
    for ch in token.decode("utf-8"):
        d = _arabic_digit(ch)
        if d is not None:
            groups[-1].append(d)
        elif groups[-1]:
            groups.append([])
    groups = [g for g in groups if g]
    for g in groups:
        if len(g) == 4:
            return float(g[0] * 1000 + g[1] * 100 + g[2] * 10 + g[3])
    last = groups[-1] if groups else []
    yy = last[0] * 10 + last[1] if len(last) == 2 else -1
    if (len(groups) == 3 and yy >= 0) or (len(groups) == 2 and yy >= 32):  # M/D/YY; M/YY when no day
        return float(yy + (2000 if yy < YEAR_PIVOT else 1900))
    return 0.0
