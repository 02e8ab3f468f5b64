"""The command line: check, ir, scan (text and JSON), exit codes, errors without tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO
from support.cli import heatc

from heatc import ir

EXAMPLES = REPO / "examples"


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
    assert [x.name for x in program.rules][:2] == ["glucose_quantity", "blood_pressure_value"]


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
    assert doc["rules"]["glucose_quantity"] == "REJECTED" and doc["rules"]["heart_rate_value"] == "CONFIRMED"
    bad = next(e for e in doc["events"] if e["rule"] == "glucose_quantity")
    assert bad == {
        "kind": "match", "rule": "glucose_quantity", "verdict": "REJECTED", "bytes": [0, 18], "chars": [0, 18],
        "text": "Glucose 5000 mg/dL", "captures": {"v": 50.0}, "failed": "v in [0.5 mmol/L, 2000 mg/dL]",
    }  # fmt: skip


def test_scan_lines_gives_one_document_per_line():
    r = heatc("scan", EXAMPLES / "medical.heat", "--lines", "--json", input="pulse 88\r\npulse 880\n\nBP 120/80\n")
    docs = [json.loads(line) for line in r.output.splitlines()]
    assert [d["verdict"] for d in docs] == ["CONFIRMED", "REJECTED", "CONFIRMED", "CONFIRMED"]
    assert docs[1]["events"][0]["bytes"][0] == 0  # offsets are per document


def test_scan_table_shows_a_quantity_in_the_unit_written():
    """The JSON keeps a quantity's value in its dimension's base unit (50 g/L above); the
    table a reader looks at shows it as the text writes it."""
    r = heatc("scan", EXAMPLES / "medical.heat", "-", "--all", input="Glucose 5000 mg/dL. Temperature 389 °F.")
    assert r.exit_code == 3
    assert "v=5000 mg/dL" in r.output and "v=389 °F" in r.output
    assert "v=50" not in r.output.split() and "471.48" not in r.output


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


# --- the first hour of a new user ------------------------------------------------------------

HEATMAP = REPO / "heatmaps" / "medical.yaml"
NOTE = EXAMPLES / "texts" / "discharge_summary_errors.txt"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """heatc scan caches what it compiles: each test its own cache, never the user's."""
    monkeypatch.setenv("HEATC_CACHE", str(tmp_path / "cache"))


def test_build_a_rule_file_gives_a_build_directory(tmp_path):
    import heatc_runtime as rt

    r = heatc("build", EXAMPLES / "medical.heat", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{tmp_path / 'out' / 'medical'} (written): 31 rules (tiers: 31 L2")
    assert "256 tokens (bytes)" in r.output
    d = tmp_path / "out" / "medical"
    assert sorted(p.name for p in d.iterdir()) == [
        "manifest.json", "module.wasm", "program.json", "rules.hct", "tokens.bin",
    ]  # fmt: skip
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["build"]["inputs"] == [
        {"role": "rules", "path": "medical.heat", "sha256": manifest["build"]["inputs"][0]["sha256"]}
    ]
    for backend in ("wasm", "native"):
        report = rt.load(d, backend=backend).scan("Glucose 5000 mg/dL.")
        assert report.rejected == ["glucose_quantity", "glucose_value"]


def test_build_a_folder_of_rule_files_with_a_name_and_a_tokenizer(tmp_path):
    import heatc_runtime as rt

    rules = tmp_path / "clinic"
    rules.mkdir()
    (rules / "a.heat").write_text('class g keyword = "glucose"\nrule g_value { match g v:number\n require v < 100 }\n')
    (rules / "b.heat").write_text("ruleset ignored\nrule g_twice { match g v:number\n require v < 50 }\n")
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("[PAD]\n[UNK]\nglucose\n5\n")
    r = heatc("build", rules, "-o", tmp_path / "out", "--tokenizer", tmp_path / "vocab", "--name", "glucose_checks")
    assert r.exit_code == 0, r.output
    assert "glucose_checks (written): 2 rules" in r.output and "4 tokens (wordpiece)" in r.output
    checker = rt.load(tmp_path / "out" / "glucose_checks")
    assert checker.module_info.name == "glucose_checks"
    assert checker.scan("glucose 70").rejected == ["g_twice"]
    manifest = json.loads((tmp_path / "out" / "glucose_checks" / "manifest.json").read_text())
    assert [r["source"] for r in manifest["build"]["rules"]] == ["rules:a.heat", "rules:b.heat"]


def test_build_refuses_what_it_cannot_build_with_a_message(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, message in (
        ([empty], f"{empty}: error: no rule files (*.heat) in this folder"),
        ([EXAMPLES / "legal.heat", "--name", "9lives"], "--name: error: '9lives' is not a build name"),
        ([EXAMPLES / "legal.heat", "--tokenizer", tmp_path / "nope.json"], "--tokenizer: error:"),
    ):
        r = heatc("build", *args, "-o", tmp_path / "out")
        assert r.exit_code == 1 and message in r.output, r.output
    # an output directory that cannot be written: a message, not a PermissionError traceback
    import heatc.heatmap.build as build_module

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "locked"))

    monkeypatch.setattr(build_module.tempfile, "mkdtemp", refuse)
    r = heatc("build", EXAMPLES / "legal.heat", "-o", tmp_path / "locked")
    assert r.exit_code == 1, r.output
    assert (
        r.output == f"{tmp_path / 'locked'}: error: cannot write the build: Permission denied (nothing was replaced)\n"
    )


def test_show_into_a_folder_it_cannot_write(tmp_path, monkeypatch):
    import heatc.heatmap.show as show

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(show.tempfile, "mkstemp", refuse)
    r = heatc("show", HEATMAP, "-o", tmp_path / "locked" / "m.png")
    assert (
        r.exit_code == 1
        and r.output == f"{tmp_path / 'locked' / 'm.png'}: error: cannot write the picture: Permission denied\n"
    )
    r = heatc("show", HEATMAP, "-o", tmp_path / "m.jpg")
    assert r.exit_code == 1 and "write a .png, .svg or .pdf" in r.output


def test_show_outlines_only_where_the_threshold_leaves_cells_out_and_wastes_no_margin(tmp_path, monkeypatch):
    import matplotlib.axes
    import matplotlib.image
    import numpy as np

    from heatc.heatmap.format import load_heatmap
    from heatc.heatmap.show import render

    drawn = []
    real = matplotlib.axes.Axes.add_patch
    monkeypatch.setattr(matplotlib.axes.Axes, "add_patch", lambda ax, p: drawn.append(p) or real(ax, p))
    hm = load_heatmap(HEATMAP)
    assert hm.sensitivity == 0  # (the learner chose its cells: every one is a rule)
    render(hm, tmp_path / "all.png", top=12)
    assert drawn == []
    hm.sensitivity = 0.9
    render(hm, tmp_path / "some.png", top=12)
    assert 0 < len(drawn) < sum(1 for c in hm.cells if c.score >= 0.9) + 1
    image = matplotlib.image.imread(tmp_path / "all.png")[..., :3]
    blank = np.all(image > 0.98, axis=(0, 2))  # columns with nothing drawn
    used = np.flatnonzero(~blank)
    assert image.shape[1] - 1 - used[-1] < 40 and used[0] < 40, (used[0], image.shape[1] - used[-1])


def test_diff_reads_a_heatmap_away_from_its_rule_files(tmp_path):
    copy = tmp_path / "medical.yaml"
    copy.write_bytes(HEATMAP.read_bytes())  # its `rules: [medical_zh.heat]` is not beside it
    r = heatc("diff", HEATMAP, copy)
    assert r.exit_code == 0, r.output
    assert "0 added, 0 removed" in r.output
    assert heatc("build", copy, "-o", tmp_path / "b").exit_code == 1  # (a build does need them)


def test_scan_runs_a_rule_file_compiled_and_caches_it(tmp_path, monkeypatch):
    r = heatc("scan", EXAMPLES / "medical.heat", "--json", input="Glucose 5000 mg/dL.")
    assert r.exit_code == 3 and json.loads(r.output)["run"]["backend"] == "wasm"
    cached = list((tmp_path / "cache" / "builds").iterdir())
    assert len(cached) == 1
    import heatc.heatmap.build as build_module

    def no_build(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(build_module, "build", no_build)
    r = heatc("scan", EXAMPLES / "medical.heat", "--json", input="Pulse 88.")
    assert r.exit_code == 0, r.output
    changed = tmp_path / "changed.heat"
    changed.write_bytes((EXAMPLES / "medical.heat").read_bytes() + b"\n# a comment\n")
    r = heatc("scan", changed, "--json", input="Pulse 88.")
    assert r.exit_code == 1 and "compiled again" in str(r.exception)  # new contents: compiled anew


def test_scan_refuses_what_is_not_text_unless_told(tmp_path):
    cases = {
        "doc.pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", "this is a PDF, not text; heatc extract"),
        "ls": (b"\x7fELF\x02\x01\x01" + bytes(64), "this is an executable (ELF), not text"),
        "blob": (b"BP 120/80\x00\x00\x01", "binary data (a NUL byte at offset 9), not text"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        r = heatc("scan", EXAMPLES / "medical.heat", tmp_path / name)
        assert r.exit_code == 1 and message in r.output and "--binary scans it anyway" in r.output, r.output
    r = heatc("scan", EXAMPLES / "medical.heat", "-", input=b"Pulse 880.\x00")
    assert r.exit_code == 1 and r.output.startswith("standard input: error: this is binary data")
    r = heatc("scan", EXAMPLES / "medical.heat", tmp_path / "blob", "--binary")
    assert r.exit_code == 0, r.output


def test_the_table_folds_the_matches_of_one_value_into_one_verdict():
    r = heatc("scan", HEATMAP, "--also", EXAMPLES / "medical.heat", NOTE)
    assert r.exit_code == 3, r.output
    rows = [line for line in r.output.splitlines() if line.split(" ")[0] in ("CONFIRMED", "REJECTED", "PENDING")]
    potassium = [row for row in rows if "potassium 34" in row]
    assert len(potassium) == 1 and potassium[0].startswith("REJECTED"), potassium
    assert "+1 REJECTED, +1 CONFIRMED" in potassium[0]
    # the planted errors the learned heatmap misses are caught by the hand-written rules
    assert any(row.startswith("REJECTED") and "BP 76/128" in row for row in rows)
    assert any(row.startswith("REJECTED") and "SpO2 106%" in row for row in rows)
    assert len(rows) == 12, "\n".join(rows)  # 37 matches, 12 values
    # (both rule sets are named medical: their files tell them apart)
    assert "  medical.yaml  REJECTED  19 matches; confidence 0.00: escalate" in r.output
    assert "  medical.heat  REJECTED  18 matches" in r.output
    every = heatc("scan", HEATMAP, "--also", EXAMPLES / "medical.heat", NOTE, "--all")
    assert sum(1 for line in every.output.splitlines() if line.startswith(("CONFIRMED", "REJECTED"))) == 37


def test_the_table_never_wraps_and_shows_text_safely():
    r = heatc("scan", EXAMPLES / "medical.heat", NOTE)
    lines = r.output.splitlines()
    bp = [line for line in lines if "410/95" in line]
    assert len(bp) == 1 and "sys in [40, 300]" in bp[0] and len(bp[0]) > 80  # one line, past 80 columns
    assert all(line == line.rstrip() for line in lines)
    r = heatc("scan", EXAMPLES / "medical.heat", "-", input="Pulse\x1b[2J 880.")
    assert "\x1b" not in r.output and "Pulse\\x1b[2  v=2" in r.output


def test_a_long_document_lists_its_findings_and_counts_the_rest():
    text = "Pulse 88. " * 150 + "Pulse 880. " + "Pulse 90. " * 10
    r = heatc("scan", EXAMPLES / "medical.heat", "-", input=text)
    assert r.exit_code == 3
    rows = [line for line in r.output.splitlines() if line.startswith(("CONFIRMED", "REJECTED"))]
    assert len(rows) == 1 and rows[0].startswith("REJECTED") and "Pulse 880" in rows[0]
    assert "… and 160 CONFIRMED matches not listed (--all lists every match)" in r.output


def test_wording_counts_agree_with_their_nouns(tmp_path):
    one = tmp_path / "one.heat"
    one.write_text(
        'class g keyword = "glucose"\nrule r { match g v:number\n require v < 10 }\nexpect "glucose 5" passes r\n'
    )
    assert ": ok — 1 rule, 1 literal, 1 expect example passed" in heatc("check", one).output
    assert "(written): 1 rule (tiers" in heatc("build", one, "-o", tmp_path / "b").output
    r = heatc("scan", one, "-", input="glucose 5")
    assert "document: CONFIRMED  (9 bytes, 2 lexemes, 1 match;" in r.output


def test_heatc_test_is_quick_by_default_and_thorough_when_asked(tmp_path):
    one = tmp_path / "one.heat"
    one.write_text('class g keyword = "glucose"\nrule r { match g v:number\n require v < 10 }\n')
    r = heatc("test", one)
    assert r.exit_code == 0, r.output
    assert "ok   r: 25 generated inputs" in r.output and "--thorough: 200" in r.output
    assert r.output.rstrip().endswith("0 failures")
    assert "ok   r: 200 generated inputs" in heatc("test", one, "--thorough").output
    r = heatc("test", one, "--thorough", "-n", "5")
    assert r.exit_code == 1 and "not both" in r.output


def test_finetune_names_its_heatmap_after_its_file():
    from heatc.learn.finetuning.finetune import _output_name

    assert _output_name(Path("out/clinic.yaml")) == "clinic"
    assert _output_name(Path("my-labels.yml")) == "my_labels"
    assert _output_name(Path("2026.yaml")) == "_2026"


def test_a_folder_named_heatc_beside_a_script_does_not_break_the_package(tmp_path):
    """An editable install's import hook comes after the path finder, so a folder `heatc`
    beside a script (a checkout cloned as heatc/) is imported as an empty namespace package;
    the package's modules must still load (its version lives in heatc.version)."""
    (tmp_path / "heatc").mkdir()  # the shadowing folder: no __init__.py
    script = tmp_path / "script.py"
    script.write_text(
        "import importlib.abc, importlib.util, sys\n"
        f"REPO = {str(REPO)!r}\n"
        "class Editable(importlib.abc.MetaPathFinder):  # as setuptools' editable finder does\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if not name.startswith('heatc.'):\n"
        "            return None\n"
        "        base = REPO + '/' + name.replace('.', '/')\n"
        "        import os\n"
        "        if os.path.isdir(base):\n"
        "            return importlib.util.spec_from_file_location(name, base + '/__init__.py',"
        " submodule_search_locations=[base])\n"
        "        return importlib.util.spec_from_file_location(name, base + '.py')\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "sys.meta_path.append(Editable())\n"
        "sys.path[:] = [p for p in sys.path if not p.rstrip('/').endswith(REPO.rstrip('/'))]\n"
        "import heatc\n"
        "assert heatc.__file__ is None, 'not shadowed: the test shows nothing'\n"
        "from heatc.cli import app\n"
        "from heatc.heatmap.build import build\n"
        "from heatc.version import __version__\n"
        "print('ok', __version__)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO / "runtime")
    r = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ok ")
