"""`heatc scan --json` writes its audit record straight from the module's event records
(heatc_runtime.reports.audit_text): the same bytes as the reference interpreter's events through
`audit_report` and `json.dumps` — on clinical notes with the learned and the hand-written
rule sets, on generated rule sets and texts, and on event records no heatc module writes
(the same line, or the same error) — with the native extension's writer of the common
event and with the Python one alike."""

from __future__ import annotations

import contextlib
import gzip
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, SHARED_DATA, compile_cached
from support.cli import heatc
from support.strategies import rule_sets, texts

from heatc.cli import scanning
from heatc.verify.backends import module_info, native_checker, run_document, wasm_checker
from heatc_runtime import Report, abi
from heatc_runtime.errors import ModuleError
from heatc_runtime.reports import audit_text
from heatc_runtime.reports.audit import COUNTERS, ModuleInfo, Policy, audit_report
from heatc_runtime.reports.audit_text import TextFacts, audit_line, scan_line
from heatc_runtime.reports.overlap import scan_decoded
from heatc_runtime.reports.records import RecordDecoder
from heatc_runtime.reports.report import VerdictMap

# What a scan's report meets in real text and the fast path must write as the general one
# does: a conflict, a failed requirement, a character span that is not the byte span (é,
# CJK), a quote, a backslash, a tab and a control character to escape, bytes that are not
# UTF-8 (U+FFFD)
TAIL = (
    "Intrauterine pregnancy at 39 weeks.\n"
    'The "pulse" \\ was 88 bpm, blood loss was 2500 mL; weight\t130 pounds.\n'
    "Café 10 mg, 20 minutes.\n体温 39 ℃, Intrauterine pregnancy at 38 weeks.\n"
).encode() + b"blood loss was \xff 2500 mL. Weight \xc3 130 pounds \xfe. Pulse \x0b 88 bpm.\n"


@contextlib.contextmanager
def writer(name: str):
    """audit_text with its native writer of the common event ("native"), or without ("python")."""
    before = audit_text.NATIVE
    audit_text.NATIVE = name == "native"
    try:
        yield
    finally:
        audit_text.NATIVE = before


WRITERS = ("native", "python")
pytestmark = pytest.mark.needs("native")  # (the native backend, and the native writer beside the Python one)


def clinical_notes(size: int) -> bytes:
    """MTSamples transcriptions, in file order, to about `size` bytes, then TAIL."""
    out: list[bytes] = []
    with gzip.open(SHARED_DATA / "medical/text/mtsamples_all4999.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            out.append((json.loads(line).get("transcription") or "").encode() + b"\n\n")
            if sum(map(len, out)) > size:
                break
    return b"".join(out) + TAIL


def without_run(line: str) -> str:
    """The line less its `run` record (the backend and the time differ), which comes last."""
    assert line.endswith("}\n")
    return line[: line.rindex(', "run": ')]


@pytest.mark.needs("data")
@pytest.mark.parametrize("rules", ["heatmaps/medical.yaml", "examples/medical.heat"])
def test_scan_json_is_the_reference_interpreters_bytes(rules, tmp_path, monkeypatch):
    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "notes.txt"
    text.write_bytes(clinical_notes(60_000))
    expected = heatc("scan", REPO / rules, text, "--json", "--backend", "reference")
    assert expected.exit_code in (0, 3), expected.output
    events = json.loads(expected.output)["events"]
    if rules.endswith(".yaml"):  # (the learned rules meet every case TAIL plants)
        assert any("conflict" in e for e in events) and any("failed" in e for e in events)
        assert any(e["bytes"] != e["chars"] for e in events)
        assert {'"', "\\", "\t", "\x0b", "\ufffd"} <= set("".join(e["text"] for e in events))
    for backend in ("wasm", "native"):
        for name in WRITERS:
            for overlap in (1 << 20, 0):  # (this text is scanned in a thread, as a large one is, or not)
                monkeypatch.setattr(scanning, "OVERLAP_BYTES", overlap)
                with writer(name):
                    got = heatc("scan", REPO / rules, text, "--json", "--backend", backend)
                assert got.exit_code == expected.exit_code
                assert without_run(got.output) == without_run(expected.output), (backend, name, overlap)


@pytest.mark.needs("data")
def test_scan_json_lines_and_side_by_side(tmp_path, monkeypatch):
    """One record per line of input (--lines) and per rule set (--also): each the reference's."""
    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "notes.txt"
    text.write_bytes(clinical_notes(5_000))
    args = ("scan", REPO / "heatmaps/medical.yaml", text, "--json", "--lines", "--also", REPO / "examples/medical.heat")
    expected = heatc(*args, "--backend", "reference")
    lines = expected.output.splitlines(keepends=True)
    assert len(lines) > 20
    for name in WRITERS:
        with writer(name):
            got = heatc(*args)
        assert len(got.output.splitlines()) == len(lines)
        for want, line in zip(lines, got.output.splitlines(keepends=True), strict=True):
            assert without_run(line) == without_run(want)


CHECKERS = pytest.mark.parametrize("checker_for", [wasm_checker, native_checker], ids=["wasm", "native"])


@CHECKERS
@settings(max_examples=150)
@given(rule_sets(), st.data())
def test_audit_line_is_the_reference_report_dumped(checker_for, g, data):
    program = compile_cached(g.source)
    checker = checker_for(program)
    text = data.draw(texts(g.pieces))
    policy = data.draw(st.sampled_from([None, Policy(0.95, 0.5)]))
    extra = {"run": {"doc": 0}}
    events, verdicts, counters = run_document("reference", program, text)
    reference = audit_report(module_info(program), text, events, verdicts, counters, policy).to_json()
    expected = json.dumps({**reference, **extra}, ensure_ascii=False)
    for name in WRITERS:
        with writer(name):
            assert audit_line(checker.scan(text), policy, extra) == expected
            assert audit_line(checker.scan(text), policy, extra, TextFacts(text)) == expected
            report, seconds, line = scan_line(checker, text)
            assert line(policy, extra) == expected and seconds >= 0
            assert line(policy, extra, encoded=True) == expected.encode()
            assert report.events == events  # (the report scan_line gives is the scan's)
    decoded, _ = scan_decoded(checker, text)  # (the table's: events decoded while the scan runs)
    assert (decoded.events, dict(decoded.verdicts), decoded.counters) == (events, dict(verdicts), counters)


# -- records no heatc module writes ----------------------------------------------------------

MANIFEST = {
    "rules": [{"name": "r0", "captures": [{"name": "v", "kind": "number"}], "requirements": ["v < 1"]},
              {"name": "r1", "captures": [{"name": "k", "kind": "class"}], "requirements": []},
              {"name": "r2", "captures": [{"name": "a", "kind": "number"}, {"name": "a", "kind": "number"}],
               "requirements": []}],
    "classes": ["c0"], "channels": [{"name": "ch", "kind": "number"}], "anchor_groups": ["g"],
}  # fmt: skip
SIZE = abi.EVENT.size + 16
DECODER = RecordDecoder(MANIFEST, SIZE, abi.SNAPSHOT.size + 8)
MODULE = ModuleInfo("forged", "0" * 64, "0", {"r0": 0.5, "r1": 0.9, "r2": 0.2})


def record(fields: dict, captures: tuple[float, float]) -> bytes:
    out = bytearray(SIZE)
    abi.EVENT.struct.pack_into(out, 0, *(fields.get(n, 0) for n in abi.EVENT.names))
    struct.pack_into("<2d", out, abi.EVENT.size, *captures)
    return bytes(out)


def small(n: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, n), st.sampled_from([2**31 - 1, 2**32 - 1]))


FIELDS = st.fixed_dictionaries({
    "kind": st.sampled_from([0, 0, 0, 1, 2]), "verdict": st.sampled_from([0, 1, 2, 2, 7]),
    "index": small(3), "failed": st.sampled_from([-1, -1, 0, 1, -2]),
    "start": st.one_of(small(40), st.just(2**63 + 5)), "end": small(40),
    "conflict": st.sampled_from([-1, -1, -1, 0, 1, -3]), "conflict_value": st.floats(),
    "conflict_start": small(40), "conflict_end": small(40),
})  # fmt: skip
RECORDS = st.builds(record, FIELDS, st.tuples(st.floats(), st.floats()))


def outcome(write):
    try:
        return write()
    except (ModuleError, OverflowError, ValueError) as e:  # (what the general path raises, by type)
        return type(e)


@settings(max_examples=400)
@given(st.lists(st.lists(RECORDS, max_size=4).map(b"".join), min_size=1, max_size=3), st.binary(max_size=40))
def test_forged_records_give_the_general_paths_line_or_its_error(runs, text):
    verdicts = VerdictMap(DECODER.rule_index, bytes([0, 2, 1]))
    counters = dict.fromkeys(COUNTERS, 1)
    report = Report(verdicts, lambda: DECODER.scan_events(runs), counters, (MODULE, text), (DECODER, runs))

    def general() -> str:
        events = DECODER.scan_events(runs)
        return json.dumps(audit_report(MODULE, text, events, verdicts, counters).to_json(), ensure_ascii=False)

    for name in WRITERS:
        with writer(name):
            assert outcome(lambda: audit_line(report)) == outcome(general)


@pytest.mark.needs("data")
def test_scan_table_is_the_reference_interpreters(tmp_path, monkeypatch):
    """The table, from events decoded while the scan runs (a large document's) or after."""
    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "notes.txt"
    text.write_bytes(clinical_notes(30_000))
    expected = heatc("scan", REPO / "heatmaps/medical.yaml", text, "--all", "--backend", "reference")
    assert expected.exit_code == 3 and expected.output.count("\n") > 50
    for overlap in (1 << 20, 0):
        monkeypatch.setattr(scanning, "OVERLAP_BYTES", overlap)
        assert heatc("scan", REPO / "heatmaps/medical.yaml", text, "--all").output == expected.output
