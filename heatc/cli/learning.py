"""`heatc learn` and `heatc finetune`.

Public surface: the commands, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from heatc.cli.common import Timings, alarm_budget_option, app, dump_after_option, fail, out
from heatc.errors import HeatError
from heatc.learn.config import (
    FINETUNE_CELLS,
    CellsConfig,
    DistilConfig,
    FinetuneConfig,
    LearnConfig,
    TeachingConfig,
)

# The options' defaults are the settings' own (heatc.learn.config): defined there once.
_LEARN = LearnConfig(corpus=[], output=Path())
_TEACHING, _CELLS, _DISTIL = _LEARN.teaching, _LEARN.cells, _LEARN.distil
_FINETUNE = FinetuneConfig(base=Path(), output=Path())

# (options heatc learn and heatc finetune share)
_Name = Annotated[str | None, typer.Option("--name", help="The heatmap's name (default: the output file's stem).")]
_Title = Annotated[str | None, typer.Option("--title", help="The heatmap's title.")]
_Seed = Annotated[int, typer.Option("--seed", help="Seed for sampling and the teacher's random probes.")]
_Device = Annotated[str, typer.Option("--device", help="torch device for the teacher (cpu, cuda, cuda:1).")]
_LearnBudget = alarm_budget_option(
    "Rejections the learned rules may make per clean corpus sentence that holds a value some rule checks, all "
    "cells together."
)
_FinetuneBudget = alarm_budget_option("Rejections the domain cells may make per clean domain sentence.")
_LearnDumpAfter = dump_after_option(
    "OUTPUT.STAGE.json: plan, label (the teacher's records), topup, distil (the student's metrics), score "
    "(the evidence), aggregate (the cells)"
)
_FinetuneDumpAfter = dump_after_option(
    "OUTPUT.STAGE.json: plan, label (the teacher's records), distil (the student's metrics before and after), "
    "score (the evidence), aggregate (the domain's cells)"
)


@app.command()
def learn(
    corpus: Annotated[
        list[Path],
        typer.Option(
            "--corpus", "-c", help="Corpus files or folders (.txt .md .json .jsonl, .gz, .tar.gz); repeat for more."
        ),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The heatmap to write (.yaml); the student goes beside it.")
    ],
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            help="Leave out the corpus documents whose id matches this glob (an archive member is "
            "'archive.tar.gz:folder/name.txt'); repeat for more.",
        ),
    ] = None,
    teacher: Annotated[
        Path | None,
        typer.Option(
            "--teacher", help="A local Hugging Face encoder or causal-LM folder (default: the embedded MiniLM)."
        ),
    ] = None,
    name: _Name = None,
    title: _Title = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Hand-written rule files to merge in; repeat for more.")
    ] = None,
    seed: _Seed = _LEARN.seed,
    device: _Device = _TEACHING.device,
    epsilon: Annotated[
        float,
        typer.Option(
            "--epsilon", min=1e-6, max=1.0, help="Perturbation radius, relative to each token's input-embedding norm."
        ),
    ] = _TEACHING.epsilon,
    label_sentences: Annotated[
        int, typer.Option("--label-sentences", help="Random sentences the teacher labels for the student.")
    ] = _TEACHING.label_sentences,
    probe_sentences: Annotated[
        int, typer.Option("--probe-sentences", help="At most this many sentences probed for pair coupling.")
    ] = _TEACHING.max_probe_sentences,
    topup_probes: Annotated[
        int,
        typer.Option(
            "--topup-probes", min=0, help="At most this many values probed besides, for cells left without a score."
        ),
    ] = _TEACHING.topup_probes,
    discovery_sentences: Annotated[
        int, typer.Option("--discovery-sentences", help="Sentences read to learn keywords and candidate cells.")
    ] = _TEACHING.discovery_sentences,
    min_support: Annotated[
        int, typer.Option("--min-support", help="Corpus occurrences a cell needs.")
    ] = _CELLS.min_support,
    sensitivity: Annotated[
        float,
        typer.Option(
            "--sensitivity",
            min=0.0,
            max=1.0,
            help="The heatmap's threshold: only cells scoring at least this compete for the budget and become rules "
            "(0: every scored cell does).",
        ),
    ] = _CELLS.sensitivity,
    alarm_budget: _LearnBudget = _CELLS.alarm_budget,
    bands: Annotated[
        bool,
        typer.Option(
            "--bands/--no-bands",
            help="Let range cells with a unit also ask that a document's values stay within a factor of each "
            "other (magnitude bands: scale slips, thousand for million). Worth it for financial reports "
            "(heatmaps/finance.yaml is learned with it); clinical notes and contracts lose recall with it.",
        ),
    ] = _CELLS.bands,
    places: Annotated[
        bool,
        typer.Option(
            "--places/--no-places",
            help="Let range cells also bound the digits their values write after the point (a precision: "
            "a decimal point slipped left adds one). Off by default: on held-out clinical notes and "
            "contracts its rules took the budget of unit guards and ranges (docs/learning.md).",
        ),
    ] = _CELLS.places,
    dimensions: Annotated[
        bool,
        typer.Option(
            "--dimensions/--no-dimensions",
            help="Key a keyword's cells on the dimension of their unit (mass, volume, …), its values converted "
            "to the base unit, so that one range rejects a slipped unit (`metformin 500 g`). Off by default: on "
            "held-out clinical notes it caught more unit swaps but fewer slips at the same false alarms "
            "(docs/learning.md).",
        ),
    ] = _CELLS.dimensions,
    epochs: Annotated[int, typer.Option("--epochs", help="Student training epochs.")] = _DISTIL.epochs,
    student: Annotated[
        bool, typer.Option("--student/--no-student", help="Train and export the student detector.")
    ] = _DISTIL.student,
    teacher_sentences: Annotated[
        int,
        typer.Option(
            "--teacher-sentences",
            min=0,
            help="The teacher labels at most this many of the planned sentences and the student scores the cells "
            "(0: the teacher reads and scores them all).",
        ),
    ] = _TEACHING.teacher_sentences,
    timings: Timings = False,
    dump_after: _LearnDumpAfter = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard the previous run's work (OUTPUT.learn/) instead of resuming it.")
    ] = False,
) -> None:
    """Learn a heatmap from a corpus with a frozen teacher model (runs under torchrun too).
    The stages: read, teacher, plan, label, topup, distil, score, aggregate, emit."""
    import os

    try:
        from heatc.learn.pipeline import learn as run_learn
    except ModuleNotFoundError as missing:
        raise fail(f"heatc learn needs {missing.name!r}: pip install 'heatc[learn]'") from None
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    rank = int(os.environ.get("RANK", "0"))
    config = LearnConfig(
        corpus=corpus, output=output, exclude=list(exclude or []), name=name, title=title, rules=list(rules or []),
        seed=seed,
        teaching=TeachingConfig(
            teacher=teacher, device=device, epsilon=epsilon, label_sentences=label_sentences,
            max_probe_sentences=probe_sentences, topup_probes=topup_probes, discovery_sentences=discovery_sentences,
            teacher_sentences=teacher_sentences,
        ),
        cells=CellsConfig(
            min_support=min_support, sensitivity=sensitivity, alarm_budget=alarm_budget, bands=bands, places=places,
            dimensions=dimensions,
        ),
        distil=DistilConfig(student=student, epochs=epochs),
    )  # fmt: skip
    try:
        with _LearnProgress(rank == 0 and sys.stderr.isatty(), rank == 0) as progress:
            summary = run_learn(
                config,
                fresh=fresh,
                progress=progress,
                log=(lambda m: out.print(escape(m))) if rank == 0 else (lambda m: None),
                dump_after=dump_after,
            )
    except HeatError as e:
        raise fail(e.render()) from None
    finally:
        if distributed:
            dist.destroy_process_group()
    if rank == 0:
        m = summary["metrics"]
        out.print(
            f"{output}: {summary['cells']} cells, {summary['hot_cells']} at or above {sensitivity}; "
            f"student AUC {m.get('student_auc', 'n/a')} (IDF {m.get('idf_auc', 'n/a')}, random {m.get('random_auc', 'n/a')}); "
            f"teacher {summary['label_seconds']} s, total {summary['seconds']} s"
        )
        # what decides how many cells a corpus affords: each bound costs the false alarms it is
        # expected to raise in text not seen, so a small corpus's budget pays for few (docs/learning.md)
        checked = summary["checked_sentences"]
        out.print(
            f"false-alarm budget: {alarm_budget:g} × {checked} checked sentences = {alarm_budget * checked:.1f} "
            f"rejections, for {summary['cells']} of {summary['candidate_cells']} candidate cells "
            "(a bound is priced at what it is expected to reject in unseen text: more text or --alarm-budget buys more)"
        )
        if summary["dumped"]:
            out.print(f"{dump_after}: wrote {summary['dumped']}")
        if timings:
            from heatc.stages import format_timings

            sys.stderr.write(format_timings("learn", summary["stages"]) + "\n")


@app.command()
def finetune(
    base: Annotated[Path, typer.Argument(help="The heatmap to adapt (.yaml), its student beside it.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The domain heatmap to write (.yaml); its student goes beside it.")
    ],
    pdf: Annotated[list[Path] | None, typer.Option("--pdf", help="A PDF of the domain; repeat for more.")] = None,
    text: Annotated[
        list[Path] | None,
        typer.Option("--text", help="Text of the domain (files or folders, as heatc learn reads); repeat for more."),
    ] = None,
    teacher: Annotated[
        Path | None,
        typer.Option("--teacher", help="The teacher the base heatmap was learned with, if not the embedded MiniLM."),
    ] = None,
    name: _Name = None,
    title: _Title = None,
    seed: _Seed = _FINETUNE.seed,
    device: _Device = _FINETUNE.device,
    teacher_sentences: Annotated[
        int,
        typer.Option(
            "--teacher-sentences", min=1, help="The domain sentences the teacher labels (the student scores all)."
        ),
    ] = _FINETUNE.teacher_sentences,
    min_support: Annotated[
        int, typer.Option("--min-support", min=1, help="Domain occurrences a new cell needs.")
    ] = FINETUNE_CELLS.min_support,
    alarm_budget: _FinetuneBudget = FINETUNE_CELLS.alarm_budget,
    min_worth: Annotated[
        float | None,
        typer.Option(
            "--min-worth",
            min=0.0,
            help="What each false alarm a narrower range adds must buy, in values where a rule would notice an "
            "error (default: about what heatc learn pays, docs/finetune.md); 0: the budget alone decides.",
        ),
    ] = None,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Student fine-tuning epochs.")] = _FINETUNE.epochs,
    dimensions: Annotated[
        bool,
        typer.Option(
            "--dimensions/--no-dimensions",
            help="Key the domain's keyword cells on the dimension of their unit, values converted to the base unit "
            "(heatc learn --dimensions); off by default: a cell per keyword and unit.",
        ),
    ] = FINETUNE_CELLS.dimensions,
    keep_unused: Annotated[
        bool,
        typer.Option(
            "--keep-unused/--drop-unused",
            help="Keep the base cells the domain does not re-learn (unless they reject domain text).",
        ),
    ] = _FINETUNE.keep_unused,
    new_student: Annotated[
        bool, typer.Option("--new-student", help="Without a student beside the base: train one from the domain sample.")
    ] = _FINETUNE.new_student,
    timings: Timings = False,
    dump_after: _FinetuneDumpAfter = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard the previous run's work (OUTPUT.finetune/) instead of resuming it.")
    ] = False,
) -> None:
    """Adapt a learned heatmap to a domain's documents: the base's student is fine-tuned on the
    teacher's labels of a bounded sample, then scores the domain's cells over all of it.
    The stages: read, teacher, plan, label, distil, score, aggregate, emit."""
    try:
        from heatc.learn.finetuning.finetune import finetune as run_finetune
    except ModuleNotFoundError as missing:
        raise fail(f"heatc finetune needs {missing.name!r}: pip install 'heatc[learn]'") from None
    config = FinetuneConfig(
        base=base, output=output, pdfs=list(pdf or []), texts=list(text or []), name=name, title=title,
        teacher=teacher, device=device, seed=seed, teacher_sentences=teacher_sentences, epochs=epochs,
        keep_unused=keep_unused, new_student=new_student,
        cells=dataclasses.replace(
            FINETUNE_CELLS, min_support=min_support, alarm_budget=alarm_budget, dimensions=dimensions,
            **({} if min_worth is None else {"min_worth": min_worth}),
        ),
    )  # fmt: skip
    try:
        with _LearnProgress(sys.stderr.isatty(), True, "heatc finetune") as progress:
            summary = run_finetune(
                config, fresh=fresh, progress=progress, log=lambda m: out.print(escape(m)), dump_after=dump_after
            )
    except HeatError as e:
        raise fail(e.render()) from None
    m, c = summary["metrics"], summary["counts"]
    out.print(
        f"{output}: {summary['cells']} cells ({c.get('domain', 0)} learned from the domain, {c.get('kept', 0)} kept from "
        f"the base, {c.get('dropped', 0)} dropped, {c.get('widened', 0)} ranges widened to the base's); student pair Spearman {m.get('pair_spearman', 'n/a')}, "
        f"pair AUC {m.get('pair_auc', 'n/a')}, token AUC {m.get('student_auc', 'n/a')}; "
        f"teacher {summary['teacher_seconds']} s, total {summary['seconds']} s"
    )
    checked = summary["checked_sentences"]
    out.print(
        f"false-alarm budget: {alarm_budget:g} × {checked} checked domain sentences = {alarm_budget * checked:.1f} "
        f"rejections for {summary['domain_cells']} of {summary['candidate_cells']} candidate cells, a range narrowing "
        f"only where each false alarm it adds buys {config.cells.min_worth:g} of worth; what they leave pays for the base's rules"
    )
    if summary["dumped"]:
        out.print(f"{dump_after}: wrote {summary['dumped']}")
    if timings:
        from heatc.stages import format_timings

        sys.stderr.write(format_timings("finetune", summary["stages"]) + "\n")


class _LearnProgress:
    """Rich progress bars, one per stage, on an interactive terminal; plain lines otherwise."""

    def __init__(self, live: bool, report: bool = True, command: str = "heatc learn"):
        self.live = live
        self.command = command
        self.report = report  # only rank 0 of a distributed run reports
        self.tasks: dict[str, int] = {}
        self.bar = None

    def __enter__(self):
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description:>16}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.bar.start()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if not self.report:
            return
        if self.bar is None:
            if done == total:
                sys.stderr.write(f"{self.command}: {stage}: {done}/{total}\n")
            return
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
