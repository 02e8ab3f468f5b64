"""Do rules learned from a heatmap alone catch real corruptions? `python bench/learn_usefulness.py`

Per domain, documents are split in two by a hash of their id. `heatc learn` learns a heatmap
from one half (no hand-written rules, no student); its lowered rules then scan the other
half, sentence by sentence within each document:

- **false-positive rate**: the share of clean held-out sentences in which a rule REJECTS;
- **recall** per corruption: a corruption is caught when the corrupted document gets a
  rejection the clean document does not have. Corruptions are chosen by patterns defined
  here, independent of what was learned:
  - *value ×10*: a lab or vital-sign value after its name (medical), a percentage
    (finance), a number of days (legal) — written ten times larger;
  - *unit swapped*: mg↔g, mcg↔mg, mL↔L, mg/dL↔mmol/L (medical); million↔billion,
    thousand↔million (finance); days→months (legal);
  - *term changed*: a payment term ("… payment … within thirty (30) days") that the
    document states again elsewhere changed in one place (legal).

Target: recall >= 0.8 with at most 2 % of clean sentences flagged. Each domain is learned
with several `--alarm-budget` values (the clean-corpus rejections the learner may spend per
sentence), which trades recall against flagged clean sentences. The learned heatmaps are
kept in bench/.work/ (a rerun resumes heatc learn's work there; delete it to start over).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import REPO, machine, split_documents

WORK = REPO / "bench" / ".work"

LABS = (
    "glucose|potassium|sodium|chloride|creatinine|bun|hemoglobin|hematocrit|wbc|platelets|platelet count|calcium|"
    "magnesium|inr|temperature|pulse|heart rate|blood pressure|respiratory rate|respirations|weight|troponin|"
    "albumin|bilirubin|bicarbonate|co2|phosphorus|hgb|hct|tsh|ptt|pt"
)
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"  # "231,000" is one number, as heatc reads it
VALUE_PATTERNS = {
    "medical": re.compile(rf"\b(?:{LABS})\b(?:\s+(?:was|is|of|at|level|:))*\s*[:=]?\s*({NUM})\b", re.I),
    "finance": re.compile(rf"({NUM})%"),
    "legal": re.compile(rf"\(({NUM})\)\s*days|\b({NUM})\s+days", re.I),
}
UNIT_SWAPS = {
    "medical": {"mg": "g", "g": "mg", "mcg": "mg", "ml": "L", "mL": "L", "mg/dL": "mmol/L", "mmol/L": "mg/dL"},
    "finance": {"million": "billion", "billion": "million", "thousand": "million"},
    "legal": {"days": "months"},
}
TERM = re.compile(
    rf"\b(?:pay|payment|payments|payable|paid|invoice|invoices)\b[^.;]{{0,80}}?\(?({NUM})\)?\s*days", re.I
)


def learn_heatmap(domain: str, docs, args, alarm_budget: float) -> Path:
    from heatc.learn.config import LearnConfig
    from heatc.learn.pipeline import learn

    folder = WORK / domain
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "learn-half.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
    out = folder / f"{domain}.yaml"
    config = LearnConfig(
        corpus=[corpus], output=out, name=domain, seed=args.seed, label_sentences=args.label_sentences,
        max_probe_sentences=args.probe_sentences, student=False, alarm_budget=alarm_budget,
    )  # fmt: skip
    t0 = time.perf_counter()
    from heatc.errors import HeatError

    try:
        summary = learn(config, log=lambda m: print(f"  {m}"))
    except HeatError:  # the work folder is from other settings or another heatc: start over
        summary = learn(config, fresh=True, log=lambda m: print(f"  {m}"))
    print(
        f"  learned {out.relative_to(REPO)} (alarm budget {alarm_budget:g}): {summary['cells']} cells, "
        f"{summary['hot_cells']} hot, {time.perf_counter() - t0:.0f} s"
    )
    return out


class Scanner:
    def __init__(self, heatmap: Path):
        from heatc.backends import wasm_checker
        from heatc.heatmap.build import compile_heatmap

        self.program = compile_heatmap(heatmap)[0]
        self.checker = wasm_checker(self.program)

    def rejections(self, text: str) -> list:
        from heatc_runtime import Verdict

        return [e for e in self.checker.scan(text).events if e.kind == "match" and e.verdict is Verdict.REJECTED]


def document_stream(doc) -> tuple[str, list[tuple[int, int]]]:
    """The document as its sentences joined by spaces, with each sentence's byte span."""
    from heatc.learn.corpus import sentences

    parts, spans, pos = [], [], 0
    for s in sentences(doc.text):
        n = len(s.encode())
        spans.append((pos, pos + n))
        parts.append(s)
        pos += n + 1
    return " ".join(parts), spans


def _times_ten(text: str) -> str:
    """The number ten times larger, written the same way: "7.2" -> "72", "0.05" -> "0.5",
    "231,000" -> "2,310,000" (appending a digit would give "2310,000", which reads as 2310)."""
    frac = text.partition(".")[2]
    value = Decimal(text.replace(",", "")) * 10
    decimals = max(len(frac) - 1, 0)
    return f"{value:,.{decimals}f}" if "," in text else f"{value:.{decimals}f}"


def corruptions(domain: str, stream: str):
    """(kind, corrupted stream) for every place in the document a corruption applies."""
    out = []
    for m in VALUE_PATTERNS[domain].finditer(stream):
        g = 1 if m.group(1) else 2
        if float(m.group(g).replace(",", "")) == 0:
            continue  # ten times 0 is 0: "0%" written "00%" is the same value, not a corruption
        a, b = m.span(g)
        out.append(("value x10", stream[:a] + _times_ten(m.group(g)) + stream[b:]))
    swaps = UNIT_SWAPS[domain]
    unit_re = re.compile(rf"(?<=\d)(\s?)({'|'.join(sorted(map(re.escape, swaps), key=len, reverse=True))})\b")
    for m in unit_re.finditer(stream):
        a, b = m.span(2)
        out.append(("unit swapped", stream[:a] + swaps[m.group(2)] + stream[b:]))
    if domain == "legal":
        for m in TERM.finditer(stream):
            value = m.group(1)
            if len(re.findall(rf"\(?\b{re.escape(value)}\)?\s*days", stream, re.I)) >= 2:
                a, b = m.span(1)
                out.append(("term changed", stream[:a] + str(int(float(value.replace(",", ""))) + 15) + stream[b:]))
    return out


def evaluate(domain: str, heatmap: Path, held, max_per_kind: int) -> dict:
    scanner = Scanner(heatmap)
    flagged = total = 0
    caught: Counter = Counter()
    tried: Counter = Counter()
    for doc in held:
        stream, spans = document_stream(doc)
        if not spans:
            continue
        clean = scanner.rejections(stream)
        starts = sorted(e.start for e in clean)
        total += len(spans)
        flagged += sum(any(a <= x < b for x in starts) for a, b in spans)
        base = Counter(e.name for e in clean)
        for kind, corrupted in corruptions(domain, stream):
            if tried[kind] >= max_per_kind:
                continue
            tried[kind] += 1
            after = Counter(e.name for e in scanner.rejections(corrupted))
            caught[kind] += any(after[r] > base[r] for r in after)
    return {
        "sentences": total,
        "fpr": flagged / max(total, 1),
        "rules": len(scanner.program.rules),
        "recall": {k: (caught[k] / tried[k], tried[k]) for k in sorted(tried)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["medical", "finance", "legal"])
    ap.add_argument("--label-sentences", type=int, default=200)
    ap.add_argument("--probe-sentences", type=int, default=2000)
    ap.add_argument("--max-per-kind", type=int, default=400, help="corruptions tried per kind and domain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--alarm-budgets", nargs="+", type=float, default=[0.005, 0.01, 0.02],
        help="heatc learn --alarm-budget values to learn with (the teacher's work is shared)",
    )  # fmt: skip
    ap.add_argument(
        "--markdown", type=Path, help="also rewrite the usefulness table of this page (docs/performance.md)"
    )
    args = ap.parse_args()
    print(f"machine: {machine()}")
    results = {}
    for domain in args.domains:
        learn_docs, held = split_documents(domain, args.seed)
        print(f"{domain}: {len(learn_docs)} documents to learn from, {len(held)} held out")
        for budget in args.alarm_budgets:
            heatmap = learn_heatmap(domain, learn_docs, args, budget)
            t0 = time.perf_counter()
            results[domain, budget] = r = evaluate(domain, heatmap, held, args.max_per_kind)
            print(
                f"  scanned {r['sentences']} held-out sentences and the corruptions in {time.perf_counter() - t0:.0f} s"
            )
    print("\nRules lowered from learned heatmaps alone, on held-out documents (target: recall >= 0.8 at <= 2 % FPR)")
    print(
        f"{'domain':<9} {'budget':>6} {'rules':>5} {'clean sentences':>15} {'flagged':>8} {'recall':>7}"
        "   per corruption (tried)"
    )
    for (domain, budget), r in results.items():
        tried = sum(n for _, n in r["recall"].values())
        caught = round(sum(v * n for v, n in r["recall"].values()))
        pooled = caught / max(tried, 1)
        recall = ", ".join(f"{k} {v:.2f} ({n})" for k, (v, n) in r["recall"].items())
        print(
            f"{domain:<9} {budget:>6g} {r['rules']:>5} {r['sentences']:>15} {r['fpr'] * 100:>7.2f}% {pooled:>7.2f}   {recall}"
            f"; pooled {caught}/{tried} = {pooled:.3f}"
        )
    if args.markdown:
        import report  # bench/report.py, beside this script

        budgets = " ".join(f"{b:g}" for b in args.alarm_budgets)
        command = f"python bench/learn_usefulness.py --alarm-budgets {budgets}"
        report.update(args.markdown, {"usefulness": report.usefulness_section(results, machine(), command=command)})
        print(f"{args.markdown}: usefulness table rewritten")


if __name__ == "__main__":
    main()
