r"""A PyTorch ``nn.MultiheadAttention`` as an oracle, and as an attnlearn model (the ground truth).

The only module of the package that imports :mod:`torch` (an optional extra:
``pip install attnlearn[torch]``).

* :class:`TorchOracle` follows the oracle protocol (:mod:`attnlearn.protocol`): self-attention on
  the query sequence, read at the last position, either a scalar read-out :math:`r^\top
  \mathrm{out}_N` or the whole output vector (``readout=None``, answers of shape ``(n, k)``:
  :data:`attnlearn.protocol` calls such an oracle a *vector oracle*, ``.outputs = k``).
* :func:`from_torch` gives the same layer in the book's convention (chapter 7):

  .. math:: W_h=\frac{W_{k,h}^\top W_{q,h}}{\sqrt p},\qquad A_h=W_{o,h}W_{v,h},\qquad
            v_h=A_h^\top r=W_{v,h}^\top W_{o,h}^\top r,

  with :math:`p=d/H` the head width, :math:`W_{q,h},W_{k,h},W_{v,h}` the rows
  :math:`hp..(h+1)p` of the input projections and :math:`W_{o,h}` the columns :math:`hp..(h+1)p`
  of the output projection. With ``bias=True`` the score of token :math:`i` gains
  :math:`x_i^\top c_h`, :math:`c_h=W_{k,h}^\top b_{q,h}/\sqrt p` (the key bias adds the same
  number to every score of a head and cancels in the softmax), and the output gains
  :math:`b=\sum_hW_{o,h}b_{v,h}+b_o` (the softmax weights sum to 1).

* :func:`extract` learns a module in one call: it reads ``d``, ``H``, the head width, the biases
  and the precision off the module (an ``nn.MultiheadAttention`` or the ``self_attn`` of a
  ``TransformerEncoderLayer``/``TransformerDecoderLayer``), measures a float32 module's own noise,
  chooses the design and its options (:func:`plan`) and returns the :func:`attnlearn.learn`
  recovery; modules the book's model does not describe are refused before any query.

Used in: chapter 7.
"""

import copy
from dataclasses import dataclass

import numpy as np
import torch

from .arguments import check_count, check_real
from .layer import AttentionLayer
from .learner.learn import learn
from .learner.tolerances import LONG_FALLBACK_LENGTH, LONG_MAX_HEADS, MAX_QUERIES
from .model import MultiHeadAttention, check_sequences
from .oracle import PERTURB_ULPS, _perturbation_seed
from .vector import learn_vector

__all__ = ["TorchOracle", "from_torch", "module_parameters", "attention_of", "Plan", "plan", "extract",
           "ERROR_SAFETY", "NOISE_SAFETY", "MAD_TO_SD", "FLOAT32_LENGTH"]

#: Default factor of :meth:`TorchOracle.error_bound` over the largest measured discrepancy.
ERROR_SAFETY = 3.0
#: Default factor of :meth:`TorchOracle.ratio_noise` over the measured standard deviation: the
#: relative errors have heavy tails (their root mean square was 5-40 times the median-based
#: standard deviation on 9 default layers at L = 64, d = 16), which a normal noise model of the
#: median's width understates. Chosen by a one-off measurement (2026-12-03, not committed): 10
#: float32 layers, L = 64, H = 1, learned to 1e-3 in 9 of 10 at factor 1, 10 of 10 at 3; the
#: benchmark's 20 layers per row at factor 3 are in chapter 7 (``benchmarks/torch_layers.py``).
NOISE_SAFETY = 3.0
#: Standard deviation of a normal distribution over its median absolute value (1 / 0.6745).
MAD_TO_SD = 1.482602218505602
#: :func:`extract`'s ratio queries for a float32 module: the length where the window
#: :math:`2\log(L-1)` (8.3 nats) is still wide and float32's summation noise still small
#: (:meth:`TorchOracle.ratio_noise`; chapter 7's float32 section).
FLOAT32_LENGTH = 64
#: :func:`extract` learns a float64 module of at least this width and at least
#: :data:`RANK_FROM_HEADS` heads with the long design and its head dimension as rank bound
#: (``design="long", rank=d // H``; chapter 9): at :math:`d=16` robust mode with the searched scale
#: needs no fallback for 16 of 20 four-head layers, at a median of 7,638 queries (chapter 7's
#: ``extract`` rows) against the rank path's 19.6k; at :math:`d=32` every four-head layer of the
#: baseline fell back to the full long design (``benchmarks/results/scale_baseline.json``: 183k
#: queries and 399 s in the median, against 66k queries and 55 s with the rank bound at 512 tokens).
#: At most :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS` heads (the long design's links).
RANK_FROM_WIDTH = 32
#: ... and heads (below it robust mode's short queries separate the heads, chapter 7).
RANK_FROM_HEADS = 3
#: The rank design's query length on a float64 module: a window of 12.5 nats; float64's summation
#: rounding, which grows with the length, limits the fits there, not the window (chapter 9).
RANK_LENGTH = 512


def _check_module(module):
    """``module`` must be an ``nn.MultiheadAttention`` this package can read (self-attention,
    no extra key/value biases, no zero-attention token, no dropout while training)."""
    if not isinstance(module, torch.nn.MultiheadAttention):
        raise TypeError(f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("module: add_bias_kv=True and add_zero_attn=True add tokens the book's model does not have")
    if not module._qkv_same_embed_dim:
        raise ValueError("module: kdim and vdim must equal embed_dim (self-attention on the query sequence)")
    if module.training and module.dropout > 0:
        raise ValueError(f"module is in training mode with dropout = {module.dropout}: call module.eval() first "
                         "(a random oracle is not a function)")


def _check_readout(readout, k):
    if readout is None:
        return None
    r = np.asarray(readout)
    if r.dtype == object or not (np.issubdtype(r.dtype, np.floating) or np.issubdtype(r.dtype, np.integer)):
        raise TypeError(f"readout must be a real vector of length {k} or None, got dtype {r.dtype}")
    r = r.astype(float)
    if r.shape != (k,):
        raise ValueError(f"readout must have shape ({k},) (the module's embed_dim), got {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("readout must be finite")
    return r


def module_parameters(module):
    r"""The module's projections as float64 arrays: ``Wq, Wk, Wv`` (d, d), ``Wo`` (d, d) and the
    biases ``bq, bk, bv, bo`` (d,) (None when ``bias=False``).

    Used in: chapter 7 (the derivation of the ground truth)."""
    _check_module(module)
    get = lambda t: None if t is None else t.detach().to("cpu", torch.float64).numpy().copy()  # noqa: E731
    d = module.embed_dim
    W, b = get(module.in_proj_weight), get(module.in_proj_bias)
    out = dict(Wq=W[:d], Wk=W[d:2 * d], Wv=W[2 * d:], Wo=get(module.out_proj.weight), bo=get(module.out_proj.bias))
    out.update(bq=None, bk=None, bv=None) if b is None else out.update(bq=b[:d], bk=b[d:2 * d], bv=b[2 * d:])
    return out


def from_torch(module, *, readout=None):
    r"""The layer ``module`` in the book's convention (float64; see the module docstring).

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        Any dtype, ``batch_first`` or not, ``bias`` True or False.
    readout : array_like of shape (embed_dim,) or None, keyword-only
        The scalar read-out :math:`r`; None for the vector layer.

    Returns
    -------
    MultiHeadAttention or AttentionLayer
        The paper's model :math:`\{(W_h,v_h)\}` for a read-out of a layer without biases;
        otherwise an :class:`attnlearn.layer.AttentionLayer` (value-output maps :math:`A_h`,
        and with ``bias=True`` the score biases :math:`c_h` and the offset :math:`b`).

    Raises
    ------
    TypeError, ValueError
        ``module`` not an ``nn.MultiheadAttention`` or one with extra key/value tokens; a
        ``readout`` of the wrong type or shape.

    Notes
    -----
    PyTorch computes, for head :math:`h`, the score :math:`(W_{q,h}x_N+b_{q,h})^\top
    (W_{k,h}x_i+b_{k,h})/\sqrt p`; expanded, the terms that depend on :math:`i` are
    :math:`x_i^\top W_{k,h}^\top W_{q,h}x_N/\sqrt p+x_i^\top W_{k,h}^\top b_{q,h}/\sqrt p`, the
    rest is the same for every token and cancels in the softmax. The output
    :math:`W_o\,\mathrm{concat}_h(\sum_i\alpha_{h,i}(W_{v,h}x_i+b_{v,h}))+b_o` is
    :math:`\sum_hA_h\sum_i\alpha_{h,i}x_i+b`.

    References
    ----------
    .. [1] PyTorch, ``torch.nn.MultiheadAttention``,
           https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html

    Used in: chapter 7.
    """
    P = module_parameters(module)
    r = _check_readout(readout, module.embed_dim)
    d, H = module.embed_dim, module.num_heads
    p = d // H
    blk = [slice(h * p, (h + 1) * p) for h in range(H)]
    W = np.stack([P["Wk"][s].T @ P["Wq"][s] for s in blk]) / np.sqrt(p)
    A = np.stack([P["Wo"][:, s] @ P["Wv"][s] for s in blk])  # (H, k, d)
    c = b = None
    if P["bq"] is not None:
        c = np.stack([P["Wk"][s].T @ P["bq"][s] for s in blk]) / np.sqrt(p)
        b = sum(P["Wo"][:, s] @ P["bv"][s] for s in blk) + P["bo"]
    layer = AttentionLayer(W, A, c=c, b=b)
    if r is None:
        return layer
    layer = layer.readout(r)
    return layer.heads() if c is None else layer


class TorchOracle:
    r"""Value-query access to a ``torch.nn.MultiheadAttention`` (the oracle protocol).

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        Any dtype (float64, float32, ...), ``batch_first`` or not, ``bias`` True or False;
        evaluated under ``torch.no_grad()``. A module in training mode with dropout is refused.
    readout : array_like of shape (embed_dim,) or None, keyword-only
        Answers :math:`r^\top\mathrm{out}_N` (one number per query), or with None the whole
        output at the last position (shape ``(n, embed_dim)`` per batch: a vector oracle,
        ``.outputs = embed_dim``).

    Attributes
    ----------
    d : int
        ``embed_dim``.
    exact : bool
        False (a float module); ``dps`` is None.
    outputs : int or None
        ``embed_dim`` for a vector oracle, None for a scalar read-out.
    dtype : torch.dtype
        The module's parameter dtype (the queries are cast to it).
    queries : int
        Sequences asked so far.

    Notes
    -----
    The query :math:`X=(x_1..x_N)` is the key and value sequence of one self-attention call;
    the answer is the output at the last position :math:`N` (all :math:`N` keys attended, no
    mask), computed by calling the module with :math:`x_N` alone as its query sequence: the
    same attention row, in :math:`O(N)` rather than :math:`O(N^2)` operations (a one-off
    measurement at :math:`d=16`: batches of 4096-token queries, ``design="long"``'s, 15 to 50
    times faster). The module's output is cast to float64
    before the read-out.

    **Perturbation mode** (as :class:`attnlearn.Oracle`): when ``ATTNLEARN_PERTURB`` holds an
    integer seed, every answer of a float64 module is multiplied by :math:`1+k\epsilon_{64}`,
    :math:`k` uniform in :math:`[-4,4]`.

    Used in: chapter 7.
    """

    exact = False
    dps = None

    def __init__(self, module, *, readout=None):
        _check_module(module)
        self.module = module
        self.d = module.embed_dim
        self.readout = _check_readout(readout, self.d)
        self.outputs = self.d if self.readout is None else None
        self.dtype = module.in_proj_weight.dtype
        pseed = _perturbation_seed() if self.dtype == torch.float64 else None
        self._perturb = None if pseed is None else np.random.default_rng(pseed)
        self.queries = 0

    def __repr__(self):
        what = "vector" if self.readout is None else "scalar read-out"
        return f"TorchOracle(d={self.d}, heads={self.module.num_heads}, {self.dtype}, {what}, queries={self.queries})"

    def batch(self, Xs):
        """Answers for ``Xs`` of shape (n, N, d): shape (n,) with a read-out, else (n, d)."""
        Xs = np.asarray(check_sequences(Xs, self.d, batch=True), dtype=float)
        n = Xs.shape[0]
        y = self._answers(self.module, Xs)
        if self._perturb is not None:
            k = self._perturb.integers(-PERTURB_ULPS, PERTURB_ULPS + 1, size=y.shape)
            y = y * (1.0 + k * np.finfo(float).eps)
        self.queries += n
        return y

    def _answers(self, module, Xs):
        """``module`` read at the last position of every sequence of ``Xs`` (float64 out)."""
        X = torch.from_numpy(np.ascontiguousarray(Xs)).to(module.in_proj_weight.dtype)
        if not module.batch_first:
            X = X.transpose(0, 1)
        # only the last position's output is read: ask it alone (query x_N, keys and values
        # the whole sequence), the same attention in N, not N^2, operations
        last_token = X[:, -1:] if module.batch_first else X[-1:]
        with torch.no_grad():
            out, _ = module(last_token, X, X, need_weights=False)
        last = (out[:, -1] if module.batch_first else out[-1]).to(torch.float64).numpy()
        return last @ self.readout if self.readout is not None else last.copy()

    def error_bound(self, *, max_norm=8.0, max_length=9, per_length=64, seed=0, safety=ERROR_SAFETY):
        r"""A bound on the absolute error of every answer, measured against a float64 copy.

        The module's own arithmetic (float32: every projection, score, softmax and sum rounded)
        is compared with the same layer in float64 (a deep copy, ``.double()``) on random
        sequences of every length :math:`1..` ``max_length`` whose tokens have norms uniform
        in :math:`[\mathrm{max\_norm}/4,\ \mathrm{max\_norm}]`; the largest discrepancy
        times ``safety`` is returned (for ``learn(output_error=...)``). These sequences are the
        user's calibration, asked of the module directly: not counted in ``queries``.

        Parameters
        ----------
        max_norm : float, keyword-only
            Largest token norm to cover. The error grows faster than the tokens (the scores are
            quadratic in them): cover the learner's queries. With the clipped query scale
            (factor at most 4, directions of length at most 1.2: ``learn``'s default
            ``scale="auto"`` on a layer the probe does not find small, or ``scale="probe"``) its
            tokens have norms below :math:`1.2\cdot(4+1)=6`, and the default 8 covers them; the
            searched scale (a small layer, or ``scale="search"``) asks far longer tokens (its factor
            reaches 64 times the last probe's scale, up to :math:`64\cdot4096`): cover them with
            ``max_norm``.
        max_length : int, keyword-only
            Longest sequence (``learn`` asks at most :math:`2n+1` tokens: 9 covers 4 heads).
        per_length : int, keyword-only
            Random sequences per length.
        seed : int, keyword-only
            Seed of the sequences.
        safety : float, keyword-only
            Factor over the largest measured discrepancy (default 3: the learner's queries are
            not the sample's, and the maximum of a sample underestimates the maximum).

        Returns
        -------
        float

        Raises
        ------
        TypeError
            ``max_norm`` or ``safety`` not a real number; ``max_length`` or ``per_length`` not
            an integer.
        ValueError
            ``max_norm`` or ``safety`` not positive and finite; ``max_length`` or
            ``per_length`` below 1.

        Notes
        -----
        Measured at :math:`d=16` on PyTorch's default initialisation: the relative discrepancy
        of a float32 module is about :math:`10^{-7}` for tokens of norm 1-4 and grows to about
        :math:`3\cdot10^{-7}` at norm 16, :math:`2\cdot10^{-6}` at 64 and :math:`6\cdot10^{-6}` at
        256 (one layer, :math:`H=2`; chapter 7 checks the growth from norms 1-4 to 64), far above
        float32's rounding of the output alone (:math:`6\cdot10^{-8}`).

        Used in: chapter 7.
        """
        max_norm, safety = check_real(max_norm, "max_norm", positive=True), check_real(safety, "safety", positive=True)
        max_length, per_length = check_count(max_length, "max_length"), check_count(per_length, "per_length")
        ref = copy.deepcopy(self.module).to(torch.float64)
        rng = np.random.default_rng(seed)
        worst = 0.0
        for N in range(1, max_length + 1):
            Xs = rng.normal(size=(per_length, N, self.d))
            Xs *= rng.uniform(max_norm / 4, max_norm, size=(per_length, N, 1)) / np.linalg.norm(Xs, axis=2, keepdims=True)
            worst = max(worst, float(np.max(np.abs(self._answers(self.module, Xs) - self._answers(ref, Xs)))))
        return safety * worst

    def ratio_noise(self, max_length, *, max_norm=16.0, configs=16, seed=0, safety=NOISE_SAFETY):
        r"""The relative noise of the module's answers to ``design="long"``'s ratio queries,
        measured against a float64 copy (for ``learn(..., relative_error=...)``).

        A ratio query is :math:`s` copies of :math:`x` then :math:`t` of :math:`q`,
        :math:`s+t=` ``max_length`` (:mod:`attnlearn.learner.long`). For ``configs`` random
        pairs :math:`x,q` with norms uniform in :math:`[\mathrm{max\_norm}/4,\
        \mathrm{max\_norm}]` and every :math:`t=1..L-1`, the module's answers are compared with
        the same layer in float64 (a deep copy, ``.double()``); each discrepancy is divided by
        its answer, and the standard deviation these relative errors would have if they were
        normal, :math:`1.4826\,\mathrm{median}|\delta_i|/|F_i|`, times ``safety`` is returned:
        the noise model of ``design="long"`` (a relative standard deviation per answer). The
        median, not the root mean square: near a zero of :math:`F` the relative errors have
        heavy tails, which the learner's fits meet with their :math:`\chi^2` (every
        covariance is scaled by :math:`\max(1,\chi^2/\mathrm{dof})`). Not counted in
        ``queries`` (the user's calibration). A float64 module gives 0 (its copy is itself).

        Parameters
        ----------
        max_length : int
            The length :math:`L` of the learner's ratio queries (its ``max_length``), at least 2.
        max_norm : float, keyword-only
            Largest token norm to cover: ``design="long"`` scales :math:`|u||q|` so that the
            steps spread about 2 nats, tokens of norm 8-16 for PyTorch's default initialisation
            at :math:`d=16` (chapter 7).
        configs : int, keyword-only
            Random configurations (each asks :math:`L-1` queries of the two modules).
        seed : int, keyword-only
            Seed of the configurations.
        safety : float, keyword-only
            Factor over the measured standard deviation (default 3, :data:`NOISE_SAFETY`).

        Returns
        -------
        float

        Raises
        ------
        TypeError
            ``max_norm`` or ``safety`` not a real number; ``max_length`` or ``configs`` not an
            integer.
        ValueError
            ``max_norm`` or ``safety`` not positive and finite; ``max_length`` below 2 or
            ``configs`` below 1.

        Notes
        -----
        The noise of a ratio query is not float32's rounding of the output (:math:`6\cdot10^{-8}`):
        the module sums :math:`L` softmax terms in float32, and the error grows with :math:`L`.
        What this returns, at :math:`d=16` on PyTorch's default initialisation (chapter 7
        prints its decades): of order :math:`10^{-6}` at :math:`L=64` and 256, :math:`10^{-5}`
        at 1024, growing about linearly with :math:`L` beyond 64 tokens; so a float32 layer is
        learned with short ratio queries (``max_length=64``), where the window
        :math:`2\log(L-1)` is still 8.3 nats.

        Used in: chapter 7.
        """
        max_norm, safety = check_real(max_norm, "max_norm", positive=True), check_real(safety, "safety", positive=True)
        max_length, configs = check_count(max_length, "max_length", minimum=2), check_count(configs, "configs")
        ref = copy.deepcopy(self.module).to(torch.float64)
        rng = np.random.default_rng(seed)
        L = int(max_length)
        b = np.arange(1, L)
        first = np.arange(L)[None, :] < (L - b)[:, None]  # token i of query k is x (else q)
        rel = []
        for _ in range(configs):
            x, q = rng.normal(size=(2, self.d))
            x *= rng.uniform(max_norm / 4, max_norm) / np.linalg.norm(x)
            q *= rng.uniform(max_norm / 4, max_norm) / np.linalg.norm(q)
            Xs = np.where(first[:, :, None], x, q)
            mine, exact = self._answers(self.module, Xs), self._answers(ref, Xs)
            keep = exact != 0
            rel.append((mine[keep] - exact[keep]) / np.abs(exact[keep]))
        # the standard deviation of a normal with this median absolute value
        return safety * MAD_TO_SD * float(np.median(np.abs(np.concatenate(rel))))


def attention_of(module):
    r"""The self-attention ``nn.MultiheadAttention`` that :func:`extract` learns: ``module``
    itself, or the ``self_attn`` of a ``TransformerEncoderLayer`` or ``TransformerDecoderLayer``
    (the decoder's cross-attention, ``multihead_attn``, attends to a memory the oracle does not
    take). Refused with the reason: anything else, extra key/value tokens (``add_bias_kv``,
    ``add_zero_attn``), ``kdim``/``vdim`` other than ``embed_dim``, training mode with dropout,
    and half precision (float16, bfloat16: a relative rounding near :math:`10^{-3}` per answer,
    above what any design certifies at a useful accuracy).

    Used in: chapter 7 (through :func:`extract`)."""
    layers = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer)
    attention = module.self_attn if isinstance(module, layers) else module
    if not isinstance(attention, torch.nn.MultiheadAttention):
        raise TypeError("module must be a torch.nn.MultiheadAttention, TransformerEncoderLayer or "
                        f"TransformerDecoderLayer, got {type(module).__name__}")
    _check_module(attention)
    dtype = attention.in_proj_weight.dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"module: parameters of dtype {dtype} (half precision) are not supported: their rounding "
                         "is above what a design can certify; convert a copy with .double() or .float()")
    return attention


@dataclass(frozen=True)
class Plan:
    r"""What :func:`extract` asks of :func:`attnlearn.learn`, read off the module.

    Parameters
    ----------
    d : int
        ``embed_dim``.
    heads : int
        ``num_heads`` (:math:`H`).
    head_dim : int
        :math:`p=d/H`, the rank of every :math:`W_h`.
    bias : bool
        The module has input and output biases (learned with ``bias=True``).
    dtype : str
        ``"float64"`` or ``"float32"``.
    options : dict
        The keyword arguments of :func:`attnlearn.learn` beyond ``heads`` and ``seed``.

    Used in: chapter 7."""

    d: int
    heads: int
    head_dim: int
    bias: bool
    dtype: str
    options: dict


def plan(attention, oracle, *, seed=0):
    r"""The design and options :func:`extract` uses for ``attention`` (an ``nn.MultiheadAttention``
    accepted by :func:`attention_of`) asked through ``oracle`` (its :class:`TorchOracle`).

    * **float64**, at least :data:`RANK_FROM_WIDTH` wide with :data:`RANK_FROM_HEADS` to
      :data:`~attnlearn.learner.tolerances.LONG_MAX_HEADS` heads and a read-out: the long design with the head dimension as rank bound at
      :data:`RANK_LENGTH` tokens (``design="long", max_length=512, rank=d // H``, chapter 9).
    * **float64** otherwise: the paper's design in robust mode with the searched query scale
      (PyTorch's initialisations put the poles close together), allowed to fall back to the long
      design at 4096 tokens (``robust=True, scale="search", max_length=4096``; without the fallback
      for a vector oracle, whose learner keeps every answer vector); the learner's own model of
      float64 rounding, no stated noise.
    * **float32**: the long design at :data:`FLOAT32_LENGTH` tokens, with the module's relative
      noise on those queries measured against a float64 copy (:meth:`TorchOracle.ratio_noise`,
      not counted as queries).

    ``bias=True`` when the module has biases. A vector oracle (no read-out) is learned by
    :func:`attnlearn.vector.learn_vector`, which takes the paper's design without biases only:
    a module with biases, or in float32, is refused here, before the float32 noise measurement,
    with the reason.

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        A vector oracle of a module with biases or in float32.

    Used in: chapters 7 and 9."""
    d, H = attention.embed_dim, attention.num_heads
    bias = attention.in_proj_bias is not None
    dtype = "float64" if attention.in_proj_weight.dtype == torch.float64 else "float32"
    if oracle.outputs is not None and (bias or dtype == "float32"):
        raise ValueError(f"readout=None (the value-output maps) is learned for float64 modules without biases; this "
                         f"one is {dtype}{' with biases' if bias else ''}: give a read-out vector r")
    if (dtype == "float64" and oracle.outputs is None and d >= RANK_FROM_WIDTH
            and RANK_FROM_HEADS <= H <= LONG_MAX_HEADS):
        options = dict(design="long", max_length=RANK_LENGTH, rank=d // H)
    elif dtype == "float64":  # a vector oracle keeps every answer: no fallback to 4096-token queries
        options = dict(robust=True, scale="search")
        if oracle.outputs is None:
            options["max_length"] = LONG_FALLBACK_LENGTH
    else:
        options = dict(design="long", max_length=FLOAT32_LENGTH,
                       relative_error=oracle.ratio_noise(FLOAT32_LENGTH, seed=seed))
    if bias:
        options["bias"] = True
    return Plan(d=d, heads=H, head_dim=d // H, bias=bias, dtype=dtype, options=options)


def extract(module, *, readout=None, seed=0, accuracy=None, max_queries=MAX_QUERIES):
    r"""Learn a PyTorch attention module from queries, in one call.

    Parameters
    ----------
    module : torch.nn.MultiheadAttention, TransformerEncoderLayer or TransformerDecoderLayer
        The layer to learn (a transformer layer's ``self_attn``; :func:`attention_of`), in
        evaluation mode (or without dropout), float64 or float32.
    readout : array_like of shape (embed_dim,) or None, keyword-only
        The scalar read-out :math:`r` of the module's output at the last position; None learns
        the value-output maps through a vector oracle (:func:`attnlearn.vector.learn_vector`).
    seed : int, keyword-only
        The learner's seed (and the noise measurement's).
    accuracy : float or None, keyword-only
        The relative parameter error required (:func:`attnlearn.learn`'s ``accuracy``).
    max_queries : int, keyword-only
        Refuse, before any query, a plan that would ask more.

    Returns
    -------
    Recovery or VectorRecovery
        As :func:`attnlearn.learn`: ``.model`` compares with ``canonical(from_torch(module,
        readout=r))`` by :func:`attnlearn.param_error`, or with biases with ``from_torch(module,
        readout=r)`` by :func:`attnlearn.learner.paper.bias.bias_error`; ``.error_estimate``
        bounds that error (chapter 5).

    Raises
    ------
    TypeError, ValueError
        A module this package cannot learn faithfully (:func:`attention_of`), a bad read-out,
        ``max_queries`` below the plan's cost; all before any query.
    RecoveryError
        As :func:`attnlearn.learn`.

    Notes
    -----
    The choices are :func:`plan`'s, measured in chapter 7 on PyTorch's default initialisation at
    :math:`d=16`: in float64 the searched scale recovers 17 of 20 four-head layers without the long
    design, the fallback takes the rest; in float32 the long design at 64 tokens recovers one-
    and two-head layers to :math:`10^{-3}` and four heads rarely (chapter 7 gives the shares).
    Wider float64 layers with three heads or more are learned by the long design with the head
    dimension as rank bound (chapter 9).

    Examples
    --------
    >>> import numpy as np, torch
    >>> from attnlearn import canonical, param_error
    >>> from attnlearn.torch import extract, from_torch
    >>> _ = torch.manual_seed(0)
    >>> m = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True, dtype=torch.float64).eval()
    >>> r = np.ones(4)
    >>> rec = extract(m, readout=r)
    >>> bool(param_error(rec.model, canonical(from_torch(m, readout=r))) <= rec.error_estimate)
    True

    Used in: chapter 7.
    """
    attention = attention_of(module)
    oracle = TorchOracle(attention, readout=readout)
    chosen = plan(attention, oracle, seed=seed)
    run = learn if oracle.outputs is None else learn_vector
    return run(oracle, chosen.d, heads=chosen.heads, seed=seed, accuracy=accuracy, max_queries=max_queries,
               **chosen.options)
