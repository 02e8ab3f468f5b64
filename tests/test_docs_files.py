"""The documentation names only files that exist: every repository path written in the prose
of README.md, docs/*.md and the READMEs of bench/, cuda_bridge/, heatmaps/ and
tests/conformance/ (`runtime/heatc_runtime/abi.py`, `tests/test_abi.py`), and every relative
link, is in the checkout. Commands in code blocks are examples (`heatc learn -o clinic.yaml`
writes a file of the reader's) and are not checked here; CHANGELOG.md names files as they
were."""

import re

import pytest
from support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PAGES += [REPO / d / "README.md" for d in ("bench", "cuda_bridge", "heatmaps", "tests/conformance")]
ROOTS = ("heatc", "runtime", "tests", "docs", "bench", "cuda_bridge", "examples", "heatmaps", "grammar")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(ROOTS) + r")/[\w./-]*\w)(?![\w*<])")
LINK = re.compile(r"\]\(([^)#\s]+)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _named(page) -> list[tuple[str, str]]:
    """(what the page writes, the path it means) for each repository path and relative link."""
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    out = []
    for ref in PATH.findall(prose):
        parts = ref.split("/")
        # placeholders (tests/conformance/NAME.yaml) and folders a run writes (bench/.work)
        if any(p.isupper() or p.startswith(".") for p in parts) or re.search(r"[A-Z]{3,}", ref):
            continue
        out.append((ref, ref))
    for ref in LINK.findall(prose):
        if "://" not in ref and not ref.startswith("mailto:"):
            out.append((f"({ref})", str((page.parent / ref).resolve().relative_to(REPO.resolve()))))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_a_page_names_exists(page):
    missing = [written for written, path in _named(page) if not (REPO / path).exists()]
    assert not missing, f"{page.relative_to(REPO)} names files that do not exist: {missing}"


def test_the_check_finds_paths_and_links():
    """What the pages are read for is there to find (a pattern that matched nothing would pass)."""
    named = {written for page in PAGES for written, _ in _named(page)}
    assert {"tests/test_abi.py", "runtime/heatc_runtime/abi.py", "(semantics.md)", "(docs/engines.md)"} <= named
