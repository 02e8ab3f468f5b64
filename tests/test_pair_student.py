"""The pair student: it learns couplings that depend on the tokens and their distance, its
ONNX export agrees with torch and rebuilds the same model, a token student of an earlier
heatc loads into it, and its records are what aggregation reads."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from heatc.errors import HeatError
from heatc.learn.students import pair_onnx
from heatc.learn.students import pair_student as ps
from heatc.learn.students import student as st

pytestmark = pytest.mark.needs("torch")

REPO = Path(__file__).resolve().parent.parent


def _synthetic(n: int, seed: int) -> list[ps.PairExample]:
    """One lexeme per token. A value's coupling with token j is a fixed function of j's id and
    of the distance between them; a token's label is a function of its id."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        body = rng.integers(1000, 1040, size=int(rng.integers(8, 20))).tolist()
        ids = [101, *body, 102]
        lexemes = [[t] for t in range(1, len(ids) - 1)]
        labels = [0.0] + [float(t % 13) + 1.0 for t in body] + [0.0]
        probes = []
        for v in sorted(rng.choice(len(body), size=2, replace=False).tolist()):
            row = [None if j == v else math.exp((body[j] % 7) / 3 - 0.25 * abs(j - v)) for j in range(len(body))]
            probes.append((v, row))
        out.append(ps.PairExample(ids, [0] + [1] * len(body) + [0], labels, lexemes, probes))
    return out


@pytest.fixture(scope="module")
def trained():
    config = ps.PairConfig(vocab_size=2048, width=32, pair_width=32, features=0, pair_head="interaction")
    return ps.train_pair(config, _synthetic(500, 0), st.Training(epochs=8, seed=0)), _synthetic(60, 1)


def test_the_pair_head_learns_token_and_distance_dependent_couplings(trained):
    model, test = trained
    fid = ps.pair_fidelity(model, test)
    assert fid["pair_spearman"] > 0.8 and fid["pair_auc"] > 0.85 and fid["token_auc"] > 0.85
    untrained = ps.PairStudent(model.config).eval()
    assert ps.pair_fidelity(untrained, test)["pair_spearman"] < 0.5


def test_onnx_export_is_the_same_bytes_wherever_heatc_is_installed(trained, tmp_path):
    """The exporter records each node's Python stack trace, with the absolute paths of
    heatc's sources; the file keeps none of it, so the same student exports to the same bytes."""
    import heatc

    model, _ = trained
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    pair_onnx.export_pair_onnx(model, first)
    pair_onnx.export_pair_onnx(model, second)
    data = first.read_bytes()
    assert data == second.read_bytes()
    assert str(Path(heatc.__file__).resolve().parent).encode() not in data
    assert b"stack_trace" not in data


def test_onnx_export_agrees_with_torch_and_rebuilds_the_model(trained, tmp_path):
    import onnxruntime

    model, test = trained
    path = tmp_path / "s.student.onnx"
    assert pair_onnx.export_pair_onnx(model, path, check_examples=test) <= 1e-4
    session = onnxruntime.InferenceSession(str(path))
    batch = ps.collate(test[:3], 128)  # a batch, length and probe count not seen at export
    scores, coupling = session.run(
        None,
        {
            "input_ids": batch.ids.numpy(),
            "attention_mask": batch.attn.numpy(),
            "value_positions": batch.positions.numpy(),
        },
    )
    assert scores.shape == tuple(batch.ids.shape) and coupling.shape == (*batch.positions.shape, batch.ids.shape[1])
    back, kind = pair_onnx.load_pair_student(path)
    assert kind == "pair" and back.config == model.config
    for a, b in zip(model.state_dict().values(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_token_student_of_an_earlier_heatc_gives_its_encoder_and_token_head(tmp_path):
    """Exported by `student.export_onnx` (optimised: weights renamed and transposed)."""
    config = st.StudentConfig(vocab_size=512, width=16, layers=1, features=8)
    table = torch.randn(512, 8).to(torch.float16)
    old = st.train(config, st_examples(), st.Training(epochs=1, seed=0), table=table)
    st.export_onnx(old, tmp_path / "old.onnx")
    model, kind = pair_onnx.load_pair_student(tmp_path / "old.onnx")
    assert kind == "token"
    torch.manual_seed(123)  # whatever ran before: the untrained pair head is the same (a --seed run is)
    again, _ = pair_onnx.load_pair_student(tmp_path / "old.onnx")
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    ids = torch.randint(0, 512, (2, 9))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.allclose(model(ids, attn, torch.zeros(2, 1, dtype=torch.long))[0], old(ids, attn), atol=1e-5)


def st_examples() -> list[st.TokenExample]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(16):
        ids = [1, *rng.integers(10, 500, size=6).tolist(), 2]
        out.append(st.TokenExample(ids, [0.0] + [float(i % 5) + 1 for i in ids[1:-1]] + [0.0], [0] + [1] * 6 + [0]))
    return out


def test_what_is_not_a_student_is_a_clear_error(tmp_path):
    with pytest.raises(HeatError, match="no such file"):
        pair_onnx.load_pair_student(tmp_path / "none.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx at all")
    with pytest.raises(HeatError, match="not a student detector"):
        pair_onnx.load_pair_student(bad)


def test_student_records_have_the_teachers_format():
    """Per probed value, a coupling per lexeme: None at the value itself and past the
    truncation, positive elsewhere — what `aggregate` reads from the teacher."""
    from heatc.learn.teaching.teacher import load_teacher
    from heatc.learn.text.lexemes import Lexicon, lex_sentence

    tokenizer = load_teacher().tokenizer
    program = Lexicon().program()
    text = "Glucose was 162 mg/dL and potassium 4.9 this morning."
    lx = lex_sentence(program, text)
    values = [i for i in range(len(lx.lexemes)) if lx.is_value(i)]
    model = ps.PairStudent(ps.PairConfig(vocab_size=len(tokenizer), width=16, pair_width=16)).eval()
    [record] = ps.student_records(model, tokenizer, program, [(text, values)])
    assert record["text"] == text and [v for v, _ in record["probes"]] == values
    for v, row in record["probes"]:
        assert len(row) == len(lx.lexemes) and row[v] is None
        assert all(c is not None and c > 0 for j, c in enumerate(row) if j != v)


def test_relative_positions_export_and_a_file_without_them_is_read_as_absolute(tmp_path):
    """The experimental relative bias: dynamic length in onnxruntime, rebuilt from the
    metadata; a student whose metadata names no positions (an earlier heatc's) has absolute
    ones."""
    import json

    import onnx

    config = ps.PairConfig(vocab_size=2048, width=32, pair_width=32, features=0, positions="relative")
    model = ps.train_pair(config, _synthetic(60, 2), st.Training(epochs=1, seed=0))
    assert not hasattr(model, "position") and hasattr(model, "attention_rel")
    path = tmp_path / "rel.student.onnx"
    assert pair_onnx.export_pair_onnx(model, path, check_examples=_synthetic(20, 3)) <= 1e-4
    back, _ = pair_onnx.load_pair_student(path)
    assert back.config == model.config
    old = ps.train_pair(
        ps.PairConfig(vocab_size=2048, width=32, pair_width=32, features=0), _synthetic(20, 4), st.Training(epochs=1)
    )
    pair_onnx.export_pair_onnx(old, path)
    proto = onnx.load(str(path))
    [entry] = [p for p in proto.metadata_props if p.key == pair_onnx.METADATA_KEY]
    info = json.loads(entry.value)
    del info["config"]["positions"], info["config"]["relative_distance"]
    entry.value = json.dumps(info)
    onnx.save(proto, str(path))
    back, kind = pair_onnx.load_pair_student(path)
    assert kind == "pair" and back.config.positions == "absolute"
    for a, b in zip(old.state_dict().values(), back.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["medical", "finance", "legal"])
def test_the_shipped_students_load(name):
    """The shipped heatmaps' students, learned by the current heatc (relative positions)."""
    model, _ = pair_onnx.load_pair_student(REPO / "heatmaps" / f"{name}.student.onnx")
    assert model.config.positions == "relative"
    ids = torch.tensor([[101, 2000, 2001, 102]])
    with torch.no_grad():
        scores, coupling = model(ids, torch.ones_like(ids), torch.tensor([[1]]))
    assert scores.shape == (1, 4) and coupling.shape == (1, 1, 4)
