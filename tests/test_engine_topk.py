"""Guard's top-k on the host (cuda_bridge/src/heatc_topk.h through `heatc_runtime._native.topk`,
and `engines.masking.best_k` around it): each row's k best scores, best first, equal scores by
the lower id (what an argmax takes) — against a stable sort; NaN never taken while a number
is left; rows picked by an index; bad input refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.needs("torch", "native")

import torch  # noqa: E402

from heatc_runtime import _native  # noqa: E402
from heatc_runtime.engines.masking import best_k  # noqa: E402


def _expected(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of `row` by a stable sort (ties by the lower id), NaN last, then -inf."""
    key = np.where(np.isnan(row), -np.inf, row)
    order = sorted(range(len(row)), key=lambda i: (-key[i], np.isnan(row[i]), i))[:k]
    ids = np.array(order, np.int64)
    return np.where(np.isnan(row[ids]), -np.inf, row[ids]).astype(np.float32), ids


def _topk(x: np.ndarray, k: int, index=None):
    n = x.shape[0] if index is None else len(index)
    vals, ids = np.empty((n, k), np.float32), np.empty((n, k), np.int64)
    _native.topk(x, x.shape[0], x.shape[1], index, n, k, vals, ids)
    return vals, ids


# scores drawn from a few values, so that ties, -inf and NaN are common
CELLS = st.sampled_from([0.0, 1.0, -1.0, 2.5, 7.0, float("-inf"), float("inf"), float("nan"), 1e30, -3.25])


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70), st.data())
def test_each_rows_k_best_by_a_stable_sort(rows, vocab, data):
    x = np.array(data.draw(st.lists(CELLS, min_size=rows * vocab, max_size=rows * vocab)), np.float32).reshape(rows, -1)
    k = data.draw(st.integers(1, min(vocab, 64)))
    vals, ids = _topk(x, k)
    for r in range(rows):
        want_vals, want_ids = _expected(x[r], k)
        assert ids[r].tolist() == want_ids.tolist(), (x[r], k)
        assert np.array_equal(vals[r], want_vals)


def test_a_vocabulary_of_random_scores_gives_torch_topk():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(5, 49152, generator=g)
    vals, ids = best_k(scores, None, 8)
    want = torch.topk(scores, 8, dim=-1)
    assert np.array_equal(ids, want.indices.numpy()) and np.array_equal(vals, want.values.numpy())
    sub = np.array([4, 0, 4], np.int64)
    vals, ids = best_k(scores, sub, 3)
    assert np.array_equal(ids, torch.topk(scores[sub], 3, dim=-1).indices.numpy())


def test_other_tensors_go_through_torch():
    scores = torch.randn(2, 100, dtype=torch.float64)
    vals, ids = best_k(scores, None, 4)
    want = torch.topk(scores, 4, dim=-1)
    assert np.array_equal(ids, want.indices.numpy()) and np.array_equal(vals, want.values.numpy())
    strided = torch.randn(100, 2).t()  # (not contiguous)
    assert np.array_equal(best_k(strided, None, 4)[1], torch.topk(strided, 4, dim=-1).indices.numpy())


def test_bad_input_is_refused_with_the_reason():
    x = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match="k 11 of a vocabulary of 10"):
        _topk(x, 11)
    with pytest.raises(ValueError, match="k 0"):
        _topk(x, 0)
    with pytest.raises(IndexError, match="index must be 2 row numbers below 2"):
        _topk(x, 3, np.array([0, 2], np.int64))
    with pytest.raises(IndexError, match="index must be"):
        _topk(x, 3, np.array([-1, 0], np.int64))
    vals, ids = np.empty((2, 3), np.float32), np.empty((2, 3), np.int64)
    with pytest.raises(ValueError, match="scores is 80 bytes, expected 120"):
        _native.topk(x, 3, 10, None, 2, 3, vals, ids)
    with pytest.raises(ValueError, match="ids is 48 bytes, expected 64"):
        _native.topk(x, 2, 10, None, 2, 4, np.empty((2, 4), np.float32), ids)
