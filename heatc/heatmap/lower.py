"""Lower a heatmap to rules: every cell at or above the sensitivity threshold becomes a rule
of the DSL, next to the categories, anchors, triggers and hand-written rule files the
heatmap names. The result is a syntax tree, so `heatc lower` can print it as `.heat` source
that a person reads, edits and commits. docs/heatmap.md describes the policy.

Public surface: `lower(heatmap) -> Lowered`, `margin_range(stats, spread, factor, additive)`,
`cell_range(cell, heatmap)`, `readable(x, dimension)`, `round_out`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from heatc import units
from heatc.heatmap.format import BUILTIN_CATEGORIES, Cell, Heatmap, Stats
from heatc.lang import ast
from heatc.lang.parse import parse_file

NOWHERE = ast.Pos()


@dataclass
class Lowered:
    tree: ast.RuleFile
    source_cell: dict[str, str] = field(default_factory=dict)  # rule name → cell id (or the rule file)
    cell_index: dict[str, int] = field(default_factory=dict)  # rule name → its cell's index in heatmap.cells
    skipped: list[tuple[Cell, str]] = field(default_factory=list)  # cells not lowered, and why


def round_out(x: float, up: bool) -> float:
    """Round outwards to 3 significant figures, so the range reads well and never shrinks."""
    if x == 0 or not math.isfinite(x):
        return x
    exponent = math.floor(math.log10(abs(x))) - 2
    q = x / 10**exponent
    if abs(q - round(q)) < 1e-9 * abs(q):  # 40.9 / 0.1 is 408.99999999999994 in binary
        q = round(q)
    digits = math.ceil(q) if up else math.floor(q)
    return float(f"{digits}e{exponent}")  # the decimal itself, not digits × a rounded power of ten


def margin_range(stats: Stats, spread: float, factor: float, additive: bool = False) -> tuple[float, float]:
    """The plausible range for values like the ones seen, from the 1st–99th percentile (min–max
    when the percentiles are missing). Positive quantities widen in log space — divided and
    multiplied by `factor` — which keeps a dropped decimal point or a wrong unit out while
    merely abnormal values pass; quantities that reach zero widen by `spread` × the width
    on each side, never below 0 when no negative value was seen — and so do quantities on an
    interval scale (`additive`: a temperature in kelvin, where twice the value is no slip)."""
    lo = stats.q01 if stats.q01 is not None else stats.min
    hi = stats.q99 if stats.q99 is not None else stats.max
    if lo is None or hi is None:
        raise ValueError("stats need q01 and q99, or min and max")
    if lo > 0 and not additive:
        low, high = lo / factor, hi * factor
    else:
        width = hi - lo
        low, high = lo - spread * width, hi + spread * width
        if (stats.min if stats.min is not None else lo) >= 0:
            low = max(low, 0.0)
    return round_out(low, up=False), round_out(high, up=True)


def cell_range(cell: Cell, hm: Heatmap) -> tuple[float | None, float | None]:
    """A range cell's range: its own, or the margin policy's around its stats (a quantity in
    its base unit; on an interval scale, a temperature, widened additively)."""
    if cell.range is not None:
        return cell.range
    additive = bool(cell.dimension) and any(u.offset for u in units.units() if u.dimension == cell.dimension)
    return margin_range(cell.stats, hm.margin_spread, hm.margin_factor, additive)


def _rule_for(cell: Cell, hm: Heatmap, name: str) -> ast.RuleDecl:
    # Every node points at the cell in the heatmap, so a compile error names its line.
    here = ast.Pos(cell.where.line, cell.where.column, str(hm.path))

    def _n(x: float) -> ast.Num:
        return ast.Num(float(x), here)

    def _name(text: str) -> ast.Name:
        return ast.Name(text, here)

    def _atom(category: str) -> ast.Atom:
        if category == "number":
            return ast.AtomNumber(here)
        if category == "percent":
            return ast.AtomPercent(here)
        if category == "date":
            return ast.AtomDate(here)
        return ast.AtomClass(_name(category), here)

    first, second = cell.pair
    value_first = first in BUILTIN_CATEGORIES
    stmts: list[ast.RuleStmt] = []
    if cell.when:
        stmts.append(ast.WhenStmt(_name(cell.when), here))
    gap = _n(cell.gap) if cell.gap else None
    if value_first and not second:  # a value alone: [date]
        elements = [ast.Element(_atom(first), capture=_name("v"), pos=here)]
    elif cell.reads_after:  # a number, its unit, then a keyword: [number, daily], unit mg
        elements = [
            ast.Element(_atom(first), capture=_name("v"), pos=here),
            ast.Element(_atom(cell.unit), pos=here),
            ast.Element(_atom(second), gap, pos=here),
        ]
    elif value_first:  # a number and the unit after it: [number, mg_dl]
        elements = [ast.Element(_atom(first), capture=_name("v"), pos=here), ast.Element(_atom(second), pos=here)]
    elif cell.dimension:  # a quantity, in any unit of its dimension: [metformin, number], mass
        elements = [
            ast.Element(_atom(first), pos=here),
            ast.Element(ast.AtomQuantity(_name(cell.dimension), here), gap, _name("v"), here),
        ]
    elif cell.check == "lock" and second not in BUILTIN_CATEGORIES:  # a class-valued channel
        elements = [ast.Element(_atom(first), pos=here), ast.Element(_atom(second), gap, _name("v"), here)]
    else:
        key = _name("k") if cell.check == "consistent" else None
        elements = [ast.Element(_atom(first), capture=key, pos=here), ast.Element(_atom(second), gap, _name("v"), here)]
        if cell.unit:
            unit_gap = _n(1) if cell.check == "consistent" else None
            elements.append(ast.Element(_unit_atom(cell, hm, _atom, here), unit_gap, pos=here))
    stmts.append(ast.MatchStmt(tuple(elements), here))
    if cell.check == "range":
        lo, hi = cell_range(cell, hm)
        bound = _n
        if cell.dimension:  # bounds in units a reader knows: [250 mg, 3 g], not [0.25, 3]

            def bound(x: float, dim: str = cell.dimension) -> ast.Num:
                value, unit = readable(x, dim)
                return ast.Num(value, here, ast.Str(unit, here))

        if lo is None:  # an open side: the bound no error needs is left out
            stmts.append(ast.RequireCmp(_name("v"), "<=", bound(hi), here))
        elif hi is None:
            stmts.append(ast.RequireCmp(_name("v"), ">=", bound(lo), here))
        else:
            stmts.append(ast.RequireIn(_name("v"), bound(lo), bound(hi), True, True, here))
        if cell.places is not None:  # written to a precision a slipped decimal point changes
            stmts.append(ast.RequireCmp(ast.Places(_name("v"), here), "<=", _n(cell.places), here))
        if cell.band is not None:  # and a document's values within a factor of each other
            stmts.append(ast.ConsistentStmt(_name("v"), None, here, ast.Within(_n(cell.band), here)))
    elif cell.check == "consistent":
        stmts.append(ast.ConsistentStmt(_name("v"), _name("k"), here))
    else:
        stmts.append(ast.LockStmt(_name(cell.channel), _name("v"), here))
    description = cell.description or f"cell {cell.id}: score {cell.score:g}, support {cell.support}"
    return ast.RuleDecl(
        _name(name),
        ast.Str(description, here),
        _n(cell.score),
        _n(cell.freq) if cell.freq != 1.0 else None,
        tuple(stmts),
        here,
        cell.observe,
    )


# units a bound is printed in: decimal multiples of the base unit, and the clinical scales of
# temperature (no lb, oz, inch or psi: a learned range reads in metric units)
_SHOWN = {
    "mass": ("mcg", "mg", "g", "kg"),
    "volume": ("µL", "mL", "L"),
    "time": ("s", "min", "h", "d"),
    "length": ("mm", "cm", "m", "km"),
    "pressure": ("Pa", "kPa"),
    "temperature": ("°C",),
    "rate": ("/min",),
    "mass_concentration": ("ng/mL", "mg/L", "mg/dL", "g/dL"),
    "amount_concentration": ("nmol/L", "µmol/L", "mmol/L", "mol/L"),
    "equivalent_concentration": ("µEq/L", "mEq/L", "Eq/L"),
    "percent": ("%",),
}


def readable(x: float, dimension: str) -> tuple[float, str]:
    """A value in a dimension's base unit as (value, unit) in the largest of the dimension's
    printed units in which it is at least 1 (the smallest when none), exactly: the decimal
    `x` is written as, divided by the unit's scale. The compiler converts it back with the
    unit's own operations (heatc.units), which give `x` again for the values a range holds."""
    shown = [units.find(u) for u in _SHOWN.get(dimension, ())] or [units.base_unit(dimension)]
    exact = Fraction(repr(x))
    best = shown[0]
    for u in shown:
        if exact / u.scale - u.offset >= 1:
            best = u
    value = exact / best.scale - best.offset
    return float(value), best.shown


def _unit_atom(cell: Cell, hm: Heatmap, atom: Callable[[str], ast.Atom], here: ast.Pos) -> ast.Atom:
    """The unit after a keyword cell's value. A `punct` category there says the value is
    written bare, ending an item: it or the heatmap's barrier follows the value ("sodium 138,
    potassium 4.0." — never "sodium bicarbonate 650 mg")."""
    category = hm.categories.get(cell.unit or "")
    if category is None or category.kind != "punct":
        return atom(cell.unit)
    ends = [cell.unit, *(b for b in hm.triggers.get("barrier", ()) if b != cell.unit)]
    return atom(ends[0]) if len(ends) == 1 else ast.AtomAny(tuple(atom(x) for x in ends), here)


def _rule_name(cell: Cell, taken: set[str]) -> str:
    parts = [p for p in (*cell.pair, cell.unit, cell.dimension) if p and p not in ("number",)]
    base = cell.name or ("_".join(parts) if cell.pair[1] else f"any_{cell.pair[0]}") or "cell"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def lower(hm: Heatmap) -> Lowered:
    path = str(hm.path)

    def at(where) -> ast.Pos:
        return ast.Pos(where.line, where.column, path)

    def _name(text: str, pos: ast.Pos = NOWHERE) -> ast.Name:
        return ast.Name(text, pos)

    def _n(x: float) -> ast.Num:
        return ast.Num(float(x))

    decls: list[ast.Decl] = []
    if hm.chinese_numbers:
        decls.append(ast.OptionsDecl((_name("chinese_numbers"),)))
    for c in hm.categories.values():
        p = at(c.where)
        decls.append(ast.ClassDecl(_name(c.name, p), c.kind, c.exact, tuple(ast.Str(x, p) for x in c.literals), p))
    for a, (domain, terms) in hm.anchors.items():
        decls.append(ast.AnchorDecl(_name(a), ast.Str(domain) if domain else None, tuple(ast.Str(t) for t in terms)))
    trig: list[ast.TriggerStmt] = []
    if hm.triggers.get("at"):
        trig.append(ast.TriggerAt(tuple(_name(x) for x in hm.triggers["at"])))
    if hm.triggers.get("every"):
        trig.append(ast.TriggerEvery(_n(hm.triggers["every"])))
    if hm.triggers.get("barrier"):
        trig.append(ast.TriggerBarrier(tuple(_name(x) for x in hm.triggers["barrier"])))
    if trig:
        decls.append(ast.TriggersDecl(tuple(trig)))
    if hm.policy is not None:
        decls.append(ast.PolicyDecl(_n(hm.policy[0]), _n(hm.policy[1])))

    out = Lowered(ast.RuleFile(None, ()))
    hot = [c for c in hm.cells if c.score >= hm.sensitivity]
    for c in hm.cells:
        if c.score < hm.sensitivity:
            out.skipped.append((c, f"score {c.score:g} below the sensitivity threshold {hm.sensitivity:g}"))
    hot.sort(key=lambda c: -c.score)
    if hm.top_k is not None:
        for c in hot[hm.top_k :]:
            out.skipped.append((c, f"outside the top {hm.top_k}"))
        hot = hot[: hm.top_k]
    taken: set[str] = set()
    index = {id(c): i for i, c in enumerate(hm.cells)}
    for c in sorted(hot, key=lambda c: (c.where.line, c.where.column)):  # file order, for stable output
        name = _rule_name(c, taken)
        taken.add(name)
        decls.append(_rule_for(c, hm, name))
        out.source_cell[name] = c.id
        out.cell_index[name] = index[id(c)]

    for rule_file in hm.rule_files:
        extra = parse_file(rule_file)
        for d in extra.decls:
            if isinstance(d, ast.RuleDecl):
                out.source_cell[d.name.text] = f"rules:{rule_file.name}"
        decls.extend(extra.decls)
    for text, outcome, rules, line in hm.expects:
        p = ast.Pos(line, 1, path)
        decls.append(ast.ExpectDecl(ast.Str(text, p), outcome, tuple(_name(r, p) for r in rules), p))
    title = ast.Str(hm.title) if hm.title else None
    out.tree = ast.RuleFile(ast.RulesetDecl(_name(hm.name), title), tuple(decls), str(hm.path))
    return out
