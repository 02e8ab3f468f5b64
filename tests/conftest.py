import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Under pytest-xdist each worker gets its share of the cores for torch and onnxruntime (set
# before either is imported, and inherited by the `heatc learn` subprocesses tests start):
# two workers each running two threads on two cores lose more to contention than they gain.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OMP_NUM_THREADS" not in os.environ:
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(_share)

sys.path.insert(0, str(Path(__file__).parent))

# CI: enough examples to mean something, no wall-clock deadline (CI machines are slow and
# shared). `HYPOTHESIS_PROFILE=long` is the documented long run (docs/testing.md).
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=100_000, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every WASM module the tests build goes through wasm-validate (Debian's wabt), when it
# is installed; the run's summary says how many were validated, or that none could be.
import tempfile  # noqa: E402

from support import WASM_VALIDATE as _WASM_VALIDATE  # noqa: E402
from support import needs as _needs  # noqa: E402
from support import wasm_validate  # noqa: E402

import heatc.wasm as _wasm  # noqa: E402

_VALIDATED = [0]
_compile_wasm = _wasm.compile_wasm


def _compile_and_validate(program, packed=None):
    module = _compile_wasm(program, packed)
    if _WASM_VALIDATE:
        with tempfile.NamedTemporaryFile(suffix=".wasm") as f:
            f.write(module.wasm)
            f.flush()
            r = wasm_validate(f.name)
        assert r.returncode == 0, f"wasm-validate rejected a module built for {program.name}: {r.stderr}"
        _VALIDATED[0] += 1
    return module


_wasm.compile_wasm = _compile_and_validate


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)  # (a pytest-xdist worker)
    if workeroutput is not None:
        workeroutput["wasm_validated"] = _VALIDATED[0]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: the controller adds up the modules each worker validated."""
    _VALIDATED[0] += getattr(node, "workeroutput", {}).get("wasm_validated", 0)


class _Unmet(pytest.Module):
    """A test module whose `needs` are not met here: skipped at collection, never imported."""

    why = ""

    def collect(self):
        # raised from a line "of" the module, so that the skip is reported at its path
        code = compile("skip(why, allow_module_level=True)", str(self.path), "exec")
        exec(code, {"skip": pytest.skip, "why": self.why})


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    why = _needs.reason(_needs.file_marks(module_path).needs)
    if why is None:
        return None
    module = _Unmet.from_parent(parent, path=module_path)
    module.why = why
    return module


# (first: pytest-xdist's own hook reads the xdist_group markers this one adds)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """A test marked `needs` that cannot run here is skipped with the reason (support/needs.py)."""
    for item in items:
        why = _needs.reason([n for mark in item.iter_markers("needs") for n in mark.args])
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))
    _group(items)


def _group(items):
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`) the tests of a module
    that share a module-scoped fixture run on one worker, so that an expensive fixture (a
    `heatc learn` run, a trained student, a built engine) is made once, and the vLLM tests
    run one after another (each starts an engine). Other tests are spread one by one."""
    for item in items:
        module = getattr(item.module, "__name__", "") if hasattr(item, "module") else ""
        if module.startswith("test_engine_vllm"):
            group = "vllm"
        else:
            defs = getattr(item, "_fixtureinfo", None)  # (pytest's own record of the item's fixtures)
            scopes = {d.scope for ds in (defs.name2fixturedefs.values() if defs else ()) for d in ds}
            if not scopes & {"module", "package", "class"}:
                continue
            group = module
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_terminal_summary(terminalreporter):
    if _WASM_VALIDATE:
        terminalreporter.write_line(f"wasm-validate: {_VALIDATED[0]} modules built by the tests, all valid")
    else:
        terminalreporter.write_line(
            "wasm-validate: NOT RUN — install Debian's wabt (.ci/run does) to validate every module"
        )


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory):
    """A tiny randomly initialised GPT-2 with the MiniLM tokenizer, built here and offline, to
    exercise `heatc learn --teacher PATH` with a causal LM."""
    import json

    torch = pytest.importorskip("torch", reason="needs torch (pip install 'heatc[learn]')")
    from transformers import GPT2Config, GPT2LMHeadModel

    from heatc.learn.teaching.teacher import minilm_dir

    directory = tmp_path_factory.mktemp("tiny-gpt2")
    torch.manual_seed(0)
    src = minilm_dir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, directory / name)
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    config = GPT2Config(vocab_size=vocab, n_positions=128, n_embd=32, n_layer=2, n_head=2)
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory
