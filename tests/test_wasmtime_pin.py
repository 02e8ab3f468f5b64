"""The wasmtime pin: the runtime's fast call path uses wasmtime-py's private API, so the
package requires the range it was tested with, the installed wasmtime is in that range, and
a wasmtime without that API fails at import with an error that says what to install."""

import subprocess
import sys
import tomllib
from importlib import metadata
from types import SimpleNamespace

import pytest
import wasmtime
from support import REPO

from heatc_runtime.backends import wasm_engine


def test_the_pin_is_the_tested_range_and_the_installed_version_is_in_it():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if d.startswith("wasmtime")] == ["wasmtime" + wasm_engine.TESTED_WASMTIME]
    low, high = (int(x.strip(">=<")) for x in wasm_engine.TESTED_WASMTIME.split(","))
    assert low <= int(metadata.version("wasmtime").split(".")[0]) < high


def test_the_private_api_is_there():
    assert wasm_engine.missing_private_api(wasmtime, wasm_engine.ffi) == []


def test_what_is_missing_is_named():
    class Func:
        __annotations__ = {}

    stub = SimpleNamespace(Store=object, Func=Func, WasmtimeError=object, Trap=wasmtime.Trap)
    ffi = SimpleNamespace(
        wasmtime_val_raw_t=1, wasmtime_error_t=1, _wasmtime_func_call_unchecked=SimpleNamespace(argtypes=[1, 2, 3, 4])
    )
    assert wasm_engine.missing_private_api(stub, ffi) == [
        "_bindings.wasm_trap_t",
        "_bindings._wasmtime_func_call_unchecked(context, func, args, n, trap)",
        "Store._context()",
        "Func._func",
        "WasmtimeError._from_ptr",
    ]
    assert wasm_engine.missing_private_api(stub, None) == ["wasmtime._bindings"]


HIDE_BINDINGS = """
import sys
import wasmtime
class Block:  # as if wasmtime no longer had _bindings
    def find_spec(self, name, path=None, target=None):
        if name == "wasmtime._bindings":
            raise ImportError("blocked")
sys.modules.pop("wasmtime._bindings")
del wasmtime._bindings
sys.meta_path.insert(0, Block())
"""
RENAME_CONTEXT = """
import wasmtime
del wasmtime.Store._context  # as if a release had renamed it
"""


@pytest.mark.parametrize(
    "change,missing",
    [(HIDE_BINDINGS, "wasmtime._bindings"), (RENAME_CONTEXT, "Store._context()")],
    ids=["no_bindings", "no_store_context"],
)
def test_importing_with_a_wasmtime_without_that_api_says_so(change, missing):
    code = change + "from heatc_runtime import load  # imports the engine\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"ImportError: wasmtime {metadata.version('wasmtime')} is not a version heatc_runtime was tested with "
        f"(needs wasmtime{wasm_engine.TESTED_WASMTIME}; its private API lacks {missing}): "
        f"pip install 'wasmtime{wasm_engine.TESTED_WASMTIME}'"
    ), r.stderr
