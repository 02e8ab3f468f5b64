"""Observe-only rules and a rule set's own confidence policy, through every layer that knows
them: the rule language (parse, check, print), the heatmap format and its lowering, the IR
(JSON, listing), the module manifest, audit reports and `heatc scan`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from heatc import ir
from heatc.cli import app
from heatc.cli.irtext import describe
from heatc.errors import HeatError
from heatc.heatmap.build import build, compile_heatmap
from heatc.heatmap.format import load_heatmap
from heatc.lang.compiler import compile_source
from heatc.lang.parse import parse
from heatc.lang.unparse import format_file
from heatc.verify.backends import module_info, wasm_checker
from heatc_runtime import ModuleError
from heatc_runtime.reports.audit import ModuleInfo, Policy, audit_report

SOURCE = """ruleset t
class mg unit = "mg"
policy pass 0.95 confirm 0.5
rule dose "a dose" heat 0.8 freq 2 observe {
  match v:number mg
  require v <= 100
}
rule dose_low heat 0.3 {
  match v:number mg
  require v >= 1
}
"""


def test_observe_and_policy_parse_print_and_compile():
    tree = parse(SOURCE)
    assert parse(format_file(tree)) == tree
    printed = format_file(tree)
    assert "policy pass 0.95 confirm 0.5" in printed
    assert 'rule dose "a dose" heat 0.8 freq 2 observe {' in printed
    program = compile_source(SOURCE)
    assert program.policy == [0.95, 0.5]
    assert {r.name: r.observe for r in program.rules} == {"dose": True, "dose_low": False}
    again = ir.from_json(ir.to_json(program))
    assert again.policy == [0.95, 0.5] and again.rules[0].observe is True
    listing = describe(program)
    assert "policy: pass 0.95, confirm 0.5" in listing and "observe-only" in listing


@pytest.mark.parametrize(
    "text, message",
    [
        ("policy pass 0.9 confirm 0.95\n", "above pass"),
        ("policy pass 1.5 confirm 0.5\n", "between 0 and 1"),
        ("policy pass 0.9 confirm 0.5\npolicy pass 0.9 confirm 0.5\n", "declared twice"),
        ('class mg unit = "mg"\nrule r observe observe { match number mg }\n', "observe is given twice"),
    ],
)
def test_policy_and_observe_errors(text, message):
    with pytest.raises(HeatError, match=message):
        compile_source(text)


def test_manifest_and_audit_reports_follow_them():
    program = compile_source(SOURCE)
    info = module_info(program)
    assert info.policy == Policy(0.95, 0.5)
    assert info.observe == frozenset({"dose"})
    assert info.heat["dose"] == 0.0 and info.heat["dose_low"] == 0.3  # observe-only weighs nothing
    report = wasm_checker(program).scan("5000 mg")
    audit = audit_report(info, "5000 mg", report.events, report.verdicts, report.counters)
    # dose (observe-only) rejects but weighs 0: confidence 1, and the rule set's policy applies
    assert audit.verdicts["dose"].name == "REJECTED"
    assert audit.confidence == 1.0 and audit.action == "pass" and audit.policy == Policy(0.95, 0.5)
    zero = wasm_checker(program).scan("0 mg")
    audit = audit_report(info, "0 mg", zero.events, zero.verdicts, zero.counters)
    assert audit.confidence == pytest.approx(0.7) and audit.action == "confirm"  # 0.5 <= 0.7 < 0.95
    explicit = audit_report(info, "0 mg", zero.events, zero.verdicts, zero.counters, Policy(0.6, 0.1))
    assert explicit.action == "pass"


def test_manifest_policy_is_checked():
    program = compile_source(SOURCE)
    from heatc.wasm import compile_wasm
    from heatc.wasm.pack import pack

    manifest = compile_wasm(program, pack(program)).manifest
    assert manifest["policy"] == {"pass": 0.95, "confirm": 0.5}
    assert [r.get("observe", False) for r in manifest["rules"]] == [True, False]
    for bad in ({"pass": 2, "confirm": 0.5}, {"pass": 0.5}, "0.9", {"pass": 0.5, "confirm": 0.9}):
        with pytest.raises(ModuleError, match="policy"):
            ModuleInfo.from_manifest({**manifest, "policy": bad})
    plain = compile_source(SOURCE.replace("policy pass 0.95 confirm 0.5\n", ""))
    assert "policy" not in compile_wasm(plain, pack(plain)).manifest
    assert module_info(plain).policy is None


HEATMAP = """heatmap: 1
name: t
tokenizer: {bytes: true}
thresholds: {sensitivity: 0}
categories:
  mg: {kind: unit, literals: [mg]}
cells:
  - {pair: [number, mg], score: 0.8, range: [0, 100], observe: true, name: dose}
  - {pair: [number, mg], score: 0.3, range: [1, 1000000], name: dose_low}
policy: {pass: 0.95, confirm: 0.5}
"""


def test_heatmap_fields_lower_and_build(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(HEATMAP)
    hm = load_heatmap(path)
    assert hm.policy == (0.95, 0.5) and [c.observe for c in hm.cells] == [True, False]
    program, lowered, _ = compile_heatmap(path)
    assert program.policy == [0.95, 0.5]
    assert {r.name: r.observe for r in program.rules} == {"dose": True, "dose_low": False}
    assert lowered.cell_index == {"dose": 0, "dose_low": 1}
    text = format_file(lowered.tree)
    assert "policy pass 0.95 confirm 0.5" in text and "observe {" in text
    result = build(path, tmp_path / "build")
    assert result.manifest["policy"] == {"pass": 0.95, "confirm": 0.5}
    # heatc scan takes the rule set's policy unless --policy is given
    for rules in (result.directory, path):
        out = CliRunner().invoke(app, ["scan", str(rules), "--json", "-"], input="0 mg")
        record = json.loads(out.stdout)
        assert record["policy"] == {"pass": 0.95, "confirm": 0.5} and record["action"] == "confirm"
        out = CliRunner().invoke(
            app, ["scan", str(rules), "--json", "--policy", "pass=0.6,confirm=0.1", "-"], input="0 mg"
        )
        assert json.loads(out.stdout)["action"] == "pass"


@pytest.mark.parametrize(
    "change, message",
    [
        ("policy: {pass: 0.95, confirm: 0.5}", None),
        ("policy: {pass: 0.95}", "policy: needs both pass and confirm"),
        ("policy: {pass: 0.5, confirm: 0.9}", "policy.confirm: 0.9 is above pass 0.5"),
        ("policy: {pass: 2, confirm: 0.5}", "policy.pass: expected a number between 0 and 1"),
        ("policy: {pass: 0.9, confirm: 0.5, escalate: 0.1}", "policy"),
    ],
)
def test_heatmap_policy_is_validated(tmp_path, change, message):
    path = tmp_path / "t.yaml"
    path.write_text(HEATMAP.replace("policy: {pass: 0.95, confirm: 0.5}", change))
    if message is None:
        load_heatmap(path)
        return
    with pytest.raises(HeatError) as e:
        load_heatmap(path)
    assert message in str(e.value) and "t.yaml:" in str(e.value)


def test_heatmap_observe_is_validated(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(HEATMAP.replace("observe: true", "observe: maybe"))
    with pytest.raises(HeatError, match=r"cells\[0\]\.observe: expected true or false"):
        load_heatmap(path)
