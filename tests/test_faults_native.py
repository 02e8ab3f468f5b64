"""The native backend under hostile tables and careless use: a rules.hct whose header was
changed with its checksums made to match (the header fuzz of tests/hct_fuzz.py, and the
cases that crashed or hung an earlier core: state fields made to overlap, an automaton that
cannot take a byte, a literal's class moved), the core's step budget (a call past it traps and
the checker goes on), `close()` giving the memory back at once, and the events a batch keeps
for its sequences bounded.

CI runs `HEATC_HCT_MUTANTS` (default 300) header mutants per rule set from `HEATC_HCT_SEED`
(default 54); the long profile runs 5,000 (docs/testing.md).
"""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import hct_fuzz
import numpy as np
import pytest
from support import REPO

import heatc_runtime as rt
from heatc.heatmap.build import build
from heatc.lang.compiler import compile_file
from heatc.semantics.reference import Machine
from heatc.verify.backends import run_document
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.backends.hct import HEAD
from heatc_runtime.batching import batch as batch_module

pytestmark = pytest.mark.needs("native")


HERE = Path(__file__).parent
TEXT = "Glucose 5000 mg/dL. BP 410/95 mmHg. potassium 4.9."


@pytest.fixture(scope="module")
def medical():
    """(program, manifest, rules.hct) of examples/medical.heat."""
    program = compile_file(REPO / "examples" / "medical.heat")
    packed = pack(program)
    return program, compile_wasm(program, packed).manifest, hct_bytes(program, packed, (0, 0))


def _param(hct: bytes, **values: int) -> bytes:
    """rules.hct with these parameters changed (the header is outside the tables' digest)."""
    _, _, at, _ = hct_fuzz.layout(hct)
    out = bytearray(hct)
    for name, value in values.items():
        struct.pack_into("<I", out, at[name] + 24, value)
    return bytes(out)


def _tables(hct: bytes, section: str, offset: int, value: int) -> bytes:
    """rules.hct with a u32 of the tables changed and the tables' digest made to match."""
    import hashlib

    sections, _, _, blob_at = hct_fuzz.layout(hct)
    start = struct.unpack_from("<I", hct, sections[section] + 16)[0]
    out = bytearray(hct)
    struct.pack_into("<I", out, blob_at + start + offset, value)
    out[HEAD.size - 36 : HEAD.size - 4] = hashlib.sha256(bytes(out[blob_at:])).digest()
    return bytes(out)


# -- the header fuzz ------------------------------------------------------------------------


def test_mutated_headers_are_refused_or_run_never_crash_or_hang():
    n = int(os.environ.get("HEATC_HCT_MUTANTS", "300"))
    seed = os.environ.get("HEATC_HCT_SEED", "54")
    r = subprocess.run(
        [sys.executable, str(HERE / "hct_fuzz.py"), seed, str(n)], capture_output=True, text=True, timeout=max(900, n)
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout)
    failures = [f for ruleset in hct_fuzz.RULESETS for f in result[ruleset]["failures"]]
    for f in failures[:5]:
        print(f"{f['kind']} on {f['ruleset']} case {f['case']} ({', '.join(f['mutations'])}):\n{f['detail']}")
    assert failures == [], f"{len(failures)} of {3 * n} mutants crashed, hung or raised (printed above)"
    for ruleset in hct_fuzz.RULESETS:
        counts = result[ruleset]
        assert counts["refused"] + counts["ran"] + counts["trap"] == n
        assert counts["refused"] > n // 2 and counts["ran"] > 0  # (the mutations reach both outcomes)


# -- the cases that crashed or hung an earlier core ------------------------------------------


@pytest.mark.parametrize(
    "values,names",
    [
        ({"off_buf_len": 4}, ["state field pos", "state field buf_len"]),  # (crashed: SIGSEGV)
        ({"off_pos": 72}, ["state field pos", "state field pend_tok"]),  # (crashed)
        ({"off_flags": 168}, ["state field flags", "state field look_mark"]),  # (a finished flag set by a step)
        ({"off_buf": 92}, ["state field n_active", "state field buf"]),
        ({"off_look_mark": 80}, ["state field pend_len", "state field look_mark"]),
        ({"off_active_rules": 256}, ["state field active_rules", "the state of rule 0"]),
        ({"off_active_rules": 1808}, ["the state of rule 30", "state field active_rules"]),  # (the last rule)
        ({"off_pend_tok": 64}, ["state field last_tok", "state field pend_tok"]),  # (hung)
    ],
)
def test_state_fields_made_to_overlap_are_refused(medical, values, names):
    _, manifest, hct = medical
    with pytest.raises(rt.ModuleError, match="the state record's parts overlap: ") as refused:
        rt.from_bytes(manifest, _param(hct, **values), backend="native")
    assert all(name in str(refused.value) for name in names), refused.value


@pytest.mark.parametrize(
    "values,reason",
    [
        ({"off_lexemes": 12}, r"state field lexemes \(at 12\) lies outside the state record or is not 8-byte aligned"),
        ({"off_pos": 68}, "state field pos .* is not 8-byte aligned"),
        ({"off_look_buf": 1 << 20}, "state field look_buf"),
        ({"plm": 2724309791}, "lexeme_events is too large"),  # (a trap at load: ModuleTrap, not ModuleError)
        ({"plm": 65536}, "lexeme_events is too large"),
        ({"late": 7}, "the late-start flag is invalid"),
        ({"state_size": 1953}, "the header and the parameters disagree on the state size"),
        ({"n_cn": 1 << 30}, "numeral table"),
        ({"dfa_width": 300}, "the automaton's size is invalid"),
    ],
)
def test_parameters_out_of_their_range_are_refused(medical, values, reason):
    _, manifest, hct = medical
    with pytest.raises(rt.ModuleError, match=reason):
        rt.from_bytes(manifest, _param(hct, **values), backend="native")


def test_tables_that_would_make_the_lexer_go_round_are_refused(medical):
    program, manifest, hct = medical
    offsets = pack(program).offsets
    width = struct.unpack_from("<I", hct, hct_fuzz.layout(hct)[2]["dfa_width"] + 24)[0]
    blob = pack(program).blob
    space = blob[offsets["byte_class"] + ord(" ")]
    # the start state's transition on a space made dead: a space would be emitted as an empty token forever
    bad = _tables(hct, "dfa", 4 * (width + space), 0)
    with pytest.raises(rt.ModuleError, match="the automaton cannot take every byte from its start state"):
        rt.from_bytes(manifest, bad, backend="native")
    # a numeral worth 10^(4 * 65535): its value would index the powers of ten far past their end
    wan = next(i for i in range(0, 8 * 40, 8) if struct.unpack_from("<I", blob, offsets["cn_table"] + i)[0] == 0x4E07)
    bad = _tables(hct, "cn_table", wan + 4, 3 << 16 | 0xFFFF)
    with pytest.raises(rt.ModuleError, match="the numeral table is invalid"):
        rt.from_bytes(manifest, bad, backend="native")


def test_two_tables_made_to_overlap_are_refused(medical):
    _, manifest, hct = medical
    sections, _, _, _ = hct_fuzz.layout(hct)
    pow10 = struct.unpack_from("<I", hct, sections["pow10"] + 16)[0]
    out = bytearray(hct)
    struct.pack_into("<I", out, sections["sha256_k"] + 16, pow10 + 16)  # inside the powers of ten
    with pytest.raises(rt.ModuleError, match="two tables overlap"):
        rt.from_bytes(manifest, bytes(out), backend="native")


def test_a_moved_or_changed_literal_class_is_refused_at_load(tmp_path):
    """A build whose literal classes were moved onto other bytes (the manifest's digests made
    to match) decoded events with class names it does not have: an IndexError."""
    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path).directory.resolve()
    hct = (d / "rules.hct").read_bytes()
    sections, _, _, _ = hct_fuzz.layout(hct)
    moved = bytearray(hct)
    struct.pack_into(
        "<I", moved, sections["literal_class"] + 16, struct.unpack_from("<I", hct, sections["dfa"] + 16)[0]
    )
    _rewrite(d, "rules.hct", bytes(moved))
    with pytest.raises(rt.ModuleError, match=r"rules\.hct: the tables are invalid: two tables overlap"):
        rt.load(d, backend="native")
    _rewrite(d, "rules.hct", _tables(hct, "literal_class", 8, 9999))
    with pytest.raises(
        rt.ModuleError, match=r"rules\.hct: a literal's class \(9999\) is not one of the manifest's \d+"
    ):
        rt.load(d, backend="native")


def _rewrite(d: Path, name: str, data: bytes) -> None:
    import hashlib

    (d / name).write_bytes(data)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["build"]["artifacts"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest.pop("manifest_sha256", None)
    (d / "manifest.json").write_text(json.dumps(manifest))


# -- the step budget ------------------------------------------------------------------------


def test_a_call_past_its_step_budget_traps_and_the_checker_goes_on(medical):
    program, manifest, hct = medical
    checker = rt.from_bytes(manifest, hct, rt.Limits(fuel=2_000), backend="native")
    dense = "glucose 5000 mg/dL, 12,345.6 BP 410/95 " * 200
    for _ in range(3):
        with pytest.raises(rt.ModuleTrap, match=r"out of fuel: the native core took more than 2000 steps"):
            checker.scan(dense)
        report = checker.scan(TEXT)
        events, verdicts, counters = run_document("reference", program, TEXT.encode())
        assert (report.events, dict(report.verdicts), report.counters) == (events, dict(verdicts), counters)
    checker.set_token_table([TEXT.encode(), dense.encode()])
    batch = checker.batch(2)
    with pytest.raises(rt.ModuleTrap, match=r"out of fuel.*sequences 0 to 1 of the batch must be reset"):
        batch.feed_ids([1, 0])
    with pytest.raises(rt.SequenceInterrupted):
        batch.feed_ids([0, 0])
    batch.reset()
    machine = Machine(program)
    got = batch.feed_ids([0, 0])
    want = [(s.events, dict(s.verdicts), s.counters) for s in machine.feed(TEXT.encode())]
    assert [(s.events, dict(s.verdicts), s.counters) for s in got[1]] == want
    final = [(s.events, dict(s.verdicts), s.counters) for s in batch.finish()[1]]
    assert final == [(s.events, dict(s.verdicts), s.counters) for s in machine.finish()]


def _guard(checker, batch, candidates: list[int], tail: bytes = b"") -> np.ndarray:
    """The native core's guard decision for `candidates` of sequence 0 of `batch` (as the
    engines' driver calls it), the text before them ending in `tail`."""
    from heatc_runtime.engines import guarding

    cands = np.array([candidates], np.int64)
    tails = np.frombuffer(tail.rjust(guarding.TAIL, b"\0")[-guarding.TAIL :], np.uint8).reshape(1, -1).copy()
    mask = np.empty(cands.shape, np.uint8)
    with checker.lock:
        checker._native.guard(batch.states, batch.n, np.zeros(1, np.int64), 1, cands, cands.shape[1], tails, mask,
                              False)  # fmt: skip
    return mask[0]


def test_a_guard_decision_past_its_step_budget_traps_and_the_checker_goes_on(medical):
    """Guard's tries (the candidate fed to a copy of the state, probes after it, the text
    ended) run under the step budget the other calls have: a long candidate under a small
    `Limits.fuel` traps, and the checker, its batch and the next decisions are as before."""
    _, manifest, hct = medical
    dense = ("glucose 5000 mg/dL, 12,345.6 BP 410/95 " * 200).encode()
    table = [b"Glucose", b" 5000", b" mg/dL", b".", b" 50", dense]
    fueled = rt.from_bytes(manifest, hct, rt.Limits(fuel=2_000), backend="native")
    free = rt.from_bytes(manifest, hct, backend="native")
    batches = []
    for c in (fueled, free):
        c.set_token_table(table)
        batches.append(c.batch(1))
        batches[-1].feed_ids([0])
    want = _guard(free, batches[1], [1, 4, 2, 3], b"Glucose")
    assert list(want) == [1, 0, 0, 0]  # (glucose 5000 is rejected, the others pass)
    assert list(_guard(free, batches[1], [5], b"Glucose")) == [1]  # without fuel the automatic budget lets it run
    for _ in range(3):
        with pytest.raises(rt.ModuleTrap, match=r"out of fuel: the native core took more than 2000 steps"):
            _guard(fueled, batches[0], [1, 5, 4], b"Glucose")
        assert list(_guard(fueled, batches[0], [1, 4, 2, 3], b"Glucose")) == list(want)
    got = [[(s.events, dict(s.verdicts)) for s in b.feed_ids([4]).get(0, []) + b.feed_ids([2]).get(0, [])
            + b.finish()[0]] for b in batches]  # fmt: skip
    assert got[0] == got[1] and got[0]


def test_the_automatic_budget_never_stops_a_heatc_program(medical):
    """Without fuel every call still has a budget (proportional to its input); the worst
    inputs for the lexer's slow path — numbers and literals cut at every byte, 64-byte tokens
    emitted one byte at a time — stay far inside it."""
    program, manifest, hct = medical
    checker = rt.from_bytes(manifest, hct, backend="native")
    worst = ("1,2,3,4,5,6,7,8,9," * 8 + "9" * 70 + " mg/dLx mmHgmmHg 12.5.6.7% " + "a" * 200) * 50
    report = checker.scan(worst)
    assert report.counters == run_document("reference", program, worst.encode())[2]
    checker.set_token_table([bytes([b]) for b in worst.encode()[:3000]])
    batch = checker.batch(1)
    for b in worst.encode()[:3000]:
        batch.feed_ids([b if b < 3000 else 0])


# -- memory ---------------------------------------------------------------------------------

CYCLES = """
import gc, resource, sys
gc.disable()  # (the collector would hide a reference cycle that keeps the memory)
import heatc_runtime as rt
limit = 4 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
def virtual():
    return next(int(l.split()[1]) << 10 for l in open("/proc/self/status") if l.startswith("VmSize"))
sizes = []
for _ in range(12):
    checker = rt.load(sys.argv[1], backend="native")
    checker.scan("glucose 5000 mg/dL.")
    checker.batch(2).close()
    checker.close()
    sizes.append(virtual())
print(sizes[2], sizes[-1])
"""


def test_close_gives_the_memory_back_at_once(tmp_path):
    """Each native checker reserves its memory limit (1 GB) of address space; close() kept it
    until the garbage collector broke a cycle, and the sixth load/scan/close under a 4 GB
    limit failed."""
    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path).directory
    r = subprocess.run([sys.executable, "-c", CYCLES, str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    early, late = map(int, r.stdout.split())
    assert late - early < 64 << 20, f"virtual memory grew by {late - early:,} bytes over 10 load/close cycles"


DATA = """
import resource, sys
import heatc_runtime as rt
limit = 3 << 30
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
checkers = [rt.load(sys.argv[1], backend="native") for _ in range(6)]
print(sum(len(c.scan("glucose 5000 mg/dL. " * 1000).events) for c in checkers))
"""


def test_only_the_memory_in_use_counts_against_the_data_limit(tmp_path):
    """Six native checkers of 1 GB limits each under a 3 GB data limit: the reservations are
    address space, not data, until used."""
    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path).directory
    r = subprocess.run([sys.executable, "-c", DATA, str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == 6 * 1000


@pytest.mark.parametrize("backend", ["wasm", "native"])
def test_events_no_snapshot_delivers_are_bounded(medical, monkeypatch, backend):
    """A 64 MB token fed 60 times with no trigger in it kept every event for a snapshot that
    never came: 18.5 GB. Past the cap (here lowered to 5,000) the step traps and the events go."""
    program, manifest, hct = medical
    monkeypatch.setattr(batch_module, "MAX_PENDING_EVENTS", 5_000)
    checker = rt.from_bytes(manifest, hct if backend == "native" else compile_wasm(program).wasm, backend=backend)
    token = b"glucose 5000 mg/dL, " * 1000  # (no trigger in it: "." is one)
    per_token = len(run_document("reference", program, token)[0])
    assert 2 * per_token <= 5_000 < 3 * per_token
    checker.set_token_table([token, b". x"])
    batch = checker.batch(1)
    batch.feed_ids([0])
    batch.feed_ids([0])
    with pytest.raises(rt.ModuleTrap, match=rf"sequence 0 holds {3 * per_token:,} events no snapshot has delivered"):
        batch.feed_ids([0])
    assert batch._pending == {}
    batch.reset()
    batch.feed_ids([0])
    assert len(batch.feed_ids([1])[0][-1].events) == per_token  # (a snapshot delivers them)
