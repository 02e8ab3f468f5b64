"""The hand-written conformance corpus against every backend available here."""

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
