"""`heatc tune`: a deployed heatmap re-planned from its audit reports, labels and metrics —
what changes (narrowed, observe-only, dropped rules; the tier plan; the policy's cut-offs),
what is written (heatmap, report, picture), and bad input refused or listed, never guessed at."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from heatc.cli import app
from heatc.errors import HeatError
from heatc.heatmap.build import build, compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.tune import TuneConfig, tune
from heatc.verify.backends import module_info, wasm_checker

HEATMAP = """heatmap: 1
name: t
tokenizer: {bytes: true}
thresholds: {sensitivity: 0}
categories:
  sentence_end: {kind: punct, literals: ["."]}
  glucose: {kind: keyword, literals: [glucose]}
  potassium: {kind: keyword, literals: [potassium]}
  sodium: {kind: keyword, literals: [sodium]}
  term: {kind: keyword, literals: [term]}
  mg_dl: {kind: unit, literals: [mg/dL]}
  days: {kind: unit, literals: [days]}
cells:
  - {pair: [glucose, number], unit: mg_dl, score: 0.9, range: [10, 600], name: glucose_mg_dl}
  - {pair: [potassium, number], score: 0.8, range: [1, 10], places: 1, name: potassium_value}
  - {pair: [term, number], unit: days, check: consistent, score: 0.7, name: term_days}
  - {pair: [glucose, number], score: 0.2, range: [0, 5000], name: glucose_any}
  - {pair: [sodium, number], score: 0.95, range: [100, 200], name: sodium_value}
triggers: {at: [sentence_end], barrier: [sentence_end]}
expects:
  - {text: "Glucose 5000 mg/dL.", rejects: [glucose_mg_dl]}
  - {text: "Term 30 days. Term 30 days.", passes: [term_days]}
"""

# (text, {rule: label of its rejection}) — the traffic of a deployment, as the reviewers saw it
TRAFFIC = (
    [("Glucose 95 mg/dL.", {})] * 30
    + [("Glucose 700 mg/dL.", {"glucose_mg_dl": "false_alarm"})] * 3
    + [("Glucose 750 mg/dL.", {"glucose_mg_dl": "false_alarm"})] * 2
    + [("Glucose 5000 mg/dL.", {"glucose_mg_dl": "error"})] * 3
    + [("Potassium 4.2.", {})] * 20
    + [("Potassium 4.25.", {"potassium_value": "false_alarm"})] * 3  # a precision the cell does not allow
    + [("Potassium 42.", {"potassium_value": "error"})] * 2
    + [("Term 30 days.", {})] * 10
    + [("Term 30 days. Term 60 days.", {"term_days": "false_alarm"})] * 2  # two terms, both right
    + [("No value here.", {})] * 5
)


def _setup(tmp_path: Path, traffic=TRAFFIC, labels=True, heatmap_text=HEATMAP, label=None) -> dict:
    """The heatmap, its build's reports of `traffic` and the reviewers' labels (`label(rule,
    wanted)`: a rejection's label, default the traffic's)."""
    heatmap = tmp_path / "t.yaml"
    heatmap.write_text(heatmap_text)
    checker = wasm_checker(compile_heatmap(heatmap)[0])
    label = label or (lambda rule, wanted: wanted.get(rule))
    reports, label_lines = [], []
    for text, wanted in traffic:
        audit = checker.scan(text).audit().to_json()
        reports.append(json.dumps(audit))
        for e in audit["events"]:
            if e["kind"] == "match" and e["verdict"] == "REJECTED" and label(e["rule"], wanted):
                said = {"text_sha256": audit["text"]["sha256"], "rule": e["rule"], "bytes": e["bytes"]}
                label_lines.append(json.dumps({**said, "label": label(e["rule"], wanted)}))
    (tmp_path / "reports.jsonl").write_text("\n".join(reports) + "\n")
    (tmp_path / "labels.jsonl").write_text("\n".join(dict.fromkeys(label_lines)) + "\n")
    return {
        "heatmap": heatmap,
        "reports": tmp_path / "reports.jsonl",
        "labels": tmp_path / "labels.jsonl" if labels else None,
        "output": tmp_path / "out" / "tuned.yaml",
    }


def _tune(paths: dict, **kw):
    paths["output"].parent.mkdir(exist_ok=True)
    config = TuneConfig(paths["heatmap"], [paths["reports"]], paths["output"], paths["labels"], **kw)
    return tune(config, log=lambda m: None)


def _cells(path: Path) -> dict:
    return {c.name: c for c in load_heatmap(path).cells}


def test_rules_are_narrowed_set_observe_only_or_dropped(tmp_path):
    paths = _setup(tmp_path)
    result = _tune(paths, alarm_budget=0.01)
    actions = {d.rule: d.action for d in result.decisions}
    assert actions == {"glucose_mg_dl": "narrow", "potassium_value": "observe", "term_days": "drop"}
    cells = _cells(paths["output"])
    # the range widened over the clean values, short of the labelled error (sqrt(750 x 5000), rounded out)
    assert cells["glucose_mg_dl"].range == (10.0, 1940.0)
    assert cells["potassium_value"].observe is True and cells["potassium_value"].range == (1.0, 10.0)
    assert "term_days" not in cells and "glucose_any" in cells
    # what is written builds; its rules reject the labelled errors and pass the clean values
    built = build(paths["output"], tmp_path / "build")
    info = module_info(built.program)
    checker = wasm_checker(built.program)
    for text, alarm in [("Glucose 750 mg/dL.", False), ("Glucose 5000 mg/dL.", True), ("Potassium 4.25.", False)]:
        audit = checker.scan(text).audit()
        assert (audit.action != "pass") == alarm, text
    assert info.observe == frozenset({"potassium_value"})
    # the expect naming the dropped rule is left out and said so; the other is kept
    assert [e[0] for e in load_heatmap(paths["output"]).expects] == ["Glucose 5000 mg/dL."]
    report = result.report.read_text()
    assert "`term_days`" in report and "**drop**" in report and "Term 30 days. Term 30 days." in report
    assert "**narrow**" in report and "[10, 600] → [10, 1940]" in report


def test_within_the_budget_only_free_narrowings(tmp_path):
    """A generous budget: the narrowing that keeps every labelled error out is still made (the
    reviewers called those values clean); the changes that cost errors are not."""
    paths = _setup(tmp_path)
    result = _tune(paths, alarm_budget=0.5)
    assert {d.rule: d.action for d in result.decisions if d.action != "keep"} == {"glucose_mg_dl": "narrow"}
    cells = _cells(paths["output"])
    assert not cells["potassium_value"].observe and "term_days" in cells


def test_output_is_deterministic_and_records_provenance(tmp_path):
    paths = _setup(tmp_path)
    first = _tune(paths, alarm_budget=0.01)
    files = [first.output, first.report, first.picture]
    before = [p.read_bytes() for p in files]
    _tune(paths, alarm_budget=0.01)
    assert [p.read_bytes() for p in files] == before
    assert first.picture.read_bytes().startswith(b"\x89PNG")
    tuned = load_heatmap(paths["output"]).provenance["tuned"][-1]
    assert tuned["base"]["sha256"] == __import__("hashlib").sha256(paths["heatmap"].read_bytes()).hexdigest()
    assert tuned["reports"]["count"] == len(TRAFFIC) and tuned["labels"]["used"] > 0
    assert tuned["alarm_budget"] == 0.01 and tuned["report"] == "tuned.report.md"
    assert tuned["reports"]["files"][0]["file"] == "../reports.jsonl"


def test_policy_cut_offs_on_the_front(tmp_path):
    paths = _setup(tmp_path)
    result = _tune(paths, alarm_budget=0.01)
    p = result.policy
    assert p is not None and p.pass_point is not None
    # today's rules at today's cut-off, and the chosen point of the tuned rules
    assert p.today_point.false_alarms > 0.05 and p.pass_point.false_alarms <= 0.01
    assert p.pass_point.caught >= p.today_point.caught - 2  # the potassium errors went observe-only
    written = load_heatmap(paths["output"]).policy
    assert written == (p.chosen.pass_at, p.chosen.confirm_at)
    assert p.chosen.confirm_at <= p.chosen.pass_at
    # a cut-off is the shortest decimal between the confidences it separates
    assert len(f"{p.chosen.pass_at:g}") <= 4


def test_tiers_hold_the_hot_rules(tmp_path):
    paths = _setup(tmp_path)
    result = _tune(paths)
    plan = result.tiers
    assert plan.coverage >= 0.95 and set(plan.hot) <= set(plan.l2_rules)
    assert "glucose_any" in plan.l2_rules or plan.counts["glucose_any"] == 0
    built = build(paths["output"], tmp_path / "build")
    tiers = {r["name"]: r["tier"] for r in built.manifest["build"]["rules"]}
    assert {n for n, t in tiers.items() if t == "l2"} == set(plan.l2_rules)
    out = CliRunner().invoke(app, ["inspect", "--tiers", str(built.directory)])
    assert re.search(rf"L2 window\s+{len(plan.l2_rules)} rules", out.stdout), out.stdout
    freq = {c.name: c.freq for c in load_heatmap(paths["output"]).cells}
    assert freq["glucose_mg_dl"] == pytest.approx(38 / len(TRAFFIC), rel=0.01)  # its events per response
    assert freq["sodium_value"] * 0.95 < freq["glucose_any"] * 0.2  # never seen: after every rule seen
    assert plan.l2_rules.index("glucose_any") < len(plan.l2_rules) and "sodium_value" not in plan.l2_rules


def test_tiers_when_the_size_does_not_allow(tmp_path):
    paths = _setup(tmp_path)
    result = _tune(paths, l2_max=100)
    assert not result.tiers.fits and result.tiers.l2_bytes <= 100
    assert "the size does not allow it" in result.report.read_text()
    one = _tune(paths, l2_max=300)  # (room for one rule: the report says so in English)
    assert len(one.tiers.l2_rules) == 1
    assert "- L2 tier: 1 rule, " in one.report.read_text() and "1 rules" not in one.report.read_text()


def test_without_labels_only_suspects(tmp_path):
    paths = _setup(tmp_path, labels=False)
    result = _tune(paths, alarm_budget=0.01)
    assert result.decisions == [] and result.policy is None and result.picture is None
    assert {d.rule for d in result.suspects} == {"glucose_mg_dl", "potassium_value", "term_days"}
    before, after = load_heatmap(paths["heatmap"]), load_heatmap(paths["output"])
    strip = lambda c: (c.pair, c.unit, c.range, c.observe, c.check)  # noqa: E731
    assert [strip(c) for c in before.cells] == [strip(c) for c in after.cells] and after.policy is None
    assert "### Suspects (nothing changed)" in result.report.read_text()


def test_metrics_counts_order_the_tiers(tmp_path):
    paths = _setup(tmp_path)
    scrape = tmp_path / "metrics.txt"
    scrape.write_text(
        "# HELP heatc_verdicts_total x\n# TYPE heatc_verdicts_total counter\n"
        'heatc_verdicts_total{module="t",rule="term_days",verdict="CONFIRMED"} 900.0\n'
        'heatc_verdicts_total{module="t",rule="glucose_any",verdict="CONFIRMED"} 50.0\n'
        'heatc_verdicts_total{module="t",rule="_other",verdict="CONFIRMED"} 3.0\n'
        'heatc_verdicts_total{module="other",rule="x",verdict="CONFIRMED"} 7.0\n'
        'heatc_reports_total{module="t",source="stream",action="pass"} 1000.0\n'
    )
    result = _tune(paths, metrics=str(scrape), alarm_budget=0.5)
    assert result.tiers.hot == ["term_days", "glucose_any"]
    assert "responses in which each rule triggered" in result.tiers.source
    freq = {c.name: c.freq for c in load_heatmap(paths["output"]).cells}
    assert freq["term_days"] == pytest.approx(0.9) and freq["glucose_any"] == pytest.approx(0.05)
    assert "3 counts under rule `_other` not used" in result.report.read_text()


def test_metrics_from_a_local_url(tmp_path):
    import http.server
    import threading

    body = b'heatc_verdicts_total{module="t",rule="glucose_any",verdict="CONFIRMED"} 5\n'
    body += b'heatc_reports_total{module="t",source="scan",action="pass"} 10\n'

    class Scrape(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Scrape)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        paths = _setup(tmp_path)
        result = _tune(paths, metrics=f"http://127.0.0.1:{server.server_address[1]}/metrics")
    finally:
        server.shutdown()
    assert result.tiers.hot == ["glucose_any"] and result.scrape.reports == 10


@pytest.mark.parametrize(
    "scrape, message",
    [
        ('heatc_verdicts_total{module="other",rule="x",verdict="REJECTED"} 1\n', "counts no module 't'"),
        ('heatc_verdicts_total{module="t" 1\n', ":1:1: error: not a sample"),
        ('heatc_reports_total{module="t",source="scan",action="pass"} 1.5\n', "a whole number"),
    ],
)
def test_bad_metrics(tmp_path, scrape, message):
    paths = _setup(tmp_path)
    (tmp_path / "m.txt").write_text(scrape)
    with pytest.raises(HeatError, match=re.escape(message)):
        _tune(paths, metrics=str(tmp_path / "m.txt"))
    with pytest.raises(HeatError, match="on this machine"):
        _tune(paths, metrics="http://example.com/metrics")
    assert not paths["output"].exists()


def test_reports_of_another_build_are_refused(tmp_path):
    paths = _setup(tmp_path)
    lines = paths["reports"].read_text().splitlines()
    other = json.loads(lines[4])
    other["module"]["sha256"] = "0" * 64
    lines[4] = json.dumps(other)
    paths["reports"].write_text("\n".join(lines) + "\n")
    with pytest.raises(HeatError) as e:
        _tune(paths)
    assert f"{paths['reports']}:5:1: error: module.sha256: this report is of another build" in str(e.value)
    assert not paths["output"].exists()


def test_the_deployed_build_names_the_module(tmp_path):
    """Reports of a build made by another heatc: --build names its module; a build of another
    heatmap is refused."""
    paths = _setup(tmp_path)
    built = build(paths["heatmap"], tmp_path / "build")
    assert _tune(paths, build=built.directory).output.exists()
    other = tmp_path / "o.yaml"
    other.write_text(HEATMAP.replace("score: 0.9", "score: 0.95"))
    with pytest.raises(HeatError, match="was not made from"):
        _tune(paths, build=build(other, tmp_path / "b2").directory)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", ":3:2: error: not a JSON object"),
        ('{"format": "heatc-audit", "version": 2}', ":3:1: error: version: expected 1 (this heatc reads"),
        ('{"format": "heatc-audit", "version": 1}', ":3:1: error: module: missing"),
        (
            '{"format": "something", "version": 1, "module": {}, "text": {}, "events": []}',
            'format: expected "heatc-audit"',
        ),
    ],
)
def test_malformed_report_lines(tmp_path, line, message):
    paths = _setup(tmp_path)
    lines = paths["reports"].read_text().splitlines()
    lines.insert(2, line)
    paths["reports"].write_text("\n".join(lines) + "\n")
    with pytest.raises(HeatError) as e:
        _tune(paths)
    assert message in str(e.value)
    assert not paths["output"].exists()
    result = _tune(paths, skip_malformed=True)  # listed as skipped instead
    assert len(result.files[0].skipped) == 1 and f"{paths['reports']}:3:" in result.report.read_text()


def test_labels_naming_unknown_events_are_listed(tmp_path):
    paths = _setup(tmp_path)
    sha = json.loads(paths["reports"].read_text().splitlines()[0])["text"]["sha256"]  # "Glucose 95 mg/dL."
    rejected = json.loads(paths["reports"].read_text().splitlines()[32])  # "Glucose 700 mg/dL."
    extra = [
        {"text_sha256": "f" * 64, "rule": "glucose_mg_dl", "bytes": [0, 17], "label": "error"},
        {"text_sha256": sha, "rule": "nope", "bytes": [0, 17], "label": "error"},
        {"text_sha256": sha, "rule": "glucose_mg_dl", "bytes": [0, 16], "label": "false_alarm"},
        {"text_sha256": rejected["text"]["sha256"], "rule": "glucose_mg_dl", "bytes": [0, 17], "label": "error"},
    ]
    with open(paths["labels"], "a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in extra))
    result = _tune(paths, alarm_budget=0.01)
    whys = [s.why for s in result.labels.skipped]
    assert any("no report checked a text of sha256 ffffffffffffffff" in w for w in whys)
    assert any("no event of rule 'nope' at bytes [0, 17]" in w for w in whys)
    assert any("a false alarm on an event that passed" in w for w in whys)
    assert any("labelled both error and false_alarm" in w for w in whys)
    assert "## Skipped" in result.report.read_text()


def test_malformed_label_lines(tmp_path):
    paths = _setup(tmp_path)
    with open(paths["labels"], "a") as f:
        f.write('{"text_sha256": "abc", "rule": "r", "bytes": [0, 1], "label": "error"}\n')
    with pytest.raises(HeatError, match="text_sha256: expected a sha256"):
        _tune(paths)
    paths["labels"].write_text('{"text_sha256": "' + "a" * 64 + '", "rule": "r", "bytes": [0, 1], "label": "ok"}\n')
    with pytest.raises(HeatError, match=re.escape('labels.jsonl:1:1: error: label: expected "error" or "false_alarm"')):
        _tune(paths)


def test_empty_traffic_is_an_error(tmp_path):
    paths = _setup(tmp_path)
    paths["reports"].write_text("\n")
    with pytest.raises(HeatError, match="no reports to tune from"):
        _tune(paths)
    paths = _setup(tmp_path, traffic=[("No value here.", {})] * 3)
    with pytest.raises(HeatError, match="none of the 3 reports holds a match"):
        _tune(paths)
    assert not paths["output"].exists()


def test_dropping_keeps_the_other_rules_names(tmp_path):
    """A rule's name comes from its cell; with one cell gone another must not take its name."""
    text = HEATMAP.replace(
        "check: consistent, score: 0.7, name: term_days}",
        "check: consistent, score: 0.7}\n  - {pair: [term, number], unit: days, score: 0.6, range: [0, 100]}",
    ).replace('  - {text: "Term 30 days. Term 30 days.", passes: [term_days]}\n', "")
    paths = _setup(tmp_path, heatmap_text=text, label=lambda rule, _: "false_alarm" if rule == "term_days" else None)
    assert {"term_days", "term_days_2"} <= {r.name for r in compile_heatmap(paths["heatmap"])[0].rules}
    result = _tune(paths, alarm_budget=0.0)
    assert {d.rule: d.action for d in result.decisions}["term_days"] == "drop"
    cells = {c.name: c for c in load_heatmap(paths["output"]).cells}
    assert cells["term_days_2"].check == "range"  # named as before
    names = {r.name for r in compile_heatmap(paths["output"])[0].rules}
    assert "term_days" not in names and "term_days_2" in names


def test_cli_and_diff(tmp_path):
    paths = _setup(tmp_path)
    paths["output"].parent.mkdir()
    second = tmp_path / "more.jsonl"
    second.write_text(paths["reports"].read_text().splitlines()[0] + "\n")
    run = CliRunner().invoke(app, ["tune", str(paths["heatmap"]), "--reports", str(paths["reports"]), str(second),
                                   "--labels", str(paths["labels"]), "--alarm-budget", "0.01", "-o", str(paths["output"])])  # fmt: skip
    assert run.exit_code == 0, run.output
    assert "1 narrowed, 1 observe-only, 1 dropped" in run.stdout and "tuned.report.md" in run.stdout
    assert load_heatmap(paths["output"]).provenance["tuned"][-1]["reports"]["count"] == len(TRAFFIC) + 1
    diff = CliRunner().invoke(app, ["diff", str(paths["heatmap"]), str(paths["output"])]).stdout
    assert "tuned by heatc tune from" in diff
    assert "- term … number days (consistent)" in diff
    assert "~ potassium … number: now observe-only" in diff
    assert "~ glucose … number mg_dl: [10, 600] → [10, 1940]" in diff
    assert re.search(r"policy: the runtime's default → pass [0-9.]+, confirm [0-9.]+", diff)
    assert "tiers.l2_bytes: 1,048,576 →" in diff
    as_json = json.loads(
        CliRunner().invoke(app, ["diff", str(paths["heatmap"]), str(paths["output"]), "--json"]).stdout
    )
    assert as_json["observe_changed"] == [{"cell": "potassium … number", "observe": [False, True]}]
    assert as_json["tuned"]["alarm_budget"] == 0.01
    # errors: a message, exit status 1, nothing written
    bad = CliRunner().invoke(app, ["tune", str(paths["heatmap"]), "--reports", str(tmp_path / "none.jsonl"),
                                   "-o", str(tmp_path / "x.yaml")])  # fmt: skip
    assert bad.exit_code == 1 and "none.jsonl: error: cannot read: does not exist" in bad.output
    assert not (tmp_path / "x.yaml").exists()
    bad = CliRunner().invoke(
        app, ["tune", str(paths["heatmap"]), str(paths["reports"]), "-o", str(tmp_path / "x.yaml")]
    )
    assert bad.exit_code == 1 and "after --reports" in bad.output
    same = CliRunner().invoke(app, ["tune", str(paths["heatmap"]), "--reports", str(paths["reports"]),
                                    "-o", str(paths["heatmap"])])  # fmt: skip
    assert same.exit_code == 1 and "not over it" in same.output


def test_yaml_reads_back(tmp_path):
    paths = _setup(tmp_path)
    _tune(paths, alarm_budget=0.01)
    doc = yaml.safe_load(paths["output"].read_text())
    assert doc["policy"]["confirm"] <= doc["policy"]["pass"]
    assert doc["tiers"]["l2_bytes"] > 0
