r"""The long design's step curve :math:`F(z)\approx C+\sum_h\gamma_h\sigma(c_h-z)`, written once: its
weighted residuals and its whitened Jacobian, with the two ends as pseudo-observations
(:math:`C=V^\top q`, :math:`C+\sum_h\gamma_h=V^\top x`) and the weak prior on the positions. Every
fit of :mod:`~.fit` and the bound of :mod:`~.info` use these; one configuration (``c`` of shape
(H,), ``C`` a number) or m of them at once (``c`` (m, H), ``C``, ``sd`` and the ends with a leading
axis m).

Used in: chapter 5b (long queries) and chapter 7.
"""

import numpy as np
from scipy.special import expit

__all__ = ["step_curve", "step_residuals", "step_jacobian"]


def _sigma(z, c):
    r""":math:`\sigma(c_h-z_i)`, shape (..., R, H)."""
    return expit(c[..., None, :] - z[:, None])


def step_curve(z, C, c, g):
    r""":math:`C+\sum_h\gamma_h\sigma(c_h-z)` at the log-ratios ``z`` (R,): shape (..., R).

    Used in: chapter 5b (the long design's fits and its Cramér–Rao bound).
    """
    return np.asarray(C)[..., None] + _sigma(z, c) @ g


def step_residuals(z, F, sd, C, c, g, ends, *, prior=None):
    r"""Whitened residuals of the step curve: the answers ``F`` at ``z`` (standard deviations ``sd``),
    then the two ends, then (with ``prior``) :math:`c_h/\mathrm{prior}`.

    Parameters
    ----------
    z : array (R,)
        The log-ratios of the configuration's queries.
    F, sd : arrays (..., R)
        Answers and their standard deviations.
    C, c, g : number or array (...,), arrays (..., H) and (H,)
        The constant, the step positions and the heights.
    ends : tuple
        :math:`V^\top q`, its sd, :math:`V^\top x`, its sd (numbers, or arrays (...,)).
    prior : float, optional
        Standard deviation of the weak prior on every position; no prior rows without it.

    Returns
    -------
    array (..., R + 2 [+ H])

    Used in: chapter 5b (every fit of the long design).
    """
    Vq, Vq_sd, Vx, Vx_sd = ends
    rows = [(step_curve(z, C, c, g) - F) / sd,
            np.asarray((C - Vq) / Vq_sd)[..., None], np.asarray((C + g.sum() - Vx) / Vx_sd)[..., None]]
    if prior is not None:
        rows.append(c / prior)
    return np.concatenate(rows, axis=-1)


def step_jacobian(z, sd, c, g, *, ends_sd=None, prior=None):
    r"""Jacobian of :func:`step_residuals` with respect to :math:`(C, c_1..c_H, \gamma_1..\gamma_H)`:
    :math:`\partial F/\partial C=1`, :math:`\partial F/\partial c_h=\gamma_h\sigma'(c_h-z)`,
    :math:`\partial F/\partial\gamma_h=\sigma(c_h-z)`, :math:`\sigma'=\sigma(1-\sigma)`, divided by
    ``sd``.

    Parameters
    ----------
    z, sd, c, g
        As in :func:`step_residuals`.
    ends_sd : tuple, optional
        The sds of :math:`V^\top q` and :math:`V^\top x`: the two end rows; without it, the data
        rows only.
    prior : float, optional
        With ``ends_sd``: the prior's rows.

    Returns
    -------
    array (..., R [+ 2 [+ H]], 2H + 1)

    Used in: chapter 5b (every fit of the long design and the Cramér–Rao bound).
    """
    s = _sigma(z, c)
    data = np.concatenate([np.ones_like(s[..., :1]), s * (1 - s) * g, s], axis=-1) / np.asarray(sd)[..., None]
    if ends_sd is None:
        return data
    H = c.shape[-1]
    Vq_sd, Vx_sd = ends_sd
    extra = np.zeros(np.shape(c)[:-1] + (2 + (H if prior is not None else 0), 2 * H + 1))
    extra[..., 0, 0] = 1 / Vq_sd
    extra[..., 1, 0] = 1 / Vx_sd
    extra[..., 1, H + 1:] = np.asarray(1 / Vx_sd)[..., None]
    if prior is not None:
        extra[..., 2 + np.arange(H), 1 + np.arange(H)] = 1 / prior
    return np.concatenate([data, extra], axis=-2)
