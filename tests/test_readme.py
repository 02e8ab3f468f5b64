"""The README's code runs as shown: its Python blocks, run in order in one namespace, print
the comment lines that end each block, and its rule file compiles with its expects holding."""

from __future__ import annotations

import contextlib
import io
import re

from conftest import REPO

from heatc.backends import run_document
from heatc.lang import compile_source
from heatc.verify.expect import check_expects

README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", README, re.S | re.M)


def expected_output(code: str) -> list[str]:
    """The comment lines after a block's last line of code: what it prints."""
    lines = code.rstrip("\n").splitlines()
    out = []
    while lines and lines[-1].startswith("# "):
        out.insert(0, lines.pop()[2:])
    return out


def test_python_blocks_print_what_the_readme_says(tmp_path, monkeypatch):
    codes = blocks("python")
    assert len(codes) >= 2
    monkeypatch.chdir(tmp_path)  # the blocks write build/…; they read examples/ from the checkout
    (tmp_path / "examples").symlink_to(REPO / "examples")
    namespace: dict = {}
    for code in codes:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), namespace)
        assert printed.getvalue().splitlines() == expected_output(code), code


def test_the_rule_file_compiles_and_its_expects_hold():
    (source,) = blocks("heat")
    program = compile_source(source, "README.md")
    assert program.expects
    assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []
