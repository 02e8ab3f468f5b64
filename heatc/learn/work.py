"""What every stage of the learner shares: progress callbacks, the ranks of a `torchrun` run,
seeded hashing, the work folders that let a run resume, and a stage's output as JSON.

Public surface: `Progress`, `quiet`, `rank_and_world`, `barrier`, `seeded_hash`, `read_work`,
`refuse_other_work`, `json_dump`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import zlib
from collections.abc import Callable
from pathlib import Path

from heatc.errors import Diagnostic, HeatError

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def quiet(stage: str, done: int, total: int) -> None:
    pass


def rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def seeded_hash(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{text}".encode()).digest()[:8], "little")


def read_work(path: Path, parse: Callable = lambda x: x):
    """`parse` of a JSON file (gzipped when its name ends in .gz) of a work folder, or a
    HeatError saying it is damaged and that --fresh starts over (a truncated or changed work
    file raised EOFError, which the CLI printed as a bare "Aborted.", or a RuntimeError)."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return parse(json.load(f))
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {str(e)[:200]}"
        raise HeatError(
            Diagnostic(str(path), 0, 0, f"the work folder's file is damaged ({why}); rerun with --fresh to start over")
        ) from None


def refuse_other_work(work: Path, want: dict, command: str) -> None:
    """Refuse a work folder whose stamp (`config.json`) is not `want` ({"version",
    "fingerprint"}): the work of an earlier `command`, of another format, or of a run with other
    settings. The error says which, and that --fresh starts over; nothing is removed."""
    have = read_work(work / "config.json")
    if have == want:
        return
    why = (
        f"holds the work of an earlier {command} (work format {have.get('version')}, this one writes {want['version']})"
        if have.get("version") != want["version"]
        else "holds the work of a run with different settings"
    )
    raise HeatError(Diagnostic(str(work), 0, 0, f"{why}; rerun with --fresh to start over"))


def json_dump(value) -> tuple[str, str]:
    """A stage's output as --dump-after writes it: (".json", its JSON)."""
    return ".json", json.dumps(value, indent=1, ensure_ascii=False, default=_plain) + "\n"


def _plain(x):
    """What json cannot write itself: dataclasses as dicts, numpy numbers as numbers, the rest by repr."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.asdict(x)
    return x.item() if hasattr(x, "item") else repr(x)
