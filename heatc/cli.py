"""The `heatc` command line. Every failure caused by input prints `file:line:col: error:`
and exits with status 1 — never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

try:
    import typer
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
except ModuleNotFoundError as missing:  # the runtime-only install has no CLI dependencies
    sys.stderr.write(f"heatc: the compiler needs {missing.name!r}; install it with: pip install 'heatc[compiler]'\n")
    raise SystemExit(2) from None

from heatc_runtime import Verdict, worst

from . import __version__
from .errors import HeatError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Compile rule files and SDS heatmaps into state machines that check generated text.",
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)

_VERDICT_STYLE = {Verdict.CONFIRMED: "green", Verdict.PENDING: "yellow", Verdict.REJECTED: "bold red"}


def _fail(message: str) -> typer.Exit:
    sys.stdout.flush()
    sys.stderr.write(message.rstrip("\n") + "\n")
    return typer.Exit(1)


def _compile(path: Path):
    from .compile import compile_file

    return compile_file(path)


@app.callback(invoke_without_command=True)
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        out.print(f"heatc {__version__}")
        raise typer.Exit(0)


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="A .heat rule file.")],
    expect: Annotated[bool, typer.Option("--expect/--no-expect", help="Also run the file's expect examples.")] = True,
) -> None:
    """Parse and check a rule file; run its expect examples. Prints errors only."""
    from .backends import run_document
    from .expect import check_expects

    try:
        program = _compile(file)
    except HeatError as e:
        raise _fail(e.render()) from None
    if expect:
        failures = check_expects(program, lambda p, d: run_document("reference", p, d)[:2])
        if failures:
            lines = [f"{file}:{f.expect.line}:1: error: expect {f.expect.outcome}: {f.message}" for f in failures]
            raise _fail("\n".join(lines))
    n_expect = len(program.expects) if expect else 0
    out.print(
        f"{file}: ok — {len(program.rules)} rules, {len(program.literals)} literals, {n_expect} expect examples passed"
    )


@app.command("ir")
def ir_cmd(
    file: Annotated[Path, typer.Argument(help="A .heat rule file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole IR as JSON.")] = False,
) -> None:
    """Print the IR a rule file compiles to."""
    from . import ir
    from .irprint import describe

    try:
        program = _compile(file)
    except HeatError as e:
        raise _fail(e.render()) from None
    if as_json:
        sys.stdout.write(ir.to_json(program, indent=1) + "\n")
    else:
        sys.stdout.write(describe(program))


def _documents(data: bytes, lines: bool) -> list[bytes]:
    if not lines:
        return [data]
    docs = data.split(b"\n")
    if docs and docs[-1] == b"":
        docs.pop()
    return [d[:-1] if d.endswith(b"\r") else d for d in docs]


@app.command()
def scan(
    rules: Annotated[Path, typer.Argument(help="A .heat rule file.")],
    file: Annotated[str, typer.Argument(help="Text to scan; '-' reads standard input.")] = "-",
    lines: Annotated[bool, typer.Option("--lines", help="Each input line is a separate document.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per document.")] = False,
    backend: Annotated[
        str, typer.Option("--backend", help="reference (the spec) or wasm (compiled on the fly).")
    ] = "reference",
) -> None:
    """Run a rule set over text and report verdicts and events.

    Exit status: 0 when no document is REJECTED, 3 when some is, 1 on an input error.
    """
    from .backends import BACKENDS, run_document

    if backend not in BACKENDS:
        raise _fail(f"heatc scan: unknown backend {backend!r} (available: {', '.join(BACKENDS)})")
    try:
        program = _compile(rules)
    except HeatError as e:
        raise _fail(e.render()) from None
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as e:
        raise _fail(f"{file}: error: cannot read: {e.strerror}") from None
    overall = Verdict.CONFIRMED
    for i, doc in enumerate(_documents(data, lines)):
        t0 = time.perf_counter()
        events, verdicts, counters = run_document(backend, program, doc)
        elapsed = time.perf_counter() - t0
        verdict = worst(verdicts.values())
        overall = max(overall, verdict)
        if as_json:
            record = {
                "doc": i,
                "verdict": verdict.name,
                "rules": {k: v.name for k, v in verdicts.items()},
                "events": [e.to_json(doc) for e in events],
                "counters": counters,
                "backend": backend,
                "elapsed_ms": round(elapsed * 1000, 3),
            }
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            _print_document(i, doc, verdict, verdicts, events, counters, lines)
    raise typer.Exit(3 if overall is Verdict.REJECTED else 0)


def _print_document(i, doc, verdict, verdicts, events, counters, lines) -> None:
    title = f"document {i + 1}" if lines else "document"
    out.print(
        f"[bold]{title}[/]: [{_VERDICT_STYLE[verdict]}]{verdict.name}[/]  "
        f"({counters['bytes']} bytes, {counters['lexemes']} lexemes, {counters['matches']} matches)"
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
            caps = ", ".join(f"{k}={_fmt(v)}" for k, v in e.captures)
            why = e.failed or ""
            if e.conflict is not None:
                prior = doc[e.conflict.start : e.conflict.end].decode("utf-8", errors="replace")
                why = f"{e.conflict.channel} was {_fmt(e.conflict.value)} at {prior!r}"
            table.add_row(
                f"[{_VERDICT_STYLE[e.verdict]}]{e.verdict.name}[/]",
                escape(e.name),
                escape(text),
                escape(caps),
                escape(why),
            )
        out.print(table)
    rejected = [k for k, v in verdicts.items() if v is Verdict.REJECTED]
    if rejected:
        out.print("rejected rules: " + escape(", ".join(rejected)))


def _fmt(v) -> str:
    if isinstance(v, float) and v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return str(v)


def main() -> None:
    app()
