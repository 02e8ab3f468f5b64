"""`heatc check`, `ir`, `build`, `lower`, `inspect`, `show`, `diff`, `test`: rule files,
heatmaps and builds.

Public surface: the commands, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from heatc.cli.common import Timings, app, compile_rules, diag, dump_after_option, fail, out
from heatc.cli.table import plural
from heatc.errors import HeatError
from heatc.version import __version__
from heatc_runtime import ModuleError


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="A .heat rule file or a heatmap (.yaml).")],
    expect: Annotated[bool, typer.Option("--expect/--no-expect", help="Also run the file's expect examples.")] = True,
) -> None:
    """Parse and check a rule file; run its expect examples. Prints errors only."""
    from heatc.verify.backends import run_document
    from heatc.verify.expect import check_expects

    program = compile_rules(file)
    if expect:
        failures = check_expects(program, lambda p, d: run_document("reference", p, d)[:2])
        if failures:
            lines = [
                f"{f.expect.path or file}:{f.expect.line}:1: error: expect {f.expect.outcome}: {f.message}"
                for f in failures
            ]
            raise fail("\n".join(lines))
    n_expect = len(program.expects) if expect else 0
    out.print(
        f"{file}: ok — {plural(len(program.rules), 'rule')}, {plural(len(program.literals), 'literal')}, "
        f"{plural(n_expect, 'expect example')} passed"
    )


@app.command("ir")
def ir_cmd(
    file: Annotated[Path, typer.Argument(help="A .heat rule file, a heatmap (.yaml) or a build directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole IR as JSON.")] = False,
) -> None:
    """Print the IR a rule file compiles to."""
    from heatc import ir
    from heatc.cli.irtext import describe

    program = compile_rules(file)
    if as_json:
        sys.stdout.write(ir.to_json(program, indent=1) + "\n")
    else:
        sys.stdout.write(describe(program))


_BuildDumpAfter = dump_after_option(
    "OUT/<name-of-input>.STAGE.<suffix>: lower (the rules, .heat), compile (the IR, .ir.json), tokens, pack "
    "(the tables), codegen (the kernel, .wat), artifacts (the manifest)"
)


@app.command()
def build(
    source: Annotated[
        Path, typer.Argument(help="A heatmap (.yaml), a rule file (.heat) or a folder of rule files.", metavar="RULES")
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where build/<name> goes.")] = Path("build"),
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="The token table to write: minilm (the embedded one), bytes, a tokenizer.json or a Hugging Face "
            "model folder. Default: the heatmap's tokenizer:, one token per byte for rule files.",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help="The build's name, OUT/<name> (default: the heatmap's, the rule set's, the folder's)."
        ),
    ] = None,
    timings: Timings = False,
    dump_after: _BuildDumpAfter = None,
) -> None:
    """Build a heatmap or rule files: WASM module, CUDA bridge tables, token table and manifest in OUT/<name>.
    The stages: read, lower, compile, expects, tokens, pack, codegen, artifacts, install."""
    from heatc.heatmap.build import STAGES
    from heatc.heatmap.build import build as run_build
    from heatc.stages import check_dump_after

    try:
        check_dump_after(STAGES, dump_after)
        dump_to = None
        if dump_after is not None:
            out.mkdir(parents=True, exist_ok=True)
            dump_to = out / f"{source.stem or 'rules'}.{dump_after}"
        table = None if tokenizer is None else _token_table(tokenizer)
        result = run_build(source, out, table, name, dump_after=dump_after, dump_to=dump_to)
    except HeatError as e:
        raise fail(e.render()) from None
    except OSError as e:  # (a full disk, a file size limit: the build is staged, so the old one stands)
        where = e.filename or out
        raise fail(f"{where}: error: cannot write the build: {e.strerror or e} (nothing was replaced)") from None
    b = result.manifest["build"]
    tiers = b["tiers"]["counts"]
    state = "unchanged" if result.unchanged else "written"
    n = len(b["rules"])
    out_line = (
        f"{result.directory} ({state}): {n} rule{'s' * (n != 1)} "
        f"(tiers: {tiers['l2']} L2, {tiers['device']} device, {tiers['host']} host), "
        f"{b['tokenizer']['tokens']} tokens ({b['tokenizer']['kind']}), "
        f"module {b['artifacts']['module.wasm']['size']:,} bytes"
    )
    sys.stdout.write(out_line + "\n")
    if result.run is not None and result.run.dumped is not None:
        sys.stdout.write(f"{dump_after}: wrote {result.run.dumped}\n")
    if timings and result.run is not None:
        sys.stderr.write(result.run.timings("build") + "\n")


def _token_table(spec: str):
    """--tokenizer: minilm, bytes, a tokenizer.json, or a folder holding one (or vocab.txt)."""
    from heatc.heatmap.format import Tokenizer, Where
    from heatc.heatmap.tokenizers import token_table

    if spec in ("minilm", "bytes"):
        kind = "embedded" if spec == "minilm" else "bytes"
        return token_table(Tokenizer(kind, spec), "--tokenizer")
    path = Path(spec)
    if not path.exists():
        raise HeatError(diag("--tokenizer", f"{spec!r} is neither minilm, bytes, nor a file or folder that exists"))
    return token_table(Tokenizer("dir" if path.is_dir() else "file", str(path), Where(0, 0)), "--tokenizer")


@app.command()
def lower(heatmap: Annotated[Path, typer.Argument(help="A heatmap (.yaml).")]) -> None:
    """Print the rules a heatmap lowers to, as .heat source you can read, edit and commit."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.lang.unparse import format_file

    try:
        _, lowered, hm = compile_heatmap(heatmap)
    except HeatError as e:
        raise fail(e.render()) from None
    sys.stdout.write(f"# Lowered from {heatmap} by heatc {__version__}: sensitivity {hm.sensitivity:g}")
    sys.stdout.write(f", top_k {hm.top_k}\n" if hm.top_k else "\n")
    for cell, why in lowered.skipped:
        sys.stdout.write(f"# skipped cell {cell.id} (line {cell.where.line}): {why}\n")
    sys.stdout.write("\n" + format_file(lowered.tree))


@app.command()
def inspect(
    directory: Annotated[Path, typer.Argument(help="A build directory (build/<name>).")],
    tiers: Annotated[bool, typer.Option("--tiers", help="Only the tier plan: rules and bytes per tier.")] = False,
    device: Annotated[
        str | None, typer.Option("--device", help="With --tiers: place the tables on this device (cuda, cuda:1).")
    ] = None,
) -> None:
    """Summarise a build: versions, checksums, rules with their source cells, heat and tiers."""
    from heatc_runtime import ModuleError, load

    try:
        checker = load(directory)  # verifies every checksum
    except ModuleError as e:
        raise fail(f"{directory}: error: {e}") from None
    checker.close()
    if tiers:
        sys.stdout.write("\n".join(_tier_lines(directory, device)) + "\n")
        return
    try:
        lines = _summary(directory, checker.manifest)  # (the manifest load verified)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # (fields only a build's manifest has)
        raise fail(
            f"{directory}: error: not a heatc build directory: its manifest lacks {e} (heatc build makes one)"
        ) from None
    sys.stdout.write("\n".join(lines) + "\n")


def _summary(directory: Path, manifest: dict) -> list[str]:
    b = manifest["build"]
    return [
        f"{directory} -> {directory.resolve().name}",
        f"  ruleset {manifest['name']}: {manifest['title']}",
        f"  ABI {manifest['abi']['major']}.{manifest['abi']['minor']}, IR {manifest['ir_version']}, "
        f"built by heatc {b['heatc_version']}, targets {', '.join(b['targets'])}",
        f"  state {manifest['layout']['state_size']} bytes per sequence; tokenizer {b['tokenizer']['kind']} "
        f"({b['tokenizer']['tokens']} tokens)",
        "  inputs:",
        *[f"    {i['role']:9} {i['path']}  sha256 {i['sha256'][:16]}…" for i in b["inputs"]],
        "  artifacts (all checksums verified):",
        *[
            f"    {name:12} {a['size']:>10,} bytes  sha256 {a['sha256'][:16]}…"
            for name, a in sorted(b["artifacts"].items())
        ],
        f"  tiers: L2 {b['tiers']['l2_bytes']:,} bytes, device {b['tiers']['device_bytes']:,} bytes -> "
        + ", ".join(f"{b['tiers']['counts'][t]} {t}" for t in ("l2", "device", "host")),
        "  rules (heat x freq order):",
        *[
            f"    [{r['id']:>3}] {r['name']:32} heat {r['heat']:<5g} {r['tier']:6} {r['bytes']:>5} B  from {r['source']}"
            for r in b["rules"]
        ],
    ]


def _tier_lines(directory: Path, device: str | None) -> list[str]:
    from heatc_runtime import ModuleError
    from heatc_runtime.backends.hct import read_hct
    from heatc_runtime.backends.manifest import read_artifact
    from heatc_runtime.cuda.tiers import plan_report

    try:
        hct = read_hct(read_artifact(directory, "rules.hct"), str(directory / "rules.hct"))
        lines = [f"{directory}: tier plan (heat x freq order)", *plan_report(hct).lines()]
        if device is not None:
            from heatc_runtime.cuda.program import load as load_op

            program = load_op(directory, device)
            lines += program.tiers.lines()
            program.close()
    except (ModuleError, OSError) as e:
        raise fail(f"{directory}: error: {e}") from None
    except ImportError as e:
        raise fail(f"{directory}: --device needs torch and cuda-python: pip install 'heatc[cuda]' ({e})") from None
    return lines


@app.command()
def show(
    heatmap: Annotated[Path, typer.Argument(help="A heatmap (.yaml).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The picture to write (.png, .svg, .pdf).")] = Path(
        "heatmap.png"
    ),
    top: Annotated[int, typer.Option("--top", help="Draw at most this many rows and columns, the hottest.")] = 40,
) -> None:
    """Draw a heatmap: categories on both axes, hot cells outlined, the threshold marked."""
    from heatc.heatmap.format import load_heatmap
    from heatc.heatmap.show import FORMATS, render

    try:
        hm = load_heatmap(heatmap, files=False)
    except HeatError as e:
        raise fail(e.render()) from None
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise fail("heatc show needs matplotlib: pip install 'heatc[compiler]'") from None
    if output.suffix.lstrip(".").lower() not in FORMATS:
        raise fail(f"{output}: error: write a .png, .svg or .pdf (the picture's format comes from its name)")
    try:
        written = render(hm, output, top)
    except OSError as e:  # (a folder that cannot be written: a message, not a traceback)
        raise fail(f"{output}: error: cannot write the picture: {e.strerror or e}") from None
    sys.stdout.write(f"{written}\n")


@app.command()
def diff(
    a: Annotated[Path, typer.Argument(help="A heatmap (.yaml): the one before.")],
    b: Annotated[Path, typer.Argument(help="A heatmap (.yaml): the one after.")],
    as_json: Annotated[bool, typer.Option("--json", help="The changes as one JSON object.")] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many lines per kind of change.")
    ] = None,
) -> None:
    """Print what changed between two heatmaps: cells added and removed, scores, ranges."""
    from heatc.heatmap.diff import diff_heatmaps, render_diff
    from heatc.heatmap.format import load_heatmap

    try:
        ha, hb = load_heatmap(a, files=False), load_heatmap(b, files=False)  # (cells only: no rule file needed)
    except HeatError as e:
        raise fail(e.render()) from None
    d = diff_heatmaps(ha, hb)
    if as_json:
        sys.stdout.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_diff(d, ha, hb, limit))


QUICK_EXAMPLES = 25  # heatc test: generated inputs per rule by default
THOROUGH_EXAMPLES = 200  # heatc test --thorough


@app.command("test")
def test_cmd(
    file: Annotated[Path, typer.Argument(help="A heatmap (.yaml), a .heat rule file or a folder of them.")],
    examples: Annotated[
        int | None,
        typer.Option("--examples", "-n", min=1, help=f"Generated inputs per rule (default {QUICK_EXAMPLES})."),
    ] = None,
    thorough: Annotated[
        bool, typer.Option("--thorough", help=f"{THOROUGH_EXAMPLES} generated inputs per rule: minutes for a heatmap.")
    ] = False,
    backend: Annotated[
        list[str] | None,
        typer.Option("--backend", help="Test on this backend (repeatable; the reference always runs). Default: all."),
    ] = None,
) -> None:
    """Check the expect examples and property-test every rule on every backend: a quick pass
    by default (a shipped heatmap in well under a minute), --thorough for depth."""
    from heatc.verify.backends import BACKENDS
    from heatc.verify.properties import run_tests

    if examples is not None and thorough:
        raise fail("heatc test: give --examples N or --thorough, not both")
    examples = examples or (THOROUGH_EXAMPLES if thorough else QUICK_EXAMPLES)
    unknown = [b for b in backend or [] if b not in BACKENDS]
    if unknown:
        raise fail(f"heatc test: unknown backend {unknown[0]!r} (available: {', '.join(BACKENDS)})")
    chosen = ["reference", *[b for b in BACKENDS if b != "reference" and (not backend or b in backend)]]
    if not backend and "native" in chosen:
        from heatc_runtime.backends.native import native_extension

        try:
            native_extension()
        except ModuleError as e:  # (asked for by name, it fails below with this message)
            out.print(f"[yellow]native backend skipped[/]: {escape(str(e))}")
            chosen.remove("native")
    program = compile_rules(file)
    try:
        report = run_tests(program, examples, chosen)
    except ModuleError as e:
        raise fail(f"heatc test: {e}") from None
    for backend, failures in report.expect_failures.items():
        for f in failures:
            out.print(
                f"[bold red]FAIL[/] expect ({backend}) {escape(f.expect.path)}:{f.expect.line}: {escape(f.message)}"
            )
    n_expect = len(program.expects)
    out.print(f"expect examples: {n_expect} on {', '.join(report.backends)}")
    if not thorough and examples == QUICK_EXAMPLES:
        out.print(f"{QUICK_EXAMPLES} generated inputs per rule (--thorough: {THOROUGH_EXAMPLES})")
    for r in report.rules:
        if r.problem is None:
            how = "pattern and requirements" if r.oracle else "backends agree"
            out.print(f"[green]ok[/]   {r.rule}: {r.cases} generated inputs ({how})")
        else:
            out.print(f"[bold red]FAIL[/] {r.rule}: {escape(r.problem)}")
            out.print(f"     minimal input: {escape(repr(r.example.text.decode('utf-8', 'replace')))}")
            out.print(f"     as tokens: {escape(repr([p.decode('utf-8', 'replace') for p in r.example.pieces]))}")
    failed = sum(1 for r in report.rules if r.problem) + sum(len(f) for f in report.expect_failures.values())
    out.print(("[bold red]" if failed else "[green]") + f"{failed} failure{'s' * (failed != 1)}[/]")
    raise typer.Exit(1 if failed else 0)
