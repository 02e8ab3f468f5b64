"""The learner's settings: one dataclass per stage (what every stage shares besides, progress
callbacks, ranks and work folders, is `heatc.learn.work`'s).

`LearnConfig` (`heatc learn`) holds the corpus and output and one settings object per stage:
`TeachingConfig` (the plan and the teacher's labels), `CellsConfig` (which cells run with
which range, within the false-alarm budget) and `DistilConfig` (the student). `FinetuneConfig`
(`heatc finetune`) holds a `CellsConfig` of its own. Every default is defined here once: the
CLI reads them from these classes. A work folder's fingerprint is derived from the fields:
a field that must not change it says so in its metadata (`NOT_FINGERPRINTED`), with why.

Public surface: `LearnConfig`, `TeachingConfig`, `CellsConfig`, `DistilConfig`,
`FinetuneConfig`, `FINETUNE_CELLS`, `fingerprint_fields`, `NOT_FINGERPRINTED`, `WORK_VERSION`,
`TOPUP_VERSION`, `SENSITIVITY`, `ALARM_BUDGET`, `MIN_FOLD_VALUES`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heatc.learn.text.corpus import SPLIT_VERSION

# A learned cell's score is the share of candidate cells it is coupled at least as strongly as
# (`heatc.learn.cells.couplings`). By default no score keeps a cell from running: every scored cell
# competes for the false-alarm budget, and its score weighs its verdicts (a rule's heat: the
# audit report's confidence, the tier plan). Gating on the score — the bottom quarter left out
# at 0.25, or the worth of a cell weighed by its score — cost recall at the same false alarms
# on every held-out half (docs/experiments.md); `--sensitivity` still sets a threshold.
SENSITIVITY = 0.0
# All cells together may reject at most this many values per corpus sentence that holds a value
# some cell checks (the sentences a false alarm can fall in); cross-validation prices it for
# unseen text. The target is at most 1 % of such sentences flagged on held-out text.
ALARM_BUDGET = 0.01
# the values each cross-validation fold's range is fitted to at least (the other folds'); a
# domain corpus of a few PDFs asks for fewer (`FinetuneConfig.cells`): its doses sit on a
# handful of pages
MIN_FOLD_VALUES = 5
WORK_VERSION = 8  # the format of a run's working files (<output>.learn/); another version is refused (--fresh)
# (4: a year written alone reads as a date, so plans of version 3 chose other cells; 5: cells of
# values written bare, `item_end`, which plans of version 4 lack; 6: magnitude families and
# keywords of their own outside the discovered ones, `magnitudes`; 7: model names, whose digits
# plans of version 6 read as values, `model_names`; 8: the cell of every percentage, `LONE_PERCENT`)
TOPUP_VERSION = 1  # how `topup_plan` chooses; another version redoes the top-up alone

# Field metadata. A work folder's fingerprint says what its files were made from: a field
# whose change must not redo that work (because the work does not depend on it, or because it
# is stamped another way) is marked so; every other field is in the fingerprint. A field may
# instead give {"fingerprint": f}, f(value, whole config) -> what the fingerprint records
# (None: nothing, so that work folders of earlier versions stay valid).
NOT_FINGERPRINTED: dict[str, Any] = {"fingerprint": False}


def _fingerprinted(how: Callable[[Any, Any], Any]) -> dict[str, Any]:
    return {"fingerprint": how}


def fingerprint_fields(config: Any, root: Any = None) -> dict[str, Any]:
    """The fingerprinted fields of a settings dataclass, those of the settings it holds
    flattened in (their names are unique), each as `str(value)` or its field's own record."""
    root = config if root is None else root
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        how = f.metadata.get("fingerprint", str)
        if how is False:
            continue
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            out |= fingerprint_fields(value, root)
            continue
        record = str(value) if how is str else how(value, root)
        if record is not None:
            out[f.name] = record
    return out


def _digest(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TeachingConfig:
    """The plan and the teacher's labels: which sentences the teacher reads, and how."""

    teacher: Path | None = None  # None: the embedded MiniLM
    # the teacher's torch device: the same labels on any
    device: str = field(default="cpu", metadata=NOT_FINGERPRINTED)
    epsilon: float = 0.05  # perturbation radius relative to the token's embedding norm
    probes: int = 4  # Jacobian probes per sentence (encoder teachers)
    directions: int = 1  # random directions per coupling probe
    discovery_sentences: int = 60000  # sentences read to learn keywords and candidate cells
    label_sentences: int = 1500  # random sentences labelled for the student
    probes_per_cell: int = 8  # sentences the teacher probes per candidate cell
    max_probe_sentences: int = 3000
    probes_per_sentence: int = 2
    # values probed besides, for the candidate cells the sentences above left with fewer than
    # min_probes probed occurrences (`topup_plan`); 0 turns the top-up off. (The top-up stamps
    # its own settings beside its files, so that changing them redoes it alone.)
    topup_probes: int = field(default=1500, metadata=NOT_FINGERPRINTED)
    topup_per_sentence: int = field(default=4, metadata=NOT_FINGERPRINTED)
    candidate_count: int = 5  # occurrences in the discovery sample that make a candidate cell
    max_keywords: int = 200
    # sentences per teacher batch: the same labels in any batches
    batch_size: int = field(default=16, metadata=NOT_FINGERPRINTED)
    chunk_size: int = 64  # sentences per checkpointed chunk of labels
    heldout: float = 0.1  # share of documents held out to evaluate the student
    # > 0 (with the student): the teacher reads at most this many of the planned sentences, and
    # the student scores the cells (`plan.teacher_share`); 0: the teacher reads every one.
    # Fingerprinted only then, so that work folders of earlier versions stay valid.
    teacher_sentences: int = field(
        default=400,
        metadata=_fingerprinted(lambda n, root: str(n) if root.distil.student and n > 0 else None),
    )


@dataclass(frozen=True)
class CellsConfig:
    """Which cells become rules, with which range, within the false-alarm budget (`aggregate`,
    `budget.cell_table`). Only `min_support` decides the plan (the magnitude families it
    finds); the rest is chosen again from the work on every run."""

    min_support: int = 20  # corpus occurrences a cell needs
    min_probes: int = field(default=3, metadata=NOT_FINGERPRINTED)  # probed occurrences a cell needs
    # values a range is fitted to in each cross-validation fold at least (`ranges.range_options`)
    min_fold_values: int = field(default=MIN_FOLD_VALUES, metadata=NOT_FINGERPRINTED)
    max_cells: int = field(default=400, metadata=NOT_FINGERPRINTED)
    # the cells at or above it share the budget first and become rules; None: no cell is hot,
    # every one is taken in score order within the budget (`budget.select_cells`) — except in
    # `FinetuneConfig.cells`, where None stands for the base heatmap's threshold
    sensitivity: float | None = field(default=SENSITIVITY, metadata=NOT_FINGERPRINTED)
    # clean-corpus rejections allowed per sentence that holds a value some cell checks, all cells together
    alarm_budget: float = field(default=ALARM_BUDGET, metadata=NOT_FINGERPRINTED)
    # what each false alarm a narrower range adds must buy (`budget.allocate`); 0: the budget decides
    min_worth: float = field(default=0.0, metadata=NOT_FINGERPRINTED)
    # range cells with a unit may also take a magnitude band (`bands.py`; opt-in, docs/learning.md)
    bands: bool = field(default=False, metadata=NOT_FINGERPRINTED)
    # range cells may also take a precision, `places` (`precision.py`; opt-in, docs/learning.md)
    places: bool = field(default=False, metadata=NOT_FINGERPRINTED)
    # a keyword's cells in units of one dimension are one cell of that dimension, its values
    # converted to the base unit (`dimensions.py`; opt-in: held out it caught more unit swaps
    # and fewer slips at the same false alarms, docs/learning.md); False: a cell per (keyword, unit)
    dimensions: bool = field(default=False, metadata=NOT_FINGERPRINTED)


@dataclass(frozen=True)
class DistilConfig:
    """The student detector (`distil`). Its checkpoint is resumed whatever these say."""

    student: bool = field(default=True, metadata=NOT_FINGERPRINTED)  # train and export the student detector
    epochs: int = field(default=8, metadata=NOT_FINGERPRINTED)


def _resolved(paths: list[Path], root: Any) -> list[str]:
    return [str(Path(x).resolve()) for x in paths]


def _rule_digests(paths: list[Path], root: Any) -> list[str]:
    return [hashlib.sha256(Path(r).read_bytes()).hexdigest() for r in paths if Path(r).is_file()]


@dataclass(frozen=True)
class LearnConfig:
    """`heatc learn`: the corpus, the output and each stage's settings. The fingerprint of a
    work folder (`fingerprint`) is what the teacher's labels depend on: changing anything
    else reuses them."""

    corpus: list[Path] = field(metadata=_fingerprinted(_resolved))
    # the heatmap's file, name and title: where and as what the work is written, not what it is
    output: Path = field(metadata=NOT_FINGERPRINTED)
    # globs over document ids left out of the corpus; fingerprinted only when given, so that
    # work folders of earlier versions stay valid
    exclude: list[str] = field(default_factory=list, metadata=_fingerprinted(lambda x, root: sorted(x) or None))
    name: str | None = field(default=None, metadata=NOT_FINGERPRINTED)
    title: str | None = field(default=None, metadata=NOT_FINGERPRINTED)
    # hand-written rule files merged in (their literals are left out of the keywords): by content
    rules: list[Path] = field(default_factory=list, metadata=_fingerprinted(_rule_digests))
    seed: int = 0  # sampling, the teacher's random probes, the student's initialisation
    teaching: TeachingConfig = field(default_factory=TeachingConfig)
    cells: CellsConfig = field(default_factory=CellsConfig)
    distil: DistilConfig = field(default_factory=DistilConfig)

    def fingerprint(self) -> str:
        """What the teacher's labels depend on (changing anything else reuses them): the
        fingerprinted fields, how the corpus splits into sentences and the seed lexicon, which
        decides the keywords and candidate cells of the plan."""
        from heatc.learn.text.lexemes import SEED_CATEGORIES, STOPWORDS

        d = fingerprint_fields(self)
        d["split"] = SPLIT_VERSION
        d["lexicon"] = hashlib.sha256(repr((SEED_CATEGORIES, sorted(STOPWORDS))).encode()).hexdigest()
        return _digest(d)


# `heatc finetune`'s cells: a domain corpus is small, and each bound is expected to cost about
# half a false alarm in pages not seen (`ranges.TailMargin.unseen`, `ranges.FLAT_TAIL`).
FINETUNE_CELLS = CellsConfig(
    # a drug label states a dose a dozen times ...
    min_support=8,
    # ... on a few of its pages: a fold's range may be fitted to 3 values, where `heatc learn`
    # asks for MIN_FOLD_VALUES (5); with 5 the labels' doses got no range at all
    min_fold_values=3,
    # a few PDFs' hundred-odd checked sentences at 0.02 buy a bound or two; at 0.05 the
    # held-out pages of docs/finetune.md keep far fewer false alarms than the base heatmap's
    alarm_budget=0.05,
    # ... as a ceiling: a range narrows only where each false alarm it adds buys about what
    # `heatc learn` pays for one at its 1 % budget on MTSamples and TAT-QA (`budget.allocate`'s
    # λ: 8.5, 9.8; CUAD's 3.9), or a few pages' generous budget buys bounds just past the
    # clean values (docs/finetune.md, "Measured": below 4 the 10-K fails as without a floor)
    min_worth=8.0,
    # None here: the base heatmap's threshold (`FinetuneConfig.sensitivity`)
    sensitivity=None,
)


@dataclass(frozen=True)
class FinetuneConfig:
    """`heatc finetune`. Its work folder's fingerprint is what the teacher's labels of the
    sample and the student's checkpoint depend on, with the base heatmap's and the domain
    corpus's digests (`fingerprint`)."""

    # the base and the domain's files are fingerprinted by content (`fingerprint`'s digests)
    base: Path = field(metadata=NOT_FINGERPRINTED)
    output: Path = field(metadata=NOT_FINGERPRINTED)  # where the work goes, not what it is
    pdfs: list[Path] = field(default_factory=list, metadata=NOT_FINGERPRINTED)
    texts: list[Path] = field(default_factory=list, metadata=NOT_FINGERPRINTED)
    # per PDF (the path as given): the pages to read; None: all
    pages: dict[str, list[int]] | None = field(default=None, metadata=NOT_FINGERPRINTED)
    name: str | None = field(default=None, metadata=NOT_FINGERPRINTED)
    title: str | None = field(default=None, metadata=NOT_FINGERPRINTED)
    teacher: Path | None = None
    device: str = field(default="cpu", metadata=NOT_FINGERPRINTED)  # the same labels on any device
    seed: int = 0
    teacher_sentences: int = 256  # the bounded sample the teacher labels
    epochs: int = 8
    lr: float = 1e-3  # fine-tuning: a third of training's
    # the domain's cells (a sensitivity of None: the base heatmap's), chosen again from the work
    # on every run
    cells: CellsConfig = field(default=FINETUNE_CELLS, metadata=NOT_FINGERPRINTED)
    # merging: the base cells the domain does not re-learn, kept or dropped; not part of the work
    keep_unused: bool = field(default=True, metadata=NOT_FINGERPRINTED)
    new_student: bool = False

    def fingerprint(self, base_sha: str, corpus_sha: str) -> str:
        d = fingerprint_fields(self) | {"base": base_sha, "corpus": corpus_sha}
        d["split"] = SPLIT_VERSION  # the sentences the plan reads
        return _digest(d)
