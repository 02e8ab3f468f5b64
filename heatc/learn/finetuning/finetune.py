"""`heatc finetune`: adapt a learned heatmap to a domain's documents (PDFs, text files).

1. **Corpus** (`documents.domain_documents`). Each PDF page with text is a document of its own
   (`heatc.pdf`; scanned and failed pages are skipped and counted), so values cross-validate
   over pages; text files are read as `heatc learn` reads a corpus.
2. **Plan** (`plan.plan`) over the base heatmap's lexicon (`merge.base_lexicon`): the
   domain's keywords and candidate cells, and the sentences the student will score; the
   teacher reads a bounded sample of them (`teacher_sentences`, `plan.teacher_share`).
3. **Student.** The base heatmap's student (beside it, `<base>.student.onnx`) is fine-tuned on
   the teacher's labels of that sample (a token-only student of an earlier heatc gives its
   encoder and token head; `new_student` trains one from scratch when there is none). Its
   fidelity on the held-out part of the sample is measured before and after.
4. **Cells.** The student scores every candidate value of the planned sentences, and
   aggregation (`aggregate.aggregate`) learns the domain's cells over the whole domain corpus
   within the false-alarm budget. They are merged with the base's (`merge`): a cell the domain
   learns takes the domain's score, statistics and range (widened to the base's where the
   domain saw fewer values, `merge.widen_to_base`); a base cell it does not is kept as it
   was; what the inherited rules (kept cells, bands) reject of the domain's clean text is
   paid from what the domain's cells leave of the budget (`merge.affordable`).

Work lives in `<output>.finetune/` (the plan, the teacher's chunks, the student's checkpoint):
a rerun with the same settings resumes. Deterministic for a seed.

The steps run as named stages (`STAGES`, run by heatc.stages: timed, an error tagged with its
stage): `read` (the base heatmap, its student, the domain corpus), `teacher`, `plan`, `label`,
`distil` (the base student fine-tuned), `score`, `aggregate`, `emit` (merged with the base).

Settings: `heatc.learn.config.FinetuneConfig`.

Public surface: `finetune`, `STAGES`, `WORK_VERSION`.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import time
from collections import Counter
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.config import DistilConfig, FinetuneConfig, LearnConfig, TeachingConfig
from heatc.learn.finetuning.documents import corpus_sha256, domain_documents, file_sha256
from heatc.learn.text.corpus import Document, sentences
from heatc.learn.work import Progress, json_dump, quiet, read_work, refuse_other_work
from heatc.stages import Stage, check_dump_after, run_stages

# the format of a run's working files (<output>.finetune/); another version is refused (--fresh).
# 3: the plan holds the magnitude families of rare labs (`Plan.magnitudes`); 4: and the model
# names (`Plan.model_names`); 5: the cell of every percentage among the candidates
WORK_VERSION = 5


def _work_dir(config: FinetuneConfig, fingerprint: str, fresh: bool) -> Path:
    import shutil

    work = config.output.with_name(config.output.name.removesuffix(".yaml").removesuffix(".yml") + ".finetune")
    stamp = work / "config.json"
    want = {"version": WORK_VERSION, "fingerprint": fingerprint}
    if stamp.exists() and not fresh:
        refuse_other_work(work, want, "heatc finetune")
    if fresh or not stamp.exists():
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(want))
    return work


def _base_student(config: FinetuneConfig, log) -> tuple[object | None, str]:
    """The base heatmap's student as a torch model and what it holds (pair, token), or
    (None, "none") with `new_student`."""
    from heatc.learn.students.distil import student_path
    from heatc.learn.students.pair_onnx import load_pair_student

    path = student_path(config.base)
    if not path.exists():
        if config.new_student:
            log(f"{path.name} not found: a new student learns from the domain's teacher sample alone")
            return None, "none"
        raise HeatError(
            Diagnostic(
                str(path), 0, 0,
                "no student beside the base heatmap (heatc finetune fine-tunes it); pass --new-student to "
                "train one from the domain's teacher sample alone",
            )
        )  # fmt: skip
    model, kind = load_pair_student(path)
    if kind == "token":
        log(f"{path.name} is a token student of an earlier heatc: its pair head starts untrained")
    return model, kind


def _learn_settings(config: FinetuneConfig, base) -> LearnConfig:
    """The settings of `heatc learn`'s stages that fine-tuning runs again: the plan, the
    teacher's labels, the student and the cells (their threshold, where not given, the base
    heatmap's)."""
    sensitivity = base.sensitivity if config.cells.sensitivity is None else config.cells.sensitivity
    return LearnConfig(
        corpus=[], output=config.output, seed=config.seed, rules=list(base.rule_files),
        teaching=TeachingConfig(teacher=config.teacher, device=config.device, teacher_sentences=config.teacher_sentences),
        cells=dataclasses.replace(config.cells, sensitivity=sensitivity),
        distil=DistilConfig(epochs=config.epochs),
    )  # fmt: skip


def _read(config: FinetuneConfig, log) -> dict:
    from heatc.heatmap.format import load_heatmap

    base = load_heatmap(config.base)
    student, student_kind = _base_student(config, log)
    documents, sources = domain_documents(config)
    return {
        "base": base, "base_sha": file_sha256(config.base), "student": student, "student_kind": student_kind,
        "documents": documents, "sources": sources, "corpus_sha": corpus_sha256(documents),
        "learn": _learn_settings(config, base),
    }  # fmt: skip


def _teacher(config: FinetuneConfig, student) -> dict:
    from heatc.learn.teaching.teacher import load_teacher

    teacher = load_teacher(config.teacher, config.device)
    if student is not None and student.config.vocab_size != len(teacher.tokenizer):
        raise HeatError(Diagnostic(str(config.base), 0, 0, f"its student reads another tokenizer than {teacher.name}"))
    return {"teacher": teacher}


def _plan(config: FinetuneConfig, learn: LearnConfig, base, base_sha: str, corpus_sha: str, documents, fresh: bool,
          progress, log) -> dict:  # fmt: skip
    from heatc.learn.finetuning.merge import base_lexicon, split_literals, without_groups
    from heatc.learn.teaching.plan import Plan, discovery_sample, plan, rule_file_literals
    from heatc.learn.text.discovery import discover_keywords

    work = _work_dir(config, config.fingerprint(base_sha, corpus_sha), fresh)
    plan_file = work / "plan.json.gz"
    if not plan_file.exists():
        start = base_lexicon(base).without_literals(rule_file_literals(learn.rules))
        numbered = [(i, s) for i, d in enumerate(documents) for s in sentences(d.text)]
        sample = [s for _, s in discovery_sample(learn, numbered)]
        own = discover_keywords(
            without_groups(start, several=True), sample, min_support=max(2, learn.teaching.candidate_count)
        )
        p = plan(learn, documents, progress, start=split_literals(start, {k for k, _ in own}))
        if not any(p.heldout) and len(p.teacher_sentences) >= 10:
            # a small sample may hold no sentence of a held-out page: hold out every tenth
            # sentence instead, so that the student's fidelity is measured
            p.heldout = [i % 10 == 9 for i in range(len(p.teacher_sentences))]
        with gzip.open(plan_file.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
            json.dump(p.to_json(), f)
        plan_file.with_suffix(".tmp").replace(plan_file)
    p = read_work(plan_file, Plan.from_json)
    log(
        f"domain: {len(documents)} documents, {p.sentences} sentences; {len(p.keywords)} keywords, "
        f"{len(p.candidates)} candidate cells; the teacher reads {len(p.teacher_sentences)} sentences, "
        f"the student scores {len(p.probe_cells)}"
    )
    return {"work": work, "plan": p}


def _label(learn: LearnConfig, plan, teacher, work: Path, progress) -> dict:
    from heatc.learn.teaching.labelling import label, read_chunks

    t0 = time.perf_counter()
    label(learn, plan, teacher, work, progress)
    seconds = time.perf_counter() - t0
    return {"records": read_chunks(work, -(-len(plan.teacher_sentences) // learn.teaching.chunk_size)),
            "teacher_seconds": seconds}  # fmt: skip


def _distil(config: FinetuneConfig, learn: LearnConfig, plan, records, work: Path, teacher, student, student_kind,
            progress) -> dict:  # fmt: skip
    """Fine-tune the base student (its own configuration: a student of an earlier heatc keeps
    its pair head) or, with none, train a new one; its fidelity before, on the same held-out
    teacher sentences."""
    from heatc.learn.students.distil import distil

    before = _fidelity_before(student, student_kind, records, plan, teacher, learn.seed)
    metrics, model = distil(
        learn, plan, records, work, teacher, progress, init=None if student is None else student.state_dict(),
        lr=config.lr if student is not None else None,  # a new student: training's own
        base_config=getattr(student, "config", None),
    )  # fmt: skip
    return {"metrics": metrics, "model": model, "before": before}


def _score(learn: LearnConfig, plan, model, teacher, documents, progress, log) -> dict:
    from heatc.learn.students.student_scoring import student_evidence

    evidence = student_evidence(learn, plan, model, teacher.tokenizer, documents, progress)
    log(f"the student scored {sum(len(r['probes']) for r in evidence)} values in {len(evidence)} sentences")
    return {"evidence": evidence}


def _aggregate(learn: LearnConfig, plan, evidence, documents) -> dict:
    from heatc.learn.heatmaps.aggregate import aggregate

    lexicon, cells, coupling = aggregate(learn, plan, evidence, documents)
    return {"lexicon": lexicon, "cells": cells, "coupling": coupling}


def _emit(config: FinetuneConfig, learn: LearnConfig, base, base_sha: str, corpus_sha: str, student_kind: str,
          documents, sources, plan, teacher, records, evidence, lexicon, cells, coupling, metrics, before) -> dict:  # fmt: skip
    """The domain's cells merged with the base's (`_merged_document`), with their provenance,
    written as the heatmap."""
    import yaml

    from heatc.learn.finetuning.merge import TRUSTED_SUPPORT
    from heatc.learn.heatmaps.emit import write_heatmap
    from heatc.learn.teaching.plan import plan_lexicon

    provenance = {
        "method": "heatc finetune: the base heatmap's student fine-tuned on the teacher's labels of a bounded sample "
        "of the domain, the domain's cells scored by the student and learned over the whole domain corpus",
        "base": {"heatmap": _display(config.base, config.output), "sha256": base_sha, "student": student_kind},
        "documents": sources,
        "corpus_sha256": corpus_sha,
        "sentences": plan.sentences,
        "teacher": teacher.name,
        "teacher_sentences": len(plan.teacher_sentences),
        "teacher_probes": sum(len(r["probes"]) for r in records),
        "student_sentences": len(evidence),
        "seed": config.seed,
        "budget": {"alarm_budget": config.cells.alarm_budget, "min_worth": config.cells.min_worth},
        "combined": "a cell the domain learns takes the domain's score (student couplings), statistics and range "
        f"(a range fitted to fewer values than the base's and fewer than {TRUSTED_SUPPORT} widened to the hull of both); "
        "a base cell it does not learn is kept as the base has it"
        + ("" if config.keep_unused else " (here: dropped)")
        + "; the false alarms the kept cells and the bands a re-learned cell keeps from the base raise on the "
        "domain's clean text are paid from what the domain's cells leave of the budget, hottest first, "
        "and those it does not pay for are dropped",
        "coupling": coupling,
        "metrics": {**metrics, "base_student": before},
    }
    doc, counts = _merged_document(config, base, lexicon, cells, provenance, learn, plan_lexicon(plan), documents)
    doc["provenance"]["cells"] = dict(counts)
    header = (
        f"Fine-tuned by `heatc finetune` from {config.base.name} on {', '.join(s['file'] for s in sources)} "
        f"with teacher {teacher.name}.\n"
        "Domain cells: student pair couplings (percentiles) and the domain's values; base cells kept as they were."
    )
    write_heatmap(config.output, doc, header)
    yaml.safe_load(config.output.read_text(encoding="utf-8"))  # what it wrote reads back
    return {"document": doc, "counts": counts}


#: `heatc finetune`, stage by stage.
STAGES = (
    Stage("read", "read the base heatmap, its student and the domain's documents", ("config", "log"),
          ("base", "base_sha", "student", "student_kind", "documents", "sources", "corpus_sha", "learn"), _read),
    Stage("teacher", "load the teacher", ("config", "student"), ("teacher",), _teacher),
    Stage("plan", "learn the domain's keywords and candidate cells, choose the teacher's sample (or resume)",
          ("config", "learn", "base", "base_sha", "corpus_sha", "documents", "fresh", "progress", "log"),
          ("work", "plan"), _plan,
          lambda out: json_dump(out["plan"].to_json())),
    Stage("label", "the teacher labels its sample, in checkpointed chunks", ("learn", "plan", "teacher", "work",
          "progress"), ("records", "teacher_seconds"), _label, lambda out: json_dump(out["records"])),
    Stage("distil", "fine-tune the base student (or train a new one), measure it before and after",
          ("config", "learn", "plan", "records", "work", "teacher", "student", "student_kind", "progress"),
          ("metrics", "model", "before"), _distil,
          lambda out: json_dump({**out["metrics"], "base_student": out["before"]})),
    Stage("score", "the student scores the domain's cells", ("learn", "plan", "model", "teacher", "documents",
          "progress", "log"), ("evidence",), _score, lambda out: json_dump(out["evidence"])),
    Stage("aggregate", "couplings and the domain's statistics become cells with ranges", ("learn", "plan", "evidence",
          "documents"), ("lexicon", "cells", "coupling"), _aggregate, lambda out: json_dump(out["cells"])),
    Stage("emit", "merge with the base heatmap's cells and write the heatmap",
          ("config", "learn", "base", "base_sha", "corpus_sha", "student_kind", "documents", "sources", "plan",
           "teacher", "records",
           "evidence", "lexicon", "cells", "coupling", "metrics", "before"), ("document", "counts"), _emit),
)  # fmt: skip


def finetune(
    config: FinetuneConfig, *, fresh: bool = False, progress: Progress = quiet, log=print, dump_after: str | None = None
) -> dict:
    """Run every stage (`STAGES`); returns a summary, with each stage's wall time under
    "stages". Writes the domain heatmap and its student. `dump_after`: a stage whose output is
    written beside the heatmap, as OUTPUT.STAGE.json."""
    check_dump_after(STAGES, dump_after)
    started = time.perf_counter()
    stem = config.output.name.removesuffix(".yaml").removesuffix(".yml")
    values = {"config": config, "fresh": fresh, "progress": progress, "log": log}
    run = run_stages(STAGES, values, dump_after, config.output.with_name(f"{stem}.{dump_after}"))
    v = run.values
    return {
        "cells": len(v["document"]["cells"]),
        "domain_cells": len(v["cells"]),
        "counts": dict(v["counts"]),
        "teacher_seconds": round(v["teacher_seconds"], 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": v["metrics"],
        "base_student": v["before"],
        "candidate_cells": v["coupling"]["candidate_cells"],
        "checked_sentences": v["coupling"]["checked_sentences"],
        "stages": run.seconds,
        "dumped": str(run.dumped) if run.dumped else None,
    }


def _fidelity_before(student, kind: str, records, p, teacher, seed: int) -> dict:
    """The base student's fidelity on the same held-out teacher sentences (pair metrics only
    when it has a trained pair head)."""
    from heatc.learn.students.distil import _examples, student_metrics

    if student is None:
        return {}
    train, test = _examples(records, p, teacher.tokenizer)
    m = student_metrics(student, train, test, seed)
    keep = ("student_auc", "pair_spearman", "pair_auc") if kind == "pair" else ("student_auc",)
    return {k: m[k] for k in keep if k in m}


def _display(path: Path, output: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), Path(output).resolve().parent)
    except ValueError:
        return str(path)


def _merged_document(
    config: FinetuneConfig, base, lexicon, cells, provenance: dict, learn: LearnConfig, start, documents
):
    """The domain's cells as a heatmap document, the base's merged in (`merge`), checked on the
    domain's clean text: the false alarms the inherited rules (kept base cells, inherited
    bands) raise there are paid from what the domain's cells leave of the budget
    (`merge.affordable`), those it does not pay for are dropped, and expects that the merged
    rules do not bear out are left out."""
    import yaml

    from heatc.learn.finetuning.merge import affordable, drop_bands, drop_rejecting, merge_cells, without_bands
    from heatc.learn.heatmaps.emit import confirmed_expects, heatmap_document

    base_doc = yaml.safe_load(Path(config.base).read_text(encoding="utf-8"))
    domain = heatmap_document(
        name=config.name or _output_name(config.output), title=config.title or f"{base.title} (fine-tuned)".strip(), lexicon=lexicon,
        cells=cells, provenance=provenance, sensitivity=learn.cells.sensitivity,
        rule_files=[_display(r, config.output) for r in base.rule_files],
        tokenizer=base_doc.get("tokenizer") or {"embedded": "minilm"},
    )  # fmt: skip
    merged, kept, banded, counts = merge_cells(
        domain, base_doc, start, keep_unused=config.keep_unused, margin=(base.margin_spread, base.margin_factor)
    )
    rejections = _domain_rejections(merged, config, documents)
    plain = _domain_rejections(without_bands(merged, banded), config, documents) if banded else rejections
    score = {c["name"]: float(c.get("score", 0.0)) for c in merged["cells"]}
    inherited = [(n, score[n], rejections.get(n, 0)) for n in kept] + [
        (f"band {n}", score[n], max(rejections.get(n, 0) - plain.get(n, 0), 0)) for n in banded
    ]
    left = config.cells.alarm_budget * provenance["coupling"]["checked_sentences"] - sum(c.charged for c in cells)
    paid = affordable(inherited, left)
    merged, dropped = drop_rejecting(merged, [n for n in kept if n not in paid], rejections)
    if banded:
        merged, unbanded = drop_bands(merged, [n for n in banded if f"band {n}" not in paid], rejections, plain)
        counts["banded"] = len(banded) - unbanded
    counts["kept"] -= dropped
    counts["dropped"] += dropped
    counts["domain"] = len(cells)
    merged["expects"] = confirmed_expects(merged, config.output.parent)
    return merged, counts


def _domain_rejections(doc: dict, config: FinetuneConfig, documents: list[Document]) -> Counter:
    """Per rule, its rejections on the domain's clean sentences (`aggregate.counted_text`)."""
    from heatc.learn.heatmaps.aggregate import counted_text
    from heatc.learn.heatmaps.emit import compile_document
    from heatc.verify.backends import wasm_checker
    from heatc_runtime import Verdict

    checker = wasm_checker(compile_document({**doc, "expects": []}, config.output.parent)[0])
    out: Counter = Counter()
    for d in documents:
        for e in checker.scan(counted_text(d.text)).events:
            if e.kind == "match" and e.verdict is Verdict.REJECTED:
                out[e.name] += 1
    return out


def _output_name(output: Path) -> str:
    """The heatmap's name when --name is not given: its file's (clinic.yaml: clinic), as
    `heatc learn` names it — so `heatc build clinic.yaml` writes build/clinic, not over the
    base's build. Characters a name cannot hold become "_"."""
    stem = output.name.removesuffix(".yaml").removesuffix(".yml")
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return name if name and not name[0].isdigit() else f"_{name}"
