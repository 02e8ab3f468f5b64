"""Can learned rules stay switched on? `python bench/learn_usefulness.py`

Per domain, documents are split in two by a hash of their id. `heatc learn` learns a heatmap
from one half (no hand-written rules, no student); its lowered rules then scan the other
half, sentence by sentence within each document, beside the hand-written
`examples/<domain>.heat` on the same sentences, and both run side by side (as a user who
keeps hand-written rules on beside a learned heatmap: a sentence is checked or flagged where
either checks or flags it):

- **false alarms**: the share of clean held-out sentences *that hold a value some rule of
  the rule set checks* (a rule matched there, whatever its verdict) in which a rule REJECTS —
  the sentences where an alarm can fall. The share of all sentences that hold a value
  (number, percent or date) is printed beside it;
- **recall** per corruption: a corruption is caught when the corrupted document gets a
  rejection the clean document does not have. Corruptions are chosen by patterns defined
  here, independent of what was learned, and only those that make a value impossible count
  towards the target (`--all` prints every one):
  - medical: a lab or vital-sign value after its name written ten times larger or smaller,
    counted when the result lies outside what a living patient can have (`PLAUSIBLE`, a
    table of survivable extremes written here); a unit swapped (mg↔g, mcg→mg, mL→L,
    mg/dL↔mmol/L) to one the word before the value never takes anywhere in the corpus;
  - legal: a number of days ×10; days written as months where the corpus never writes
    months after the word before the number nor before the word after the unit (`unit_contexts`);
    a payment term that the document states again elsewhere changed in one place;
  - finance: an amount in thousands, millions or billions written ×1000 or ÷1000 (a scale
    slip), counted when it leaves [smallest / 10, largest × 10] of the amounts the filing
    states in that unit; a share or rate ("45% of revenue", "a margin of 38.2%", "tax rate
    of 21%") written over 100 %; a year (alone or in a date) written a century late
    (2019 → 2119), outside any filing's years.

Target: false alarms ≤ 1 % of clean value-bearing sentences, recall ≥ 0.9 on impossible
corruptions. Each domain is learned with several `--alarm-budgets` (the clean-corpus
rejections the learner may spend per value-bearing sentence; the teacher's work is shared).
`--in-sample` also scans the 260 MTSamples General Medicine notes with the shipped
`heatmaps/medical.yaml` (which has seen them: in-sample) and `examples/medical.heat`. The
learned heatmaps are kept in bench/.work/ (a rerun resumes heatc learn's work there).
`--teacher-sentences N` learns as `heatc learn` does by default: the teacher labels N
sentences, the student it trains scores the cells (work in bench/.work/<domain>-tN/).
`--ceiling` adds, held out, rules that hold the medical limits of `PLAUSIBLE` themselves
(`usefulness_ceiling.py`): what ranges keyed on lab names reach where the limits are known,
alone and beside each split's learned rules (what knowing the limits would add to them);
and how often a contract restates a payment term with another number.
`--seeds 0 1 2` splits each corpus three ways (a split per seed, each learned on its own
half, work in bench/.work/<domain>-tN-sS/) and pools the counts of the three: one split moves
medical's false alarms by more than half a point and its recall by several points, as much as most
changes to the learner do.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import DATA, REPO, machine, split_documents
from usefulness_ceiling import ceiling_files, restated_terms
from usefulness_rows import HEADER, missed_after_lines, missed_lines, per_rule_lines, pooled, row
from usefulness_text import around, changed_word, number_start, replaced, scaled, word_after, word_before

WORK = REPO / "bench" / ".work"
GENERAL_MEDICINE = DATA / "medical/text/mtsamples_general_medicine_260notes_linebroken.tgz"

LABS = (
    "glucose|potassium|sodium|chloride|creatinine|bun|hemoglobin|hematocrit|wbc|platelets|platelet count|calcium|"
    "magnesium|inr|temperature|pulse|heart rate|blood pressure|respiratory rate|respirations|weight|troponin|"
    "albumin|bilirubin|bicarbonate|co2|phosphorus|hgb|hct|tsh|ptt|pt"
)
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"  # "231,000" is one number, as heatc reads it
MEDICAL_VALUE = re.compile(
    rf"\b({LABS})\b(?:\s+(?:was|is|of|at|level|:))*\s*[:=]?\s*({NUM})\b(?![/\d])(\s*mmol)?", re.I
)
# What a living patient can have (survivable extremes, US units as the notes write them;
# both conventions where notes use two, e.g. platelets 231 or 231,000): a value outside is
# impossible. Written from clinical references for this benchmark, not from the corpus.
PLAUSIBLE = {
    "glucose": (10, 2000), "glucose mmol": (0.5, 110), "potassium": (1, 10), "sodium": (95, 200),
    "chloride": (60, 150), "bicarbonate": (2, 60), "co2": (2, 60), "bun": (1, 250), "creatinine": (0.1, 25),
    "calcium": (2, 20), "magnesium": (0.3, 10), "phosphorus": (0.5, 20), "albumin": (0.5, 7),
    "bilirubin": (0.1, 60), "hemoglobin": (2, 25), "hgb": (2, 25), "hematocrit": (6, 75), "hct": (6, 75),
    "wbc": (0.1, 500_000), "platelets": (1, 3_000_000), "platelet count": (1, 3_000_000), "inr": (0.5, 20),
    "pt": (5, 150), "ptt": (10, 200), "troponin": (0, 1000), "tsh": (0.001, 1000), "temperature": (25, 113),
    "pulse": (20, 300), "heart rate": (20, 300), "blood pressure": (40, 300), "respiratory rate": (2, 80),
    "respirations": (2, 80), "weight": (0.3, 700),
}  # fmt: skip
MEDICAL_UNITS = {"mg": "g", "g": "mg", "mcg": "mg", "ml": "L", "mL": "L", "mg/dL": "mmol/L", "mmol/L": "mg/dL"}
LEGAL_DAYS = re.compile(rf"\(({NUM})\)\s*days|\b({NUM})\s+days", re.I)
TERM = re.compile(
    rf"\b(?:pay|payment|payments|payable|paid|invoice|invoices)\b[^.;]{{0,80}}?\(?({NUM})\)?\s*days", re.I
)
AMOUNT = re.compile(rf"(?<![\d,.])({NUM})\s*(thousand|million|billion)\b", re.I)
SHARE = re.compile(
    rf"(?:\b(?:rate|rates|margin|margins|share|ratio|portion|percentage)\b(?:\s+\w+){{0,3}}?\s+(?:of|was|is|at|to)\s+"
    rf"({NUM})%|(?<![\d.])({NUM})%\s+of\b)",
    re.I,
)
YEAR = re.compile(r"(?<![\d,.$/])((?:19|20)\d\d)(?![\d%]|[,.]\d)")


def with_bands(domain: str, which: str) -> bool:
    """Whether `domain` learns with magnitude bands under `--bands` `which`: "shipped" as
    its shipped heatmap was learned (with bands if any of its cells has one)."""
    if which != "shipped":
        return which == "all"
    from heatc.heatmap.format import load_heatmap

    return any(c.band for c in load_heatmap(REPO / "heatmaps" / f"{domain}.yaml").cells)


def learn_heatmap(
    domain: str, docs, args, alarm_budget: float, bands: bool, seed: int = 0, dimensions: bool = False
) -> Path:
    from heatc.errors import HeatError
    from heatc.learn.config import CellsConfig, DistilConfig, LearnConfig, TeachingConfig
    from heatc.learn.pipeline import learn

    # the teacher reads a bounded sample and the student scores the cells, as `heatc learn`
    # does by default (`--teacher-sentences`); 0: the teacher reads and scores every sentence
    scored_by_student = args.teacher_sentences > 0
    folder = WORK / (f"{domain}-t{args.teacher_sentences}" if scored_by_student else domain)
    if seed:  # each split its own work folder (the teacher's labels are of its learning half)
        folder = folder.with_name(f"{folder.name}-s{seed}")
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "learn-half.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    out = folder / f"{domain}.yaml"
    config = LearnConfig(corpus=[corpus], output=out, name=domain, seed=seed, teaching=TeachingConfig(label_sentences=args.label_sentences, max_probe_sentences=args.probe_sentences, teacher_sentences=args.teacher_sentences), cells=CellsConfig(alarm_budget=alarm_budget, bands=bands, places=args.places, dimensions=dimensions), distil=DistilConfig(student=scored_by_student))  # fmt: skip
    t0 = time.perf_counter()
    try:
        summary = learn(config, log=lambda m: print(f"  {m}"))
    except HeatError:  # the work folder is from other settings or another heatc: start over
        summary = learn(config, fresh=True, log=lambda m: print(f"  {m}"))
    kept = folder / (
        f"{domain}-{alarm_budget:g}{'-bands' if bands else ''}{'-places' if args.places else ''}"
        f"{'-dims' if dimensions else ''}.yaml"
    )
    kept.write_bytes(out.read_bytes())
    print(
        f"  learned {kept.relative_to(REPO)} (alarm budget {alarm_budget:g}): {summary['cells']} cells, "
        f"{summary['hot_cells']} hot, {time.perf_counter() - t0:.0f} s"
    )
    return kept


class Scanner:
    def __init__(self, source: Path):
        from heatc.heatmap.build import compile_heatmap
        from heatc.lang.compiler import compile_file
        from heatc.verify.backends import wasm_checker

        self.program = compile_file(source) if source.suffix == ".heat" else compile_heatmap(source)[0]
        self.checker = wasm_checker(self.program)
        # the rules that check something (a requirement, consistency, a lock): a rule that only
        # matches — `examples/legal.heat`'s numbers written out, which the conflicts layer
        # reads — rejects nothing, and its sentences are no checked ones
        self.checking = {r.name for r in self.program.rules if r.requirements or r.channels}

    @property
    def rules(self) -> int:
        return len(self.program.rules)

    def matches(self, text: str) -> list:
        """The matches of the rules that check something."""
        return [e for e in self.checker.scan(text).events if e.kind == "match" and e.name in self.checking]


@dataclass(frozen=True)
class Match:
    name: str
    verdict: object
    start: int


class Beside:
    """Two rule sets run side by side, as a user keeps hand-written rules on beside learned
    ones: a sentence is checked or flagged if either checks or flags it. Each module lexes
    with its own classes; values are counted as the first one lexes them."""

    def __init__(self, first: Scanner, second: Scanner):
        self.first, self.second = first, second
        self.program = first.program

    @property
    def rules(self) -> int:
        return self.first.rules + self.second.rules

    def matches(self, text: str) -> list:
        return [Match(f"{i}:{e.name}", e.verdict, e.start) for i, s in enumerate((self.first, self.second))
                for e in s.matches(text)]  # fmt: skip


def rejected(events) -> Counter:
    from heatc_runtime import Verdict

    return Counter(e.name for e in events if e.verdict is Verdict.REJECTED)


def document_stream(doc) -> tuple[str, list[tuple[int, int]]]:
    """The document as its sentences joined by spaces, with each sentence's byte span."""
    from heatc.learn.text.corpus import sentences

    parts, spans, pos = [], [], 0
    for s in sentences(doc.text):
        n = len(s.encode())
        spans.append((pos, pos + n))
        parts.append(s)
        pos += n + 1
    return " ".join(parts), spans


CORPUS_NAMES = {"medical": "MTSamples", "finance": "TAT-QA", "legal": "CUAD"}
LEGAL_UNITS = {"days": "months"}  # the swap a contract's reader would not notice


def unit_contexts(domain: str, docs) -> set[tuple[str, str, str]]:
    """Every context a unit is written in, for the unit swaps: ("before", word, unit) for the
    word before the number, ("after", unit, word) for the word after the unit. A swap makes a
    value impossible where the corpus never writes its new unit in the context that names the
    quantity: in clinical notes the word before the value ("aspirin 81 mg": no drug takes "g"
    where aspirin never does); in contracts that word is mostly a preposition ("within 30
    days") and the quantity is named on either side ("a term of 30 days", "30 days' notice"),
    so a swap counts only where neither side's word is ever written with the new unit."""
    table = MEDICAL_UNITS if domain == "medical" else LEGAL_UNITS
    units = "|".join(sorted(map(re.escape, set(table) | set(table.values())), key=len, reverse=True))
    unit_re = re.compile(rf"({NUM})\)?\s?({units})\b")  # "thirty (30) days" too
    seen = set()
    for d in docs:
        for m in unit_re.finditer(d.text):
            unit = m.group(2).lower()
            seen.add(("before", word_before(d.text, m.start()), unit))
            seen.add(("after", unit, word_after(d.text, m.end())))
    return seen


def _never_written(context: set | None, stream: str, number_at: int, unit_end: int, new: str, both: bool) -> bool:
    """Whether the corpus never writes unit `new` in this place's context (`unit_contexts`);
    with `both`, in neither the word before the number's nor the word after the unit's."""
    if context is None:
        return True
    if ("before", word_before(stream, number_start(stream, number_at)), new) in context:
        return False
    after = word_after(stream, unit_end) if both else ""
    return not (after and ("after", new, after) in context)


def corruptions(domain: str, stream: str, context: set | None = None) -> list[tuple[str, str, bool]]:
    """(kind, corrupted stream, whether it makes a value impossible) for every place in the
    document a corruption applies. `context`: the (word, unit) pairs of the corpus
    (`unit_contexts`); without it every unit swap counts as impossible."""
    out: list[tuple[str, str, bool]] = []
    if domain == "medical":
        for m in MEDICAL_VALUE.finditer(stream):
            v = Decimal(m.group(2).replace(",", ""))
            if v == 0:
                continue  # ten times 0 is 0
            lab = m.group(1).lower() + (" mmol" if m.group(3) and m.group(1).lower() == "glucose" else "")
            lo, hi = PLAUSIBLE[lab]
            for kind, factor in (("value x10", Decimal(10)), ("value /10", Decimal("0.1"))):
                new = v * factor
                out.append((kind, replaced(stream, m.span(2), scaled(m.group(2), factor)), not lo <= new <= hi))
        units = "|".join(sorted(map(re.escape, MEDICAL_UNITS), key=len, reverse=True))
        for m in re.finditer(rf"(?<=\d)(\s?)({units})\b", stream):
            new = MEDICAL_UNITS[m.group(2)]
            never = _never_written(context, stream, m.start(), m.end(), new.lower(), both=False)
            out.append(("unit swapped", replaced(stream, m.span(2), new), never))
    elif domain == "legal":
        for m in LEGAL_DAYS.finditer(stream):
            g = 1 if m.group(1) else 2
            if float(m.group(g).replace(",", "")) == 0:
                continue
            out.append(("value x10", replaced(stream, m.span(g), scaled(m.group(g), Decimal(10))), True))
        for m in re.finditer(r"(?<=\d)(\s?)(days)\b", stream):
            never = _never_written(context, stream, m.start(), m.end(), "months", both=True)
            out.append(("unit swapped", replaced(stream, m.span(2), "months"), never))
        for m in TERM.finditer(stream):
            value = m.group(1)
            if len(re.findall(rf"\(?\b{re.escape(value)}\)?\s*days", stream, re.I)) >= 2:
                new = str(int(float(value.replace(",", ""))) + 15)
                out.append(("term changed", replaced(stream, m.span(1), new), True))
    else:
        amounts: dict[str, list[Decimal]] = {}
        found = list(AMOUNT.finditer(stream))
        for m in found:
            amounts.setdefault(m.group(2).lower(), []).append(Decimal(m.group(1).replace(",", "")))
        for m in found:
            v = Decimal(m.group(1).replace(",", ""))
            if v == 0:
                continue
            seen = [x for x in amounts[m.group(2).lower()] if x > 0]
            for kind, factor in (("scale x1000", Decimal(1000)), ("scale /1000", Decimal("0.001"))):
                new = v * factor
                out.append(
                    (kind, replaced(stream, m.span(1), scaled(m.group(1), factor)), not min(seen) / 10 <= new <= max(seen) * 10)
                )  # fmt: skip
        for m in SHARE.finditer(stream):
            g = 1 if m.group(1) else 2
            p = Decimal(m.group(g).replace(",", ""))
            new = p * 10 if p * 10 > 100 else p + 100
            out.append(("share over 100%", replaced(stream, m.span(g), f"{new.normalize():f}"), True))
        for m in YEAR.finditer(stream):
            out.append(("year +100", replaced(stream, m.span(1), str(int(m.group(1)) + 100)), True))
    return out


def evaluate(domain: str, scanner: Scanner, docs, max_per_kind: int, context: set | None = None) -> dict:
    """Clean sentences, false alarms and catches of one rule set over documents; `missed`:
    per kind, the corrupted text around each impossible value no rule caught."""
    from heatc import ir
    from heatc.semantics.lexing import lex

    # the lexeme codes with a value (so that this script also measures commits before dates)
    values = getattr(ir, "VALUE_CODES", (ir.LEX_NUMBER, ir.LEX_PERCENT))
    checked = flagged = valued = valued_flagged = total = 0
    caught: Counter = Counter()
    tried: Counter = Counter()
    impossible: Counter = Counter()
    caught_impossible: Counter = Counter()
    missed: dict[str, list[str]] = defaultdict(list)
    missed_after: dict[str, Counter] = defaultdict(Counter)  # per kind, the words the missed values follow
    alarms: list[str] = []  # the clean sentences flagged: "rule: sentence"
    by_rule: dict[str, Counter] = defaultdict(Counter)  # per rule: its flagged sentences, its catches per kind
    for doc in docs:
        stream, spans = document_stream(doc)
        if not spans:
            continue
        clean = scanner.matches(stream)
        data = stream.encode()
        has_value = [False] * len(spans)
        for x in lex(scanner.program, data):
            if x.code in values:
                has_value[_sentence(spans, x.start)] = True
        matched = [False] * len(spans)
        alarm = [False] * len(spans)
        base = rejected(clean)
        rule_alarms = set()
        for e in clean:
            i = _sentence(spans, e.start)
            matched[i] = True
            if e.verdict.name == "REJECTED":
                rule_alarms.add((e.name, i))
            if e.verdict.name == "REJECTED" and not alarm[i]:
                alarms.append(f"{e.name}: {data[spans[i][0] : spans[i][1]].decode(errors='replace').strip()[:160]}")
            alarm[i] = alarm[i] or e.verdict.name == "REJECTED"
        for name, _ in rule_alarms:
            by_rule[name]["false alarms"] += 1
        total += len(spans)
        checked += sum(matched)
        flagged += sum(alarm)
        valued += sum(has_value)
        valued_flagged += sum(a and v for a, v in zip(alarm, has_value, strict=True))
        for kind, corrupted, is_impossible in corruptions(domain, stream, context):
            if tried[kind] >= max_per_kind:
                continue
            tried[kind] += 1
            after = rejected(scanner.matches(corrupted))
            catchers = [r for r in after if after[r] > base[r]]
            hit = bool(catchers)
            caught[kind] += hit
            if is_impossible:
                impossible[kind] += 1
                caught_impossible[kind] += hit
                for r in catchers:  # a catch shared among the rules that made it
                    by_rule[r][kind] += 1 / len(catchers)
                if not hit:
                    missed[kind].append(around(stream, corrupted))
                    missed_after[kind][changed_word(stream, corrupted)] += 1
    return {
        "sentences": total, "checked": checked, "flagged": flagged, "valued": valued, "valued_flagged": valued_flagged,
        "rules": scanner.rules,
        "recall": {k: (caught[k], tried[k]) for k in sorted(tried)},
        "impossible": {k: (caught_impossible[k], impossible[k]) for k in sorted(impossible)},
        "missed": dict(missed), "missed_after": dict(missed_after), "alarms": alarms, "by_rule": dict(by_rule),
    }  # fmt: skip


def _sentence(spans: list[tuple[int, int]], at: int) -> int:
    lo, hi = 0, len(spans) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if spans[mid][0] <= at:
            lo = mid
        else:
            hi = mid - 1
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["medical", "finance", "legal"])
    ap.add_argument("--label-sentences", type=int, default=200)
    ap.add_argument("--probe-sentences", type=int, default=2000)
    ap.add_argument("--max-per-kind", type=int, default=400, help="corruptions tried per kind and domain")
    ap.add_argument(
        "--seeds", "--seed", nargs="+", type=int, default=[0], dest="seeds",
        help="splits to learn and measure (a split per seed); with several, each row pools their counts",
    )  # fmt: skip
    ap.add_argument(
        "--teacher-sentences", type=int, default=0,
        help="as heatc learn's: the teacher labels this many sentences and the student scores the cells (0: the teacher all)",
    )  # fmt: skip
    ap.add_argument(
        "--alarm-budgets", nargs="+", type=float, default=[0.0025, 0.005, 0.01],
        help="heatc learn --alarm-budget values to learn with (the teacher's work is shared)",
    )  # fmt: skip
    ap.add_argument(
        "--bands", choices=("shipped", "all", "none"), default="shipped",
        help="which domains learn with magnitude bands (heatc learn --bands): as the shipped heatmaps (finance), all, none",
    )  # fmt: skip
    ap.add_argument("--places", action="store_true", help="learn with precisions (heatc learn --places)")
    ap.add_argument(
        "--dimensions", choices=("on", "off", "both"), default="off",
        help="learn keyword cells per unit (heatc learn's default), per dimension (heatc learn --dimensions), or both: "
        "each table row beside the other in the same run (the teacher's work is shared)",
    )  # fmt: skip
    ap.add_argument("--all", action="store_true", help="recall on every corruption, not only the impossible ones")
    ap.add_argument(
        "--misses", type=int, default=0, help="print up to this many missed impossible corruptions per kind"
    )
    ap.add_argument(
        "--missed-after", type=int, default=0,
        help="print, per corruption, this many of the words that the most missed values follow",
    )  # fmt: skip
    ap.add_argument(
        "--false-alarms", type=int, default=0, help="print up to this many flagged clean held-out sentences"
    )
    ap.add_argument(
        "--per-rule", type=int, default=0,
        help="print, per rule set learned, this many rules with the most false alarms, each with what it caught",
    )  # fmt: skip
    ap.add_argument("--in-sample", action="store_true", help="also the 260 General Medicine notes, shipped heatmap")
    ap.add_argument("--no-learn", action="store_true", help="only the in-sample check")
    ap.add_argument(
        "--ceiling", action="store_true",
        help="also what rules holding the benchmark's own limits reach (medical), how often contracts restate terms alike (legal)",
    )  # fmt: skip
    ap.add_argument(
        "--markdown", type=Path, help="also rewrite the usefulness table of this page (docs/performance.md)"
    )  # fmt: skip
    args = ap.parse_args()
    if args.markdown and (args.no_learn or len(args.alarm_budgets) != 1 or not args.in_sample):
        sys.exit("bench: --markdown writes the page's table: one alarm budget, with --in-sample, not --no-learn")
    print(f"machine: {machine()}")
    lines = []
    table: list[tuple[str, dict]] = []  # (row label, result) for --markdown
    splits = f", {len(args.seeds)} splits" if len(args.seeds) > 1 else ""
    for domain in [] if args.no_learn else args.domains:
        halves = {seed: split_documents(domain, seed) for seed in args.seeds}
        learn_docs, held = halves[args.seeds[0]]
        print(f"{domain}: {len(learn_docs)} documents to learn from, {len(held)} held out")
        context = unit_contexts(domain, learn_docs + held) if domain != "finance" else None
        bands = with_bands(domain, args.bands)
        lines.append(f"{domain} (held-out half{splits})")
        examples = Scanner(REPO / "examples" / f"{domain}.heat")
        learned_by_seed: dict[int, Scanner] = {}  # the last budget's, for the ceiling's rows beside them
        dimension_modes = {"on": [True], "off": [False], "both": [False, True]}[args.dimensions]
        for budget, dimensions in [(b, d) for b in args.alarm_budgets for d in dimension_modes]:
            learned_rows, beside_rows = [], []
            units = ", per dimension (--dimensions)" if dimensions else ""
            for seed, (learn_docs, held) in halves.items():
                heatmap = learn_heatmap(domain, learn_docs, args, budget, bands, seed, dimensions)
                t0 = time.perf_counter()
                learned = learned_by_seed[seed] = Scanner(heatmap)
                r = evaluate(domain, learned, held, args.max_per_kind, context)
                print(
                    f"  scanned {r['sentences']} held-out sentences and the corruptions in {time.perf_counter() - t0:.0f} s"
                )
                if len(halves) > 1:
                    lines.append(row(f"  learned {budget:g}{units}, seed {seed}", r, args.all))
                learned_rows.append(r)
                beside_rows.append(evaluate(domain, Beside(learned, examples), held, args.max_per_kind, context))
            r = pooled(learned_rows)
            lines.append(row(f"  learned, budget {budget:g}{', bands' if bands else ''}{units}", r, args.all))
            beside = (f"  learned {budget:g} beside it", pooled(beside_rows))
            lines += missed_lines(r, args.misses)
            lines += missed_after_lines(r, args.missed_after)
            lines += per_rule_lines(r, args.per_rule)
            lines += [f"      false alarm {t}" for t in r["alarms"][: args.false_alarms]]
            shipped_as = ", `heatc learn --bands`" if bands else ""
            table.append((f"{domain}, held out ({CORPUS_NAMES[domain]}){shipped_as}{splits}", r))
        r = pooled([evaluate(domain, examples, held, args.max_per_kind, context) for _, held in halves.values()])
        lines.append(row(f"  examples/{domain}.heat", r, args.all))
        lines.append(row(*beside, args.all))
        table.append((f"{domain} and `examples/{domain}.heat` side by side, held out{splits}", beside[1]))
        for label, path in ceiling_files(PLAUSIBLE, WORK) if args.ceiling and domain == "medical" else ():
            scanner = Scanner(path)
            r = pooled([evaluate(domain, scanner, held, args.max_per_kind, context) for _, held in halves.values()])
            lines.append(row(label, r, args.all))
            if learned_by_seed:  # the limits known, beside what was learned: what knowing them would add
                r = pooled(
                    [evaluate(domain, Beside(learned_by_seed[seed], scanner), held, args.max_per_kind, context)
                     for seed, (_, held) in halves.items()]
                )  # fmt: skip
                lines.append(row(f"{label}, beside learned", r, args.all))
        if args.ceiling and domain == "legal":
            # (a split's two halves: every contract)
            restated, differ = restated_terms([d.text for d in learn_docs + held], TERM)
            lines.append(
                f"  payment terms stated again in a contract: {restated}, {differ} with another number than the first"
            )
    if args.in_sample:
        from heatc.learn.text.corpus import read_corpus

        notes = read_corpus([GENERAL_MEDICINE])
        context = unit_contexts("medical", notes)
        lines.append(f"medical, the {len(notes)} General Medicine notes (in-sample for the shipped heatmap)")
        for label, source in (("heatmaps/medical.yaml", REPO / "heatmaps/medical.yaml"),
                              ("examples/medical.heat", REPO / "examples/medical.heat")):  # fmt: skip
            r = evaluate("medical", Scanner(source), notes, 10**9, context)
            lines.append(row(f"  {label}", r, args.all))
            if label.startswith("heatmaps"):
                table.append((f"{len(notes)} General Medicine notes, shipped `medical.yaml` (in-sample)", r))
                lines += missed_lines(r, args.misses)
                lines += missed_after_lines(r, args.missed_after)
    print("\nFalse alarms: flagged clean sentences among those a rule checks (FA) and among those holding")
    print("a value (FA/val); recall on corruptions that make a value impossible (target: recall >= 0.9 at FA <= 1 %)")
    print(HEADER)
    print("\n".join(lines))
    if args.markdown:
        import report

        command = f"python bench/learn_usefulness.py --teacher-sentences {args.teacher_sentences} "
        command += f"--alarm-budgets {args.alarm_budgets[0]:g} --in-sample"
        command += f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds != [0] else ""
        report.update(args.markdown, {"usefulness": report.usefulness_section(table, machine(), command=command)})
        print(f"wrote the usefulness table of {args.markdown}")


if __name__ == "__main__":
    main()
