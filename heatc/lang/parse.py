"""`.heat` source → syntax tree (`heatc.lang.ast`), with errors a person can act on.

Public surface: `parse(text, path)`, `parse_file(path)`, `read_source(path, what)`, `grammar_text()`.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import lark
from lark import Lark, Token, Transformer, v_args

from heatc.errors import HeatError, SourceText
from heatc.lang import ast
from heatc_runtime.backends.files import UnreadableFile, read_file


# The grammar is data: grammar/heat.lark at the repository root, reached from the package
# through the link heatc/lang/heat.lark (a wheel holds the file itself).
def grammar_text() -> str:
    """The text of grammar/heat.lark."""
    from importlib.resources import files

    return (files("heatc.lang") / "heat.lark").read_text(encoding="utf-8")


# What each terminal means, in words (lark's own names are internal).
_TERMINAL_WORDS = {
    "NAME": "a name",
    "STRING": "a quoted string",
    "NUMBER": "a number",
    "CMP": "a comparison (<, <=, >, >=, ==, !=)",
    "CLASS_KIND": "a class kind (unit, keyword, constraint, punct, other)",
    "LOW_BRACKET": '"[" or "("',
    "HIGH_BRACKET": '"]" or ")"',
    "GAP": 'a gap (".." or "...")',
    "UNIT": "a unit (mg, mmol/L, °C, or one in quotes)",
    "PERCENT_DIM": '"percent"',
    "$END": "the end of the file",
}

RESERVED_WORDS = frozenset(
    "ruleset options class anchor domain triggers at every barrier rule heat freq observe policy when match "
    "require in consistent per lock expect passes rejects number percent date exact unit keyword "
    "constraint punct other quantity convert".split()
)


@functools.cache
def _parser() -> Lark:
    return Lark(
        grammar_text(),
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=False,
    )


MAX_SOURCE_BYTES = 256 << 20  # a rule file of 100,000 rules is about 10 MB
MAX_NESTING = 64  # syntax-tree levels: a rule nests about 6, each "(" of an atom two more


def read_source(path: str | Path, what: str = "file") -> str:
    """The text of a source file (a regular file, valid UTF-8; a leading BOM is dropped)."""
    p = Path(path)
    try:
        data = read_file(p, MAX_SOURCE_BYTES)
    except UnreadableFile as e:
        raise HeatError(SourceText(str(p), "").diagnostic(0, 0, f"cannot read {what}: {e}")) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise HeatError(SourceText(str(p), "").diagnostic(line, col, "the file is not valid UTF-8")) from None


def parse_file(path: str | Path) -> ast.RuleFile:
    """Parse a `.heat` rule file into its syntax tree (names and types are not checked yet).

    Parameters
    ----------
    path : str or Path
        The rule file: a regular file of valid UTF-8 (a leading byte-order mark is dropped),
        at most `MAX_SOURCE_BYTES`.

    Returns
    -------
    ast.RuleFile
        The file's declarations, each with its line and column; its `path` is `path`.

    Raises
    ------
    HeatError
        When the file cannot be read (missing, not a regular file, too large), is not valid
        UTF-8 (at the first bad byte's line:column), or does not parse (see `parse`).
    """
    return parse(read_source(path), str(path))


def parse(text: str, path: str = "<string>") -> ast.RuleFile:
    """Parse `.heat` source text into its syntax tree (names and types are not checked yet).

    Parameters
    ----------
    text : str
        The source (a leading byte-order mark is dropped).
    path : str
        The name errors and the tree give the source, as in `path:line:column`.

    Returns
    -------
    ast.RuleFile
        The declarations, each with its line and column.

    Raises
    ------
    HeatError
        On a syntax error: one diagnostic at `path:line:column`, the line with a caret under
        the column, and what was expected there. Also, so placed, for what the grammar takes
        but the language refuses (a reserved word as a name, a number beyond float64, a rule's
        `heat` given twice) and for atoms nested more than `MAX_NESTING` levels deep.
    """
    text = text.removeprefix("\ufeff")  # a byte-order mark, as some editors write
    src = SourceText(path, text)
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise HeatError(_syntax_diagnostic(src, e)) from None
    _check_nesting(src, tree)
    try:
        result = _ToAst(src).transform(tree)
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, HeatError):
            raise e.orig_exc from None
        raise
    return ast.RuleFile(result.header, result.decls, path)


def _check_nesting(src: SourceText, tree: lark.Tree) -> None:
    """Refuse a tree too deep for the recursive passes after parsing (atoms in parentheses
    nested hundreds deep), at the first node too deep."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            pos = _pos(node)
            raise HeatError(src.diagnostic(pos.line, pos.column, f"nested too deeply (more than {MAX_NESTING} levels)"))
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


# --- syntax errors --------------------------------------------------------------------


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    for term in _parser().terminals:
        if term.name == name and isinstance(term.pattern, lark.lexer.PatternStr):
            return f'"{term.pattern.value}"'
    return name.lower()


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "the end of the file"
    value = str(tok)
    if tok.type != "NAME" and value in RESERVED_WORDS:
        return f'the reserved word "{value}"'
    if tok.type == "STRING":
        return f"the string {value}"
    return f'"{value}"'


def _expected_phrase(expected: set[str]) -> str:
    words = sorted({_describe_terminal(t) for t in expected})
    if not words:
        return "something else"
    if len(words) == 1:
        return words[0]
    if len(words) > 8:
        return "one of " + ", ".join(words[:8]) + ", …"
    return "one of " + ", ".join(words[:-1]) + " or " + words[-1]


def _syntax_diagnostic(src: SourceText, e: lark.exceptions.UnexpectedInput):
    line, col = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        ch = src.text[e.pos_in_stream] if e.pos_in_stream < len(src.text) else ""
        if ch == '"':
            return src.diagnostic(line, col, 'unterminated string: a string must end with " on the same line')
        if ch == "\\":
            return src.diagnostic(line, col, "a backslash is only allowed inside a string")
        allowed = _expected_phrase(set(e.allowed or ()))
        return src.diagnostic(line, col, f"unexpected character {ch!r}, expected {allowed}")
    if isinstance(e, lark.exceptions.UnexpectedEOF):
        lines = src.text.splitlines() or [""]
        return src.diagnostic(
            len(lines), len(lines[-1]) + 1, f"unexpected end of file, expected {_expected_phrase(set(e.expected))}"
        )
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        expected = set(e.expected)
        if tok.type == "$END":
            lines = src.text.splitlines() or [""]
            return src.diagnostic(
                len(lines), len(lines[-1]) + 1, f"unexpected end of file, expected {_expected_phrase(expected)}"
            )
        if tok.type == "UNIT" and not re.match(r"[A-Za-z_]", str(tok)):
            # (a unit may be almost any text, so a stray character reads as one where none fits)
            return src.diagnostic(
                tok.line, tok.column, f"unexpected character {str(tok)[0]!r}, expected {_expected_phrase(expected)}"
            )
        message = f"expected {_expected_phrase(expected)}, found {_describe_token(tok)}"
        notes = []
        if "NAME" in expected and str(tok) in RESERVED_WORDS:
            notes.append(f'"{tok}" is a reserved word and cannot be used as a name')
        return src.diagnostic(tok.line, tok.column, message, notes)
    return src.diagnostic(line, col, "syntax error")


# --- tree → AST -----------------------------------------------------------------------

_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}


def _pos(node) -> ast.Pos:
    if isinstance(node, Token):
        return ast.Pos(node.line or 0, node.column or 0)
    meta = getattr(node, "meta", node)  # a tree node, or its Meta itself
    if not getattr(meta, "empty", True):
        return ast.Pos(meta.line, meta.column)
    return ast.Pos()


@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, src: SourceText):
        super().__init__()
        self.src = src

    def _p(self, node) -> ast.Pos:
        pos = _pos(node)
        return ast.Pos(pos.line, pos.column, self.src.path)

    def _error(self, pos: ast.Pos, message: str) -> HeatError:
        return HeatError(self.src.diagnostic(pos.line, pos.column, message))

    # terminals
    def NAME(self, tok):  # noqa: N802 (lark calls terminals by their name)
        # The contextual lexer lets a keyword through as a NAME where no keyword fits;
        # refuse it, or a class called "number" could never be referred to.
        if str(tok) in RESERVED_WORDS:
            raise self._error(self._p(tok), f'"{tok}" is a reserved word and cannot be used as a name')
        return ast.Name(str(tok), self._p(tok))

    def STRING(self, tok):  # noqa: N802
        body = str(tok)[1:-1]

        def unescape(m: re.Match) -> str:
            esc = m.group(1)
            if esc[0] == "u" and len(esc) == 5:
                code = int(esc[1:], 16)
                if 0xD800 <= code <= 0xDFFF:
                    raise self._error(
                        ast.Pos(tok.line, tok.column + m.start() + 1),
                        f'"\\{esc}" is half of a UTF-16 surrogate pair, not a character: write the character itself',
                    )
                return chr(code)
            if esc in _SIMPLE_ESCAPES:
                return _SIMPLE_ESCAPES[esc]
            offset = m.start() + 1
            raise self._error(
                ast.Pos(tok.line, tok.column + offset),
                f'unknown escape "\\{esc}" (use \\", \\\\, \\n, \\t or \\uXXXX)',
            )

        return ast.Str(_ESCAPE.sub(unescape, body), self._p(tok))

    def NUMBER(self, tok):  # noqa: N802
        value = float(str(tok))
        if not math.isfinite(value):
            shown = str(tok) if len(tok) <= 30 else str(tok)[:29] + "…"
            raise self._error(self._p(tok), f"the number {shown} is too large (beyond a 64-bit float)")
        return ast.Num(value, self._p(tok))

    def __default_token__(self, tok):
        return tok

    # declarations
    def start(self, meta, children):
        header = None
        decls = []
        for c in children:
            if isinstance(c, ast.RulesetDecl):
                header = c
            else:
                decls.append(c)
        return _Parsed(header, tuple(decls))

    def ruleset_decl(self, meta, children):
        title = children[1] if len(children) > 1 else None
        return ast.RulesetDecl(children[0], title, self._p(meta))

    def options_decl(self, meta, children):
        return ast.OptionsDecl(tuple(children), self._p(meta))

    def string_list(self, meta, children):
        return tuple(children)

    def name_list(self, meta, children):
        return tuple(children)

    def class_decl(self, meta, children):
        name, kind, *rest = children
        exact = len(rest) == 2
        return ast.ClassDecl(name, str(kind), exact, rest[-1], self._p(meta))

    def anchor_decl(self, meta, children):
        if len(children) == 3:
            name, domain, terms = children
        else:
            (name, terms), domain = children, None
        return ast.AnchorDecl(name, domain, terms, self._p(meta))

    def triggers_decl(self, meta, children):
        return ast.TriggersDecl(tuple(children), self._p(meta))

    def trigger_at(self, meta, children):
        return ast.TriggerAt(children[0], self._p(meta))

    def trigger_every(self, meta, children):
        return ast.TriggerEvery(children[0], self._p(meta))

    def trigger_barrier(self, meta, children):
        return ast.TriggerBarrier(children[0], self._p(meta))

    def rule_decl(self, meta, children):
        name = children[0]
        description = None
        heat = freq = None
        observe = False
        stmts = []
        for c in children[1:]:
            if isinstance(c, ast.Str):
                description = c
            elif isinstance(c, tuple) and c[0] == "heat":
                if heat is not None:
                    raise self._error(c[1].pos, "heat is given twice")
                heat = c[1]
            elif isinstance(c, tuple) and c[0] == "freq":
                if freq is not None:
                    raise self._error(c[1].pos, "freq is given twice")
                freq = c[1]
            elif isinstance(c, tuple) and c[0] == "observe":
                if observe:
                    raise self._error(c[1], "observe is given twice")
                observe = True
            else:
                stmts.append(c)
        return ast.RuleDecl(name, description, heat, freq, tuple(stmts), self._p(meta), observe)

    def heat_attr(self, meta, children):
        return ("heat", children[0])

    def freq_attr(self, meta, children):
        return ("freq", children[0])

    def observe_attr(self, meta, children):
        return ("observe", self._p(meta))

    def policy_decl(self, meta, children):
        return ast.PolicyDecl(children[0], children[1], self._p(meta))

    def when_stmt(self, meta, children):
        return ast.WhenStmt(children[0], self._p(meta))

    def match_stmt(self, meta, children):
        return ast.MatchStmt(tuple(children), self._p(meta))

    def element(self, meta, children):
        gap = capture = None
        across = False
        for c in children[:-1]:
            if isinstance(c, tuple) and c[0] == "gap":
                gap, across = c[1], c[2]
            elif isinstance(c, tuple) and c[0] == "capture":
                capture = c[1]
        return ast.Element(children[-1], gap, capture, self._p(meta), across)

    def gap(self, meta, children):
        return ("gap", children[1], str(children[0]) == "...")

    def capture(self, meta, children):
        return ("capture", children[0])

    def atom_class(self, meta, children):
        return ast.AtomClass(children[0], self._p(meta))

    def atom_literal(self, meta, children):
        return ast.AtomLiteral(children[0], self._p(meta))

    def quantity(self, meta, children):
        tok = children[0]
        dim = tok if isinstance(tok, ast.Name) else ast.Name(str(tok), self._p(tok))
        return ast.AtomQuantity(dim, self._p(meta))

    def bound(self, meta, children):
        num = children[0]
        return ast.Num(num.value, num.pos, children[1]) if len(children) > 1 else num

    def unit(self, meta, children):
        tok = children[0]
        if isinstance(tok, ast.Str):
            if not tok.text.strip():
                raise self._error(tok.pos, "a unit cannot be empty")
            return tok
        return ast.Str(str(tok), self._p(tok))

    def convert_decl(self, meta, children):
        analyte, left, left_unit, right, right_unit = children
        return ast.ConvertDecl(
            analyte,
            ast.Num(left.value, left.pos, left_unit),
            ast.Num(right.value, right.pos, right_unit),
            self._p(meta),
        )

    def atom_number(self, meta, children):
        return ast.AtomNumber(self._p(meta))

    def atom_percent(self, meta, children):
        return ast.AtomPercent(self._p(meta))

    def atom_date(self, meta, children):
        return ast.AtomDate(self._p(meta))

    def atom_any(self, meta, children):
        flat: list[ast.Atom] = []
        for c in children:
            flat.extend(c.options if isinstance(c, ast.AtomAny) else (c,))
        return ast.AtomAny(tuple(flat), self._p(meta))

    def operand(self, meta, children):
        return children[0]

    def places_of(self, meta, children):
        function, capture = children
        if function.text != "places":
            raise self._error(
                function.pos, f'unknown function "{function.text}": the one an operand may call is places(CAPTURE)'
            )
        return ast.Places(capture, self._p(meta))

    def require_cmp(self, meta, children):
        left, op, right = children
        return ast.RequireCmp(left, str(op), right, self._p(meta))

    def require_in(self, meta, children):
        operand, low_bracket, low, high, high_bracket = children
        return ast.RequireIn(operand, low, high, str(low_bracket) == "[", str(high_bracket) == "]", self._p(meta))

    def consistent_stmt(self, meta, children):
        factor = next((c for c in children[1:] if isinstance(c, ast.Within)), None)
        key = next((c for c in children[1:] if isinstance(c, ast.Name)), None)
        return ast.ConsistentStmt(children[0], key, self._p(meta), factor)

    def within(self, meta, children):
        return ast.Within(children[0], self._p(meta))

    def lock_stmt(self, meta, children):
        return ast.LockStmt(children[0], children[1], self._p(meta))

    def expect_decl(self, meta, children):
        text, (outcome, rules) = children
        return ast.ExpectDecl(text, outcome, rules, self._p(meta))

    def expect_passes(self, meta, children):
        return ("passes", children[0] if children else ())

    def expect_rejects(self, meta, children):
        return ("rejects", children[0])


class _Parsed:
    def __init__(self, header, decls):
        self.header = header
        self.decls = decls
