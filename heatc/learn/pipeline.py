"""`heatc learn`: corpus → teacher labels → cells → heatmap.yaml (+ the student detector).

Stages, each a function below: `plan` (read the corpus, learn keywords, find candidate
cells, choose the sentences the teacher reads), `label` (the teacher, in checkpointed chunks,
sharded over the ranks of a `torchrun` run), `aggregate` (couplings and corpus statistics →
cells), `distil` (train, evaluate and export the student). `learn` runs them all.

Everything is deterministic for a seed: sentence choice hashes (seed, text), the teacher's
random probes are drawn per sentence from (seed, text), chunks do not depend on the number of
processes, and the student's global batches do not either. A run's working files live in
`<output>.learn/`: the plan, one file per labelled chunk and the student checkpoint; a rerun
with the same configuration resumes where the last one stopped.

Public surface: `LearnConfig`, `learn`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import Diagnostic, HeatError
from . import aggregate as agg
from .corpus import read_corpus, sentences
from .lexemes import SEED_CATEGORIES, STOPWORDS, Lexicon, align, discover_keywords, lex_sentence

WORK_VERSION = 2  # 2: candidates keep their check (consistent cells were read back as ranges)
TOPUP_VERSION = 1  # how `topup_plan` chooses; another version redoes the top-up alone


@dataclass
class LearnConfig:
    corpus: list[Path]
    output: Path
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
    max_keywords: int = 200
    max_cells: int = 400
    sensitivity: float = 0.75
    alarm_budget: float = agg.ALARM_BUDGET  # clean-corpus rejections allowed per sentence, all cells together
    batch_size: int = 16
    chunk_size: int = 64
    epochs: int = 8
    heldout: float = 0.1  # share of documents held out to evaluate the student
    rules: list[Path] = field(default_factory=list)  # hand-written rule files merged in
    student: bool = True  # train and export the student detector

    def fingerprint(self) -> str:
        """What the teacher's labels depend on (changing anything else reuses them)."""
        keys = ("teacher", "seed", "epsilon", "probes", "directions", "discovery_sentences", "label_sentences",
                "probes_per_cell", "max_probe_sentences", "probes_per_sentence", "candidate_count", "max_keywords",
                "chunk_size", "heldout", "rules")  # fmt: skip
        d = {k: str(getattr(self, k)) for k in keys}
        d["corpus"] = [str(Path(x).resolve()) for x in self.corpus]
        d["rules"] = [hashlib.sha256(Path(r).read_bytes()).hexdigest() for r in self.rules if Path(r).is_file()]
        # the seed lexicon decides the keywords and candidate cells of the plan
        d["lexicon"] = hashlib.sha256(repr((SEED_CATEGORIES, sorted(STOPWORDS))).encode()).hexdigest()
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _quiet(stage: str, done: int, total: int) -> None:
    pass


def _rank() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _hash(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{text}".encode()).digest()[:8], "little")


# --- plan --------------------------------------------------------------------------------


@dataclass
class Plan:
    corpus_sha256: str
    documents: int
    sentences: int
    keywords: list[tuple[str, int]]
    candidates: list[agg.CellKey]
    teacher_sentences: list[str]
    heldout: list[bool]  # per teacher sentence: its document is held out from student training
    probe_cells: dict[str, list[str]]  # sentence -> the candidate cells it was chosen for
    excluded: list[str]  # literals that hand-written rule files declare

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["candidates"] = [[k.keyword, k.value, k.unit, k.check] for k in self.candidates]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        d = dict(d)
        d["candidates"] = [agg.CellKey(*k) for k in d["candidates"]]
        d["keywords"] = [tuple(k) for k in d["keywords"]]
        return cls(**d)


def _lexicon(p: Plan) -> Lexicon:
    return Lexicon().without_literals(p.excluded).with_keywords(k for k, _ in p.keywords)


def rule_file_literals(paths: list[Path]) -> list[str]:
    """Every literal the classes of hand-written rule files declare: learning leaves them to
    those files, since a literal belongs to one class."""
    from ..ast import ClassDecl
    from ..parse import parse

    out = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read the rule file: {e.strerror}")) from None
        for decl in parse(text, str(path)).decls:
            if isinstance(decl, ClassDecl):
                out.extend(x.text for x in decl.literals)
    return sorted(set(out))


def _discovery_sample(config: LearnConfig, all_sentences: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The sentences keyword discovery reads: up to `discovery_sentences`, in hash order."""
    order = sorted(range(len(all_sentences)), key=lambda k: _hash(config.seed, all_sentences[k][1]))
    return [all_sentences[k] for k in order[: config.discovery_sentences]]


def plan(config: LearnConfig, documents, progress: Progress = _quiet) -> Plan:
    digest = hashlib.sha256()
    per_doc: list[list[str]] = []
    for d in documents:
        digest.update(d.id.encode() + b"\0" + d.text.encode() + b"\0")
        per_doc.append(sentences(d.text))
    all_sentences = [(i, s) for i, ss in enumerate(per_doc) for s in ss]
    if not all_sentences:
        raise HeatError(Diagnostic("corpus", 0, 0, "no sentences found in the corpus"))
    sample = _discovery_sample(config, all_sentences)
    progress("keywords", 0, 1)
    excluded = rule_file_literals(config.rules)
    base = Lexicon().without_literals(excluded)
    keywords = discover_keywords(
        base,
        (s for _, s in sample),
        min_support=max(2, config.candidate_count),
        max_keywords=config.max_keywords,
    )
    lexicon = base.with_keywords(k for k, _ in keywords)
    program = lexicon.program()
    groups = lexicon.groups()
    progress("keywords", 1, 1)
    lexed = []
    for n, (_, s) in enumerate(sample):
        lexed.append(lex_sentence(program, s))
        if n % 2000 == 0:
            progress("candidate cells", n, len(sample))
    progress("candidate cells", len(sample), len(sample))
    candidates = agg.candidate_cells(lexed, groups, config.candidate_count)
    wanted = set(candidates)

    # Coverage: every candidate cell gets up to probes_per_cell sentences, in hash order.
    taken: dict[agg.CellKey, int] = dict.fromkeys(candidates, 0)
    probe_cells: dict[str, list[str]] = {}
    for (_, s), lx in zip(sample, lexed, strict=True):
        if len(probe_cells) >= config.max_probe_sentences:
            break
        keys = {k for occ in agg.occurrences(lx, groups) for k in occ.keys if k in wanted}
        need = [k for k in keys if taken[k] < config.probes_per_cell]
        if need and s not in probe_cells:
            for k in keys:
                taken[k] += 1
            probe_cells[s] = sorted(k.name for k in keys)
    chosen = list(probe_cells)
    seen = set(chosen)
    for _, s in sample:
        if len(chosen) >= len(probe_cells) + config.label_sentences:
            break
        if s not in seen:
            seen.add(s)
            chosen.append(s)
    doc_of = {}
    for i, s in all_sentences:
        doc_of.setdefault(s, i)
    heldout = [(_hash(config.seed + 1, documents[doc_of[s]].id) % 1000) < config.heldout * 1000 for s in chosen]
    return Plan(
        digest.hexdigest(),
        len(documents),
        len(all_sentences),
        keywords,
        candidates,
        chosen,
        heldout,
        probe_cells,
        excluded,
    )


# --- label --------------------------------------------------------------------------------


def _chunk_path(work: Path, c: int) -> Path:
    return work / "labels" / f"chunk-{c:05d}.json.gz"


def _probe_lexemes(lx, groups, wanted: set, limit: int) -> list[int]:
    occ = agg.occurrences(lx, groups)
    first = [o.value for o in occ if any(k in wanted for k in o.keys)]
    return first[:limit]


def label(config: LearnConfig, plan_: Plan, teacher, work: Path, progress: Progress = _quiet) -> None:
    """Label the plan's sentences with the teacher; each rank takes every world-th chunk and
    skips chunks already on disk."""
    import torch

    lexicon = _lexicon(plan_)
    program = lexicon.program()
    groups = lexicon.groups()
    wanted = set(plan_.candidates)
    texts = sorted(plan_.teacher_sentences, key=lambda s: (len(s), s))  # similar lengths batch well
    chunks = [texts[i : i + config.chunk_size] for i in range(0, len(texts), config.chunk_size)]
    torch.manual_seed(config.seed)

    def label_group(group: list[str]) -> list[dict]:
        lexed = [lex_sentence(program, s) for s in group]
        chosen = [_probe_lexemes(lx, groups, wanted, config.probes_per_sentence) for lx in lexed]
        return _label_batch(config, teacher, group, lexed, chosen)

    _label_chunks(config, chunks, lambda c: _chunk_path(work, c), label_group, "teacher", progress)


def _label_chunks(
    config: LearnConfig, chunks: list[list], path_of, label_group, stage: str, progress: Progress
) -> None:
    """Run `label_group` over every world-th chunk (this rank's), batch by batch, writing each
    chunk's records atomically to `path_of(chunk)`; chunks already on disk are skipped."""
    rank, world = _rank()
    mine = [c for c in range(len(chunks)) if c % world == rank]
    done = sum(1 for c in mine if path_of(c).exists())
    progress(stage, done, len(mine))
    for c in mine:
        path = path_of(c)
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        records = []
        for b0 in range(0, len(chunks[c]), config.batch_size):
            records.extend(label_group(chunks[c][b0 : b0 + config.batch_size]))
        tmp = path.with_name(path.name + f".tmp{rank}")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(records, f)
        tmp.replace(path)
        done += 1
        progress(stage, done, len(mine))


def _label_batch(config: LearnConfig, teacher, group: list[str], lexed: list, chosen: list[list[int]]) -> list[dict]:
    """The teacher's token labels of a batch of sentences and the pair couplings of the chosen
    value lexemes of each (those without a teacher token are skipped) with every lexeme."""
    from .labels import labels_and_coupling

    batch = teacher.batch(group)
    aligned = [align(lx, offs) for lx, offs in zip(lexed, batch.offsets, strict=True)]
    probes = [[v for v in vs if al[v]] for vs, al in zip(chosen, aligned, strict=True)]
    rounds = [
        [al[p[r]][0] if r < len(p) else None for p, al in zip(probes, aligned, strict=True)]
        for r in range(max((len(p) for p in probes), default=0))
    ]
    sens, couplings = labels_and_coupling(
        teacher, batch, rounds, epsilon=config.epsilon, probes=config.probes,
        directions=config.directions, seed=config.seed,
    )  # fmt: skip
    found: list[list] = [[] for _ in group]
    for r, coupling in enumerate(couplings):
        for b, p in enumerate(probes):
            if r < len(p):
                row = coupling[b]
                per_lexeme = [
                    None if k == p[r] or not toks else round(float(row[toks].max()), 7)
                    for k, toks in enumerate(aligned[b])
                ]
                found[b].append([p[r], per_lexeme])
    n_tokens = batch.attention_mask.sum(1).tolist()
    special = teacher.special_mask(batch)
    records = []
    for b, s in enumerate(group):
        n = int(n_tokens[b])
        records.append({
            "text": s,
            "ids": batch.input_ids[b, :n].tolist(),
            "labels": [round(float(x), 9) for x in sens[b, :n]],
            "mask": special[b, :n].tolist(),
            "probes": found[b],
        })  # fmt: skip
    return records


# --- top-up --------------------------------------------------------------------------------


def topup_plan(config: LearnConfig, plan_: Plan, records: list[dict], documents) -> list[list]:
    """[sentence, [value lexeme, ...]] the teacher probes besides the plan's sentences.

    The plan probes the first `probes_per_sentence` values of each sentence it chose and stops
    at `max_probe_sentences`: in "Sodium 141, potassium 4.0, chloride 104, ..." chloride comes
    third and is never probed, and candidate cells met late in the discovery sample are not
    met at all, so they end with fewer than `min_probes` probed occurrences and no score. The
    top-up counts each candidate's probed occurrences in the labelled sentences and walks the
    discovery sample again (in the same hash order), choosing the very values of the cells left
    without a score: first up to `min_probes` for each, then up to `probes_per_cell`; at most
    `topup_per_sentence` values in a sentence and `topup_probes` in all. A value already probed
    is not probed again. Cells the plan scored keep their evidence (`aggregate`)."""
    if config.topup_probes <= 0:
        return []
    lexicon = _lexicon(plan_)
    program = lexicon.program()
    groups = lexicon.groups()
    wanted = set(plan_.candidates)
    have: dict[agg.CellKey, int] = dict.fromkeys(plan_.candidates, 0)
    probed: dict[str, set[int]] = {}
    for rec in records:
        if not rec["probes"]:
            continue
        values = {v for v, _ in rec["probes"]}
        probed.setdefault(rec["text"], set()).update(values)
        for occ in agg.occurrences(lex_sentence(program, rec["text"]), groups):
            if occ.value in values:
                for k in occ.keys:
                    if k in wanted and agg.evidence_of(occ, k):
                        have[k] += 1
    short = {k for k, n in have.items() if n < config.min_probes}
    if not short:
        return []
    sample = _discovery_sample(config, [(i, s) for i, d in enumerate(documents) for s in sentences(d.text)])
    found = []  # (sentence, occurrences of short cells), in sample order
    seen: set[str] = set()
    for _, s in sample:
        if s in seen:
            continue
        seen.add(s)
        occs = [
            o
            for o in agg.occurrences(lex_sentence(program, s), groups)
            if o.value not in probed.get(s, ()) and any(k in short and agg.evidence_of(o, k) for k in o.keys)
        ]
        if occs:
            found.append((s, occs))
    chosen: dict[str, list[int]] = {}
    total = 0
    for target in (config.min_probes, config.probes_per_cell):
        for s, occs in found:
            for o in occs:
                if total >= config.topup_probes:
                    break
                mine = chosen.setdefault(s, [])
                if o.value in mine or len(mine) >= config.topup_per_sentence:
                    continue
                keys = [k for k in o.keys if k in short and agg.evidence_of(o, k)]
                if not any(have[k] < target for k in keys):
                    continue
                mine.append(o.value)
                total += 1
                for k in keys:
                    have[k] += 1
    return [[s, sorted(vs)] for s, vs in chosen.items() if vs]


def _topup_path(work: Path, c: int) -> Path:
    return work / "topup" / f"chunk-{c:05d}.json.gz"


def topup(
    config: LearnConfig, plan_: Plan, records: list[dict], documents, teacher, work: Path, progress: Progress = _quiet
) -> list[dict]:
    """Probe the values `topup_plan` chooses (rank 0 chooses, every rank labels every
    world-th chunk); returns the probe records (text and probes only). Its settings are kept
    beside it: changing them redoes the top-up alone, never the plan's labels."""
    import shutil

    rank = _rank()[0]
    file = work / "topup.json.gz"
    settings = {"version": TOPUP_VERSION} | {
        k: getattr(config, k) for k in ("topup_probes", "topup_per_sentence", "min_probes")
    }
    if rank == 0:
        current = None
        if file.exists():
            with gzip.open(file, "rt", encoding="utf-8") as f:
                current = json.load(f)
        if current is None or current["settings"] != settings:
            shutil.rmtree(work / "topup", ignore_errors=True)
            chosen = topup_plan(config, plan_, records, documents)
            with gzip.open(file.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
                json.dump({"settings": settings, "probes": chosen}, f)
            file.with_suffix(".tmp").replace(file)
    _barrier()
    with gzip.open(file, "rt", encoding="utf-8") as f:
        chosen = json.load(f)["probes"]
    if not chosen:
        return []
    program = _lexicon(plan_).program()
    items = sorted(chosen, key=lambda x: (len(x[0]), x[0]))
    chunks = [items[i : i + config.chunk_size] for i in range(0, len(items), config.chunk_size)]

    def label_group(group: list) -> list[dict]:
        texts = [s for s, _ in group]
        lexed = [lex_sentence(program, s) for s in texts]
        records = _label_batch(config, teacher, texts, lexed, [vs for _, vs in group])
        return [{"text": r["text"], "probes": r["probes"]} for r in records]

    _label_chunks(config, chunks, lambda c: _topup_path(work, c), label_group, "teacher (top-up)", progress)
    _barrier()
    out = []
    for c in range(len(chunks)):
        with gzip.open(_topup_path(work, c), "rt", encoding="utf-8") as f:
            out.extend({**r, "topup": True} for r in json.load(f))
    return out


def _read_chunks(work: Path, n: int) -> list[dict]:
    out = []
    for c in range(n):
        with gzip.open(_chunk_path(work, c), "rt", encoding="utf-8") as f:
            out.extend(json.load(f))
    return out


# --- aggregate ----------------------------------------------------------------------------


def rare_word_cells(lexicon: Lexicon, sample: list[str], min_count: int) -> tuple[Lexicon, set[str], list[agg.CellKey]]:
    """The single words before numbers that no category of `lexicon` holds, seen at least
    `min_count` times in `sample`, as keywords (the widened lexicon and their names), and
    their candidate cells with a unit seen `min_count` times: what they may join a family
    with (`agg.keyword_families`). A word joins on less evidence than a cell of its own
    needs (`agg.FAMILY_COUNT`, not the plan's `candidate_count`): the family, not the word,
    must have the support, and "Keflex 500 mg" seen twice has shown which unit Keflex takes.
    """
    known = {lit.lower() for c in lexicon.categories for lit in c.literals}
    rare = [
        w
        for w, _ in discover_keywords(lexicon, sample, min_support=max(2, min_count), max_keywords=10**9)
        if " " not in w and w.lower() not in known
    ]
    wide = lexicon.with_keywords(rare)
    rare_names = {c.name for c in wide.categories} - {c.name for c in lexicon.categories}
    groups = wide.groups()
    program = wide.program()
    extra = [
        k
        for k in agg.candidate_cells((lex_sentence(program, s) for s in sample), groups, min_count)
        if k.keyword in rare_names and k.unit and k.check == "range"
    ]
    return wide, rare_names, extra


def counted_text(text: str) -> str:
    """The text of a document in which its values, and the false alarms the budget is spent
    on, are counted: its sentences (`sentences`), joined. The budget is a share of the
    corpus's sentences (`Plan.sentences`), so the fragments that are not counted as sentences
    (under 12 or over 400 characters: tables, lists, long runs without a sentence end) do not
    spend it either."""
    return " ".join(sentences(text))


def aggregate(
    config: LearnConfig, plan_: Plan, records: list[dict], documents
) -> tuple[Lexicon, list[agg.LearnedCell], dict]:
    # Number words join as keywords here, not in the plan: the teacher's couplings are per
    # lexeme, and a one-word keyword does not change where lexemes start and end.
    lexicon = _lexicon(plan_).with_numerals()
    numerals = [c.name for c in lexicon.categories if c.group == "numeral"]
    candidates = plan_.candidates + [agg.CellKey(n, v, "") for n in numerals for v in ("number", "percent")]
    texts = [counted_text(d.text) for d in documents]
    groups = lexicon.groups()
    # Keywords too rare for cells of their own are pooled by the units they take; so are the
    # single words before numbers too rare to be keywords at all (the plan keeps the most
    # frequent `max_keywords`), which may only join a family. Where lexemes start and end
    # does not change (single words, and literals move between categories), so the teacher's
    # couplings stay where they were.
    sample = [
        s for _, s in _discovery_sample(config, [(i, s) for i, d in enumerate(documents) for s in sentences(d.text)])
    ]
    wide, rare_names, extra = rare_word_cells(lexicon, sample, min(config.candidate_count, agg.FAMILY_COUNT))
    wide_groups = wide.groups()
    keyword_cells = [k for k in candidates + extra if wide_groups.get(k.keyword) == "keyword" and k.check == "range"]
    support = {k: len(v.values) for k, v in agg.collect_values(wide, keyword_cells, texts).items()}
    families = agg.keyword_families(
        candidates + extra, support, wide_groups, config.min_support, {c.name for c in wide.categories}
    )
    if families:
        joined = {m for ms in families.values() for m in ms}
        lexicon = Lexicon(
            [c for c in wide.categories if c.name not in rare_names or c.name in joined], wide.chinese_numbers
        ).with_families(families)
        candidates = agg.in_families(candidates + [k for k in extra if k.keyword in joined], families)
    program = lexicon.program()
    groups = lexicon.groups()
    couplings = agg.Couplings()
    labelled = _lexicon(plan_).program()  # the lexemes the teacher's couplings are indexed by
    # The top-up's probes (`topup`) are evidence for the cells the plan's probes left without
    # a score only: they were chosen for those cells, so they neither join the pooled
    # distribution that scores are percentiles of nor move the score of a cell already scored.
    unscored: set[agg.CellKey] | None = None
    for rec in sorted(records, key=lambda r: bool(r.get("topup"))):
        if not rec["probes"]:
            continue
        if rec.get("topup") and unscored is None:
            unscored = {k for k in candidates if couplings.strength(k)[1] < config.min_probes}
        lx = lex_sentence(program, rec["text"])
        old = lex_sentence(labelled, rec["text"]).lexemes
        by_value = {o.value: o for o in agg.occurrences(lx, groups)}
        for value, per_lexeme in rec["probes"]:
            if len(per_lexeme) != len(old):
                continue
            value, per_lexeme = _relexed(old, lx.lexemes, value, per_lexeme)
            if value in by_value:
                couplings.add(lx, by_value[value], per_lexeme, only=unscored if rec.get("topup") else None)
    scores = {}
    for k in candidates:
        strength, n = couplings.strength(k)
        if n >= config.min_probes:
            scores[k] = couplings.percentile(strength)
    guarded = agg.unit_guards(candidates, [k for k, x in scores.items() if x >= config.sensitivity], groups)
    everything = agg.collect_values(lexicon, candidates + sorted(guarded), texts)
    values = {k: v for k, v in everything.items() if k not in guarded}
    guards = _guard_cells(guarded, everything, scores, couplings, config.min_support)
    swaps = agg.unit_swaps(candidates)
    cells = agg.cell_table(
        everything, couplings, min_support=config.min_support, min_probes=config.min_probes, sentences=plan_.sentences,
        alarm_budget=config.alarm_budget, sensitivity=config.sensitivity,
        substitutes=_numeral_substitutes(values, set(numerals)), guards=guards,
        swapped=agg.swap_sources(values, swaps),
    )  # fmt: skip
    # max_cells bounds the cells of the heatmap's own statistics; guards come with the hot
    # cells they stand for and are not counted (they would push those cells out)
    cells = [c for c in cells if not c.guards][: config.max_cells] + [c for c in cells if c.guards]
    # The heatmap declares only the categories its cells use, and that changes how some
    # text lexes ("blood pressure" may no longer be one lexeme): recount with that lexicon,
    # so the statistics are what the lowered rules will see — again if a cell drops out.
    while True:
        used = {x for c in cells for x in (c.key.keyword, c.key.unit) if x} | {"sentence_end", "abbreviation"}
        final = Lexicon([c for c in lexicon.categories if c.name in used], lexicon.chinese_numbers)
        recount = agg.collect_values(final, sorted({c.key for c in cells}), texts)
        kept = agg.select_cells(
            [c for c in cells if not c.guards], recount, min_support=config.min_support, sentences=plan_.sentences,
            alarm_budget=config.alarm_budget, sensitivity=config.sensitivity,
            substitutes=_numeral_substitutes(recount, set(numerals)), guards=[c for c in cells if c.guards],
            swapped=agg.swap_sources({k: v for k, v in recount.items() if k not in guarded}, swaps),
        )  # fmt: skip
        if len(kept) == len(cells):
            break
        cells = kept
    pooled = np.asarray(couplings.pooled)
    summary = {
        "probed_values": sum(len(r["probes"]) for r in records),
        "coupling_pairs": len(pooled),
        "candidate_cells": len(plan_.candidates),
        "cells": len(kept),
        "hot_cells": sum(c.score >= config.sensitivity for c in kept),
        "unit_vs_keyword": _role_summary(couplings),
    }
    return final, kept, summary


def _guard_cells(
    guarded: dict[agg.CellKey, list[tuple[agg.CellKey, float]]],
    values: dict[agg.CellKey, agg.CellValues],
    scores: dict[agg.CellKey, float],
    couplings: agg.Couplings,
    min_support: int,
) -> list[agg.LearnedCell]:
    """Unit guards (`agg.unit_guards`) as cells: each takes the teacher's score of the best
    cell it stands for, and is worth the values of those cells at which it would notice a
    swapped unit — each cell's values times the share of its unit's swaps that go to the
    guard's unit (`agg.unit_swaps`), halved, as a slip and a substitution share a range
    cell's worth."""
    expected = agg.guard_expected(int((np.asarray(values[g].values) > 0).sum()) for g in guarded)
    out = []
    for g, stands_for in sorted(guarded.items()):
        stands_for = [(k, share) for k, share in stands_for if len(values[k].values) >= min_support]
        if not stands_for:
            continue
        best = max(stands_for, key=lambda x: (scores[x[0]], x[0]))[0]
        strength, n = couplings.strength(best)
        out.append(
            agg.LearnedCell(
                g, round(scores[best], 4), round(strength, 4), n, sum(len(values[k].values) for k, _ in stands_for),
                {}, guards=", ".join(sorted(k.unit for k, _ in stands_for)),
                worth=sum(len(values[k].values) * share for k, share in stands_for) / 2, expected=expected,
            )
        )  # fmt: skip
    return out


def _relexed(old: list, new: list, value: int, coupling: list) -> tuple[int | None, list]:
    """A probe's couplings, indexed by the labelling lexicon's lexemes, for the lexemes of the
    aggregation lexicon: a compound number word ("forty-five") is one lexeme there and three
    ("forty", "-", "five") in the labels; it takes the largest coupling of what it covers."""
    if [(x.start, x.end) for x in old] == [(x.start, x.end) for x in new]:
        return value, coupling
    out: list[float | None] = []
    moved = None
    for k, lex in enumerate(new):
        covered = [j for j, o in enumerate(old) if o.start < lex.end and lex.start < o.end]
        if value in covered:
            moved = k if covered == [value] else None  # the probed value must stay one lexeme
            out.append(None)
            continue
        xs = [coupling[j] for j in covered if coupling[j] is not None]
        out.append(max(xs) if xs else None)
    return moved, out


def _numeral_substitutes(values: dict[agg.CellKey, agg.CellValues], numerals: set[str]) -> dict:
    """Per number-word cell, the values every number word's cell captured: what another number
    restated in its place would be ("thirty (45) days"). A number word's own values are nearly
    all one number, so a substitution among them would change nothing."""
    keys = [k for k in values if k.keyword in numerals and k.check == "range"]
    pool = np.asarray([v for k in keys for v in values[k].values], dtype=np.float64)
    return dict.fromkeys(keys, pool)


def _role_summary(couplings: agg.Couplings) -> dict:
    """Median normalised coupling of values with their units, with their keywords, and with
    any lexeme — the check that the teacher finds numbers coupled to what they measure."""
    unit = [x for k, xs in couplings.by_cell.items() if not k.keyword for x in xs]
    keyword = [x for k, xs in couplings.by_cell.items() if k.keyword and not k.unit for x in xs]
    out = {"any_lexeme": round(float(np.median(couplings.pooled)), 3) if couplings.pooled else None}
    out["unit"] = round(float(np.median(unit)), 3) if unit else None
    out["keyword"] = round(float(np.median(keyword)), 3) if keyword else None
    return out


# --- distil -------------------------------------------------------------------------------


def _examples(records: list[dict], plan_: Plan):
    from .student import TokenExample

    held = dict(zip(plan_.teacher_sentences, plan_.heldout, strict=True))
    train, test = [], []
    for r in records:
        ex = TokenExample(r["ids"], r["labels"], r["mask"])
        (test if held[r["text"]] else train).append(ex)
    return train, test


STUDENT_FEATURES = 64  # width of the student's frozen teacher-derived token features


def distil(
    config: LearnConfig, plan_: Plan, records: list[dict], work: Path, teacher, progress: Progress = _quiet
) -> dict:
    """Train the student (and the baselines on rank 0), export it; returns the metrics."""
    from . import student as st

    rank, _ = _rank()
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


# --- learn --------------------------------------------------------------------------------


def _work_dir(config: LearnConfig, fresh: bool) -> Path:
    work = config.output.with_name(config.output.name.removesuffix(".yaml").removesuffix(".yml") + ".learn")
    stamp = work / "config.json"
    want = {"version": WORK_VERSION, "fingerprint": config.fingerprint()}
    rank, _ = _rank()
    if rank == 0:
        if stamp.exists() and not fresh:
            have = json.loads(stamp.read_text())
            if have != want:
                raise HeatError(
                    Diagnostic(
                        str(work), 0, 0,
                        "holds the work of a run with different settings; rerun with --fresh to start over",
                    )
                )  # fmt: skip
        elif stamp.exists() or fresh:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(want))
    _barrier()
    return work


def learn(config: LearnConfig, *, fresh: bool = False, progress: Progress = _quiet, log=print) -> dict:
    """Run every stage; returns a summary. Rank 0 writes the heatmap and the student."""
    from .teacher import load_teacher

    rank, world = _rank()
    started = time.perf_counter()
    documents = read_corpus(config.corpus)  # bad input fails before anything is written
    rule_file_literals(config.rules)
    teacher = load_teacher(config.teacher, config.device)
    work = _work_dir(config, fresh)
    plan_file = work / "plan.json.gz"
    if rank == 0 and not plan_file.exists():
        p = plan(config, documents, progress)
        with gzip.open(plan_file.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
            json.dump(p.to_json(), f)
        plan_file.with_suffix(".tmp").replace(plan_file)
    _barrier()
    with gzip.open(plan_file, "rt", encoding="utf-8") as f:
        p = Plan.from_json(json.load(f))
    names = {c.name for c in _lexicon(p).categories}
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
    _barrier()
    n_chunks = -(-len(p.teacher_sentences) // config.chunk_size)
    records = _read_chunks(work, n_chunks)
    t0 = time.perf_counter()
    extra = topup(config, p, records, documents, teacher, work, progress)
    label_seconds += time.perf_counter() - t0
    if extra:
        log(f"top-up: the teacher probed {sum(len(r['probes']) for r in extra)} values in {len(extra)} more sentences")
    metrics = distil(config, p, records, work, teacher, progress) if config.student else {}
    if rank != 0:
        return {}
    lexicon, cells, summary = aggregate(config, p, records + extra, documents)
    name = config.name or config.output.name.removesuffix(".yaml").removesuffix(".yml")
    provenance = {
        "teacher": teacher.name,
        "method": "adversarial perturbation of input embeddings: Jacobian-probe token sensitivity, "
        "finite-difference Hessian-vector pair coupling (heatc learn)",
        "corpus": [_display_path(x, config.output) for x in config.corpus],
        "corpus_sha256": p.corpus_sha256,
        "documents": p.documents,
        "sentences": p.sentences,
        "teacher_sentences": len(p.teacher_sentences),
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
    doc = agg.heatmap_document(
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
    agg.write_heatmap(config.output, doc, header)
    return {
        "cells": len(cells),
        "hot_cells": summary["hot_cells"],
        "label_seconds": round(label_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
        "coupling": summary["unit_vs_keyword"],
    }


def _display_path(path: Path, output: Path) -> str:
    """A path as the heatmap should record it: relative to the heatmap's folder if inside it."""
    try:
        return os.path.relpath(Path(path).resolve(), Path(output).resolve().parent)
    except ValueError:
        return str(path)
