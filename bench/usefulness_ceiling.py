"""The ceiling of ranges keyed on lab names: rules that hold this benchmark's own plausibility
limits (`learn_usefulness.PLAUSIBLE`, the limits that decide which corruptions are
impossible), written in the rule language as a hand-writer would. Whatever a learner gets
from a corpus, its ranges are no better informed than these; what these still flag, or still
miss, is the rule language's binding, not the limits.

Two rule sets: one reads every value after a lab's name (`potassium ..3 v:number`), one only
the values written bare, a comma or a sentence end after them (`… v:number (item_end |
sentence_end)`: never "potassium 20 mEq daily", a supplement's dose, nor "pulse 87 to 106").
Both know the names of other quantities that contain a lab's name (`OTHER_QUANTITIES`: a
keyword of its own, which a gap does not cross, so "hemoglobin A1c 6.4" is no hemoglobin).

For contracts, `restated_terms` counts how often a contract states a payment term again with
another number: what a consistency rule over payment terms rejects in clean text.
"""

from __future__ import annotations

import re
from pathlib import Path

# names of other quantities that start with a lab's name, or end with it: what a clinician
# reads as another quantity (a glycated hemoglobin, a coronary calcium score, a newborn's
# weight in grams, a pacemaker's pulse width, a drug)
OTHER_QUANTITIES = (
    "hemoglobin A1c", "calcium score", "birth weight", "fetal weight", "pulse width", "pulse oximetry",
    "pulse generator", "free albumin", "CSF albumin", "pre-albumin", "microalbumin", "potassium chloride",
    "sodium bicarbonate", "calcium carbonate", "magnesium oxide", "creatinine clearance",
)  # fmt: skip


def _limits(plausible: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Per lab name, its limits; a lab written in two units ("glucose", "glucose mmol") gets
    the union: without its unit, a value could be either."""
    out: dict[str, tuple[float, float]] = {}
    for lab, (lo, hi) in plausible.items():
        name = lab.removesuffix(" mmol")
        a, b = out.get(name, (lo, hi))
        out[name] = (min(a, lo), max(b, hi))
    return out


def _plain(x: float) -> str:
    """A number as the rule language writes it: no exponent ("3000000", "0.001")."""
    return f"{x:f}".rstrip("0").rstrip(".")


def _class_name(text: str) -> str:
    return "q_" + "".join(ch if ch.isalnum() else "_" for ch in text.lower())


def ceiling_rules(plausible: dict[str, tuple[float, float]], bare: bool) -> str:
    """The rule file (`.heat` text): a rule per lab name with its plausible limits; with
    `bare`, only the values a comma or a sentence end follows."""
    ends = " (item_end | sentence_end)" if bare else ""
    others = ", ".join(f'"{q}"' for q in OTHER_QUANTITIES)
    lines = [
        f'ruleset ceiling_{"bare" if bare else "every"} "The benchmark\'s plausibility limits, keyed on lab names"',
        'class sentence_end punct = ".", ";", "!", "?"',
        'class item_end punct = ","',
        'class abbreviation other = "e.g.", "i.e.", "Dr.", "vs.", "approx.", "Pt.", "No."',
        f"class other_quantities keyword = {others}",
        "triggers {\n  at sentence_end\n  barrier sentence_end\n}",
    ]
    for lab, (lo, hi) in sorted(_limits(plausible).items()):
        name = _class_name(lab)
        lines.append(f'class {name} keyword = "{lab}"')
        lines.append(
            f"rule {name[2:]} {{\n  match {name} ..3 v:number{ends}\n  require v in [{_plain(lo)}, {_plain(hi)}]\n}}"
        )
    return "\n".join(lines) + "\n"


def ceiling_files(plausible: dict[str, tuple[float, float]], folder: Path) -> list[tuple[str, Path]]:
    """Both rule sets written into `folder`: (row label, path) each."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for bare in (False, True):
        path = folder / f"ceiling-{'bare' if bare else 'every'}.heat"
        path.write_text(ceiling_rules(plausible, bare), encoding="utf-8")
        out.append((f"  limits, {'bare values' if bare else 'every value'}", path))
    return out


def restated_terms(texts: list[str], term: re.Pattern) -> tuple[int, int]:
    """(payment terms a contract states again after its first, those that differ from its
    first): the matches a consistency rule over payment terms would reject in clean contracts,
    where a term "changed within one document" is what the benchmark corrupts."""
    restated = differ = 0
    for text in texts:
        values = [m.group(1) for m in term.finditer(text)]
        restated += max(len(values) - 1, 0)
        differ += sum(v != values[0] for v in values[1:])
    return restated, differ
