"""The label and top-up stages: the teacher's labels and pair couplings for the planned
sentences, in checkpointed chunks sharded over the ranks of a `torchrun` run, then probes
of the values of cells the plan left with too few.

Public surface: `label`, `label_batch`, `topup_plan`, `topup`, `read_chunks`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from heatc.learn.config import TOPUP_VERSION, LearnConfig
from heatc.learn.teaching.plan import Plan, discovery_sample, plan_lexicon
from heatc.learn.text.corpus import sentences
from heatc.learn.text.evidence import (
    CellKey,
    evidence_of,
    occurrences,
)
from heatc.learn.text.lexemes import align, lex_sentence
from heatc.learn.work import Progress, barrier, quiet, rank_and_world, read_work


def _chunk_path(work: Path, c: int) -> Path:
    return work / "labels" / f"chunk-{c:05d}.json.gz"


def _probe_lexemes(lx, groups, wanted: set, limit: int) -> list[int]:
    occ = occurrences(lx, groups)
    first = [o.value for o in occ if any(k in wanted for k in o.keys)]
    return first[:limit]


def label(config: LearnConfig, plan_: Plan, teacher, work: Path, progress: Progress = quiet) -> None:
    """Label the plan's sentences with the teacher; each rank takes every world-th chunk and
    skips chunks already on disk."""
    import torch

    lexicon = plan_lexicon(plan_)
    program = lexicon.program()
    groups = lexicon.groups()
    wanted = set(plan_.candidates)
    texts = sorted(plan_.teacher_sentences, key=lambda s: (len(s), s))  # similar lengths batch well
    chunks = [texts[i : i + config.teaching.chunk_size] for i in range(0, len(texts), config.teaching.chunk_size)]
    torch.manual_seed(config.seed)

    def label_group(group: list[str]) -> list[dict]:
        lexed = [lex_sentence(program, s) for s in group]
        chosen = [_probe_lexemes(lx, groups, wanted, config.teaching.probes_per_sentence) for lx in lexed]
        return label_batch(config, teacher, group, lexed, chosen)

    _label_chunks(config, chunks, lambda c: _chunk_path(work, c), label_group, "teacher", progress)


def _label_chunks(
    config: LearnConfig, chunks: list[list], path_of, label_group, stage: str, progress: Progress
) -> None:
    """Run `label_group` over every world-th chunk (this rank's), batch by batch, writing each
    chunk's records atomically to `path_of(chunk)`; chunks already on disk are skipped."""
    rank, world = rank_and_world()
    mine = [c for c in range(len(chunks)) if c % world == rank]
    done = sum(1 for c in mine if path_of(c).exists())
    progress(stage, done, len(mine))
    for c in mine:
        path = path_of(c)
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        records = []
        for b0 in range(0, len(chunks[c]), config.teaching.batch_size):
            records.extend(label_group(chunks[c][b0 : b0 + config.teaching.batch_size]))
        tmp = path.with_name(path.name + f".tmp{rank}")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(records, f)
        tmp.replace(path)
        done += 1
        progress(stage, done, len(mine))


def label_batch(config: LearnConfig, teacher, group: list[str], lexed: list, chosen: list[list[int]]) -> list[dict]:
    """The teacher's token labels of a batch of sentences and the pair couplings of the chosen
    value lexemes of each (those without a teacher token are skipped) with every lexeme."""
    from heatc.learn.teaching.labels import labels_and_coupling

    batch = teacher.batch(group)
    aligned = [align(lx, offs) for lx, offs in zip(lexed, batch.offsets, strict=True)]
    probes = [[v for v in vs if al[v]] for vs, al in zip(chosen, aligned, strict=True)]
    rounds = [
        [al[p[r]][0] if r < len(p) else None for p, al in zip(probes, aligned, strict=True)]
        for r in range(max((len(p) for p in probes), default=0))
    ]
    sens, couplings = labels_and_coupling(
        teacher, batch, rounds, epsilon=config.teaching.epsilon, probes=config.teaching.probes,
        directions=config.teaching.directions, seed=config.seed,
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
    if config.teaching.topup_probes <= 0:
        return []
    lexicon = plan_lexicon(plan_)
    program = lexicon.program()
    groups = lexicon.groups()
    wanted = set(plan_.candidates)
    have: dict[CellKey, int] = dict.fromkeys(plan_.candidates, 0)
    probed: dict[str, set[int]] = {}
    for rec in records:
        if not rec["probes"]:
            continue
        values = {v for v, _ in rec["probes"]}
        probed.setdefault(rec["text"], set()).update(values)
        for occ in occurrences(lex_sentence(program, rec["text"]), groups):
            if occ.value in values:
                for k in occ.keys:
                    if k in wanted and evidence_of(occ, k):
                        have[k] += 1
    short = {k for k, n in have.items() if n < config.cells.min_probes}
    if not short:
        return []
    sample = discovery_sample(config, [(i, s) for i, d in enumerate(documents) for s in sentences(d.text)])
    found = []  # (sentence, occurrences of short cells), in sample order
    seen: set[str] = set()
    for _, s in sample:
        if s in seen:
            continue
        seen.add(s)
        occs = [
            o
            for o in occurrences(lex_sentence(program, s), groups)
            if o.value not in probed.get(s, ()) and any(k in short and evidence_of(o, k) for k in o.keys)
        ]
        if occs:
            found.append((s, occs))
    chosen: dict[str, list[int]] = {}
    total = 0
    for target in (config.cells.min_probes, config.teaching.probes_per_cell):
        for s, occs in found:
            for o in occs:
                if total >= config.teaching.topup_probes:
                    break
                mine = chosen.setdefault(s, [])
                if o.value in mine or len(mine) >= config.teaching.topup_per_sentence:
                    continue
                keys = [k for k in o.keys if k in short and evidence_of(o, k)]
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
    config: LearnConfig, plan_: Plan, records: list[dict], documents, teacher, work: Path, progress: Progress = quiet
) -> list[dict]:
    """Probe the values `topup_plan` chooses (rank 0 chooses, every rank labels every
    world-th chunk); returns the probe records (text and probes only). Its settings are kept
    beside it: changing them redoes the top-up alone, never the plan's labels."""
    import shutil

    rank = rank_and_world()[0]
    file = work / "topup.json.gz"
    settings = {
        "version": TOPUP_VERSION,
        "topup_probes": config.teaching.topup_probes,
        "topup_per_sentence": config.teaching.topup_per_sentence,
        "min_probes": config.cells.min_probes,
    }
    if rank == 0:
        current = None
        if file.exists():
            current = read_work(file, lambda d: d if "probes" in d and "settings" in d else d["settings"])
        if current is None or current["settings"] != settings:
            shutil.rmtree(work / "topup", ignore_errors=True)
            chosen = topup_plan(config, plan_, records, documents)
            with gzip.open(file.with_suffix(".tmp"), "wt", encoding="utf-8") as f:
                json.dump({"settings": settings, "probes": chosen}, f)
            file.with_suffix(".tmp").replace(file)
    barrier()
    chosen = read_work(file, lambda d: d["probes"])
    if not chosen:
        return []
    program = plan_lexicon(plan_).program()
    items = sorted(chosen, key=lambda x: (len(x[0]), x[0]))
    chunks = [items[i : i + config.teaching.chunk_size] for i in range(0, len(items), config.teaching.chunk_size)]

    def label_group(group: list) -> list[dict]:
        texts = [s for s, _ in group]
        lexed = [lex_sentence(program, s) for s in texts]
        records = label_batch(config, teacher, texts, lexed, [vs for _, vs in group])
        return [{"text": r["text"], "probes": r["probes"]} for r in records]

    _label_chunks(config, chunks, lambda c: _topup_path(work, c), label_group, "teacher (top-up)", progress)
    barrier()
    out = []
    for c in range(len(chunks)):
        out.extend({**r, "topup": True} for r in read_work(_topup_path(work, c)))
    return out


def read_chunks(work: Path, n: int) -> list[dict]:
    out = []
    for c in range(n):
        out.extend(read_work(_chunk_path(work, c), list))
    return out
