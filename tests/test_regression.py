"""Tests of attnlearn.regression (appendix): gradient, a realizable fit, the query helper, errors."""

import numpy as np
import pytest

from attnlearn import MultiHeadAttention, Oracle, canonical, param_error, query_budget
from attnlearn.model import random_model
from attnlearn.regression import RegressionFit, fit_regression, loss_and_grad, random_queries


def data(model, n, max_length, seed):
    return random_queries(Oracle(model), model.d, n, max_length, seed)


@pytest.mark.parametrize("d,H", [(1, 1), (2, 3), (3, 2)])
def test_gradient_matches_central_differences(d, H):
    target = random_model(H, d, seed=1)
    model = random_model(H, d, seed=2)  # away from the minimum: a non-trivial gradient
    Xs, ys = data(target, 30, 2 * H + 1, seed=3)
    _, gW, gv = loss_and_grad(model, Xs, ys)
    h = 1e-6
    for name, g in (("W", gW), ("v", gv)):
        base = getattr(model, name)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += h
            minus[idx] -= h
            if name == "W":
                Lp = loss_and_grad(MultiHeadAttention(plus, model.v), Xs, ys)[0]
                Lm = loss_and_grad(MultiHeadAttention(minus, model.v), Xs, ys)[0]
            else:
                Lp = loss_and_grad(MultiHeadAttention(model.W, plus), Xs, ys)[0]
                Lm = loss_and_grad(MultiHeadAttention(model.W, minus), Xs, ys)[0]
            fd = (Lp - Lm) / (2 * h)
            assert abs(fd - g[idx]) <= 1e-6 * max(1.0, abs(g[idx])), (name, idx, fd, g[idx])


def test_loss_is_zero_at_the_true_model_and_matches_the_model():
    target = random_model(2, 3, seed=4)
    Xs, ys = data(target, 25, 5, seed=5)
    loss, gW, gv = loss_and_grad(target, Xs, ys)
    # zero up to rounding (the model's own evaluation uses BLAS, the loss einsum)
    assert loss <= 1e-28 and np.abs(gW).max() <= 1e-13 and np.abs(gv).max() <= 1e-13
    other = random_model(2, 3, seed=6)
    r = np.concatenate([other.batch(X) - y for X, y in zip(Xs, ys)])
    assert np.isclose(loss_and_grad(other, Xs, ys)[0], 0.5 * np.mean(r**2), rtol=1e-13)


def test_random_queries_budget_and_grouping(monkeypatch):
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)  # compares with the model's own answers
    model = random_model(2, 3, seed=7)
    oracle = Oracle(model)
    n, max_length = query_budget(3, 2)
    Xs, ys = random_queries(oracle, 3, n, max_length, seed=8)
    assert oracle.queries == n and oracle.max_length <= max_length
    lengths = [X.shape[1] for X in Xs]
    assert lengths == sorted(set(lengths)) and sum(len(y) for y in ys) == n
    for X, y in zip(Xs, ys):
        assert X.shape[2] == 3 and np.array_equal(model.batch(X), y)
    Xs2, _ = random_queries(Oracle(model), 3, n, max_length, seed=8)
    assert all(np.array_equal(a, b) for a, b in zip(Xs, Xs2))  # seeded


def test_fit_on_a_tiny_realizable_problem():
    target = random_model(1, 2, seed=9)
    n, max_length = query_budget(2, 1)
    Xs, ys = data(target, n, max_length, seed=10)
    fit = fit_regression(Xs, ys, 2, 1, restarts=3, seed=0)
    assert isinstance(fit, RegressionFit)
    assert fit.loss <= 1e-20 * np.mean(np.concatenate(ys) ** 2)
    assert fit.restarts_losses.shape == (3,) and fit.nit.shape == (3,)
    assert fit.loss == fit.restarts_losses.min() == fit.restarts_losses[fit.best]
    assert param_error(fit.model, canonical(target)) <= 1e-8
    assert "RegressionFit(H=1, d=2" in repr(fit)
    again = fit_regression(Xs, ys, 2, 1, restarts=3, seed=0)
    assert np.array_equal(again.model.W, fit.model.W)  # deterministic


def test_single_array_input_is_accepted():
    target = random_model(1, 2, seed=11)
    X = np.random.default_rng(12).normal(size=(12, 3, 2))
    y = target.batch(X)
    fit = fit_regression(X, y, 2, 1, restarts=1, seed=1)
    assert fit.model.H == 1 and np.isfinite(fit.loss)


def test_bad_arguments():
    target = random_model(1, 2, seed=13)
    Xs, ys = data(target, 10, 3, seed=14)
    with pytest.raises(ValueError, match="groups of sequences but ys has"):
        fit_regression(Xs, ys[:-1], 2, 1)
    with pytest.raises(ValueError, match="no data"):
        fit_regression([], [], 2, 1)
    with pytest.raises(ValueError, match="tokens have width 2, but the model has d = 3"):
        fit_regression(Xs, ys, 3, 1)
    with pytest.raises(ValueError, match=r"group 0: .* but outputs of shape"):
        fit_regression(Xs, [y[:-1] for y in ys], 2, 1)
    with pytest.raises(ValueError, match=r"must have shape \(n, N, d\)"):
        fit_regression([X[0] for X in Xs], ys, 2, 1)
    with pytest.raises(ValueError, match="must be finite"):
        fit_regression(Xs, [y * np.nan for y in ys], 2, 1)
    with pytest.raises(ValueError, match="H must be an integer >= 1"):
        fit_regression(Xs, ys, 2, 0)
    with pytest.raises(TypeError, match="restarts must be an integer"):
        fit_regression(Xs, ys, 2, 1, restarts=2.5)
    with pytest.raises(ValueError, match="maxiter must be an integer >= 1"):
        fit_regression(Xs, ys, 2, 1, maxiter=0)
    with pytest.raises(ValueError, match="tol must be a positive number"):
        fit_regression(Xs, ys, 2, 1, tol=0.0)
    with pytest.raises(ValueError, match="does not match the oracle's token width 2"):
        random_queries(Oracle(target), 3, 10, 3, seed=0)
    with pytest.raises(ValueError, match="n_queries must be an integer >= 1"):
        random_queries(Oracle(target), 2, 0, 3, seed=0)
    with pytest.raises(TypeError, match="oracle must be an attnlearn.Oracle"):
        random_queries(target.W, 2, 5, 3, seed=0)
    with pytest.raises(TypeError, match="model must be a MultiHeadAttention"):
        loss_and_grad("model", Xs, ys)
