"""The torch ops heatc::step / text / guard on their CPU kernel (the native core through
raw pointers): torch.library.opcheck, differential against the reference interpreter and
the native backend (generated rule sets, batches, token rows with lengths), the tier split
with all three tiers in use, the guard mask against the reference, and bad input refused
with the reason. (The CUDA kernel runs the same per-sequence code: cuda_bridge/device_check.py
checks it on a GPU; test_cuda_bridge.py compiles it.)"""

import hashlib
import json
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support.strategies import chunkings, rule_sets, texts

import heatc_runtime as rt
from heatc.heatmap.build import build
from heatc.semantics.reference import Machine
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.abi import ABI_MINOR, MASK_ALLOWED, MASK_REFUSED, MASK_REJECTED
from heatc_runtime.backends.hct import read_hct
from heatc_runtime.cuda import layout, ops
from heatc_runtime.cuda.program import OpProgram, load
from heatc_runtime.engines.guarding import TAIL

pytestmark = pytest.mark.needs("torch", "native")

sys.path.insert(0, str(REPO / "bench"))
from build_time import WORDS  # noqa: E402
from build_time import heatmap as generated_heatmap  # noqa: E402

GOOD = REPO / "tests" / "heatmaps" / "good.yaml"
EXAMPLES = int(__import__("os").environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 10


def op_program(program, vocabulary):
    packed = pack(program)
    module = compile_wasm(program, packed)
    return OpProgram(module.manifest, read_hct(hct_bytes(program, packed, (0, 0))), vocabulary, "cpu")


def _snap(s):
    return (s.events, s.verdicts, s.counters, s.final)


def _snaps(d):
    return {k: [_snap(s) for s in v] for k, v in d.items() if v}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = build(GOOD, tmp_path_factory.mktemp("good")).directory
    return d, load(d, "cpu")


# ---- opcheck ------------------------------------------------------------------------------


def test_opcheck_cpu_kernels(good):
    _, p = good
    b = p.batch(3, ev_keep=4, snap_keep=2)
    ids = torch.tensor([ord("g"), 5, 300], dtype=torch.int64)  # (300: out of range, reported in the row)
    args = (p.tables, p.program, p.tok_offsets, p.tok_bytes, b.states.clone(), ids, None, b.out.clone(), 4, 2, 1)
    torch.library.opcheck(torch.ops.heatc.step.default, args)
    tails = torch.zeros((3, TAIL), dtype=torch.uint8)
    torch.library.opcheck(torch.ops.heatc.step.default, (*args, tails))
    rows = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=torch.int64)
    lengths = torch.tensor([3, 1, 0], dtype=torch.int64)
    torch.library.opcheck(torch.ops.heatc.step.default, (*args[:5], rows, lengths, *args[7:]))
    text = torch.frombuffer(bytearray(b"glucose 5000 mg/dL. ok"), dtype=torch.uint8)
    offsets = torch.tensor([0, 10, 19, 22], dtype=torch.int64)
    for mode in (0, 1):
        torch.library.opcheck(
            torch.ops.heatc.text.default,
            (p.tables, p.program, b.states.clone(), text, offsets, b.out.clone(), 4, 2, mode, 1),
        )
    cand = torch.tensor([[1, 2], [3, 4], [5, 999]], dtype=torch.int64)
    scratch = torch.empty((6, p.state_size + p.event_size), dtype=torch.uint8)
    mask = torch.empty((3, 2), dtype=torch.uint8)
    for look, t in ((ops.LOOK_ENDED, None), (ops.LOOK_DECIDE, None), (ops.LOOK_DECIDE, tails)):
        torch.library.opcheck(
            torch.ops.heatc.guard.default,
            (p.tables, p.program, p.tok_offsets, p.tok_bytes, b.states.clone(), t, cand, scratch, mask, look, 1),
        )


# ---- differential ---------------------------------------------------------------------------


@settings(max_examples=EXAMPLES)
@given(rule_sets(), st.data())
def test_step_op_matches_the_reference(g, data):
    """A batch of streams, each cut into tokens, stepped one token per op call — or a few
    tokens per call (a [n, T] row with lengths) — gives the reference's snapshots."""
    program = compile_cached(g.source)
    streams = data.draw(st.lists(texts(g.pieces), min_size=1, max_size=4))
    pieces = [data.draw(chunkings(s)) for s in streams]
    vocabulary = sorted({p for ps in pieces for p in ps} | {b""})
    token_id = {t: i for i, t in enumerate(vocabulary)}
    b = op_program(program, vocabulary).batch(len(streams), ev_keep=64, snap_keep=64)
    machines = [Machine(program) for _ in streams]
    width = data.draw(st.integers(1, 3))
    step = 0
    while step < max(len(p) for p in pieces):
        rows = [[token_id[t] for t in p[step : step + width]] for p in pieces]
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64)
        if width == 1:
            b.step(ids[:, 0]) if all(rows) else b.step(ids, lengths)
        else:
            b.step(ids, lengths)
        got = _snaps(b.results())
        want = {}
        for i, m in enumerate(machines):
            snaps = [_snap(s) for t in pieces[i][step : step + width] for s in m.feed(t)]
            if snaps:
                want[i] = snaps
        assert got == want, f"step {step}"
        step += width
    assert b.dropped == 0


@settings(max_examples=EXAMPLES)
@given(rule_sets(), st.data())
def test_text_op_matches_the_reference(g, data):
    program = compile_cached(g.source)
    docs = data.draw(st.lists(texts(g.pieces), min_size=1, max_size=4))
    p = op_program(program, [b""])
    b = p.batch(len(docs), ev_keep=256, snap_keep=64)
    b.feed_texts(docs, scan=True)
    got = b.results()
    for i, doc in enumerate(docs):
        m = Machine(program)
        want = m.feed(doc) + m.finish()
        final = got[i][-1]
        assert final.final and _snap(final)[1:] == _snap(want[-1])[1:]
        assert final.events == [e for s in want for e in s.events]
    b.reset()
    b.feed_texts(docs)  # mode 0: each text one token of a continuing stream
    got = _snaps(b.results())
    want = {}
    for i, doc in enumerate(docs):
        snaps = [_snap(s) for s in Machine(program).feed(doc)]
        if snaps:
            want[i] = snaps
    assert got == want


@settings(max_examples=EXAMPLES)
@given(rule_sets(), st.data())
def test_guard_mask_matches_the_reference(g, data):
    """mask[i, j] is REJECTED exactly when the reference, fed the candidate (and with flush,
    ending the text there), counts a new rejection; the states do not change."""
    program = compile_cached(g.source)
    prefix = data.draw(texts(g.pieces))
    cands = data.draw(st.lists(st.sampled_from([p.encode() for p in g.pieces] + [b" ", b"."]), min_size=1, max_size=6))
    flush = data.draw(st.booleans())
    vocabulary = sorted(set(cands) | {prefix})
    token_id = {t: i for i, t in enumerate(vocabulary)}
    b = op_program(program, vocabulary).batch(1)
    b.step(torch.tensor([token_id[prefix]], dtype=torch.int64))
    before = b.states.clone()
    look = ops.LOOK_ENDED if flush else ops.LOOK_FED
    mask = b.guard(torch.tensor([[token_id[c] for c in cands] + [len(vocabulary)]], dtype=torch.int64), look=look)
    assert torch.equal(b.states, before)
    m = Machine(program)
    m.feed(prefix)
    base = m.counters()["rejections"]
    for j, c in enumerate(cands):
        f = m.fork()
        f.feed(c)
        rejected = (f.finish()[-1].counters if flush else f.counters())["rejections"] > base
        assert mask[0, j].item() == (MASK_REJECTED if rejected else MASK_ALLOWED), (c, flush)
    assert mask[0, -1].item() == MASK_REFUSED  # an id past the token table


# ---- tiers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """A generated heatmap (bench/build_time.py's shape) of 60 rules whose tier plan puts
    rules in all three tiers."""
    root = tmp_path_factory.mktemp("tiers")
    path = root / "gen60.yaml"
    path.write_text(generated_heatmap(60) + "tiers: {l2_bytes: 3600, device_bytes: 3600}\n")
    return build(path, root / "out").directory


def _all_keywords(value: int) -> bytes:
    words = [f"{WORDS[k % len(WORDS)]}{WORDS[(k // len(WORDS)) % len(WORDS)]}{k}" for k in range(60)]
    return " ".join(f"{w} {value if value else k * 37 % 500} u{k % 20}x." for k, w in enumerate(words)).encode()


def _tier_of(tiered) -> dict[str, str]:
    return {r["name"]: r["tier"] for r in json.loads((tiered / "manifest.json").read_text())["build"]["rules"]}


def test_three_tiers_in_use_give_the_native_results(tiered):
    p = load(tiered, "cpu")
    assert all(n > 0 for n in p.tiers.rules), p.tiers
    hct = read_hct((tiered / "rules.hct").read_bytes())
    _, r1 = p.split.rules
    # tier 0 holds no record of the other tiers: it is shorter than the blob by their bytes
    assert len(p.split.pieces[0]) <= len(hct.blob) - (r1 - p.split.ends[0]) + 16
    native = rt.load(tiered, backend="native")
    text = _all_keywords(0)
    rejected = set(native.scan(text).rejected)
    assert {_tier_of(tiered)[n] for n in rejected} == {"l2", "device", "host"}
    b = p.batch(2, ev_keep=512, snap_keep=256)
    nb = native.batch(2)
    for k in range(len(text)):
        ids = [text[k], text[(k + 100) % len(text)]]
        b.step(torch.tensor(ids, dtype=torch.int64))
        assert _snaps(b.results()) == _snaps(nb.feed_ids(ids)), k


@pytest.mark.parametrize("tier", [1, 2])
def test_a_tier_is_read_through_its_own_base(tiered, tier):
    """Widening the requirements of the rule records in one tier's piece turns exactly that
    tier's rules from REJECTED to CONFIRMED: the kernel reads those records there."""
    p = load(tiered, "cpu")
    text = _all_keywords(5000)  # above every range
    b = p.batch(1, ev_keep=512, snap_keep=64)
    b.feed_texts([text], scan=True)
    before = b.results()[0][-1].verdicts
    assert all(v == rt.Verdict.REJECTED for v in before.values())
    hct = read_hct((tiered / "rules.hct").read_bytes())
    piece, start = p.tables[tier].numpy(), p.split.starts[tier]
    names = p.decoder.rule_names
    for r in range(hct.n_rules):
        if _tier_of(tiered)[names[r]] != ("device", "host")[tier - 1]:
            continue
        rec = int.from_bytes(hct.blob[hct.param("t_rule_off") + 4 * r :][:4], "little") - start
        reqs, n = (int(piece[rec + o : rec + o + 4].view("<u4")[0]) for o in (28, 16))
        for q in range(n):
            at = rec + reqs + 64 * q
            piece[at + 24 : at + 32].view("<f8")[0] = 1e12  # a constant on the right
            piece[at + 40 : at + 48].view("<f8")[0] = 1e12  # the high end of a range
    ops.register_tables(p.tables, p.program.tolist(), [t.numpy().tobytes() for t in p.tables])
    b.feed_texts([text], scan=True)
    after = b.results()[0][-1].verdicts
    changed = {n for n in names if after[n] != before[n]}
    assert changed == {n for n in names if _tier_of(tiered)[n] == ("device", "host")[tier - 1]}


# ---- bad input ---------------------------------------------------------------------------------


def test_bad_input_is_refused_with_the_reason(good, tmp_path):
    d, p = good
    b = p.batch(2)
    with pytest.raises(ValueError, match="states must have"):
        torch.ops.heatc.step(p.tables, p.program, p.tok_offsets, p.tok_bytes, torch.zeros((2, 8), dtype=torch.uint8),
                             torch.zeros(2, dtype=torch.int64), None, b.out, b.ev_keep, b.snap_keep, 1)  # fmt: skip
    with pytest.raises(ValueError, match=r"ids must be torch\.int64"):
        b.step(torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="one row per sequence"):
        b.step(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"not loaded by heatc_runtime\.cuda"):
        forged = [t.clone() for t in p.tables]
        forged[0][0] ^= 1
        torch.ops.heatc.step(forged, p.program, p.tok_offsets, p.tok_bytes, b.states, torch.zeros(2, dtype=torch.int64),
                             None, b.out, b.ev_keep, b.snap_keep, 1)  # fmt: skip
    b.step(torch.tensor([1, 10**6], dtype=torch.int64))  # nothing waits: the row says what happened
    with pytest.raises(ValueError, match=r"sequence 1: a token id is out of range"):
        b.results()
    assert b.heads()["status"].tolist() == [0, 1] and b.heads()["consumed"].tolist() == [1, 0]
    text = torch.frombuffer(bytearray(b"glucose 90"), dtype=torch.uint8)
    for offsets in ([0, 4, 99], [0, 5, 3], [-1, 2, 4]):  # past the text, backwards, negative
        torch.ops.heatc.text(p.tables, p.program, b.states, text, torch.tensor(offsets), b.out, b.ev_keep,
                             b.snap_keep, 0, 1)  # fmt: skip
        assert b.heads()["status"].tolist()[1] == layout.OUT_STATUS_BAD_TEXT or offsets[0] < 0
        with pytest.raises(ValueError, match="text offsets lie outside the text"):
            b.results()
    # a rules.hct whose sha256, version or ABI does not match
    hct = (d / "rules.hct").read_bytes()
    for name, patch, why in [
        ("sha", lambda x: x[:-1] + bytes([x[-1] ^ 1]), "checksum mismatch"),
        ("version", lambda x: x[:8] + (9).to_bytes(4, "little") + x[12:], "version 9 is not supported"),
        ("abi", lambda x: x[:12] + (7).to_bytes(4, "little") + x[16:], f"ABI 7.{ABI_MINOR} is not supported"),
    ]:
        bad = tmp_path / name
        bad.mkdir()
        data = patch(hct)
        manifest = json.loads((d / "manifest.json").read_text())
        if name != "sha":  # (the manifest agrees: the file itself is refused)
            manifest["build"]["artifacts"]["rules.hct"]["sha256"] = hashlib.sha256(data).hexdigest()
            manifest.pop("manifest_sha256")  # (edited by hand: its own digest no longer holds)
        (bad / "manifest.json").write_text(json.dumps(manifest))
        (bad / "rules.hct").write_bytes(data)
        (bad / "tokens.bin").write_bytes((d / "tokens.bin").read_bytes())
        with pytest.raises(rt.ModuleError, match=why):
            load(bad, "cpu")


def test_inspect_tiers_prints_the_plan(tiered):
    from typer.testing import CliRunner

    from heatc.cli import app

    r = CliRunner().invoke(app, ["inspect", "--tiers", str(tiered)])
    assert r.exit_code == 0, r.output
    counts = load(tiered, "cpu").tiers.rules
    lines = r.output.splitlines()
    for name, n in zip(("L2 window", "device", "host (mapped)"), counts, strict=True):
        assert any(line.strip().startswith(name) and f" {n} rules" in line for line in lines), r.output
    r = CliRunner().invoke(app, ["inspect", "--tiers", "--device", "cpu", str(tiered)])
    assert r.exit_code == 0 and "placed on cpu" in r.output, r.output


def test_the_ops_load_a_program_without_wasmtime(good):
    """A GPU machine may have torch and cuda-python but no wasmtime: loading a program for the
    ops (which checks its tables with the native core) must not import the WASM checker."""
    import subprocess
    import textwrap

    d, _ = good
    code = textwrap.dedent(f"""
        import sys
        class NoWasmtime:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "wasmtime":
                    raise ImportError("no wasmtime here")
        sys.meta_path.insert(0, NoWasmtime())
        from heatc_runtime.cuda.program import load
        p = load({str(d)!r}, "cpu")
        assert "wasmtime" not in sys.modules and "heatc_runtime.backends.wasm_engine" not in sys.modules
        print(p.state_size)
    """)
    env = {**__import__("os").environ, "PYTHONPATH": str(REPO / "runtime")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 0
