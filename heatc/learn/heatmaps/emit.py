"""The learned cells written out as a heatmap document (`heatmap.yaml`), with expect
examples for each rule, atomically.

Public surface: `heatmap_document`, `dump_heatmap`, `write_heatmap`, `compile_document`,
`confirmed_expects`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from heatc.heatmap.format import DEFAULT_MARGIN_FACTOR, DEFAULT_MARGIN_SPREAD, HEATMAP_VERSION, Stats
from heatc.heatmap.lower import margin_range, readable
from heatc.lang.lexicon import DATE_YEARS
from heatc.lang.unparse import format_number
from heatc.learn.text.evidence import BARRIER, ITEM_END, LONE_CELLS, CellKey, LearnedCell
from heatc.learn.text.lexemes import Lexicon
from heatc.learn.text.model_names import MODEL_NAME_CLASS
from heatc.learn.text.shadows import SHADOW_GROUP


def _decimal(x: float) -> str:
    """Plain decimal text, as heatc's lexer reads numbers (no exponent)."""
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _shown(x: float, key: CellKey) -> str:
    """A value as a description shows it: a quantity's in a unit a reader knows ("250 mg")."""
    if not key.dimension:
        return _decimal(x)
    value, unit = readable(x, key.dimension)
    return f"{format_number(value)} {unit}"


def _yaml_float(x: float) -> str:
    """A float YAML 1.1 reads back as a float (it needs a dot before an exponent)."""
    text = format_number(x)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def declared_categories(lexicon: Lexicon, keys: Iterable[CellKey]) -> set[str]:
    """The categories a heatmap of these cells declares: those the cells name, sentence ends,
    abbreviations and model names (`model_names`: their digits are no value), every shadow
    phrase (it keeps its values from its keyword's rule), every unit one of whose literals
    begins with a named unit's ("mm/hr" after "mm", "mcg/dL" after "mcg": undeclared, "ESR
    113mm/hr" lexes as 113 mm and a length's range reads it), and every number word once one
    is named (so that none reads the tail of another: "twenty-five (25)")."""
    used = {x for k in keys for x in (k.keyword, k.unit) if x} | {"sentence_end", "abbreviation", MODEL_NAME_CLASS}
    used |= {cat.name for cat in lexicon.categories if cat.group == SHADOW_GROUP}
    named = [
        lit.lower() for cat in lexicon.categories if cat.name in used and cat.kind == "unit" for lit in cat.literals
    ]
    used |= {
        cat.name
        for cat in lexicon.categories
        if cat.kind == "unit"
        and any(lit.lower().startswith(n) and len(lit) > len(n) for lit in cat.literals for n in named)
    }
    numerals = {cat.name for cat in lexicon.categories if cat.group == "numeral"}
    return used | numerals if used & numerals else used


def heatmap_document(
    *,
    name: str,
    title: str,
    lexicon: Lexicon,
    cells: list[LearnedCell],
    provenance: dict,
    sensitivity: float,
    rule_files: list[str],
    tokenizer: dict,
) -> dict:
    """The heatmap (format 1) as a plain document, categories limited to those it declares
    (`declared_categories`)."""
    used = declared_categories(lexicon, (c.key for c in cells))
    categories = {}
    for cat in lexicon.categories:
        if cat.name in used:
            entry: dict = {"kind": cat.kind, "literals": list(cat.literals)}
            if cat.exact:
                entry["exact"] = True
            categories[cat.name] = entry
    taken: set[str] = set()
    cell_docs = []
    literal = {c.name: c.literals[0] for c in lexicon.categories}
    expects: list[dict] = []
    rules: dict[CellKey, tuple[str, LearnedCell]] = {}
    for c in cells:
        base = c.key.name
        rule, k = base, 2
        while rule in taken:
            rule, k = f"{base}_{k}", k + 1
        taken.add(rule)
        if c.key.after:  # the value, its unit, then the keyword
            doc: dict = {"name": rule, "pair": [c.key.value, c.key.keyword], "unit": c.key.unit, "gap": c.key.gap}
        elif c.key.keyword:
            doc = {"name": rule, "pair": [c.key.keyword, c.key.value]}
            if c.key.unit:
                doc["unit"] = c.key.unit
            if c.key.dimension:  # its stats and range in the dimension's base unit
                doc["dimension"] = c.key.dimension
            doc["gap"] = c.key.gap
        else:
            doc = {"name": rule, "pair": [c.key.value, c.key.unit] if c.key.unit else [c.key.value]}
        doc.update(score=c.score, support=c.support, stats=c.stats)
        if c.range is not None:
            doc["range"] = [c.range[0], c.range[1]]
        if c.false_alarms is not None:
            doc["false_alarms"] = float(f"{c.false_alarms:.3g}")
        if c.band:
            doc["band"] = c.band
        if c.places is not None:
            doc["places"] = c.places
        if c.key.check != "range":
            doc["check"] = c.key.check
        if c.guards:
            del doc["stats"]
            doc["description"] = (
                f"learned: a unit guard; the corpus writes {c.support} values in {c.guards} "
                f"{'before' if c.key.after else 'after'} {c.key.keyword} and {c.rejected} in {c.key.unit}, "
                f"so any value in {c.key.unit} is rejected"
            )
            cell_docs.append(doc)
            continue
        doc["description"] = (
            f"learned: coupling {c.strength:g}× an ordinary lexeme's at its distance, over {c.probes} probed "
            f"occurrences; values {_shown(c.stats['q01'], c.key)}–{_shown(c.stats['q99'], c.key)} (1st–99th percentile)"
        )
        if c.false_alarms is not None and c.key.check == "range":
            doc["description"] += f"; rejects {c.false_alarms * 100:.2g} % of held-out clean values"
        if c.key.check == "range" and c.rejected:
            doc["description"] += f"; {c.rejected / c.support * 100:.2g} % of the values seen fall outside its range"
        if c.places is not None:
            doc["description"] += "; " + (
                "written in whole numbers"
                if c.places == 0
                else f"written with at most {c.places} digit{'s' if c.places > 1 else ''} after the point"
            )
        if c.band:
            doc["description"] += (
                f"; a document's values within a factor {c.band} of each other "
                f"({c.band_rejected} of the corpus's values are not)"
            )
        if c.key.check == "consistent":
            doc["description"] += (
                f"; {c.rejected} of the corpus's values disagree with an earlier one in their document"
            )
        cell_docs.append(doc)
        rules[c.key] = (rule, c)
    for rule, c in rules.values():
        # (a quantity's expects would need its values written in a unit; its rules have none)
        if (
            c.key.check == "range"
            and not c.guards
            and not c.key.dimension
            and c.score >= sensitivity
            and len(expects) < 12
        ):
            expects.extend(_expects_for(c, rule, literal, rules, sensitivity))
    return {
        "heatmap": HEATMAP_VERSION,
        "name": name,
        "title": title,
        "provenance": provenance,
        "options": {"chinese_numbers": lexicon.chinese_numbers},
        "tokenizer": tokenizer,
        "thresholds": {"sensitivity": sensitivity},
        "targets": ["wasm", "cuda"],
        "categories": categories,
        "triggers": {"at": [BARRIER], "barrier": [BARRIER]},
        "cells": cell_docs,
        "rules": rule_files,
        "expects": expects,
    }


def _expects_for(
    c: LearnedCell,
    rule: str,
    literal: dict[str, str],
    rules: dict[CellKey, tuple[str, LearnedCell]],
    sensitivity: float,
) -> list[dict]:
    """A typical value passes and one a thousand times the largest seen is rejected — by this
    rule and by every other lowered range rule that reads the same text: "aldactone 750000 mg"
    is also a value of `keywords_mg … number` and of `number mg` (an expect's `rejects` lists
    exactly the rules that reject). A range open above (`[0.25, null]`) rejects a value a
    thousand times below its lower bound instead. If another rule rejects the typical value,
    or this one rejects neither, no expect."""
    typical = c.stats["q50"]
    lo = c.range[0] if c.range is not None else None
    wilds = [float(f"{max(abs(c.stats['max']), 1.0) * 1000:.3g}")] + ([float(f"{lo / 1000:.3g}")] if lo else [])
    if c.key.value == "date":  # a date's value is its year, written as a date; a year a century too late
        hi = c.range[1] if c.range is not None else None
        typical = float(round(typical))
        wilds = [float(round(hi) + 100)] if hi is not None and round(hi) + 100 <= DATE_YEARS[1] else []

    def text(v: float) -> str:
        kw = f"{literal[c.key.keyword]} " if c.key.keyword else ""
        if c.key.value == "date":
            return f"{kw}December {int(v)}."
        number = _decimal(v) + ("%" if c.key.value == "percent" else "")
        unit = f" {literal[c.key.unit]}" if c.key.has_unit else ""
        if c.key.after:
            return f"{number}{unit} {kw.strip()}."
        return f"{kw}{number}{unit}."

    readers = {c.key}  # and the cells whose rules also capture this text's value
    if c.key.after:
        readers.add(CellKey("", c.key.value, c.key.unit))
    elif c.key.has_unit:
        readers |= {CellKey(k, c.key.value, u) for k, u in ((c.key.keyword, ""), ("", c.key.unit)) if k or u}
    elif c.key.keyword and c.key.check == "range":  # "pulse 80." is a bare value too
        readers |= {CellKey(c.key.keyword, c.key.value, ""), CellKey(c.key.keyword, c.key.value, ITEM_END)}
    if c.key.value in LONE_CELLS:  # (`v:date` reads every date, `v:percent` every percentage)
        readers.add(LONE_CELLS[c.key.value])

    def rejecting(v: float) -> list[str]:
        out = []
        for key in sorted(readers):
            if key not in rules:
                continue
            name, cell = rules[key]
            if cell.score < sensitivity or cell.guards:
                continue
            lo, hi = cell.range if cell.range is not None else _margin(cell.stats)
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                out.append(name)
        return out

    if rejecting(typical):
        return []
    wild = next((v for v in wilds if rule in rejecting(v)), None)
    if wild is None:
        return []
    return [{"text": text(typical), "passes": [rule]}, {"text": text(wild), "rejects": sorted(rejecting(wild))}]


def _margin(stats: dict) -> tuple[float, float]:
    return margin_range(Stats(**stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)


# --- YAML ------------------------------------------------------------------------------


def _flow(value) -> str:
    """A YAML flow value; JSON scalars are valid YAML and keep Chinese text readable."""
    import json

    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return _yaml_float(value)
    return json.dumps(value, ensure_ascii=False)


def dump_heatmap(doc: dict, header: str = "") -> str:
    lines = [f"# {x}" if x else "#" for x in header.splitlines()]
    for key, value in doc.items():
        if isinstance(value, dict) and value and key in ("provenance", "categories"):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {_flow(v)}" for k, v in value.items())
        elif isinstance(value, list) and value and key in ("cells", "expects"):
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(v)}" for v in value)
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def write_heatmap(path: str | Path, doc: dict, header: str = "") -> None:
    """Write atomically: a killed run never leaves half a heatmap."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_heatmap(doc, header))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; a heatmap is not
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def compile_document(doc: dict, directory: str | Path):
    """(Program, Lowered, Heatmap) of a heatmap document compiled as if written in `directory`
    (its relative paths — rule files, a tokenizer — read from there)."""
    from heatc.heatmap.build import compile_heatmap

    fd, tmp = tempfile.mkstemp(prefix=".compile-", suffix=".yaml", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_heatmap(doc))
        return compile_heatmap(tmp)
    finally:
        os.unlink(tmp)


def confirmed_expects(doc: dict, directory: str | Path) -> list[dict]:
    """The document's expects that its rules bear out (compiled as if written in `directory`)."""
    from heatc.verify.backends import run_document
    from heatc.verify.expect import check_expects

    program = compile_document(doc, directory)[0]
    failed = {f.expect.text for f in check_expects(program, lambda p, d: run_document("wasm", p, d)[:2])}
    return [e for e in doc.get("expects", []) if e["text"] not in failed]
