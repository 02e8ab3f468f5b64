"""Mutation fuzzing of the compiler's front end: the shipped rule files and heatmaps, mutated
(bit flips, deleted and repeated spans, lines swapped or repeated, truncation, splices from
another shipped file, hostile tokens inserted: huge numbers, escapes, brackets, YAML
aliases and tags, control characters), each checked as `heatc check` checks a file.

Every mutant must end in a precise error (a `HeatError`) or a checked program: no other
exception (a traceback), no mutant taking over `HANG_S` seconds, and the process under
`MEMORY_LIMIT` bytes throughout.

Run by tests/test_fuzz.py; alone: `python tests/fuzz.py SEED N [FILE ...]` prints one JSON
object (the counts, the slowest mutant, the peak memory, each failure with the mutant
itself, hex-encoded, to reproduce it).
"""

from __future__ import annotations

import json
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HANG_S = 10
MEMORY_LIMIT = 1 << 30
SHIPPED = [
    REPO / "tests" / "heatmaps" / "good.yaml",
    REPO / "examples" / "finance.heat",
    REPO / "examples" / "legal.heat",
    REPO / "examples" / "medical.heat",
    REPO / "heatmaps" / "finance_zh.heat",
    REPO / "heatmaps" / "finance.yaml",
]
HOSTILE = [
    "1e400", "-1e400", "9" * 400, "0x" + "f" * 80, "nan", ".inf", "-0", "1_000", "08", "1e-400",
    '"\\uD800"', "\\uDFFF", '"\\x"', '"', "'", "\\", "(", ")", "((((((((", "[", "]", "{", "}", ",", ":", "|",
    "..", "..999", "..-1", "*a", "&a ", "&a [*a]", "? ", "!!python/object/apply:os.system [id] ", "!foo ",
    "!!binary ", "!!set ", "<<: ", "---\n", "...\n", "%YAML 1.1\n", "\t", "\r", "\r\n", "\x00", "\x1b", "\ufeff",
    "\u2028", "é", "𝔘", "血糖", "# ", "\n", " ", "~", "null", "true", "rule", "match", "class", "require",
    "consistent", "lock", "expect", "triggers", "every", "heat", "freq", "when", "anchor", "number", "percent",
    "rules: [/dev/zero]\n", "tokenizer: {file: /dev/zero}\n", "x" * 300,
]  # fmt: skip


NUMBERS = ["1e400", "-1e400", "9" * 400, "1e-400", "0", "-1", "nan", "99999999999999999999", "0.0000001", "1e308"]
STRING_BODIES = ["\\uD800", "\\uDFFF", "\\q", "", " ", "x" * 300, "a\\nb", "\\u0000", "𝔘𝔘", "\\"]
YAML_VALUES = [
    "*a", "&a x", "&a [*a]", "{a: *a}", "!!python/object:os.system x", "!!python/name:os.system", "!foo x",
    "!!binary aGk=", "!!timestamp 2001-12-14", "9" * 400, "[" * 80, "'" + "x" * 500 + "'", '"\\uD800"', "~", "",
]  # fmt: skip
_NUMBER = re.compile(rb"(?<!\w)\d+(?:\.\d+)?(?!\w)")
_STRING = re.compile(rb'"([^"\\\n]|\\.)*"')
_MATCH = re.compile(rb"match\s+(\w+)")
_VALUE = re.compile(rb"(?<=: )[^,{}\[\]\n]+")


def _structured(out: bytearray, kind: str, rng: random.Random) -> bytearray:
    """A mutation aimed at one construct: a number, a string, a pattern's atom, a YAML value."""
    pattern, make = {
        "number": (_NUMBER, lambda m: rng.choice(NUMBERS).encode()),
        "string": (_STRING, lambda m: ('"' + rng.choice(STRING_BODIES) + '"').encode()),
        "nest": (_MATCH, lambda m: b"match " + b"(" * (k := rng.randint(1, 600)) + m.group(1) + b")" * k),
        "value": (_VALUE, lambda m: rng.choice(YAML_VALUES).encode("utf-8", "surrogatepass")),
    }[kind]
    found = list(pattern.finditer(bytes(out)))
    if not found:
        return out
    m = rng.choice(found)
    return bytearray(bytes(out[: m.start()]) + make(m) + bytes(out[m.end() :]))


def mutate(data: bytes, rng: random.Random, donors: list[bytes]) -> tuple[bytes, list[str]]:
    """1 to 4 random mutations of `data`, and their names."""
    out, names = bytearray(data), []
    for _ in range(rng.randint(1, 4)):
        n = len(out)
        at = rng.randrange(n + 1)
        kind = rng.choice(
            (
                "flip",
                "delete",
                "repeat",
                "insert",
                "insert",
                "lines",
                "truncate",
                "splice",
                "number",
                "number",
                "string",
                "nest",
                "value",
                "value",
            )
        )
        if kind in ("number", "string", "nest", "value"):
            out = _structured(out, kind, rng)
        elif kind == "flip" and n:
            out[min(at, n - 1)] ^= 1 << rng.randrange(8)
        elif kind == "delete":
            del out[at : at + rng.randint(1, 64)]
        elif kind == "repeat":
            span = bytes(out[at : at + rng.randint(1, 64)])
            out[at:at] = span * rng.randint(1, 8)
        elif kind == "insert":
            out[at:at] = rng.choice(HOSTILE).encode("utf-8", "surrogatepass")
        elif kind == "lines":
            lines = bytes(out).split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if rng.random() < 0.5:
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines[i:i] = [lines[j]] * rng.randint(1, 50)
            out = bytearray(b"\n".join(lines))
        elif kind == "truncate":
            del out[at:]
        else:
            donor = rng.choice(donors)
            start = rng.randrange(len(donor))
            out[at:at] = donor[start : start + rng.randint(1, 200)]
        names.append(kind)
    return bytes(out), names


def check(path: Path) -> str:
    """What `heatc check` does with a file: "error" (a precise one) or "ok"."""
    from heatc.errors import HeatError
    from heatc.heatmap.build import compile_heatmap
    from heatc.lang.compiler import compile_file
    from heatc.verify.backends import run_document
    from heatc.verify.expect import check_expects

    try:
        program = compile_heatmap(path)[0] if path.suffix == ".yaml" else compile_file(path)
        check_expects(program, lambda p, d: run_document("reference", p, d)[:2])
    except HeatError as e:
        e.render()  # (rendering must not fail either)
        return "error"
    return "ok"


class _Hang(Exception):  # noqa: N818 (a signal, not an error)
    pass


def _alarm(signum, frame):
    raise _Hang


def run(seed: int, n: int, files: list[Path]) -> dict:
    resource.setrlimit(resource.RLIMIT_AS, (4 * MEMORY_LIMIT, 4 * MEMORY_LIMIT))  # (a runaway mutant stops here)
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(seed)
    donors = [f.read_bytes() for f in SHIPPED]
    work = Path(tempfile.mkdtemp(prefix="heatc-fuzz-"))
    for f in SHIPPED:  # the files a heatmap names sit beside it
        shutil.copy(f, work / f.name)
    outcomes = {"error": 0, "ok": 0}
    failures, slowest = [], (0.0, "")
    try:
        for k in range(n):
            source = files[k % len(files)]
            mutant, names = mutate(source.read_bytes(), rng, donors)
            path = work / source.name
            path.write_bytes(mutant)
            started = time.monotonic()
            signal.alarm(HANG_S)
            try:
                outcomes[check(path)] += 1
            except _Hang:
                failures.append({"kind": "hang", "file": source.name, "mutations": names, "mutant": mutant.hex()})
            except BaseException as e:
                detail = "".join(traceback.format_exception(e)[-6:])[-3000:]
                failures.append(
                    {
                        "kind": "traceback",
                        "file": source.name,
                        "mutations": names,
                        "detail": detail,
                        "mutant": mutant.hex(),
                    }
                )
            finally:
                signal.alarm(0)
                path.write_bytes(source.read_bytes())
            took = time.monotonic() - started
            if took > slowest[0]:
                slowest = (took, f"{source.name} {names}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"mutants": n, **outcomes, "failures": failures, "slowest": slowest, "peak_rss": _peak_rss()}


def _peak_rss() -> int:
    """This process's peak resident memory since it started. (Not getrusage's ru_maxrss: on
    Linux that keeps the peak of the process before exec, here the test runner's, which may
    have loaded torch.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    files = [Path(f) for f in sys.argv[3:]] or SHIPPED
    print(json.dumps(run(int(sys.argv[1]), int(sys.argv[2]), files)))
