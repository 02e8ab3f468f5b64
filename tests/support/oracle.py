"""Independent oracles, written from docs/semantics.md without the compiler's code:

- `regex_lex`: §1–2 lexing by brute force — at each position try every length from 64 down
  and every token regex (Python `re`), take the longest, then the highest priority;
- `decimal_value` / `chinese_integer` / `to_chinese`: number values by exact arithmetic.
"""

from __future__ import annotations

import re
from decimal import Decimal

LETTERS = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
ALNUM = LETTERS | set(b"0123456789")
WS = b"[ \\t\\n\\v\\f\\r]"


def _alt(chars: str) -> bytes:
    return b"(?:" + b"|".join(re.escape(c.encode()) for c in chars) + b")"


D = b"(?:[0-9]|\xef\xbc[\x90-\x99])"
INT = b"(?:" + D + b"{1,3}(?:," + D + b"{3})+|" + D + b"+)"
DEC = INT + b"(?:(?:\\.|\xef\xbc\x8e)" + D + b"+)?"
CN_DIGIT = _alt("零〇一壹二两兩贰三叁四肆五伍六陆七柒八捌九玖")
CN_SMALL_ALL = _alt("十百千拾佰仟")
CN_BIG = _alt("万萬亿億")
CN = (
    b"(?:"
    + CN_DIGIT
    + b"|"
    + CN_SMALL_ALL
    + b")(?:"
    + CN_DIGIT
    + b"|"
    + CN_SMALL_ALL
    + b"|"
    + CN_BIG
    + b")*(?:"
    + re.escape("点".encode())
    + CN_DIGIT
    + b"+)?"
)
MULT = b"(?:" + _alt("十百千") + b"|" + CN_BIG + b"+|" + _alt("十百千") + CN_BIG + b"+)"
PCT_SIGN = b"(?:%|\xef\xbc\x85)"


def _d(digits: str) -> bytes:
    """One ASCII or full-width digit of `digits`."""
    return b"(?:[" + digits.encode() + b"]|" + b"|".join(chr(0xFF10 + int(c)).encode() for c in digits) + b")"


# Dates, as docs/semantics.md §2 lists their forms.
_ANY, _NZ = _d("0123456789"), _d("123456789")
_MONTH = b"(?:" + _NZ + b"|" + _d("0") + _NZ + b"|" + _d("1") + _d("012") + b")"
_DAY = b"(?:" + _NZ + b"|" + _d("0") + _NZ + b"|" + _d("12") + _ANY + b"|" + _d("3") + _d("01") + b")"
_YEAR = _d("12") + _ANY + _ANY + _ANY
_NAMES = (
    b"(?:"
    + b"|".join(
        [
            m.encode()
            for m in "January February March April May June July August September October November December".split()
        ]
        + [
            m.upper().encode()
            for m in "January February March April May June July August September October November December".split()
        ]
        + [m.encode() + b"\\.?" for m in "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec".split()]
    )
    + b")"
)
_ORD = b"(?:st|nd|rd|th)"
DATE_BOUNDED = b"|".join([
    _MONTH + b"/" + _DAY + b"/(?:" + _ANY + _ANY + b"|" + _YEAR + b")",
    b"(?:" + _d("0") + _NZ + b"|" + _d("1") + _d("012") + b")/" + _ANY + _ANY,
    _NZ + b"/(?:" + _d("0") + _ANY + b"|" + _d("3") + _d("23456789") + b"|" + _d("456789") + _ANY + b")",
    _NAMES + WS + b"+" + _DAY + _ORD + b"?(?:," + WS + b"*|" + WS + b"+)" + _YEAR,
    _NAMES + WS + b"+" + _DAY + _ORD + b"?",
    _NAMES + b",?" + WS + b"+" + _YEAR,
    _NAMES + WS + b"+of" + WS + b"+" + _YEAR,
])  # fmt: skip
# a year written alone, 1900–2199: it outranks the number its digits also spell
YEAR_ALONE = b"(?:" + _d("1") + _d("9") + b"|" + _d("2") + _d("01") + b")" + _ANY + _ANY
_RI = b"(?:" + "日".encode() + b"|" + "号".encode() + b")"
DATE_CJK = b"|".join([
    _YEAR + "年".encode() + b"(?:" + _MONTH + "月".encode() + b"(?:" + _DAY + _RI + b")?)?",
    _MONTH + "月".encode() + b"(?:" + _DAY + _RI + b")?",
])  # fmt: skip


def token_patterns(literals: list[tuple[str, bool]], chinese: bool) -> list[tuple[int, str, re.Pattern, set]]:
    """(priority, token name, regex, the bytes that may not follow it) for every token kind."""
    out = []
    for i, (text, exact) in enumerate(literals):
        parts = []
        in_space = False
        for ch in text:
            if ch in " \t\n\v\f\r":
                if not in_space:
                    parts.append(WS + b"+")
                in_space = True
                continue
            in_space = False
            if ch.isascii() and ch.isalpha() and not exact:
                parts.append(b"[" + ch.lower().encode() + ch.upper().encode() + b"]")
            else:
                parts.append(re.escape(ch.encode()))
        boundary = LETTERS if text.encode()[-1] in LETTERS else set()
        out.append((1 if exact else 2, f"lit{i}", re.compile(b"".join(parts), re.S), boundary))
    numbers = [DEC]
    percents = [DEC + PCT_SIGN]
    if chinese:
        numbers += [DEC + MULT, CN]
        percents += [re.escape("百分之".encode()) + b"(?:" + DEC + b"|" + CN + b")"]
    out.append((3, "number", re.compile(b"|".join(b"(?:" + n + b")" for n in numbers), re.S), set()))
    out.append((3, "percent", re.compile(b"|".join(b"(?:" + n + b")" for n in percents), re.S), set()))
    out.append((3, "date", re.compile(DATE_BOUNDED, re.S), ALNUM))
    out.append((2.5, "date", re.compile(YEAR_ALONE, re.S), ALNUM))
    out.append((3, "date", re.compile(DATE_CJK, re.S), set()))
    out.append((4, "word", re.compile(b"[A-Za-z]+"), set()))
    out.append((5, "space", re.compile(WS + b"+|\xc2\xa0|\xe3\x80\x80"), set()))
    other = b"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}|."
    out.append((6, "other", re.compile(other, re.S), set()))
    return out


def regex_lex(
    data: bytes, literals: list[tuple[str, bool]], chinese: bool, cap: int = 64
) -> list[tuple[str, int, int]]:
    """(token name, start, end) of every non-space token."""
    patterns = token_patterns(literals, chinese)
    pos, out = 0, []
    while pos < len(data):
        for length in range(min(cap, len(data) - pos), 0, -1):
            window = data[pos : pos + length]
            after = data[pos + length] if pos + length < len(data) else None
            fits = [
                (prio, name) for prio, name, rx, boundary in patterns if rx.fullmatch(window) and after not in boundary
            ]
            if fits:
                name = min(fits)[1]
                if name != "space":
                    out.append((name, pos, pos + length))
                pos += length
                break
    return out


# --- numbers ---------------------------------------------------------------------------

CN_DIGITS = "零一二三四五六七八九"


def decimal_value(numeral: str) -> Decimal:
    """Exact value of an Arabic numeral (ASCII or full-width digits, commas, one point)."""
    plain = "".join(chr(ord(c) - 0xFF10 + 48) if "\uff10" <= c <= "\uff19" else c for c in numeral)
    plain = plain.replace(",", "").replace("．", ".")
    return Decimal(plain)


def _group(n: int) -> str:
    """1..9999 in Chinese, with 零 for inner zeros."""
    out, zero, started = "", False, False
    for d, unit in zip((n // 1000, n // 100 % 10, n // 10 % 10, n % 10), "千百十 ", strict=True):
        if d == 0:
            zero = zero or started
            continue
        if zero:
            out += "零"
            zero = False
        out += CN_DIGITS[d] + unit.strip()
        started = True
    return out


def to_chinese(n: int) -> str:
    """Standard Chinese reading of a non-negative integer (一亿零五百万, 一千零五, 十五)."""
    if n == 0:
        return "零"
    if n >= 10**8:
        high, low = divmod(n, 10**8)
        rest = ""
        if low:
            rest = ("零" if low < 10**7 else "") + to_chinese(low)
        return to_chinese(high) + "亿" + rest
    if n >= 10**4:
        high, low = divmod(n, 10**4)
        rest = ""
        if low:
            rest = ("零" if low < 1000 else "") + _group(low)
        return _group(high) + "万" + rest
    text = _group(n)
    return text
