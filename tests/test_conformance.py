"""The hand-written conformance corpus on every path of every backend: the reference Machine
and a batch sequence of each runtime backend (WASM, native) fed in chunks, each runtime
backend's `Checker.scan` of the whole document, and the torch ops' CPU kernel scanning it
(heatc::text, the CUDA bridge's path and loader; the same corpus runs on a GPU in
cuda_bridge/device_check.py); and the compile-error cases against the compiler. (The Node.js
host runs the corpus in test_runtime.py.)"""

import re

import pytest
from support import compile_cached
from support.conformance_harness import check_case, check_document, check_error_case, load_cases, load_error_cases

from heatc.errors import HeatError
from heatc.lang.compiler import compile_source
from heatc.verify.backends import BACKENDS, DOCUMENT_BACKENDS, open_session, run_document

CASES = load_cases()
ERROR_CASES = load_error_cases()
PATHS = [
    *(f"{b}/stream" for b in sorted(BACKENDS)),
    *(f"{b}/scan" for b in sorted(BACKENDS) if b != "reference"),
    *(pytest.param(f"{b}/scan", marks=pytest.mark.needs("torch", "native")) for b in DOCUMENT_BACKENDS),
]


def test_corpus_is_big_enough():
    assert len(CASES) >= 200
    assert sum(1 for c in CASES if any(ord(ch) > 0x2E80 for ch in c.input.decode("utf-8", "ignore"))) >= 10
    assert len(ERROR_CASES) >= 33


def _lexemes(case) -> int:
    """The reference interpreter's lexeme count for the whole input (the spec's counter)."""
    return run_document("reference", compile_cached(case.rules), case.input)[2]["lexemes"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_conformance(case, path):
    backend, how = path.split("/")
    if reason := case.skipped_by(backend):
        pytest.skip(reason)
    program = compile_cached(case.rules)
    if how == "scan":
        errors = check_document(case, program, lambda p, data: run_document(backend, p, data), _lexemes(case))
    else:
        errors = check_case(case, program, lambda p: open_session(backend, p), _lexemes(case))
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_compile_error(case):
    errors = check_error_case(case, compile_source, HeatError)
    assert not errors, "\n".join(errors)


REACHING = [c for c in CASES if c.reaching_differs]


@pytest.mark.parametrize("case", REACHING, ids=lambda c: c.id)
def test_binding_cases_fail_with_reaching_gaps(case):
    """The binding cases marked so describe what binding changes: with every `..N` written
    `...N` (a gap that reaches across values and keywords, as every gap did before binding),
    the reference interpreter does not reproduce them."""
    reaching = re.sub(r"(?<!\.)\.\.(?=\d)", "...", case.rules)
    assert reaching != case.rules
    errors = check_case(case, compile_cached(reaching), lambda p: open_session("reference", p), _lexemes(case))
    assert errors, f"{case.id} passes with reaching gaps too: it does not test binding"
