"""Reading a heatmap's YAML without trusting it, and a small validator over the nodes, so
that every error has a position.

The nodes are composed here from libyaml's event stream (PyYAML's own composer when
libyaml is missing), not by `yaml.compose`, because a heatmap never needs what makes YAML
dangerous to read: aliases are refused where they appear (an alias bomb or a recursive
alias never expands), so are tags other than YAML's core ones (`!!python/…`, `!foo`,
`!!binary`), nesting deeper than `MAX_DEPTH`, more than one document, and numbers written
with more than `MAX_NUMBER_CHARS` characters. Values echoed in a message are cut short.
Marks are kept as (line, column) only, and the items of one top-level list (a heatmap's
`cells`) can be handed to a callback one at a time instead of being kept — a large
heatmap's node tree is never in memory whole.

Public surface: `compose(text, src, stream=None, on_item=None)`, `Reader`, `describe(node)`,
`quote(value)`, `MAX_DEPTH`, `MAX_NUMBER_CHARS`.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable

import yaml
from yaml import events as ev
from yaml.constructor import SafeConstructor

from heatc.errors import Diagnostic, HeatError, SourceText

MAX_DEPTH = 64  # a heatmap nests five levels deep; this leaves room for provenance
MAX_NUMBER_CHARS = 40  # a float64 needs at most 24 characters; no whole number of a heatmap needs more
SHOWN = 60  # the most characters of a value a message quotes

_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map")}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
_CONSTRUCT = {
    _CORE + "null": SafeConstructor.construct_yaml_null,
    _CORE + "bool": SafeConstructor.construct_yaml_bool,
    _CORE + "int": SafeConstructor.construct_yaml_int,
    _CORE + "float": SafeConstructor.construct_yaml_float,
}
_SCALARS = SafeConstructor()  # (its scalar constructors keep no state)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BAD = object()  # a value already reported as unreadable


class Mark:
    """Where a node starts (0-based, as PyYAML's marks)."""

    __slots__ = ("column", "line")

    def __init__(self, line: int, column: int):
        self.line, self.column = line, column


def _node(cls, tag: str, value, event) -> yaml.Node:
    node = cls.__new__(cls)  # (PyYAML's node classes, so isinstance checks read as usual)
    m = event.start_mark
    node.tag, node.value, node.start_mark, node.end_mark = tag, value, Mark(m.line, m.column), None
    return node


class _Frame:
    __slots__ = ("count", "key", "node", "stream")

    def __init__(self, node: yaml.Node, stream: bool):
        self.node, self.stream, self.key, self.count = node, stream, None, 0


def compose(
    text: str, src: SourceText, stream: str | None = None, on_item: Callable[[yaml.Node, int], None] | None = None
) -> yaml.Node | None:
    """The node tree of one YAML document, or None for an empty one. With `stream` and
    `on_item`, each item of the list under the top-level key `stream` goes to `on_item(node,
    index)` as soon as it is read and is not kept (that list's node is left empty)."""
    loader = _LOADER(text)
    root: list[yaml.Node] = []
    stack: list[_Frame] = []
    documents = 0
    resolved: dict[tuple, str] = {}

    def refuse(event, message: str) -> HeatError:
        m = event.start_mark
        return HeatError(src.diagnostic(m.line + 1, m.column + 1, message))

    def done(node: yaml.Node) -> None:
        if not stack:
            root.append(node)
            return
        f = stack[-1]
        if isinstance(f.node, yaml.SequenceNode):
            if f.stream:
                on_item(node, f.count)
            else:
                f.node.value.append(node)
            f.count += 1
        elif f.key is None:
            f.key = node
        else:
            f.node.value.append((f.key, node))
            f.key = None

    try:
        while loader.check_event():
            event = loader.get_event()
            kind = type(event)
            if kind is ev.AliasEvent:
                raise refuse(
                    event, f"aliases (*{_cut(event.anchor)}) are not allowed in a heatmap: write the value out"
                )
            if kind is ev.ScalarEvent or kind is ev.SequenceStartEvent or kind is ev.MappingStartEvent:
                tag = event.tag
                if tag is not None and tag != "!" and tag not in _ALLOWED_TAGS:
                    shown = "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag
                    raise refuse(event, f"the tag {_cut(shown)} is not allowed in a heatmap (only plain YAML values)")
                if len(stack) >= MAX_DEPTH:
                    raise refuse(event, f"nested more than {MAX_DEPTH} levels deep")
                if kind is ev.ScalarEvent:
                    if tag is None or tag == "!":
                        key = (event.value, event.implicit)
                        tag = resolved.get(key)
                        if tag is None:
                            tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
                            if len(resolved) < 4096:  # (keys and names repeat: resolving is a regex per value)
                                resolved[key] = tag
                    done(_node(yaml.ScalarNode, tag, event.value, event))
                elif kind is ev.SequenceStartEvent:
                    top = stack[0] if len(stack) == 1 else None
                    streamed = (
                        on_item is not None
                        and top is not None
                        and isinstance(top.node, yaml.MappingNode)
                        and isinstance(top.key, yaml.ScalarNode)
                        and top.key.value == stream
                    )
                    stack.append(_Frame(_node(yaml.SequenceNode, _CORE + "seq", [], event), streamed))
                else:
                    stack.append(_Frame(_node(yaml.MappingNode, _CORE + "map", [], event), False))
            elif kind is ev.SequenceEndEvent or kind is ev.MappingEndEvent:
                done(stack.pop().node)
            elif kind is ev.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise refuse(event, "a heatmap is one YAML document (found a second '---')")
    finally:
        loader.dispose()
    return root[0] if root else None


def value_of(node: yaml.ScalarNode):
    """The Python value of a scalar: str, int, float, bool or None (a timestamp stays text).
    Raises ValueError for a number written with too many characters, or a bad explicit tag."""
    construct = _CONSTRUCT.get(node.tag)
    if construct is None:
        return node.value
    if node.tag in (_CORE + "int", _CORE + "float") and len(node.value) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number written with {len(node.value)} characters (at most {MAX_NUMBER_CHARS})")
    try:
        return construct(_SCALARS, node)
    except (ValueError, yaml.YAMLError):
        raise ValueError(f"{_cut(node.value)!r} is not a valid {node.tag.removeprefix(_CORE)}") from None


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def quote(value: object) -> str:
    """A value as a message quotes it: repr, cut short."""
    return repr(_cut(str(value)))


def describe(node) -> str:
    if node is None:
        return "nothing"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.value == "" or node.tag == _CORE + "null":
        return "nothing"
    return repr(_cut(node.value))


class Reader:
    """Typed access to nodes, each problem recorded as a diagnostic at the node's position."""

    def __init__(self, src: SourceText):
        self.src = src
        self.diags: list[Diagnostic] = []

    def error(self, node, field_path: str, message: str) -> None:
        mark = node.start_mark if node is not None else None
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        if len(field_path) > 4 * SHOWN:  # (names in it are the user's, of any length)
            field_path = field_path[: 4 * SHOWN - 1] + "…"
        self.diags.append(self.src.diagnostic(line, col, f"{field_path}: {message}"))

    def key_text(self, node) -> str:
        """A mapping key as a field path shows it (cut short; a non-scalar key by its kind)."""
        return _cut(node.value) if isinstance(node, yaml.ScalarNode) else f"<{describe(node)}>"

    def named_entries(self, node, field_path: str, what: str):
        """(name, key node, value node) for each entry of a mapping of names to definitions."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, field_path, f"expected a mapping of {what} name to definition, got {describe(node)}")
            return
        for knode, vnode in node.value:
            name = self.name(knode, f"{field_path}.{self.key_text(knode)}")
            if name is not None:
                yield name, knode, vnode

    def mapping(self, node, field_path: str, known: tuple[str, ...]) -> dict[str, tuple[object, object]] | None:
        """{key: (key_node, value_node)}; reports unknown keys (with a suggestion)."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, field_path, f"expected a mapping (key: value lines), got {describe(node)}")
            return None
        out = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1) if key is not None and len(key) < 64 else []
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
                self.error(k, f"{field_path}.{self.key_text(k)}", f"unknown field{hint}")
                continue
            if key in out:
                self.error(k, f"{field_path}.{key}", "given twice")
                continue
            out[key] = (k, v)
        return out

    def sequence(self, node, field_path: str) -> list | None:
        if not isinstance(node, yaml.SequenceNode):
            self.error(node, field_path, f"expected a list, got {describe(node)}")
            return None
        return list(node.value)

    def where(self, node) -> tuple[int, int]:
        """(line, column), 1-based."""
        return node.start_mark.line + 1, node.start_mark.column + 1

    def _value(self, node, field_path: str):
        """A scalar's value, or _BAD once the problem is reported."""
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, field_path, f"expected a single value, got {describe(node)}")
            return _BAD
        try:
            return value_of(node)
        except ValueError as e:
            self.error(node, field_path, str(e))
            return _BAD

    def scalar(self, node, field_path: str):
        v = self._value(node, field_path)
        return None if v is _BAD else v

    def plain(self, node, field_path: str):
        """A whole subtree as plain Python values (dicts, lists, scalars)."""
        if isinstance(node, yaml.MappingNode):
            out = {}
            for k, v in node.value:
                key = self.scalar(k, f"{field_path} key")
                if key is not None:
                    out[key] = self.plain(v, f"{field_path}.{self.key_text(k)}")
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(x, f"{field_path}[{i}]") for i, x in enumerate(node.value)]
        return self.scalar(node, field_path)

    def string(self, node, field_path: str, allow_empty: bool = False) -> str | None:
        v = self._value(node, field_path)
        if v is _BAD:
            return None
        if v is None:
            self.error(node, field_path, "expected a string, got nothing")
            return None
        if not isinstance(v, str):
            v = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        if not isinstance(v, str) or (not v and not allow_empty):
            self.error(node, field_path, f"expected a non-empty string, got {describe(node)}")
            return None
        return v

    def name(self, node, field_path: str) -> str | None:
        v = self.string(node, field_path)
        if v is not None and not _NAME.match(v):
            self.error(
                node,
                field_path,
                f"{_cut(v)!r} is not a valid name (letters, digits, underscores; not starting with a digit)",
            )
            return None
        return v

    def number(self, node, field_path: str, lo: float = -math.inf, hi: float = math.inf, integer: bool = False):
        v = self._value(node, field_path)
        if v is _BAD:
            return None
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if ok and integer and v != int(v):
            ok = False
        if not ok or not (lo <= v <= hi):
            what = "a whole number" if integer else "a number"
            bounds = "" if (lo, hi) == (-math.inf, math.inf) else f" between {lo:g} and {hi:g}"
            self.error(node, field_path, f"expected {what}{bounds}, got {describe(node)}")
            return None
        return int(v) if integer else float(v)

    def boolean(self, node, field_path: str) -> bool | None:
        v = self._value(node, field_path)
        if v is not _BAD and not isinstance(v, bool):
            self.error(node, field_path, f"expected true or false, got {describe(node)}")
        return v if isinstance(v, bool) else None

    def names(self, node, field_path: str) -> list[str]:
        items = self.sequence(node, field_path) or []
        return [n for i, x in enumerate(items) if (n := self.name(x, f"{field_path}[{i}]")) is not None]

    def strings(self, node, field_path: str) -> list[str]:
        items = self.sequence(node, field_path) or []
        return [s for i, x in enumerate(items) if (s := self.string(x, f"{field_path}[{i}]")) is not None]
