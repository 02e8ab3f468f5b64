"""The plan stage: read the corpus, learn keywords (and the families of rare ones of one
magnitude, `magnitudes`), find candidate cells, and choose the sentences the teacher reads.

Public surface: `Plan`, `plan(config, documents)`, `plan_lexicon`, `rule_file_literals`, `corpus_digest`,
`discovery_sample`, `teacher_share`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

from heatc.errors import Diagnostic, HeatError
from heatc.learn.cells.magnitudes import discover_magnitudes, with_magnitudes
from heatc.learn.config import LearnConfig
from heatc.learn.text.corpus import sentences
from heatc.learn.text.discovery import discover_keywords
from heatc.learn.text.evidence import (
    CellKey,
    candidate_cells,
    occurrences,
)
from heatc.learn.text.lexemes import Category, Lexicon, lex_sentence
from heatc.learn.text.model_names import model_names
from heatc.learn.text.shadows import SHADOW_GROUP, shadow_phrases
from heatc.learn.work import Progress, quiet, seeded_hash


@dataclass
class Plan:
    corpus_sha256: str
    documents: int
    sentences: int
    keywords: list[tuple[str, int]]
    candidates: list[CellKey]
    teacher_sentences: list[str]
    heldout: list[bool]  # per teacher sentence: its document is held out from student training
    probe_cells: dict[str, list[str]]  # sentence -> the candidate cells it was chosen for
    excluded: list[str]  # literals that hand-written rule files declare
    # the categories keywords were discovered over, as [name, kind, group, literals, exact]
    # (`heatc finetune`: the base heatmap's); empty: the seed lexicon
    lexicon: list[list] = dataclasses.field(default_factory=list)
    # keyword phrases that make another quantity (`shadows`): declared, so that their keyword's
    # rules do not read their values
    shadows: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    # keyword families of one magnitude (`magnitudes`): name -> the members' literals
    magnitudes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # model and part names the corpus writes ("PCF-160L"): declared, so that their digits
    # are no value (`model_names`)
    model_names: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["candidates"] = [[k.keyword, k.value, k.unit, k.check] for k in self.candidates]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        d = dict(d)
        d["candidates"] = [CellKey(*k) for k in d["candidates"]]
        d["keywords"] = [tuple(k) for k in d["keywords"]]
        d["shadows"] = [tuple(k) for k in d.get("shadows", [])]
        return cls(**d)


def plan_lexicon(p: Plan) -> Lexicon:
    start = (
        Lexicon([Category(n, k, g, tuple(lits), bool(x)) for n, k, g, lits, x in p.lexicon]) if p.lexicon else Lexicon()
    )
    lexicon = start.without_literals(p.excluded).with_model_names(p.model_names)
    lexicon = lexicon.with_keywords(k for k, _ in p.keywords)
    lexicon = with_magnitudes(lexicon, p.magnitudes)
    return lexicon.with_keywords((k for k, _ in p.shadows), group=SHADOW_GROUP)


# With the student scoring the cells, the teacher's sample is what the student learns from:
# a corpus with few candidate cells needs fewer of its sentences (MIN_TEACHER at least,
# TEACHER_PER_CELL per candidate cell, `teacher_sentences` at most).
MIN_TEACHER = 128
TEACHER_PER_CELL = 2


def teacher_share(config: LearnConfig, probe: list[str], label: list[str], candidates: int | None = None) -> list[str]:
    """The sentences the teacher reads when the student scores the rest (`teacher_sentences`
    > 0; with `candidates`, the number of candidate cells, at most MIN_TEACHER or
    TEACHER_PER_CELL per candidate, whichever is more): three quarters from the probe
    sentences (in coverage order, so the first cells met are covered first), the rest from
    the random label sentences — all of them when there are fewer."""
    n = config.teaching.teacher_sentences
    if candidates is not None:
        n = min(n, max(MIN_TEACHER, TEACHER_PER_CELL * candidates))
    if not config.distil.student or n <= 0 or len(probe) + len(label) <= n:
        return probe + label
    k = min(len(probe), max(n - len(label), (3 * n) // 4))
    return probe[:k] + label[: n - k]


def rule_file_literals(paths: list[Path]) -> list[str]:
    """Every literal the classes of hand-written rule files declare: learning leaves them to
    those files, since a literal belongs to one class."""
    from heatc.lang.ast import ClassDecl
    from heatc.lang.parse import parse

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


def corpus_digest(documents) -> str:
    """The SHA-256 of the documents' ids and texts: which corpus a plan was made for."""
    digest = hashlib.sha256()
    for d in documents:
        digest.update(d.id.encode() + b"\0" + d.text.encode() + b"\0")
    return digest.hexdigest()


def discovery_sample(config: LearnConfig, all_sentences: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The sentences keyword discovery reads: up to `discovery_sentences`, in hash order."""
    order = sorted(range(len(all_sentences)), key=lambda k: seeded_hash(config.seed, all_sentences[k][1]))
    return [all_sentences[k] for k in order[: config.teaching.discovery_sentences]]


def plan(config: LearnConfig, documents, progress: Progress = quiet, start: Lexicon | None = None) -> Plan:
    """`start`: the categories to discover keywords over (default: the seed lexicon)."""
    per_doc = [sentences(d.text) for d in documents]
    all_sentences = [(i, s) for i, ss in enumerate(per_doc) for s in ss]
    if not all_sentences:
        raise HeatError(Diagnostic("corpus", 0, 0, "no sentences found in the corpus"))
    sample = discovery_sample(config, all_sentences)
    progress("keywords", 0, 1)
    excluded = rule_file_literals(config.rules)
    base = (start or Lexicon()).without_literals(excluded)
    # a literal belongs to one class: what the rule files declare is theirs, not a keyword's
    theirs = {x.lower() for x in excluded}
    texts = [" ".join(ss) for ss in per_doc]  # the counted sentences (as `aggregate.counted_text` joins them)
    # before keyword discovery, which would take a name's capitals for a quantity's name
    models = model_names(texts, base.literal_set() | set(excluded))
    base = base.with_model_names(models)
    keywords = discover_keywords(
        base,
        (s for _, s in sample),
        min_support=max(2, config.teaching.candidate_count),
        max_keywords=config.teaching.max_keywords,
    )
    keywords = [(k, n) for k, n in keywords if k.lower() not in theirs]
    lexicon = base.with_keywords(k for k, _ in keywords)
    magnitudes, promoted = discover_magnitudes(
        lexicon, [s for _, s in sample], texts, config.cells.min_support, theirs, base
    )
    pooled = {lit.lower() for lits in magnitudes.values() for lit in lits}
    keywords = [(k, n) for k, n in keywords if k.lower() not in pooled] + promoted
    lexicon = with_magnitudes(base.with_keywords(k for k, _ in keywords), magnitudes)
    program = lexicon.program()
    groups = lexicon.groups()
    progress("keywords", 1, 1)
    lexed = []
    for n, (_, s) in enumerate(sample):
        lexed.append(lex_sentence(program, s))
        if n % 2000 == 0:
            progress("candidate cells", n, len(sample))
    shadows = [(k, n) for k, n in shadow_phrases(lexed, groups) if k.lower() not in theirs]
    if shadows:  # the phrases lex in their keywords' place from here on
        lexicon = lexicon.with_keywords((k for k, _ in shadows), group=SHADOW_GROUP)
        program, groups = lexicon.program(), lexicon.groups()
        # only a sentence holding every word of a phrase (in any case) can lex otherwise now
        words = [k.split() for k, _ in shadows]
        lexed = [
            lex_sentence(program, s) if any(all(w in low for w in ws) for ws in words) else x
            for (_, s), x in zip(sample, lexed, strict=True)
            for low in [s.lower()]
        ]
    progress("candidate cells", len(sample), len(sample))
    candidates = candidate_cells(lexed, groups, config.teaching.candidate_count)
    wanted = set(candidates)

    # Coverage: every candidate cell gets up to probes_per_cell sentences, in hash order.
    taken: dict[CellKey, int] = dict.fromkeys(candidates, 0)
    probe_cells: dict[str, list[str]] = {}
    for (_, s), lx in zip(sample, lexed, strict=True):
        if len(probe_cells) >= config.teaching.max_probe_sentences:
            break
        keys = {k for occ in occurrences(lx, groups) for k in occ.keys if k in wanted}
        need = [k for k in keys if taken[k] < config.teaching.probes_per_cell]
        if need and s not in probe_cells:
            for k in keys:
                taken[k] += 1
            probe_cells[s] = sorted(k.name for k in keys)
    seen = set(probe_cells)
    label: list[str] = []
    for _, s in sample:
        if len(label) >= config.teaching.label_sentences:
            break
        if s not in seen:
            seen.add(s)
            label.append(s)
    chosen = teacher_share(config, list(probe_cells), label, len(candidates))
    doc_of = {}
    for i, s in all_sentences:
        doc_of.setdefault(s, i)
    heldout = [
        (seeded_hash(config.seed + 1, documents[doc_of[s]].id) % 1000) < config.teaching.heldout * 1000 for s in chosen
    ]
    return Plan(
        corpus_digest(documents),
        len(documents),
        len(all_sentences),
        keywords,
        candidates,
        chosen,
        heldout,
        probe_cells,
        excluded,
        [[c.name, c.kind, c.group, list(c.literals), c.exact] for c in start.categories] if start else [],
        shadows,
        magnitudes,
        models,
    )
