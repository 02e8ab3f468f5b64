"""Pair-student fidelity out of domain: `python bench/learn_pair_fidelity.py`.

The teacher (embedded MiniLM) labels N value-bearing sentences of each English domain: token
sensitivity and the pair couplings of up to two values per sentence with every lexeme (what
`heatc learn` records). For each domain, pair students train on the other two and are scored
on it, per probe row: the Spearman rank correlation of the student's couplings with the
teacher's, and the AUC with the row's top 20 % teacher couplings as positives; the token
head's per-sentence AUC beside them. The transformer pair student (`heatc learn`'s) beside an
LSTM one of the same width and heads, and a distance-only baseline (coupling = −|j − value|).
The transformer's ONNX export is checked against torch on the held-out rows. The teacher's
labels are kept in bench/.work/pair_fidelity/ (a rerun with the same settings reads them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import documents, machine, sample_sentences

DOMAINS = ("medical", "finance", "legal")
WORK = Path(__file__).resolve().parent / ".work" / "pair_fidelity"
FEATURES = 64  # as heatc learn's student


def _value_sentences(docs, n: int, seed: int, program, groups) -> list[str]:
    """n sentences, in the sample's order, with a value that is an occurrence of a cell."""
    from heatc.learn.text.evidence import occurrences
    from heatc.learn.text.lexemes import lex_sentence

    out = []
    for s in sample_sentences(docs, 40 * n, seed):
        if occurrences(lex_sentence(program, s), groups):
            out.append(s)
            if len(out) == n:
                break
    return out


def _label(teacher, config, program, groups, texts: list[str]) -> tuple[list[dict], float]:
    from heatc.learn.teaching.labelling import label_batch
    from heatc.learn.text.evidence import occurrences
    from heatc.learn.text.lexemes import lex_sentence

    ordered = sorted(texts, key=len)
    records = []
    t0 = time.perf_counter()
    for b0 in range(0, len(ordered), config.teaching.batch_size):
        group = ordered[b0 : b0 + config.teaching.batch_size]
        lexed = [lex_sentence(program, s) for s in group]
        chosen = [[o.value for o in occurrences(lx, groups)][: config.teaching.probes_per_sentence] for lx in lexed]
        records.extend(label_batch(config, teacher, group, lexed, chosen))
    return records, time.perf_counter() - t0


def _distance_fidelity(examples) -> dict:
    """The baseline that knows only distance: nearer lexemes couple more."""
    import numpy as np

    from heatc.learn.students.pair_student import _spearman
    from heatc.learn.students.student import per_sentence_auc

    rhos, aucs = [], []
    for e in examples:
        for value, row in e.probes:
            valid = [j for j, c in enumerate(row) if c is not None and c > 0 and j != value and e.lexemes[j]]
            if not valid:
                continue
            teacher = np.log([row[j] for j in valid])
            guess = -np.abs(np.array([e.lexemes[j][0] - e.lexemes[value][0] for j in valid], dtype=float))
            if (rho := _spearman(guess, teacher)) is not None:
                rhos.append(rho)
            if len(valid) >= 5 and (auc := per_sentence_auc(guess, teacher)) is not None:
                aucs.append(auc)
    return {"pair_spearman": float(np.mean(rhos)), "pair_auc": float(np.mean(aucs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=400, help="value-bearing sentences labelled per domain")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--train-seeds", type=int, default=3,
        help="train each student this many times (seeds --seed, --seed + 1, ...) and report the mean fidelity",
    )  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="120 sentences per domain, 4 epochs")
    ap.add_argument(
        "--pair-head",
        default="additive",
        choices=("additive", "interaction"),
        help="the pair head of both students (additive: what heatc learn trains)",
    )
    ap.add_argument("--positions", default="relative", choices=("absolute", "relative"),
                    help="the transformer's positions (relative: what heatc learn trains); the LSTM has none")  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        args.sentences, args.epochs = 120, 4

    import numpy as np
    import torch

    from heatc.learn.config import LearnConfig
    from heatc.learn.students import pair_onnx
    from heatc.learn.students import pair_student as ps
    from heatc.learn.students import student as st
    from heatc.learn.teaching.teacher import load_teacher
    from heatc.learn.text.lexemes import Lexicon

    teacher = load_teacher()
    lexicon = Lexicon()
    program, groups = lexicon.program(), lexicon.groups()
    config = LearnConfig(corpus=[], output=Path("unused.yaml"), seed=args.seed)
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"teacher: {teacher.name}; {args.sentences} value-bearing sentences per domain, seed {args.seed}; "
          f"pair head {args.pair_head}, transformer positions {args.positions}, {args.epochs} epochs, "
          f"{args.train_seeds} training seed(s)\n")  # fmt: skip
    examples = {}
    for d in DOMAINS:
        cache = WORK / f"{d}-{args.sentences}-{args.seed}.json.gz"
        if cache.exists():
            with gzip.open(cache, "rt", encoding="utf-8") as f:
                records, seconds = json.load(f)
            texts = [r["text"] for r in records]
        else:
            texts = _value_sentences(documents(d), args.sentences, args.seed, program, groups)
            records, seconds = _label(teacher, config, program, groups, texts)
            WORK.mkdir(parents=True, exist_ok=True)
            with gzip.open(cache.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
                json.dump([records, seconds], f)
            cache.with_suffix(".tmp").replace(cache)
        examples[d] = ps.examples_from_records(records, teacher.tokenizer, program)
        rows = sum(len(e.probes) for e in examples[d])
        print(f"  labelled {d}: {len(texts)} sentences, {rows} probe rows in {seconds:.1f} s")

    table = st.teacher_token_features(teacher, FEATURES)
    vocab = len(teacher.tokenizer)
    print("\nFidelity out of domain, per probe row: Spearman with the teacher's couplings | AUC, top 20 % = positives")
    print(f"{'held out':<10} {'transformer':>17} {'LSTM':>17} {'distance only':>17} {'token AUC tr/LSTM':>19}")
    results = []
    worst_onnx = 0.0
    for held in DOMAINS:
        train = [e for d in DOMAINS if d != held for e in examples[d]]
        test = examples[held]
        fids = []
        for kind in ("transformer", "lstm"):
            cfg = ps.PairConfig(
                vocab_size=vocab, kind=kind, features=FEATURES, pair_head=args.pair_head, positions=args.positions
            )
            runs = []
            for k in range(args.train_seeds):  # training seeds: the mean over them is less noisy than one
                model = ps.train_pair(cfg, train, st.Training(epochs=args.epochs, seed=args.seed + k), table=table)
                runs.append(ps.pair_fidelity(model, test))
                if kind == "transformer" and k == 0:
                    with tempfile.TemporaryDirectory() as tmp:
                        worst_onnx = max(
                            worst_onnx, pair_onnx.export_pair_onnx(model, Path(tmp) / "s.onnx", check_examples=test)
                        )
            fids.append({key: float(np.mean([r[key] for r in runs])) for key in runs[0]})
        base = _distance_fidelity(test)
        results.append([*(f[k] for f in fids for k in ("pair_spearman", "pair_auc")), base["pair_spearman"],
                        base["pair_auc"], fids[0]["token_auc"], fids[1]["token_auc"]])  # fmt: skip
        r = results[-1]
        print(
            f"{held:<10} {r[0]:>8.3f} | {r[1]:.3f} {r[2]:>8.3f} | {r[3]:.3f} {r[4]:>8.3f} | {r[5]:.3f}"
            f" {r[6]:>9.3f} / {r[7]:.3f}"
        )
    m = np.mean(results, axis=0)
    print(
        f"{'mean':<10} {m[0]:>8.3f} | {m[1]:.3f} {m[2]:>8.3f} | {m[3]:.3f} {m[4]:>8.3f} | {m[5]:.3f}"
        f" {m[6]:>9.3f} / {m[7]:.3f}"
    )
    print(f"\nONNX (onnxruntime) vs torch, both heads, held-out rows: max |diff| {worst_onnx:.2g}")
    wins = sum(r[0] > r[2] for r in results) + sum(r[1] > r[3] for r in results)
    verdict = "beats" if wins == 2 * len(results) else "does NOT beat"
    print(
        f"the transformer pair student {verdict} the LSTM on every fold and both measures "
        f"({wins} of {2 * len(results)} won)"
    )


if __name__ == "__main__":
    main()
