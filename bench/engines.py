"""What checking costs inside the decode loop: `python bench/engines.py [--quick] [--json F] [--markdown docs/engines.md]`.

heatc's own cost per decoding step, in µs, with no model — what a served model on a GPU,
whose step is 10–30 ms, pays on top of its step. Each step of a replay is one engine step:
scores of the model's vocabulary (49,152, SmolLM2's; a fixed random draw, the text's next
token on top), the engine's hooks called (transformers: the LogitsProcessor, then the
StoppingCriteria with the token appended; vLLM: `update_state` and `apply`), the next token
the text's. Reported: median, p99 and p99.9 of each step's wall-clock time; for guard also
a torch.topk over the same scores (what a sampler pays), the top-k guard takes itself (its
step includes it: the native core's scan where the extension loads), and heatc's cost
beyond that top-k.
Guard's scores are rewritten before each step; observe reads none, so they are left alone
(`--cold` rewrites them too: what a model's step on the same CPU costs heatc in evicted
caches; a model on a GPU leaves the CPU's caches to heatc).

1. **Budgets** — the shipped medical heatmap (heatmaps/medical.yaml, built for the model's
   tokenizer), clinical notes (MTSamples) replayed, batch 1, 16, 64, 256, observe and guard
   (k = 8, greedy, withhold), on every backend: native, wasm, and the torch ops (`cuda`; on
   a CPU the ops' CPU kernels), through the transformers adapter; native through vLLM's
   processor. Targets (median): observe ≤ 30 µs at batch 1 and ≤ 60 µs at batch 64; guard
   ≤ 100 µs and ≤ 400 µs beyond its top-k; p99.9 ≤ 5 × the median.
2. **Peers** — the same constraint three ways, on one token stream: vitals reports
   ("Glucose 95 mg/dL. Heart rate 72 bpm. …", values drawn in range), each phrase's value
   held to a range: heatc with the shipped heatmap (observe, guard), xgrammar and
   llguidance with a grammar of those phrases whose numbers are range patterns
   (`phrase_grammar`), each doing its per-step work for the whole batch — fill the token
   bitmask, apply it to the scores, accept the token (their batch APIs).

Every row beside its peers comes from one run on this machine (named in the first line).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np
from run import DATA, REPO, machine

BATCHES = (1, 16, 64, 256)
QUICK_BATCHES = (1, 64)
MODES = ("observe", "guard")
K = 8
TARGETS = {("observe", 1): 30.0, ("observe", 64): 60.0, ("guard", 1): 100.0, ("guard", 64): 400.0}
TAIL_FACTOR = 5.0  # p99.9 at most this many times the median
# (name, words before the value, low, high, decimals, words after)
PHRASES = [
    ("glucose", "Glucose", 10, 2000, False, "mg/dL"),
    ("heart rate", "Heart rate", 20, 300, False, "bpm"),
    ("temperature", "Temperature", 20, 45, True, "C"),
    ("respiratory rate", "Respiratory rate", 2, 80, False, "breaths per minute"),
    ("sodium", "Sodium", 95, 200, False, "mmol/L"),
    ("potassium", "Potassium", 1, 10, True, "mmol/L"),
    ("oxygen saturation", "Oxygen saturation", 50, 100, False, "%"),
]


def _steps(batch: int, quick: bool) -> int:
    full = {1: 1500, 16: 600, 64: 300, 256: 120}[batch]
    return max(60, full // 4) if quick else full


# ---- workloads ----------------------------------------------------------------------------


def notes_tokens(tokenizer, notes: int = 400) -> np.ndarray:
    path = DATA / "medical" / "text" / "mtsamples_all4999.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line).get("transcription") or "" for _, line in zip(range(notes), f, strict=False)]
    return np.array(tokenizer("\n".join(texts))["input_ids"], np.int64)


def report_text(rng: np.random.Generator, phrases: int) -> str:
    out = []
    for _ in range(phrases):
        _, words, lo, hi, decimals, unit = PHRASES[rng.integers(len(PHRASES))]
        v = rng.uniform(lo, hi)
        value = f"{v:.1f}" if decimals else str(int(v))
        out.append(f"{words} {value}{unit if unit == '%' else ' ' + unit}")
    return ". ".join(out) + "."


def streams(tokens: np.ndarray, batch: int, length: int, rng: np.random.Generator) -> np.ndarray:
    starts = rng.integers(0, len(tokens) - length - 1, batch)
    return np.stack([tokens[s : s + length] for s in starts])


# ---- the peers' grammar ------------------------------------------------------------------


def _int_range(lo: int, hi: int) -> list[list[str]]:
    """Integers lo..hi (no leading zeros) as sequences of digit classes, one per digit."""
    out: list[list[str]] = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (width - 1) if width > 1 else 0), min(hi, 10**width - 1)
        if a <= b:
            out += _same_width(str(a), str(b))
    return out


def _same_width(a: str, b: str) -> list[list[str]]:
    if len(a) == 1:
        return [[f"[{a}-{b}]" if a != b else a]]
    if a[0] == b[0]:
        return [[a[0], *rest] for rest in _same_width(a[1:], b[1:])]
    out = [[a[0], *rest] for rest in _same_width(a[1:], "9" * (len(a) - 1))]
    if int(a[0]) + 1 <= int(b[0]) - 1:
        lo, hi = int(a[0]) + 1, int(b[0]) - 1
        out.append([f"[{lo}-{hi}]" if lo != hi else str(lo)] + ["[0-9]"] * (len(a) - 1))
    out += [[b[0], *rest] for rest in _same_width("0" * (len(a) - 1), b[1:])]
    return out


def phrase_grammar(kind: str) -> str:
    """The vitals report as a grammar: phrases "Words VALUE unit" joined by ". ", each VALUE a
    pattern of the numbers in the phrase's range (one decimal where the phrase has one) — in
    llguidance's Lark (`kind="lark"`) or xgrammar's EBNF (`"ebnf"`)."""
    rules, alts = [], []
    for i, (_, words, lo, hi, decimals, unit) in enumerate(PHRASES):
        ints = _int_range(lo, hi - 1 if decimals else hi)
        after = unit if unit == "%" else f" {unit}"
        if kind == "lark":
            pattern = "|".join("".join(seq) for seq in ints)
            dec = r"(\.[0-9])?" if decimals else ""
            top = rf"|{hi}(\.0)?" if decimals else ""
            rules.append(f"V{i}: /({pattern}){dec}{top}/")
            alts.append(f'"{words} " V{i} "{after}"')
        else:
            seqs = " | ".join("(" + " ".join(f'"{c}"' if c.isdigit() else c for c in seq) + ")" for seq in ints)
            dec = ' ("." [0-9])?' if decimals else ""
            top = f' | "{hi}" (".0")?' if decimals else ""
            rules.append(f"v{i} ::= ({seqs}){dec}{top}")
            alts.append(f'"{words} " v{i} "{after}"')
    if kind == "lark":
        return 'start: phrase (". " phrase)* "."?\nphrase: ' + " | ".join(alts) + "\n" + "\n".join(rules) + "\n"
    return 'root ::= phrase (". " phrase)* "."?\nphrase ::= ' + " | ".join(alts) + "\n" + "\n".join(rules) + "\n"


# ---- timing -------------------------------------------------------------------------------


def _stats(ns: list[int]) -> dict:
    us = np.array(ns, np.float64) / 1e3
    return {"p50": float(np.median(us)), "p99": float(np.percentile(us, 99)), "p999": float(np.percentile(us, 99.9)),
            "n": len(us)}  # fmt: skip


class Scores:
    """Each step's scores: a fixed random draw per row, the text's next token on top."""

    def __init__(self, batch: int, vocab: int, seed: int = 0):
        import torch

        g = torch.Generator().manual_seed(seed)
        self.base = torch.randn(batch, vocab, generator=g)
        self.now = self.base.clone()
        self.rows = torch.arange(batch)

    def at(self, next_ids):
        import torch

        self.now.copy_(self.base)
        self.now[self.rows, torch.as_tensor(next_ids)] = 10.0
        return self.now


def heatc_transformers(build: Path, tokenizer, backend: str, mode: str, tokens: np.ndarray, vocab: int,
                       cold: bool = False) -> dict:  # fmt: skip
    """One replay through the transformers adapter: per step the processor, then the criteria.
    Guard's scores are rewritten before each step (it reads and changes them); observe's only
    with `cold` (it reads none; rewriting them evicts heatc's tables from the caches, as a
    model's step on the same CPU would)."""
    import torch

    from heatc_runtime.engines.transformers import Checks

    batch, length = tokens.shape
    checks = Checks(build, tokenizer, mode=mode, k=K, backend=backend, greedy=True)
    checks.kwargs()  # (both hooks attached, as generate() attaches them)
    scores = Scores(batch, vocab)
    prompt = 8
    ids = torch.from_numpy(tokens[:, :prompt].copy())
    steps, topk, own = [], [], []
    clock = time.perf_counter_ns
    for t in range(prompt, length):
        s = scores.at(tokens[:, t]) if mode == "guard" or cold else scores.now
        a = clock()
        checks.processor(ids, s)
        b = clock()
        if mode == "guard":
            _time_topks(s, topk, own)
        ids = torch.cat([ids, torch.from_numpy(tokens[:, t : t + 1].copy())], 1)
        c = clock()
        checks.criteria(ids, s)
        steps.append(b - a + clock() - c)
    checks.reports(ids)
    return _result(steps, topk, own)


def _time_topks(s, topk: list[int], own: list[int]) -> None:
    """A torch.topk over the step's scores (what a sampler pays) and the top-k guard itself
    takes (`masking.best_k`: the native core's scan where it loads), each timed."""
    import torch

    from heatc_runtime.engines.masking import best_k

    clock = time.perf_counter_ns
    c = clock()
    torch.topk(s, K, dim=-1)
    topk.append(clock() - c)
    c = clock()
    best_k(s, None, K)
    own.append(clock() - c)


def _result(steps: list[int], topk: list[int], own: list[int]) -> dict:
    out = {"step": _stats(steps[20:])}
    if topk:
        out["topk"], out["own_topk"] = _stats(topk[20:]), _stats(own[20:])
    return out


def heatc_vllm(build: Path, tokenizer, mode: str, tokens: np.ndarray, vocab: int, cold: bool = False) -> dict:
    """One replay through the vLLM V1 processor (no engine): per step `update_state`, `apply`
    (the scores as in `heatc_transformers`; guard's top-k timed on the same scores)."""
    from types import SimpleNamespace

    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from heatc_runtime.engines import vllm as adapter
    from heatc_runtime.engines.tokens import table_for_tokenizer

    batch, length = tokens.shape
    config = SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: vocab),
                             scheduler_config=SimpleNamespace(max_num_seqs=batch))  # fmt: skip
    proc = adapter.HeatcLogitsProcessor.__new__(adapter.HeatcLogitsProcessor)
    table = table_for_tokenizer(tokenizer)
    proc._model_table = lambda: table
    proc.__init__(config, torch.device("cpu"), False)
    proc._tokenizer = tokenizer
    outputs: list[list[int]] = [[] for _ in range(batch)]
    params = []
    for _ in range(batch):
        p = SamplingParams(max_tokens=length, temperature=0.0,
                           extra_args={"heatc_module": str(build), "heatc_mode": mode, "heatc_k": K})  # fmt: skip
        p._all_stop_token_ids = {tokenizer.eos_token_id}
        params.append(p)
    proc.update_state(BatchUpdate(batch, [], [(i, params[i], None, outputs[i]) for i in range(batch)], []))
    scores = Scores(batch, vocab)
    steps, topk, own, clock = [], [], [], time.perf_counter_ns
    for t in range(length - 1):
        s = scores.at(tokens[:, t + 1]) if mode == "guard" or cold else scores.now
        for i in range(batch):
            outputs[i].append(int(tokens[i, t]))
        a = clock()
        proc.update_state(None)
        proc.apply(s)
        steps.append(clock() - a)
        if mode == "guard":
            _time_topks(s, topk, own)
    return _result(steps, topk, own)


def xgrammar_peer(tokenizer, tokens: np.ndarray, vocab: int) -> dict:
    import xgrammar as xgr

    batch, length = tokens.shape
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)
    compiled = xgr.GrammarCompiler(info).compile_grammar(phrase_grammar("ebnf"))
    matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch)]
    batcher = xgr.BatchGrammarMatcher()
    bitmask = xgr.allocate_token_bitmask(batch, vocab)
    scores = Scores(batch, vocab)
    steps, clock = [], time.perf_counter_ns
    for t in range(length):
        s = scores.at(tokens[:, t])
        a = clock()
        batcher.batch_fill_next_token_bitmask(matchers, bitmask)
        xgr.apply_token_bitmask_inplace(s, bitmask)
        ok = xgr.BatchGrammarMatcher.batch_accept_token(matchers, tokens[:, t].tolist())
        steps.append(clock() - a)
        if not all(ok):
            raise RuntimeError(f"xgrammar refused a token at step {t}: the report does not fit the grammar")
    return {"step": _stats(steps[20:])}


def llguidance_peer(tokenizer, tokens: np.ndarray, vocab: int) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.torch as lt

    batch, length = tokens.shape
    tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)
    grammar = llguidance.grammar_from("lark", phrase_grammar("lark"))
    matchers = [llguidance.LLMatcher(tok, grammar) for _ in range(batch)]
    if matchers[0].is_error():
        raise RuntimeError(f"llguidance: {matchers[0].get_error()}")
    executor = llguidance.LLExecutor()
    bitmask = lt.allocate_token_bitmask(batch, vocab)
    scores = Scores(batch, vocab)
    steps, clock = [], time.perf_counter_ns
    pairs = [(m, i) for i, m in enumerate(matchers)]
    for t in range(length):
        s = scores.at(tokens[:, t])
        a = clock()
        lt.fill_next_token_bitmask_par(executor, pairs, bitmask)
        lt.apply_token_bitmask_inplace(s, bitmask)
        for i, m in enumerate(matchers):
            m.consume_token(int(tokens[i, t]))
        steps.append(clock() - a)
        if any(m.is_error() for m in matchers):
            raise RuntimeError(f"llguidance refused a token at step {t}: {matchers[0].get_error()}")
    return {"step": _stats(steps[20:])}


# ---- the run ------------------------------------------------------------------------------


def _load(args):
    import torch
    from transformers import AutoTokenizer

    from heatc.heatmap.build import build
    from heatc_runtime.engines.models import default_model_dir

    torch.set_num_threads(1)
    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    with open(folder / "config.json", encoding="utf-8") as f:
        vocab = int(json.load(f)["vocab_size"])
    tmp = Path(tempfile.mkdtemp(prefix="heatc-bench-engines-"))
    built = build(REPO / "heatmaps" / "medical.yaml", tmp).directory
    return tokenizer, vocab, built


def _backends(requested: str, built: Path) -> list[str]:
    from heatc_runtime import ModuleError
    from heatc_runtime.engines.options import choose_backend

    out = []
    for b in requested.split(","):
        try:
            choose_backend(b, built, "cpu")
            out.append(b)
        except (ModuleError, ValueError) as e:  # (a backend that cannot run here is said so and left out)
            print(f"  ({b}: not run here: {e})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, batch 1 and 64 only")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    parser.add_argument("--markdown", type=Path, help="also rewrite the cost tables of this page (docs/engines.md)")
    parser.add_argument("--backends", default="native,wasm", help="which backends (comma-separated)")
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM's processor out")
    parser.add_argument("--no-peers", action="store_true", help="leave xgrammar and llguidance out")
    parser.add_argument("--cold", action="store_true",
                        help="observe too with the scores rewritten before each step (caches evicted)")  # fmt: skip
    args = parser.parse_args()
    tokenizer, vocab, built = _load(args)
    batches = QUICK_BATCHES if args.quick else BATCHES
    rng = np.random.default_rng(0)
    notes = notes_tokens(tokenizer)
    load0 = os.getloadavg()[0]
    print(f"heatc in the decode loop, no model — {machine()}")
    print(f"load average {load0:.1f} at the start; shipped heatmaps/medical.yaml; vocabulary {vocab}; k = {K}")
    budget: list[dict] = []
    backends = _backends(args.backends, built)
    for batch in batches:
        steps = _steps(batch, args.quick)
        tokens = streams(notes, batch, steps + 8, rng)
        for backend in backends:
            for mode in MODES:
                r = heatc_transformers(built, tokenizer, backend, mode, tokens, vocab, args.cold)
                budget.append({"engine": "transformers", "backend": backend, "batch": batch, "mode": mode, **r})
                _print_row(budget[-1])
        if not args.no_vllm:
            for mode in MODES:
                r = heatc_vllm(built, tokenizer, mode, tokens, vocab, args.cold)
                budget.append({"engine": "vllm", "backend": "native", "batch": batch, "mode": mode, **r})
                _print_row(budget[-1])
    peers: list[dict] = []
    if not args.no_peers:
        text = " ".join(report_text(np.random.default_rng(i), 400) for i in range(4))
        reports = np.array(tokenizer(text)["input_ids"], np.int64)
        for batch in batches:
            steps = _steps(batch, args.quick)
            tokens = np.stack([reports[: steps + 8]] * batch)  # (every row from the report's start: the grammar's)
            for mode in MODES:
                r = heatc_transformers(built, tokenizer, "native", mode, tokens, vocab)
                peers.append({"who": f"heatc {mode}", "batch": batch, **r})
                _print_peer(peers[-1])
            for who, fn in (("xgrammar", xgrammar_peer), ("llguidance", llguidance_peer)):
                peers.append({"who": who, "batch": batch, **fn(tokenizer, tokens, vocab)})
                _print_peer(peers[-1])
    verdicts = _targets(budget)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "budget": budget, "peers": peers,
                                         "targets": verdicts}, indent=1))  # fmt: skip
    if args.markdown:
        from report import provenance, update

        command = "python bench/engines.py" + (" --quick" if args.quick else "") + (" --cold" if args.cold else "")
        update(args.markdown, {"engines-budget": provenance(command, machine(), note=f"; load average {load0:.1f}")
                               + "\n\n" + _budget_table(budget), "engines-peers": _peers_table(peers)})  # fmt: skip


def _beyond(row: dict) -> float:
    """heatc's cost beyond one top-k over the scores: the step less the top-k guard takes."""
    return row["step"]["p50"] - (row["own_topk"]["p50"] if "own_topk" in row else 0.0)


def _print_row(r: dict) -> None:
    s = r["step"]
    extra = (f"  torch top-k {r['topk']['p50']:8.1f}  own top-k {r['own_topk']['p50']:6.1f}  beyond {_beyond(r):8.1f}"
             if "topk" in r else "")  # fmt: skip
    print(f"  {r['engine']:12} {r['backend']:6} batch {r['batch']:3} {r['mode']:7} p50 {s['p50']:8.1f} "
          f"p99 {s['p99']:8.1f} p99.9 {s['p999']:8.1f} µs{extra}", flush=True)  # fmt: skip


def _print_peer(r: dict) -> None:
    s = r["step"]
    print(f"  peers  {r['who']:14} batch {r['batch']:3} p50 {s['p50']:8.1f} p99 {s['p99']:8.1f} "
          f"p99.9 {s['p999']:8.1f} µs", flush=True)  # fmt: skip


def _targets(rows: list[dict]) -> list[dict]:
    print("\ntargets (median µs per step, guard beyond one top-k; p99.9 at most 5 × the median):")
    out = []
    for r in rows:
        limit = TARGETS.get((r["mode"], r["batch"]))
        if limit is None or r["backend"] != "native":
            continue
        cost, tail = _beyond(r), r["step"]["p999"] / r["step"]["p50"]
        met = cost <= limit and tail <= TAIL_FACTOR
        out.append({**{k: r[k] for k in ("engine", "batch", "mode")}, "cost": cost, "limit": limit, "tail": tail,
                    "met": met})  # fmt: skip
        print(f"  {r['engine']:12} batch {r['batch']:3} {r['mode']:7}: {cost:7.1f} µs (≤ {limit:.0f}), "
              f"p99.9/p50 {tail:4.1f} -> {'met' if met else 'NOT met'}")  # fmt: skip
    return out


def _budget_table(rows: list[dict]) -> str:
    head = ("| engine | backend | batch | mode | p50 µs | p99 µs | p99.9 µs | torch.topk µs | its own top-k µs "
            "| beyond its top-k µs |\n|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    lines = []
    for r in rows:
        s = r["step"]
        topk = f"{r['topk']['p50']:.0f}" if "topk" in r else "—"
        own = f"{r['own_topk']['p50']:.1f}" if "own_topk" in r else "—"
        lines.append(f"| {r['engine']} | {r['backend']} | {r['batch']} | {r['mode']} | {s['p50']:.1f} | "
                     f"{s['p99']:.1f} | {s['p999']:.1f} | {topk} | {own} | {_beyond(r):.1f} |")  # fmt: skip
    return head + "\n".join(lines) + "\n"


def _peers_table(rows: list[dict]) -> str:
    head = "| batch | heatc observe | heatc guard | xgrammar | llguidance |\n|---|---|---|---|---|\n"
    by: dict[int, dict[str, dict]] = {}
    for r in rows:
        by.setdefault(r["batch"], {})[r["who"]] = r["step"]
    lines = []
    for batch, cells in sorted(by.items()):
        row = [cells.get(w) for w in ("heatc observe", "heatc guard", "xgrammar", "llguidance")]
        fmt = [f"{c['p50']:.1f} / {c['p99']:.1f} / {c['p999']:.1f}" if c else "—" for c in row]
        lines.append(f"| {batch} | " + " | ".join(fmt) + " |")
    return head + "\n".join(lines) + "\n\nµs per step, p50 / p99 / p99.9.\n"


if __name__ == "__main__":
    main()
