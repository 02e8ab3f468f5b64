"""Prometheus metrics for a serving process (docs/metrics.md): what the rules stepped, how
often they triggered, what they found, what guard masked, and what a step costs.

`Metrics(registry)` owns the metric families on a registry (default: prometheus_client's
global one) and takes reports from the Checker, its batches and the engine adapters.
`metrics.attach(checker)` instruments one checker: its `scan` and `conflicts`, and every
`batch()` made after it (`feed_ids`, `feed_text`, `snapshot`, `finish`), by wrapping those
methods on the instance — an unattached checker runs exactly the code it ran before. An
engine adapter that steps batches of an attached checker only adds what the batch cannot
see: `count_report(audit)` when a sequence ends and `count_guard_masks(n)` in guard mode.

Cost: a decoding step takes microseconds and one prometheus_client `observe` about as long,
so a step only reads the clock twice and appends to a list (no lock: see `_Recorder`); the metric families are brought up to
date (`flush()`) at most every `flush_interval_s` while stepping, at every report, at exit,
and — in-process — right before every collection of the registry, so a scrape always sees
every step and report made before it. In prometheus_client's multiprocess mode (a vLLM
worker: `PROMETHEUS_MULTIPROC_DIR` set before prometheus_client is imported) the values go
to the worker's files at each flush; the server process reads them with a
`MultiProcessCollector` (`multiprocess_registry()`), so a scrape lags a busy worker by at
most `flush_interval_s`, and an idle one not at all.

Label cardinality: `module` takes the names of the modules attached (a process loads a
handful); `rule` takes a module's rule names, bounded by `max_rule_labels` (default 1000)
distinct names per Metrics object, after which further rules count under rule="_other";
`verdict`, `action` and `source` take the fixed values of `VERDICTS`, audit.ACTIONS and
`SOURCES`.

Public surface: `Metrics`, `METRICS` (name → help), `SOURCES`, `STEP_BUCKETS`,
`multiprocess_registry()`.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import Counter as Tally
from collections.abc import Iterable

import numpy as np

from .audit import AuditReport, ModuleInfo, Policy, confidence, triggered_rules
from .report import Event, Verdict

try:
    import prometheus_client as prom
    from prometheus_client.registry import Collector
except ModuleNotFoundError:  # pragma: no cover - exercised only without the extra
    prom = None
    Collector = object

SOURCES = ("scan", "stream")
VERDICTS = tuple(v.name for v in Verdict)
OTHER_RULE = "_other"
#: Step latency buckets, in seconds: a step takes microseconds (batch 1) to milliseconds.
STEP_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 0.1, 1.0)
METRICS = {
    "heatc_tokens_total": "Sequence-tokens stepped through the rules (a batch step of B sequences adds B).",
    "heatc_snapshots_total": "Snapshots published by triggers while stepping (not the final snapshot of a sequence).",
    "heatc_step_seconds": "Wall time of one batch step: one runtime call for the whole batch.",
    "heatc_step_token_seconds": "Wall time of one batch step divided by its batch size (one observation per step).",
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


class _Recorder:
    """The steps of one batch (or of one module and batch size, for `observe_step`): appended to
    without a lock — a list's append and a slice's deletion are each atomic, and a flush takes
    only the items it counted — so that a step pays two clock reads and one append."""

    __slots__ = ("batch", "module", "n", "seconds", "snapshots")

    def __init__(self, module: str, n: int, batch=None):
        self.module, self.n = module, n
        self.batch = weakref.ref(batch) if batch is not None else None
        self.seconds: list[float] = []
        self.snapshots: list[int] = []

    @staticmethod
    def take(values: list) -> list:
        k = len(values)
        taken = values[:k]
        del values[:k]
        return taken

    def done(self) -> bool:
        """Its batch is gone and everything it recorded was flushed."""
        return self.batch is not None and self.batch() is None and not self.seconds and not self.snapshots


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
        flush_interval_s: float = 1.0,
    ):
        _require_prometheus()
        self.registry = prom.REGISTRY if registry is None else registry
        self.policy = policy or Policy()
        self.max_rule_labels = max_rule_labels
        self.flush_interval_s = flush_interval_s
        self._fam = _families(self.registry)
        self._fam.flusher.metrics.add(self)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._recorders: list[_Recorder] = []
        self._hook_recorders: dict[tuple[str, int], _Recorder] = {}
        self._rules: set[str] = set()
        self._next_flush = time.perf_counter() + flush_interval_s
        self._default_module = ""
        atexit.register(_flush_at_exit, weakref.ref(self))

    # -- hooks: what the Checker, the batch and the engine adapters call ------------------

    def _at(self, module: str | None) -> _Pending:
        name = self._default_module if module is None else module
        p = self._pending.get(name)
        if p is None:
            p = self._pending[name] = _Pending()
        return p

    def _recorder(self, module: str | None, n: int) -> _Recorder:
        key = (self._default_module if module is None else module, n)
        rec = self._hook_recorders.get(key)
        if rec is None:
            with self._lock:
                rec = self._hook_recorders.setdefault(key, _Recorder(*key))
                if rec not in self._recorders:
                    self._recorders.append(rec)
        return rec

    def observe_step(self, batch_size: int, seconds: float, module: str | None = None) -> None:
        """One batch step of `batch_size` sequences took `seconds` (a batch of an attached
        checker reports its own steps)."""
        self._recorder(module, batch_size).seconds.append(seconds)
        if time.perf_counter() > self._next_flush:
            self.flush()

    def count_snapshots(self, n: int, module: str | None = None) -> None:
        """`n` snapshots published by triggers (not a sequence's final snapshot)."""
        if n:
            self._recorder(module, 0).snapshots.append(n)

    def count_report(self, report: AuditReport, source: str = "stream") -> None:
        """A response checked to the end: its action, bytes and the verdicts of its triggered rules."""
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
        self._count(module.name, source, self.policy.action(confidence(verdicts, module.heat)), n_bytes, rules)

    def _count(self, module: str, source: str, action: str, n_bytes: int, rules) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
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
        with self._lock:
            p = self._at(module)
            p.masks += n
            p.exhausted += bool(exhausted)

    def _rule_label(self, name: str) -> str:
        if name in self._rules:
            return name
        if len(self._rules) >= self.max_rule_labels:
            return OTHER_RULE
        self._rules.add(name)
        return name

    # -- bringing the families up to date -----------------------------------------------

    def flush(self) -> None:
        """Add everything counted since the last flush to the metric families."""
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, {}
                self._next_flush = time.perf_counter() + self.flush_interval_s
            f = self._fam
            for rec in list(self._recorders):
                seconds = np.asarray(rec.take(rec.seconds), np.float64)
                if len(seconds):
                    f.tokens.labels(rec.module).inc(len(seconds) * rec.n)
                    _add_histogram(f.step.labels(rec.module), seconds)
                    _add_histogram(f.step_token.labels(rec.module), seconds / max(rec.n, 1))
                snapshots = sum(rec.take(rec.snapshots))
                if snapshots:
                    f.snapshots.labels(rec.module).inc(snapshots)
                if rec.done():
                    with self._lock:
                        self._recorders.remove(rec)
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
        from .checker import Checker

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
        cls = type(batch)
        clock = time.perf_counter
        metrics = self
        rec = _Recorder(module, batch.n, batch)
        single = _Recorder(module, 1, batch)  # feed_text: one sequence, one token
        with self._lock:
            self._recorders += (rec, single)
        seconds, snapshots = rec.seconds, rec.snapshots
        step, feed = cls.feed_ids, cls.feed_text

        def triggers(out) -> int:
            return sum(1 for snaps in out.values() for s in snaps if not s.final)

        def feed_ids(ids):
            t0 = clock()
            out = step(batch, ids)
            t1 = clock()
            seconds.append(t1 - t0)
            if out:
                snapshots.append(triggers(out))
            if t1 > metrics._next_flush:
                metrics.flush()
            return out

        def feed_text(i, text):
            t0 = clock()
            snaps = feed(batch, i, text)
            single.seconds.append(clock() - t0)
            single.snapshots.append(sum(1 for s in snaps if not s.final))
            return snaps

        def publishing(method):
            def call(*args, **kwargs):
                out = method(batch, *args, **kwargs)
                snapshots.append(triggers(out))
                return out

            return call

        batch.feed_ids, batch.feed_text = feed_ids, feed_text
        batch.snapshot, batch.finish = publishing(cls.snapshot), publishing(cls.finish)
        return batch


def _flush_at_exit(ref) -> None:
    m = ref()
    if m is not None:
        m.flush()
