"""tests/corpus_case.py: a failing property-test example becomes a corpus case whose
expectations are the reference interpreter's, marked for review."""

import subprocess
import sys

import pytest
from corpus_case import MARKER, case_file, failure_line, main, read_failures
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.conformance_harness import check_case, check_document
from support.conformance_schema import CorpusError, load_corpus
from support.strategies import reported

from heatc.verify.backends import open_session, run_document

RULES = (
    'ruleset t\nclass g keyword = "glucose", "血糖"\nclass u unit = "mg/dL"\nclass stop punct = "."\n'
    "triggers {\n  at stop\n  every 2\n}\n"
    "rule r heat 0.9 {\n  match g ..3 v:number u\n  require v in [10, 2000]\n}\n"
    "rule s heat 0.5 {\n  match g ..3 v:number u\n  lock c = v\n}\n"
)
# a CJK keyword cut between chunks, an empty chunk, bytes that are not UTF-8, a conflict
PIECES = ["Glucose 5000 mg/dL. 血".encode(), "糖 95 mg/dL\xff.".encode() + b"\xfe", b"", b"glucose 20 mg/dL"]


def _reviewed(text: str) -> str:
    return text.replace("description: 'UNREVIEWED", "description: 'reviewed")


def test_the_failure_line_reads_back():
    line = failure_line(RULES, PIECES, "sequence 1")
    (f,) = read_failures(f"E   AssertionError\n{line}\nFalsifying example: ...\n")
    assert (f.rules, f.pieces, f.label) == (RULES, PIECES, "sequence 1")
    with pytest.raises(ValueError, match="does not parse"):
        read_failures(MARKER + " {not json")


@pytest.mark.parametrize("pieces", [PIECES, [b"".join(PIECES)], [b"glucose 95 mg/dL"]], ids=["fed", "whole", "utf8"])
def test_the_written_case_holds_on_every_path(tmp_path, pieces):
    text = case_file("made", read_failures(failure_line(RULES, pieces)))
    (tmp_path / "made.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match="UNREVIEWED"):
        load_corpus(tmp_path)  # the corpus refuses it until a human has reviewed it
    (tmp_path / "made.yaml").write_text(_reviewed(text), encoding="utf-8")
    (case,), _ = load_corpus(tmp_path)
    assert (case.rules, case.input, case.chunks) == (RULES, b"".join(pieces), pieces if len(pieces) > 1 else None)
    program = compile_cached(case.rules)
    lexemes = run_document("reference", program, case.input)[2]["lexemes"]
    for backend in ("reference", "wasm"):
        assert check_case(case, program, lambda p, b=backend: open_session(b, p), lexemes) == []
    assert check_document(case, program, lambda p, d: run_document("wasm", p, d), lexemes) == []
    if len(pieces) > 1:
        assert "chunks_hex:" in text and "input_hex:" in text and case.snapshots is not None


def test_expectations_are_the_reference_interpreters():
    """Spot-checked by hand against docs/semantics.md: 5000 is outside [10, 2000]; s locks
    c = 5000 at its first match, so 95 and 20 conflict with it."""
    text = case_file("made", read_failures(failure_line(RULES, PIECES)))
    assert "{kind: match, rule: r, verdict: REJECTED, text: Glucose 5000 mg/dL, start: 0, end: 18, " in text
    assert "failed: 'v in [10, 2000]'}" in text
    assert "rule: s, verdict: REJECTED, text: glucose 20 mg/dL" in text
    assert "conflict: {channel: c, value: 5000.0, text: Glucose 5000 mg/dL, start: 0, end: 18}" in text
    assert "verdicts: {r: REJECTED, s: REJECTED}" in text


def test_several_failures_become_numbered_cases_of_one_file(tmp_path):
    lines = "\n".join(failure_line(RULES, [p], f"sequence {i}") for i, p in enumerate(PIECES[::3]))
    (tmp_path / "two.yaml").write_text(_reviewed(case_file("two", read_failures(lines))), encoding="utf-8")
    assert [c.name for c in load_corpus(tmp_path)[0]] == ["two_1", "two_2"]
    with pytest.raises(ValueError, match="different rule sets"):
        case_file("x", read_failures(lines + "\n" + failure_line(RULES + "\n", [b"x"])))


def test_the_command_line(tmp_path, capsys):
    failure = tmp_path / "failure.txt"
    failure.write_text("FAILED tests/test_wasm_differential.py\n" + failure_line(RULES, PIECES) + "\n")
    out = tmp_path / "new.yaml"
    assert main(["brand_new_case", str(failure), "-o", str(out)]) == 0
    assert "name: brand_new_case" in out.read_text()
    assert main(["brand_new_case", str(failure), "-o", str(out)]) == 2  # never overwrites
    assert main(["chinese_term", str(failure)]) == 2  # a name the corpus has
    assert main(["x", str(tmp_path / "empty.txt")]) == 2
    err = capsys.readouterr().err
    assert "already has cases named chinese_term" in err and "No such file" in err
    r = subprocess.run(
        [sys.executable, str(REPO / "tests" / "corpus_case.py"), "from_stdin"],
        input=failure_line(RULES, [b"glucose 5 mg/dL"]), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "name: from_stdin" in r.stdout and "verdict: REJECTED" in r.stdout


def test_a_failing_property_prints_a_line_the_tool_reads():
    """What the differential tests print on a failure (strategies.reported) is what the tool
    reads: run a property that always fails and read its notes."""

    @settings(max_examples=5, database=None)
    @given(st.sampled_from([b"glucose 5 mg/dL", b"glucose 7 mg/dL"]))
    def always_fails(stream):
        with reported(RULES, [stream[:3], stream[3:]]):
            raise AssertionError("the backends disagree")

    with pytest.raises(AssertionError) as info:
        always_fails()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    (f,) = read_failures(notes)
    assert f.rules == RULES and f.data == b"glucose 5 mg/dL" and len(f.pieces) == 2
