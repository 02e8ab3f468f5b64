"""Write heatc/units/units.tsv, the unit table of `quantity(DIM)`, from pint's definitions.

    python -m heatc.units.generate            # needs pint (pip install 'heatc[units]')
    python -m heatc.units.generate --check    # exit 1 when the checked-in table is stale

The spellings below are this project's (what clinical text writes, English and Chinese);
every factor is pint's, computed with exact fractions (`UnitRegistry(non_int_type=Fraction)`)
from its default definitions (default_en.txt), so no factor is typed by hand. Nothing at
build or run time imports pint: the compiler reads the generated table (heatc.units.table).
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

TABLE = Path(__file__).with_name("units.tsv")

# dimension -> (pint expression of its base unit, the base unit as printed, what it is)
DIMENSIONS = {
    "mass": ("gram", "g", "mass"),
    "volume": ("liter", "L", "volume"),
    "time": ("second", "s", "duration"),
    "length": ("meter", "m", "length"),
    "pressure": ("pascal", "Pa", "pressure"),
    "temperature": ("kelvin", "K", "temperature (affine: °C and °F carry an offset)"),
    "rate": ("1 / minute", "/min", "events per unit of time (heart and breathing rates)"),
    "mass_concentration": ("gram / liter", "g/L", "mass per volume"),
    "amount_concentration": ("mole / liter", "mol/L", "amount of substance per volume"),
    "equivalent_concentration": ("equivalent / liter", "Eq/L", "charge equivalents per volume (see `convert`)"),
    "percent": ("percent", "%", "a fraction of a hundred"),
}

# (dimension, pint expression, spellings matched with ASCII case folded, spellings matched
# exactly). The first spelling is how a value in that unit is printed. A spelling is a literal
# of the rule language: a space in it matches any run of whitespace.
UNITS: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    # mass
    ("mass", "gram", ("g", "gm", "gram", "grams", "gramme", "grammes", "克"), ()),
    ("mass", "milligram", ("mg", "milligram", "milligrams", "毫克"), ()),
    ("mass", "microgram", ("mcg", "µg", "μg", "ug", "microgram", "micrograms", "微克"), ()),
    ("mass", "nanogram", ("ng", "nanogram", "nanograms", "纳克"), ()),
    ("mass", "kilogram", ("kg", "kilogram", "kilograms", "kilo", "kilos", "千克", "公斤"), ()),
    ("mass", "pound", ("lb", "lbs", "pound", "pounds"), ()),
    ("mass", "ounce", ("oz", "ounce", "ounces"), ()),
    # volume
    ("volume", "liter", ("L", "liter", "liters", "litre", "litres", "升", "公升"), ()),
    ("volume", "deciliter", ("dL", "deciliter", "deciliters", "decilitre", "decilitres", "分升"), ()),
    ("volume", "milliliter", ("mL", "cc", "milliliter", "milliliters", "millilitre", "millilitres", "毫升"), ()),
    ("volume", "microliter", ("µL", "μL", "uL", "microliter", "microliters", "microlitre", "microlitres", "微升"), ()),
    # time
    ("time", "second", ("s", "sec", "secs", "second", "seconds", "秒", "秒钟"), ()),
    ("time", "minute", ("min", "mins", "minute", "minutes", "分钟"), ()),
    ("time", "hour", ("h", "hr", "hrs", "hour", "hours", "小时"), ()),
    ("time", "day", ("d", "day", "days", "天"), ()),
    ("time", "week", ("wk", "wks", "week", "weeks", "周", "星期"), ()),
    # length
    ("length", "meter", ("m", "meter", "meters", "metre", "metres", "米"), ()),
    ("length", "centimeter", ("cm", "centimeter", "centimeters", "centimetre", "centimetres", "厘米"), ()),
    ("length", "millimeter", ("mm", "millimeter", "millimeters", "millimetre", "millimetres", "毫米"), ()),
    ("length", "micrometer", ("µm", "μm", "um", "micrometer", "micrometers", "micron", "microns", "微米"), ()),
    ("length", "kilometer", ("km", "kilometer", "kilometers", "kilometre", "kilometres", "公里", "千米"), ()),
    ("length", "inch", ("inch", "inches"), ()),
    ("length", "foot", ("ft", "foot", "feet"), ()),
    # pressure
    ("pressure", "pascal", ("Pa", "pascal", "pascals", "帕"), ()),
    ("pressure", "kilopascal", ("kPa", "kilopascal", "kilopascals", "千帕"), ()),
    ("pressure", "mmHg", ("mmHg", "mm Hg", "millimeters of mercury", "millimetres of mercury", "毫米汞柱"), ()),
    ("pressure", "cmH2O", ("cmH2O", "cm H2O", "cmH₂O", "cm H₂O", "centimeters of water", "厘米水柱"), ()),
    ("pressure", "millibar", ("mbar", "millibar", "millibars"), ()),
    ("pressure", "atmosphere", ("atm", "atmosphere", "atmospheres"), ()),
    ("pressure", "psi", ("psi",), ()),
    # temperature (K, C and F alone are too common as other words in either case: exact only)
    ("temperature", "kelvin", ("kelvin", "kelvins"), ("K",)),
    (
        "temperature",
        "degree_Celsius",
        (
            "°C",
            "℃",
            "ºC",
            "degC",
            "deg C",
            "degrees C",
            "degree C",
            "degrees Celsius",
            "degree Celsius",
            "Celsius",
            "摄氏度",
        ),
        ("C",),
    ),
    (
        "temperature",
        "degree_Fahrenheit",
        (
            "°F",
            "℉",
            "ºF",
            "degF",
            "deg F",
            "degrees F",
            "degree F",
            "degrees Fahrenheit",
            "degree Fahrenheit",
            "Fahrenheit",
            "华氏度",
        ),
        ("F",),
    ),
    # rate: counts per unit of time (beats, breaths: the count has no unit)
    (
        "rate",
        "1 / minute",
        (
            "/min",
            "/minute",
            "per min",
            "per minute",
            "bpm",
            "beats per minute",
            "beats/min",
            "breaths per minute",
            "breaths/min",
            "breaths/minute",
            "beats/minute",
            "次/分",
            "次/分钟",
        ),
        (),
    ),
    ("rate", "1 / hour", ("/h", "/hr", "/hour", "per hour", "次/小时"), ()),
    ("rate", "1 / second", ("/s", "/sec", "per second", "次/秒"), ()),
    # mass concentration
    ("mass_concentration", "gram / liter", ("g/L", "克/升"), ()),
    ("mass_concentration", "gram / deciliter", ("g/dL", "克/分升"), ()),
    ("mass_concentration", "milligram / deciliter", ("mg/dL", "mg/100mL", "mg/100 mL", "mg%", "毫克/分升"), ()),
    ("mass_concentration", "milligram / liter", ("mg/L", "毫克/升"), ()),
    ("mass_concentration", "milligram / milliliter", ("mg/mL", "毫克/毫升"), ()),
    ("mass_concentration", "microgram / milliliter", ("µg/mL", "μg/mL", "ug/mL", "mcg/mL", "微克/毫升"), ()),
    ("mass_concentration", "microgram / deciliter", ("µg/dL", "μg/dL", "ug/dL", "mcg/dL", "微克/分升"), ()),
    ("mass_concentration", "microgram / liter", ("µg/L", "μg/L", "ug/L", "mcg/L", "微克/升"), ()),
    ("mass_concentration", "nanogram / milliliter", ("ng/mL", "纳克/毫升"), ()),
    ("mass_concentration", "nanogram / deciliter", ("ng/dL", "纳克/分升"), ()),
    # amount concentration
    ("amount_concentration", "mole / liter", ("mol/L", "摩尔/升"), ()),
    ("amount_concentration", "millimole / liter", ("mmol/L", "毫摩尔/升"), ("mM",)),
    ("amount_concentration", "micromole / liter", ("µmol/L", "μmol/L", "umol/L", "微摩尔/升"), ("µM", "μM")),
    ("amount_concentration", "nanomole / liter", ("nmol/L", "纳摩尔/升"), ("nM",)),
    ("amount_concentration", "picomole / liter", ("pmol/L", "皮摩尔/升"), ("pM",)),
    # equivalent concentration (read as an amount once `convert ANALYTE 1 mmol/L = N mEq/L` says how)
    ("equivalent_concentration", "equivalent / liter", ("Eq/L",), ()),
    ("equivalent_concentration", "milliequivalent / liter", ("mEq/L", "毫当量/升"), ()),
    ("equivalent_concentration", "microequivalent / liter", ("µEq/L", "μEq/L", "uEq/L"), ()),
    # percent (the percent lexeme, "8%", carries its own sign: these are for range bounds)
    ("percent", "percent", ("%", "percent", "per cent", "pct"), ()),
    ("percent", "permille", ("‰", "permille", "per mille"), ()),
]

# Spellings of units in no dimension above (doses per weight or per day, flows): they lex as
# one unit, so that "500 mg/kg" or "2 g/day" is never read as a mass of 500 mg or 2 g.
COMPOUNDS = (
    "mg/kg", "mg/kg/d", "mg/kg/day", "mcg/kg", "µg/kg", "mcg/kg/min", "µg/kg/min", "mg/d", "mg/day", "g/d", "g/day",
    "g/kg", "mL/kg", "mL/h", "mL/hr", "mL/min", "mL/kg/h", "L/min", "L/h", "mg/h", "mg/hr", "mg/min", "units/kg",
    "mg/m2", "mg/m²", "g/mol", "mmol/mol", "mmol/kg", "mOsm/kg", "mg/g", "mg/mmol", "mL/min/1.73m2",
    "mL/min/1.73 m2", "mL/min/1.73m²", "毫克/千克", "毫克/天", "毫升/小时",
)  # fmt: skip

LICENCE = (
    "# Factors computed from pint {version}'s default definitions (default_en.txt), exactly, with\n"
    "# fractions. pint is Copyright 2012 by Hernan E. Grecco and the Pint Authors, BSD-3-Clause\n"
    "# licence (https://github.com/hgrecco/pint/blob/master/LICENSE). The spellings are heatc's.\n"
)

HEADER = """\
# The unit table of heatc's `quantity(DIM)` captures (docs/language.md, "Quantities").
# GENERATED by `python -m heatc.units.generate` — do not edit; change the generator.
{licence}#
# dimension<TAB>NAME<TAB>BASE<TAB>what it is
# unit<TAB>DIMENSION<TAB>NAME<TAB>SCALE<TAB>OFFSET<TAB>SPELLINGS<TAB>EXACT SPELLINGS
# compound<TAB>SPELLINGS: units of no dimension, which lex as one unit and convert to nothing
# A value v written in a unit is v_base = (v + OFFSET) * SCALE in its dimension's base unit;
# SCALE and OFFSET are exact fractions (p/q). Spellings are separated by "|": the first
# column's match ASCII letters in either case, the second's exactly.
"""


def _fraction(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def render() -> str:
    import pint

    ureg = pint.UnitRegistry(non_int_type=Fraction)
    ureg.define("equivalent = [charge_equivalent] = Eq")
    lines = [HEADER.format(licence=LICENCE.format(version=pint.__version__))]
    for name, (_base, shown, what) in DIMENSIONS.items():
        lines.append(f"dimension\t{name}\t{shown}\t{what}\n")
    seen: dict[str, str] = {}
    for dim, expr, folded, exact in UNITS:
        base = ureg.Quantity(Fraction(1), DIMENSIONS[dim][0]).units
        zero = ureg.Quantity(Fraction(0), expr).to(base).magnitude
        scale = ureg.Quantity(Fraction(1), expr).to(base).magnitude - zero
        offset = Fraction(zero) / Fraction(scale)  # v_base = (v + offset) * scale
        for s in folded + exact:
            key = s if s in exact else s.lower()
            if key in seen:
                raise SystemExit(f"the spelling {s!r} is in two units: {seen[key]} and {expr}")
            seen[key] = expr
        cells = ["unit", dim, expr.replace(" ", ""), _fraction(Fraction(scale)), _fraction(offset)]
        lines.append("\t".join([*cells, "|".join(folded), "|".join(exact)]) + "\n")
    for s in COMPOUNDS:
        if s.lower() in seen:
            raise SystemExit(f"the compound {s!r} is also a unit ({seen[s.lower()]})")
        seen[s.lower()] = "compound"
    lines.append("compound\t" + "|".join(COMPOUNDS) + "\n")
    return "".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if TABLE.read_text(encoding="utf-8") != text:
            print(f"{TABLE} is stale: run python -m heatc.units.generate", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
