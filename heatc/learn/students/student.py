"""The student detector: a small model that predicts the teacher's token sensitivity.

The teacher costs one forward and K backward passes through a 22M-parameter model per
sentence; the student is a two-layer transformer encoder of width 64 over the teacher's own
tokenizer, trained by **regression** on each sentence's standardised log-sensitivity (the
metric — AUC with each sentence's top 20 % most sensitive tokens as positives — is a
within-sentence ranking, and standardising per sentence makes the loss one too). Baselines
for the same metric: a bidirectional LSTM student of the same width, a lexical IDF score,
and random scores. The student exports to ONNX (torch's dynamo exporter, dynamic batch and
sequence length), and onnxruntime is checked against torch.

Training works in one process or under `torchrun` (DistributedDataParallel, gloo): every
global batch is split across ranks and the loss is normalised by the global token count, so
N processes compute the same gradients as one.

Public surface: `StudentConfig`, `Training`, `TokenExample`, `Student`, `LstmStudent`, `train`, `fit`,
`evaluate_auc`, `idf_scores`, `export_onnx`, `quiet_exporter`, `load_onnx`, `per_sentence_auc`.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from heatc.errors import Diagnostic, HeatError

POSITIVE_SHARE = 0.2  # the top 20 % most sensitive tokens of a sentence are the positives


@dataclass(frozen=True)
class Training:
    """How a student is trained (`fit`): passes over the examples in global batches of
    `batch_size`, AdamW's learning rate, and the seed of its initialisation and shuffles."""

    epochs: int = 8
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0


@dataclass
class StudentConfig:
    vocab_size: int
    width: int = 64
    layers: int = 2
    heads: int = 4
    max_length: int = 128
    kind: str = "transformer"  # transformer | lstm
    features: int = 0  # > 0: tokens enter through a frozen table of teacher-derived features


@dataclass
class TokenExample:
    ids: list[int]  # teacher token ids, specials included
    labels: list[float]  # teacher sensitivity per token (0 at specials)
    mask: list[int]  # 1 for tokens that carry text


class _Block(nn.Module):
    """Pre-norm self-attention block, written with plain matmuls so it exports cleanly."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor, bias: torch.Tensor, attention: bool = False):
        """The block's output; with `attention`, and its attention weights [B, heads, T, T]."""
        b, t, w = x.shape
        h = self.heads
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, h, w // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(w // h) + bias, dim=-1)
        x = x + self.out((att @ v).transpose(1, 2).reshape(b, t, w))
        x = x + self.ff(self.norm2(x))
        return (x, att) if attention else x


def teacher_token_features(teacher, dims: int) -> torch.Tensor:
    """[vocab, dims] fixed token features from the teacher's input embeddings: the top
    dims − 1 principal components and the log of the embedding norm (a token's sensitivity
    label scales with its squared norm). Tokens never seen in training keep meaningful
    features, which is what lets a student generalise to another domain's vocabulary."""
    table = teacher.model.get_input_embeddings().weight.detach().float()
    centred = table - table.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    comps = centred @ v[: dims - 1].T
    comps = comps / comps.std(0, keepdim=True).clamp_min(1e-6)
    lognorm = table.norm(dim=-1, keepdim=True).log()
    lognorm = (lognorm - lognorm.mean()) / lognorm.std().clamp_min(1e-6)
    pad = torch.zeros(table.shape[0], dims - 1 - comps.shape[1])  # a teacher narrower than dims
    return torch.cat([comps, pad, lognorm], dim=1).to(torch.float16)


class _TokenInput(nn.Module):
    """A trainable embedding, or a trainable projection of a frozen feature table (stored as
    float16 to halve the exported file)."""

    def __init__(self, config: StudentConfig, table: torch.Tensor | None):
        super().__init__()
        if config.features:
            if table is None:
                table = torch.zeros(config.vocab_size, config.features, dtype=torch.float16)
            self.register_buffer("table", table.to(torch.float16))
            self.project = nn.Linear(config.features, config.width)
        else:
            self.embed = nn.Embedding(config.vocab_size, config.width)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "table"):
            return self.project(self.table[input_ids].float())
        return self.embed(input_ids)


class Student(nn.Module):
    def __init__(self, config: StudentConfig, table: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.embed = _TokenInput(config, table)
        self.position = nn.Embedding(config.max_length, config.width)
        self.blocks = nn.ModuleList(_Block(config.width, config.heads) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        positions = torch.arange(t, device=input_ids.device).unsqueeze(0)
        x = self.embed(input_ids) + self.position(positions)
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * -1e9
        for block in self.blocks:
            x = block(x, bias)
        return self.head(self.norm(x)).squeeze(-1)


class LstmStudent(nn.Module):
    def __init__(self, config: StudentConfig, table: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.embed = _TokenInput(config, table)
        self.lstm = nn.LSTM(
            config.width, config.width // 2, num_layers=config.layers, batch_first=True, bidirectional=True
        )
        self.head = nn.Linear(config.width, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x, _ = self.lstm(self.embed(input_ids))
        return self.head(x).squeeze(-1)


def make_student(config: StudentConfig, table: torch.Tensor | None = None) -> nn.Module:
    return LstmStudent(config, table) if config.kind == "lstm" else Student(config, table)


def _targets(ex: TokenExample) -> list[float]:
    """Standardised log-sensitivity over the sentence's text tokens (0 elsewhere)."""
    xs = [math.log(max(y, 1e-12)) for y, m in zip(ex.labels, ex.mask, strict=True) if m]
    if len(xs) < 2:
        return [0.0] * len(ex.ids)
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs)) or 1.0
    return [(math.log(max(y, 1e-12)) - mean) / sd if m else 0.0 for y, m in zip(ex.labels, ex.mask, strict=True)]


def _pad(
    examples: list[TokenExample], max_length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    t = max(1, max(min(len(e.ids), max_length) for e in examples))
    ids = torch.zeros(len(examples), t, dtype=torch.long)
    attn = torch.zeros(len(examples), t, dtype=torch.long)
    target = torch.zeros(len(examples), t)
    weight = torch.zeros(len(examples), t)
    for i, e in enumerate(examples):
        n = min(len(e.ids), max_length)
        ids[i, :n] = torch.tensor(e.ids[:n])
        attn[i, :n] = 1
        target[i, :n] = torch.tensor(_targets(e)[:n])
        weight[i, :n] = torch.tensor(e.mask[:n], dtype=torch.float)
    return ids, attn, target, weight


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def train(
    config: StudentConfig,
    examples: list[TokenExample],
    training: Training,
    *,
    checkpoint: Path | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    table: torch.Tensor | None = None,
) -> nn.Module:
    """Train a student; resumes from `checkpoint` (saved after every epoch) when it exists.
    Under torch.distributed each rank takes its share of every global batch."""
    torch.manual_seed(training.seed)
    model = make_student(config, table)

    def batch_loss(wrapped: nn.Module, batch: list[TokenExample], rank: int, world: int) -> torch.Tensor:
        tokens = sum(sum(e.mask[: config.max_length]) for e in batch) or 1
        mine = batch[rank::world]
        ids, attn, target, weight = _pad(mine or batch[:1], config.max_length)
        if not mine:
            weight = torch.zeros_like(weight)
        pred = wrapped(ids, attn)
        # DDP averages gradients over ranks, hence × world: the sum is the global mean.
        return ((pred - target) ** 2 * weight).sum() / tokens * world

    return fit(model, examples, batch_loss, training, checkpoint=checkpoint, progress=progress)


def fit(
    model: nn.Module,
    examples: list,
    batch_loss: Callable[[nn.Module, list, int, int], torch.Tensor],
    training: Training,
    *,
    checkpoint: Path | None,
    progress: Callable[[int, int, float], None] | None,
) -> nn.Module:
    """The training loop every student shares: AdamW, a learning rate decaying linearly to
    5 %, a seeded shuffle per epoch, a checkpoint after every epoch (resumed from when it
    exists), DistributedDataParallel under torch.distributed. `batch_loss(wrapped, batch,
    rank, world)` is this rank's loss on its share of a global batch, scaled so that the
    ranks' average is the global mean."""
    rank, world = _distributed()
    epochs, batch_size, seed = training.epochs, training.batch_size, training.seed
    optimiser = torch.optim.AdamW(model.parameters(), lr=training.lr, weight_decay=0.01)
    total_steps = max(1, epochs * math.ceil(len(examples) / batch_size))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: max(0.05, 1 - s / total_steps))
    start = 0
    if checkpoint is not None and checkpoint.exists():
        try:
            state = torch.load(checkpoint, weights_only=True)
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state["optimiser"])
            schedule.load_state_dict(state["schedule"])
            start = int(state["epoch"])
        except (RuntimeError, OSError, EOFError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            raise HeatError(
                Diagnostic(str(checkpoint), 0, 0, f"the student's checkpoint is damaged ({why}); rerun with --fresh")
            ) from None
    wrapped: nn.Module = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    for epoch in range(start, epochs):
        order = list(range(len(examples)))
        random.Random(seed * 1000 + epoch).shuffle(order)
        running, count = 0.0, 0
        for b0 in range(0, len(order), batch_size):
            loss = batch_loss(wrapped, [examples[i] for i in order[b0 : b0 + batch_size]], rank, world)
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            running += loss.item() / world
            count += 1
        if rank == 0 and checkpoint is not None:
            tmp = checkpoint.with_suffix(".tmp")
            state = {
                "model": model.state_dict(),
                "optimiser": optimiser.state_dict(),
                "schedule": schedule.state_dict(),
            }
            torch.save({**state, "epoch": epoch + 1}, tmp)
            tmp.replace(checkpoint)
        if progress is not None:
            progress(epoch + 1, epochs, running / max(count, 1))
    return model.eval()


def per_sentence_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """AUC of `scores` against the sentence's top 20 % of `labels` as positives (None when
    the sentence is too short to have both classes)."""
    n = len(labels)
    k = max(1, round(POSITIVE_SHARE * n))
    if n < 5 or k >= n:
        return None
    positive = np.zeros(n, dtype=bool)
    positive[np.argsort(-labels, kind="stable")[:k]] = True
    ranks = _average_ranks(scores)
    return float((ranks[positive].sum() - k * (k + 1) / 2) / (k * (n - k)))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def evaluate_auc(score: Callable[[list[TokenExample]], list[np.ndarray]], examples: list[TokenExample]) -> float:
    """Mean per-sentence AUC over the text tokens of `examples`."""
    aucs = []
    for b0 in range(0, len(examples), 64):
        batch = examples[b0 : b0 + 64]
        for e, s in zip(batch, score(batch), strict=True):
            m = np.asarray(e.mask[: len(s)], dtype=bool)
            auc = per_sentence_auc(np.asarray(s)[m], np.asarray(e.labels[: len(s)])[m])
            if auc is not None:
                aucs.append(auc)
    return float(np.mean(aucs)) if aucs else float("nan")


def model_scorer(model: nn.Module, max_length: int) -> Callable[[list[TokenExample]], list[np.ndarray]]:
    def score(batch: list[TokenExample]) -> list[np.ndarray]:
        ids, attn, _, _ = _pad(batch, max_length)
        with torch.no_grad():
            out = model(ids, attn).numpy()
        return [out[i, : min(len(e.ids), max_length)] for i, e in enumerate(batch)]

    return score


def idf_scores(examples: list[TokenExample]) -> Callable[[list[TokenExample]], list[np.ndarray]]:
    """The lexical baseline: a token's inverse document frequency over the training sentences."""
    df: dict[int, int] = {}
    for e in examples:
        for t in set(e.ids):
            df[t] = df.get(t, 0) + 1
    n = len(examples)

    def score(batch: list[TokenExample]) -> list[np.ndarray]:
        return [np.array([math.log((n + 1) / (df.get(t, 0) + 1)) for t in e.ids]) for e in batch]

    return score


def random_scores(seed: int = 0) -> Callable[[list[TokenExample]], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return lambda batch: [rng.random(len(e.ids)) for e in batch]


@contextlib.contextmanager
def quiet_exporter():
    """torch.onnx.export without its progress: it reports through warnings and the
    "torch.onnx" logger, and a CLI run wants quiet (the logger's level is put back)."""
    import logging
    import warnings

    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def export_onnx(model: nn.Module, path: Path, *, check_examples: list[TokenExample] | None = None) -> float:
    """Export with the dynamo exporter (dynamic batch and length); returns the largest
    absolute difference between onnxruntime and torch on `check_examples`."""
    import onnxruntime

    model = model.eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    attn = torch.ones_like(ids)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=model.config.max_length)
    tmp = path.with_name(path.name + ".tmp")
    with quiet_exporter():
        program = torch.onnx.export(
            model,
            (ids, attn),
            dynamo=True,
            input_names=["input_ids", "attention_mask"],
            output_names=["scores"],
            dynamic_shapes={"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}},
            verbose=False,
        )
    program.save(str(tmp))
    tmp.replace(path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for b0 in range(0, len(check_examples or []), 32):
        ids, attn, _, _ = _pad(check_examples[b0 : b0 + 32], model.config.max_length)
        with torch.no_grad():
            ref = model(ids, attn).numpy()
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": attn.numpy()})[0]
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst
