"""The learner's settings (heatc/learn/config.py): one dataclass per stage, the work folder's
fingerprint derived from their fields — a change of any fingerprinted field changes it, a
change of a field marked as not fingerprinted does not — and the command line's defaults
read from the dataclasses, so that each is defined once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from heatc.learn.config import (
    FINETUNE_CELLS,
    MIN_FOLD_VALUES,
    CellsConfig,
    DistilConfig,
    FinetuneConfig,
    LearnConfig,
    TeachingConfig,
)

# What a work folder of `heatc learn` was made from: the teacher's labels depend on these and
# on nothing else of the settings.
LEARN_FINGERPRINTED = {
    "corpus", "exclude", "rules", "seed", "teacher", "epsilon", "probes", "directions", "discovery_sentences",
    "label_sentences", "probes_per_cell", "max_probe_sentences", "probes_per_sentence", "candidate_count",
    "max_keywords", "chunk_size", "heldout", "teacher_sentences", "min_support",
}  # fmt: skip
# ... and of `heatc finetune` (with the base heatmap's and the domain corpus's digests)
FINETUNE_FINGERPRINTED = {"teacher", "seed", "teacher_sentences", "epochs", "lr", "new_student"}


def _changed(value):
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return Path("/models/other")
    if isinstance(value, Path):
        return value.with_name("other")
    if isinstance(value, list):
        return [*value, "extra*"]
    raise AssertionError(f"no other value for {value!r}")


def _leaves(config, prefix=()):
    """(path of attribute names, field) of every setting, those of the settings it holds included."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and f.metadata.get("fingerprint", True) is not False:
            yield from _leaves(value, (*prefix, f.name))
        else:
            yield (*prefix, f.name), f


def _replace(config, path, value):
    if len(path) == 1:
        return dataclasses.replace(config, **{path[0]: value})
    return dataclasses.replace(config, **{path[0]: _replace(getattr(config, path[0]), path[1:], value)})


def _learn_base(tmp_path: Path) -> LearnConfig:
    rules = tmp_path / "house.heat"
    rules.write_text("class unit_mg = ['mg'];\n", encoding="utf-8")
    return LearnConfig(corpus=[tmp_path / "notes"], output=tmp_path / "x.yaml", rules=[rules])


def test_every_learn_setting_changes_the_fingerprint_unless_marked(tmp_path):
    base = _learn_base(tmp_path)
    seen = set()
    for path, f in _leaves(base):
        name = path[-1]
        if name == "rules":  # by content (`test_the_rule_files_count_by_content`)
            other = tmp_path / "other.heat"
            other.write_text("class unit_g = ['g'];\n", encoding="utf-8")
            changed = _replace(base, path, [other])
        elif name == "corpus":
            changed = _replace(base, path, [tmp_path / "other"])
        else:
            changed = _replace(base, path, _changed(getattr(base, path[0]) if len(path) == 1 else f.default))
        differs = changed.fingerprint() != base.fingerprint()
        if name == "student":  # not recorded itself, it decides whether `teacher_sentences` is
            assert differs and f.metadata.get("fingerprint") is False
            continue
        assert differs == (name in LEARN_FINGERPRINTED), (
            f"{'.'.join(path)}: fingerprint {'changed' if differs else 'kept'}"
        )
        assert differs == (f.metadata.get("fingerprint") is not False)
        seen.add(name)
    assert LEARN_FINGERPRINTED <= seen


def test_the_rule_files_count_by_content(tmp_path):
    config = _learn_base(tmp_path)
    before = config.fingerprint()
    config.rules[0].write_text("class unit_mg = ['mg', 'milligram'];\n", encoding="utf-8")
    assert config.fingerprint() != before


def test_settings_fingerprinted_only_in_some_cases_keep_earlier_work_folders_valid(tmp_path):
    """`exclude` counts only when given and `teacher_sentences` only where the student scores
    the cells: a work folder written before either existed keeps its fingerprint."""
    base = _learn_base(tmp_path)
    assert dataclasses.replace(base, exclude=[]).fingerprint() == base.fingerprint()
    no_student = dataclasses.replace(base, distil=DistilConfig(student=False))
    fewer = dataclasses.replace(no_student, teaching=TeachingConfig(teacher_sentences=10))
    assert fewer.fingerprint() == no_student.fingerprint()  # the teacher reads every sentence anyway
    zero = dataclasses.replace(base, teaching=TeachingConfig(teacher_sentences=0))
    assert zero.fingerprint() == dataclasses.replace(zero, distil=DistilConfig(student=False)).fingerprint()


def test_every_finetune_setting_changes_the_fingerprint_unless_marked(tmp_path):
    base = FinetuneConfig(base=tmp_path / "base.yaml", output=tmp_path / "out.yaml")
    for f in dataclasses.fields(base):
        value = getattr(base, f.name)
        if f.name == "cells":
            changed = dataclasses.replace(base, cells=dataclasses.replace(value, min_support=99, alarm_budget=0.5))
        elif f.name in ("base", "output"):
            changed = dataclasses.replace(base, **{f.name: tmp_path / "other.yaml"})
        elif f.name == "pages":
            changed = dataclasses.replace(base, pages={"a.pdf": [1]})
        elif f.name in ("pdfs", "texts"):
            changed = dataclasses.replace(base, **{f.name: [tmp_path / "other.pdf"]})
        else:
            changed = dataclasses.replace(base, **{f.name: _changed(value)})
        differs = changed.fingerprint("b", "c") != base.fingerprint("b", "c")
        assert differs == (f.name in FINETUNE_FINGERPRINTED), (
            f"{f.name}: fingerprint {'changed' if differs else 'kept'}"
        )
        assert differs == (f.metadata.get("fingerprint") is not False)
    # the base heatmap and the domain's files count by content
    assert base.fingerprint("b", "c") != base.fingerprint("b2", "c")
    assert base.fingerprint("b", "c") != base.fingerprint("b", "c2")


def test_finetune_fits_a_fold_s_range_to_fewer_values_than_learn():
    """A domain's doses sit on a handful of PDF pages: fine-tuning asks 3 values of a fold
    where `heatc learn` asks MIN_FOLD_VALUES; the difference is the fine-tune's own setting."""
    assert CellsConfig().min_fold_values == MIN_FOLD_VALUES == 5
    assert FinetuneConfig(base=Path("b.yaml"), output=Path("o.yaml")).cells.min_fold_values == 3
    assert FINETUNE_CELLS.min_support < CellsConfig().min_support
    assert FINETUNE_CELLS.sensitivity is None  # the base heatmap's threshold


@pytest.mark.parametrize(
    ("command", "settings"),
    [
        ("learn", {"--epsilon": ("teaching", "epsilon"), "--label-sentences": ("teaching", "label_sentences"),
                   "--probe-sentences": ("teaching", "max_probe_sentences"), "--topup-probes": ("teaching", "topup_probes"),
                   "--discovery-sentences": ("teaching", "discovery_sentences"),
                   "--teacher-sentences": ("teaching", "teacher_sentences"), "--device": ("teaching", "device"),
                   "--min-support": ("cells", "min_support"), "--sensitivity": ("cells", "sensitivity"),
                   "--alarm-budget": ("cells", "alarm_budget"), "--bands": ("cells", "bands"),
                   "--places": ("cells", "places"), "--dimensions": ("cells", "dimensions"),
                   "--epochs": ("distil", "epochs"), "--student": ("distil", "student"), "--seed": ("seed",)}),
        ("finetune", {"--teacher-sentences": ("teacher_sentences",), "--epochs": ("epochs",), "--seed": ("seed",),
                      "--device": ("device",), "--min-support": ("cells", "min_support"),
                      "--alarm-budget": ("cells", "alarm_budget"), "--dimensions": ("cells", "dimensions"),
                      "--keep-unused": ("keep_unused",), "--new-student": ("new_student",)}),
    ],
)  # fmt: skip
def test_the_command_line_defaults_are_the_settings_defaults(command, settings):
    import typer.main

    from heatc.cli import app

    group = typer.main.get_command(app)
    cmd = group.commands[command]
    config = (
        LearnConfig(corpus=[], output=Path("x.yaml"))
        if command == "learn"
        else FinetuneConfig(base=Path("b.yaml"), output=Path("o.yaml"))
    )
    options = {o: p for p in cmd.params for o in p.opts}
    for option, path in settings.items():
        want = config
        for name in path:
            want = getattr(want, name)
        assert options[option].default == want, option
