"""`heatc test`: check a rule set's `expect` examples and property-test every rule's
transitions on every available backend.

For each rule, hypothesis builds inputs from the rule's own pattern: one literal for each
element (any spelling it accepts, in any ASCII case the class folds), numbers at and around
the requirements' boundaries, filler words between elements — up to the allowed gap, or one
more for a near miss — and random cuts into tokens. Two things must hold:

- **the rule does what it says**: when the gaps fit, the rule completes a match whose
  verdict is what its requirements say about the values placed in the text; when a gap is
  one too long, it completes none (an oracle independent of the interpreter; rules with
  locks, consistency or anchor gates are checked against the backends only, and so is an
  input whose pieces the lexer reads otherwise — "Feb 1" placed as a keyword and a number
  is a date);
- **every backend agrees** with the reference interpreter: the same events and verdicts for
  every chunking.

A failure is shrunk to a minimal input and reported with what was expected.

Public surface: `run_tests(program, examples, backends) -> TestReport`.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from heatc import ir, units
from heatc.lang.lexicon import DATE_YEARS
from heatc.semantics.lexing import lex
from heatc.verify.backends import open_session, run_document
from heatc.verify.expect import ExpectFailure, check_expects
from heatc_runtime import Verdict

FILLERS = ("the", "was", "and", "today", "noted", "per", "then", "also")


@dataclass
class Case:
    pieces: list[bytes]  # the text, cut into tokens
    values: list[float]  # numeric captures placed, by capture index (nan for class captures)
    fits: bool  # every gap within its limit
    placed: list[tuple[int, int, int]] = field(default_factory=list)  # each element's (start, end, lexeme code)

    @property
    def text(self) -> bytes:
        return b"".join(self.pieces)


@dataclass
class RuleResult:
    rule: str
    cases: int
    problem: str | None = None
    example: Case | None = None
    oracle: bool = True  # checked against the oracle, not only across backends


@dataclass
class TestReport:
    backends: list[str]
    expect_failures: dict[str, list[ExpectFailure]] = field(default_factory=dict)
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.expect_failures.values()) and all(r.problem is None for r in self.rules)


def _fillers(program: ir.Program) -> list[bytes]:
    """Words that lex as plain words in this rule set (never as one of its literals)."""
    out = [w.encode() for w in FILLERS if [x.code for x in lex(program, w.encode())] == [ir.LEX_WORD]]
    return out or [b"xq"]


def case_spellings(text: str) -> list[str]:
    """A literal as written, lower-cased, upper-cased and title-cased — in its ASCII letters
    only, the letters a rule set's lexer folds (str.upper would turn "µg" into "ΜG", Greek,
    which is another literal's text altogether)."""
    return [
        text,
        re.sub("[A-Z]+", lambda m: m[0].lower(), text),
        re.sub("[a-z]+", lambda m: m[0].upper(), text),
        re.sub("[A-Za-z]+", lambda m: m[0][0].upper() + m[0][1:].lower(), text),
    ]


def _literal_spellings(program: ir.Program, code: int) -> st.SearchStrategy[bytes]:
    lit = program.literals[code - ir.LEX_LITERAL0]
    text = lit.text
    if lit.exact or not any(c.isascii() and c.isalpha() for c in text):
        return st.just(text.encode())
    return st.sampled_from(case_spellings(text)).map(str.encode)


def _boundary_values(rule: ir.Rule, capture: int) -> list[float]:
    consts: set[float] = {0.0, 1.0, 7.0, 100.0}
    for q in rule.requirements:
        for operand in (q.left, q.right):
            if operand.capture < 0:
                consts.add(operand.const)
        if q.op == "in" and q.left.capture == capture:
            consts |= {q.low, q.high}
    values: set[float] = set()
    for c in consts:
        for v in (c, c * 0.5, c * 2, c - 1, c + 1, c - 0.1, c + 0.1):
            if v >= 0 and math.isfinite(v) and v < 1e12:
                values.add(round(v, 6))
    return sorted(values)


def _numeral(v: float) -> str:
    return f"{v:.6f}".rstrip("0").rstrip(".") if v != int(v) else str(int(v))


@st.composite
def _cases(draw, program: ir.Program, rule: ir.Rule, fillers: list[bytes]) -> Case:
    parts: list[bytes] = [draw(st.sampled_from([b"", b"Note: ", b"\n"]))]
    values = [math.nan] * len(rule.captures)
    fits = True
    placed = []
    for i, element in enumerate(rule.elements):
        if i:
            limit = element.gap
            n = draw(st.integers(0, limit + 1)) if draw(st.integers(0, 4)) == 0 else draw(st.integers(0, limit))
            fits = fits and n <= limit
            parts += [b" " + draw(st.sampled_from(fillers)) for _ in range(n)]
            parts.append(b" ")
        code = draw(st.sampled_from(element.accepts))
        at = sum(map(len, parts))
        if code == ir.LEX_DATE:  # a date's value is the year it names: "November 1979" is 1979
            years = [
                v
                for v in _boundary_values(rule, element.capture)
                if v == int(v) and DATE_YEARS[0] <= v <= DATE_YEARS[1]
            ]
            v = draw(st.sampled_from(years or [2000.0]))
            parts.append(b"November %d" % int(v))
            if element.capture >= 0:
                values[element.capture] = v
            if element.places >= 0:
                values[element.places] = 0.0  # a date writes no decimals
        elif code in (ir.LEX_NUMBER, ir.LEX_PERCENT):
            v = draw(st.sampled_from(_boundary_values(rule, element.capture)))
            digits = _numeral(v)
            zeros = draw(st.sampled_from([0, 0, 1, 2]))  # trailing zeros: the same value, written more precisely
            if zeros:
                digits += ("" if "." in digits else ".") + "0" * zeros
            parts.append((digits + ("%" if code == ir.LEX_PERCENT else "")).encode())
            if element.capture >= 0:
                values[element.capture] = v
            if element.places >= 0:
                values[element.places] = float(len(digits.partition(".")[2]))
        else:
            parts.append(draw(_literal_spellings(program, code)))
            if element.convert >= 0:  # a quantity's unit: the number before it, in the base unit
                pre, mul, div = element.units[element.accepts.index(code)]
                values[element.convert] = units.convert(values[element.convert], units.Conversion(pre, mul, div))
        placed.append((at, at + len(parts[-1]), code))
    parts.append(draw(st.sampled_from([b"", b" ", b"\n", b" and more text"])))
    text = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces, prev = [], 0
    for c in [*cuts, len(text)]:
        pieces.append(text[prev:c])
        prev = c
    return Case(pieces, values, fits, placed)


def _read_as_placed(program: ir.Program, case: Case) -> bool:
    """Whether the lexer reads each element's text as the lexeme it was placed as: "Feb 1",
    a keyword `feb` and a number placed side by side, is a date, and says nothing of a rule
    `feb ..3 v:number`."""
    read = {(x.start, x.end, x.code) for x in lex(program, case.text)}
    return all(p in read for p in case.placed)


def _expected(rule: ir.Rule, case: Case) -> Verdict | None:
    """What the rule's own definition says: None (no match), CONFIRMED or REJECTED."""
    if not case.fits:
        return None

    def value(o: ir.Operand) -> float:
        return case.values[o.capture] if o.capture >= 0 else o.const

    for q in rule.requirements:
        v = value(q.left)
        if q.op == "in":
            ok = (q.low <= v if q.low_closed else q.low < v) and (v <= q.high if q.high_closed else v < q.high)
        else:
            w = value(q.right)
            ok = {"<": v < w, "<=": v <= w, ">": v > w, ">=": v >= w, "==": v == w, "!=": v != w}[q.op]
        if not ok:
            return Verdict.REJECTED
    return Verdict.CONFIRMED


def _problem(program: ir.Program, rule: ir.Rule, case: Case, backends: list[str], oracle: bool) -> str | None:
    events, verdicts, _ = run_document("reference", program, case.text)
    if oracle and _read_as_placed(program, case):
        mine = [e for e in events if e.kind == "match" and e.name == rule.name]
        want = _expected(rule, case)
        restart = set(rule.elements[0].accepts) & {c for e in rule.elements[1:] for c in e.accepts}
        if want is None and mine and not restart:
            # (a later element that could also start the rule may begin a second, valid match)
            return f"a gap is one lexeme too long, yet {rule.name} matched {case.text[mine[0].start : mine[0].end]!r}"
        if want is not None:
            if not mine:
                return f"expected a {want.name} match of {rule.name}, the reference found none"
            if mine[-1].verdict is not want:
                return (
                    f"expected {rule.name} {want.name}, the reference says {mine[-1].verdict.name} ({mine[-1].failed})"
                )
    for backend in backends:
        if backend == "reference":
            continue
        session = open_session(backend, program)
        snaps = []
        for p in case.pieces:
            snaps += session.feed(p)
        snaps += session.finish()
        got = [e for s in snaps for e in s.events]
        if got != events or dict(snaps[-1].verdicts) != dict(verdicts):
            return f"{backend} disagrees with the reference: {len(got)} events vs {len(events)}"
    return None


def run_tests(program: ir.Program, examples: int = 200, backends: list[str] | None = None, seed: int = 0) -> TestReport:
    backends = backends or ["reference", "wasm"]
    report = TestReport(backends)
    for backend in backends:
        report.expect_failures[backend] = check_expects(program, lambda p, d, b=backend: run_document(b, p, d)[:2])
    fillers = _fillers(program)
    config = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    random.seed(seed)
    for rule in program.rules:
        oracle = rule.gate < 0 and not rule.channels
        strategy = _cases(program, rule, fillers)
        try:
            bad = find(
                strategy, lambda c, r=rule, o=oracle: _problem(program, r, c, backends, o) is not None, settings=config
            )
        except NoSuchExample:
            report.rules.append(RuleResult(rule.name, examples, oracle=oracle))
            continue
        report.rules.append(
            RuleResult(rule.name, examples, _problem(program, rule, bad, backends, oracle), bad, oracle)
        )
    return report
