"""What every `heatc` command shares: the Typer app, the console, failing with a message
(never a traceback), reading rules from a file, a heatmap or a build, printing a report.

Public surface: `app`, `out`, `fail(message)`, `compile_rules(path)`, `diag(path, message)`,
`print_document(...)`, `fmt_value(v)`, `VERDICT_STYLE`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from heatc import __version__
from heatc.errors import HeatError
from heatc_runtime import Verdict

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile rule files and SDS heatmaps into state machines that check generated text.",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)

VERDICT_STYLE = {Verdict.CONFIRMED: "green", Verdict.PENDING: "yellow", Verdict.REJECTED: "bold red"}


def fail(message: str) -> typer.Exit:
    sys.stdout.flush()
    sys.stderr.write(message.rstrip("\n") + "\n")
    return typer.Exit(1)


def compile_rules(path: Path):
    """A rule file (.heat), a heatmap (.yaml), or a build directory (its program.json)."""
    from heatc.lang.compiler import compile_file

    if path.is_dir():
        from heatc import ir
        from heatc_runtime import ModuleError
        from heatc_runtime.manifest import read_artifact

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


def print_document(i, doc, audit, events, lines) -> None:
    title = f"document {i + 1}" if lines else "document"
    counters, verdict = audit.counters, audit.verdict
    out.print(
        f"[bold]{title}[/]: [{VERDICT_STYLE[verdict]}]{verdict.name}[/]  "
        f"({counters['bytes']} bytes, {counters['lexemes']} lexemes, {counters['matches']} matches; "
        f"confidence {audit.confidence:.2f}: {audit.action})"
    )
    matches = [e for e in events if e.kind == "match"]
    if matches:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("verdict", no_wrap=True)
        table.add_column("rule", no_wrap=True)
        for col in ("text", "captures", "why"):
            table.add_column(col, overflow="fold")
        for e in matches:
            text = doc[e.start : e.end].decode("utf-8", errors="replace").replace("\n", " ")
            why = e.failed or ""
            # a value's places (`places(v)`) say something only where a requirement on them failed
            caps = ", ".join(f"{k}={fmt_value(v)}" for k, v in e.captures if not k.startswith("places(") or k in why)
            if e.conflict is not None:
                prior = doc[e.conflict.start : e.conflict.end].decode("utf-8", errors="replace")
                why = f"{e.conflict.channel} was {fmt_value(e.conflict.value)} at {prior!r}"
            table.add_row(
                f"[{VERDICT_STYLE[e.verdict]}]{e.verdict.name}[/]",
                escape(e.name),
                escape(text),
                escape(caps),
                escape(why),
            )
        out.print(table)
    rejected = [k for k, v in audit.verdicts.items() if v is Verdict.REJECTED]
    if rejected:
        out.print("rejected rules: " + escape(", ".join(rejected)))


def fmt_value(v) -> str:
    if isinstance(v, float) and v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return str(v)
