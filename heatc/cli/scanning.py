"""`heatc scan` (documents, lines, chunks) and `heatc generate` (a model writes, the rules
check).

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
        str,
        typer.Option(
            "--policy", help="Confidence to action: pass=0.9,confirm=0.7 (default: the rule set's policy, else these)."
        ),
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
        rule_policy = Policy.parse(policy) if policy else None  # (None: the rule set's own)
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
    inputs = []
    for file in files:
        try:
            inputs.append(sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes())
        except OSError as e:
            raise fail(f"{file}: error: cannot read: {e.strerror}") from None

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

        module = ModuleInfo.from_manifest(read_manifest(rules)[0])
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
        sep = separator.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").encode("utf-8")
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


@app.command()
def generate(
    rules: Annotated[Path, typer.Argument(help="A .heat rule file, a heatmap (.yaml), or a build directory.")],
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="What to ask the model.")],
    model: Annotated[
        Path | None, typer.Option("--model", help="A Hugging Face causal-LM folder (default: SmolLM2-135M-Instruct).")
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="transformers or vllm.")] = "transformers",
    mode: Annotated[
        str, typer.Option("--mode", help="observe, stop (at the first rejection) or guard (mask).")
    ] = "observe",
    k: Annotated[int, typer.Option("--k", help="guard: candidates tried per step.")] = 8,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate at most.")] = 64,
    seed: Annotated[int | None, typer.Option("--seed", help="Sample with this seed (default: greedy).")] = None,
    see_prompt: Annotated[bool, typer.Option("--see-prompt", help="The rules read the prompt too.")] = False,
    chat: Annotated[bool, typer.Option("--chat/--raw", help="Wrap the prompt in the model's chat template.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: the text and its report.")] = False,
) -> None:
    """Generate with a real model while the rules check it, and print the text and its report.

    Exit status: 0 when the generation is not REJECTED, 3 when it is, 1 on an input error.
    """
    from heatc.generate import ENGINES, GenerateError, temporary_module
    from heatc.generate import generate as run_generate
    from heatc_runtime.audit import ModuleInfo, audit_snapshots
    from heatc_runtime.engines.core import MODES

    if mode not in MODES:
        raise fail(f"heatc generate: unknown mode {mode!r} (modes: {', '.join(MODES)})")
    if engine not in ENGINES:
        raise fail(f"heatc generate: unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    if not 1 <= k <= 64 or max_new_tokens < 1:
        raise fail("heatc generate: --k must be 1 to 64 and --max-new-tokens at least 1")
    try:
        program = None if rules.is_dir() else compile_rules(rules)
    except HeatError as e:
        raise fail(e.render()) from None
    try:
        with temporary_module(rules, program) as module:
            report, model_name = run_generate(
                module, prompt, model=model, engine=engine, mode=mode, k=k, max_new_tokens=max_new_tokens,
                seed=seed, see_prompt=see_prompt, chat=chat,
            )  # fmt: skip
            info = ModuleInfo.from_manifest(json.loads((module / "manifest.json").read_text(encoding="utf-8")))
    except (GenerateError, ValueError) as e:
        raise fail(str(e)) from None
    except ModuleNotFoundError as missing:
        raise fail(f"heatc generate needs {missing.name!r}: pip install 'heatc[engines]'") from None
    audit = audit_snapshots(info, report.stream, report.snapshots) if report.snapshots else None
    if as_json:
        record = {"model": model_name, "engine": engine, "prompt": prompt, **report.to_json()}
        if audit is not None:
            record["audit"] = audit.to_json()
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.print(f"[bold]{escape(model_name)}[/] ({engine}, {mode}): {escape(report.text)}")
        if audit is not None:
            print_document(0, report.stream, audit, report.events, False)
        else:
            out.print(f"document: {report.verdict.name} (nothing was published)")
        if report.masked:
            top = [step for step, _, masked_top in report.masked if masked_top]
            out.print(
                f"guard masked candidates at {len(report.masked)} steps"
                + (f", the top one at steps {', '.join(map(str, top))}" if top else "")
            )
        if report.exhausted_at is not None:
            out.print(f"guard: no candidate passed at step {report.exhausted_at}; the generation was ended there")
        if report.stopped_at is not None:
            out.print(f"stopped at token {report.stopped_at}: the first snapshot with a rejection")
    raise typer.Exit(3 if report.verdict is Verdict.REJECTED else 0)
