"""The pair student: a small model that predicts what cells are made of — the teacher's
token sensitivity *and* its pair couplings (value position × other position → coupling).

Cell scores come from the teacher's pair couplings (`evidence.Couplings`), so a student that
predicts only single-token sensitivity cannot score a corpus's cells. This one has two heads
over one encoder (the token student's: a two-layer transformer of width 64 over a frozen table
of teacher-derived token features, `student.teacher_token_features`; with
`PairConfig.positions="relative"`, what `heatc learn` gives new students, a learned attention
bias by relative distance in place of its absolute position embedding):

- the **token head**, trained like the token student on each sentence's standardised
  log-sensitivity;
- the **pair head**: for a value token p and every token j, `w · gelu(Q h_p + K h_j + R[j − p])`
  with R a learned embedding of the clipped relative position. It is trained on the
  teacher's probes: each probe row holds the coupling of one value lexeme with every lexeme
  of its sentence (the largest over the lexeme's tokens, as the teacher's rows are), and the
  target is the row's **centred log coupling** — log c_j minus its mean over the row. Cell
  strengths are ratios c_j / mean(c) within a row, which an additive constant in log space does
  not change, so the loss removes the row's offset from the prediction too.

`student_records` turns the student's predictions into records of the teacher's format
(`{"text", "probes": [[value lexeme, coupling per lexeme]]}`), which the aggregate stage reads
unchanged. Fidelity (`pair_fidelity`): per probe row, the Spearman rank correlation of the
student's couplings with the teacher's, and the AUC with the row's top 20 % teacher couplings
as positives.

The ONNX file a pair student is written to and read from: `heatc.learn.students.pair_onnx`.

Public surface: `PairConfig`, `PairExample`, `PairStudent`, `examples_from_records`,
`train_pair`, `pair_fidelity`, `student_records`, `collate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from heatc.learn.students.student import (
    StudentConfig,
    Training,
    _Block,
    _targets,
    _TokenInput,
    fit,
    per_sentence_auc,
)

PAIR_WEIGHT = 1.0  # the pair loss against the token loss (both are per-item mean squared errors)


@dataclass
class PairConfig(StudentConfig):
    """A token student's configuration (its encoder and token head; `kind` lstm: the
    baseline) and its pair head's."""

    features: int = 64  # > 0: tokens enter through a frozen table of teacher-derived features
    pair_width: int = 64
    max_distance: int = 24  # relative positions further apart share one embedding
    # "interaction": the pair head also reads both tokens' input features, their product,
    # the student's own attention between them (transformer) and the token head's score,
    # through one hidden layer; "additive": Q h_p + K h_j + R[j − p] alone (students of an
    # earlier heatc, whose metadata does not name a head)
    pair_head: str = "additive"
    # where the transformer's tokens learn their order: "absolute", a learned embedding of
    # each token's position (the shipped students, and any whose metadata does not name one);
    # "relative" (new students, `distil.POSITIONS`): no absolute positions, a learned bias on every
    # attention logit per layer and head by the distance between the two tokens (clipped at
    # relative_distance, starting as ALiBi's per-head linear decay)
    positions: str = "absolute"
    relative_distance: int = 48


@dataclass
class PairExample:
    ids: list[int]  # teacher token ids, specials included
    mask: list[int]  # 1 for tokens that carry text
    labels: list[float] | None  # teacher sensitivity per token; None: pair evidence only
    lexemes: list[list[int]]  # the token positions of each lexeme (`lexemes.align`)
    probes: list[tuple[int, list[float | None]]]  # (value lexeme, the teacher's coupling per lexeme)
    text: str = ""


class PairStudent(nn.Module):
    """Token and pair heads over one encoder. The transformer's parameter names are the token
    student's (`student.Student`), so a token student's weights load into it (with absolute
    positions; relative ones have `attention_rel` in place of `position`)."""

    def __init__(self, config: PairConfig, table: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        self.embed = _TokenInput(config, table)  # type: ignore[arg-type]
        w = config.width
        if config.kind == "lstm":
            self.lstm = nn.LSTM(w, w // 2, num_layers=config.layers, batch_first=True, bidirectional=True)
        else:
            if config.positions == "relative":
                self.attention_rel = nn.Embedding(2 * config.relative_distance + 1, config.layers * config.heads)
                with torch.no_grad():
                    self.attention_rel.weight.copy_(
                        _alibi(config.relative_distance, config.heads).repeat(1, config.layers)
                    )
            else:
                self.position = nn.Embedding(config.max_length, w)
            self.blocks = nn.ModuleList(_Block(w, config.heads) for _ in range(config.layers))
            self.norm = nn.LayerNorm(w)
        self.head = nn.Linear(w, 1)
        d = config.pair_width
        self.pair_q = nn.Linear(w, d)
        self.pair_k = nn.Linear(w, d)
        self.pair_rel = nn.Embedding(2 * config.max_distance + 1, d)
        self.pair_out = nn.Linear(d, 1)
        if config.pair_head == "interaction":
            self.pair_fq = nn.Linear(w, d)  # the value token's input features
            self.pair_fk = nn.Linear(w, d)  # the other token's
            self.pair_mq = nn.Linear(w, d)  # a product of the two encodings: what a sum cannot say
            self.pair_mk = nn.Linear(w, d)
            if config.kind != "lstm":  # attention both ways, every layer and head
                self.pair_att = nn.Linear(2 * config.layers * config.heads, d)
            self.pair_hidden = nn.Linear(d, d)
            self.pair_score = nn.Linear(1, 1)  # the token head's score of the other token

    def encode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(the encodings [B, T, W], the input features [B, T, W], the attention of every
        layer and head [B, L·H, T, T] where the interaction head reads it, else None)."""
        x = u = self.embed(input_ids)
        if self.config.kind == "lstm":
            return self.lstm(x)[0], u, None
        t = input_ids.shape[1]
        span = torch.arange(t, device=input_ids.device)
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * -1e9
        biases = [bias] * len(self.blocks)
        if self.config.positions == "relative":
            m = self.config.relative_distance
            rel = self.attention_rel((span.view(1, -1) - span.view(-1, 1)).clamp(-m, m) + m)  # [T, T, L·H]
            rel = rel.permute(2, 0, 1).reshape(len(self.blocks), self.config.heads, t, t)
            biases = [bias + rel[i].unsqueeze(0) for i in range(len(self.blocks))]
        else:
            x = x + self.position(span.unsqueeze(0))
        if self.config.pair_head != "interaction":  # (the additive head reads no attention)
            for block, b in zip(self.blocks, biases, strict=True):
                x = block(x, b)
            return self.norm(x), u, None
        maps = []
        for block, b in zip(self.blocks, biases, strict=True):
            x, att = block(x, b, attention=True)
            maps.append(att)
        return self.norm(x), u, torch.cat(maps, dim=1)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, value_positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, u, att = self.encode(input_ids, attention_mask)  # [B, T, W]
        scores = self.head(h).squeeze(-1)

        def at_values(x: torch.Tensor) -> torch.Tensor:  # [B, T, X] → [B, P, 1, X]
            return torch.gather(x, 1, value_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1])).unsqueeze(2)

        hp = at_values(h)
        pre = self.pair_q(hp) + self.pair_k(h).unsqueeze(1)  # [B, P, T, D]
        m = self.config.max_distance
        offset = torch.arange(input_ids.shape[1], device=input_ids.device).view(1, 1, -1) - value_positions.unsqueeze(
            -1
        )
        pre = pre + self.pair_rel(offset.clamp(-m, m) + m)
        if self.config.pair_head != "interaction":
            return scores, self.pair_out(nn.functional.gelu(pre)).squeeze(-1)  # [B, P, T]
        pre = pre + self.pair_fq(at_values(u)) + self.pair_fk(u).unsqueeze(1)
        pre = pre + self.pair_mq(hp) * self.pair_mk(h).unsqueeze(1)
        if att is not None:
            index = value_positions[:, None, :, None].expand(-1, att.shape[1], -1, att.shape[-1])
            out_of = torch.gather(att, 2, index)  # [B, L·H, P, T]: what the value attends to
            into = torch.gather(att.transpose(2, 3), 2, index)  # what attends to the value
            both = torch.cat([out_of, into], dim=1).permute(0, 2, 3, 1)  # [B, P, T, 2·L·H]
            pre = pre + self.pair_att(both)
        z = nn.functional.gelu(pre)
        z = z + nn.functional.gelu(self.pair_hidden(z))
        coupling = self.pair_out(z).squeeze(-1) + self.pair_score(scores.unsqueeze(-1)).squeeze(-1).unsqueeze(1)
        return scores, coupling


def _alibi(distance: int, heads: int) -> torch.Tensor:
    """[2·distance + 1, heads]: ALiBi's linear decay with distance, head h's slope
    2^(−8(h + 1)/heads), as the relative bias's start — near tokens attend more from the
    first step, as an LSTM's do, and training reshapes it."""
    d = torch.arange(-distance, distance + 1).abs().float()
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
    return -d[:, None] * slopes[None, :]


# --- examples -------------------------------------------------------------------------------


def examples_from_records(records: list[dict], tokenizer, program, max_length: int = 128) -> list[PairExample]:
    """Teacher records (`labelling`) as examples: each sentence re-tokenised for its lexemes'
    token positions, each probe kept when it has one coupling per lexeme of `program`'s
    lexing (the lexicon the teacher's lexemes came from) and its value has a token."""
    from heatc.learn.text.lexemes import align, lex_sentence

    out = []
    for r in records:
        enc = tokenizer(r["text"], truncation=True, max_length=max_length, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        if "ids" in r and r["ids"] != ids:
            continue  # tokenised by another tokenizer: not this student's evidence
        special = set(tokenizer.all_special_ids)
        mask = [int(t not in special) for t in ids]
        lx = lex_sentence(program, r["text"])
        lexemes = align(lx, [tuple(o) for o in enc["offset_mapping"]])
        probes = [
            (v, row)
            for v, row in r.get("probes", [])
            if len(row) == len(lexemes) and 0 <= v < len(lexemes) and lexemes[v]
        ]
        labels = r.get("labels")
        if labels is None and not probes:
            continue
        out.append(PairExample(ids, mask, labels, lexemes, probes, r["text"]))
    return out


def _centred_log(row: list[float | None], value: int, lexemes: list[list[int]]) -> tuple[list[float], list[float]]:
    """The probe row's centred log coupling over its valid lexemes, and their weights."""
    valid = [j for j, c in enumerate(row) if c is not None and c > 0 and j != value and lexemes[j]]
    target, weight = [0.0] * len(row), [0.0] * len(row)
    if len(valid) < 2:
        return target, weight
    logs = {j: math.log(row[j]) for j in valid}  # type: ignore[arg-type]
    mean = sum(logs.values()) / len(logs)
    for j in valid:
        target[j], weight[j] = logs[j] - mean, 1.0
    return target, weight


@dataclass
class _Batch:
    ids: torch.Tensor
    attn: torch.Tensor
    token_target: torch.Tensor
    token_weight: torch.Tensor
    positions: torch.Tensor  # [B, P] value token positions
    lexeme_index: torch.Tensor  # [B, L, M] token positions of each lexeme, padded by repeating its first
    pair_target: torch.Tensor  # [B, P, L]
    pair_weight: torch.Tensor  # [B, P, L]


def collate(examples: list[PairExample], max_length: int) -> _Batch:
    b = len(examples)
    t = max(1, max(min(len(e.ids), max_length) for e in examples))
    p = max(1, max(len(e.probes) for e in examples))
    n_lex = max(1, max(len(e.lexemes) for e in examples))
    width = max(1, max((len(x) for e in examples for x in e.lexemes), default=1))
    ids = torch.zeros(b, t, dtype=torch.long)
    attn = torch.zeros(b, t, dtype=torch.long)
    token_target, token_weight = torch.zeros(b, t), torch.zeros(b, t)
    positions = torch.zeros(b, p, dtype=torch.long)
    index = torch.zeros(b, n_lex, width, dtype=torch.long)
    pair_target, pair_weight = torch.zeros(b, p, n_lex), torch.zeros(b, p, n_lex)
    for i, e in enumerate(examples):
        n = min(len(e.ids), max_length)
        ids[i, :n] = torch.tensor(e.ids[:n])
        attn[i, :n] = 1
        if e.labels is not None:
            token_target[i, :n] = torch.tensor(_targets(_TokenLabels(e.ids, e.labels, e.mask))[:n])
            token_weight[i, :n] = torch.tensor(e.mask[:n], dtype=torch.float)
        for j, toks in enumerate(e.lexemes):
            toks = [x for x in toks if x < n]
            if toks:
                index[i, j] = torch.tensor((toks * width)[:width])
        for k, (value, row) in enumerate(e.probes):
            positions[i, k] = e.lexemes[value][0]
            target, weight = _centred_log(row, value, [[x for x in toks if x < n] for toks in e.lexemes])
            pair_target[i, k, : len(row)] = torch.tensor(target)
            pair_weight[i, k, : len(row)] = torch.tensor(weight)
    return _Batch(ids, attn, token_target, token_weight, positions, index, pair_target, pair_weight)


@dataclass
class _TokenLabels:  # what `student._targets` reads
    ids: list[int]
    labels: list[float]
    mask: list[int]


def lexeme_coupling(coupling: torch.Tensor, lexeme_index: torch.Tensor) -> torch.Tensor:
    """[B, P, T] token couplings → [B, P, L]: the largest over each lexeme's tokens."""
    b, p, _ = coupling.shape
    _, n_lex, width = lexeme_index.shape
    flat = lexeme_index.view(b, 1, n_lex * width).expand(b, p, n_lex * width)
    return torch.gather(coupling, 2, flat).view(b, p, n_lex, width).amax(-1)


def _losses(model: nn.Module, batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed squared errors: token (standardised log-sensitivity) and pair (centred log
    coupling, the prediction centred over the same lexemes)."""
    scores, coupling = model(batch.ids, batch.attn, batch.positions)
    token = ((scores - batch.token_target) ** 2 * batch.token_weight).sum()
    pred = lexeme_coupling(coupling, batch.lexeme_index)
    w = batch.pair_weight
    count = w.sum(-1, keepdim=True).clamp_min(1.0)
    centred = pred - (pred * w).sum(-1, keepdim=True) / count
    pair = ((centred - batch.pair_target) ** 2 * w).sum()
    return token, pair


# --- training -------------------------------------------------------------------------------


def train_pair(
    config: PairConfig,
    examples: list[PairExample],
    training: Training,
    *,
    table: torch.Tensor | None = None,
    init: dict | None = None,
    checkpoint: Path | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> PairStudent:
    """Train (or, from `init`, fine-tune) a pair student; resumes from `checkpoint` (saved
    after every epoch). Under torch.distributed each rank takes its share of every global
    batch and the loss is normalised by the global counts, so N ranks compute one gradient."""
    torch.manual_seed(training.seed)
    model = PairStudent(config, table)
    if init is not None:
        model.load_state_dict(init, strict=False)

    def batch_loss(wrapped: nn.Module, batch: list[PairExample], rank: int, world: int) -> torch.Tensor:
        whole = collate(batch, config.max_length)  # the global counts every rank normalises by
        tokens = float(whole.token_weight.sum()) or 1.0
        pairs = float(whole.pair_weight.sum()) or 1.0
        mine = batch[rank::world]
        token, pair = _losses(wrapped, collate(mine or batch[:1], config.max_length))
        if not mine:
            token, pair = token * 0, pair * 0
        # DDP averages gradients over ranks, hence × world: the sum is the global mean.
        return (token / tokens + PAIR_WEIGHT * pair / pairs) * world

    fit(model, examples, batch_loss, training, checkpoint=checkpoint, progress=progress)
    return model.eval()


# --- fidelity -------------------------------------------------------------------------------


def _predict(model: nn.Module, examples: list[PairExample], max_length: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per example: token scores [T] and lexeme couplings [P, L] (log, up to a constant)."""
    out = []
    for b0 in range(0, len(examples), 64):
        chunk = examples[b0 : b0 + 64]
        batch = collate(chunk, max_length)
        with torch.no_grad():
            scores, coupling = model(batch.ids, batch.attn, batch.positions)
            lex = lexeme_coupling(coupling, batch.lexeme_index)
        for i, e in enumerate(chunk):
            n = min(len(e.ids), max_length)
            out.append((scores[i, :n].numpy(), lex[i, : len(e.probes), : len(e.lexemes)].numpy()))
    return out


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    from heatc.learn.students.student import _average_ranks

    if len(a) < 3:
        return None
    ra, rb = _average_ranks(a), _average_ranks(b)
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return None
    return float(((ra - ra.mean()) * (rb - rb.mean())).mean() / (sa * sb))


def pair_fidelity(model: nn.Module, examples: list[PairExample], max_length: int = 128) -> dict:
    """Mean per probe row of the Spearman correlation with the teacher's couplings and of
    the AUC with the row's top 20 % teacher couplings as positives; and the token AUC."""
    rhos, aucs, token = [], [], []
    for e, (scores, lex) in zip(examples, _predict(model, examples, max_length), strict=True):
        if e.labels is not None:
            m = np.asarray(e.mask[: len(scores)], dtype=bool)
            auc = per_sentence_auc(scores[m], np.asarray(e.labels[: len(scores)])[m])
            if auc is not None:
                token.append(auc)
        for k, (value, row) in enumerate(e.probes):
            valid = [j for j, c in enumerate(row) if c is not None and c > 0 and j != value and e.lexemes[j]]
            valid = [j for j in valid if min(e.lexemes[j]) < len(scores)]
            teacher = np.log([row[j] for j in valid]) if valid else np.zeros(0)
            student = lex[k, valid]
            rho = _spearman(student, teacher)
            if rho is not None:
                rhos.append(rho)
            auc = per_sentence_auc(student, teacher) if len(valid) >= 5 else None
            if auc is not None:
                aucs.append(auc)

    def mean(xs: list[float]) -> float | None:
        return round(float(np.mean(xs)), 4) if xs else None

    return {"pair_spearman": mean(rhos), "pair_auc": mean(aucs), "token_auc": mean(token), "probe_rows": len(rhos)}


# --- scoring a corpus -----------------------------------------------------------------------


def student_records(
    model: nn.Module, tokenizer, program, items: list[tuple[str, list[int]]], *, batch_size: int = 64
) -> list[dict]:
    """The student's couplings of the given value lexemes of each sentence with every lexeme,
    as teacher records (`{"text", "probes"}`): per lexeme the largest coupling over its
    tokens, None for the value itself and for lexemes past the truncation."""
    from heatc.learn.text.lexemes import align, lex_sentence

    out = []
    max_length = model.config.max_length
    for b0 in range(0, len(items), batch_size):
        chunk = []
        for text, values in items[b0 : b0 + batch_size]:
            enc = tokenizer(text, truncation=True, max_length=max_length, return_offsets_mapping=True)
            lexemes = align(lex_sentence(program, text), [tuple(o) for o in enc["offset_mapping"]])
            probes = [(v, [None] * len(lexemes)) for v in values if 0 <= v < len(lexemes) and lexemes[v]]
            chunk.append(PairExample(list(enc["input_ids"]), [1] * len(enc["input_ids"]), None, lexemes, probes, text))
        for (text, _), e, (_, lex) in zip(
            items[b0 : b0 + batch_size], chunk, _predict(model, chunk, max_length), strict=True
        ):
            probes = []
            for k, (value, _) in enumerate(e.probes):
                row = [
                    None if j == value or not toks else round(float(math.exp(lex[k, j])), 7)
                    for j, toks in enumerate(e.lexemes)
                ]
                probes.append([value, row])
            out.append({"text": text, "probes": probes})
    return out
