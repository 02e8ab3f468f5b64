"""Every combination of the kernel template's feature switches that rule sets can produce is
built, validated and compared with the reference interpreter (docs/testing.md, "Kernel
feature combinations").

A *combination* is the truth of each `{% if … %}` condition of the template
(heatc/wasm/templates/kernel.wat.j2) for a program. tests/kernel_features.yaml lists the
combinations the lowering reaches, each with the recipe of a small rule set that reaches it
(`rule_set(recipe)`); it is written by enumerating every recipe:

    PYTHONPATH=.:runtime python tests/test_kernel_features.py

and a random sample of the differential tests' rule sets must reach no combination outside it.
"""

from __future__ import annotations

import itertools
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import compile_cached
from support.differential import stream_agrees
from support.kernel_features import (
    KNOBS,
    MATRIX,
    RULELESS,
    TEXTS,
    _matrix,
    _pieces,
    combination,
    conditions,
    rule_set,
)
from support.strategies import rule_sets, weak_start_rule_sets

from heatc.wasm import codegen, digits


def test_the_conditions_are_the_switches_codegen_sets():
    names = {name for c in conditions() for name in re.findall(r"C\.(\w+)", c)}
    assert names == set(codegen.SWITCHES)
    listed = {c for entry in _matrix() for c in entry["on"]}
    assert listed <= set(conditions())


def test_the_matrix_lists_each_combination_once():
    combos = [tuple(sorted(entry["on"])) for entry in _matrix()]
    assert len(set(combos)) == len(combos)


@pytest.mark.parametrize("entry", _matrix(), ids=lambda e: "+".join(c.replace("C.", "") for c in e["on"]))
def test_each_combination_builds_and_agrees_with_the_reference(entry):
    """The recipe reaches its combination; its module is built (and wasm-validated, conftest)
    and gives the reference's events, verdicts, counters and snapshots on every input."""
    program = compile_cached(rule_set(entry["recipe"]))
    assert combination(program) == sorted(entry["on"])
    for text in TEXTS:
        stream_agrees(program, text.encode(), _pieces(text.encode()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(rule_sets(), weak_start_rule_sets()))
def test_generated_rule_sets_reach_no_combination_outside_the_matrix(g):
    listed = {tuple(sorted(entry["on"])) for entry in _matrix()}
    combo = tuple(combination(compile_cached(g.source)))
    assert combo in listed, f"a rule set reaches a combination tests/kernel_features.yaml lacks: {combo}"


YEAR_RULES = [
    # (rules, whether the skipper stops before years): a year counts as a number where dates
    # and numbers do the same to an idle stream — not where a date starts a rule, nor where a
    # late rule's first element takes numbers but not dates (a year kept as a number
    # look-behind); there the skipper still counts digit runs, but stops before a year
    ("rule r {\n  match v:number units\n  require v < 300\n}", False),
    ('rule r {\n  match v:number "times"\n}', True),
    ("rule r {\n  match v:date\n  require v <= 2050\n}", True),
    ("rule r {\n  match kw ..3 v:date\n  require v <= 2050\n}", False),
]


@pytest.mark.parametrize("rules,stops", YEAR_RULES, ids=["number_unit", "number_other", "date_alone", "kw_date"])
def test_years_are_skipped_as_numbers_only_where_they_read_alike(rules, stops):
    source = rule_set({}).replace('"glucose", "rate"', '"glucose", "rate", "fiscal year"') + rules + "\n"
    program = compile_cached(source)
    switches = codegen.kernel_switches(program)
    assert (switches["SKIP_DIGITS"], switches["DIGIT_YEARS"]) == (True, stops)
    for text in [TEXTS[-1], "fiscal year 2019 and 2119, 2000 times, 2001 mg/dL " * 4]:
        stream_agrees(program, text.encode(), _pieces(text.encode()))


@pytest.mark.parametrize(
    "years,stops", [(("19", "20", "21"), True), (("19", "20", "21", "22"), False), (("20",), False)]
)
def test_the_skipper_stops_before_years_only_where_they_are_the_lexers(years, stops):
    """`digit_runs` lets the skipper count digit runs beside dates only when the four-digit
    runs a lexer reads as dates are exactly those the kernel stops before (`YEAR_HEADS`)."""

    def step(state, byte):  # an automaton whose state is the digits read so far
        return ("" if state == 1 else state) + chr(byte)

    def counted(state, year):  # a number, or with `year` a date too
        return year or not (len(state) == 4 and state[:2] in years)

    assert digits._years_are_the_heads(step, counted) == stops


def enumerate_matrix() -> list[dict]:
    """Every recipe's combination, each with the first recipe that reaches it (fewest knobs
    on), every other one with chinese_numbers on where that reaches it too (both lexers)."""
    recipes = []
    for values in itertools.product(*KNOBS.values()):
        recipe = {name: v for name, v in zip(KNOBS, values, strict=True) if v}
        if recipe.get("rules") or not any(name in recipe for name in RULELESS):
            recipes.append(recipe)
    recipes.sort(key=lambda r: (len(r) - ("chinese" in r), "chinese" in r, sorted(r)))
    found: dict[tuple, dict] = {}
    for recipe in recipes:
        found.setdefault(tuple(combination(compile_cached(rule_set(recipe)))), recipe)
    entries = []
    for i, (combo, recipe) in enumerate(sorted(found.items())):
        chinese = {**recipe, "chinese": 1}
        if i % 2 and tuple(combination(compile_cached(rule_set(chinese)))) == combo:
            recipe = chinese
        entries.append({"on": list(combo), "recipe": recipe})
    return entries


if __name__ == "__main__":
    entries = enumerate_matrix()
    header = (
        "# The kernel feature combinations rule sets reach, one recipe each (tests/test_kernel_features.py\n"
        "# enumerates every recipe to write this; docs/testing.md explains it). `on`: the template\n"
        "# conditions that hold.\n"
    )
    MATRIX.write_text(header + yaml.safe_dump({"combinations": entries}, sort_keys=False, width=120), encoding="utf-8")
    print(f"{len(entries)} combinations -> {MATRIX}")
