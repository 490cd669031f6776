"""attnlearn.learner.long.info: the Cramér–Rao bound of one long-design configuration."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import least_squares
from scipy.special import expit

from attnlearn.learner.nodes import ratio_grid
from attnlearn.learner.samples import noise_sd
from attnlearn.learner.long.info import information, information_limit, spacing_sd, step_sd
from attnlearn.learner.tolerances import LongTolerances


def curve(z, p, H):
    return p[0] + expit(p[1:H + 1][None, :] - z[:, None]) @ p[H + 1:]


def test_information_is_the_finite_difference_fisher_matrix():
    _, z = ratio_grid(256, 24)
    c, g, C = np.array([-1.2, 0.9]), np.array([1.0, -0.6]), 0.3
    sd = np.linspace(1e-3, 3e-3, len(z))
    p0, H, h = np.concatenate([[C], c, g]), 2, 1e-6
    J = np.column_stack([(curve(z, p0 + h * e, H) - curve(z, p0 - h * e, H)) / (2 * h) for e in np.eye(len(p0))])
    fd = (J / sd[:, None]).T @ (J / sd[:, None])
    assert np.allclose(information(z, c, g, sd), fd, rtol=1e-6, atol=0)


def test_bound_matches_a_monte_carlo_fit():
    """600 noisy copies of one configuration, each fitted by weighted least squares: the spread
    of the fitted positions and heights is the Cramér–Rao bound's (within 12 %: the sample
    standard deviation of 600 draws is good to about 3 %)."""
    L, R, rel = 256, 24, 1e-3
    _, z = ratio_grid(L, R)
    c, g, C = np.array([-1.5, 1.0]), np.array([1.0, -0.7]), 0.4
    bound = step_sd(c, g, L=L, R=R, relative=rel, C=C)
    p0 = np.concatenate([[C], c, g])
    F = curve(z, p0, 2)
    sd = noise_sd(F, absolute=0.0, relative=rel, length=L, rounding=LongTolerances().rounding)
    rng = np.random.default_rng(17)
    fits = []
    for _ in range(600):
        y = F + sd * rng.normal(size=len(z))
        fits.append(least_squares(lambda p: (curve(z, p, 2) - y) / sd, p0, method="lm").x)
    spread = np.std(np.array(fits), axis=0, ddof=1)
    assert np.allclose(spread[1:3], bound.c, rtol=0.12) and np.allclose(spread[3:], bound.g, rtol=0.12)
    assert np.isclose(spread[0], bound.C, rtol=0.12)


def test_spacing_and_window():
    """Steps too close blur (0.5 nats against 2 at H = 4); steps spread beyond the window leave it
    (4 nats against 2 at H = 8); the window 2 log(L - 1) must hold the steps (L = 64 against 4096)."""
    c_close, _ = spacing_sd(4, 0.5, L=4096, relative=6e-8)
    c_two, _ = spacing_sd(4, 2.0, L=4096, relative=6e-8)
    assert c_close > 1000 * c_two
    c8_two, _ = spacing_sd(8, 2.0, L=4096, relative=6e-8)
    c8_wide, _ = spacing_sd(8, 4.0, L=4096, relative=6e-8)
    c8_short, _ = spacing_sd(8, 2.0, L=64, relative=6e-8)
    assert c8_wide > 100 * c8_two and c8_short > 1e4 * c8_two
    # linear in the noise; a step the window never sees has no information (inf, not nan)
    assert np.isclose(spacing_sd(2, 2.0, L=4096, relative=6e-6)[0], 100 * spacing_sd(2, 2.0, L=4096, relative=6e-8)[0],
                      rtol=1e-4)
    far = step_sd([0.0, 60.0], [1.0, 1.0], L=64, R=20, relative=1e-6, level=1.0)
    assert np.isfinite(far.c[0]) and far.c[1] == np.inf


def test_limit_is_below_every_committed_error_and_estimate():
    """A floor, and the refusal's margin: on every committed noise_design row each returned
    error and each estimate is above the limit at that row's settings, so a request refused for
    lying ``refuse_factor`` below the limit lies at least that factor below everything reached
    (measured: errors 6 to 10^7 times the limit, estimates 19 to 2 10^8 times)."""
    paths = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "results").glob("noise_design_*.json"))
    checked = 0
    for path in paths:
        for item in json.load(open(path)):
            s = item["summary"]
            limit = information_limit(s["d"], s["H"], L=4096, relative=s["eps"])
            ok = [r for r in item["records"] if r["o"] == "ok"]
            if not ok:  # a row where every model raised has nothing to compare
                continue
            checked += 1
            assert min(r["e"] for r in ok) > limit, path
            assert min(r["b"] for r in ok) > limit, path
    assert checked >= 5


@pytest.mark.parametrize("H", [1, 2, 4])
def test_limit_scales_with_the_noise_and_the_width(H):
    a = information_limit(16, H, L=4096, relative=6e-8)
    assert np.isclose(information_limit(16, H, L=4096, relative=6e-6), 100 * a, rtol=1e-3)
    assert 0 < a < 1e-6
