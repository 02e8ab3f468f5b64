"""The hand-written conformance corpus against every backend available here."""

import re

import pytest
from conformance_harness import check_case, load_cases
from conftest import compile_cached

from heatc.backends import BACKENDS, open_session

CASES = load_cases()


def test_corpus_is_big_enough():
    assert len(CASES) >= 40
    assert sum(1 for c in CASES if any(ord(ch) > 0x2E80 for ch in c.input.decode("utf-8", "ignore"))) >= 10


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_conformance(case, backend):
    program = compile_cached(case.rules)
    errors = check_case(case, program, lambda p: open_session(backend, p))
    assert not errors, "\n".join(errors)


REACHING = [c for c in CASES if c.extra.get("reaching_differs")]


@pytest.mark.parametrize("case", REACHING, ids=lambda c: c.id)
def test_binding_cases_fail_with_reaching_gaps(case):
    """The binding cases marked so describe what binding changes: with every `..N` written
    `...N` (a gap that reaches across values and keywords, as every gap did before binding),
    the reference interpreter does not reproduce them."""
    reaching = re.sub(r"(?<!\.)\.\.(?=\d)", "...", case.rules)
    assert reaching != case.rules
    errors = check_case(case, compile_cached(reaching), lambda p: open_session("reference", p))
    assert errors, f"{case.id} passes with reaching gaps too: it does not test binding"
