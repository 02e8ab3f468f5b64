"""The test suite's own rules: no test module imports another test module or conftest.py
(shared helpers live in tests/support/); every requirement a test declares with the `needs`
marker is a known one, and a module or test whose needs are missing is skipped at
collection, with the reason and how to get it; docs/testing.md's tables are current."""

import ast
import subprocess
import sys
import textwrap

import pytest
from support import REPO
from support import needs as needs_module
from support.testing_doc import rewrite

TESTS = REPO / "tests"
MODULES = sorted(TESTS.glob("test_*.py"))


def _imported(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("path", [*MODULES, *sorted((TESTS / "support").glob("*.py"))], ids=lambda p: p.name)
def test_no_test_module_imports_another_or_conftest(path):
    wrong = {name for name in _imported(path) if name.startswith("test_") or name == "conftest"}
    assert not wrong, f"{path.name} imports {sorted(wrong)}: move what it shares into tests/support/"


def test_every_declared_need_is_known():
    for path in MODULES:
        marks = needs_module.file_marks(path)
        needs_module.missing([*marks.needs, *marks.test_needs])  # raises on an unknown name


def test_docs_testing_md_is_current():
    page = REPO / "docs" / "testing.md"
    assert page.read_text(encoding="utf-8") == rewrite(page.read_text(encoding="utf-8"), TESTS), (
        "docs/testing.md is stale: run `python tests/support/testing_doc.py`"
    )


def _suite_conftest(folder, more: str = "") -> None:
    """A conftest.py in `folder` that runs the suite's own collection hook (and `more`)."""
    (folder / "conftest.py").write_text(
        textwrap.dedent(f"""
        import importlib.util, sys
        sys.path.insert(0, {str(TESTS)!r})
        spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
        pytest_collection_modifyitems = suite.pytest_collection_modifyitems
    """)
        + textwrap.dedent(more)
    )


def test_missing_needs_skip_at_collection_with_the_reason(tmp_path):
    """A module that needs what is missing is skipped before it is imported (its import would
    fail); a test that does is skipped before it runs; both say what is missing and how to get it."""
    _suite_conftest(tmp_path, """
        from support import needs
        needs.REQUIREMENTS["absent"] = needs.Requirement("a missing thing", "get it here", modules=("no_such_module_x",))
        pytest_pycollect_makemodule = suite.pytest_pycollect_makemodule
    """)  # fmt: skip
    (tmp_path / "test_whole.py").write_text(
        'import pytest\nimport no_such_module_x\n\npytestmark = pytest.mark.needs("absent")\n\n\ndef test_a():\n    pass\n'
    )
    (tmp_path / "test_some.py").write_text(
        'import pytest\n\n\n@pytest.mark.needs("absent")\ndef test_b():\n    raise AssertionError\n\n\n'
        "def test_c():\n    pass\n"
    )
    r = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-o", "markers=needs", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 2 skipped" in r.stdout, r.stdout
    assert r.stdout.count("needs a missing thing (get it here)") == 2, r.stdout
    assert "test_whole.py:1: needs a missing thing" in r.stdout, r.stdout  # (at the module, not conftest)


def test_a_module_fixture_keeps_its_tests_on_one_worker(tmp_path):
    """Under `--dist loadgroup` the tests of a module with a module-scoped fixture carry one
    xdist group (the fixture is built once, on one worker); it broke silently twice (the
    group set after xdist read it; pytest 9 ignoring xdist 3.8's node-id suffix)."""
    _suite_conftest(tmp_path)
    tests = "".join(f"\n\ndef test_{i}(shared):\n    pass\n" for i in range(6))
    (tmp_path / "test_fixture.py").write_text(
        f'import pytest\n\n\n@pytest.fixture(scope="module")\ndef shared():\n    return 1\n{tests}'
    )
    (tmp_path / "test_loose.py").write_text("".join(f"\n\ndef test_{i}():\n    pass\n" for i in range(6)))
    r = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                        "-o", "markers=xdist_group", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    passed = [line for line in r.stdout.splitlines() if "PASSED test_fixture.py::" in line]
    workers = {line.split()[0] for line in passed}
    grouped = [line for line in passed if "@test_fixture" in line]
    assert len(grouped) == 6 and len(workers) == 1, r.stdout
