"""The choices a checked generation takes — mode, guard's candidates and policy, the marker, the
backend, the token table — checked in one place for every adapter, and the module opened on
the backend chosen.

Backends: `native` (the C++ core on the CPU: the default where its extension loads and the
build has rules.hct), `wasm` (the portable fallback: module.wasm on wasmtime), `cuda` (the
torch ops `heatc::step` / `heatc::guard` on the scores' device: the default when the scores
are on a CUDA device and `heatc[cuda]` loads; on CPU tensors the ops' CPU kernels run the same
calls, which is how CI tests that path).

Token tables: rules read bytes, so a build serves any model. By default (`tokens="model"`)
the model's tokenizer gives the table, whatever table the build carries; `tokens="check"`
refuses a build whose table differs from the model's.

Public surface: `MODES`, `POLICIES`, `ON_EXHAUSTED`, `BACKENDS`, `MARKER`, `RowOptions`,
`marker_ids(marker, table, tokenizer)`, `TokenTableError`, `TokenIdError`, `choose_backend(requested,
module, device)`, `open_module(module, table, tokens, limits, backend)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ModuleError

MODES = ("observe", "stop", "guard")
POLICIES = ("withhold", "stop", "steer")
ON_EXHAUSTED = ("stop", "pass")
BACKENDS = ("native", "wasm", "cuda")
MARKER = "[unverified]"


class TokenTableError(ModuleError):
    """A module built for another tokenizer than the model's (with tokens="check")."""


class TokenIdError(ValueError):
    """A token id the table has no entry for."""


@dataclass(frozen=True)
class RowOptions:
    """How one sequence is checked.

    mode: observe, stop or guard. k: guard's candidates per step (1–64). policy: what guard
    does when the model's first choice would add a rejection — `withhold` (the default: a
    value being written is replaced by `marker` and the report says so; elsewhere the best
    candidate that passes is taken), `stop` (the sequence ends there), `steer` (the best
    candidate that passes is taken, even inside a number: the report lists what was
    refused). on_exhausted: when no candidate passes, end the sequence (`stop`) or leave the
    step as the model wrote it (`pass`). see_prompt: the rules read the prompt first."""

    mode: str = "observe"
    k: int = 8
    policy: str = "withhold"
    marker: str = MARKER
    on_exhausted: str = "stop"
    see_prompt: bool = False

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r} (modes: {', '.join(MODES)})")
        k = self.k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise ValueError(f"k must be a whole number from 1 to 64, not {k!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown guard policy {self.policy!r} (policies: {', '.join(POLICIES)})")
        if self.on_exhausted not in ON_EXHAUSTED:
            raise ValueError(f"on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, not {self.on_exhausted!r}")
        m = self.marker
        if not isinstance(m, str) or not m.strip() or any(c.isdigit() for c in m) or len(m) > 64:
            raise ValueError(
                f"the marker must be 1 to 64 characters of text with no digits (it stands where a value was "
                f"withheld, and is read by the rules like any text), not {m!r}"
            )


def marker_ids(marker: str, table: list[bytes], tokenizer=None) -> tuple[int, ...]:
    """The token ids guard writes the marker with: the tokenizer's own (when it spells the
    marker back), else the fewest tokens of the table that spell it. ValueError when no
    tokens of the table spell it."""
    want = marker.encode()
    if tokenizer is not None:
        ids = list(tokenizer(marker, add_special_tokens=False)["input_ids"])
        if ids and all(0 <= i < len(table) for i in ids) and b"".join(table[i] for i in ids) == want:
            return tuple(ids)
    first: dict[bytes, int] = {}
    for i, t in enumerate(table):
        if t and want.find(t) >= 0:
            first.setdefault(t, i)
    best: list[tuple[int, ...] | None] = [()] + [None] * len(want)  # the fewest tokens spelling want[:j]
    for j in range(1, len(want) + 1):
        for t, i in first.items():
            k = j - len(t)
            if (
                k >= 0
                and best[k] is not None
                and want[k:j] == t
                and (best[j] is None or len(best[k]) + 1 < len(best[j]))
            ):
                best[j] = (*best[k], i)
    if not best[-1]:
        raise ValueError(f"the marker {marker!r} cannot be written with this model's tokens")
    return best[-1]


def _cuda_loads() -> str | None:
    """None when the CUDA ops can run here, else why not."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        from ..cuda import driver  # noqa: F401  (cuda-python: heatc[cuda])
    except ImportError as e:
        return f"heatc[cuda] is not installed ({e})"
    return None


def _native_loads() -> str | None:
    try:
        from ..backends.extension import native_extension

        native_extension()
    except ModuleError as e:
        return str(e)
    return None


def _has_tables(module) -> bool:
    from ..backends.checker import Checker

    if isinstance(module, Checker):
        return getattr(module, "backend", "wasm") == "native"
    path = Path(module)
    return (path / "rules.hct").is_file()


def choose_backend(requested: str | None, module, device: str = "cpu") -> str:
    """The backend to run `module` (a directory, or a Checker) on, for scores on `device`:
    `requested`, checked, or the default (cuda for CUDA scores where it loads, else native
    where it loads and the module has rules.hct, else wasm)."""
    from ..backends.checker import Checker

    if requested is not None and requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r} (backends: {', '.join(BACKENDS)})")
    if isinstance(module, Checker):
        own = getattr(module, "backend", "wasm")
        if requested not in (None, own):
            raise ValueError(f"this Checker runs on the {own} backend, not {requested}: pass the build directory")
        return own
    if requested == "cuda":
        if str(device).startswith("cuda") and (why := _cuda_loads()):
            raise ModuleError(f"the cuda backend cannot run here: {why}")
        if not str(device).startswith("cuda") and (why := _native_loads()):
            raise ModuleError(f"the cuda backend on CPU tensors runs the ops' CPU kernels, which need {why}")
        if not _has_tables(module):
            raise ModuleError(f"{module}: no rules.hct (the cuda backend runs a build directory: heatc build)")
        return "cuda"
    if requested == "native":
        if why := _native_loads():
            raise ModuleError(why)
        if not _has_tables(module):
            raise ModuleError(f"{module}: no rules.hct (the native backend runs a build directory: heatc build)")
        return "native"
    if requested == "wasm":
        return "wasm"
    if str(device).startswith("cuda") and _has_tables(module) and _cuda_loads() is None:
        return "cuda"
    if _has_tables(module) and _native_loads() is None:
        return "native"
    return "wasm"


def open_module(module, table, tokens: str = "model", limits=None, backend: str = "wasm"):
    """A Checker for `module` (a build or module directory, or a Checker) on a host backend
    (wasm, native). With `tokens="check"` it is refused when the token table it was built with
    is not the model tokenizer's `table`; by default the model's table replaces it."""
    from ..backends.checker import Checker
    from ..backends.loader import load

    if tokens not in ("check", "model"):
        raise ValueError(f"tokens must be 'check' or 'model', not {tokens!r}")
    if isinstance(module, Checker):
        checker, where = module, "the module"
    else:
        checker, where = load(Path(module), limits, backend=backend), str(module)
    if tokens == "check":
        check_table(checker.token_table, table, where)
    return checker


def check_table(own: list[bytes] | None, table, where: str) -> None:
    """Refuse a build whose token table is not the model's (tokens="check")."""
    if own is None or table is None:
        return
    from .tokens import table_sha256

    if len(own) != len(table.tokens) or table_sha256(own) != table.sha256:
        raise TokenTableError(
            f"{where}: its token table was built for another tokenizer ({len(own)} tokens, sha256 "
            f"{table_sha256(own)[:12]}…) than the model's ({table.source}: {len(table.tokens)} tokens, "
            f"sha256 {table.sha256[:12]}…); rebuild it with the model's tokenizer "
            "(tokenizer: {file: …/tokenizer.json}), or leave tokens='model' (the default) to use the model's table"
        )
