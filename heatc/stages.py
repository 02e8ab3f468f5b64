"""A pipeline as data: named stages, each reading named values and writing others, run in
order with its wall time taken, an error tagged with the stage it happened in, and any
stage's output written out for debugging. `heatc build` (heatc.heatmap.build.STAGES) and
`heatc learn` (heatc.learn.pipeline.STAGES) are such lists; `--timings` prints the times,
`--dump-after STAGE` writes what the stage made.

Public surface: `Stage`, `Run`, `run_stages(stages, values, dump_after, dump_to) -> Run`,
`check_dump_after(stages, name, option)`, `format_timings(title, seconds)`,
`StageError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heatc.errors import Diagnostic, HeatError


@dataclass(frozen=True)
class Stage:
    """One step: `run(**inputs)` returns the outputs, a dict with exactly the names in
    `outputs`. `dump(outputs) -> (file suffix, text or bytes)` says how `--dump-after` writes
    them (None: the stage makes nothing worth reading on its own)."""

    name: str
    about: str  #: what it does, in a few words
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    run: Callable[..., dict[str, Any]]
    dump: Callable[[dict[str, Any]], tuple[str, str | bytes]] | None = None


@dataclass
class Run:
    values: dict[str, Any]  #: every value the stages read or wrote
    seconds: list[tuple[str, float]] = field(default_factory=list)  #: (stage, wall seconds), in order
    dumped: Path | None = None  #: what --dump-after wrote

    def timings(self, title: str) -> str:
        return format_timings(title, self.seconds)


def format_timings(title: str, seconds: Sequence[tuple[str, float]]) -> str:
    """One line per stage and the total, for --timings."""
    width = max((len(name) for name, _ in seconds), default=5)
    lines = [f"{title} stages (wall time):"]
    lines += [f"  {name:<{width}}  {s * 1000:9.1f} ms" for name, s in seconds]
    lines.append(f"  {'total':<{width}}  {sum(s for _, s in seconds) * 1000:9.1f} ms")
    return "\n".join(lines)


class StageError(HeatError):
    """A stage's user-facing error, with the stage named (the diagnostics are the stage's)."""

    def __init__(self, stage: Stage, error: HeatError):
        self.stage = stage.name
        super().__init__(error.diagnostics)

    def render(self) -> str:
        return super().render() + f"\n(in stage {self.stage})"


def check_dump_after(stages: Sequence[Stage], name: str | None, option: str = "--dump-after") -> None:
    """Refuse a --dump-after naming no stage, or one with nothing to write, before any work."""
    if name is None:
        return
    known = {s.name: s for s in stages}
    if name not in known or known[name].dump is None:
        can = ", ".join(s.name for s in stages if s.dump is not None)
        raise HeatError(Diagnostic(option, 0, 0, f"no stage {name!r} to dump; the stages with an output: {can}"))


def run_stages(
    stages: Sequence[Stage], values: dict[str, Any], dump_after: str | None = None, dump_to: Path | None = None
) -> Run:
    """Run `stages` in order over `values` (the inputs the first stages read). A stage's
    HeatError comes out as StageError naming it; any other exception gets a note naming it
    (a bug: the traceback says where). With `dump_after` (checked by the caller,
    `check_dump_after`, against the whole pipeline, which may run as several lists), that
    stage's outputs are written to `dump_to` + its suffix once it has run."""
    run = Run(dict(values))
    for stage in stages:
        missing = [n for n in stage.inputs if n not in run.values]
        assert not missing, f"stage {stage.name} reads {missing}, which no earlier stage writes"
        start = time.perf_counter()
        try:
            out = stage.run(**{n: run.values[n] for n in stage.inputs})
        except HeatError as e:
            raise StageError(stage, e) from e
        except Exception as e:
            e.add_note(f"(in stage {stage.name}: {stage.about})")
            raise
        run.seconds.append((stage.name, time.perf_counter() - start))
        assert set(out) == set(stage.outputs), f"stage {stage.name} wrote {sorted(out)}, not {list(stage.outputs)}"
        run.values.update(out)
        if stage.name == dump_after and stage.dump is not None and dump_to is not None:
            suffix, data = stage.dump(out)
            run.dumped = dump_to.with_name(dump_to.name + suffix)
            if isinstance(data, str):
                run.dumped.write_text(data, encoding="utf-8")
            else:
                run.dumped.write_bytes(data)
    return run
