"""heatc inside vLLM (V1 engine): a custom logits processor, chosen per request.

Register it by class (`LLM(..., logits_processors=[HeatcLogitsProcessor])`), by name
(`vllm serve MODEL --logits-processors heatc_runtime.engines.vllm:HeatcLogitsProcessor`), or
let vLLM find it through the `vllm.logits_processors` entry point that heatc installs. Each
request chooses its checks in `SamplingParams.extra_args` (`vllm_xargs` in the OpenAI API):

    heatc_module   a name from $HEATC_MODULES ("name=path,..."), or (in-process only) a build directory
    heatc_mode     observe (default), stop or guard
    heatc_k        guard's candidates per step (default 8, at most 64)
    heatc_policy   withhold (default), stop or steer: what guard does when the model's first choice fails
    heatc_marker   what replaces a withheld value (default "[unverified]")
    heatc_prompt   1: the rules read the prompt first (default 0)
    heatc_tokens   "model" (default): the model's token table; "check": refuse a build made for another tokenizer
    heatc_backend  native, wasm or cuda (default: cuda for CUDA logits where it loads, else native, else wasm)
    heatc_on_exhausted  stop (default) or pass: what guard does when no candidate passes
    heatc_id       a key for the request's report (`take_report(key)`, in the engine's process)

Serving: a server accepts modules by name only — the operator lists them in
`HEATC_MODULES="medical=/srv/builds/medical,…"`; a client that names a path is refused (an
in-process `LLM` may name a build directory). At most `HEATC_MODULE_CACHE` modules (default
8) stay loaded per process, the least recently used going first.

Metrics (docs/metrics.md): `use_metrics(Metrics(...))` in the engine's process, or
`HEATC_METRICS=1` in its environment (a `Metrics()` on prometheus_client's global registry,
made when the first request is checked: what a worker process needs), and every request
checked there reports into it — tokens, snapshots, step latency, one audit report per
request, guard's masks.

A request without `heatc_module` is not touched. A request whose options are wrong — an
unknown mode, a module that does not exist or does not load, one built for another
tokenizer with `heatc_tokens: check` — is refused by `validate_params` with the reason: that
request fails, the engine keeps serving the others.

How vLLM's persistent batch is followed (measured on its CPU build): a request added or
moved onto index i replaces whatever was there (`removed` is not always reported first);
`output_ids` of an added request is the engine's live list, read at every step; the scores
are float32 whatever the model's dtype. Stop mode, guard's stop policy and an exhausted guard
end a request by forcing an end-of-sequence token (a request with `ignore_eos` cannot be
ended this way: its report still says where it would have stopped).

The same class serves vLLM's model runner V2 (engines/vllm_v2.py: requests by slot), so the
one entry point works whichever runner vLLM chose.

Public surface: `HeatcLogitsProcessor`, `take_report(key)`, and (from engines/requests.py, where
a request's options, the modules, metrics and reports are kept) `request_options(extra_args)`,
`use_metrics(metrics)`.
"""

from __future__ import annotations

import logging
import threading
import weakref

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from ..errors import ModuleError, ModuleTrap
from .core import Driver, GenerationReport
from .device import DeviceDriver
from .masking import force_eos, guard_scores
from .options import RowOptions, marker_ids, open_module
from .requests import Options, keep, load_module, metrics, pop_report, request_options, set_model_table, use_metrics

__all__ = ["HeatcLogitsProcessor", "request_options", "take_report", "use_metrics"]
from .tokens import TokenizerError, TokenTable, table_for_tokenizer

log = logging.getLogger("heatc.vllm")

_LOCK = threading.Lock()  # (the processors made in this process)
_INSTANCES: weakref.WeakSet = weakref.WeakSet()
_GREEDY_BELOW = 1e-5  # vLLM samples greedily below this temperature (vllm.sampling_params._SAMPLING_EPS)


def take_report(key: str) -> GenerationReport | None:
    """The report of the request whose `heatc_id` was `key` (None if there is none), once:
    a request still in the engine's batch is ended here. In the engine's process only (an
    in-process `LLM`, or VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    for processor in list(_INSTANCES):
        processor._end_key(key)
    return pop_report(key)


class _Request:
    __slots__ = ("driver", "eos", "fed", "force_eos", "greedy", "opts", "output", "slot")

    def __init__(self, opts: Options, driver, slot: int, output: list[int], eos: list[int], greedy: bool):
        self.opts, self.driver, self.slot, self.output, self.eos = opts, driver, slot, output, eos
        self.greedy = greedy
        self.fed = 0
        self.force_eos = False


class _Group:
    """The requests of one driver, as arrays for a step (rebuilt when the batch changes)."""

    __slots__ = ("all_indices", "driver", "eos", "greedy", "guarded", "indices", "ordered", "reqs", "slots", "top")

    def __init__(self, driver, members: list[tuple[int, _Request]]):
        self.driver = driver
        self.reqs = [r for _, r in members]
        self.slots = np.array([r.slot for r in self.reqs], np.int64)
        self.all_indices = np.array([i for i, _ in members], np.int64)
        guard = [(i, r) for i, r in members if r.opts.row.mode == "guard"]
        self.guarded = np.array([r.slot for _, r in guard], np.int64)
        self.indices = np.array([i for i, _ in guard], np.int64)
        self.eos = [r.eos for _, r in guard]
        self.greedy = all(r.greedy for _, r in guard)
        # the guard rows are the logits' first rows, in order (the scores are then read whole)
        self.ordered = bool((self.indices == np.arange(len(self.indices))).all())
        self.top = int(self.indices.max(initial=-1))


try:  # vLLM's model runner V2 has a logits-processor interface of its own (engines/vllm_v2.py)
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as _RunnerV2Processor

    _BASES: tuple[type, ...] = (LogitsProcessor, _RunnerV2Processor)
except ImportError:  # (an older vLLM)
    _BASES = (LogitsProcessor,)


class HeatcLogitsProcessor(*_BASES):
    """vLLM logits processor running heatc modules chosen per request: the V1 runner's
    interface (`update_state`, `apply(logits)`) and the model runner V2's (`add_request`,
    `apply(logits, ctx)`), so that one entry point serves both."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        opts = request_options(sampling_params.extra_args)
        if opts is not None:
            load_module(opts)

    def __init__(self, vllm_config, *args):
        self._v2 = None
        if len(args) == 1:  # the model runner V2: (vllm_config, req_states)
            from .vllm_v2 import RunnerV2

            (req_states,) = args
            self._setup(vllm_config, req_states.device, int(req_states.max_num_reqs))
            self._v2 = RunnerV2(self, vllm_config, req_states)
            return
        device, _is_pin_memory = args
        self._setup(vllm_config, device, int(vllm_config.scheduler_config.max_num_seqs))

    def add_request(self, req_idx: int, sampling_params) -> bool:
        return self._v2.add_request(req_idx, sampling_params)

    def apply_staged_writes(self) -> None:
        """(the prompts are read at the first step that needs them)"""

    def _setup(self, vllm_config, device, capacity: int) -> None:
        self.device = device
        # Registered twice for one engine (the entry point and by name or class), the second
        # instance stays idle: one set of checks per request.
        with _LOCK:
            self._idle = any(p._config is vllm_config and not p._idle for p in _INSTANCES)
        self._config = vllm_config
        self._live: dict[int, _Request] = {}
        self._groups: list[_Group] | None = None
        _INSTANCES.add(self)
        model = vllm_config.model_config
        self.vocab_size = int(model.get_vocab_size())
        self.capacity = capacity
        self._model_config = model
        self._table: TokenTable | None = None
        self._tokenizer = None
        self._markers: dict[str, tuple[int, ...]] = {}
        self._drivers: dict[tuple[str, str, str], Driver] = {}
        self._free: dict[tuple[str, str, str], list[int]] = {}
        if self._idle:
            return
        try:
            self._table = self._model_table()
            set_model_table(self._table)
        except (TokenizerError, OSError, ValueError) as e:  # checked again when a request needs it
            log.warning("heatc: no token table for the model's tokenizer yet: %s", e)

    def _model_table(self) -> TokenTable:
        if self._table is None:
            from vllm.tokenizers.registry import cached_tokenizer_from_config

            tokenizer = cached_tokenizer_from_config(self._model_config)
            if tokenizer is None:
                raise TokenizerError("the engine was started without a tokenizer (skip_tokenizer_init)")
            self._tokenizer = tokenizer
            self._table = table_for_tokenizer(tokenizer)
        return self._table

    def _marker(self, row: RowOptions) -> tuple[int, ...]:
        if row.mode != "guard" or row.policy != "withhold":
            return ()
        ids = self._markers.get(row.marker)
        if ids is None:
            table = self._model_table()
            ids = self._markers[row.marker] = marker_ids(row.marker, table.tokens, self._tokenizer)
        return ids

    def is_argmax_invariant(self) -> bool:
        return False  # stop and guard change what greedy decoding picks

    # -- the persistent batch -------------------------------------------------------------

    def _driver(self, opts: Options, row: int | None = None):
        """The driver of the request's module, tokens and backend, and a free row of it (`row`:
        that row, the V2 runner's slot)."""
        base, backend = load_module(opts, str(self.device))
        key = (opts.module, opts.tokens, backend)
        driver = self._drivers.get(key)
        if driver is None:
            checker = open_module(base.clone(), self._model_table(), opts.tokens)
            if backend == "cuda":
                from .device import DeviceDriver

                driver = DeviceDriver(opts.module, self._model_table(), self.capacity, self.vocab_size, self.device,
                                      metrics())  # fmt: skip
            else:
                driver = Driver(checker, self._model_table(), self.capacity, self.vocab_size, metrics())
            self._drivers[key] = driver
            self._free[key] = list(range(self.capacity - 1, -1, -1))
        if row is not None:
            return driver, key, row
        return driver, key, self._free[key].pop()

    def _add(self, index: int, params, prompt: list[int] | None, output: list[int]) -> None:
        try:
            opts = request_options(params.extra_args)
        except ValueError:
            return  # (validate_params refused it already)
        if opts is None:
            return
        eos = sorted(params.all_stop_token_ids) if not params.ignore_eos else []
        greedy = params.temperature < _GREEDY_BELOW
        try:
            driver, _, slot = self._driver(opts)
            marker = self._marker(opts.row)
        except (ModuleError, ValueError, OSError) as e:
            # Refused here, not by validate_params (which ran in another process, or before the
            # module changed): the request is ended at its first step, its report says why.
            log.error("heatc: request at index %d cannot be checked, ending it: %s", index, e)
            req = _Request(opts, None, -1, output, eos, greedy)
            req.force_eos = True
            self._live[index] = req
            keep(opts.key, GenerationReport(opts.row.mode, b"", 0, [], [], {}, error=str(e)))
            return
        req = _Request(opts, driver, slot, output, eos, greedy)
        driver.start(slot, opts.row, prompt, marker)
        self._live[index] = req

    def _release(self, index: int) -> None:
        req = self._live.pop(index, None)
        if req is not None:
            self._sync_one(req)
            self._finish(req)

    def _finish(self, req: _Request, error: str | None = None) -> None:
        if req.driver is not None and req.driver.live(req.slot):
            report = req.driver.end(req.slot, error)
            key = next(k for k, d in self._drivers.items() if d is req.driver)
            self._free[key].append(req.slot)
            keep(req.opts.key, report)

    def _end_key(self, key: str) -> None:
        if self._v2 is not None:
            self._v2.end_key(key)
            return
        for index, req in list(self._live.items()):
            if req.opts.key == str(key):
                self._sync_one(req)
                self._finish(req)
                del self._live[index]
                self._groups = None

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if self._idle:
            return
        if batch_update is not None:
            self._groups = None
            for index in batch_update.removed:
                self._release(index)
            for index, params, prompt, output in batch_update.added:
                self._release(index)  # an added request replaces what was at its index
                self._add(index, params, prompt, output)
            for a, b, direction in batch_update.moved:
                if direction == MoveDirectionality.SWAP:
                    ra, rb = self._live.pop(a, None), self._live.pop(b, None)
                    if ra is not None:
                        self._live[b] = ra
                    if rb is not None:
                        self._live[a] = rb
                else:
                    self._release(b)
                    moved = self._live.pop(a, None)
                    if moved is not None:
                        self._live[b] = moved
        if self._live:
            self._step()

    def _grouped(self) -> list[_Group]:
        if self._groups is None:
            by: dict[int, list[tuple[int, _Request]]] = {}
            for index, req in self._live.items():
                if req.driver is not None:
                    by.setdefault(id(req.driver), []).append((index, req))
            self._groups = [_Group(m[0][1].driver, m) for m in by.values()]
        return self._groups

    def _step(self) -> None:
        """Feed each request the token its live output list gained: one runtime call per
        module (more only when a request gained several tokens, or when one catches up)."""
        for g in self._grouped():
            reqs = g.reqs
            behind = [len(r.output) - r.fed for r in reqs]
            if behind and min(behind) == 1 == max(behind):  # (the common step: one token each, in the list already)
                ids = np.array([r.output[-1] for r in reqs], np.int64)
                if ids.min() >= 0:
                    self._feed(g.driver, reqs, g.slots, ids)
                    continue
            self._catch_up(g, np.array(behind, np.int64))

    def _catch_up(self, g: _Group, fed: np.ndarray) -> None:
        """Requests that gained other than one token each since the last step (`fed`: how many
        each), or whose new token vLLM has not filled in yet: a runtime call per position."""
        reqs = g.reqs
        while True:
            new = np.flatnonzero(fed > 0)
            if not len(new):
                break
            group = [reqs[i] for i in new.tolist()]
            ids = np.fromiter((r.output[r.fed] for r in group), np.int64, len(group))
            keep = ids >= 0
            if not keep.all():  # (a placeholder vLLM fills in later: wait for it)
                fed[new[~keep]] = 0
                new, ids, group = new[keep], ids[keep], [r for r, k in zip(group, keep.tolist(), strict=True) if k]
                if not len(new):
                    break
            self._feed(g.driver, group, g.slots[new], ids)
            fed[new] -= 1

    def _sync_one(self, req: _Request) -> None:
        """Feed one request what it has not been fed (before it leaves the batch)."""
        while req.driver is not None and req.driver.live(req.slot) and req.fed < len(req.output):
            t = req.output[req.fed]
            if t < 0:
                return
            self._feed(req.driver, [req], np.array([req.slot]), np.array([t], np.int64))

    def _feed(self, driver, group: list[_Request], slots: np.ndarray, ids: np.ndarray) -> None:
        if isinstance(driver, DeviceDriver):  # (ids to the device; stop mode's ends stay there: apply reads them)
            full = np.full(self.capacity, driver.null_id, np.int64)
            full[slots] = ids
            rows = np.zeros(self.capacity, bool)
            rows[slots] = True
            dev = driver.device
            driver.feed(torch.from_numpy(full).to(dev, non_blocking=True), None, None,
                        torch.from_numpy(rows).to(dev, non_blocking=True))  # fmt: skip
            for r in group:
                r.fed += 1
            return
        try:
            stopped = driver.feed(slots, ids)
        except (ModuleTrap, ValueError) as e:
            self._fail(group, e)
            return
        for r in group:
            r.fed += 1
        if stopped:
            ended = set(stopped)
            for r in group:
                if r.slot in ended:
                    r.force_eos = True

    def _fail(self, group: list[_Request], error: Exception) -> None:
        """A module trapped or a token was out of its table: those requests end, with the error in their reports."""
        log.error("heatc: %s", error)
        for req in group:
            req.force_eos = True
            self._finish(req, str(error))
        self._groups = None

    def _apply_device(self, g: _Group, logits: torch.Tensor) -> None:
        """A device driver's group: guard its guard rows and end its stopped rows, on the device
        (the rows gathered, changed, put back; nothing read back)."""
        keep = g.all_indices < logits.shape[0]
        indices, slots = g.all_indices[keep], g.slots[keep]
        if not len(indices):
            return
        dev = logits.device
        at = torch.from_numpy(indices).to(dev, non_blocking=True)
        sub = logits.index_select(0, at)
        ends = sorted({e for r in g.reqs for e in r.eos}) or [-1]
        ends_t = torch.tensor(ends, dtype=torch.int64, device=dev)
        slot_t = torch.from_numpy(slots).to(dev, non_blocking=True)
        if len(g.indices):
            g.driver.guard(sub, ends_t, g.greedy, slot_t)
        g.driver.force_stopped(sub, ends_t, slot_t)
        logits.index_copy_(0, at, sub)

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        if ctx is not None:  # (the model runner V2)
            return self._v2.apply(logits, ctx)
        if not self._live:
            return logits
        rows = logits.shape[0]
        ending = [(index, req) for index, req in self._live.items() if req.force_eos]
        for index, req in ending:
            if index < rows and req.eos:
                force_eos(logits, index, req.eos)
        for g in self._grouped():
            if isinstance(g.driver, DeviceDriver):
                self._apply_device(g, logits)
                continue
            if not len(g.indices):
                continue
            if ending or g.top >= rows:
                live = (g.indices < rows) & np.fromiter(
                    (not self._live[i].force_eos for i in g.indices.tolist()), bool, len(g.indices)
                )
            else:  # (the common step: no request ends, every guard row has its logits)
                live = None
            if live is not None and not live.all():
                if not live.any():
                    continue
                slots, indices = g.guarded[live], g.indices[live]
                eos = [e for e, keep in zip(g.eos, live.tolist(), strict=True) if keep]
                whole = len(indices) == rows and (indices == np.arange(rows)).all()
            else:
                slots, indices, eos = g.guarded, g.indices, g.eos
                whole = len(indices) == rows and g.ordered
            try:
                guard_scores(g.driver, logits, slots, None if whole else indices, eos, g.greedy)
            except (ModuleTrap, ValueError) as e:
                reqs = [self._live[i] for i in indices.tolist()]
                self._fail(reqs, e)
                for index, req in zip(indices.tolist(), reqs, strict=True):
                    if req.eos:
                        force_eos(logits, index, req.eos)
        return logits
