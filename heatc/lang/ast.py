"""Syntax tree of a `.heat` file, as parsed — before any name is resolved.

Nodes are frozen dataclasses. Source positions are carried in `pos` fields that take no
part in equality, so `parse(print(tree)) == tree` compares structure only.
Declarations keep their file order.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pos:
    line: int = 0
    column: int = 0
    path: str = ""  # the file, when a tree mixes files (a heatmap and the rule files it merges)


def _pos() -> Pos:
    return field(default=Pos(), compare=False, repr=False)


@dataclass(frozen=True)
class Name:
    text: str
    pos: Pos = _pos()


@dataclass(frozen=True)
class Str:
    """A string literal, already unescaped."""

    text: str
    pos: Pos = _pos()


@dataclass(frozen=True)
class Num:
    """A numeric constant; in a requirement or a `convert`, with the unit it is written in
    (`250 mg`), if any."""

    value: float
    pos: Pos = _pos()
    unit: Str | None = None
    # the value in the base unit of the quantity it bounds: set by the compiler, which reads
    # `const`; no part of the syntax (it takes no part in equality, the printer ignores it)
    base: float | None = field(default=None, compare=False, repr=False)

    @property
    def const(self) -> float:
        """The value a requirement compares: in the base unit when the constant has a unit."""
        return self.value if self.base is None else self.base


@dataclass(frozen=True)
class RulesetDecl:
    name: Name
    title: Str | None = None
    pos: Pos = _pos()


@dataclass(frozen=True)
class OptionsDecl:
    flags: tuple[Name, ...]
    pos: Pos = _pos()


CLASS_KINDS = ("unit", "keyword", "constraint", "punct", "other")


@dataclass(frozen=True)
class ClassDecl:
    name: Name
    kind: str
    exact: bool
    literals: tuple[Str, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class AnchorDecl:
    name: Name
    domain: Str | None
    terms: tuple[Str, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class TriggerAt:
    classes: tuple[Name, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class TriggerEvery:
    tokens: Num
    pos: Pos = _pos()


@dataclass(frozen=True)
class TriggerBarrier:
    classes: tuple[Name, ...]
    pos: Pos = _pos()


TriggerStmt = TriggerAt | TriggerEvery | TriggerBarrier


@dataclass(frozen=True)
class TriggersDecl:
    stmts: tuple[TriggerStmt, ...]
    pos: Pos = _pos()


# --- patterns -------------------------------------------------------------------------


@dataclass(frozen=True)
class AtomClass:
    name: Name
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomLiteral:
    text: Str
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomNumber:
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomPercent:
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomDate:
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomAny:
    """`(a | b | ...)`; alternatives are never themselves `AtomAny` after parsing."""

    options: tuple[Atom, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class AtomQuantity:
    """`quantity(DIM)`: a number and the unit after it, as a value in DIM's base unit."""

    dimension: Name
    pos: Pos = _pos()


Atom = AtomClass | AtomLiteral | AtomNumber | AtomPercent | AtomDate | AtomAny | AtomQuantity


@dataclass(frozen=True)
class Element:
    atom: Atom
    gap: Num | None = None
    capture: Name | None = None
    pos: Pos = _pos()
    across: bool = False  # `...N`: the gap may skip values and keywords too (docs/language.md)


# --- rule statements ------------------------------------------------------------------


@dataclass(frozen=True)
class WhenStmt:
    anchor: Name
    pos: Pos = _pos()


@dataclass(frozen=True)
class MatchStmt:
    elements: tuple[Element, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class Places:
    """`places(v)`: the digits capture v's value is written with after its decimal point."""

    capture: Name
    pos: Pos = _pos()

    @property
    def text(self) -> str:
        return places_capture_name(self.capture.text)


def places_capture_name(capture: str) -> str:
    """The name of the capture slot that holds `places(capture)` (it shows in events)."""
    return f"places({capture})"


# an operand that reads a capture slot: a capture's value, or its places
CaptureRead = Name | Places
Operand = Name | Num | Places
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True)
class RequireCmp:
    left: Operand
    op: str
    right: Operand
    pos: Pos = _pos()


@dataclass(frozen=True)
class RequireIn:
    operand: Operand
    low: Num
    high: Num
    low_closed: bool
    high_closed: bool
    pos: Pos = _pos()


@dataclass(frozen=True)
class Within:
    """`within factor F`: a magnitude band instead of one value (docs/language.md)."""

    factor: Num
    pos: Pos = _pos()


@dataclass(frozen=True)
class ConsistentStmt:
    capture: Name
    key: Name | None = None
    pos: Pos = _pos()
    within: Within | None = None


@dataclass(frozen=True)
class LockStmt:
    channel: Name
    capture: Name
    pos: Pos = _pos()


RuleStmt = WhenStmt | MatchStmt | RequireCmp | RequireIn | ConsistentStmt | LockStmt


@dataclass(frozen=True)
class RuleDecl:
    name: Name
    description: Str | None
    heat: Num | None
    freq: Num | None
    stmts: tuple[RuleStmt, ...]
    pos: Pos = _pos()
    # observe-only: the rule reports, a confidence policy never acts on it (its heat weighs 0)
    observe: bool = False


@dataclass(frozen=True)
class ExpectDecl:
    text: Str
    outcome: str  # "passes" | "rejects"
    rules: tuple[Name, ...]
    pos: Pos = _pos()


@dataclass(frozen=True)
class PolicyDecl:
    """`policy pass P confirm C`: the confidence cut-offs of the rule set's audit reports."""

    pass_at: Num
    confirm_at: Num
    pos: Pos = _pos()


@dataclass(frozen=True)
class ConvertDecl:
    """`convert ANALYTE 1 mmol/L = 18.016 mg/dL`: how one analyte's quantities of two
    dimensions convert (both constants carry a unit)."""

    analyte: Name
    left: Num
    right: Num
    pos: Pos = _pos()


Decl = OptionsDecl | ClassDecl | AnchorDecl | TriggersDecl | RuleDecl | ExpectDecl | PolicyDecl | ConvertDecl


@dataclass(frozen=True)
class RuleFile:
    header: RulesetDecl | None
    decls: tuple[Decl, ...]
    path: str = field(default="<string>", compare=False, repr=False)
