"""The command line: check, ir, scan (text and JSON), exit codes, errors without tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heatc import ir
from heatc.cli import app

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
runner = CliRunner()


def heatc(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


@pytest.mark.parametrize("name", ["medical", "finance", "legal"])
def test_check_examples(name):
    r = heatc("check", EXAMPLES / f"{name}.heat")
    assert r.exit_code == 0, r.output
    assert "ok" in r.output and "expect examples passed" in r.output


def test_check_reports_a_failing_expectation(tmp_path):
    path = tmp_path / "r.heat"
    path.write_text(
        'class g keyword = "glucose"\nrule r { match g v:number\n require v < 10 }\nexpect "glucose 50" passes r\n'
    )
    r = heatc("check", path)
    assert r.exit_code == 1
    assert f"{path}:4:1: error: expect passes: rejected r (at 'glucose 50': v < 10)" in r.output


def test_check_syntax_error_has_no_traceback(tmp_path):
    path = tmp_path / "bad.heat"
    path.write_text("rule r {\n  match\n}\n")
    r = heatc("check", path)
    assert r.exit_code == 1
    assert f"{path}:3:1: error: expected" in r.output
    assert "Traceback" not in r.output


def test_ir_json_round_trips():
    r = heatc("ir", EXAMPLES / "medical.heat", "--json")
    assert r.exit_code == 0
    program = ir.from_json(r.output)
    assert ir.to_json(program) == ir.to_json(ir.from_json(ir.to_json(program)))
    assert [x.name for x in program.rules][:2] == ["glucose_mg_dl", "glucose_mmol_l"]


def test_ir_listing():
    r = heatc("ir", EXAMPLES / "finance.heat")
    assert r.exit_code == 0
    assert "rules (heat x freq order):" in r.output and "when covered_borrower" in r.output


def test_ir_rejects_another_version():
    text = ir.to_json(ir.from_json(heatc("ir", EXAMPLES / "legal.heat", "--json").output))
    data = json.loads(text)
    data["ir_version"] = 99
    with pytest.raises(ir.IRVersionError, match="IR version 99 is not supported"):
        ir.from_json(json.dumps(data))


def test_scan_json_document():
    r = heatc("scan", EXAMPLES / "medical.heat", "-", "--json", input="Glucose 5000 mg/dL. Pulse 88.")
    assert r.exit_code == 3  # something was rejected
    doc = json.loads(r.output)
    assert doc["verdict"] == "REJECTED"
    assert doc["rules"]["glucose_mg_dl"] == "REJECTED" and doc["rules"]["heart_rate_value"] == "CONFIRMED"
    bad = next(e for e in doc["events"] if e["rule"] == "glucose_mg_dl")
    assert bad == {
        "kind": "match", "rule": "glucose_mg_dl", "verdict": "REJECTED", "bytes": [0, 18], "chars": [0, 18],
        "text": "Glucose 5000 mg/dL", "captures": {"v": 5000.0}, "failed": "v in [10, 2000]",
    }  # fmt: skip


def test_scan_lines_gives_one_document_per_line():
    r = heatc("scan", EXAMPLES / "medical.heat", "--lines", "--json", input="pulse 88\r\npulse 880\n\nBP 120/80\n")
    docs = [json.loads(line) for line in r.output.splitlines()]
    assert [d["verdict"] for d in docs] == ["CONFIRMED", "REJECTED", "CONFIRMED", "CONFIRMED"]
    assert docs[1]["events"][0]["bytes"][0] == 0  # offsets are per document


def test_scan_text_table(tmp_path):
    r = heatc("scan", EXAMPLES / "finance.heat", EXAMPLES / "texts" / "loan_terms_zh_violations.txt")
    assert r.exit_code == 3
    assert "REJECTED" in r.output and "annual_rate_cap" in r.output and "r <= 24" in r.output


def test_scan_missing_input_file():
    r = heatc("scan", EXAMPLES / "medical.heat", "/nonexistent/notes.txt")
    assert r.exit_code == 1
    assert "/nonexistent/notes.txt: error: cannot read" in r.output


def test_scan_unknown_backend():
    r = heatc("scan", EXAMPLES / "medical.heat", "-", "--backend", "fpga", input="x")
    assert r.exit_code == 1 and "unknown backend 'fpga'" in r.output


def test_installed_entry_point():
    """The console script works as a user would run it, in a separate process."""
    exe = Path(sys.executable).parent / "heatc"
    r = subprocess.run(
        [str(exe), "scan", str(EXAMPLES / "medical.heat"), "--json"],
        input=b"SpO2 107%", capture_output=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr.decode()
    assert json.loads(r.stdout)["rules"]["oxygen_saturation_value"] == "REJECTED"


@pytest.mark.parametrize(
    "name,text",
    [
        ("medical", "discharge_summary_errors.txt"),
        ("finance", "mla_disclosure_en.txt"),
        ("legal", "service_agreement_en.txt"),
    ],
)
def test_scan_backends_print_the_same_json(name, text):
    outputs = []
    for backend in ("reference", "wasm", "native"):
        r = heatc("scan", EXAMPLES / f"{name}.heat", EXAMPLES / "texts" / text, "--json", "--backend", backend)
        assert r.exit_code == 3, r.output
        doc = json.loads(r.output)
        assert doc.pop("run")["backend"] == backend
        outputs.append(doc)
    assert outputs[0] == outputs[1] == outputs[2]


def test_generate_refuses_bad_options_before_loading_a_model(tmp_path):
    rules = EXAMPLES / "medical.heat"
    for args, message in (
        (["--mode", "guardd"], "unknown mode 'guardd' (modes: observe, stop, guard)"),
        (["--engine", "tgi"], "unknown engine 'tgi' (engines: transformers, vllm)"),
        (["--k", "0"], "k must be a whole number from 1 to 64"),
        (["--mode", "guard", "--policy", "invent"], "unknown guard policy 'invent'"),
        (["--marker", "[9]"], "the marker must be 1 to 64 characters of text with no digits"),
        (["--backend", "tpu"], "unknown backend 'tpu' (backends: native, wasm, cuda)"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    ):
        r = heatc("generate", rules, "--prompt", "hi", *args)
        assert r.exit_code == 1 and message in r.output, r.output
    bad = tmp_path / "bad.heat"
    bad.write_text("rule {\n")
    r = heatc("generate", bad, "--prompt", "hi")
    assert r.exit_code == 1 and f"{bad}:1:" in r.output and "Traceback" not in r.output
