"""heatc learn, stage by stage: corpus reading, teacher labels (fast paths against the
explicit ones), lexemes and their alignment, aggregation, the student and its ONNX export."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import math
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from support.learn_scores import scored as _scored
from support.learn_values import spread_values

from heatc.errors import HeatError
from heatc.heatmap.format import (
    DEFAULT_MARGIN_FACTOR,
    DEFAULT_MARGIN_SPREAD,
    Stats,
)
from heatc.heatmap.lower import margin_range
from heatc.learn.cells.budget import CellContext, allocate, cell_table
from heatc.learn.cells.couplings import Couplings
from heatc.learn.cells.guards import (
    FAMILY_COUNT,
    GUARDS_PER_CELL,
    guard_expected,
    in_families,
    keyword_families,
    swap_sources,
    unit_guards,
    unit_swaps,
)
from heatc.learn.cells.ranges import (
    FLAT_TAIL,
    conflicts,
    log_width,
    n_bounds,
    range_options,
    rejected_share,
    slip_power,
    value_stats,
)
from heatc.learn.config import CellsConfig
from heatc.learn.heatmaps.emit import heatmap_document, write_heatmap
from heatc.learn.teaching import labels
from heatc.learn.text.corpus import read_corpus, sentences
from heatc.learn.text.discovery import discover_keywords
from heatc.learn.text.evidence import (
    CellKey,
    CellValues,
    LearnedCell,
    collect_values,
    evidence_of,
    occurrences,
    stats_rules,
)
from heatc.learn.text.lexemes import Lexicon, align, lex_sentence

pytestmark = pytest.mark.needs("torch")

SENTENCES = [
    "Glucose was 162 mg/dL and potassium 4.9 this morning.",
    "Blood pressure 132/84 mmHg, pulse 88, temperature 98.6 degrees.",
    "He takes metformin 500 mg twice daily with meals.",
    "The patient denies chest pain, shortness of breath or palpitations.",
    "Sodium 141, chloride 104 and creatinine 1.2 on admission.",
    "Payment is due within thirty (30) days after receipt of the invoice.",
]


def spearman(a, b) -> float:
    ra = np.argsort(np.argsort(np.asarray(a)))
    rb = np.argsort(np.argsort(np.asarray(b)))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.fixture(scope="module")
def teacher():
    from heatc.learn.teaching.teacher import load_teacher

    return load_teacher()


@pytest.fixture(scope="module")
def causal_teacher(tiny_causal_lm):
    from heatc.learn.teaching.teacher import load_teacher

    return load_teacher(tiny_causal_lm)


# --- corpus -------------------------------------------------------------------------------


def test_reads_every_corpus_format(tmp_path):
    (tmp_path / "a.txt").write_text("Glucose was 162 mg/dL this morning. Potassium 4.9 on admission.")
    (tmp_path / "b.jsonl").write_text(
        json.dumps({"id": 1, "note": "Sodium 141 and chloride 104 were normal today."}) + "\n"
    )
    with gzip.open(tmp_path / "c.json.gz", "wt") as f:
        json.dump([{"paragraphs": [{"text": "Revenue rose 12% to $4.2 million in fiscal 2019 overall."}]}], f)
    member = tmp_path / "contract.txt"
    member.write_text("Payment is due within thirty (30) days of invoice.")
    with tarfile.open(tmp_path / "d.tar.gz", "w:gz") as tar:
        tar.add(member, arcname="x/contract.txt")
    member.unlink()
    docs = read_corpus([tmp_path])
    texts = " ".join(d.text for d in docs)
    assert len(docs) == 4
    for fragment in ("162 mg/dL", "Sodium 141", "$4.2 million", "thirty (30) days"):
        assert fragment in texts
    assert any(d.id == "d.tar.gz:x/contract.txt" for d in docs)
    # documents held out by a glob over their ids; the rest are read as before
    kept = read_corpus([tmp_path], exclude=["*:x/contract*", "a.txt"])
    assert sorted(d.id for d in kept) == sorted(d.id for d in docs if d.id not in ("a.txt", "d.tar.gz:x/contract.txt"))
    with pytest.raises(HeatError, match=r"x/typo\*: error: --exclude matches no document"):
        read_corpus([tmp_path], exclude=["a.txt", "x/typo*"])


def test_corpus_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "fine text that is long enough to count as a document"}\n{"a": oops}\n')
    with pytest.raises(HeatError, match=r"bad\.jsonl:2:7: error: not valid JSON lines"):
        read_corpus([bad])
    with pytest.raises(HeatError, match="no such file or directory"):
        read_corpus([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(HeatError, match="holds no readable text"):
        read_corpus([tmp_path / "empty"])


def test_sentences_split_at_ends_and_headings():
    text = "HISTORY: The patient is well. Glucose 162 mg/dL.\n\nPLAN: Continue metformin 500 mg daily."
    got = sentences(text)
    assert got == ["HISTORY: The patient is well.", "Glucose 162 mg/dL.", "PLAN: Continue metformin 500 mg daily."]


# --- labels -------------------------------------------------------------------------------


def test_drift_gradient_vanishes_at_the_unperturbed_point(teacher):
    """The trap the labels avoid: 1 − cos is at its minimum, so its gradient is ~0 there."""
    batch = teacher.batch(SENTENCES[:2])
    embeds = teacher.embed(batch.input_ids).requires_grad_(True)
    reference = teacher.reference(embeds.detach(), batch)
    (grad,) = torch.autograd.grad(teacher.objective(embeds, batch, reference).sum(), embeds)
    assert float(grad.norm(dim=-1).max()) < 1e-4
    assert float(labels.token_sensitivity(teacher, batch).max()) > 1e-4


def test_fast_sensitivity_ranks_like_explicit_perturbation(teacher):
    """Jacobian probes (one forward, K backward) against projected gradient ascent at each
    position separately: the rankings agree."""
    batch = teacher.batch(SENTENCES)
    fast = labels.token_sensitivity(teacher, batch, probes=8)
    rhos = []
    for i in range(len(SENTENCES)):
        slow = labels.explicit_sensitivity(teacher, batch, i)
        m = slow > 0
        rhos.append(spearman(fast[i][m], slow[m]))
    assert min(rhos) > 0.7, rhos
    assert float(np.mean(rhos)) > 0.85, rhos


def test_labels_do_not_depend_on_the_batch(teacher):
    alone = labels.token_sensitivity(teacher, teacher.batch(SENTENCES[2:3]))
    together = labels.token_sensitivity(teacher, teacher.batch(SENTENCES))
    n = int(alone.shape[1])
    assert torch.allclose(alone[0], together[2, :n], rtol=1e-3, atol=1e-9)
    assert float(together[2, n:].abs().max()) == 0.0


def test_finite_difference_coupling_matches_double_backward(teacher):
    batch = teacher.batch(SENTENCES)
    positions = [3, 2, 4, None, 1, 5]
    fd = labels.pair_coupling(teacher, batch, positions, directions=1)
    exact = labels.exact_coupling(teacher, batch, positions)
    assert float((fd - exact).norm() / exact.norm()) < 1e-2
    assert float(fd[3].abs().max()) == 0.0  # no probe in that sentence


def test_causal_teacher_first_order_sensitivity(causal_teacher):
    batch = causal_teacher.batch(SENTENCES[:3])
    fast = labels.token_sensitivity(causal_teacher, batch)
    assert float(fast.max()) > 0
    for i in range(3):
        slow = labels.explicit_sensitivity(causal_teacher, batch, i)
        m = slow > 0
        assert spearman(fast[i][m], slow[m]) > 0.7
    coupling = labels.pair_coupling(causal_teacher, batch, [2, 3, 1])
    assert float(coupling.max()) > 0


def test_teacher_directory_errors(tmp_path):
    from heatc.learn.teaching.teacher import load_teacher

    with pytest.raises(HeatError, match="not a Hugging Face model directory"):
        load_teacher(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "nonsense"}')
    with pytest.raises(HeatError, match="cannot load the teacher"):
        load_teacher(tmp_path)


# --- lexemes ------------------------------------------------------------------------------


def test_lexemes_align_with_teacher_tokens(teacher):
    program = Lexicon().program()
    text = "Glucose 162 mg/dL, SpO2 95% — naïve 4.9"
    s = lex_sentence(program, text)
    batch = teacher.batch([text])
    aligned = align(s, batch.offsets[0])
    tokens = teacher.tokenizer.convert_ids_to_tokens(batch.input_ids[0])
    by_text = {x.raw.decode(): [tokens[t] for t in aligned[k]] for k, x in enumerate(s.lexemes)}
    assert by_text["162"] == ["162"]
    assert "".join(by_text["mg/dL"]).replace("#", "") == "mg/dl"
    assert by_text["95%"] == ["95", "%"]
    assert by_text["4.9"] == ["4", ".", "9"]
    assert s.categories[[x.raw for x in s.lexemes].index(b"mg/dL")] == "mg_dl"


def test_discovers_keywords_before_numbers():
    texts = [f"Potassium {v} and sodium {140 + v}." for v in range(12)] + [
        "Payment is due within thirty (30) days."
    ] * 12
    found = dict(discover_keywords(Lexicon(), texts, min_support=10))
    assert found["potassium"] == 12 and found["sodium"] == 12
    assert "due" in found  # a term's keyword, found past "within" and the parenthesis
    assert "thirty" not in found and "and" not in found


def test_rule_file_literals_are_left_to_the_rule_file():
    lexicon = Lexicon().without_literals(["毫克", "MG"])
    mg = lexicon.by_name()["mg"]
    assert "mg" not in mg.literals and "毫克" not in mg.literals and "milligrams" in mg.literals


# --- aggregation --------------------------------------------------------------------------


def _lexicon_with(*keywords: str) -> Lexicon:
    return Lexicon().with_keywords(keywords)


def test_occurrences_pair_values_with_keywords_and_units():
    lexicon = _lexicon_with("glucose", "payment")
    groups = lexicon.groups()
    s = lex_sentence(lexicon.program(), "Glucose was 162 mg/dL, then 5 mg.")
    occ = occurrences(s, groups)
    names = [sorted(k.name for k in o.keys) for o in occ]
    assert names == [["glucose_mg_dl", "glucose_mg_dl_consistent", "glucose_value", "mg_dl_amount"], ["mg_amount"]]
    s = lex_sentence(lexicon.program(), "Payment is due within thirty (30) days.")
    (o,) = occurrences(s, groups)
    assert [k.name for k in o.keys] == ["within_value", "payment_days_consistent"]


def test_a_unit_per_another_is_a_unit_of_its_own_not_its_first_part():
    """ "Serum iron 35mcg/dL" is no dose in mcg, "ESR 113mm/hr" no length in mm, and "290 mm/Hg"
    (a tourniquet's pressure, written with a slash) no length either: each lexes as its own
    unit, so neither a dose's unit guard nor a length's range reads it."""
    lexicon = _lexicon_with("iron", "esr", "tourniquet")
    groups = lexicon.groups()
    for text, unit in (
        ("Serum iron 35mcg/dL.", "mcg_dl"),
        ("ESR 113mm/hr.", "mm_hour"),
        ("tourniquet 290 mm/Hg.", "mm_hg"),
    ):
        s = lex_sentence(lexicon.program(), text)
        (o,) = occurrences(s, groups)
        assert {k.name for k in o.keys} >= {f"{unit}_amount"}, text
        assert not any(k.unit in ("mcg", "mm") for k in o.keys), text


def test_a_heatmap_declares_the_units_that_begin_as_its_own_do():
    """A heatmap with a rule on lengths in mm declares mm/hr, mm Hg and mm/Hg as well, and one
    on doses in mcg mcg/dL: undeclared, its lexer would read "ESR 113mm/hr" as 113 mm."""
    from heatc.learn.heatmaps.emit import declared_categories

    used = declared_categories(Lexicon(), [CellKey("", "number", "mm"), CellKey("", "number", "mcg")])
    assert {"mm", "mm_hour", "mm_hg", "mcg", "mcg_dl", "mcg_kg"} <= used
    assert not {"cm", "mg", "ml"} & used


def test_every_date_is_a_value_of_the_date_cell_and_year_digits_before_a_unit_are_a_number():
    """A year written alone is a date ("in 2019"): the cell of every date (`LONE_DATE`,
    `v:date`) reads it, no keyword does; four such digits with a unit right after them are the
    number the rule `glucose ..3 v:number mg_dl` reads ("2001 mg/dL")."""
    from heatc.learn.text.evidence import LONE_DATE

    lexicon = _lexicon_with("glucose")
    s = lex_sentence(lexicon.program(), "Glucose 2001 mg/dL in 2019, and glucose in 2003 on 09/05.")
    names = [sorted(k.name for k in o.keys) for o in occurrences(s, lexicon.groups())]
    assert names[0] == ["glucose_mg_dl", "glucose_mg_dl_consistent", "glucose_value", "mg_dl_amount"]
    assert names[1:] == [["any_date"], ["any_date", "glucose_date"], ["any_date"]]
    assert LONE_DATE.name == "any_date" and LONE_DATE.pattern() == "v:date"
    glucose = [CellKey("glucose", "number", "mg_dl"), CellKey("glucose", "number", ""), LONE_DATE]
    values = collect_values(lexicon, glucose, [s.text])
    # (`v:date` reads every date lexeme: "2001 mg/dL" too, so its stats and false alarms count it)
    assert [values[k].values for k in glucose] == [[2001.0], [], [2001.0, 2019.0, 2003.0, 0.0]]


def test_every_percentage_is_a_value_of_the_percentage_cell():
    """ "a tax rate of 21%", "45% of revenue", "Hct 36%": whatever stands before a percentage,
    the cell of every percentage (`LONE_PERCENT`, `v:percent`) reads it — what it bounds is a
    share written past the whole; a keyword's cell reads its own as well."""
    from heatc.learn.text.evidence import LONE_PERCENT

    lexicon = _lexicon_with("hct")
    s = lex_sentence(lexicon.program(), "A tax rate of 21%, 45% of revenue and Hct 36% on 2 L.")
    names = [sorted(k.name for k in o.keys) for o in occurrences(s, lexicon.groups())]
    assert names[:3] == [["any_percent"], ["any_percent", "percent_share_of"], ["any_percent", "hct_percent"]]
    assert not any("any_percent" in n for n in names[3:])  # (a number is no percentage)
    assert LONE_PERCENT.name == "any_percent" and LONE_PERCENT.pattern() == "v:percent"
    values = collect_values(lexicon, [LONE_PERCENT], [s.text])
    assert values[LONE_PERCENT].values == [21.0, 45.0, 36.0]


def test_a_number_word_is_a_keyword_of_its_own_group_that_terms_look_past():
    """ "thirty (30) days": with number words as `numeral` keywords (aggregation adds them),
    30 pairs with "thirty" for a range cell, and the term still belongs to "payment"; the
    lexemes stay where they were, so the teacher's per-lexeme couplings still line up."""
    from heatc.learn.text.lexemes import NUMBER_WORDS

    plain = _lexicon_with("payment")
    lexicon = plain.with_keywords(NUMBER_WORDS, group="numeral")
    groups = lexicon.groups()
    assert groups["thirty"] == "numeral" and "thirty" not in {c.name for c in plain.categories}
    text = "Payment is due within thirty (30) days."
    s = lex_sentence(lexicon.program(), text)
    assert [x.start for x in s.lexemes] == [x.start for x in lex_sentence(plain.program(), text).lexemes]
    (o,) = occurrences(s, groups)
    assert [k.name for k in o.keys] == ["thirty_value", "payment_days_consistent"]
    values = collect_values(lexicon, [CellKey("thirty", "number", "")], [text, "Thirty (30) days."])
    assert values[CellKey("thirty", "number", "")].values == [30.0, 30.0]


def test_collected_values_are_what_the_reference_interpreter_captures():
    """Statistics come from the WASM backend scanning the cells as rules; the reference
    interpreter, which is the spec, captures the same values."""
    from heatc.semantics.reference import scan

    lexicon = _lexicon_with("glucose", "potassium", "payment")
    cells = [
        CellKey("glucose", "number", ""),
        CellKey("glucose", "number", "mg_dl"),
        CellKey("", "number", "mg"),
        CellKey("potassium", "number", ""),
        CellKey("payment", "number", "days", "consistent"),
    ]
    docs = [
        "Glucose 5 and 500 mg/dL. Potassium was 4.9; glucose 120, 130 mg/dL. Metformin 500 mg.",
        "Payment is due within thirty (30) days. Late payment: within 45 days. 二十 mg.",
    ]
    got = collect_values(lexicon, cells, docs)
    program = lexicon.program(stats_rules(cells))
    for d, text in enumerate(docs):
        events, _, _ = scan(program, text.encode())
        for i, key in enumerate(cells):
            want = [dict(e.captures)["v"] for e in events if e.kind == "match" and e.name == f"c{i}"]
            assert got[key].per_document.get(d, []) == want
    # a keyword binds its nearest value: mg/dL follows neither glucose's 5 nor its 120
    assert got[cells[1]].values == []
    assert got[cells[0]].values == [5.0, 120.0]
    assert got[cells[4]].per_document[1] == [30.0, 45.0]
    assert conflicts(got[cells[4]]) == (1, 1)


def test_outliers_do_not_set_the_quantiles():
    values = [4.0 + 0.01 * i for i in range(200)] + [0.0, 245000.0]
    stats = value_stats(values)
    assert stats["min"] == 0 and stats["max"] == 245000 and stats["n"] == 202
    assert 3.9 < stats["q01"] and stats["q99"] < 6.1


def test_cell_scores_rank_candidates_by_coupling_over_the_baseline_at_their_distance():
    """A keyword right before its value is coupled more than one three lexemes away, whatever
    it says: each is measured against what any lexeme that far from a value gets, and the
    score is the share of candidate cells whose strength is at most its own."""
    c = Couplings()
    c.by_distance[-1] = [2.0, 2.0, 2.0]  # neighbours: twice the mean
    c.by_distance[-3] = [0.5, 0.5, 0.5]
    near, far, weak = CellKey("pleasant", "number", ""), CellKey("sodium", "number", ""), CellKey("x", "number", "")
    c.evidence[near] = [((2.2, -1),)] * 3  # barely more than any neighbour
    c.evidence[far] = [((1.5, -3),)] * 3  # three times what a lexeme that far gets
    c.evidence[weak] = [((1.0, -1),)] * 2  # too few probes
    assert c.strength(near) == (pytest.approx(1.1), 3) and c.strength(far) == (pytest.approx(3.0), 3)
    assert c.scores([near, far, weak], 3) == {near: 0.5, far: 1.0}


def test_the_cell_of_every_date_is_as_hot_as_the_hottest_keywords_date_cell():
    """The cell of every date is scored by the lexeme before the year ("in 2019"), which
    couples little; it reads every keyword's dates, so it scores at least as the hottest of
    those cells — and keeps its own score where that is higher or there is none."""
    from heatc.learn.text.evidence import LONE_DATE

    fiscal, ended = CellKey("fiscal_year", "date", ""), CellKey("ended", "date", "")
    sodium, days = CellKey("sodium", "number", ""), CellKey("payment", "number", "days", "consistent")
    scores, _ = _scored({LONE_DATE: 0.5, fiscal: 2.0, ended: 3.0, sodium: 4.0, days: 5.0})
    assert scores[LONE_DATE] == scores[ended] == 0.6 and scores[sodium] == 0.8 and scores[days] == 1.0
    scores, _ = _scored({LONE_DATE: 3.5, ended: 3.0, sodium: 4.0})
    assert scores[LONE_DATE] == pytest.approx(2 / 3)  # its own is higher
    scores, _ = _scored({LONE_DATE: 0.5, sodium: 4.0, days: 5.0})  # no keyword's date cell, nor a consistency one
    assert scores[LONE_DATE] == pytest.approx(1 / 3)


def test_consistency_cells_stay_within_the_false_alarm_budget():
    key_a = CellKey("payment", "number", "days", "consistent")
    key_b = CellKey("notice", "number", "days", "consistent")
    values = {key_a: CellValues(), key_b: CellValues()}
    for d in range(10):
        for k, vs in ((key_a, [30, 30]), (key_b, [10, 20, 30])):
            values[k].values.extend(vs)
            values[k].per_document[d].extend(vs)
    scored = _scored({key_a: 2.5, key_b: 2.5})
    cells = cell_table(
        values,
        *scored,
        CellsConfig(min_support=5, min_probes=3, alarm_budget=0.005, sensitivity=None),
        CellContext(sentences=1000),
    )
    assert [x.key for x in cells] == [key_a]  # notice would reject 20 of 1000 clean sentences


def test_written_heatmap_loads_lowers_and_checks(tmp_path):
    from heatc.heatmap.build import compile_heatmap

    lexicon = _lexicon_with("glucose")
    stats = value_stats([80.0 + i for i in range(100)])
    cell = LearnedCell(CellKey("glucose", "number", "mg_dl"), 0.93, 2.1, 12, 100, stats)
    doc = heatmap_document(
        name="learned",
        title="t",
        lexicon=lexicon,
        cells=[cell],
        provenance={"teacher": "x", "metrics": {"auc": 0.9}},
        sensitivity=0.75,
        rule_files=[],
        tokenizer={"bytes": True},
    )
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "a header")
    program, _, _ = compile_heatmap(path)
    assert [r.name for r in program.rules] == ["glucose_mg_dl"]
    assert len(program.expects) == 2  # a typical value passes, a wild one is rejected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learned.yaml"]  # nothing half-written


# --- student ------------------------------------------------------------------------------


def _synthetic(n: int, seed: int):
    """Sentences whose 'teacher' label is a fixed function of the token id and its left
    neighbour: a student must learn it to rank well."""
    from heatc.learn.students.student import TokenExample

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = [101, *rng.integers(1000, 1060, size=int(rng.integers(8, 20))).tolist(), 102]
        labels_ = [0.0] + [float((t % 17) + 0.3 * (p % 5)) + 0.01 for p, t in itertools.pairwise(ids[:-1])] + [0.0]
        out.append(TokenExample(ids, labels_, [0] + [1] * (len(ids) - 2) + [0]))
    return out


def test_student_learns_and_exports_to_onnx(tmp_path):
    from heatc.learn.students import student as st

    train, test = _synthetic(600, 0), _synthetic(60, 1)
    config = st.StudentConfig(vocab_size=2048, width=32)
    model = st.train(config, train, st.Training(epochs=8, seed=0))
    auc = st.evaluate_auc(st.model_scorer(model, config.max_length), test)
    assert auc > 0.85
    assert abs(st.evaluate_auc(st.random_scores(0), test) - 0.5) < 0.1
    diff = st.export_onnx(model, tmp_path / "student.onnx", check_examples=test)
    assert diff <= 1e-4
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "student.onnx"))
    ids, attn, _, _ = st._pad(test[:3], config.max_length)  # a batch and length not seen at export
    (scores,) = session.run(None, {"input_ids": ids.numpy(), "attention_mask": attn.numpy()})
    assert scores.shape == tuple(ids.shape)


def test_student_resumes_from_its_checkpoint(tmp_path):
    from heatc.learn.students import student as st

    train = _synthetic(64, 2)
    config = st.StudentConfig(vocab_size=2048, width=16, layers=1)
    straight = st.train(config, train, st.Training(epochs=3, seed=0))

    def interrupt(epoch, epochs, loss):
        if epoch == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        st.train(config, train, st.Training(epochs=3, seed=0), checkpoint=tmp_path / "s.pt", progress=interrupt)
    resumed = st.train(config, train, st.Training(epochs=3, seed=0), checkpoint=tmp_path / "s.pt")
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_per_sentence_auc_against_brute_force():
    from heatc.learn.students.student import per_sentence_auc

    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(5, 40))
        labels_, scores = rng.random(n), rng.integers(0, 5, n).astype(float)
        k = max(1, round(0.2 * n))
        pos = set(np.argsort(-labels_, kind="stable")[:k].tolist())
        wins = [
            1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0
            for i in pos
            for j in range(n)
            if j not in pos
        ]
        assert per_sentence_auc(scores, labels_) == pytest.approx(np.mean(wins))


def test_fused_labels_equal_the_separate_passes(teacher):
    batch = teacher.batch(SENTENCES)
    rounds = [[3, 2, 4, None, 1, 5], [1, None, 2, 3, 4, 2]]
    sens, couplings = labels.labels_and_coupling(teacher, batch, rounds)
    assert torch.allclose(sens, labels.token_sensitivity(teacher, batch), rtol=1e-4, atol=1e-12)
    for r, c in zip(rounds, couplings, strict=True):
        assert torch.allclose(c, labels.pair_coupling(teacher, batch, r), rtol=1e-4, atol=1e-9)


def test_a_range_cell_must_accept_the_values_it_was_learned_from():
    """ "revenues 2019 … revenues 4.2": a keyword followed by years and amounts alike gets no
    range cell; one followed by one kind of quantity does."""
    mixed, plain = CellKey("revenues", "number", ""), CellKey("potassium", "number", "")
    values = {mixed: CellValues(), plain: CellValues()}
    values[mixed].values = [2017.0 + i % 3 for i in range(80)] + [1.5 + i for i in range(20)]
    values[plain].values = [3.5 + 0.02 * i for i in range(100)]
    scored = _scored({mixed: 2.5, plain: 2.5})
    cells = cell_table(
        values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=None), CellContext(sentences=1000)
    )
    assert [x.key for x in cells] == [plain]
    assert rejected_share(value_stats(values[mixed].values), values[mixed].values) > 0.1


def test_a_device_that_is_not_there_is_a_clear_error():
    from heatc.learn.teaching.teacher import load_teacher

    with pytest.raises(HeatError, match="not a torch device"):
        load_teacher(None, "gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(HeatError, match="no CUDA device here"):
            load_teacher(None, "cuda")


def test_plan_keeps_the_check_of_its_candidates():
    from heatc.learn.teaching.plan import Plan

    keys = [CellKey("payment", "number", "days", "consistent"), CellKey("payment", "number", "days")]
    plan = Plan(
        documents=1, sentences=1, corpus_sha256="0", keywords=[("payment", 3)], candidates=keys,
        teacher_sentences=[], heldout=[], probe_cells={}, excluded=[],
    )  # fmt: skip
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.candidates == keys


def test_range_cells_share_the_false_alarm_budget():
    """Each cell rejects 2 % of its clean values (within the per-cell cap); with 1,000
    sentences and a budget of 0.006 per sentence, only the first three cells fit."""
    values = {}
    keys = [CellKey(f"lab{i}", "number", "") for i in range(5)]
    for key in keys:
        values[key] = CellValues(values=[4.0 + 0.01 * j for j in range(98)] + [400.0, 0.001])
    scored = _scored({key: 2.9 - 0.1 * i for i, key in enumerate(keys)})
    cells = cell_table(
        values,
        *scored,
        CellsConfig(min_support=5, min_probes=3, alarm_budget=0.006, sensitivity=None),
        CellContext(sentences=1000),
    )
    assert [x.key for x in cells] == keys[:3]
    assert all(x.rejected == 2 for x in cells)


# --- ranges chosen under the false-alarm budget --------------------------------------------


def _creatinine_like() -> list[float]:
    """Mostly 0.6–2.5, a tail of one value in eleven up to 12 (renal failure): the margin
    policy's range [q01 / 2, q99 × 2] accepts ten times most of the values."""
    body = np.geomspace(0.6, 2.5, 200)
    tail = np.geomspace(3.0, 12.0, 20)
    return [float(x) for x in np.round(np.concatenate([body, tail]), 2)]


def test_slip_power_counts_values_a_range_would_catch_ten_times_off():
    assert slip_power((1.0, 10.0), [2.0, 5.0]) == 1.0  # 20 and 50 out, 0.2 and 0.5 out
    assert slip_power((1.0, 100.0), [2.0, 5.0]) == pytest.approx(0.5)  # only 0.2 and 0.5 out
    assert slip_power((0.1, 1000.0), [2.0, 5.0]) == 0.0
    assert slip_power((1.0, 10.0), [50.0]) == 0.0  # a value the range rejects already counts for nothing


def test_an_amount_with_a_scale_word_is_also_priced_for_a_scale_slip():
    """ "$4.2 million" written "$4,200 million" is a thousand times off: a range of an amount
    with a scale word is worth the values it would notice slipped by ten and by a thousand."""
    from heatc.learn.cells.ranges import SCALE_SLIP, SLIP, slips

    million = CellKey("", "number", "scale_million")
    assert slips(million) == (SLIP, SCALE_SLIP) and slips(CellKey("", "number", "mg")) == (SLIP,)
    values = [2.0, 5.0, 40.0, 300.0]
    wide, narrow = (None, 2_000_000.0), (None, 250_000.0)
    # ten times off, neither upper bound notices anything; a thousand times off, the narrow one does
    assert slip_power(wide, values) == slip_power(narrow, values) == 0.0
    assert slip_power(narrow, values, slips(million)) > slip_power(wide, values, slips(million))
    assert slip_power(narrow, values, slips(million)) == pytest.approx((0 + 0.5 * 1 / 4) / 2)


def test_spare_budget_buys_a_narrower_range_whose_false_alarms_are_estimated_out_of_sample():
    key = CellKey("creatinine", "number", "")
    values = {key: spread_values(_creatinine_like())}
    scored = _scored({key: 3.5})
    default = cell_table(
        values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=None), CellContext(sentences=10_000)
    )
    assert default[0].range is None  # without a sensitivity: the margin policy, as before
    [cell] = cell_table(
        values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=0.75), CellContext(sentences=10_000)
    )
    lo, hi = cell.range
    wide = margin_range(Stats(**cell.stats), DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR)
    assert hi < wide[1] and slip_power((lo, hi), values[key].values) > slip_power(wide, values[key].values)
    assert cell.rejected == sum(not lo <= v <= hi for v in values[key].values) <= 0.1 * len(values[key].values)
    # a bound that rejected nothing, in the corpus or out of sample, is still expected to cost
    # half a false alarm in documents not seen (FLAT_TAIL): no budget, no range; half a false
    # alarm buys one bound, one false alarm two, each rejecting nothing in the corpus or out of sample
    assert (
        cell_table(
            values,
            *scored,
            CellsConfig(min_support=5, min_probes=3, alarm_budget=0.0, sensitivity=0.75),
            CellContext(sentences=10),
        )
        == []
    )
    for budget, bounds in ((0.005, 1), (0.01, 2)):
        [free] = cell_table(
            values,
            *scored,
            CellsConfig(min_support=5, min_probes=3, alarm_budget=budget, sensitivity=0.75),
            CellContext(sentences=100),
        )
        assert free.rejected == 0 and n_bounds(free.range) == bounds == budget * 100 / FLAT_TAIL
        assert free.range[1] is None or free.range[1] > hi
        assert any(o.bounds == free.range and o.expected == 0 for o in range_options(values[key]))


def test_a_range_is_charged_what_it_would_reject_in_documents_it_was_not_fitted_on():
    """One document's 40 is the largest value: a range up to the maximum rejects none of
    the corpus's values, but fitted without that document it rejects the 40."""
    cv = spread_values([1.0 + 0.05 * i for i in range(100)])
    cv.values.append(40.0)
    cv.per_document[7].append(40.0)
    options = range_options(cv)
    assert options and all(o.rejected <= o.expected for o in options if o.bounds[1] is None or o.bounds[1] >= 40)
    widest = max((o for o in options if None not in o.bounds), key=lambda o: log_width(o.bounds))
    assert widest.rejected == 0 and widest.expected >= 1


def test_a_date_cell_has_no_lower_bound():
    """A date that names no year reads 0 ("the years ended December 31"): a lower bound would
    reject it; a date cell is for a year too late, and only its upper side is bounded."""
    cv = spread_values([2015.0 + (i % 6) for i in range(120)])
    number = range_options(cv, CellKey("ended", "number", ""))
    assert any(o.bounds[0] is not None for o in number)
    dates = range_options(cv, CellKey("ended", "date", ""))
    assert dates and all(o.bounds[0] is None and o.bounds[1] is not None for o in dates)


def test_the_budget_is_shared_where_it_buys_most_and_never_exceeded():
    keys = [CellKey(f"lab{i}", "number", "") for i in range(4)]
    values = {k: spread_values(_creatinine_like()) for k in keys}
    scored = _scored(dict.fromkeys(keys, 3.5))
    powers, counts = [], []
    for n_sentences in (100, 1000, 10_000):
        cells = cell_table(
            values,
            *scored,
            CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
            CellContext(sentences=n_sentences),
        )
        options = {k: range_options(values[k], k) for k in keys}
        chosen, spent = allocate(cells, values, budget=0.01 * n_sentences, options=options)
        assert len(chosen) == len(cells) and spent <= 0.01 * n_sentences
        counts.append(len(chosen))
        powers.append(sum(slip_power(x.range or (0, math.inf), values[x.key].values) for x in chosen))
    # a budget of one false alarm runs two of the cells with one bound each (FLAT_TAIL); more
    # budget, more cells and more caught
    assert counts == [2, 4, 4] and powers[0] < powers[1] <= powers[2]


def test_what_one_costly_choice_leaves_of_the_budget_is_still_spent():
    """A cell of every date worth much at 34 false alarms sets the relaxation's price above
    what a budget of 30 can pay, and a small range worth 5 at 3 is priced out with it: the
    step just below the price offers the date cell only, which does not fit. The small range
    fits in what is left and runs; the date cell, which does not fit, stays out."""
    from heatc.learn.cells.budget import _solve

    def group(*choices):  # (worth, cost) each: the solver's tuples for a group of one cell
        return [(w, c, None, None, 1, 1.0, ((0, k),)) for k, (w, c) in enumerate(choices)]

    dates, small = group((0.0, 0.0), (100.0, 34.0)), group((0.0, 0.0), (5.0, 3.0), (6.0, 40.0))
    assert _solve([dates, small], 30.0, 0.0) == [0, 1]
    assert _solve([dates, small], 2.0, 0.0) == [0, 0]  # nothing fits
    assert _solve([dates, small], 30.0, 2.0) == [0, 0]  # 5 worth for 3 false alarms is under the floor
    assert _solve([dates, small], 40.0, 0.0) == [1, 1]  # a budget that pays for both


def test_a_cell_whose_margin_range_rejects_too_much_runs_with_a_range_that_accepts_its_values():
    """ "hemoglobin A1c 7.2" gives "hemoglobin … 1": the margin policy's range (from the
    inlier quantiles) rejects those 1s, over 10 % of the values; a range from the minimum
    accepts them and still rejects ten times a typical hemoglobin."""
    key = CellKey("hemoglobin", "number", "")
    rng = np.random.default_rng(1)
    vals = [1.0] * 15 + [float(x) for x in np.round(rng.uniform(8, 16, 85), 1)]
    values = {key: spread_values(vals)}
    scored = _scored({key: 3.5})
    assert rejected_share(value_stats(vals), vals) > 0.1
    assert (
        cell_table(
            values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=None), CellContext(sentences=1000)
        )
        == []
    )
    [cell] = cell_table(
        values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=0.75), CellContext(sentences=1000)
    )
    lo, hi = cell.range
    assert lo <= 1.0 and 16 <= hi < 120 and cell.rejected == 0


def test_a_chosen_range_is_written_and_lowered(tmp_path):
    from heatc.heatmap.format import load_heatmap
    from heatc.heatmap.lower import lower
    from heatc.lang.unparse import format_file

    lexicon = _lexicon_with("glucose")
    stats = value_stats([80.0 + i for i in range(100)])
    cell = LearnedCell(CellKey("glucose", "number", ""), 0.93, 2.1, 12, 100, stats, range=(60.0, 250.0))
    doc = heatmap_document(
        name="learned", title="t", lexicon=lexicon, cells=[cell], provenance={}, sensitivity=0.75,
        rule_files=[], tokenizer={"bytes": True},
    )  # fmt: skip
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "")
    hm = load_heatmap(path)
    assert hm.cells[0].range == (60.0, 250.0)
    assert "require v in [60, 250]" in format_file(lower(hm).tree)


def test_an_expect_rejects_lists_every_lowered_rule_that_rejects_its_text(tmp_path):
    """ "coreg 750000 mg" is a value of `coreg … number mg`, of `coreg … number` and of
    `number mg`: the generated `rejects` example lists every one of them that rejects it (an
    expect's `rejects` is exact), and the heatmap builds with its expects."""
    from heatc.heatmap.build import compile_heatmap

    lexicon = _lexicon_with("coreg")
    ck = CellKey
    stats = value_stats([6.25, 12.5, 25.0, 25.0, 50.0] * 10)
    cells = [
        LearnedCell(ck("coreg", "number", "mg"), 0.93, 2.1, 12, 50, stats, range=(3.0, 100.0)),
        LearnedCell(ck("", "number", "mg"), 0.9, 2.0, 12, 50, stats, range=(0.5, 1000.0)),
        LearnedCell(ck("coreg", "number", ""), 0.6, 1.0, 12, 50, stats, range=(3.0, 100.0)),  # not lowered
    ]
    doc = heatmap_document(
        name="learned", title="t", lexicon=lexicon, cells=cells, provenance={}, sensitivity=0.75,
        rule_files=[], tokenizer={"bytes": True},
    )  # fmt: skip
    assert {"text": "coreg 50000 mg.", "rejects": ["coreg_mg", "mg_amount"]} in doc["expects"]
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "")
    compile_heatmap(path)  # runs the expects


def test_the_expects_of_a_date_cell_are_written_as_dates(tmp_path):
    """A date cell's value is the year its date names: its examples are written as dates,
    "ended December 2019." and, a century past the range, "ended December 2130."; the cell of
    every date (`any_date`, `v:date`) reads them too, so its rejection is listed — and the
    heatmap builds with its expects."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.learn.text.evidence import LONE_DATE

    lexicon = _lexicon_with("ended")
    stats = value_stats([2017.0, 2018.0, 2019.0, 2019.0, 2020.0] * 10)
    cell = LearnedCell(CellKey("ended", "date", ""), 0.9, 2.0, 12, 50, stats, range=(None, 2030.0))
    every = LearnedCell(LONE_DATE, 0.8, 1.0, 12, 50, stats, range=(None, 2050.0))
    doc = heatmap_document(
        name="learned", title="t", lexicon=lexicon, cells=[cell, every], provenance={}, sensitivity=0.75,
        rule_files=[], tokenizer={"bytes": True},
    )  # fmt: skip
    assert doc["expects"][:2] == [
        {"text": "ended December 2019.", "passes": ["ended_date"]},
        {"text": "ended December 2130.", "rejects": ["any_date", "ended_date"]},
    ]
    assert {"pair": ["date"], "name": "any_date"}.items() <= doc["cells"][1].items()
    path = tmp_path / "learned.yaml"
    write_heatmap(path, doc, "")
    compile_heatmap(path)  # runs the expects


def test_a_compound_number_word_is_one_numeral_and_keeps_the_teachers_couplings():
    """ "forty-five (45) days": the 45 belongs to "forty-five", not to "five", whose cell
    then holds fives only; a probe labelled with "forty", "-", "five", "(" as four lexemes
    takes the largest of their couplings for the one lexeme "forty-five (" (a number word is
    read where the parenthesis restating it follows)."""
    from heatc.learn.heatmaps.aggregate import _relexed

    plain = _lexicon_with("payment")
    lexicon = plain.with_numerals()
    groups = lexicon.groups()
    assert groups["forty_five"] == groups["five"] == "numeral"
    docs = ["Payment within forty-five (45) days; notice within five (5) days.", "Forty five (45) days."]
    got = collect_values(lexicon, [CellKey("five", "number", ""), CellKey("forty_five", "number", "")], docs)
    assert got[CellKey("five", "number", "")].values == [5.0]
    assert got[CellKey("forty_five", "number", "")].values == [45.0, 45.0]
    text = "Payment within forty-five (45) days."
    old = lex_sentence(plain.program(), text).lexemes
    new = lex_sentence(lexicon.program(), text).lexemes
    assert len(old) == len(new) + 3
    value = next(i for i, x in enumerate(old) if x.raw == b"45")
    coupling = [float(i) for i in range(len(old))]
    coupling[value] = None
    moved, relexed = _relexed(old, new, value, coupling)
    assert new[moved].raw == b"45" and relexed[moved] is None and len(relexed) == len(new)
    forty_five = next(i for i, x in enumerate(new) if x.raw == b"forty-five (")
    covered = (b"forty", b"-", b"five", b"(")
    assert relexed[forty_five] == max(coupling[j] for j, x in enumerate(old) if x.raw in covered)
    # a number word that no parenthesis follows restates nothing: "one 30-minute infomercial"
    assert collect_values(lexicon, [CellKey("one", "number", "")], ["(1) one 30-minute infomercial."]) == {
        CellKey("one", "number", ""): CellValues()
    }


def test_a_number_with_a_scale_word_restated_in_digits_is_a_numeral_of_its_own():
    """ "one hundred twenty (120) days" and "two thousand fourteen (2014)": without a numeral
    of their own, "twenty" and "fourteen" would be the number words before 120 and 2014, and
    their cells would hold 20 and 120 — too wide to notice "twenty (200)". A compound is one
    once the corpus restates it twice, under one name for all its spellings."""
    from heatc.learn.text.lexemes import compound_numerals, is_numeral_name

    docs = [
        "Notice of one hundred twenty (120) days; cure within twenty (20) days.",
        "Upon One-Hundred and Twenty (120) days' notice, or twenty (20) days.",
        "In the year two thousand fourteen (2014) and one hundred (100) units; seven hundred (7 days).",
        "Twenty (20) days; one hundred and six dollars ($106); one hundred twenty (120) days.",
    ]
    found = dict(compound_numerals(docs))
    assert found == {
        "one_hundred_twenty": ("one hundred twenty", "one-hundred and twenty"),
        # once each: no numeral ("seven hundred (7 days)" restates something, "two thousand
        # fourteen (2014)" and "one hundred (100)" once)
    }
    assert dict(compound_numerals(docs, min_count=1)).keys() == {
        "one_hundred_twenty",
        "two_thousand_fourteen",
        "one_hundred",
        "seven_hundred",
    }  # fmt: skip (an amount's "one hundred and six dollars ($106)" is no number word restated)
    assert all(map(is_numeral_name, ["one_hundred_twenty", "one_hundred", "five_thousand", "twenty_five", "ten"]))
    assert not any(map(is_numeral_name, ["at_least", "payment_days", "hundreds", "ten_days", "hundred_thousand"]))
    lexicon = _lexicon_with("notice").with_numerals(found.items())
    assert lexicon.groups()["one_hundred_twenty"] == "numeral"
    keys = [CellKey("twenty", "number", ""), CellKey("one_hundred_twenty", "number", "")]
    got = collect_values(lexicon, keys, docs)
    assert got[keys[0]].values == [20.0, 20.0, 20.0]
    assert got[keys[1]].values == [120.0, 120.0, 120.0]
    assert CellKey("one_hundred_twenty", "number", "").gap == CellKey("twenty", "number", "").gap


def test_a_number_word_restated_in_digits_holds_exactly_its_number():
    """ "thirty (30) days" has one value and typos ("thirty (35)", "thirty (45)"): against its
    own values a substitution is worth next to nothing, so rejecting the 45 is not worth its
    false alarm; a number word restated in digits (`substitutes`: what other number words
    restate) holds its number exactly — a margin would let another term pass."""
    key = CellKey("thirty", "number", "")
    cv = spread_values([30.0] * 200 + [35.0] * 2)
    cv.values.append(45.0)
    cv.per_document[3].append(45.0)
    scored = _scored({key: 3.5})
    pool = np.asarray([15.0] * 50 + [45.0] * 50 + [60.0] * 50 + [30.0] * 50)
    ranges = []
    for substitutes in (None, {key: pool}):
        [cell] = cell_table(
            {key: cv},
            *scored,
            CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
            CellContext(sentences=1000, substitutes=substitutes),
        )
        ranges.append(cell.range)
    assert ranges[0][1] >= 45
    assert ranges[1] == (30.0, 30.0)


def test_a_number_word_needs_few_values_for_its_cell_and_a_keyword_its_support():
    """Its range is the number it restates, no tail to learn: eight "fourteen (14)" make a
    cell that rejects "fourteen (140)", where eight values of any other keyword make none."""
    numeral, keyword = CellKey("fourteen", "number", ""), CellKey("notice", "number", "")
    values = {numeral: spread_values([14.0] * 8, documents=8), keyword: spread_values([14.0] * 8, documents=8)}
    scored = _scored({numeral: 3.5, keyword: 3.5})
    pool = np.asarray([15.0] * 50 + [30.0] * 50 + [140.0] * 50)
    settings = CellsConfig(min_support=20, min_probes=3, sensitivity=0.75)
    cells = cell_table(values, *scored, settings, CellContext(sentences=1000, substitutes={numeral: pool}))
    assert [(c.key, c.range) for c in cells] == [(numeral, (14.0, 14.0))]
    assert cell_table(values, *scored, settings, CellContext(sentences=1000, substitutes={})) == []


def test_unit_swaps_weigh_each_keyword_by_the_units_it_takes():
    """A swap is plausible when two keywords take both units; a keyword that takes many
    units says less about each pair, and a unit's swaps are shared by that evidence."""
    ck = CellKey
    takes = {
        "versed": ["mg", "mcg"], "fentanyl": ["mg", "mcg"], "given": ["mg", "mcg", "grams"],
        "dose": ["mg", "grams"], "patient": ["mg", "cm", "days"],
    }  # fmt: skip
    swaps = unit_swaps([ck(k, "number", u) for k, units in takes.items() for u in units], ladders=())
    assert swaps["mg"] == pytest.approx({"mcg": 2.5 / 4, "grams": 1.5 / 4})  # cm, days: "patient" alone
    assert swaps["mcg"] == {"mg": 1.0} and swaps["grams"] == {"mg": 1.0}  # mcg <-> grams: "given" alone
    assert "cm" not in swaps and "days" not in swaps
    # a hot cell guards its unit's GUARDS_PER_CELL most plausible swaps that its keyword never takes
    takes["aspirin"] = ["mg"]
    takes["heparin"], takes["insulin"] = ["mg", "units"], ["mg", "units"]
    candidates = [ck(k, "number", u) for k, units in takes.items() for u in units]
    guards = unit_guards(candidates, [ck("aspirin", "number", "mg")], {k: "keyword" for k in takes}, ())
    assert GUARDS_PER_CELL == 3
    assert sorted(g.unit for g in guards) == ["grams", "mcg", "units"]


def test_unit_guards_reject_a_unit_the_keyword_never_takes(tmp_path):
    """Which units stand in for one another comes from the keywords that take both; a hot
    cell's keyword that never takes the other unit gets a guard, lowered to a rule that
    rejects any value in it."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.semantics.reference import scan
    from heatc_runtime import Verdict

    ck = CellKey
    candidates = [
        ck("aspirin", "number", "mg"), ck("versed", "number", "mg"), ck("versed", "number", "mcg"),
        ck("fentanyl", "number", "mg"), ck("fentanyl", "number", "mcg"),
        ck("weight", "number", "pounds"), ck("weight", "number", "kg"), ck("", "number", "mg"),
        ck("patient", "number", "mg"), ck("patient", "number", "cm"),
    ]  # fmt: skip
    lexicon = _lexicon_with("aspirin", "versed", "fentanyl", "weight", "patient")
    groups = lexicon.groups()
    hot = [ck("aspirin", "number", "mg"), ck("weight", "number", "pounds")]
    guards = unit_guards(candidates, hot, groups, ladders=())
    # mg -> mcg: two keywords take both; mg -> cm and pounds -> kg: one keyword each, no guard
    assert guards == {ck("aspirin", "number", "mcg"): [(ck("aspirin", "number", "mg"), 1.0)]}
    assert guard_expected([0, 0, 1, 3, 0]) == pytest.approx(1 / 3)
    assert guard_expected([2, 3]) == 0.0

    docs = [f"Aspirin {v} mg daily." for v in (81, 325, 81, 81, 162)] * 8
    mg, mcg = ck("aspirin", "number", "mg"), ck("aspirin", "number", "mcg")
    values = collect_values(lexicon, [mg, mcg], docs)
    scored = _scored({mg: 3.5})
    guard = LearnedCell(mcg, 1.0, 3.5, 3, 40, {}, guards="mg", worth=20.0, expected=0.5)
    cells = cell_table(
        values,
        *scored,
        CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
        CellContext(sentences=1000, guards=(guard,)),
    )
    assert [x.key for x in cells] == [mg, mcg] and cells[1].range == (0.0, 0.0)
    doc = heatmap_document(
        name="guarded", title="t", lexicon=lexicon, cells=cells, provenance={}, sensitivity=0.75, rule_files=[],
        tokenizer={"bytes": True},
    )  # fmt: skip
    path = tmp_path / "guarded.yaml"
    write_heatmap(path, doc)
    program = compile_heatmap(path)[0]
    for text, rejected in (("Aspirin 81 mg daily.", False), ("Aspirin 81 mcg daily.", True)):
        events, _, _ = scan(program, text.encode())
        assert any(e.kind == "match" and e.verdict is Verdict.REJECTED for e in events) == rejected


def test_a_unit_cell_is_narrowed_to_notice_values_of_a_unit_it_is_swapped_with():
    """ "within 30 days" written "within 30 months" puts a days value in the months cell.
    Months run 12–24 with a tail of 36s and 60s; days are mostly 30, 60 and 90. Against its
    own values a range that accepts the tail is worth more (a range notices a slip of the
    values it accepts); against the days a swap would bring, the one that rejects the tail
    and the 30s is."""
    ck = CellKey
    months, days = ck("within", "number", "months"), ck("within", "number", "days")
    cv = spread_values([12.0] * 150 + [24.0] * 40 + [36.0] * 8 + [60.0] * 6)
    src = spread_values([30.0] * 150 + [60.0] * 40 + [90.0] * 40 + [10.0] * 20 + [15.0] * 20)
    swaps = unit_swaps([ck(k, "number", u) for k in ("within", "period") for u in ("months", "days")])
    assert swaps == {"months": {"days": 1.0}, "days": {"months": 1.0}}
    sources = swap_sources({months: cv, days: src}, swaps)
    assert len(sources[months]) == 1 and sources[months][0][0] == 1.0 and len(sources[months][0][1]) == 270
    scored = _scored({months: 3.5})
    ranges = []
    for swapped in (None, {months: sources[months]}):
        [cell] = cell_table(
            {months: cv},
            *scored,
            CellsConfig(min_support=5, min_probes=3, sensitivity=0.75),
            CellContext(sentences=2000, swapped=swapped),
        )
        ranges.append(cell.range)
    assert ranges[0][1] >= 60  # a months range for its own values accepts "30 months"
    # one that knows what a swap brings is narrower, yet keeps the tail margin real tails need
    # (36 months × 1.5): a range rejects the impossible, not the unusual
    assert 54 <= ranges[1][1] < ranges[0][1]


def test_a_keyword_cell_without_a_unit_is_fitted_to_the_values_written_without_one():
    """ "calcium 8.9" is a lab value, "calcium 500 mg" a supplement dose that the rule
    `calcium ..3 v:number` captures too. Fitted to every value, the range reaches 500 and lets
    ten times a calcium pass; fitted to the values written without a unit, it rejects 89 and
    pays for the doses as false alarms."""
    lexicon = _lexicon_with("calcium")
    key = CellKey("calcium", "number", "")
    labs = [f"Calcium {v} today." for v in (8.1, 8.9, 9.4, 9.9, 10.2, 8.6, 9.1, 9.6)] * 10
    doses = [f"Calcium {v} mg daily." for v in (500, 600, 800)] * 4
    values = collect_values(lexicon, [key], labs + doses)
    cv = values[key]
    assert len(cv.values) == 92 and sorted(v for vs in cv.with_unit.values() for v in vs) == sorted([500, 600, 800] * 4)
    assert len(cv.bare().values) == 80 and max(cv.bare().values) == 10.2
    scored = _scored({key: 3.5})
    [cell] = cell_table(
        values, *scored, CellsConfig(min_support=5, min_probes=3, sensitivity=0.75), CellContext(sentences=10_000)
    )
    lo, hi = cell.range if cell.range is not None else margin_range(Stats(**cell.stats), 0.5, 2.0)
    assert lo <= 8.1 and 10.2 <= hi < 81 and cell.rejected == 12  # the doses are its false alarms
    assert cell.stats["n"] == 92 and cell.stats["q99"] < 11
    # a cell no unit ever follows is fitted to all its values, as before
    plain = collect_values(lexicon, [key], labs)[key]
    assert not plain.with_unit and plain.bare() is plain


def test_keywords_too_rare_for_cells_of_their_own_are_pooled_by_the_units_they_take():
    """Drugs named a few times each ("Coreg 6.25 mg", "Nexium 40 mg") never reach a cell's
    support alone; pooled by the units they take they do, and lex as one category. A keyword
    with a cell of its own, one that takes other units, or a family of one stays as it is."""
    ck = CellKey
    lexicon = _lexicon_with("coreg", "nexium", "plavix", "aspirin", "versed", "ancef")
    groups = lexicon.groups()
    candidates = [
        ck("coreg", "number", "mg"), ck("coreg", "number", ""), ck("nexium", "number", "mg"),
        ck("plavix", "number", "mg"), ck("aspirin", "number", "mg"), ck("versed", "number", "mg"),
        ck("versed", "number", "mcg"), ck("ancef", "number", "grams"), ck("coreg", "number", "mg", "consistent"),
    ]  # fmt: skip
    support = dict.fromkeys(candidates, 6) | {ck("aspirin", "number", "mg"): 40}
    families = keyword_families(candidates, support, groups, 20, {c.name for c in lexicon.categories})
    assert families == {"keywords_mg": ["coreg", "nexium", "plavix"]}
    assert in_families(candidates, families) == sorted(
        {
            ck("keywords_mg", "number", "mg"), ck("keywords_mg", "number", "mg", "consistent"),
            ck("aspirin", "number", "mg"), ck("versed", "number", "mg"), ck("versed", "number", "mcg"),
            ck("ancef", "number", "grams"),
        }
    )  # fmt: skip
    pooled = lexicon.with_families(families)
    assert "coreg" not in pooled.by_name() and pooled.by_name()["keywords_mg"].literals == ("coreg", "nexium", "plavix")
    cells = [ck("keywords_mg", "number", "mg")]
    docs = [f"{d} {v} mg daily." for d in ("Coreg", "Nexium", "Plavix") for v in (6.25, 40, 75)] * 3
    assert len(collect_values(pooled, cells, docs)[cells[0]].values) == 27
    # a keyword with a cell of its own (even one without a unit) is not pooled
    support[ck("coreg", "number", "")] = 25
    assert keyword_families(candidates, support, groups, 20, set()) == {"keywords_mg": ["nexium", "plavix"]}


def test_false_alarms_are_counted_in_the_sentences_the_budget_is_a_share_of():
    """The alarm budget is a share of the corpus's sentences; a fragment that is not counted
    as one (a table row over 400 characters) neither adds to the budget nor spends it: its
    values are not counted (`aggregate.counted_text`)."""
    from heatc.learn.heatmaps.aggregate import counted_text

    key = CellKey("glucose", "number", "")
    lexicon = _lexicon_with("glucose")
    table = "GLUCOSE TABLE glucose 16200 " + " ".join(["x"] * 200)
    text = f"Glucose was 162 this morning.\n\n{table}\n\nGlucose was 150 at noon."
    assert len(sentences(text)) == 2
    assert collect_values(lexicon, [key], [text])[key].values == [162, 16200, 150]
    assert collect_values(lexicon, [key], [counted_text(text)])[key].values == [162, 150]


def test_a_rare_word_joins_a_family_on_less_evidence_than_a_cell_needs():
    """ "Keflex 500 mg" and "Celebrex 200 mg", each written twice in the discovery sample, are
    too rare for candidate cells (the plan's `candidate_count`, 5), but twice is enough to show
    which unit a word takes: at `FAMILY_COUNT` they join the mg family, whose guard then
    notices "Keflex 500 g". Words seen once, and words no unit follows, stay out."""
    from heatc.learn.config import LearnConfig
    from heatc.learn.heatmaps.aggregate import rare_word_cells

    assert FAMILY_COUNT < LearnConfig(corpus=[], output=Path("x")).teaching.candidate_count
    sample = [
        "Keflex 500 mg twice daily.", "Discharged on Keflex 500 mg.", "Celebrex 200 mg daily.",
        "Then Celebrex 200 mg at night.", "Lortab 5 mg once.", "Turned 45 today.", "Turned 46 today.",
    ]  # fmt: skip
    wide, names, extra, seen = rare_word_cells(Lexicon(), sample, FAMILY_COUNT)
    assert sorted(extra) == [CellKey("celebrex", "number", "mg"), CellKey("keflex", "number", "mg")]
    assert {"keflex", "celebrex", "turned"} <= names and "lortab" not in names
    assert set(extra) <= set(seen)
    groups = wide.groups()
    families = keyword_families(extra, dict.fromkeys(extra, 2), groups, 20, {c.name for c in wide.categories})
    assert families == {"keywords_mg": ["celebrex", "keflex"]}
    # at the plan's count they have not shown it
    assert rare_word_cells(Lexicon(), sample, 5)[2] == []


def test_a_family_member_written_in_another_unit_too_leaves_the_family():
    """Synthroid, a candidate in mg, is written in mcg twice as well (below the plan's count, at
    `FAMILY_COUNT`): it takes both units, so it does not pool with the drugs dosed in mg alone,
    whose guard would reject "Synthroid 100 mcg"."""
    from heatc.learn.heatmaps.aggregate import rare_word_cells

    sample = ["Keflex 500 mg daily.", "Keflex 250 mg.", "Celebrex 200 mg daily.", "Celebrex 100 mg.",
              "Synthroid 0.05 mg daily.", "Synthroid 0.1 mg.", "Synthroid 100 mcg daily.", "Synthroid 75 mcg."]  # fmt: skip
    wide, _, _, seen = rare_word_cells(Lexicon(), sample, FAMILY_COUNT)
    groups = wide.groups()
    mg = [CellKey(w, "number", "mg") for w in ("keflex", "celebrex", "synthroid")]
    assert CellKey("synthroid", "number", "mcg") in seen
    taken = {c.name for c in wide.categories}
    assert keyword_families(mg, dict.fromkeys(mg, 2), groups, 20, taken) == {
        "keywords_mg": ["celebrex", "keflex", "synthroid"]
    }  # without the cells seen on a member's evidence, Synthroid pools with the mg drugs
    assert keyword_families(mg, dict.fromkeys(mg, 2), groups, 20, taken, seen) == {
        "keywords_mg": ["celebrex", "keflex"]
    }


def test_a_member_the_corpus_writes_in_another_unit_of_its_ladder_leaves_the_family():
    """Over the whole corpus, not the discovery sample: "Synthroid 100 mcg" written twice takes
    Synthroid out of the family of drugs dosed in mg (whose guard rejects mcg); the family keeps
    the others, and a family left with one member is no family."""
    from heatc.learn.cells.guards import ladder_units, members_in_other_units
    from heatc.learn.heatmaps.aggregate import _dosed_alike

    assert ladder_units({"mg"}) == {"mcg", "grams", "kg", "pounds"} and ladder_units({"celsius"}) == {"fahrenheit"}
    families = {"keywords_mg": ["celebrex", "keflex", "synthroid"]}
    written = {CellKey("synthroid", "number", "mcg"): 2, CellKey("keflex", "number", "grams"): 1}
    assert members_in_other_units(families, written) == {"keywords_mg": ["synthroid"]}
    lexicon = Lexicon().with_keywords(["celebrex", "keflex", "synthroid"])
    seen = [CellKey(w, "number", "mg") for w in families["keywords_mg"]]
    texts = ["Keflex 500 mg daily. Celebrex 200 mg. Synthroid 0.05 mg.", "Synthroid 100 mcg daily. Synthroid 75 mcg."]
    assert _dosed_alike(families, seen, lexicon, texts) == {"keywords_mg": ["celebrex", "keflex"]}
    assert _dosed_alike({"keywords_mg": ["keflex", "synthroid"]}, seen, lexicon, texts) == {}
    # mcg nowhere, and no member dosed below a milligram: all stay
    assert _dosed_alike(families, seen, lexicon, ["Keflex 500 mg. Celebrex 200 mg. Synthroid 2 mg."]) == families


def test_a_member_dosed_below_one_of_the_familys_unit_leaves_the_family():
    """Digoxin 0.125 mg is digoxin 125 mcg: a drug dosed in fractions of a milligram is written
    in micrograms as readily, so a family of drugs dosed in mg, whose guard rejects mcg, would
    flag it written correctly although the corpus never shows it in mcg. A family that takes mcg
    already keeps such members (its guard does not reject mcg); a dose of a few mg stays."""
    from heatc.learn.cells.guards import members_below_one, rung_below
    from heatc.learn.heatmaps.aggregate import _dosed_alike

    assert [rung_below(u) for u in ("mg", "liters", "mcg", "percent")] == ["mcg", "ml", None, None]
    lexicon = Lexicon().with_keywords(["celebrex", "digoxin", "keflex", "lasix"])
    families = {"keywords_mg": ["celebrex", "digoxin", "keflex"]}
    seen = [CellKey(w, "number", "mg") for w in families["keywords_mg"]]
    texts = ["Keflex 500 mg daily. Celebrex 200 mg. Digoxin 0.125 mg daily.", "Digoxin 0.25 mg. Digoxin 1 mg."]
    assert _dosed_alike(families, seen, lexicon, texts) == {"keywords_mg": ["celebrex", "keflex"]}
    values = collect_values(lexicon, [CellKey("digoxin", "number", "mg"), CellKey("keflex", "number", "mg")], texts)
    assert members_below_one(families, values) == {"keywords_mg": ["digoxin"]}
    # Digoxin's doses mostly a milligram or more: it stays
    assert _dosed_alike(families, seen, lexicon, [*texts, "Digoxin 2 mg. Digoxin 3 mg."]) == families
    # a family that takes mcg too has no mcg guard to fear
    both = [CellKey(w, "number", u) for w in families["keywords_mg"] for u in ("mg", "mcg")]
    assert _dosed_alike(families, both, lexicon, texts) == families


def test_a_cell_without_a_unit_is_scored_where_no_unit_follows():
    """ "heart rate 88 bpm": the value couples with bpm, and that occurrence is evidence for
    the cell `heart rate … number bpm`; the cell `heart rate … number` is scored by "heart
    rate 88" alone."""
    lexicon = _lexicon_with("heart rate")
    groups = lexicon.groups()
    program = lexicon.program()
    c = Couplings()
    for text in ("Heart rate 88 bpm today.", "Heart rate 92 today."):
        s = lex_sentence(program, text)
        [occ] = occurrences(s, groups)
        coupling = [None if k == occ.value else 1.0 + k for k in range(len(s.lexemes))]
        c.add(s, occ, coupling)
    bare, with_unit = CellKey("heart_rate", "number", ""), CellKey("heart_rate", "number", "bpm")
    assert len(c.by_cell[bare]) == 1 and len(c.by_cell[with_unit]) == 1
    assert CellKey("", "number", "bpm") in c.by_cell


def test_the_scores_and_the_top_up_count_the_same_occurrences_as_evidence():
    """One predicate (`evidence_of`) says which probed occurrence is evidence of which
    cell: `Couplings.add` scores a cell from exactly those probes (where the teacher gave a
    coupling), and the top-up counts exactly those toward a cell's probes."""
    lexicon = _lexicon_with("heart rate", "within", "payment")
    groups = lexicon.groups()
    program = lexicon.program()
    texts = (
        "Heart rate 88 bpm today.", "Heart rate 92 today.", "Payment is due within 30 days of receipt.",
        "Then 5 mg and heart rate 70 bpm.",
    )  # fmt: skip
    counted, scored = Counter(), Counter()
    for text in texts:
        s = lex_sentence(program, text)
        for occ in occurrences(s, groups):
            c = Couplings()
            c.add(s, occ, [None if k == occ.value else 1.0 + k for k in range(len(s.lexemes))])
            scored.update({k: len(xs) for k, xs in c.by_cell.items()})
            counted.update(k for k in occ.keys if evidence_of(occ, k))
    assert scored == counted
    assert counted[CellKey("heart_rate", "number", "")] == 1  # "Heart rate 92" alone
    assert counted[CellKey("heart_rate", "number", "bpm")] == 2
    assert any(k.check == "consistent" for k in counted)


def test_a_top_up_probes_the_values_the_plan_left_short():
    """The plan probes the first two values of a sentence: in "Sodium 141, potassium 4.0,
    chloride 104" chloride is never probed and its cell gets no score. The top-up walks the
    discovery sample again and probes the values of the cells still short of probes_per_cell
    — chloride's, not sodium's again — within its limits, and never a value already probed."""
    from heatc.learn.config import LearnConfig, TeachingConfig
    from heatc.learn.teaching.labelling import _probe_lexemes, topup_plan
    from heatc.learn.teaching.plan import plan, plan_lexicon
    from heatc.learn.text.corpus import Document

    rng = np.random.default_rng(0)
    docs = [
        Document(
            f"d{i}",
            f"Sodium {rng.integers(130, 146)}, potassium {rng.integers(35, 50) / 10}, chloride "
            f"{rng.integers(95, 110)} on day {i}.",
        )
        for i in range(40)
    ]
    config = LearnConfig(
        corpus=[],
        output=Path("x.yaml"),
        teaching=TeachingConfig(label_sentences=0, candidate_count=3, probes_per_cell=8),
    )
    p = plan(config, docs)
    program = plan_lexicon(p).program()
    groups = {c.name: c.group for c in plan_lexicon(p).categories}
    chloride = CellKey("chloride", "number", "")
    assert chloride in p.candidates
    # what the labeller probes: the first two values of each planned sentence
    records = []
    for s in p.teacher_sentences:
        lx = lex_sentence(program, s)
        values = _probe_lexemes(lx, groups, set(p.candidates), config.teaching.probes_per_sentence)
        records.append({"text": s, "probes": [[v, []] for v in values]})

    def probed(recs) -> Counter:
        n: Counter = Counter()
        for r in recs:
            lx = lex_sentence(program, r["text"])
            for occ in occurrences(lx, groups):
                if occ.value in {v for v, _ in r["probes"]}:
                    n.update(occ.keys)
        return n

    assert probed(records)[chloride] == 0
    extra = topup_plan(config, p, records, docs)
    assert extra, "no top-up"
    after = probed(records + [{"text": s, "probes": [[v, []] for v in vs]} for s, vs in extra])
    assert after[chloride] == config.teaching.probes_per_cell
    assert all(len(vs) <= config.teaching.topup_per_sentence for _, vs in extra)
    already = {r["text"]: {v for v, _ in r["probes"]} for r in records}
    assert not any(set(vs) & already.get(s, set()) for s, vs in extra)
    # the limit holds, and 0 turns the top-up off
    assert (
        sum(
            len(vs)
            for _, vs in topup_plan(
                dataclasses.replace(config, teaching=dataclasses.replace(config.teaching, topup_probes=5)),
                p,
                records,
                docs,
            )
        )
        == 5
    )
    assert (
        topup_plan(
            dataclasses.replace(config, teaching=dataclasses.replace(config.teaching, topup_probes=0)), p, records, docs
        )
        == []
    )


def test_units_next_to_each_other_on_a_ladder_are_a_plausible_swap_without_keywords():
    """No keyword takes both mL and L ("blood loss 500 mL" is never written in litres), yet
    "500 L" is the classic slip; where keywords show no swap within a unit's quantity, the
    seed lexicon's ladders of units make a swap with the next unit up or down plausible (mg
    with g, not kg), and a hot cell guards its own quantity's units first."""
    ck = CellKey
    takes = {
        "blood_loss": ["ml"], "fluids": ["ml"], "incision": ["cm", "ml"], "measuring": ["cm", "ml"],
        "lidocaine": ["ml", "minutes"], "marcaine": ["ml", "minutes"], "": ["liter_symbol"],
        "aspirin": ["mg"], "weight": ["kg"], "ancef": ["grams"],
    }  # fmt: skip
    candidates = [ck(k, "number", u) for k, units in takes.items() for u in units]
    assert "liter_symbol" not in unit_swaps(candidates, ladders=()).get("ml", {})
    swaps = unit_swaps(candidates)
    assert swaps["ml"] == pytest.approx({"cm": 2 / 5, "minutes": 2 / 5, "liter_symbol": 1 / 5})
    assert swaps["liter_symbol"] == {"ml": 1.0}
    assert "liters" not in swaps["ml"]  # no candidate cell uses it
    assert set(swaps["mg"]) == {"grams"} and set(swaps["grams"]) == {"mg", "kg"}  # mg -> kg: two rungs apart
    # where keywords show a swap within the quantity, the ladder's neighbours count for little
    # (SHOWN_LADDER_EVIDENCE) and the swaps the keywords show stay in front
    time = {"within": ["days", "months"], "notice": ["days", "months"], "period": ["weeks"], "response": ["hours"]}
    timed = unit_swaps([ck(k, "number", u) for k, units in time.items() for u in units])
    assert timed["days"] == pytest.approx({"months": 0.8, "hours": 0.1, "weeks": 0.1})
    assert set(timed["weeks"]) == {"days", "months"}
    groups = {k: "keyword" for k in takes if k}
    guards = unit_guards(candidates, [ck("blood_loss", "number", "ml")], groups)
    # its quantity's first, then the likeliest (GUARDS_PER_CELL of them)
    assert sorted(g.unit for g in guards) == ["cm", "liter_symbol", "minutes"]
    before = unit_guards(candidates, [ck("blood_loss", "number", "ml")], groups, ladders=())
    assert sorted(g.unit for g in before) == ["cm", "minutes"]


def test_the_teacher_reads_a_bounded_share_when_the_student_scores_the_rest():
    from heatc.learn.config import DistilConfig, LearnConfig, TeachingConfig
    from heatc.learn.teaching.plan import teacher_share

    probe, label = [f"p{i}" for i in range(100)], [f"l{i}" for i in range(40)]
    cfg = LearnConfig(corpus=[], output=Path("x.yaml"), teaching=TeachingConfig(teacher_sentences=40))
    chosen = teacher_share(cfg, probe, label)
    assert chosen == probe[:30] + label[:10]  # three quarters probe sentences, first met first
    assert (
        teacher_share(
            LearnConfig(corpus=[], output=Path("x.yaml"), teaching=TeachingConfig(teacher_sentences=0)), probe, label
        )
        == probe + label
    )
    no_student = LearnConfig(
        corpus=[],
        output=Path("x.yaml"),
        teaching=TeachingConfig(teacher_sentences=40),
        distil=DistilConfig(student=False),
    )
    assert teacher_share(no_student, probe, label) == probe + label
    assert teacher_share(cfg, probe[:5], label[:5]) == probe[:5] + label[:5]  # fewer than the bound: all
    # a corpus with few candidate cells: fewer teacher sentences (at least MIN_TEACHER, and
    # TEACHER_PER_CELL per candidate), never more than the bound
    from heatc.learn.teaching.plan import MIN_TEACHER, TEACHER_PER_CELL

    probe, label = [f"p{i}" for i in range(2000)], [f"l{i}" for i in range(1500)]
    wide = LearnConfig(corpus=[], output=Path("x.yaml"), teaching=TeachingConfig(teacher_sentences=400))
    assert len(teacher_share(wide, probe, label, candidates=10)) == MIN_TEACHER
    assert len(teacher_share(wide, probe, label, candidates=90)) == 90 * TEACHER_PER_CELL
    assert len(teacher_share(wide, probe, label, candidates=657)) == 400


def test_a_false_alarm_is_spent_only_where_it_buys_min_worth():
    """A budget larger than a cell needs (λ = 0) runs it with the range that notices most,
    whatever that range rejects: amounts in millions, most of them 4 to 900, and three
    clean "$1 million", "$1.6 million" the lower bound is fitted just past. With
    `min_worth`, each false alarm a narrower range adds must buy that much, and the cell runs
    with a bound that accepts them and still rejects a typical amount written in thousands
    (÷1000)."""
    key = CellKey("", "number", "scale_million")
    vals = [float(x) for x in np.round(np.geomspace(4.0, 900.0, 200), 1)] + [1.0, 1.0, 1.6]
    values = {key: spread_values(vals)}
    scored = _scored({key: 3.5})
    settings = CellsConfig(min_support=5, min_probes=3, alarm_budget=0.05, sensitivity=0.75)
    [spent] = cell_table(values, *scored, settings, CellContext(sentences=10_000))
    [thrifty] = cell_table(values, *scored, dataclasses.replace(settings, min_worth=4.0), CellContext(sentences=10_000))
    assert spent.rejected == 3 and spent.range[0] > 1.6
    lo, _ = thrifty.range
    assert thrifty.rejected == 0 and float(np.median(vals)) / 1000 < lo <= 1.0


def test_a_value_written_bare_has_a_cell_of_its_own():
    """ "Sodium 138, potassium 4.0." — a value the list's comma or the sentence's end follows
    is written bare: `sodium_value_bare` reads those values only, so a dose of "sodium
    bicarbonate 650 mg" never widens the range a lab value takes (the rule language cannot say
    "no unit after"; the punctuation after the value says it)."""
    lexicon = _lexicon_with("sodium", "potassium")
    groups = lexicon.groups()
    text = "Sodium 138, potassium 4.0. Sodium bicarbonate 650 mg, sodium 140 mEq/L."
    s = lex_sentence(lexicon.program(), text)
    names = [sorted(k.name for k in o.keys) for o in occurrences(s, groups)]
    assert names[:2] == [["sodium_value", "sodium_value_bare"], ["potassium_value", "potassium_value_bare"]]
    assert "sodium_value_bare" not in names[2] and "sodium_value_bare" not in names[3]
    bare = CellKey("sodium", "number", "item_end")
    assert bare.ends_value and not bare.has_unit and bare.pattern() == "sodium ..3 v:number (item_end | sentence_end)"
    values = collect_values(lexicon, [bare, CellKey("sodium", "number", "")], [text])
    assert values[bare].values == [138.0]
    assert values[CellKey("sodium", "number", "")].values == [138.0, 650.0, 140.0]


def test_no_bare_cell_where_a_rule_file_takes_the_comma():
    """A hand-written rule file that declares "," and "，" leaves the lexicon no `item_end`:
    a value before a sentence end then makes no bare cell, whose rule would name a class
    that does not exist."""
    lexicon = Lexicon().without_literals([",", "，"]).with_keywords(["sodium"])
    assert "item_end" not in lexicon.groups()
    s = lex_sentence(lexicon.program(), "Sodium 138. Sodium 140.")
    assert all(not k.ends_value for o in occurrences(s, lexicon.groups()) for k in o.keys)
