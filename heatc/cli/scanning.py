"""`heatc scan`: documents, lines, chunks.

Public surface: the commands, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from heatc.cli.common import app, compile_rules, fail, fmt_value, out, print_document
from heatc.errors import HeatError
from heatc_runtime import ModuleError, Verdict

MAX_INPUT_BYTES = 1 << 30  # what one scan's module memory holds by default (Limits.memory_bytes)


def _read_input(file: str) -> bytes:
    """A text to scan: a file, a pipe or standard input, at most MAX_INPUT_BYTES (a device such
    as /dev/zero, or a directory, is refused by name: it was read until memory ran out)."""
    import os
    import stat

    try:
        f = sys.stdin.buffer if file == "-" else open(file, "rb")
        try:
            try:
                mode = os.fstat(f.fileno()).st_mode
            except (OSError, ValueError):  # (a stream with no file behind it: nothing to check)
                mode = 0
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode):
                kind = "a directory" if stat.S_ISDIR(mode) else "a device"
                raise fail(f"{file}: error: cannot read: {kind}, not a text file")
            data = f.read(MAX_INPUT_BYTES + 1)
        finally:
            if f is not sys.stdin.buffer:
                f.close()
    except OSError as e:
        raise fail(f"{file}: error: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise fail(f"{file}: error: more than {MAX_INPUT_BYTES:,} bytes: scan it in parts (or --lines)")
    return data


def _documents(data: bytes, lines: bool) -> list[bytes]:
    if not lines:
        return [data]
    docs = data.split(b"\n")
    if docs and docs[-1] == b"":
        docs.pop()
    return [d[:-1] if d.endswith(b"\r") else d for d in docs]


@app.command()
def scan(
    rules: Annotated[Path, typer.Argument(help="A .heat rule file, a heatmap (.yaml), or a build directory.")],
    files: Annotated[
        list[str] | None,
        typer.Argument(
            help="Text to scan; '-' (the default) reads standard input. With --chunks, each FILE is a chunk."
        ),
    ] = None,
    lines: Annotated[bool, typer.Option("--lines", help="Each input line is a separate document.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One audit report (JSON) per document.")] = False,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            help="reference (the spec), wasm (a build's module, or compiled on the fly) or native (the C++ core).",
        ),
    ] = "",
    chunks: Annotated[
        bool, typer.Option("--chunks", help="Find conflicts across chunks: each FILE is one chunk, in retrieval order.")
    ] = False,
    chunk_separator: Annotated[
        str | None,
        typer.Option(
            "--chunk-separator", help=r"Find conflicts across chunks: the input split at STR (\n, \t read as escapes)."
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="Confidence to action: pass=0.9,confirm=0.7 (the defaults).")
    ] = "",
) -> None:
    """Run a rule set over text and report verdicts, events, confidence and the action to take
    (docs/report.md); with --chunks or --chunk-separator, the conflicts between the chunks
    (docs/conflicts.md).

    Exit status: 0 when no document is REJECTED (no conflict), 3 when some is, 1 on an input error.
    """
    from heatc.backends import BACKENDS, run_document
    from heatc_runtime.audit import Policy, audit_report

    backend = backend or ("wasm" if rules.is_dir() else "reference")
    if backend not in BACKENDS:
        raise fail(f"heatc scan: unknown backend {backend!r} (available: {', '.join(BACKENDS)})")
    try:
        rule_policy = Policy.parse(policy)
    except ValueError as e:
        raise fail(f"heatc scan: --{e}") from None
    files = files or ["-"]
    conflict_mode = chunks or chunk_separator is not None
    if chunks and chunk_separator is not None:
        raise fail("heatc scan: give --chunks (each FILE a chunk) or --chunk-separator (one input split), not both")
    if conflict_mode and lines:
        raise fail("heatc scan: --lines reads documents, --chunks and --chunk-separator read chunks: choose one")
    if len(files) > 1 and not chunks:
        raise fail("heatc scan: give one text FILE (or --chunks to read several files as the chunks of one context)")
    try:
        program = compile_rules(rules)
    except HeatError as e:
        raise fail(e.render()) from None
    inputs = [_read_input(file) for file in files]

    def run(doc: bytes):
        return run_document(backend, program, doc)

    if backend == "native":
        from heatc_runtime.native import native_extension

        try:
            native_extension()
        except ModuleError as e:
            raise fail(f"heatc scan: {e}") from None
    if rules.is_dir():
        from heatc_runtime.audit import ModuleInfo
        from heatc_runtime.loader import read_manifest

        try:
            module = ModuleInfo.from_manifest(read_manifest(rules)[0])
        except ModuleError as e:
            raise fail(f"{rules}: error: {e}") from None
    else:
        from heatc.backends import module_info

        module = module_info(program)
    if rules.is_dir() and backend in ("wasm", "native"):
        from heatc_runtime import load

        try:
            checker = load(rules, backend=backend)
        except ModuleError as e:
            raise fail(f"{rules}: error: {e}") from None

        def run(doc: bytes):
            report = checker.scan(doc)
            return report.events, report.verdicts, report.counters

    if conflict_mode:
        _scan_chunks(module, files, inputs, chunk_separator, run, backend, as_json)
    overall = Verdict.CONFIRMED
    for i, doc in enumerate(_documents(inputs[0], lines)):
        t0 = time.perf_counter()
        events, verdicts, counters = run(doc)
        elapsed = time.perf_counter() - t0
        audit = audit_report(module, doc, events, verdicts, counters, rule_policy)
        overall = max(overall, audit.verdict)
        if as_json:
            record = audit.to_json()
            record["run"] = {"doc": i, "backend": backend, "elapsed_ms": round(elapsed * 1000, 3)}
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            print_document(i, doc, audit, events, lines)
    raise typer.Exit(3 if overall is Verdict.REJECTED else 0)


def _scan_chunks(module, files, inputs, separator, run, backend: str, as_json: bool) -> None:
    """heatc scan --chunks / --chunk-separator: the conflicts between the chunks; exits."""
    from heatc_runtime.conflicts import NoConsistencyRulesError, chunk_bytes, find_conflicts, join_chunks

    if separator is not None:
        # (the bytes given: an argument that is not UTF-8 comes with its bytes escaped as surrogates)
        sep = (
            separator.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").encode("utf-8", "surrogateescape")
        )
        if not sep:
            raise fail("heatc scan: --chunk-separator needs a non-empty STR")
        names = [f"{files[0]} (chunk {i})" for i in range(inputs[0].count(sep) + 1)]
        texts = inputs[0].split(sep)
    else:
        names, texts = files, inputs
    for name, text in zip(names, texts, strict=True):
        try:
            chunk_bytes([text])
        except ValueError as e:
            raise fail(f"{name}: error: {str(e).replace('chunk 0 is ', '', 1)}") from None
    try:
        t0 = time.perf_counter()
        stream, _ = join_chunks(texts)
        events = run(stream)[0]
        report = find_conflicts(module, texts, events)
        elapsed = time.perf_counter() - t0
    except NoConsistencyRulesError as e:
        raise fail(f"heatc scan: error: {e}") from None
    if as_json:
        record = report.to_json()
        record["run"] = {"backend": backend, "elapsed_ms": round(elapsed * 1000, 3), "chunk_names": names}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.print(f"[bold]{len(texts)} chunks[/]: {len(report)} conflict{'s' * (len(report) != 1)}")
        for c in report:  # (lines, not a table: the texts are long)
            out.print(f"{c.score:.2f}  [bold]{escape(c.channel)}[/]")
            for m in (c.earlier, c.later):
                out.print(escape(f"      chunk {m.chunk} [{m.start}:{m.end}] {m.text!r} = {fmt_value(m.value)}"))
        if report.schedules:
            n = len(report.schedules)
            out.print(f"{n} term{'s' * (n != 1)} stated with three values or more (a schedule, not a conflict):")
            for t in report.schedules:
                values = ", ".join(fmt_value(v) for v in t.values)
                out.print(escape(f"      {t.channel}: {values} (chunks {', '.join(str(m.chunk) for m in t.mentions)})"))
    raise typer.Exit(3 if len(report) else 0)
