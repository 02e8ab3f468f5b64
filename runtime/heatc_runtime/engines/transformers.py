"""heatc inside `transformers` generation: a `LogitsProcessor` and a `StoppingCriteria`.

    checks = Checks("build/medical", tokenizer, mode="guard")
    out, reports = checks.generate(model, **inputs, max_new_tokens=64)
    for report in reports:
        print(report.verdict, report.rejected, report.delivered)

`Checks` holds the state of one `generate` call: its processor (`checks.processor`) and
stopping criteria (`checks.criteria`) share it, and each step costs one runtime call for the
whole batch (guard: one more, for all the candidates of all the rows together). Use one
`Checks` per `generate` call, or call `checks.reset()` before the next; a `Checks` that sees
the rows of another call (or rows that were reordered) raises instead of mixing them up.

- Backends (`backend=`): `native` where its extension loads and the build has rules.hct (the
  default on the CPU), `wasm` (the portable fallback), `cuda` (the torch ops on the scores'
  device: the default for CUDA scores where `heatc[cuda]` loads; token ids, guard's top-k and
  masks stay on the device and nothing waits for the host in a step).
- The token table is the model tokenizer's (`tokens="model"`, the default: rules read bytes,
  so any build serves any model); `tokens="check"` refuses a build made for another tokenizer.
- The prompt is read once, at the first step (the rules see it only with `see_prompt=True`;
  leading pad tokens of a left-padded batch are skipped).
- A row ends at an EOS token (`eos_token_id`, by default the tokenizer's and the model's);
  what transformers writes after it (pad tokens) is not fed.
- Greedy decoding and sampling both work; guard masks before the sampling warpers
  (temperature, top-k, top-p), which then see only the candidates that passed. Under greedy
  decoding (`generate` knows; pass `greedy=True` to `Checks` when you call `model.generate`
  yourself) guard only masks the refused candidates, instead of confining every row.
- Assisted generation with prompt lookup (`prompt_lookup_num_tokens`): the processor judges
  each draft position on a copy of the sequence, so the text is what plain generation under
  the same checks writes, in fewer model steps.
- `metrics=Metrics(...)` (heatc_runtime.metrics) counts the steps, each row's audit report
  and guard's masks.
- Beam search reorders rows between steps: it is refused (`generate()` checks `num_beams`
  before starting; the processor raises at the first reordered row).

Public surface: `Checks`, `HeatcLogitsProcessor`, `HeatcStoppingCriteria`.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ..backends.checker import Checker
from .core import Driver, GenerationReport
from .device import DeviceDriver
from .masking import guard_scores
from .options import MARKER, RowOptions, choose_backend, marker_ids, open_module
from .tokens import table_for_tokenizer


class Checks:
    """One `generate` call checked by a module: `kwargs()` goes to `model.generate`, or
    `generate(model, ...)` calls it (docs/engines.md).

    Parameters
    ----------
    module : str or Path or Checker
        A build directory, or a loaded checker.
    tokenizer : transformers tokenizer
        The model's: its token table feeds the rules the bytes of each token.
    mode : str
        "observe" (report only), "guard" (mask the candidates that would add a rejection) or
        "stop" (end a row at its first rejection).
    k : int
        Guard's candidates judged per row and step (the top k by score).
    policy : str
        What guard does when no candidate passes: "withhold" (write `marker` and stop the
        row), "allow" or "stop".
    marker : str
        The text written where a row was withheld.
    see_prompt : bool
        Whether the rules read the prompt too.
    on_exhausted : str
        What a row does when guard runs out of candidates: "stop" or "allow".
    eos_token_id : int or list of int, optional
        The ids that end a row (default: the tokenizer's, and the model's at `generate`).
    tokens : str
        "model" (the tokenizer's table) or "check" (refuse a build made for another tokenizer).
    backend : str, optional
        "native", "wasm" or "cuda"; default the fastest that loads.
    greedy : bool, optional
        Whether decoding is greedy (`generate` knows; say so when calling `model.generate` yourself).
    limits : Limits, optional
        Each runtime call's budget.
    metrics : heatc_runtime.metrics.Metrics, optional
        Where the steps, each row's audit report and guard's masks are counted.

    Raises
    ------
    ValueError
        An option out of range, an unknown mode or backend, beam search, or rows that changed
        between steps (the module's own errors, `heatc_runtime.ModuleError`, when it does not load).
    RuntimeError
        Reports asked for before anything was generated, or rows reordered on the device.
    """

    def __init__(
        self,
        module,
        tokenizer,
        *,
        mode: str = "observe",
        k: int = 8,
        policy: str = "withhold",
        marker: str = MARKER,
        see_prompt: bool = False,
        on_exhausted: str = "stop",
        eos_token_id: int | list[int] | None = None,
        tokens: str = "model",
        backend: str | None = None,
        greedy: bool | None = None,
        limits=None,
        metrics=None,
    ):
        self.options = RowOptions(mode, k, policy, marker, on_exhausted, see_prompt)
        self.mode, self.k, self.see_prompt = mode, k, see_prompt
        self.metrics = metrics  # (a heatc_runtime.metrics.Metrics: each row's report and guard's masks go there)
        self.greedy = greedy
        self.table = table_for_tokenizer(tokenizer)
        self._module, self._tokens, self._limits, self._requested = module, tokens, limits, backend
        # the host backend now (its errors surface here); a CUDA one at the first step, if the scores are there
        self.backend = choose_backend(None if backend == "cuda" else backend, module)
        self.checker = open_module(module, self.table, tokens, limits, self.backend)
        self._marker: tuple[int, ...] = ()
        if mode == "guard" and policy == "withhold":
            self._marker = marker_ids(marker, self.table.tokens, tokenizer)
        eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
        self.eos = sorted({int(e) for e in ([] if eos is None else [eos] if isinstance(eos, int) else eos)})
        self.pad = getattr(tokenizer, "pad_token_id", None)
        self.processor = HeatcLogitsProcessor(self)
        self.criteria = HeatcStoppingCriteria(self)
        self._attached = False  # the criteria feeds the tokens: the processor's extra ones are drafts
        self._driver = None
        self.reset()

    def kwargs(self) -> dict:
        """`logits_processor` and `stopping_criteria` for `model.generate`.

        Returns
        -------
        dict
            The two keyword arguments.
        """
        self._attached = True
        return {
            "logits_processor": LogitsProcessorList([self.processor]),
            "stopping_criteria": StoppingCriteriaList([self.criteria]),
        }

    def generate(self, model, **kwargs):
        """`model.generate(**kwargs)` checked from a fresh start. Refuses beam search before
        generating anything.

        Parameters
        ----------
        model : transformers model
            The model to generate with.
        kwargs : dict
            `generate`'s arguments (the processor and criteria are appended to any given).

        Returns
        -------
        tuple
            (what `model.generate` returned, each row's `GenerationReport` in batch order).

        Raises
        ------
        ValueError
            `num_beams` above 1.
        RuntimeError
            The rows changed between steps.
        """
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
        if self.greedy is None:
            sample = kwargs.get("do_sample", getattr(config, "do_sample", False))
            self.greedy = not sample
        self.reset()
        self._attached = True
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
        self._done: np.ndarray = np.zeros(0, bool)
        self._live = np.zeros(0, np.int64)
        self._last = np.zeros(0, np.int64)
        self._reports: dict[int, GenerationReport] = {}
        self._stopped: torch.Tensor | None = None

    # -- the decode loop ----------------------------------------------------------------------

    def _on_device(self, device: torch.device) -> bool:
        """Whether this call runs on the torch ops (backend "cuda"): asked for, or the default
        for scores on a CUDA device where it loads."""
        if self._requested == "cuda":
            return True
        if self._requested is None and device.type == "cuda" and not isinstance(self._module, Checker):
            return choose_backend(None, self._module, str(device)) == "cuda"
        return False

    def _begin(self, input_ids: torch.Tensor, vocab: int, prompt_len: int) -> None:
        rows = input_ids.shape[0]
        d = self._driver
        device = self._on_device(input_ids.device)
        if d is None or d.capacity < rows or d.vocab_size < vocab or device != isinstance(d, DeviceDriver):
            if device:
                if isinstance(self._module, Checker):
                    raise ValueError("the cuda backend runs a build directory: pass its path, not a Checker")
                self.backend = "cuda"
                d = DeviceDriver(self._module, self.table, rows, vocab, input_ids.device, self.metrics)
                self._eos_t = torch.tensor(self.eos or [-1], dtype=torch.int64, device=input_ids.device)
                self._mismatch = torch.zeros((), dtype=torch.bool, device=input_ids.device)
            else:
                d = Driver(self.checker, self.table, rows, vocab, self.metrics)
            self._driver = d
            self._is_eos = np.zeros(d.vocab_size, bool)
        self._is_eos[:] = False
        self._is_eos[[e for e in self.eos if 0 <= e < d.vocab_size]] = True
        self._rows, self._prompt_len, self._fed = rows, prompt_len, prompt_len
        self._done = np.zeros(rows, bool)
        # (every row, in order, as the driver's own array: its feed knows it without comparing)
        self._live = d.every if rows == d.capacity and not device else np.arange(rows, dtype=np.int64)
        self._last = np.zeros(rows, np.int64)
        self._stopped = torch.zeros(rows, dtype=torch.bool, device=input_ids.device)
        prompts = input_ids[:, :prompt_len].numpy(force=True) if self.see_prompt else None
        for row in range(rows):
            prompt = None
            if prompts is not None:
                ids = prompts[row]
                start = 0
                while start < len(ids) and self.pad is not None and ids[start] == self.pad:
                    start += 1  # left padding
                prompt = ids[start:]
            d.start(row, self.options, prompt, self._marker)

    def sync(self, input_ids: torch.Tensor, vocab: int = 0, from_criteria: bool = False) -> None:
        """Feed what `input_ids` holds past what was fed: one runtime call per position.
        (Called by the processor when no criteria is attached, and by the criteria.)

        Parameters
        ----------
        input_ids : torch.Tensor
            The batch's token ids so far, [rows, length].
        vocab : int
            The scores' vocabulary size (0: unknown).
        from_criteria : bool
            Called by the stopping criteria (which sees one token more than the processor).

        Raises
        ------
        RuntimeError
            The rows are not those of this generate call (another call, or reordered rows).
        ValueError
            A CUDA backend asked of a loaded checker (it runs a build directory).
        """
        length = input_ids.shape[1]
        if self._prompt_len < 0:
            self._begin(input_ids, vocab, length - 1 if from_criteria else length)
        fed = self._fed
        if length == fed:
            return
        if isinstance(self._driver, DeviceDriver):
            self._sync_device(input_ids, length, fed)
            return
        if input_ids.shape[0] != self._rows or length < fed:
            raise RuntimeError(
                f"these Checks were started by a generate call with {self._rows} rows at position {fed}; "
                f"now given {input_ids.shape[0]} rows of {length} tokens: use one Checks per generate call, "
                "or call reset() first"
            )
        # (numpy slices of the ids: a torch slice costs microseconds, a decoding step's share)
        ids = input_ids.numpy() if input_ids.device.type == "cpu" else input_ids[:, fed - 1 :].cpu().numpy()
        block = ids[:, fed - 1 : length] if ids.shape[1] == length else ids
        live = self._live
        whole = len(live) == self._rows
        if fed > self._prompt_len and (
            block[:, 0].tobytes() != self._last.tobytes() if whole else not (block[live, 0] == self._last[live]).all()
        ):
            raise RuntimeError(
                "the rows of the batch changed between steps (reordered by beam search, or another generate call "
                "with these Checks): heatc follows rows in place; use num_beams=1, and one Checks per generate call"
            )
        driver = self._driver
        for pos in range(1, block.shape[1]):
            rows = self._live
            if not len(rows):
                break
            whole = len(rows) == self._rows
            column = block[:, pos] if whole else block[rows, pos]
            stopped = driver.feed(rows, column)
            if whole:
                self._last = np.ascontiguousarray(column, dtype=np.int64)
            else:
                self._last[rows] = column
            eos = self._is_eos[column]
            if stopped or eos.any():
                if stopped:
                    self._stopped[torch.tensor(stopped)] = True
                for row in np.union1d(rows[eos], stopped).astype(np.int64).tolist():
                    self._end(row)
        self._fed = length

    def _sync_device(self, input_ids: torch.Tensor, length: int, fed: int) -> None:
        """The device path: every position fed on the device; nothing read back (rows that
        changed between steps are noticed there, and reported by `reports()`)."""
        if input_ids.shape[0] != self._rows or length < fed:
            raise RuntimeError(
                f"these Checks were started by a generate call with {self._rows} rows at position {fed}; "
                f"now given {input_ids.shape[0]} rows of {length} tokens: use one Checks per generate call, "
                "or call reset() first"
            )
        d = self._driver
        if fed > self._prompt_len:
            self._mismatch |= (input_ids[:, fed - 1] != self._last_t).any()
        for pos in range(fed, length):
            d.feed(input_ids[:, pos], None, self._eos_t)
        self._last_t = input_ids[:, length - 1]
        self._stopped = d.stopped
        self._fed = length

    def _end(self, row: int) -> None:
        self._done[row] = True
        self._live = np.flatnonzero(~self._done)
        self._reports[row] = self._driver.end(row)

    def reports(self, sequences=None) -> list[GenerationReport]:
        """Each row's report, in batch order, once generation is over. Pass what `generate`
        returned: its last token is fed here (the loop ends before showing it to the processor).

        Parameters
        ----------
        sequences : torch.Tensor or generate output, optional
            What `model.generate` returned.

        Returns
        -------
        list of GenerationReport
            Each row's report.

        Raises
        ------
        RuntimeError
            Nothing was generated with these Checks, or the rows changed between steps.
        """
        if self._prompt_len < 0:
            raise RuntimeError("nothing was generated with these Checks")
        if sequences is not None:
            self.sync(getattr(sequences, "sequences", sequences))
        if isinstance(self._driver, DeviceDriver) and bool(self._mismatch):
            raise RuntimeError(
                "the rows of the batch changed between steps (reordered by beam search, or another generate call "
                "with these Checks): heatc follows rows in place; use num_beams=1, and one Checks per generate call"
            )
        for row in range(self._rows):
            if not self._done[row]:
                self._end(row)
        return [self._reports[row] for row in range(self._rows)]

    def _guard(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # (uniform_passes: every score equal — transformers' prompt lookup asks so, with logits
        # of ones, whether a draft token is forbidden. Guard judges what a model prefers, and
        # judges every draft position when the model verifies it: nothing is forbidden (or
        # decided) there. Not on a device: prompt lookup runs on the host backends.)
        if isinstance(self._driver, DeviceDriver):
            if input_ids.shape[1] > self._fed:
                raise ValueError("assisted generation (draft tokens) runs on the host backends: backend='native'")
            return self._driver.guard(scores, self._eos_t, bool(self.greedy))
        rows = self._live
        if not len(rows):
            return scores
        length = input_ids.shape[1]
        eos = [self.eos] * len(rows)
        index = None if len(rows) == self._rows else rows
        if length > self._fed:  # draft positions (assisted generation): judged on copies
            drafts = input_ids[np.array(rows), self._fed : length].numpy(force=True)  # (a copy: `every` is read-only)
            return guard_scores(self._driver, scores, rows, index, eos, bool(self.greedy), list(drafts), True)
        return guard_scores(self._driver, scores, rows, index, eos, bool(self.greedy), uniform_passes=True)


class HeatcLogitsProcessor(LogitsProcessor):
    """Feeds the tokens of the last step (when no criteria is attached); in guard mode, masks
    the candidates that would add a rejection."""

    def __init__(self, checks: Checks):
        self.checks = checks

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        c = self.checks
        if c._prompt_len < 0 or not c._attached or input_ids.shape[1] < c._fed or input_ids.shape[0] != c._rows:
            c.sync(input_ids, scores.shape[-1])  # (attached: the criteria feeds; this only starts, or refuses)
        if c.mode != "guard":
            return scores
        return c._guard(input_ids, scores)


class HeatcStoppingCriteria(StoppingCriteria):
    """Feeds each new token; in stop mode, ends a row at its first snapshot with a new rejection."""

    def __init__(self, checks: Checks):
        self.checks = checks

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        c = self.checks
        vocab = scores.shape[-1] if isinstance(scores, torch.Tensor) else 0
        c.sync(input_ids, vocab, from_criteria=True)
        return c._stopped
