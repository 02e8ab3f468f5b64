"""Quantities in a rule file: `v:quantity(DIM)` elements, constants with units (`250 mg`) and
`convert` declarations, checked and resolved against the unit table (heatc.units).

A quantity element is compiled as two pattern elements: a number, and right after it (no
gap) a unit of the dimension, whose acceptance converts the captured number to the
dimension's base unit (ir.Element.convert / units; docs/semantics.md §3). Once a file uses
a quantity, every spelling of its dimensions is a unit literal of the file, and so is every
longer unit that begins with one ("500 mg/kg" reads as one unit, never as 500 mg), except
spellings the file declares itself: a unit class of the file keeps its own literal (which
still converts), a class of another kind wins ("K" declared as potassium is no kelvin).

Public surface: `Quantities`, `QuantityElement`, `IMPLICIT_PREFIX`, `add_unit_literals`,
`quantities_used`, `class_names`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from heatc import ir, units
from heatc.errors import suggestion_notes
from heatc.lang import ast
from heatc.lang.unparse import format_constant

IMPLICIT_PREFIX = "unit("  # the implicit classes of unit spellings: unit(mass), unit(compound)
NO_LITERALS = frozenset({"percent"})  # a percent is one lexeme ("8%"): its units only bound ranges
Report = Callable[..., None]


@dataclass
class QuantityElement:
    """What a `quantity(DIM)` element compiles to (unit_codes empty for a percent)."""

    dimension: str
    value_codes: list[int]
    unit_codes: list[int]
    conversions: dict[int, units.Conversion]  # per unit code


@dataclass
class _Reach:
    """The dimensions a quantity of `dimension` reads, each with the factor that takes its base
    unit to `dimension`'s (1 for itself; others through an analyte's `convert`)."""

    dimension: str
    factors: dict[str, Fraction]


class Quantities:
    def __init__(self, error: Report):
        self.error = error
        # analyte class name -> [(dimension a, dimension b, r)]: x in a's base unit is x * r in b's
        self.edges: dict[str, list[tuple[str, str, Fraction]]] = {}
        self.captures: dict[str, _Reach] = {}  # per capture of the rule being compiled

    # -- declarations --------------------------------------------------------------------

    def converts(self, decls: list[ast.ConvertDecl], class_names: dict[str, int]) -> None:
        for d in decls:
            if d.analyte.text not in class_names:
                self.error(
                    d.analyte.pos, f'unknown class "{d.analyte.text}"', suggestion_notes(d.analyte.text, class_names)
                )
                continue
            a, b = self._unit(d.left), self._unit(d.right)
            if a is None or b is None:
                continue
            for n in (d.left, d.right):
                if not n.value > 0:
                    self.error(n.pos, "a conversion relates positive amounts")
            if a.offset or b.offset:
                unit = d.left if a.offset else d.right
                self.error(unit.unit.pos, f'"{unit.unit.text}" has an offset (a temperature): no analyte converts it')
                continue
            if a.dimension == b.dimension:
                self.error(
                    d.right.unit.pos,
                    f'"{d.left.unit.text}" and "{d.right.unit.text}" are both units of {a.dimension}: '
                    "they convert without a declaration",
                )
                continue
            if not (d.left.value > 0 and d.right.value > 0):
                continue
            # left * a.scale [base a] == right * b.scale [base b]
            # (the constants as the decimals they are written as, not their float64 neighbours)
            r = _decimal(d.right.value) * b.scale / (_decimal(d.left.value) * a.scale)
            edges = self.edges.setdefault(d.analyte.text, [])
            for x, y, _ in edges:
                if {x, y} == {a.dimension, b.dimension}:
                    self.error(d.pos, f'"{d.analyte.text}" already converts {a.dimension} and {b.dimension}')
                    break
            else:
                edges.append((a.dimension, b.dimension, r))

    def _unit(self, n: ast.Num) -> units.Unit | None:
        u = units.find(n.unit.text)
        if u is None:
            self._unknown_unit(n.unit, [s for s, _, _ in units.spellings()])
        return u

    def _unknown_unit(self, unit: ast.Str, known: list[str]) -> None:
        self.error(unit.pos, f'unknown unit "{unit.text}"', suggestion_notes(unit.text, known))

    # -- the lexicon ---------------------------------------------------------------------

    @staticmethod
    def implicit_literals(used: set[str]) -> list[tuple[str, str, bool]]:
        """(class name, spelling, exact) of the spellings a file whose quantities read
        dimensions `used` reads as units: every spelling of those dimensions, and every other
        spelling (of another dimension, or a compound of none) that begins with one of them
        and goes on with no letter ("mg/kg", "mg/dL" after "mg"; "毫克/分升" after "毫克"), so
        that no quantity reads the head of a longer unit."""
        table = [(s, exact, u.dimension) for s, exact, u in units.spellings() if u.dimension not in NO_LITERALS]
        table += [(s, False, "compound") for s in units.compounds()]
        heads = [units.fold(s) for s, _, dim in table if dim in used]

        def extends(text: str) -> bool:
            t = units.fold(text)
            return any(t.startswith(h) and len(t) > len(h) and not t[len(h)].isalpha() for h in heads)

        return [(f"{IMPLICIT_PREFIX}{dim})", s, exact) for s, exact, dim in table if dim in used or extends(s)]

    # -- elements ------------------------------------------------------------------------

    def reaches(self, captures: dict, elements, analytes: list[str]) -> dict[str, _Reach | None]:
        """Per number capture, the quantity constants compared with it convert to (None: a
        number with no unit). A `percent` capture is a quantity of percent."""
        out: dict[str, _Reach | None] = {}
        for e in elements:
            if e.capture is None or e.capture.text not in captures:
                continue
            cap = captures[e.capture.text]
            dim = cap.dimension or ("percent" if isinstance(e.atom, ast.AtomPercent) else "")
            out[cap.name] = self.reach(ast.Name(dim, e.pos), analytes) if dim else None
        return out

    def element(
        self, atom: ast.AtomQuantity, analytes: list[str], unit_literals: list[tuple[int, str]]
    ) -> QuantityElement | None:
        """A quantity element of a rule whose pattern names classes `analytes`; `unit_literals`
        are the file's literals of unit classes: (lexeme code, text)."""
        reach = self.reach(atom.dimension, analytes)
        if reach is None:
            return None
        if reach.dimension == "percent":
            return QuantityElement("percent", [ir.LEX_PERCENT], [], {})
        conversions: dict[int, units.Conversion] = {}
        for code, text in unit_literals:
            u = units.find(text)
            if u is None:
                continue
            if u.dimension in reach.factors:
                conversions[code] = units.conversion(u.scale * reach.factors[u.dimension], u.offset)
        return QuantityElement(reach.dimension, [ir.LEX_NUMBER], sorted(conversions), conversions)

    def reach(self, dim: ast.Name, analytes: list[str]) -> _Reach | None:
        if units.dimension(dim.text) is None:
            names = list(units.dimensions())
            self.error(
                dim.pos,
                f'unknown dimension "{dim.text}" (dimensions: {", ".join(names)})',
                suggestion_notes(dim.text, names),
            )
            return None
        converting = [a for a in analytes if a in self.edges]
        if len(converting) > 1:
            self.error(
                dim.pos,
                f"the pattern names {len(converting)} analytes with conversions ({', '.join(converting)}): "
                "a quantity converts with one analyte's declarations; split the rule",
            )
            return None
        factors = {dim.text: Fraction(1)}
        frontier = [dim.text]
        edges = self.edges.get(converting[0], []) if converting else []
        while frontier:  # breadth first: each dimension by its shortest chain of declarations
            here = frontier.pop(0)
            for a, b, r in edges:
                for src, dst, ratio in ((a, b, r), (b, a, 1 / r)):
                    # x [base dst] = x / ratio [base src] = x / ratio * factors[src] [base dim]
                    if src == here and dst not in factors:
                        factors[dst] = factors[src] / ratio
                        frontier.append(dst)
        return _Reach(dim.text, factors)

    # -- constants -----------------------------------------------------------------------

    def constants(self, d: ast.RuleDecl, reaches: dict[str, _Reach | None]) -> ast.RuleDecl:
        """Rule `d` with every constant of a requirement set to its value in the base unit of
        the quantity it is compared with (`ast.Num.base`), each unit checked. `reaches` maps
        each number capture to its quantity (None: a number with no unit; a `percent`
        capture is a quantity of percent)."""
        stmts = []
        for s in d.stmts:
            if isinstance(s, ast.RequireIn):
                reach = self._operand_reach(s.operand, reaches)
                s = replace(
                    s, low=self._constant(s.low, s.operand, reach), high=self._constant(s.high, s.operand, reach)
                )
            elif isinstance(s, ast.RequireCmp):
                left, right = (self._operand_reach(o, reaches) for o in (s.left, s.right))
                if isinstance(s.left, ast.CaptureRead) and isinstance(s.right, ast.CaptureRead):
                    self._same_dimension(s, left, right)
                elif isinstance(s.left, ast.CaptureRead):
                    s = replace(s, right=self._constant(s.right, s.left, left))
                elif isinstance(s.right, ast.CaptureRead):
                    s = replace(s, left=self._constant(s.left, s.right, right))
            stmts.append(s)
        return replace(d, stmts=tuple(stmts))

    @staticmethod
    def _operand_reach(o: ast.Operand, reaches: dict[str, _Reach | None]) -> _Reach | None:
        return reaches.get(o.text) if isinstance(o, ast.Name) else None

    def _same_dimension(self, s: ast.RequireCmp, left: _Reach | None, right: _Reach | None) -> None:
        a = left.dimension if left else None
        b = right.dimension if right else None
        if a != b and {a, b} != {None, "percent"}:  # (a percent is a number as written)
            what = {None: "a number with no unit"}
            self.error(
                s.pos,
                f'"{s.left.text}" is {what.get(a, f"a quantity of {a}")} and "{s.right.text}" '
                f"{what.get(b, f'a quantity of {b}')}: compare quantities of one dimension",
            )

    def _constant(self, n: ast.Num, operand: ast.Operand, reach: _Reach | None) -> ast.Num:
        name = operand.text
        if reach is None:
            if n.unit is not None:
                why = "its value" if isinstance(operand, ast.Places) else f'"{name}" is a number with no unit'
                self.error(
                    n.unit.pos,
                    f"{why}: a constant compared with it has no unit (capture it as {name}:quantity(DIM) "
                    f"to compare it with {format_constant(n)})",
                )
            return n
        if n.unit is None:
            if reach.dimension == "percent":
                return n
            self.error(
                n.pos,
                f'"{name}" is a quantity of {reach.dimension}: write the unit of {n.value:g} '
                f"(e.g. {n.value:g} {units.base_unit(reach.dimension).shown})",
            )
            return n
        u = units.find(n.unit.text)
        if u is None:
            known = [s for s, _, x in units.spellings() if x.dimension in reach.factors]
            self._unknown_unit(n.unit, known)
            return n
        if u.dimension not in reach.factors:
            shown = ", ".join(sorted(reach.factors))
            self.error(
                n.unit.pos,
                f'"{n.unit.text}" is a unit of {u.dimension}, but "{name}" is a quantity of {reach.dimension}'
                + (f" (or, through convert, {shown})" if len(reach.factors) > 1 else ""),
                [f"units of {reach.dimension}: {', '.join(_some_units(reach.dimension))}"],
            )
            return n
        c = units.conversion(u.scale * reach.factors[u.dimension], u.offset)
        return replace(n, base=units.convert(n.value, c))


def add_unit_literals(compiler, pos: ast.Pos, used: set[str]) -> None:
    """The unit table's spellings a file whose quantities read dimensions `used` needs
    (`Quantities.implicit_literals`) as unit literals of `compiler`'s file, in a class per
    dimension, except the spellings the file declares itself (module docstring)."""
    for name, text, exact in Quantities.implicit_literals(used):
        if compiler.declared(text):
            continue
        index = compiler.implicit_class(name, "unit", pos)
        lit = compiler._add_literal(ast.Str(text, pos), index, exact)
        if lit is not None:
            compiler.classes[index].literal_ids.append(lit)


def quantities_used(decls) -> tuple[ast.Pos | None, set[str]]:
    """Where a file first uses a quantity element that reads units (or None), and the
    dimensions its quantities may read: theirs, and any a `convert` names."""
    first, used = None, set()
    for d in decls:
        if isinstance(d, ast.RuleDecl):
            for s in d.stmts:
                if isinstance(s, ast.MatchStmt):
                    for e in s.elements:
                        if isinstance(e.atom, ast.AtomQuantity) and e.atom.dimension.text not in NO_LITERALS:
                            first = first or e.atom.pos
                            used.add(e.atom.dimension.text)
        elif isinstance(d, ast.ConvertDecl):
            used |= {u.dimension for n in (d.left, d.right) if (u := units.find(n.unit.text)) is not None}
    return first, used


def class_names(elements) -> list[str]:
    """The classes a pattern names, in order (alternatives included): its analytes."""
    out: list[str] = []

    def visit(atom) -> None:
        if isinstance(atom, ast.AtomClass) and atom.name.text not in out:
            out.append(atom.name.text)
        elif isinstance(atom, ast.AtomAny):
            for o in atom.options:
                visit(o)

    for e in elements:
        visit(e.atom)
    return out


def _decimal(x: float) -> Fraction:
    """A constant as the decimal it was written as (its shortest round-trip form)."""
    return Fraction(repr(x))


def _some_units(dim: str) -> list[str]:
    return [u.shown for u in units.units() if u.dimension == dim][:8]
