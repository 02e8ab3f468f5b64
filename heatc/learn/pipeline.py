"""`heatc learn`: corpus → teacher labels → cells → heatmap.yaml (+ the student detector).

Stages (`STAGES`, run by heatc.stages: named, timed, an error tagged with its stage): `read`
(the corpus and rule files), `teacher`, `plan` (learn keywords, find candidate cells, choose
the sentences the teacher reads), `label` (the teacher, in checkpointed chunks, sharded over
the ranks of a `torchrun` run), `topup` (where the teacher scores the cells: it probes what
its plan left short), `distil` (train, evaluate and export the pair student), then on rank 0
`score` (the student scores the cells; with `teacher_sentences` 0 the teacher's records do),
`aggregate` (couplings and corpus statistics → cells) and `emit` (the heatmap). `learn` runs
them all.

Everything is deterministic for a seed: sentence choice hashes (seed, text), the teacher's
random probes are drawn per sentence from (seed, text), chunks do not depend on the number of
processes, and the student's global batches do not either. A run's working files live in
`<output>.learn/`: the plan, one file per labelled chunk and the student checkpoint; a rerun
with the same configuration resumes where the last one stopped.

Public surface: `LearnConfig`, `learn`, `STAGES`.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.config import WORK_VERSION, LearnConfig
from heatc.learn.heatmaps.aggregate import aggregate
from heatc.learn.heatmaps.emit import heatmap_document, write_heatmap
from heatc.learn.students.distil import distil
from heatc.learn.students.student_scoring import student_evidence
from heatc.learn.teaching.labelling import label, read_chunks, topup
from heatc.learn.teaching.plan import Plan, corpus_digest, plan, plan_lexicon, rule_file_literals
from heatc.learn.text.corpus import read_corpus
from heatc.learn.work import Progress, barrier, json_dump, quiet, rank_and_world, read_work, refuse_other_work
from heatc.stages import Stage, check_dump_after, run_stages


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


def _read(config: LearnConfig) -> dict:
    documents = read_corpus(config.corpus, config.exclude)  # bad input fails before anything is written
    rule_file_literals(config.rules)
    return {"documents": documents}


def _teacher(config: LearnConfig) -> dict:
    from heatc.learn.teaching.teacher import load_teacher

    return {"teacher": load_teacher(config.teaching.teacher, config.teaching.device)}


def _plan(config: LearnConfig, fresh: bool, documents, progress: Progress, log, rank: int) -> dict:
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
    return {"work": work, "plan": p}


def _label(config: LearnConfig, plan: Plan, teacher, work: Path, progress: Progress) -> dict:
    t0 = time.perf_counter()
    label(config, plan, teacher, work, progress)
    seconds = time.perf_counter() - t0
    barrier()
    n_chunks = -(-len(plan.teacher_sentences) // config.teaching.chunk_size)
    return {"records": read_chunks(work, n_chunks), "label_seconds": seconds}


def _by_student(config: LearnConfig) -> bool:
    return config.distil.student and config.teaching.teacher_sentences > 0


def _topup(config: LearnConfig, plan: Plan, records, documents, teacher, work: Path, progress, log) -> dict:
    """Where the teacher scores the cells, it probes what its plan left short too."""
    if _by_student(config):
        return {"extra": [], "topup_seconds": 0.0}
    t0 = time.perf_counter()
    extra = topup(config, plan, records, documents, teacher, work, progress)
    if extra:
        log(f"top-up: the teacher probed {sum(len(r['probes']) for r in extra)} values in {len(extra)} more sentences")
    return {"extra": extra, "topup_seconds": time.perf_counter() - t0}


def _distil(config: LearnConfig, plan: Plan, records, work: Path, teacher, progress) -> dict:
    metrics, model = distil(config, plan, records, work, teacher, progress) if config.distil.student else ({}, None)
    return {"metrics": metrics, "model": model}


def _score(config: LearnConfig, plan: Plan, model, teacher, documents, records, extra, progress, log) -> dict:
    if not _by_student(config):
        return {"evidence": records + extra}
    evidence = student_evidence(config, plan, model, teacher.tokenizer, documents, progress)
    log(f"the student scored {sum(len(r['probes']) for r in evidence)} values in {len(evidence)} sentences")
    return {"evidence": evidence}


def _aggregate(config: LearnConfig, plan: Plan, evidence, documents) -> dict:
    lexicon, cells, summary = aggregate(config, plan, evidence, documents)
    return {"lexicon": lexicon, "cells": cells, "coupling": summary}


def _emit(config: LearnConfig, plan: Plan, teacher, lexicon, cells, coupling, metrics, world: int) -> dict:
    name = config.name or config.output.name.removesuffix(".yaml").removesuffix(".yml")
    provenance = {
        "teacher": teacher.name,
        "method": "adversarial perturbation of input embeddings: Jacobian-probe token sensitivity, "
        "finite-difference Hessian-vector pair coupling (heatc learn)",
        "corpus": [_display_path(x, config.output) for x in config.corpus],
        **({"excluded": sorted(config.exclude)} if config.exclude else {}),
        "corpus_sha256": plan.corpus_sha256,
        "documents": plan.documents,
        "sentences": plan.sentences,
        "teacher_sentences": len(plan.teacher_sentences),
        "scored_by": "student" if _by_student(config) else "teacher",
        "epsilon": config.teaching.epsilon,
        "epsilon_scale": "token input-embedding norm",
        "seed": config.seed,
        "processes": world,
        "coupling": coupling,
        "metrics": metrics,
    }
    tokenizer = (
        {"embedded": "minilm"}
        if config.teaching.teacher is None
        else {"dir": _display_path(config.teaching.teacher, config.output)}
    )
    doc = heatmap_document(
        name=name,
        title=config.title or f"Learned from {', '.join(Path(x).name for x in config.corpus)}",
        lexicon=lexicon,
        cells=cells,
        provenance=provenance,
        sensitivity=config.cells.sensitivity,
        rule_files=[_display_path(r, config.output) for r in config.rules],
        tokenizer=tokenizer,
    )
    header = (
        f"Learned by `heatc learn` from {', '.join(map(str, config.corpus))} with teacher {teacher.name}.\n"
        "Scores are teacher pair couplings (percentiles); statistics are the values the rules capture."
    )
    write_heatmap(config.output, doc, header)
    return {}


#: Every rank runs these (labelling and distillation are sharded over a torchrun's ranks).
SHARED_STAGES = (
    Stage("read", "read the corpus and the rule files", ("config",), ("documents",), _read),
    Stage("teacher", "load the teacher", ("config",), ("teacher",), _teacher),
    Stage("plan", "learn keywords, find candidate cells, choose the teacher's sentences (or resume)",
          ("config", "fresh", "documents", "progress", "log", "rank"), ("work", "plan"), _plan,
          lambda out: json_dump(out["plan"].to_json())),
    Stage("label", "the teacher labels its sentences, in checkpointed chunks", ("config", "plan", "teacher", "work",
          "progress"), ("records", "label_seconds"), _label, lambda out: json_dump(out["records"])),
    Stage("topup", "the teacher probes what its plan left short (when it scores the cells)",
          ("config", "plan", "records", "documents", "teacher", "work", "progress", "log"),
          ("extra", "topup_seconds"), _topup, lambda out: json_dump(out["extra"])),
    Stage("distil", "train, evaluate and export the pair student", ("config", "plan", "records", "work", "teacher",
          "progress"), ("metrics", "model"), _distil, lambda out: json_dump(out["metrics"])),
)  # fmt: skip
#: Rank 0 alone runs these.
MAIN_STAGES = (
    Stage("score", "the student (or the teacher's records) scores the cells",
          ("config", "plan", "model", "teacher", "documents", "records", "extra", "progress", "log"), ("evidence",),
          _score, lambda out: json_dump(out["evidence"])),
    Stage("aggregate", "couplings and corpus statistics become cells with ranges", ("config", "plan", "evidence",
          "documents"), ("lexicon", "cells", "coupling"), _aggregate, lambda out: json_dump(out["cells"])),
    Stage("emit", "write the heatmap", ("config", "plan", "teacher", "lexicon", "cells", "coupling", "metrics",
          "world"), (), _emit),
)  # fmt: skip
#: `heatc learn`, stage by stage.
STAGES = SHARED_STAGES + MAIN_STAGES


def learn(
    config: LearnConfig,
    *,
    fresh: bool = False,
    progress: Progress = quiet,
    log=print,
    dump_after: str | None = None,
) -> dict:
    """Run every stage (`STAGES`); returns a summary, with each stage's wall time under
    "stages". Rank 0 writes the heatmap and the student. `dump_after`: a stage whose output
    is written beside the heatmap, as OUTPUT.STAGE.json."""
    check_dump_after(STAGES, dump_after)
    rank, world = rank_and_world()
    started = time.perf_counter()
    dump_to = config.output.with_name(config.output.name.removesuffix(".yaml").removesuffix(".yml") + f".{dump_after}")
    values = {"config": config, "fresh": fresh, "progress": progress, "log": log, "rank": rank, "world": world}
    run = run_stages(SHARED_STAGES, values, dump_after, dump_to)
    if rank != 0:
        return {}
    main = run_stages(MAIN_STAGES, run.values, dump_after, dump_to)
    v = main.values
    return {
        "cells": len(v["cells"]),
        "hot_cells": v["coupling"]["hot_cells"],
        "label_seconds": round(v["label_seconds"] + v["topup_seconds"], 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": v["metrics"],
        "coupling": v["coupling"]["unit_vs_keyword"],
        "candidate_cells": v["coupling"]["candidate_cells"],
        "checked_sentences": v["coupling"]["checked_sentences"],
        "stages": run.seconds + main.seconds,
        "dumped": str(run.dumped or main.dumped or "") or None,
    }


def _display_path(path: Path, output: Path) -> str:
    """A path as the heatmap should record it: relative to the heatmap's folder if inside it."""
    try:
        return os.path.relpath(Path(path).resolve(), Path(output).resolve().parent)
    except ValueError:
        return str(path)
