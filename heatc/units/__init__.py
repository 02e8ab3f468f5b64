"""Units and dimensions of `quantity(DIM)` captures (docs/language.md, "Quantities").

The table is data: heatc/units/units.tsv, generated from pint's definitions by
`python -m heatc.units.generate`. Every factor in it is an exact fraction; a conversion is
carried out in float64 as `((v + pre) * mul) / div` — three IEEE operations, in that order,
never fused — with `pre` the float64 nearest the exact offset, and `mul / div` the scale's
numerator and denominator when both are integers a float64 holds exactly (so a factor such
as 1/1000 or 5/9 costs one rounding, in the division), else `mul` the float64 nearest the
scale and `div` 1. The compiler converts range bounds with the same three operations that a
kernel converts a captured value with, so a value written in a bound's own unit meets the
bound exactly.

Public surface: `Dimension`, `Unit`, `Conversion`, `dimensions()`, `units()`, `find(text)`,
`dimension(name)`, `spellings()`, `compounds()`, `conversion(scale, offset)`, `convert(v, c)`,
`fold(text)`, `written(value, text)`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

TABLE = Path(__file__).with_name("units.tsv")
EXACT_FLOAT = 1 << 53  # integers up to this are exact in a float64


@dataclass(frozen=True)
class Dimension:
    name: str
    base: str  # the base unit, as printed
    what: str


@dataclass(frozen=True)
class Unit:
    dimension: str
    name: str
    scale: Fraction  # v_base = (v + offset) * scale
    offset: Fraction
    spellings: tuple[str, ...]  # matched with ASCII letters in either case
    exact: tuple[str, ...]  # matched exactly

    @property
    def shown(self) -> str:
        """How a value in this unit is printed: its first spelling."""
        return (self.spellings or self.exact)[0]


@dataclass(frozen=True)
class Conversion:
    """`((v + pre) * mul) / div`, in float64 (module docstring)."""

    pre: float
    mul: float
    div: float


def fold(text: str) -> str:
    """A spelling's key: whitespace runs as one space, ASCII letters lower-cased."""
    collapsed = re.sub(r"[ \t\n\v\f\r]+", " ", text.strip())
    return "".join(c.lower() if c.isascii() else c for c in collapsed)


@functools.cache
def _load() -> tuple[dict[str, Dimension], tuple[Unit, ...], tuple[str, ...]]:
    dims: dict[str, Dimension] = {}
    table: list[Unit] = []
    compounds: tuple[str, ...] = ()
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        cells = line.split("\t")
        if cells[0] == "dimension":
            dims[cells[1]] = Dimension(cells[1], cells[2], cells[3])
        elif cells[0] == "unit":
            _, dim, name, scale, offset, folded, exact = cells
            table.append(Unit(dim, name, Fraction(scale), Fraction(offset), _split(folded), _split(exact)))
        elif cells[0] == "compound":
            compounds = _split(cells[1])
    return dims, tuple(table), compounds


def _split(cell: str) -> tuple[str, ...]:
    return tuple(s for s in cell.split("|") if s)


def dimensions() -> dict[str, Dimension]:
    return _load()[0]


def dimension(name: str) -> Dimension | None:
    return _load()[0].get(name)


def units() -> tuple[Unit, ...]:
    return _load()[1]


def compounds() -> tuple[str, ...]:
    """Spellings of units in no dimension (mg/kg, mL/h): lexed as one unit, converted to nothing."""
    return _load()[2]


@functools.cache
def _index() -> tuple[dict[str, Unit], dict[str, Unit]]:
    folded: dict[str, Unit] = {}
    exact: dict[str, Unit] = {}
    for u in units():
        for s in u.spellings:
            folded[fold(s)] = u
        for s in u.exact:
            exact[s] = u
    return folded, exact


def find(text: str) -> Unit | None:
    """The unit a spelling names (exact spellings first), or None."""
    folded, exact = _index()
    return exact.get(text) or folded.get(fold(text))


def spellings() -> list[tuple[str, bool, Unit]]:
    """Every spelling of every unit: (text, exact, unit)."""
    return [(s, False, u) for u in units() for s in u.spellings] + [(s, True, u) for u in units() for s in u.exact]


def base_unit(dim: str) -> Unit:
    """The unit of scale 1 and no offset of a dimension (its base)."""
    return next(u for u in units() if u.dimension == dim and u.scale == 1 and u.offset == 0)


def conversion(scale: Fraction, offset: Fraction = Fraction(0)) -> Conversion:
    """The float64 steps of `v_base = (v + offset) * scale` (module docstring)."""
    if scale.numerator <= EXACT_FLOAT and scale.denominator <= EXACT_FLOAT:
        mul, div = float(scale.numerator), float(scale.denominator)
    else:
        mul, div = float(scale), 1.0
    return Conversion(float(offset), mul, div)


def convert(v: float, c: Conversion) -> float:
    """One value converted: the operations every backend performs, in the same order."""
    return ((v + c.pre) * c.mul) / c.div


_WRITTEN_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def written(value: float, text: str) -> str | None:
    """How `text` writes a quantity whose value in its base unit is `value`: the first number
    in it followed by a unit (spaces between) that converts to exactly `value`, as written
    ("389 °F" for 471.48… K, "0.5 g" for 0.5), or None. A reader of a scan's table knows the
    unit the text used, not the base unit its range is checked in."""
    from heatc.semantics.numbers import number_value

    folded, exact = _index()
    longest = max((len(s) for s in (*folded, *exact)), default=0)
    for m in _WRITTEN_NUMBER.finditer(text):
        rest = text[m.end() :]
        gap = len(rest) - len(rest.lstrip(" "))
        for n in range(min(longest, len(rest) - gap), 0, -1):
            spelled = rest[gap : gap + n]
            if spelled != spelled.rstrip():
                continue
            if gap + n < len(rest) and (rest[gap + n].isalnum() or rest[gap + n] == "_") and spelled[-1:].isalnum():
                continue  # a word goes on: "5 mgs" is no "5 m"
            unit = exact.get(spelled) or folded.get(fold(spelled))
            if unit is None:
                continue
            v = convert(number_value(m.group().encode()), conversion(unit.scale, unit.offset))
            if v == value:
                return f"{m.group()} {spelled}"
            break  # the longest spelling is the unit written
    return None
