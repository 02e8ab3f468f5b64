"""`heatc learn`: corpus → teacher labels → cells → heatmap.yaml (+ the student detector).

Stages, each a function below: `plan` (read the corpus, learn keywords, find candidate
cells, choose the sentences the teacher reads), `label` (the teacher, in checkpointed chunks,
sharded over the ranks of a `torchrun` run), `distil` (train, evaluate and export the pair
student), `student_evidence` (the student scores the cells; with `teacher_sentences` 0 the
teacher does, and its top-up probes what its plan left short), `aggregate` (couplings and
corpus statistics → cells). `learn` runs them all.

Everything is deterministic for a seed: sentence choice hashes (seed, text), the teacher's
random probes are drawn per sentence from (seed, text), chunks do not depend on the number of
processes, and the student's global batches do not either. A run's working files live in
`<output>.learn/`: the plan, one file per labelled chunk and the student checkpoint; a rerun
with the same configuration resumes where the last one stopped.

Public surface: `LearnConfig`, `learn`.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.aggregate import aggregate
from heatc.learn.config import (
    WORK_VERSION,
    LearnConfig,
    Progress,
    barrier,
    quiet,
    rank_and_world,
    read_work,
    refuse_other_work,
)
from heatc.learn.corpus import read_corpus
from heatc.learn.distil import distil
from heatc.learn.emit import heatmap_document, write_heatmap
from heatc.learn.labelling import label, read_chunks, topup
from heatc.learn.plan import Plan, corpus_digest, plan, plan_lexicon, rule_file_literals
from heatc.learn.student_scoring import student_evidence


def _work_dir(config: LearnConfig, fresh: bool) -> Path:
    work = config.output.with_name(config.output.name.removesuffix(".yaml").removesuffix(".yml") + ".learn")
    stamp = work / "config.json"
    want = {"version": WORK_VERSION, "fingerprint": config.fingerprint()}
    rank, _ = rank_and_world()
    if rank == 0:
        if stamp.exists() and not fresh:
            refuse_other_work(work, want, "heatc learn")
        elif stamp.exists() or fresh:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(want))
    barrier()
    return work


def learn(config: LearnConfig, *, fresh: bool = False, progress: Progress = quiet, log=print) -> dict:
    """Run every stage; returns a summary. Rank 0 writes the heatmap and the student."""
    from heatc.learn.teacher import load_teacher

    rank, world = rank_and_world()
    started = time.perf_counter()
    documents = read_corpus(config.corpus, config.exclude)  # bad input fails before anything is written
    rule_file_literals(config.rules)
    teacher = load_teacher(config.teacher, config.device)
    work = _work_dir(config, fresh)
    plan_file = work / "plan.json.gz"
    if rank == 0 and not plan_file.exists():
        p = plan(config, documents, progress)
        with gzip.open(plan_file.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
            json.dump(p.to_json(), f)
        plan_file.with_suffix(".tmp").replace(plan_file)
    barrier()
    p = read_work(plan_file, Plan.from_json)
    if p.corpus_sha256 != corpus_digest(documents):
        raise HeatError(
            Diagnostic(
                str(work), 0, 0, "holds the work of another corpus (its files changed since); rerun with --fresh"
            )
        )
    names = {c.name for c in plan_lexicon(p).categories}
    if any(x and x not in names for k in p.candidates for x in (k.keyword, k.unit)):
        raise HeatError(
            Diagnostic(str(work), 0, 0, "was written by another version of heatc learn; rerun with --fresh")
        )
    log(
        f"corpus: {p.documents} documents, {p.sentences} sentences; {len(p.keywords)} keywords, "
        f"{len(p.candidates)} candidate cells; the teacher reads {len(p.teacher_sentences)} sentences"
    )
    t0 = time.perf_counter()
    label(config, p, teacher, work, progress)
    label_seconds = time.perf_counter() - t0
    barrier()
    n_chunks = -(-len(p.teacher_sentences) // config.chunk_size)
    records = read_chunks(work, n_chunks)
    by_student = config.student and config.teacher_sentences > 0
    extra: list[dict] = []
    if not by_student:  # the teacher scores the cells: it probes what its plan left short too
        t0 = time.perf_counter()
        extra = topup(config, p, records, documents, teacher, work, progress)
        label_seconds += time.perf_counter() - t0
        if extra:
            log(
                f"top-up: the teacher probed {sum(len(r['probes']) for r in extra)} values in {len(extra)} more sentences"
            )
    metrics, model = distil(config, p, records, work, teacher, progress) if config.student else ({}, None)
    if rank != 0:
        return {}
    if by_student:
        evidence = student_evidence(config, p, model, teacher.tokenizer, documents, progress)
        log(f"the student scored {sum(len(r['probes']) for r in evidence)} values in {len(evidence)} sentences")
    else:
        evidence = records + extra
    lexicon, cells, summary = aggregate(config, p, evidence, documents)
    name = config.name or config.output.name.removesuffix(".yaml").removesuffix(".yml")
    provenance = {
        "teacher": teacher.name,
        "method": "adversarial perturbation of input embeddings: Jacobian-probe token sensitivity, "
        "finite-difference Hessian-vector pair coupling (heatc learn)",
        "corpus": [_display_path(x, config.output) for x in config.corpus],
        **({"excluded": sorted(config.exclude)} if config.exclude else {}),
        "corpus_sha256": p.corpus_sha256,
        "documents": p.documents,
        "sentences": p.sentences,
        "teacher_sentences": len(p.teacher_sentences),
        "scored_by": "student" if by_student else "teacher",
        "epsilon": config.epsilon,
        "epsilon_scale": "token input-embedding norm",
        "seed": config.seed,
        "processes": world,
        "coupling": summary,
        "metrics": metrics,
    }
    tokenizer = (
        {"embedded": "minilm"} if config.teacher is None else {"dir": _display_path(config.teacher, config.output)}
    )
    doc = heatmap_document(
        name=name,
        title=config.title or f"Learned from {', '.join(Path(x).name for x in config.corpus)}",
        lexicon=lexicon,
        cells=cells,
        provenance=provenance,
        sensitivity=config.sensitivity,
        rule_files=[_display_path(r, config.output) for r in config.rules],
        tokenizer=tokenizer,
    )
    header = (
        f"Learned by `heatc learn` from {', '.join(map(str, config.corpus))} with teacher {teacher.name}.\n"
        "Scores are teacher pair couplings (percentiles); statistics are the values the rules capture."
    )
    write_heatmap(config.output, doc, header)
    return {
        "cells": len(cells),
        "hot_cells": summary["hot_cells"],
        "label_seconds": round(label_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
        "coupling": summary["unit_vs_keyword"],
        "candidate_cells": summary["candidate_cells"],
        "checked_sentences": summary["checked_sentences"],
    }


def _display_path(path: Path, output: Path) -> str:
    """A path as the heatmap should record it: relative to the heatmap's folder if inside it."""
    try:
        return os.path.relpath(Path(path).resolve(), Path(output).resolve().parent)
    except ValueError:
        return str(path)
