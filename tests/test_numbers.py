"""Number values (docs/semantics.md §2) against exact Decimal arithmetic."""

import re
from decimal import Decimal

from hypothesis import assume, example, given
from hypothesis import strategies as st
from support.oracle import decimal_value, to_chinese

from heatc import ir
from heatc.lang.compiler import _bare_program
from heatc.semantics.lexing import lex

FULLWIDTH = str.maketrans("0123456789.", "０１２３４５６７８９．")


def only_number(text: str, chinese: bool = True):
    # Longer numerals are cut at 64 bytes by design (semantics §1).
    assume(len(text.encode("utf-8")) <= ir.MAX_LEXEME)
    lexemes = lex(_bare_program(chinese), text.encode("utf-8"))
    assert len(lexemes) == 1, [(x.raw, x.code) for x in lexemes]
    return lexemes[0]


def in_fast_path(value: Decimal, mantissa_digits: str) -> bool:
    # Correctly rounded when the integer mantissa is below 2**53 and the scale |E| <= 22.
    return int(mantissa_digits or "0") < 2**53 and abs(value.as_tuple().exponent) <= 22


@st.composite
def arabic_numerals(draw):
    int_part = str(draw(st.integers(0, 10**15)))
    frac = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=6)))
    grouped = draw(st.booleans()) and len(int_part) > 3
    if grouped:
        head = len(int_part) % 3 or 3
        int_part = int_part[:head] + "".join("," + int_part[i : i + 3] for i in range(head, len(int_part), 3))
    text = int_part + ("." + frac if frac else "")
    return text.translate(FULLWIDTH) if draw(st.booleans()) else text


@given(arabic_numerals())
@example("2,550")
@example("0.1")
@example("９８.６")
def test_arabic_numerals_are_correctly_rounded(text):
    x = only_number(text)
    # four digits from 1900 to 2199, alone, are a year: a date whose value is the same
    year = re.fullmatch("(?:[1１][9９]|[2２][01０１])[0-9０-９]{2}", text) is not None
    assert x.code == (ir.LEX_DATE if year else ir.LEX_NUMBER)
    exact = decimal_value(text)
    digits = "".join(c for c in text.translate({ord(c): None for c in ",．."}) if c.isdigit())
    if in_fast_path(exact, digits.lstrip("0")):
        assert x.value == float(exact)
    else:
        assert abs(x.value - float(exact)) <= abs(float(exact)) * 1e-15


@given(st.integers(0, 10**12 - 1), st.booleans())
@example(1005, False)
@example(150_000_000, False)
@example(10, True)
@example(100_000, False)
def test_chinese_integers(n, drop_leading_one):
    text = to_chinese(n)
    if drop_leading_one and 10 <= n < 20:
        text = text[1:]  # 十五 as well as 一十五
    x = only_number(text)
    assert x.code == ir.LEX_NUMBER
    assert x.value == float(n)


@given(st.text("0123456789", min_size=1, max_size=8))
def test_chinese_positional_digits(digits):
    """二〇二四: a run of digit characters reads positionally."""
    text = "".join("〇一二三四五六七八九"[int(d)] for d in digits)
    assert only_number(text).value == float(int(digits))


@given(st.integers(0, 10**6), st.text("0123456789", min_size=1, max_size=5))
def test_chinese_decimals(integer, frac):
    text = to_chinese(integer) + "点" + "".join("零一二三四五六七八九"[int(d)] for d in frac)
    assert only_number(text).value == float(Decimal(f"{integer}.{frac}"))


@given(arabic_numerals(), st.sampled_from(["十", "百", "千", "万", "亿", "千万", "百万", "万亿"]))
@example("1.5", "亿")
@example("30", "万")
def test_multipliers_scale_exactly(numeral, mult):
    exponent = {"十": 1, "百": 2, "千": 3, "万": 4, "亿": 8, "千万": 7, "百万": 6, "万亿": 12}[mult]
    x = only_number(numeral + mult)
    exact = decimal_value(numeral).scaleb(exponent)
    digits = "".join(c for c in numeral.translate({ord(c): None for c in ",．."}) if c.isdigit()).lstrip("0")
    if int(digits or "0") < 2**53 and abs(exponent - len(numeral.split(".")[-1]) if "." in numeral else exponent) <= 22:
        assert x.value == float(exact)


@given(st.one_of(arabic_numerals(), st.integers(0, 10**6).map(to_chinese)), st.sampled_from(["%", "％", "百分之"]))
@example("8", "百分之")
@example("三十六", "百分之")
def test_percentages_have_the_value_of_their_number(numeral, sign):
    arabic = numeral[0].isdigit() or "\uff10" <= numeral[0] <= "\uff19"
    if sign != "百分之" and not arabic:
        return  # a trailing percent sign follows Arabic numerals only
    x = only_number(sign + numeral if sign == "百分之" else numeral + sign)
    assert x.code == ir.LEX_PERCENT
    assert x.value == only_number(numeral).value


def test_chinese_numbers_only_when_enabled():
    lexemes = lex(_bare_program(False), "三十 30万".encode())
    assert [x.code for x in lexemes] == [ir.LEX_OTHER, ir.LEX_OTHER, ir.LEX_NUMBER, ir.LEX_OTHER]
    assert lexemes[2].value == 30.0


def test_thousands_groups_need_three_digits():
    values = [
        x.value for x in lex(_bare_program(False), b"1,234 1,23 3020,3021 12,345,678.5") if x.code == ir.LEX_NUMBER
    ]
    assert values == [1234.0, 1.0, 23.0, 3020.0, 3021.0, 12345678.5]
