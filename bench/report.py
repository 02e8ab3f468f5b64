"""The tables of docs/performance.md, written from benchmark results.

Each table sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`. A benchmark run
with `--markdown PATH` (bench/run.py: scan, steps; bench/build_time.py: build;
bench/learn_fidelity.py: fidelity, cost; bench/learn_usefulness.py: usefulness) rewrites
the sections it measured and leaves the rest of the page, the prose around them, alone.

Public surface: `update(path, sections)`, `replace_sections(text, sections)`, `MarkerError`,
`provenance`, `scan_section`, `step_section`, `build_section`, `fidelity_section`,
`cost_section`, `usefulness_section`.
"""

from __future__ import annotations

import datetime
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

SCAN_CORPORA = {"medical": "medical (MTSamples)", "legal": "legal (CUAD)", "finance": "finance (PBOC, TAT-QA)"}
# the learned heatmaps' rows: the same corpora through heatmaps/<domain>.yaml
SCAN_CORPORA |= {f"{k} learned": f"{v}, `heatmaps/{k}.yaml`" for k, v in SCAN_CORPORA.items()}
HYPERSCAN = "hyperscan (no callback)"
# bench/run.py's row keys and the page's column titles, in column order
SCAN_COLUMNS = {
    "heatc wasm": "heatc wasm",
    "heatc wasm trusted": "heatc wasm, trusted",
    "heatc wasm + events read": "heatc wasm + events read",
    "reference": "reference interpreter",
    "python re": "Python `re`",
    "pyahocorasick + re": "pyahocorasick + `re`",
    HYPERSCAN: HYPERSCAN,
}
PEERS = ("reference", "python re", "pyahocorasick + re", HYPERSCAN)
STEP_TARGETS = {1: 2.0, 64: 0.25}  # µs per sequence-token at these batch sizes
STEP_GROWTH = 0.10  # context 4,096 within this share of 512
BUILD_TARGETS = {1000: 2.0, 10000: 20.0}  # seconds
FIDELITY_TARGET = 0.90
STUDENT_SPEEDUP_TARGET = 50
CAPTUM_TARGET = 10
USEFUL_RECALL, USEFUL_FA = 0.9, 0.01  # bench/learn_usefulness.py's targets


class MarkerError(ValueError):
    """The page lacks a section's markers, or has them twice or out of order."""


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"


def replace_sections(text: str, sections: Mapping[str, str]) -> str:
    """`text` with the body of each named section replaced; everything else is kept."""
    for name, body in sections.items():
        start, end = _markers(name)
        if text.count(start) != 1 or text.count(end) != 1:
            raise MarkerError(
                f"needs exactly one {start} and one {end} (found {text.count(start)} and {text.count(end)})"
            )
        a, b = text.index(start) + len(start), text.index(end)
        if a > b:
            raise MarkerError(f"{end} comes before {start}")
        text = text[:a] + "\n" + body.strip("\n") + "\n" + text[b:]
    return text


def update(path: str | Path, sections: Mapping[str, str]) -> None:
    """Rewrite the sections of the page at `path`, atomically: a failure leaves it as it was."""
    path = Path(path)
    try:
        text = replace_sections(path.read_text(encoding="utf-8"), sections)
    except MarkerError as e:
        raise MarkerError(f"{path}: {e}") from None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def provenance(command: str, machine: str, when: datetime.date | str | None = None, note: str = "") -> str:
    when = when or datetime.date.today()
    return f"Measured {when} with `{command}` on {machine}{note}."


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _mbs(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _ratio(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.0f}" if x >= 10 else f"{x:.2f}"


def _span(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{_ratio(lo)}×" if _ratio(lo) == _ratio(hi) else f"{_ratio(lo)}–{_ratio(hi)}×"


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def scan_section(rows: Sequence[Mapping], machine: str, when=None, command: str = "python bench/run.py") -> str:
    """bench/run.py's scan rows: MB/s per tool and corpus, the ratios to each peer, the target."""
    header = ["corpus", "MB", *SCAN_COLUMNS.values()]
    body = [
        [SCAN_CORPORA.get(r["corpus"], r["corpus"]), f"{r['MB']:.1f}", *(_mbs(r.get(k)) for k in SCAN_COLUMNS)]
        for r in rows
    ]
    out = [provenance(command, machine, when), "", _table(header, body), ""]
    ratios = [
        f"{_span([r['heatc wasm'] / r[p] for r in rows])} {SCAN_COLUMNS[p]}"
        for p in PEERS
        if rows and all(r.get(p) for r in rows)
    ]
    if ratios:
        out.append("heatc wasm (default limits) / peer: " + ", ".join(ratios) + ".")
    if rows and all(r.get(HYPERSCAN) for r in rows):
        trusted = _span([r["heatc wasm trusted"] / r[HYPERSCAN] for r in rows])
        events = _span([r["heatc wasm + events read"] / r[HYPERSCAN] for r in rows])
        out.append(f"Trusted / hyperscan: {trusted}; default limits with every event read / hyperscan: {events}.")
        verdicts = []
        for key, how in (("heatc wasm", "default limits"), ("heatc wasm trusted", "trusted")):
            below = [
                f"{SCAN_CORPORA.get(r['corpus'], r['corpus'])} {_ratio(r[key] / r[HYPERSCAN])}×"
                for r in rows
                if r[key] < r[HYPERSCAN]
            ]
            verdicts.append(f"{how} {_met(not below)}" + (f" ({'; '.join(below)})" if below else ""))
        out.append("Target, at least hyperscan's MB/s on every corpus: " + ", ".join(verdicts) + ".")
    return "\n".join(out)


def _step_misses(by: Mapping[tuple[int, int], float]) -> list[str]:
    """What misses the step targets, from µs per (context, batch)."""
    misses = [
        f"{v:.2f} µs at batch {b}, context {c:,}"
        for (c, b), v in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        if b in STEP_TARGETS and v > STEP_TARGETS[b]
    ]
    for b in sorted({b for _, b in by}):
        if (512, b) in by and (4096, b) in by:
            growth = by[4096, b] / by[512, b] - 1
            if growth > STEP_GROWTH:
                misses.append(f"context 4,096 {growth:+.0%} of 512 at batch {b}")
    return misses


def step_section(rows: Sequence[Mapping], machine: str, when=None, command: str = "python bench/run.py") -> str:
    """bench/run.py's step rows: µs per sequence-token by context and batch, and the targets."""
    header = [
        "context", "batch", "`step_batch` (the wasm call)", "`Batch.feed_ids` (Python API, with objects)",
        "`re` over the whole text", "xgrammar `accept_token`",
    ]  # fmt: skip
    body = [
        [
            f"{r['context']:,}",
            str(r["batch"]),
            f"{r['heatc_raw']:.3f}",
            f"{r['heatc']:.2f}",
            f"{r['re']:,.0f}",
            "—" if r.get("xgrammar") is None else f"{r['xgrammar']:.2f}",
        ]
        for r in rows
    ]
    vocab = {r["vocab"] for r in rows if "vocab" in r}
    what = f"; medical rules, a {vocab.pop():,}-token vocabulary" if len(vocab) == 1 else ""
    out = [provenance(command, machine, when, what), "", _table(header, body), ""]
    verdicts = []
    for key, label in (("heatc_raw", "`step_batch`"), ("heatc", "`feed_ids`")):
        misses = _step_misses({(r["context"], r["batch"]): r[key] for r in rows})
        verdicts.append(f"{label} " + (f"NOT met ({'; '.join(misses)})" if misses else "met"))
    out.append(
        "Targets (≤ 2 µs at batch 1, ≤ 0.25 µs at batch 64, context 4,096 within 10 % of 512): "
        + ", ".join(verdicts)
        + "."
    )
    return "\n".join(out)


def build_section(
    times: Mapping[int, float], machine: str, when=None, command: str = "python bench/build_time.py"
) -> str:
    """bench/build_time.py's seconds per generated heatmap size, growth and targets."""
    sizes = sorted(times)
    body = []
    for i, n in enumerate(sizes):
        t = times[n]
        growth = "" if i == 0 else f"×{t / times[sizes[i - 1]]:.1f} for ×{n / sizes[i - 1]:.0f} rules"
        target = f"≤ {BUILD_TARGETS[n]:g} s: {_met(t <= BUILD_TARGETS[n])}" if n in BUILD_TARGETS else ""
        body.append([f"{n:,}", f"{t:.2f}" if t < 10 else f"{t:.1f}", growth, target])
    return "\n".join([provenance(command, machine, when), "", _table(["rules", "build (s)", "growth", "target"], body)])


def fidelity_section(
    rows: Mapping[str, Sequence[float]],
    machine: str,
    when=None,
    percentiles: tuple[float, float, int, int] | None = None,
    command: str = "python bench/learn_fidelity.py",
) -> str:
    """Per held-out domain: AUC of [transformer, LSTM, transformer with own embeddings, IDF,
    random]; `percentiles`: mean within-sentence percentile of digit and word tokens, counts."""
    header = ["held out", "transformer student", "LSTM student", "transformer, own embeddings", "IDF", "random"]
    body = [[d, *(f"{v:.3f}" for v in aucs)] for d, aucs in rows.items()]
    means = [statistics.fmean(col) for col in zip(*rows.values(), strict=True)]
    body.append(["mean", f"**{means[0]:.3f}** (target ≥ {FIDELITY_TARGET:.2f})", *(f"{v:.3f}" for v in means[1:])])
    out = [provenance(command, machine, when), "", _table(header, body)]
    if percentiles:
        digits, words, n_digits, n_words = percentiles
        out += [
            "",
            f"Single-token sensitivity, mean within-sentence percentile: digit tokens {digits:.2f}, word tokens "
            f"{words:.2f} ({n_digits:,} and {n_words:,} tokens).",
        ]
    return "\n".join(out)


def cost_section(
    seconds: Mapping[str, float],
    max_diff: float,
    machine: str,
    when=None,
    command: str = "python bench/learn_fidelity.py",
) -> str:
    """CPU seconds per 1,000 tokens, keyed as bench/learn_fidelity.py prints them."""
    teacher = seconds["teacher labelling (Jacobian probes, K=4)"]
    student = seconds["student, onnxruntime"]
    captum = seconds["Captum IntegratedGradients, n_steps=50"]
    body = [[k, f"{v:.3g}"] for k, v in seconds.items()]
    return "\n".join(
        [
            provenance(command, machine, when),
            "",
            _table(["CPU, seconds per 1,000 tokens", ""], body),
            "",
            f"The student is **{teacher / student:.0f}×** faster than teacher labelling (target ≥ "
            f"{STUDENT_SPEEDUP_TARGET}×) and teacher labelling **{captum / teacher:.0f}×** cheaper than Captum IG "
            f"(target ≥ {CAPTUM_TARGET}×); onnxruntime against torch, max |diff| {max_diff:.2g}.",
        ]
    )


def usefulness_section(
    rows: Sequence[tuple[str, Mapping]],
    machine: str,
    when=None,
    command: str = "python bench/learn_usefulness.py --teacher-sentences 400 --alarm-budgets 0.01 --in-sample",
) -> str:
    """bench/learn_usefulness.py's rows (label, result of its `evaluate`): rules, checked
    clean sentences, false alarms per checked sentence, recall on the impossible corruptions
    pooled and per kind, and whether the targets hold."""
    header = ["text", "rules", "checked sentences", "false alarms", "recall", "by corruption"]
    body, verdicts = [], []
    for label, r in rows:
        fa = r["flagged"] / max(r["checked"], 1)
        caught = sum(c for c, _ in r["impossible"].values())
        tried = sum(n for _, n in r["impossible"].values())
        recall = caught / max(tried, 1)
        kinds = ", ".join(f"{k} {c}/{n}" for k, (c, n) in r["impossible"].items())
        body.append([label, str(r["rules"]), f"{r['checked']:,}", f"{fa * 100:.2f} %", f"**{recall:.3f}**", kinds])
        verdicts.append(
            f"{label.split(',')[0]}: false alarms {_met(fa <= USEFUL_FA)}, recall {_met(recall >= USEFUL_RECALL)}"
        )
    return "\n".join(
        [
            provenance(command, machine, when),
            "",
            _table(header, body),
            "",
            f"Target, false alarms ≤ {USEFUL_FA:.0%} of the checked sentences and recall ≥ {USEFUL_RECALL}: "
            + "; ".join(verdicts)
            + ".",
        ]
    )
