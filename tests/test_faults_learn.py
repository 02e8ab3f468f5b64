"""What `heatc learn`, `heatc finetune` and `heatc extract` read, under faults: inputs that
are FIFOs, devices or decompression bombs (each refused by name, before a byte is read, never
a hang or a MemoryError), and a work folder (`<output>.learn/`, `<output>.finetune/`) whose
files were truncated or changed (each refused with the file and "rerun with --fresh", never
an EOFError shown as a bare "Aborted." or a RuntimeError)."""

import gzip
import json
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heatc.cli import app
from heatc.errors import HeatError
from heatc.learn.teaching.labelling import read_chunks
from heatc.learn.teaching.plan import Plan
from heatc.learn.text.corpus import read_corpus
from heatc.learn.work import refuse_other_work


def _in_time(fn, seconds: float = 20.0):
    """fn() in a thread: what it returned or raised; a call that hangs fails the test."""
    result: list = []

    def run():
        try:
            result.append(fn())
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hung"
    return result[0]


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


# -- inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_corpus_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    path = _fifo(tmp_path, "notes.txt") if kind == "fifo" else tmp_path / "notes.txt"
    if kind == "dev_zero":
        path.symlink_to("/dev/zero")
    outcome = _in_time(lambda: read_corpus([path]))
    assert isinstance(outcome, HeatError), outcome
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert f"{path}: error: cannot read: {what}, not a regular file" in outcome.render()


def test_a_gzip_bomb_in_the_corpus_is_refused(tmp_path, monkeypatch):
    import heatc.learn.text.corpus as corpus

    monkeypatch.setattr(corpus, "MAX_FILE_BYTES", 1 << 20)  # (the same check as at MAX_FILE_BYTES, smaller)
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(b"glucose 5 mg/dL. " * (1 << 17)))  # 2 MB from a few kilobytes
    assert path.stat().st_size < 64 << 10
    with pytest.raises(HeatError, match="more than 1,048,576 bytes once decompressed"):
        read_corpus([path])
    (tmp_path / "notes.txt.gz").write_bytes(b"\x1f\x8b\x08\x00junk")
    with pytest.raises(HeatError, match=r"not a readable archive or \.gz file"):
        read_corpus([path])


@pytest.mark.parametrize("command", ["extract", "finetune"])
def test_extract_and_finetune_refuse_a_fifo_and_dev_zero_by_name(tmp_path, command):
    pytest.importorskip("pypdfium2", reason="needs pypdfium2 (pip install 'heatc[pdf]')")
    fifo = _fifo(tmp_path, "domain.pdf")
    zero = tmp_path / "zero.pdf"
    zero.symlink_to("/dev/zero")
    if command == "extract":
        args = ["extract", str(fifo), str(zero)]
    else:
        pytest.importorskip("torch", reason="heatc finetune needs torch (pip install 'heatc[learn]')")
        base = Path(__file__).parent / "heatmaps" / "good.yaml"
        args = ["finetune", str(base), "-o", str(tmp_path / "out.yaml"), "--new-student", "--pdf", str(fifo)]
        args += ["--pdf", str(zero)]
    r = _in_time(lambda: CliRunner().invoke(app, args))
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.exception
    assert f"{fifo}: error: cannot read: a FIFO, not a regular file" in r.output, r.output
    assert f"{zero}: error: cannot read: a character device, not a regular file" in r.output, r.output


# -- a damaged work folder ----------------------------------------------------------------------


def _damaged(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x00" * 40}[how])


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage"])
def test_damaged_work_files_are_refused_with_the_way_out(tmp_path, how):
    work = tmp_path / "out.learn"
    work.mkdir()
    (work / "config.json").write_text(json.dumps({"version": 1, "fingerprint": "x"}))
    assert refuse_other_work(work, {"version": 1, "fingerprint": "x"}, "heatc learn") is None
    from heatc.learn.teaching import labelling

    chunk_path = labelling._chunk_path(work, 0)  # (where a labelled chunk is kept)
    chunk_path.parent.mkdir(parents=True)
    with gzip.open(chunk_path, "wt", encoding="utf-8") as f:
        json.dump([{"sentence": "glucose 5 mg/dL", "probes": []}] * 50, f)
    assert len(read_chunks(work, 1)) == 50
    for path, read in (
        (chunk_path, lambda: read_chunks(work, 1)),
        (work / "config.json", lambda: refuse_other_work(work, {"version": 1, "fingerprint": "x"}, "heatc learn")),
    ):
        _damaged(path, how)
        with pytest.raises(HeatError) as refused:
            read()
        rendered = refused.value.render()
        assert rendered.startswith(f"{path}: error: the work folder's file is damaged ("), rendered
        assert rendered.endswith("rerun with --fresh to start over") and "\n" not in rendered


def test_a_plan_that_reads_as_json_but_is_no_plan_is_refused(tmp_path):
    from heatc.learn.work import read_work

    plan = tmp_path / "plan.json.gz"
    with gzip.open(plan, "wt", encoding="utf-8") as f:
        json.dump({"documents": 3}, f)
    with pytest.raises(HeatError, match=r"plan\.json\.gz: error: the work folder's file is damaged \(KeyError"):
        read_work(plan, Plan.from_json)


@pytest.mark.needs("torch")
def test_a_damaged_student_checkpoint_is_refused(tmp_path):
    import torch

    from heatc.learn.students import student

    checkpoint = tmp_path / "student.pt"
    model = torch.nn.Linear(2, 1)
    optimiser = torch.optim.AdamW(model.parameters())
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: 1.0)
    state = {"model": model.state_dict(), "optimiser": optimiser.state_dict(), "schedule": schedule.state_dict()}
    torch.save({**state, "epoch": 1}, checkpoint)
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    examples = [([0.0, 1.0], 1.0)] * 4

    def loss(wrapped, batch, rank, world):
        return wrapped(torch.tensor([x for x, _ in batch])).pow(2).mean()

    with pytest.raises(HeatError, match=r"student\.pt: error: the student's checkpoint is damaged \(RuntimeError"):
        training = student.Training(epochs=2, batch_size=2, lr=1e-3, seed=0)
        student.fit(model, examples, loss, training, checkpoint=checkpoint, progress=None)
