r"""Every tolerance of the learner in one policy, tied to the arithmetic of the mode.

Used in: chapter 3 (residual tolerances of the fits), chapter 4 (matching safety, query
scale, least-squares refinements), chapter 5 (first-order bounds, error estimate, held-out
check). As :mod:`scipy` ties its default tolerances to ``finfo(dtype).eps``, the float64
policy starts from :math:`\epsilon_{64}` = ``finfo(float).eps`` and the exact-mode policy
from the oracle's ``dps`` digits; every other field is a dimensionless factor, and each
says why it has its value. No other module of :mod:`attnlearn.learner` holds a tolerance.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Tolerances", "LongTolerances", "CertificateTolerances", "MAX_QUERIES", "MAX_LENGTH", "MEASURE_DPS", "POLISH_STEPS",
           "LONG_MIN_LENGTH", "LONG_MAX_HEADS",
           "LONG_FALLBACK_LENGTH", "FALLBACK_ESTIMATE"]

EPS64 = np.finfo(float).eps  # float64 unit roundoff (an np.float64, as the learner has always used it)

#: Default ``max_queries`` of :func:`attnlearn.learn` and :func:`attnlearn.learn_transformer`: the
#: most queries (design, robust mode's constants and held-out queries, counted before any is
#: asked) a call may need before it is refused. Every design of the book asks fewer than
#: :math:`10^5`; :math:`10^7` queries of a few tokens each are minutes of a float64 oracle and
#: gigabytes of samples, and beyond that a request (``heads=10**6``, ``holdout=10**9``) is a
#: mistake far more often than a plan. Raise it with ``max_queries=``.
MAX_QUERIES = 10**7

#: Default ``max_length`` of :func:`attnlearn.learn` and :func:`attnlearn.learn_transformer`: the
#: longest query (:math:`2n+1` tokens for :math:`n` heads) a call may need before it is refused,
#: i.e. :math:`n\le 64`. Every configuration is fitted by a rational function of degree
#: :math:`n` from :math:`2n` samples: float64 separates a handful of heads (chapter 3), exact
#: mode needs more digits as :math:`n` grows, and the ratio nodes' construction alone grows as
#: :math:`n^3` (about 6 s at :math:`n=50`, 90 s at :math:`n=100`); the book uses
#: :math:`n\le 5`. Raise it with ``max_length=``.
MAX_LENGTH = 129

#: ``design="long"``: the shortest ``max_length`` it accepts. Its window is :math:`2\log(L-1)`
#: nats; below 64 tokens (8.3 nats) the steps of two heads overlap most of it.
LONG_MIN_LENGTH = 64

#: ``robust=True``: the longest query of the long design it falls back to when the paper's
#: design fails and ``max_length`` allows at least :data:`LONG_MIN_LENGTH` tokens (a window of
#: 16.6 nats; chapter 7 measured PyTorch's default layers there).
LONG_FALLBACK_LENGTH = 4096

#: ``robust=True`` with that fallback: a recovery of the paper's design whose error estimate
#: exceeds this (or ``learn``'s ``accuracy``, when asked) is set aside for the long design, which
#: reaches about 1e-10 on a float64 oracle (chapter 7); the paper's design reaches 1e-8 where its
#: poles are apart, and returns estimates up to 0.3 where PyTorch's small layers crowd them.
FALLBACK_ESTIMATE = 1e-6

#: ``design="long"``: the most heads it accepts. Links compare every pairing of two groups'
#: heads (:math:`H!` curves: 40,320 at :math:`H=8`).
LONG_MAX_HEADS = 8

#: Digits at which the verification stage polishes a float64 fit onto its own samples (three
#: Gauss-Newton steps, :func:`~attnlearn.learner.paper.verify.polish_onto_samples`) before it predicts a check query: the
#: float64 parameters are converted exactly, so the step measures and removes the fit's miss of
#: its samples and not the rounding of a float64 evaluation (about
#: :math:`\varepsilon_{64}\sum_h|\gamma_h/(1+\rho_ht)|`, above :math:`|F|` where residues cancel).
#: Ill-conditioned float64 fits miss their samples by up to 4e3 times the output error on correct
#: recoveries (noise sweep) and by 1e3-1e6 times under undeclared noise (d = 1); after
#: three steps at 40 digits every one of them missed by less than 1e-30.
MEASURE_DPS = 40
#: Gauss-Newton steps of that polish: the step converges quadratically from a miss of 1e-9 relative
#: or less, so three leave less than 1e-30 (measured on every fit above).
POLISH_STEPS = 3


@dataclass(frozen=True)
class Tolerances:
    r"""The learner's tolerance policy for one mode (float64 or exact at ``dps`` digits).

    Build it with :meth:`for_mode`; the fields are read, never changed.

    Attributes
    ----------
    exact : bool
        Exact mode (mpmath at ``dps`` digits) or float64.
    output_rounding : float
        Relative rounding of an oracle answer, per unit of the largest answer
        :math:`\max|F|`. float64: :math:`4\epsilon_{64}` (a softmax-weighted sum of a few
        terms, each rounded once: a few ulps of the largest output). Exact mode:
        :math:`10^{1-\mathrm{dps}}` (one digit of slack on the oracle's ``dps`` digits).
    bound_floor : float
        Exact mode: the float64 error bounds are computed for an output error of at least
        :math:`10^{-100}` (relative to the output scale), so that their squares (the weights of
        the least-squares solves) stay inside float64's range; beyond 100 digits the reported
        ``error_estimate`` and ``output_error`` are the bounds scaled back to the oracle's
        rounding, as mpmath numbers (first-order bounds are linear in the output error). 0 in
        float64.
    dps : int or None
        Exact mode: the oracle's digits.
    output_floor : float
        Floor of :math:`\max|F|` in that product: :math:`10^{-300}` in float64 (the zero
        function still gets a positive error), 1 in exact mode (the error is never below
        :math:`10^{1-\mathrm{dps}}` absolute).
    exact_residual : float
        Exact mode without a stated output error: residual tolerance of every fit, per
        unit of :math:`\max(\max|F|,1)`: :math:`10^{-\mathrm{dps}/2}`, half the digits (a
        wrong degree leaves a residual of order 1, a right one of order
        :math:`10^{-\mathrm{dps}}`), at least :math:`10^{-100}` (float64's range). None in
        float64.
    residual_factor : float
        Residual tolerance of a fit of :math:`m` samples, in units of the sample error:
        ``residual_factor * sqrt(m)`` (a residual vector of :math:`m` entries each within the
        error, amplified by the fit's projection; 30 leaves room for the interpolation's
        own conditioning, measured in chapter 3).
    tiny : float
        :math:`10^{-300}`: floor of scales and magnitudes that divide (no division by 0;
        far below any float64 quantity of the learner).
    huge : float
        :math:`10^{300}`: error bound given to a row whose bound is not finite (its weight
        :math:`1/10^{300}` removes it from a least-squares problem).
    newton_weight_floor : float
        :math:`10^{-150}`: floor of the error of a link equation in the calibration's Newton
        step, whose weight is the inverse *square* (stays finite).
    spread_exact, spread_ratios, spread_copies : float
        Default target for :math:`\max_h|\ell_h|` after the probe (``learn(spread=...)``): 3 in
        exact mode (the oracle's rounding is far below float64's and wider-spread poles
        interpolate better), 2 in float64 with the ratio nodes (they see poles on both sides
        of :math:`\ell=0`), 1 with the paper's copies (chapters 3 and 4 measure the choices).
    scale_clip : tuple of float
        Bounds :math:`[1/16, 4]` of the query-scale factor from the probe: one probe value can
        be small by chance, and a bounded correction avoids extreme poles.
    scale_wide : float
        Upper bound of the factor instead of 4 when the probe finds two or more heads (float64;
        :mod:`~.scale`): 64. Their poles crowd when the layer is small (PyTorch's default
        initialisation at :math:`d=16` wants factors of 20-150), and the largest of two or
        more :math:`|\ell_h|` is rarely small by chance. Measured on 20 such layers with
        :math:`H=2` (``benchmarks/torch_layers.py``, robust+search): 20/20 recovered to
        :math:`10^{-6}` with 32 or 64, 16/20 with 256 (a factor set by one probe overshoots).
    scale_small : float
        ``scale="auto"`` (:mod:`~.scale`): a layer is small, and searched as ``scale="search"``
        does, when the first probe's :math:`\max_h|\ell_h|` (at unit scale) is below
        ``spread`` / 256: the clipped factor (at most 4) would leave every pole within
        ``spread`` / 64 of the others. Measured on the probes of 100 random models per
        :math:`(d,H)`, :math:`d\le16`, :math:`H=2,3,4` (chapter 4's): smallest :math:`\max|\ell|` 0.026;
        PyTorch layers with weights :math:`\mathcal N(0,0.02^2)`, :math:`d=16`, 40 per :math:`H`:
        largest 0.002; PyTorch's default initialisation, :math:`d=16`, :math:`H=2`: 0.0025-0.09.
    scale_resolved : float
        ``scale="auto"``: the probe's small :math:`\max|\ell|` counts only when it moves the
        samples by more than 100 times their error bound (:func:`~.paper.scale.is_small`).
        Without it, 11 of the noise sweep's 25,200 probes with :math:`H\ge2` (chapter 5; every
        trial at every :math:`\varepsilon` of its grid) were searched, all at
        :math:`\varepsilon\ge10^{-4}`, where noise made the probe's fit fail.
    scale_step : float
        Re-probing after a failed probe fit (:mod:`~.scale`): each probe 16 times the scale of
        the last.
    scale_rounds : int
        At most 3 re-probes (:math:`2n+1` queries each), at the scales 16, 256 and 4096.
    scale_max : float
        Largest probe scale, :math:`16^3=4096`.
    holdout : int
        Default number of held-out queries, counted apart from the paper's design (whose count
        stays exact): 8 in exact mode, 32 in float64. The first of them are check queries
        (``check_configs``), the rest random sequences.
    check_configs : int
        At most 4 configurations get one check query each: a node the fit did not use,
        predicted by the fit (catches undeclared noise, too few heads, an oracle that is not
        attention, where the design has no redundancy, e.g. :math:`d=1`).
    check_safety : float
        A check query's answer must lie within 10 times its first-order prediction bound in
        float64 (first-order bounds; second-order terms of a few per cent) and within
        :math:`10^6` times in exact mode (as ``match_safety``: the bounds are far below what
        a wrong premise moves, order one).
    match_safety : float
        Matching tolerance in units of the first-order error bound of the compared points:
        3 in float64 (first-order bounds, second-order terms of a few per cent); :math:`10^6`
        in exact mode (the bounds are far below the gaps, so only a wrong pairing, off by
        order 1, may fail).
    ambiguity : float
        Robust mode: a link whose runner-up pairing is within ``ambiguity`` times the
        residual of the best one is ambiguous and redrawn (4).
    redraw_factor : float
        Robust mode: a configuration whose relative sensitivity exceeds ``redraw_factor``
        times the median over the design is redrawn (100: the sensitivities of random
        configurations spread over about two decades; beyond is a near double pole).
    calibration_refits : int
        Paper budget: at most 3 refits while the calibration's Newton steps have not
        converged (chapter 5; usually the second step converges without a refit).
    calibration_margin : float
        A Newton step within 3 times its own noise bound has converged; a calibrated
        constant's error bound is 3 times that noise bound (plus the last step).
    first_order : float
        With a stated output error the first-order bounds are trusted only while every
        configuration's relative perturbation of :math:`(\ell,\gamma)` is at most 0.1
        (chapter 5); beyond, ``learn`` raises.
    significance : float
        Exact mode: every residue must exceed 10 times its error bound and every pair of poles
        be further apart than 10 times theirs (a vanishing residue or a double pole would
        otherwise pass unseen).
    estimate_factor : float
        Reported error estimate = 2 times the first-order bound (second-order terms,
        measured in chapter 5).
    estimate_limit : float
        float64: an estimate above 1 (100% relative error) is an error, not a result.
    holdout_output : float
        The held-out discrepancy may reach :math:`10^3` times the output error relative to
        the output scale (sums over a sequence of up to :math:`2n+1` tokens, and the
        model's own rounding) ...
    holdout_estimate : float
        ... or 10 times the error estimate, whichever is larger.
    outlier_weight : float
        A least-squares row proved outside its own error bound has its bound multiplied by
        :math:`10^8` (weighted out, still finite).
    outlier_rounds : int
        At most 3 solves per least-squares problem: the first, and two after weighting out
        outliers.
    refinement : float
        float64 normal equations: a second refinement step larger than :math:`10^{-2}` times
        the solution's error bound means the step does not contract (:math:`A_w` too
        ill-conditioned): QR for that system.
    lean_separation : float
        float64, ``design="lean"``: when several combinations of candidate roots lie within
        their (worst-case, first-order) bounds of a check query's answer, the best is kept
        only if the runner-up's residual is :math:`10^3` times larger (chapter 8 measures
        the resulting share of raised and silent runs).
    v_rows_per_dim : int
        float64: :math:`v_h` is solved from the ``4 d`` most accurate of its equations (they
        carry nearly all the weight; the rest would multiply the cost by :math:`d/2` at
        :math:`d=64` for a negligible gain).
    rank_gap : float
        ``design="rank"``: a new column :math:`W_hq_k` lies in the span of the earlier ones when
        its distance to that span is within ``match_safety`` times its first-order bound, and
        outside when beyond ``rank_gap`` times that; in between the rank cannot be told and
        the learner raises (:math:`10^3`: an in-span column's distance is first order in the
        answers' errors, an outside one's is of the size of the column, many decades apart).
    """

    exact: bool
    output_rounding: float
    output_floor: float
    exact_residual: float | None
    bound_floor: float = 0.0
    dps: int = None
    residual_factor: float = 30
    tiny: float = 1e-300
    huge: float = 1e300
    newton_weight_floor: float = 1e-150
    spread_exact: float = 3.0
    spread_ratios: float = 2.0
    spread_copies: float = 1.0
    scale_clip: tuple = (1 / 16, 4)
    scale_wide: float = 64.0
    scale_small: float = 1 / 256
    scale_resolved: float = 100.0
    scale_step: float = 16.0
    scale_rounds: int = 3
    scale_max: float = 4096.0
    holdout: int = 32
    check_configs: int = 4
    check_safety: float = 10.0
    match_safety: float = 3.0
    ambiguity: float = 4.0
    redraw_factor: float = 100
    calibration_refits: int = 3
    calibration_margin: float = 3
    first_order: float = 1e-1
    significance: float = 10.0
    estimate_factor: float = 2.0
    estimate_limit: float = 1.0
    holdout_output: float = 1e3
    holdout_estimate: float = 10
    outlier_weight: float = 1e8
    outlier_rounds: int = 3
    refinement: float = 1e-2
    v_rows_per_dim: int = 4
    lean_separation: float = 1e3
    rank_gap: float = 1e3

    @classmethod
    def for_mode(cls, *, exact, dps=None):
        """The policy of float64 mode (``exact=False``) or of exact mode at ``dps`` digits."""
        if exact:
            return cls(exact=True, output_rounding=10.0 ** (1 - dps), output_floor=1.0, bound_floor=1e-100,
                       dps=dps, exact_residual=max(10.0 ** (-dps / 2), 1e-100), holdout=8, match_safety=1e6,
                       check_safety=1e6)
        return cls(exact=False, output_rounding=4 * EPS64, output_floor=1e-300, exact_residual=None)

    def default_spread(self, nodes):
        """Default ``spread`` for the node family ``nodes`` in this mode."""
        if self.exact:
            return self.spread_exact
        return self.spread_ratios if nodes == "ratios" else self.spread_copies

    def fit_tolerance(self, m, sample_error):
        """Residual tolerance of a fit of ``m`` samples each within ``sample_error``."""
        return self.residual_factor * np.sqrt(m) * sample_error


@dataclass(frozen=True)
class LongTolerances:
    r"""The policy of ``learn(..., design="long")`` (:mod:`attnlearn.learner.long`); each field
    says why it has its value (chapter 5b).

    Attributes
    ----------
    ratios_base, ratios_per_head : int
        Ratios per configuration: ``16 + 4 H`` (the prototype's; the Cramér–Rao bound of a
        configuration with 48 ratios at :math:`H=8` allows 4e-4 in a step position).
    probe_configs : int
        Configurations of the scale probe (4).
    spread : float
        Target of the root mean square of the :math:`c_h` after the probe: 2 nats, so nearly
        every step (within 3 of them) lies inside the window, 8.3 nats on each side at
        :math:`L=4096`.
    scale_clip : tuple of float
        Bounds of the probe's correction of :math:`|u||q|` (a factor 1/16..16: four
        configurations may see small steps by chance).
    reprobe_above, reprobe_rounds : float, int
        A correction above 256 (sixteen times the clip) means steps too crowded to measure: the
        probe is asked again at the clipped scale, at most 3 times (:math:`|u||q|` up to
        :math:`16^3` times the first probe's; :func:`~.long.passes.probe_scale`).
    groups_factor : int
        Configurations per group and pass: ``2 d`` (twice the unknowns of :math:`y_h`, room
        for outliers).
    group_redraws : int
        A degenerate group (a vanishing :math:`\gamma_h=-u^\top v_h` or coinciding heads), or
        one whose joint fit stays above ``trim_above`` times its noise, is drawn again with a
        new :math:`u` at most 6 times. Whether an attempt fails depends on its direction
        (where each head's steps fall along the query, how far apart, how high), so a group
        that failed in one direction may hold in another. With eight heads at float32-level
        noise (``benchmarks/noise_design.py --row 8,16,6e-8,20``), under a cap of 2 two of
        the first five models raised, each in a group whose three attempts failed; with 6,
        19 of the 20 return, having drawn a group again 8 to 23 times (failed or faint
        attempts, over 16 groups), at 10 to 17 times :math:`4Hd^2` queries. A failed attempt
        costs one group's queries; redraws beyond the faint budget are asked only by a group
        with no result, so a model in which no group's first three attempts all fail is
        learned as with a cap of 2.
    faint_redraws : int
        A faint group (``faint_head``) is drawn again at most twice.
    faint_head : float
        A group in which one head's :math:`y` has a standard deviation
        (:math:`\sqrt{\operatorname{tr}\operatorname{cov}y_h}`) over 8 times the median of the
        group's heads' is drawn again (at most ``faint_redraws`` times; then the least faint
        attempt is kept): a head nearly orthogonal to :math:`u` (:math:`\gamma_h=-u^\top v_h`
        near 0) is seen through steps of almost no height, and its row of :math:`Y_h` carries
        its error undiluted into :math:`W_h=U^{-1}Y_h`. Measured on float32 layers (:math:`H=4`,
        ``benchmarks/torch_layers.py --dtype float32 --heads 4 --modes "long, L=64"``): the worst
        group's ratio up to 53, one head's error 3e-3 where the others' were 3e-4 to 8e-4;
        with the redraw 18 of 20 layers to 1e-3, median 3.4e-4 (without: 11 of 20, 7.7e-4), for
        16 % more queries. With one or two heads the ratio is at most 2: never drawn again.
        Only :func:`~attnlearn.learner.long.run.draw_groups` applies it, not the reduced groups
        of ``rank=``.
    last_tilt : float
        The last group, drawn again, has no orthogonal direction left: its new :math:`u` is its
        own tilted by 45° (:math:`\pi/4`) into the span of the groups before, so that
        :math:`\|U^{-1}\|_F` grows by the factor :math:`\sqrt{(d+2)/d}`
        (:func:`~attnlearn.learner.long.run.draw_groups`).
    link_configs : int
        Configurations per link (3): three curves of :math:`2\log(L-1)` nats each.
    link_margin : float
        A link's best pairing must have a :math:`\chi^2` 4 times below the runner-up's.
    chi2_factor : float
        A configuration fitted within the noise has :math:`\chi^2` about its degrees of freedom;
        above 3 times them it is refitted (a local minimum or a mislabelled head).
    max_permutations : int
        Starts of such a refit: every order of its positions, at most 720 (6!) ...
    repair_random : int
        ... and 8 random positions.
    outlier_sigma : float
        A configuration's step position further than 5 standard deviations from the group's
        linear fit is dropped from the regression.
    outlier_rounds : int
        At most 3 rounds of that.
    regression_chi2 : float
        ... and the kept positions must fit the linear model with a reduced :math:`\chi^2` of
        at most 9 (3 standard deviations root mean square; correct labels give about 1) ...
    regression_keep : float
        ... over at least 3/4 of the group's configurations; otherwise the group is drawn again.
    spacing : float
        Placed pass: predicted steps 2 nats apart (the Cramér–Rao optimum: closer blurs, further
        pushes the outer steps out of the window).
    placed_cap : float
        Placed pass: a placed :math:`q` longer than 3 times the scale is shrunk (its grid
        halved) -- nearly collinear :math:`y_h` would otherwise ask for huge :math:`q`.
    placed_halvings : int
        ... with score biases at most 8 halvings (:math:`-Y^+\kappa` does not shrink with the
        grid), then the :math:`q` is shortened to the cap.
    estimate_factor : float
        Reported error estimate = 3 times the propagated root-mean-square error (a 3-sigma bound).
    holdout_length : int
        Longest held-out query (random tokens): 16. Long queries are checked by the fits' own
        :math:`\chi^2`; 4096 held-out lengths would cost more than the design.
    batch_floats : int
        Floats per batch asked of the oracle (2**19: 4 MB per batch, within a core's cache:
        2.7 times faster than 32 MB batches at d = 64).
    anchored_heads : int
        The anchored coarse pass from 3 heads (:func:`~.long.coarse_pass`); with 1 or 2 the
        random one (:func:`~.long.random_pass`: measured 20/20 at :math:`H=2`, :math:`d=16`,
        against 14/20 anchored).
    base_tries : int
        Coarse pass: random candidates for a group's anchor configuration (8), each stretched;
        of those whose stretched fit resolves its steps the one with the widest closest gap is
        the anchor. With four, on a float64 layer of width 128 with eight heads (128-token
        queries, ``benchmarks/scale.py`` seed 3), the first groups often had no candidate left
        that resolved (of four, only one or two fitted within the noise); with eight, the first
        ten groups each found their anchor at the first draw.
    stretch : float
        ... its :math:`q` is scaled so that its farthest step sits 6 nats out (the window is
        8.3 nats on each side at :math:`L=4096`): the gaps grow with it.
    faint_step : float
        ... its farthest step *of appreciable height*: 0.02 of the largest or more. A fit of
        crowded steps parks spare ones far out with almost no height (float64, width 128,
        eight heads: the candidates' real steps within 0.4 nat of the origin, two parked 2 to 3
        nats out with heights below 1e-3), and a stretch set by them left the real steps
        crowded.
    stretch_clip : tuple of float
        Bounds of that scaling (1/8..8).
    anchor_resolve : float
        ... and the stretched anchor is kept when its closest pair of steps lies 4 standard
        deviations of their difference apart or more (Cramér–Rao at its fit, scaled by its
        reduced :math:`\chi^2` when above 1), whatever the candidate predicted. Measured
        against the truth on 105 stretched anchors of float32 layers (:math:`d=16`,
        :math:`H=4`, :math:`L=64`, eight layers), the gap over the two positions' own standard
        deviations (their correlation left out, the :math:`\chi^2` unscaled): the 12 fits with a
        step more than 0.1 nat off resolved their closest pair at 3.1 or less, the 91 within
        0.05 nat at 4.7 or more. Re-measured with :func:`~.long.fit.resolution` itself (368
        stretched fits, 16 layers) the separation is not as clean: 9 fits more than 0.1 nat off
        scored 4 or more (7 of them within 0.25 nat, where the nearest step still labels; two
        0.8 and 2.1 nats off, their fate downstream not traced), and at least 15 of the 275
        within 0.05 nat scored below 4 (another candidate is then taken).
    restretch : float
        When no stretched candidate resolves its steps alone, each is asked again (at its
        stretch and at twice that) and the two are fitted together, positions tied and heights
        shared
        (:func:`~.long.fit.fit_stretches`): every gap twice as wide, the heights fixed by both
        (chapter 5b, at the truth on twenty eight-head anchors at float32 noise: the closest
        pair a median of 5.7 standard deviations apart alone, 4 or more in 12 of 20; 720
        together, 4 or more in all 20).
    nudge : float
        Nudged configurations :math:`q_0+\eta w`: :math:`\eta` moves the steps by about 0.15
        of the anchor's smallest gap (root mean square), so that the nearest anchor step labels
        every step ...
    nudge_max : float
        ... and by at most 1 nat (one head, or widely separated ones).
    label_heights : float
        A nudged configuration fitted from its anchor's positions under its heights keeps
        their labels when its heights end within 0.05 of their root mean square of the
        anchor's (else it is labelled by the nearest anchor step).
    anchor_check : int
        An anchor is given up for the next one that resolves its steps (in the order of
        :func:`~.long.passes._anchor`) when not one of its first 4 nudged configurations is
        fitted within the noise from its positions under its heights: at :math:`H=8`,
        :math:`d=16`, relative noise 6e-8, from an anchor in a wrong local minimum 0 of 32
        were, from correct ones most.
    trim_above : float
        :func:`~.long._trim` acts on a group whose reduced :math:`\chi^2` exceeds 1000 after
        the repairs: measured, groups contaminated by a wrong local minimum sit at 8e4 to 1e14
        (float64, :math:`H=4`, :math:`d=32`), while a float32 layer read through
        ``ratio_noise(64)`` (chapter 7, a noise model only roughly right) leaves groups near
        11, where setting configurations aside made the models worse (2.5e-3 against 2e-4).
        A group still above it after :func:`~.long._trim` is drawn again: measured at
        :math:`H=8`, :math:`d=16` (float64, seed 6 of ``benchmarks/scale.py --rank``), a first
        group kept at reduced :math:`\chi^2` 2e21, its heights 256 standard deviations off,
        failed every link to it.
    trim_factor : float
        A group's joint fit still above the noise after the repairs (:func:`~.long._trim`):
        its configurations with a :math:`\chi^2` over 10 times the group's median are set
        aside while the heights are refitted (a configuration within the noise has
        :math:`\chi^2` near its 20 to 50 degrees of freedom, and 10 times that is beyond any
        noise; measured: the culprits of a contaminated group lie 100 to 10^4 times above the
        median) ...
    trim_keep : float
        ... as long as at least half of the group is kept ...
    trim_rounds : int
        ... in at most 3 rounds.
    rounding : float
        A float64 oracle's rounding on a ratio query of :math:`L` tokens, as a fraction of the
        sequential-summation bound :math:`L\epsilon_{64}\max|F|` (:func:`~.long.noise_sd`):
        1/2. Measured at :math:`L=4096` against the exact answers (float64 ``Oracle``, 120
        configurations per row of ``benchmarks/noise_design.py``, :math:`|q|` 1 to 7 times the
        probe's scale): the root mean square error of a configuration's answers is 0.07 to
        0.09 of the bound (median), 0.17 to 0.30 (90 %), 0.56 to 0.67 (99 %), at most 1.3, at
        :math:`H=6,d=8`; :math:`H=2,4,d=16`; :math:`H=4,d=32`. The earlier 1/8 was about the
        median: at :math:`H=4`, :math:`d=32` a fifth of the groups were drawn again because a
        stretched anchor fitted at 3 to 55 times its modelled :math:`\chi^2` *at the true
        parameters*. 1/2 lies between the 90th and the 99th percentile: it covers all but a few
        per cent of configurations (the rare rest cost a repair or a group redraw).
    refuse_factor : float
        ``learn(..., accuracy=...)`` refuses before any query when the information limit
        (:func:`~attnlearn.learner.long.info.information_limit`, an estimated floor with choices in the
        learner's favour) exceeds the accuracy asked 10 times: on the committed rows of
        ``benchmarks/noise_design.py`` the limit lies 5 times or more below every returned
        error and 19 times or more below every estimate (chapter 5b), so a refused request
        lies 50 times or more below every error the learner has reached there and 190 times
        below everything it has certified.
    rank_inside, rank_outside : float
        ``rank=``: a full group's :math:`y_{h,k}` within 10 standard deviations of the span of
        the head's earlier ones lies in it (its distance is the norm of a Gaussian vector of
        that trace, about 1; 10 is beyond any noise even with one degree of freedom), beyond
        :math:`10^3` it is a new direction (a float64 layer's rows are resolved to
        :math:`10^{-8}` or better, so a new direction lies :math:`10^6` standard deviations
        out or more); between the two the rank cannot be told and the group is drawn again
        (:class:`~attnlearn.learner.long.rank.RowSpans`).
    """

    ratios_base: int = 16
    ratios_per_head: int = 4
    probe_configs: int = 4
    spread: float = 2.0
    scale_clip: tuple = (1 / 16, 16)
    reprobe_above: float = 256.0
    reprobe_rounds: int = 3
    groups_factor: int = 2
    group_redraws: int = 6
    faint_redraws: int = 2
    faint_head: float = 8.0
    last_tilt: float = np.pi / 4
    link_configs: int = 3
    link_margin: float = 4.0
    chi2_factor: float = 3.0
    max_permutations: int = 720
    repair_random: int = 8
    outlier_sigma: float = 5.0
    outlier_rounds: int = 3
    regression_chi2: float = 9.0
    regression_keep: float = 0.75
    spacing: float = 2.0
    placed_cap: float = 3.0
    placed_halvings: int = 8
    estimate_factor: float = 3.0
    holdout_length: int = 16
    batch_floats: int = 2**19
    anchored_heads: int = 3
    base_tries: int = 8
    stretch: float = 6.0
    stretch_clip: tuple = (1 / 8, 8)
    anchor_resolve: float = 4.0
    restretch: float = 2.0
    faint_step: float = 0.02
    nudge: float = 0.15
    nudge_max: float = 1.0
    label_heights: float = 0.05
    anchor_check: int = 4
    trim_above: float = 1000.0
    trim_factor: float = 10.0
    trim_keep: float = 0.5
    trim_rounds: int = 3
    rounding: float = 1 / 2
    refuse_factor: float = 10.0
    rank_inside: float = 10.0
    rank_outside: float = 1e3

    def ratios(self, H):
        """Ratios per configuration with ``H`` heads."""
        return self.ratios_base + self.ratios_per_head * H

    def per_group(self, d):
        """Configurations per group and pass."""
        return self.groups_factor * d

    def reduced_dim(self, p, d):
        """``rank=``: the dimension a reduced group's passes are sized for (:func:`per_group`) when
        the largest rank is ``p``: :math:`p` coordinates and one more, the intercept of biased
        positions (without it, a spare row), at most ``d``."""
        return min(d, p + 1)



@dataclass(frozen=True)
class CertificateTolerances:
    r"""The policy of the joint certificate (:mod:`~attnlearn.learner.certificate`, chapter 5).

    Attributes
    ----------
    alpha : float
        Probability, under the linearised model, that the error exceeds the estimate:
        :math:`10^{-6}`, so that a sweep of :math:`10^4` recoveries expects no exceedance from
        the tail itself (what remains is the linearisation and the noise model, which the
        held-out queries and chapter 5's sweep check).
    noise_confidence : float
        Lower quantile of :math:`\chi^2_\nu` that turns the measured noise into its upper
        confidence limit, :math:`10^{-3}` (a factor 1.1 at :math:`\nu=1000`, 1.7 at 30).
    min_dof : int
        Fewest degrees of freedom that measure the noise (below: the held-out answers, or the
        output error bound). A :math:`\chi^2_\nu` with :math:`\nu=16` is below a third of its
        mean with probability :math:`10^{-3}`, which the confidence factor absorbs.
    residual_share : float
        Smallest share of the answers that the fit's residual degrees of freedom must be to
        measure the noise: 1/4. The paper's design leaves about 3/4 of its answers as residual
        freedom; the lean design, about :math:`(2d-1)/(Hd^2)`, residuals concentrated on its few
        extra answers (measured at d = 8, H = 2: 2.7 times the noise of the whole fit).
    max_steps : int
        Most Gauss–Newton steps; from a design's model (relative error :math:`\le10^{-2}`) the
        refit converges quadratically in two to four.
    rank : float
        Smallest ratio of the Jacobian's R diagonal (unit columns) to its largest that counts
        as full rank: :math:`\sqrt{\epsilon_{64}}`,
        beyond which the covariance is itself unreliable in float64.
    floor : float
        Smallest estimate: :math:`16\epsilon_{64}`, the float64 representation of the
        parameters and the rounding of the residuals.
    max_work : float
        Largest :math:`mP^2` (answers times parameters squared) refitted: :math:`10^{11}`
        floating-point operations per QR factorisation, seconds on one core (H = 8, d = 16 is
        :math:`4\cdot10^{10}`); larger problems keep the design's own bound.
    tiny : float
        Smallest denominator of a relative size.
    """

    alpha: float = 1e-6
    noise_confidence: float = 1e-3
    min_dof: int = 16
    residual_share: float = 0.25
    max_steps: int = 6
    rank: float = float(np.sqrt(EPS64))
    floor: float = float(16 * EPS64)
    max_work: float = 1e11
    tiny: float = 1e-300
