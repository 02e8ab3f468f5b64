"""The shipped rule sets on text we wrote: implausible values are flagged, plausible ones
pass, and every `expect` example holds."""

from pathlib import Path

import pytest

from heatc.lang.compiler import compile_file
from heatc.verify.backends import run_document
from heatc.verify.expect import check_expects
from heatc_runtime import Verdict

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def scan(rules: str, text: str):
    program = compile_file(EXAMPLES / f"{rules}.heat")
    data = (EXAMPLES / "texts" / text).read_bytes()
    events, verdicts, _ = run_document("reference", program, data)
    rejected = {e.name: data[e.start : e.end].decode() for e in events if e.verdict is Verdict.REJECTED}
    return verdicts, rejected


@pytest.mark.parametrize("rules", ["medical", "finance", "legal"])
def test_expect_examples_hold(rules):
    program = compile_file(EXAMPLES / f"{rules}.heat")
    assert len(program.expects) >= 10
    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []


@pytest.mark.parametrize(
    "rules,text",
    [
        ("medical", "discharge_summary.txt"),
        ("medical", "clinic_note_zh.txt"),
        ("finance", "loan_terms_zh.txt"),
    ],
)
def test_plausible_documents_pass(rules, text):
    verdicts, rejected = scan(rules, text)
    assert rejected == {}
    assert set(verdicts.values()) == {Verdict.CONFIRMED}


def test_implausible_clinical_values_are_flagged():
    _, rejected = scan("medical", "discharge_summary_errors.txt")
    assert rejected == {
        "temperature_quantity": "temperature 389 °F",
        "temperature_value": "temperature 389",
        "blood_pressure_value": "BP 76/128",  # the last rejection of each rule is kept
        "blood_pressure_mm_hg": "410/95 mmHg",
        "potassium_value": "potassium 34",
        "glucose_quantity": "glucose 3120 mg/dL",
        "glucose_value": "glucose 3120",
        "oxygen_saturation_value": "SpO2 106%",
    }


def test_implausible_chinese_clinical_values_are_flagged():
    _, rejected = scan("medical", "clinic_note_zh_errors.txt")
    assert rejected == {
        "temperature_quantity": "体温 63℃",
        "glucose_quantity": "空腹血糖 186 毫摩尔/升",
        "potassium_value": "血钾 42",
        "hemoglobin_quantity": "血红蛋白 13.2 克/升",
    }


def test_lending_limits_are_enforced():
    _, rejected = scan("finance", "loan_terms_zh_violations.txt")
    assert rejected == {
        "annual_rate_cap": "年化利率为36%",
        "credit_per_borrower_cap": "单户授信余额最高50万元",
        "loan_term_years": "贷款期限为3年",
        "capital_adequacy_floor": "资本充足率为百分之六点五",
    }


def test_mla_cap_applies_to_covered_borrowers():
    _, rejected = scan("finance", "mla_disclosure_en.txt")
    assert rejected == {"mla_apr_cap": "APR is 39.9%"}


def test_contract_contradictions_are_found():
    _, rejected = scan("legal", "service_agreement_en.txt")
    assert rejected == {
        "term_days_consistent": "invoices is due within 45 days",
        "governing_law_single": "construed in accordance with the laws of Delaware",
    }
