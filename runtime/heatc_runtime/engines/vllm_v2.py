"""heatc inside vLLM's model runner V2 (`vllm.v1.worker.gpu.sample.logits_processor`): requests
keyed by slot, one `apply(logits, ctx)` a step with the batch's layout.

`heatc_runtime.engines.vllm.HeatcLogitsProcessor` is the class either runner loads (the
`vllm.logits_processors` entry point, `--logits-processors`, `LLM(logits_processors=[…])`):
built by the V2 runner — `(vllm_config, req_states)` — it hands everything to `RunnerV2`.
Requests choose their checks in `extra_args` as with the V1 runner; options, modules, backends,
reports (`take_report`) and metrics are the same.

How the V2 runner is followed (its interface's documented contract): `add_request(slot,
params)` starts a request in a slot (a slot's previous request, if still here, is ended then);
each step row r of the logits belongs to slot `ctx.expanded_idx_mapping[r]`, was fed
`ctx.input_ids[r]` at position `ctx.pos[r]` — the token the last step sampled, once the prompt
is behind: fed to the rules when its position is the slot's next one (a request resumed after
preemption is fed again from where it stopped). The prompt (`heatc_prompt`) is read once, from
`req_states.all_token_ids`. Speculative decoding (a row per draft token) is not followed here: a
request asking for heatc under it is ended at its first step, its report says why (the V1
runner, `VLLM_USE_V2_MODEL_RUNNER=0`, checks drafts as plain tokens).

Public surface: `RunnerV2`.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..errors import ModuleError, ModuleTrap
from .device import DeviceDriver
from .masking import force_eos, guard_scores

log = logging.getLogger("heatc.vllm")


class _Slot:
    __slots__ = ("driver", "eos", "error", "greedy", "key", "next", "opts", "prompt_read", "row")

    def __init__(self, opts, driver, eos: list[int], greedy: bool, key):
        self.opts, self.driver, self.eos, self.greedy, self.key = opts, driver, eos, greedy, key
        self.next = -1  # the next position to feed (-1: not known yet)
        self.prompt_read = False
        self.error: str | None = None


class RunnerV2:
    """The V2 runner's side of `HeatcLogitsProcessor` (the V1 side's drivers, options and
    reports: `host` is that processor, whose `_driver`, `_marker`, `_keep` it uses)."""

    def __init__(self, host, vllm_config, req_states):
        self.host = host
        self.req_states = req_states
        self.speculative = getattr(vllm_config, "speculative_config", None) is not None
        self.slots: dict[int, _Slot] = {}
        self._stopping: set[int] = set()  # host drivers: slots stop mode ended (an end-of-sequence token next)

    def add_request(self, slot: int, params) -> bool:
        from .requests import request_options

        self._end(slot)
        try:
            opts = request_options(params.extra_args)
        except ValueError:
            return False  # (validate_params refused it already)
        if opts is None:
            return False
        eos = sorted(params.all_stop_token_ids) if not params.ignore_eos else []
        greedy = params.temperature < 1e-5
        if self.speculative:
            s = self.slots[slot] = _Slot(opts, None, eos, greedy, None)
            s.error = ("speculative decoding under vLLM's model runner V2 is not followed by heatc: run the V1 runner "
                       "(VLLM_USE_V2_MODEL_RUNNER=0) or no speculative decoding")  # fmt: skip
            return True
        try:
            driver, key, row = self.host._driver(opts, row=slot)
            marker = self.host._marker(opts.row)
        except (ModuleError, ValueError, OSError) as e:
            s = self.slots[slot] = _Slot(opts, None, eos, greedy, None)
            s.error = str(e)
            return True
        driver.start(row, opts.row, None, marker)
        self.slots[slot] = _Slot(opts, driver, eos, greedy, key)
        return True

    def _end(self, slot: int) -> None:
        from .requests import keep

        s = self.slots.pop(slot, None)
        self._stopping.discard(slot)
        if s is None:
            return
        if s.driver is None:
            from .core import GenerationReport

            keep(s.opts.key, GenerationReport(s.opts.row.mode, b"", 0, [], [], {}, error=s.error))
            return
        if s.driver.live(slot):
            keep(s.opts.key, s.driver.end(slot, s.error))

    def end_key(self, key: str) -> None:
        for slot, s in list(self.slots.items()):
            if s.opts.key == str(key):
                self._end(slot)

    def apply(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        if not self.slots:
            return logits
        if logits.shape[0] != len(ctx.idx_mapping_np):
            return self._refuse_drafts(logits, ctx)
        slots = ctx.idx_mapping_np.astype(np.int64)
        ours = np.array([int(x) in self.slots for x in slots.tolist()], bool)
        if not ours.any():
            return logits
        self._read_prompts(slots[ours])
        ids = ctx.input_ids.to("cpu", non_blocking=False).numpy().astype(np.int64)
        pos = ctx.pos.to("cpu", non_blocking=False).numpy().astype(np.int64)
        prompt = self.req_states.prompt_len.np[slots].astype(np.int64)
        by_driver: dict[int, list[int]] = {}
        for r in np.flatnonzero(ours).tolist():
            s = self.slots[int(slots[r])]
            if s.driver is None or s.error is not None:
                if s.eos:
                    force_eos(logits, r, s.eos)
                continue
            if s.next < 0:
                s.next = int(prompt[r])
            if pos[r] >= prompt[r] and pos[r] == s.next:
                by_driver.setdefault(id(s.driver), []).append(r)
                s.next += 1
        for rows in by_driver.values():
            self._feed(slots, ids, rows)
        self._guard(logits, slots, ours)
        return logits

    def _feed(self, slots: np.ndarray, ids: np.ndarray, rows: list[int]) -> None:
        s0 = self.slots[int(slots[rows[0]])]
        d = s0.driver
        at, tokens = slots[rows], ids[rows]
        try:
            if isinstance(d, DeviceDriver):
                full = np.full(d.capacity, d.null_id, np.int64)
                full[at] = tokens
                mask = np.zeros(d.capacity, bool)
                mask[at] = True
                d.feed(torch.from_numpy(full).to(d.device), None, None, torch.from_numpy(mask).to(d.device))
                return
            self._stopping.update(int(x) for x in d.feed(at, tokens))  # (stop mode: end-of-sequence next)
        except (ModuleTrap, ValueError) as e:
            log.error("heatc: %s", e)
            for slot in at.tolist():
                self.slots[int(slot)].error = str(e)

    def _guard(self, logits: torch.Tensor, slots: np.ndarray, ours: np.ndarray) -> None:
        groups: dict[int, list[int]] = {}
        for r in np.flatnonzero(ours).tolist():
            s = self.slots[int(slots[r])]
            if s.driver is not None and s.error is None:
                groups.setdefault(id(s.driver), []).append(r)
        for rows in groups.values():
            s0 = self.slots[int(slots[rows[0]])]
            d = s0.driver
            idx = np.array(rows, np.int64)
            eos = [self.slots[int(slots[r])].eos for r in rows]
            greedy = all(self.slots[int(slots[r])].greedy for r in rows)
            guarded = np.array([self.slots[int(slots[r])].opts.row.mode == "guard" for r in rows], bool)
            if isinstance(d, DeviceDriver):
                dev = logits.device
                at = torch.from_numpy(idx).to(dev)
                sub = logits.index_select(0, at)
                ends = torch.tensor(sorted({e for row in eos for e in row}) or [-1], dtype=torch.int64, device=dev)
                slot_t = torch.from_numpy(slots[idx]).to(dev)
                if guarded.any():
                    d.guard(sub, ends, greedy, slot_t)
                d.force_stopped(sub, ends, slot_t)
                logits.index_copy_(0, at, sub)
                continue
            for r in rows:
                if int(slots[r]) in self._stopping and self.slots[int(slots[r])].eos:
                    force_eos(logits, r, self.slots[int(slots[r])].eos)
            if guarded.any():
                g = idx[guarded]
                guard_scores(d, logits, slots[g], g, [eos[i] for i in np.flatnonzero(guarded).tolist()], greedy)

    def _read_prompts(self, slots: np.ndarray) -> None:
        """The prompts the rules read (heatc_prompt): once per request, from the runner's tokens."""
        for slot in slots.tolist():
            s = self.slots.get(int(slot))
            if s is None or s.prompt_read or s.driver is None:
                continue
            s.prompt_read = True
            if not s.opts.row.see_prompt:
                continue
            n = int(self.req_states.prompt_len.np[slot])
            tokens = self.req_states.all_token_ids.gpu[slot, :n].cpu().numpy().astype(np.int64)
            s.driver.start(int(slot), s.opts.row, tokens, self.host._marker(s.opts.row))

    def _refuse_drafts(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        for r, slot in enumerate(ctx.expanded_idx_mapping.to("cpu").numpy().tolist()):
            s = self.slots.get(int(slot))
            if s is not None and s.eos:
                s.error = s.error or "speculative decoding under the V2 runner is not followed by heatc"
                force_eos(logits, r, s.eos)
        return logits
