"""heatc build: outputs, manifest, reproducibility, verification at load, atomicity, and
the commands around it (inspect, scan, lower, test, show)."""

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import heatc_runtime as rt
from heatc.cli import app
from heatc.errors import HeatError
from heatc.heatmap.build import HCT_MAGIC, build
from heatc.verify.properties import case_spellings
from heatc_runtime import abi

HERE = Path(__file__).parent
GOOD = HERE / "heatmaps" / "good.yaml"
REPO = HERE.parent
runner = CliRunner()


def heatc(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_build_writes_every_artifact(tmp_path):
    result = build(GOOD, tmp_path)
    d = result.directory
    assert d == tmp_path / "tiny" and d.is_symlink()
    assert sorted(p.name for p in d.iterdir()) == [
        "manifest.json",
        "module.wasm",
        "program.json",
        "rules.hct",
        "tokens.bin",
    ]
    m = json.loads((d / "manifest.json").read_text())
    b = m["build"]
    for name, info in b["artifacts"].items():
        assert hashlib.sha256((d / name).read_bytes()).hexdigest() == info["sha256"]
    assert [i["role"] for i in b["inputs"]] == ["heatmap"]
    assert b["inputs"][0]["sha256"] == hashlib.sha256(GOOD.read_bytes()).hexdigest()
    assert b["rules"] == [
        {
            "id": 0,
            "name": "glucose_mg_dl",
            "source": "glucose×number×mg_dl",
            "heat": 0.9,
            "freq": 1.0,
            "tier": "l2",
            "bytes": b["rules"][0]["bytes"],
        }
    ]
    assert m["abi"] == {"major": abi.ABI_MAJOR, "minor": abi.ABI_MINOR} and b["heatc_version"]


def test_rules_hct_header(tmp_path):
    d = build(GOOD, tmp_path).directory
    data = (d / "rules.hct").read_bytes()
    assert data[:8] == HCT_MAGIC
    version, major, _minor, n_rules, state_size, blob_size, l2_end, device_end, digest, _n_sections = (
        struct.unpack_from("<IIIIIIQQ32sI", data, 8)
    )
    assert (version, major, n_rules) == (abi.HCT_VERSION, abi.ABI_MAJOR, 1)
    blob = data[-blob_size:]
    assert hashlib.sha256(blob).digest() == digest
    assert 0 < l2_end <= device_end <= blob_size
    assert state_size == json.loads((d / "manifest.json").read_text())["layout"]["state_size"]


def test_rebuild_is_byte_identical(tmp_path):
    first = build(GOOD, tmp_path)
    second = build(GOOD, tmp_path)
    assert second.unchanged and second.target == first.target
    code = (
        f"from heatc.heatmap.build import build; print(build({str(GOOD)!r}, {str(tmp_path / 'other')!r}).target.name)"
    )
    names = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert names == {first.target.name}


def test_load_verifies_every_artifact(tmp_path):
    d = build(GOOD, tmp_path).directory
    checker = rt.load(d)
    assert checker.scan("glucose 5000 mg/dL.").rejected == ["glucose_mg_dl"]
    assert checker.token_table is not None and len(checker.token_table) == 256  # tokens.bin loaded
    target = d.resolve()
    for name in ("tokens.bin", "rules.hct", "program.json"):
        original = (target / name).read_bytes()
        (target / name).write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        with pytest.raises(rt.ModuleError, match=f"{name}: checksum mismatch"):
            rt.load(d)
        (target / name).write_bytes(original)


def test_a_failing_example_stops_the_build(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.read_text().replace("rejects: [glucose_mg_dl]", "passes: [glucose_mg_dl]"))
    with pytest.raises(HeatError) as info:
        build(bad, tmp_path / "out")
    d = info.value.diagnostics[0]
    assert d.path.endswith("bad.yaml") and d.line == 14 and "expect passes: rejected glucose_mg_dl" in d.message
    assert not (tmp_path / "out" / "tiny").exists()


KILLED_BUILD = """
import os, sys, time
import heatc.heatmap.build as b
step = sys.argv[1]
real = getattr(os, step)
def slow(*args, **kwargs):
    print("in " + step, flush=True)
    time.sleep(60)
    return real(*args, **kwargs)
setattr(b.os, step, slow)
b.build(sys.argv[2], sys.argv[3])
"""


@pytest.mark.parametrize("step", ["fsync", "symlink"])
def test_a_killed_build_leaves_the_previous_one_intact(tmp_path, step):
    out = tmp_path / "build"
    before = build(GOOD, out)
    changed = tmp_path / "changed.yaml"
    changed.write_text(GOOD.read_text().replace("score: 0.9", "score: 0.95"))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILD, step, str(changed), str(out)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == f"in {step}"  # the build is writing its new files
    child.send_signal(signal.SIGKILL)
    child.wait()
    link = out / "tiny"
    assert link.resolve() == before.target
    checker = rt.load(link)  # complete and consistent
    assert checker.scan("glucose 5000 mg/dL.").rejected == ["glucose_mg_dl"]
    assert json.loads((link / "manifest.json").read_text())["build"]["rules"][0]["heat"] == 0.9
    after = build(changed, out)  # the next build succeeds and cleans up
    assert after.target != before.target and after.directory.resolve() == after.target


def test_cli_build_inspect_scan_lower(tmp_path):
    r = heatc("build", GOOD, "-o", tmp_path)
    assert r.exit_code == 0, r.output
    assert "1 rule (tiers: 1 L2, 0 device, 0 host), 256 tokens (bytes)" in r.output
    r = heatc("inspect", tmp_path / "tiny")
    assert (
        r.exit_code == 0
        and "artifacts (all checksums verified)" in r.output
        and "from glucose×number×mg_dl" in r.output
    )
    r = heatc("scan", tmp_path / "tiny", "-", "--json")
    assert r.exit_code == 0  # stdin empty: nothing rejected
    r = runner.invoke(app, ["scan", str(tmp_path / "tiny"), "--json"], input="glucose 7000 mg/dL.")
    doc = json.loads(r.output)
    assert r.exit_code == 3 and doc["run"]["backend"] == "wasm" and doc["rules"] == {"glucose_mg_dl": "REJECTED"}
    r = heatc("lower", GOOD)
    assert r.exit_code == 0 and "# skipped cell glucose×number (line 12): score 0.5 below" in r.output
    assert "require v in [22.5, 1220]" in r.output


def test_cli_test_and_show(tmp_path):
    r = heatc("test", GOOD, "-n", "30")
    assert r.exit_code == 0, r.output
    assert "ok   glucose_mg_dl: 30 generated inputs (pattern and requirements)" in r.output
    r = heatc("show", GOOD, "-o", tmp_path / "tiny.png")
    assert r.exit_code == 0 and (tmp_path / "tiny.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_test_spells_literals_in_ascii_case_only(tmp_path):
    """Classes fold ASCII letters only: "µg".upper() is Greek "ΜG", another text altogether,
    so `heatc test` must not offer it as a spelling of the literal."""
    assert case_spellings("µg/dL") == ["µg/dL", "µg/dl", "µG/DL", "µG/Dl"]
    rules = tmp_path / "micro.heat"
    rules.write_text(
        'ruleset micro "doses in micrograms"\nclass mcg unit = "µg"\n'
        'rule dose "A dose in µg: 1-1000" {\n  match v:number mcg\n  require v in [1, 1000]\n}\n'
    )
    r = heatc("test", rules, "-n", "60")
    assert r.exit_code == 0, r.output


def test_cli_test_reports_a_failing_example(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.read_text().replace("rejects: [glucose_mg_dl]", "passes: [glucose_mg_dl]"))
    r = heatc("test", bad, "-n", "10")
    assert r.exit_code == 1 and "FAIL expect (reference)" in r.output and "FAIL expect (wasm)" in r.output


def test_shipped_heatmap_builds_with_the_embedded_tokenizer(tmp_path):
    result = build(REPO / "heatmaps" / "finance.yaml", tmp_path)
    b = result.manifest["build"]
    assert b["tokenizer"] == {"kind": "wordpiece", "tokens": 30522}
    assert [i["role"] for i in b["inputs"]] == ["heatmap", "rules", "tokenizer"]  # finance_zh.heat merged in
    checker = rt.load(result.directory)
    assert checker.scan("该产品年化利率高达36%。").rejected == ["zh_annual_rate_cap"]


def test_scan_refuses_a_tampered_build(tmp_path):
    d = build(GOOD, tmp_path).directory
    (d.resolve() / "module.wasm").write_bytes(b"\0asm")
    r = runner.invoke(app, ["scan", str(d)], input="x")
    assert r.exit_code == 1 and "size mismatch" in r.output
