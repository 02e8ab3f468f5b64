"""A Prometheus scrape of `heatc_runtime.metrics` (docs/metrics.md), read for the counts of each
rule: a file in the text exposition format, or a URL on this machine (`http://localhost:8000/metrics`).

`heatc_verdicts_total{module, rule, verdict}` counts, per rule, the responses in which it
triggered (matched, or ended not CONFIRMED); `heatc_reports_total{module, source, action}` the
responses checked. Both count every response the process checked since it started, where the
audit reports a team keeps may be a sample. The scrape names its module by name only (no build
identity): a module of another name is an error, and counts under `rule="_other"` (past the
metrics' `max_rule_labels`) or of rules the heatmap does not have are listed, not used.

The text format is parsed here (every line checked, an error names its line), so that a
truncated or foreign scrape is refused rather than half read.

Public surface: `Scrape`, `read_scrape(source, module_name)`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from heatc.errors import Diagnostic, HeatError

MAX_SCRAPE_BYTES = 64 << 20
TIMEOUT_S = 10.0
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Scrape:
    source: str
    sha256: str
    rule_counts: Counter = field(default_factory=Counter)  # rule → responses in which it triggered
    reports: int = 0  # responses checked (heatc_reports_total, all sources and actions)
    other: int = 0  # counts under rule="_other"
    modules: list[str] = field(default_factory=list)  # every module the scrape names


def _fetch(source: str) -> bytes:
    url = urllib.parse.urlsplit(source)
    host = url.hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if url.scheme not in ("http", "https") or not local:
        raise HeatError(
            Diagnostic(source, 0, 0, "a metrics URL must be http(s) on this machine (localhost, 127.0.0.1, [::1])")
        )
    try:
        with urllib.request.urlopen(source, timeout=TIMEOUT_S) as response:  # (the scheme and host are checked above)
            data = response.read(MAX_SCRAPE_BYTES + 1)
    except OSError as e:
        raise HeatError(Diagnostic(source, 0, 0, f"cannot scrape: {getattr(e, 'reason', e)}")) from None
    if len(data) > MAX_SCRAPE_BYTES:
        raise HeatError(Diagnostic(source, 0, 0, f"the scrape is larger than {MAX_SCRAPE_BYTES:,} bytes"))
    return data


def _read(source: str) -> bytes:
    if "://" in source:
        return _fetch(source)
    path = Path(source)
    if not path.is_file():
        raise HeatError(
            Diagnostic(source, 0, 0, "cannot read: " + ("not a regular file" if path.exists() else "no such file"))
        )
    if path.stat().st_size > MAX_SCRAPE_BYTES:
        raise HeatError(Diagnostic(source, 0, 0, f"the scrape is larger than {MAX_SCRAPE_BYTES:,} bytes"))
    return path.read_bytes()


def _labels(text: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            return None
        out[m.group(1)] = re.sub(r"\\.", lambda e: _UNESCAPE.get(e.group(0), e.group(0)), m.group(2))
        pos = m.end()
    return out


def read_scrape(source: str, module_name: str) -> Scrape:
    data = _read(source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeatError(Diagnostic(source, 0, 0, f"not a Prometheus scrape: not UTF-8 (byte {e.start + 1})")) from None
    out = Scrape(source, hashlib.sha256(data).hexdigest())
    modules: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        labels = _labels(m.group(2) or "") if m else None
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if m is None or labels is None or value is None:
            raise HeatError(Diagnostic(source, number, 1, "not a sample of the Prometheus text format: " + line[:80]))
        name = m.group(1)
        if name not in ("heatc_verdicts_total", "heatc_reports_total"):
            continue
        if "module" in labels:
            modules.add(labels["module"])
        if labels.get("module") != module_name:
            continue
        if value < 0 or value != int(value):
            raise HeatError(
                Diagnostic(source, number, 1, f"{name}: a counter of responses is a whole number, got {value:g}")
            )
        if name == "heatc_reports_total":
            out.reports += int(value)
        elif "rule" not in labels:
            raise HeatError(Diagnostic(source, number, 1, "heatc_verdicts_total without a rule label"))
        elif labels["rule"] == "_other":
            out.other += int(value)
        else:
            out.rule_counts[labels["rule"]] += int(value)
    out.modules = sorted(modules)
    if module_name not in modules:
        seen = ", ".join(out.modules) if out.modules else "none: is it a scrape of heatc_runtime.metrics?"
        raise HeatError(
            Diagnostic(source, 0, 0, f"the scrape counts no module {module_name!r} (modules in it: {seen})")
        )
    return out
