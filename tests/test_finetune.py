"""heatc finetune end to end on a real drug label (the shipped medical heatmap, a teacher
sample of 24 sentences): the domain's own cells, provenance, the same heatmap again for a
seed, a rerun that resumes without the teacher; and the bad inputs, each a clear error with
nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import SHARED_DATA
from support.pdfgen import BrokenPage, Image, Page, TextRun, write_pdf
from typer.testing import CliRunner

from heatc.cli import app
from heatc.errors import HeatError
from heatc.heatmap.format import load_heatmap
from heatc.learn.config import FinetuneConfig
from heatc.learn.finetuning.documents import domain_documents
from heatc.learn.finetuning.finetune import STAGES, finetune

pytestmark = pytest.mark.needs("torch", "pdf")

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "heatmaps" / "medical.yaml"
LABEL = SHARED_DATA / "medical/pdf/fda_metformin_highlights_2026.pdf"
needs_data = pytest.mark.skipif(not LABEL.exists(), reason=f"shared data not found at {LABEL}")
SMALL = dict(teacher_sentences=24, epochs=2)


def _config(out: Path, pdfs: list[Path], **kw) -> FinetuneConfig:
    return FinetuneConfig(base=BASE, output=out, pdfs=pdfs, **{**SMALL, **kw})


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> Path:
    """A PDF whose one page is an image and nothing else."""
    return write_pdf(tmp_path_factory.mktemp("pdf") / "scan.pdf", [Page(images=[Image()])])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, scanned):
    if not LABEL.exists():
        pytest.skip(f"shared data not found at {LABEL}")
    root = tmp_path_factory.mktemp("ft")
    (root / "a").mkdir()
    out = root / "a" / "metformin.yaml"
    summary = finetune(_config(out, [LABEL, scanned]), log=lambda m: None)
    return out, summary


@needs_data
def test_the_domain_brings_its_own_cells_and_provenance(tuned, scanned):
    out, summary = tuned
    hm = load_heatmap(out)
    base = load_heatmap(BASE)
    assert len(hm.cells) == summary["cells"] and summary["domain_cells"] > 0
    new = {(c.pair, c.unit) for c in hm.cells} - {(c.pair, c.unit) for c in base.cells}
    # a quantity of the label's domain that the base heatmap lacks: eGFR, or a dose of
    # metformin or of glyburide (the label's drugs), named by a keyword of a new cell (the
    # learner groups keywords of one unit into classes such as keywords_mg_2, so the
    # class's literals are read, not its name)
    words = {w for (first, _), _ in new for w in hm.categories[first].literals}
    assert words & {"egfr", "metformin", "glyburide"}, sorted(new)
    prov = hm.provenance
    assert prov["base"]["sha256"] == __import__("hashlib").sha256(BASE.read_bytes()).hexdigest()
    label, scan = prov["documents"]
    assert (
        label["file"] == LABEL.name and label["pages_used"] == f"1-{label['pages']}" and label["scanned_skipped"] == 0
    )
    assert scan == {**scan, "file": "scan.pdf", "pages": 1, "pages_used": "", "scanned_skipped": 1}
    assert prov["teacher_sentences"] == 24 and prov["seed"] == 0
    assert prov["budget"] == {"alarm_budget": 0.05, "min_worth": 8.0}
    m = prov["metrics"]
    assert {"pair_spearman", "pair_auc", "student_auc", "onnx_max_abs_diff"} <= set(m) and m["onnx_max_abs_diff"] < 1e-3
    assert out.with_name("metformin.student.onnx").exists()
    counts = prov["cells"]
    assert counts["domain"] + counts["kept"] == len(hm.cells)


@needs_data
def test_the_stages_run_in_order_each_timed(tuned):
    _, summary = tuned
    assert [name for name, _ in summary["stages"]] == [s.name for s in STAGES]
    assert [s.name for s in STAGES] == ["read", "teacher", "plan", "label", "distil", "score", "aggregate", "emit"]
    assert all(seconds >= 0 for _, seconds in summary["stages"])


def test_timings_and_dump_after_name_the_finetune_stages(tmp_path):
    """`--dump-after` naming no stage is refused before any work, with the stages that have an
    output; an error names the stage it happened in."""
    out = tmp_path / "out.yaml"
    r = CliRunner().invoke(app, ["finetune", str(BASE), "--pdf", str(tmp_path / "a.pdf"), "-o", str(out),
                                 "--dump-after", "nothing"])  # fmt: skip
    assert r.exit_code == 1 and "no stage 'nothing' to dump" in r.output
    assert "plan, label, distil, score, aggregate" in r.output and not out.exists()
    bad = tmp_path / "notes.pdf"
    bad.write_text("not a pdf")
    r = CliRunner().invoke(app, ["finetune", str(BASE), "--pdf", str(bad), "-o", str(out), "--timings"])
    assert r.exit_code == 1 and "(in stage read)" in r.output and "Traceback" not in r.output


@needs_data
def test_the_same_seed_gives_the_same_heatmap_and_a_rerun_resumes(tuned, scanned, monkeypatch, tmp_path):
    out, _ = tuned
    (tmp_path / "b").mkdir()
    again = tmp_path / "b" / "metformin.yaml"
    finetune(_config(again, [LABEL, scanned]), log=lambda m: None)
    assert again.read_bytes() == out.read_bytes()

    from heatc.learn.teaching import labelling

    def no_teacher(*a, **k):
        raise AssertionError("the teacher ran again")

    monkeypatch.setattr(labelling, "label_batch", no_teacher)
    before = out.read_bytes()
    finetune(_config(out, [LABEL, scanned]), log=lambda m: None)
    assert out.read_bytes() == before
    # what a false alarm must buy is the aggregation's: the command line changes it on the resumed work
    args = ["finetune", str(BASE), "--pdf", str(LABEL), "--pdf", str(scanned), "-o", str(out), "--min-worth", "0"]
    r = CliRunner().invoke(app, [*args, "--teacher-sentences", "24", "--epochs", "2"])
    assert r.exit_code == 0, r.output
    prov = load_heatmap(out).provenance
    assert prov["budget"] == {"alarm_budget": 0.05, "min_worth": 0.0}
    checked = prov["coupling"]["checked_sentences"]
    assert f"false-alarm budget: 0.05 × {checked} checked domain sentences" in r.output
    assert "only where each false alarm it adds buys 0 of worth" in r.output


def test_a_base_without_a_student_is_a_clear_error(tmp_path, scanned):
    base = tmp_path / "base.yaml"
    shutil.copy(BASE, base)
    shutil.copy(BASE.with_name("medical_zh.heat"), tmp_path)  # the rule file it names, not its student
    out = tmp_path / "out.yaml"
    with pytest.raises(HeatError, match=r"no student beside the base heatmap.*--new-student"):
        finetune(FinetuneConfig(base=base, output=out, pdfs=[scanned]), log=lambda m: None)
    assert not out.exists() and not (tmp_path / "out.finetune").exists()


def test_an_all_scanned_or_empty_pdf_set_is_a_clear_error(tmp_path, scanned):
    out = tmp_path / "out.yaml"
    with pytest.raises(HeatError, match=r"no text in 1 PDF page \(1 scanned: no text layer; heatc does no OCR\)"):
        finetune(_config(out, [scanned]), log=lambda m: None)
    assert not out.exists() and not (tmp_path / "out.finetune").exists()
    r = CliRunner().invoke(app, ["finetune", str(BASE), "-o", str(out)])
    assert r.exit_code == 1 and "nothing to fine-tune on: no PDF or text file given" in r.output
    assert "Traceback" not in r.output and not out.exists()


def test_a_file_that_is_not_a_pdf_is_a_clear_error(tmp_path):
    bad = tmp_path / "notes.pdf"
    bad.write_text("not a pdf")
    out = tmp_path / "out.yaml"
    r = CliRunner().invoke(app, ["finetune", str(BASE), "--pdf", str(bad), "-o", str(out)])
    assert r.exit_code == 1 and "notes.pdf" in r.output and "Traceback" not in r.output
    assert not out.exists()
    empty = write_pdf(tmp_path / "blank.pdf", [Page(runs=[TextRun(50, 700, " ")])])
    with pytest.raises(HeatError, match="nothing to fine-tune on: no text in 1 PDF page"):
        finetune(_config(out, [empty]), log=lambda m: None)


def test_a_pdf_that_needs_a_user_password_is_a_clear_error(tmp_path):
    locked = write_pdf(tmp_path / "locked.pdf", [Page(runs=[TextRun(72, 720, "Metformin 500 mg twice daily.")])],
                       user_password="open", owner_password="owner")  # fmt: skip
    out = tmp_path / "out.yaml"
    r = CliRunner().invoke(app, ["finetune", str(BASE), "--pdf", str(locked), "-o", str(out)])
    assert r.exit_code == 1 and "locked.pdf: error: encrypted: needs a password" in r.output
    assert "Traceback" not in r.output and not out.exists() and not (tmp_path / "out.finetune").exists()


def test_failed_and_scanned_pages_are_skipped_and_recorded(tmp_path):
    mixed = write_pdf(
        tmp_path / "mixed.pdf",
        [Page(runs=[TextRun(72, 720, "Metformin 500 mg.")]), BrokenPage(), Page(images=[Image()]),
         Page(runs=[TextRun(72, 720, "Warfarin 5 mg.")])],
    )  # fmt: skip
    documents, sources = domain_documents(_config(tmp_path / "out.yaml", [mixed]))
    assert [(d.id, d.text) for d in documents] == [
        ("mixed.pdf#1", "Metformin 500 mg."),
        ("mixed.pdf#4", "Warfarin 5 mg."),
    ]
    [source] = sources
    assert (source["pages"], source["pages_used"], source["scanned_skipped"], source["failed"]) == (4, "1,4", 1, [2])


def test_a_work_folder_of_another_version_or_run_is_refused_until_fresh(tmp_path):
    """An earlier heatc finetune's plan lacks what this one's holds (the rare labs' magnitude
    families): resuming from it would fine-tune on a different plan without a word. Refused,
    with the reason, and `fresh` starts over."""
    import json

    from heatc.learn.finetuning.finetune import WORK_VERSION, _work_dir

    config = _config(tmp_path / "out.yaml", [])
    work = tmp_path / "out.finetune"
    work.mkdir()
    (work / "plan.json.gz").write_bytes(b"old")
    (work / "config.json").write_text(json.dumps({"version": WORK_VERSION - 1, "fingerprint": "f"}))
    earlier = rf"an earlier heatc finetune \(work format {WORK_VERSION - 1}, this one writes {WORK_VERSION}\)"
    with pytest.raises(HeatError, match=earlier + "; rerun with --fresh"):
        _work_dir(config, "f", fresh=False)
    (work / "config.json").write_text(json.dumps({"version": WORK_VERSION, "fingerprint": "other"}))
    with pytest.raises(HeatError, match="different settings; rerun with --fresh"):
        _work_dir(config, "f", fresh=False)
    assert (work / "plan.json.gz").exists()  # nothing of the old run is lost by a refusal
    assert _work_dir(config, "f", fresh=True) == work and not (work / "plan.json.gz").exists()
    assert _work_dir(config, "f", fresh=False) == work  # the same run resumes
