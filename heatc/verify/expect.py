"""`expect` examples: run each example text through a backend and compare the outcome
with what the rule file says it must be (docs/language.md, "expect").

Public surface: `check_expects(program, run)`, `ExpectFailure`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from heatc import ir
from heatc_runtime import Event, Verdict

#: A backend run over one complete document: (events, final verdicts).
RunDocument = Callable[[ir.Program, bytes], tuple[list[Event], dict[str, Verdict]]]


@dataclass
class ExpectFailure:
    expect: ir.Expect
    message: str


def _describe(events: list[Event], data: bytes, rule: str) -> str:
    bad = [e for e in events if e.kind == "match" and e.name == rule and e.verdict is Verdict.REJECTED]
    if not bad:
        return rule
    e = bad[0]
    text = data[e.start : e.end].decode("utf-8", errors="replace")
    why = e.failed if e.failed is not None else f"conflicts with {e.conflict.channel} = {e.conflict.value}"
    return f"{rule} (at {text!r}: {why})"


def check_expects(program: ir.Program, run: RunDocument) -> list[ExpectFailure]:
    failures = []
    for x in program.expects:
        data = x.text.encode("utf-8")
        events, verdicts = run(program, data)
        rejected = [r for r, v in verdicts.items() if v is Verdict.REJECTED]
        problems = []
        if x.outcome == "passes":
            if rejected:
                problems.append("rejected " + ", ".join(_describe(events, data, r) for r in rejected))
            confirmed = {e.name for e in events if e.kind == "match" and e.verdict is Verdict.CONFIRMED}
            silent = [r for r in x.rules if r not in confirmed]
            if silent:
                problems.append("no confirmed match for " + ", ".join(silent))
        else:
            missing = [r for r in x.rules if r not in rejected]
            extra = [r for r in rejected if r not in x.rules]
            if missing:
                problems.append("did not reject " + ", ".join(missing))
            if extra:
                problems.append("also rejected " + ", ".join(_describe(events, data, r) for r in extra))
        if problems:
            failures.append(ExpectFailure(x, "; ".join(problems)))
    return failures
