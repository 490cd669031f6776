"""attnlearn.protocol: any oracle object is checked at the door, every answer as it arrives."""

import mpmath
import numpy as np
import pytest

from attnlearn import Oracle, canonical, learn, learn_single_head, param_error
from attnlearn.model import random_model
from attnlearn.protocol import Access, OracleAnswerError, OracleProtocolError, OracleRefusedError, check_oracle


class UserOracle:
    """The README's protocol, nothing more: .d, .exact, .dps, .batch (no .queries)."""

    def __init__(self, model, *, exact=False, dps=None, mangle=None):
        self.model, self.d, self.exact, self.dps, self.mangle = model, model.d, exact, dps, mangle
        self._inner = Oracle(model, precision=dps) if exact else Oracle(model)

    def batch(self, Xs):
        y = self._inner.batch(Xs)
        return y if self.mangle is None else self.mangle(Xs, y)


def test_a_users_oracle_without_queries_is_learned():
    m = random_model(2, 2, seed=3)
    rec = learn(UserOracle(m), 2, heads=2)
    assert not hasattr(UserOracle(m), "queries")
    assert rec.queries["design"] == 4 * 2 * 4 - 4 + 1 and rec.queries["holdout"] > 0
    assert param_error(rec.model, canonical(m)) <= rec.error_estimate
    with mpmath.workdps(40):
        rec = learn(UserOracle(m, exact=True, dps=40), 2, heads=2)
    assert rec.queries["design"] == 29 and param_error(rec.model, canonical(m).to_mpmath()) <= 1e-25
    assert param_error(learn_single_head(UserOracle(random_model(1, 3, seed=1)), 3),
                       random_model(1, 3, seed=1)) <= 1e-9


@pytest.mark.parametrize("attrs, message", [
    ({"exact": False, "dps": None}, r"oracle must have \.d, \.exact, \.dps and \.batch\(Xs\).*; Bad has no \.d, \.batch"),
    ({"d": 2, "dps": None, "batch": lambda Xs: Xs}, r"has no \.exact"),
    ({"d": 2, "exact": False, "dps": None, "batch": 3}, r"\.batch must be callable, got int"),
    ({"d": 0, "exact": False, "dps": None, "batch": len}, r"\.d must be a positive integer, got 0"),
    ({"d": True, "exact": False, "dps": None, "batch": len}, r"\.d must be a positive integer, got True"),
    ({"d": 2, "exact": "yes", "dps": None, "batch": len}, r"\.exact must be True or False, got 'yes'"),
    ({"d": 2, "exact": True, "dps": None, "batch": len},
     r"exact \(\.exact = True\) but its \.dps is None: an exact oracle must state its working precision"),
])
def test_malformed_oracles_are_refused_at_the_door(attrs, message):
    bad = type("Bad", (), attrs)()
    with pytest.raises(OracleProtocolError, match=message):
        check_oracle(bad)
    with pytest.raises(TypeError, match=message):  # a TypeError for every learner
        learn(bad, 2, heads=1)


def test_d_mismatch():
    with pytest.raises(ValueError, match=r"d = 3 does not match the oracle's token width 2"):
        check_oracle(Oracle(random_model(1, 2, seed=0)), 3)
    with pytest.raises(ValueError, match=r"d = 3 does not match the oracle's token width 2"):
        learn_single_head(Oracle(random_model(1, 2, seed=0)), 3)


@pytest.mark.parametrize("mangle, message", [
    (lambda Xs, y: np.append(y, 0.0), r"answers of shape \((\d+),\) for .*: expected \(\d+,\), one number per query"),
    (lambda Xs, y: y + 0j, r"returned complex answers for .*: expected real float64 numbers"),
    (lambda Xs, y: y.astype(str), r"returned dtype <U\d+ answers for"),
    (lambda Xs, y: y.reshape(-1, 1), r"answers of shape \(\d+, 1\)"),
])
def test_malformed_answers_name_the_fault(mangle, message):
    with pytest.raises(OracleAnswerError, match=message):
        learn(UserOracle(random_model(1, 2, seed=0), mangle=mangle), 2, heads=1)


@pytest.mark.parametrize("first_bad, match", [
    (4, r"non-finite value \(NaN or inf\) for the check queries, s = \d+, t = \d+ \(query 0 of the batch: nan\)"),
    (5, r"non-finite value \(NaN or inf\) for a query \(query 0 of the batch: nan\)"),
])
def test_non_finite_answers_on_the_verification_queries_raise(first_bad, match):
    # d = 1, H = 1: the design asks 3 batches (the shared query, two nodes), the verification the
    # check queries (4th batch) and the held-out random sequences (from the 5th); NaN answers there
    # gave holdout_error nan (returned) before the protocol checked every answer
    calls = []

    def nan_late(Xs, y):
        calls.append(len(Xs))
        return np.full(len(y), np.nan) if len(calls) >= first_bad else y

    with pytest.raises(ValueError, match=match):
        learn(UserOracle(random_model(1, 1, seed=0), mangle=nan_late), 1, heads=1)
    assert len(calls) == first_bad  # raised at the first bad batch


def test_access_counts_and_converts():
    m = random_model(1, 2, seed=0)
    acc = Access(Oracle(m, precision=30))
    y = acc(np.zeros((3, 2, 2)), "three queries")
    assert acc.queries == 3 and acc.max_length == 2 and acc.lengths[2] == 3
    assert y.dtype == object and all(isinstance(v, mpmath.mpf) for v in y)
    assert Access(acc).oracle is acc.oracle  # an access is not wrapped twice
    with pytest.raises(ValueError, match=r"queries must have shape \(n, N, 2\), got \(3, 2\)"):
        acc(np.zeros((3, 2)))
    exact_str = UserOracle(m, exact=True, dps=30, mangle=lambda Xs, y: np.array(["x"] * len(y), dtype=object))
    with pytest.raises(OracleAnswerError, match=r"returned a str answer for a query \(query 0\): expected real"):
        Access(exact_str).batch(np.zeros((1, 1, 2)))
    exact_inf = UserOracle(m, exact=True, dps=30, mangle=lambda Xs, y: np.array([mpmath.inf] * len(y)))
    with pytest.raises(OracleAnswerError, match=r"non-finite value \(NaN or inf\) for a query \(query 0 of the batch: \+inf\)"):
        Access(exact_inf).batch(np.zeros((1, 1, 2)))


def test_an_oracles_own_exception_is_named_with_the_length_and_kept_as_cause():
    """An oracle that raises (a served model's context, a fault of its own) is never lost nor
    mistaken for the learner's failure: OracleRefusedError names what was asked and its length,
    the oracle's exception is its cause, and the refused queries are not counted."""
    def short_context(Xs, y):
        if Xs.shape[1] > 3:
            raise ValueError(f"sequence of {Xs.shape[1]} tokens: the context holds 3")
        return y

    acc = Access(UserOracle(random_model(1, 2, seed=0), mangle=short_context))
    acc(np.zeros((2, 3, 2)), "two short queries")
    with pytest.raises(OracleRefusedError, match=r"the oracle raised ValueError for four long queries \(4 queries "
                                                 r"of 5 tokens\): sequence of 5 tokens: the context holds 3") as info:
        acc(np.zeros((4, 5, 2)), "four long queries")
    assert info.value.length == 5 and isinstance(info.value.__cause__, ValueError)
    assert acc.queries == 2 and acc.max_length == 3
