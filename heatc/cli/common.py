"""What every `heatc` command shares: the Typer app, the console, failing with a message
(never a traceback), reading rules from a file, a heatmap or a build, printing a report.

Public surface: `app`, `out`, `fail(message)`, `compile_rules(path)`, `diag(path, message)`,
`Timings`, `dump_after_option(where)`, `alarm_budget_option(help)`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from heatc.errors import HeatError
from heatc.version import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile rule files and SDS heatmaps into state machines that check generated text.",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)


def alarm_budget_option(help: str):
    """--alarm-budget, a fraction (0 to 1) of what is checked; `help`: of what, for this command."""
    return Annotated[float, typer.Option("--alarm-budget", min=0.0, max=1.0, help=help)]


#: --timings, for a command whose work is a list of named stages (heatc.stages).
Timings = Annotated[bool, typer.Option("--timings", help="Print each stage's wall time (to stderr).")]


def dump_after_option(where: str):
    """--dump-after STAGE, for a command of named stages; `where`: what it writes, and where."""
    return Annotated[
        str | None, typer.Option("--dump-after", metavar="STAGE", help=f"Write what STAGE made to {where}.")
    ]


def fail(message: str) -> typer.Exit:
    sys.stdout.flush()
    sys.stderr.write(message.rstrip("\n") + "\n")
    return typer.Exit(1)


def compile_rules(path: Path):
    """A rule file (.heat), a folder of them, a heatmap (.yaml), or a build directory (its
    program.json), compiled; input errors end the command with their message."""
    try:
        return _compile_rules(path)
    except HeatError as e:
        raise fail(e.render()) from None


def _compile_rules(path: Path):
    from heatc.lang.compiler import compile_file

    if path.is_dir() and not (path / "program.json").exists() and any(path.glob("*.heat")):
        from heatc.heatmap.build import compile_folder

        return compile_folder(path)[0]
    if path.is_dir():
        from heatc import ir
        from heatc_runtime import ModuleError
        from heatc_runtime.backends.manifest import read_artifact

        try:  # (the runtime's reader: the manifest, then the file's type, size and sha256)
            data = read_artifact(path, "program.json")
        except ModuleError as e:
            raise HeatError(diag(str(path), f"not a usable heatc build: {e}")) from None
        try:
            return ir.from_json(data.decode("utf-8"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            what = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
            raise HeatError(diag(str(path / "program.json"), f"not a heatc program ({what})")) from None
    if path.suffix in (".yaml", ".yml"):
        from heatc.heatmap.build import compile_heatmap

        return compile_heatmap(path)[0]
    return compile_file(path)


def diag(path: str, message: str):
    from heatc.errors import Diagnostic

    return Diagnostic(path, 0, 0, message)


@app.callback(invoke_without_command=True)
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        out.print(f"heatc {__version__}")
        raise typer.Exit(0)
