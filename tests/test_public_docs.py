"""The public API's docstrings say what a caller needs: numpy-style Parameters (every
parameter of the signature, no other), Returns, and Raises where the function can raise.

Every callable name in the `__all__` of each module in PUBLIC_MODULES is checked, and the
objects PUBLIC_OBJECTS names (the engines' entry points); of a class, also its public methods
(CLASS_METHODS: the classes whose methods a user calls). An exception class or an enum has no
constructor a caller documents: its docstring is checked for its Raises only. A function (or a
class, whose constructor's parameters its docstring documents) "can raise" when a `raise`
statement stands in its source or in that of a heatc function or class it names, followed
through the names those name in turn; the Raises section then names exception classes that
exist.
"""

from __future__ import annotations

import ast
import builtins
import enum
import importlib
import inspect
import textwrap

import pytest

#: Modules whose `__all__` is the public API a user calls.
PUBLIC_MODULES = ["heatc_runtime", "heatc.lang"]
#: Entry points outside an `__all__`: the engines' adapters, their driver, the token tables.
PUBLIC_OBJECTS = [
    "heatc_runtime.engines.transformers.Checks",
    "heatc_runtime.engines.vllm.HeatcLogitsProcessor",
    "heatc_runtime.engines.core.Driver",
    "heatc_runtime.engines.tokens.table_sha256",
    "heatc_runtime.engines.tokens.cache_dir",
    "heatc_runtime.engines.tokens.table_from_json_bytes",
    "heatc_runtime.engines.tokens.table_from_tokenizer_json",
    "heatc_runtime.engines.tokens.table_from_vocab_txt",
    "heatc_runtime.engines.tokens.table_for_tokenizer",
]
#: Classes whose public methods are checked too.
CLASS_METHODS = {"Batch", "Checker", "Report", "Driver", "Checks", "HeatcLogitsProcessor"}

_PACKAGES = ("heatc", "heatc_runtime")  # (what "can raise" follows: our code, not the libraries')


def _sections(doc: str) -> dict[str, list[str]]:
    """A numpy-style docstring's sections: a title line underlined with dashes, then its lines."""
    lines = inspect.cleandoc(doc).splitlines()
    sections: dict[str, list[str]] = {"": []}
    current, i = "", 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and set(lines[i + 1].strip()) == {"-"}:
            current = lines[i].strip()
            sections[current] = []
            i += 2
            continue
        sections[current].append(lines[i])
        i += 1
    return sections


def _entries(lines: list[str]) -> list[str]:
    """The names a section lists: its lines that are not indented (`name : type`, `Error`)."""
    return [line.split(":")[0].strip() for line in lines if line.strip() and not line.startswith((" ", "\t"))]


def _named(obj, home: str, seen: set[int], depth: int = 0) -> bool:
    """Whether `obj` (a function or class of ours or of module `home`) holds a `raise`, or
    names one that does."""
    if id(obj) in seen or depth > 8:
        return False
    seen.add(id(obj))
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return False
    tree = ast.parse(source)
    if any(isinstance(node, ast.Raise) for node in ast.walk(tree)):
        return True
    module = inspect.getmodule(obj)
    scope = vars(module) if module is not None else {}
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Name):
            target = scope.get(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = getattr(scope.get(node.value.id), node.attr, None)
        owner = getattr(target, "__module__", None) or ""  # (None on some objects: a typing alias)
        ours = owner.startswith(_PACKAGES) or owner == home
        if (inspect.isfunction(target) or inspect.isclass(target)) and ours:
            if _named(target, home, seen, depth + 1):
                return True
    return False


def can_raise(obj) -> bool:
    return _named(obj, obj.__module__, set())


def problems(obj, qualname: str) -> list[str]:
    """What `obj`'s docstring lacks, as messages naming `qualname`; [] when it is complete."""
    doc = inspect.getdoc(obj)
    if not doc:
        return [f"{qualname}: no docstring"]
    sections = _sections(doc)
    found = []
    constructed = inspect.isclass(obj) and issubclass(obj, (BaseException, enum.Enum))
    signature = inspect.Signature() if constructed else inspect.signature(obj)
    params = [p for p in signature.parameters if p not in ("self", "cls")]
    documented = _entries(sections.get("Parameters", []))
    if params and "Parameters" not in sections:
        found.append(f"{qualname}: no Parameters section")
    for name in params:
        if "Parameters" in sections and name not in documented:
            found.append(f"{qualname}: parameter {name!r} is not documented")
    for name in documented:
        if name not in params:
            found.append(f"{qualname}: documents {name!r}, which is not a parameter")
    if inspect.isfunction(obj) and signature.return_annotation not in (None, "None") and "Returns" not in sections:
        found.append(f"{qualname}: no Returns section")
    raises = "Raises" in sections
    if can_raise(obj) and not raises:
        found.append(f"{qualname}: can raise, and has no Raises section")
    if raises and not can_raise(obj):
        found.append(f"{qualname}: has a Raises section, and raises nothing")
    scope = vars(inspect.getmodule(obj))
    for name in _entries(sections.get("Raises", [])):
        error = scope.get(name, getattr(builtins, name, None))
        if not (inspect.isclass(error) and issubclass(error, BaseException)):
            found.append(f"{qualname}: Raises names {name!r}, not an exception class its module knows")
    return found


def _methods(cls) -> list[tuple[str, object]]:
    """The public methods of `cls` that it or a base of ours defines (not properties, not
    what a library's base class brings)."""
    out: dict[str, object] = {}
    for base in reversed(inspect.getmro(cls)):
        if base is cls or (base.__module__ or "").startswith(_PACKAGES):
            out |= {k: v for k, v in vars(base).items() if not k.startswith("_") and inspect.isfunction(v)}
    return list(out.items())


def _public():
    objects = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        objects += [(getattr(module, name), f"{module_name}.{name}") for name in module.__all__]
    for path in PUBLIC_OBJECTS:
        module_name, name = path.rsplit(".", 1)
        try:
            objects.append((getattr(importlib.import_module(module_name), name), path))
        except ImportError as e:  # (an engine's library missing: heatc[engines], vllm)
            yield pytest.param(None, path, id=path, marks=pytest.mark.skip(reason=f"{module_name}: {e}"))
    for obj, qualname in objects:
        if not callable(obj):
            continue  # (a constant: ABI_MAJOR)
        yield pytest.param(obj, qualname, id=qualname)
        if inspect.isclass(obj) and obj.__name__ in CLASS_METHODS:
            for name, method in _methods(obj):
                yield pytest.param(method, f"{qualname}.{name}", id=f"{qualname}.{name}")


@pytest.mark.parametrize(("obj", "qualname"), list(_public()))
def test_public_names_document_parameters_returns_and_raises(obj, qualname):
    assert problems(obj, qualname) == []


# --- the check itself ------------------------------------------------------------------------


def _complete(text: str, limit: int = 3) -> str:
    """Cut `text` to `limit` characters.

    Parameters
    ----------
    text : str
        What to cut.
    limit : int
        The most characters kept.

    Returns
    -------
    str
        The cut text.

    Raises
    ------
    ValueError
        When `limit` is negative.
    """
    if limit < 0:
        raise ValueError("negative")
    return text[:limit]


def _undocumented(text: str, limit: int = 3) -> str:
    """Cut `text` to `limit` characters.

    Parameters
    ----------
    text : str
        What to cut.

    Returns
    -------
    str
        The cut text.
    """
    return text[:limit]


def _raises_unsaid(text: str) -> str:
    """The text, checked.

    Parameters
    ----------
    text : str
        What to check.

    Returns
    -------
    str
        `text`.
    """
    return _complete(text)


def test_the_check_passes_a_complete_docstring():
    assert problems(_complete, "_complete") == []


def test_the_check_fails_an_undocumented_parameter():
    assert problems(_undocumented, "_undocumented") == ["_undocumented: parameter 'limit' is not documented"]


def test_the_check_follows_what_a_function_calls_to_a_raise():
    assert problems(_raises_unsaid, "_raises_unsaid") == ["_raises_unsaid: can raise, and has no Raises section"]


class _Counter:
    """Counts.

    Parameters
    ----------
    start : int
        Where counting starts.
    """

    def __init__(self, start: int) -> None:
        self.n = start

    def add(self, k: int) -> int:
        """Add `k`."""
        self.n += k
        return self.n


def test_the_check_reads_a_class_and_its_public_methods():
    assert problems(_Counter, "_Counter") == []
    assert [name for name, _ in _methods(_Counter)] == ["add"]
    assert problems(_Counter.add, "_Counter.add") == [
        "_Counter.add: no Parameters section",
        "_Counter.add: no Returns section",
    ]
