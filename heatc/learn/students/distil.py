"""The distil stage: train (or fine-tune), evaluate and export the pair student.

Public surface: `distil`, `student_path`, `student_metrics`, `STUDENT_FEATURES`, `PAIR_HEAD`, `POSITIONS`.
"""

from __future__ import annotations

from pathlib import Path

from heatc.learn.config import LearnConfig
from heatc.learn.teaching.plan import Plan, plan_lexicon
from heatc.learn.work import Progress, quiet, rank_and_world

STUDENT_FEATURES = 64  # width of the student's frozen teacher-derived token features
PAIR_HEAD = "additive"  # a new student's pair head (`PairConfig`); "interaction" measured no better
# a new student's positions (`PairConfig`): relative ones beat the LSTM baseline on every fold
# and both measures, mean of 3 training seeds; absolute ones won 3 of 6 (CHANGELOG)
POSITIONS = "relative"


def _examples(records: list[dict], plan_: Plan, tokenizer):
    from heatc.learn.students.pair_student import examples_from_records

    held = dict(zip(plan_.teacher_sentences, plan_.heldout, strict=True))
    program = plan_lexicon(plan_).program()  # the lexemes the teacher's couplings are indexed by
    examples = examples_from_records([r for r in records if r["text"] in held], tokenizer, program)
    return [e for e in examples if not held[e.text]], [e for e in examples if held[e.text]]


def student_metrics(model, train, test, seed: int) -> dict:
    """Fidelity on the held-out teacher sentences: the pair head's (`pair_fidelity`), the
    token head's AUC beside the IDF and random baselines."""
    from heatc.learn.students import student as st
    from heatc.learn.students.pair_student import pair_fidelity

    metrics: dict = {"train_sentences": len(train), "heldout_sentences": len(test)}
    if not test:
        return metrics
    fid = pair_fidelity(model, test)
    labelled = [st.TokenExample(e.ids, e.labels, e.mask) for e in test if e.labels is not None]
    known = [st.TokenExample(e.ids, e.labels, e.mask) for e in train if e.labels is not None]
    metrics["student_auc"] = fid["token_auc"]
    if labelled:
        metrics["idf_auc"] = round(st.evaluate_auc(st.idf_scores(known), labelled), 4)
        metrics["random_auc"] = round(st.evaluate_auc(st.random_scores(seed), labelled), 4)
    metrics.update(pair_spearman=fid["pair_spearman"], pair_auc=fid["pair_auc"], heldout_probes=fid["probe_rows"])
    return metrics


def distil(
    config: LearnConfig,
    plan_: Plan,
    records: list[dict],
    work: Path,
    teacher,
    progress: Progress = quiet,
    *,
    init: dict | None = None,
    base_config=None,
    lr: float | None = None,
    output: Path | None = None,
):
    """Train the pair student on the teacher's records (from `init`'s weights and
    `base_config`, its configuration, when given: a base student being fine-tuned; `lr`, its
    learning rate, when not `Training`'s) and, on
    rank 0, evaluate it and export it beside
    `output` (default: the config's). Returns (metrics, model); metrics are {} off rank 0."""
    from heatc.learn.students import pair_onnx
    from heatc.learn.students import pair_student as ps
    from heatc.learn.students import student as st

    rank, _ = rank_and_world()
    train, test = _examples(records, plan_, teacher.tokenizer)
    config_s = base_config or ps.PairConfig(
        vocab_size=len(teacher.tokenizer), features=STUDENT_FEATURES, pair_head=PAIR_HEAD, positions=POSITIONS
    )
    table = init["embed.table"] if init is not None else st.teacher_token_features(teacher, STUDENT_FEATURES)
    model = ps.train_pair(
        config_s, train, st.Training(epochs=config.distil.epochs, seed=config.seed, **({} if lr is None else {"lr": lr})),
        table=table, init=init,
        checkpoint=work / "student.pt", progress=lambda e, n, loss: progress("student", e, n),
    )  # fmt: skip
    if rank != 0:
        return {}, model
    metrics = student_metrics(model, train, test, config.seed)
    onnx_path = student_path(output or config.output)
    diff = pair_onnx.export_pair_onnx(model, onnx_path, check_examples=test[:64] or train[:64])
    metrics["onnx_max_abs_diff"] = float(f"{diff:.3g}")
    metrics["student"] = onnx_path.name
    return metrics, model


def student_path(output: Path) -> Path:
    return output.with_name(output.name.removesuffix(".yaml").removesuffix(".yml") + ".student.onnx")
