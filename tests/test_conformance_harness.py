"""The conformance harness itself, on small corpora written to temporary directories: it
refuses what would make a case test less (unknown, missing or doubled keys, names used
twice, stray files), and compares every expectation it is given."""

import textwrap

import pytest
from support import compile_cached
from support.conformance_harness import check_case, check_document, check_error_case
from support.conformance_schema import CorpusError, load_corpus

from heatc.errors import HeatError
from heatc.lang.compiler import compile_source
from heatc.verify.backends import open_session, run_document

RULES = """\
rules: |
  ruleset t
  class glucose keyword = "glucose"
  class mg_dl unit = "mg/dL"
  rule r heat 0.9 {
    match glucose ..3 v:number mg_dl
    require v in [10, 2000]
  }
"""
REJECTED = '{kind: match, rule: r, verdict: REJECTED, text: "glucose 5000 mg/dL", captures: {v: 5000}, failed: "v in [10, 2000]"}'


def corpus(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


def run_file(cases: str, description: str = "t") -> str:
    return f"description: {description}\n" + RULES + "cases:\n" + textwrap.indent(textwrap.dedent(cases), "  ")


def assert_reports(errors: list[str], expected: str | None) -> None:
    """No difference reported when none is expected, else one that says `expected`."""
    assert (errors == []) if expected is None else any(expected in e for e in errors), errors


def problems(tmp_path, files) -> str:
    with pytest.raises(CorpusError) as info:
        load_corpus(corpus(tmp_path, files))
    return str(info.value)


GOOD_CASE = f"""\
- name: too_high
  input: "glucose 5000 mg/dL"
  events:
    - {REJECTED}
  verdicts: {{r: REJECTED}}
"""


def test_a_good_corpus_loads_and_passes(tmp_path):
    cases, errors = load_corpus(corpus(tmp_path, {"a.yaml": run_file(GOOD_CASE)}))
    assert [c.name for c in cases] == ["too_high"] and errors == []
    program = compile_cached(cases[0].rules)
    assert check_case(cases[0], program, lambda p: open_session("reference", p), 3) == []


def test_a_misspelt_key_is_refused_with_the_file_case_key_and_a_suggestion(tmp_path):
    case = GOOD_CASE.replace("captures:", "capture:")
    message = problems(tmp_path, {"a.yaml": run_file(case)})
    assert "a.yaml:" in message and 'case "too_high", events[0]' in message
    assert 'unknown key "capture" in a match event (did you mean "captures"?)' in message
    assert "allowed: kind, rule, verdict, text, text_hex, start, end, captures, failed, conflict" in message
    assert 'a match event needs "captures"' in message


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("  verdicts:", "  verdict:", 'unknown key "verdict" in a case (did you mean "verdicts"?)'),
        ("  events:\n", "  event:\n", 'a case needs "events"'),
        ("  input:", "  inputs:", "a case needs exactly one of input, input_hex"),
        ("failed:", "fail:", 'unknown key "fail" in a match event (did you mean "failed"?)'),
        ('failed: "v in [10, 2000]"', 'failed: "v in [10, 2000]", conflict: {channel: c, value: 1, text: x}',
         "a match event takes at most one of failed, conflict"),
        (', failed: "v in [10, 2000]"', "", "a REJECTED match event needs failed or conflict"),
        ("verdict: REJECTED,", "verdict: rejected,", "'rejected' must be CONFIRMED or REJECTED"),
        ("{r: REJECTED}", "{r: PENDING}", "'PENDING' must be CONFIRMED or REJECTED"),
        ("kind: match,", "kind: matched,", "needs \"kind: match or kind: anchor\", not 'matched'"),
        ("captures: {v: 5000}", "captures: {v: yes}", "True must be a number or a class name"),
        ("- name: too_high", "- nam: too_high", 'unknown key "nam" in a case (did you mean "name"?)'),
    ],
)  # fmt: skip
def test_every_level_is_checked(tmp_path, old, new, expected):
    assert old in GOOD_CASE
    assert expected in problems(tmp_path, {"a.yaml": run_file(GOOD_CASE.replace(old, new, 1))})


def test_unknown_and_missing_top_level_keys(tmp_path):
    text = run_file(GOOD_CASE).replace("description:", "descripton:")
    message = problems(tmp_path, {"a.yaml": text})
    assert 'unknown key "descripton" in a file (did you mean "description"?)' in message
    assert 'a file needs "description"' in message


def test_a_name_used_twice_anywhere_in_the_corpus_is_refused(tmp_path):
    files = {"a.yaml": run_file(GOOD_CASE), "b.yaml": run_file(GOOD_CASE)}
    message = problems(tmp_path, files)
    assert "b.yaml:" in message and 'case "too_high": the name is already used at' in message
    assert "a.yaml:" in message.split("already used at")[1]


def test_a_name_shared_by_a_run_case_and_an_error_case_is_refused(tmp_path):
    errors = "description: e\ncases:\n  - {name: too_high, source: 'x', errors: [{line: 1, column: 1, message: m}]}\n"
    assert "the name is already used" in problems(tmp_path, {"a.yaml": run_file(GOOD_CASE), "errors/e.yaml": errors})


def test_a_key_written_twice_is_refused(tmp_path):
    case = GOOD_CASE.replace('input: "glucose 5000 mg/dL"', 'input: "glucose 5000 mg/dL"\n  input: "glucose 50 mg/dL"')
    assert 'the key "input" appears twice in one mapping' in problems(tmp_path, {"a.yaml": run_file(case)})


def test_stray_files_are_refused(tmp_path):
    message = problems(tmp_path, {"a.yaml": run_file(GOOD_CASE), "b.yml": run_file(GOOD_CASE)})
    assert "b.yml: not part of the corpus format" in message


def test_an_unreviewed_file_is_refused(tmp_path):
    message = problems(tmp_path, {"a.yaml": run_file(GOOD_CASE, description="'UNREVIEWED: from the tool'")})
    assert "the description starts with UNREVIEWED" in message


def test_chunks_must_join_to_the_input(tmp_path):
    case = GOOD_CASE.replace("  events:", '  chunks: ["glucose ", "500 mg/dL"]\n  events:')
    assert "the chunks do not join to the input" in problems(tmp_path, {"a.yaml": run_file(case)})


def _one(tmp_path, case: str):
    return load_corpus(corpus(tmp_path, {"a.yaml": run_file(case)}))[0][0]


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ('failed: "v in [10, 2000]"', 'failed: "v in [10, 200]"', "failed 'v in [10, 2000]', expected 'v in [10, 200]'"),
        ("captures: {v: 5000}", "captures: {v: 5000, w: 1}", "captures {'v': 5000.0}, expected {'v': 5000, 'w': 1}"),
        ("captures: {v: 5000}", 'captures: {v: "5000"}', "captures {'v': 5000.0}, expected {'v': '5000'}"),
        ("captures: {v: 5000}", "captures: {v: 5000}, start: 1", "start 0, expected 1"),
        ("captures: {v: 5000}", "captures: {v: 5000}, end: 17", "end 18, expected 17"),
        ('text: "glucose 5000 mg/dL"', 'text_hex: "00"', "span b'glucose 5000 mg/dL' [0, 18), expected b'\\x00'"),
        ("{r: REJECTED}", "{r: CONFIRMED}", "rule r is REJECTED, expected CONFIRMED"),
        ("{r: REJECTED}", "{q: REJECTED}", "names rules the program does not have: ['q']"),
    ],
)  # fmt: skip
def test_every_stated_expectation_is_compared_exactly(tmp_path, old, new, expected):
    case = _one(tmp_path, GOOD_CASE.replace(old, new, 1))
    errors = check_case(case, compile_cached(case.rules), lambda p: open_session("reference", p), 3)
    assert_reports(errors, expected)


def test_a_wrong_snapshot_and_counters_are_reported(tmp_path):
    case = _one(tmp_path, GOOD_CASE + "  snapshots: [{verdicts: {r: REJECTED}, events: 0}]\n")
    errors = check_case(case, compile_cached(case.rules), lambda p: open_session("reference", p), 3)
    assert errors == ["a.yaml::too_high [whole]: snapshot 0 has 1 events, expected 0"]
    errors = check_case(case, compile_cached(case.rules), lambda p: open_session("reference", p), 4)
    assert "counters" in errors[0] and "'lexemes': 4" in errors[0]


def test_the_scan_path_is_compared_too(tmp_path):
    case = _one(tmp_path, GOOD_CASE)
    program = compile_cached(case.rules)
    assert check_document(case, program, lambda p, d: run_document("wasm", p, d), 3) == []
    events, verdicts, counters = run_document("wasm", program, case.input)

    def wrong_counters(p, d):
        return events, verdicts, {**counters, "tokens": 2}

    assert "counters" in check_document(case, program, wrong_counters, 3)[0]
    assert "0 events, expected 1" in check_document(case, program, lambda p, d: ([], verdicts, counters), 3)[0]


def test_only_the_last_snapshot_may_be_final(tmp_path):
    case = _one(tmp_path, GOOD_CASE)

    class Twice:
        def __init__(self, program):
            self.m = open_session("reference", program)

        def feed(self, data):
            return self.m.feed(data)

        def finish(self):
            snaps = self.m.finish()
            return snaps + snaps

    errors = check_case(case, compile_cached(case.rules), Twice, 3)
    assert any("marked final" in e for e in errors), errors


ERRORS = """\
description: e
cases:
  - name: bad
    source: |
      class glucose keyword = "glucose"
      rule r { match glucos }
    errors:
      - {line: 2, column: 16, message: 'unknown class "glucos"', notes: ['did you mean "glucose"?']}
"""


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (None, None, None),
        ("column: 16", "column: 15", "expected"),
        (", notes: ['did you mean \"glucose\"?']", "", "expected"),
        ("match glucos", "match glucose", "compiled without an error"),
        ("unknown class", "unknown clas", "expected"),
    ],
)
def test_error_cases_compare_every_diagnostic_exactly(tmp_path, old, new, expected):
    text = ERRORS if old is None else ERRORS.replace(old, new)
    case = load_corpus(corpus(tmp_path, {"errors/e.yaml": text}))[1][0]
    errors = check_error_case(case, compile_source, HeatError)
    assert_reports(errors, expected)


def test_error_case_schema(tmp_path):
    message = problems(tmp_path, {"errors/e.yaml": ERRORS.replace("message:", "mesage:")})
    assert 'unknown key "mesage" in a diagnostic (did you mean "message"?)' in message
    assert 'a diagnostic needs "message"' in message


LOCK = """\
description: t
rules: |
  ruleset t
  class dose keyword = "dose"
  class mg unit = "mg"
  rule d heat 0.9 {
    match dose v:number mg
    consistent v
  }
cases:
  - name: conflict
    input: "dose 5 mg, dose 6 mg"
    events:
      - {kind: match, rule: d, verdict: CONFIRMED, text: "dose 5 mg", captures: {v: 5}}
      - {kind: match, rule: d, verdict: REJECTED, text: "dose 6 mg", captures: {v: 6},
         conflict: {channel: d.v, value: 5, text: "dose 5 mg", start: 0, end: 9}}
    verdicts: {d: REJECTED}
"""


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (None, None, None),
        ("channel: d.v", "channel: d.w", "conflict channel d.v, expected d.w"),
        ("value: 5,", "value: 6,", "conflict value 5.0, expected 6"),
        ('text: "dose 5 mg", start', 'text: "dose 6 mg", start', "conflict span b'dose 5 mg' [0, 9), expected b'dose 6 mg'"),
        ("end: 9", "end: 8", "conflict end 9, expected 8"),
    ],
)  # fmt: skip
def test_conflicts_are_compared_exactly(tmp_path, old, new, expected):
    text = LOCK if old is None else LOCK.replace(old, new)
    case = load_corpus(corpus(tmp_path, {"a.yaml": text}))[0][0]
    errors = check_case(
        case, compile_cached(case.rules), lambda p: open_session("reference", p), 7
    )  # dose 5 mg , dose 6 mg
    assert_reports(errors, expected)


def test_a_case_names_the_runners_that_skip_it_and_why(tmp_path):
    case = GOOD_CASE + '  skip: {op: "the ops have no finish for a stream"}\n'
    loaded = load_corpus(corpus(tmp_path, {"a.yaml": run_file(case)}))[0][0]
    assert loaded.skipped_by("op") == "a.yaml::too_high is not run on op: the ops have no finish for a stream"
    assert loaded.skipped_by("wasm") is None


def test_a_skip_names_a_known_runner_with_a_reason(tmp_path):
    case = GOOD_CASE + '  skip: {natve: "typo"}\n'
    assert "skip names no runner: natve" in problems(tmp_path, {"a.yaml": run_file(case)})
    case = GOOD_CASE + "  skip: {native: 3}\n"
    assert "skip" in problems(tmp_path, {"a.yaml": run_file(case)})
