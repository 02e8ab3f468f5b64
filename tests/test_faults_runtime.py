"""The runtime under faults and careless or hostile use: a trapped call leaves nothing
behind, a closed checker raises instead of crashing, every index and token id is checked,
memory is given back, a module's files are checked before they are read, manifests of the
wrong shape are refused, limits and arguments are validated. Each test reproduces a
failure of an earlier runtime (a wrong report, a crash, a hang, memory never given back)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support import REPO
from support.hostile import STALL, hostile_module

import heatc_runtime as rt
from heatc.lang.compiler import compile_file
from heatc.semantics.reference import Machine
from heatc.verify.backends import run_document
from heatc.wasm import compile_wasm, write_module

TEXT = "Glucose 5000 mg/dL. BP 410/95 mmHg. potassium 4.9."
DENSE = b"glucose 5000 mg/dL. "
TOKENS = [b"glucose", b" ", b"5000", b" mg/dL", b".", b"", b" BP 410/95 mmHg", *(bytes([i]) for i in range(256))]


@pytest.fixture(scope="module")
def program():
    return compile_file(REPO / "examples" / "medical.heat")


@pytest.fixture(scope="module")
def module_dir(program, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("medical")
    write_module(compile_wasm(program), d)
    return d


def _reference(program, text) -> tuple:
    events, verdicts, counters = run_document("reference", program, text.encode() if isinstance(text, str) else text)
    return events, dict(verdicts), counters


def _report(r) -> tuple:
    return r.events, dict(r.verdicts), r.counters


# -- traps --------------------------------------------------------------------------------


def test_a_scan_stopped_by_its_deadline_leaves_nothing_for_the_next_scan(program, module_dir):
    checker = rt.load(module_dir, rt.Limits(timeout_s=0.001))
    with pytest.raises(rt.ModuleTrap, match="time limit"):
        checker.scan(DENSE * 2_500_000)
    for _ in range(50):  # (a 1 ms deadline can stop the short scan too: then it is tried again)
        try:
            report = checker.scan(TEXT)
            break
        except rt.ModuleTrap:
            continue
    assert _report(report) == _reference(program, TEXT)


def test_a_scan_out_of_fuel_leaves_nothing_for_the_next_scan(program, module_dir):
    checker = rt.load(module_dir, rt.Limits(fuel=200_000))
    for _ in range(3):
        with pytest.raises(rt.ModuleTrap, match="out of fuel"):
            checker.scan(DENSE * 1000)
        assert _report(checker.scan(TEXT)) == _reference(program, TEXT)


def test_a_trapped_batch_step_interrupts_its_sequences_until_they_are_reset(program, module_dir):
    checker = rt.load(module_dir, rt.Limits(fuel=200_000))
    checker.set_token_table(TOKENS)
    batch = checker.batch(3)
    batch.feed_text(1, "glucose 5000 mg/dL")
    with pytest.raises(rt.ModuleTrap, match="sequence 0 of the batch must be reset"):
        batch.feed_text(0, DENSE * 1000)
    for call in (lambda: batch.feed_ids([0, 1, 2]), batch.snapshot, batch.finish, lambda: batch.state(0)):
        with pytest.raises(rt.SequenceInterrupted, match="sequence 0 of this batch was interrupted"):
            call()
    batch.fork(0, 2)  # a clean sequence forked onto it makes it usable again
    machines = [Machine(program), Machine(program), Machine(program)]
    machines[1].feed(b"glucose 5000 mg/dL")
    got = batch.feed_ids([4, 4, 4])
    for i, m in enumerate(machines):
        assert [(s.events, s.verdicts, s.counters) for s in got.get(i, [])] == [
            (s.events, s.verdicts, s.counters) for s in m.feed(b".")
        ]
    checker.set_token_table([*TOKENS, DENSE * 1000])  # a token one step cannot take under this fuel
    with pytest.raises(rt.ModuleTrap, match="sequences 0 to 2 of the batch must be reset"):
        batch.feed_ids([len(TOKENS)] * 3)
    with pytest.raises(rt.SequenceInterrupted, match="sequences 0 to 2 of this batch were interrupted"):
        batch.feed_ids([0, 0, 0])
    batch.reset()
    assert batch.feed_text(0, DENSE + b"x")[0].verdicts == Machine(program).feed(DENSE)[0].verdicts


# -- closed checkers ----------------------------------------------------------------------

CLOSED = """
import sys
import heatc_runtime as rt
c = rt.load(sys.argv[1])
c.scan("x")
b = c.batch(2)
c.set_token_table([b"a", b"b"])
c.close()
for name, call in [("scan", lambda: c.scan("x")), ("feed_ids", lambda: b.feed_ids([0, 1])),
                   ("feed_text", lambda: b.feed_text(0, "x")), ("reset", b.reset), ("state", lambda: b.state(0)),
                   ("batch", lambda: c.batch(1)), ("clone", c.clone)]:
    try:
        call()
        print(name, "returned")
    except Exception as e:
        print(name, type(e).__name__, e)
"""


def test_a_closed_checker_raises_instead_of_crashing(module_dir):
    r = subprocess.run([sys.executable, "-c", CLOSED, str(module_dir)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    lines = r.stdout.splitlines()
    assert len(lines) == 7 and all(" CheckerClosed this checker was closed" in line for line in lines), r.stdout


def test_a_closed_batch_raises_and_gives_its_memory_back(module_dir):
    checker = rt.load(module_dir)
    checker.set_token_table(TOKENS)
    used = checker._heap.in_use
    with checker.batch(8) as batch:
        batch.feed_ids([0] * 8)
    assert checker._heap.in_use == used
    with pytest.raises(rt.CheckerClosed, match="this batch was closed"):
        batch.feed_ids([0] * 8)
    with pytest.raises(rt.CheckerClosed):
        batch.reset()


# -- indices ------------------------------------------------------------------------------


def test_batch_indices_are_checked(program, module_dir):
    checker = rt.load(module_dir)
    checker.set_token_table(TOKENS)
    batch = checker.batch(2)
    for call, message in [
        (lambda: batch.reset(-1), r"i=-1 is out of range: the batch has sequences 0 to 1"),
        (lambda: batch.reset(2), r"i=2 is out of range"),
        (lambda: batch.fork(5, 0), r"dst=5 is out of range"),
        (lambda: batch.fork(0, -3), r"src=-3 is out of range"),
        (lambda: batch.feed_text(9, "x"), r"i=9 is out of range"),
        (lambda: batch.state(7), r"i=7 is out of range"),
    ]:
        with pytest.raises(IndexError, match=message):
            call()
    with pytest.raises(TypeError, match="sequence index"):
        batch.reset(1.0)
    # nothing above wrote anywhere: the token table and the states are as a fresh checker's
    fresh = rt.load(module_dir)
    fresh.set_token_table(TOKENS)
    twin = fresh.batch(2)
    ids = [[0, 1], [2, 3], [4, 6], [1, 0], [4, 4]]
    for step in ids:
        assert _snaps(batch.feed_ids(step)) == _snaps(twin.feed_ids(step))
    assert _snaps(batch.finish()) == _snaps(twin.finish())


def _snaps(published: dict) -> dict:
    return {i: [(s.events, dict(s.verdicts), s.counters, s.final) for s in snaps] for i, snaps in published.items()}


# -- memory -------------------------------------------------------------------------------


def test_batches_give_their_memory_back(module_dir):
    checker = rt.load(module_dir, rt.Limits(memory_bytes=64 << 20))
    checker.set_token_table(TOKENS)
    for k in range(3000):  # a server opening a batch per request
        batch = checker.batch(64)
        batch.feed_ids([k % 7] * 64)
        del batch  # (garbage-collected: given back at the next allocation)
        if k == 10:
            size = checker._memory.data_len(checker.store)
    for _ in range(1000):
        checker.batch(64).close()
        with checker.batch(5) as other:
            other.feed_ids([0] * 5)
    assert checker._memory.data_len(checker.store) == size
    big = (40 << 20) // checker.state_size  # a batch only one of which fits under the limit
    checker.batch(big).close()
    checker.batch(big).close()


def test_token_tables_and_the_scan_input_reuse_their_memory(module_dir):
    checker = rt.load(module_dir, rt.Limits(memory_bytes=96 << 20))
    table = [bytes([i % 256]) * (1 + i % 7) for i in range(30_000)]
    for k in range(300):
        checker.set_token_table(table[k:] + table[:k])
    checker.scan(DENSE * 2_000_000)  # a 40 MB input buffer…
    checker.scan(TEXT)  # …shrinks back for a small document: room for a big batch again
    checker.batch((48 << 20) // checker.state_size).close()
    assert checker._memory.data_len(checker.store) <= 96 << 20


def test_a_token_longer_than_one_call_can_take_is_fed_in_pieces(program, module_dir):
    checker = rt.load(module_dir)
    long_tokens = [DENSE * 300, DENSE * 700]  # 6,000 and 14,000 bytes: more events than the buffers hold
    checker.set_token_table([b"x", *long_tokens])
    batch = checker.batch(3)
    machines = [Machine(program) for _ in range(3)]
    for step in ([1, 0, 2], [2, 1, 0]):
        got = batch.feed_ids(step)
        for i, (m, t) in enumerate(zip(machines, step, strict=True)):
            assert _snaps(got).get(i, []) == _snaps({i: m.feed(([b"x", *long_tokens])[t])}).get(i, []), f"seq {i}"
    finished = batch.finish()
    for i, m in enumerate(machines):
        assert _snaps(finished)[i] == _snaps({i: m.finish()})[i]


# -- loading: what is read, and how much ---------------------------------------------------


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _load_in_time(path: Path, seconds: float = 10.0):
    """rt.load in a thread: a load that hangs (a FIFO) fails the test instead of the suite."""
    result: list = []

    def run():
        try:
            result.append(rt.load(path))
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"loading {path} hung"
    return result[0]


@pytest.mark.parametrize("name", ["module.wasm", "manifest.json"])
@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory"])
def test_files_that_are_not_regular_files_are_refused(module_dir, tmp_path, name, kind):
    d = _copy(module_dir, tmp_path / "m")
    (d / name).unlink()
    if kind == "dev_zero":
        (d / name).symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(d / name)
    else:
        (d / name).mkdir()
    try:
        error = _load_in_time(d)
    finally:
        if kind == "fifo":  # (releases a reader an earlier runtime left blocked in open())
            fd = os.open(d / name, os.O_WRONLY | os.O_NONBLOCK) if _has_reader(d / name) else None
            if fd is not None:
                os.close(fd)
    assert isinstance(error, rt.ModuleError), error
    what = {"dev_zero": "a symbolic link", "fifo": "a FIFO", "directory": "a directory"}[kind]
    assert f"{what}, not a regular file" in str(error)


def _has_reader(fifo: Path) -> bool:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


def test_a_sparse_module_of_two_gigabytes_is_refused_before_it_is_read(module_dir, tmp_path):
    d = _copy(module_dir, tmp_path / "m")
    with open(d / "module.wasm", "r+b") as f:
        f.truncate(2 << 30)
    started = time.monotonic()
    with pytest.raises(rt.ModuleError, match="size mismatch"):
        rt.load(d)
    assert time.monotonic() - started < 2.0


def _edit_manifest(d: Path, change) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    change(manifest)
    (d / "manifest.json").write_text(json.dumps(manifest))


def test_an_artifact_outside_the_build_directory_is_refused(tmp_path):
    from heatc.heatmap.build import build

    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path / "b").directory.resolve()

    def traverse(m):
        m["build"]["artifacts"]["../../../../dev/zero"] = {"sha256": "0" * 64, "size": 0}
        m.pop("manifest_sha256", None)  # (edited by hand: its own digest no longer holds)

    _edit_manifest(d, traverse)
    with pytest.raises(rt.ModuleError, match=r"manifest field build.artifacts: expected file names"):
        rt.load(d)
    (d / "tokens.bin").unlink()
    (d / "tokens.bin").symlink_to("/dev/zero")
    _edit_manifest(d, lambda m: m["build"]["artifacts"].pop("../../../../dev/zero"))
    with pytest.raises(rt.ModuleError, match=r"tokens\.bin: cannot read the build artifact: a symbolic link"):
        rt.load(d)


# -- manifests and tables of the wrong shape -------------------------------------------------


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda m: m.update(abi="1.1"), "manifest field abi: expected an object, got '1.1'"),
        (lambda m: m.update(rules=5), "manifest field rules: expected a list, got 5"),
        (lambda m: m["rules"][0].update(captures="v"), r"manifest field rules\[0\].captures: expected a list"),
        (lambda m: m["rules"][0]["captures"][0].update(kind="text"), r"rules\[0\].captures\[0\].kind"),
        (lambda m: m["layout"].update(state_size=-1), "manifest field layout.state_size: expected a whole number"),
        (lambda m: m["wasm"].update(file="../module.wasm"), "manifest field wasm.file: expected a file name"),
        (lambda m: m.update(channels=[{"name": 3}]), r"manifest field channels\[0\].name: expected a string"),
        (lambda m: m["abi"].update(major=True), "manifest field abi.major: expected a whole number, got True"),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_refused(module_dir, tmp_path, change, message):
    d = _copy(module_dir, tmp_path / "m")
    _edit_manifest(d, change)
    with pytest.raises(rt.ModuleError, match=message):
        rt.load(d)


def test_a_deeply_nested_manifest_is_refused(module_dir, tmp_path):
    d = _copy(module_dir, tmp_path / "m")
    (d / "manifest.json").write_text('{"format": "heatc-module", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(rt.ModuleError, match="nested too deeply"):
        rt.load(d)


def test_a_short_token_table_with_a_matching_checksum_is_refused(tmp_path):
    from heatc.heatmap.build import build

    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path / "b").directory.resolve()
    junk = b"HEATCTOK\x01\x00"
    (d / "tokens.bin").write_bytes(junk)

    def match(m):
        m["build"]["artifacts"]["tokens.bin"] = {"sha256": hashlib.sha256(junk).hexdigest(), "size": len(junk)}
        m.pop("manifest_sha256", None)

    _edit_manifest(d, match)
    with pytest.raises(rt.ModuleError, match=r"tokens\.bin: the token table is truncated"):
        rt.load(d)


def test_a_manifest_changed_after_the_build_is_refused(tmp_path):
    from heatc.heatmap.build import build

    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path / "b").directory.resolve()
    text = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(text.replace('"glucose_mg_dl"', '"glucose_mg_dL"'))
    with pytest.raises(rt.ModuleError, match="the manifest was changed after the build"):
        rt.load(d)


# -- limits and arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"timeout_s": 0}, ValueError),
        ({"timeout_s": -1}, ValueError),
        ({"timeout_s": 1e300}, ValueError),
        ({"timeout_s": float("nan")}, ValueError),
        ({"timeout_s": float("inf")}, ValueError),
        ({"timeout_s": "30"}, TypeError),
        ({"fuel": -5}, ValueError),
        ({"fuel": 0}, ValueError),
        ({"fuel": 1.5}, TypeError),
        ({"memory_bytes": 100}, ValueError),
        ({"memory_bytes": 1 << 40}, ValueError),
    ],
)
def test_limits_out_of_range_are_refused(kwargs, error):
    with pytest.raises(error, match=r"Limits\."):
        rt.Limits(**kwargs)


def test_token_ids_are_never_wrapped_or_truncated(module_dir):
    checker = rt.load(module_dir)
    checker.set_token_table(TOKENS)
    one, two = checker.batch(1), checker.batch(2)
    n = len(TOKENS)
    for ids, error in [
        ([2**32 + 5], ValueError),
        ([-1], ValueError),
        ([-(2**32) + 5], ValueError),
        ([np.int64(2**32 + 5)], ValueError),
        ([n], ValueError),
        ([5.7], TypeError),
        ([np.float64(5.0)], TypeError),
        (["5"], TypeError),
    ]:
        with pytest.raises(error, match="token id"):
            one.feed_ids(ids)
    for ids, error in [
        ([2**32 + 5, 1], ValueError),
        ([5.7, 1.2], TypeError),
        (np.array([1.0, 2.0]), TypeError),
        (np.array([-1, 2], np.int64), ValueError),
        (np.array([2**32 + 5, 2], np.int64), ValueError),
        ([1, n], ValueError),
        ([1, 2, 3], ValueError),
        (5, TypeError),
    ]:
        with pytest.raises(error, match="token id"):
            two.feed_ids(ids)
    # nothing was fed: the batches are where they started
    assert one.state(0) == checker.batch(1).state(0) and two.state(1) == checker.batch(1).state(0)
    assert one.feed_ids(np.array([5], np.uint32)) == {} and one.feed_ids([np.int64(0)]) == {}


def test_texts_must_be_text_or_bytes(module_dir):
    checker = rt.load(module_dir)
    for bad in (123, None, [b"x"], 1.5):
        with pytest.raises(TypeError, match="text must be str, bytes, bytearray or memoryview"):
            checker.scan(bad)
        with pytest.raises(TypeError, match="text must be str, bytes, bytearray or memoryview"):
            checker.batch(1).feed_text(0, bad)
    with pytest.raises(ValueError, match="not valid Unicode"):
        checker.scan("\ud800")
    assert checker.scan(bytearray(b"SpO2 107%")) == checker.scan(memoryview(b"SpO2 107%")) == checker.scan("SpO2 107%")
    for bad, error in ((0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="n must be"):
            checker.batch(bad)


# -- modules that are not heatc's --------------------------------------------------------


def test_a_module_that_never_makes_progress_does_not_hang_the_host(tmp_path):
    checker = rt.load(hostile_module(tmp_path, scan=STALL), rt.Limits(timeout_s=5))
    checker.set_token_table([b"x"])
    batch = checker.batch(2)
    for call in (lambda: checker.scan("hello"), lambda: batch.feed_text(0, "x"), lambda: batch.feed_ids([0, 0])):
        started = time.monotonic()
        with pytest.raises(rt.ModuleTrap, match="made no progress"):
            call()
        assert time.monotonic() - started < 2
        batch.reset()
    with pytest.raises(rt.ModuleTrap, match="made no progress"):
        batch.reset() or batch.snapshot()
