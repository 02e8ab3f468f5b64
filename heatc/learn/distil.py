"""The distil stage: train, evaluate and export the student detector.

Public surface: `distil`, `student_path`, `STUDENT_FEATURES`.
"""

from __future__ import annotations

from pathlib import Path

from heatc.learn.config import (
    LearnConfig,
    Progress,
    quiet,
    rank_and_world,
)
from heatc.learn.plan import Plan


def _examples(records: list[dict], plan_: Plan):
    from heatc.learn.student import TokenExample

    held = dict(zip(plan_.teacher_sentences, plan_.heldout, strict=True))
    train, test = [], []
    for r in records:
        ex = TokenExample(r["ids"], r["labels"], r["mask"])
        (test if held[r["text"]] else train).append(ex)
    return train, test


STUDENT_FEATURES = 64  # width of the student's frozen teacher-derived token features


def distil(
    config: LearnConfig, plan_: Plan, records: list[dict], work: Path, teacher, progress: Progress = quiet
) -> dict:
    """Train the student (and the baselines on rank 0), export it; returns the metrics."""
    from heatc.learn import student as st

    rank, _ = rank_and_world()
    train, test = _examples(records, plan_)
    config_s = st.StudentConfig(vocab_size=len(teacher.tokenizer), features=STUDENT_FEATURES)
    model = st.train(
        config_s,
        train,
        table=st.teacher_token_features(teacher, STUDENT_FEATURES),
        epochs=config.epochs,
        seed=config.seed,
        checkpoint=work / "student.pt",
        progress=lambda e, n, loss: progress("student", e, n),
    )
    if rank != 0:
        return {}
    metrics: dict = {"train_sentences": len(train), "heldout_sentences": len(test)}
    if test:
        metrics["student_auc"] = round(st.evaluate_auc(st.model_scorer(model, config_s.max_length), test), 4)
        metrics["idf_auc"] = round(st.evaluate_auc(st.idf_scores(train), test), 4)
        metrics["random_auc"] = round(st.evaluate_auc(st.random_scores(config.seed), test), 4)
    onnx_path = student_path(config.output)
    metrics["onnx_max_abs_diff"] = float(
        f"{st.export_onnx(model, onnx_path, check_examples=test[:64] or train[:64]):.3g}"
    )
    metrics["student"] = onnx_path.name
    return metrics


def student_path(output: Path) -> Path:
    return output.with_name(output.name.removesuffix(".yaml").removesuffix(".yml") + ".student.onnx")
