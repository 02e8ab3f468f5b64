"""`heatc generate`: a model writes, the rules check it as it writes (heatc.generate).

Public surface: the command, registered on `heatc.cli.common.app`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from heatc.cli.common import app, fail, out, print_document
from heatc.errors import HeatError
from heatc_runtime import Verdict


@app.command()
def generate(
    rules: Annotated[Path, typer.Argument(help="A .heat rule file, a heatmap (.yaml), or a build directory.")],
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="What to ask the model.")],
    model: Annotated[
        Path | None, typer.Option("--model", help="A Hugging Face causal-LM folder (default: SmolLM2-135M-Instruct).")
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="transformers or vllm.")] = "transformers",
    mode: Annotated[
        str, typer.Option("--mode", help="observe, stop (at the first rejection) or guard (refuse candidates).")
    ] = "observe",
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="guard, when the model's choice would be rejected: withhold (write the marker where the value "
            "was), stop, or steer (take the best candidate that passes).",
        ),
    ] = "withhold",
    marker: Annotated[
        str, typer.Option("--marker", help="guard's withhold: what stands for a value.")
    ] = "[unverified]",
    k: Annotated[int, typer.Option("--k", help="guard: candidates tried per step.")] = 8,
    backend: Annotated[
        str | None, typer.Option("--backend", help="native, wasm or cuda (default: native where it loads).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", help="Tokens to generate at most.")] = 64,
    seed: Annotated[int | None, typer.Option("--seed", help="Sample with this seed (default: greedy).")] = None,
    see_prompt: Annotated[bool, typer.Option("--see-prompt", help="The rules read the prompt too.")] = False,
    chat: Annotated[bool, typer.Option("--chat/--raw", help="Wrap the prompt in the model's chat template.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: the text and its report.")] = False,
) -> None:
    """Generate with a real model while the rules check it, and print the text and its report.

    Exit status: 0 when the generation is not REJECTED, 3 when it is, 1 on an input error.
    """
    from heatc.generate import ENGINES, GenerateError, Options, rules_module
    from heatc.generate import generate as run_generate
    from heatc_runtime import ModuleError
    from heatc_runtime.engines.options import BACKENDS, RowOptions
    from heatc_runtime.reports.audit import ModuleInfo, audit_snapshots

    if engine not in ENGINES:
        raise fail(f"heatc generate: unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    if backend is not None and backend not in BACKENDS:
        raise fail(f"heatc generate: unknown backend {backend!r} (backends: {', '.join(BACKENDS)})")
    if max_new_tokens < 1:
        raise fail("heatc generate: --max-new-tokens must be at least 1")
    try:
        RowOptions(mode, k, policy, marker)
    except ValueError as e:
        raise fail(f"heatc generate: {e}") from None
    options = Options(mode, k, policy, marker, backend, max_new_tokens, seed, see_prompt, chat)
    try:
        with rules_module(rules) as module:
            report, model_name = run_generate(module, prompt, options, model=model, engine=engine)
            info = ModuleInfo.from_manifest(json.loads((module / "manifest.json").read_text(encoding="utf-8")))
    except HeatError as e:
        raise fail(e.render()) from None
    except (GenerateError, ModuleError, ValueError) as e:
        raise fail(str(e)) from None
    except ModuleNotFoundError as missing:
        raise fail(f"heatc generate needs {missing.name!r}: pip install 'heatc[engines]'") from None
    if report.error:
        raise fail(f"heatc generate: {report.error}")
    audit = audit_snapshots(info, report.stream, report.snapshots) if report.snapshots else None
    if as_json:
        record = {"model": model_name, "engine": engine, "prompt": prompt, **report.to_json()}
        if audit is not None:
            record["audit"] = audit.to_json()
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        how = f"{engine}, {report.backend}, {mode}" + (f" ({report.policy})" if mode == "guard" else "")
        out.print(f"[bold]{escape(model_name)}[/] ({how}): {escape(report.text)}")
        if report.delivered != report.text:
            out.print(f"delivered: {escape(report.delivered)}")
        if audit is not None:
            print_document(0, report.stream, audit, report.events, False)
        else:
            out.print(f"document: {report.verdict.name} (nothing was published)")
        for iv in report.interventions:
            out.print(escape(_intervention(iv)))
        if report.stopped_at is not None:
            out.print(f"stopped at token {report.stopped_at}: the first snapshot with a rejection")
    raise typer.Exit(3 if report.verdict is Verdict.REJECTED else 0)


def _intervention(iv) -> str:
    """One line per step guard acted at: what was refused, why, what was written instead."""
    first = iv.refused[0] if iv.refused else None
    why = ""
    if first is not None and first.rejects:
        e = first.rejects[0]
        values = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in e.captures)
        why = f" ({e.name}: {values})" if values else f" ({e.name})"
    refused = f"{first.text!r}{why}" if first is not None else "nothing"
    more = f" and {len(iv.refused) - 1} more" if len(iv.refused) > 1 else ""
    value = f" value {iv.value!r} withheld;" if iv.action in ("withheld", "stopped") and iv.value else ""
    written = f" wrote {iv.written!r}" if iv.written else " ended the text"
    escape_note = " — the model left out what made the value fail" if iv.escape else ""
    return f"guard {iv.action} at token {iv.step}: refused {refused}{more};{value}{written}{escape_note}"
