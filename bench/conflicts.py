"""Conflicts across retrieved chunks on documents nobody here wrote (docs/conflicts.md).

CUAD: each contract is split into ~1,000-character chunks (at whitespace), as a retriever
would store it. One term that the contract states twice with the same value — a number of
days after a payment, notice or cure keyword, a percentage after an interest, royalty,
commission or discount keyword, a dollar amount after a liability or fee keyword, or the
state whose law governs — is found by this script's own regular expressions (not by the
rules), and one of its mentions is changed in its chunk to a value no mention has. The
injected conflict is found when `Checker.conflicts()` reports a conflict one of whose sides
covers the changed value. False conflicts: every conflict on the unmodified contracts, listed
in the output for reading (some are real inconsistencies of the contract).

TAT-QA: each document's table becomes one chunk per row ("Automotive: 2019 5,686; 2018
6,092."), its paragraphs one chunk each; a number a paragraph repeats from the table is
changed in the paragraph.

    python bench/conflicts.py [--rules examples/legal.heat [OTHER.heat ...]] [--named-after] [--contracts N]
                              [--json out.json]

Several rule sets are measured on the same contracts with the same injected changes, one
after the other in one run. `--named-after` injects only into days terms whose keyword
follows the number ("thirty (30) days' prior written notice", "30 days after receipt of
invoice"), one per contract that restates one, and changes a number's words with its digits
("sixty (60) days'"), so that the words against the digits do not give the change away.

Targets: recall >= 0.8 over the injected conflicts, <= 1 false conflict per 10 clean
contracts.

Scaling (`--scaling`): the CPU seconds of finding the conflicts (`find_conflicts`, after the
scan's apart) as the input doubles, in five shapes of size N: N/2 chunks of two restated
terms each, N clauses sharing most of their words (the term index at its cap), the N/2 chunks
as one, 2N CUAD chunks (the contracts cycled; about N/4 mentions) and those as one chunk.
Target: 8,000 mentions in <= 1 s, and about x2 per doubling.

    python bench/conflicts.py --scaling [--sizes 1000,2000,4000,8000,16000]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "runtime")]

DATA = REPO.parent / "shared" / "data"
CUAD = DATA / "legal" / "text" / "cuad_v1_full_contract_txt_all510.tar.gz"
TATQA = [DATA / "finance" / "text" / f"tatqa_dataset_{s}.json" for s in ("dev", "test_gold")]
CHUNK = 1000

# --- the injector's own idea of "the same term, stated again" ----------------------------
STATES = ["New York", "Delaware", "California", "Texas", "Nevada", "Florida", "Illinois", "Massachusetts",
          "New Jersey", "Pennsylvania", "Washington", "Georgia", "Ohio", "Michigan", "Colorado", "Minnesota",
          "Virginia", "Maryland", "Utah", "North Carolina", "Arizona", "Connecticut", "Oregon", "Indiana",
          "Missouri", "Wisconsin", "Tennessee", "England"]  # fmt: skip
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_DAYS_VALUE, _DAYS = rf"\(?({_NUM})\)?", r"\s*(?:calendar\s+|business\s+)?-?days?\b"
TERMS = {
    # family: (keyword regex, value regex with one group, what follows the value)
    "payment days": (r"\b(?:pay|paid|payable|payments?|invoices?|invoiced)\b", _DAYS_VALUE, _DAYS),
    "notice days": (r"\b(?:notice|notify|notified|notification)\b", _DAYS_VALUE, _DAYS),
    "cure days": (r"\b(?:cure|cured|remedy|remedied)\b", _DAYS_VALUE, _DAYS),
    "percent": (r"\b(?:interest|royalty|royalties|commissions?|discount)\b", rf"({_NUM})", r"\s*(?:%|percent\b)"),
    "amount": (r"\b(?:liability|fees?|royalty|royalties|penalty)\b", rf"\$\s?({_NUM})", r""),
    "law": (r"\b(?:governed\s+by|governing\s+law|construed\s+in\s+accordance\s+with)\b",
            r"(" + "|".join(STATES) + r")", r""),
}  # fmt: skip
GAP = r"[^.;:]{0,70}?"  # the keyword and the value in one clause
# --named-after: the same days terms named after their number ("thirty (30) days' prior written
# notice", "30 days after receipt of invoice"): the value, its unit, then the keyword
NAMED_AFTER = {f"{family}, named after": TERMS[family] for family in ("payment days", "notice days", "cure days")}
GAP_AFTER = r"[^.;:]{0,40}?"


@dataclass
class Site:
    family: str
    value: str  # as written
    start: int  # of the value, in the document
    end: int


def find_sites(text: str, named_after: bool = False) -> list[Site]:
    sites = []
    for family, (kw, value, unit) in TERMS.items():
        for m in re.finditer(kw + GAP + r"(?<![\w$.,])" + value + unit, text, flags=re.I):
            sites.append(Site(family, m.group(1), m.start(1), m.end(1)))
    for family, (kw, value, unit) in NAMED_AFTER.items() if named_after else ():
        for m in re.finditer(r"(?<![\w$.,])" + value + unit + GAP_AFTER + kw, text, flags=re.I):
            sites.append(Site(family, m.group(1), m.start(1), m.end(1)))
    return sites


def repeated(sites: list[Site]) -> list[tuple[Site, Site]]:
    """Pairs (first, other) of mentions of one family with the same value."""
    out = []
    by_key: dict[tuple[str, str], list[Site]] = {}
    for s in sorted(sites, key=lambda s: s.start):
        by_key.setdefault((s.family, s.value.lower()), []).append(s)
    for group in by_key.values():
        out += [(group[0], other) for other in group[1:] if other.start >= group[0].end]
    return out


def words_after(text: str, site: Site, n: int = 4) -> list[str]:
    """The first n words after a site's value: what the value is *of* ("days after receipt of")."""
    return re.findall(r"[a-z]+", text[site.end : site.end + 120].lower())[:n]


def words_before(text: str, site: Site, n: int = 4) -> list[str]:
    """The last n words before a site's value, number words left out: what a term named after its
    number is for ("may terminate this Agreement upon" thirty (30) days' notice)."""
    words = re.findall(r"[a-z]+", text[max(0, site.start - 160) : site.start].lower())
    return [w for w in words if not _WORDS_BEFORE.fullmatch(w + " (")][-n:]


def changed(site: Site, values: set[str], rng: random.Random) -> str:
    if site.family == "law":
        return rng.choice([s for s in STATES if s.lower() not in values])
    number = float(site.value.replace(",", ""))
    for factor in (2, 3, 0.5, 4, 5):
        new = number * factor
        text = f"{new:,.0f}" if "," in site.value else (f"{new:g}" if "." in site.value else str(int(new)))
        if text.lower() not in values and float(text.replace(",", "")) != number:
            return text
    return str(int(number) + 7)


_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
          "seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD = "|".join(sorted([*_UNITS, *_TENS[2:], "hundred", "and"], key=len, reverse=True))
# number words right before the parenthesis a value opens: "thirty (", "one hundred and eighty ("
_WORDS_BEFORE = re.compile(rf"(?i)\b((?:(?:{_NUMBER_WORD})[\s-]+)*(?:{_NUMBER_WORD}))\s*\(\s*$")


def number_words(n: int) -> str:
    """1 to 999 in words ("one hundred twenty"), as contracts write them."""
    if n < 20:
        return _UNITS[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _UNITS[n % 10] if n % 10 else "")
    return _UNITS[n // 100] + " hundred" + (" " + number_words(n % 100) if n % 100 else "")


def in_case_of(words: str, like: str) -> str:
    return words.upper() if like.isupper() else words.title() if like[:1].isupper() else words


def chunk_spans(text: str, size: int = CHUNK) -> list[tuple[int, int]]:
    spans, at = [], 0
    while at < len(text):
        end = min(len(text), at + size)
        if end < len(text):
            cut = text.rfind(" ", at + size // 2, end)
            end = cut if cut > at else end
        spans.append((at, end))
        at = end
    return spans


def contracts(limit: int | None) -> list[tuple[str, str]]:
    out = []
    with tarfile.open(CUAD) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith(".txt"):
                out.append((Path(member.name).stem, tar.extractfile(member).read().decode("utf-8", errors="replace")))
    return out[:limit]


def covered(conflict, chunk: int, start: int, end: int) -> bool:
    return any(m.chunk == chunk and m.start <= start and end <= m.end for m in (conflict.earlier, conflict.later))


def run_cuad(checker, docs, rng, named_after: bool = False) -> dict:
    false, injected, found, by_family, listing, missed, schedules = 0, 0, 0, {}, [], [], 0
    verbatim = [0, 0]  # injected, found: pairs whose next words agree too (a term restated, not a value reused)
    t0 = time.perf_counter()
    for name, text in docs:
        spans = chunk_spans(text)
        chunks = [text[s:e] for s, e in spans]
        clean = checker.conflicts(chunks)
        false += len(clean)
        schedules += len(clean.schedules)
        for c in clean:
            listing.append({"contract": name, "channel": c.channel, "earlier": c.earlier.text, "later": c.later.text,
                            "chunks": [c.earlier.chunk, c.later.chunk], "score": round(c.score, 3)})  # fmt: skip
        sites = find_sites(text, named_after)
        pairs = repeated(sites)
        if named_after:  # only the terms named after their number
            pairs = [(a, b) for a, b in pairs if b.family in NAMED_AFTER]
        if not pairs:
            continue
        first, site = rng.choice(pairs)
        values = {s.value.lower() for s in sites if s.family == site.family}
        new = changed(site, values, rng)
        i = next(k for k, (s, e) in enumerate(spans) if s <= site.start < e)
        if site.end > spans[i][1]:
            continue  # the value straddles a chunk cut
        s0 = site.start - spans[i][0]
        w0, before = s0, ""  # with --named-after, the number's words change with its digits
        said = _WORDS_BEFORE.search(chunks[i][max(0, s0 - 60) : s0]) if named_after else None
        if said is not None and new.isdigit() and 0 < int(new) < 1000:
            w0 = s0 - (len(chunks[i][max(0, s0 - 60) : s0]) - said.start(1))
            before = (
                in_case_of(number_words(int(new)), said.group(1))
                + chunks[i][s0 - len(said.group()) + len(said.group(1)) : s0]
            )
        modified = list(chunks)
        modified[i] = chunks[i][:w0] + before + new + chunks[i][s0 + len(site.value) :]
        b0 = len(modified[i][: w0 + len(before)].encode())
        b1 = b0 + len(new.encode())
        injected += 1
        fam = by_family.setdefault(site.family, [0, 0])
        fam[0] += 1
        same_words = words_after(text, first) == words_after(text, site) and (
            site.family not in NAMED_AFTER or words_before(text, first) == words_before(text, site)
        )  # (a term named after its number is named by the words before it too)
        verbatim[0] += same_words
        if any(covered(c, i, b0, b1) for c in checker.conflicts(modified)):
            found += 1
            fam[1] += 1
            verbatim[1] += same_words
        else:
            missed.append({"contract": name, "family": site.family, "was": site.value, "now": new,
                           "context": modified[i][max(0, s0 - 80) : s0 + 40],
                           "restates": text[max(0, first.start - 80) : first.end + 40]})  # fmt: skip
    return {
        "contracts": len(docs), "chunks_per_contract": round(sum(len(chunk_spans(t)) for _, t in docs) / len(docs), 1),
        "injected": injected, "found": found, "recall": round(found / max(injected, 1), 3),
        "by_family": {k: {"injected": v[0], "found": v[1]} for k, v in sorted(by_family.items())},
        "restated_verbatim": {"injected": verbatim[0], "found": verbatim[1],
                              "recall": round(verbatim[1] / max(verbatim[0], 1), 3)},
        "false_conflicts": false, "false_per_10_contracts": round(10 * false / len(docs), 2),
        "schedules": schedules,  # terms of the clean contracts stated with three values or more
        "seconds": round(time.perf_counter() - t0, 1), "false_listing": listing, "missed": missed,
    }  # fmt: skip


# --- TAT-QA: a table value changed in its paragraph ---------------------------------------

_CELL = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+")


def table_chunks(table: list[list[str]]) -> list[str]:
    """One chunk per row: "label: header value; header value." (a table as a RAG index stores it)."""
    years = next((row for row in table if sum(bool(re.fullmatch(r"(19|20)\d\d", c.strip())) for c in row) >= 2), [])
    out = []
    for row in table:
        if row is years or not row or not row[0].strip():
            continue
        cells = [
            f"{(years[j].strip() if j < len(years) else '')} {c.strip()}".strip()
            for j, c in enumerate(row[1:], 1)
            if c.strip()
        ]
        if cells:
            out.append(f"{row[0].strip()}: " + "; ".join(cells) + ".")
    return out


def run_tatqa(checker, rng) -> dict:
    docs = [d for path in TATQA for d in json.loads(path.read_text(encoding="utf-8"))]
    false, injected, found, listing = 0, 0, 0, []
    for doc in docs:
        rows = table_chunks(doc["table"]["table"])
        paragraphs = [p["text"] for p in doc["paragraphs"]]
        chunks = rows + paragraphs
        if not chunks:
            continue
        clean = checker.conflicts(chunks)
        false += len(clean)
        listing += [{"uid": doc["table"].get("uid"), "earlier": c.earlier.text, "later": c.later.text} for c in clean]
        cells = {m.group() for row in doc["table"]["table"] for cell in row[1:] for m in _CELL.finditer(cell)}
        sites = [(k, m) for k, p in enumerate(paragraphs) for m in _CELL.finditer(p) if m.group() in cells]
        if not sites:
            continue
        k, m = rng.choice(sites)
        value = float(m.group().replace(",", ""))
        new = f"{value * 2:,.{len(m.group().split('.')[1]) if '.' in m.group() else 0}f}"
        p = paragraphs[k]
        modified = rows + paragraphs[:k] + [p[: m.start()] + new + p[m.end() :]] + paragraphs[k + 1 :]
        b0 = len(p[: m.start()].encode())
        injected += 1
        if any(covered(c, len(rows) + k, b0, b0 + len(new.encode())) for c in checker.conflicts(modified)):
            found += 1
    return {
        "documents": len(docs), "injected": injected, "found": found, "recall": round(found / max(injected, 1), 3),
        "false_conflicts": false, "false_per_10_documents": round(10 * false / len(docs), 2),
        "false_listing": listing,
    }  # fmt: skip


# --- scaling: CPU seconds as the input doubles --------------------------------------------


def distinct_word(i: int) -> str:
    """A word of its own for each i, no English word (nor number word, nor unit)."""
    out = ""
    while True:
        out, i = chr(97 + i % 26) + out, i // 26
        if not i:
            return "zq" + out


def scaling_inputs(n: int, cuad: list[str]) -> dict[str, list[str]]:
    """Four shapes of about n mentions each (docstring)."""
    restated = [
        f"Payment shall be made within {30 * (1 + i % 2)} days after receipt of invoice. "
        f"Licensee shall give notice within {10 * (1 + i % 3 // 2)} days of any change."
        for i in range(n // 2)
    ]
    distinct = [
        f"Payment of the {distinct_word(i)} invoice and {distinct_word(i + 7)} fee shall be made within {30 * (1 + i % 2)} days "
        "after receipt of the invoice."
        for i in range(n)
    ]
    contract = [cuad[i % len(cuad)] for i in range(2 * n)]  # (about one mention in four chunks)
    return {"two terms a chunk": restated, "a clause each": distinct, "one chunk": [" ".join(restated)],
            "CUAD chunks": contract, "CUAD, one chunk": [" ".join(contract)]}  # fmt: skip


def run_scaling(checker, sizes: list[int]) -> list[dict]:
    from heatc_runtime.reports.conflicts import chunk_bytes, find_conflicts, join_chunks

    cuad = [text[s:e] for _, text in contracts(None) for s, e in chunk_spans(text)]
    rows = []
    for n in sizes:
        for shape, chunks in scaling_inputs(n, cuad).items():
            data = chunk_bytes(chunks)
            stream, _ = join_chunks(data)
            t0 = time.process_time()
            events = type(checker).scan(checker, stream).events
            t1 = time.process_time()
            report = find_conflicts(checker.module_info, data, events)
            t2 = time.process_time()
            matches = sum(e.kind == "match" for e in events)
            rows.append({"shape": shape, "size": n, "chunks": len(chunks), "mb": round(len(stream) / 1e6, 2),
                         "matches": matches, "scan_s": round(t1 - t0, 3), "conflicts_s": round(t2 - t1, 3),
                         "conflicts": len(report), "capped": report.capped})  # fmt: skip
            print("scaling", json.dumps(rows[-1]), flush=True)
    return rows


def checker_for(path: Path):
    from heatc.heatmap.build import compile_heatmap
    from heatc.lang.compiler import compile_file
    from heatc.verify.backends import wasm_checker

    program = compile_heatmap(path)[0] if path.suffix in (".yaml", ".yml") else compile_file(path)
    return wasm_checker(program)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=Path, nargs="+", default=[REPO / "examples" / "legal.heat"],
                        help="one or more rule sets, each measured on the same contracts and injections")  # fmt: skip
    parser.add_argument("--finance-rules", type=Path, default=REPO / "examples" / "finance.heat")
    parser.add_argument("--contracts", type=int, default=None, help="the first N contracts (default: all 510)")
    parser.add_argument("--skip-contracts", type=int, default=0, help="leave out the first K (a held-out part)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--named-after", action="store_true", help="also inject into days terms named after the number")
    parser.add_argument("--skip-tatqa", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the numbers and listings here")
    parser.add_argument("--scaling", action="store_true", help="time find_conflicts as the input doubles")
    parser.add_argument("--sizes", default="1000,2000,4000,8000,16000", help="mentions, for --scaling")
    args = parser.parse_args()
    if args.scaling:
        rows = run_scaling(checker_for(args.rules[0]), [int(x) for x in args.sizes.split(",")])
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    docs = contracts(args.contracts)[args.skip_contracts :]
    out: dict = {"cuad": {}}
    for rules in args.rules:  # the same contracts, the same injections (a fresh generator each)
        out["cuad"][str(rules)] = run_cuad(checker_for(rules), docs, random.Random(args.seed), args.named_after)
    if not args.skip_tatqa:
        out["finance_rules"] = str(args.finance_rules)
        out["tatqa"] = run_tatqa(checker_for(args.finance_rules), random.Random(args.seed))
    for rules, cuad in out["cuad"].items():
        print("cuad", rules, json.dumps({k: v for k, v in cuad.items() if k not in ("false_listing", "missed")}))
    if "tatqa" in out:
        print("tatqa", json.dumps({k: v for k, v in out["tatqa"].items() if k != "false_listing"}))
    for rules, cuad in out["cuad"].items():
        for c in cuad["false_listing"]:
            print("  false?", Path(rules).name, c["contract"][:50], c["channel"], repr(c["earlier"]), "vs",
                  repr(c["later"]), c["chunks"])  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
