"""The native backend beside the WASM one: state records moving between them mid-stream
(and forks across them) against the reference, builds loaded with backend="native", and
bad input refused with the reason. The corpus and the generated differential properties
run on it in test_conformance.py and test_wasm_differential.py."""

import hashlib
import random
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.strategies import chunkings, rule_sets, texts

import heatc_runtime as rt
from heatc.heatmap.build import build
from heatc.semantics.reference import Machine
from heatc.semantics.reference import scan as reference_scan
from heatc.verify.backends import native_checker, wasm_checker
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import abi
from heatc_runtime.backends.hct import HEAD

GOOD = REPO / "tests" / "heatmaps" / "good.yaml"
RULES = 'class g keyword = "glucose"\nclass u unit = "mg/dL"\nrule r { match g ..3 v:number u\n  require v <= 400 }\n'


def _snap(s):
    return (s.events, s.verdicts, s.counters, s.final)


@settings(max_examples=int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 4)
@given(rule_sets(), st.data())
def test_states_move_between_backends_mid_stream(g, data):
    """Each sequence lives on one backend at a time and moves to the other (with its
    undelivered events) at random steps; forks copy a sequence across backends. Every
    snapshot must be the reference's."""
    program = compile_cached(g.source)
    streams = data.draw(st.lists(texts(g.pieces), min_size=1, max_size=3))
    pieces = [data.draw(chunkings(s)) for s in streams]
    vocabulary = sorted({p for ps in pieces for p in ps} | {b""})
    token_id = {tok: i for i, tok in enumerate(vocabulary)}
    n = len(streams)
    batches = []
    for checker in (wasm_checker(program), native_checker(program)):
        checker.set_token_table(vocabulary)
        batches.append(checker.batch(n))
    home = [data.draw(st.integers(0, 1)) for _ in range(n)]  # the batch holding each sequence
    machines = [Machine(program) for _ in range(n)]
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    for step in range(max(len(p) for p in pieces)):
        tokens = [p[step] if step < len(p) else b"" for p in pieces]
        got = [b.feed_ids([token_id[t] for t in tokens]) for b in batches]
        for i, (m, t) in enumerate(zip(machines, tokens, strict=True)):
            want = [_snap(s) for s in m.feed(t)]
            assert [_snap(s) for s in got[home[i]].get(i, [])] == want, f"seq {i} step {step}"
        for i in range(n):
            if rng.random() < 0.3:  # move it
                batches[1 - home[i]].fork_from(i, batches[home[i]], i)
                home[i] = 1 - home[i]
        if n > 1 and rng.random() < 0.2:  # fork across, or within, backends
            src, dst = rng.sample(range(n), 2)
            to = rng.randrange(2)
            batches[to].fork_from(dst, batches[home[src]], src)
            home[dst] = to
            machines[dst] = machines[src].fork()
    final = [b.finish() for b in batches]
    for i, m in enumerate(machines):
        assert [_snap(s) for s in final[home[i]][i]] == [_snap(s) for s in m.finish()]


def test_build_runs_on_the_native_backend(tmp_path):
    d = build(GOOD, tmp_path).directory
    native, wasm = rt.load(d, backend="native"), rt.load(d)
    assert type(native).__name__ == "NativeChecker"
    text = "glucose 5000 mg/dL. glucose 90 mg/dL."
    assert native.scan(text) == wasm.scan(text)
    assert native.scan(text).rejected == ["glucose_mg_dl"]
    ids = [b for b in text.encode()]  # the build's token table is one token per byte
    nb, wb = native.batch(2), wasm.batch(2)
    for i in ids:
        assert nb.feed_ids([i, i]) == wb.feed_ids([i, i])
    assert nb.finish() == wb.finish()
    twin = native.clone()
    assert twin.scan(text) == native.scan(text)


def _module(source: str = RULES):
    program = compile_cached(source)
    packed = pack(program)
    return program, compile_wasm(program, packed).manifest, hct_bytes(program, packed, (0, 0))


def _patched(data: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _resealed(data: bytes, blob_at: int, patch) -> bytes:
    """`data` with its blob changed by `patch` and the header's sha256 made to match."""
    blob = bytearray(data[blob_at:])
    patch(blob)
    out = bytearray(data[:blob_at] + bytes(blob))
    out[HEAD.size - 36 : HEAD.size - 4] = hashlib.sha256(blob).digest()
    return bytes(out)


def test_bad_tables_are_refused_with_the_reason():
    program, manifest, hct = _module()
    blob_at = len(hct) - len(pack(program).blob)
    cases = {
        b"XXXXXXXX" + hct[8:]: "not a heatc rules.hct file",
        _patched(hct, 8, "<I", 1): "rules.hct version 1 is not supported",
        _patched(hct, 12, "<I", 7): f"module ABI 7.{abi.ABI_MINOR} is not supported",
        hct[:-1] + bytes([hct[-1] ^ 1]): "checksum mismatch",
        hct[:-5]: "the header says",
    }
    offsets = pack(program).offsets
    # a transition out of the automaton, with the checksum made to match: the core would
    # follow it out of the tables, so the check at load must catch it
    dfa = offsets["dfa"]
    cases[_resealed(hct, blob_at, lambda b: struct.pack_into("<I", b, dfa + 4, 0xFFFF0))] = (
        "the automaton has a transition out of range"
    )
    rule = struct.unpack_from("<I", pack(program).blob, offsets["rule_off"])[0]
    cases[_resealed(hct, blob_at, lambda b: struct.pack_into("<I", b, rule + 12, 1 << 20))] = (
        "a rule's state lies outside the state record"
    )
    for data, reason in cases.items():
        with pytest.raises(rt.ModuleError, match=reason):
            rt.from_bytes(manifest, data, backend="native")
    other = dict(manifest, layout=dict(manifest["layout"], state_size=manifest["layout"]["state_size"] + 8))
    with pytest.raises(rt.ModuleError, match="the tables' state_size is"):
        rt.from_bytes(other, hct, backend="native")
    with pytest.raises(rt.ModuleError, match="unknown backend 'cuda'"):
        rt.from_bytes(manifest, hct, backend="cuda")


def test_a_build_without_its_tables_is_refused(tmp_path):
    d = build(GOOD, tmp_path).directory
    target = d.resolve()
    data = (target / "rules.hct").read_bytes()
    (target / "rules.hct").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(rt.ModuleError, match=r"rules\.hct: checksum mismatch"):
        rt.load(d, backend="native")
    (target / "rules.hct").unlink()
    with pytest.raises(rt.ModuleError, match=r"rules\.hct"):
        rt.load(d, backend="native")


def test_bad_states_and_token_ids_are_refused():
    _, manifest, hct = _module()
    checker = rt.from_bytes(manifest, hct, backend="native")
    checker.set_token_table([b"glucose", b" 5", b" mg/dL"])
    batch = checker.batch(2)
    with pytest.raises(ValueError, match=r"token ids\[1\] = 3 is out of range: the token table has ids 0 to 2"):
        batch.feed_ids([0, 3])
    # a record of another module (another size) cannot run here
    _, other_manifest, other_hct = _module(RULES + 'rule s { match "glucose" }\nrule t { match u }\n')
    other = rt.from_bytes(other_manifest, other_hct, backend="native").batch(1)
    assert len(other.state(0)) != len(batch.state(0))
    with pytest.raises(ValueError, match="cannot run on this module, whose records are"):
        batch.fork_from(0, other, 0)
    # a record of the right size whose fields point outside it is refused, the sequence reset
    garbage = rt.from_bytes(manifest, hct, backend="native").batch(1)
    garbage.checker.mem[garbage.states : garbage.states + garbage.checker.state_size] = 0xFF
    with pytest.raises(ValueError, match="the state record cannot run on this module: its lexer state"):
        batch.fork_from(0, garbage, 0)
    assert batch.state(0) == checker.batch(1).state(0)
    # a finished stream
    batch.finish()
    with pytest.raises(ValueError, match="the stream is finished"):
        batch.feed_ids([0, 0])


def test_offsets_outside_the_memory_trap():
    _, manifest, hct = _module()
    checker = rt.from_bytes(manifest, hct, backend="native")
    size = checker.mem.size
    with pytest.raises(rt.ModuleTrap, match="outside its memory"):
        checker.call("reset", size)
    with pytest.raises(rt.ModuleTrap, match="outside its memory"):
        checker.call("feed", checker._scan_state, 0, size - 4, 100, 1)
    checker._set_ctl(ev_cap=1 << 30)
    with pytest.raises(rt.ModuleTrap, match="event buffer"):
        checker.call("finish", checker._scan_state, 0)


def test_missing_extension_says_how_to_fix(monkeypatch):
    _, manifest, hct = _module()
    monkeypatch.setitem(sys.modules, "heatc_runtime._native", None)
    monkeypatch.delattr(sys.modules["heatc_runtime"], "_native", raising=False)
    with pytest.raises(rt.ModuleError, match=r"not built .*install a C\+\+ compiler .* reinstall"):
        rt.from_bytes(manifest, hct, backend="native")


def test_memory_limit_is_kept():
    _, manifest, hct = _module()
    checker = rt.from_bytes(manifest, hct, rt.Limits(memory_bytes=1 << 20), backend="native")
    checker.scan("glucose 5 mg/dL " * 1000)
    with pytest.raises(rt.ModuleTrap, match="exceed its limit"):
        checker.scan(b"x" * (2 << 20))


AGING = """class g keyword = "glucose"
class u unit = "mg/dL"
class s keyword = "stop"
rule near { match g ..2 v:number u
  require v <= 400 }
rule far { match g ..12 v:number ..12 s }
"""


def _aging_texts():
    inert = ["and", "the", "plain", "words", "of", "it"]
    for k in range(6):
        for j in range(15):
            run_k, run_j = " ".join(inert[:k]), " ".join((inert * 3)[:j])
            yield f"glucose {run_k} 250 {run_j} mg/dL stop then {run_j} more words here.\n"
            yield f"glucose 250 {run_j} stop, glucose {run_k} 410 mg/dL and {run_j} plain text after it\n"


def test_live_threads_age_through_runs_of_inert_words():
    """With a thread live, the native scan counts words no rule element accepts and ages the
    threads by them at once (a thread outliving the run, dying at exactly its gap, or inside
    it, then the scan going on idle): every gap length up to past the rules' gaps, scanned
    whole and fed a word at a time, equals the reference."""
    program = compile_cached(AGING)
    native = native_checker(program)
    for line in _aging_texts():
        text = line.encode()
        report = native.scan(text)
        events, verdicts, _ = reference_scan(program, text)
        assert (list(report.events), report.verdicts) == (events, verdicts), line
        ref, got, expected = Machine(program), [], []
        with native.batch(1) as b:
            for c in text.split(b" "):
                got += [_snap(s) for s in b.feed_text(0, c + b" ")]
                expected += [_snap(s) for s in ref.feed(c + b" ")]
        assert got == expected, line
