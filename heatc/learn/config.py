"""`heatc learn`'s configuration, and what every stage shares: progress callbacks, the
ranks of a `torchrun` run, seeded hashing.

Public surface: `LearnConfig`, `Progress`, `quiet`, `rank_and_world`, `barrier`,
`seeded_hash`, `WORK_VERSION`, `TOPUP_VERSION`, `SENSITIVITY`, `refuse_other_work`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.text.corpus import SPLIT_VERSION
from heatc.learn.text.evidence import (
    ALARM_BUDGET,
)
from heatc.learn.text.lexemes import SEED_CATEGORIES, STOPWORDS

# A learned cell's score is the share of candidate cells it is coupled at least as strongly as
# (`heatc.learn.cells.couplings`). By default no score keeps a cell from running: every scored cell
# competes for the false-alarm budget, and its score weighs its verdicts (a rule's heat: the
# audit report's confidence, the tier plan). Gating on the score — the bottom quarter left out
# at 0.25, or the worth of a cell weighed by its score — cost recall at the same false alarms
# on every held-out half (docs/experiments.md); `--sensitivity` still sets a threshold.
SENSITIVITY = 0.0
WORK_VERSION = 8  # the format of a run's working files (<output>.learn/); another version is refused (--fresh)
# (4: a year written alone reads as a date, so plans of version 3 chose other cells; 5: cells of
# values written bare, `item_end`, which plans of version 4 lack; 6: magnitude families and
# keywords of their own outside the discovered ones, `magnitudes`; 7: model names, whose digits
# plans of version 6 read as values, `model_names`; 8: the cell of every percentage, `LONE_PERCENT`)
TOPUP_VERSION = 1  # how `topup_plan` chooses; another version redoes the top-up alone


@dataclass
class LearnConfig:
    corpus: list[Path]
    output: Path
    exclude: list[str] = field(default_factory=list)  # globs over document ids left out of the corpus
    name: str | None = None
    title: str | None = None
    teacher: Path | None = None  # None: the embedded MiniLM
    device: str = "cpu"
    seed: int = 0
    epsilon: float = 0.05  # perturbation radius relative to the token's embedding norm
    probes: int = 4  # Jacobian probes per sentence (encoder teachers)
    directions: int = 1  # random directions per coupling probe
    discovery_sentences: int = 60000  # sentences read to learn keywords and candidate cells
    label_sentences: int = 1500  # random sentences labelled for the student
    probes_per_cell: int = 8  # sentences the teacher probes per candidate cell
    max_probe_sentences: int = 3000
    probes_per_sentence: int = 2
    # values probed besides, for the candidate cells the sentences above left with fewer than
    # min_probes probed occurrences (`topup_plan`); 0 turns the top-up off
    topup_probes: int = 1500
    topup_per_sentence: int = 4
    candidate_count: int = 5  # occurrences in the discovery sample that make a candidate cell
    min_support: int = 20  # corpus occurrences a cell needs
    min_probes: int = 3  # probed occurrences a cell needs
    # values a range is fitted to in each cross-validation fold at least (`ranges.range_options`)
    min_fold_values: int = 5
    max_keywords: int = 200
    max_cells: int = 400
    sensitivity: float = SENSITIVITY
    # clean-corpus rejections allowed per sentence that holds a value some cell checks, all cells together
    alarm_budget: float = ALARM_BUDGET
    # what each false alarm a narrower range adds must buy (`budget.allocate`); 0: the budget decides
    min_worth: float = 0.0
    # range cells with a unit may also take a magnitude band (`bands.py`; opt-in, docs/learning.md)
    bands: bool = False
    # range cells may also take a precision, `places` (`precision.py`; opt-in, docs/learning.md)
    places: bool = False
    # a keyword's cells in units of one dimension are one cell of that dimension, its values
    # converted to the base unit (`dimensions.py`; opt-in: held out it caught more unit swaps
    # and fewer slips at the same false alarms, docs/learning.md); False: a cell per (keyword, unit)
    dimensions: bool = False
    batch_size: int = 16
    chunk_size: int = 64
    epochs: int = 8
    heldout: float = 0.1  # share of documents held out to evaluate the student
    rules: list[Path] = field(default_factory=list)  # hand-written rule files merged in
    student: bool = True  # train and export the student detector
    # > 0 (with the student): the teacher reads at most this many of the planned sentences, and
    # the student scores the cells (`plan.teacher_share`); 0: the teacher reads every one
    teacher_sentences: int = 400

    def fingerprint(self) -> str:
        """What the teacher's labels depend on (changing anything else reuses them)."""
        keys = ("teacher", "seed", "epsilon", "probes", "directions", "discovery_sentences", "label_sentences",
                "probes_per_cell", "max_probe_sentences", "probes_per_sentence", "candidate_count", "max_keywords", "min_support",
                "chunk_size", "heldout", "rules")  # fmt: skip
        d = {k: str(getattr(self, k)) for k in keys}
        d["corpus"] = [str(Path(x).resolve()) for x in self.corpus]
        if self.exclude:  # only then: earlier work folders stay valid
            d["exclude"] = sorted(self.exclude)
        d["rules"] = [hashlib.sha256(Path(r).read_bytes()).hexdigest() for r in self.rules if Path(r).is_file()]
        if self.student and self.teacher_sentences > 0:  # only then: earlier work folders stay valid
            d["teacher_sentences"] = str(self.teacher_sentences)
        # the seed lexicon decides the keywords and candidate cells of the plan
        d["split"] = SPLIT_VERSION  # and the sentences the plan reads
        d["lexicon"] = hashlib.sha256(repr((SEED_CATEGORIES, sorted(STOPWORDS))).encode()).hexdigest()
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


Progress = Callable[[str, int, int], None]  # (stage, done, total)


def quiet(stage: str, done: int, total: int) -> None:
    pass


def rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def seeded_hash(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{text}".encode()).digest()[:8], "little")


def read_work(path: Path, parse: Callable = lambda x: x):
    """`parse` of a JSON file (gzipped when its name ends in .gz) of a work folder, or a
    HeatError saying it is damaged and that --fresh starts over (a truncated or changed work
    file raised EOFError, which the CLI printed as a bare "Aborted.", or a RuntimeError)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return parse(json.load(f))
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {str(e)[:200]}"
        raise HeatError(
            Diagnostic(str(path), 0, 0, f"the work folder's file is damaged ({why}); rerun with --fresh to start over")
        ) from None


def refuse_other_work(work: Path, want: dict, command: str) -> None:
    """Refuse a work folder whose stamp (`config.json`) is not `want` ({"version",
    "fingerprint"}): the work of an earlier `command`, of another format, or of a run with other
    settings. The error says which, and that --fresh starts over; nothing is removed."""
    have = read_work(work / "config.json")
    if have == want:
        return
    why = (
        f"holds the work of an earlier {command} (work format {have.get('version')}, this one writes {want['version']})"
        if have.get("version") != want["version"]
        else "holds the work of a run with different settings"
    )
    raise HeatError(Diagnostic(str(work), 0, 0, f"{why}; rerun with --fresh to start over"))
