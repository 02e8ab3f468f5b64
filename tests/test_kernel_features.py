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
from pathlib import Path

import jinja2
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.differential import stream_agrees
from support.strategies import rule_sets, weak_start_rule_sets

from heatc.wasm import codegen, digits

TEMPLATE = REPO / "heatc" / "wasm" / "templates" / "kernel.wat.j2"
MATRIX = Path(__file__).parent / "kernel_features.yaml"

# The recipe's knobs and their values: what a rule set has (see rule_set).
KNOBS = {
    "rules": [0, 1],  # any rule at all
    "anchors": [0, 1],  # an anchor term, and with rules a rule gated on it
    "late": ["", "number", "percent", "date"],  # a late-starting rule (v:number unit / v:percent unit / date unit)
    "window": [0, 1],  # `every 3`
    "weak": [0, 1],  # a one-word keyword that starts a rule waiting for a number
    "numbers_start": [0, 1, "date"],  # a rule starting with a number (not late): digit runs matter; or
    # with a date: years written alone matter (the skipper stops before them)
    "percent_start": [0, 1],  # a rule starting with a percentage (not late)
    "percent_literal": [0, 1],  # "%" as a literal that starts a rule
    "point_literal": [0, 1],  # "..." as a literal that starts a rule
    "comma_literal": [0, 1],  # "," as a literal that starts a rule
    "chinese": [0, 1],  # options { chinese_numbers }
}
RULELESS = ("late", "weak", "numbers_start", "percent_start", "percent_literal", "point_literal", "comma_literal")


def rule_set(recipe: dict) -> str:
    """The small rule set a recipe describes (every knob absent from it is off)."""
    k = {name: recipe.get(name, values[0]) for name, values in KNOBS.items()}
    lines = ["ruleset features"]
    if k["chinese"]:
        lines.append("options { chinese_numbers }")
    lines += ['class kw keyword = "glucose", "rate"', 'class units unit = "mg/dL", "bpm"', 'class stop punct = ";"']
    lines += ['class wk keyword = "payment"'] if k["weak"] else []
    lines += ['class pct punct = "%"'] if k["percent_literal"] else []
    lines += ['class dots other = "..."'] if k["point_literal"] else []
    lines += ['class comma punct = ","'] if k["comma_literal"] else []
    if k["anchors"]:
        lines.append('anchor dx = "blood sugar"')
    lines.append("triggers {\n  at stop\n" + ("  every 3\n" if k["window"] else "") + "}")
    if k["rules"]:
        # (a keyword then a unit: a keyword whose rule waited for a number would be a weak start)
        lines.append("rule base {\n  match k:kw ..2 u:units\n  lock seen = u\n}")
    body = {
        "anchors": "match kw ..2 v:number\n  when dx\n  lock ch = v",
        "weak": "match wk ..3 v:number\n  require v < 400",
        "numbers_start": "match n:number ..2 kw\n  require n > 1",
        "percent_start": "match p:percent ..2 kw\n  require p <= 36",
        "percent_literal": "match pct ..1 kw",
        "point_literal": "match dots ..1 kw",
        "comma_literal": "match comma ..1 kw",
    }
    if k["numbers_start"] == "date":
        body["numbers_start"] = "match v:date\n  require v <= 2050"
    for name, text in body.items():
        if k["rules"] and k[name]:
            lines.append(f"rule {name} {{\n  {text}\n}}")
    if k["rules"] and k["late"] == "date":  # (a date binds no value: nothing to require)
        lines.append("rule late {\n  match date units\n}")
    elif k["rules"] and k["late"]:
        lines.append(f"rule late {{\n  match v:{k['late']} units\n  require v < 300\n}}")
    return "\n".join(lines) + "\n"


def conditions() -> list[str]:
    """The template's feature conditions (the expressions of its `{% if C.… %}` tags)."""
    src = re.sub(r"\{#.*?#\}", "", TEMPLATE.read_text(encoding="utf-8"), flags=re.S)
    return sorted({m.strip() for m in re.findall(r"\{%-? *if (C\.[^%]+?) *-?%\}", src)})


def combination(program) -> list[str]:
    """The conditions that hold for a program (its kernel's combination)."""
    switches = codegen.kernel_switches(program)
    env = jinja2.Environment()
    return [c for c in conditions() if env.compile_expression(c)(C=switches)]


def _matrix() -> list[dict]:
    return yaml.safe_load(MATRIX.read_text(encoding="utf-8"))["combinations"]


def test_the_conditions_are_the_switches_codegen_sets():
    names = {name for c in conditions() for name in re.findall(r"C\.(\w+)", c)}
    assert names == set(codegen.SWITCHES)
    listed = {c for entry in _matrix() for c in entry["on"]}
    assert listed <= set(conditions())


def test_the_matrix_lists_each_combination_once():
    combos = [tuple(sorted(entry["on"])) for entry in _matrix()]
    assert len(set(combos)) == len(combos)


# inputs for every feature: plain stretches longer than the skipper's blocks, keywords, units,
# numbers with separators, decimals and percent signs, the literals of the recipes, an anchor
# term, CJK text with Chinese numerals, full-width digits
PLAIN = "the patient was seen in clinic today and the results were reviewed with the family "
TEXTS = [
    "glucose 120 mg/dL; rate 72 bpm. payment 30 days, 1,234 and 98.6 and 12% or 5.5% ... 3 , 4 ; 7",
    PLAIN * 3
    + "payment of 45 within days glucose 5000 mg/dL and blood sugar 300 mg/dL "
    + PLAIN * 2
    + "rate 12.5% bpm 1,000,000 99.9 % 3.1.4 1. payment "
    + PLAIN
    + "12 mg/dL",
    "患者血糖为三十毫摩尔/升，心率八十次/分。glucose 三十 mg/dL；本办法所称的借款人应当按照合同约定的期限还款，"
    "逾期部分按日计息。年化利率百分之三十六，rate ２０ bpm，贷款一千零五万元 payment 1.5亿",
    "blood   sugar 140 mg/dL ... payment 12 ; glucose ,5 mg/dL 2,5 %5 12%% 8 % rate 3 bpm; "
    + PLAIN
    + "glucose 7 ... 8 , 9 % 10 ;",
    # years written alone (dates) among numbers that only look like them
    PLAIN
    + "in 2019 glucose 2001 mg/dL, rate 1999 bpm; 1998-2003 and 2019. payment 2020 days 2019s 2000mg 2,019 "
    + PLAIN
    + "12 2019.5 3019 glucose 1900; 20190 rate 2001 2002 2003 bpm",
]


def _pieces(text: bytes) -> list[bytes]:
    """The text cut at fixed places: around the skipper's 32-byte blocks and its 40-byte end."""
    cuts = sorted({0, len(text)} | {c for c in (1, 7, 40, 41, 100, 257) if c < len(text)})
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


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
