"""Prometheus metrics for a serving process (docs/metrics.md): what the rules stepped, how
often they triggered, what they found, what guard masked, and what a step costs.

`Metrics(registry)` owns the metric families on a registry (default: prometheus_client's
global one) and takes reports from the Checker, its batches and the engine adapters.
`metrics.attach(checker)` instruments one checker: its `scan` and `conflicts` are wrapped on
the instance, and every `batch()` made after it is watched. An engine adapter's `Driver`
given the metrics attaches its checker and adds what a batch cannot see: a report when a
sequence ends and guard's masks.

Cost: a decoding step takes microseconds and one prometheus_client `observe` about as long,
so a step does no metrics work of its own. A batch counts its steps, text feeds and trigger
snapshots as it goes (`batch.counts`, one integer increment a step, which it does attached or
not); the metrics read those counters lazily, when the families are brought up to date
(`flush()`): right before every collection of the registry (so an in-process scrape sees
every step and report made before it), at every report, at exit, and at most every
`flush_interval_s` while stepping. Step latency is measured on a sample: one step in
`sample_every` (default 64, a power of two) reads the clock twice and calls back — a
histogram of a sample of steps is still the distribution of their latency; its `_count` is
the number of steps sampled, `heatc_tokens_total` counts every one. In prometheus_client's
multiprocess mode (a vLLM worker: `PROMETHEUS_MULTIPROC_DIR` set before prometheus_client is
imported) the values go to the worker's files at each flush; the server process reads them
with a `MultiProcessCollector` (`multiprocess_registry()`), so a scrape lags a busy worker by
at most `flush_interval_s` (and `sample_every` steps), and an idle one not at all.

Label cardinality: `module` takes the names of the modules reported, bounded by
`max_module_labels` (default 100) distinct names per Metrics object; `rule` takes rule names,
bounded by `max_rule_labels` (default 1000); past either bound further names count under
"_other". `verdict`, `action` and `source` take the fixed values of `VERDICTS`, audit.ACTIONS
and `SOURCES`. What the metrics keep per batch goes at the flush after the batch is closed,
collected or its checker closed; what `observe_step` keeps per module and batch size, at the
flush after it was idle for a whole interval.

A report's action is its audit report's: at the `policy` given to `Metrics`, else at the
module's own cut-offs (its manifest's `policy`), else the default (`policy_for(module)`).

Every report is checked where it is made: a count that is negative or not an integer, a
duration that is not a finite number of seconds, a batch of no sequences raises there (so
that one bad report never fails a later flush and loses the others' counts).

Public surface: `Metrics`, `METRICS` (name → help), `SOURCES`, `SAMPLE_EVERY`, `STEP_BUCKETS`,
`multiprocess_registry()`.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import weakref
from collections import Counter as Tally
from collections.abc import Iterable

import numpy as np

from .args import duration, module_name, whole_number
from .batching.counts import StepCounts
from .reports.audit import AuditReport, ModuleInfo, Policy, confidence, triggered_rules
from .reports.report import Event, Verdict

try:
    import prometheus_client as prom
    from prometheus_client.registry import Collector
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    prom = None
    Collector = object

SOURCES = ("scan", "stream")
VERDICTS = tuple(v.name for v in Verdict)
OTHER_RULE = OTHER_MODULE = "_other"
#: One step in this many is timed (a power of two: the batch tests it with a mask).
SAMPLE_EVERY = 64
#: Step latency buckets, in seconds: a step takes microseconds (batch 1) to milliseconds.
STEP_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 0.1, 1.0)
METRICS = {
    "heatc_tokens_total": "Sequence-tokens stepped through the rules (a batch step of B sequences adds B).",
    "heatc_snapshots_total": "Snapshots published by triggers while stepping (not the final snapshot of a sequence).",
    "heatc_step_seconds": "Wall time of one batch step (one runtime call for the whole batch), one step in sample_every.",
    "heatc_step_token_seconds": "Wall time of one sampled batch step divided by its batch size.",
    "heatc_reports_total": "Responses checked to the end (scanned documents, finished sequences), by policy action.",
    "heatc_checked_bytes_total": "Bytes of the responses checked to the end.",
    "heatc_verdicts_total": "Final verdicts of the rules that triggered (matched, or not CONFIRMED), one per report.",
    "heatc_conflict_checks_total": "Chunk lists checked for conflicts (Checker.conflicts).",
    "heatc_conflicts_total": "Conflicts found between or within chunks, by the rule whose later mention disagreed.",
    "heatc_guard_masks_total": "Candidate tokens masked by guard mode.",
    "heatc_guard_exhausted_total": "Guard steps at which no top-k candidate passed.",
}


def _require_prometheus() -> None:
    if prom is None:
        raise ModuleNotFoundError(
            "heatc_runtime.metrics needs prometheus-client: pip install 'heatc[metrics]' (or prometheus-client)"
        )


def multiprocess_registry():
    """A registry for the process that serves /metrics when the values are written by other
    processes (prometheus_client's multiprocess mode; PROMETHEUS_MULTIPROC_DIR must be set)."""
    _require_prometheus()
    from prometheus_client import multiprocess

    registry = prom.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


class _Families:
    """The metric families on one registry (a name may be registered once per registry)."""

    def __init__(self, registry):
        self.flusher = _FlushBeforeCollect()
        registry.register(self.flusher)  # first: collections flush before reading the families
        c = prom.Counter
        h = prom.Histogram
        m = METRICS
        self.tokens = c("heatc_tokens", m["heatc_tokens_total"], ["module"], registry=registry)
        self.snapshots = c("heatc_snapshots", m["heatc_snapshots_total"], ["module"], registry=registry)
        self.step = h(
            "heatc_step_seconds", m["heatc_step_seconds"], ["module"], buckets=STEP_BUCKETS, registry=registry
        )
        self.step_token = h(
            "heatc_step_token_seconds",
            m["heatc_step_token_seconds"],
            ["module"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.reports = c("heatc_reports", m["heatc_reports_total"], ["module", "source", "action"], registry=registry)
        self.bytes = c("heatc_checked_bytes", m["heatc_checked_bytes_total"], ["module", "source"], registry=registry)
        self.verdicts = c("heatc_verdicts", m["heatc_verdicts_total"], ["module", "rule", "verdict"], registry=registry)
        self.checks = c("heatc_conflict_checks", m["heatc_conflict_checks_total"], ["module"], registry=registry)
        self.conflicts = c("heatc_conflicts", m["heatc_conflicts_total"], ["module", "rule"], registry=registry)
        self.masks = c("heatc_guard_masks", m["heatc_guard_masks_total"], ["module"], registry=registry)
        self.exhausted = c("heatc_guard_exhausted", m["heatc_guard_exhausted_total"], ["module"], registry=registry)


class _FlushBeforeCollect(Collector):
    """Registered before the families: a collection of the registry flushes every Metrics on it."""

    def __init__(self) -> None:
        self.metrics: weakref.WeakSet = weakref.WeakSet()

    def describe(self):
        return []

    def collect(self):
        for m in list(self.metrics):
            m.flush()
        return []


_FAMILIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FAMILIES_LOCK = threading.Lock()


def _families(registry) -> _Families:
    with _FAMILIES_LOCK:
        fam = _FAMILIES.get(registry)
        if fam is None:
            fam = _FAMILIES[registry] = _Families(registry)
        return fam


class _Pending:
    """What was counted since the last flush, per module."""

    __slots__ = ("bytes", "checks", "conflicts", "exhausted", "masks", "reports", "verdicts")

    def __init__(self) -> None:
        self.checks = self.masks = self.exhausted = 0
        self.reports: Tally = Tally()  # (source, action)
        self.bytes: Tally = Tally()  # source
        self.verdicts: Tally = Tally()  # (rule, verdict)
        self.conflicts: Tally = Tally()  # rule


class _Watched:
    """The counters of one batch (or, for `observe_step`, of one module and batch size) and how
    much of them the families already hold. It keeps the counters, not the batch: a batch
    that is gone is flushed one last time, then dropped."""

    __slots__ = ("batch", "counts", "module", "n", "seen")

    def __init__(self, module: str, n: int, counts: StepCounts, batch=None):
        self.module, self.n, self.counts = module, n, counts
        self.batch = weakref.ref(batch) if batch is not None else None
        self.seen = (0, 0, 0)  # steps, text feeds, snapshots

    def take(self) -> tuple[int, int, int, list[float], list[float]]:
        """What was counted since the last take: steps, text feeds, snapshots, and the sampled
        step and text-feed seconds (a list's slice and its deletion are each atomic, and only
        the items read are deleted, so a step appending meanwhile loses nothing)."""
        c = self.counts
        now = (c.steps, c.text_feeds, c.snapshots)
        steps, texts, snaps = (a - b for a, b in zip(now, self.seen, strict=True))
        self.seen = now
        return steps, texts, snaps, _take(c.step_seconds), _take(c.text_seconds)

    def gone(self) -> bool:
        """The batch was collected, closed, or its checker closed: nothing more will come."""
        if self.batch is None:
            return False
        batch = self.batch()
        return batch is None or batch._closed or batch.checker.closed

    def idle(self) -> bool:
        """Nothing counted since the last take (read under the Metrics' lock)."""
        c = self.counts
        return (c.steps, c.text_feeds, c.snapshots) == self.seen and not c.step_seconds and not c.text_seconds


def _take(values: list) -> list:
    k = len(values)
    taken = values[:k]
    del values[:k]
    return taken


def _add_histogram(child, values: np.ndarray) -> None:
    """Observe many values at once (prometheus_client's child keeps per-bucket counts and a sum)."""
    buckets, total = getattr(child, "_buckets", None), getattr(child, "_sum", None)
    if buckets is None or total is None or len(buckets) != len(child._upper_bounds):
        for v in values.tolist():  # (another client layout: one observation at a time)
            child.observe(v)
        return
    counts = np.bincount(np.searchsorted(np.asarray(child._upper_bounds), values, side="left"), minlength=len(buckets))
    for i, n in enumerate(counts.tolist()):
        if n:
            buckets[i].inc(n)
    total.inc(float(values.sum()))


class Metrics:
    """The metrics a serving process reports into (module docstring)."""

    def __init__(
        self,
        registry=None,
        *,
        policy: Policy | None = None,
        max_rule_labels: int = 1000,
        max_module_labels: int = 100,
        flush_interval_s: float = 1.0,
        sample_every: int = SAMPLE_EVERY,
    ):
        _require_prometheus()
        StepCounts().sample(sample_every)  # (refused here, with the reason, rather than at the first batch)
        whole_number(max_rule_labels, "max_rule_labels")
        whole_number(max_module_labels, "max_module_labels")
        if not (
            isinstance(flush_interval_s, (int, float)) and math.isfinite(flush_interval_s) and flush_interval_s >= 0
        ):
            raise ValueError(f"flush_interval_s must be a finite number of seconds, got {flush_interval_s!r}")
        self.sample_every = sample_every
        self.registry = prom.REGISTRY if registry is None else registry
        # an override: None, each module's own cut-offs (its manifest's `policy`), else Policy()
        self.policy: Policy | None = policy
        self.max_rule_labels = max_rule_labels
        self.max_module_labels = max_module_labels
        self.flush_interval_s = flush_interval_s
        self._fam = _families(self.registry)
        self._fam.flusher.metrics.add(self)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._watched: list[_Watched] = []
        self._hooks: dict[tuple[str, int], _Watched] = {}
        self._rules: set[str] = set()
        self._modules: set[str] = set()
        self._next_flush = time.perf_counter() + flush_interval_s
        self._default_module = ""
        atexit.register(_flush_at_exit, weakref.ref(self))

    # -- hooks: what the Checker, the batch and the engine adapters call ------------------

    def _at(self, module: str | None) -> _Pending:
        """(under the lock)"""
        name = self._module_label(self._default_module if module is None else module)
        p = self._pending.get(name)
        if p is None:
            p = self._pending[name] = _Pending()
        return p

    def _hook(self, module: str | None, n: int) -> StepCounts:
        """(under the lock: flush drops idle hooks under it too)"""
        key = (self._module_label(self._default_module if module is None else module), n)
        w = self._hooks.get(key)
        if w is None:
            w = self._hooks[key] = _Watched(*key, StepCounts())
            self._watched.append(w)
        return w.counts

    def observe_step(self, batch_size: int, seconds: float, module: str | None = None) -> None:
        """One batch step of `batch_size` sequences took `seconds`, for a host that steps
        without a `Batch` of an attached checker (whose steps are counted by the batch):
        every step given here is observed."""
        batch_size, seconds = whole_number(batch_size, "batch_size", 1), duration(seconds)
        module_name(module)
        with self._lock:  # (hosts may report from several threads; a batch's own counts have its lock)
            counts = self._hook(module, batch_size)
            counts.step_seconds.append(seconds)
            counts.steps += 1
        self._tick()

    def count_snapshots(self, n: int, module: str | None = None) -> None:
        """`n` snapshots published by triggers (not a sequence's final snapshot), for a host
        that steps without a `Batch` of an attached checker."""
        n = whole_number(n, "n")
        module_name(module)
        if n:
            with self._lock:
                self._hook(module, 0).snapshots += n

    def _tick(self) -> None:
        """A sampled step: bring the families up to date if the interval is over."""
        if time.perf_counter() > self._next_flush:
            self.flush()

    def count_report(self, report: AuditReport, source: str = "stream") -> None:
        """A response checked to the end: its action, bytes and the verdicts of its triggered rules."""
        if not isinstance(report, AuditReport):
            raise TypeError(f"count_report takes an AuditReport (report.audit()), not {type(report).__name__}")
        rules = [(r.name, r.verdict) for r in report.triggered]
        self._count(report.module.name, source, report.action, report.text_bytes, rules)

    def count_verdicts(
        self,
        module: ModuleInfo,
        verdicts,
        events: Iterable[Event],
        n_bytes: int,
        source: str = "scan",
    ) -> None:
        """`count_report` of the report these would make (audit.audit_report), without building it."""
        rules = [(name, v) for name, v, _, _ in triggered_rules(verdicts, events)]
        action = self.policy_for(module).action(confidence(verdicts, module.heat))
        self._count(module.name, source, action, n_bytes, rules)

    def policy_for(self, module: ModuleInfo) -> Policy:
        """The policy a report of `module` is given an action by: this Metrics' `policy` when it
        was given one, else the rule set's own (`policy pass P confirm C`, a tuned heatmap's
        `policy:`), else `Policy()` — what `audit_report` does."""
        return self.policy or module.policy or Policy()

    def _count(self, module: str, source: str, action: str, n_bytes: int, rules) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
        n_bytes = whole_number(n_bytes, "n_bytes")
        with self._lock:
            p = self._at(module)
            p.reports[(source, action)] += 1
            p.bytes[source] += n_bytes
            for name, verdict in rules:
                p.verdicts[(self._rule_label(name), verdict.name)] += 1
        self.flush()

    def count_conflicts(self, report, module: str | None = None) -> None:
        """A chunk list checked (`conflicts.ConflictReport`), and the conflicts it holds."""
        with self._lock:
            p = self._at(report.module.name if module is None else module)
            p.checks += 1
            for c in report.conflicts:
                p.conflicts[self._rule_label(c.rule)] += 1
        self.flush()

    def count_guard_masks(self, n: int, exhausted: bool = False, module: str | None = None) -> None:
        """Guard masked `n` candidates at one step (`exhausted`: none of the top k passed)."""
        n = whole_number(n, "n")
        if not isinstance(exhausted, (bool, np.bool_)):
            raise TypeError(f"exhausted must be a bool, got {type(exhausted).__name__}")
        module_name(module)
        with self._lock:
            p = self._at(module)
            p.masks += n
            p.exhausted += bool(exhausted)

    def _rule_label(self, name: str) -> str:
        return _bounded(self._rules, name, self.max_rule_labels)

    def _module_label(self, name: str) -> str:
        return _bounded(self._modules, name, self.max_module_labels)

    # -- bringing the families up to date -----------------------------------------------

    def flush(self) -> None:
        """Add everything counted since the last flush to the metric families."""
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
                self._next_flush = time.perf_counter() + self.flush_interval_s
            f = self._fam
            for w in list(self._watched):
                gone = w.gone()  # (before taking: a batch that goes meanwhile is taken once more)
                steps, texts, snaps, step_s, text_s = w.take()
                if w.batch is None and not (steps or texts or snaps or step_s or text_s):
                    with self._lock:  # (an idle hook of observe_step: made again at its next report)
                        if w.idle():
                            del self._hooks[(w.module, w.n)]
                            self._watched.remove(w)
                    continue
                if steps or texts:
                    f.tokens.labels(w.module).inc(steps * w.n + texts)
                for seconds, n in ((step_s, w.n), (text_s, 1)):  # (a text feed: one sequence, one token)
                    if seconds:
                        values = np.asarray(seconds, np.float64)
                        _add_histogram(f.step.labels(w.module), values)
                        _add_histogram(f.step_token.labels(w.module), values / max(n, 1))
                if snaps:
                    f.snapshots.labels(w.module).inc(snaps)
                if gone:
                    with self._lock:
                        self._watched.remove(w)
            for module, p in pending.items():
                for counter, n in ((f.checks, p.checks), (f.masks, p.masks), (f.exhausted, p.exhausted)):
                    if n:
                        counter.labels(module).inc(n)
                for (source, action), n in p.reports.items():
                    f.reports.labels(module, source, action).inc(n)
                for source, n in p.bytes.items():
                    f.bytes.labels(module, source).inc(n)
                for (rule, verdict), n in p.verdicts.items():
                    f.verdicts.labels(module, rule, verdict).inc(n)
                for rule, n in p.conflicts.items():
                    f.conflicts.labels(module, rule).inc(n)

    # -- instrumenting a checker ----------------------------------------------------------

    def attach(self, checker):
        """Report `checker`'s scans, conflict checks and batches (made after this) here; returns it."""
        from .backends.checker import Checker

        if not isinstance(checker, Checker):
            raise TypeError(f"attach() takes a Checker (heatc_runtime.load), not {type(checker).__name__}")
        module = checker.module_info
        name = module.name
        if not self._default_module:
            self._default_module = name
        metrics = self
        cls = type(checker)  # (the class's methods: attaching again replaces, never stacks, the wrappers)

        def scan(text):
            report = cls.scan(checker, text)
            metrics.count_verdicts(module, report.verdicts, report.events, report.counters["bytes"], "scan")
            return report

        def conflicts(chunks):
            report = cls.conflicts(checker, chunks)
            metrics.count_conflicts(report, name)
            return report

        def batch(n):
            return metrics._instrument_batch(cls.batch(checker, n), name)

        checker.scan, checker.conflicts, checker.batch = scan, conflicts, batch
        return checker

    def _instrument_batch(self, batch, module: str):
        """Watch `batch`'s counters and have it time one step in `sample_every`."""
        batch.counts.sample(self.sample_every, self._tick)
        with self._lock:
            w = _Watched(self._module_label(module), batch.n, batch.counts, batch)
            w.seen = (batch.counts.steps, batch.counts.text_feeds, batch.counts.snapshots)
            self._watched.append(w)
        return batch


def _bounded(seen: set[str], name: str, limit: int) -> str:
    """`name` as a label value, or OTHER_RULE once `limit` names are in use."""
    if name in seen:
        return name
    if len(seen) >= limit:
        return OTHER_RULE
    seen.add(name)
    return name


def _flush_at_exit(ref) -> None:
    m = ref()
    if m is not None:
        m.flush()
