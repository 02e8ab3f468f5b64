"""Audit reports (docs/report.md): a streamed generation's report is the scan's, confidence
included, on every backend; every report validates against the published JSON Schema; the
confidence formula and the policy's boundaries."""

import json
import math
import pickle

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.cli import heatc
from support.strategies import chunkings, rule_sets, texts

import heatc_runtime as rt
from heatc.lang.compiler import compile_file
from heatc.verify.backends import module_info, native_checker, run_document, wasm_checker
from heatc_runtime.reports.audit import (
    VERDICT_WEIGHT,
    AuditReport,
    Policy,
    audit_report,
    audit_snapshots,
    confidence,
    schema,
)

EXAMPLES = REPO / "examples"
V = rt.Verdict
SCHEMA = schema()
jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
CHECKERS = pytest.mark.parametrize("checker_for", [wasm_checker, native_checker], ids=["wasm", "native"])


def streamed(checker, pieces: list[bytes]) -> list:
    """Sequence 0 of a batch fed `pieces` one token id per step (through a token table, as an
    engine adapter feeds a model's tokens), then finished: every snapshot it published."""
    vocabulary = sorted(set(pieces) | {b""})
    token_id = {tok: i for i, tok in enumerate(vocabulary)}
    checker.set_token_table(vocabulary)
    batch = checker.batch(2)  # the second sequence is fed empty tokens, as an idle row is
    snaps = []
    for piece in pieces:
        snaps += batch.feed_ids([token_id[piece], token_id[b""]]).get(0, [])
    return snaps + batch.finish()[0]


@CHECKERS
@settings(max_examples=150)
@given(rule_sets(), st.data())
def test_streamed_report_is_the_scan_report(checker_for, g, data):
    """The report of a streamed generation (the snapshots a batch published, token by token)
    equals `Checker.scan().audit()` over the same text and the report made from the reference
    interpreter's events — module, triggered rules, events with both spans, confidence, action."""
    program = compile_cached(g.source)
    checker = checker_for(program)
    text = data.draw(texts(g.pieces))
    pieces = data.draw(chunkings(text))
    policy = Policy(data.draw(st.sampled_from([0.9, 0.95, 1.0])), data.draw(st.sampled_from([0.0, 0.5, 0.7])))
    stream = audit_snapshots(checker.module_info, text, streamed(checker, pieces), policy)
    scanned = checker.scan(text).audit(policy)
    events, verdicts, counters = run_document("reference", program, text)
    reference = audit_report(module_info(program), text, events, verdicts, counters, policy)
    assert stream.to_json() == scanned.to_json() == reference.to_json()
    assert stream.confidence == scanned.confidence  # (to_json holds it too: the same float, bit for bit)
    VALIDATOR.validate(stream.to_json())


@CHECKERS
@settings(max_examples=60)
@given(rule_sets(), st.data())
def test_engine_generation_report_is_the_scan_report(checker_for, g, data):
    """What an engine adapter reports (its `Driver`, no model: token ids fed one per step) is
    the scan's report: two rows with texts of their own, cut into tokens their own way, ending
    at different steps, the first with a prompt the rules read first — each row's
    `GenerationReport.audit()` equals `Checker.scan(stream).audit()`, confidence included."""
    from heatc_runtime.engines.core import Driver
    from heatc_runtime.engines.options import RowOptions
    from heatc_runtime.engines.tokens import TokenTable

    program = compile_cached(g.source)
    rows = [data.draw(chunkings(data.draw(texts(g.pieces)))) for _ in range(2)]
    prompt_len = data.draw(st.integers(0, len(rows[0]) - 1))
    vocabulary = sorted({p for r in rows for p in r} | {b""})
    token_id = {tok: i for i, tok in enumerate(vocabulary)}
    driver = Driver(checker_for(program), TokenTable("test", vocabulary, "test", ""), 3)
    prompt, generated = rows[0][:prompt_len], [rows[0][prompt_len:], rows[1]]
    driver.start(0, RowOptions(see_prompt=True), [token_id[p] for p in prompt])
    driver.start(1)
    reports = {}
    for step in range(max(map(len, generated)) + 1):
        live = [r for r in (0, 1) if step < len(generated[r])]
        if live:
            driver.feed(np.array(live), np.array([token_id[generated[r][step]] for r in live]))
        for r in (0, 1):
            if step == len(generated[r]) - (r in live) and r not in reports:
                reports[r] = driver.end(r)
    policy = Policy(data.draw(st.sampled_from([0.9, 1.0])), data.draw(st.sampled_from([0.0, 0.7])))
    scanner = checker_for(program)
    for r, want in ((0, b"".join(rows[0])), (1, b"".join(rows[1]))):
        report = reports[r]
        assert report.stream == want
        got, scanned = report.audit(driver.checker.module_info, policy), scanner.scan(want).audit(policy)
        assert got.to_json() == scanned.to_json()
        assert got.confidence == scanned.confidence and got.action == scanned.action
        VALIDATOR.validate(got.to_json())


@CHECKERS
def test_engine_report_of_a_real_text_read_with_its_prompt(checker_for):
    """The same on a shipped text whose prompt half publishes snapshots with events of its own
    (which the property's generated rules seldom do): the prompt's events are in the report."""
    from heatc_runtime.engines.core import Driver
    from heatc_runtime.engines.options import RowOptions
    from heatc_runtime.engines.tokens import TokenTable

    program = compile_file(EXAMPLES / "medical.heat")
    prompt = b"Copy this: Glucose 5000 mg/dL. Pulse 80.\n"  # (two trigger snapshots, with events)
    data = prompt + (EXAMPLES / "texts" / "discharge_summary_errors.txt").read_bytes()
    pieces = [data[i : i + 5] for i in range(0, len(data), 5)]
    vocabulary = sorted(set(pieces))
    token_id = {tok: i for i, tok in enumerate(vocabulary)}
    driver = Driver(checker_for(program), TokenTable("test", vocabulary, "test", ""), 1)
    half = len(pieces) // 2  # (the prompt and part of the text)
    driver.start(0, RowOptions(see_prompt=True), [token_id[p] for p in pieces[:half]])
    for piece in pieces[half:]:
        driver.feed(np.array([0]), np.array([token_id[piece]]))
    report = driver.end(0)
    assert sum(len(s.events) for s in report.prompt_snapshots) > 0
    got, scanned = report.audit(driver.checker.module_info), checker_for(program).scan(data).audit()
    assert got.to_json() == scanned.to_json() and got.action == "escalate"


@pytest.mark.parametrize(
    "name,text",
    [("medical", "discharge_summary_errors.txt"), ("finance", "loan_terms_zh_violations.txt"),
     ("legal", "service_agreement_en.txt"), ("medical", "clinic_note_zh_errors.txt")],
)  # fmt: skip
def test_scan_json_is_the_runtime_report_and_validates(name, text):
    """`heatc scan --json` prints, on every backend, the report `Checker.scan()` gives (less
    its `run` record) and a streamed generation gives; each validates against the schema."""
    data = (EXAMPLES / "texts" / text).read_bytes()
    program = compile_file(EXAMPLES / f"{name}.heat")
    runtime = wasm_checker(program).scan(data).audit().to_json()
    for backend in ("reference", "wasm", "native"):
        r = heatc("scan", EXAMPLES / f"{name}.heat", EXAMPLES / "texts" / text, "--json", "--backend", backend)
        assert r.exit_code == 3, r.output
        doc = json.loads(r.output)
        VALIDATOR.validate(doc)
        assert doc.pop("run")["backend"] == backend
        assert doc == runtime
    pieces = [data[i : i + 5] for i in range(0, len(data), 5)]
    checker = native_checker(program)
    assert audit_snapshots(checker.module_info, data, streamed(checker, pieces)).to_json() == runtime


def test_report_content():
    """What an auditor reads: the module, the rules that triggered with heat and verdict, each
    event's byte and character span (CJK: they differ), the failed requirement and the earlier
    value a conflict disagreed with."""
    program = compile_file(EXAMPLES / "legal.heat")
    checker = wasm_checker(program)
    text = "付款应于30日内完成；通知期限为十五日。另行通知须提前三十日。Payment within 10 days, payment within 20 days."
    report = checker.scan(text).audit()
    doc = report.to_json()
    manifest = checker.manifest
    assert doc["module"] == {
        "name": "legal", "sha256": manifest["wasm"]["sha256"], "heatc_version": manifest["heatc_version"]
    }  # fmt: skip
    assert doc["text"]["bytes"] == len(text.encode()) and doc["text"]["chars"] == len(text)
    (rule,) = doc["triggered"]
    assert rule == {
        "rule": "term_days_consistent", "description": manifest["rules"][0]["description"], "heat": 0.9,
        "verdict": "REJECTED", "matches": 5, "rejections": 3,  # 付款 30日 sets payment: 10 and 20 days disagree
    }  # fmt: skip
    for e in doc["events"]:
        s, t = e["chars"]
        assert text[s:t] == e["text"] == text.encode()[e["bytes"][0] : e["bytes"][1]].decode()
    zh = doc["events"][2]
    assert zh["text"] == "通知须提前三十日" and zh["bytes"] != zh["chars"]
    assert zh["conflict"]["text"] == "通知期限为十五日" and zh["conflict"]["value"] == 15.0
    assert doc["confidence"] == pytest.approx(0.1) and doc["action"] == "escalate"
    failed = wasm_checker(compile_file(EXAMPLES / "medical.heat")).scan("Glucose 5000 mg/dL.").audit()
    assert {e["failed"] for e in failed.to_json()["events"]} == {"v in [0.5 mmol/L, 2000 mg/dL]", "v in [0.5, 2000]"}
    # a report travels with what it needs to audit itself
    assert pickle.loads(pickle.dumps(checker.scan(text))).audit() == report
    with pytest.raises(ValueError, match="does not know its module and text"):
        rt.Report({}, [], {}).audit()


def test_schema_rejects_what_is_not_a_report():
    """The schema is not vacuous: each of these breaks it."""
    good = wasm_checker(compile_file(EXAMPLES / "medical.heat")).scan("Glucose 5000 mg/dL.").audit().to_json()
    VALIDATOR.validate(good)
    broken = [
        {**good, "confidence": 1.5},
        {**good, "action": "ignore"},
        {**good, "version": 2},
        {k: v for k, v in good.items() if k != "module"},
        {**good, "events": [{**good["events"][0], "chars": [3]}]},
        {**good, "events": [{**good["events"][0], "verdict": "PENDING"}]},  # a match is decided
        {**good, "surprise": 1},
    ]
    for doc in broken:
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(doc)


# -- confidence and policy ------------------------------------------------------------------

heats = st.floats(0.0, 1.0)


@given(st.integers(1, 1000), st.data())
def test_rejected_on_a_hot_rule_weighs_more_than_pending_on_a_cold_one(hot, data):
    """(heats as rule files write them: a few decimals; a hot rule has heat > 0)"""
    cold = data.draw(st.integers(0, hot)) / 1000
    hot = hot / 1000
    rejected = confidence({"hot": V.REJECTED}, {"hot": hot})
    pending = confidence({"cold": V.PENDING}, {"cold": cold})
    assert 0 <= rejected < pending <= 1


@given(st.lists(st.tuples(st.sampled_from(list(V)), heats), max_size=12))
def test_confidence_is_the_product_and_stays_in_range(rules):
    verdicts = {f"r{i}": v for i, (v, _) in enumerate(rules)}
    heat = {f"r{i}": h for i, (_, h) in enumerate(rules)}
    c = confidence(verdicts, heat)
    assert 0.0 <= c <= 1.0
    assert c == pytest.approx(math.prod(1 - VERDICT_WEIGHT[v] * h for v, h in rules))
    # one more finding never raises it; a CONFIRMED rule never lowers it
    assert confidence({**verdicts, "x": V.REJECTED}, {**heat, "x": 0.5}) <= c
    assert confidence({**verdicts, "x": V.CONFIRMED}, {**heat, "x": 1.0}) == c


def test_policy_boundaries_are_exact():
    p = Policy()
    below = math.nextafter
    assert [p.action(x) for x in (1.0, 0.9, below(0.9, 0), 0.7, below(0.7, 0), 0.0)] == [
        "pass", "pass", "confirm", "confirm", "escalate", "escalate",
    ]  # fmt: skip
    strict = Policy.parse("pass=0.95, confirm=0.8")
    assert (strict.pass_at, strict.confirm_at) == (0.95, 0.8)
    assert [strict.action(x) for x in (0.95, below(0.95, 0), 0.8, below(0.8, 0))] == [
        "pass", "confirm", "confirm", "escalate",
    ]  # fmt: skip
    assert Policy.parse("") == p and Policy.parse("confirm=0.5") == Policy(0.9, 0.5)
    assert Policy(0.8, 0.8).action(0.8) == "pass"  # no confirm band at all
    for bad, message in [
        ("pass=0.5,confirm=0.7", "above pass_at"), ("pass=2", "from 0 to 1"), ("pass=nan", "from 0 to 1"),
        ("pass=high", "must be a number"), ("escalate=0.1", "expected pass=NUMBER"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            Policy.parse(bad)


@pytest.mark.parametrize(
    "heat,action", [(0.1, "pass"), (0.3, "confirm"), (0.31, "escalate"), (0.0, "pass"), (1.0, "escalate")]
)
def test_reports_meet_the_boundaries_end_to_end(heat, action):
    """One REJECTED rule of heat h gives confidence 1 − h exactly: 0.9 passes, 0.7 confirms."""
    source = f'class g keyword = "glucose"\nrule r heat {heat} {{ match g v:number\n  require v < 10 }}\n'
    checker = wasm_checker(compile_cached(source))
    report = checker.scan("glucose 50").audit()
    assert report.confidence == 1 - heat and report.action == action
    assert checker.scan("glucose 5").audit().action == "pass"


def test_cli_policy_option(tmp_path):
    rules = tmp_path / "r.heat"
    rules.write_text('class g keyword = "glucose"\nrule r heat 0.1 { match g v:number\n  require v < 10 }\n')
    for option, action in [("pass=0.9", "pass"), ("pass=0.95", "confirm"), ("pass=0.95,confirm=0.95", "escalate")]:
        r = heatc("scan", rules, "-", "--json", "--policy", option, input="glucose 50")
        doc = json.loads(r.output)
        assert r.exit_code == 3 and doc["action"] == action and doc["confidence"] == 0.9
    r = heatc("scan", rules, "-", "--policy", "pass=0.5,confirm=0.7", input="x")
    assert r.exit_code == 1 and "confirm_at (0.7) is above pass_at (0.5)" in r.output
    r = heatc("scan", rules, "-", input="glucose 50")
    assert "confidence 0.90: pass" in r.output


def test_audit_snapshots_needs_the_final_snapshot():
    checker = wasm_checker(compile_file(EXAMPLES / "medical.heat"))
    with pytest.raises(ValueError, match="at least its final snapshot"):
        audit_snapshots(checker.module_info, b"", [])
    assert isinstance(checker.scan("").audit(), AuditReport)
