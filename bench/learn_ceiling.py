"""How much of bench/learn_usefulness.py's corruptions could *any* range or unit-guard rule
catch? `python bench/learn_ceiling.py --domains finance`

An honest ceiling for learned range rules, independent of the teacher and of heatc learn.
Documents are split as in bench/learn_usefulness.py. Every number of the learning half is
read with its *contexts*: each content word (stop words dropped) among the three words
before it (a currency sign counts as a word), paired with the unit right after it ("%", million, days, mg …, or none), and the
unit alone. Per context, the learning half gives its values; a rule for the context is

- a **range**, for a context with at least `--min-support` values: between the quantiles
  t and 1 − t of its learning-half values (t = 0, 1 %, 5 % or 10 %), widened by a margin f
  (f = 1, t = 0: the tightest range that accepts every value it was learned from);
- with `--cells`, only what a heatmap cell can express: no rule for a percentage alone;
- a **guard**: for a (word, unit) context that the learning half never writes but where the
  word takes another unit (at least `--min-support` times), any value in that unit after that
  word is rejected.

The corruptions are the benchmark's own (`learn_usefulness.corruptions`), made in the
held-out half. A corruption is caught by a rule of one of its contexts that accepts the
clean value (or, for a guard, that does not apply to it) and rejects the corrupted one; a
clean held-out sentence is flagged when a rule rejects one of its values.

Two numbers are printed per margin: **all rules** (every context's widest range and every
guard run), and an **oracle** that, knowing the held-out half, keeps at most one rule per
context, those with the most catches per flagged sentence, while at most 2 % of clean
sentences are flagged (greedy). The oracle is a ceiling for rules of this kind chosen
without seeing that half. It knows no consistency rules and reads contexts more simply than
heatc's lexer (three plain words, no constraint words, no gaps across other categories), so
on medical and legal text the learned heatmaps catch more than it does; on finance (TAT-QA),
where most corruptions are a percentage or an amount after "$", it is the honest measure of
what range and guard rules can reach.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learn_usefulness as lu
from learn_common import split_documents

TOKEN = re.compile(rf"(?P<num>{lu.NUM})|(?P<pct>%)|(?P<word>[A-Za-z][A-Za-z'/-]*|[$€£¥])|(?P<punct>[.;:!?])")
UNITS = {
    "%": "%", "million": "million", "millions": "million", "billion": "billion", "billions": "billion",
    "thousand": "thousand", "thousands": "thousand", "days": "days", "day": "days", "months": "months",
    "month": "months", "years": "years", "year": "years", "weeks": "weeks", "mg": "mg", "g": "g", "mcg": "mcg",
    "ml": "ml", "l": "L", "mg/dl": "mg/dL", "mmol/l": "mmol/L", "kg": "kg", "lbs": "lbs", "hours": "hours",
}  # fmt: skip


TRIMS = (0.0, 0.01, 0.05, 0.1)  # quantiles cut from each end of a context's values for its range


def _stopwords() -> frozenset[str]:
    from heatc.learn.text.lexemes import STOPWORDS

    return STOPWORDS


def readings(text: str):
    """(start, end, value, unit, words before) of every number in the text."""
    stop = _stopwords()
    toks = [(m.lastgroup, m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]
    out = []
    for i, (kind, tok, a, b) in enumerate(toks):
        if kind != "num":
            continue
        unit = ""
        if i + 1 < len(toks) and toks[i + 1][0] in ("pct", "word"):
            unit = UNITS.get(toks[i + 1][1].lower() if toks[i + 1][1] != "L" else "l", "")
            if toks[i + 1][1] == "l":
                unit = ""
        words = []
        for j in range(i - 1, max(-1, i - 4), -1):
            k, t = toks[j][0], toks[j][1].lower()
            if k in ("num", "punct"):
                break
            if k == "word" and t not in stop and (len(t) > 1 or not t.isalpha()) and t not in UNITS:
                words.append(t)
        out.append((a, b, float(tok.replace(",", "")), unit, words))
    return out


BARE_PERCENT = True  # ("", "%"): a percentage whatever precedes it; a heatmap cell cannot say that (--cells)


def contexts(unit: str, words: list[str]) -> list[tuple[str, str]]:
    bare = [("", unit)] if unit and (unit != "%" or BARE_PERCENT) else []
    return [(w, unit) for w in words] + bare if unit else [(w, "") for w in words]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", nargs="+", default=["finance"])
    ap.add_argument("--min-support", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.02, help="share of clean held-out sentences the oracle may flag")
    ap.add_argument("--max-per-kind", type=int, default=400)
    ap.add_argument("--show", type=int, default=0, help="print the oracle's first N rules (margin x1)")
    ap.add_argument(
        "--cells", action="store_true",
        help="only rules a heatmap cell can express: no rule for a percentage alone (a cell pairs two categories)",
    )  # fmt: skip
    ap.add_argument(
        "--scale-lock", action="store_true",
        help="also a document-level rule no heatmap cell expresses: every amount in thousands, millions or "
        "billions keeps the scale of the document's first one",
    )  # fmt: skip
    args = ap.parse_args()
    global BARE_PERCENT
    BARE_PERCENT = not args.cells
    for domain in args.domains:
        ceiling(domain, args)
        if args.scale_lock:
            scale_lock(domain, args)


SCALES = ("thousand", "million", "billion")


def scale_lock(domain: str, args) -> None:
    """A lock on the scale word, as `lock scale = s` would do on `v:number s:(thousand | million |
    billion)`: the first amount sets it, an amount in another scale conflicts. Its catches and
    false alarms on both halves (the learning half is what a learner would see)."""

    def conflicts(text: str) -> list[int]:
        amounts = [(a, u) for a, _, _, u, _ in readings(text) if u in SCALES]
        return [a for a, u in amounts if u != amounts[0][1]]

    for label, docs in zip(("learning half", "held-out half"), split_documents(domain, 0), strict=True):
        sentences = flagged = caught = tried = 0
        for d in docs:
            stream, spans = lu.document_stream(d)
            clean = conflicts(stream)
            sentences += len(spans)
            flagged += sum(any(a <= x < b for x in clean) for a, b in spans)
            for kind, corrupted, _ in lu.corruptions(domain, stream):
                if kind == "unit swapped" and tried < args.max_per_kind:
                    tried += 1
                    caught += len(conflicts(corrupted)) > len(clean)
        print(f"  scale lock, {label}: flagged {flagged / max(sentences, 1) * 100:.2f} % of {sentences} sentences, "
              f"unit swapped {caught / max(tried, 1):.2f} ({caught} / {tried})")  # fmt: skip


def ceiling(domain: str, args) -> None:
    learn_docs, held = split_documents(domain, 0)
    seen: dict[tuple[str, str], list[float]] = defaultdict(list)
    units_of: dict[str, set[str]] = defaultdict(set)
    for d in learn_docs:
        for _, _, v, unit, words in readings(lu.document_stream(d)[0]):
            for c in contexts(unit, words):
                seen[c].append(v)
                if c[0] and unit:
                    units_of[c[0]].add(unit)
    arrays = {c: np.sort(np.asarray(vs)) for c, vs in seen.items() if len(vs) >= args.min_support}
    all_units = {u for us in units_of.values() for u in us}
    guards = {
        (w, u)
        for w, us in units_of.items()
        for u in all_units
        if (w, u) not in seen and any((w, x) in arrays for x in us)
    }  # a word that takes another unit at least min-support times, never this one

    def bounds(c: tuple[str, str], trim: float, f: float) -> tuple[float, float]:
        lo, hi = np.quantile(arrays[c], [trim, 1.0 - trim])
        return (lo / f, hi * f) if lo > 0 else (lo, hi * f)

    # clean held-out sentences and the corruptions, with their readings
    sentences = []  # per sentence: [(value, contexts)]
    cases = []  # (kind, clean (value, contexts) or None, corrupted (value, contexts))
    tried: dict[str, int] = defaultdict(int)
    for d in held:
        stream, spans = lu.document_stream(d)
        rs = readings(stream)
        for a, b in spans:
            sentences.append([(v, contexts(u, w)) for s, _, v, u, w in rs if a <= s < b])
        at = {s: (v, contexts(u, w)) for s, _, v, u, w in rs}
        for kind, corrupted, _ in lu.corruptions(domain, stream):
            if tried[kind] >= args.max_per_kind:
                continue
            tried[kind] += 1
            i = next(i for i, (x, y) in enumerate(zip(stream, corrupted, strict=False)) if x != y)
            new = {s: (v, contexts(u, w)) for s, _, v, u, w in readings(corrupted)}
            # the reading that changed: the number at or before the first changed character
            start = max((s for s in new if s <= i), default=None)
            if kind == "unit swapped":
                start = max(s for s in new if s < i)
            cases.append((kind, at.get(start), new[start]))
    n_sent = len(sentences)
    print(f"{domain}: {len(learn_docs)} learning documents, {len(arrays)} contexts with >= {args.min_support} "
          f"values; {n_sent} held-out sentences; corruptions {dict(tried)}")  # fmt: skip
    for f in (1.0, 1.25, 2.0):
        # a rule: (context, trim) — a range between the context's quantiles trim and 1 − trim
        # (0: every value it was learned from), widened by f; (context, None): a guard
        rules = {(c, t): bounds(c, t, f) for c in arrays for t in TRIMS} | {(g, None): None for g in guards}
        flags: dict = defaultdict(set)
        catches: dict = defaultdict(set)

        def rejects(rule, v: float, rules=rules) -> bool:
            b = rules[rule]
            return True if b is None else not b[0] <= v <= b[1]

        by_context: dict = defaultdict(list)
        for r in rules:
            by_context[r[0]].append(r)
        for k, sent in enumerate(sentences):
            for v, cs in sent:
                for c in cs:
                    for r in by_context.get(c, ()):
                        if rejects(r, v):
                            flags[r].add(k)
        for n, (_, clean, bad) in enumerate(cases):
            v1, cs1 = bad
            for c in cs1:
                for r in by_context.get(c, ()):
                    if rejects(r, v1) and not (clean and c in clean[1] and rejects(r, clean[0])):
                        catches[r].add(n)
        every = {r for r in rules if r[1] in (0.0, None)}
        for label, chosen in (("all rules", every), ("oracle", None)):
            if chosen is None:  # greedy: most new catches per newly flagged sentence, one rule per context
                chosen, flagged, caught, used = set(), set(), set(), set()
                pool = set(catches)
                while pool:
                    best = max(pool, key=lambda r: (len(catches[r] - caught) / (1 + len(flags[r] - flagged)), str(r)))
                    pool.discard(best)
                    if best[0] in used or not catches[best] - caught:
                        continue
                    if len(flagged | flags[best]) > args.budget * n_sent:
                        continue
                    chosen.add(best)
                    used.add(best[0])
                    if f == 1.0 and len(chosen) <= args.show:
                        kind = "guard" if best[1] is None else f"range {np.round(rules[best], 3).tolist()}"
                        print(f"    {best[0]} {kind}: +{len(catches[best] - caught)} caught, "
                              f"+{len(flags[best] - flagged)} flagged")  # fmt: skip
                    flagged |= flags[best]
                    caught |= catches[best]
            flagged = set().union(*(flags[r] for r in chosen)) if chosen else set()
            caught = set().union(*(catches[r] for r in chosen)) if chosen else set()
            per_kind = defaultdict(int)
            for n in caught:
                per_kind[cases[n][0]] += 1
            kinds = ", ".join(f"{k} {per_kind[k] / tried[k]:.2f}" for k in sorted(tried))
            print(
                f"  margin x{f:<4g} {label:<9} rules {len(chosen):>5}  flagged {len(flagged) / n_sent * 100:5.2f} %"
                f"  recall {len(caught) / max(len(cases), 1):.2f}  ({kinds})"
            )


if __name__ == "__main__":
    main()
