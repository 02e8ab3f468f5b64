"""heatc build and its inputs under faults: build directories corrupted every way a disk, a
person or an attacker can (each refused with the reason, never a wrong report, a traceback
or a hang), builds killed at random points or racing into one target (each ends in the old
build or a new one), hostile heatmaps (YAML alias bombs, tags, huge numbers, devices as
files) and rule files (numbers past float64, surrogates, deep nesting, a byte-order mark)."""

import json
import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

import heatc_runtime as rt
from heatc.cli import app
from heatc.errors import HeatError
from heatc.heatmap.build import build
from heatc.heatmap.format import load_heatmap
from heatc.ir import IR_VERSION
from heatc.lang.compiler import compile_source

HERE = Path(__file__).parent
GOOD = HERE / "heatmaps" / "good.yaml"
PROBE = "glucose 5000 mg/dL."


def _in_time(fn, seconds: float = 10.0):
    """fn() in a thread: what it returned or raised; a call that hangs fails the test."""
    result: list = []

    def run():
        try:
            result.append(fn())
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hung"
    return result[0]


# -- corrupted build directories ----------------------------------------------------------

ARTIFACTS = ("manifest.json", "module.wasm", "tokens.bin", "rules.hct", "program.json")


def _flip(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def _corruptions():
    """(name, change(path of the file, rng)) for what can happen to one file of a build."""

    def truncate(fraction):
        return lambda p, rng: p.write_bytes(p.read_bytes()[: int(p.stat().st_size * fraction)])

    def replace(make):
        def change(p, rng):
            p.unlink()
            make(p)

        return change

    def grow(p, rng):
        with open(p, "r+b") as f:
            f.truncate(p.stat().st_size + (1 << 30))  # sparse: a gigabyte more, nothing written

    return [
        ("bit_flips", _flip),
        ("truncated_half", truncate(0.5)),
        ("truncated_empty", truncate(0.0)),
        ("one_byte_short", lambda p, rng: p.write_bytes(p.read_bytes()[:-1])),
        ("one_byte_more", lambda p, rng: p.write_bytes(p.read_bytes() + b"\0")),
        ("oversized", grow),
        ("missing", lambda p, rng: p.unlink()),
        ("directory", replace(lambda p: p.mkdir())),
        ("fifo", replace(os.mkfifo)),
        ("link_to_dev_zero", replace(lambda p: p.symlink_to("/dev/zero"))),
        ("link_to_dev_urandom", replace(lambda p: p.symlink_to("/dev/urandom"))),
        ("link_to_a_sibling", replace(lambda p: p.symlink_to("rules.hct" if p.name != "rules.hct" else "tokens.bin"))),
        ("link_outside", replace(lambda p: p.symlink_to("../../outside"))),
    ]


@pytest.fixture(scope="module")
def good_build(tmp_path_factory) -> Path:
    return build(GOOD, tmp_path_factory.mktemp("good")).target


@pytest.mark.parametrize("artifact", ARTIFACTS)
@pytest.mark.parametrize("corruption", [name for name, _ in _corruptions()])
def test_a_corrupted_build_is_refused_with_the_reason(good_build, tmp_path, artifact, corruption):
    import shutil

    d = tmp_path / "build"
    shutil.copytree(good_build, d)
    (tmp_path / "outside").write_bytes(b"{}")
    change = dict(_corruptions())[corruption]
    rng = random.Random(f"{artifact}/{corruption}")
    for attempt in range(5 if corruption == "bit_flips" else 1):
        if attempt:
            shutil.rmtree(d)
            shutil.copytree(good_build, d)
        change(d / artifact, rng)
        outcome = _in_time(lambda: rt.load(d))
        if isinstance(outcome, rt.Checker):  # only when nothing that matters changed (a manifest's last newline)
            original = rt.load(good_build)
            assert outcome.manifest == original.manifest, f"{artifact} {corruption}: loaded a changed build"
            assert outcome.scan(PROBE) == original.scan(PROBE)
            continue
        assert isinstance(outcome, rt.ModuleError), f"{artifact} {corruption}: {type(outcome).__name__}: {outcome}"
        assert str(outcome).startswith(str(d)), outcome  # names the file


@pytest.mark.parametrize("artifact", ["manifest.json", "rules.hct", "tokens.bin"])
@pytest.mark.parametrize("corruption", [name for name, _ in _corruptions()])
@pytest.mark.needs("torch")
def test_the_cuda_ops_loader_refuses_a_corrupted_build_as_the_runtime_does(good_build, tmp_path, artifact, corruption):
    """The CUDA ops' loader read its files with plain reads and trusted the manifest: a FIFO hung
    it, /dev/zero filled memory, a manifest of the wrong shape raised a KeyError."""
    import shutil

    from heatc_runtime.cuda.program import load as load_ops

    d = tmp_path / "build"
    shutil.copytree(good_build, d)
    (tmp_path / "outside").write_bytes(b"{}")
    dict(_corruptions())[corruption](d / artifact, random.Random(f"{artifact}/{corruption}"))
    outcome = _in_time(lambda: load_ops(d, "cpu"))
    if not isinstance(outcome, BaseException):  # (a manifest's last newline, nothing else)
        assert outcome.manifest == rt.load(good_build).manifest, f"{artifact} {corruption}: loaded a changed build"
        return
    assert isinstance(outcome, rt.ModuleError), f"{artifact} {corruption}: {type(outcome).__name__}: {outcome}"
    assert str(outcome).startswith(str(d)), outcome  # names the file


# every command that reads a build, by the runtime's readers: `{d}` the build, `{text}` a text
CLI_READERS = {
    "scan": ["scan", "{d}", "{text}"],
    "scan native": ["scan", "--backend", "native", "{d}", "{text}"],
    "scan reference": ["scan", "--backend", "reference", "{d}", "{text}"],
    "inspect": ["inspect", "{d}"],
    "inspect --tiers": ["inspect", "--tiers", "{d}"],
    "ir": ["ir", "{d}"],
}


def _cli(command: str, d: Path, text: Path):
    args = [a.format(d=d, text=text) for a in CLI_READERS[command]]
    return _in_time(lambda: CliRunner().invoke(app, args))


@pytest.fixture(scope="module")
def good_outputs(good_build, tmp_path_factory) -> dict[str, str]:
    """What each command prints for the good build (its path written `{d}`)."""
    import shutil

    tmp = tmp_path_factory.mktemp("outputs")
    d, text = tmp / "build", tmp / "text.txt"
    text.write_text(PROBE)
    shutil.copytree(good_build, d)
    return {command: _cli(command, d, text).output.replace(str(d), "{d}") for command in CLI_READERS}


@pytest.mark.parametrize("artifact", ARTIFACTS)
@pytest.mark.parametrize("corruption", [name for name, _ in _corruptions()])
def test_every_command_that_reads_a_build_refuses_a_corrupted_one_in_one_line(
    good_build, good_outputs, tmp_path, artifact, corruption
):
    """`heatc scan BUILD` read program.json and the manifest itself: a FIFO hung it, /dev/zero
    or a sparse file raised MemoryError, a bad manifest printed a traceback. Each command
    either refuses the build with one line naming the file, or (when what changed does not
    matter) prints what it prints for the good build."""
    import shutil

    d, text = tmp_path / "build", tmp_path / "text.txt"
    text.write_text(PROBE)
    shutil.copytree(good_build, d)
    (tmp_path / "outside").write_bytes(b"{}")
    dict(_corruptions())[corruption](d / artifact, random.Random(f"{artifact}/{corruption}"))
    for command in CLI_READERS:
        r = _cli(command, d, text)
        assert isinstance(r.exception, SystemExit) or r.exception is None, f"{command}: {r.exception!r}"
        if r.exit_code in (0, 3):
            assert r.output.replace(str(d), "{d}") == good_outputs[command], f"{command} read a changed {artifact}"
            continue
        assert r.exit_code == 1, (command, r.exit_code, r.output)
        assert len(r.output.strip().splitlines()) == 1 and str(d) in r.output, f"{command}: {r.output}"


@pytest.mark.parametrize(
    "content,message",
    [
        (b"null", "not a heatc program (AttributeError"),
        (b"[" * 100_000 + b"]" * 100_000, "not a heatc program (nested too deeply)"),
        # the version this heatc reads, so what is refused is the missing fields, not the version
        (json.dumps({"ir_version": IR_VERSION, "name": 5}).encode(), "not a heatc program (KeyError"),
        (b"\xff\xfe\x00", "not a heatc program (UnicodeDecodeError"),
    ],
)
def test_a_program_json_that_is_no_program_is_refused_even_with_its_checksums_made_to_match(
    good_build, tmp_path, content, message
):
    import hashlib
    import shutil

    d, text = tmp_path / "build", tmp_path / "text.txt"
    text.write_text(PROBE)
    shutil.copytree(good_build, d)
    (d / "program.json").write_bytes(content)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["build"]["artifacts"]["program.json"] = {
        "sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
    }
    del manifest["manifest_sha256"]
    (d / "manifest.json").write_text(json.dumps(manifest))
    for command in ("scan reference", "ir"):
        r = _cli(command, d, text)
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), f"{command}: {r.exception!r}"
        assert r.output.startswith(f"{d / 'program.json'}: error: {message}"), r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_a_manifest_naming_files_outside_its_directory_is_refused(good_build, tmp_path):
    import shutil

    from heatc_runtime.backends.manifest import manifest_digest

    for name in ("../../../../dev/zero", "/dev/zero", "sub/file", "..", ".", ""):
        d = tmp_path / f"b{abs(hash(name))}"
        shutil.copytree(good_build, d)
        manifest = json.loads((d / "manifest.json").read_text())
        manifest["build"]["artifacts"][name] = {"sha256": "0" * 64, "size": 1}
        manifest["manifest_sha256"] = manifest_digest(manifest)  # (consistent but for the name)
        (d / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(rt.ModuleError, match="expected file names in the build directory"):
            _raise(_in_time(lambda d=d: rt.load(d)))
        manifest["wasm"]["file"] = name
        del manifest["build"]["artifacts"][name]
        manifest["manifest_sha256"] = manifest_digest(manifest)
        (d / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(rt.ModuleError, match=r"wasm\.file: expected a file name"):
            _raise(_in_time(lambda d=d: rt.load(d)))


def _raise(outcome):
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def test_the_cli_refuses_a_corrupted_build_without_a_traceback(good_build, tmp_path):
    import shutil

    d = tmp_path / "build"
    shutil.copytree(good_build, d)
    (d / "tokens.bin").unlink()
    os.mkfifo(d / "tokens.bin")
    for command in (["scan", str(d)], ["inspect", str(d)]):
        r = CliRunner().invoke(app, command, input="x")
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.exception
        assert "tokens.bin: cannot read the build artifact: a FIFO, not a regular file" in r.output


@pytest.mark.parametrize("below", ["", "sub"])
def test_an_output_path_under_a_file_is_refused_by_name(tmp_path, below):
    """`heatc build … -o out` where `out` (or a folder above it) is a file: the file named,
    no traceback, nothing written."""
    blocking = tmp_path / "out"
    blocking.write_text("not a directory")
    r = CliRunner().invoke(app, ["build", str(GOOD), "-o", str(blocking / below)])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.exception
    assert f"{blocking}: error: is a file, not a directory" in r.output
    assert blocking.read_text() == "not a directory"


# -- builds killed at random points, builds racing into one target ---------------------


def _faults(mode: str, out: Path, seed: int, n: int) -> dict:
    r = subprocess.run(
        [sys.executable, str(HERE / "build_faults.py"), mode, str(GOOD), str(out), str(seed), str(n)],
        capture_output=True,
        text=True,
        timeout=max(900, 20 * n),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _complete(state: dict) -> None:
    assert state["link"] is not None, state
    assert "error" not in state, state["error"]
    assert state["rejected"] == ["glucose_mg_dl"], state


def test_builds_killed_at_random_points_leave_the_old_build_or_a_new_one(tmp_path):
    result = _faults("kill", tmp_path / "out", seed=16, n=int(os.environ.get("HEATC_FAULT_KILLS", "8")))
    heats = {0.9} | {float(f"0.{900 + k}") for k in range(1, len(result["runs"]) + 1)}
    for run in result["runs"]:
        _complete(run)
        assert run["heat"] in heats
        for name in run["entries"]:  # what a killed build may leave: its staging, its link, a finished target
            assert name in ("tiny", ".tiny.lock") or name.startswith((".tiny.tmp-", ".tiny.link-", ".tiny.")), name
    after = result["after"]
    _complete(after)
    assert after["entries"] == sorted(["tiny", ".tiny.lock", result["final"]])  # the next build cleaned up


def test_a_build_killed_while_removing_an_old_build_leaves_no_half_deleted_build_to_reuse(tmp_path, monkeypatch):
    """A build removes the builds its link no longer names. Killed half way through deleting
    one, it left that directory under its digest's name without some of its files, and the next
    build of the same heatmap took the directory as already built and linked to it: every load
    then failed. The kill is simulated where it fell: in the deletion, after one file."""
    import heatc.heatmap.build as build_module

    out = tmp_path / "out"
    first = build(GOOD, out)
    real_rmtree = build_module.shutil.rmtree

    def killed(path, ignore_errors=False):
        victim = next(p for p in sorted(Path(path).rglob("*")) if p.is_file())
        victim.unlink()
        raise KeyboardInterrupt  # (what a SIGKILL does to the rest of the deletion)

    other = tmp_path / "other.yaml"
    other.write_text(GOOD.read_text().replace("score: 0.9,", "score: 0.91,", 1))
    monkeypatch.setattr(build_module.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        build(other, out)
    monkeypatch.setattr(build_module.shutil, "rmtree", real_rmtree)
    again = build(GOOD, out)
    assert again.target.name == first.target.name
    checker = rt.load(out / "tiny", rt.Limits.trusted())
    assert checker.scan(PROBE).rejected == ["glucose_mg_dl"]
    checker.close()


def test_builds_racing_into_one_target_all_succeed_and_leave_one_complete_build(tmp_path):
    result = _faults("race", tmp_path / "out", seed=16, n=3)
    for r in result["rounds"]:
        assert r["codes"] == [0, 0, 0, 0], r
        _complete(r)
        targets = [e for e in r["entries"] if e.startswith(".tiny.") and e != ".tiny.lock"]
        assert targets == [r["link"]], r  # one build, the link's, and nothing half-made or dangling


# -- hostile heatmaps ---------------------------------------------------------------------


def _heatmap(tmp_path: Path, old: str, new: str, name: str = "h.yaml") -> Path:
    text = GOOD.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def _bomb(levels: int, width: int = 9) -> str:
    lines = [f"  a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines)


@pytest.mark.parametrize(
    "old,new,line,message",
    [
        ("categories:\n", f"provenance:\n{_bomb(9)}\ncategories:\n  ? *a8\n  : {{kind: unit}}\n", 7, "aliases (*a0)"),
        ('title: "A small heatmap for the tests"', "title: &t [*t]", 3, "aliases (*t) are not allowed"),
        ('title: "A small heatmap for the tests"', "title: &t {a: *t}", 3, "aliases (*t) are not allowed"),
        ("score: 0.9,", "score: !!python/object/apply:os.system [echo hi],", 11, "the tag !!python/object/apply"),
        ("score: 0.9,", "score: !!python/name:os.system 0.9,", 11, "the tag !!python/name:os.system"),
        ("score: 0.9,", "score: !custom 0.9,", 11, "the tag !custom is not allowed"),
        ("score: 0.9,", "score: !!binary aGVsbG8=,", 11, "the tag !!binary is not allowed"),
        ("score: 0.9,", "score: " + "9" * 400 + ",", 11, "a number written with 400 characters"),
        ("support: 10,", "support: " + "9" * 5000 + ",", 11, "a number written with 5000 characters"),
        ("heatmap: 1\n", "heatmap: 1\n---\nheatmap: 1\n", 2, "a heatmap is one YAML document"),
        ("cells:\n", "provenance: " + "[" * 100 + "]" * 100 + "\ncells:\n", 10, "nested more than 64 levels"),
    ],
)
def test_hostile_yaml_is_refused_at_its_position(tmp_path, old, new, line, message):
    path = _heatmap(tmp_path, old, new)
    started = time.monotonic()
    error = _in_time(lambda: load_heatmap(path))
    assert isinstance(error, HeatError), f"{type(error).__name__}: {str(error)[:500]}"
    assert time.monotonic() - started < 5
    rendered = error.render()
    assert len(rendered) < 2000, f"a {len(rendered):,}-character message"
    d = error.diagnostics[0]
    assert (d.line, message in d.message) == (line, True), rendered


def test_values_echoed_in_errors_are_cut_short(tmp_path):
    path = _heatmap(tmp_path, "kind: keyword", "kind: " + "x" * 100_000)
    error = _in_time(lambda: load_heatmap(path))
    assert isinstance(error, HeatError) and len(error.render()) < 1000, error


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_tokenizer_file_that_is_a_device_is_refused(tmp_path, device):
    path = _heatmap(tmp_path, "tokenizer: {bytes: true}", f"tokenizer: {{file: {device}}}")
    error = _in_time(lambda: build(path, tmp_path / "out"))
    assert isinstance(error, HeatError), error
    assert "a character device, not a regular file" in error.render()


_WORDPIECE = {"type": "WordPiece", "vocab": {}}


@pytest.mark.parametrize(
    "tokenizer,message",
    [
        ({"model": _WORDPIECE, "decoder": {"type": "WordPiece"}}, "the tokenizer has no tokens"),
        (
            {"model": {**_WORDPIECE, "vocab": {"a": 0, "b": 0, "c": 1}}, "decoder": {"type": "WordPiece"}},
            "the vocab gives the id 0 to 'a' and 'b'",
        ),
        (
            {"model": {**_WORDPIECE, "vocab": {"a": (1 << 24) - 1}}, "decoder": {"type": "WordPiece"}},
            "ids run to 16,777,215 but 16,777,215 of them have no token",
        ),
        (
            {"model": {"type": "Unigram", "vocab": ["hello", "world"]}, "decoder": {"type": "Metaspace"}},
            "Unigram vocab entry 0 is 'hello', not a [piece, score] pair",
        ),
        (
            {"model": {"type": "Unigram", "vocab": [["a", 0.0], ["a", -1.0]]}, "decoder": {"type": "Metaspace"}},
            "the Unigram vocab lists 'a' twice",
        ),
    ],
)
def test_a_tokenizer_no_model_could_use_is_refused(tmp_path, tokenizer, message):
    """A tokenizer with no tokens, one id for two pieces, a 100-byte file naming id 2^24 - 1 (a
    67 MB tokens.bin of empty tokens), a Unigram vocab of bare strings: each was built into a
    token table without a word."""
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    path = _heatmap(tmp_path, "tokenizer: {bytes: true}", "tokenizer: {file: tokenizer.json}")
    error = _in_time(lambda: build(path, tmp_path / "out"))
    assert isinstance(error, HeatError), error
    assert error.render().startswith(f"{tmp_path / 'tokenizer.json'}: error: ") and message in error.render()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_name_too_long_to_name_files_is_refused_at_its_line(tmp_path):
    path = _heatmap(tmp_path, "name: tiny", "name: " + "n" * 238)
    error = _in_time(lambda: build(path, tmp_path / "out"))  # (was OSError: File name too long)
    assert isinstance(error, HeatError), error
    d = error.diagnostics[0]
    assert (d.line, d.message) == (2, "name: 238 characters: a build's name is at most 100 (it names its files)")


BUILD_UNDER_A_FILE_SIZE_LIMIT = """
import resource, sys
from typer.testing import CliRunner
from heatc.cli import app
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # (module.wasm is about 130 kB)
r = CliRunner().invoke(app, ["build", sys.argv[1], "-o", sys.argv[2]])
print(r.exit_code, type(r.exception).__name__, repr(r.output))
"""


def test_a_build_past_a_file_size_limit_fails_in_one_line_and_keeps_the_old_build(tmp_path):
    out = tmp_path / "out"
    old = build(GOOD, out).target
    other = _heatmap(tmp_path, "score: 0.9,", "score: 0.91,")
    r = subprocess.run(
        [sys.executable, "-c", BUILD_UNDER_A_FILE_SIZE_LIMIT, str(other), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, exception, output = r.stdout.split(" ", 2)
    assert (code, exception) == ("1", "SystemExit"), r.stdout + r.stderr[-2000:]
    assert output.strip() == repr(f"{out}: error: cannot write the build: File too large (nothing was replaced)\n")
    assert (out / "tiny").resolve() == old.resolve()
    assert rt.load(out / "tiny").scan(PROBE).rejected == ["glucose_mg_dl"]


def test_a_chunk_separator_that_is_not_utf8_splits_at_its_bytes(tmp_path):
    """`--chunk-separator $'\\xff'` raised UnicodeEncodeError: the shell passes the byte, which
    Python holds as a lone surrogate."""
    text = tmp_path / "chunks.txt"
    text.write_bytes(b"Payment is due within 30 days.\xffPayment is due within 60 days.")
    separator = os.fsdecode(b"\xff")
    rules = Path(__file__).resolve().parent.parent / "examples" / "legal.heat"
    r = CliRunner().invoke(app, ["scan", "--chunk-separator", separator, str(rules), str(text)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.output.startswith("2 chunks: "), r.output


@pytest.mark.parametrize("text", ["/dev/zero", "directory"])
def test_a_device_or_a_directory_as_the_text_to_scan_is_refused_by_name(tmp_path, text):
    """`heatc scan RULES /dev/zero` read until memory ran out (MemoryError)."""
    path = str(tmp_path) if text == "directory" else text
    r = _in_time(lambda: CliRunner().invoke(app, ["scan", str(GOOD), path]))
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.output.startswith(f"{path}: error: cannot read: ") and len(r.output.splitlines()) == 1, r.output


def test_a_rule_file_entry_never_shows_another_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for entry in (str(secret), "/etc/passwd"):
        path = _heatmap(tmp_path, "expects:", f"rules: [{entry}]\nexpects:")
        error = _in_time(lambda path=path: build(path, tmp_path / "out"))
        assert isinstance(error, HeatError), error
        assert "root:" not in error.render() and "is not a rule file" in error.render()


def test_a_byte_order_mark_is_tolerated(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.read_bytes())
    assert load_heatmap(path).name == "tiny"
    rules = tmp_path / "bom.heat"
    rules.write_bytes(b'\xef\xbb\xbfclass na keyword = "sodium"\nrule r { match na ..2 v:number\n require v < 5 }\n')
    from heatc.lang.compiler import compile_file

    assert [r.name for r in compile_file(rules).rules] == ["r"]
    assert [r.name for r in compile_source("\ufeff" + rules.read_text(encoding="utf-8-sig")).rules] == ["r"]
    path = _heatmap(tmp_path, "expects:", "rules: [bom.heat]\nexpects:", "with_rules.yaml")
    assert "r" in [r.name for r in build(path, tmp_path / "out").program.rules]


def test_cells_below_the_threshold_cost_little_memory(tmp_path):
    head = GOOD.read_text().split("cells:\n")[0]
    cell = (
        "  - {{pair: [glucose, number], unit: mg_dl, score: 0.{:03d}, support: 10, stats: {{n: 10, q01: 45, q05: 50, "
        'q50: 100, q95: 500, q99: 610, min: 38, max: 700}}, description: "learned: coupling 1.5x the mean"}}\n'
    )
    path = tmp_path / "many.yaml"
    path.write_text(head + "cells:\n" + "".join(cell.format(i % 700) for i in range(2500)))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        hm = load_heatmap(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(hm.cells) == 2500
    assert peak < 12 * size, f"{peak / size:.0f}x the file's size"


# -- hostile rule files -------------------------------------------------------------------

RULE = 'class g keyword = "glucose"\nclass u unit = "mg"\nrule r {{ match g {gap}v:number u\n  require v in [1, {high}] }}\n'


@pytest.mark.parametrize(
    "source,line,column,message",
    [
        (RULE.format(gap="..1e400 ", high="2"), 3, 20, "the number 1e400 is too large"),
        (RULE.format(gap="", high="2") + "triggers { every 1e400 }\n", 5, 18, "the number 1e400 is too large"),
        (RULE.format(gap="", high="1e999"), 4, 20, "the number 1e999 is too large"),
        (RULE.format(gap="", high="2").replace('"glucose"', '"\\uD800"'), 1, 20, "half of a UTF-16 surrogate pair"),
        (RULE.format(gap="", high="2").replace('"mg"', '"m\\uDFFFg"'), 2, 18, "half of a UTF-16 surrogate pair"),
        (RULE.format(gap="", high="2").replace("match g", "match " + "(" * 500 + "g" + ")" * 500), 3, 0, "nested"),
    ],
)
def test_hostile_rule_files_get_positions_not_tracebacks(source, line, column, message):
    with pytest.raises(HeatError) as info:
        compile_source(source)
    d = info.value.diagnostics[0]
    assert d.line == line and (column == 0 or d.column == column) and message in d.message, info.value.render()
