"""docs/testing.md's tables, written from the test files themselves: each test module's
docstring (what it shows), its number of tests and its `needs`; then each requirement with the modules that need it — what runs where. Run
`python tests/support/testing_doc.py` after adding or changing a test module;
tests/test_suite_layout.py fails while the page is stale.

Public surface: `BEGIN`, `END`, `tables(tests_dir) -> str`, `rewrite(page, tests_dir) -> str`.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # (run as a script: the support package is beside tests/)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.needs import REQUIREMENTS, file_marks

BEGIN = "<!-- the test files: written by `python tests/support/testing_doc.py`, do not edit -->"
END = "<!-- end of the test files -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def tables(tests_dir: Path) -> str:
    files = sorted(tests_dir.glob("test_*.py"))
    marks = {path.name: file_marks(path) for path in files}
    rows = ["| file | tests | needs | what it shows |", "|---|---:|---|---|"]
    for name, fm in marks.items():
        needs = [*fm.needs, *(f"{n} (some tests)" for n in sorted(fm.test_needs - set(fm.needs)))]
        first = fm.doc.split("\n\n")[0]
        rows.append(f"| `tests/{name}` | {fm.tests} | {', '.join(needs) or '—'} | {_cell(first)} |")
    rows += ["", "| need | what | how to get it | test modules that need it (all their tests, or some) |",
             "|---|---|---|---|"]  # fmt: skip
    for need, r in REQUIREMENTS.items():
        users = [f"`{n}`" + ("" if need in fm.needs else " (some)")
                 for n, fm in marks.items() if need in fm.needs or need in fm.test_needs]  # fmt: skip
        rows.append(f"| `{need}` | {_cell(r.what)} | {_cell(r.how)} | {', '.join(users) or '—'} |")
    rows += ["", f"{len(files)} test modules, {sum(fm.tests for fm in marks.values())} test functions "
             "(before parametrisation)."]  # fmt: skip
    return "\n".join(rows)


def rewrite(page: str, tests_dir: Path) -> str:
    """The page with the text between BEGIN and END replaced by `tables(tests_dir)`."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"docs/testing.md must hold {BEGIN!r} once, then {END!r} once")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{tables(tests_dir)}\n{END}{tail}"


if __name__ == "__main__":
    tests = Path(__file__).resolve().parents[1]
    page = tests.parent / "docs" / "testing.md"
    page.write_text(rewrite(page.read_text(encoding="utf-8"), tests), encoding="utf-8")
    print(f"wrote {page}")
