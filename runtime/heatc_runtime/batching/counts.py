"""`StepCounts`: what one batch did, counted as it went — steps, text feeds, snapshots
published by triggers, and, when a metrics object asked for it, the wall time of one step
in every `sample_every`. The counting is the only work a decoding step does for metrics
(docs/metrics.md): `heatc_runtime.metrics` reads these counters when it is scraped.

Public surface: `StepCounts`, `clock()` (the clock the samples are timed by).
"""

from __future__ import annotations

import time

clock = time.perf_counter


class StepCounts:
    """What one batch did, counted as it went (read, never reset, by `heatc_runtime.metrics`):
    `steps` (`feed_ids` calls that stepped the batch), `text_feeds` (`feed_text` calls),
    `snapshots` (published by triggers, not a sequence's final one). With `sample(every)`,
    the wall time of every `every`-th step (a power of two) and of every `feed_text` call is
    appended to `step_seconds` / `text_seconds` and `on_sample()` is called after it."""

    __slots__ = ("mask", "on_sample", "snapshots", "step_seconds", "steps", "text_feeds", "text_seconds")

    def __init__(self) -> None:
        self.steps = self.text_feeds = self.snapshots = 0
        self.mask = -1  # steps & -1 (steps itself) never equals it: no step is timed
        self.step_seconds: list[float] = []
        self.text_seconds: list[float] = []
        self.on_sample = None

    def sample(self, every: int, on_sample=None) -> None:
        """Time one step in `every` (1, 2, 4, …), from the next `every`-th step on."""
        if isinstance(every, bool) or not isinstance(every, int) or every < 1 or every & (every - 1):
            raise ValueError(f"sample_every must be a power of two (1, 2, 4, …), not {every!r}")
        self.on_sample = on_sample
        self.mask = every - 1

    def timed(self, seconds: list[float], t0: float) -> None:
        seconds.append(clock() - t0)
        if self.on_sample is not None:
            self.on_sample()
