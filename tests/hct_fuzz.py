"""A rules.hct header fuzz for the native backend: the tables of shipped rule sets with their
header parameters (record sizes, counts, state field offsets, section offsets), header
fields, section names and table words mutated — checksums made to match, as an attacker who
can write the build directory would — each loaded with `backend="native"` and run (scans,
a batch stepped by token ids, snapshots, finish).

Every case must end in a refusal at load (ModuleError), a run that completes, or a run
stopped by a trap (ModuleTrap): never a crash (a signal), a hang, or any other exception
(a traceback). Each case runs in a worker process watched by this one: a crash or a hang
is counted against its case, and a new worker goes on with the next.

Run by tests/test_faults_runtime.py; alone: `python tests/hct_fuzz.py SEED N [RULESET ...]`
prints one JSON object (the counts per rule set and outcome, each failure with its case,
which reproduces it: `python tests/hct_fuzz.py case RULESET SEED K`).

Public surface: `run(seed, n, rulesets)`, `mutate(data, rng)`, `layout(data)`, `RULESETS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RULESETS = {name: REPO / "examples" / f"{name}.heat" for name in ("medical", "finance", "legal")}
HANG_S = 20  # a case takes milliseconds; a loaded machine is given plenty more
TEXTS = [
    b"Glucose 5000 mg/dL. BP 410/95 mmHg. potassium 4.9 mmol/L, SpO2 107 %, temp 45.2 C.",
    "Net revenue rose 12% to $4.5 million in Q3 fiscal 2024; the interest rate is 36.5% APR. 利率 3.5% 一百二十万元".encode(),
    b"The Tenant shall give 30 days' prior written notice; payment is due within 60 days. Governed by the laws of Utah.",
    bytes(range(256)) * 3 + b"9" * 200 + b" " + b"x" * 300 + b"\n",
]
TOKENS = [b"glucose", b" 5000", b" mg/dL", b".", b" notice", b" 30 days", b" 12%", b"\xe4\xb8\x87", b"", b" "]


def prepare(ruleset: str, directory: Path) -> None:
    """The rule set's manifest and rules.hct, written once for the workers."""
    from heatc.lang.compiler import compile_file
    from heatc.wasm import compile_wasm
    from heatc.wasm.hct import hct_bytes
    from heatc.wasm.pack import pack

    program = compile_file(RULESETS[ruleset])
    packed = pack(program)
    (directory / f"{ruleset}.json").write_text(json.dumps(compile_wasm(program, packed).manifest))
    (directory / f"{ruleset}.hct").write_bytes(hct_bytes(program, packed, (0, 0)))


# -- mutations ------------------------------------------------------------------------------


def layout(data: bytes):
    """Where the header's fields, section records and parameter records are."""
    from heatc_runtime.backends.hct import HEAD, PARAM, SECTION

    n_sections = struct.unpack_from("<I", data, HEAD.size - 4)[0]
    sections = {}
    at = HEAD.size
    for _ in range(n_sections):
        name, _ = SECTION.unpack_from(data, at)
        sections[name.rstrip(b"\0").decode()] = at
        at += SECTION.size
    n_values = struct.unpack_from("<I", data, at)[0]
    values_at = at
    at += 4
    values = {}
    for _ in range(n_values):
        name, _ = PARAM.unpack_from(data, at)
        values[name.rstrip(b"\0").decode()] = at
        at += PARAM.size
    return sections, values_at, values, at  # (at: the blob's start)


def _choice(rng: random.Random, value: int, others: list[int], limit: int) -> int:
    """A hostile replacement for a u32 `value`: an edge, a neighbour, another field's value
    (two fields made to overlap), a random one."""
    kind = rng.randrange(12)
    if kind == 0:
        return rng.choice((0, 1, 2, 3, 4, 7, 8, 63, 64, 65, 255, 256))
    if kind == 1:
        return rng.choice((0xFFFFFFFF, 0xFFFFFFFE, 0x80000000, 0x7FFFFFFF, 0xFFFFFFF8, 1 << 24, 1 << 16))
    if kind in (2, 3):
        return (value + rng.choice((-64, -16, -8, -4, -2, -1, 1, 2, 4, 8, 16, 64))) & 0xFFFFFFFF
    if kind in (4, 5, 6) and others:
        return (rng.choice(others) + rng.choice((0, 0, 0, 1, 4, 8, -4, -8))) & 0xFFFFFFFF
    if kind == 7:
        return value * rng.choice((2, 3, 16)) & 0xFFFFFFFF
    if kind == 8:
        return value // rng.choice((2, 3, 16))
    if kind == 9:
        return rng.randrange(max(1, limit))
    if kind == 10:
        return value ^ (1 << rng.randrange(32))
    return rng.getrandbits(32)


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """1 to 3 mutations of rules.hct with its blob's digest made to match; their names."""
    from heatc_runtime.backends.hct import HEAD

    out = bytearray(data)
    sections, values_at, values, blob_at = layout(data)
    params = {n: struct.unpack_from("<I", data, a + 24)[0] for n, a in values.items()}
    offsets = {n: struct.unpack_from("<I", data, a + 16)[0] for n, a in sections.items()}
    state_offsets = [v for n, v in params.items() if n.startswith("off_")]
    names = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        family = rng.choice(("value", "value", "value", "value", "offset", "section", "blob", "blob", "header"))
        if family == "value":
            name = rng.choice(sorted(values))
            others = state_offsets if name.startswith("off_") else list(params.values())
            new = _choice(rng, params[name], others, params["state_size"])
            struct.pack_into("<I", out, values[name] + 24, new)
            names.append(f"{name}={new}")
        elif family == "offset":
            name = rng.choice(sorted(sections))
            new = _choice(rng, offsets[name], list(offsets.values()), len(data) - blob_at)
            struct.pack_into("<I", out, sections[name] + 16, new)
            names.append(f"t_{name}={new}")
        elif family == "section":
            name = rng.choice(sorted(sections))
            new_name = rng.choice([*sorted(sections), "", "x" * 16, "rules\0x"])
            out[sections[name] : sections[name] + 16] = new_name.encode().ljust(16, b"\0")[:16]
            names.append(f"section {name} named {new_name!r}")
        elif family == "header":
            field, at = rng.choice(
                (("n_rules", 24), ("state_size", 28), ("blob_size", 32), ("l2_end", 36), ("device_end", 44),
                 ("n_sections", HEAD.size - 4), ("n_values", values_at))
            )  # fmt: skip
            fmt = "<Q" if field in ("l2_end", "device_end") else "<I"
            old = struct.unpack_from(fmt, out, at)[0]
            new = _choice(rng, old, [len(data) - blob_at, *offsets.values()], len(data) - blob_at)
            struct.pack_into(fmt, out, at, new)
            names.append(f"header {field}={new}")
        else:
            blob_size = len(data) - blob_at
            table = rng.choice(("rules", "rules", "rules", "rule_off", "start_off", "start_rules", "dfa", "other"))
            if table in offsets:
                later = [o for o in offsets.values() if o > offsets[table]]
                lo, hi = offsets[table], min(later, default=blob_size)
            else:
                lo, hi = 0, blob_size
            if hi - lo < 4:
                continue
            at = lo + rng.randrange((hi - lo) // 4) * 4
            old = struct.unpack_from("<I", data, blob_at + at)[0]
            new = _choice(rng, old, [params["state_size"], params["n_rules"], *offsets.values()], hi - lo)
            struct.pack_into("<I", out, blob_at + at, new)
            names.append(f"blob {table}+{at - lo}={new}")
    out[HEAD.size - 36 : HEAD.size - 4] = hashlib.sha256(bytes(out[blob_at:])).digest()
    return bytes(out), names


# -- a worker: cases one after another, each outcome on a line ------------------------------


def run_case(manifest: dict, data: bytes) -> tuple[str, str]:
    """(outcome, detail) of one mutant: "refused", "ran" or "trap"; "error" is a failure."""
    import heatc_runtime as rt

    try:
        checker = rt.from_bytes(manifest, data, backend="native")
    except rt.ModuleError as e:
        return "refused", str(e)[:200]
    outcome = "ran"
    try:
        for text in TEXTS:
            try:
                checker.scan(text).events  # noqa: B018 (decoded when read)
            except rt.ModuleTrap:
                outcome = "trap"
        checker.set_token_table(TOKENS)
        with checker.batch(2) as batch:
            for step in range(24):
                try:
                    for snaps in batch.feed_ids([step % len(TOKENS), (3 * step + 1) % len(TOKENS)]).values():
                        [s.events for s in snaps]
                    if step % 8 == 7:
                        batch.snapshot()
                except rt.ModuleTrap:
                    outcome = "trap"
                    batch.reset()
            try:
                batch.finish()
            except rt.ModuleTrap:
                outcome = "trap"
    finally:
        checker.close()
    return outcome, ""


def worker(directory: Path, ruleset: str, seed: int, start: int, n: int) -> None:
    manifest = json.loads((directory / f"{ruleset}.json").read_text())
    data = (directory / f"{ruleset}.hct").read_bytes()
    for k in range(start, n):
        mutant, names = mutate(data, random.Random(f"{seed}/{ruleset}/{k}"))
        print(f"{k} go", flush=True)
        try:
            outcome, detail = run_case(manifest, mutant)
        except BaseException as e:
            outcome, detail = "error", "".join(traceback.format_exception(e)[-4:])[-1500:]
        print(f"{k} {outcome} {json.dumps({'mutations': names, 'detail': detail})}", flush=True)


# -- the watcher ------------------------------------------------------------------------------


def run(seed: int, n: int, rulesets: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="heatc-hct-fuzz-") as tmp:
        directory = Path(tmp)
        result = {}
        for ruleset in rulesets:
            prepare(ruleset, directory)
            result[ruleset] = _watch(directory, ruleset, seed, n)
    return result


def _watch(directory: Path, ruleset: str, seed: int, n: int) -> dict:
    counts = {"refused": 0, "ran": 0, "trap": 0}
    failures: list[dict] = []
    refusals: dict[str, int] = {}
    k = 0
    while k < n:
        proc = subprocess.Popen(
            [sys.executable, __file__, "worker", str(directory), ruleset, str(seed), str(k), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONFAULTHANDLER": ""},
        )
        current, buffer = None, b""
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], HANG_S)
            if not ready:  # (nothing for HANG_S: the case at hand hangs)
                proc.kill()
                proc.wait()
                failures.append(_failure("hang", ruleset, seed, current if current is not None else k))
                k = (current if current is not None else k) + 1
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                status = proc.wait()
                if current is not None:
                    stderr = proc.stderr.read().decode(errors="replace")[-1500:]
                    failures.append(_failure(f"crash ({_status(status)})", ruleset, seed, current, stderr))
                    k = current + 1
                else:
                    k = n
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                case, outcome, *rest = line.decode().split(" ", 2)
                if outcome == "go":
                    current = int(case)
                    continue
                current = None
                info = json.loads(rest[0])
                if outcome == "error":
                    failures.append(_failure("traceback", ruleset, seed, int(case), info["detail"], info["mutations"]))
                else:
                    counts[outcome] += 1
                    if outcome == "refused":
                        reason = info["detail"].split(": ", 1)[-1][:60]
                        refusals[reason] = refusals.get(reason, 0) + 1
                k = int(case) + 1
        proc.stdout.close()
        proc.stderr.close()
    return {**counts, "failures": failures, "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:40])}


def _status(status: int) -> str:
    import signal

    return f"signal {signal.Signals(-status).name}" if status < 0 else f"exit {status}"


def _failure(kind: str, ruleset: str, seed: int, case: int, detail: str = "", mutations=None) -> dict:
    if mutations is None:  # (a crash or a hang said nothing: the mutation is made again, it is deterministic)
        with tempfile.TemporaryDirectory() as tmp:
            prepare(ruleset, Path(tmp))
            data = (Path(tmp) / f"{ruleset}.hct").read_bytes()
        mutations = mutate(data, random.Random(f"{seed}/{ruleset}/{case}"))[1]
    return {"kind": kind, "ruleset": ruleset, "case": case, "mutations": mutations, "detail": detail}


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif sys.argv[1] == "case":
        ruleset, seed, k = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        with tempfile.TemporaryDirectory() as tmp:
            prepare(ruleset, Path(tmp))
            worker(Path(tmp), ruleset, seed, k, k + 1)
    else:
        started = time.monotonic()
        out = run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] or list(RULESETS))
        print(json.dumps({"seconds": round(time.monotonic() - started, 1), **out}))
