"""The standalone runtime: loading and refusing modules, limits on untrusted modules,
portability (Node.js runs the same module), reproducible builds, isolation, threads."""

import copy
import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support import REPO, compile_cached, wasm_validate
from support.conformance_harness import CORPUS
from support.hostile import hostile_module

import heatc_runtime as rt
from heatc.lang.compiler import compile_file
from heatc.verify.backends import run_document
from heatc.wasm import compile_wasm, write_module

EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def medical_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("medical")
    write_module(compile_wasm(compile_file(EXAMPLES / "medical.heat")), d)
    return d


def test_load_and_scan(medical_dir):
    checker = rt.load(medical_dir)
    report = checker.scan("Glucose 5000 mg/dL. Pulse 88.")
    assert report.verdict is rt.Verdict.REJECTED
    assert report.rejected == ["glucose_quantity", "glucose_value"]
    assert report.to_json()["events"][0]["failed"] == "v in [0.5, 2000]"
    # values decoded from the event buffer are plain Python floats, not numpy scalars
    first = report.events[0]
    assert first.captures == (("v", 5000.0),) and type(first.captures[0][1]) is float
    bp = checker.scan("BP 120/80 mmHg, sodium 140.").events
    assert {e.captures for e in bp} == {(("sys", 120.0), ("dia", 80.0)), (("v", 140.0),)}


def test_report_events_are_read_lazily_from_a_copy(medical_dir):
    """A report decodes its events when first read, from records copied at the scan: later
    scans on the same checker, and a document whose events overflow the module's event
    buffer (drained in several rounds), give what the reference gives."""
    checker = rt.load(medical_dir)
    program = compile_file(EXAMPLES / "medical.heat")
    small = "Glucose 5000 mg/dL. Pulse 88."
    many = " ".join(f"glucose {5000 + n} mg/dL." for n in range(checker.ev_cap + 50))
    first = checker.scan(small)
    busy = checker.scan(many)
    checker.scan("sodium 1400.")  # overwrites the module's buffers
    assert first.events == run_document("reference", program, small.encode())[0]
    expected = run_document("reference", program, many.encode())[0]
    assert len(expected) > checker.ev_cap
    assert busy.events == expected
    assert busy.events is busy.events  # decoded once
    assert first == checker.scan(small) and first != busy
    # a report travels (multiprocessing, copies) with its events decoded
    lazy = checker.scan(small)
    assert pickle.loads(pickle.dumps(lazy)) == first == copy.deepcopy(checker.scan(small))


# -- refusing bad modules ---------------------------------------------------------------


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_truncated_module_is_refused(medical_dir, tmp_path):
    d = _copy(medical_dir, tmp_path / "m")
    wasm = (d / "module.wasm").read_bytes()
    (d / "module.wasm").write_bytes(wasm[: len(wasm) // 2])
    with pytest.raises(rt.ModuleError, match=r"size mismatch .* corrupt or was changed after"):
        rt.load(d)


def test_bit_flipped_module_is_refused(medical_dir, tmp_path):
    d = _copy(medical_dir, tmp_path / "m")
    wasm = bytearray((d / "module.wasm").read_bytes())
    wasm[1000] ^= 0x10
    (d / "module.wasm").write_bytes(bytes(wasm))
    with pytest.raises(rt.ModuleError, match="corrupt or was changed after the build"):
        rt.load(d)


def test_garbage_with_a_matching_checksum_is_refused(medical_dir, tmp_path):
    d = _copy(medical_dir, tmp_path / "m")
    junk = b"\0asm\x01\0\0\0" + bytes(range(256)) * 4
    (d / "module.wasm").write_bytes(junk)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["wasm"]["sha256"] = hashlib.sha256(junk).hexdigest()
    manifest["wasm"]["size"] = len(junk)
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(rt.ModuleError, match="does not compile"):
        rt.load(d)


@pytest.mark.parametrize(
    "abi,message",
    [
        ({"major": rt.ABI_MAJOR + 1, "minor": 0}, f"ABI {rt.ABI_MAJOR + 1}.0 is not supported"),
        ({"major": rt.ABI_MAJOR, "minor": rt.ABI_MINOR + 7}, f"ABI {rt.ABI_MAJOR}.{rt.ABI_MINOR + 7} is not supported"),
    ],
)
def test_wrong_abi_version_is_refused(medical_dir, tmp_path, abi, message):
    d = _copy(medical_dir, tmp_path / "m")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["abi"] = abi
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(rt.ModuleError, match=re.escape(message)):
        rt.load(d)


def test_missing_or_broken_manifest(tmp_path):
    with pytest.raises(rt.ModuleError, match=r"no manifest\.json"):
        rt.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(rt.ModuleError, match="not valid JSON"):
        rt.load(tmp_path)


# -- untrusted modules: time and memory limits -----------------------------------------


def test_a_module_that_loops_forever_is_stopped_by_the_deadline(tmp_path):
    checker = rt.load(hostile_module(tmp_path), rt.Limits(timeout_s=0.2))
    with pytest.raises(rt.ModuleTrap, match="ran past its time limit"):
        checker.scan("hello")


def test_a_module_that_loops_forever_runs_out_of_fuel(tmp_path):
    checker = rt.load(hostile_module(tmp_path), rt.Limits(fuel=100_000))
    with pytest.raises(rt.ModuleTrap, match="ran out of fuel"):
        checker.scan("hello")


def test_memory_limit_at_instantiation(tmp_path):
    with pytest.raises(rt.ModuleError, match="cannot be instantiated"):
        rt.load(hostile_module(tmp_path, pages=2000), rt.Limits(memory_bytes=64 << 20))


def test_memory_limit_while_running(medical_dir):
    checker = rt.load(medical_dir, rt.Limits(memory_bytes=8 << 20))
    assert checker.scan("pulse 88").verdict is rt.Verdict.CONFIRMED
    with pytest.raises(rt.ModuleTrap, match="memory would exceed its limit"):
        checker.scan(b"pulse 88 " * 2_000_000)


def test_real_modules_run_under_fuel_too(medical_dir):
    report = rt.load(medical_dir, rt.Limits(fuel=10**9)).scan("SpO2 107%")
    assert report.rejected == ["oxygen_saturation_value"]


# -- portability and reproducibility --------------------------------------------------


@pytest.mark.needs("wabt")
def test_every_test_module_passes_wasm_validate(medical_dir):
    r = wasm_validate(medical_dir / "module.wasm")
    assert r.returncode == 0, r.stderr


def _build_in_subprocess(seed: str, out: Path) -> str:
    code = "import sys; from heatc.lang import compile_file; from heatc.wasm import compile_wasm; "
    code += f"sys.stdout.write(compile_wasm(compile_file({str(EXAMPLES / 'legal.heat')!r})).wasm.hex())"
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=True,
    )
    return r.stdout


def test_rebuilding_gives_byte_identical_modules(tmp_path):
    a = _build_in_subprocess("1", tmp_path)
    b = _build_in_subprocess("2", tmp_path)
    assert a == b and len(a) > 1000


@pytest.mark.needs("node")
def test_node_runs_the_conformance_corpus_like_wasmtime(tmp_path):
    node = shutil.which("node")
    import yaml

    for path in sorted(CORPUS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        program = compile_cached(doc["rules"])
        module_dir = tmp_path / path.stem
        write_module(compile_wasm(program), module_dir)
        # (a case the corpus leaves out on the Node.js host: `skip: {js: why}`)
        cases = [c for c in doc["cases"] if "js" not in (c.get("skip") or {})]
        inputs = [c["input"].encode() if "input" in c else bytes.fromhex(c["input_hex"]) for c in cases]
        r = subprocess.run(
            [node, str(REPO / "runtime" / "js" / "heatc_host.mjs"), str(module_dir)],
            input=json.dumps([{"hex": x.hex()} for x in inputs]), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        checker = rt.load(module_dir)
        for line, data in zip(r.stdout.splitlines(), inputs, strict=True):
            from_node = json.loads(line)
            report = checker.scan(data)
            assert from_node == json.loads(json.dumps(report.to_json())), f"{path.name}: {data!r}"


# -- isolation and threads -------------------------------------------------------------


def test_runtime_imports_without_the_compiler(medical_dir):
    code = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {{"heatc", "lark", "jinja2", "yaml", "typer", "rich", "hypothesis"}}:
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import heatc_runtime
        report = heatc_runtime.load({str(medical_dir)!r}).scan("BP 410/95 mmHg")
        print(report.verdict.name, sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("heatc", "lark", "jinja2")))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "REJECTED []"


def test_threads_share_a_checker_safely(medical_dir):
    checker = rt.load(medical_dir)
    program = compile_file(EXAMPLES / "medical.heat")
    texts = [f"pulse {n}. glucose {n * 7} mg/dL." for n in range(10, 400, 13)]
    expected = {t: run_document("reference", program, t.encode())[0] for t in texts}
    errors = []

    def work(c):
        try:
            for t in texts:
                assert c.scan(t).events == expected[t]
        except AssertionError as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c,)) for c in (checker, checker, checker.clone(), checker.clone())]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_builds_token_table_is_set_by_the_first_batch_not_by_load(tmp_path):
    """A scan never reads the token table: load checks tokens.bin (a bad one is refused there,
    tests/test_faults_runtime.py) and the first batch, or a clone's, puts it in memory."""
    from heatc.heatmap.build import build

    d = build(REPO / "tests" / "heatmaps" / "good.yaml", tmp_path / "b").directory
    text = b"glucose 5000 mg/dL."
    for backend in ("wasm", "native"):
        checker = rt.load(d, backend=backend)
        twin = checker.clone()
        scanned = checker.scan(text)
        assert scanned.verdicts["glucose_mg_dl"] is rt.Verdict.REJECTED
        assert checker.n_tokens == twin.n_tokens == 0  # (not in the module's memory)
        for c in (checker, twin):
            batch = c.batch(1)
            assert c.n_tokens == 256  # one token per byte
            snaps = [s for b in text for s in batch.feed_ids([b]).get(0, [])] + batch.finish()[0]
            assert [e for s in snaps for e in s.events] == scanned.events
            assert dict(snaps[-1].verdicts) == dict(scanned.verdicts)
