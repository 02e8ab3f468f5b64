"""Turn a failing property-test example into a conformance case, for a human to review.

When a differential test fails, hypothesis prints the shrunk example's rule set and input
(and how it was fed) as one line, `corpus case: {json}` (`failure_line`). This tool reads
such lines from a file or stdin and writes a corpus file (tests/conformance/README.md)
whose expectations come from the reference interpreter — the specification — with the
description marked UNREVIEWED, which the corpus loader refuses until a human has checked
every expectation against docs/semantics.md and rewritten it:

    python tests/corpus_case.py NAME failure.txt -o tests/conformance/NAME.yaml

Public surface: `MARKER`, `Failure`, `failure_line`, `read_failures`, `case_names`, `case_file`, `main`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: the harness beside it

from support.conformance_schema import CORPUS, UNREVIEWED, CorpusError, load_corpus

MARKER = "corpus case:"


@dataclass(frozen=True)
class Failure:
    rules: str
    pieces: list[bytes]  # the input as it was fed (one piece: a whole document)
    label: str = ""

    @property
    def data(self) -> bytes:
        return b"".join(self.pieces)


def failure_line(rules: str, pieces: list[bytes], label: str = "") -> str:
    """The one-line form of a failing example that `read_failures` reads back."""
    d = {"rules": rules, "pieces_hex": [p.hex() for p in pieces]}
    if label:
        d["label"] = label
    return f"{MARKER} {json.dumps(d, ensure_ascii=False)}"


def read_failures(text: str) -> list[Failure]:
    """Every failure line in `text` (a test run's output), in order."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        at = line.find(MARKER)
        if at < 0:
            continue
        try:
            d = json.loads(line[at + len(MARKER) :])
            out.append(Failure(d["rules"], [bytes.fromhex(p) for p in d["pieces_hex"]], d.get("label", "")))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"line {n}: a {MARKER!r} line that does not parse ({e}): {line.strip()[:120]}") from None
    return out


def _flow(value) -> str:
    """A YAML scalar or one-line collection (a scalar dumped alone would get a document
    end marker, so it is dumped as a one-element list and unwrapped)."""
    if not isinstance(value, (dict, list)):
        return _flow([value])[1:-1]
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 30, sort_keys=False).strip()


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(key: str, data: bytes) -> dict:
    """`key: text`, or `key_hex: hex` for bytes that are not UTF-8."""
    return {key: data.decode("utf-8")} if _utf8(data) else {f"{key}_hex": data.hex()}


def _event(e, data: bytes) -> dict:
    """The event as the runtime writes it as JSON, with its spans' text (or hex) added."""
    d = e.to_json()
    head = {k: d.pop(k) for k in ("kind", "rule", "anchor", "verdict") if k in d}
    out = head | _text("text", data[e.start : e.end]) | d
    if "conflict" in out:
        c = out["conflict"]
        out["conflict"] = {"channel": c.pop("channel"), "value": c.pop("value")}
        out["conflict"] |= _text("text", data[c["start"] : c["end"]]) | c
    return out


def _not_confirmed(verdicts) -> dict:
    return {rule: v.name for rule, v in verdicts.items() if v.name != "CONFIRMED"}


def _case_lines(name: str, f: Failure) -> list[str]:
    from heatc.lang.compiler import compile_source
    from heatc.semantics.reference import Machine

    machine = Machine(compile_source(f.rules, "case.heat"))
    snaps = [s for p in f.pieces for s in machine.feed(p)] + machine.finish()
    key, value = next(iter(_text("input", f.data).items()))
    lines = [f"  - name: {_flow(name)}", f"    {key}: {_flow(value)}"]
    fed = len(f.pieces) > 1
    if fed:
        if all(_utf8(p) for p in f.pieces):
            lines.append(f"    chunks: {_flow([p.decode('utf-8') for p in f.pieces])}")
        else:
            lines.append(f"    chunks_hex: {_flow([p.hex() for p in f.pieces])}")
    events = [_event(e, f.data) for s in snaps for e in s.events]
    lines.append("    events:" + ("" if events else " []"))
    lines += [f"      - {_flow(e)}" for e in events]
    if _not_confirmed(snaps[-1].verdicts):
        lines.append(f"    verdicts: {_flow(_not_confirmed(snaps[-1].verdicts))}")
    if fed or len(snaps) > 1:
        lines.append("    snapshots:")
        lines += [f"      - {_flow({'verdicts': _not_confirmed(s.verdicts), 'events': len(s.events)})}" for s in snaps]
    return lines


def _rules_block(rules: str) -> list[str]:
    lines = rules.split("\n")[:-1]
    plain = rules.endswith("\n") and not rules.endswith("\n\n") and lines and not lines[0][:1].isspace()
    if plain and all(line == line.rstrip() and "\t" not in line for line in lines):
        return ["rules: |", *(f"  {line}" if line else "" for line in lines)]
    return [f"rules: {_flow(rules)}"]


def case_names(name: str, failures: list[Failure]) -> list[str]:
    return [name] if len(failures) == 1 else [f"{name}_{i}" for i in range(1, len(failures) + 1)]


def case_file(name: str, failures: list[Failure]) -> str:
    """A corpus file holding one case per failure (`case_names`), checked to load under the
    corpus schema and to read back the same rules, input and chunks."""
    if not failures:
        raise ValueError(f"no {MARKER!r} line found")
    if len({f.rules for f in failures}) != 1:
        raise ValueError("the failures have different rule sets; give the lines of one failure")
    names = case_names(name, failures)
    description = (
        f"{UNREVIEWED}: written by tests/corpus_case.py, every expectation from the reference "
        "interpreter. Check each against docs/semantics.md, then say here what the case exercises."
    )
    out = [f"description: {_flow(description)}", *_rules_block(failures[0].rules), "cases:"]
    for n, f in zip(names, failures, strict=True):
        if f.label:
            out.append(f"  # {f.label}")
        out += _case_lines(n, f)
    text = "\n".join(out) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / f"{name}.yaml").write_text(text, encoding="utf-8")
        cases = load_corpus(Path(tmp), allow_unreviewed=True)[0]
    for case, f in zip(cases, failures, strict=True):
        fed = f.pieces if len(f.pieces) > 1 else None
        if case.rules != f.rules or case.input != f.data or case.chunks != fed:
            raise AssertionError(f"{case.name}: the written case does not read back as the failure")  # a bug here
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/corpus_case.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the case name (unique in the corpus)")
    parser.add_argument("failure", nargs="?", help="a file holding the test output (default: stdin)")
    parser.add_argument("-o", "--output", help="write here (refuses to overwrite) instead of stdout")
    args = parser.parse_args(argv)
    from heatc.errors import HeatError

    try:
        text = Path(args.failure).read_text(encoding="utf-8") if args.failure else sys.stdin.read()
        failures = read_failures(text)
        taken = {c.name for group in load_corpus(CORPUS) for c in group} & set(case_names(args.name, failures))
        if taken:
            raise ValueError(f"the corpus already has cases named {', '.join(sorted(taken))}")
        result = case_file(args.name, failures)
        if args.output:
            with open(args.output, "x", encoding="utf-8") as f:
                f.write(result)
            print(f"wrote {args.output}: review it, then rewrite its description", file=sys.stderr)
        else:
            sys.stdout.write(result)
    except (OSError, ValueError, CorpusError, HeatError) as e:
        print(f"corpus_case: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
