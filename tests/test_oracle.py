"""Tests of attnlearn.oracle: query counting, exact mode, precision checks, noise models."""

import mpmath
import numpy as np
import pytest

from attnlearn import Float32Rounding, GaussianNoise, MultiHeadAttention, Oracle, UniformNoise
from attnlearn.model import random_model


@pytest.fixture
def model():
    return random_model(2, 3, seed=np.random.default_rng(10))


# --- counting -------------------------------------------------------------------------


def test_fresh_oracle_counts_nothing(model):
    o = Oracle(model)
    assert (o.queries, o.max_length, dict(o.lengths)) == (0, 0, {})
    assert o.d == 3 and not o.exact


def test_counts_single_and_batched(model):
    rng = np.random.default_rng(11)
    o = Oracle(model)
    o(rng.normal(size=(1, 3)))
    assert (o.queries, o.max_length, dict(o.lengths)) == (1, 1, {1: 1})
    o.batch(rng.normal(size=(5, 4, 3)))
    assert (o.queries, o.max_length, dict(o.lengths)) == (6, 4, {1: 1, 4: 5})
    o(rng.normal(size=(2, 3)))
    assert (o.queries, o.max_length, dict(o.lengths)) == (7, 4, {1: 1, 4: 5, 2: 1})
    o.batch(rng.normal(size=(3, 2, 3)))
    assert (o.queries, o.max_length, dict(o.lengths)) == (10, 4, {1: 1, 4: 5, 2: 4})
    assert sum(o.lengths.values()) == o.queries
    assert o.elapsed >= 0.0


def test_invalid_query_is_not_counted(model):
    o = Oracle(model)
    with pytest.raises(ValueError, match="tokens have width"):
        o(np.ones((2, 4)))
    with pytest.raises(ValueError, match="empty sequence"):
        o.batch(np.ones((2, 0, 3)))
    assert o.queries == 0 and o.max_length == 0


def test_float_outputs_equal_model(model, monkeypatch):
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)  # the oracle's own answers, bit for bit
    Xs = np.random.default_rng(12).normal(size=(8, 3, 3))
    o = Oracle(model)
    y = o.batch(Xs)
    assert y.dtype == float
    np.testing.assert_array_equal(y, model.batch(Xs))
    assert o(Xs[0]) == model(Xs[0])


# --- exact mode ----------------------------------------------------------------------


def test_exact_mode_returns_mpf_and_matches_float(model):
    Xs = np.random.default_rng(13).normal(size=(8, 4, 3))
    oe = Oracle(model, precision=50)
    assert oe.exact and oe.dps == 50
    ye = oe.batch(Xs)
    assert ye.dtype == object and all(isinstance(y, mpmath.mpf) for y in ye)
    assert isinstance(oe(Xs[0]), mpmath.mpf)
    yf = model.batch(Xs)
    for a, b in zip(yf, ye):
        assert abs(a - float(b)) <= 1e-14 * max(1.0, abs(float(b)))
    assert oe.queries == 9


def test_exact_mode_uses_requested_precision(model):
    X = np.random.default_rng(14).normal(size=(3, 3))
    y30 = Oracle(model, precision=30)(X)
    y60 = Oracle(model, precision=60)(X)
    with mpmath.workdps(70):
        assert abs(y30 - y60) < 1e-27 * max(1, abs(y60))  # agree to ~30 digits
    assert isinstance(y60, mpmath.mpf)
    assert mpmath.mp.dps == 15  # the global precision is left alone


def test_exact_mode_accepts_numpy_integer(model):
    assert Oracle(model, precision=np.int64(20)).dps == 20


@pytest.mark.parametrize("precision", [0, -1, -30])
def test_precision_not_positive(model, precision):
    with pytest.raises(ValueError, match="positive number of digits"):
        Oracle(model, precision=precision)


@pytest.mark.parametrize("precision", [2.5, 30.0, True, False, None])
def test_precision_wrong_type(model, precision):
    with pytest.raises(TypeError, match=r'precision must be "float64" or a positive integer'):
        Oracle(model, precision=precision)


@pytest.mark.parametrize("precision", ["float32", "exact", ""])
def test_precision_wrong_string(model, precision):
    with pytest.raises(ValueError, match=r'precision must be "float64" or a positive integer'):
        Oracle(model, precision=precision)


def test_model_without_batch():
    with pytest.raises(TypeError, match=r"model must have \.d and \.batch"):
        Oracle(object())


def test_bad_noise_object(model):
    with pytest.raises(TypeError, match="noise must be"):
        Oracle(model, noise=0.1)


# --- noise ---------------------------------------------------------------------------


def test_uniform_noise_bounded_and_reproducible(model):
    Xs = np.random.default_rng(15).normal(size=(2000, 3, 3))
    clean = model.batch(Xs)
    eps = 1e-3
    o1 = Oracle(model, noise=UniformNoise(eps), seed=7)
    o2 = Oracle(model, noise=UniformNoise(eps), seed=7)
    o3 = Oracle(model, noise=UniformNoise(eps), seed=8)
    y1, y2, y3 = o1.batch(Xs), o2.batch(Xs), o3.batch(Xs)
    err = y1 - clean
    assert np.max(np.abs(err)) <= eps * (1 + 1e-9)
    assert np.max(np.abs(err)) > 0.9 * eps  # the whole interval is used
    assert abs(np.mean(err)) < 0.1 * eps
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(y1, y3)
    assert o1.noise.bound(clean) == eps
    assert repr(o1.noise) == "UniformNoise(epsilon=0.001)"


def test_uniform_noise_in_exact_mode(model):
    Xs = np.random.default_rng(16).normal(size=(50, 3, 3))
    o = Oracle(model, precision=40, noise=UniformNoise(1e-6), seed=1)
    y = o.batch(Xs)
    clean = Oracle(model, precision=40).batch(Xs)
    with mpmath.workdps(40):
        errs = [abs(a - b) for a, b in zip(y, clean)]
    assert all(isinstance(a, mpmath.mpf) for a in y)
    assert max(errs) <= 1e-6 and max(errs) > 1e-8


def test_gaussian_noise_std(model):
    Xs = np.random.default_rng(17).normal(size=(4000, 2, 3))
    sigma = 0.01
    o = Oracle(model, noise=GaussianNoise(sigma), seed=3)
    err = o.batch(Xs) - model.batch(Xs)
    assert 0.9 * sigma < np.std(err) < 1.1 * sigma
    assert abs(np.mean(err)) < 0.1 * sigma
    assert o.noise.bound(err) == 5 * sigma
    again = Oracle(model, noise=GaussianNoise(sigma), seed=3).batch(Xs)
    np.testing.assert_array_equal(again - model.batch(Xs), err)  # seeded: reproducible


def test_float32_rounding_equals_cast(model, monkeypatch):
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)  # the oracle's own answers, bit for bit
    Xs = np.random.default_rng(18).normal(size=(500, 3, 3))
    clean = model.batch(Xs)
    y = Oracle(model, noise=Float32Rounding()).batch(Xs)
    np.testing.assert_array_equal(y, clean.astype(np.float32).astype(float))
    assert np.all(np.abs(y - clean) <= Float32Rounding().bound(clean))


def test_float32_rounding_in_exact_mode(model):
    Xs = np.random.default_rng(19).normal(size=(20, 3, 3))
    y = Oracle(model, precision=30, noise=Float32Rounding()).batch(Xs)
    expect = model.batch(Xs).astype(np.float32).astype(float)
    np.testing.assert_array_equal(np.array([float(a) for a in y]), expect)


@pytest.mark.parametrize("cls,kw", [(UniformNoise, "epsilon"), (GaussianNoise, "sigma")])
@pytest.mark.parametrize("bad, exc", [(-1e-3, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                                      ("0.1", TypeError), (None, TypeError)])
def test_invalid_noise_parameters(cls, kw, bad, exc):
    with pytest.raises(exc, match=f"{kw} must be a finite number >= 0"):
        cls(bad)


def test_zero_noise_is_clean(model, monkeypatch):
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)  # the oracle's own answers, bit for bit
    Xs = np.random.default_rng(20).normal(size=(10, 3, 3))
    np.testing.assert_array_equal(Oracle(model, noise=UniformNoise(0), seed=0).batch(Xs), model.batch(Xs))


# --- perturbation mode (ATTNLEARN_PERTURB): a few ulps on every float64 answer -------------


def test_perturbation_mode_moves_answers_by_a_few_ulps(monkeypatch):
    rng = np.random.default_rng(5)
    model = random_model(2, 3, seed=rng)
    Xs = rng.normal(size=(400, 4, 3))
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)
    plain = Oracle(model).batch(Xs)
    monkeypatch.setenv("ATTNLEARN_PERTURB", "7")
    a, b = Oracle(model).batch(Xs), Oracle(model).batch(Xs)
    np.testing.assert_array_equal(a, b)  # seeded: the same on every run
    k = (a - plain) / (np.finfo(float).eps * np.abs(plain))
    assert np.all(np.abs(k) <= 4.5) and np.any(np.abs(k) > 1)  # moved by 4 eps at most (+ the rounding of the product)
    monkeypatch.setenv("ATTNLEARN_PERTURB", "8")
    assert not np.array_equal(Oracle(model).batch(Xs), a)  # another seed, other ulps


def test_perturbation_mode_leaves_exact_mode_alone(monkeypatch):
    rng = np.random.default_rng(6)
    model = random_model(2, 2, seed=rng)
    X = rng.normal(size=(1, 3, 2))
    monkeypatch.delenv("ATTNLEARN_PERTURB", raising=False)
    plain = Oracle(model, precision=30).batch(X)
    monkeypatch.setenv("ATTNLEARN_PERTURB", "1")
    assert Oracle(model, precision=30).batch(X)[0] == plain[0]


def test_perturbation_mode_bad_value(monkeypatch):
    monkeypatch.setenv("ATTNLEARN_PERTURB", "yes")
    with pytest.raises(ValueError, match=r"ATTNLEARN_PERTURB must be an integer seed \(or unset\), got 'yes'"):
        Oracle(random_model(1, 2, seed=0))


# --- issue 13: every parameter named -------------------------------------------------------------


@pytest.mark.parametrize("cls,kw", [(UniformNoise, "epsilon"), (GaussianNoise, "sigma")])
@pytest.mark.parametrize("bad", [True, False, np.True_, 1j, [1e-3]])
def test_noise_parameter_must_be_a_real_number(cls, kw, bad):
    with pytest.raises(TypeError, match=rf"{kw} must be a finite number >= 0, got {type(bad).__name__}"):
        cls(bad)


@pytest.mark.parametrize("cls,kw", [(UniformNoise, "epsilon"), (GaussianNoise, "sigma")])
@pytest.mark.parametrize("good", [0, 1e-3, np.float32(0.5), mpmath.mpf("1e-3"), np.int64(2)])
def test_noise_parameter_of_any_real_type(cls, kw, good):
    assert getattr(cls(good), kw) == float(good)


@pytest.mark.parametrize("seed, exc, match", [
    (True, TypeError, "seed must be None, a non-negative integer, a sequence of them or a numpy Generator, got bool"),
    (1.5, TypeError, "seed must be None, .* got float 1.5"),
    ("0", TypeError, "seed must be None, .* got str '0'"),
    (-3, ValueError, "seed must be None, .* got -3"),
])
def test_bad_seed_is_named(model, seed, exc, match):
    with pytest.raises(exc, match=match):
        Oracle(model, noise=UniformNoise(1e-3), seed=seed)


@pytest.mark.parametrize("seed", [None, 0, np.uint8(4), [1, 2], np.random.default_rng(3)])
def test_good_seeds_are_accepted(model, seed):
    o = Oracle(model, noise=UniformNoise(1e-3), seed=seed)
    assert len(o.batch(np.zeros((2, 1, 3)))) == 2


def test_relative_noise():
    from attnlearn import RelativeNoise

    rng = np.random.default_rng(0)
    y = np.array([1.0, -100.0, 0.0, 1e6])
    e = RelativeNoise(1e-3).sample(rng, y)
    assert e[2] == 0.0 and np.all(np.abs(e) <= 5e-3 * np.abs(y))
    assert RelativeNoise(1e-3).bound(y) == pytest.approx(5e-3 * 1e6)
    assert repr(RelativeNoise(6e-8)) == "RelativeNoise(epsilon=6e-08)"
    with pytest.raises(ValueError, match="epsilon must be a finite number >= 0"):
        RelativeNoise(-1.0)
    with pytest.raises(TypeError, match="epsilon must be"):
        RelativeNoise("x")
