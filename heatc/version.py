"""heatc's version, in a module of its own: `from heatc.version import __version__` works
even where a folder named `heatc` (a checkout's root, beside a script) shadows the package
as an empty namespace package, which an editable install's import hook does not override —
`from heatc import __version__` then fails with "cannot import name '__version__' from
'heatc' (unknown location)", while the package's modules still import.

Public surface: `__version__`.
"""

__version__ = "0.1.0"  # (pyproject.toml's `version` says the same)
