"""The native core's idle-stretch skipper (cuda_bridge/src/heatc_skipper*.h) against the
reference interpreter, in each implementation this machine runs (`none`, the portable loops
and each instruction set the CPU has: `_native.skippers()`): every kernel feature
combination, matches at every offset around its 64-byte blocks, digit runs, weak starts and
CJK text cut into pieces at every byte, real documents, and generated streams. Besides the
reference's events, verdicts, counters and snapshots, the state a feed leaves must be the one
the automaton alone leaves (`none`), all but the bytes past a token buffer's length."""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import shutil
import struct
import subprocess
import sys
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO, compile_cached
from support import kernel_features as features
from support.differential import snapshot_fields
from support.strategies import (
    chunkings,
    dense_texts,
    long_texts,
    percent_trigger_rule_sets,
    reported,
    rule_sets,
    weak_start_rule_sets,
)

from heatc import ir
from heatc.heatmap.build import compile_heatmap
from heatc.lang.compiler import compile_file
from heatc.semantics.reference import Machine
from heatc.semantics.state import from_state, state_bytes
from heatc.verify.backends import native_checker, wasm_checker
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime.backends.extension import native_extension
from heatc_runtime.backends.hct import read_hct

SKIPPERS = native_extension().skippers()
BLOCK = 64  # the skipper's block (heatc_skipper.h); it reads 8 bytes past one
DATA = REPO.parent / "shared" / "data"
EXAMPLES = {name: compile_file(REPO / "examples" / f"{name}.heat") for name in ("medical", "legal", "finance")}
LEARNED = {name: compile_heatmap(REPO / "heatmaps" / f"{name}.yaml")[0] for name in EXAMPLES}
# keywords that start only late-starting rules on numbers ("of" of `v:percent of`, as the
# learned heatmaps have it): the skipper counts one as a plain word after a word or a plain
# byte, and stops before it after a number, a percentage or a date
LATE_ONLY = """ruleset late_only
class of_word other = "of"
class per_word other = "per"
class u unit = "mg", "bpm"
class kw keyword = "rate"
rule share { match v:percent of_word
  require v <= 50 }
rule ratio { match v:(number | date) per_word
  require v < 10 }
rule dose { match v:number u
  require v < 500 }
rule rate_of { match kw ..2 v:number
  require v < 100 }
"""
PROGRAMS = {**EXAMPLES, "late_only": compile_cached(LATE_ONLY)}

# plain words the skipper passes, to put a snippet anywhere in or after a block
FILLER = (
    "the patient was seen in the clinic today and she reports that her symptoms have improved "
    "since the last visit with no new complaints about anything at all in the interim period "
)
# what must stop the skipper (or be passed exactly), per example rule set
SNIPPETS = {
    "medical": [
        "glucose 250 mg/dL.", "blood sugar of 5000 mg/dL", "temperature 98.6 F", "BP 120/80 mmHg", "HR 72 bpm",
        "weight 1,234 lbs", "in 2019 she", "12.5% of", "36% ", "2019.5 mg", "123456789 mg", "1.2.3 mg",
        "glucosé 12", "heart rate 250", "Metoprolol 25 mg", "9 mg/dL",
    ],
    "legal": [
        "within 30 days", "payment of 45 days", "notice 10 days", "Article 12 of", "thirty (30) days' notice",
        "shall not exceed 24%", "written notice 60 days", "payable within 5 business days", "第十二条 通知 30 天",
        "payments 2019 days", "notice. 30 days",
    ],
    "finance": [
        "年化利率不超过24%", "利率 36%", "贷款 3.25万元", "APR of 36%", "rate 12.5%", "一千零五 元", "１２．５%",
        "民间借贷 利率 24%", "FY2024 Q3 revenue 1,234", "in 2019 the", "🙂 利率 8%",
    ],
    "late_only": [
        "60% of the", "the rest of it", "of of", "5 of 7", "2019 per day", "12 per", ". of", "1,000 of",
        "rate of 250", "36.5 % of", "OF", "ofs", "of-", "3 per 4 per 5", "(of)", "é of", "7 mg of 40 bpm",
    ],
}  # fmt: skip


@contextmanager
def skipper(name: str):
    """The native core runs with skipper `name` inside the block."""
    ext = native_extension()
    before = ext.skipper()
    ext.skipper(name)
    try:
        yield
    finally:
        ext.skipper(before)


_WORD_ROWS: dict[int, int] = {}


def _word_row(program) -> int:
    """The automaton's plain-word row (heatc.wasm.pack), per program (kept: programs are cached)."""
    if id(program) not in _WORD_ROWS:
        _WORD_ROWS[id(program)] = pack(program).consts["word_row"]
    return _WORD_ROWS[id(program)]


def _meaningful(program, state: bytes) -> bytes:
    """What of a state record the rest of a stream reads: the reference machine's state read
    from it and written back (`heatc.semantics.state`: no bytes past a token buffer's length,
    no dead thread's slot), `last_end` only where anchors read it, and the look-behind of
    late-starting rules only while it is alive (the last lexeme), and no bytes of a plain word
    being read. The skipper counts lexemes without copying their bytes, starting threads that
    die or keeping each number as the look-behind; nothing that follows can tell."""
    layout = ir.state_layout(program)
    out = bytearray(state_bytes(from_state(program, state)))

    def u64(name: str) -> int:
        return int.from_bytes(state[layout.field(name).offset :][:8], "little")

    if not program.anchors.max_lexemes:
        at = layout.field("last_end").offset
        out[at : at + 8] = bytes(8)
        # inside a plain word the automaton takes letters without copying them (nothing reads them)
        row = int.from_bytes(state[layout.field("dfa_state").offset :][:4], "little")
        if row and row == _word_row(program):
            at = layout.field("buf").offset
            out[at : at + program.lexer.max_lexeme] = bytes(program.lexer.max_lexeme)
    names = {f.name for f in layout.fields}
    if "look_mark" in names and u64("look_mark") and u64("look_mark") == u64("lexemes"):
        n = int.from_bytes(state[layout.field("look_len").offset :][:4], "little")
        out += state[layout.field("look_start").offset :][:16] + state[layout.field("look_buf").offset :][:n]
    return bytes(out)


def _agrees_everywhere(program, stream: bytes, pieces: list[bytes]) -> None:
    """Each skipper: the reference's scan, its snapshots with `pieces` fed one a call, and
    after every piece the state the automaton alone leaves."""
    assert b"".join(pieces) == stream
    scanned = reference_scan(program, stream)
    want = _snaps(program, pieces)
    states = {}
    for name in SKIPPERS:
        with skipper(name):
            checker = native_checker(program)
            report = checker.scan(stream)
            assert (report.events, report.verdicts, report.counters) == scanned, f"skipper {name}: the scan differs"
            with checker.batch(1) as b:
                got, seen = [], []
                for piece in pieces:
                    got += [snapshot_fields(x) for x in b.feed_text(0, piece)]
                    seen.append(_meaningful(program, b.state(0)))
                got += [snapshot_fields(x) for x in b.finish().get(0, [])]
            assert got == want, f"skipper {name}: the snapshots differ"
            states[name] = seen
    for name in SKIPPERS:
        assert states[name] == states["none"], f"skipper {name}: the state differs from the automaton's"


def test_the_machine_runs_a_skipper_of_its_own():
    """`none` and the portable loops everywhere; on x86 the SSSE3 and AVX2 copies where the
    CPU has them, on AArch64 NEON; the default is the fastest."""
    assert SKIPPERS[:2] == ["none", "scalar"]
    assert native_extension().skipper() == SKIPPERS[-1]
    with pytest.raises(ValueError, match="no skipper"):
        native_extension().skipper("mmx")


@pytest.mark.parametrize("entry", features._matrix(), ids=lambda e: "+".join(c.replace("C.", "") for c in e["on"]))
def test_every_kernel_feature_combination(entry):
    """The rule sets of every combination of the kernel's switches (tests/kernel_features.yaml),
    each skipper, on the feature tests' texts and those texts cut around a block."""
    program = compile_cached(features.rule_set(entry["recipe"]))
    for text in features.TEXTS:
        data = text.encode()
        _agrees_everywhere(program, data, features._pieces(data))
        cuts = sorted({0, len(data)} | {c for c in (BLOCK - 1, BLOCK, BLOCK + 8, 2 * BLOCK + 1) if c < len(data)})
        _agrees_everywhere(program, data, [data[a:b] for a, b in itertools.pairwise(cuts)])


def reference_scan(program, text: bytes) -> tuple:
    """The reference's events, final verdicts and counters of a whole document."""
    m = Machine(program)
    snaps = m.feed(text) + m.finish()
    return [e for s in snaps for e in s.events], snaps[-1].verdicts, snaps[-1].counters


def _snaps(program, pieces: list[bytes]) -> list:
    m = Machine(program)
    return [snapshot_fields(s) for p in pieces for s in m.feed(p)] + [snapshot_fields(s) for s in m.finish()]


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_matches_at_every_offset_around_the_blocks(name):
    """Each snippet after 0 to 2 blocks + 9 bytes of plain words (so at every offset in a
    block and across its end), with plain words after it: each skipper scans it as the
    reference does, and fed in two pieces cut inside the snippet."""
    program = PROGRAMS[name]
    for snippet in SNIPPETS[name]:
        for k in range(2 * BLOCK + 10):
            text = (FILLER[:k] + snippet + " " + FILLER).encode()
            cut = k + len(snippet.encode()) // 2
            pieces = [text[:cut], text[cut:]]
            events, verdicts, counters = reference_scan(program, text)
            want = _snaps(program, pieces)
            for s in SKIPPERS:
                with skipper(s):
                    checker = native_checker(program)
                    report = checker.scan(text)
                    where = f"skipper {s}, offset {k}: {snippet!r}"
                    assert (report.events, report.verdicts, report.counters) == (events, verdicts, counters), where
                    with checker.batch(1) as b:
                        got = [snapshot_fields(x) for p in pieces for x in b.feed_text(0, p)]
                        got += [snapshot_fields(x) for x in b.finish().get(0, [])]
                    assert got == want, where


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_numbers_and_characters_cut_at_every_byte(name):
    """A stretch of each rule set's snippets (digit runs with points, commas and `%`, years,
    CJK characters and numerals, weak starts) fed in two pieces cut at every byte: the
    reference's snapshots and, after each piece, the automaton's state, with each skipper."""
    program = PROGRAMS[name]
    text = (FILLER + " ".join(SNIPPETS[name]) + " " + FILLER).encode()
    for cut in range(len(FILLER) - 8, len(text) - len(FILLER) + 8):
        _agrees_everywhere(program, text, [text[:cut], text[cut:]])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_steps_through_a_token_table_equal_one_scan(name):
    """The snippets' text stepped a token at a time through a token table (tokens of 1 to 150
    bytes: long ones let the skipper run inside a step), with each skipper: every snapshot is
    the reference's for the same tokens; all their events together are the events of one
    scan of the text, the final verdicts its verdicts; and the state after the last step is
    the one feeding the whole text in one piece leaves (the token count apart)."""
    program = PROGRAMS[name]
    text = (FILLER + " ".join(SNIPPETS[name]) + " " + FILLER + " ".join(SNIPPETS[name])).encode()
    rng = random.Random(len(text))
    cuts = [0]
    while cuts[-1] < len(text):
        cuts.append(min(len(text), cuts[-1] + rng.choice([1, 2, 3, 5, 8, 40, 72, 100, 150])))
    tokens = [text[a:b] for a, b in itertools.pairwise(cuts)]
    vocabulary = sorted(set(tokens))
    ids = [vocabulary.index(t) for t in tokens]
    want = _snaps(program, tokens)
    scanned = reference_scan(program, text)
    layout = ir.state_layout(program)
    tokens_at = layout.field("tokens").offset

    def without_tokens(state: bytes) -> bytes:
        return state[:tokens_at] + bytes(8) + state[tokens_at + 8 :]

    for s in SKIPPERS:
        with skipper(s):
            checker = native_checker(program)
            checker.set_token_table(vocabulary)
            with checker.batch(1) as b:
                got = [snapshot_fields(x) for i in ids for x in b.feed_ids([i]).get(0, [])]
                stepped = _meaningful(program, b.state(0))
                got += [snapshot_fields(x) for x in b.finish().get(0, [])]
            assert got == want, f"skipper {s}"
            assert [e for snap in got for e in snap[0]] == scanned[0], f"skipper {s}: the events differ from a scan's"
            assert got[-1][1] == scanned[1], f"skipper {s}: the verdicts differ from a scan's"
            with checker.batch(1) as b:
                b.feed_text(0, text)
                whole = _meaningful(program, b.state(0))
            assert without_tokens(stepped) == without_tokens(whole), f"skipper {s}: stepping left another state"


def _corpus(name: str, size: int) -> bytes:
    """bench/run.py's text of a domain (loaded as a file: bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_run", run)
    spec.loader.exec_module(run)
    return getattr(run, f"{name}_text")(size)


@pytest.mark.skipif(not DATA.exists(), reason=f"the shared corpora are not at {DATA}")
@pytest.mark.parametrize("learned", [False, True], ids=["examples", "learned"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_real_documents(name, learned):
    """A slice of each domain's corpus (bench/run.py's), with its hand-written rules and its
    learned heatmap: the reference's report on 40 KB from
    several places, and WASM's (which the differential tests hold to the reference) on
    600 KB, with each skipper; and the 40 KB fed in 1,000-byte pieces."""
    program = (LEARNED if learned else EXAMPLES)[name]
    text = _corpus(name, 600_000)
    want = wasm_checker(program).scan(text)
    for start in (0, len(text) // 3, len(text) - 40_000):
        part = text[start : start + 40_000]
        events, verdicts, counters = reference_scan(program, part)
        for s in SKIPPERS:
            with skipper(s):
                report = native_checker(program).scan(part)
                assert (report.events, report.verdicts, report.counters) == (events, verdicts, counters), s
    part = text[:40_000]
    _agrees_everywhere(program, part, [part[i : i + 1000] for i in range(0, len(part), 1000)])
    for s in SKIPPERS:
        with skipper(s):
            report = native_checker(program).scan(text)
            assert (report.events, report.verdicts, report.counters) == (want.events, want.verdicts, want.counters), s


EXAMPLES_N = int(os.environ.get("HEATC_DIFF_EXAMPLES", "1000")) // 20


@settings(max_examples=EXAMPLES_N, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(rule_sets(), weak_start_rule_sets(), percent_trigger_rule_sets()), st.data())
def test_generated_streams_with_every_skipper(g, data):
    """Generated rule sets (weak starts, `%` triggers among them) on long mostly-plain and
    dense streams, in random pieces: every skipper gives the reference's snapshots and
    leaves the automaton's state."""
    program = compile_cached(g.source)
    stream = data.draw(st.one_of(long_texts(g.pieces), dense_texts(g.pieces)))
    pieces = data.draw(chunkings(stream))
    with reported(g.source, pieces):
        _agrees_everywhere(program, stream, pieces)


# ---- the implementations against the portable loops, outside Python -----------------------

CHECK_SOURCE = REPO / "cuda_bridge" / "src" / "skipper_check.cpp"
CROSS = {"aarch64": ("aarch64-linux-gnu-g++", "qemu-aarch64")}  # the target: its compiler, its emulator


def _program_file(program, path) -> None:
    """PROGRAM for skipper_check: the parameters and tables of the program's rules.hct."""
    hct = read_hct(hct_bytes(program, pack(program), (0, 0)))
    path.write_bytes(struct.pack(f"<I{len(hct.params)}II", len(hct.params), *hct.params, len(hct.blob)) + hct.blob)


def _check_programs():
    """Every kernel feature combination's rule set, the example rule sets and the learned
    heatmaps: each part of the skipper (digit runs of each kind, weak starts, CJK text, anchors)."""
    out = [compile_cached(features.rule_set(e["recipe"])) for e in features._matrix()]
    out += list(EXAMPLES.values())
    out += [*LEARNED.values(), PROGRAMS["late_only"]]
    return [p for p in out if pack(p).consts["skip_log2"]]


def _check_text() -> bytes:
    """Plain words, every rule set's snippets, the feature tests' texts and, where the shared
    corpora are, a slice of each: about 9 KB."""
    text = FILLER + " ".join(s for name in sorted(SNIPPETS) for s in SNIPPETS[name]) + FILLER
    text += " ".join(features.TEXTS)
    data = text.encode()
    if DATA.exists():
        data += b"".join(_corpus(name, 20_000)[5_000:6_500] for name in sorted(EXAMPLES))
    return data


def _run_check(tmp_path, compiler: list[str], runner: list[str]) -> str:
    exe = tmp_path / "skipper_check"
    flags = ["-std=c++17", "-O2", "-ffp-contract=off", "-I", str(REPO / "cuda_bridge" / "include")]
    built = subprocess.run([*compiler, *flags, str(CHECK_SOURCE), "-o", str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (tmp_path / "text").write_bytes(_check_text())
    outputs = []
    for k, program in enumerate(_check_programs()):
        _program_file(program, tmp_path / f"p{k}")
        run = subprocess.run([*runner, str(exe), str(tmp_path / f"p{k}"), str(tmp_path / "text")],
                             capture_output=True, text=True, timeout=1200)  # fmt: skip
        assert run.returncode == 0, f"program {k} ({program.name}): {run.stdout}{run.stderr}"
        outputs.append(run.stdout)
    return "".join(outputs)


def test_each_instruction_set_gives_the_portable_loops_results(tmp_path):
    """Compiled for this machine: from every offset of a text mixing every kind of input,
    each copy the CPU runs (SSSE3, AVX2 …) stops where the portable loops stop, with the same
    offset, lexeme count and state, for every feature combination's rule set."""
    compiler = os.environ.get("CXX", "c++")
    if not shutil.which(compiler):
        pytest.skip(f"no C++ compiler ({compiler}) to build cuda_bridge/src/skipper_check.cpp")
    out = _run_check(tmp_path, [compiler], [])
    ran = set(out.split()) - {"ok"}
    assert {s for s in SKIPPERS if s not in ("none", "scalar")} <= ran, out


@pytest.mark.parametrize("target", sorted(CROSS))
def test_other_instruction_sets_under_emulation(tmp_path, target):
    """The copies for another CPU (NEON on AArch64), cross-compiled and run under qemu-user,
    against their own portable loops: where the cross compiler and the emulator are installed
    (Debian: g++-aarch64-linux-gnu, qemu-user)."""
    compiler, emulator = CROSS[target]
    missing = [tool for tool in (compiler, emulator) if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: the {target} skipper is not checked here")
    out = _run_check(tmp_path, [compiler, "-static"], [emulator])
    assert "neon" in out.split(), out
