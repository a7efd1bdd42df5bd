"""Decoding strategies beyond the generator's greedy / sampled loop: contrastive decoding over two logit streams
(:mod:`~workbench.decoding.contrastive`, whose ``__all__`` is re-exported here)."""

# the facade: the star import brings the module's __all__, which is this package's __all__ too
from workbench.decoding import contrastive
from workbench.decoding.contrastive import *  # noqa: F403

__all__ = list(contrastive.__all__)
