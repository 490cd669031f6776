"""The joint certificate (attnlearn.learner.certificate): the Jacobian, the refit, the noise level,
the tail bound, the held-out confrontation, and what learn returns with it (chapter 5)."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import chi2

from attnlearn import Oracle, UniformNoise, canonical, learn, param_error
from attnlearn.layer import AttentionLayer
from attnlearn.learner.certificate import QueryLog, Parameters, _tail, certify, confront, noise_level
from attnlearn.learner.tolerances import CertificateTolerances
from attnlearn.model import MultiHeadAttention, random_model

TOL = CertificateTolerances()


def _biased(H, d, seed):
    rng = np.random.default_rng(seed)
    M = random_model(H, d, seed=seed)
    return AttentionLayer(M.W, M.v, c=rng.normal(size=(H, d)), b=rng.normal())


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("d", [1, 3])
def test_jacobian_matches_finite_differences(biased, d):
    model = _biased(2, d, 5) if biased else random_model(2, d, seed=5)
    fam = Parameters(model)
    theta = fam.pack(model)
    Xs = np.random.default_rng(1).normal(size=(7, 4, d))
    f, J = fam.answers(theta, Xs)
    assert np.allclose(f, model.batch(Xs), rtol=1e-13, atol=1e-13)
    h = 1e-6
    for k in range(fam.size):
        e = np.zeros(fam.size)
        e[k] = h
        num = (fam.answers(theta + e, Xs, jacobian=False)[0] - fam.answers(theta - e, Xs, jacobian=False)[0]) / (2 * h)
        assert np.allclose(J[:, k], num, rtol=1e-6, atol=1e-8), k
    assert np.array_equal(fam.pack(fam.model(theta)), theta)


def _logged(model, n, N, *, noise, seed):
    """A QueryLog of n random queries of N tokens, answered with uniform noise of that size."""
    rng = np.random.default_rng(seed)
    Xs = rng.normal(size=(n, N, model.d))
    log = QueryLog()
    log.add(Xs, model.batch(Xs) + rng.uniform(-noise, noise, size=n))
    return log


def test_refit_recovers_a_perturbed_model_and_bounds_its_error():
    truth = random_model(2, 3, seed=2)
    log = _logged(truth, 400, 5, noise=1e-9, seed=3)
    start = MultiHeadAttention(truth.W + 1e-4, truth.v - 1e-4)  # far outside the noise
    model, estimate, cert = certify(start, log, eps_out=1e-9, design_estimate=1.0, tol=TOL)
    err = param_error(model, canonical(truth))
    assert cert.steps >= 2 and cert.answers == 400 and cert.parameters == 24
    # the uniform noise's standard deviation is 1e-9 / sqrt(3); measured within the confidence factor
    assert 0.8 / np.sqrt(3) < cert.measured / 1e-9 < 1.2 / np.sqrt(3)
    assert err <= estimate <= 100 * err
    assert cert.rms < estimate


def test_certify_declines_what_it_cannot_certify():
    truth = random_model(2, 3, seed=2)
    assert certify(MultiHeadAttention(np.zeros((0, 3, 3)), np.zeros((0, 3))), QueryLog(),
                   eps_out=1e-9, design_estimate=0.0, tol=TOL) is None  # no head
    few = _logged(truth, 20, 5, noise=1e-9, seed=3)  # 20 answers for 24 parameters
    assert certify(truth, few, eps_out=1e-9, design_estimate=1.0, tol=TOL) is None
    log = _logged(truth, 400, 5, noise=1e-9, seed=3)
    assert certify(truth, log, eps_out=1e-9, design_estimate=1.0, tol=replace(TOL, max_work=1e3)) is None
    single = _logged(truth, 400, 1, noise=1e-9, seed=3)  # one-token queries never see W: rank-deficient
    assert certify(truth, single, eps_out=1e-9, design_estimate=1.0, tol=TOL) is None


def test_noise_level_needs_enough_residuals():
    assert noise_level(4.0, 10, answers=100, eps_out=3.0, tol=TOL) == (3.0, None)  # fewer than min_dof
    assert noise_level(4.0, 20, answers=100, eps_out=3.0, tol=TOL) == (3.0, None)  # under a quarter
    sigma, measured = noise_level(100.0, 100, answers=100, eps_out=3.0, tol=TOL)
    assert measured == 1.0
    assert sigma == pytest.approx(np.sqrt(100 / chi2.ppf(TOL.noise_confidence, 100)))


@pytest.mark.parametrize("lam", [[1.0], [1.0, 1.0, 1.0], [5.0, 0.1, 0.1, 0.1], list(np.linspace(0.1, 1, 30))])
def test_tail_is_a_bound_and_below_laurent_massart(lam):
    lam = np.array(lam)
    x = np.log(4 / TOL.alpha)
    t = _tail(lam, x)
    assert t <= lam.sum() + 2 * np.sqrt(x * (lam**2).sum()) + 2 * lam.max() * x
    # Monte Carlo would need 1e7 draws; the exact tail of a scaled chi-square bounds it instead
    k = len(lam)
    assert t >= lam.min() * chi2.isf(np.exp(-x), k)
    if np.all(lam == lam[0]):  # equal weights: the Chernoff bound is above the exact quantile
        assert t >= lam[0] * chi2.isf(np.exp(-x), k)
        assert t <= 1.6 * lam[0] * chi2.isf(np.exp(-x), k)  # and not far above it


def test_confront_raises_the_estimate_of_a_model_the_held_out_answers_refute():
    truth = random_model(2, 3, seed=2)
    log = _logged(truth, 400, 5, noise=1e-9, seed=3)
    model, estimate, cert = certify(truth, log, eps_out=1e-9, design_estimate=1.0, tol=TOL)
    mark = log.mark
    heldout = _logged(truth, 32, 4, noise=1e-9, seed=4)
    log.add(*heldout._entries[0])
    assert confront(cert, model, log, mark, estimate=estimate, tol=TOL) == estimate  # consistent: unchanged
    assert cert.holdout_chi2 < 3
    wrong = MultiHeadAttention(model.W * (1 + 1e-5), model.v)
    raised = confront(cert, wrong, log, mark, estimate=estimate, tol=TOL)
    assert raised > 10 * estimate and cert.holdout_chi2 > 100


@pytest.mark.parametrize("design", ["paper", "lean"])
def test_learn_returns_the_refitted_model_within_its_estimate(design):
    M = random_model(2, 3, seed=10)  # measured: error / estimate 1/5.7 (paper) and 1/7.9 (lean)
    rec = learn(Oracle(M, noise=UniformNoise(1e-12), seed=1), 3, heads=2, seed=1, design=design, output_error=1e-12)
    err = param_error(rec.model, canonical(M))
    assert rec.certificate is not None and rec.certificate.steps >= 1
    assert err <= rec.error_estimate <= 100 * err
    assert rec.error_estimate < rec.certificate.design_estimate  # far tighter than the design's own bound


def test_biased_learn_is_refitted_too():
    from attnlearn.learner.paper.bias import bias_error

    layer = _biased(2, 3, 7)
    rec = learn(Oracle(layer), 3, heads=2, seed=0, bias=True)
    assert isinstance(rec.model, AttentionLayer) and rec.certificate is not None
    assert bias_error(rec.model, layer) <= rec.error_estimate


def test_exact_mode_and_the_long_design_keep_their_own_estimates():
    M = random_model(1, 2, seed=3)
    assert learn(Oracle(M, precision=30), 2, heads=1).certificate is None
    assert learn(Oracle(M), 2, heads=1, design="long", max_length=64).certificate is None
