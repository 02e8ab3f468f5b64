"""heatc inside `transformers` generation: a `LogitsProcessor` and a `StoppingCriteria`.

    checks = Checks("build/medical", tokenizer, mode="guard")
    out = model.generate(**inputs, max_new_tokens=64, **checks.kwargs())
    for report in checks.reports(out):
        print(report.verdict, report.rejected, report.text)

`Checks` holds the state of one `generate` call: its processor (`checks.processor`) and
stopping criteria (`checks.criteria`) share it, and each step costs one runtime call for the
whole batch (guard: a few more, for all the candidates of all the rows together). Use one
`Checks` per `generate` call, or call `checks.reset()` before the next; a `Checks` that sees
the rows of another call (or rows that were reordered) raises instead of mixing them up.

- The prompt is read once, at the first step (the rules see it only with `see_prompt=True`;
  leading pad tokens of a left-padded batch are skipped).
- A row ends at an EOS token (`eos_token_id`, by default the tokenizer's and the model's);
  what transformers writes after it (pad tokens) is not fed.
- Greedy decoding and sampling both work; guard masks before the sampling warpers
  (temperature, top-k, top-p), which then see only the candidates that passed.
- Beam search reorders rows between steps: it is refused (`generate()` checks `num_beams`
  before starting; the processor raises at the first reordered row).

Public surface: `Checks`, `HeatcLogitsProcessor`, `HeatcStoppingCriteria`.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from .core import Driver, GenerationReport, check_options, open_module
from .masking import guard_scores
from .tokens import table_for_tokenizer


class Checks:
    """One `generate` call checked by a module: `kwargs()` goes to `model.generate`."""

    def __init__(
        self,
        module,
        tokenizer,
        *,
        mode: str = "observe",
        k: int = 8,
        see_prompt: bool = False,
        on_exhausted: str = "stop",
        eos_token_id: int | list[int] | None = None,
        tokens: str = "check",
        limits=None,
    ):
        check_options(mode, k, on_exhausted)
        self.mode, self.k, self.see_prompt, self.on_exhausted = mode, k, see_prompt, on_exhausted
        self.table = table_for_tokenizer(tokenizer)
        self.checker = open_module(module, self.table, tokens, limits)
        eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self.eos = sorted({int(e) for e in ([] if eos is None else [eos] if isinstance(eos, int) else eos)})
        self.pad = getattr(tokenizer, "pad_token_id", None)
        self.processor = HeatcLogitsProcessor(self)
        self.criteria = HeatcStoppingCriteria(self)
        self._driver: Driver | None = None
        self.reset()

    def kwargs(self) -> dict:
        """`logits_processor` and `stopping_criteria` for `model.generate`."""
        return {
            "logits_processor": LogitsProcessorList([self.processor]),
            "stopping_criteria": StoppingCriteriaList([self.criteria]),
        }

    def generate(self, model, **kwargs):
        """`model.generate(**kwargs)` checked from a fresh start: (output, reports).
        Refuses beam search before generating anything."""
        config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        beams = kwargs.get("num_beams") or getattr(config, "num_beams", 1) or 1
        if beams > 1:
            raise ValueError(
                f"num_beams={beams}: beam search reorders the batch between steps, which heatc's transformers "
                "adapter does not follow; use greedy decoding or sampling (num_beams=1)"
            )
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if eos is not None:
            self.eos = sorted(set(self.eos) | set([eos] if isinstance(eos, int) else eos))
        self.reset()
        kwargs["logits_processor"] = LogitsProcessorList([*(kwargs.get("logits_processor") or []), self.processor])
        kwargs["stopping_criteria"] = StoppingCriteriaList([*(kwargs.get("stopping_criteria") or []), self.criteria])
        out = model.generate(**kwargs)
        return out, self.reports(out)

    def reset(self) -> None:
        """Forget the last `generate` call (its reports too): ready for the next."""
        if self._driver is not None:
            for row in range(self._driver.capacity):
                if self._driver.live(row):
                    self._driver.end(row)
        self._rows = 0
        self._prompt_len = -1  # not started
        self._fed = 0  # positions of input_ids fed so far (prompt included)
        self._history = np.zeros((0, 0), np.int64)
        self._done: np.ndarray = np.zeros(0, bool)
        self._reports: dict[int, GenerationReport] = {}
        self._stopped = np.zeros(0, bool)

    # -- the decode loop ----------------------------------------------------------------------

    def _begin(self, input_ids: torch.Tensor, vocab: int, prompt_len: int) -> None:
        rows = input_ids.shape[0]
        if self._driver is None or self._driver.capacity < rows or self._driver.vocab_size < vocab:
            self._driver = Driver(self.checker, self.table, rows, vocab)
        self._rows, self._prompt_len, self._fed = rows, prompt_len, prompt_len
        self._done = np.zeros(rows, bool)
        self._stopped = np.zeros(rows, bool)
        self._history = np.zeros((rows, 64), np.int64)
        prompts = input_ids[:, :prompt_len].cpu().numpy() if self.see_prompt else None
        for row in range(rows):
            prompt = None
            if prompts is not None:
                ids = prompts[row]
                start = 0
                while start < len(ids) and self.pad is not None and ids[start] == self.pad:
                    start += 1  # left padding
                prompt = ids[start:]
            self._driver.start(row, self.mode, self.k, self.on_exhausted, prompt, self.see_prompt)

    def sync(self, input_ids: torch.Tensor, vocab: int = 0, from_criteria: bool = False) -> None:
        """Feed what `input_ids` holds past what was fed: one runtime call per position."""
        length = input_ids.shape[1]
        if self._prompt_len < 0:
            self._begin(input_ids, vocab, length - 1 if from_criteria else length)
        if input_ids.shape[0] != self._rows or length < self._fed:
            raise RuntimeError(
                f"these Checks were started by a generate call with {self._rows} rows at position {self._fed}; "
                f"now given {input_ids.shape[0]} rows of {length} tokens: use one Checks per generate call, "
                "or call reset() first"
            )
        if length == self._fed:
            return
        start, gen = self._prompt_len, self._fed - self._prompt_len
        ids = input_ids[:, start:length].cpu().numpy()
        live = ~self._done
        if gen and not np.array_equal(ids[live, :gen], self._history[live, :gen]):
            raise RuntimeError(
                "the rows of the batch changed between steps (reordered by beam search, or another generate call "
                "with these Checks): heatc follows rows in place; use num_beams=1, and one Checks per generate call"
            )
        if length - start > self._history.shape[1]:
            grown = np.zeros((self._rows, 2 * (length - start)), np.int64)
            grown[:, :gen] = self._history[:, :gen]
            self._history = grown
        driver = self._driver
        for pos in range(gen, length - start):
            rows = np.flatnonzero(~self._done)
            if not len(rows):
                break
            column = ids[rows, pos]
            self._history[rows, pos] = column
            for row in driver.feed(rows, column):
                self._stopped[row] = True
            for row, token in zip(rows.tolist(), column.tolist(), strict=True):
                if token in self.eos or self._stopped[row]:
                    self._end(row)
        self._fed = length

    def _end(self, row: int) -> None:
        self._done[row] = True
        self._reports[row] = self._driver.end(row)

    def reports(self, sequences=None) -> list[GenerationReport]:
        """Each row's report, in batch order, once generation is over. Pass what `generate`
        returned: its last token is fed here (the loop ends before showing it to the processor)."""
        if self._prompt_len < 0:
            raise RuntimeError("nothing was generated with these Checks")
        if sequences is not None:
            self.sync(getattr(sequences, "sequences", sequences))
        for row in range(self._rows):
            if not self._done[row]:
                self._end(row)
        return [self._reports[row] for row in range(self._rows)]


class HeatcLogitsProcessor(LogitsProcessor):
    """Feeds the tokens of the last step; in guard mode, masks the candidates that would add a rejection."""

    def __init__(self, checks: Checks):
        self.checks = checks

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        c = self.checks
        c.sync(input_ids, scores.shape[-1])
        if c.mode != "guard":
            return scores
        rows = np.flatnonzero(~c._done)
        if not len(rows):
            return scores
        eos = [c.eos] * len(rows)
        if len(rows) == c._rows:
            return guard_scores(c._driver, scores, rows, None, eos)
        return guard_scores(c._driver, scores.clone(), rows, rows.tolist(), eos)


class HeatcStoppingCriteria(StoppingCriteria):
    """Feeds each new token; in stop mode, ends a row at its first snapshot with a new rejection."""

    def __init__(self, checks: Checks):
        self.checks = checks

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        c = self.checks
        vocab = scores.shape[-1] if isinstance(scores, torch.Tensor) else 0
        c.sync(input_ids, vocab, from_criteria=True)
        return torch.from_numpy(c._stopped.copy()).to(input_ids.device)
