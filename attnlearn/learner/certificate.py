r"""The joint certificate of the paper's and the lean design (float64): every answer asked refits
the recovered model at once, and the error estimate is the first-order error of that fit.

Used in: chapter 5 (the error estimate against the true error), chapters 4, 7 and 8 (every float64
recovery of the paper's and the lean design ends here); chapters 5b and 7 (:func:`confront_spread`,
the long design's held-out answers).

A design turns its :math:`m` answers into the :math:`P` parameters
:math:`\theta=\{(W_h,v_h)\}` (and :math:`c_h,\beta` with ``bias=True``) through a chain of
interpolations, labellings and solves, each using a few answers. Propagating the answers' errors
stage by stage with absolute values (the designs' own first-order bounds) ignores that one error
enters several stages with opposite signs, and the chain itself uses each answer once where
the model constrains it many times. This module finishes every float64 run of those designs
with three steps:

1. **Refit** (:func:`refit`): Gauss–Newton steps on :math:`\sum_i(y_i-f(X_i;\theta))^2` over every
   answer asked (design, constants, redraws, check queries), starting from the design's model.
   The design's chain is then only the initial point of a least-squares fit, whose error is the
   smallest any unbiased use of these answers can reach to first order [1]_.
2. **Noise** (:func:`noise_level`): the answers' error level :math:`\sigma` measured from the
   fit's residuals, :math:`\hat\sigma^2=\chi^2/\nu` with :math:`\nu=m-P`, taken at its upper
   confidence limit :math:`\sigma_u^2=\chi^2/\chi^2_\nu(\beta)`; with fewer than
   :attr:`~.tolerances.CertificateTolerances.min_dof` degrees of freedom the output error
   :math:`\varepsilon` (a bound on every answer's error, hence on its standard deviation) instead.
3. **Bound** (:func:`block_bounds`): with :math:`J` the Jacobian of the answers at the fit,
   :math:`\delta\theta\approx(J^\top J)^{-1}J^\top e` has covariance :math:`\sigma^2C`,
   :math:`C=(J^\top J)^{-1}`. For each block :math:`b` of parameters (each head's :math:`W_h`,
   :math:`v_h`, :math:`c_h`; the offset :math:`\beta`) with covariance block :math:`C_b`, the
   Chernoff bound on the Gaussian quadratic form :math:`\|\delta\theta_b\|^2=\sigma^2\sum_j
   \lambda_jz_j^2` (:math:`\lambda_j` the eigenvalues of :math:`C_b`),

   .. math:: \Pr\big(\|\delta\theta_b\|^2\ge\sigma^2t\big)\le e^{-x},\qquad
             t=\min_{0<s<1/(2\lambda_{\max})}\frac{x-\tfrac12\sum_j\log(1-2s\lambda_j)}{s}
             \le\sum_j\lambda_j+2\|\lambda\|\sqrt x+2\lambda_{\max}x

   (the right-hand side is Laurent and Massart's closed form [2]_), at :math:`x=\log(B/\alpha)`
   over the :math:`B` blocks, divided by the block's norm, gives the relative error the estimate
   reports (the largest over blocks; the measure of
   :func:`~attnlearn.param_error` and :func:`~attnlearn.learner.paper.bias.bias_error`).

The held-out queries then confront the refitted model (:func:`confront`): each residual is
compared with its predicted spread (the answer's error and the model's), and a significant
excess raises the estimate by it; the estimate is never lowered. The long design, whose queries
are too long to refit, has its own covariance confronted the same way (:func:`confront_spread`).

What the estimate is: a **high-probability bound under the linearised model** — to first order in
the answers' errors, for independent errors of a common standard deviation, the relative error
exceeds it with probability at most :math:`\alpha` (:attr:`~.tolerances.CertificateTolerances.alpha`).
The linearisation is checked, not assumed: the refit must converge (its last step is added to
the estimate), and the held-out residuals must agree with :math:`\sigma_u`. Chapter 5 measures
how often the estimate holds over the noise sweep.

References
----------
.. [1] C. L. Lawson, R. J. Hanson, *Solving Least Squares Problems*, SIAM, 1995, ch. 7 (the
       covariance of a least-squares solution; Gauss–Newton refinement).
.. [2] B. Laurent, P. Massart, "Adaptive estimation of a quadratic functional by model
       selection", Annals of Statistics 28 (2000) 1302–1338, Lemma 1.
.. [3] N. Carlini, M. Jagielski, I. Mironov, "Cryptanalytic extraction of neural network models",
       CRYPTO 2020 (certifying an extracted model against the oracle).
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import qr, solve_triangular
from scipy.special import gammainccinv, gammaincinv

from ..canonical import canonical
from ..layer import AttentionLayer
from ..model import MultiHeadAttention, softmax_numerators
from .tolerances import CertificateTolerances

__all__ = ["QueryLog", "Certificate", "Parameters", "certify", "confront", "confront_spread", "refit", "noise_level",
           "block_bounds"]


class QueryLog:
    """Every float64 query asked through an :class:`~attnlearn.protocol.Access` and its answer, in
    the order asked (the refit's data; for the long design, its held-out queries only).

    Used in: chapters 4, 5, 5b, 7 and 8 (through ``learn``)."""

    def __init__(self):
        self._entries = []

    def add(self, Xs, y):
        """Record a batch ``Xs`` (n, N, d) and its answers ``y`` (n,)."""
        self._entries.append((np.asarray(Xs, dtype=float), np.asarray(y, dtype=float)))

    @property
    def mark(self):
        """The number of batches recorded so far (for :meth:`batches`' ``start``)."""
        return len(self._entries)

    def truncate(self, mark):
        """Forget the batches recorded from ``mark`` on (a probe at a scale the design abandons)."""
        del self._entries[mark:]

    def answers(self, start=0):
        """Number of answers recorded from batch ``start`` on."""
        return sum(len(y) for _, y in self._entries[start:])

    def batches(self, start=0):
        """The batches from ``start`` on, stacked by length: one ``(Xs, y)`` per length."""
        by = {}
        for Xs, y in self._entries[start:]:
            by.setdefault(Xs.shape[1], []).append((Xs, y))
        return [(np.concatenate([X for X, _ in part]), np.concatenate([y for _, y in part]))
                for _, part in sorted(by.items())]


@dataclass
class Certificate:
    r"""How the error estimate of a float64 paper or lean recovery was made (:func:`certify`).

    Attributes
    ----------
    answers : int
        Answers in the refit (:math:`m`), the held-out ones not included.
    parameters : int
        Parameters refitted (:math:`P`).
    steps : int
        Gauss–Newton steps taken.
    last_step : float
        The last Gauss–Newton step computed (taken or not), relative to each block's norm, the
        largest: the distance to the least-squares solution to first order (added to the
        estimate).
    noise : float
        :math:`\sigma_u`, the answers' error level used (absolute).
    measured : float or None
        :math:`\hat\sigma` from the residuals (None with too few degrees of freedom).
    dof : int
        Degrees of freedom of :math:`\hat\sigma`: :math:`m-P`, or the number of held-out answers
        when they measured it (:func:`confront`).
    rms : float
        The largest block's first-order root-mean-square relative error at :math:`\sigma_u`.
    design_estimate : float
        The design's own first-order bound for its (unrefitted) model, for comparison.
    holdout_chi2 : float or None
        :math:`\chi^2_h/m_h` of the held-out answers (:func:`confront`; about 1 when the
        certificate's model holds), None before them.
    """

    answers: int
    parameters: int
    steps: int
    last_step: float
    noise: float
    measured: object
    dof: int
    rms: float
    design_estimate: float
    holdout_chi2: object = None
    chi2: float = field(default=0.0, repr=False)
    _fit: object = field(default=None, repr=False)


class Parameters:
    """The parameters of the model a design returns, packed into one vector, and the answers'
    Jacobian: the paper's model (:math:`W_h, v_h`) or, with ``c``, the biased layer
    (:math:`W_h, v_h, c_h`, then :math:`\\beta`).

    Parameters
    ----------
    model : MultiHeadAttention or AttentionLayer
        Fixes the layout: per head ``vec(W_h)`` (row-major), ``v_h``, with biases ``c_h``; then
        :math:`\\beta` with biases.

    Used in: chapters 5, 7 and 8 (:func:`certify`), 5b and 7 (the long design's
    :class:`~attnlearn.learner.long.solve.AnswerSpread`)."""

    def __init__(self, model):
        self.biased = isinstance(model, AttentionLayer)
        W = np.asarray(model.W, dtype=float)
        self.H, self.d = W.shape[0], W.shape[1]
        self.per = self.d * self.d + (2 if self.biased else 1) * self.d

    @property
    def size(self):
        return self.H * self.per + (1 if self.biased else 0)

    def pack(self, model):
        W = np.asarray(model.W, dtype=float).reshape(self.H, -1)
        if not self.biased:
            return np.concatenate([W, np.asarray(model.v, dtype=float)], axis=1).ravel()
        c = np.zeros((self.H, self.d)) if model.c is None else np.asarray(model.c, dtype=float)
        b = 0.0 if model.b is None else float(np.asarray(model.b, dtype=float).ravel()[0])
        body = np.concatenate([W, np.asarray(model.A, dtype=float), c], axis=1).ravel()
        return np.append(body, b)

    def unpack(self, theta):
        H, d = self.H, self.d
        body = theta[:H * self.per].reshape(H, self.per)
        W, v = body[:, :d * d].reshape(H, d, d), body[:, d * d:d * d + d]
        if not self.biased:
            return W, v, None, None
        return W, v, body[:, d * d + d:], theta[-1]

    def model(self, theta):
        W, v, c, b = self.unpack(theta)
        if not self.biased:
            return MultiHeadAttention(W, v)
        return AttentionLayer(W, v, c=c, b=b)

    def blocks(self, theta):
        """``(indices, norm)`` of every block whose relative error is reported: each head's
        :math:`W_h`, :math:`v_h` (and :math:`c_h` against :math:`\\max(\\|c_h\\|,\\|W_h\\|)`), and
        :math:`\\beta` against :math:`\\max(|\\beta|,\\max_h\\|v_h\\|)`."""
        W, v, c, b = self.unpack(theta)
        d, out = self.d, []
        for h in range(self.H):
            base = h * self.per
            nW, nv = np.linalg.norm(W[h]), np.linalg.norm(v[h])
            out.append((np.arange(base, base + d * d), nW))
            out.append((np.arange(base + d * d, base + d * d + d), nv))
            if self.biased:
                out.append((np.arange(base + d * d + d, base + self.per), max(np.linalg.norm(c[h]), nW)))
        if self.biased:
            out.append((np.array([self.size - 1]), max(abs(b), max(np.linalg.norm(v, axis=1), default=0.0))))
        return out

    def answers(self, theta, Xs, *, jacobian=True):
        r"""The model's answers to ``Xs`` (n, N, d) and their Jacobian (n, P).

        Notes
        -----
        With :math:`\alpha_{h,i}` the attention of head :math:`h` on token :math:`i`,
        :math:`u_{h,i}=v_h^\top x_i` and :math:`\bar u_h=\sum_i\alpha_{h,i}u_{h,i}`:
        :math:`\partial f/\partial v_h=\sum_i\alpha_{h,i}x_i`,
        :math:`\partial f/\partial c_h=g_h=\sum_i\alpha_{h,i}(u_{h,i}-\bar u_h)x_i`,
        :math:`\partial f/\partial W_h=g_h\,x_N^\top` and :math:`\partial f/\partial\beta=1`."""
        W, v, c, b = self.unpack(theta)
        n, d = Xs.shape[0], self.d
        if self.biased:
            s = np.einsum("nid,hde,ne->nih", Xs, W, Xs[:, -1, :]) + Xs @ c.T
            e = np.exp(s - s.max(axis=1, keepdims=True))
        else:
            e = softmax_numerators(Xs, W)
        a = e / e.sum(axis=1, keepdims=True)  # (n, N, H)
        u = Xs @ v.T
        ubar = (a * u).sum(axis=1)  # (n, H)
        f = ubar.sum(axis=1) + (b if self.biased else 0.0)
        if not jacobian:
            return f, None
        dv = np.einsum("nih,nid->nhd", a, Xs)
        g = np.einsum("nih,nid->nhd", a * (u - ubar[:, None, :]), Xs)
        dW = (g[:, :, :, None] * Xs[:, -1, None, None, :]).reshape(n, self.H, d * d)
        parts = [dW, dv] + ([g] if self.biased else [])
        J = np.concatenate(parts, axis=2).reshape(n, self.H * self.per)
        if self.biased:
            J = np.concatenate([J, np.ones((n, 1))], axis=1)
        return f, J

    def residuals(self, theta, data, *, jacobian=True):
        fs, Js, ys = [], [], []
        for Xs, y in data:
            f, J = self.answers(theta, Xs, jacobian=jacobian)
            fs.append(f)
            ys.append(y)
            Js.append(J)
        r = np.concatenate(ys) - np.concatenate(fs)
        return r, (np.concatenate(Js) if jacobian else None)


def _factor(J):
    """QR of ``J`` with unit columns: ``(Q, R, column norms)``; None when a column vanishes."""
    norms = np.linalg.norm(J, axis=0)
    if not np.all(norms > 0):
        return None
    Q, R = qr(J / norms, mode="economic", check_finite=False)
    return Q, R, norms


def refit(family, theta, data, *, tol):
    """Gauss–Newton steps from ``theta`` over the answers ``data`` (stage 1).

    Returns ``(theta, r, factor, steps, last)``: the refitted parameters, their residuals, the
    QR factor of the Jacobian there (:func:`_factor`; None when it is rank-deficient: nothing to
    certify), the steps taken and the last step computed (taken or not: at the least-squares
    solution it is at rounding level, and its size enters the estimate).

    Used in: chapter 5 (through :func:`certify`)."""
    r, J = family.residuals(theta, data)
    steps = 0
    while True:
        fac = _factor(J)
        if fac is None or not _full_rank(fac[1], tol):
            return theta, r, None, steps, None
        Q, R, norms = fac
        step = solve_triangular(R, Q.T @ r, check_finite=False) / norms
        if steps == tol.max_steps:
            return theta, r, fac, steps, step
        trial = theta + step
        r2, J2 = family.residuals(trial, data)
        if not r2 @ r2 < r @ r:  # no decrease: theta is the solution to rounding, or the step diverged
            return theta, r, fac, steps, step
        theta, r, J, steps = trial, r2, J2, steps + 1


def _full_rank(R, tol):
    diag = np.abs(np.diag(R))
    return diag.min() > tol.rank * diag.max()


def noise_level(chi2_sum, dof, *, answers, eps_out, tol):
    r"""The answers' error level :math:`\sigma_u` (stage 2) and :math:`\hat\sigma`, from ``dof``
    degrees of freedom of the ``answers`` residuals; None for :math:`\hat\sigma` (and
    :math:`\sigma_u` = ``eps_out``) when they are fewer than ``tol.min_dof`` or than
    ``tol.residual_share`` of the answers.

    A nearly square fit (the lean design asks little more than :math:`P` queries) leaves residuals
    only where its few extra answers are, and they measure the noise of those answers, not of the
    whole fit; the held-out answers then measure it (:func:`confront`).

    Used in: chapter 5 (through :func:`certify` and :func:`confront`)."""
    if dof < max(tol.min_dof, tol.residual_share * answers):
        return eps_out, None
    measured = float(np.sqrt(chi2_sum / dof))
    return float(np.sqrt(chi2_sum / _chi2_lower(tol.noise_confidence, dof))), measured


def _chi2_lower(q, dof):
    """The lower ``q`` quantile of :math:`\\chi^2_{dof}` (``scipy.stats.chi2.ppf``, through the
    lighter :mod:`scipy.special`)."""
    return 2.0 * float(gammaincinv(dof / 2, q))


def _chi2_upper(q, dof):
    """The upper ``q`` quantile of :math:`\\chi^2_{dof}` (``scipy.stats.chi2.isf``)."""
    return 2.0 * float(gammainccinv(dof / 2, q))


def block_bounds(family, theta, R, norms, *, tol):
    r"""Per block: the eigenvalues of :math:`C_b` and the block's norm (stage 3), from the QR factor
    of the unit-column Jacobian; and :math:`S` with :math:`C=SS^\top`.

    Used in: chapter 5 (through :func:`certify`)."""
    S = solve_triangular(R, np.eye(R.shape[0]), check_finite=False) / norms[:, None]
    out = []
    for idx, size in family.blocks(theta):
        rows = S[idx]
        C = rows @ rows.T
        out.append((np.clip(np.linalg.eigvalsh(C), 0.0, None), max(float(size), tol.tiny)))
    return out, S


def _tail(lam, x):
    r"""The Chernoff bound's :math:`t` with :math:`\Pr(\sum_j\lambda_jz_j^2\ge t)\le e^{-x}`:
    :math:`\min_{0<s<1/(2\lambda_{\max})}\big(x-\tfrac12\sum_j\log(1-2s\lambda_j)\big)/s`, never
    above Laurent and Massart's :math:`\sum\lambda+2\|\lambda\|\sqrt x+2\lambda_{\max}x` (their
    proof bounds this one)."""
    lam = lam[lam > 0]
    if not lam.size:
        return 0.0
    top = lam.max()
    laurent = lam.sum() + 2 * np.sqrt(x * (lam**2).sum()) + 2 * top * x
    s = 0.5 / top * (1 - np.logspace(-6, 0, 61, endpoint=False)[::-1])  # (0, 1/(2 top)), dense near the pole
    t = (x - 0.5 * np.log1p(-2 * s[:, None] * lam[None, :]).sum(axis=1)) / s
    return float(min(t.min(), laurent))


def _estimate(bounds, sigma, *, tol):
    """The largest block's relative tail bound at noise ``sigma`` and its rms relative error."""
    x = np.log(len(bounds) / tol.alpha)
    worst = rms = 0.0
    for lam, size in bounds:
        worst = max(worst, sigma * np.sqrt(_tail(lam, x)) / size)
        rms = max(rms, sigma * np.sqrt(lam.sum()) / size)
    return float(worst), float(rms)


def certify(model, log, *, eps_out, design_estimate, tol):
    """Refit ``model`` over every answer in ``log`` and bound its error (stages 1 to 3).

    Parameters
    ----------
    model : MultiHeadAttention or AttentionLayer
        The design's float64 model (a scalar layer with ``bias=True``).
    log : QueryLog
        Every query asked so far and its answer.
    eps_out : float, keyword-only
        The answers' error bound (used when too few answers measure the noise).
    design_estimate : float, keyword-only
        The design's own bound (kept in the :class:`Certificate`).
    tol : CertificateTolerances, keyword-only

    Returns
    -------
    (model, float, Certificate) or None
        The refitted model (heads in canonical order), its error estimate and how it was made;
        None when there is no head, the problem is larger than ``tol.max_work`` or the Jacobian
        is rank-deficient (the design's own bound then stands).

    Used in: chapters 4, 5, 7 and 8 (every float64 paper or lean recovery, through ``finish``).
    """
    if model.H == 0:
        return None
    family = Parameters(model)
    data = log.batches()
    m, P = log.answers(), family.size
    if m < P or m * P * P > tol.max_work:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging trial step is rejected by its residual
        theta, r, fac, steps, last = refit(family, family.pack(model), data, tol=tol)
    if fac is None or not np.all(np.isfinite(theta)):
        return None
    last = max(np.linalg.norm(last[idx]) / max(size, tol.tiny) for idx, size in family.blocks(theta))
    chi = float(r @ r)
    sigma, measured = noise_level(chi, m - P, answers=m, eps_out=eps_out, tol=tol)
    bounds, S = block_bounds(family, theta, fac[1], fac[2], tol=tol)
    cert = Certificate(answers=m, parameters=P, steps=steps, last_step=last, noise=sigma, measured=measured,
                       dof=m - P, rms=0.0, design_estimate=float(design_estimate), chi2=chi,
                       _fit=(family, bounds, S))
    return _finish_model(family, theta), _apply(cert, sigma, tol=tol), cert


def _apply(cert, sigma, *, tol):
    """The estimate at noise ``sigma``: the tail bound, plus the last refit step when it exceeds
    the root-mean-square error (a step below it is the answers' own error again: the refit has
    converged), at least the float64 floor ``tol.floor``; records ``cert.noise`` and ``cert.rms``."""
    _, bounds, _ = cert._fit
    worst, rms = _estimate(bounds, sigma, tol=tol)
    cert.noise, cert.rms = sigma, rms
    return max(worst + (cert.last_step if cert.last_step > rms else 0.0), tol.floor)


def _finish_model(family, theta):
    model = family.model(theta)
    return model if family.biased else canonical(model, atol=0)


def confront(cert, model, log, start, *, estimate, tol):
    r"""The held-out answers (``log``'s batches from ``start`` on) against the refitted ``model``.

    Each residual :math:`r_i` has, to first order, the variance
    :math:`\sigma_u^2(1+j_i^\top Cj_i)` (the answer's own error and the model's, :math:`j_i` its
    Jacobian row); :math:`\chi^2_h=\sum_ir_i^2/\operatorname{var}r_i` over the :math:`m_h`
    held-out answers is :math:`\chi^2_{m_h}`-distributed when the certificate's model holds. When
    it exceeds its upper quantile ``1 - tol.noise_confidence`` the estimate is multiplied by the
    upper confidence limit of the excess, :math:`\sqrt{\chi^2_h/\chi^2_{m_h}(\beta)}`.

    When the fit's residuals could not measure the noise (:func:`noise_level`), :math:`\sigma` is
    measured here from the held-out residuals (each divided by its predicted spread), and the
    estimate is made at it instead of at the output error bound; a gross misfit then shows as a
    large :math:`\sigma`. Otherwise the estimate is never lowered.

    Returns the estimate (``cert.holdout_chi2`` records :math:`\chi^2_h/m_h`). Used in: chapter 5
    (through ``finish``)."""
    family, _, S = cert._fit
    theta = family.pack(model)
    r, J = family.residuals(theta, log.batches(start))
    if not len(r):
        return estimate
    spread = 1 + np.sum((J @ S) ** 2, axis=1)  # var r_i / sigma^2
    if cert.measured is None:  # too few fit residuals: the held-out answers measure the noise
        sigma, cert.measured = noise_level(float(np.sum(r**2 / spread)), len(r), answers=len(r),
                                           eps_out=cert.noise, tol=tol)
        if cert.measured is not None:
            cert.dof = len(r)
            estimate = _apply(cert, sigma, tol=tol)
    chi = float(np.sum(r**2 / (cert.noise**2 * spread)))
    cert.holdout_chi2 = chi / len(r)
    return estimate * _excess(chi, len(r), tol=tol)


def _excess(chi, m, *, tol):
    r"""The factor by which held-out answers whose :math:`\chi^2` is ``chi`` over ``m`` answers
    raise an estimate: 1 up to the upper ``tol.noise_confidence`` quantile of :math:`\chi^2_m`,
    beyond it the upper confidence limit of the excess, :math:`\sqrt{\chi^2/\chi^2_m(\beta)}`."""
    if chi <= _chi2_upper(tol.noise_confidence, m):
        return 1.0
    return float(np.sqrt(chi / _chi2_lower(tol.noise_confidence, m)))


def confront_spread(spread, log, start, *, estimate, tol):
    r"""The held-out answers (``log``'s batches from ``start`` on) against a design's own first-order
    covariance of them (``design="long"``: :class:`~.long.solve.AnswerSpread`).

    Parameters
    ----------
    spread : AnswerSpread
        Gives the residuals :math:`r` and their covariance :math:`K` (the answers' own noise and the
        model's, from the design's covariance of its parameters).
    log : QueryLog
        The held-out queries and answers.
    start : int
        The first batch of ``log`` that is held out.
    estimate : float
        The design's estimate.
    tol : CertificateTolerances
        ``noise_confidence`` is the test's level.

    Returns
    -------
    estimate : float
        The estimate, raised when the residuals exceed :math:`K` significantly; never lowered
        (inf when an answer the covariance says is exact is missed: :func:`~.finish.finish` then
        raises).
    chi2 : float or None
        :math:`T/m` (below), None without held-out answers.

    Notes
    -----
    Every held-out answer carries the same parameter errors, so the residuals are correlated and
    :math:`T=\sum_ir_i^2/K_{ii}` over the :math:`m` answers is, to first order, distributed as
    :math:`\sum_j\lambda_jz_j^2` with :math:`\lambda` the eigenvalues of the correlation matrix
    :math:`D^{-1/2}KD^{-1/2}` (:math:`D=\operatorname{diag}K`), not as :math:`\chi^2_m`. When
    :math:`T` exceeds the Chernoff bound on its upper ``tol.noise_confidence`` quantile
    (:func:`_tail`), the covariance is too small, and the estimate is multiplied by the measured
    excess :math:`\hat\kappa=\sqrt{T/m}` (:math:`\sum_j\lambda_j=m` is the mean of :math:`T`: if
    the covariance is :math:`\kappa^2K`, :math:`\hat\kappa^2` estimates :math:`\kappa^2`). The
    long design's estimate stays what it was, three times the root-mean-square error, now at the
    covariance the held-out answers show; a confidence limit on :math:`\kappa` would be far
    wider, since a handful of parameter directions dominate :math:`K` (few effective degrees of
    freedom). The bound is conservative: with :math:`K` right the estimate is raised with
    probability at most ``tol.noise_confidence``.

    The long design's covariance treats the answers' errors as independent; a float64 oracle's
    rounding along a ratio grid is not (it is smooth in the ratio), and a fit can then be off by
    more than its covariance says. The held-out queries are short
    (``LongTolerances.holdout_length`` tokens at most), so a float64 oracle answers them with the
    rounding of a short sum, and their residuals measure the model's own error.

    Used in: chapters 5b and 7 (through ``finish``)."""
    data = log.batches(start)
    if not data:
        return estimate, None
    r, K = spread.residuals(data)
    v = np.diag(K).copy()
    if np.any((v <= 0) & (r != 0)):  # an answer the covariance calls exact is missed
        return float("inf"), float("inf")
    keep = v > 0
    r, K, v = r[keep], K[np.ix_(keep, keep)], v[keep]
    m = len(r)
    if not m:
        return estimate, None
    T = float(np.sum(r**2 / v))
    lam = np.clip(np.linalg.eigvalsh(K / np.sqrt(np.outer(v, v))), 0.0, None)
    x = float(np.log(1 / tol.noise_confidence))
    if T <= _tail(lam, x):
        return estimate, T / m
    return estimate * float(np.sqrt(T / m)), T / m
