"""`heatc test`'s generated inputs for a rule whose value is a date: a date that names the
year the requirement is checked at, so the rule can be shown to reject."""

from __future__ import annotations

from heatc.lang.compiler import compile_source
from heatc.verify.properties import run_tests

SOURCE = """class dated keyword = "dated"
rule dated_date "" heat 0.7 {
  match dated ..3 v:date
  require v in [1980, 2020]
}
"""


def test_a_date_rule_gets_dates_on_both_sides_of_its_range():
    report = run_tests(compile_source(SOURCE, "<dates>"), examples=100, backends=["reference", "wasm"])
    assert [(r.rule, r.problem) for r in report.rules] == [("dated_date", None)]
