"""Pipelines as named stages (heatc.stages): `heatc build`'s stages each read only what an
earlier stage wrote; `--timings` prints every stage's wall time in order; `--dump-after
STAGE` writes what the stage made (the lowered rules, the IR, the kernel) and the build is
the same with or without it; an error says the stage it happened in."""

import json
import re

import pytest
from support import REPO
from support.cli import heatc

from heatc import ir
from heatc.errors import HeatError
from heatc.heatmap.build import STAGES, build
from heatc.lang.compiler import compile_source
from heatc.stages import Stage, StageError, run_stages

GOOD = REPO / "tests" / "heatmaps" / "good.yaml"


def _flows(stages, given):
    """Every stage reads only what is given or an earlier stage wrote, and writes new names."""
    seen = set(given)
    for stage in stages:
        assert set(stage.inputs) <= seen, f"{stage.name} reads {set(stage.inputs) - seen} before any stage writes it"
        assert not set(stage.outputs) & seen, f"{stage.name} writes {set(stage.outputs) & seen} again"
        seen |= set(stage.outputs)
    return seen


def test_the_build_stages_flow_in_order():
    names = [s.name for s in STAGES]
    assert names == ["read", "lower", "compile", "expects", "tokens", "pack", "codegen", "artifacts", "install"]
    assert "result" in _flows(STAGES, {"path", "out_root", "tokenizer", "name", "expects"})


def test_docs_list_the_build_stages_in_order():
    page = (REPO / "docs" / "heatmap.md").read_text(encoding="utf-8")
    section = page.split("## Build stages")[1].split("\n## ")[0]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == [s.name for s in STAGES]


def test_timings_name_every_stage_in_order(tmp_path):
    r = heatc("build", GOOD, "-o", tmp_path, "--timings")
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    assert lines[0] == "build stages (wall time):"
    rows = [re.fullmatch(r"  (\w+) +(\d+\.\d) ms", line) for line in lines[1:]]
    assert all(rows), lines
    assert [m.group(1) for m in rows] == [s.name for s in STAGES] + ["total"]
    total = sum(float(m.group(2)) for m in rows[:-1])
    assert abs(total - float(rows[-1].group(2))) <= 0.1 * len(rows)
    assert "build stages" not in r.stdout  # (stdout stays the one summary line)


def test_dump_after_writes_what_the_stage_made_and_changes_nothing(tmp_path):
    plain = build(GOOD, tmp_path / "plain")
    for stage, suffix in (("lower", ".heat"), ("compile", ".ir.json"), ("codegen", ".wat")):
        out = tmp_path / stage
        r = heatc("build", GOOD, "-o", out, "--dump-after", stage)
        assert r.exit_code == 0, r.output
        dumped = out / f"good.{stage}{suffix}"
        assert f"{stage}: wrote {dumped}" in r.stdout
        assert (out / "tiny").resolve().name == plain.target.name  # the same build
        text = dumped.read_text(encoding="utf-8")
        if stage == "lower":  # the rules as the heatmap lowers them: they compile to the same rules
            assert ir.to_plain(compile_source(text, str(GOOD)))["rules"] == ir.to_plain(plain.program)["rules"]
        elif stage == "compile":
            assert json.loads(text) == json.loads(ir.to_json(plain.program))
        else:
            assert "\n(module" in text and "(func" in text


def test_dump_after_a_stage_that_is_not_one_is_refused_before_building(tmp_path):
    r = heatc("build", GOOD, "-o", tmp_path / "out", "--dump-after", "parse")
    assert r.exit_code == 1
    assert "--dump-after: error: no stage 'parse' to dump; the stages with an output: lower, compile" in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "stage"),
    [
        ('ruleset x\nrule a {\n  match v:number "mg"\n  require v <\n}\n', "read"),  # a syntax error
        ('ruleset x\nrule a {\n  match v:number "mg"\n  require w < 3\n}\n', "compile"),  # an unknown name
        ('ruleset x\nclass u unit = "mg"\nrule a {\n  match v:number u\n  require v < 3\n}\n'
         'expect "2 mg" rejects a\n', "expects"),  # an example that does not hold
    ],
)  # fmt: skip
def test_an_error_names_its_stage(tmp_path, text, stage):
    path = tmp_path / "r.heat"
    path.write_text(text, encoding="utf-8")
    r = heatc("build", path, "-o", tmp_path / "out")
    assert r.exit_code == 1
    assert r.output.rstrip().endswith(f"(in stage {stage})"), r.output
    assert f"{path}:" in r.output  # (the stage's own diagnostics, file and line, come first)


def test_a_stage_error_keeps_its_diagnostics_and_a_bug_gets_a_note():
    def bad_input(x):
        raise HeatError([])

    def bug(x):
        raise KeyError("oops")

    with pytest.raises(StageError) as e:
        run_stages([Stage("first", "reads x", ("x",), (), bad_input)], {"x": 1})
    assert e.value.stage == "first" and e.value.diagnostics == []
    with pytest.raises(KeyError) as k:
        run_stages([Stage("second", "reads x", ("x",), (), bug)], {"x": 1})
    assert "(in stage second: reads x)" in k.value.__notes__
