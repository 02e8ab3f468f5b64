"""What a vLLM request asks of heatc, and what a process keeps for it — the side of the vLLM
adapter that needs no vLLM: a request's options read from its `extra_args` (refused with the
reason when wrong), the modules a server offers (`HEATC_MODULES`) and those loaded once per
process (at most `HEATC_MODULE_CACHE`), the Metrics requests report into, and the reports
kept for `take_report`. engines/vllm.py (V1 runner) and engines/vllm_v2.py use it.

Public surface: `Options`, `request_options(extra_args)`, `use_metrics(metrics)`,
`pop_report(key)`; for the adapters `load_module(opts, device)`, `metrics()`, `keep(key,
report)`, `set_model_table(table)`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModuleError
from .options import (
    BACKENDS,
    MARKER,
    MODES,
    ON_EXHAUSTED,
    POLICIES,
    RowOptions,
    check_table,
    choose_backend,
    open_module,
)
from .reports import GenerationReport
from .tokens import TokenTable

_KEYS = {"heatc_module", "heatc_mode", "heatc_k", "heatc_policy", "heatc_marker", "heatc_prompt", "heatc_tokens",
         "heatc_backend", "heatc_on_exhausted", "heatc_id"}  # fmt: skip
_REPORTS: OrderedDict[str, GenerationReport] = OrderedDict()
_REPORTS_KEPT = 10_000  # the oldest reports nobody took are dropped
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Options:
    module: str  # the resolved directory
    row: RowOptions
    tokens: str = "model"
    backend: str | None = None
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


def _serving() -> bool:
    """Whether this process serves clients (vLLM's OpenAI server): then a module must be named."""
    return bool(os.environ.get("HEATC_MODULES")) or "vllm.entrypoints.openai.api_server" in sys.modules


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
    named = _named_modules()
    if name in named:
        path = named[name]
    elif _serving():
        listed = ", ".join(sorted(named)) or "none: the operator sets HEATC_MODULES"
        raise ValueError(f"heatc_module {name!r} is not a module this server offers (HEATC_MODULES: {listed})")
    else:
        path = name
    k = args.get("heatc_k", 8)
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    tokens = args.get("heatc_tokens", "model")
    if tokens not in ("check", "model"):
        raise ValueError(f"heatc_tokens must be 'check' or 'model', not {tokens!r}")
    backend = args.get("heatc_backend")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"heatc_backend {backend!r} is not a backend (backends: {', '.join(BACKENDS)})")
    mode, policy = args.get("heatc_mode", "observe"), args.get("heatc_policy", "withhold")
    if mode not in MODES:
        raise ValueError(f"heatc_mode {mode!r} is not a mode (modes: {', '.join(MODES)})")
    if policy not in POLICIES:
        raise ValueError(f"heatc_policy {policy!r} is not a policy (policies: {', '.join(POLICIES)})")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise ValueError(f"heatc_k must be a whole number from 1 to 64, not {k!r}")
    exhausted = args.get("heatc_on_exhausted", "stop")
    if exhausted not in ON_EXHAUSTED:
        raise ValueError(f"heatc_on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, not {exhausted!r}")
    try:
        row = RowOptions(mode, k, policy, args.get("heatc_marker", MARKER), exhausted,
                         _flag(args.get("heatc_prompt", 0), "heatc_prompt"))  # fmt: skip
    except ValueError as e:
        raise ValueError(f"heatc_marker: {e}") from None
    key = args.get("heatc_id")
    resolved = str(Path(path).expanduser().resolve())
    return Options(resolved, row, tokens, backend, None if key is None else str(key))


# Modules loaded once per process (validated, checksums verified), by directory and backend
# (the least recently used dropped past HEATC_MODULE_CACHE); each processor works on its own
# clone. The model's token table is known once an engine in this process has started: then
# validate_params also refuses, with heatc_tokens "check", a module built for another tokenizer.
_MODULES: OrderedDict[tuple[str, str], object] = OrderedDict()
_MODEL_TABLE: list[TokenTable] = []


def _cache_size() -> int:
    try:
        return max(1, int(os.environ.get("HEATC_MODULE_CACHE", "8")))
    except ValueError:
        return 8


def load_module(opts: Options, device: str = "cpu"):
    """The loaded module for a request (a host Checker), and its backend."""
    if not (Path(opts.module) / "manifest.json").is_file():
        raise ValueError(f"heatc_module {opts.module}: no such module (a heatc build or module directory)")
    try:
        backend = choose_backend(opts.backend, opts.module, device)
    except (ModuleError, ValueError) as e:
        raise ValueError(f"heatc_backend: {e}") from None
    host = "native" if backend == "cuda" else backend  # (the CUDA program is loaded by its driver)
    with _LOCK:
        base = _MODULES.get((opts.module, host))
        if base is not None:
            _MODULES.move_to_end((opts.module, host))
    if base is None:
        try:
            base = open_module(opts.module, None, "model", None, host)
        except ModuleError as e:
            raise ValueError(f"heatc_module {e}") from None
        with _LOCK:
            _MODULES[(opts.module, host)] = base
            while len(_MODULES) > _cache_size():
                _MODULES.popitem(last=False)
    if opts.tokens == "check" and _MODEL_TABLE:
        try:
            check_table(base.token_table, _MODEL_TABLE[0], opts.module)
        except ModuleError as e:
            raise ValueError(f"heatc_module {e}") from None
    return base, backend


_METRICS: list = []  # the Metrics the drivers made from now on report into (none: no metrics)


def use_metrics(metrics) -> None:
    """Report the requests checked in this process from now on into `metrics` (a
    `heatc_runtime.metrics.Metrics`; None: no longer). A processor that already checked a
    request with a module keeps what it had for that module."""
    with _LOCK:
        _METRICS[:] = [] if metrics is None else [metrics]


def metrics():
    with _LOCK:
        if not _METRICS and os.environ.get("HEATC_METRICS", "").lower() in ("1", "true"):
            from ..metrics import Metrics

            _METRICS.append(Metrics())
        return _METRICS[0] if _METRICS else None


def pop_report(key: str) -> GenerationReport | None:
    """The report kept for `key`, once (None if there is none)."""
    with _LOCK:
        return _REPORTS.pop(str(key), None)


def keep(key: str | None, report: GenerationReport) -> None:
    if key is None:
        return
    with _LOCK:
        _REPORTS[key] = report
        _REPORTS.move_to_end(key)
        while len(_REPORTS) > _REPORTS_KEPT:
            _REPORTS.popitem(last=False)


def set_model_table(table: TokenTable) -> None:
    """The model's token table, once an engine in this process knows it (heatc_tokens "check"
    then refuses a module built for another tokenizer at validation)."""
    with _LOCK:
        _MODEL_TABLE[:] = [table]
