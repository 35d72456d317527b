"""UniDEC's pick-all-labels reductions: PAL-N (the PSL / SupCon loss) and PAL."""

from __future__ import annotations

from xdex.losses.softmax import SoftmaxCE
from xdex.losses.temperature import Temperature


class PALN(SoftmaxCE):
    """UniDEC's PSL loss, the PAL-N reduction over the batch pool (UniDEC Sec. 3, L_{D,q2l}).

    With x_ij = s_ij / τ and P_i^B the in-pool positives of query i,

        ℓ_i = −(1/|P_i^B|) Σ_{p in P_i^B} log( e^{x_ip} / Σ_{l in pool} e^{x_il} ).

    This is the supervised-contrastive (SupCon) form that UniDEC's SupConDE trains with; it is
    :class:`SoftmaxCE` with ``normalize=True``. The batch loss averages ℓ_i over the queries
    that have a positive (UniDEC sums them; the mean only rescales by the batch size).
    """

    def __init__(self, temperature: float | Temperature = 0.05, learnable_temperature: bool = False):
        super().__init__(temperature, learnable_temperature, normalize=True)


class PAL(SoftmaxCE):
    """PAL-N without the 1/|P_i^B| factor: the PAL ablation of UniDEC Appendix C.5.

        ℓ_i = −Σ_{p in P_i^B} log( e^{x_ip} / Σ_{l in pool} e^{x_il} ),   x_ij = s_ij / τ,

    which is the same function as :class:`SoftmaxCE` (DEXML Eq. 3).
    """

    def __init__(self, temperature: float | Temperature = 0.05, learnable_temperature: bool = False):
        super().__init__(temperature, learnable_temperature, normalize=False)


SupCon = PALN
"""The name UniDEC gives its PSL loss (after Khosla et al., 2020): the same loss as :class:`PALN`."""
