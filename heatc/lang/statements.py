"""The checks on a rule's statements once its pattern is resolved (docs/language.md): a
requirement compares number captures and an interval is not empty; `consistent`, `within
factor` and `lock` name captures of the right kind; constant bounds on one capture can all
hold. Every problem is reported through `error` (the compiler's), all of them together.

Public surface: `Capture`, `check_statements(rule, captures, error)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Protocol

from heatc import ir
from heatc.errors import suggestion_notes
from heatc.lang import ast
from heatc.lang.unparse import format_requirement

Report = Callable[..., None]  # error(pos, message, notes=None)


class Capture(Protocol):
    """What the checks read of a bound capture."""

    kind: str  # number | class


def check_statements(d: ast.RuleDecl, captures: Mapping[str, Capture], error: Report) -> None:
    """Report every problem with the statements of rule `d`, whose pattern bound `captures`."""
    for s in d.stmts:
        if isinstance(s, (ast.RequireCmp, ast.RequireIn)):
            _requirement(s, captures, error)
        elif isinstance(s, ast.ConsistentStmt):
            cap = _need_capture(s.capture, captures, error)
            if s.within is not None:
                f = s.within.factor.value
                if f != int(f) or not 2 <= f <= ir.MAX_FACTOR:
                    error(
                        s.within.factor.pos,
                        f"a factor must be a whole number from 2 to {ir.MAX_FACTOR:,}, got {f:g}",
                    )
                if cap is not None and cap.kind != "number":
                    error(
                        s.capture.pos,
                        f'"within factor" compares magnitudes, but "{s.capture.text}" holds a class name',
                    )
            if s.key is not None:
                key = _need_capture(s.key, captures, error)
                if key is not None and key.kind != "class":
                    error(s.key.pos, f'"per {s.key.text}" needs a class capture, but "{s.key.text}" holds a number')
        elif isinstance(s, ast.LockStmt):
            _need_capture(s.capture, captures, error)
    _feasibility(d, error)


def _need_capture(name: ast.Name, captures: Mapping[str, Capture], error: Report) -> Capture | None:
    if name.text in captures:
        return captures[name.text]
    error(name.pos, f'capture "{name.text}" is used but never bound', suggestion_notes(name.text, captures))
    return None


def _requirement(s: ast.RequireCmp | ast.RequireIn, captures: Mapping[str, Capture], error: Report) -> None:
    operands = [s.left, s.right] if isinstance(s, ast.RequireCmp) else [s.operand]
    names = [o.capture if isinstance(o, ast.Places) else o for o in operands if isinstance(o, ast.CaptureRead)]
    if not names:
        error(s.pos, "this requirement compares constants only; it does not depend on the text")
    for o in names:
        cap = _need_capture(o, captures, error)
        if cap is not None and cap.kind != "number":
            error(o.pos, f'"{o.text}" holds a class name, not a number; compare numbers only')
    for o in operands:
        if isinstance(o, ast.Num) and not math.isfinite(o.const):
            error(o.pos, "a constant must be a finite number")
    if isinstance(s, ast.RequireIn):
        lo, hi = s.low.const, s.high.const
        if not (math.isfinite(lo) and math.isfinite(hi)):
            error(s.low.pos, "interval bounds must be finite numbers")
        elif lo > hi or (lo == hi and not (s.low_closed and s.high_closed)):
            error(s.pos, f"the range {format_requirement(s).split(' in ', 1)[1]} is empty: no value can satisfy it")


def _feasibility(d: ast.RuleDecl, error: Report) -> None:
    """Constant bounds on one capture that can never all hold make a rule that always rejects."""
    bounds: dict[str, tuple[float, bool, float, bool]] = {}
    for s in d.stmts:
        interval = _interval(s)
        if interval is None:
            continue
        name, a, ac, b, bc = interval
        lo, lo_closed, hi, hi_closed = bounds.get(name, (-math.inf, True, math.inf, True))
        if a > lo or (a == lo and not ac):
            lo, lo_closed = a, ac
        if b < hi or (b == hi and not bc):
            hi, hi_closed = b, bc
        bounds[name] = (lo, lo_closed, hi, hi_closed)
        if lo > hi or (lo == hi and not (lo_closed and hi_closed)):
            error(
                s.pos,
                f'the requirements on "{name}" in rule "{d.name.text}" can never all hold',
                ["this one contradicts the ones before it"],
            )
            return


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _interval(s) -> tuple[str, float, bool, float, bool] | None:
    """(capture, lo, lo_closed, hi, hi_closed) for a requirement bounding one capture by constants."""
    if isinstance(s, ast.RequireIn) and isinstance(s.operand, ast.CaptureRead):
        return (s.operand.text, s.low.const, s.low_closed, s.high.const, s.high_closed)
    if not isinstance(s, ast.RequireCmp):
        return None
    if isinstance(s.left, ast.CaptureRead) and isinstance(s.right, ast.Num):
        name, op, c = s.left.text, s.op, s.right.const
    elif isinstance(s.right, ast.CaptureRead) and isinstance(s.left, ast.Num):
        name, op, c = s.right.text, _FLIP[s.op], s.left.const
    else:
        return None
    inf = math.inf
    return {
        "<": (name, -inf, True, c, False),
        "<=": (name, -inf, True, c, True),
        ">": (name, c, False, inf, True),
        ">=": (name, c, True, inf, True),
        "==": (name, c, True, c, True),
    }.get(op)
