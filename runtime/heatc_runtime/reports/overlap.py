"""A whole-document scan whose event records are used while it goes on.

wasmtime (and the native core) release the interpreter lock while a module runs: with the
scan in a thread, this one can decode or write each run of records the scan drains, so on a
second core a large document's events cost little wall time beyond the scan's (32 MB of
clinical notes: 92,000 events, about as long to decode as the scan takes).

Public surface: `scan_overlapped(checker, text, consume) -> (Report, seconds)`,
`scan_decoded(checker, text) -> (Report, seconds)`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from ..args import as_bytes
from .report import Report


def scan_overlapped(checker, text, consume: Callable[[bytes], None]) -> tuple[Report, float]:
    """`checker.scan(text)` in a thread, `consume(run)` called here with each run of event
    records as the scan drains it, in order: (the report, the scan's seconds). What the scan
    raises is raised here; what `consume` raises is raised after the scan (as a malformed
    record is when a report's events are read), and no run is given to it after."""
    data = as_bytes(text, "text")
    runs: queue.SimpleQueue = queue.SimpleQueue()
    done: dict = {}

    def scan() -> None:
        t0 = time.perf_counter()
        try:
            done["report"] = checker.scan(data, on_records=runs.put)
        except BaseException as e:  # (raised in the caller's thread below)
            done["error"] = e
        done["seconds"] = time.perf_counter() - t0
        runs.put(None)

    thread = threading.Thread(target=scan, name="heatc-scan", daemon=True)
    thread.start()
    failed: Exception | None = None
    while (run := runs.get()) is not None:
        if failed is None:
            try:
                consume(run)
            except Exception as e:
                failed = e
    thread.join()
    if "error" in done:
        raise done["error"]
    if failed is not None:
        raise failed
    return done["report"], done["seconds"]


def scan_decoded(checker, text) -> tuple[Report, float]:
    """`checker.scan(text)` with its events decoded while it goes on (`Report.events` then
    costs nothing more): (the report, the scan's seconds)."""
    decoder = checker._decoder
    events: list = []

    def decode(run: bytes) -> None:
        events.extend(decoder.scan_events([run]))

    report, seconds = scan_overlapped(checker, text, decode)
    return Report(report.verdicts, events, report.counters, report._source, report._runs), seconds
