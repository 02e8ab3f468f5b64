"""Syntax tree → canonical `.heat` source. `parse(format_file(t)) == t` for every tree the
parser can produce (a property test checks it on generated trees).

Public surface: `format_file(tree)`, `format_number(x)`, `format_string(s)`,
`format_requirement(stmt)`.
"""

from __future__ import annotations

import re

from heatc.lang import ast

# a unit written bare (grammar/heat.lark, UNIT); any other is quoted
_BARE_UNIT = re.compile(r'[^\s,\[\]()={}<>!"#0-9+\-.][^\s,\[\]()={}<>!"#]*')


def format_number(x: float) -> str:
    """Shortest text that reads back as the same float64 (`10`, `0.5`, `1e+20`)."""
    if x == int(x) and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


def format_string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04x}")
        elif ord(ch) > 0xFFFF:
            # \\u takes four hex digits: write astral characters as they are.
            out.append(ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_unit(unit: str) -> str:
    """A unit as written after a constant: bare when the grammar reads it so, else quoted."""
    return unit if _BARE_UNIT.fullmatch(unit) and unit not in _RESERVED else format_string(unit)


# words the grammar reads as keywords where a unit may stand (after a constant)
_RESERVED = frozenset("require match when consistent lock rule class expect".split())


def format_constant(n: ast.Num) -> str:
    """A constant with its unit, if any: `250 mg`."""
    return format_number(n.value) + (" " + format_unit(n.unit.text) if n.unit is not None else "")


def _operand(o: ast.Operand) -> str:
    return o.text if isinstance(o, ast.CaptureRead) else format_constant(o)


def format_requirement(stmt: ast.RequireCmp | ast.RequireIn) -> str:
    """The canonical text of a requirement, without `require` (used in reports)."""
    if isinstance(stmt, ast.RequireCmp):
        return f"{_operand(stmt.left)} {stmt.op} {_operand(stmt.right)}"
    lo = "[" if stmt.low_closed else "("
    hi = "]" if stmt.high_closed else ")"
    return f"{_operand(stmt.operand)} in {lo}{format_constant(stmt.low)}, {format_constant(stmt.high)}{hi}"


def format_atom(a: ast.Atom) -> str:
    if isinstance(a, ast.AtomClass):
        return a.name.text
    if isinstance(a, ast.AtomLiteral):
        return format_string(a.text.text)
    if isinstance(a, ast.AtomNumber):
        return "number"
    if isinstance(a, ast.AtomPercent):
        return "percent"
    if isinstance(a, ast.AtomDate):
        return "date"
    if isinstance(a, ast.AtomQuantity):
        return f"quantity({a.dimension.text})"
    return "(" + " | ".join(format_atom(o) for o in a.options) + ")"


def format_element(e: ast.Element) -> str:
    parts = []
    if e.gap is not None:
        parts.append(f"{'...' if e.across else '..'}{format_number(e.gap.value)} ")
    if e.capture is not None:
        parts.append(f"{e.capture.text}:")
    parts.append(format_atom(e.atom))
    return "".join(parts)


def _strings(items: tuple[ast.Str, ...]) -> str:
    return ", ".join(format_string(s.text) for s in items)


def _names(items: tuple[ast.Name, ...]) -> str:
    return ", ".join(n.text for n in items)


def _rule_stmt(s: ast.RuleStmt) -> str:
    if isinstance(s, ast.WhenStmt):
        return f"when {s.anchor.text}"
    if isinstance(s, ast.MatchStmt):
        return "match " + " ".join(format_element(e) for e in s.elements)
    if isinstance(s, (ast.RequireCmp, ast.RequireIn)):
        return "require " + format_requirement(s)
    if isinstance(s, ast.ConsistentStmt):
        per = f" per {s.key.text}" if s.key is not None else ""
        within = f" within factor {format_number(s.within.factor.value)}" if s.within is not None else ""
        return f"consistent {s.capture.text}{within}{per}"
    return f"lock {s.channel.text} = {s.capture.text}"


def _decl(d: ast.Decl) -> str:
    if isinstance(d, ast.OptionsDecl):
        return "options { " + " ".join(f.text for f in d.flags) + (" }" if d.flags else "}")
    if isinstance(d, ast.ClassDecl):
        exact = " exact" if d.exact else ""
        return f"class {d.name.text} {d.kind}{exact} = {_strings(d.literals)}"
    if isinstance(d, ast.AnchorDecl):
        domain = f" domain {format_string(d.domain.text)}" if d.domain is not None else ""
        return f"anchor {d.name.text}{domain} = {_strings(d.terms)}"
    if isinstance(d, ast.TriggersDecl):
        lines = ["triggers {"]
        for t in d.stmts:
            if isinstance(t, ast.TriggerAt):
                lines.append(f"  at {_names(t.classes)}")
            elif isinstance(t, ast.TriggerEvery):
                lines.append(f"  every {format_number(t.tokens.value)}")
            else:
                lines.append(f"  barrier {_names(t.classes)}")
        lines.append("}")
        return "\n".join(lines)
    if isinstance(d, ast.RuleDecl):
        head = [f"rule {d.name.text}"]
        if d.description is not None:
            head.append(format_string(d.description.text))
        if d.heat is not None:
            head.append(f"heat {format_number(d.heat.value)}")
        if d.freq is not None:
            head.append(f"freq {format_number(d.freq.value)}")
        if d.observe:
            head.append("observe")
        lines = [" ".join(head) + " {"]
        lines.extend("  " + _rule_stmt(s) for s in d.stmts)
        lines.append("}")
        return "\n".join(lines)
    if isinstance(d, ast.PolicyDecl):
        return f"policy pass {format_number(d.pass_at.value)} confirm {format_number(d.confirm_at.value)}"
    if isinstance(d, ast.ConvertDecl):
        return f"convert {d.analyte.text} {format_constant(d.left)} = {format_constant(d.right)}"
    if isinstance(d, ast.ExpectDecl):
        rules = (" " + _names(d.rules)) if d.rules else ""
        return f"expect {format_string(d.text.text)} {d.outcome}{rules}"
    raise TypeError(f"not a declaration: {d!r}")


def format_file(tree: ast.RuleFile) -> str:
    """Print a syntax tree back as `.heat` source: `parse` of the result gives `tree` again
    (positions aside), so lowered heatmap cells can be read and saved as a rule file.

    Parameters
    ----------
    tree : ast.RuleFile
        The rule file to print.

    Returns
    -------
    str
        The source, one blank line between declarations, ending with a newline.

    Raises
    ------
    TypeError
        When `tree.decls` holds something that is not a declaration (a tree not made by
        `parse` or the heatmap's lowering).
    """
    blocks = []
    if tree.header is not None:
        title = f" {format_string(tree.header.title.text)}" if tree.header.title is not None else ""
        blocks.append(f"ruleset {tree.header.name.text}{title}")
    blocks.extend(_decl(d) for d in tree.decls)
    return "\n\n".join(blocks) + "\n"
