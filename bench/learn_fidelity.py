"""Student fidelity out of domain, and the cost of labelling: `python bench/learn_fidelity.py`.

Fidelity: the teacher (embedded MiniLM) labels N sentences of each domain; for each domain,
students train on the other two and are scored on it — mean per-sentence AUC with each
sentence's top 20 % most sensitive tokens (by teacher label) as positives. Transformer student
beside an LSTM student, a lexical IDF baseline and random scores.

Cost, on one domain's sentences: seconds per 1,000 tokens for teacher labelling (Jacobian
probes), the student through onnxruntime and through torch, and Captum's
IntegratedGradients (n_steps=50) attributing the same objective (the drift 1 − cos of the
sentence embedding, from zero embeddings to the real ones).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import documents, label_sentences, machine, sample_sentences

DOMAINS = ("medical", "finance", "legal")
FEATURES = 64  # as heatc learn's student


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1500, help="sentences labelled per domain")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="200 sentences per domain, 3 epochs")
    ap.add_argument(
        "--markdown", type=Path, help="also rewrite the fidelity and cost tables of this page (docs/performance.md)"
    )
    args = ap.parse_args()
    if args.markdown and args.quick:
        sys.exit("bench: --markdown writes the page's numbers; run it without --quick")
    if args.quick:
        args.sentences, args.epochs = 200, 3

    import numpy as np
    import torch

    from heatc.learn.students import student as st
    from heatc.learn.teaching.teacher import load_teacher

    torch.set_num_threads(max(1, torch.get_num_threads()))
    teacher = load_teacher()
    print(f"machine: {machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"teacher: {teacher.name}; {args.sentences} sentences per domain, seed {args.seed}\n")
    labelled, label_time, tokens = {}, {}, {}
    for d in DOMAINS:
        texts = sample_sentences(documents(d), args.sentences, args.seed)
        labelled[d], label_time[d] = label_sentences(teacher, texts, seed=args.seed)
        tokens[d] = sum(sum(e.mask) for e in labelled[d])
        print(f"  labelled {d}: {len(texts)} sentences, {tokens[d]} tokens in {label_time[d]:.1f} s")

    percentiles = _number_percentiles(teacher, labelled)
    print("\nFidelity out of domain: mean per-sentence AUC, top 20 % of teacher labels = positives")
    print("(students read a frozen table of teacher-derived token features; 'own emb.' is the")
    print(" transformer with its own trained embedding table instead: unseen words stay random)")
    print(f"{'held out':<10} {'transformer':>12} {'LSTM':>8} {'own emb.':>9} {'IDF':>8} {'random':>8}")
    students = {}
    rows = {}
    table = st.teacher_token_features(teacher, FEATURES)
    for held in DOMAINS:
        train = [e for d in DOMAINS if d != held for e in labelled[d]]
        test = labelled[held]
        vocab = len(teacher.tokenizer)
        cfg = st.StudentConfig(vocab_size=vocab, features=FEATURES)
        model = st.train(cfg, train, st.Training(epochs=args.epochs, seed=args.seed), table=table)
        lstm_cfg = st.StudentConfig(vocab_size=vocab, kind="lstm", features=FEATURES)
        lstm = st.train(lstm_cfg, train, st.Training(epochs=args.epochs, seed=args.seed), table=table)
        own = st.train(st.StudentConfig(vocab_size=vocab), train, st.Training(epochs=args.epochs, seed=args.seed))
        students[held] = model
        row = [
            st.evaluate_auc(st.model_scorer(model, cfg.max_length), test),
            st.evaluate_auc(st.model_scorer(lstm, cfg.max_length), test),
            st.evaluate_auc(st.model_scorer(own, cfg.max_length), test),
            st.evaluate_auc(st.idf_scores(train), test),
            st.evaluate_auc(st.random_scores(args.seed), test),
        ]
        rows[held] = row
        print(f"{held:<10} {row[0]:>12.3f} {row[1]:>8.3f} {row[2]:>9.3f} {row[3]:>8.3f} {row[4]:>8.3f}")
    mean = np.mean(list(rows.values()), axis=0)
    print(
        f"{'mean':<10} {mean[0]:>12.3f} {mean[1]:>8.3f} {mean[2]:>9.3f} {mean[3]:>8.3f} {mean[4]:>8.3f}"
        "   (target: transformer >= 0.90)"
    )

    # --- cost -----------------------------------------------------------------------
    import onnxruntime

    held = DOMAINS[0]
    test = labelled[held]
    model = students[held]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "student.onnx"
        diff = st.export_onnx(model, path, check_examples=test[:256])
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        for b0 in range(0, len(test), 64):
            ids, attn, _, _ = st._pad(test[b0 : b0 + 64], 128)
            session.run(None, {"input_ids": ids.numpy(), "attention_mask": attn.numpy()})
        onnx_s = time.perf_counter() - t0
    scorer = st.model_scorer(model, 128)
    t0 = time.perf_counter()
    for b0 in range(0, len(test), 64):
        scorer(test[b0 : b0 + 64])
    torch_s = time.perf_counter() - t0
    texts = sample_sentences(documents(held), min(args.sentences, 200 if args.quick else 400), args.seed)
    _, teacher_s = label_sentences(teacher, texts, seed=args.seed)
    n_tok = sum(len(teacher.tokenizer(t)["input_ids"]) for t in texts)
    ig_texts = texts[: max(16, len(texts) // 8)]
    ig_s = _captum_seconds(teacher, ig_texts)
    ig_tok = sum(len(teacher.tokenizer(t)["input_ids"]) for t in ig_texts)
    test_tok = sum(len(e.ids) for e in test)
    per_k = {
        "teacher labelling (Jacobian probes, K=4)": teacher_s / n_tok * 1000,
        "Captum IntegratedGradients, n_steps=50": ig_s / ig_tok * 1000,
        "student, onnxruntime": onnx_s / test_tok * 1000,
        "student, torch": torch_s / test_tok * 1000,
    }
    print(f"\nCost on {held} sentences, CPU: seconds per 1,000 tokens (onnxruntime vs torch max |diff| {diff:.2g})")
    for k, v in per_k.items():
        print(f"  {k:<44} {v:>9.4f}")
    teacher_k = per_k["teacher labelling (Jacobian probes, K=4)"]
    print(
        f"  student (onnxruntime) is {teacher_k / per_k['student, onnxruntime']:.0f}x faster than teacher labelling (target >= 50x)"
    )
    print(
        f"  teacher labelling is {per_k['Captum IntegratedGradients, n_steps=50'] / teacher_k:.1f}x cheaper than Captum IG (target >= 10x)"
    )
    if args.markdown:
        import report  # bench/report.py, beside this script

        host = machine()
        report.update(
            args.markdown,
            {
                "fidelity": report.fidelity_section(rows, host, percentiles=percentiles),
                "cost": report.cost_section(per_k, diff, host),
            },
        )
        print(f"{args.markdown}: fidelity and cost tables rewritten")


def _number_percentiles(teacher, labelled) -> tuple[float, float, int, int]:
    """Where single-token sensitivity puts numbers: the mean within-sentence percentile of
    tokens that are digits against those that are words (0.5 = average). Pair coupling, not
    this, is what makes a value hot (docs/learning.md)."""
    import numpy as np

    digits, words = [], []
    for examples in labelled.values():
        for e in examples:
            idx = [i for i, m in enumerate(e.mask) if m]
            if len(idx) < 5:
                continue
            labels = np.array([e.labels[i] for i in idx])
            pct = (np.argsort(np.argsort(labels)) + 0.5) / len(idx)
            for k, i in enumerate(idx):
                tok = teacher.tokenizer.convert_ids_to_tokens(e.ids[i]).removeprefix("##")
                (digits if tok.isdigit() else words if tok.isalpha() else []).append(pct[k])
    print(
        f"\nsingle-token sensitivity, mean within-sentence percentile: digit tokens {np.mean(digits):.2f}, "
        f"word tokens {np.mean(words):.2f} ({len(digits)} and {len(words)} tokens)"
    )
    return float(np.mean(digits)), float(np.mean(words)), len(digits), len(words)


def _captum_seconds(teacher, texts: list[str], batch_size: int = 16) -> float:
    """Captum's IntegratedGradients on the same objective: drift of the sentence embedding
    (1 − cos to the unperturbed output) as a function of the input embeddings, integrated
    from a baseline of zero embeddings; 50 steps, every position attributed at once."""
    import torch
    from captum.attr import IntegratedGradients

    ordered = sorted(texts, key=len)
    t0 = time.perf_counter()
    for b0 in range(0, len(ordered), batch_size):
        batch = teacher.batch(ordered[b0 : b0 + batch_size])
        embeds = teacher.embed(batch.input_ids)
        reference = teacher.reference(embeds, batch)

        def forward(x: torch.Tensor, batch=batch, reference=reference) -> torch.Tensor:
            reps = x.shape[0] // batch.input_ids.shape[0]
            b = type(batch)(batch.input_ids.repeat(reps, 1), batch.attention_mask.repeat(reps, 1), [], [])
            return teacher.objective(x, b, reference.repeat(reps, 1))

        IntegratedGradients(forward).attribute(
            embeds, baselines=torch.zeros_like(embeds), n_steps=50, internal_batch_size=len(batch.texts) * 10
        )
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
