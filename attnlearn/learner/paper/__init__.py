r"""The paper's design (``design="paper"``, the default; chapter 4, claims C6, C7): blocks, links
and crosses, :math:`4nd^2-2n+1` queries of length at most :math:`2n+1`, one module per stage.

Used in: chapter 4 (introduced, with the exact counts), chapters 5 to 7.

========================  ==================================================================
module                    stage
========================  ==================================================================
:mod:`.design`            design: random directions, the configuration table
:mod:`.scale`             design: the query scale, probe or search (``scale="search"``)
:mod:`.stages`            ask and fit: the design's stages up to checked fits
:mod:`.fitting`           fit: the rational fit of each configuration, its error bounds
:mod:`.robust`            fit: robust mode's redraws of ill-conditioned configurations
:mod:`.constants`         fit: :math:`V`, the constants :math:`V^\top q`, their calibration
:mod:`.labelling`         label: links label each block, crosses label the blocks
:mod:`.solves`            solve: weighted least squares for :math:`w_{h,k}`, :math:`v_h`, :math:`W_h`
:mod:`.checks`            verify: head count, first-order range, checks on the fits
:mod:`.verify`            verify: check queries the fits must predict
:mod:`.bias`              the run with score biases and an offset (``bias=True``, chapter 7)
:mod:`.run`               the run: the stages in order, then the shared finish
========================  ==================================================================
"""
