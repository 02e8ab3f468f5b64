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

from heatc import __version__
from heatc.errors import HeatError
from heatc_runtime import ModuleError, Verdict

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
    """A rule file (.heat), a heatmap (.yaml), or a build directory (its program.json)."""
    from heatc.lang.compiler import compile_file

    if path.is_dir():
        from heatc import ir

        try:
            return ir.from_json((path / "program.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError) as e:
            raise HeatError(_diag(str(path), f"not a heatc build directory (program.json: {e})")) from None
    if path.suffix in (".yaml", ".yml"):
        from heatc.heatmap.build import compile_heatmap

        return compile_heatmap(path)[0]
    return compile_file(path)


def _diag(path: str, message: str):
    from heatc.errors import Diagnostic

    return Diagnostic(path, 0, 0, message)


@app.callback(invoke_without_command=True)
def _main(version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False) -> None:
    if version:
        out.print(f"heatc {__version__}")
        raise typer.Exit(0)


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="A .heat rule file or a heatmap (.yaml).")],
    expect: Annotated[bool, typer.Option("--expect/--no-expect", help="Also run the file's expect examples.")] = True,
) -> None:
    """Parse and check a rule file; run its expect examples. Prints errors only."""
    from heatc.backends import run_document
    from heatc.verify.expect import check_expects

    try:
        program = _compile(file)
    except HeatError as e:
        raise _fail(e.render()) from None
    if expect:
        failures = check_expects(program, lambda p, d: run_document("reference", p, d)[:2])
        if failures:
            lines = [
                f"{f.expect.path or file}:{f.expect.line}:1: error: expect {f.expect.outcome}: {f.message}"
                for f in failures
            ]
            raise _fail("\n".join(lines))
    n_expect = len(program.expects) if expect else 0
    out.print(
        f"{file}: ok — {len(program.rules)} rules, {len(program.literals)} literals, {n_expect} expect examples passed"
    )


@app.command("ir")
def ir_cmd(
    file: Annotated[Path, typer.Argument(help="A .heat rule file, a heatmap (.yaml) or a build directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole IR as JSON.")] = False,
) -> None:
    """Print the IR a rule file compiles to."""
    from heatc import ir
    from heatc.irtext import describe

    try:
        program = _compile(file)
    except HeatError as e:
        raise _fail(e.render()) from None
    if as_json:
        sys.stdout.write(ir.to_json(program, indent=1) + "\n")
    else:
        sys.stdout.write(describe(program))


@app.command()
def build(
    heatmap: Annotated[Path, typer.Argument(help="A heatmap (.yaml).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Where build/<name> goes.")] = Path("build"),
) -> None:
    """Build a heatmap: WASM module, CUDA bridge tables, token table and manifest in OUT/<name>."""
    from heatc.heatmap.build import build as run_build

    try:
        result = run_build(heatmap, out)
    except HeatError as e:
        raise _fail(e.render()) from None
    b = result.manifest["build"]
    tiers = b["tiers"]["counts"]
    state = "unchanged" if result.unchanged else "written"
    out_line = (
        f"{result.directory} ({state}): {len(b['rules'])} rules "
        f"(tiers: {tiers['l2']} L2, {tiers['device']} device, {tiers['host']} host), "
        f"{b['tokenizer']['tokens']} tokens ({b['tokenizer']['kind']}), "
        f"module {b['artifacts']['module.wasm']['size']:,} bytes"
    )
    sys.stdout.write(out_line + "\n")


@app.command()
def lower(heatmap: Annotated[Path, typer.Argument(help="A heatmap (.yaml).")]) -> None:
    """Print the rules a heatmap lowers to, as .heat source you can read, edit and commit."""
    from heatc.heatmap.build import compile_heatmap
    from heatc.lang.unparse import format_file

    try:
        _, lowered, hm = compile_heatmap(heatmap)
    except HeatError as e:
        raise _fail(e.render()) from None
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
        load(directory)  # verifies every checksum
    except ModuleError as e:
        raise _fail(f"{directory}: error: {e}") from None
    if tiers:
        sys.stdout.write("\n".join(_tier_lines(directory, device)) + "\n")
        return
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    b = manifest["build"]
    lines = [
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
    sys.stdout.write("\n".join(lines) + "\n")


def _tier_lines(directory: Path, device: str | None) -> list[str]:
    from heatc_runtime import ModuleError
    from heatc_runtime.cuda.tiers import plan_report
    from heatc_runtime.hct import read_hct

    try:
        hct = read_hct((directory / "rules.hct").read_bytes(), str(directory / "rules.hct"))
        lines = [f"{directory}: tier plan (heat x freq order)", *plan_report(hct).lines()]
        if device is not None:
            from heatc_runtime.cuda.program import load as load_op

            program = load_op(directory, device)
            lines += program.tiers.lines()
            program.close()
    except (ModuleError, OSError) as e:
        raise _fail(f"{directory}: error: {e}") from None
    except ImportError as e:
        raise _fail(f"{directory}: --device needs torch and cuda-python: pip install 'heatc[cuda]' ({e})") from None
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
    from heatc.heatmap.show import render

    try:
        hm = load_heatmap(heatmap)
    except HeatError as e:
        raise _fail(e.render()) from None
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise _fail("heatc show needs matplotlib: pip install 'heatc[compiler]'") from None
    sys.stdout.write(f"{render(hm, output, top)}\n")


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
        ha, hb = load_heatmap(a), load_heatmap(b)
    except HeatError as e:
        raise _fail(e.render()) from None
    d = diff_heatmaps(ha, hb)
    if as_json:
        sys.stdout.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_diff(d, ha, hb, limit))


@app.command("test")
def test_cmd(
    file: Annotated[Path, typer.Argument(help="A heatmap (.yaml) or a .heat rule file.")],
    examples: Annotated[int, typer.Option("--examples", "-n", help="Generated inputs per rule.")] = 200,
    backend: Annotated[
        list[str] | None,
        typer.Option("--backend", help="Test on this backend (repeatable; the reference always runs). Default: all."),
    ] = None,
) -> None:
    """Check the expect examples and property-test every rule on every backend."""
    from heatc.backends import BACKENDS
    from heatc.verify.properties import run_tests

    unknown = [b for b in backend or [] if b not in BACKENDS]
    if unknown:
        raise _fail(f"heatc test: unknown backend {unknown[0]!r} (available: {', '.join(BACKENDS)})")
    chosen = ["reference", *[b for b in BACKENDS if b != "reference" and (not backend or b in backend)]]
    if not backend and "native" in chosen:
        from heatc_runtime.native import native_extension

        try:
            native_extension()
        except ModuleError as e:  # (asked for by name, it fails below with this message)
            out.print(f"[yellow]native backend skipped[/]: {escape(str(e))}")
            chosen.remove("native")
    try:
        program = _compile(file)
    except HeatError as e:
        raise _fail(e.render()) from None
    try:
        report = run_tests(program, examples, chosen)
    except ModuleError as e:
        raise _fail(f"heatc test: {e}") from None
    for backend, failures in report.expect_failures.items():
        for f in failures:
            out.print(
                f"[bold red]FAIL[/] expect ({backend}) {escape(f.expect.path)}:{f.expect.line}: {escape(f.message)}"
            )
    n_expect = len(program.expects)
    out.print(f"expect examples: {n_expect} on {', '.join(report.backends)}")
    for r in report.rules:
        if r.problem is None:
            how = "pattern and requirements" if r.oracle else "backends agree"
            out.print(f"[green]ok[/]   {r.rule}: {r.cases} generated inputs ({how})")
        else:
            out.print(f"[bold red]FAIL[/] {r.rule}: {escape(r.problem)}")
            out.print(f"     minimal input: {escape(repr(r.example.text.decode('utf-8', 'replace')))}")
            out.print(f"     as tokens: {escape(repr([p.decode('utf-8', 'replace') for p in r.example.pieces]))}")
    failed = sum(1 for r in report.rules if r.problem) + sum(len(f) for f in report.expect_failures.values())
    out.print(("[bold red]" if failed else "[green]") + f"{failed} failures[/]")
    raise typer.Exit(1 if failed else 0)


@app.command()
def learn(
    corpus: Annotated[
        list[Path],
        typer.Option(
            "--corpus", "-c", help="Corpus files or folders (.txt .md .json .jsonl, .gz, .tar.gz); repeat for more."
        ),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The heatmap to write (.yaml); the student goes beside it.")
    ],
    teacher: Annotated[
        Path | None,
        typer.Option(
            "--teacher", help="A local Hugging Face encoder or causal-LM folder (default: the embedded MiniLM)."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="The heatmap's name (default: the output file's stem).")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="The heatmap's title.")] = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Hand-written rule files to merge in; repeat for more.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for sampling and the teacher's random probes.")] = 0,
    device: Annotated[str, typer.Option("--device", help="torch device for the teacher (cpu, cuda, cuda:1).")] = "cpu",
    epsilon: Annotated[
        float,
        typer.Option(
            "--epsilon", min=1e-6, max=1.0, help="Perturbation radius, relative to each token's input-embedding norm."
        ),
    ] = 0.05,
    label_sentences: Annotated[
        int, typer.Option("--label-sentences", help="Random sentences the teacher labels for the student.")
    ] = 1500,
    probe_sentences: Annotated[
        int, typer.Option("--probe-sentences", help="At most this many sentences probed for pair coupling.")
    ] = 3000,
    topup_probes: Annotated[
        int,
        typer.Option(
            "--topup-probes", min=0, help="At most this many values probed besides, for cells left without a score."
        ),
    ] = 1500,
    discovery_sentences: Annotated[
        int, typer.Option("--discovery-sentences", help="Sentences read to learn keywords and candidate cells.")
    ] = 60000,
    min_support: Annotated[int, typer.Option("--min-support", help="Corpus occurrences a cell needs.")] = 20,
    sensitivity: Annotated[
        float,
        typer.Option(
            "--sensitivity", min=0.0, max=1.0, help="The heatmap's threshold: cells scoring at least this become rules."
        ),
    ] = 0.25,
    alarm_budget: Annotated[
        float,
        typer.Option(
            "--alarm-budget",
            min=0.0,
            max=1.0,
            help="Rejections the learned rules may make per clean corpus sentence that holds a value some "
            "rule checks, all cells together.",
        ),
    ] = 0.01,
    epochs: Annotated[int, typer.Option("--epochs", help="Student training epochs.")] = 8,
    student: Annotated[
        bool, typer.Option("--student/--no-student", help="Train and export the student detector.")
    ] = True,
    teacher_sentences: Annotated[
        int,
        typer.Option(
            "--teacher-sentences",
            min=0,
            help="The teacher labels at most this many of the planned sentences and the student scores the cells "
            "(0: the teacher reads and scores them all).",
        ),
    ] = 400,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard the previous run's work (OUTPUT.learn/) instead of resuming it.")
    ] = False,
) -> None:
    """Learn a heatmap from a corpus with a frozen teacher model (runs under torchrun too)."""
    import os

    try:
        from heatc.learn.config import LearnConfig
        from heatc.learn.pipeline import learn as run_learn
    except ModuleNotFoundError as missing:
        raise _fail(f"heatc learn needs {missing.name!r}: pip install 'heatc[learn]'") from None
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    rank = int(os.environ.get("RANK", "0"))
    config = LearnConfig(
        corpus=corpus, output=output, name=name, title=title, teacher=teacher, device=device, seed=seed,
        epsilon=epsilon, label_sentences=label_sentences, max_probe_sentences=probe_sentences,
        topup_probes=topup_probes, min_support=min_support, sensitivity=sensitivity, alarm_budget=alarm_budget,
        discovery_sentences=discovery_sentences, epochs=epochs, rules=list(rules or []), student=student,
        teacher_sentences=teacher_sentences,
    )  # fmt: skip
    try:
        with _LearnProgress(rank == 0 and sys.stderr.isatty(), rank == 0) as progress:
            summary = run_learn(
                config,
                fresh=fresh,
                progress=progress,
                log=(lambda m: out.print(escape(m))) if rank == 0 else (lambda m: None),
            )
    except HeatError as e:
        raise _fail(e.render()) from None
    finally:
        if distributed:
            dist.destroy_process_group()
    if rank == 0:
        m = summary["metrics"]
        out.print(
            f"{output}: {summary['cells']} cells, {summary['hot_cells']} at or above {sensitivity}; "
            f"student AUC {m.get('student_auc', 'n/a')} (IDF {m.get('idf_auc', 'n/a')}, random {m.get('random_auc', 'n/a')}); "
            f"teacher {summary['label_seconds']} s, total {summary['seconds']} s"
        )


@app.command()
def finetune(
    base: Annotated[Path, typer.Argument(help="The heatmap to adapt (.yaml), its student beside it.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="The domain heatmap to write (.yaml); its student goes beside it.")
    ],
    pdf: Annotated[list[Path] | None, typer.Option("--pdf", help="A PDF of the domain; repeat for more.")] = None,
    text: Annotated[
        list[Path] | None,
        typer.Option("--text", help="Text of the domain (files or folders, as heatc learn reads); repeat for more."),
    ] = None,
    teacher: Annotated[
        Path | None,
        typer.Option("--teacher", help="The teacher the base heatmap was learned with, if not the embedded MiniLM."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="The heatmap's name (default: the base's).")] = None,
    title: Annotated[str | None, typer.Option("--title", help="The heatmap's title.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for sampling and the teacher's random probes.")] = 0,
    device: Annotated[str, typer.Option("--device", help="torch device for the teacher (cpu, cuda, cuda:1).")] = "cpu",
    teacher_sentences: Annotated[
        int,
        typer.Option(
            "--teacher-sentences", min=1, help="The domain sentences the teacher labels (the student scores all)."
        ),
    ] = 256,
    min_support: Annotated[int, typer.Option("--min-support", min=1, help="Domain occurrences a new cell needs.")] = 8,
    alarm_budget: Annotated[
        float,
        typer.Option(
            "--alarm-budget", min=0.0, max=1.0, help="Rejections the domain cells may make per clean domain sentence."
        ),
    ] = 0.02,
    epochs: Annotated[int, typer.Option("--epochs", min=1, help="Student fine-tuning epochs.")] = 8,
    keep_unused: Annotated[
        bool,
        typer.Option(
            "--keep-unused/--drop-unused",
            help="Keep the base cells the domain does not re-learn (unless they reject domain text).",
        ),
    ] = True,
    new_student: Annotated[
        bool, typer.Option("--new-student", help="Without a student beside the base: train one from the domain sample.")
    ] = False,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Discard the previous run's work (OUTPUT.finetune/) instead of resuming it.")
    ] = False,
) -> None:
    """Adapt a learned heatmap to a domain's documents: the base's student is fine-tuned on the
    teacher's labels of a bounded sample, then scores the domain's cells over all of it."""
    try:
        from heatc.learn.finetune import FinetuneConfig
        from heatc.learn.finetune import finetune as run_finetune
    except ModuleNotFoundError as missing:
        raise _fail(f"heatc finetune needs {missing.name!r}: pip install 'heatc[learn]'") from None
    config = FinetuneConfig(
        base=base, output=output, pdfs=list(pdf or []), texts=list(text or []), name=name, title=title,
        teacher=teacher, device=device, seed=seed, teacher_sentences=teacher_sentences, min_support=min_support,
        alarm_budget=alarm_budget, epochs=epochs, keep_unused=keep_unused, new_student=new_student,
    )  # fmt: skip
    try:
        with _LearnProgress(sys.stderr.isatty(), True, "heatc finetune") as progress:
            summary = run_finetune(config, fresh=fresh, progress=progress, log=lambda m: out.print(escape(m)))
    except HeatError as e:
        raise _fail(e.render()) from None
    m, c = summary["metrics"], summary["counts"]
    out.print(
        f"{output}: {summary['cells']} cells ({c.get('domain', 0)} learned from the domain, {c.get('kept', 0)} kept from "
        f"the base, {c.get('dropped', 0)} dropped); student pair Spearman {m.get('pair_spearman', 'n/a')}, "
        f"pair AUC {m.get('pair_auc', 'n/a')}, token AUC {m.get('student_auc', 'n/a')}; "
        f"teacher {summary['teacher_seconds']} s, total {summary['seconds']} s"
    )


class _LearnProgress:
    """Rich progress bars, one per stage, on an interactive terminal; plain lines otherwise."""

    def __init__(self, live: bool, report: bool = True, command: str = "heatc learn"):
        self.live = live
        self.command = command
        self.report = report  # only rank 0 of a distributed run reports
        self.tasks: dict[str, int] = {}
        self.bar = None

    def __enter__(self):
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description:>16}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.bar.start()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if not self.report:
            return
        if self.bar is None:
            if done == total:
                sys.stderr.write(f"{self.command}: {stage}: {done}/{total}\n")
            return
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


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
        raise _fail(f"heatc scan: unknown backend {backend!r} (available: {', '.join(BACKENDS)})")
    try:
        rule_policy = Policy.parse(policy)
    except ValueError as e:
        raise _fail(f"heatc scan: --{e}") from None
    files = files or ["-"]
    conflict_mode = chunks or chunk_separator is not None
    if chunks and chunk_separator is not None:
        raise _fail("heatc scan: give --chunks (each FILE a chunk) or --chunk-separator (one input split), not both")
    if conflict_mode and lines:
        raise _fail("heatc scan: --lines reads documents, --chunks and --chunk-separator read chunks: choose one")
    if len(files) > 1 and not chunks:
        raise _fail("heatc scan: give one text FILE (or --chunks to read several files as the chunks of one context)")
    try:
        program = _compile(rules)
    except HeatError as e:
        raise _fail(e.render()) from None
    inputs = []
    for file in files:
        try:
            inputs.append(sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes())
        except OSError as e:
            raise _fail(f"{file}: error: cannot read: {e.strerror}") from None

    def run(doc: bytes):
        return run_document(backend, program, doc)

    if backend == "native":
        from heatc_runtime.native import native_extension

        try:
            native_extension()
        except ModuleError as e:
            raise _fail(f"heatc scan: {e}") from None
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
            raise _fail(f"{rules}: error: {e}") from None

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
            _print_document(i, doc, audit, events, lines)
    raise typer.Exit(3 if overall is Verdict.REJECTED else 0)


def _scan_chunks(module, files, inputs, separator, run, backend: str, as_json: bool) -> None:
    """heatc scan --chunks / --chunk-separator: the conflicts between the chunks; exits."""
    from heatc_runtime.conflicts import NoConsistencyRulesError, chunk_bytes, find_conflicts, join_chunks

    if separator is not None:
        sep = separator.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").encode("utf-8")
        if not sep:
            raise _fail("heatc scan: --chunk-separator needs a non-empty STR")
        names = [f"{files[0]} (chunk {i})" for i in range(inputs[0].count(sep) + 1)]
        texts = inputs[0].split(sep)
    else:
        names, texts = files, inputs
    for name, text in zip(names, texts, strict=True):
        try:
            chunk_bytes([text])
        except ValueError as e:
            raise _fail(f"{name}: error: {str(e).replace('chunk 0 is ', '', 1)}") from None
    try:
        t0 = time.perf_counter()
        stream, _ = join_chunks(texts)
        events = run(stream)[0]
        report = find_conflicts(module, texts, events)
        elapsed = time.perf_counter() - t0
    except NoConsistencyRulesError as e:
        raise _fail(f"heatc scan: error: {e}") from None
    if as_json:
        record = report.to_json()
        record["run"] = {"backend": backend, "elapsed_ms": round(elapsed * 1000, 3), "chunk_names": names}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.print(f"[bold]{len(texts)} chunks[/]: {len(report)} conflict{'s' * (len(report) != 1)}")
        for c in report:  # (lines, not a table: the texts are long)
            out.print(f"{c.score:.2f}  [bold]{escape(c.channel)}[/]")
            for m in (c.earlier, c.later):
                out.print(escape(f"      chunk {m.chunk} [{m.start}:{m.end}] {m.text!r} = {_fmt(m.value)}"))
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
        raise _fail(f"heatc generate: unknown mode {mode!r} (modes: {', '.join(MODES)})")
    if engine not in ENGINES:
        raise _fail(f"heatc generate: unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    if not 1 <= k <= 64 or max_new_tokens < 1:
        raise _fail("heatc generate: --k must be 1 to 64 and --max-new-tokens at least 1")
    try:
        program = None if rules.is_dir() else _compile(rules)
    except HeatError as e:
        raise _fail(e.render()) from None
    try:
        with temporary_module(rules, program) as module:
            report, model_name = run_generate(
                module, prompt, model=model, engine=engine, mode=mode, k=k, max_new_tokens=max_new_tokens,
                seed=seed, see_prompt=see_prompt, chat=chat,
            )  # fmt: skip
            info = ModuleInfo.from_manifest(json.loads((module / "manifest.json").read_text(encoding="utf-8")))
    except (GenerateError, ValueError) as e:
        raise _fail(str(e)) from None
    except ModuleNotFoundError as missing:
        raise _fail(f"heatc generate needs {missing.name!r}: pip install 'heatc[engines]'") from None
    audit = audit_snapshots(info, report.stream, report.snapshots) if report.snapshots else None
    if as_json:
        record = {"model": model_name, "engine": engine, "prompt": prompt, **report.to_json()}
        if audit is not None:
            record["audit"] = audit.to_json()
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.print(f"[bold]{escape(model_name)}[/] ({engine}, {mode}): {escape(report.text)}")
        if audit is not None:
            _print_document(0, report.stream, audit, report.events, False)
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


def _print_document(i, doc, audit, events, lines) -> None:
    title = f"document {i + 1}" if lines else "document"
    counters, verdict = audit.counters, audit.verdict
    out.print(
        f"[bold]{title}[/]: [{_VERDICT_STYLE[verdict]}]{verdict.name}[/]  "
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
    rejected = [k for k, v in audit.verdicts.items() if v is Verdict.REJECTED]
    if rejected:
        out.print("rejected rules: " + escape(", ".join(rejected)))


def _fmt(v) -> str:
    if isinstance(v, float) and v == int(v) and abs(v) < 1e16:
        return str(int(v))
    return str(v)


@app.command()
def extract(
    files: Annotated[list[Path], typer.Argument(help="PDF files.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per page: file, sha256, page, text, scanned, error.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here instead of standard output (all or nothing).")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Processes reading pages (default: one per CPU for long inputs)."),
    ] = None,
) -> None:
    """Print the text of PDF files page by page, a header line before each page.

    Scanned pages (an image and no text) and pages that fail are reported, and the rest is
    kept; a file that cannot be opened stops everything before anything is written.
    Exit status: 0, or 1 on an input error.
    """
    try:
        import pypdfium2  # noqa: F401

        from heatc.pdf import extract as run_extract
    except ModuleNotFoundError as missing:
        raise _fail(f"heatc extract needs {missing.name!r}: pip install 'heatc[pdf]'") from None
    try:
        documents = run_extract(files, workers=workers)
    except HeatError as e:
        raise _fail(e.render()) from None
    chunks = []
    for doc in documents:
        for page in doc.pages:
            if as_json:
                chunks.append(json.dumps(page.to_json(), ensure_ascii=False) + "\n")
                continue
            state = " (scanned: no text layer)" if page.scanned else f" (failed: {page.error})" if page.error else ""
            header = f"==> {doc.file} page {page.page} of {doc.page_count}{state} <==\n"
            chunks.append(("\n" if chunks else "") + header + (page.text + "\n" if page.text else ""))
    text = "".join(chunks)
    if output is None:
        sys.stdout.write(text)
    else:
        _write_whole(output, text)
    pages = sum(len(d.pages) for d in documents)
    scanned = sum(len(d.scanned) for d in documents)
    failed = [(d.file, p) for d in documents for p in d.pages if p.error]
    for file, page in failed:
        sys.stderr.write(f"{file}: page {page.page}: {page.error}\n")
    n = len(documents)
    sys.stderr.write(
        f"heatc extract: {n} file{'s' * (n != 1)}, {pages} pages, {scanned} scanned, {len(failed)} failed\n"
    )


def _write_whole(path: Path, text: str) -> None:
    """Write through a temporary file beside `path`, renamed over it: a reader never sees half."""
    import os
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _fail(f"{path}: error: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise _fail(f"{path}: error: cannot write: {e.strerror or e}") from None


def main() -> None:
    app()
