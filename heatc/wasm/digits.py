"""Digit runs for the skipper: whether a kernel may count a run of ASCII digits as one
number lexeme while no rule has a live thread (docs/abi.md, "The skipper"), and what may
extend such a run.

Public surface: `digit_runs(lexer, flags, plain, step, years)`, `years_pass_as_numbers(program, flags)`,
`DIGIT_RUN_MAX`, `DIGIT_EXTENDERS_MAX`, `YEAR_HEADS`.
"""

from __future__ import annotations

from heatc import ir
from heatc_runtime.abi import DIGIT_EXTENDERS_MAX, DIGIT_RUN_MAX, FLAG_LOOK, YEAR_HEADS

ASCII_WHITESPACE = b" \t\n\v\f\r"

# (the module ABI's, heatc_runtime.abi: kernels read them) DIGIT_RUN_MAX: the longest run of
# ASCII digits a skipper counts as a number (the kernel copies its bytes with one i64 load and
# store); DIGIT_EXTENDERS_MAX: the most plain bytes that may extend a number for the skipper
# to count digit runs (the kernel compares a block's bytes with each); YEAR_HEADS: a year
# written alone is four digits beginning so (1900–2199, docs/semantics.md): where years do not
# pass as numbers, the kernel's skipper stops before a run of four digits that begins with one
# of these (`digit_runs` checks that the lexer reads no other digit run as a date)
YEAR_DIGITS = 4


def years_pass_as_numbers(p: ir.Program, flags: list[int]) -> bool:
    """Whether a year written alone (a date lexeme of digits only) does to an idle stream
    just what a number of the same digits would: no date starts a rule, triggers or is an
    anchor member, and every late-starting rule's first element accepts dates if and only
    if it accepts numbers — a kernel keeps a counted digit run as a number look-behind, and
    a year's value is the number its digits spell."""
    if flags[ir.LEX_DATE] & (ir.FLAG_STARTS | ir.FLAG_TRIGGER | ir.FLAG_ANCHOR_MEMBER):
        return False
    firsts = (rule.elements[0].accepts for rule in p.rules if ir.starts_late(rule))
    return all((ir.LEX_NUMBER in a) == (ir.LEX_DATE in a) for a in firsts)


def digit_runs(
    lx: ir.Lexer, flags: list[int], plain: list[int], step, years: bool
) -> tuple[tuple[int, ...], bool, bool, bool] | None:
    """Whether a skipper may count a run of 1 to DIGIT_RUN_MAX ASCII digits as one number
    lexeme (keeping it as the look-behind when late-starting rules look at numbers). None: no,
    it stops before digits. Else the `plain` bytes that may extend a number, at most
    `DIGIT_EXTENDERS_MAX` (`,` `.` `%` and the `/` of a date such as `09/05`), each
    | 0x100 if it does so only when a digit or a non-ASCII byte follows (`,` and `.` of `1,000`
    and `2.5`, not `%`): a run is counted when whitespace or another plain byte follows it,
    or one of those with an ASCII byte but no digit after it; whether a run may hold one
    `.` between digits (`98.6`, as many bytes in all); and whether a run with a `%` right
    after it is one percent lexeme, counted the same way (`12.5%`). A digit run starts a token wherever the
    skipper meets one (after whitespace, a plain byte, or a word, since a word that a literal
    continues with a digit is looked up). It is then one number when every state that digits
    (and a decimal point) lead to from a token start accepts a number with no boundary byte
    to wait for (no literal is spelled in digits), and the byte after it extends no token —
    or, when `years` (`years_pass_as_numbers`), a year written alone, which a byte counted
    after the run (whitespace, a plain byte, not a letter or digit) lets stand; when years do
    not, the skipper stops before every run of four digits that begins with a `YEAR_HEADS`
    (the fourth item: True), so long as those are the only digit runs the lexer may read as
    dates. Numbers must not start a rule, trigger or be in an anchor term."""
    if flags[ir.LEX_NUMBER] & (ir.FLAG_STARTS | ir.FLAG_TRIGGER | ir.FLAG_ANCHOR_MEMBER):
        return None

    def counted(s: int, year: bool) -> bool:
        if s and lx.accept[s] == ir.LEX_NUMBER and not lx.boundary[s]:
            return True
        return year and bool(s) and lx.accept[s] == ir.LEX_DATE and lx.fallback[s] == ir.LEX_NUMBER

    states: set[int] = set()
    frontier = {1}
    for n in range(1, DIGIT_RUN_MAX + 1):
        frontier = {step(s, d) for s in frontier for d in b"0123456789"}
        if not all(counted(s, n == YEAR_DIGITS) for s in frontier):
            return None
        states |= frontier
    if not years and not _years_are_the_heads(step, counted):
        return None
    if any(step(s, b) for s in states for b in ASCII_WHITESPACE):
        return None
    # decimals: every state that digits, a point and digits lead to (DIGIT_RUN_MAX bytes in
    # all) accepts a number and whitespace ends it; then what may extend a number is asked
    # of those states too
    frontier = {step(s, ord(".")) for s in states}
    after_point: set[int] = set()
    decimals = True
    for _ in range(DIGIT_RUN_MAX - 2):
        frontier = {step(s, d) for s in frontier for d in b"0123456789"}
        decimals = decimals and all(s and lx.accept[s] == ir.LEX_NUMBER and not lx.boundary[s] for s in frontier)
        after_point |= frontier
    decimals = decimals and not any(step(s, b) for s in after_point for b in ASCII_WHITESPACE)
    if decimals:
        states |= after_point
    digits = {lx.byte_class[d] for d in b"0123456789"}

    def only_before_a_digit(b: int) -> bool:
        """`b` may extend a number only when an ASCII digit or a non-ASCII byte (a full-width
        digit) comes next (`.` of `2.5`, `,` of `1,000`)."""
        for s in states:
            t = step(s, b)
            if t and (
                lx.accept[t] != ir.LEX_NONE or any(step(t, c) for c in range(128) if lx.byte_class[c] not in digits)
            ):
                return False
        return True

    extending = [b for b in plain if any(step(s, b) for s in states)]
    if len(extending) > DIGIT_EXTENDERS_MAX:
        return None
    extenders = tuple(b | (0x100 if only_before_a_digit(b) else 0) for b in extending)
    # a point between digits is part of the number only where it extends one just so
    decimals = decimals and (ord(".") | 0x100) in extenders
    # percentages: a plain `%` right after a number makes one percent lexeme that no ASCII
    # byte continues, and that matters no more than a number does (plain in either stream: a
    # trigger `%` is plain only in a quiet one, but right after digits it is no literal, and
    # the kernel passes it there in every stream)
    pct = ord("%")
    percent = (
        pct in plain
        and not flags[ir.LEX_PERCENT] & (ir.FLAG_STARTS | ir.FLAG_TRIGGER | ir.FLAG_ANCHOR_MEMBER | FLAG_LOOK)
        and all(
            (t := step(s, pct)) and lx.accept[t] == ir.LEX_PERCENT and not lx.boundary[t]
            and not any(step(t, b) for b in range(128))
            for s in states
        )
    )  # fmt: skip
    return extenders, bool(decimals), percent, not years


def _years_are_the_heads(step, counted) -> bool:
    """Whether the runs of four digits the lexer reads as dates are just those that begin
    with a `YEAR_HEADS` (the ones a kernel's skipper stops before when years matter)."""
    numbers_after: dict[int, bool] = {}  # per state two digits lead to: all two more read as numbers
    dates_after: dict[int, bool] = {}  # ... none of them does
    for head in range(100):
        s = step(step(1, ord("0") + head // 10), ord("0") + head % 10)
        if s not in numbers_after:
            after = [counted(step(step(s, ord("0") + t // 10), ord("0") + t % 10), False) for t in range(100)]
            numbers_after[s], dates_after[s] = all(after), not any(after)
        if not (dates_after if b"%02d" % head in YEAR_HEADS else numbers_after)[s]:
            return False
    return True
