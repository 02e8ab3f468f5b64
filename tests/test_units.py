"""The unit table of `quantity(DIM)` (heatc.units): fresh from its generator, spellings that
name one unit each, factors as a clinical reader knows them, and conversions that are the
correctly rounded value wherever the docstring promises it (an oracle in exact fractions)."""

from __future__ import annotations

import importlib.util
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heatc import units
from heatc.lang.compiler import compile_source
from heatc.semantics.reference import scan


@pytest.mark.skipif(importlib.util.find_spec("pint") is None, reason="pint (heatc[units]) is not installed")
def test_the_table_is_what_the_generator_writes():
    from heatc.units import generate

    # (the header names the pint release it was made with: any release that gives the same
    # factors and spellings is as good, so the version is left out of the comparison)
    def unversioned(text: str) -> str:
        return re.sub(r"pint [0-9][0-9.]*'s", "pint's", text, count=1)

    assert unversioned(units.TABLE.read_text(encoding="utf-8")) == unversioned(generate.render()), "run `make units`"


# (spelling, dimension, scale, offset): definitions a clinician would quote, typed by hand
KNOWN = [
    ("mg", "mass", Fraction(1, 1000), 0),
    ("mcg", "mass", Fraction(1, 10**6), 0),
    ("毫克", "mass", Fraction(1, 1000), 0),
    ("lb", "mass", Fraction("453.59237"), 0),
    ("mL", "volume", Fraction(1, 1000), 0),
    ("毫升", "volume", Fraction(1, 1000), 0),
    ("h", "time", 3600, 0),
    ("ft", "length", Fraction("0.3048"), 0),
    ("mmHg", "pressure", Fraction("133.322387415"), 0),
    ("cmH2O", "pressure", Fraction("98.0665"), 0),
    ("kPa", "pressure", 1000, 0),
    ("°C", "temperature", 1, Fraction("273.15")),
    ("°F", "temperature", Fraction(5, 9), Fraction("459.67")),
    ("bpm", "rate", 1, 0),
    ("mg/dL", "mass_concentration", Fraction(1, 100), 0),
    ("mmol/L", "amount_concentration", Fraction(1, 1000), 0),
    ("毫摩尔/升", "amount_concentration", Fraction(1, 1000), 0),
    ("mEq/L", "equivalent_concentration", Fraction(1, 1000), 0),
    ("‰", "percent", Fraction(1, 10), 0),
]


@pytest.mark.parametrize(("spelling", "dim", "scale", "offset"), KNOWN)
def test_known_factors(spelling, dim, scale, offset):
    u = units.find(spelling)
    assert (u.dimension, u.scale, u.offset) == (dim, scale, offset)


def test_every_dimension_has_a_base_unit_and_every_spelling_one_unit():
    for name in units.dimensions():
        assert units.base_unit(name).dimension == name
    keys = [units.fold(s) if not exact else s for s, exact, _ in units.spellings()]
    assert len(keys) == len(set(keys))
    assert (
        units.find("MG").name == "milligram" and units.find("c") is None and units.find("C").dimension == "temperature"
    )


LINEAR = [u for u in units.units() if not u.offset]


@given(st.sampled_from(LINEAR), st.integers(0, 10**6))
def test_a_whole_number_converts_to_the_correctly_rounded_value(unit, v):
    # v * numerator is exact below 2**53, so the one rounding is the division's
    if unit.scale.numerator * v < 2**53 and unit.scale.denominator < 2**53:
        assert units.convert(float(v), units.conversion(unit.scale)) == float(v * unit.scale)


def test_a_declared_unit_class_still_converts_and_another_kind_wins():
    program = compile_source(
        'class potassium keyword = "K"\nclass mg_units unit = "MG"\nclass x keyword = "x"\n'
        "rule r { match x ..2 v:quantity(mass) }\nrule t { match x ..2 w:quantity(temperature) }\n"
    )
    names = {program.literals[code - 8].text for code in program.rules[1].elements[-1].accepts}
    assert "K" not in names  # the file's potassium wins over kelvin
    events, _, _ = scan(program, b"x 500 mg, x 310 K")
    assert [e.captures for e in events] == [(("v", 0.5),)]


@pytest.mark.parametrize(
    ("spelling", "number", "text", "shown"),
    [("°F", 389.0, "temperature 389 °F today", "389 °F"), ("mg", 500.0, "metformin 500 mg.", "500 mg"),
     ("g", 0.5, "metformin 0.5 g", "0.5 g"), ("mg", 1000.0, "dose 1,000 mg", "1,000 mg"),
     ("mmol/L", 5.5, "glucose 5.5 mmol/L", "5.5 mmol/L"), ("°C", 38.5, "temp 38.5°C", "38.5 °C")],
)  # fmt: skip
def test_a_base_value_is_shown_as_the_text_writes_it(spelling, number, text, shown):
    u = units.find(spelling)
    base = units.convert(number, units.conversion(u.scale, u.offset))
    assert units.written(base, text) == shown


def test_a_value_no_unit_of_the_text_converts_to_is_not_shown_in_one():
    assert units.written(500.0, "metformin 500 mg") is None  # 500 mg is 0.5 g, not 500
    assert units.written(0.005, "5 mgs") is None  # "mgs" is no spelling of the table
    assert units.written(5.0, "5 gallons") is None  # "g" followed by letters is no gram
