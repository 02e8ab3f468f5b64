"""The rows bench/learn_usefulness.py prints: one rule set's result (its `evaluate`) on a
line, its misses a line each or counted by the word they follow, and several splits' results
pooled into one."""

from __future__ import annotations

from collections import Counter


def pooled(results: list[dict]) -> dict:
    """Several splits' results (`evaluate`) as one: counts summed, so that false alarms and
    recall are over every split's sentences and corruptions; rules, the mean."""
    if len(results) == 1:
        return results[0]
    out: dict = {k: sum(r[k] for r in results) for k in ("sentences", "checked", "flagged", "valued", "valued_flagged")}
    out["rules"] = round(sum(r["rules"] for r in results) / len(results))
    for field in ("recall", "impossible"):
        kinds = sorted({k for r in results for k in r[field]})
        out[field] = {
            k: (sum(r[field].get(k, (0, 0))[0] for r in results), sum(r[field].get(k, (0, 0))[1] for r in results))
            for k in kinds
        }
    out["missed"] = {k: [t for r in results for t in r["missed"].get(k, [])] for k in out["impossible"]}
    out["missed_after"] = {
        k: sum((r["missed_after"].get(k, Counter()) for r in results), Counter()) for k in out["impossible"]
    }
    out["alarms"] = [t for r in results for t in r["alarms"]]
    # (each split learns its own rules: a rule's counts are summed where splits share its name)
    out["by_rule"] = {}
    for r in results:
        for name, counts in r["by_rule"].items():
            out["by_rule"][name] = out["by_rule"].get(name, Counter()) + counts
    return out


def per_rule_lines(r: dict, limit: int) -> list[str]:
    """The `limit` rules that flagged the most clean sentences, each with those it flagged and
    the impossible corruptions it caught per kind (a catch shared by several rules is split
    among them): which rules spend the false alarms on what the benchmark counts."""
    if limit <= 0:
        return []
    ranked = sorted(r["by_rule"].items(), key=lambda x: (-x[1]["false alarms"], -sum(x[1].values()), x[0]))
    out = []
    for name, counts in ranked[:limit]:
        caught = ", ".join(f"{k} {v:.1f}" for k, v in sorted(counts.items()) if k != "false alarms")
        out.append(f"      rule {name}: {counts['false alarms']} false alarms, caught {caught or 'nothing'}")
    return out


def missed_lines(r: dict, limit: int) -> list[str]:
    """Up to `limit` of a result's missed impossible corruptions per kind, a line each."""
    return [f"      missed {kind}: {t}" for kind, texts in sorted(r["missed"].items()) for t in texts[:limit]]


def missed_after_lines(r: dict, limit: int) -> list[str]:
    """Per kind, the `limit` words that the most missed impossible corruptions follow, with how
    many each ("fentanyl 28": 28 values after "fentanyl" changed and not caught)."""
    if limit <= 0:
        return []
    return [
        f"      missed {kind} after: " + ", ".join(f"{w} {n}" for w, n in words.most_common(limit))
        for kind, words in sorted(r["missed_after"].items())
        if words
    ]


def row(label: str, r: dict, show_all: bool) -> str:
    fa = r["flagged"] / max(r["checked"], 1)
    fa_valued = r["valued_flagged"] / max(r["valued"], 1)
    kinds = r["recall"] if show_all else r["impossible"]
    caught = sum(c for c, _ in kinds.values())
    tried = sum(n for _, n in kinds.values())
    detail = ", ".join(f"{k} {c}/{n}" for k, (c, n) in kinds.items())
    return (
        f"{label:<28} {r['rules']:>5} {r['checked']:>7} {r['flagged']:>5} {fa * 100:>6.2f}% "
        f"{r['valued']:>7} {fa_valued * 100:>6.2f}% {caught / max(tried, 1):>7.3f}   {detail}"
    )


HEADER = (
    f"{'rule set':<28} {'rules':>5} {'checked':>7} {'flag':>5} {'FA':>7} {'valued':>7} {'FA/val':>7} {'recall':>7}"
    "   caught/tried per corruption"
)
