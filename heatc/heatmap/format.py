"""SDS heatmaps: the YAML format `heatc learn` writes and `heatc build` reads (docs/heatmap.md).

Loading validates every field and reports problems as `file:line:col: error: field …: what
was expected`, never as a traceback from the YAML library. The YAML is read by
`heatmap.yamlread` (no aliases, no tags beyond plain values, bounded sizes), and the cells
are read one at a time as the YAML is parsed, so a large heatmap costs its cells, not a
node tree of the whole file.

Public surface: `HEATMAP_VERSION`, `load_heatmap(path, files) -> Heatmap`, the dataclasses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from heatc import ir, units
from heatc.errors import Diagnostic, HeatError, SourceText
from heatc.heatmap.yamlread import Reader, compose, describe, quote
from heatc_runtime.backends.files import UnreadableFile, read_file

HEATMAP_VERSION = 1
BUILTIN_CATEGORIES = ("number", "percent", "date")
CATEGORY_KINDS = ("unit", "keyword", "constraint", "punct", "other")
CHECKS = ("range", "consistent", "lock")
TARGETS = ("wasm", "cuda")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Where:
    line: int
    column: int


@dataclass(slots=True)
class Category:
    name: str
    kind: str
    literals: list[str]
    exact: bool = False
    where: Where = Where(0, 0)


@dataclass(slots=True)
class Stats:
    """Values seen with a cell's pair; quantiles may be missing (min/max stand in)."""

    n: int = 0
    min: float | None = None
    max: float | None = None
    q01: float | None = None
    q05: float | None = None
    q50: float | None = None
    q95: float | None = None
    q99: float | None = None


@dataclass(slots=True)  # (a large heatmap has hundreds of thousands of cells)
class Cell:
    pair: tuple[str, str]
    score: float
    support: int = 0
    unit: str | None = None
    # a quantity cell: its value is read with any unit of this dimension (`v:quantity(DIM)`,
    # docs/language.md) and its stats and range are in the dimension's base unit
    dimension: str | None = None
    gap: int = 3
    check: str = "range"
    stats: Stats | None = None
    # low, high; None for a side the range leaves open (`range: [null, 2060]`)
    range: tuple[float | None, float | None] | None = None
    false_alarms: float | None = None  # the rule's measured share of held-out clean values it rejects
    # a range cell's magnitude band: a document's values stay within this factor of each
    # other (`consistent v within factor F`, docs/language.md); None: no band
    band: int | None = None
    # a range cell's precision: its values write at most this many digits after the decimal
    # point (`require places(v) <= P`, docs/language.md); None: any
    places: int | None = None
    channel: str | None = None
    when: str | None = None
    name: str | None = None
    description: str = ""
    freq: float = 1.0
    # observe-only: its rule reports, a confidence policy never acts on it (docs/tune.md)
    observe: bool = False
    where: Where = Where(0, 0)

    @property
    def id(self) -> str:
        return "×".join(
            [*self.pair, *([self.unit] if self.unit else []), *([self.dimension] if self.dimension else [])]
        )

    @property
    def reads_after(self) -> bool:
        """A value, its unit, then a keyword: `pair: [number, daily]` with `unit: mg`."""
        return self.pair[0] in BUILTIN_CATEGORIES and bool(self.pair[1]) and bool(self.unit)


@dataclass(slots=True)
class Tokenizer:
    kind: str  # embedded | file | dir | bytes
    value: str = ""
    where: Where = Where(0, 0)


DEFAULT_MARGIN_SPREAD, DEFAULT_MARGIN_FACTOR = 0.5, 2.0  # the margin policy when a heatmap sets none


@dataclass
class Heatmap:
    path: Path
    name: str
    title: str
    provenance: dict
    categories: dict[str, Category]
    cells: list[Cell]
    sensitivity: float = 0.75
    top_k: int | None = None
    margin_spread: float = DEFAULT_MARGIN_SPREAD
    margin_factor: float = DEFAULT_MARGIN_FACTOR
    chinese_numbers: bool = False
    triggers: dict = field(default_factory=dict)  # at / barrier: list of names; every: int
    anchors: dict[str, tuple[str | None, list[str]]] = field(default_factory=dict)
    tokenizer: Tokenizer = field(default_factory=lambda: Tokenizer("bytes"))
    rule_files: list[Path] = field(default_factory=list)
    expects: list[tuple[str, str, list[str], int]] = field(default_factory=list)  # text, outcome, rules, line
    targets: list[str] = field(default_factory=lambda: ["wasm"])
    tiers: dict[str, int] = field(default_factory=lambda: {"l2_bytes": 1 << 20, "device_bytes": 64 << 20})
    policy: tuple[float, float] | None = None  # the confidence policy's (pass, confirm); None: the runtime's


# --- the format --------------------------------------------------------------------------

TOP = (
    "heatmap", "name", "title", "provenance", "options", "tokenizer", "categories", "cells", "thresholds",
    "triggers", "anchors", "rules", "expects", "targets", "tiers", "policy",
)  # fmt: skip


MAX_HEATMAP_BYTES = 256 << 20
# build/<name> and the build's own files (.<name>.<digest>, .<name>.tmp-…) must fit a file
# name (255 bytes on the usual file systems): a longer name failed the build with an OSError
MAX_NAME_CHARS = 100


def load_heatmap(path: str | Path, files: bool = True) -> Heatmap:
    """Read and validate a heatmap. `files=False` does not require the files it names (rule
    files, a tokenizer) to exist: what reads only its cells (`heatc diff`, `heatc show`)
    works on a heatmap copied away from them."""
    path = Path(path)
    try:
        data = read_file(path, MAX_HEATMAP_BYTES)
    except UnreadableFile as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"cannot read the heatmap: {e}")) from None
    try:
        text = data.decode("utf-8-sig")  # (a leading byte-order mark is dropped)
    except UnicodeDecodeError as e:
        raise HeatError(Diagnostic(str(path), 0, 0, f"the heatmap is not valid UTF-8 (byte {e.start})")) from None
    del data
    r = Reader(SourceText(str(path), text))
    cells = _Cells(r)
    try:
        root = compose(text, r.src, stream="cells", on_item=cells.item)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HeatError(r.src.diagnostic(line, col, f"not valid YAML: {problem}")) from None
    if root is None:
        raise HeatError(Diagnostic(str(path), 0, 0, "the heatmap is empty"))
    top = r.mapping(root, "heatmap", TOP)
    if top is None:
        raise HeatError(r.diags)
    hm = _read(r, path, root, top, cells, files)
    if r.diags:
        raise HeatError(sorted(r.diags, key=lambda d: (d.line, d.column)))
    return hm


def _where(node) -> Where:
    return Where(node.start_mark.line + 1, node.start_mark.column + 1)


def _read(r: Reader, path: Path, root, top: dict, cells: _Cells, files: bool = True) -> Heatmap:
    if "heatmap" not in top:
        r.error(root, "heatmap", f"missing: the format version (this heatc reads version {HEATMAP_VERSION})")
    else:
        v = r.number(top["heatmap"][1], "heatmap", integer=True)
        if v is not None and v != HEATMAP_VERSION:
            r.error(
                top["heatmap"][1],
                "heatmap",
                f"format version {v} is not supported (this heatc reads version {HEATMAP_VERSION})",
            )
    name = r.name(top["name"][1], "name") if "name" in top else None
    if name is not None and len(name) > MAX_NAME_CHARS:
        r.error(
            top["name"][1],
            "name",
            f"{len(name)} characters: a build's name is at most {MAX_NAME_CHARS} (it names its files)",
        )
        name = None
    if "name" not in top:
        r.error(root, "name", "missing: the build's name (e.g. name: medical)")
    title = (r.string(top["title"][1], "title", allow_empty=True) or "") if "title" in top else ""
    provenance = {}
    if "provenance" in top:
        node = top["provenance"][1]
        if isinstance(node, yaml.MappingNode):
            provenance = r.plain(node, "provenance")
        else:
            r.error(node, "provenance", f"expected a mapping (teacher, corpus, delta, metrics…), got {describe(node)}")

    hm = Heatmap(path, name or "heatmap", title, provenance, {}, [])

    if "options" in top:
        opts = r.mapping(top["options"][1], "options", ("chinese_numbers",)) or {}
        if "chinese_numbers" in opts:
            hm.chinese_numbers = bool(r.boolean(opts["chinese_numbers"][1], "options.chinese_numbers"))

    if "tokenizer" not in top:
        r.error(root, "tokenizer", "missing: the tokenizer the token table is built for "
                "({embedded: minilm}, {file: tokenizer.json}, {dir: a Hugging Face directory} or {bytes: true})")  # fmt: skip
    else:
        node = top["tokenizer"][1]
        t = r.mapping(node, "tokenizer", ("embedded", "file", "dir", "bytes")) or {}
        if len(t) != 1:
            if t or isinstance(node, yaml.MappingNode):
                r.error(node, "tokenizer", "give exactly one of embedded, file, dir or bytes")
        else:
            (kind, (_, vnode)), = t.items()  # fmt: skip
            if kind == "bytes":
                if r.boolean(vnode, "tokenizer.bytes") is not True:
                    r.error(vnode, "tokenizer.bytes", "expected true (one token per byte)")
                hm.tokenizer = Tokenizer("bytes", "", _where(vnode))
            elif kind == "embedded":
                v = r.string(vnode, "tokenizer.embedded")
                if v is not None and v != "minilm":
                    r.error(vnode, "tokenizer.embedded", f"unknown embedded tokenizer {quote(v)} (known: minilm)")
                hm.tokenizer = Tokenizer("embedded", v or "minilm", _where(vnode))
            else:
                v = r.string(vnode, f"tokenizer.{kind}")
                if v is not None:
                    target = (path.parent / v).resolve()
                    if files and not target.exists():
                        r.error(vnode, f"tokenizer.{kind}", f"{quote(v)} does not exist (resolved to {target})")
                    hm.tokenizer = Tokenizer(kind, str(target), _where(vnode))

    _read_categories(r, top, hm, root)
    _read_anchors(r, top, hm)
    _read_thresholds(r, top, hm)
    cells.finish(top, hm, root)

    if "triggers" in top:
        tr = r.mapping(top["triggers"][1], "triggers", ("at", "barrier", "every")) or {}
        for key in ("at", "barrier"):
            if key in tr:
                names = r.names(tr[key][1], f"triggers.{key}")
                for i, n in enumerate(names):
                    if n not in hm.categories:
                        r.error(tr[key][1].value[i], f"triggers.{key}[{i}]", f"unknown category {quote(n)}")
                hm.triggers[key] = names
        if "every" in tr:
            hm.triggers["every"] = r.number(tr["every"][1], "triggers.every", 1, 1_000_000, integer=True)

    if "rules" in top:
        for i, node in enumerate(r.sequence(top["rules"][1], "rules") or []):
            v = r.string(node, f"rules[{i}]")
            if v is None:
                continue
            target = (path.parent / v).resolve()
            if target.suffix != ".heat":
                # (and so never shows a line of some other file as a syntax error)
                r.error(node, f"rules[{i}]", f"{describe(node)} is not a rule file: rule files end in .heat")
                continue
            if files and not target.is_file():
                r.error(node, f"rules[{i}]", f"rule file {describe(node)} does not exist (resolved to {target})")
            hm.rule_files.append(target)

    if "expects" in top:
        for i, node in enumerate(r.sequence(top["expects"][1], "expects") or []):
            e = r.mapping(node, f"expects[{i}]", ("text", "passes", "rejects"))
            if e is None:
                continue
            text = r.string(e["text"][1], f"expects[{i}].text") if "text" in e else None
            outcomes = [k for k in ("passes", "rejects") if k in e]
            if text is None or len(outcomes) != 1:
                r.error(node, f"expects[{i}]", "needs text and exactly one of passes or rejects")
                continue
            rules = r.names(e[outcomes[0]][1], f"expects[{i}].{outcomes[0]}")
            hm.expects.append((text, outcomes[0], rules, node.start_mark.line + 1))

    if "targets" in top:
        targets = r.names(top["targets"][1], "targets")
        for i, t in enumerate(targets):
            if t not in TARGETS:
                r.error(
                    top["targets"][1].value[i],
                    f"targets[{i}]",
                    f"unknown target {quote(t)} (known: {', '.join(TARGETS)})",
                )
        hm.targets = targets
    if "tiers" in top:
        tiers = r.mapping(top["tiers"][1], "tiers", ("l2_bytes", "device_bytes")) or {}
        for key, (_, vnode) in tiers.items():
            v = r.number(vnode, f"tiers.{key}", 0, 1 << 40, integer=True)
            if v is not None:
                hm.tiers[key] = v
    if "policy" in top:
        node = top["policy"][1]
        pol = r.mapping(node, "policy", ("pass", "confirm")) or {}
        values = [r.number(pol[k][1], f"policy.{k}", 0, 1) if k in pol else None for k in ("pass", "confirm")]
        if len(pol) != 2 and isinstance(node, yaml.MappingNode):
            r.error(node, "policy", "needs both pass and confirm (confidence cut-offs between 0 and 1)")
        elif None not in values:
            if values[1] > values[0]:
                r.error(pol["confirm"][1], "policy.confirm", f"{values[1]:g} is above pass {values[0]:g}")
            else:
                hm.policy = (values[0], values[1])
    return hm


def _read_categories(r: Reader, top: dict, hm: Heatmap, root) -> None:
    if "categories" not in top:
        r.error(root, "categories", "missing: the lexical categories cells refer to")
        return
    for name, knode, vnode in r.named_entries(top["categories"][1], "categories", "category"):
        fp = f"categories.{name}"
        if name in BUILTIN_CATEGORIES:
            r.error(knode, fp, f"{quote(name)} is built in (numbers are recognised without a category)")
            continue
        if name in hm.categories:
            r.error(knode, fp, "declared twice")
            continue
        c = r.mapping(vnode, fp, ("kind", "literals", "exact"))
        if c is None:
            continue
        kind = r.string(c["kind"][1], f"{fp}.kind") if "kind" in c else None
        if "kind" not in c:
            r.error(vnode, f"{fp}.kind", f"missing (one of {', '.join(CATEGORY_KINDS)})")
        elif kind is not None and kind not in CATEGORY_KINDS:
            r.error(c["kind"][1], f"{fp}.kind", f"unknown kind {quote(kind)} (one of {', '.join(CATEGORY_KINDS)})")
        literals = r.strings(c["literals"][1], f"{fp}.literals") if "literals" in c else []
        if not literals:
            r.error(c.get("literals", (None, vnode))[1], f"{fp}.literals", "a category needs at least one literal")
        exact = bool(r.boolean(c["exact"][1], f"{fp}.exact")) if "exact" in c else False
        hm.categories[name] = Category(name, kind or "other", literals, exact, _where(knode))


def _read_anchors(r: Reader, top: dict, hm: Heatmap) -> None:
    if "anchors" not in top:
        return
    for name, _knode, vnode in r.named_entries(top["anchors"][1], "anchors", "anchor"):
        a = r.mapping(vnode, f"anchors.{name}", ("domain", "terms")) or {}
        domain = r.string(a["domain"][1], f"anchors.{name}.domain") if "domain" in a else None
        terms = r.strings(a["terms"][1], f"anchors.{name}.terms") if "terms" in a else []
        if not terms:
            r.error(vnode, f"anchors.{name}.terms", "an anchor needs at least one term")
        hm.anchors[name] = (domain, terms)


def _read_thresholds(r: Reader, top: dict, hm: Heatmap) -> None:
    if "thresholds" not in top:
        return
    t = r.mapping(top["thresholds"][1], "thresholds", ("sensitivity", "top_k", "margin")) or {}
    if "sensitivity" in t:
        v = r.number(t["sensitivity"][1], "thresholds.sensitivity", 0, 1)
        if v is not None:
            hm.sensitivity = v
    if "top_k" in t:
        hm.top_k = r.number(t["top_k"][1], "thresholds.top_k", 1, 1_000_000, integer=True)
    if "margin" in t:
        m = r.mapping(t["margin"][1], "thresholds.margin", ("spread", "factor")) or {}
        if "spread" in m:
            v = r.number(m["spread"][1], "thresholds.margin.spread", 0, 100)
            hm.margin_spread = v if v is not None else hm.margin_spread
        if "factor" in m:
            v = r.number(m["factor"][1], "thresholds.margin.factor", 1, 100)
            hm.margin_factor = v if v is not None else hm.margin_factor


CELL_FIELDS = (
    "pair", "unit", "score", "support", "gap", "check", "stats", "range", "channel", "when", "name", "description", "freq",
    "false_alarms", "band", "places", "observe", "dimension",
)  # fmt: skip
STATS_FIELDS = ("n", "min", "max", "q01", "q05", "q50", "q95", "q99")


class _Cells:
    """The cells, each read as the YAML parser reaches it (its nodes are then dropped); the
    names a cell refers to are checked once the categories and anchors are known."""

    def __init__(self, r: Reader):
        self.r = r
        self.cells: list[Cell] = []
        self.refs: list[tuple[str, str, object, str]] = []  # (kind, name, node position, field)
        self.lists = 0

    def item(self, node, i: int) -> None:
        if i == 0:
            self.lists += 1
        if self.lists == 1:  # (a second `cells:` is reported as given twice)
            cell = _read_cell(self.r, node, i, self.refs)
            if cell is not None:
                self.cells.append(cell)

    def finish(self, top: dict, hm: Heatmap, root) -> None:
        r = self.r
        if "cells" not in top:
            r.error(root, "cells", "missing: the heatmap's cells (an empty list is allowed)")
            return
        for i, node in enumerate(r.sequence(top["cells"][1], "cells") or []):  # (only if not streamed)
            self.item(node, i)
        known = {"category": set(hm.categories) | set(BUILTIN_CATEGORIES), "unit": set(hm.categories)}
        for kind, name, mark, field_path in self.refs:
            if kind == "anchor":
                if name not in hm.anchors:
                    r.error(mark, field_path, f"unknown anchor {quote(name)}")
            elif name not in known[kind]:
                r.error(mark, field_path, _unknown_category(name, known[kind]))
        hm.cells = self.cells


class _At:
    """A node's position without the node (what r.error reads)."""

    __slots__ = ("start_mark",)

    def __init__(self, node):
        self.start_mark = node.start_mark


def _read_cell(r: Reader, node, i: int, refs: list) -> Cell | None:
    fp = f"cells[{i}]"
    c = r.mapping(node, fp, CELL_FIELDS)
    if c is None:
        return None
    pair: list[str] = []
    if "pair" not in c:
        r.error(node, f"{fp}.pair", "missing: the category pair, e.g. [glucose, number]")
    else:
        pair = r.names(c["pair"][1], f"{fp}.pair")
        if len(pair) == 1 and pair[0] in BUILTIN_CATEGORIES:
            pass  # a value alone, [date]: every date
        elif len(pair) != 2:
            r.error(c["pair"][1], f"{fp}.pair", f"expected two categories (or a value category alone), got {len(pair)}")
            return None
        for j, p in enumerate(pair):
            refs.append(("category", p, _At(c["pair"][1].value[j]), f"{fp}.pair[{j}]"))
    score = r.number(c["score"][1], f"{fp}.score", 0, 1) if "score" in c else None
    if "score" not in c:
        r.error(node, f"{fp}.score", "missing: the cell's sensitivity score, between 0 and 1")
    cell = Cell(tuple((*pair, "", "")[:2]), score or 0.0, where=_where(node))  # a value alone: (date, "")
    if "support" in c:
        cell.support = r.number(c["support"][1], f"{fp}.support", 0, integer=True) or 0
    if "unit" in c:
        cell.unit = r.name(c["unit"][1], f"{fp}.unit")
        if cell.unit is not None:
            refs.append(("unit", cell.unit, _At(c["unit"][1]), f"{fp}.unit"))
    if "dimension" in c:
        dim = r.string(c["dimension"][1], f"{fp}.dimension")
        if dim is not None and units.dimension(dim) is None:
            names = list(units.dimensions())
            r.error(c["dimension"][1], f"{fp}.dimension", f"unknown dimension {quote(dim)} (one of {', '.join(names)})")
        elif dim is not None and (
            "unit" in c or len(pair) != 2 or pair[1] != "number" or pair[0] in BUILTIN_CATEGORIES
        ):
            r.error(c["dimension"][1], f"{fp}.dimension", "a quantity cell is [keyword, number] with no unit")
        else:
            cell.dimension = dim
    if "gap" in c:
        g = r.number(c["gap"][1], f"{fp}.gap", 0, 64, integer=True)
        cell.gap = g if g is not None else cell.gap
    if "check" in c:
        chk = r.string(c["check"][1], f"{fp}.check")
        if chk is not None and chk not in CHECKS:
            r.error(c["check"][1], f"{fp}.check", f"unknown check {quote(chk)} (one of {', '.join(CHECKS)})")
        cell.check = chk if chk in CHECKS else cell.check
    if "stats" in c:
        s = r.mapping(c["stats"][1], f"{fp}.stats", STATS_FIELDS) or {}
        stats = Stats()
        for key, (_, vnode) in s.items():
            v = r.number(vnode, f"{fp}.stats.{key}", integer=key == "n")
            setattr(stats, key, v)
        cell.stats = stats
    if "range" in c:
        items = r.sequence(c["range"][1], f"{fp}.range") or []
        # null leaves a side open
        opened = [isinstance(x, yaml.ScalarNode) and x.tag == "tag:yaml.org,2002:null" for x in items]
        bounds = [
            None if o else r.number(x, f"{fp}.range[{j}]") for j, (x, o) in enumerate(zip(items, opened, strict=True))
        ]
        if len(items) != 2:
            r.error(c["range"][1], f"{fp}.range", "expected [low, high] (null for an open side)")
        elif all(opened):
            r.error(c["range"][1], f"{fp}.range", "both sides are open: a range needs a low or a high bound")
        elif any(b is None and not o for b, o in zip(bounds, opened, strict=True)):
            pass  # a bound that is no number: reported
        elif None not in bounds and bounds[0] > bounds[1]:
            r.error(c["range"][1], f"{fp}.range", f"empty: low {bounds[0]:g} is above high {bounds[1]:g}")
        else:
            cell.range = (bounds[0], bounds[1])
    if "false_alarms" in c:
        cell.false_alarms = r.number(c["false_alarms"][1], f"{fp}.false_alarms", 0, 1)
    if "band" in c:
        f = r.number(c["band"][1], f"{fp}.band", 2, ir.MAX_FACTOR, integer=True)
        cell.band = int(f) if f is not None else None
    if "places" in c:
        p = r.number(c["places"][1], f"{fp}.places", 0, ir.MAX_PLACES, integer=True)
        cell.places = int(p) if p is not None else None
    if "channel" in c:
        cell.channel = r.name(c["channel"][1], f"{fp}.channel")
    if "when" in c:
        cell.when = r.name(c["when"][1], f"{fp}.when")
        if cell.when:
            refs.append(("anchor", cell.when, _At(c["when"][1]), f"{fp}.when"))
    if "name" in c:
        cell.name = r.name(c["name"][1], f"{fp}.name")
    if "description" in c:
        cell.description = r.string(c["description"][1], f"{fp}.description", allow_empty=True) or ""
    if "freq" in c:
        f = r.number(c["freq"][1], f"{fp}.freq", 1e-9, 1e9)
        cell.freq = f if f is not None else cell.freq
    if "observe" in c:
        cell.observe = bool(r.boolean(c["observe"][1], f"{fp}.observe"))
    # what each check needs
    if cell.check == "range" and cell.range is None and cell.stats is None and pair:
        r.error(node, fp, "a range cell needs stats (the values seen) or an explicit range")
    if cell.band is not None and cell.check != "range":
        r.error(
            c["band"][1], f"{fp}.band", "only a range cell takes a band (a consistency cell already asks for one value)"
        )
    if cell.places is not None and cell.check != "range":
        r.error(c["places"][1], f"{fp}.places", "only a range cell takes places (the digits after a value's point)")
    if cell.check == "lock" and not cell.channel:
        r.error(node, fp, "a lock cell needs a channel name")
    return cell


def _unknown_category(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"unknown category {quote(name)}" + (f" (did you mean {quote(close[0])}?)" if close else "")
