"""bench/report.py: the tables of docs/performance.md rewritten from benchmark results
(fake ones here: the benchmarks themselves take minutes), the prose around them kept."""

from __future__ import annotations

import importlib.util
import re

import pytest
from support import REPO

_spec = importlib.util.spec_from_file_location("bench_report", REPO / "bench" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

MACHINE = "Test CPU, 2 cores, Linux x86_64, Python 3.11.7"
PAGE = """# Performance

Prose before.

<!-- bench:scan -->
old scan table
<!-- /bench:scan -->

Prose between.

<!-- bench:steps -->
old step table
<!-- /bench:steps -->

Prose after.
"""


def scan_row(corpus: str, heatc: float, trusted: float, events: float, hs: float | None) -> dict:
    row = {
        "corpus": corpus,
        "MB": 4.0,
        "heatc wasm": heatc,
        "heatc wasm trusted": trusted,
        "heatc wasm + events read": events,
        "reference": 0.5,
        "python re": 1.0,
        "pyahocorasick + re": 20.0,
    }
    if hs is not None:
        row["hyperscan (no callback)"] = hs
    return row


def step_rows(raw_512_1: float = 1.4, api_4096_1: float = 2.1) -> list[dict]:
    rows = []
    for context in (512, 4096):
        for batch, raw, api in ((1, raw_512_1, 2.0), (64, 0.12, 0.24)):
            if context == 4096 and batch == 1:
                api = api_4096_1
            rows.append(
                {"context": context, "batch": batch, "heatc_raw": raw, "heatc": api, "re": 4123.4, "xgrammar": None}
            )
            rows[-1]["vocab"] = 17086
    return rows


def cells(markdown: str) -> list[list[str]]:
    """The rows of the first markdown table in `markdown`, header and separator dropped."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def test_replace_keeps_prose_and_replaces_only_the_named_sections():
    out = report.replace_sections(PAGE, {"scan": "new scan"})
    assert "new scan" in out and "old scan table" not in out
    assert "old step table" in out
    for prose in ("Prose before.", "Prose between.", "Prose after."):
        assert prose in out
    # idempotent: writing the same section again changes nothing
    assert report.replace_sections(out, {"scan": "new scan"}) == out


@pytest.mark.parametrize(
    "page",
    [
        PAGE.replace("<!-- bench:scan -->\n", ""),  # no start
        PAGE.replace("<!-- /bench:scan -->\n", ""),  # no end
        PAGE + "<!-- bench:scan -->\n",  # twice
        PAGE.replace("<!-- bench:scan -->", "X")
        .replace("<!-- /bench:scan -->", "<!-- bench:scan -->")
        .replace("X", "<!-- /bench:scan -->"),  # end before start
    ],
)
def test_markers_missing_doubled_or_reversed_are_refused(page):
    with pytest.raises(report.MarkerError, match="bench:scan"):
        report.replace_sections(page, {"scan": "x"})


def test_update_names_the_file_and_leaves_it_unchanged_on_error(tmp_path):
    page = tmp_path / "performance.md"
    page.write_text(PAGE)
    with pytest.raises(report.MarkerError, match=re.escape(str(page))):
        report.update(page, {"steps": "new", "build": "missing section"})
    assert page.read_text() == PAGE
    report.update(page, {"steps": "new steps"})
    assert "new steps" in page.read_text() and "old scan table" in page.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["performance.md"]  # no temporary file left


def test_scan_section_table_ratios_and_target():
    rows = [scan_row("medical", 701.2, 768.0, 617.0, 609.0), scan_row("finance", 551.0, 562.0, 550.0, 479.0)]
    text = report.scan_section(rows, MACHINE, "2026-11-30")
    assert text.startswith(f"Measured 2026-11-30 with `python bench/run.py` on {MACHINE}.")
    assert cells(text) == [
        ["medical (MTSamples)", "4.0", "701", "768", "617", "0.5", "1.0", "20.0", "609"],
        ["finance (PBOC, TAT-QA)", "4.0", "551", "562", "550", "0.5", "1.0", "20.0", "479"],
    ]
    # 701.2 / 0.5 = 1,402; 551 / 0.5 = 1,102; 701.2 / 609 = 1.15; 551 / 479 = 1.15
    assert "1,102–1,402× reference interpreter" in text
    assert "28–35× pyahocorasick + `re`" in text
    assert "1.15× hyperscan (no callback)" in text
    assert "Trusted / hyperscan: 1.17–1.26×" in text
    assert "default limits met, trusted met" in text


def test_scan_section_without_hyperscan_and_below_it():
    slow = [scan_row("legal", 500.0, 520.0, 480.0, 578.0)]
    assert "default limits NOT met (legal (CUAD) 0.87×), trusted NOT met (legal (CUAD) 0.90×)" in report.scan_section(
        slow, MACHINE
    )
    # a learned heatmap's row is named by its file, and only the rows below hyperscan are listed
    rows = [scan_row("medical", 701.0, 768.0, 617.0, 609.0), scan_row("finance learned", 171.0, 180.0, 160.0, 386.0)]
    text = report.scan_section(rows, MACHINE)
    assert cells(text)[1][0] == "finance (PBOC, TAT-QA), `heatmaps/finance.yaml`"
    assert "default limits NOT met (finance (PBOC, TAT-QA), `heatmaps/finance.yaml` 0.44×)" in text
    missing = report.scan_section([scan_row("legal", 500.0, 520.0, 480.0, None)], MACHINE)
    assert cells(missing)[0][-1] == "—"
    assert "Target" not in missing and "hyperscan" not in missing.split("\n\n", 2)[2]


def test_step_section_targets():
    ok = report.step_section(step_rows(api_4096_1=1.99), MACHINE, "2026-11-30")
    assert ok.startswith(f"Measured 2026-11-30 with `python bench/run.py` on {MACHINE}; medical rules, a 17,086-token")
    assert cells(ok)[0] == ["512", "1", "1.400", "2.00", "4,123", "—"]
    assert "`step_batch` met, `feed_ids` met" in ok
    missed = report.step_section(step_rows(raw_512_1=2.5, api_4096_1=2.17), MACHINE)
    assert "`step_batch` NOT met (2.50 µs at batch 1, context 512; 2.50 µs at batch 1, context 4,096)" in missed
    assert "`feed_ids` NOT met (2.17 µs at batch 1, context 4,096)" in missed
    slower = [dict(r, heatc=r["heatc"] * (1.5 if r["context"] == 4096 else 1)) for r in step_rows(api_4096_1=1.0)]
    assert "context 4,096 +50% of 512 at batch 64" in report.step_section(slower, MACHINE)


def test_build_section():
    text = report.build_section({10000: 21.04, 100: 0.318, 1000: 1.03}, MACHINE, "2026-11-29")
    assert cells(text) == [
        ["100", "0.32", "", ""],
        ["1,000", "1.03", "×3.2 for ×10 rules", "≤ 2 s: met"],
        ["10,000", "21.0", "×20.4 for ×10 rules", "≤ 20 s: NOT met"],
    ]


def test_learning_sections():
    rows = {
        "medical": [0.900, 0.904, 0.796, 0.854, 0.498],
        "finance": [0.919, 0.928, 0.864, 0.799, 0.492],
        "legal": [0.903, 0.909, 0.847, 0.842, 0.496],
    }
    text = report.fidelity_section(rows, MACHINE, percentiles=(0.53, 0.54, 5197, 85848))
    assert cells(text)[0] == ["medical", "0.900", "0.904", "0.796", "0.854", "0.498"]
    assert cells(text)[-1] == ["mean", "**0.907** (target ≥ 0.90)", "0.914", "0.836", "0.832", "0.495"]
    assert "digit tokens 0.53, word tokens 0.54 (5,197 and 85,848 tokens)" in text
    seconds = {
        "teacher labelling (Jacobian probes, K=4)": 1.12,
        "Captum IntegratedGradients, n_steps=50": 30.4,
        "student, onnxruntime": 0.0103,
        "student, torch": 0.0084,
    }
    cost = report.cost_section(seconds, 9.5e-07, MACHINE)
    assert cells(cost)[2] == ["student, onnxruntime", "0.0103"]
    assert "**109×** faster" in cost and "**27×** cheaper" in cost and "9.5e-07" in cost
    rows = [
        ("medical, held out (MTSamples)", {
            "rules": 90, "checked": 6862, "flagged": 63,
            "impossible": {"unit swapped": (141, 235), "value /10": (148, 250), "value x10": (228, 300)},
        }),
        ("legal, held out (CUAD)", {
            "rules": 40, "checked": 3397, "flagged": 26,
            "impossible": {"term changed": (116, 126), "value x10": (370, 400)},
        }),
    ]  # fmt: skip
    use = report.usefulness_section(rows, MACHINE)
    assert cells(use)[0] == [
        "medical, held out (MTSamples)", "90", "6,862", "0.92 %", "**0.659**",
        "unit swapped 141/235, value /10 148/250, value x10 228/300",
    ]  # fmt: skip
    assert cells(use)[1][3:5] == ["0.77 %", "**0.924**"]  # (116 + 370) / (126 + 400)
    assert "medical: false alarms met, recall NOT met; legal: false alarms met, recall met" in use


def test_performance_page_has_every_section_the_benchmarks_write():
    page = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    names = ("scan", "steps", "build", "fidelity", "cost", "usefulness")
    assert report.replace_sections(page, dict.fromkeys(names, "x")).count("\nx\n") == len(names)
