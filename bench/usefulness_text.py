"""Where in a document's text a corruption falls, for bench/learn_usefulness.py: the number
that ends at a position, the word before a value, and the text around a change; and how a
corrupted value is written (`scaled`, `replaced`)."""

from __future__ import annotations

import re
from decimal import Decimal


def word_before(stream: str, at: int, tokens: int = 3, skip: frozenset[str] = frozenset()) -> str:
    """The nearest word in the `tokens` tokens before position `at`, lower-cased, that is not
    one of `skip` ("" if none): "… given Lasix 40" -> "lasix"."""
    for token in reversed(stream[max(0, at - 20 * tokens) : at].split()[-tokens:]):
        letters = re.findall(r"[A-Za-z]+", token)
        if letters and letters[-1].lower() not in skip:
            return letters[-1].lower()
    return ""


def word_after(stream: str, at: int, tokens: int = 2) -> str:
    """The nearest word in the `tokens` tokens after position `at`, lower-cased, within the
    clause ("" if none, or if punctuation ends the clause first): "… 30 days' written notice"
    from the end of "days" -> "written"; "… net 30 days. The" -> ""."""
    for token in stream[at : at + 20 * tokens].split()[:tokens]:
        head = re.match(r"[^A-Za-z]*", token).group()
        if any(c in head for c in ".,;:)"):
            return ""
        letters = re.findall(r"[A-Za-z]+", token)
        if letters:
            return letters[0].lower()
    return ""


_DIGITS_BEFORE = re.compile(r"[\d.,]*\d$")


def number_start(stream: str, at: int) -> int:
    """Where the number that ends at `at` starts ("… Lasix 40" -> the "4")."""
    m = _DIGITS_BEFORE.search(stream, max(0, at - 40), at)
    return m.start() if m else at


def first_difference(clean: str, corrupted: str) -> int:
    """Where the corrupted text first differs from the clean one."""
    return next((i for i, (a, b) in enumerate(zip(clean, corrupted, strict=False)) if a != b), len(corrupted))


def around(clean: str, corrupted: str, width: int = 70) -> str:
    """The corrupted text around where it first differs from the clean one, the change marked."""
    at = first_difference(clean, corrupted)
    while at > 0 and not corrupted[at - 1].isspace():  # the whole word the change falls in
        at -= 1
    end = at
    while end < len(corrupted) and not corrupted[end].isspace():
        end += 1
    text = f"{corrupted[max(0, at - width) : at]}[{corrupted[at:end]}]{corrupted[end : end + width // 3]}"
    return " ".join(text.split())


# words between a name and its value that say nothing of which value it is ("creatinine of 1.1")
_LINKING = frozenset({"of", "was", "is", "were", "are", "at", "a", "an", "the", "level", "levels"})


def changed_word(clean: str, corrupted: str) -> str:
    """The nearest word before the value a corruption changed, past linking words ("creatinine
    of [0.11]": creatinine); where the unit after it changed ("Lasix 40 [g]"), before its number."""
    at = first_difference(clean, corrupted)
    while at > 0 and corrupted[at - 1].isalpha():  # into the unit that changed, or the scale word
        at -= 1
    while at > 0 and corrupted[at - 1].isspace():
        at -= 1
    return word_before(corrupted, number_start(corrupted, at), tokens=4, skip=_LINKING) or "(none)"


def scaled(text: str, factor: Decimal) -> str:
    """The number `factor` times larger, written the same way: "7.2" ×10 -> "72", "0.05" ->
    "0.5", "231,000" -> "2,310,000" (appending a digit would give "2310,000", which reads as
    2310), "4.2" ÷1000 -> "0.0042"."""
    frac = text.partition(".")[2]
    value = Decimal(text.replace(",", "")) * factor
    shift = -factor.adjusted()
    decimals = max(len(frac) + shift, 0)
    return f"{value:,.{decimals}f}" if "," in text else f"{value:.{decimals}f}"


def replaced(stream: str, span: tuple[int, int], new: str) -> str:
    """`stream` with the text at `span` replaced by `new`."""
    return stream[: span[0]] + new + stream[span[1] :]
