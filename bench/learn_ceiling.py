"""How much of bench/learn_usefulness.py's corruptions could *any* range or unit-guard rule
catch? `python bench/learn_ceiling.py --domains finance`

An honest ceiling for learned range rules, independent of the teacher and of heatc learn.
Documents are split as in bench/learn_usefulness.py. Every number of the learning half is
read with its *contexts*: each content word (stop words dropped) among the three words
before it (a currency sign counts as a word), paired with the unit right after it ("%", million, days, mg …, or none), and the
unit alone. Per context, the learning half gives its values; a rule for the context is

- a **range**: the envelope of the learning half's values, [min / f, max × f] for a margin
  f (1 is the tightest range that accepts every value it was learned from), for a context
  with at least `--min-support` values;
- with `--cells`, only what a heatmap cell can express: no rule for a percentage alone;
- a **guard**: for a (word, unit) context that the learning half never writes but where the
  word takes another unit (at least `--min-support` times), any value in that unit after that
  word is rejected.

The corruptions are the benchmark's own (`learn_usefulness.corruptions`), made in the
held-out half. A corruption is caught by a rule of one of its contexts that accepts the
clean value (or, for a guard, that does not apply to it) and rejects the corrupted one; a
clean held-out sentence is flagged when a rule rejects one of its values.

Two ceilings are printed per margin: **all rules** (every context's rule runs), and an
**oracle** that, knowing the held-out half, keeps the rules with the most catches per
flagged sentence while at most 2 % of clean sentences are flagged (greedy; an upper bound on
what a learner choosing rules without seeing that half can reach with rules of this kind).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

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


def _stopwords() -> frozenset[str]:
    from heatc.learn.lexemes import STOPWORDS

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
    args = ap.parse_args()
    global BARE_PERCENT
    BARE_PERCENT = not args.cells
    for domain in args.domains:
        ceiling(domain, args)


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
    envelope = {c: (min(vs), max(vs)) for c, vs in seen.items() if len(vs) >= args.min_support}
    all_units = {u for us in units_of.values() for u in us}

    def rejects(c: tuple[str, str], v: float, f: float) -> bool:
        if c in envelope:
            lo, hi = envelope[c]
            return not lo / f <= v <= hi * f
        w, unit = c
        # a guard, for a word that takes another unit at least min-support times
        return bool(w) and unit in all_units and c not in seen and any((w, u) in envelope for u in units_of.get(w, ()))

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
        for kind, corrupted in lu.corruptions(domain, stream):
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
    print(f"{domain}: {len(learn_docs)} learning documents, {len(envelope)} contexts with >= {args.min_support} "
          f"values; {n_sent} held-out sentences; corruptions {dict(tried)}")  # fmt: skip
    for f in (1.0, 1.25, 2.0):
        rules = set(envelope) | {(w, u) for w in units_of for u in all_units if (w, u) not in seen}  # ranges and guards
        flags: dict[tuple[str, str], set[int]] = defaultdict(set)
        for k, sent in enumerate(sentences):
            for v, cs in sent:
                for c in cs:
                    if c in rules and rejects(c, v, f):
                        flags[c].add(k)
        catches: dict[tuple[str, str], set[int]] = defaultdict(set)
        for n, (_, clean, bad) in enumerate(cases):
            v1, cs1 = bad
            for c in cs1:
                if c in rules and rejects(c, v1, f) and not (clean and c in clean[1] and rejects(c, clean[0], f)):
                    catches[c].add(n)
        for label, chosen in (("all rules", set(catches) | set(flags)), ("oracle", None)):
            if chosen is None:  # greedy: most new catches per newly flagged sentence, within the budget
                chosen, flagged, caught = set(), set(), set()
                pool = set(catches)
                while pool:
                    best = max(
                        pool,
                        key=lambda c: (len(catches[c] - caught) / (1 + len(flags[c] - flagged)), c),
                    )
                    pool.discard(best)
                    if not catches[best] - caught:
                        continue
                    if len(flagged | flags[best]) > args.budget * n_sent:
                        continue
                    chosen.add(best)
                    if f == 1.0 and len(chosen) <= args.show:
                        kind = "range" if best in envelope else "guard"
                        print(f"    {kind} {best}: +{len(catches[best] - caught)} caught, "
                              f"+{len(flags[best] - flagged)} flagged, {envelope.get(best, '')}")  # fmt: skip
                    flagged |= flags[best]
                    caught |= catches[best]
            flagged = set().union(*(flags[c] for c in chosen)) if chosen else set()
            caught = set().union(*(catches[c] for c in chosen)) if chosen else set()
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
