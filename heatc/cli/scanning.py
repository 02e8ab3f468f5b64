"""`heatc scan`: documents, lines, chunks.

Public surface: the commands, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import functools
import gc
import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from heatc.cli.common import app, compile_rules, fail, out
from heatc.cli.table import Checked, fmt_value, render_document
from heatc.errors import HeatError
from heatc_runtime import ModuleError, ModuleTrap, Report, Verdict

MAX_INPUT_BYTES = 1 << 30  # what one scan's module memory holds by default (Limits.memory_bytes)
# a document this large is scanned in a thread while its records are written or decoded here
# (heatc_runtime.reports.overlap); a smaller one is not worth a thread (--lines: many small documents)
OVERLAP_BYTES = 1 << 20


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
    rules: Annotated[
        Path,
        typer.Argument(help="A .heat rule file, a folder of them, a heatmap (.yaml), or a build directory."),
    ],
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
            help="wasm (the default: a build's module; rule files and heatmaps are compiled once and cached), "
            "native (the C++ core) or reference (the spec: the Python interpreter, slow).",
        ),
    ] = "wasm",
    also: Annotated[
        list[Path] | None,
        typer.Option("--also", help="Check with this rule set too, side by side (repeatable).", metavar="RULES"),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="The table lists every match, one row each (no folding, no limit).")
    ] = False,
    binary: Annotated[
        bool, typer.Option("--binary", help="Scan input that is not text (NUL bytes, a PDF, an executable) anyway.")
    ] = False,
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

    The table shows one row per value: the rule that read it best, with the verdict of every
    rule that read it (the others are counted under "others").

    Exit status: 0 when no document is REJECTED (no conflict), 3 when some is, 1 on an input error.
    """
    from heatc.verify.backends import BACKENDS
    from heatc_runtime.reports.audit import Policy

    # A large document's events are hundreds of thousands of small objects, none of them in a
    # reference cycle: the cyclic collector, run again and again as they are made, cost more
    # than the scan (32 MB: 1.5 s of 2.2). The process ends when the command does.
    gc.disable()
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
    if conflict_mode and also:
        raise fail("heatc scan: --also checks documents; conflicts across chunks are found with one rule set")
    if len(files) > 1 and not chunks:
        raise fail("heatc scan: give one text FILE (or --chunks to read several files as the chunks of one context)")
    if backend == "native":
        from heatc_runtime.backends.native import native_extension

        try:
            native_extension()
        except ModuleError as e:
            raise fail(f"heatc scan: {e}") from None
    rule_sets = [_rule_set(path, backend) for path in [rules, *(also or [])]]
    inputs = []
    for file in files:
        data = _read_input(file)
        if not binary:
            _refuse_binary("standard input" if file == "-" else file, data)
        inputs.append(data)
    if conflict_mode:
        (only,) = rule_sets
        _scan_chunks(only.module, files, inputs, chunk_separator, only.run, backend, as_json)
    if len(rule_sets) > 1:
        _label(rule_sets)
    overall = Verdict.CONFIRMED
    for i, doc in enumerate(_documents(inputs[0], lines)):
        overall = max(overall, _scan_document(i, doc, rule_sets, backend, rule_policy, as_json, lines, every))
    raise typer.Exit(3 if overall is Verdict.REJECTED else 0)


def _write_line(text: str | bytes) -> None:
    """One JSON line: UTF-8 written as it was made (a large report's text not decoded and
    encoded again), where standard output has bytes beneath it."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None or not isinstance(text, bytes):
        sys.stdout.write((text.decode() if isinstance(text, bytes) else text) + "\n")
        return
    sys.stdout.flush()
    buffer.write(text + b"\n")


def _scanned(r: _RuleSet, run, *args):
    """`run(*args)` for rule set `r`; what a module does wrong (a trap, a record no heatc
    module writes) is its error, by name, not a traceback."""
    try:
        return run(*args)
    except (ModuleError, ModuleTrap) as e:
        raise fail(f"{r.path}: error: {e}") from None


class _RuleSet:
    """One rule set, ready to scan: its identity for reports and a `run(doc)` giving its
    `Report` (a module's keeps its event records: `--json` writes them without decoding)."""

    def __init__(self, path: Path, module, run, checker=None):
        self.path, self.module, self.run, self.label = path, module, run, ""
        self.checker = checker  # (a loaded module's: --json writes its records as it scans)


def _rule_set(given: Path, backend: str) -> _RuleSet:
    from heatc.heatmap.artifacts import is_build

    rule_set, path = None, given
    if backend != "reference" and not is_build(path) and path.exists():
        from heatc.heatmap.build_cache import cached_build

        try:
            path = cached_build(path)  # compiled once, then reused while the file is unchanged
        except HeatError as e:
            raise fail(e.render()) from None
        except OSError:  # (no cache to write to: compiled for this run alone, or its error said)
            rule_set = _in_memory(path, backend)
    if rule_set is None and is_build(path) and backend in ("wasm", "native"):
        from heatc_runtime import load

        try:
            checker = load(path, backend=backend)
        except ModuleError as e:
            raise fail(f"{path}: error: {e}") from None

        rule_set = _RuleSet(path, checker.module_info, checker.scan, checker)
    rule_set = rule_set or _in_memory(path, backend)
    rule_set.path = given  # (what the user named, not the cache's directory)
    return rule_set


def _in_memory(path: Path, backend: str) -> _RuleSet:
    from heatc.verify.backends import run_document

    program = compile_rules(path)
    if path.is_dir() and (path / "manifest.json").exists():
        from heatc_runtime.backends.loader import read_manifest
        from heatc_runtime.reports.audit import ModuleInfo

        try:
            module = ModuleInfo.from_manifest(read_manifest(path)[0])
        except ModuleError as e:
            raise fail(f"{path}: error: {e}") from None
    else:
        from heatc.verify.backends import module_info

        module = module_info(program)

    def run(doc: bytes) -> Report:
        events, verdicts, counters = run_document(backend, program, doc)
        return Report(verdicts, events, counters, (module, doc))

    return _RuleSet(path, module, run)


def _label(rule_sets: list[_RuleSet]) -> None:
    """Rule names side by side are prefixed with their rule set's name, or where two share
    one, with the file or folder name given (`medical`, `medical.heat`), else its path."""
    for labels in (
        [r.module.name or r.path.name for r in rule_sets],
        [r.path.name for r in rule_sets],
        [str(r.path) for r in rule_sets],
    ):
        if len(set(labels)) == len(labels):
            break
    for r, label in zip(rule_sets, labels, strict=True):
        r.label = label


_MAGIC = (
    (b"%PDF-", "a PDF", "heatc extract {file} -o {stem}.txt writes its text"),
    (b"\x7fELF", "an executable (ELF)", ""),
    (b"PK\x03\x04", "a zip archive (a .docx, .xlsx, .jar?)", ""),
    (b"\x1f\x8b", "gzip-compressed", "zcat {file} | heatc scan RULES reads what it holds"),
    (b"\x89PNG", "a PNG image", ""),
    (b"\xff\xd8\xff", "a JPEG image", ""),
)


def _refuse_binary(name: str, data: bytes) -> None:
    """Text that is not text gives findings that mean nothing ("REJECTED bp_value Bp1" in an
    executable): refuse it, saying what it looks like, unless --binary."""
    what, hint = None, ""
    for magic, kind, how in _MAGIC:
        if data.startswith(magic):
            what, hint = kind, how.format(file=name, stem=Path(name).stem)
            break
    head = data[:65536]
    if what is None and b"\0" in head:
        what = f"binary data (a NUL byte at offset {head.index(0)})"
    elif what is None and head:
        controls = sum(head.count(bytes([b])) for b in (*range(9), *range(14, 27), *range(28, 32)))
        if controls > len(head) // 10:
            what = f"binary data ({controls} control bytes in its first {len(head):,})"
    if what is not None:
        raise fail(
            f"{name}: error: this is {what}, not text" + (f"; {hint}" if hint else "") + "; --binary scans it anyway"
        )


def _scan_document(i, doc, rule_sets, backend, rule_policy, as_json, lines, every) -> Verdict:
    from heatc_runtime.reports.audit import Policy, confidence
    from heatc_runtime.reports.audit_text import TextFacts, audit_line, scan_line
    from heatc_runtime.reports.overlap import scan_decoded

    checked = []
    facts = TextFacts(doc) if as_json else None  # (its hash runs in a thread beside the scans)
    for r in rule_sets:
        if as_json:
            # (written from the module's event records while it scans: decoding them into
            # events and dicts first cost several times the scan)
            if r.checker is not None and len(doc) >= OVERLAP_BYTES:
                report, elapsed, scanned = _scanned(r, scan_line, r.checker, doc, facts)
                line = functools.partial(scanned, encoded=True)
            else:
                t0 = time.perf_counter()
                report = _scanned(r, r.run, doc)
                elapsed = time.perf_counter() - t0
                line = functools.partial(audit_line, report, facts=facts)
            run = {"doc": i, "backend": backend, "elapsed_ms": round(elapsed * 1000, 3)}
            if len(rule_sets) > 1:
                run["rules"] = r.label
            _write_line(_scanned(r, line, rule_policy, {"run": run}))
            checked.append(max(report.verdicts.values(), default=Verdict.CONFIRMED))
            continue
        # (a module's events decoded while it scans, for the table)
        if r.checker is not None and len(doc) >= OVERLAP_BYTES:
            report = _scanned(r, scan_decoded, r.checker, doc)[0]
        else:
            report = _scanned(r, r.run, doc)
        verdicts = dict(report.verdicts)
        # (the table needs no audit record: its events' JSON would cost more than the scan)
        events, counters = _scanned(r, getattr, report, "events"), report.counters
        score = confidence(verdicts, r.module.heat)
        verdict = max(verdicts.values(), default=Verdict.CONFIRMED)
        action = (rule_policy or r.module.policy or Policy()).action(score)  # (the rule set's own by default)
        checked.append(Checked(r.label, verdict, score, action, verdicts, dict(counters), events,
                               dict(r.module.heat)))  # fmt: skip
    if as_json:
        return max(checked, default=Verdict.CONFIRMED)
    sys.stdout.write(render_document(f"document {i + 1}" if lines else "document", doc, checked, every))
    return max((c.verdict for c in checked), default=Verdict.CONFIRMED)


def _scan_chunks(module, files, inputs, separator, run, backend: str, as_json: bool) -> None:
    """heatc scan --chunks / --chunk-separator: the conflicts between the chunks; exits."""
    from heatc_runtime.reports.conflicts import NoConsistencyRulesError, chunk_bytes, find_conflicts, join_chunks

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
        events = run(stream).events
        report = find_conflicts(module, texts, events)
        elapsed = time.perf_counter() - t0
    except (NoConsistencyRulesError, ModuleError, ModuleTrap) as e:
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
        if report.capped:  # (a term index past its cap: some pairs were not compared)
            n = report.capped
            out.print(f'{n} mention{"s" * (n != 1)} compared with part of their channel (docs/conflicts.md, "Cost")')
    raise typer.Exit(3 if len(report) else 0)
