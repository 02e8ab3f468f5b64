"""Build the rule set's lexer automaton: literals, numbers, dates, words, spaces, other
characters (docs/semantics.md §1–2), as one maximal-munch DFA in `ir.Lexer` form.

Public surface: `build_lexer(literals, chinese_numbers)`, `LiteralConflictError`,
`MONTH_NAMES`, `MONTH_FOLLOWERS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from heatc import ir
from heatc.lang.automaton import Dfa, Fragment, Nfa, determinize, minimize, product
from heatc.semantics.numbers import ARABIC_MULT_BIG, ARABIC_MULT_SMALL, CN_BIG, CN_DIGITS, CN_SMALL

ASCII_LETTERS = frozenset(range(ord("A"), ord("Z") + 1)) | frozenset(range(ord("a"), ord("z") + 1))
ASCII_SPACE = frozenset(b" \t\n\v\f\r")

FULLWIDTH_DIGITS = [chr(0xFF10 + d) for d in range(10)]

# Priorities on equal length (lower wins), docs/semantics.md §1. A year written alone
# ("in 2003") outranks the number its digits also spell.
PRIO_EXACT, PRIO_LITERAL, PRIO_YEAR, PRIO_NUMBER, PRIO_WORD, PRIO_SPACE, PRIO_OTHER = 1, 2, 3, 4, 5, 6, 7


@dataclass(frozen=True)
class LiteralSpec:
    text: str
    exact: bool


@dataclass(frozen=True)
class _Label:
    priority: int
    token: int  # lexeme code
    boundary: bool  # literal ending in an ASCII letter


class LiteralConflictError(Exception):
    """Two literals can match the same bytes at the same priority."""

    def __init__(self, a: int, b: int):
        super().__init__(f"literals {a} and {b} overlap")
        self.a, self.b = a, b


def _chars(nfa: Nfa, chars) -> Fragment:
    return nfa.alt(*(nfa.literal(c.encode("utf-8")) for c in chars))


def _literal_fragment(nfa: Nfa, lit: LiteralSpec) -> Fragment:
    parts: list[Fragment] = []
    in_space = False
    for ch in lit.text:
        if ch in " \t\n\v\f\r":
            if not in_space:
                parts.append(nfa.plus(lambda: nfa.byteset(ASCII_SPACE)))
            in_space = True
            continue
        in_space = False
        data = ch.encode("utf-8")
        if len(data) == 1 and data[0] in ASCII_LETTERS and not lit.exact:
            parts.append(nfa.byteset(frozenset([data[0] | 0x20, data[0] & ~0x20])))
        else:
            parts.append(nfa.literal(data))
    return nfa.seq(*parts)


# Month names a date may begin with (docs/semantics.md §2), written Capitalised or in
# capitals; the abbreviations Capitalised only ("APR" is a rate, "MAR" a record), and with a
# dot when a day or a year follows.
MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip
MONTH_ABBREVIATIONS = ("Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec")
# the bytes that may follow a month name inside a date: a space (any ASCII whitespace), the
# dot of an abbreviation, the comma of "November, 2003"
MONTH_FOLLOWERS = (0x20, ord("."), ord(","))
ASCII_DIGITS = "0123456789"
DATE_YEARS = (1000, 2999)  # the four-digit years a date names: [12]DDD (docs/semantics.md §2, `YEAR`)


def _date_fragments(nfa: Nfa) -> tuple[Fragment, Fragment, Fragment]:
    """(dates that end in an ASCII letter or digit, the others: those ending in 年 月 日 号,
    a year written alone).
    The first hold at a boundary only: not before an ASCII letter or digit, so that
    `November 35` is no date `November 3`.

    Digits are ASCII or full-width. A month is 1–12, written with one or two digits; a day
    1–31, likewise; a year two digits, or four beginning with 1 or 2:

    - `M/D/Y`: `11/30/2026`, `1/16/96`;
    - `MM/NN`: a two-digit month and two digits (`09/05`, `11/30`, `10/99`), and `M/NN` with a
      one-digit month when NN begins with 0 or is 32 or more (`9/03`, `4/96`) — a fraction, a
      score or a pressure has neither (`5/5`, `7/10`, `120/80`);
    - a month name with a day, a year or both: `November 5`, `Nov. 5th`, `November 5, 2003`,
      `November 2003`, `November, 2003`, `October of 2006`;
    - `YYYY年`, `YYYY年M月`, `YYYY年M月D日`, `M月D日`, `M月` (日 or 号 for the day);
    - a year alone, 1900–2199 (bounded too: `2019s` and `2000mL` are numbers, `2,019` and
      `2019.5` longer ones): the years documents name, and a century past them — narrower than
      `YYYY`, since every number of four digits a year could be is one no keyword reads
      (`sodium 1400`).
    """

    def d(chars: str = ASCII_DIGITS) -> Fragment:
        return _chars(nfa, [c for ch in chars for c in (ch, FULLWIDTH_DIGITS[int(ch)])])

    def month() -> Fragment:
        return nfa.alt(d("123456789"), nfa.seq(d("0"), d("123456789")), nfa.seq(d("1"), d("012")))

    def day() -> Fragment:
        return nfa.alt(d("123456789"), nfa.seq(d("0"), d("123456789")), nfa.seq(d("12"), d()), nfa.seq(d("3"), d("01")))

    def year4() -> Fragment:
        return nfa.seq(d("12"), d(), d(), d())

    def slash() -> Fragment:
        return nfa.literal(b"/")

    def ws() -> Fragment:
        return nfa.plus(lambda: nfa.byteset(ASCII_SPACE))

    def name() -> Fragment:
        return nfa.alt(
            *(nfa.alt(nfa.literal(m.encode()), nfa.literal(m.upper().encode())) for m in MONTH_NAMES),
            *(nfa.seq(nfa.literal(m.encode()), nfa.opt(nfa.literal(b"."))) for m in MONTH_ABBREVIATIONS),
        )

    def ordinal() -> Fragment:
        return nfa.alt(*(nfa.literal(x) for x in (b"st", b"nd", b"rd", b"th")))

    three = nfa.seq(month(), slash(), day(), slash(), nfa.alt(nfa.seq(d(), d()), year4()))
    two = nfa.alt(
        nfa.seq(nfa.alt(nfa.seq(d("0"), d("123456789")), nfa.seq(d("1"), d("012"))), slash(), d(), d()),
        nfa.seq(
            d("123456789"),
            slash(),
            nfa.alt(nfa.seq(d("0"), d()), nfa.seq(d("3"), d("23456789")), nfa.seq(d("456789"), d())),
        ),
    )
    named = nfa.alt(
        nfa.seq(
            name(), ws(), day(), nfa.opt(ordinal()), nfa.alt(nfa.seq(nfa.literal(b","), nfa.opt(ws())), ws()), year4()
        ),
        nfa.seq(name(), ws(), day(), nfa.opt(ordinal())),
        nfa.seq(name(), nfa.opt(nfa.literal(b",")), ws(), year4()),
        nfa.seq(name(), ws(), nfa.literal(b"of"), ws(), year4()),
    )
    nian, yue = nfa.literal("年".encode()), nfa.literal("月".encode())

    def ri() -> Fragment:
        return _chars(nfa, ["日", "号"])

    cjk = nfa.alt(
        nfa.seq(year4(), nian, nfa.opt(nfa.seq(month(), yue, nfa.opt(nfa.seq(day(), ri()))))),
        nfa.seq(month(), yue, nfa.opt(nfa.seq(day(), ri()))),
    )
    alone = nfa.seq(nfa.alt(nfa.seq(d("1"), d("9")), nfa.seq(d("2"), d("01"))), d(), d())
    return nfa.alt(three, two, named), cjk, alone


def _number_fragments(nfa: Nfa, chinese: bool) -> tuple[Fragment, Fragment]:
    """(number, percent) fragments."""

    def digit() -> Fragment:
        return nfa.alt(nfa.byteset(frozenset(b"0123456789")), _chars(nfa, FULLWIDTH_DIGITS))

    def integer() -> Fragment:
        plain = nfa.plus(digit)
        grouped = nfa.seq(
            digit(),
            nfa.opt(digit()),
            nfa.opt(digit()),
            nfa.plus(lambda: nfa.seq(nfa.literal(b","), digit(), digit(), digit())),
        )
        return nfa.alt(plain, grouped)

    def decimal() -> Fragment:
        point = _chars(nfa, [".", "．"])
        return nfa.seq(integer(), nfa.opt(nfa.seq(point, nfa.plus(digit))))

    def percent_sign() -> Fragment:
        return _chars(nfa, ["%", "％"])

    numbers = [decimal()]
    percents = [nfa.seq(decimal(), percent_sign())]
    if chinese:

        def small() -> Fragment:
            return _chars(nfa, ARABIC_MULT_SMALL)

        def big() -> Fragment:
            return _chars(nfa, ARABIC_MULT_BIG)

        mult = nfa.alt(small(), nfa.plus(big), nfa.seq(small(), nfa.plus(big)))
        numbers.append(nfa.seq(decimal(), mult))

        def cn_digit() -> Fragment:
            return _chars(nfa, CN_DIGITS)

        def chinese_numeral() -> Fragment:
            start = _chars(nfa, list(CN_DIGITS) + list(CN_SMALL))
            rest = nfa.star(_chars(nfa, list(CN_DIGITS) + list(CN_SMALL) + list(CN_BIG)))
            fraction = nfa.opt(nfa.seq(nfa.literal("点".encode()), nfa.plus(cn_digit)))
            return nfa.seq(start, rest, fraction)

        numbers.append(chinese_numeral())
        percents.append(nfa.seq(nfa.literal("百分之".encode()), nfa.alt(decimal(), chinese_numeral())))
    return nfa.alt(*numbers), nfa.alt(*percents)


@functools.cache
def _base_dfa(chinese_numbers: bool) -> Dfa:
    """Numbers, dates, words, spaces, other characters: the same for every rule set, built once."""
    nfa = Nfa()
    start = nfa.state()

    def token(frag: Fragment, label: _Label) -> None:
        nfa.epsilon(start, frag.start)
        nfa.accepts[frag.end] = label

    number, percent = _number_fragments(nfa, chinese_numbers)
    token(number, _Label(PRIO_NUMBER, ir.LEX_NUMBER, False))
    token(percent, _Label(PRIO_NUMBER, ir.LEX_PERCENT, False))
    bounded, cjk, year = _date_fragments(nfa)
    token(bounded, _Label(PRIO_NUMBER, ir.LEX_DATE, True))
    token(year, _Label(PRIO_YEAR, ir.LEX_DATE, True))
    token(cjk, _Label(PRIO_NUMBER, ir.LEX_DATE, False))
    token(nfa.plus(lambda: nfa.byteset(ASCII_LETTERS)), _Label(PRIO_WORD, ir.LEX_WORD, False))
    space = nfa.alt(nfa.plus(lambda: nfa.byteset(ASCII_SPACE)), _chars(nfa, ["\u00a0", "\u3000"]))
    token(space, _Label(PRIO_SPACE, ir.LEX_SPACE, False))
    cont = frozenset(range(0x80, 0xC0))
    other = nfa.alt(
        nfa.byteset(frozenset(range(256))),
        nfa.seq(nfa.byteset(frozenset(range(0xC2, 0xE0))), nfa.byteset(cont)),
        nfa.seq(nfa.byteset(frozenset(range(0xE0, 0xF0))), nfa.byteset(cont), nfa.byteset(cont)),
        nfa.seq(nfa.byteset(frozenset(range(0xF0, 0xF5))), nfa.byteset(cont), nfa.byteset(cont), nfa.byteset(cont)),
    )
    token(other, _Label(PRIO_OTHER, ir.LEX_OTHER, False))
    return minimize(determinize(nfa, start))


def _literal_dfa(literals: list[LiteralSpec]) -> Dfa:
    nfa = Nfa()
    start = nfa.state()
    for i, lit in enumerate(literals):
        frag = _literal_fragment(nfa, lit)
        nfa.epsilon(start, frag.start)
        boundary = lit.text.encode("utf-8")[-1] in ASCII_LETTERS
        nfa.accepts[frag.end] = _Label(PRIO_EXACT if lit.exact else PRIO_LITERAL, ir.LEX_LITERAL0 + i, boundary)
    return determinize(nfa, start)


def build_lexer(literals: list[LiteralSpec], chinese_numbers: bool) -> ir.Lexer:
    # The base is minimal; minimising the product would save ~3% of states for 4x the time.
    dfa = product(_literal_dfa(literals), _base_dfa(chinese_numbers))
    accept, boundary, fallback = [], [], []
    for labels in dfa.labels:
        if not labels:
            accept.append(ir.LEX_NONE)
            boundary.append(0)
            fallback.append(ir.LEX_NONE)
            continue
        ranked = sorted(set(labels), key=lambda lb: (lb.priority, lb.token))
        best = ranked[0]
        if len(ranked) > 1 and ranked[1].priority == best.priority and best.priority <= PRIO_LITERAL:
            raise LiteralConflictError(best.token - ir.LEX_LITERAL0, ranked[1].token - ir.LEX_LITERAL0)
        accept.append(best.token)
        boundary.append(1 if best.boundary else 0)
        alt = next((lb.token for lb in ranked if not lb.boundary), ir.LEX_NONE)
        fallback.append(alt if best.boundary else ir.LEX_NONE)
    flat = [x for row in dfa.next for x in row]
    return ir.Lexer(
        byte_class=dfa.byte_class,
        n_classes=dfa.n_classes,
        n_states=len(dfa.next),
        next=flat,
        accept=accept,
        boundary=boundary,
        fallback=fallback,
    )
