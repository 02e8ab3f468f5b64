"""Check a parsed rule file and compile it to the IR (`ir.Program`).

Every problem is reported against the source — file:line:col, the line, a caret — and
all problems found in one pass are reported together.

Public surface: `compile_source(text, path)`, `compile_file(path)`, `compile_tree(tree, text)`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from heatc import ir
from heatc.errors import Diagnostic, HeatError, SourceText, suggestion_notes
from heatc.lang import ast
from heatc.lang.anchors import build_anchor_table
from heatc.lang.emit import emit_rules
from heatc.lang.lexicon import LiteralConflictError, LiteralSpec, build_lexer
from heatc.lang.parse import parse, read_source
from heatc.lang.quantities import Quantities, add_unit_literals, class_names, quantities_used
from heatc.lang.statements import check_statements
from heatc.lang.unparse import format_string
from heatc.semantics.lexing import (
    lex,
)

KNOWN_OPTIONS = ("chinese_numbers",)


def compile_file(path: str | Path) -> ir.Program:
    """Parse, check and compile a `.heat` rule file to the IR.

    Parameters
    ----------
    path : str or Path
        The rule file: a regular file of valid UTF-8 (a leading byte-order mark is dropped).

    Returns
    -------
    ir.Program
        The compiled rule set, which every backend runs (its `source` is `path`).

    Raises
    ------
    HeatError
        When the file cannot be read, does not parse (`parse`), or fails a check (`compile_tree`):
        every diagnostic at `path:line:column` with the line and a caret.
    """
    text = read_source(path)
    return compile_tree(parse(text, str(path)), text)


def compile_source(text: str, path: str = "<string>") -> ir.Program:
    """Parse, check and compile `.heat` source text to the IR.

    Parameters
    ----------
    text : str
        The source (a leading byte-order mark is dropped).
    path : str
        The name errors and the program give the source, as in `path:line:column`.

    Returns
    -------
    ir.Program
        The compiled rule set, which every backend runs.

    Raises
    ------
    HeatError
        When the text does not parse (`parse`) or fails a check (`compile_tree`): every
        diagnostic at `path:line:column` with the line and a caret.
    """
    text = text.removeprefix("\ufeff")
    return compile_tree(parse(text, path), text)


def compile_tree(tree: ast.RuleFile, text: str = "") -> ir.Program:
    """Check a parsed rule file (names, types, ranges, limits) and compile it to the IR.

    Parameters
    ----------
    tree : ast.RuleFile
        The syntax tree, from `parse`, `parse_file` or a heatmap's lowered cells.
    text : str
        The source `tree` was parsed from, so that errors quote its lines; "" quotes none.

    Returns
    -------
    ir.Program
        The compiled rule set: its tables and fixed-size state layout, rules in heat order.

    Raises
    ------
    HeatError
        With a diagnostic per problem found, each at `tree.path:line:column`: an unknown or
        duplicate name (with the closest known name as a note), a capture of the wrong type, a
        range that cannot hold, a rule set past a limit of the IR.
    """
    return _Compiler(tree, SourceText(tree.path, text)).run()


# --- resolved model ---------------------------------------------------------------------


@dataclass
class _Class:
    name: str
    kind: str
    exact: bool
    literal_ids: list[int]
    pos: ast.Pos
    anonymous: bool = False


@dataclass
class _Literal:
    text: str
    class_index: int
    exact: bool
    pos: ast.Pos


@dataclass
class _Capture:
    name: str
    kind: str  # number | class
    pos: ast.Pos
    key_classes: list[int] = field(default_factory=list)  # class ids a class capture can take
    dimension: str = ""  # a quantity's (docs/language.md, "Quantities")


def _places_operands(d: ast.RuleDecl) -> list[ast.Places]:
    out = []
    for s in d.stmts:
        if isinstance(s, ast.RequireCmp):
            out += [o for o in (s.left, s.right) if isinstance(o, ast.Places)]
        elif isinstance(s, ast.RequireIn) and isinstance(s.operand, ast.Places):
            out.append(s.operand)
    return out


def _literal_key(text: str, exact: bool) -> str:
    collapsed = re.sub(r"[ \t\n\v\f\r]+", " ", text)
    return collapsed if exact else "".join(c.lower() if c.isascii() else c for c in collapsed)


class _Compiler:
    def __init__(self, tree: ast.RuleFile, src: SourceText):
        self.tree = tree
        self.src = src
        self.diags: list[Diagnostic] = []
        self.classes: list[_Class] = []
        self.class_by_name: dict[str, int] = {}
        self.literals: list[_Literal] = []
        self.literal_by_key: dict[str, int] = {}
        self.anchors: dict[str, ast.AnchorDecl] = {}
        self.chinese_numbers = False
        self._anchor_literals: dict[int, int] = {}
        self._sources: dict[str, SourceText] = {}
        self.quantities = Quantities(self.error)

    def error(self, pos: ast.Pos, message: str, notes: list[str] | None = None) -> None:
        self.diags.append(self._source(pos.path).diagnostic(pos.line, pos.column, message, notes))

    def _source(self, path: str) -> SourceText:
        """The text a position refers to: the tree's own file, or another one it merged."""
        if not path or path == self.src.path:
            return self.src
        if path not in self._sources:
            try:
                text = read_source(path)
            except HeatError:
                text = ""
            self._sources[path] = SourceText(path, text)
        return self._sources[path]

    def checkpoint(self) -> None:
        if self.diags:
            raise HeatError(self.diags)

    # -- driver ------------------------------------------------------------------------

    def run(self) -> ir.Program:
        tree = self.tree
        name = tree.header.name.text if tree.header else _default_name(tree.path)
        title = tree.header.title.text if tree.header and tree.header.title else ""
        decls = tree.decls
        for d in decls:
            if isinstance(d, ast.OptionsDecl):
                self._options(d)
        for d in decls:
            if isinstance(d, ast.ClassDecl):
                self._class(d)
        self.quantities.converts([d for d in decls if isinstance(d, ast.ConvertDecl)], self.class_by_name)
        first, used = quantities_used(decls)
        if first is not None:
            add_unit_literals(self, first, used)
        for d in decls:
            if isinstance(d, ast.AnchorDecl):
                if d.name.text in self.anchors:
                    first = self.anchors[d.name.text].pos
                    self.error(
                        d.name.pos,
                        f'anchor "{d.name.text}" is declared twice',
                        [f"first declared at line {first.line}"],
                    )
                else:
                    self.anchors[d.name.text] = d
        at, barrier, window = self._triggers([d for d in decls if isinstance(d, ast.TriggersDecl)])
        policy = self._policy([d for d in decls if isinstance(d, ast.PolicyDecl)])
        rule_decls = [d for d in decls if isinstance(d, ast.RuleDecl)]
        self.checkpoint()
        rules = self._rules(rule_decls)  # may add anonymous classes for inline literals
        expects = self._expects([d for d in decls if isinstance(d, ast.ExpectDecl)], rule_decls)
        self.checkpoint()

        lexer = self._lexer()
        self.checkpoint()
        program = ir.Program(
            name=name,
            title=title,
            source=tree.path,
            chinese_numbers=self.chinese_numbers,
            lexer=lexer,
            classes=[ir.LexClass(c.name, c.kind, c.literal_ids, c.exact) for c in self.classes],
            literals=[ir.Literal(lit.text, lit.class_index, lit.exact) for lit in self.literals],
            rules=[],
            channels=[],
            anchor_groups=[],
            anchors=ir.AnchorTable(0, [], [], 0),
            code_flags=[],
            window=window,
            expects=expects,
            policy=policy,
        )
        self._check_literals(program)
        self._anchor_literals = build_anchor_table(program, self.anchors, self.literals, name, self.error)
        self.checkpoint()
        program.code_kinds = self._code_kinds()
        program.rules, program.channels = emit_rules(rules, self.classes, self.anchors, self.error, program.code_kinds)
        program.code_flags = self._code_flags(at, barrier, program.rules)
        self.checkpoint()
        return program

    # -- declarations ------------------------------------------------------------------

    def _options(self, d: ast.OptionsDecl) -> None:
        for flag in d.flags:
            if flag.text == "chinese_numbers":
                self.chinese_numbers = True
            else:
                self.error(
                    flag.pos,
                    f'unknown option "{flag.text}" (known options: {", ".join(KNOWN_OPTIONS)})',
                    suggestion_notes(flag.text, KNOWN_OPTIONS),
                )

    def _policy(self, decls: list[ast.PolicyDecl]) -> list[float]:
        """[pass, confirm] of the one `policy` declaration, or [] (the runtime's default)."""
        for d in decls[1:]:
            self.error(d.pos, "the policy is declared twice", [f"first declared at line {decls[0].pos.line}"])
        if not decls:
            return []
        d = decls[0]
        for num, word in ((d.pass_at, "pass"), (d.confirm_at, "confirm")):
            if not 0.0 <= num.value <= 1.0:
                self.error(num.pos, f"policy {word}: a confidence is between 0 and 1, got {num.value:g}")
        if d.confirm_at.value > d.pass_at.value:
            self.error(
                d.confirm_at.pos,
                f"policy confirm {d.confirm_at.value:g} is above pass {d.pass_at.value:g} "
                "(confirm is the lower cut-off: below it, escalate)",
            )
        return [d.pass_at.value, d.confirm_at.value]

    def _class(self, d: ast.ClassDecl) -> None:
        if d.name.text in self.class_by_name:
            first = self.classes[self.class_by_name[d.name.text]].pos
            self.error(d.name.pos, f'class "{d.name.text}" is declared twice', [f"first declared at line {first.line}"])
            return
        index = len(self.classes)
        cls = _Class(d.name.text, d.kind, d.exact, [], d.pos)
        self.classes.append(cls)
        self.class_by_name[d.name.text] = index
        for s in d.literals:
            lit_id = self._add_literal(s, index, d.exact)
            if lit_id is not None:
                cls.literal_ids.append(lit_id)

    def _add_literal(self, s: ast.Str, class_index: int, exact: bool) -> int | None:
        text = s.text
        if not text.strip():
            self.error(s.pos, "a literal cannot be empty or only whitespace")
            return None
        if text != text.strip(" \t\n\v\f\r"):
            self.error(s.pos, f"literal {format_string(text)} starts or ends with whitespace")
            return None
        if len(re.sub(r"[ \t\n\v\f\r]+", " ", text).encode("utf-8")) > ir.MAX_LEXEME:
            self.error(s.pos, f"literal {format_string(text)} is longer than {ir.MAX_LEXEME} bytes")
            return None
        key = _literal_key(text, exact)
        if key in self.literal_by_key:
            other = self.literals[self.literal_by_key[key]]
            owner = self.classes[other.class_index].name
            self.error(
                s.pos,
                f"literal {format_string(text)} is declared twice",
                [f'it is already in class "{owner}" (line {other.pos.line}); a literal belongs to one class'],
            )
            return None
        lit_id = len(self.literals)
        self.literals.append(_Literal(text, class_index, exact, s.pos))
        self.literal_by_key[key] = lit_id
        return lit_id

    def _resolve_class(self, name: ast.Name) -> int | None:
        if name.text in self.class_by_name:
            return self.class_by_name[name.text]
        named = [c.name for c in self.classes if not c.anonymous]
        self.error(name.pos, f'unknown class "{name.text}"', suggestion_notes(name.text, named))
        return None

    def _triggers(self, decls: list[ast.TriggersDecl]) -> tuple[set[int], set[int], int]:
        at: set[int] = set()
        barrier: set[int] = set()
        window = 0
        for d in decls:
            for t in d.stmts:
                if isinstance(t, ast.TriggerEvery):
                    n = t.tokens.value
                    if window:
                        self.error(t.pos, "the token window is set twice")
                    elif n != int(n) or not 1 <= n <= 1_000_000:
                        self.error(t.tokens.pos, "every N needs a whole number of tokens between 1 and 1000000")
                    else:
                        window = int(n)
                    continue
                target = at if isinstance(t, ast.TriggerAt) else barrier
                for name in t.classes:
                    c = self._resolve_class(name)
                    if c is not None:
                        target.add(c)
        return at, barrier, window

    # -- rules -------------------------------------------------------------------------

    def _rules(self, decls: list[ast.RuleDecl]) -> list[tuple]:
        """(decl, file order, [(element, accepted codes)], captures) per valid rule."""
        seen: dict[str, ast.RuleDecl] = {}
        out = []
        for order, d in enumerate(decls):
            if d.name.text in seen:
                self.error(
                    d.name.pos,
                    f'rule "{d.name.text}" is declared twice',
                    [f"first declared at line {seen[d.name.text].pos.line}"],
                )
                continue
            seen[d.name.text] = d
            resolved = self._rule(d)
            if resolved is not None:
                out.append((resolved[0], order, *resolved[1:]))
        return out

    def _rule(self, d: ast.RuleDecl):
        if d.heat is not None and not (0.0 <= d.heat.value <= 1.0):
            self.error(d.heat.pos, f"heat must be between 0 and 1, got {d.heat.value:g}")
        if d.freq is not None and not (0.0 < d.freq.value < math.inf):
            self.error(d.freq.pos, f"freq must be a positive number, got {d.freq.value:g}")
        matches = [s for s in d.stmts if isinstance(s, ast.MatchStmt)]
        whens = [s for s in d.stmts if isinstance(s, ast.WhenStmt)]
        if not matches:
            self.error(d.name.pos, f'rule "{d.name.text}" has no match statement')
            return None
        if len(matches) > 1:
            self.error(matches[1].pos, f'rule "{d.name.text}" has more than one match statement')
        if len(whens) > 1:
            self.error(whens[1].pos, f'rule "{d.name.text}" has more than one when statement')
        for w in whens[:1]:
            if w.anchor.text not in self.anchors:
                self.error(
                    w.anchor.pos, f'unknown anchor "{w.anchor.text}"', suggestion_notes(w.anchor.text, self.anchors)
                )
        elements = matches[0].elements
        if len(elements) > ir.MAX_ELEMENTS:
            self.error(
                matches[0].pos, f"a pattern has at most {ir.MAX_ELEMENTS} elements, this one has {len(elements)}"
            )
        captures: dict[str, _Capture] = {}
        resolved_elements: list[tuple] = []
        analytes = class_names(elements)
        for i, e in enumerate(elements):
            if e.gap is not None:
                g = e.gap.value
                if i == 0:
                    self.error(e.gap.pos, "a gap before the first element means nothing; remove it")
                elif g != int(g) or not 0 <= g <= ir.MAX_GAP:
                    self.error(e.gap.pos, f"a gap must be a whole number from 0 to {ir.MAX_GAP}, got {e.gap.value:g}")
            if isinstance(e.atom, ast.AtomQuantity):
                q = self.quantities.element(e.atom, analytes, self._unit_codes())
                if q is None:
                    continue
                if e.capture is not None and e.capture.text not in captures:
                    captures[e.capture.text] = _Capture(e.capture.text, "number", e.capture.pos, [], q.dimension)
                elif e.capture is not None:
                    self.error(e.capture.pos, f'capture "{e.capture.text}" is bound twice in one pattern')
                # the number, then right after it the unit, which converts the number's capture
                resolved_elements.append((replace(e, atom=ast.AtomNumber(e.atom.pos)), q.value_codes))
                if q.unit_codes:
                    convert = (e.capture.text if e.capture is not None else None, q.conversions)
                    resolved_elements.append((ast.Element(e.atom, None, None, e.atom.pos), q.unit_codes, convert))
                continue
            accepts, kind, key_classes = self._atom(e.atom)
            if e.capture is not None:
                if e.capture.text in captures:
                    first = captures[e.capture.text].pos
                    self.error(
                        e.capture.pos,
                        f'capture "{e.capture.text}" is bound twice in one pattern',
                        [f"first bound at line {first.line}, column {first.column}"],
                    )
                elif kind == "mixed":
                    self.error(
                        e.capture.pos, f'capture "{e.capture.text}" would hold a number or a class name: split the rule'
                    )
                else:
                    captures[e.capture.text] = _Capture(e.capture.text, kind, e.capture.pos, key_classes)
            resolved_elements.append((e, accepts))
        if len(resolved_elements) > ir.MAX_ELEMENTS >= len(elements):
            self.error(
                matches[0].pos,
                f"a pattern has at most {ir.MAX_ELEMENTS} elements, this one has {len(resolved_elements)} "
                "(a quantity is two: its number and its unit)",
            )
        before = len(self.diags)
        d = self.quantities.constants(d, self.quantities.reaches(captures, elements, analytes))
        if len(self.diags) == before:  # (a constant in a wrong unit would only mislead the checks)
            check_statements(d, captures, self.error)
        # `places(v)` reads a slot of its own, after the pattern's captures, that v's element fills
        for o in _places_operands(d):
            if o.capture.text in captures and o.text not in captures:
                captures[o.text] = _Capture(o.text, "number", o.pos)
        return d, resolved_elements, captures

    def declared(self, text: str) -> bool:
        """Whether the file declares a literal that matches `text` (in either case)."""
        return _literal_key(text, True) in self.literal_by_key or _literal_key(text, False) in self.literal_by_key

    def implicit_class(self, name: str, kind: str, pos: ast.Pos) -> int:
        """The index of an anonymous class the compiler adds (named so no source name clashes)."""
        if name not in self.class_by_name:
            self.class_by_name[name] = len(self.classes)
            self.classes.append(_Class(name, kind, False, [], pos, anonymous=True))
        return self.class_by_name[name]

    def _unit_codes(self) -> list[tuple[int, str]]:
        """(lexeme code, text) of every literal of a unit class."""
        return [
            (ir.LEX_LITERAL0 + i, lit.text)
            for i, lit in enumerate(self.literals)
            if self.classes[lit.class_index].kind == "unit"
        ]

    def _atom(self, atom: ast.Atom) -> tuple[list[int], str, list[int]]:
        """(accepted lexeme codes, capture kind, class ids) of an atom."""
        if isinstance(atom, ast.AtomNumber):
            return [ir.LEX_NUMBER], "number", []
        if isinstance(atom, ast.AtomPercent):
            return [ir.LEX_PERCENT], "number", []
        if isinstance(atom, ast.AtomDate):
            return [ir.LEX_DATE], "number", []
        if isinstance(atom, ast.AtomClass):
            c = self._resolve_class(atom.name)
            if c is None:
                return [], "class", []
            return [ir.LEX_LITERAL0 + i for i in self.classes[c].literal_ids], "class", [c]
        if isinstance(atom, ast.AtomLiteral):
            lit = self._inline_literal(atom.text)
            if lit is None:
                return [], "class", []
            return [ir.LEX_LITERAL0 + lit], "class", [self.literals[lit].class_index]
        codes: set[int] = set()
        kinds: set[str] = set()
        classes: list[int] = []
        for option in atom.options:
            c, k, cl = self._atom(option)
            codes.update(c)
            kinds.add(k)
            classes.extend(x for x in cl if x not in classes)
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        return sorted(codes), kind, classes

    def _inline_literal(self, s: ast.Str) -> int | None:
        """A quoted literal in a pattern: the declared literal, or a new one-literal class."""
        for exact in (True, False):
            key = _literal_key(s.text, exact)
            if key in self.literal_by_key and self.literals[self.literal_by_key[key]].exact == exact:
                return self.literal_by_key[key]
        name = format_string(s.text)
        if name in self.class_by_name:
            return self.classes[self.class_by_name[name]].literal_ids[0]
        index = len(self.classes)
        cls = _Class(name, "other", False, [], s.pos, anonymous=True)
        lit = self._add_literal(s, index, False)
        if lit is None:
            return None
        cls.literal_ids.append(lit)
        self.classes.append(cls)
        self.class_by_name[name] = index
        return lit

    def _expects(self, decls: list[ast.ExpectDecl], rules: list[ast.RuleDecl]) -> list[ir.Expect]:
        names = {r.name.text for r in rules}
        out = []
        for d in decls:
            for r in d.rules:
                if r.text not in names:
                    self.error(r.pos, f'unknown rule "{r.text}"', suggestion_notes(r.text, names))
            out.append(
                ir.Expect(d.text.text, d.outcome, [r.text for r in d.rules], d.pos.line, d.pos.path or self.tree.path)
            )
        return out

    # -- lexer-level checks ------------------------------------------------------------

    def _lexer(self) -> ir.Lexer | None:
        specs = [LiteralSpec(lit.text, lit.exact) for lit in self.literals]
        try:
            return build_lexer(specs, self.chinese_numbers)
        except LiteralConflictError as e:
            a, b = self.literals[e.a], self.literals[e.b]
            self.error(
                b.pos,
                f"literals {format_string(a.text)} and {format_string(b.text)} can match the same text",
                [f"the other is at line {a.pos.line}, column {a.pos.column}; drop one or mark a class exact"],
            )
            return None

    def _check_literals(self, program: ir.Program) -> None:
        bare = _bare_program(self.chinese_numbers)
        for i, lit in enumerate(self.literals):
            data = lit.text.encode("utf-8")
            as_bare = lex(bare, data)
            if len(as_bare) == 1 and as_bare[0].code in ir.VALUE_CODES and as_bare[0].end == len(data):
                what = (
                    "a date; match dates with `date`"
                    if as_bare[0].code == ir.LEX_DATE
                    else ("a number; match numbers with `number` or `percent`")
                )
                self.error(lit.pos, f"literal {format_string(lit.text)} reads as {what}")
                continue
            seen = lex(program, data)
            if [x.code for x in seen] != [ir.LEX_LITERAL0 + i]:
                shown = " ".join(program.code_name(x.code) for x in seen)
                self.error(
                    lit.pos, f"literal {format_string(lit.text)} can never be matched: its text reads as {shown}"
                )

    def _code_kinds(self) -> list[int]:
        kinds = [0] * (ir.LEX_LITERAL0 + len(self.literals))
        for code in ir.VALUE_CODES:
            kinds[code] = ir.KIND_VALUE
        for i, lit in enumerate(self.literals):
            kinds[ir.LEX_LITERAL0 + i] = ir.CLASS_KINDS[self.classes[lit.class_index].kind]
        return kinds

    def _code_flags(self, at: set[int], barrier: set[int], rules: list[ir.Rule]) -> list[int]:
        flags = [0] * (ir.LEX_LITERAL0 + len(self.literals))
        for i, lit in enumerate(self.literals):
            if lit.class_index in at:
                flags[ir.LEX_LITERAL0 + i] |= ir.FLAG_TRIGGER
            if lit.class_index in barrier:
                flags[ir.LEX_LITERAL0 + i] |= ir.FLAG_BARRIER
        for rule in rules:
            for code in rule.elements[0].accepts:
                flags[code] |= ir.FLAG_STARTS
        for code, flag in self._anchor_literals.items():
            flags[code] |= flag
        return flags


_BARE: dict[bool, ir.Program] = {}


def _bare_program(chinese: bool) -> ir.Program:
    """A program with no literals, to see how a text reads without the lexicon."""
    if chinese not in _BARE:
        _BARE[chinese] = ir.Program(
            name="bare",
            title="",
            source="",
            chinese_numbers=chinese,
            lexer=build_lexer([], chinese),
            classes=[],
            literals=[],
            rules=[],
            channels=[],
            anchor_groups=[],
            anchors=ir.AnchorTable(0, [], [], 0),
            code_flags=[0] * ir.LEX_LITERAL0,
            window=0,
        )
    return _BARE[chinese]


def _default_name(path: str) -> str:
    stem = Path(path).stem if path and not path.startswith("<") else "rules"
    return re.sub(r"[^A-Za-z0-9_]", "_", stem) or "rules"
