"""The rule language: parse `.heat` source, check it, compile it to the IR, print it back.

Public surface: `parse`, `parse_file`, `compile_source`, `compile_file`, `compile_tree`,
`format_file` (and the submodules: `ast`, `lexicon`, `automaton`, `anchors`).
"""

from heatc.lang.compiler import compile_file, compile_source, compile_tree
from heatc.lang.parse import parse, parse_file
from heatc.lang.unparse import format_file

__all__ = ["compile_file", "compile_source", "compile_tree", "format_file", "parse", "parse_file"]
