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

Used in: chapter 7.
"""

import copy

import numpy as np
import torch

from .arguments import check_count, check_real
from .layer import AttentionLayer
from .model import MultiHeadAttention, check_sequences
from .oracle import PERTURB_ULPS, _perturbation_seed

__all__ = ["TorchOracle", "from_torch", "module_parameters", "ERROR_SAFETY", "NOISE_SAFETY", "MAD_TO_SD"]

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
            quadratic in them): cover the learner's queries. With ``learn``'s default
            ``scale="probe"`` (factor at most 4, directions of length at most 1.2) its tokens have
            norms below :math:`1.2\cdot(4+1)=6`, and the default 8 covers them.
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
