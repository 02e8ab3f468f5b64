"""Shared by the learning benchmarks: the three English domain corpora in ../shared/data,
deterministic sentence samples, and teacher labelling of a sample."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"

# The English text of each domain (the Chinese files need a multilingual teacher).
CORPORA = {
    "medical": [DATA / "medical/text/mtsamples_all4999.jsonl.gz"],
    "finance": [DATA / "finance/text/tatqa_dataset_dev.json", DATA / "finance/text/tatqa_dataset_test_gold.json"],
    "legal": [DATA / "legal/text/cuad_v1_full_contract_txt_all510.tar.gz"],
}


def machine() -> str:
    from run import machine as describe  # bench/run.py: CPU model, cores, versions

    return describe()


def _key(seed: int, text: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{text}".encode()).digest()


def documents(domain: str):
    from heatc.learn.text.corpus import read_corpus

    return read_corpus(CORPORA[domain])


def split_documents(domain: str, seed: int = 0, test_share: float = 0.5):
    """Documents split in two by a hash of their id: (learn, held out). A copy of a document
    (`copy_groups`: MTSamples files a transcription under several specialties) goes where
    the document goes — held-out text the learner has read is not held out —, and the held-out
    half keeps one of each copy: a note filed three times is one note's sentences, not three."""
    from heatc.learn.text.corpus import copy_groups

    docs = documents(domain)
    groups = copy_groups([d.text for d in docs])
    learn, held = [], []
    for i, (d, g) in enumerate(zip(docs, groups, strict=True)):
        if _key(seed + 7, docs[g].id)[0] >= 256 * test_share:
            learn.append(d)
        elif g == i:
            held.append(d)
    return learn, held


def sample_sentences(docs, n: int, seed: int = 0, max_chars: int = 300) -> list[str]:
    from heatc.learn.text.corpus import sentences

    pool = sorted({s for d in docs for s in sentences(d.text) if len(s) <= max_chars}, key=lambda s: _key(seed, s))
    return pool[:n]


def label_sentences(teacher, texts: list[str], batch_size: int = 16, seed: int = 0):
    """TokenExamples with the teacher's token sensitivity, and the seconds it took."""
    from heatc.learn.students.student import TokenExample
    from heatc.learn.teaching.labels import token_sensitivity

    out = []
    ordered = sorted(texts, key=len)
    t0 = time.perf_counter()
    for b0 in range(0, len(ordered), batch_size):
        batch = teacher.batch(ordered[b0 : b0 + batch_size])
        sens = token_sensitivity(teacher, batch, seed=seed)
        mask = teacher.special_mask(batch)
        lengths = batch.attention_mask.sum(1).tolist()
        for b in range(len(batch.texts)):
            n = int(lengths[b])
            out.append(TokenExample(batch.input_ids[b, :n].tolist(), sens[b, :n].tolist(), mask[b, :n].tolist()))
    return out, time.perf_counter() - t0
