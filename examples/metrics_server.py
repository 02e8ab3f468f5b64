"""Serve heatc's Prometheus metrics on localhost while checking text (docs/metrics.md).

    python examples/metrics_server.py build/legal --port 9464 < answers.txt
    curl -s localhost:9464/metrics | grep heatc_

Each input line is one response: streamed through a batch token by token (one byte-level
token per UTF-8 character, as a decode loop would feed it), its audit report built from the
snapshots as an engine adapter builds it, and the action printed. The server keeps running
after the input ends until interrupted. With PROMETHEUS_MULTIPROC_DIR set, the endpoint
serves the values every process wrote there (a vLLM worker's, for one) instead of this
process's registry.

`start(registry, port, host)` is the endpoint alone, for embedding (and for the test that
scrapes it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from prometheus_client import REGISTRY, start_http_server

import heatc_runtime
from heatc_runtime.metrics import Metrics, multiprocess_registry
from heatc_runtime.reports.audit import audit_snapshots


def start(registry=None, port: int = 9464, host: str = "127.0.0.1"):
    """Serve `registry` (default: the global one) at http://host:port/metrics; returns
    (server, port) — port 0 picks a free one."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY if registry is None else registry)
    return server, server.server_port


def characters(text: str) -> list[bytes]:
    return [ch.encode("utf-8") for ch in text]


def check_streamed(checker, batch, metrics: Metrics, text: str):
    """Feed `text` through sequence 0 of `batch` one token at a time; report it like an adapter."""
    table = {tok: i for i, tok in enumerate(checker.token_table)}
    batch.reset()
    snapshots = []
    for tok in characters(text):
        snapshots += batch.feed_ids([table[tok]]).get(0, [])
    snapshots += batch.finish().get(0, [])
    report = audit_snapshots(checker.module_info, text, snapshots, metrics.policy)
    metrics.count_report(report, "stream")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="a build or module directory (heatc build)")
    parser.add_argument("--port", type=int, default=9464)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    try:
        checker = heatc_runtime.load(args.module)
    except heatc_runtime.ModuleError as e:
        print(f"{args.module}: error: {e}", file=sys.stderr)
        return 1
    metrics = Metrics()
    metrics.attach(checker)
    serving = multiprocess_registry() if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else None
    _, port = start(serving, args.port, args.host)
    print(f"serving http://{args.host}:{port}/metrics", file=sys.stderr)
    lines = sys.stdin.read().splitlines()
    # one token per character of the input: a byte-level table a model's tokenizer would replace
    checker.set_token_table(sorted({tok for line in lines for tok in characters(line)}) or [b""])
    batch = checker.batch(1)
    for line in lines:
        report = check_streamed(checker, batch, metrics, line)
        print(f"{report.action:8} {report.confidence:.2f} {report.verdict.name:9} {line[:60]}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
