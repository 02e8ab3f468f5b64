"""The conflict tests' shared pieces: examples/legal.heat compiled, and the conflicts the
reference interpreter finds across chunks (what every backend must find too)."""

from __future__ import annotations

from heatc.lang.compiler import compile_file
from heatc.verify.backends import module_info, run_document
from heatc_runtime.reports.conflicts import chunk_bytes, find_conflicts, join_chunks

from . import EXAMPLES

LEGAL = compile_file(EXAMPLES / "legal.heat")


def reference_conflicts(program, chunks):
    data = chunk_bytes(chunks)
    events = run_document("reference", program, join_chunks(data)[0])[0]
    return find_conflicts(module_info(program), data, events)
