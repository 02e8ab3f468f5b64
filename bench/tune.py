"""Does tuning from a deployment's reports pay? `python bench/tune.py`

The shipped `heatmaps/medical.yaml`, deployed on two kinds of text, each in two halves:

- the FDA drug labels' sentences (`../shared/data/medical/pdf`), each to a half by a hash of its
  text: the traffic of one deployment over time, where tomorrow's responses are like today's
  (`--split page` splits their PDF pages instead, as bench/finetune.py does: new documents);
- MTSamples notes: the half `learn_common.split_documents` learns from, and the half it holds
  out (the shipped heatmap was learned from all of MTSamples: both are text it has seen).

The traffic of a half is every sentence of its documents, each checked as one response (as
`heatc scan --lines` does), and the bench's own corrupted copies of them
(`finetune._corruptions`: learn_usefulness's lab-value and unit-swap patterns, and values before
a unit ×10 or ÷10; a seeded sample of `--corruptions` per half).

On one half, the shipped heatmap's build writes an audit report per response, and the bench,
which knows what it corrupted, labels every rejection: `error` where its span overlaps the
changed bytes of a corrupted copy, `false_alarm` everywhere else (`--review-share` labels a
seeded share of them only, as a team that reviews a sample). `heatc tune` reads those reports
and labels (`--alarm-budget`: default tune's). The peer: `heatc finetune` adapts the same
heatmap to the same half's text (the labels' sentences of each page, the notes). Then all three
read the other half, each build with its own policy:

- **false alarms**: clean sentences whose action is not `pass`, per checked sentence (one
  denominator: sentences some rule of any of the three reads a value in);
- **recall**: corrupted copies whose action is not `pass` and that hold an acting rule's
  rejection more than the clean sentence has (an observe-only rule's counts nothing);
- **L2 coverage**: the share of the other half's match events made by rules in the build's L2
  tier (and that tier's rules and bytes; the shipped heatmap's 1 MiB holds every rule).

The labels are tuned on each half in turn and a last row sums both; MTSamples is tuned on its
learning half and read on the held-out one (`--halves 0 1` for both). Targets: tuned false
alarms at most half the shipped's, recall at most 0.02 below it, L2 coverage at least 95 %.
Work (reports, labels, tuned and fine-tuned heatmaps) in bench/.work/tune/ (fine-tuning resumes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finetune import _corruptions, _half
from learn_common import DATA, REPO, machine, split_documents

WORK = REPO / "bench" / ".work" / "tune"
BASE = REPO / "heatmaps" / "medical.yaml"
PDFS = sorted((DATA / "medical/pdf").glob("fda_*.pdf"))


@dataclass(frozen=True)
class Response:
    text: str
    clean: int | None = None  # a corrupted copy: the index of its clean sentence
    changed: tuple[int, int] = (0, 0)  # ... and the bytes it changed (in the copy)
    kind: str = ""


def _key(seed: int, *parts: str) -> bytes:
    return hashlib.sha256("\0".join([str(seed), *parts]).encode()).digest()


def _changed(clean: str, copy: str) -> tuple[int, int]:
    a, b = clean.encode(), copy.encode()
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return start, len(b) - end


def traffic(documents: list[list[str]], max_corruptions: int, seed: int) -> list[Response]:
    """Every sentence, then a seeded sample of the corrupted copies."""
    out = [Response(s) for doc in documents for s in doc]
    copies = [
        Response(c, i, _changed(r.text, c), kind)
        for i, r in enumerate(out)
        for kind, c in _corruptions("medical", r.text)
    ]
    copies.sort(key=lambda r: _key(seed, r.text, str(r.clean)))
    return out + sorted(copies[:max_corruptions], key=lambda r: (r.clean, r.text))


def fda_halves(seed: int, split: str):
    """Per half: what heatc finetune reads of it (file → pages; with the sentence split, the
    half's sentences of each page as a text) and the sentences of each document. The sentence
    split is the default: a deployment's traffic over time, where tomorrow's responses are
    like today's; the page split holds out whole label sections (new documents)."""
    from heatc.learn.text.corpus import sentences
    from heatc.pdf import extract

    docs = [(f"{path.name}#{page.page}", sentences(page.text), path, page.page)
            for path, doc in zip(PDFS, extract(PDFS), strict=True) for page in doc.pages]  # fmt: skip
    if split == "sentence":
        return _by_sentence(docs, seed)
    halves: list[tuple[dict, list]] = [({}, []), ({}, [])]
    for _, sents, path, page in docs:
        h = _half(path, page, seed)
        halves[h][0].setdefault(str(path), []).append(page)
        halves[h][1].append(sents)
    return halves


def mtsamples_halves(seed: int):
    """The notes `learn_common.split_documents` learns from (half 0) and holds out (half 1):
    the documents and their sentences."""
    from heatc.learn.text.corpus import sentences

    learn, held = split_documents("medical", seed)
    return [(docs, [sentences(d.text) for d in docs]) for docs in (learn, held)]


def _by_sentence(docs, seed: int):
    """Each sentence to a half by a hash of its text (a sentence written twice goes one way):
    the traffic of one deployment over time, where tomorrow's responses are like today's. What
    heatc finetune reads of a half: each document's sentences of that half, as a text."""
    from heatc.learn.text.corpus import Document

    halves = [([], []), ([], [])]
    for doc_id, sents, _, _ in docs:
        parts: list[list[str]] = [[], []]  # (the pages' sentences of each half)
        for s in sents:
            parts[_key(seed + 13, s)[0] & 1].append(s)
        for h in (0, 1):
            if parts[h]:
                halves[h][0].append(Document(doc_id, " ".join(parts[h])))
                halves[h][1].append(parts[h])
    return halves


def write_reports(responses: list[Response], folder: Path, review_share: float, seed: int) -> tuple[Path, Path]:
    """The shipped build's audit report of every response, and the bench's labels of its rejections."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.verify.backends import wasm_checker

    checker = wasm_checker(compile_heatmap(BASE)[0])
    folder.mkdir(parents=True, exist_ok=True)
    reports, labels = folder / "reports.jsonl", folder / "labels.jsonl"
    with open(reports, "w", encoding="utf-8") as rf, open(labels, "w", encoding="utf-8") as lf:
        for r in responses:
            audit = checker.scan(r.text).audit().to_json()
            rf.write(json.dumps(audit, ensure_ascii=False) + "\n")
            for e in audit["events"]:
                if e["kind"] != "match" or e["verdict"] != "REJECTED":
                    continue
                start, end = e["bytes"]
                if _key(seed, audit["text"]["sha256"], e["rule"], str(start))[0] >= 256 * review_share:
                    continue
                error = r.clean is not None and start < r.changed[1] and r.changed[0] < end
                lf.write(json.dumps({"text_sha256": audit["text"]["sha256"], "rule": e["rule"], "bytes": [start, end],
                                     "label": "error" if error else "false_alarm"}) + "\n")  # fmt: skip
    return reports, labels


class Measured:
    """One heatmap's build read over a traffic: per response, whether it alarms, its acting
    rejections per rule, and the match events per rule."""

    def __init__(self, heatmap: Path, responses: list[Response]):
        from heatc.heatmap.build import compile_heatmap, rule_tiers
        from heatc.verify.backends import module_info, wasm_checker
        from heatc_runtime.reports.audit import audit_report

        program, _, hm = compile_heatmap(heatmap)
        info = module_info(program)
        checker = wasm_checker(program)
        sizes, tiers = rule_tiers(program, hm.tiers)
        self.l2 = {r.name for r, t in zip(program.rules, tiers, strict=True) if t == "l2"}
        self.l2_bytes = sum(s for s, t in zip(sizes, tiers, strict=True) if t == "l2")
        self.checked, self.alarm, self.acting = [], [], []
        self.events: Counter = Counter()
        for r in responses:
            report = checker.scan(r.text)
            matches = [e for e in report.events if e.kind == "match"]
            self.events.update(e.name for e in matches)
            audit = audit_report(info, r.text, report.events, report.verdicts, report.counters)
            self.checked.append(bool(matches))
            self.alarm.append(audit.action != "pass")
            self.acting.append(
                Counter(e.name for e in matches if e.verdict.name == "REJECTED" and e.name not in info.observe)
            )

    def coverage(self) -> float:
        total = sum(self.events.values())
        return sum(n for rule, n in self.events.items() if rule in self.l2) / total if total else 1.0


def score(m: Measured, responses: list[Response], checked: list[bool]) -> dict:
    fa = sum(m.alarm[i] for i, r in enumerate(responses) if r.clean is None and checked[i])
    caught = sum(
        1
        for i, r in enumerate(responses)
        if r.clean is not None and m.alarm[i] and any(n > m.acting[r.clean][k] for k, n in m.acting[i].items())
    )
    return {
        "fa": fa, "checked": sum(c for i, c in enumerate(checked) if responses[i].clean is None),
        "caught": caught, "corruptions": sum(r.clean is not None for r in responses),
        "events": sum(m.events.values()), "l2_events": round(m.coverage() * sum(m.events.values())),
        "l2_rules": len(m.l2), "l2_bytes": m.l2_bytes,
    }  # fmt: skip


def finetuned(learn, folder: Path, args) -> Path:
    from heatc.errors import HeatError
    from heatc.learn.config import FinetuneConfig
    from heatc.learn.finetuning.finetune import finetune

    out = folder / "finetuned.yaml"
    if isinstance(learn, dict):  # the FDA labels' pages
        config = FinetuneConfig(base=BASE, output=out, pdfs=PDFS, pages=learn, seed=args.seed,
                                teacher_sentences=args.teacher_sentences, epochs=args.epochs)  # fmt: skip
    else:
        corpus = folder / "notes.jsonl"
        corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in learn), encoding="utf-8")
        config = FinetuneConfig(base=BASE, output=out, texts=[corpus], seed=args.seed,
                                teacher_sentences=args.teacher_sentences, epochs=args.epochs)  # fmt: skip
    try:
        finetune(config, log=lambda m: None)
    except HeatError:  # the work folder is of another base heatmap or heatc: start over
        finetune(config, log=lambda m: None, fresh=True)
    return out


ROWS = ("shipped", "tuned", "fine-tuned")


def run_fold(text: str, fold: int, halves, args) -> dict:
    from heatc.tune import TuneConfig, tune

    folder = WORK / (f"fda-{args.split}-half{fold}" if text == "fda" else f"mtsamples-half{fold}")
    learn, learn_docs = halves[fold]
    _, held_docs = halves[1 - fold]
    t0 = time.perf_counter()
    n = args.corruptions or (600 if text == "fda" else 1200)
    tuning = traffic(learn_docs, n, args.seed)
    held = traffic(held_docs, n, args.seed)
    reports, labels = write_reports(tuning, folder, args.review_share, args.seed)
    config = TuneConfig(BASE, [reports], folder / "tuned.yaml", labels)
    if args.alarm_budget is not None:
        config.alarm_budget = args.alarm_budget
    result = tune(config, log=lambda m: None)
    tuned_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ft = None if args.no_finetune else finetuned(learn, folder, args)
    ft_s = time.perf_counter() - t0
    paths = dict(zip(ROWS, (BASE, result.output, ft), strict=True))
    measured = {k: Measured(p, held) for k, p in paths.items() if p is not None}
    checked = [any(m.checked[i] for m in measured.values()) for i in range(len(held))]
    scores = {k: score(m, held, checked) for k, m in measured.items()}
    print(f"{text}, tuned on half {fold} ({len(tuning):,} responses, {tuned_s:.0f} s with its reports; "
          f"fine-tuned in {ft_s:.0f} s), held out: half {1 - fold}, {len(held):,} responses")  # fmt: skip
    print(f"  heatc tune: {result.summary}")
    _table(scores)
    return scores


def _table(scores: dict) -> None:
    print(f"  {'':<12} {'false alarms/checked':>21} {'recall':>8} {'L2 coverage':>12} {'L2 rules':>9} {'L2 bytes':>10}")
    for k, s in scores.items():
        fa, rec = s["fa"] / max(s["checked"], 1), s["caught"] / max(s["corruptions"], 1)
        cov = s["l2_events"] / max(s["events"], 1)
        extra = f"   {s['fa']}/{s['checked']}, {s['caught']}/{s['corruptions']}"
        print(f"  {k:<12} {fa:>21.4f} {rec:>8.3f} {100 * cov:>11.1f}% {s['l2_rules']:>9} {s['l2_bytes']:>10,}{extra}")


def _targets(s: dict) -> list[str]:
    base, tuned = s["shipped"], s["tuned"]
    fa = [x["fa"] / max(x["checked"], 1) for x in (base, tuned)]
    rec = [x["caught"] / max(x["corruptions"], 1) for x in (base, tuned)]
    cov = tuned["l2_events"] / max(tuned["events"], 1)
    return [
        f"false alarms {fa[1]:.4f} <= half the shipped's {fa[0]:.4f}: {'met' if fa[1] <= fa[0] / 2 + 1e-12 else 'NOT met'}",
        f"recall {rec[1]:.3f} >= the shipped's {rec[0]:.3f} - 0.02: {'met' if rec[1] >= rec[0] - 0.02 - 1e-12 else 'NOT met'}",
        f"L2 coverage {100 * cov:.1f} % >= 95 %: {'met' if cov >= 0.95 else 'NOT met'}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", nargs="+", choices=("fda", "mtsamples"), default=["fda", "mtsamples"])
    ap.add_argument(
        "--halves", nargs="+", type=int, choices=(0, 1),
        help="the halves tuned on (default: both for the labels, the learning half for MTSamples)",
    )  # fmt: skip
    ap.add_argument(
        "--corruptions",
        type=int,
        default=0,
        help="corrupted copies per half, a seeded sample (default 600, MTSamples 1200)",
    )
    ap.add_argument("--review-share", type=float, default=1.0, help="the share of rejections the bench labels")
    ap.add_argument("--alarm-budget", type=float, default=None, help="heatc tune's (default: its own)")
    ap.add_argument("--teacher-sentences", type=int, default=128, help="heatc finetune's")
    ap.add_argument("--epochs", type=int, default=4, help="heatc finetune's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-finetune", action="store_true", help="leave the peer out (a quicker run)")
    ap.add_argument(
        "--split", choices=("sentence", "page"), default="sentence",
        help="the FDA labels' halves: of the sentences (one deployment's traffic over time) or of the pages (new documents)",
    )  # fmt: skip
    args = ap.parse_args()
    print(f"machine: {machine()}")
    budget = "tune's default" if args.alarm_budget is None else f"{args.alarm_budget:g}"
    print(f"heatc tune --alarm-budget {budget}; review share {args.review_share:g}; heatc finetune "
          f"--teacher-sentences {args.teacher_sentences} --epochs {args.epochs}; seed {args.seed}\n")  # fmt: skip
    for text in args.texts:
        halves = fda_halves(args.seed, args.split) if text == "fda" else mtsamples_halves(args.seed)
        folds = args.halves or ([0, 1] if text == "fda" else [0])
        results = [run_fold(text, fold, halves, args) for fold in folds]
        print()
        if len(results) < 2:
            for line in _targets(results[0]):  # (the table above is the only one)
                print(f"  {line}")
            continue
        pooled = {k: {f: sum(r[k][f] for r in results) for f in results[0][k]} for k in results[0]}
        for k in pooled:  # (the L2 tier differs per half: its rules and bytes are the halves' mean)
            pooled[k]["l2_rules"] //= len(results)
            pooled[k]["l2_bytes"] //= len(results)
        print(f"{text}, both halves held out once (counts summed):")
        _table(pooled)
        for line in _targets(pooled):
            print(f"  {line}")
        print()


if __name__ == "__main__":
    main()
