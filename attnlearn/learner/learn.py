r""":func:`learn`: the multi-head learner (chapter 4; claims C3-C7): validate the options, refuse
an absurd cost, run the design, check the accuracy asked.

Used in: chapter 4 (introduced, with the exact counts), chapters 5 to 9.

The designs are sibling packages over shared stages: :mod:`~.paper` (the paper's design, with
``bias=True`` and robust mode), :mod:`~.lean` (chapter 8), :mod:`~.long` (chapter 5b) and
:mod:`~.rank` (heads of low rank); the
options are built in :mod:`~.options`, the cost in :mod:`~.cost`, every tolerance is in
:mod:`~.tolerances`.
"""

from dataclasses import replace

from .._arith import working_precision
from ..arguments import check_real
from ..errors import RecoveryError
from ..protocol import Access
from .accuracy import certifying, check_accuracy, refuse_out_of_reach
from .certificate import QueryLog
from .fallback import with_fallback
from .family import AFFINE, LINEAR
from .lean.run import learn_lean
from .options import LeanOptions, LongOptions, PaperOptions, RankOptions, Request, build_options
from .paper.bias import learn_biased
from .paper.run import run as run_paper
from .tolerances import LONG_FALLBACK_LENGTH, LONG_MAX_HEADS, MAX_QUERIES

__all__ = ["learn"]


def learn(oracle, d, *, heads=None, max_heads=None, seed=0, robust=False, output_error=None, holdout=None,
          spread=None, method=None, redraw_rounds=None, nodes=None, max_queries=MAX_QUERIES,
          max_length=None, scale="auto", bias=False, design="paper", relative_error=None, accuracy=None,
          fallback="auto", rank=None):
    r"""Recover the canonical heads :math:`\{(W_h,v_h)\}` of a multi-head attention oracle.

    Parameters
    ----------
    oracle : Oracle or any object following :mod:`attnlearn.protocol`
        Value-query access (float64 or exact mode): ``.d``, ``.exact``, ``.dps`` and
        ``.batch(Xs)``; the learner reads nothing else and counts the queries itself.
    d : int
        Token width (must match the oracle).
    heads, max_heads : int, keyword-only
        Exactly one: the model's number of heads :math:`H` (claim C6) or an upper bound
        :math:`H_0` (claim C7). Either way :math:`n` = that number sets the nodes
        :math:`t=1..2n`; the canonical count :math:`H'\le n` is detected.
    seed : int, sequence of int, numpy Generator or None, keyword-only
        Seed of the learner's random query vectors (anything :func:`numpy.random.default_rng`
        takes, but not a bool or a float).
    robust : bool, keyword-only
        float64 practice mode: query each block's constant :math:`V^\top q_k` directly
        (:math:`d-1` extra queries, :math:`d` with ``bias=True``, reported) instead of deriving
        it from the learned :math:`V`, and redraw ill-conditioned configurations (reported).
        ``design="paper"`` only. With ``heads`` given (at most
        :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS`) and ``max_length`` given explicitly and at
        least :data:`~attnlearn.learner.tolerances.LONG_MIN_LENGTH`, robust mode falls back (``fallback``) to
        ``design="long"`` (queries of ``min(max_length, 4096)`` tokens) when the paper's design
        raises a :class:`RecoveryError` or returns an error estimate above ``accuracy`` (default
        :data:`~attnlearn.learner.tolerances.FALLBACK_ESTIMATE`, 1e-6): the abandoned queries
        are reported as ``queries["abandoned"]``, the reason as ``diagnostics.fallback``, and
        ``max_queries`` counts the long design's queries too (chapter 7). If the long design
        raises too, the paper's recovery is returned when there was one, else the error.
    output_error : float, optional, keyword-only
        Bound :math:`\varepsilon` on the absolute error of each oracle output. Default:
        :math:`10^{-\mathrm{dps}}` times the output scale in exact mode, and
        :math:`4\,\epsilon_{64}` times it in float64 (the oracle's own rounding). A finite
        number :math:`\ge 0`; in float64 the oracle's own rounding is added to it, so 0 says
        "no error beyond the oracle's rounding" (and turns on the checks of a stated output
        error); in exact mode it must be :math:`> 0`, the answers having ``dps`` digits.
    holdout : int, optional, keyword-only
        Number of verification queries, counted apart from the paper's design (whose count
        stays exact, ``recovery.queries["design"]``): first up to 4 check queries that the
        fits must predict (:mod:`attnlearn.learner.verify`), then held-out random sequences
        the model must reproduce. Default 8 in exact mode and 32 in float64; with 0 the
        result is returned unverified (``recovery.verified`` False). ``design="lean"`` asks
        held-out sequences only, :math:`\max(\text{holdout},2n+1)` of them (its links and
        check queries test its fits inside its count).
    spread : float, optional, keyword-only
        Target for :math:`\max_h|\ell_h|`: after the first configuration the query
        vectors are rescaled so that the pole positions spread about this much. Default
        3 in exact mode, where the oracle's rounding is far below float64's and
        wider-spread poles interpolate better; in float64 1 with the paper's nodes and 2
        with ``nodes="ratios"``, which see poles on both sides of :math:`\ell=0`
        (chapters 3 and 4 measure the choices). ``design="lean"`` takes the float64 default
        of the paper's nodes (1), with which chapter 8 measured it.
    method : {"linearised", "loewner"}, optional, keyword-only
        float64 interpolation formulation (chapter 3 compares them); ``design="paper"`` only
        (default ``"linearised"``; refused with the other designs, which fit their own way).
    redraw_rounds : int, optional, keyword-only
        Robust mode: how many times (an integer :math:`\ge 0`) ill-conditioned configurations are redrawn (each
        redraw costs :math:`2n` queries per configuration, reported in
        ``recovery.queries["redraws"]``, with one query per redrawn block constant).
        ``design="paper"`` only (default 4; refused with the other designs).
    nodes : {"copies", "ratios"}, optional, keyword-only
        The :math:`2n` queries of a configuration: chapter 3's :math:`S(x,q,t)`,
        :math:`t=1..2n` (``"copies"``, the default in float64 without ``robust``), or
        :math:`s` copies of :math:`x` then :math:`t` of :math:`q` at the ratios :math:`t/s`
        of :func:`attnlearn.rational.ratio_nodes` (``"ratios"``, the default in exact mode
        and with ``robust=True``). Both give exactly the paper's count
        :math:`4nd^2-2n+1` and longest query :math:`2n+1`; the ratios are far better
        conditioned (chapter 3; chapter 4 compares the two in exact mode).
    max_queries : int, keyword-only
        Refuse, before any query, a request that needs more queries than this: the design's
        :math:`4nd^2-2n+1`, robust mode's :math:`d-1` constants and the verification queries
        (:func:`holdout_count`: up to 4 check queries, then random sequences, at least one of
        every length up to :math:`2n+1`), and the long design's queries when robust mode may
        fall back to it (``robust``); robust mode's redraws and the re-probes of a small layer's
        scale (``scale``) depend on the answers and are not counted. Default
        :data:`~attnlearn.learner.tolerances.MAX_QUERIES` (:math:`10^7`).
    max_length : int, keyword-only
        Refuse, before any query, a request whose longest query (:math:`2n+1` tokens) is
        longer than this. Default :data:`~attnlearn.learner.tolerances.MAX_LENGTH` (129,
        i.e. :math:`n\le 64`). With ``design="long"`` it must be given (at least
        :data:`~attnlearn.learner.tolerances.LONG_MIN_LENGTH`): every ratio query is
        ``max_length`` tokens long. Given (at least that) with ``robust`` and ``heads``, it
        allows robust mode's fallback to the long design.
    scale : {"auto", "probe", "search"}, keyword-only
        How the paper's design finds its query scale (:mod:`attnlearn.learner.paper.scale`,
        chapter 7): ``"probe"``, the probe's factor clipped to :math:`[1/16,4]`; ``"search"``
        (float64 only), a factor up to 64 when the probe finds two or more heads, and re-probes
        at larger scales while the probe's poles crowd (its fit fails, or it finds fewer than
        ``heads``; :math:`2n+1` queries each, reported in ``recovery.queries["scale"]``, not
        counted by ``max_queries``); ``"auto"`` (default), the search when the probe finds the
        layer small (its :math:`\max_h|\ell_h|` below ``spread`` / 256, as in layers initialised
        :math:`\mathcal N(0,0.02^2)`, and resolved above 100 times the answers' error bound; when
        the probe's fit fails, a one-pole fit's :math:`|\ell|`), else the clipped rule;
        ``recovery.diagnostics.scale["rule"]`` says which. Layers a little above that threshold
        (up to about ``spread`` / 16, four heads at PyTorch's default initialisation) may still
        crowd at the clipped factor and raise: ``scale="search"`` serves them. Exact mode always
        uses the clipped rule. The other designs find their own scale and take only the default
        (in float64 the lean design asks its first configuration again at the factor that spreads
        a small layer's poles, :math:`2n` queries in ``recovery.queries["scale"]``; the long design
        re-probes, :func:`~attnlearn.learner.long.passes.probe_scale`).
    bias : bool, keyword-only
        Learn score biases :math:`c_h` (score :math:`x_i^\top(W_hx_N+c_h)`) and an output
        offset :math:`\beta` besides the heads, as PyTorch's ``bias=True`` adds
        (:mod:`attnlearn.learner.bias`, chapter 7): one more block and midpoint crosses,
        :math:`4nd^2+4nd-2n+1` design queries; ``recovery.model`` is then a scalar
        :class:`attnlearn.layer.AttentionLayer` with ``c`` and ``b``. With ``design="long"``
        every step's position is affine in :math:`q` and each group's regression gains an
        intercept (:math:`d+1` one-token queries, and each anchored group one more
        configuration, :func:`~attnlearn.learner.long.long_cost`). Default False (the paper's
        model and design, unchanged).
    design : {"paper", "lean", "long", "rank"}, keyword-only
        The query design. ``"paper"`` (the default): the paper's block/link/cross design,
        :math:`4nd^2-2n+1` queries (claims C6, C7; everything above). ``"lean"``: the lean
        design of chapter 8, :math:`n(d^2+d)+2d-1` queries at most (:math:`d^2+d+1` for one
        head), longest :math:`2n+1`, exact mode or float64
        (:func:`attnlearn.learner.lean.run.learn_lean`); its verification queries are held-out
        random sequences only, :math:`\max(\text{holdout},2n+1)` of them (its links and check
        queries test its fits inside its count). ``"long"``: long ratio queries
        :math:`(x^a,q^b)`, :math:`a+b=` ``max_length``, and statistical fits weighted by the
        stated noise, for oracles with float32-level noise (:mod:`attnlearn.learner.long`,
        ``benchmarks/noise_design.py``); float64 oracles, ``heads`` given (at most
        :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS`), ``nodes``, ``spread``,
        ``method``, ``robust`` and ``redraw_rounds`` unused; its estimate comes from the fits'
        inverse Fisher matrices, confronted with the held-out answers. ``"rank"``: heads of low
        rank (:mod:`attnlearn.learner.rank`): block 1 as the lean design's phase 1, then every
        configuration labelled by its heights :math:`-u^\top v_h`, full blocks of :math:`d`
        configurations until each head's rank is certified, the rest :math:`p` each;
        :func:`~attnlearn.learner.cost.rank_budget` queries, twice the information floor
        :math:`n(2dp-p^2+d)` of rank-:math:`p` heads less one at a layer's :math:`p=d/n`. ``nodes``, ``robust`` and ``scale`` are the
        paper design's options; ``bias`` serves the paper's and the long design.
    relative_error : float, optional, keyword-only
        ``design="long"`` only: the standard deviation of each answer's error relative to the
        answer (e.g. ``6e-8`` for float32 arithmetic), added in quadrature to ``output_error``
        (then read as an absolute standard deviation).
    accuracy : float, optional, keyword-only
        The relative parameter error needed (a positive finite number): a recovery whose
        ``error_estimate`` exceeds it raises :class:`~attnlearn.errors.AccuracyError`, which
        states the accuracy the learner could certify (``.certified``) and carries the recovery.
        With ``design="long"`` a request is also refused before any query when the design's
        information limit (:func:`~attnlearn.learner.long.info.information_limit`, from
        ``relative_error``; an absolute ``output_error`` has no known scale before the
        queries) exceeds it ten times (:mod:`attnlearn.learner.accuracy`, chapter 5b). With
        ``accuracy`` asked, a recovery that fails raises ``AccuracyError`` too, certifying
        nothing (``.certified = inf``, the failure as its ``__cause__``).
        Default None: no requirement.
    fallback : {"auto", "long", None}, keyword-only
        Robust mode's fallback to ``design="long"`` (see ``robust``; chapter 7). ``"auto"`` (the
        default): taken when robust mode, ``heads`` and ``max_length`` allow it (``robust=True``,
        ``heads`` at most :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS`, ``max_length``
        given and at least :data:`~attnlearn.learner.tolerances.LONG_MIN_LENGTH`), else none.
        ``"long"``: the same fallback, but every one of those conditions is required, and a
        request that misses one (or with ``design`` other than ``"paper"``) is refused before any
        query, naming ``fallback`` and the missing condition. ``None``: never fall back, whatever
        ``max_length`` allows.
    rank : int, optional, keyword-only
        ``design="rank"`` or ``"long"``: an upper bound :math:`p\le d` on every head's rank (a
        layer's head dimension). It sets the count ``max_queries`` is checked against
        (:func:`~attnlearn.learner.cost.rank_budget` at :math:`p`, :math:`p=d` when not given;
        :func:`~attnlearn.learner.cost.long_cost` with ``rank``) and a head found of higher rank
        raises :class:`~attnlearn.errors.RankError`. The rank itself is always found from the
        answers: a full block's column :math:`W_hq_k` (``"rank"``), or a full group's row
        :math:`W_h^\top u_k` (``"long"``), that lies in the span of the head's earlier ones
        certifies it. With ``design="long"`` the groups after it are regressed in each head's
        row space, ``tol.per_group(p + 1)`` configurations per pass and no link
        (:mod:`attnlearn.learner.long.rank`); without ``rank`` every group is full.

    Returns
    -------
    Recovery

    Raises
    ------
    TypeError
        An argument of the wrong type (e.g. ``robust="yes"``, ``output_error="a"``, an oracle
        without ``.d``/``.exact``/``.dps``/``.batch``), naming it.
    ValueError
        An argument out of range (e.g. ``redraw_rounds=-1``, ``output_error=nan``), naming it;
        options that do not go together (an option the design does not use, named with the design,
        :data:`~attnlearn.learner.options.UNUSED`: e.g. ``design="lean"`` with ``robust=True``,
        ``nodes=``, ``method=``, ``bias=True`` or ``scale=``; ``design="long"`` with
        ``method=``, ``nodes=``, ``spread=``, ``redraw_rounds=`` or ``scale=``; ``scale="search"`` in exact mode;
        ``fallback="long"`` without robust mode, ``heads`` or a long enough ``max_length``; ``rank=``
        with a design other than ``"rank"`` or ``"long"``, or above ``d``); or a request
        costing more than ``max_queries`` queries or ``max_length`` tokens per query, with its
        count and longest query. All are raised before any query.
    RecoveryError
        A subclass naming the configuration and the residual when a check fails:
        :class:`PoleError`, :class:`InconsistentHeadCountError`,
        :class:`UnmatchedHeadsError`, :class:`IllConditionedError`,
        :class:`CheckFailedError`, :class:`RankError` (``rank=``); :class:`AccuracyError` when ``accuracy`` is out of reach
        (before any query, after the recovery, or instead of any of these failures).

    Notes
    -----
    The design (chapter 4): random :math:`q_1..q_d`; block :math:`k` has final token
    :math:`q_k`, *base* configurations :math:`u_{k,j}` (:math:`j=1..d`) and *link*
    configurations :math:`u_{k,1}+u_{k,j}` (:math:`j=2..d`); *cross* configurations
    (:math:`k=2..d`) have final token :math:`q_1+q_k`. Each configuration costs the
    :math:`2n` queries :math:`S(x,q,t)`, :math:`t=1..2n`; one more query :math:`(q_1)`
    gives :math:`c_1=V^\top q_1`, and block 1's base configurations give :math:`V`
    through :math:`F(0)=V^\top x`. In all, :math:`2n(2d^2-1)+1=4nd^2-2n+1` queries of
    length at most :math:`2n+1` [1]_ (with ``nodes="ratios"`` the :math:`2n` queries are
    :math:`s` copies of :math:`x` then :math:`t` of :math:`q`, the same count and longest
    length). Then :math:`w_{h,k}=W_hq_k` from :math:`\ell=u^\top w_{h,k}` and
    :math:`W_h=[w_{h,1}\cdots w_{h,d}][q_1\cdots q_d]^{-1}`.

    Three refinements of the paper's square solves, none costing a query (chapter 4): each block's
    :math:`2d-1` base and link equations are solved by least squares weighted by their
    first-order error bounds (in closed form, :func:`attnlearn.learner.solves.block_lstsq`),
    :math:`v_h` from the residues of every configuration once the crosses have labelled the
    blocks, and the derived constants :math:`V^\top q_k` are refined by Newton steps against the
    link equations (:func:`attnlearn.learner.constants.calibrate_constants`).

    References
    ----------
    .. [1] S. Kim, I. Kim, J. Guo, "Provably Learning Multi-Head Attention with
           Queries", arXiv:2608.03294, 2026.
    """
    opt, tol = build_options(oracle, d, Request(
        heads=heads, max_heads=max_heads, seed=seed, robust=robust, output_error=output_error, holdout=holdout,
        spread=spread, method=method, redraw_rounds=redraw_rounds, nodes=nodes, max_queries=max_queries,
        max_length=max_length, scale=scale, bias=bias, design=design, relative_error=relative_error,
        fallback=fallback, rank=rank))
    accuracy = None if accuracy is None else float(check_real(accuracy, "accuracy", positive=True))
    if accuracy is not None and isinstance(opt, LongOptions):  # the information limit, before any query
        refuse_out_of_reach(opt.d, opt.n, L=opt.max_length, relative=opt.relative_error, accuracy=accuracy)
    if accuracy is not None and isinstance(opt, PaperOptions):  # robust mode's fallback keeps a paper recovery
        opt = replace(opt, fallback_above=accuracy)  # that meets it
    oracle = Access(oracle, opt.d)  # every answer checked (count, type, finiteness) and counted here
    with certifying(accuracy):  # with an accuracy asked, a failed recovery certifies none
        return check_accuracy(_run(oracle, opt, tol), accuracy)


def _run(oracle, opt, tol):
    """The design's run for its options ``opt`` (:class:`~.options.PaperOptions`,
    :class:`~.options.LeanOptions` or :class:`~.options.LongOptions`): the long design at float64,
    the others in the oracle's working precision; the paper's wrapped by robust mode's fallback
    when ``opt.fallback``.

    Used in: chapters 4, 5b, 7 and 8 (every call of :func:`learn`)."""
    if isinstance(opt, LongOptions):
        from .long.run import learn_long

        return learn_long(oracle, opt, tol)
    if not oracle.exact:  # every answer refits the model at the end (the joint certificate)
        oracle.log = QueryLog()
    with working_precision(oracle):
        if isinstance(opt, LeanOptions):
            return learn_lean(oracle, opt, tol)
        if isinstance(opt, RankOptions):
            from .rank.run import learn_rank

            return learn_rank(oracle, opt, tol)
        pipeline = {LINEAR: run_paper, AFFINE: learn_biased}[opt.family]
        if opt.fallback:
            pipeline = with_fallback(pipeline)
        try:
            return pipeline(oracle, opt, tol)
        except RecoveryError as exc:
            if opt.robust and opt.fallback_hint and not opt.fallback and opt.heads_given and opt.n <= LONG_MAX_HEADS:
                exc.add_note(f'robust mode falls back to design="long" when max_length allows it: pass '
                             f"max_length={LONG_FALLBACK_LENGTH} to let it")
            raise
