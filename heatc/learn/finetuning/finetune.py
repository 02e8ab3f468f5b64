"""`heatc finetune`: adapt a learned heatmap to a domain's documents (PDFs, text files).

1. **Corpus.** Each PDF page with text is a document of its own (`heatc.pdf`; scanned and
   failed pages are skipped and counted), so values cross-validate over pages; text files
   are read as `heatc learn` reads a corpus.
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

Settings: `heatc.learn.config.FinetuneConfig`.

Public surface: `finetune`, `domain_documents`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import time
from collections import Counter
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.config import DistilConfig, FinetuneConfig, LearnConfig, TeachingConfig
from heatc.learn.text.corpus import Document, read_corpus
from heatc.learn.work import Progress, quiet, read_work, refuse_other_work
from heatc_runtime.files import UnreadableFile, read_file

# the format of a run's working files (<output>.finetune/); another version is refused (--fresh).
# 3: the plan holds the magnitude families of rare labs (`Plan.magnitudes`); 4: and the model
# names (`Plan.model_names`); 5: the cell of every percentage among the candidates
WORK_VERSION = 5


def _sha256(path: Path) -> str:
    try:  # (a regular file of a bounded size: a FIFO hung here, /dev/zero filled memory)
        return hashlib.sha256(read_file(path, 1 << 31)).hexdigest()
    except UnreadableFile as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read: {e}")) from None


def domain_documents(config: FinetuneConfig) -> tuple[list[Document], list[dict]]:
    """The domain corpus: a document per PDF page with text, then the text files' documents;
    and a provenance entry per PDF (sha256, pages used, scanned pages skipped, failed pages)."""
    documents: list[Document] = []
    sources: list[dict] = []
    if config.pdfs:
        try:
            from heatc.pdf import extract
        except ModuleNotFoundError as missing:
            raise HeatError(
                Diagnostic("--pdf", 0, 0, f"reading PDFs needs {missing.name!r}: pip install 'heatc[pdf]'")
            ) from None
        for doc in extract([str(p) for p in config.pdfs]):
            wanted = None if config.pages is None else set(config.pages.get(doc.file, ()))
            pages = [p for p in doc.pages if wanted is None or p.page in wanted]
            used = [p.page for p in pages if p.text.strip()]
            documents.extend(Document(f"{Path(doc.file).name}#{p.page}", p.text) for p in pages if p.text.strip())
            sources.append({
                "file": Path(doc.file).name, "sha256": doc.sha256, "pages": doc.page_count, "pages_used": _spans(used),
                "scanned_skipped": len([p for p in pages if p.scanned]), "failed": [p.page for p in pages if p.error],
            })  # fmt: skip
    if config.texts:
        documents.extend(read_corpus(config.texts))
        sources.extend({"file": Path(t).name, "sha256": _sha256(t)} for t in config.texts if Path(t).is_file())
    if not documents:
        pages = sum(s.get("pages", 0) for s in sources)
        scanned = sum(s.get("scanned_skipped", 0) for s in sources)
        what = "no PDF or text file given" if not (config.pdfs or config.texts) else (
            f"no text in {pages} PDF page{'s' * (pages != 1)} ({scanned} scanned: no text layer; heatc does no OCR)"
            if config.pdfs and not config.texts else "the documents hold no text"
        )  # fmt: skip
        raise HeatError(Diagnostic(str(config.output), 0, 0, f"nothing to fine-tune on: {what}"))
    return documents, sources


def _spans(pages: list[int]) -> str:
    """1, 2, 3, 5, 7, 8 → "1-3,5,7-8"."""
    out: list[str] = []
    for p in pages:
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ",".join(out)


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


def finetune(config: FinetuneConfig, *, fresh: bool = False, progress: Progress = quiet, log=print) -> dict:
    """Fine-tune; returns a summary. Writes the domain heatmap and its student."""
    import yaml

    from heatc.heatmap.format import load_heatmap
    from heatc.learn.finetuning.merge import TRUSTED_SUPPORT, base_lexicon, split_literals, without_groups
    from heatc.learn.heatmaps.aggregate import aggregate
    from heatc.learn.students.distil import student_metrics
    from heatc.learn.students.student_scoring import student_evidence
    from heatc.learn.teaching.labelling import label, read_chunks
    from heatc.learn.teaching.plan import Plan, discovery_sample, plan, plan_lexicon, rule_file_literals
    from heatc.learn.teaching.teacher import load_teacher
    from heatc.learn.text.discovery import discover_keywords

    started = time.perf_counter()
    base = load_heatmap(config.base)
    base_sha = _sha256(config.base)
    student, student_kind = _base_student(config, log)
    documents, sources = domain_documents(config)
    corpus_sha = hashlib.sha256(b"".join(d.id.encode() + b"\0" + d.text.encode() + b"\0" for d in documents))
    teacher = load_teacher(config.teacher, config.device)
    if student is not None and student.config.vocab_size != len(teacher.tokenizer):
        raise HeatError(Diagnostic(str(config.base), 0, 0, f"its student reads another tokenizer than {teacher.name}"))
    # the settings of `heatc learn`'s stages that fine-tuning runs again: the plan, the teacher's
    # labels and the cells (its threshold, where not given, the base heatmap's)
    sensitivity = base.sensitivity if config.cells.sensitivity is None else config.cells.sensitivity
    learn = LearnConfig(
        corpus=[], output=config.output, seed=config.seed, rules=list(base.rule_files),
        teaching=TeachingConfig(teacher=config.teacher, device=config.device, teacher_sentences=config.teacher_sentences),
        cells=dataclasses.replace(config.cells, sensitivity=sensitivity),
        distil=DistilConfig(epochs=config.epochs),
    )  # fmt: skip
    work = _work_dir(config, config.fingerprint(base_sha, corpus_sha.hexdigest()), fresh)
    plan_file = work / "plan.json.gz"
    if not plan_file.exists():
        start = base_lexicon(base).without_literals(rule_file_literals(learn.rules))
        sample = [
            s for _, s in discovery_sample(learn, [(i, s) for i, d in enumerate(documents) for s in _sentences(d)])
        ]
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
    t0 = time.perf_counter()
    label(learn, p, teacher, work, progress)
    teacher_seconds = time.perf_counter() - t0
    records = read_chunks(work, -(-len(p.teacher_sentences) // learn.teaching.chunk_size))
    init = None if student is None else student.state_dict()
    before = _fidelity_before(student, student_kind, records, p, teacher, student_metrics, learn.seed)
    lr = config.lr if student is not None else None  # a new student: training's own
    metrics, model = _distil(learn, p, records, work, teacher, progress, init, lr, getattr(student, "config", None))
    evidence = student_evidence(learn, p, model, teacher.tokenizer, documents, progress)
    log(f"the student scored {sum(len(r['probes']) for r in evidence)} values in {len(evidence)} sentences")
    lexicon, cells, summary = aggregate(learn, p, evidence, documents)
    provenance = {
        "method": "heatc finetune: the base heatmap's student fine-tuned on the teacher's labels of a bounded sample "
        "of the domain, the domain's cells scored by the student and learned over the whole domain corpus",
        "base": {"heatmap": _display(config.base, config.output), "sha256": base_sha, "student": student_kind},
        "documents": sources,
        "corpus_sha256": corpus_sha.hexdigest(),
        "sentences": p.sentences,
        "teacher": teacher.name,
        "teacher_sentences": len(p.teacher_sentences),
        "teacher_probes": sum(len(r["probes"]) for r in records),
        "student_sentences": len(evidence),
        "seed": config.seed,
        "budget": {"alarm_budget": config.alarm_budget, "min_worth": config.min_worth},
        "combined": "a cell the domain learns takes the domain's score (student couplings), statistics and range "
        f"(a range fitted to fewer values than the base's and fewer than {TRUSTED_SUPPORT} widened to the hull of both); "
        "a base cell it does not learn is kept as the base has it"
        + ("" if config.keep_unused else " (here: dropped)")
        + "; the false alarms the kept cells and the bands a re-learned cell keeps from the base raise on the "
        "domain's clean text are paid from what the domain's cells leave of the budget, hottest first, "
        "and those it does not pay for are dropped",
        "coupling": summary,
        "metrics": {**metrics, "base_student": before},
    }
    doc, counts = _merged_document(config, base, lexicon, cells, provenance, learn, plan_lexicon(p), documents)
    doc["provenance"]["cells"] = dict(counts)
    header = (
        f"Fine-tuned by `heatc finetune` from {config.base.name} on {', '.join(s['file'] for s in sources)} "
        f"with teacher {teacher.name}.\n"
        "Domain cells: student pair couplings (percentiles) and the domain's values; base cells kept as they were."
    )
    from heatc.learn.heatmaps.emit import write_heatmap

    write_heatmap(config.output, doc, header)
    yaml.safe_load(config.output.read_text(encoding="utf-8"))  # what it wrote reads back
    return {
        "cells": len(doc["cells"]),
        "domain_cells": len(cells),
        "counts": dict(counts),
        "teacher_seconds": round(teacher_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
        "base_student": before,
        "candidate_cells": summary["candidate_cells"],
        "checked_sentences": summary["checked_sentences"],
    }


def _sentences(d: Document) -> list[str]:
    from heatc.learn.text.corpus import sentences

    return sentences(d.text)


def _fidelity_before(student, kind: str, records, p, teacher, student_metrics, seed: int) -> dict:
    """The base student's fidelity on the same held-out teacher sentences (pair metrics only
    when it has a trained pair head)."""
    from heatc.learn.students.distil import _examples

    if student is None:
        return {}
    train, test = _examples(records, p, teacher.tokenizer)
    m = student_metrics(student, train, test, seed)
    keep = ("student_auc", "pair_spearman", "pair_auc") if kind == "pair" else ("student_auc",)
    return {k: m[k] for k in keep if k in m}


def _distil(learn: LearnConfig, p, records, work: Path, teacher, progress, init, lr: float | None, base_config):
    """Fine-tune the base student (its own configuration: a student of an earlier heatc keeps
    its pair head) or, with none, train a new one."""
    from heatc.learn.students.distil import distil

    return distil(learn, p, records, work, teacher, progress, init=init, lr=lr, base_config=base_config)


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
    left = config.alarm_budget * provenance["coupling"]["checked_sentences"] - sum(c.charged for c in cells)
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
    from heatc.backends import wasm_checker
    from heatc.learn.heatmaps.aggregate import counted_text
    from heatc.learn.heatmaps.emit import compile_document
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
