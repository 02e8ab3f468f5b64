"""`heatc test`'s generated inputs for a rule whose value is a date: a date that names the
year the requirement is checked at, so the rule can be shown to reject."""

from __future__ import annotations

from heatc import ir
from heatc.lang.compiler import compile_source
from heatc.verify.properties import Case, _read_as_placed, run_tests

SOURCE = """class dated keyword = "dated"
rule dated_date "" heat 0.7 {
  match dated ..3 v:date
  require v in [1980, 2020]
}
"""


def test_a_date_rule_gets_dates_on_both_sides_of_its_range():
    report = run_tests(compile_source(SOURCE, "<dates>"), examples=100, backends=["reference", "wasm"])
    assert [(r.rule, r.problem) for r in report.rules] == [("dated_date", None)]


def test_pieces_the_lexer_reads_as_a_date_are_not_held_to_the_rule():
    """A keyword "feb" placed before a number reads "Feb 1" in title case: a date, which the
    rule `feb ..3 v:number` cannot match. Such an input is checked across backends only; the
    lower-case spellings still show the rule rejects."""
    source = 'class feb keyword = "feb"\nrule feb_value "" heat 0.5 {\n  match feb ..3 v:number\n  require v <= 31\n}\n'
    program = compile_source(source, "<feb>")
    report = run_tests(program, examples=100, backends=["reference", "wasm"])
    assert [(r.rule, r.problem) for r in report.rules] == [("feb_value", None)]
    placed = [(0, 3, ir.LEX_LITERAL0), (4, 5, ir.LEX_NUMBER)]  # literal 0: "feb"
    assert _read_as_placed(program, Case([b"feb 1"], [1.0], True, placed))
    assert not _read_as_placed(program, Case([b"Feb 1"], [1.0], True, placed))
