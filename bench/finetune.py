"""Does fine-tuning on a domain's PDFs help on held-out pages? `python bench/finetune.py`

Per domain (medical: the four FDA drug labels; legal: the five CUAD contracts; finance: the
Uber 10-K), the pages of its PDFs are split in two by a hash of (file, page). `heatc
finetune` adapts the shipped heatmap to one half; both heatmaps then read the other half,
page by page (each page's sentences joined, as `heatc learn` counts them); then the halves
swap (`--halves`), so that every page is held out once:

- **value-bearing sentences**: held-out sentences holding a value that a rule of either
  heatmap checks (a match event, whatever its verdict) — one denominator for both;
- **false alarms**: rejections in those sentences of the clean text, per sentence;
- **recall**: a corruption (a value with a unit ×10 or ÷10, a unit swapped, a payment term
  changed; patterns from `learn_usefulness.py` plus doses and amounts before their unit) is
  caught when the corrupted page gets a rejection the clean page does not have.

Equal false alarms: both heatmaps are compiled with every cell a rule, each rule carrying
its cell's score; at a sensitivity threshold t the rules of cells scored ≥ t are on (rules of
hand-written rule files always). The base heatmap's operating point is its shipped threshold;
the fine-tuned heatmap is reported at its own threshold and at the best threshold whose
false alarms do not exceed the base's, and the base at the best threshold whose false alarms
do not exceed the fine-tuned heatmap's (a fine-tuned heatmap with far fewer false alarms is
compared where the base has as few). The last table sums both halves' counts at each half's
operating points: a half has a few dozen pages, and one page more or less of a kind decides
a comparison there. The work of `heatc finetune` is kept in bench/.work/finetune/ (a rerun
resumes it).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import DATA, REPO, machine
from learn_usefulness import corruptions

WORK = REPO / "bench" / ".work" / "finetune"
DOMAINS = {
    "medical": sorted((DATA / "medical/pdf").glob("fda_*.pdf")),
    "legal": sorted((DATA / "legal/pdf").glob("cuad_*")),
    "finance": [DATA / "finance/pdf/uber_2021_form10k.pdf"],
}
UNITS = {
    "medical": r"mg|mcg|g|mL|mg/dL|mmol/L|units|%",
    "legal": r"days|months|years|%",
    "finance": r"million|billion|thousand|%",
}
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"


def _half(file: Path, page: int, seed: int) -> int:
    return hashlib.sha256(f"{seed}\0{file.name}\0{page}".encode()).digest()[0] & 1


def _scaled(text: str, up: bool) -> str:
    frac = text.partition(".")[2]
    value = Decimal(text.replace(",", "")) * (10 if up else Decimal("0.1"))
    decimals = max(len(frac) - 1, 0) if up else len(frac) + 1
    return f"{value:,.{decimals}f}" if "," in text else f"{value:.{decimals}f}"


def _corruptions(domain: str, stream: str) -> list[tuple[str, str]]:
    """learn_usefulness's patterns (the medical value pattern reads labs, the rest are
    general) plus every value before a unit of the domain ×10 or ÷10, alternating."""
    out = [(kind, corrupted) for kind, corrupted, _ in corruptions(domain, stream)]  # possible or not
    for k, m in enumerate(re.finditer(rf"(?<![\d.,])({NUM})\s?(?:{UNITS[domain]})\b", stream)):
        if float(m.group(1).replace(",", "")) == 0:
            continue
        a, b = m.span(1)
        out.append((f"value {'x' if k % 2 == 0 else '÷'}10", stream[:a] + _scaled(m.group(1), k % 2 == 0) + stream[b:]))
    return out


class Rules:
    """A heatmap compiled with every cell a rule; each rule's score (cells: the cell's, rule
    files: infinity)."""

    def __init__(self, heatmap: Path):
        import yaml

        from heatc.heatmap.build import compile_heatmap
        from heatc.verify.backends import wasm_checker

        doc = yaml.safe_load(heatmap.read_text(encoding="utf-8"))
        self.threshold = float(doc["thresholds"]["sensitivity"])
        doc["thresholds"]["sensitivity"] = 0.0
        doc["expects"] = []
        from heatc.learn.heatmaps.emit import dump_heatmap

        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=heatmap.parent, delete=False) as f:
            f.write(dump_heatmap(doc))
        try:
            program, lowered, hm = compile_heatmap(f.name)
        finally:
            Path(f.name).unlink()
        score = {c.id: c.score for c in hm.cells}
        self.score = {r: score.get(cell, float("inf")) for r, cell in lowered.source_cell.items()}
        self.cell = dict(lowered.source_cell)  # rule -> the cell it checks
        self.cells = {c.id: c for c in hm.cells}
        self.checker = wasm_checker(program)

    def events(self, text: str) -> list:
        return [e for e in self.checker.scan(text).events if e.kind == "match"]


def _stream(text: str) -> tuple[str, list[tuple[int, int]]]:
    from heatc.learn.text.corpus import sentences

    parts, spans, pos = [], [], 0
    for s in sentences(text):
        n = len(s.encode())
        spans.append((pos, pos + n))
        parts.append(s)
        pos += n + 1
    return " ".join(parts), spans


def evaluate(domain: str, heatmaps: dict[str, Path], pages: list[str], max_corruptions: int, seed: int) -> dict:
    """Per heatmap: per clean page its value-bearing sentences and rejections (rule, start),
    per corruption the rules that reject more than on the clean page."""
    from heatc_runtime import Verdict

    rules = {k: Rules(p) for k, p in heatmaps.items()}
    bearing = 0
    alarms: dict[str, list[str]] = {k: [] for k in rules}  # the rule of each false alarm
    caught: dict[str, list[set[str]]] = {k: [] for k in rules}
    kinds: list[str] = []
    all_corruptions = []
    for text in pages:
        stream, spans = _stream(text)
        if not spans:
            continue
        clean = {k: r.events(stream) for k, r in rules.items()}
        starts = {e.start for evs in clean.values() for e in evs}
        value_spans = [(a, b) for a, b in spans if any(a <= x < b for x in starts)]
        bearing += len(value_spans)
        for k, evs in clean.items():
            alarms[k] += [
                e.name for e in evs if e.verdict is Verdict.REJECTED and any(a <= e.start < b for a, b in value_spans)
            ]
        all_corruptions += [(stream, clean, kind, c) for kind, c in _corruptions(domain, stream)]
    order = sorted(range(len(all_corruptions)), key=lambda i: hashlib.sha256(f"{seed}{i}".encode()).digest())
    for i in sorted(order[:max_corruptions]):
        _, clean, kind, corrupted = all_corruptions[i]
        kinds.append(kind)
        for k, r in rules.items():
            before = Counter(e.name for e in clean[k] if e.verdict is Verdict.REJECTED)
            after = Counter(e.name for e in r.events(corrupted) if e.verdict is Verdict.REJECTED)
            caught[k].append({n for n in after if after[n] > before[n]})
    return {"bearing": bearing, "alarms": alarms, "caught": caught, "kinds": kinds, "rules": rules}


def _counts(result: dict, k: str, t: float) -> tuple[int, int, int, int]:
    """(false alarms, value-bearing sentences, corruptions caught, corruptions) with the
    rules of heatmap `k` whose cells score ≥ `t` on."""
    score = result["rules"][k].score
    fa = sum(score[n] >= t for n in result["alarms"][k])
    hits = sum(any(score[n] >= t for n in c) for c in result["caught"][k])
    return fa, result["bearing"], hits, len(result["caught"][k])


def _at(result: dict, k: str, t: float) -> tuple[float, float]:
    fa, bearing, hits, n = _counts(result, k, t)
    return fa / max(bearing, 1), hits / max(n, 1)


def _best(result: dict, k: str, limit: float) -> tuple[float, float, float]:
    """(threshold, false alarms, recall): the best recall with false alarms ≤ limit."""
    thresholds = sorted({s for s in result["rules"][k].score.values() if s != float("inf")} | {1.01})
    best = (1.01, *_at(result, k, 1.01))
    for t in thresholds:
        fa, rec = _at(result, k, t)
        if fa <= limit + 1e-12 and rec > best[2]:
            best = (t, fa, rec)
    return best


POINTS = (
    "base (shipped threshold)",
    "fine-tuned (its threshold)",
    "fine-tuned (FA <= base)",
    "base (FA <= fine-tuned)",
)


def _fold(domain: str, fold: int, pdfs: list[Path], docs, args) -> dict:
    """Fine-tune on the pages of half `fold` and evaluate on the other half; the result has
    the operating points (`POINTS`: heatmap, threshold) besides `evaluate`'s."""
    from heatc.errors import HeatError
    from heatc.learn.config import FINETUNE_CELLS, FinetuneConfig
    from heatc.learn.finetuning.finetune import finetune

    learn_pages = {
        str(p): [pg.page for pg in d.pages if _half(p, pg.page, args.seed) == fold]
        for p, d in zip(pdfs, docs, strict=True)
    }
    held = [pg.text for p, d in zip(pdfs, docs, strict=True) for pg in d.pages if _half(p, pg.page, args.seed) != fold]
    base = REPO / "heatmaps" / f"{domain}.yaml"
    out = WORK / (domain if fold == 0 else f"{domain}-half{fold}") / f"{domain}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = FinetuneConfig(
        base=base, output=out, pdfs=pdfs, pages=learn_pages, seed=args.seed,
        teacher_sentences=args.teacher_sentences, epochs=args.epochs,
        cells=dataclasses.replace(
            FINETUNE_CELLS, **({} if args.alarm_budget is None else {"alarm_budget": args.alarm_budget}),
            **({} if args.min_worth is None else {"min_worth": args.min_worth}),
        ),
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        summary = finetune(config, log=lambda m: None)
    except HeatError:  # the work folder is of another base heatmap or heatc: start over
        summary = finetune(config, log=lambda m: None, fresh=True)
    seconds = time.perf_counter() - t0
    m = summary["metrics"]
    print(
        f"{domain}: fine-tuned on half {fold}, {sum(map(len, learn_pages.values()))} pages of {len(pdfs)} PDF(s), in "
        f"{seconds:.0f} s (teacher {summary['teacher_seconds']} s): {summary['cells']} cells, "
        f"{summary['domain_cells']} learned from the domain; student pair Spearman {m.get('pair_spearman')}, "
        f"pair AUC {m.get('pair_auc')}, token AUC {m.get('student_auc')}"
    )
    r = evaluate(domain, {"base": base, "fine-tuned": out}, held, args.corruptions, args.seed)
    tb0, tf0 = r["rules"]["base"].threshold, r["rules"]["fine-tuned"].threshold
    t = _best(r, "fine-tuned", _at(r, "base", tb0)[0])[0]
    tb = _best(r, "base", _at(r, "fine-tuned", tf0)[0])[0]  # the base at no more false alarms than the fine-tuned
    r["points"] = dict(zip(POINTS, [("base", tb0), ("fine-tuned", tf0), ("fine-tuned", t), ("base", tb)], strict=True))
    print(f"  held out: {len(held)} pages, {r['bearing']} value-bearing sentences, {len(r['kinds'])} corruptions "
          f"({', '.join(f'{k} {n}' for k, n in sorted(Counter(r['kinds']).items()))})")  # fmt: skip
    print(f"  {'':<34} {'false alarms/sentence':>22} {'recall':>8}")
    for label, (k, x) in r["points"].items():
        fa, rec = _at(r, k, x)
        shown = label if label in POINTS[:2] else label.replace("(", f"(threshold {x:.3f}, ")
        print(f"  {shown:<34} {fa:>22.4f} {rec:>8.3f}")
    per_kind = Counter(r["kinds"])
    for kind in sorted(per_kind):
        idx = [i for i, k in enumerate(r["kinds"]) if k == kind]
        sb, sf = r["rules"]["base"].score, r["rules"]["fine-tuned"].score
        hb = sum(any(sb[n] >= tb0 for n in r["caught"]["base"][i]) for i in idx)
        hf = sum(any(sf[n] >= t for n in r["caught"]["fine-tuned"][i]) for i in idx)
        print(f"    {kind:<16} base {hb}/{len(idx)}, fine-tuned (FA <= base) {hf}/{len(idx)}")
    print("  the cells that catch most held-out corruptions (fine-tuned, FA <= base; + new, ~ re-learned):")
    for line in _top_cells(r, base, t):
        print(f"    {line}")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="*", default=list(DOMAINS))
    ap.add_argument("--halves", nargs="+", type=int, choices=(0, 1), default=[0, 1], help="the halves fine-tuned on")
    ap.add_argument("--teacher-sentences", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument(
        "--corruptions", type=int, default=400, help="corruptions tried per held-out half (a seeded sample)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alarm-budget", type=float, default=None, help="heatc finetune's (default: its own)")
    ap.add_argument("--min-worth", type=float, default=None, help="what a false alarm must buy (default: finetune's)")
    args = ap.parse_args()

    from heatc.pdf import extract

    print(f"machine: {machine()}")
    print(f"heatc finetune --teacher-sentences {args.teacher_sentences} --epochs {args.epochs} --seed {args.seed}\n")
    for domain in args.domains:
        pdfs = DOMAINS[domain]
        docs = extract(pdfs)
        results = []
        for fold in args.halves:
            results.append(_fold(domain, fold, pdfs, docs, args))
            print()
        if len(results) < 2:
            continue
        print(f"{domain}, both halves held out once (each at its operating points above; counts summed):")
        print(f"  {'':<34} {'false alarms/sentence':>22} {'recall':>8}")
        for label in POINTS:
            fa = bearing = hits = n = 0
            for r in results:
                a, b, c, d = _counts(r, *r["points"][label])
                fa, bearing, hits, n = fa + a, bearing + b, hits + c, n + d
            print(f"  {label:<34} {fa / max(bearing, 1):>22.4f} {hits / max(n, 1):>8.3f}   {fa}/{bearing}, {hits}/{n}")
        print()


def _top_cells(result: dict, base: Path, threshold: float, n: int = 8) -> list[str]:
    """The fine-tuned heatmap's cells by corruptions caught at `threshold`, marked new (not
    in the base) or re-learned (in the base with other statistics)."""
    from heatc.heatmap.format import load_heatmap

    rules = result["rules"]["fine-tuned"]
    before = {c.id: c for c in load_heatmap(base).cells}
    per_cell: Counter = Counter()
    for caught in result["caught"]["fine-tuned"]:
        cells = {rules.cell[x] for x in caught if rules.score[x] >= threshold and x in rules.cell}
        per_cell.update(cells)
    out = []
    for cell_id, hits in per_cell.most_common(n):
        c = rules.cells[cell_id]
        mark = "+" if cell_id not in before else ("~" if before[cell_id].stats != c.stats else " ")
        what = " ".join(x for x in (*c.pair, c.unit or "") if x)
        bounds = f" range {list(c.range)}" if c.range else ""
        out.append(f"{mark} {what}: {hits} caught, score {c.score:.3f}, support {c.support}{bounds}")
    return out


if __name__ == "__main__":
    main()
