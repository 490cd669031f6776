r"""The paper design's run (chapter 4): its stages in order (:func:`run`).

Used in: chapter 4 (introduced, with the exact counts), chapters 5 and 6.
"""

from ..finish import zero_function
from ..heads import canonical_heads
from .labelling import label_crosses, label_links
from .solves import assemble_W, solve_blocks, solve_v
from .stages import finish_design, fit_design

__all__ = ["run"]


def run(oracle, opt, tol):
    """The stages of :func:`learn`, in order: the design and its checked fits
    (:func:`.stages.fit_design`), then the links label each block, the crosses label the blocks, the
    solves give the heads, and :func:`.checks.finish` asks the held-out queries."""
    fitted = fit_design(oracle, opt, tol)
    design, state, H, diag, errors = fitted.design, fitted.state, fitted.H, fitted.diagnostics, fitted.errors
    if H == 0:
        model, estimate = zero_function(opt.d, output_error=opt.output_error, eps_out=errors.output,
                                        exact=tol.exact), 0.0
    else:
        eq, links = label_links(state, design.table, design.labels, tol=tol,
                                pre_links=None if fitted.pre is None else fitted.pre.links)
        blocks = solve_blocks(design, eq, tol=tol)
        crosses = label_crosses(state, design, blocks, tol=tol)
        heads = assemble_W(design, blocks, crosses)
        v, err_v = (solve_v(design, eq, crosses.perm, state, crosses.matching.observed, tol=tol) if opt.d > 1
                    else (blocks.v1, blocks.err_v1))
        model, estimate = canonical_heads(heads, v, err_v, tol=tol)
        diag.record_matchings(link=links, cross=crosses.matching)
    return finish_design(oracle, fitted, model, estimate, opt=opt, tol=tol)
