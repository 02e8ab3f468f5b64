"""The kernel template's feature combinations (tests/kernel_features.yaml), the rule set of
each recipe and the texts that exercise every feature: shared by test_kernel_features.py and
test_native_skipper.py."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import jinja2
import yaml

from heatc.wasm import codegen

from . import REPO

TEMPLATE = REPO / "heatc" / "wasm" / "templates" / "kernel.wat.j2"
MATRIX = Path(__file__).resolve().parents[1] / "kernel_features.yaml"

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
