"""Errors about rule files rather than their text: a file that is not UTF-8, a file that
cannot be read. (Compile errors of a source text are corpus cases:
tests/conformance/errors/*.yaml, run by tests/test_conformance.py.)"""

import pytest

from heatc.errors import HeatError
from heatc.lang.compiler import compile_file


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.heat"
    path.write_bytes(b'class a unit = "caf\xe9"\n')
    with pytest.raises(HeatError) as info:
        compile_file(path)
    d = info.value.diagnostics[0]
    assert (d.line, d.column, d.message) == (1, 20, "the file is not valid UTF-8")


def test_missing_file(tmp_path):
    with pytest.raises(HeatError) as info:
        compile_file(tmp_path / "nope.heat")
    assert "cannot read file" in info.value.render()
