"""The `heatc` command line in process (typer's runner): `heatc("scan", path)` returns the result."""

from __future__ import annotations

from typer.testing import CliRunner

from heatc.cli import app

_runner = CliRunner()


def heatc(*args, input=None):
    return _runner.invoke(app, [str(a) for a in args], input=input)
