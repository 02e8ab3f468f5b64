"""heatc inside vLLM (V1 engine): a custom logits processor, chosen per request.

Register it by class (`LLM(..., logits_processors=[HeatcLogitsProcessor])`), by name
(`vllm serve MODEL --logits-processors heatc_runtime.engines.vllm:HeatcLogitsProcessor`), or
let vLLM find it through the `vllm.logits_processors` entry point that heatc installs. Each
request chooses its checks in `SamplingParams.extra_args` (`vllm_xargs` in the OpenAI API):

    heatc_module   a build or module directory, or a name from $HEATC_MODULES ("name=path,...")
    heatc_mode     observe (default), stop or guard
    heatc_k        guard's candidates per step (default 8, at most 64)
    heatc_prompt   1: the rules read the prompt first (default 0)
    heatc_tokens   "check" (default): refuse a module built for another tokenizer; "model": use the model's table
    heatc_on_exhausted  stop (default) or pass: what guard does when no candidate passes
    heatc_id       a key for the request's report (`take_report(key)`, in the engine's process)

A request without `heatc_module` is not touched. A request whose options are wrong — an
unknown mode, a module that does not exist or does not load, one built for another
tokenizer — is refused by `validate_params` with the reason: that request fails, the
engine keeps serving the others.

How vLLM's persistent batch is followed (measured on its CPU build): a request added or
moved onto index i replaces whatever was there (`removed` is not always reported first);
`output_ids` of an added request is the engine's live list, read at every step; the scores
are float32 whatever the model's dtype. Stop mode and exhausted guard end a request by
forcing an end-of-sequence token at the next step (a request with `ignore_eos` cannot be
ended this way: its report still says where it would have stopped).

Public surface: `HeatcLogitsProcessor`, `take_report(key)`, `request_options(extra_args)`.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from ..errors import ModuleError, ModuleTrap
from .core import MODES, ON_EXHAUSTED, Driver, GenerationReport, open_module
from .masking import force_eos, guard_scores
from .tokens import TokenizerError, TokenTable, table_for_tokenizer

log = logging.getLogger("heatc.vllm")

_KEYS = {"heatc_module", "heatc_mode", "heatc_k", "heatc_prompt", "heatc_tokens", "heatc_on_exhausted", "heatc_id"}
_REPORTS: OrderedDict[str, GenerationReport] = OrderedDict()
_REPORTS_KEPT = 10_000  # the oldest reports nobody took are dropped
_LOCK = threading.Lock()
_INSTANCES: weakref.WeakSet = weakref.WeakSet()


@dataclass(frozen=True)
class Options:
    module: str  # the resolved directory
    mode: str = "observe"
    k: int = 8
    prompt: bool = False
    tokens: str = "check"
    on_exhausted: str = "stop"
    key: str | None = None


def _flag(value, name: str) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("0", "1", "true", "false"):
        return value.lower() in ("1", "true")
    raise ValueError(f"{name} must be 0 or 1, not {value!r}")


def _named_modules() -> dict[str, str]:
    spec = os.environ.get("HEATC_MODULES", "")
    pairs = [p.split("=", 1) for p in spec.split(",") if "=" in p]
    return {name.strip(): path.strip() for name, path in pairs}


def request_options(extra_args: dict | None) -> Options | None:
    """A request's heatc options, or None when it asks for none. Raises ValueError with the
    reason when they are wrong."""
    args = extra_args or {}
    if "heatc_module" not in args:
        stray = sorted(k for k in args if k.startswith("heatc_"))
        if stray:
            raise ValueError(f"heatc: {', '.join(stray)} given without heatc_module")
        return None
    unknown = sorted(k for k in args if k.startswith("heatc_") and k not in _KEYS)
    if unknown:
        raise ValueError(f"heatc: unknown option {unknown[0]!r} (options: {', '.join(sorted(_KEYS))})")
    name = args["heatc_module"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"heatc_module must name a module, not {name!r}")
    path = _named_modules().get(name, name)
    mode = args.get("heatc_mode", "observe")
    if mode not in MODES:
        raise ValueError(f"heatc_mode {mode!r} is not a mode (modes: {', '.join(MODES)})")
    k = args.get("heatc_k", 8)
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise ValueError(f"heatc_k must be a whole number from 1 to 64, not {k!r}")
    tokens = args.get("heatc_tokens", "check")
    if tokens not in ("check", "model"):
        raise ValueError(f"heatc_tokens must be 'check' or 'model', not {tokens!r}")
    exhausted = args.get("heatc_on_exhausted", "stop")
    if exhausted not in ON_EXHAUSTED:
        raise ValueError(f"heatc_on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, not {exhausted!r}")
    key = args.get("heatc_id")
    resolved = str(Path(path).expanduser().resolve())
    return Options(resolved, mode, k, _flag(args.get("heatc_prompt", 0), "heatc_prompt"), tokens, exhausted,
                   None if key is None else str(key))  # fmt: skip


# Modules loaded once per process (validated, checksums verified), by directory; each
# processor works on its own clone. The model's token table is known once an engine in this
# process has started: then validate_params also refuses a module built for another tokenizer.
_MODULES: dict[str, object] = {}
_MODEL_TABLE: list[TokenTable] = []


def _module(opts: Options):
    with _LOCK:
        base = _MODULES.get(opts.module)
    if base is None:
        if not (Path(opts.module) / "manifest.json").is_file():
            raise ValueError(f"heatc_module {opts.module}: no such module (a heatc build or module directory)")
        try:
            base = open_module(opts.module, None, "model")
        except ModuleError as e:
            raise ValueError(f"heatc_module {e}") from None
        with _LOCK:
            _MODULES[opts.module] = base
    if opts.tokens == "check" and _MODEL_TABLE:
        try:
            open_module(base, _MODEL_TABLE[0], "check")
        except ModuleError as e:
            raise ValueError(f"heatc_module {opts.module}: {str(e).removeprefix('the module: ')}") from None
    return base


def take_report(key: str) -> GenerationReport | None:
    """The report of the request whose `heatc_id` was `key` (None if there is none), once:
    a request still in the engine's batch is ended here. In the engine's process only (an
    in-process `LLM`, or VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    for processor in list(_INSTANCES):
        processor._end_key(key)
    with _LOCK:
        return _REPORTS.pop(str(key), None)


def _keep(key: str | None, report: GenerationReport) -> None:
    if key is None:
        return
    with _LOCK:
        _REPORTS[key] = report
        _REPORTS.move_to_end(key)
        while len(_REPORTS) > _REPORTS_KEPT:
            _REPORTS.popitem(last=False)


class _Request:
    __slots__ = ("driver", "eos", "fed", "force_eos", "opts", "output", "slot")

    def __init__(self, opts: Options, driver: Driver | None, slot: int, output: list[int], eos: list[int]):
        self.opts, self.driver, self.slot, self.output, self.eos = opts, driver, slot, output, eos
        self.fed = 0
        self.force_eos = False


class HeatcLogitsProcessor(LogitsProcessor):
    """vLLM V1 logits processor running heatc modules chosen per request."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        opts = request_options(sampling_params.extra_args)
        if opts is not None:
            _module(opts)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.device = device
        # Registered twice for one engine (the entry point and by name or class), the second
        # instance stays idle: one set of checks per request.
        with _LOCK:
            self._idle = any(p._config is vllm_config and not p._idle for p in _INSTANCES)
        self._config = vllm_config
        self._live: dict[int, _Request] = {}
        _INSTANCES.add(self)
        model = vllm_config.model_config
        self.vocab_size = int(model.get_vocab_size())
        self.capacity = int(vllm_config.scheduler_config.max_num_seqs)
        self._model_config = model
        self._table: TokenTable | None = None
        self._drivers: dict[tuple[str, str], Driver] = {}
        self._free: dict[tuple[str, str], list[int]] = {}
        if self._idle:
            return
        try:
            self._table = self._model_table()
            with _LOCK:
                _MODEL_TABLE[:] = [self._table]
        except (TokenizerError, OSError, ValueError) as e:  # checked again when a request needs it
            log.warning("heatc: no token table for the model's tokenizer yet: %s", e)

    def _model_table(self) -> TokenTable:
        if self._table is None:
            from vllm.tokenizers.registry import cached_tokenizer_from_config

            tokenizer = cached_tokenizer_from_config(self._model_config)
            if tokenizer is None:
                raise TokenizerError("the engine was started without a tokenizer (skip_tokenizer_init)")
            self._table = table_for_tokenizer(tokenizer)
        return self._table

    def is_argmax_invariant(self) -> bool:
        return False  # stop and guard change what greedy decoding picks

    # -- the persistent batch -------------------------------------------------------------

    def _driver(self, opts: Options) -> tuple[Driver, int]:
        key = (opts.module, opts.tokens)
        driver = self._drivers.get(key)
        if driver is None:
            checker = open_module(_module(opts).clone(), self._model_table(), opts.tokens)
            driver = self._drivers[key] = Driver(checker, self._model_table(), self.capacity, self.vocab_size)
            self._free[key] = list(range(self.capacity - 1, -1, -1))
        return driver, self._free[key].pop()

    def _add(self, index: int, params, prompt: list[int] | None, output: list[int]) -> None:
        try:
            opts = request_options(params.extra_args)
        except ValueError:
            return  # (validate_params refused it already)
        if opts is None:
            return
        eos = sorted(params.all_stop_token_ids) if not params.ignore_eos else []
        try:
            driver, slot = self._driver(opts)
        except (ModuleError, ValueError, OSError) as e:
            # Refused here, not by validate_params (which ran in another process, or before the
            # module changed): the request is ended at its first step, its report says why.
            log.error("heatc: request at index %d cannot be checked, ending it: %s", index, e)
            req = _Request(opts, None, -1, output, eos)
            req.force_eos = True
            self._live[index] = req
            _keep(opts.key, GenerationReport(opts.mode, b"", 0, [], [], {}, error=str(e)))
            return
        req = _Request(opts, driver, slot, output, eos)
        driver.start(slot, opts.mode, opts.k, opts.on_exhausted, prompt, opts.prompt)
        self._live[index] = req

    def _release(self, index: int) -> None:
        req = self._live.pop(index, None)
        if req is not None:
            self._sync([req])
            self._finish(req)

    def _finish(self, req: _Request, error: str | None = None) -> None:
        if req.driver is not None and req.driver.live(req.slot):
            report = req.driver.end(req.slot, error)
            self._free[(req.opts.module, req.opts.tokens)].append(req.slot)
            _keep(req.opts.key, report)

    def _end_key(self, key: str) -> None:
        for index, req in list(self._live.items()):
            if req.opts.key == str(key):
                self._sync([req])
                self._finish(req)
                del self._live[index]

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if self._idle:
            return
        if batch_update is not None:
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
            self._sync(list(self._live.values()))

    def _sync(self, reqs: list[_Request]) -> None:
        """Feed each request the tokens its live output list gained: one runtime call per
        module per new position (one, at a decoding step)."""
        while True:
            by_driver: dict[int, tuple[Driver, list[_Request]]] = {}
            for req in reqs:
                out = req.output
                if req.fed < len(out) and out[req.fed] >= 0 and req.driver is not None and req.driver.live(req.slot):
                    by_driver.setdefault(id(req.driver), (req.driver, []))[1].append(req)
            if not by_driver:
                return
            for driver, group in by_driver.values():
                slots = np.fromiter((r.slot for r in group), np.intp, len(group))
                ids = np.fromiter((r.output[r.fed] for r in group), np.int64, len(group))
                try:
                    stopped = set(driver.feed(slots, ids))
                except (ModuleTrap, ValueError) as e:
                    self._fail(group, e)
                    continue
                for r in group:
                    r.fed += 1
                    if r.slot in stopped:
                        r.force_eos = True

    def _fail(self, group: list[_Request], error: Exception) -> None:
        """A module trapped or a token was out of its table: those requests end, with the error in their reports."""
        log.error("heatc: %s", error)
        for req in group:
            req.force_eos = True
            self._finish(req, str(error))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._live:
            return logits
        guards: dict[int, tuple[Driver, list[int], list[_Request]]] = {}
        for index, req in self._live.items():
            if index >= logits.shape[0]:
                continue
            if req.force_eos:
                if req.eos:
                    force_eos(logits, index, req.eos)
            elif req.opts.mode == "guard" and req.driver.live(req.slot):
                _, indices, reqs = guards.setdefault(id(req.driver), (req.driver, [], []))
                indices.append(index)
                reqs.append(req)
        for driver, indices, reqs in guards.values():
            slots = np.fromiter((r.slot for r in reqs), np.intp, len(reqs))
            try:
                guard_scores(driver, logits, slots, indices, [r.eos for r in reqs])
            except (ModuleTrap, ValueError) as e:
                self._fail(reqs, e)
                for index, req in zip(indices, reqs, strict=True):
                    if req.eos:
                        force_eos(logits, index, req.eos)
        return logits
